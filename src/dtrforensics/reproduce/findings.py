"""What the studies left open, answered with exact maps (`dtrf reproduce --findings`).

Every answer is read off certified budget maps (`sweep --exact`): each map is
one sweep folder under the working folder, run for at most `map_seconds` per
invocation and resumed by the next one, so a second run of the command fills
in what the first left uncertified. Maps are run in the order of what the
findings need most: the studies' own grids first (every claim gets the answer
their protocol gives), then DTR's exact map of every public trace, the
PyTorch-recorded zoo (small models: seconds each), exact neighbourhoods and a
minimum evictee size around every DTR hole, the InceptionV4 window byte-exact,
then the ablations.

Budgets are bytes; a ratio r means floor(r x peak) as everywhere else.
"""

from __future__ import annotations

import json
import math
import shutil
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..engine.policies import POLICIES, policy_sources
from ..recorder.record import policy_label
from . import claims as C

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
# Knobs production runtimes offer, mapped around every DTR hole: exact
# neighbourhoods, and MegEngine's minimum evictee size (a policy file, knobs.py).
MIN_EVICTEE_SIZE = f"{Path(__file__).with_name('knobs.py')}:dtr_min_1mib"
HOLE_POLICIES: tuple[str, ...] = ("dtr-exact-nbhd", MIN_EVICTEE_SIZE)
MAX_HOLE_WINDOWS = 4          # per trace: the widest DTR holes get a neighbourhood map
GRID_STEP = 0.01              # the studies' grid
STUDY_RUN_LIMIT = 20 * 60.0   # the studies' wall-clock limit per run: grid points get it too
RESOLUTION = 0.001            # the studies' finest grid: narrower structure is "micro"
REGIME_JUMP = 2.0             # a regime switch: the overhead at least doubles
MAX_WALK_RUNS = 100_000
# The verdict of a claim whose maps or grid points are not all computed yet: neither
# a match nor a difference (claims.VERDICTS judge complete answers only).
INCOMPLETE = "incomplete"

Progress = Callable[["MapProgress"], None]


@dataclass(frozen=True)
class MapSpec:
    """One exact map: a trace (short name or log path), a policy, a ratio range."""

    trace: str
    policy: str
    ratio_from: float
    ratio_to: float
    group: str                  # "grid" | "public" | "window" | "zoo" | "knob" | "ablation"
    label: str = ""             # the trace's name in the report (zoo: zoo:NAME)
    step: float | None = None   # a grid at this step instead of the exact walk

    @property
    def key(self) -> str:
        name = self.label.replace(":", "_") or self.trace
        kind = f"-step{self.step:g}" if self.step else ""
        return f"{name}-{self.policy_name}-{self.ratio_from:g}-{self.ratio_to:g}{kind}"

    @property
    def policy_name(self) -> str:
        """The policy in names and tables: a policy from a file as FILESTEM.NAME."""
        return policy_label(self.policy)

    @property
    def name(self) -> str:
        return self.label or self.trace


@dataclass(frozen=True)
class MapProgress:
    """What the command shows while a map runs."""

    index: int                  # 1-based, of `total`
    total: int
    spec: MapSpec
    coverage: float
    seconds: float              # spent on this map in this invocation
    limit: float


@dataclass
class Fringe:
    """Failure regions packed closer than the studies' resolution: outcomes alternate."""

    lo: int
    hi: int
    regions: int

    @property
    def switches(self) -> int:
        return 2 * self.regions


