"""Hindsight search: which single change turns a failing run into a completion.

Two kinds of change are tried (their candidates: `explain_candidates.py`):
retaining storages the failing frontier needed (never offered as victims), and
forcing one different victim at one decision. The attempt budget goes
breadth-first, every single change before any combination, in this order:

1. the forced victims at the first divergent choice against a nearby
   completing budget (that run's victim, then the failing run's runner-up);
2. retentions (latest eviction first) and forced runner-ups along the failing
   run's last decisions (latest first), alternately;
3. retained pairs, then triples... up to `max_combo`, in candidate order.

Each attempt has a control (the same code path with nothing changed, which
must reproduce the failure), and the result counts what was not tried. A
change that completes is evidence about the cause of the failure, not a
policy: it uses knowledge of the future.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..concepts import OOM, TIMEOUT, completes
from ..engine.replay import Interventions, replay, resolve_budget
from ..trace.program import Program
from .explain_candidates import (
    ForcedVictim,
    NearbyCompletion,
    RetentionCandidate,
    forced_victims,
    frontier_candidates,
    nearby_completion,
)
from .interventions import ComparedRun, run_once, same_execution

if TYPE_CHECKING:   # its digests import numba: only a search that shares imports it
    from .explain_snapshots import ResumePoints

CAVEAT = ("A hindsight change is evidence about what caused the failure, not a policy: "
          "choosing it needs knowledge of the run's future.")
KINDS = ("retain", "force_victim")
DIGESTS = "dtrforensics.engine.digest"   # loaded: an unasked search shares
ORDER = ("forced victims at the first divergent choice",
         "retentions and forced runner-ups at the last decisions, alternately",
         "retained combinations, smallest first")


@dataclass(frozen=True)
class Change:
    """One counterfactual: a retained set of storages, or one forced victim
    (storage, decision). `evicted_at_op`: the op of each eviction it undoes in
    the failing run."""

    retain: tuple[int, ...] = ()
    force: tuple[int, int] | None = None
    evicted_at_op: tuple[int, ...] = ()

    @property
    def kind(self) -> str:
        return "force_victim" if self.force else "retain"

    @property
    def size(self) -> int:
        return 1 if self.force else len(self.retain)

    def interventions(self) -> Interventions:
        return (Interventions(force=(self.force,)) if self.force
                else Interventions(retain=self.retain))

    def args(self) -> list[str]:
        """The `dtrf intervene` flags that make this change."""
        if self.force:
            return ["--force-victim", "{}@{}".format(*self.force)]
        return ["--retain", ",".join(map(str, self.retain))]


@dataclass(frozen=True)
class Attempt:
    """One change's run. `resumed`: it started from one of the failing run's
    snapshots, not op 0 (how, not what: left out of the JSON)."""

    change: Change
    summary: dict
    control_matches: bool
    recording: str | None
    resumed: bool = False

    @property
    def retain(self) -> tuple[int, ...]:
        return self.change.retain

    @property
    def kind(self) -> str:
        return self.change.kind

    @property
    def args(self) -> list[str]:
        return self.change.args()

    @property
    def fixes(self) -> bool:
        return completes(self.summary["outcome"])

    def to_json(self) -> dict:
        s, c = self.summary, self.change
        return {"kind": c.kind, "args": c.args(), "retain": list(c.retain),
                "force": list(c.force) if c.force else None,
                "evicted_at_op": list(c.evicted_at_op), "outcome": s["outcome"],
                "overhead": s["overhead"], "max_depth": s["max_depth"],
                "max_pinned": s["max_pinned"]["bytes"],
                "max_pinned_depth": s["max_pinned"]["depth"], "error": s.get("error"),
                "control_matches": self.control_matches, "recording": self.recording}


@dataclass(frozen=True)
class SearchRound:
    """Changes of one kind and size: how many exist and how many were tried."""

    kind: str
    size: int
    candidates: int
    tried: int

    @property
    def untried(self) -> int:
        return self.candidates - self.tried

    def to_json(self) -> dict:
        return {"kind": self.kind, "size": self.size, "candidates": self.candidates,
                "tried": self.tried, "untried": self.untried}


@dataclass
class Explanation:
    baseline: dict
    candidates: list[RetentionCandidate]
    forced: list[ForcedVictim] = field(default_factory=list)
    nearby: NearbyCompletion | None = None
    attempts: list[Attempt] = field(default_factory=list)
    rounds: list[SearchRound] = field(default_factory=list)
    max_attempts: int | None = None
    stopped: str = "exhausted"  # everything tried; or "max_attempts", "first" (enough fixes)
    control_outcome: str | None = None
    control_matches: bool | None = None
    note: str = CAVEAT
    # storage -> where its maker ran ({module, phase, source}), for every storage the
    # search names; empty for a log without a where-file (docs/torch.md)
    where: dict[int, dict] = field(default_factory=dict)
    failing_module: str | None = None     # the module of the failing allocation's op

    def modules_of(self, change: Change) -> list[str | None]:
        """The module of each storage a change retains (or forces), in order."""
        storages = [change.force[0]] if change.force else list(change.retain)
        return [self.where.get(s, {}).get("module") for s in storages]

    @property
    def fixes(self) -> list[Attempt]:
        return [a for a in self.attempts if a.fixes]

    @property
    def all_controls_match(self) -> bool:
        return all(a.control_matches for a in self.attempts)

    @property
    def singles_untried(self) -> int:
        return sum(r.untried for r in self.rounds if r.size == 1)

    @property
    def combinations_untried(self) -> int:
        return sum(r.untried for r in self.rounds if r.size > 1)

    def to_json(self) -> dict:
        module = lambda s: self.where.get(s, {}).get("module")  # noqa: E731
        return {"baseline": self.baseline,
                "candidates": [{**c.__dict__, "module": module(c.storage)}
                               for c in self.candidates],
                "forced_victims": [{**f.__dict__, "module": module(f.storage),
                                    "instead_of_module": module(f.instead_of)}
                                   for f in self.forced],
                "nearby_completion": self.nearby.to_json() if self.nearby else None,
                "fixes": [{**a.to_json(), "modules": self.modules_of(a.change)}
                          for a in self.fixes], "tried": len(self.attempts),
                "untried": {"singles": self.singles_untried,
                            "combinations": self.combinations_untried},
                "search": {"order": list(ORDER), "max_attempts": self.max_attempts,
                           "stopped": self.stopped,
                           "rounds": [r.to_json() for r in self.rounds]},
                "attempts": [{**a.to_json(), "modules": self.modules_of(a.change)}
                             for a in self.attempts],
                "control": self.control_outcome, "control_matches": self.control_matches,
                "where": {str(k): v for k, v in sorted(self.where.items())},
                "failing_module": self.failing_module,
                "note": self.note}


def search_order(candidates: list[RetentionCandidate], forced: list[ForcedVictim],
                 kinds: tuple[str, ...], max_combo: int) -> Iterator[Change]:
    """Every change of the search, in the order of the module doc."""
    retain = [Change(retain=(c.storage,), evicted_at_op=(c.last_evicted_op,))
              for c in candidates] if "retain" in kinds else []
    force = {src: [Change(force=(f.storage, f.decision), evicted_at_op=(f.op_id,))
                   for f in forced if f.source == src] if "force_victim" in kinds else []
             for src in ("divergent_choice", "last_decisions")}
    yield from force["divergent_choice"]
    for pair in itertools.zip_longest(retain, force["last_decisions"]):
        yield from (c for c in pair if c is not None)
    if "retain" not in kinds:
        return
    evicted = {c.storage: c.last_evicted_op for c in candidates}
    for size in range(2, min(max_combo, len(evicted)) + 1):   # no larger set exists
        for combo in itertools.combinations(list(evicted), size):
            kept = tuple(sorted(combo))
            yield Change(retain=kept, evicted_at_op=tuple(evicted[s] for s in kept))


def search_rounds(candidates: list, forced: list, kinds: tuple[str, ...], max_combo: int,
                  attempts: list[Attempt]) -> list[SearchRound]:
    """How many changes of each kind and size exist, and how many were tried."""
    sizes = range(1, max(1, min(max_combo, len(candidates))) + 1)   # no larger set exists
    exist = [("retain", size, math.comb(len(candidates), size))
             for size in sizes] if "retain" in kinds else []
    if "force_victim" in kinds:
        exist.insert(min(1, len(exist)), ("force_victim", 1, len(forced)))
    tried = [(a.kind, a.change.size) for a in attempts]
    return [SearchRound(kind, size, n, tried.count((kind, size))) for kind, size, n in exist]


# --- one search's state: made per search, in each process that runs its attempts ----


@dataclass
class _Search:
    """What one search's attempts share in one process: the program, the
    failing run's resume points (None: from op 0) and, once made, the
    attempts' control. It lives as long as the search (a worker process, as
    long as the search's pool), so nothing leaks into the next search."""

    program: Program
    resume: ResumePoints | None = None
    control: ComparedRun | None = None


