"""Search synthetic traces for a feasibility hole and an overhead regime switch.

`find_hole(...)` generates small traces (seeds x parameters) and sweeps each
over a grid of budget ratios under one policy with the sweep machinery
(`sweep.runner.run_sweep`, one process). What counts as a hole and as a
regime switch is the sweep's own definition, the questions of
`queries/sweep/` read through `sweep.holes.analyze`:

* a **hole** is a failure region: a maximal run of failing grid samples with a
  completing sample just below and just above it (docs/semantics.md §12.8);
* a **regime switch** is a pair of neighbouring completing samples whose
  overheads differ by more than `factor` (max / min).

A trace that shows both on the `step` grid (and again on the `fine_step` grid,
when given) is a finding. Its strongest switch is then located to the byte by
an exact sweep between the switch's two samples (the certificate walk): two
adjacent distinct executions, both completing, with the largest overhead ratio.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..concepts import REGIME_JUMP, completes, overhead_factor
from ..sweep.holes import ExactInterval, FailureRegion, HolesReport, RegimeSwitch, analyze
from ..sweep.runner import run_sweep
from ..sweep.store import SweepParams, TraceInfo
from ..trace.parser import parse_lines
from ..trace.program import Program
from .generator import SynthSpec, generate

SWITCH_FACTOR = 1 + REGIME_JUMP     # a regime switch: overheads more than this far apart

DEFAULT_PARAMS = {
    "kind": ("chain", "resnet", "rnn", "mixed"),
    "depth": (4, 8, 12),
    "width": (1, 2),
    "size_levels": (0, 3),
}


@dataclass(frozen=True)
class GridEvidence:
    """The holes and switches of one grid sweep of a trace, and where it is stored."""
    step: float
    holes: list[FailureRegion]
    switches: list[RegimeSwitch]
    sweep: Path | None

    def to_json(self) -> dict:
        return {"step": self.step, "sweep": None if self.sweep is None else str(self.sweep),
                "holes": [{"ok_below": h.below.ratio, "failing": [h.lo.ratio, h.hi.ratio],
                           "ok_above": h.above.ratio, "outcomes": h.outcomes}
                          for h in self.holes],
                "switches": [{"lo": s.lo.to_json(), "hi": s.hi.to_json(), "factor": s.factor}
                             for s in self.switches]}


@dataclass(frozen=True)
class Finding:
    """A generated trace with a hole and a regime switch, and the evidence: the grid
    sweeps (`coarse` on `step`; `fine` on `fine_step` when it ran) and the strongest
    switch located to the byte (`exact_switch`: the two adjacent executions)."""
    spec: SynthSpec
    n_ops: int
    file_bytes: int
    peak: int
    model_compute: int
    coarse: GridEvidence
    fine: GridEvidence | None = None
    exact_switch: tuple[ExactInterval, ExactInterval] | None = None

    @property
    def evidence(self) -> GridEvidence:
        """The finest grid examined."""
        return self.fine or self.coarse

    @property
    def best_switch(self) -> RegimeSwitch:
        return max(self.evidence.switches, key=lambda s: s.factor)

    @property
    def widest_hole(self) -> FailureRegion:
        return max(self.evidence.holes, key=lambda h: h.above.ratio - h.below.ratio)

    def to_json(self) -> dict:
        out = {"spec": self.spec.to_json(), "n_ops": self.n_ops, "file_bytes": self.file_bytes,
               "peak": self.peak, "model_compute": self.model_compute,
               "coarse": self.coarse.to_json(),
               "fine": None if self.fine is None else self.fine.to_json()}
        if self.exact_switch is not None:
            out["exact_switch"] = [asdict(x) for x in self.exact_switch]
        return out


def candidate_specs(seeds, params: dict | None = None, base: SynthSpec | None = None):
    """Every (parameter combination, seed), parameters varying slowest."""
    params = dict(DEFAULT_PARAMS if params is None else params)
    base = base or SynthSpec()
    keys = list(params)
    for values in itertools.product(*(params[k] for k in keys)):
        for seed in seeds:
            yield base.with_(seed=int(seed), **dict(zip(keys, values)))


def synth_program(spec: SynthSpec) -> tuple[Program, int]:
    """The generated trace of `spec`, parsed, and the size of its log in bytes."""
    text = generate(spec)
    program = parse_lines(text.splitlines(keepends=True), f"<synth {spec.kind} {spec.seed}>",
                          f"synth-{spec.kind}-{spec.seed}")
    return program, len(text.encode("utf-8"))


def sweep_report(program: Program, params: SweepParams, folder: Path) -> HolesReport:
    """Sweep `program` in this process into `folder` and read its holes report."""
    run_sweep(program, params, folder, jobs=1)
    return analyze(folder)


def grid_evidence(program: Program, *, lo: float, hi: float, step: float, factor: float,
                  policy: str, timeout: float | None, folder: Path,
                  keep: bool) -> tuple[GridEvidence, TraceInfo]:
    """The holes and switches of a grid sweep, and the swept trace's peak and compute."""
    params = SweepParams(lo, hi, step, policies=(policy,), overhead_jump=factor - 1,
                         timeout=timeout)
    report = sweep_report(program, params, folder)
    holes = report.policy(policy)
    return GridEvidence(step, holes.failure_regions, holes.regime_switches,
                        folder if keep else None), report.trace


