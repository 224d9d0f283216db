"""Run a replay: budget, policy, interventions in; a `RunResult` out.

The driver runs the kernel in slices, hands buffered events to observers
between slices, enforces the wall-clock timeout and assembles the summary.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from .. import validate
from ..errors import OptionError, PolicyError
from ..trace.program import CMD_PIN, Program, op_label
from . import compiled
from . import layout as L
from .baseline import Baseline, baseline, budget_for_ratio
from .features import N_FEATURES
from .frontier import Frontier, build_frontier
from .graph import KernelGraph, kernel_graph, request_bytes
from .hooks import (
    N_CANDIDATE_COLUMNS,
    N_EVENT_COLUMNS,
    N_EVENT_FLOAT_COLUMNS,
    CandidateBatch,
    EventBatch,
    Observer,
)
from .policies import Policy, get_policy
from .score_watch import ScoreWatch
from .state import Extremes, MachineState, grow_arena
from .summary import MaxPinned, OomInfo, RunSummary, distinct_count, victims_sha256

if TYPE_CHECKING:
    from .prefixes import PrefixCache

DEFAULT_THRASH_FACTOR = 60.0
SLICE_STEPS = 1 << 18
TIMED_SLICE_STEPS = 1 << 12  # with a timeout, look at the wall clock more often
EVENT_CAPACITY = 1 << 16


STRICT_INVARIANTS_ENV = "DTRF_STRICT_INVARIANTS"
CHECKED_SLICE_STEPS = 64   # with the regions' debug pass on, it runs this often


class InterventionError(OptionError):
    """An intervention that cannot apply to this trace or run."""


class InvariantError(RuntimeError):
    """A run broke an invariant of semantics.md §13 while strict checking is on."""


@dataclass(frozen=True)
class Interventions:
    """What-if changes to the policy's choices (issue: interventions).

    retain: storages never offered as victims (within `retain_ops`, an inclusive
    window of top-level op ids, when given). forbid/force: (storage, decision
    index) pairs excluding a storage from / imposing it at one decision.
    control: run the exclusion check on every candidate of every decision and
    exclude nothing (semantics.md §14); it must reproduce the plain run.
    """

    retain: tuple[int, ...] = ()
    retain_ops: tuple[int, int] | None = None
    forbid: tuple[tuple[int, int], ...] = ()
    force: tuple[tuple[int, int], ...] = ()
    control: bool = False

    def is_empty(self) -> bool:
        return not (self.retain or self.forbid or self.force)

    def to_json(self) -> dict:
        return {"retain": list(self.retain),
                "retain_ops": list(self.retain_ops) if self.retain_ops else None,
                "forbid": [list(x) for x in self.forbid],
                "force": [list(x) for x in self.force], "control": self.control}

    def validate(self, program: Program) -> None:
        if self.control and not self.is_empty():
            raise InterventionError("a control changes nothing: give it no retain, forbid "
                                    "or force")
        named = list(self.retain) + [x[0] for x in self.forbid + self.force]
        storages = set(program.storage_ids().tolist()) if named else set()
        for s in named:
            if s not in storages:
                hint = ""
                if 0 <= s < program.n_tensors:
                    hint = f" (tensor {s} is a view of storage {int(program.tensor_storage[s])})"
                raise InterventionError(f"{s} is not a storage id of trace {program.name}{hint}")
        for _, k in self.forbid + self.force:
            if not 0 <= k <= validate.MAX_INT:
                raise InterventionError(f"decision index must be between 0 and "
                                        f"{validate.MAX_INT:,}, got {k:,}")
        if self.retain_ops is not None:
            try:
                validate.op_window(self.retain_ops, program.n_ops, "retain-ops window")
            except OptionError as exc:
                raise InterventionError(str(exc)) from None

    def arrays(self, n: int):
        """The kernel's (retain, window, forbid, force) arrays. A control marks
        every storage retained within an empty op window and lists a forbid
        and a force at a decision that never comes: every check runs, none
        excludes."""
        if self.control:
            never = np.array([[-1, -1]], dtype=np.int64)
            return (np.ones(n, dtype=np.int64), np.array([1, 0], dtype=np.int64), never,
                    never.copy())
        retain = np.zeros(n, dtype=np.int64)
        retain[list(self.retain)] = 1
        window = np.array(self.retain_ops or (np.iinfo(np.int64).min, np.iinfo(np.int64).max),
                          dtype=np.int64)
        as_pairs = lambda xs: np.array([(k, s) for s, k in xs], dtype=np.int64).reshape(-1, 2)  # noqa: E731
        return retain, window, as_pairs(self.forbid), as_pairs(self.force)


NO_INTERVENTIONS = Interventions()


@dataclass(frozen=True)
class ReplayContext:
    """What a run is: observers receive it in `on_start`."""

    program: Program
    budget: int
    ratio: float | None
    policy: Policy
    interventions: Interventions
    remat_limit: int
    timeout: float | None


@dataclass
class RunResult:
    summary: RunSummary
    stream: np.ndarray                 # (n, 4): kind (0 pressure, 1 dead), storage, op id, clock
    frontier: Frontier | None = None
    state: MachineState | None = field(default=None, repr=False)
    arena_reruns: int = 0    # times one step outgrew the arena and the run started again

    @property
    def victims(self) -> np.ndarray:
        """Pressure victims in order: (storage, op id, clock)."""
        pressure = self.stream[self.stream[:, L.STREAM_KIND] == L.STREAM_PRESSURE]
        return pressure[:, [L.STREAM_STORAGE, L.STREAM_OP, L.STREAM_CLOCK]]


def prepared(program: Program) -> tuple[KernelGraph, Baseline]:
    """Kernel graph and baseline of a program, computed once and kept on it."""
    cache = program._index
    if "kernel_graph" not in cache:
        cache["kernel_graph"] = kernel_graph(program)
        cache["baseline"] = baseline(program)
    return cache["kernel_graph"], cache["baseline"]


def resolve_budget(program: Program, budget: int | None, ratio: float | None) -> tuple[int, float | None]:
    validate.budget_or_ratio(budget, ratio, "budget (bytes) or ratio")
    if budget is not None:
        return validate.budget(budget, "budget", minimum=0), None
    peak = prepared(program)[1].peak
    return budget_for_ratio(validate.ratio(ratio, "budget ratio", peak), peak), float(ratio)


def replay(program: Program, *, budget: int | None = None, ratio: float | None = None,
           policy: str | Policy = "dtr", observers: tuple[Observer, ...] | list = (),
           timeout: float | None = None, interventions: Interventions | None = None,
           thrash_factor: float = DEFAULT_THRASH_FACTOR, keep_state: bool = False,
           debug: bool = False, prefixes: PrefixCache | None = None,
           arena_size: int | None = None) -> RunResult:
    """Replay `program` under a budget exactly as the reference simulator.

    The invariants of semantics.md §13 are checked at the end of the run, and
    with `debug` at every allocation check too; the summary counts breaches as
    `anomalies`. With the environment variable DTRF_STRICT_INVARIANTS=1 (the
    test suite sets it) a run with anomalies raises `InvariantError`.

    With `prefixes` and no observers, the run starts from the furthest
    snapshot of an earlier run that its budget admits, ends early when it
    meets that run again, and leaves snapshots and checkpoints of its own
    (engine/prefixes.py); the result is the same as from op 0.

    The run proceeds in phases: setup, slices of kernel steps (each followed by
    a drain of the buffers the kernel filled), finish. With the environment
    variable DTRF_CHECK_REGIONS=1, the neighbourhoods' debug pass
    (engine/regions.py `check`) runs after every few steps. The neighbourhood arena
    (`arena_size` slots at first; a default fits the trace) grows between
    slices; when one step needs more than the room left, the run starts again
    with an arena twice as large, and observers see each event once.
    """
    run = _setup(program, budget, ratio, policy, observers, timeout, interventions,
                 thrash_factor, debug)
    for obs in run.observers:
        obs.on_start(run.ctx)
    sharing = _sharing(run, prefixes, keep_state)
    feed = _Feed(run.observers)
    reruns = 0
    while True:
        try:
            result = _attempt(run, sharing, feed, keep_state, arena_size)
        except _ArenaFull as full:
            arena_size, reruns = 2 * full.size, reruns + 1
            continue
        result.arena_reruns = reruns
        return result


class _ArenaFull(Exception):
    """One step needed more neighbourhood arena than was left (STATUS_ARENA_FULL)."""

    def __init__(self, size: int):
        super().__init__(size)
        self.size = size


@dataclass
class _Run:
    """What the setup phase makes: the run's context and the kernel's arguments
    that stay the same from slice to slice."""

    ctx: ReplayContext
    graph: KernelGraph
    base: Baseline
    observers: tuple[Observer, ...]
    started: float
    debug: bool
    slice_steps: int
    buffers: L.Buffers       # what observers receive, and the rows one step may write
    interventions: L.Exclusions
    params: np.ndarray      # the policy's (policies.P_*)
    from_file: L.FromFile   # a policy from a file's score, locked storages, probe
    watch: ScoreWatch
    check_regions: Callable | None = None   # regions.check, when DTRF_CHECK_REGIONS=1

    @property
    def emit(self) -> bool:
        return bool(self.observers)

    @property
    def emit_cands(self) -> bool:
        return any(o.wants_candidates for o in self.observers)

    @property
    def probe(self) -> np.ndarray:
        return self.from_file.probe

    def run_slice(self, state: MachineState, steps: int) -> int:
        """Up to `steps` kernel steps from `state`; the kernel's status."""
        return self.watch.call(
            compiled.run_slice,
            self.graph, self.params, state.sc, state.st, state.frames,
            state.pending, state.scratch, state.mark, state.regions, state.stream,
            self.buffers, self.interventions, self.from_file, steps)