@dataclass
class MapFindings:
    """One map's answers."""

    spec: MapSpec
    peak: int
    range_bytes: tuple[int, int]
    coverage: float
    executions: int
    complete: bool
    seconds: float              # wall time spent on it, all invocations together
    regions: list               # sweep.holes.ExactRegion, in budget order
    fringes: list[Fringe]
    regime_switches: list[tuple[int, float, float]]   # budget where it jumps, overhead below, above
    feasibility_switches: int
    gaps: list                  # sweep.holes.ExactGap
    partition: list             # sweep.holes.ExactInterval
    slowest_run: float
    remaining: "Remaining | None" = None   # what the gaps may still hold (maps with a grid)

    @property
    def holes(self) -> list:
        return [r for r in self.regions if r.hole]

    def ratio(self, budget: int) -> float:
        return budget / self.peak

    def outcome_at(self, budget: int) -> str | None:
        """The certified outcome at `budget` (None: not certified yet)."""
        import bisect
        i = bisect.bisect_right([p.lo for p in self.partition], budget) - 1
        if i >= 0 and self.partition[i].lo <= budget <= self.partition[i].hi:
            return self.partition[i].outcome
        return None

    def grid(self, step: float, lo: float | None = None, hi: float | None = None
             ) -> list[tuple[float, int, str | None]]:
        """(ratio, budget, outcome) at every multiple of `step` in the range."""
        lo = self.spec.ratio_from if lo is None else lo
        hi = self.spec.ratio_to if hi is None else hi
        n = round((hi - lo) / step)
        out = []
        for k in range(n + 1):
            r = round(lo + k * step, 6)
            b = math.floor(r * self.peak)
            out.append((r, b, self.outcome_at(b)))
        return out


def _fringes(regions, peak: int) -> list[Fringe]:
    """Groups of two or more failure regions whose completing stretches between
    them are narrower than the studies' resolution."""
    width = RESOLUTION * peak
    out: list[Fringe] = []
    group: list = []
    for r in regions:
        if group and r.lo - group[-1].hi - 1 < width:
            group.append(r)
            continue
        if len(group) > 1:
            out.append(Fringe(group[0].lo, group[-1].hi, len(group)))
        group = [r]
    if len(group) > 1:
        out.append(Fringe(group[0].lo, group[-1].hi, len(group)))
    return out


def _switches(partition) -> tuple[list[tuple[int, float, float]], int]:
    """Regime switches (neighbouring completing executions whose overheads differ by
    REGIME_JUMP or more) and feasibility switches (ok <-> failing) along the map."""
    regime, feasible = [], 0
    for a, b in zip(partition, partition[1:]):
        if a.hi + 1 != b.lo:
            continue
        if (a.outcome == "ok") != (b.outcome == "ok"):
            feasible += 1
        elif a.outcome == "ok" and a.overhead and b.overhead:
            if max(a.overhead, b.overhead) / min(a.overhead, b.overhead) >= REGIME_JUMP:
                regime.append((b.lo, a.overhead, b.overhead))
    return regime, feasible


def _rows(folder: Path, policy: str) -> list[dict]:
    from ..sweep.store import SweepStore
    rows = [r for r in SweepStore(folder).read_runs().to_pylist()
            if r["policy"] == policy and r["rep"] == 0]
    return sorted(rows, key=lambda r: r["budget"])


@dataclass
class GridFindings:
    """A sampled grid (the studies' protocol): every point's outcome and run time."""

    spec: MapSpec
    peak: int
    points: list[dict]          # runs-table rows in budget order
    seconds: float
    run_limit: float | None = STUDY_RUN_LIMIT   # what it was run with (a stored grid keeps its own)

    @property
    def planned(self) -> int:
        return round((self.spec.ratio_to - self.spec.ratio_from) / self.spec.step) + 1

    @property
    def unresolved(self) -> int:
        """Grid points without an outcome: timed out, or not run yet."""
        return self.planned - sum(p["status"] != "unresolved" for p in self.points)

    @property
    def slowest(self) -> float:
        return max((p["wall_seconds"] for p in self.points), default=0.0)

    def as_grid(self) -> list[tuple[float, int, str | None]]:
        return [(p["ratio"], p["budget"], None if p["status"] == "unresolved" else p["outcome"])
                for p in self.points]

    @property
    def hole(self) -> bool:
        return _grid_hole(self.as_grid())


@dataclass(frozen=True)
class Remaining:
    """A rough extrapolation, not a certificate: the uncertified budgets of a map
    hold about `executions` distinct executions, taking about `run_seconds` of
    replay from op 0, if the budgets of each gap behave like the studies' grid
    points inside it (or the nearest one): executions as wide, runs as slow.
    `unknown_bytes` are those standing with grid points that timed out."""

    executions: int
    run_seconds: float
    unknown_bytes: int