_WORKER: list[_Search] = []   # in a worker process: its search (set by the initializer)
# Worker processes start the same way on every platform, from a clean process
# (never a fork of this one, whose threads may hold locks): forkserver, or
# spawn where there is none. What they need comes through the initializer.
START_METHOD = ("forkserver" if "forkserver" in multiprocessing.get_all_start_methods()
                else "spawn")
# About what starting the workers of one search costs (the fork server's
# imports and compiled code, then each worker's program and snapshots): 1.4 to
# 1.8 s of wall time measured on two loaded cores, one-shot `dtrf explain`.
WORKER_START_SECONDS = 2.0


def _worker_context() -> multiprocessing.context.BaseContext:
    """The pool's start method. The fork server imports the search's modules
    and loads the compiled code once per process (explain_preload.py), so
    the workers of every search start ready."""
    context = multiprocessing.get_context(START_METHOD)
    if START_METHOD == "forkserver":   # no effect once this process's server runs
        context.set_forkserver_preload([__name__, f"{__package__}.explain_preload"])
    return context


def _start_workers_server() -> None:
    """Start the fork server now, so that it imports and loads in parallel with
    this process's first runs, not after them."""
    _worker_context()
    if START_METHOD == "forkserver":
        from multiprocessing import forkserver
        forkserver.ensure_running()


