"""Run a replay: budget, policy, interventions in; a `RunResult` out.

The driver runs the kernel in slices, hands buffered events to observers
between slices, enforces the wall-clock timeout and assembles the summary.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .. import validate
from ..errors import OptionError
from ..trace.program import Program
from . import kernel as K
from .baseline import Baseline, baseline, budget_for_ratio
from .frontier import Frontier, build_frontier
from .graph import KernelGraph, kernel_graph
from .hooks import (
    N_CANDIDATE_COLUMNS, N_EVENT_COLUMNS, N_EVENT_FLOAT_COLUMNS, CandidateBatch, EventBatch,
    Observer,
)
from .policies import Policy, get_policy
from .state import MachineState, grow_arena
from .summary import MaxPinned, OomInfo, RunSummary, victims_sha256

DEFAULT_THRASH_FACTOR = 60.0
SLICE_STEPS = 1 << 18
TIMED_SLICE_STEPS = 1 << 12  # with a timeout, look at the wall clock more often
EVENT_CAPACITY = 1 << 16


class InterventionError(OptionError):
    """An intervention that cannot apply to this trace or run."""


@dataclass(frozen=True)
class Interventions:
    """What-if changes to the policy's choices (issue: interventions).

    retain: storages never offered as victims (within `retain_ops`, an inclusive
    window of top-level op ids, when given). forbid/force: (storage, decision
    index) pairs excluding a storage from / imposing it at one decision.
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
        storages = set(program.storage_ids().tolist())
        for s in list(self.retain) + [x[0] for x in self.forbid + self.force]:
            if s not in storages:
                hint = ""
                if 0 <= s < program.n_tensors:
                    hint = f" (tensor {s} is a view of storage {int(program.tensor_storage[s])})"
                raise InterventionError(f"{s} is not a storage id of trace {program.name}{hint}")
        for _, k in self.forbid + self.force:
            if k < 0:
                raise InterventionError(f"decision index must be >= 0, got {k}")
        if self.retain_ops is not None:
            try:
                validate.op_window(self.retain_ops, program.n_ops, "retain-ops window")
            except OptionError as exc:
                raise InterventionError(str(exc)) from None

    def arrays(self, n: int):
        retain = np.zeros(n, dtype=np.int64)
        retain[list(self.retain)] = 1
        window = np.array(self.retain_ops or (np.iinfo(np.int64).min, np.iinfo(np.int64).max),
                          dtype=np.int64)
        as_pairs = lambda xs: np.array([(k, s) for s, k in xs], dtype=np.int64).reshape(-1, 2)  # noqa: E731
        return retain, window, as_pairs(self.forbid), as_pairs(self.force)


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

    @property
    def victims(self) -> np.ndarray:
        """Pressure victims in order: (storage, op id, clock)."""
        return self.stream[self.stream[:, 0] == K.STREAM_PRESSURE][:, 1:]


def prepared(program: Program) -> tuple[KernelGraph, Baseline]:
    """Kernel graph and baseline of a program, computed once and kept on it."""
    cache = program._index
    if "kernel_graph" not in cache:
        cache["kernel_graph"] = kernel_graph(program)
        cache["baseline"] = baseline(program)
    return cache["kernel_graph"], cache["baseline"]


def resolve_budget(program: Program, budget: int | None, ratio: float | None) -> tuple[int, float | None]:
    if (budget is None) == (ratio is None):
        raise ValueError("give exactly one of budget (bytes) or ratio")
    if budget is not None:
        return validate.budget(budget, "budget"), None
    peak = prepared(program)[1].peak
    return budget_for_ratio(validate.ratio(ratio, "budget ratio", peak), peak), float(ratio)