def remaining(m: "MapFindings", grid: "GridFindings") -> Remaining | None:
    """What the gaps of `m` may hold, read off the grid over the same range: each
    gap's bytes shared evenly among the grid points inside it (or given to the
    nearest one when it has none); None for a complete map or an empty grid."""
    from ..sweep.store import STATUS_UNRESOLVED
    if m.complete or not grid.points:
        return None
    executions, seconds, unknown = 0.0, 0.0, 0.0
    for g in m.gaps:
        inside = [p for p in grid.points if g.lo <= p["budget"] <= g.hi] or [min(
            grid.points, key=lambda p: min(abs(p["budget"] - g.lo), abs(p["budget"] - g.hi)))]
        share = g.width / len(inside)
        for p in inside:
            if p["status"] == STATUS_UNRESOLVED:
                unknown += share
                continue
            top = g.hi if p["interval_hi"] is None else p["interval_hi"]   # None: unbounded
            n = share / max(1, top - p["interval_lo"] + 1)
            executions += n
            seconds += n * (p["wall_seconds"] or 0.0)
    return Remaining(math.ceil(executions), seconds, round(unknown))


def read_map(spec: MapSpec, folder: Path, seconds: float) -> MapFindings:
    """The findings of the (possibly partial) map stored in `folder`."""
    from ..sweep.holes import analyze
    report = analyze(folder)
    view = report.policy(spec.policy).exact
    points = _rows(folder, spec.policy)
    regime, feasible = _switches(view.partition)
    regions = sorted(view.failure_regions, key=lambda r: r.lo)
    return MapFindings(
        spec=spec, peak=report.trace.peak, range_bytes=report.range_bytes,
        coverage=view.coverage, executions=len(view.partition),
        complete=view.certified_bytes == view.range_bytes, seconds=seconds,
        regions=regions, fringes=_fringes(regions, report.trace.peak),
        regime_switches=regime, feasibility_switches=feasible, gaps=view.gaps,
        partition=view.partition,
        slowest_run=max((p.get("wall_seconds") or 0.0 for p in points), default=0.0))


# --- running the maps -------------------------------------------------------------------

class _StopMap(Exception):
    pass