def _init_worker(source: str, name: str, resume: ResumePoints | None,
                 control: ComparedRun | None) -> None:
    _die_with_search()
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the search's: it stops us
    from ..trace.cache import load_program
    _WORKER[:] = [_Search(load_program(source, name), resume, control)]


def _die_with_search() -> None:
    """End this worker when the process that asked for it does, even by kill -9:
    a fork server's children keep the server alive, and they would otherwise
    wait for attempts for ever."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)
    threading.Thread(target=watch, name="dtrf-search-watch", daemon=True).start()


def _run(search: _Search, interventions: Interventions, record_root: Path | None,
         **common) -> tuple[ComparedRun, bool]:
    """One run of the search, resumed from the failing run's snapshots when
    the search holds them; whether it was."""
    resume = search.resume
    if resume is None:
        return run_once(search.program, interventions=interventions, record_root=record_root,
                        **common), False
    resume.expect(interventions)
    before = resume.resumed
    run = run_once(search.program, interventions=interventions, record_root=record_root,
                   prefixes=resume, **common)
    return run, resume.resumed > before


def _attempt(search: _Search, change: Change, budget: int, ratio: float | None,
             policy: str, record_root: Path | None, timeout: float | None,
             baseline: dict) -> Attempt:
    common = dict(budget=budget, ratio=ratio, policy=policy, timeout=timeout)
    if search.control is None:   # one control per search in each process
        search.control = _run(search, Interventions(control=True), None, **common)[0]
    run, resumed = _run(search, change.interventions(), record_root, **common)
    return Attempt(change, run.summary, same_execution(search.control.summary, baseline),
                   str(run.recording) if run.recording else None, resumed)


def _attempt_in_worker(*args) -> Attempt:
    return _attempt(_WORKER[0], *args)


def explain(program: Program, *, ratio: float | None = None, budget: int | None = None,
            policy: str = "dtr", max_attempts: int = 32, max_combo: int = 2,
            last_decisions: int = 16, kinds: tuple[str, ...] = KINDS,
            timeout: float | None = None, jobs: int | None = None,
            record_root: Path | None = Path("recordings") / "explain",
            stop_after_fixes: int | None = None,
            on_attempt: Callable[[Attempt, int, int], None] | None = None,
            share: bool | None = None) -> Explanation:
    """Search changes that make a failing run complete (see module doc);
    `kinds` limits the search to retentions or forced victims. With `share`,
    the probes and unrecorded runs start from the failing run's snapshots
    (explain_snapshots.py) instead of op 0: the same result, sooner. None:
    when that pays (`_resume_points`). Unless `share` is False, an unrecorded
    control is made once (it is the attempts' control too)."""
    unknown = set(kinds) - set(KINDS)
    if unknown or not kinds:
        raise ValueError(f"kinds are among {', '.join(KINDS)}, got {', '.join(kinds) or 'none'}")
    if min(max_attempts, max_combo) < 1:
        raise ValueError(f"max_attempts and max_combo are at least 1, got {max_attempts} "
                         f"and {max_combo}")
    budget, ratio = resolve_budget(program, budget, ratio)
    if jobs is not None and jobs > 1 and max_attempts > 1:
        _start_workers_server()   # it loads while the failing run replays here
    shared = _resume_points(share, record_root is not None)
    failing = replay(program, budget=budget, policy=policy, timeout=timeout, prefixes=shared)
    baseline = failing.summary.to_json()
    out = Explanation(baseline=baseline, candidates=frontier_candidates(program, failing),
                      max_attempts=max_attempts)
    if failing.summary.outcome != OOM:
        return out
    rerun_matches = True
    if "force_victim" in kinds:
        completing, probes = nearby_completion(program, failing, policy=policy, timeout=timeout,
                                               prefixes=shared)
        out.forced, out.nearby, rerun_matches = forced_victims(
            program, failing, completing, policy=policy, timeout=timeout,
            last_decisions=last_decisions, probes=probes)
    order = search_order(out.candidates, out.forced, kinds, max_combo)
    plan = list(itertools.islice(order, min(max_attempts, sys.maxsize)))
    exhausted = next(order, None) is None
    search = _Search(program, shared)
    control = _run(search, Interventions(control=True), record_root, budget=budget,
                   ratio=ratio, policy=policy, timeout=timeout)[0]
    if share is not False and record_root is None and control.summary["outcome"] != TIMEOUT:
        search.control = control   # unrecorded, it is the attempts' control: made once
    args = [(change, budget, ratio, policy, record_root, timeout, baseline) for change in plan]
    jobs = _workers(jobs, len(plan), baseline["wall_seconds"])
    enough = _run_attempts(search, args, jobs, out, plan, stop_after_fixes, on_attempt)
    index = {change: i for i, change in enumerate(plan)}
    out.attempts.sort(key=lambda a: index[a.change])
    out.rounds = search_rounds(out.candidates, out.forced, kinds, max_combo, out.attempts)
    if len(out.attempts) < len(plan) or not exhausted:
        out.stopped = "first" if enough else "max_attempts"
    out.control_outcome = control.summary["outcome"]
    out.control_matches = (same_execution(control.summary, baseline) and rerun_matches
                           and out.all_controls_match)
    out.where = storage_where(program, out)
    out.failing_module = program.op_where(int(program.tensor_op[baseline["oom"]["tensor_id"]]))
    return out


def storage_where(program: Program, found: Explanation) -> dict[int, dict]:
    """Where the maker of each storage the search names ran (module, phase,
    source), from the log's where-file; empty without one."""
    if program.where is None:
        return {}
    named = {c.storage for c in found.candidates}
    named |= {s for f in found.forced for s in (f.storage, f.instead_of)}
    for a in found.attempts:
        named |= set(a.change.retain) | ({a.change.force[0]} if a.change.force else set())
    return {s: program.maker_where(s) for s in sorted(named)}


def _workers(jobs: int | None, attempts: int, failing_seconds: float) -> int:
    """Processes for the attempts: `jobs`; unset, every core once the attempts
    (about a failing run each) take longer than starting workers does."""
    if jobs is not None:
        return max(1, jobs)
    if attempts * failing_seconds < WORKER_START_SECONDS:
        return 1
    return os.cpu_count() or 1


def _resume_points(share: bool | None, recorded: bool) -> ResumePoints | None:
    """Where the search's runs resume from (None: from op 0). Unasked (`share`
    None), only for unrecorded attempts (a recorded one replays from op 0) in
    a process that has loaded the compiled state digests already (a sweep, an
    earlier search): their first load costs about 0.7 s of CPU, more than a
    search of short runs wins back, and long failing runs spend their time in
    the failing op, which the attempts replay anyway."""
    if share is False or (share is None and (recorded or DIGESTS not in sys.modules)):
        return None
    from .explain_snapshots import ResumePoints  # its digests import numba
    return ResumePoints()


def _run_attempts(search: _Search, args: list[tuple], jobs: int, out: Explanation,
                  plan: list[Change], stop_after_fixes: int | None,
                  on_attempt: Callable[[Attempt, int, int], None] | None) -> bool:
    """Every planned attempt, here or in worker processes, into `out.attempts`
    as they finish; whether enough fixes stopped the search."""

    def finish(attempt: Attempt) -> bool:
        out.attempts.append(attempt)
        if on_attempt:
            on_attempt(attempt, len(out.attempts), len(plan))
        return stop_after_fixes is not None and len(out.fixes) >= stop_after_fixes

    if jobs == 1 or len(plan) <= 1:
        return any(finish(_attempt(search, *a)) for a in args)
    # each worker gets the failing run's snapshots and the control, once
    resume = search.resume.portable() if search.resume is not None else None
    initargs = (search.program.source, search.program.name, resume, search.control)
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(plan)), mp_context=_worker_context(),
                               initializer=_init_worker, initargs=initargs)
    try:
        futures = [pool.submit(_attempt_in_worker, *a) for a in args]
        for future in as_completed(futures):
            if finish(future.result()):
                pool.shutdown(wait=True, cancel_futures=True)
                return True
    except BaseException:   # Ctrl-C, a failed attempt: the queued attempts are not run
        from ..sweep.backends import terminate_pool
        terminate_pool(pool)
        raise
    pool.shutdown()
    return False