def _setup(program, budget, ratio, policy, observers, timeout, interventions, thrash_factor,
           debug) -> _Run:
    """The setup phase: options checked, the context and the kernel's buffers."""
    compiled.prepare(replay)   # a compile (first use) before the clock: no timeout counts it
    started = time.perf_counter()
    graph, base = prepared(program)
    budget, ratio = resolve_budget(program, budget, ratio)
    policy = policy if isinstance(policy, Policy) else get_policy(policy)
    interventions = interventions or Interventions()
    interventions.validate(program)
    timeout = validate.timeout(timeout, "timeout", zero_ok=True)
    thrash_factor = validate.thrash_limit(thrash_factor, base.model_compute, "thrash limit")
    remat_limit = int((thrash_factor - 1.0) * base.model_compute)
    ctx = ReplayContext(program, budget, ratio, policy, interventions, remat_limit, timeout)
    observers = tuple(observers)
    n = program.n_tensors
    emit = bool(observers)
    emit_cands = any(o.wants_candidates for o in observers)
    ev_cap = EVENT_CAPACITY if emit else 1
    cand_cap = max(EVENT_CAPACITY, 4 * (n + 8)) if emit_cands else 1
    check_regions = None
    if os.environ.get(L.CHECK_REGIONS_ENV) == "1":
        from .regions import check as check_regions  # numba: only a checked run imports it
    built_in = policy.custom is None
    plain = interventions == NO_INTERVENTIONS
    rooms = (int(graph.op_n_outputs.max()) + 8, n + 8)
    return _Run(
        ctx=ctx, graph=graph, base=base, observers=observers, started=started, debug=debug,
        slice_steps=(CHECKED_SLICE_STEPS if check_regions else
                     SLICE_STEPS if timeout is None else TIMED_SLICE_STEPS),
        buffers=(_shared(("buffers",), _buffers, 1, 1, (0, 0)) if not emit
                 else _buffers(ev_cap, cand_cap, rooms)),
        interventions=(_shared(("interventions", n), _exclusions, interventions, n) if plain
                       else _exclusions(interventions, n)),
        params=_shared(("params", policy), policy.params) if built_in else policy.params(),
        from_file=(_shared(("from file",), _from_file, policy, program) if built_in
                   else _from_file(policy, program)),
        watch=ScoreWatch.for_policy(policy, started, timeout), check_regions=check_regions)