class Mapper:
    """Runs (or resumes) maps into `workdir`, each for at most `map_seconds` per
    invocation; keeps the wall time spent on each map across invocations."""

    def __init__(self, workdir: Path, *, map_seconds: float, run_timeout: float | None,
                 jobs: int | None, progress: Progress | None = None,
                 total_seconds: float | None = None):
        self.workdir = Path(workdir)
        self.deadline = None if total_seconds is None else time.monotonic() + total_seconds
        self.map_seconds, self.run_timeout, self.jobs = map_seconds, run_timeout, jobs
        self.progress = progress or (lambda _p: None)
        self.ledger_path = self.workdir / "seconds.json"
        self.ledger: dict[str, float] = (json.loads(self.ledger_path.read_text())
                                         if self.ledger_path.is_file() else {})
        self._programs: dict[str, object] = {}
        self.index, self.total = 0, 0

    def program(self, trace: str):
        if trace not in self._programs:
            from ..trace import load_trace
            self._programs[trace] = load_trace(trace)
        return self._programs[trace]

    def folder(self, spec: MapSpec) -> Path:
        return self.workdir / "maps" / spec.key

    def run(self, spec: MapSpec) -> MapFindings:
        if not self._sweep(spec):
            return self._not_started(spec)
        return read_map(spec, self.folder(spec), self.ledger.get(spec.key, 0.0))

    def grid(self, spec: MapSpec) -> GridFindings:
        if not self._sweep(spec):
            return GridFindings(spec, self._peak(spec), [], 0.0)
        folder = self.folder(spec)
        doc = json.loads((folder / "sweep.json").read_text())
        return GridFindings(spec, doc["trace"]["peak"], _rows(folder, spec.policy),
                            self.ledger.get(spec.key, 0.0), doc["params"]["timeout"])

    def _peak(self, spec: MapSpec) -> int:
        from ..engine.replay import prepared
        return prepared(self.program(spec.trace))[1].peak

    def _not_started(self, spec: MapSpec) -> MapFindings:
        from ..sweep.grid import range_bytes
        from ..sweep.holes import ExactGap
        from ..sweep.store import SweepParams
        peak = self._peak(spec)
        rng = range_bytes(SweepParams(spec.ratio_from, spec.ratio_to, exact=True), peak)
        return MapFindings(spec, peak, rng, 0.0, 0, False, 0.0, [], [], [], 0,
                           [ExactGap(*rng, 0, "run-limit")], [], 0.0)

    def _timeout(self, folder: Path, spec: MapSpec) -> float | None:
        """The run timeout a stored map was started with (it resumes with it); else the
        studies' limit for a grid (their protocol, so their timeouts compare with ours),
        ours for an exact map."""
        doc = folder / "sweep.json"
        if doc.is_file():
            return json.loads(doc.read_text())["params"]["timeout"]
        return STUDY_RUN_LIMIT if spec.step else self.run_timeout

    def _sweep(self, spec: MapSpec) -> bool:
        """Run or resume the sweep of `spec` for its share of time; False when it has
        no stored runs (the total time ran out before it started)."""
        from ..sweep.runner import SweepObserver, run_sweep
        from ..sweep.store import SweepParams
        self.index += 1
        folder = self.folder(spec)
        _set_aside_if_other_policy(folder, spec)
        if self.deadline is not None and time.monotonic() > self.deadline:
            return (folder / "sweep.json").is_file()
        params = SweepParams(spec.ratio_from, spec.ratio_to, step=spec.step,
                             policies=(spec.policy,), exact=spec.step is None,
                             max_runs=MAX_WALK_RUNS, timeout=self._timeout(folder, spec))
        started = time.perf_counter()
        mapper = self

        class Watch(SweepObserver):
            share = 0.0
            done = 0

            def coverage(self, fractions: dict[str, float]) -> None:
                self.share = fractions[spec.policy]

            def finished(self, row: dict) -> None:
                self.done += 1
                if spec.step:
                    self.share = self.done / round((spec.ratio_to - spec.ratio_from) / spec.step + 1)
                spent = time.perf_counter() - started
                mapper.progress(MapProgress(mapper.index, mapper.total, spec, self.share, spent,
                                            mapper.map_seconds))
                if spent > mapper.map_seconds:
                    raise _StopMap

        done = (folder / "sweep.json").is_file() and \
            json.loads((folder / "sweep.json").read_text()).get("status") == "complete"
        if not done:
            try:
                run_sweep(self.program(spec.trace), params, folder, jobs=self.jobs,
                          observer=Watch(), max_points=MAX_WALK_RUNS)
            except _StopMap:
                pass
            self.ledger[spec.key] = self.ledger.get(spec.key, 0.0) + time.perf_counter() - started
            self.ledger_path.write_text(json.dumps(self.ledger, indent=1, sort_keys=True) + "\n")
        return True


def _set_aside_if_other_policy(folder: Path, spec: MapSpec) -> None:
    """A stored map made under another spelling or content of the map's policy
    file (the package moved, or knobs.py was edited) answers for another policy:
    it is renamed FOLDER.stale and the map starts again."""
    doc = folder / "sweep.json"
    if not doc.is_file() or spec.policy in POLICIES:
        return
    stored = json.loads(doc.read_text())
    if (stored["params"]["policies"] == [spec.policy]
            and stored.get("policy_sources") == policy_sources((spec.policy,))):
        return
    stale = folder.with_name(folder.name + ".stale")
    if stale.exists():
        shutil.rmtree(stale)
    folder.rename(stale)
    moved = stored["params"]["policies"] != [spec.policy]
    why = (f"made with {stored['params']['policies'][0]}, not {spec.policy}" if moved
           else f"made with another content of {spec.policy}")
    warnings.warn(f"{folder}: {why}; set aside as {stale.name}, mapping again")


# --- the findings -----------------------------------------------------------------------

@dataclass
class KnobWindow:
    """A DTR hole and the same window of budgets under another policy."""

    trace: str
    hole: object                  # the DTR ExactRegion
    policy: str
    map: MapFindings

    @property
    def survives(self) -> bool | None:
        """Does a failing budget with a completing budget below it remain? (None: the
        window is not fully certified and shows no hole yet)."""
        if self.map.holes:
            return True
        return False if self.map.complete else None


