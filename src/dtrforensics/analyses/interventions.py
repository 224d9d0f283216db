"""What-if interventions: baseline, intervention and control, side by side.

The evidence that one eviction causes a failure is an intervention (rerun the
failing budget with a storage never offered as a victim) together with a
control that takes the same code path with nothing changed. The control must
reproduce the plain run exactly; `control_matches` says whether it did.
Runs are recorded, and an existing complete recording of the same run is
reused instead of rerunning it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..concepts import TIMEOUT
from ..engine.replay import Interventions, RunResult, replay, resolve_budget
from ..recorder.reader import is_recording, open_recording
from ..recorder.record import default_recording_dir, record_run
from ..trace.program import Program

if TYPE_CHECKING:   # its digests import numba: only runs that share import it
    from ..engine.prefixes import PrefixCache


@dataclass(frozen=True)
class ComparedRun:
    """One run of a comparison: its summary (the `dtrf run --json` object) and
    where it is recorded (None when not recorded)."""

    summary: dict
    recording: Path | None


def same_execution(a: dict, b: dict) -> bool:
    """The identical run: same victims in order, same clock, same outcome."""
    return all(a[k] == b[k] for k in ("victims_sha256", "clock", "outcome", "dead_frees"))


def control_reproduces(program: Program, plain: RunResult, *, interventions: Interventions,
                       **run) -> bool:
    """Does the intervention code path with nothing changed reproduce the plain run?
    `plain` is the run just made (with `interventions`); `run` its budget, policy,
    timeout and thrash factor. A plain run with interventions is made anew."""
    if not interventions.is_empty():
        plain = replay(program, **run)
    checked = replay(program, interventions=Interventions(control=True), **run)
    return same_execution(plain.summary.to_json(), checked.summary.to_json())


def run_once(program: Program, *, budget: int, ratio: float | None, policy: str,
             interventions: Interventions, record_root: Path | None,
             timeout: float | None = None, scores: str = "victims",
             prefixes: PrefixCache | None = None) -> ComparedRun:
    """Replay (recorded under `record_root` when given), reusing a recording.
    An unrecorded run may resume from `prefixes` (a recording sees every step)."""
    if record_root is None:
        result = replay(program, budget=budget, policy=policy, timeout=timeout,
                        interventions=interventions, prefixes=prefixes)
        return ComparedRun(result.summary.to_json(), None)
    target = default_recording_dir(program, budget, ratio, policy, interventions,
                                   root=record_root)
    if is_recording(target):
        recording = open_recording(target)
        summary = recording.summary
        if summary.get("outcome") != TIMEOUT:
            return ComparedRun(summary, target)
    result, path = record_run(program, budget=budget, policy=policy, out_dir=target,
                              scores=scores, timeout=timeout, interventions=interventions,
                              overwrite=is_recording(target))
    return ComparedRun(result.summary.to_json(), path)


@dataclass(frozen=True)
class InterventionResult:
    baseline: ComparedRun
    intervention: ComparedRun
    control: ComparedRun
    # where the maker of each storage the interventions name ran (module, phase,
    # source): empty for a log without a where-file
    where: dict[int, dict] = field(default_factory=dict)

    @property
    def control_matches(self) -> bool:
        return same_execution(self.baseline.summary, self.control.summary)

    def to_json(self) -> dict:
        return {"baseline": self.baseline.summary, "intervention": self.intervention.summary,
                "control": self.control.summary, "control_matches": self.control_matches,
                "recordings": {k: (str(r.recording) if r.recording else None) for k, r in
                               (("baseline", self.baseline), ("intervention", self.intervention),
                                ("control", self.control))},
                "where": {str(s): w for s, w in sorted(self.where.items())}}


def intervene(program: Program, interventions: Interventions, *, ratio: float | None = None,
              budget: int | None = None, policy: str = "dtr",
              record_root: Path | None = Path("recordings") / "interventions",
              timeout: float | None = None) -> InterventionResult:
    """Run baseline, intervention and control for one budget."""
    interventions.validate(program)
    budget, ratio = resolve_budget(program, budget, ratio)
    common = dict(budget=budget, ratio=ratio, policy=policy, record_root=record_root,
                  timeout=timeout)
    baseline = run_once(program, interventions=Interventions(), **common)
    intervention = run_once(program, interventions=replace(interventions, control=False), **common)
    control = run_once(program, interventions=Interventions(control=True), **common)
    named = {*interventions.retain, *(s for s, _ in interventions.forbid + interventions.force)}
    where = {s: program.maker_where(s) for s in sorted(named)} if program.where else {}
    return InterventionResult(baseline, intervention, control, where)