# Arrays the kernel only reads, alike for every run of a built-in policy without
# interventions or observers (dummy event buffers, no interventions, the
# policy's parameters, no locked storages, an unused probe): made once per
# process, so that the native entry point finds the same objects and keeps
# them packed (engine/native.py).
_SHARED: dict = {}
os.register_at_fork(after_in_child=_SHARED.clear)


def _shared(key: tuple, make, *args):
    value = _SHARED.get(key)
    if value is None:
        value = _SHARED[key] = make(*args)
    return value


def _buffers(ev_cap: int, cand_cap: int, rooms: tuple[int, int]) -> L.Buffers:
    """Event ints, event floats, candidate ints, candidate scores; the rooms
    (which only a run with observers reads)."""
    return L.Buffers(np.zeros((ev_cap, N_EVENT_COLUMNS), dtype=np.int64),
                     np.zeros((ev_cap, N_EVENT_FLOAT_COLUMNS), dtype=np.float64),
                     np.zeros((cand_cap, N_CANDIDATE_COLUMNS), dtype=np.int64),
                     np.zeros(cand_cap, dtype=np.float64), *rooms)


def _exclusions(interventions: Interventions, n: int) -> L.Exclusions:
    return L.Exclusions(*interventions.arrays(n))


def _from_file(policy: Policy, program: Program) -> L.FromFile:
    return L.FromFile(policy.score_address(), policy.locked_mask(program),
                      np.zeros(N_FEATURES, dtype=np.int64))