@dataclass
class Findings:
    grids: dict[str, GridFindings] = field(default_factory=dict)         # trace -> 0.01 grid
    public: dict[str, MapFindings] = field(default_factory=dict)         # trace -> dtr map
    ablations: dict[tuple[str, str], MapFindings] = field(default_factory=dict)
    window: MapFindings | None = None                                    # InceptionV4
    window_grid: GridFindings | None = None                              # its 0.0001 grid
    knobs: list[KnobWindow] = field(default_factory=list)
    zoo: dict[tuple[str, str], MapFindings] = field(default_factory=dict)
    zoo_errors: dict[str, str] = field(default_factory=dict)
    claims: list[C.Claim] = field(default_factory=list)
    settings: dict[str, object] = field(default_factory=dict)

    def maps(self) -> list[MapFindings]:
        return (list(self.public.values()) + ([self.window] if self.window else [])
                + list(self.zoo.values()) + [k.map for k in self.knobs]
                + list(self.ablations.values()))


def hole_windows(m: MapFindings, limit: int = MAX_HOLE_WINDOWS) -> list[tuple[object, float, float]]:
    """The widest holes of a DTR map, each with a ratio window around it: the hole
    and as much again (at least the studies' resolution) on either side."""
    out = []
    for hole in sorted(m.holes, key=lambda r: r.hi - r.lo, reverse=True)[:limit]:
        pad = max(hole.hi - hole.lo + 1, RESOLUTION * m.peak)
        lo = math.floor((hole.lo - pad) / m.peak * 1e6) / 1e6
        hi = math.ceil((hole.hi + pad) / m.peak * 1e6) / 1e6
        out.append((hole, max(lo, 1e-6), hi))
    return sorted(out, key=lambda x: x[0].lo)


def record_zoo(workdir: Path, name: str) -> Path:
    """zoo:NAME at its default sizes, flops costs, seed 0, recorded once."""
    path = workdir / "zoo" / f"{name}.log"
    if not path.is_file():
        import torch

        from ..torch import record
        from ..torch.spec import build
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(0)
        model, data, loss_fn = build(f"zoo:{name}")
        record(model, data, loss_fn, path, cost="flops")
    return path


def findings(workdir: Path, *, map_seconds: float = 600.0, run_timeout: float | None = 120.0,
             jobs: int | None = None, progress: Progress | None = None,
             total_seconds: float | None = None, traces: tuple[str, ...] = PUBLIC,
             zoo: tuple[str, ...] = ZOO, ratio_range: tuple[float, float] = RANGE,
             zoo_range: tuple[float, float] = ZOO_RANGE) -> Findings:
    """Run (or resume) every map the findings need, and read them. After
    `total_seconds`, maps not reached are read as they are stored, not run."""
    m = Mapper(workdir, map_seconds=map_seconds, run_timeout=run_timeout, jobs=jobs,
               progress=progress, total_seconds=total_seconds)
    out = Findings(settings={"map_seconds": map_seconds, "run_timeout": run_timeout,
                             "total_seconds": total_seconds, "range": ratio_range, "traces": traces,
                             "zoo": zoo, "zoo_range": zoo_range})
    m.total = len(traces) * (2 + len(ABLATIONS)) + len(zoo) \
        + 2 * ("inceptionv4" in traces) + len(traces) * MAX_HOLE_WINDOWS * len(HOLE_POLICIES)
    for t in traces:
        out.grids[t] = m.grid(MapSpec(t, "dtr", *ratio_range, "grid", step=GRID_STEP))
    if "inceptionv4" in traces:   # the holes study's own grid over its window
        out.window_grid = m.grid(MapSpec("inceptionv4", "dtr", *INCEPTION_WINDOW, "window",
                                         step=WINDOW_STEP))
    for t in traces:
        out.public[t] = m.run(MapSpec(t, "dtr", *ratio_range, "public"))
        out.public[t].remaining = remaining(out.public[t], out.grids[t])
    for name in zoo:
        try:
            log = str(record_zoo(m.workdir, name))
        except ImportError as exc:
            out.zoo_errors[name] = f"PyTorch is not installed ({exc})"
            continue
        out.zoo[(name, "dtr")] = m.run(MapSpec(log, "dtr", *zoo_range, "zoo", f"zoo:{name}"))
    # the hole windows are narrow: they come before the long maps
    m.total -= sum(MAX_HOLE_WINDOWS - len(hole_windows(out.public[t])) for t in traces) \
        * len(HOLE_POLICIES)
    for t in traces:
        for hole, lo, hi in hole_windows(out.public[t]):
            for policy in HOLE_POLICIES:
                out.knobs.append(KnobWindow(t, hole, policy,
                                            m.run(MapSpec(t, policy, lo, hi, "knob"))))
    if "inceptionv4" in traces:   # the window byte-exact
        out.window = m.run(MapSpec("inceptionv4", "dtr", *INCEPTION_WINDOW, "window"))
        out.window.remaining = remaining(out.window, out.window_grid)
    for policy in ABLATIONS:
        for t in traces:
            out.ablations[(t, policy)] = m.run(MapSpec(t, policy, *ratio_range, "ablation"))
    out.claims = open_claims(out)
    return out


