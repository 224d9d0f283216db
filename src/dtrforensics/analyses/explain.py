"""Hindsight search: which retained storages turn a failing run into a completion.

For a run that fails, collect the storages its failing frontier needed (each
level's storage and its op's argument storages) that were evicted before the
failing operator started, latest eviction first (then those evicted only
during the failing operator's own recursion); retain each alone, then small combinations, each
attempt with a control (the same code path, nothing retained, which must
reproduce the failure). A retention that completes is evidence about the
cause of the failure, not a policy: it uses knowledge of the future.
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..engine.replay import Interventions, replay, resolve_budget
from ..trace.program import Program
from .interventions import run_once, same_execution

CAVEAT = ("A hindsight retention is evidence about what caused the failure, not a "
          "policy: choosing it needs knowledge of the run's future.")


@dataclass(frozen=True)
class RetentionCandidate:
    storage: int
    last_evicted_op: int
    evictions: int
    why: str  # which frontier level or argument needed it


@dataclass(frozen=True)
class Attempt:
    retain: tuple[int, ...]
    summary: dict
    control_matches: bool
    recording: str | None

    @property
    def fixes(self) -> bool:
        return self.summary["outcome"] == "ok"

    def to_json(self) -> dict:
        s = self.summary
        return {"retain": list(self.retain), "outcome": s["outcome"], "overhead": s["overhead"],
                "max_depth": s["max_depth"], "max_pinned": s["max_pinned"]["bytes"],
                "max_pinned_depth": s["max_pinned"]["depth"],
                "control_matches": self.control_matches, "recording": self.recording}


@dataclass
class Explanation:
    baseline: dict
    candidates: list[RetentionCandidate]
    attempts: list[Attempt] = field(default_factory=list)
    control_outcome: str | None = None
    control_matches: bool | None = None
    note: str = CAVEAT

    @property
    def fixes(self) -> list[Attempt]:
        return [a for a in self.attempts if a.fixes]

    @property
    def all_controls_match(self) -> bool:
        return all(a.control_matches for a in self.attempts)

    def to_json(self) -> dict:
        return {"baseline": self.baseline, "candidates": [c.__dict__ for c in self.candidates],
                "fixes": [a.to_json() for a in self.fixes], "tried": len(self.attempts),
                "attempts": [a.to_json() for a in self.attempts],
                "control": self.control_outcome, "control_matches": self.control_matches,
                "note": self.note}


def frontier_candidates(program: Program, result) -> list[RetentionCandidate]:
    """Storages the failing frontier needed that were pressure-evicted earlier."""
    if result.frontier is None:
        return []
    needed: dict[int, str] = {}
    for level in result.frontier.levels:
        own = int(program.tensor_storage[level.tensor_id])
        needed.setdefault(own, f"rematerialized at depth {level.depth} ({level.tensor})")
        for arg in program.op_args_of(level.op_id).tolist():
            s = int(program.tensor_storage[arg])
            needed.setdefault(s, f"argument of {level.op_name} at depth {level.depth} "
                                 f"({program.tensor_name(arg)})")
    failing_op = result.summary.oom.op_id
    last_op: dict[int, int] = {}
    last_before: dict[int, int] = {}
    count: dict[int, int] = {}
    for storage, op_id, _ in result.victims.tolist():
        if storage in needed:
            last_op[storage] = op_id
            count[storage] = count.get(storage, 0) + 1
            if op_id < failing_op:
                last_before[storage] = op_id
    # evicted before the failing op, latest first; then only-during, by id
    ordered = sorted(last_op, key=lambda s: (s not in last_before, -last_before.get(s, 0), s))
    return [RetentionCandidate(s, last_before.get(s, last_op[s]), count[s], needed[s]) for s in ordered]


def planned_retentions(candidates: list[RetentionCandidate], max_combo: int,
                       max_attempts: int) -> list[tuple[int, ...]]:
    """Singles in candidate order, then pairs, triples... up to the bounds."""
    ids = [c.storage for c in candidates]
    plan: list[tuple[int, ...]] = []
    for size in range(1, min(max_combo, len(ids)) + 1):
        for combo in itertools.combinations(ids, size):
            if len(plan) >= max_attempts:
                return plan
            plan.append(tuple(sorted(combo)))
    return plan


# --- worker processes: the program is loaded once per process ---------------------

_WORKER: dict = {}


def _init_worker(source: str, name: str) -> None:
    from ..trace.cache import load_program
    _WORKER["program"] = load_program(source, name)


def _attempt(program: Program, retain: tuple[int, ...], budget: int, ratio: float | None,
             policy: str, record_root: Path | None, timeout: float | None,
             baseline: dict) -> Attempt:
    common = dict(budget=budget, ratio=ratio, policy=policy, timeout=timeout)
    # One control per trace content, budget and policy in each process (a
    # program parsed from memory has no content hash: its control is not kept).
    key = ("control", program.sha256, budget, policy) if program.sha256 else None
    control = _WORKER.get(key) if key else None
    if control is None:
        control = run_once(program, interventions=Interventions(control=True), record_root=None,
                           **common)
        if key:
            _WORKER[key] = control
    run = run_once(program, interventions=Interventions(retain=retain), record_root=record_root,
                   **common)
    return Attempt(retain, run.summary, same_execution(control.summary, baseline),
                   str(run.recording) if run.recording else None)


def _attempt_in_worker(*args) -> Attempt:
    return _attempt(_WORKER["program"], *args)


def explain(program: Program, *, ratio: float | None = None, budget: int | None = None,
            policy: str = "dtr", max_attempts: int = 32, max_combo: int = 2,
            timeout: float | None = None, jobs: int | None = None,
            record_root: Path | None = Path("recordings") / "explain",
            stop_after_fixes: int | None = None,
            on_attempt: Callable[[Attempt, int, int], None] | None = None) -> Explanation:
    """Search retentions that make a failing run complete (see module doc)."""
    budget, ratio = resolve_budget(program, budget, ratio)
    failing = replay(program, budget=budget, policy=policy, timeout=timeout)
    baseline = failing.summary.to_json()
    candidates = frontier_candidates(program, failing)
    out = Explanation(baseline=baseline, candidates=candidates)
    if failing.summary.outcome != "oom":
        return out
    plan = planned_retentions(candidates, max_combo, max_attempts)
    control = run_once(program, interventions=Interventions(control=True), budget=budget,
                       ratio=ratio, policy=policy, record_root=record_root, timeout=timeout)
    args = [(retain, budget, ratio, policy, record_root, timeout, baseline) for retain in plan]
    jobs = max(1, jobs or os.cpu_count() or 1)
    done = 0

    def finish(attempt: Attempt) -> bool:
        nonlocal done
        done += 1
        out.attempts.append(attempt)
        if on_attempt:
            on_attempt(attempt, done, len(plan))
        return stop_after_fixes is not None and len(out.fixes) >= stop_after_fixes

    if jobs == 1 or len(plan) <= 1:
        _WORKER["program"] = program
        for a in args:
            if finish(_attempt(program, *a)):
                break
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(plan)), initializer=_init_worker,
                                 initargs=(program.source, program.name)) as pool:
            futures = [pool.submit(_attempt_in_worker, *a) for a in args]
            for future in as_completed(futures):
                if finish(future.result()):
                    for f in futures:
                        f.cancel()
                    break
    order = {retain: i for i, retain in enumerate(plan)}
    out.attempts.sort(key=lambda a: order[a.retain])
    out.control_outcome = control.summary["outcome"]
    out.control_matches = same_execution(control.summary, baseline) and out.all_controls_match
    return out