def replay(program: Program, *, budget: int | None = None, ratio: float | None = None,
           policy: str | Policy = "dtr", observers: tuple[Observer, ...] | list = (),
           timeout: float | None = None, interventions: Interventions | None = None,
           thrash_factor: float = DEFAULT_THRASH_FACTOR, keep_state: bool = False) -> RunResult:
    """Replay `program` under a budget exactly as the reference simulator."""
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
    for obs in observers:
        obs.on_start(ctx)

    n = program.n_tensors
    state = MachineState.new(graph, budget, remat_limit)
    emit = bool(observers)
    emit_cands = any(o.wants_candidates for o in observers)
    state.sc[K.S_EMIT] = emit
    state.sc[K.S_EMIT_CANDS] = emit_cands
    ev_cap = EVENT_CAPACITY if emit else 1
    ev = np.zeros((ev_cap, N_EVENT_COLUMNS), dtype=np.int64)
    evf = np.zeros((ev_cap, N_EVENT_FLOAT_COLUMNS), dtype=np.float64)
    cand_cap = max(EVENT_CAPACITY, 4 * (n + 8)) if emit_cands else 1
    cand = np.zeros((cand_cap, N_CANDIDATE_COLUMNS), dtype=np.int64)
    candf = np.zeros(cand_cap, dtype=np.float64)
    event_room = int(graph.op_n_outputs.max()) + 8
    cand_room = n + 8
    retain, window, forbid, force = interventions.arrays(n)
    policy_params = policy.params()
    stream_chunks: list[np.ndarray] = []
    slice_steps = SLICE_STEPS if timeout is None else TIMED_SLICE_STEPS
    seq = 0
    timed_out = False
    while True:
        status = K.run_slice(
            graph, policy_params, state.sc, state.st, state.frames, state.pending,
            state.scratch, state.mark, state.regions, state.stream, ev, evf, cand, candf,
            retain, window, forbid, force, slice_steps, event_room, cand_room)
        if status == K.STATUS_ARENA_FULL:
            raise RuntimeError("neighbourhood arena exhausted within one step; "
                               "this trace needs a larger ARENA_MIN in engine/state.py")
        if state.sc[K.S_ARENA_TOP] * 4 > len(state.regions.arena) * 3:
            state.regions = grow_arena(state.regions, state.sc)
        if state.sc[K.S_N_STREAM] >= len(state.stream):
            stream_chunks.append(state.stream.copy())
            state.sc[K.S_N_STREAM] = 0
        if emit:
            n_ev = int(state.sc[K.S_N_EVENTS])
            if n_ev:
                batch = EventBatch(seq, ev[:n_ev], evf[:n_ev])
                for obs in observers:
                    obs.on_events(batch)
                seq += n_ev
                state.sc[K.S_N_EVENTS] = 0
            n_c = int(state.sc[K.S_N_CANDS])
            if n_c:
                cbatch = CandidateBatch(cand[:n_c], candf[:n_c])
                for obs in observers:
                    if obs.wants_candidates:
                        obs.on_candidates(cbatch)
                state.sc[K.S_N_CANDS] = 0
        if status != K.STATUS_RUNNING:
            break
        if timeout is not None and time.perf_counter() - started > timeout:
            timed_out = True
            break
    stream_chunks.append(state.stream[:int(state.sc[K.S_N_STREAM])].copy())
    stream = np.concatenate(stream_chunks) if stream_chunks else np.zeros((0, 4), np.int64)

    frontier = None
    if status == K.STATUS_OOM and not timed_out:
        depth = int(state.sc[K.S_DEPTH])
        failing = int(state.frames[0, depth - 1])
        request = int(program.op_total_size[program.tensor_op[failing]])
        frontier = build_frontier(program, state, request)
        for obs in observers:
            obs.on_oom(frontier)
    summary = _summarize(program, base, ctx, state, status, timed_out, stream, frontier,
                         time.perf_counter() - started)
    for obs in observers:
        obs.on_finish(summary)
    return RunResult(summary, stream, frontier, state if keep_state else None)


def _summarize(program, base, ctx, state, status, timed_out, stream, frontier, seconds):
    sc = state.sc
    outcome = "timeout" if timed_out else {
        K.STATUS_DONE: "ok", K.STATUS_OOM: "oom", K.STATUS_THRASHED: "thrashed",
        K.STATUS_FORCE_FAILED: "error"}[int(status)]
    error = None
    if outcome == "error":
        forced = [f"storage {s} at decision {k}" for s, k in ctx.interventions.force]
        error = (f"forced victim is not a candidate at decision {int(sc[K.S_EVICTIONS])} "
                 f"({'; '.join(forced)})")
    pressure = stream[stream[:, 0] == K.STREAM_PRESSURE][:, 1]
    remat = int(sc[K.S_REMAT_COMPUTE])
    oom = None
    if frontier is not None:
        last = frontier.levels[-1]
        oom = OomInfo(op_id=int(sc[K.S_CUR_OP]), tensor=last.tensor, tensor_id=last.tensor_id,
                      request=frontier.request, memory=frontier.memory,
                      pinned=frontier.pinned_bytes, depth=len(frontier.levels),
                      budget=ctx.budget, root_tensor=frontier.levels[0].tensor)
    hi = int(sc[K.S_HI_TRUE])
    max_pinned = MaxPinned(int(sc[K.S_MAXPIN_BYTES]), int(sc[K.S_MAXPIN_DEPTH]),
                           int(sc[K.S_MAXPIN_OP]))
    return RunSummary(
        trace=program.name, trace_sha256=program.sha256, policy=ctx.policy.name,
        ratio=ctx.ratio, budget=ctx.budget, peak=base.peak, model_compute=base.model_compute,
        outcome=outcome, clock=int(sc[K.S_CLOCK]), remat_compute=remat,
        overhead=(base.model_compute + remat) / base.model_compute if base.model_compute else None,
        evictions=int(sc[K.S_EVICTIONS]), dead_frees=int(sc[K.S_DEAD]),
        distinct_evicted=int(len(np.unique(pressure))),
        stream_distinct=int(len(np.unique(stream[:, 1]))),
        remats=int(sc[K.S_REMATS]), collateral_remats=int(sc[K.S_COLLATERAL]),
        max_depth=int(sc[K.S_MAX_DEPTH]), max_pinned=max_pinned, oom=oom,
        victims_sha256=victims_sha256(pressure.tolist()),
        budget_interval=(int(sc[K.S_LO]), None if hi == K.NO_HI else hi - 1),
        ops_done=int(sc[K.S_CUR_OP]) + 1, peak_memory=int(sc[K.S_PEAK]),
        score_evals=int(sc[K.S_SCORE_EVALS]), wall_seconds=seconds,
        interventions=ctx.interventions.to_json(), error=error)