# --- the claims of the holes study still open ------------------------------------------

def _ratio_span(points: list[tuple[float, int, str | None]]) -> str:
    return (f"{points[0][0]:.4f}" if len(points) == 1
            else f"{points[0][0]:.4f}-{points[-1][0]:.4f}")


def _failing_runs(points) -> list[list]:
    """Maximal runs of failing grid points (uncertified points end a run)."""
    runs, cur = [], []
    for p in points:
        if p[2] is not None and p[2] != "ok":
            cur.append(p)
        else:
            if cur:
                runs.append(cur)
            cur = []
    return runs + ([cur] if cur else [])


def _failing_counts(runs: list[list]) -> str:
    """`290 failing grid points in 15 runs (oom 280, thrashed 10)`: what the switch
    count stands on, thrashed runs (overhead above 60x) counted as failing."""
    if not runs:
        return ""
    outcomes = Counter(p[2] for r in runs for p in r)
    return (f"{sum(outcomes.values())} failing grid points in {len(runs)} runs ("
            + ", ".join(f"{o} {n}" for o, n in sorted(outcomes.items())) + ")")


def _grid_hole(points) -> bool:
    """A failing grid point above a completing one."""
    seen_ok = False
    for _, _, outcome in points:
        if outcome == "ok":
            seen_ok = True
        elif outcome is not None and seen_ok:
            return True
    return False


def _limits(grids) -> str:
    """The run limits the grids had, in words."""
    limits = sorted({g.run_limit for g in grids}, key=lambda t: math.inf if t is None else t)
    words = ["no limit" if t is None else f"{t:g} s" for t in limits]
    own = " (the studies' own)" if limits == [STUDY_RUN_LIMIT] else ""
    return "a limit of " + " or ".join(words) + own


def _coverage_note(m: MapFindings) -> str:
    return "" if m.complete else f"map certified at {m.coverage:.1%} so far (rerun to fill it)"


def _unless_incomplete(claim: C.Claim, complete: bool) -> C.Claim:
    return claim if complete else replace(claim, verdict=INCOMPLETE)


def open_claims(f: Findings) -> list[C.Claim]:
    """The InceptionV4 window and the grid-study claims, read off the maps."""
    return [_unless_incomplete(c, done) for c, done in _open_claims(f)]