class NoSharing:
    """Prefix sharing's default strategy: every run starts at op 0 and runs to
    its end alone. `engine.prefixes.PrefixSharing` is the one that shares."""

    cuts_slices = False   # whether slices end early (then the clock is read by steps run)
    recycles_state = True  # a finished run's state is referred to by nothing the run leaves

    def begin(self, graph: KernelGraph, budget: int, remat_limit: int,
              arena_size: int | None) -> tuple[MachineState, list]:
        """The state the run starts from and the eviction stream it carries."""
        return MachineState.new(graph, budget, remat_limit, arena_size=arena_size), []

    def slice_limit(self, sc: np.ndarray, steps: int) -> int:
        return steps

    def after_slice(self, state: MachineState, stream_chunks: list):
        """The rest of the run taken from another run, or None."""
        return None

    def finish(self, state, stream, frontier, status, complete) -> None:
        """The run ended on its own (not spliced)."""

    def finished(self, sc: np.ndarray, spliced) -> None:
        """The run ended, either way."""


def _sharing(run: _Run, prefixes: PrefixCache | None, keep_state: bool):
    """The prefix sharing strategy: with a cache, only for unobserved runs."""
    if prefixes is None or run.observers:
        return NoSharing()
    from .prefixes import PrefixSharing  # numba-compiled digests: only sweeps import them
    ctx = run.ctx
    custom = ctx.policy.custom
    can_splice = not (keep_state or ctx.interventions.forbid or ctx.interventions.force
                      or (custom is not None and custom.reads_history))
    family = _family(ctx.program, ctx.policy, ctx.interventions, ctx.remat_limit)
    return PrefixSharing(prefixes, family, run.graph.sched_kind, can_splice)


class _Feed:
    """The drain of buffered events and candidates to observers, each handed
    over once: a run started again with a larger arena makes the same events
    again, and those already handed over are skipped."""

    def __init__(self, observers: tuple[Observer, ...]):
        self.observers = observers
        self.cand_observers = tuple(o for o in observers if o.wants_candidates)
        self.handed = [0, 0]   # events, candidates given to observers so far
        self.made = [0, 0]     # events, candidates this attempt made so far

    def restart(self) -> None:
        self.made = [0, 0]

    def _fresh(self, kind: int, n: int) -> int:
        """How many of the n rows just made were handed over before (a rerun's)."""
        skip = min(n, max(0, self.handed[kind] - self.made[kind]))
        self.made[kind] += n
        self.handed[kind] = max(self.handed[kind], self.made[kind])
        return skip

    def drain(self, sc: np.ndarray, buffers: L.Buffers) -> None:
        ev, evf, cand, candf = buffers.ev, buffers.evf, buffers.cand, buffers.candf
        n_ev = int(sc[L.S_N_EVENTS])
        if n_ev:
            skip = self._fresh(0, n_ev)
            if skip < n_ev:
                batch = EventBatch(self.made[0] - n_ev + skip, ev[skip:n_ev], evf[skip:n_ev])
                for obs in self.observers:
                    obs.on_events(batch)
            sc[L.S_N_EVENTS] = 0
        n_c = int(sc[L.S_N_CANDS])
        if n_c:
            skip = self._fresh(1, n_c)
            if skip < n_c:
                cbatch = CandidateBatch(cand[skip:n_c], candf[skip:n_c])
                for obs in self.cand_observers:
                    obs.on_candidates(cbatch)
            sc[L.S_N_CANDS] = 0