def locate_switch(program: Program, switch: RegimeSwitch, *, factor: float, policy: str,
                  folder: Path) -> tuple[ExactInterval, ExactInterval] | None:
    """The byte where a grid switch happens: adjacent distinct executions between the
    switch's two samples, both completing, whose overheads differ the most (when by
    more than `factor`)."""
    params = SweepParams(switch.lo.ratio, switch.hi.ratio, policies=(policy,), exact=True,
                         max_runs=5_000)
    exact = sweep_report(program, params, folder).policy(policy).exact
    best, best_factor = None, factor
    for a, b in zip(exact.partition, exact.partition[1:]):
        if a.hi + 1 != b.lo or not (completes(a.outcome) and completes(b.outcome) and a.overhead
                                    and b.overhead):
            continue
        f = overhead_factor(a.overhead, b.overhead)
        if f > best_factor:
            best, best_factor = (a, b), f
    return best


def examine(spec: SynthSpec, *, lo: str | float = "0.05", hi: str | float = "1.0",
            step: str | float = "0.002", fine_step: str | float | None = None,
            factor: float = SWITCH_FACTOR, policy: str = "dtr", max_ops: int = 400,
            max_bytes: int = 200_000, timeout: float | None = 5.0,
            workdir: Path | None = None) -> Finding | None:
    """Sweep one spec; a Finding when it shows both a hole and a regime switch on the
    `step` grid and, if given, again on the `fine_step` grid. The sweeps are kept
    under `workdir` (`dtrf holes` reads them) when given, else discarded."""
    program, size = synth_program(spec)
    if size > max_bytes or program.n_ops > max_ops:
        return None
    with tempfile.TemporaryDirectory(prefix="dtrf-synth-") as scratch:
        root = Path(workdir) / program.name if workdir is not None else Path(scratch)
        grid = dict(lo=float(lo), hi=float(hi), factor=factor, policy=policy, timeout=timeout,
                    keep=workdir is not None)
        coarse, trace = grid_evidence(program, step=float(step), folder=root / "coarse",
                                      **grid)
        if not (coarse.holes and coarse.switches):
            return None
        fine = None
        if fine_step is not None:
            fine, _ = grid_evidence(program, step=float(fine_step), folder=root / "fine",
                                    **grid)
            if not (fine.holes and fine.switches):
                return None
        finding = Finding(spec, program.n_ops, size, trace.peak, trace.model_compute,
                          coarse, fine)
        exact = locate_switch(program, finding.best_switch, factor=factor, policy=policy,
                              folder=root / "exact")
    return replace(finding, exact_switch=exact)


def _rank(f: Finding):
    # smaller traces first, then the stronger switch, then the wider hole
    hole = f.widest_hole
    return (f.n_ops, -f.best_switch.factor, -(hole.above.ratio - hole.below.ratio))


def find_hole(seeds=range(50), params: dict | None = None, *, base: SynthSpec | None = None,
              lo: str = "0.05", hi: str = "1.0", step: str = "0.002",
              fine_step: str | None = "0.0005", factor: float = SWITCH_FACTOR, policy: str = "dtr",
              max_ops: int = 400, max_bytes: int = 200_000, time_limit: float | None = None,
              stop_after: int | None = 1, workdir: Path | None = None,
              verbose: bool = False) -> list[Finding]:
    """Search seeds x params (see `candidate_specs`) for traces with a hole and a
    regime switch (see the module docstring). Returns the findings best first
    (fewest ops, strongest switch, widest hole); stops after `stop_after` findings
    or `time_limit` seconds (None: no limit)."""
    started = time.perf_counter()
    findings: list[Finding] = []
    varied = list(DEFAULT_PARAMS if params is None else params)
    for n, spec in enumerate(candidate_specs(seeds, params, base), start=1):
        if time_limit is not None and time.perf_counter() - started > time_limit:
            break
        found = examine(spec, lo=lo, hi=hi, step=step, fine_step=fine_step, factor=factor,
                        policy=policy, max_ops=max_ops, max_bytes=max_bytes, workdir=workdir)
        if found is None:
            continue
        findings.append(found)
        if verbose:
            h, s = found.widest_hole, found.best_switch
            what = " ".join(f"{k}={getattr(spec, k)}" for k in varied)
            print(f"[{n} specs, {time.perf_counter() - started:.0f}s] {what} seed "
                  f"{spec.seed}: {found.n_ops} ops, hole ok {h.below.ratio} / fail "
                  f"{h.lo.ratio}-{h.hi.ratio} / ok {h.above.ratio}, switch {s.lo.ratio}->"
                  f"{s.hi.ratio} x{s.factor:.3f}", file=sys.stderr)
        if stop_after is not None and len(findings) >= stop_after:
            break
    findings.sort(key=_rank)
    return findings