def _open_claims(f: Findings) -> list[tuple[C.Claim, bool]]:
    study = C.HOLES_STUDY
    out: list[tuple[C.Claim, bool]] = []
    w, sampled = f.window, f.window_grid
    if sampled is not None or w is not None:
        # The claims are the grid's (what the study sampled); the byte-exact map
        # sharpens them where it has certified the budgets.
        if sampled is not None:
            grid, grid_done = sampled.as_grid(), sampled.unresolved == 0
            grid_note = "" if grid_done else (f"{sampled.unresolved} of {sampled.planned} "
                                              "grid points without an outcome so far")
        else:
            grid, grid_done, grid_note = w.grid(WINDOW_STEP), w.complete, _coverage_note(w)
        exact_done = w is not None and w.complete
        exact_note = "" if w is None or exact_done else \
            f"the byte-exact map is certified at {w.coverage:.1%} so far"
        failing = _failing_runs(grid)
        near = [r for r in failing if r[0][0] <= 0.2527 and r[-1][0] >= 0.2526]
        exact = [] if w is None else [
            r for r in w.regions if r.lo <= math.floor(0.2527 * w.peak) + w.peak // 10000
            and r.hi >= math.floor(0.2526 * w.peak)]
        out.append((C.claim(
            "inceptionv4.failure_region_0.2526", study,
            "InceptionV4: a failure region at 0.2526-0.2527 (0.0001 grid)", "0.2526-0.2527",
            _ratio_span(near[0]) if near else "no failing grid point there",
            sharper_note="; ".join(f"certified failing budgets {r.lo:,}-{r.hi:,} B "
                                   f"({r.hi - r.lo + 1:,} B)" for r in exact),
            note="; ".join(x for x in (grid_note, exact_note) if x)), grid_done))
        switches = sum(1 for a, b in zip(grid, grid[1:]) if a[2] is not None and b[2] is not None
                       and (a[2] == "ok") != (b[2] == "ok"))
        out.append((C.claim(
            "inceptionv4.switches_0.209_0.26", study,
            "InceptionV4: feasibility switches between 0.209 and 0.26 (0.0001 grid)", "6",
            str(switches),
            sharper_note=f"byte-exact: {w.feasibility_switches} switches, "
                         f"{len(w.regions)} failure regions" if exact_done else "",
            note="; ".join(x for x in (grid_note, exact_note, _failing_counts(failing)) if x)),
            grid_done))
    grids = {t: f.grids[t] for t in CONFIRMATORY if t in f.grids}
    if len(grids) == len(CONFIRMATORY):
        with_hole = [t for t, g in grids.items() if g.hole]
        left = {t: g.unresolved for t, g in grids.items() if g.unresolved}
        out.append((C.claim(
            "grid_0.01.no_hole", study,
            "the 0.01 grid over 0.05-0.60 shows no hole on the six confirmatory traces",
            "0 of 6", f"{len(with_hole)} of 6",
            note="; ".join(x for x in (", ".join(with_hole), "; ".join(
                f"{t}: {n} grid points without an outcome" for t, n in left.items())) if x)),
            not left))
        points = sum(g.planned for g in grids.values())
        slowest = max(g.slowest for g in grids.values())
        resolved = not left
        out.append((C.Claim(
            "grid_0.01.timeouts", study,
            "grid points left unresolved by a 20-minute limit per run",
            "13 grid points (and 46 TreeLSTM samples)",
            f"{sum(left.values())} of {points}; slowest grid run {slowest:.1f} s",
            C.SHARPER if resolved else C.DIFFERS,
            "every grid point of the six traces has its outcome" if resolved else
            f"grid points still without an outcome after {_limits(grids.values())} per run "
            "(or not run yet): rerun to fill them"),
            resolved))
    maps = {t: f.public[t] for t in CONFIRMATORY if t in f.public}
    if len(maps) == len(CONFIRMATORY):
        fine = {t: m.grid(RESOLUTION) for t, m in maps.items()}
        fine_holes = [t for t, g in fine.items() if _grid_hole(g)]
        exact_holes = [t for t, m in maps.items() if m.holes]
        partial = [t for t, m in maps.items() if not m.complete]
        out.append((C.claim(
            "grid_0.001.holes", study,
            "holes appear on three of the six traces at 0.001 resolution (read off the exact "
            "maps)", "3 of 6", f"{len(fine_holes)} of 6",
            sharper_note=(f"0.001 grid: {', '.join(fine_holes) or 'none'}; certified "
                          f"(any width): {', '.join(f'{t} {len(maps[t].holes)}' for t in exact_holes) or 'none'}")
            if not partial else "",
            note=("maps still partial, holes so far: "
                  + (", ".join(f"{t} {len(maps[t].holes)}" for t in exact_holes) or "none")
                  + f" (partial: {', '.join(partial)})") if partial else ""), not partial))
    return out