def _attempt(run: _Run, sharing, feed: _Feed, keep_state: bool,
             arena_size: int | None) -> RunResult:
    """One run from the start: slices until the end, then the finish phase."""
    ctx = run.ctx
    state, stream_chunks = sharing.begin(run.graph, ctx.budget, ctx.remat_limit, arena_size)
    state.sc[L.S_EMIT] = run.emit
    state.sc[L.S_EMIT_CANDS] = run.emit_cands
    state.sc[L.S_DEBUG] = run.debug
    feed.restart()
    status, timed_out, spliced = _slices(run, state, stream_chunks, sharing, feed)
    return _finish(run, state, stream_chunks, sharing, status, timed_out, spliced, keep_state)


def _slices(run: _Run, state: MachineState, stream_chunks: list, sharing, feed: _Feed):
    """The slice phase: kernel slices, each followed by a drain, until the run
    ends, times out or is spliced; returns (status, timed out, splice)."""
    timeout = run.ctx.timeout
    unclocked = 0  # steps since the wall clock was last looked at
    while True:
        steps = sharing.slice_limit(state.sc, run.slice_steps)
        before_steps = int(state.sc[L.S_STEPS])
        status = run.run_slice(state, steps)
        timed_out = run.watch.stopped       # a loop of the score stopped at the deadline
        if status == L.STATUS_POLICY_FAULT and not timed_out:
            op = int(state.sc[L.S_CUR_OP])
            raise PolicyError(run.ctx.policy.custom.describe_fault(
                run.probe, op_label(op, run.ctx.program.op_name(op))))
        if status == L.STATUS_ARENA_FULL and not timed_out:
            raise _ArenaFull(len(state.regions.arena))
        _drain(state, stream_chunks)
        if run.check_regions is not None:
            run.check_regions(state.regions, state.sc)
        if run.observers:
            feed.drain(state.sc, run.buffers)
        if status != L.STATUS_RUNNING or timed_out:
            return status, timed_out, None
        spliced = sharing.after_slice(state, stream_chunks)
        if spliced is not None:
            return spliced.status, False, spliced
        # slices cut short for sharing look at the clock as often as whole ones
        unclocked += int(state.sc[L.S_STEPS]) - before_steps
        if timeout is not None and (not sharing.cuts_slices or unclocked >= run.slice_steps):
            unclocked = 0
            if time.perf_counter() - run.started > timeout:
                return status, True, None


def _drain(state: MachineState, stream_chunks: list) -> None:
    """Room for the next slice: the arena compacted or grown, the eviction
    stream's full buffer moved out."""
    if state.sc[L.S_ARENA_TOP] * 4 > len(state.regions.arena) * 3:
        state.regions = grow_arena(state.regions, state.sc)
    if state.sc[L.S_N_STREAM] >= len(state.stream):
        stream_chunks.append(state.stream.copy())
        state.sc[L.S_N_STREAM] = 0


def _finish(run: _Run, state: MachineState, stream_chunks: list, sharing, status: int,
            timed_out: bool, spliced, keep_state: bool) -> RunResult:
    """The finish phase: the stream, the OOM frontier, the invariants, the summary."""
    ctx = run.ctx
    if spliced is not None:
        sc, stream, frontier = spliced.sc, spliced.stream, spliced.frontier
    else:
        sc = state.sc
        stream_chunks.append(state.stream[:int(sc[L.S_N_STREAM])].copy())
        stream = np.concatenate(stream_chunks)
        frontier = None
        if status == L.STATUS_OOM and not timed_out:
            frontier = _oom_frontier(ctx.program, run.graph, state)
            for obs in run.observers:
                obs.on_oom(frontier)
        compiled.check_invariants(run.graph, sc, state.st)  # a spliced run's rest was checked in its donor
        sharing.finish(state, stream, frontier, status, complete=not timed_out)
    sharing.finished(sc, spliced)
    summary = _summarize(ctx.program, run.base, ctx, sc, status, timed_out, stream, frontier,
                         time.perf_counter() - run.started)
    if summary.anomalies and os.environ.get(STRICT_INVARIANTS_ENV) == "1":
        raise InvariantError(f"{ctx.program.name} at budget {ctx.budget} ({ctx.policy.name}): "
                             f"{summary.anomalies} broken invariants (semantics.md §13)")
    for obs in run.observers:
        obs.on_finish(summary)
    if keep_state:
        return RunResult(summary, stream, frontier, state)
    if sharing.recycles_state:
        state.recycle()
    return RunResult(summary, stream, frontier, None)


