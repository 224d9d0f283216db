"""Which maps the findings need, in the order they need them, and what names a map.

Maps are run in the order of what the findings need most: the studies' own
grids first (every claim gets the answer their protocol gives), then DTR's
exact map of every public trace, the PyTorch-recorded zoo (small models:
seconds each), exact neighbourhoods and a minimum evictee size around every
DTR hole, the InceptionV4 window byte-exact, then the ablations.

A map's folder is named by its content: the trace's SHA-256, the policy (a
built-in's name, or a policy file's SHA-256 and function) and the sweep
parameters, behind a readable prefix; so a map survives the package being
installed elsewhere, and a changed knob file gets a map of its own.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

from ... import concepts as K
from ...fsutil import atomic_path
from ...recorder.record import policy_label
from ...sweep.store import SweepParams

PUBLIC = ("resnet32", "unet", "transformer", "tv_densenet121", "unroll_gan", "treelstm",
          "inceptionv4", "lstm")                  # cheapest maps first
CONFIRMATORY = ("tv_densenet121", "inceptionv4", "transformer", "unet", "treelstm",
                "unroll_gan")
ABLATIONS = ("no-staleness", "no-size", "compute-only")
ZOO = ("mlp", "resnet", "unet", "lstm", "gpt")
RANGE = (0.05, 0.60)
# The zoo's small models complete only at 0.7 of peak or more (the MLP at the
# full peak alone), so their maps reach 1.0.
ZOO_RANGE = (0.05, 1.0)
INCEPTION_WINDOW = (0.209, 0.26)
WINDOW_STEP = 0.0001            # the holes study's grid over that window
GRID_STEP = 0.01                # the studies' grid
STUDY_RUN_LIMIT = 20 * 60.0     # the studies' wall-clock limit per run: grid points get it too
MAX_WALK_RUNS = 100_000
MAX_HOLE_WINDOWS = 4            # per trace: the widest DTR holes get a neighbourhood map
# Knobs production runtimes offer, mapped around every DTR hole: exact
# neighbourhoods, and MegEngine's minimum evictee size (a policy file, knobs.py,
# copied into the working folder under its content hash: `knob_policies`).
EXACT_NEIGHBOURHOODS = "dtr-exact-nbhd"
KNOBS_FILE = Path(__file__).resolve().parents[1] / "knobs.py"
MIN_EVICTEE_SIZE = "dtr_min_1mib"
POLICIES_DIR = "policies"


@dataclass(frozen=True)
class MapSpec:
    """One map: a trace (short name or log path), a policy, a ratio range; the
    exact walk, or a grid at `step`."""

    trace: str
    policy: str
    ratio_from: float
    ratio_to: float
    group: str                  # "grid" | "public" | "window" | "zoo" | "knob" | "ablation"
    label: str = ""             # the trace's name in the report (zoo: zoo:NAME)
    step: float | None = None

    @property
    def policy_name(self) -> str:
        """The policy in names and tables: a policy from a file as FILESTEM.NAME."""
        return policy_label(self.policy)

    @property
    def name(self) -> str:
        return self.label or self.trace

    def params(self, timeout: float | None) -> SweepParams:
        return SweepParams(self.ratio_from, self.ratio_to, step=self.step,
                           policies=(self.policy,), exact=self.step is None,
                           max_runs=MAX_WALK_RUNS, timeout=timeout)

    @property
    def planned(self) -> int:
        """Grid points of a grid map (0 for the exact walk)."""
        return round((self.ratio_to - self.ratio_from) / self.step) + 1 if self.step else 0

    def key(self, trace_sha256: str) -> str:
        """The map's folder name: readable, then a digest of what decides its content
        (the run timeout is not part of it: a stored map resumes with its own)."""
        name = self.label.replace(":", "_") or Path(self.trace).stem
        kind = f"-step{self.step:g}" if self.step else ""
        params = self.params(None).to_json()
        params.update(policies=[policy_identity(self.policy)], timeout=None)
        digest = hashlib.sha256(json.dumps({"trace": trace_sha256, "params": params},
                                           sort_keys=True).encode()).hexdigest()[:12]
        return (f"{name}-{self.policy_name}-{self.ratio_from:g}-{self.ratio_to:g}{kind}"
                f"-{digest}")


def policy_identity(policy: str) -> str:
    """A built-in policy's name; a policy file's content hash and function name."""
    path, sep, name = policy.rpartition(":")
    if not (sep and path.endswith(".py")):
        return policy
    return f"sha256:{hashlib.sha256(Path(path).read_bytes()).hexdigest()}:{name}"


def knob_policies(workdir: Path) -> tuple[str, ...]:
    """The policies mapped around every DTR hole; the policy file is copied into
    `workdir/policies/<its hash>/` so its spelling stays with the maps."""
    digest = hashlib.sha256(KNOBS_FILE.read_bytes()).hexdigest()[:16]
    copy = Path(workdir).resolve() / POLICIES_DIR / digest / KNOBS_FILE.name
    if not copy.is_file():
        copy.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(copy) as tmp:     # a copy cut short is never taken for the file
            shutil.copyfile(KNOBS_FILE, tmp)
    return (EXACT_NEIGHBOURHOODS, f"{copy}:{MIN_EVICTEE_SIZE}")


def grids(traces: tuple[str, ...], ratio_range: tuple[float, float]) -> list[MapSpec]:
    """The studies' 0.01 grid under DTR for every trace, and the holes study's
    0.0001 grid over the InceptionV4 window."""
    out = [MapSpec(t, "dtr", *ratio_range, "grid", step=GRID_STEP) for t in traces]
    if "inceptionv4" in traces:
        out.append(MapSpec("inceptionv4", "dtr", *INCEPTION_WINDOW, "window", step=WINDOW_STEP))
    return out


def public(traces: tuple[str, ...], ratio_range: tuple[float, float]) -> list[MapSpec]:
    return [MapSpec(t, "dtr", *ratio_range, "public") for t in traces]


def zoo_map(log: Path, name: str, zoo_range: tuple[float, float]) -> MapSpec:
    return MapSpec(str(log), "dtr", *zoo_range, "zoo", f"zoo:{name}")


def window(traces: tuple[str, ...]) -> list[MapSpec]:
    """The InceptionV4 window byte-exact."""
    return [MapSpec("inceptionv4", "dtr", *INCEPTION_WINDOW, "window")] \
        if "inceptionv4" in traces else []


def ablations(traces: tuple[str, ...], ratio_range: tuple[float, float]) -> list[MapSpec]:
    return [MapSpec(t, p, *ratio_range, "ablation") for p in ABLATIONS for t in traces]


def hole_windows(holes: list, peak: int, limit: int = MAX_HOLE_WINDOWS
                 ) -> list[tuple[object, float, float]]:
    """The widest of a DTR map's holes, each with a ratio window around it: the
    hole and as much again (at least the studies' resolution) on either side."""
    out = []
    for hole in sorted(holes, key=lambda r: r.hi - r.lo, reverse=True)[:limit]:
        pad = max(hole.hi - hole.lo + 1, K.RESOLUTION * peak)
        lo = math.floor((hole.lo - pad) / peak * 1e6) / 1e6
        hi = math.ceil((hole.hi + pad) / peak * 1e6) / 1e6
        out.append((hole, max(lo, 1e-6), hi))
    return sorted(out, key=lambda x: x[0].lo)


def knob_maps(trace: str, lo: float, hi: float, policies: tuple[str, ...]) -> list[MapSpec]:
    return [MapSpec(trace, p, lo, hi, "knob") for p in policies]


def count(traces: tuple[str, ...], zoo: tuple[str, ...], knob_policies: int) -> int:
    """The maps a full run makes, at most (hole windows counted at their limit)."""
    window_maps = 2 * ("inceptionv4" in traces)
    return (len(traces) * (2 + len(ABLATIONS)) + len(zoo) + window_maps
            + len(traces) * MAX_HOLE_WINDOWS * knob_policies)