def _oom_frontier(program: Program, graph: KernelGraph, state: MachineState) -> Frontier:
    """The frontier of the failed allocation (the innermost frame's tensor)."""
    depth = int(state.sc[L.S_DEPTH])
    failing = int(state.frames[L.FR_TENSOR, depth - 1])
    return build_frontier(program, state, int(request_bytes(graph, failing)))


def _family(program: Program, policy: Policy, interventions: Interventions,
            remat_limit: int) -> tuple:
    """What runs sharing prefixes must have in common: everything but the budget."""
    return (program.sha256, policy.identity(), interventions, remat_limit)


def _summarize(program, base, ctx, sc, status, timed_out, stream, frontier, seconds):
    outcome = "timeout" if timed_out else {
        L.STATUS_DONE: "ok", L.STATUS_OOM: "oom", L.STATUS_THRASHED: "thrashed",
        L.STATUS_FORCE_FAILED: "error"}[int(status)]
    error = None
    if outcome == "error":
        forced = [f"storage {s} at decision {k}" for s, k in ctx.interventions.force]
        error = (f"forced victim is not a candidate at decision {int(sc[L.S_EVICTIONS])} "
                 f"({'; '.join(forced)})")
    pressure = stream[stream[:, L.STREAM_KIND] == L.STREAM_PRESSURE][:, L.STREAM_STORAGE]
    remat = int(sc[L.S_REMAT_COMPUTE])
    oom = None
    if frontier is not None:
        last = frontier.levels[-1]
        oom = OomInfo(op_id=int(sc[L.S_CUR_OP]), tensor=last.tensor, tensor_id=last.tensor_id,
                      request=frontier.request, memory=frontier.memory,
                      pinned=frontier.pinned_bytes, depth=len(frontier.levels),
                      budget=ctx.budget, root_tensor=frontier.levels[0].tensor,
                      final_pins=_in_pins(program, int(sc[L.S_CMD_POS]) - 1))
    max_pinned = MaxPinned(int(sc[L.S_MAXPIN_BYTES]), int(sc[L.S_MAXPIN_DEPTH]),
                           int(sc[L.S_MAXPIN_OP]))
    return RunSummary(
        trace=program.name, trace_sha256=program.sha256, policy=ctx.policy.name,
        ratio=ctx.ratio, budget=ctx.budget, peak=base.peak, model_compute=base.model_compute,
        outcome=outcome, clock=int(sc[L.S_CLOCK]), remat_compute=remat,
        overhead=(base.model_compute + remat) / base.model_compute if base.model_compute else None,
        evictions=int(sc[L.S_EVICTIONS]), dead_frees=int(sc[L.S_DEAD]),
        distinct_evicted=distinct_count(pressure),
        stream_distinct=distinct_count(stream[:, L.STREAM_STORAGE]),
        remats=int(sc[L.S_REMATS]), collateral_remats=int(sc[L.S_COLLATERAL]),
        max_depth=int(sc[L.S_MAX_DEPTH]), max_pinned=max_pinned, oom=oom,
        victims_sha256=victims_sha256(pressure),
        budget_interval=Extremes.read(sc).interval.pair(),
        ops_done=int(sc[L.S_CUR_OP]) + 1, peak_memory=int(sc[L.S_PEAK]),
        score_evals=int(sc[L.S_SCORE_EVALS]), wall_seconds=seconds,
        interventions=ctx.interventions.to_json(), error=error,
        anomalies=int(sc[L.S_ANOMALIES]), exclusion_checks=int(sc[L.S_EXCLUSION_CHECKS]),
        frontier_misses=int(sc[L.S_FRONTIER_MISSES]), note=_no_candidate_note(ctx, sc))


def _in_pins(program: Program, command: int) -> bool:
    """Whether schedule command `command` (the one running: S_CMD_POS is already the
    next) is a pin that rebuilds what it pins: one of the final pins (§2.3) or a PIN
    line (§2.2), where the current op id stays the last computed op's. (A constant's
    own pin never allocates.)"""
    return 0 <= command < len(program.sched_kind) and int(program.sched_kind[command]) == CMD_PIN


def _no_candidate_note(ctx, sc) -> str | None:
    decision = int(sc[L.S_NO_CANDIDATE])
    if decision < 0:
        return None
    return (f"out of memory because policy {ctx.policy.name}'s filters (min_size, locked) left "
            f"no candidate at decision {decision}, with storages still in the pool")
