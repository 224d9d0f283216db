"""The replay kernel: semantics.md §4-§7 and §13 as a resumable state machine.

All state lives in arrays (named in `layout`), so the kernel can stop at any
step (slice budget used up, event buffer full, wall clock to check) and resume
where it was. `materialize` recursion (§6) is an explicit frame stack: deep
nesting is just a taller array. One step runs one command (§5) or one phase of
the innermost materialization; each phase is a function below, named after
the section it implements, in the order of semantics.md; the neighbourhoods'
walks (§8) are engine/walks.py, their sets engine/regions.py. Compiled with
numba; with `NUMBA_DISABLE_JIT=1` it runs as plain Python (the test suite
checks that form against the oracle).
"""

from __future__ import annotations

import numpy as np

from ..trace.program import CMD_COMPUTE, CMD_GET, CMD_PIN, CMD_RELEASE
from .bitsets import njit
from .exactdiv import exact_ratio
from .features import (
    FT_BACKWARD,
    FT_BWD_COMPUTE,
    FT_CLOCK,
    FT_COMPUTE,
    FT_DECISION,
    FT_DEPTH,
    FT_FWD_COMPUTE,
    FT_LAST_ACCESS,
    FT_MEMORY,
    FT_OWN_COMPUTE,
    FT_PINNED_BYTES,
    FT_POOL_SIZE,
    FT_POSITION,
    FT_REQUEST,
    FT_SIZE,
    FT_STALENESS,
    FT_STORAGE,
    FT_TIMES_EVICTED,
)
from .graph import request_bytes
from .hooks import (
    C_BWD,
    C_COMPUTE,
    C_DECISION,
    C_FWD,
    C_POSITION,
    C_SIZE,
    C_STALENESS,
    C_STORAGE,
    E_BWD,
    E_BYTES,
    E_CLOCK,
    E_COMPUTE,
    E_COST,
    E_DECISION,
    E_DEPTH,
    E_FLAG,
    E_FWD,
    E_KIND,
    E_MEMORY,
    E_OP,
    E_POOL_BYTES,
    E_POOL_SIZE,
    E_REQUEST,
    E_RUNNER,
    E_STALENESS,
    E_STORAGE,
    E_TENSOR,
    EV_ALLOC_CHECK,
    EV_COMPUTE,
    EV_EVICT,
    EV_FREE_DEAD,
    EV_MATERIALIZE,
    EV_OOM,
    EV_PIN,
    F_RUNNER_SCORE,
    F_SCORE,
    FLAG_COLLATERAL,
    FLAG_REMAT,
)
from .layout import (  # noqa: F401  (kernel.S_*, kernel.STATUS_* are read by the driver)
    ACT_COMPUTE,
    ACT_NONE,
    ACT_PIN,
    BACKWARD,
    FORWARD,
    FR_ACTION,
    FR_INDEX,
    FR_PENDING_COUNT,
    FR_PENDING_START,
    FR_PHASE,
    FR_REMAT,
    FR_TENSOR,
    N_SCALARS,
    NEVER,
    PH_CHECK,
    PH_COMPUTE,
    PH_ENTER,
    PH_FREE,
    PH_PARENT,
    PH_PARENT_LOCK,
    R_COMPUTE,
    R_DEFINED,
    R_IN_POOL,
    R_LAST_ACCESS,
    R_LAST_OP,
    R_LOCK,
    R_MATERIAL,
    R_PINNED,
    R_POOL_NEXT,
    R_POOL_PREV,
    R_REF_EXT,
    R_TIMES_EVICTED,
    S_ABSORB_WORK,
    S_ABSORBS,
    S_ANOMALIES,
    S_ARENA_TOP,
    S_BUDGET,
    S_CLOCK,
    S_CMD_POS,
    S_COLLATERAL,
    S_CREATED,
    S_CUR_OP,
    S_DEAD,
    S_DEBUG,
    S_DEPTH,
    S_EMIT,
    S_EMIT_CANDS,
    S_EPOCH,
    S_EVICTIONS,
    S_EXCLUSION_CHECKS,
    S_FREE_SLOTS,
    S_FRONTIER_MISSES,
    S_HI_TRUE,
    S_LO,
    S_MAX_DEPTH,
    S_MAXPIN_BYTES,
    S_MAXPIN_DEPTH,
    S_MAXPIN_OP,
    S_MEMORY,
    S_MODEL_COMPUTE,
    S_N_CANDS,
    S_N_EVENTS,
    S_N_STREAM,
    S_NO_CANDIDATE,
    S_PEAK,
    S_PEND_TOP,
    S_POLICY_FAULT,
    S_POOL_BYTES,
    S_POOL_HEAD,
    S_POOL_SIZE,
    S_POOL_TAIL,
    S_REBUILDS,
    S_REGIONS_BUILT,
    S_REMAT_COMPUTE,
    S_REMAT_LIMIT,
    S_REMATS,
    S_SCORE_EVALS,
    S_STATUS,
    S_STEPS,
    S_STOP_CMD,
    S_WALK_VISITS,
    SCRATCH_FRONTIER,
    SCRATCH_INTERIOR,
    SCRATCH_MEMBERS,
    SCRATCH_NEW_RESIDENT,
    STATUS_ARENA_FULL,
    STATUS_DONE,
    STATUS_FORCE_FAILED,
    STATUS_OOM,
    STATUS_POLICY_FAULT,
    STATUS_RUNNING,
    STATUS_THRASHED,
    STREAM_CLOCK,
    STREAM_DEAD,
    STREAM_KIND,
    STREAM_OP,
    STREAM_PRESSURE,
    STREAM_STORAGE,
)
from .policies import (
    P_BWD,
    P_COMPUTE,
    P_CUSTOM,
    P_FRESH,
    P_FWD,
    P_LRU,
    P_MIN_SIZE,
    P_ONE,
    P_REGIONS,
    P_SIZE,
    P_STALENESS,
)
from .regions import (  # noqa: F401  (kernel.compact_arena is an entry point)
    absorb_into,
    clear,
    compact_arena,
    frontier_members,
    region,
)
from .score_call import call_score
from .walks import build_all, evicting, flush, pinned_now, rebuild_around, view_made, walk

# The bytes an op allocates, asked by the materialization of t (§6.3).
_request = njit(cache=True, inline="always")(request_bytes)

# What `_choose` returns instead of a storage when it finds no victim.
NO_VICTIM = -1              # every pool member is excluded by an intervention
FORCED_NOT_CANDIDATE = -2   # the forced victim is not in the pool (or is excluded)
POLICY_FAULT = -3           # a policy from a file scored NaN or below 0 (or raised)


@njit(cache=True, inline="always")
def _emit(out, sc, kind, tensor, storage, nbytes):
    """One event row (hooks.py) of the state now; returns the row."""
    row = sc[S_N_EVENTS]
    sc[S_N_EVENTS] = row + 1
    ev = out.ev
    ev[row, E_KIND] = kind
    ev[row, E_OP] = sc[S_CUR_OP]
    ev[row, E_CLOCK] = sc[S_CLOCK]
    ev[row, E_DEPTH] = sc[S_DEPTH]
    ev[row, E_TENSOR] = tensor
    ev[row, E_STORAGE] = storage
    ev[row, E_BYTES] = nbytes
    ev[row, E_MEMORY] = sc[S_MEMORY]
    ev[row, E_POOL_BYTES] = sc[S_POOL_BYTES]
    ev[row, E_POOL_SIZE] = sc[S_POOL_SIZE]
    ev[row, E_REQUEST] = 0
    ev[row, E_DECISION] = -1
    ev[row, E_FLAG] = 0
    ev[row, E_RUNNER] = -1
    ev[row, E_COMPUTE] = 0
    ev[row, E_FWD] = 0
    ev[row, E_BWD] = 0
    ev[row, E_STALENESS] = 0
    ev[row, E_COST] = 0
    out.evf[row, F_SCORE] = np.nan
    out.evf[row, F_RUNNER_SCORE] = np.nan
    return row


# ---------------------------------------------------------------- pool (§4.4)

@njit(cache=True, inline="always")
def _pool_append(sc, st, size, s):
    if st[R_IN_POOL, s]:
        return
    st[R_IN_POOL, s] = 1
    tail = sc[S_POOL_TAIL]
    st[R_POOL_PREV, s] = tail
    st[R_POOL_NEXT, s] = -1
    if tail == -1:
        sc[S_POOL_HEAD] = s
    else:
        st[R_POOL_NEXT, tail] = s
    sc[S_POOL_TAIL] = s
    sc[S_POOL_SIZE] += 1
    sc[S_POOL_BYTES] += size[s]


@njit(cache=True, inline="always")
def _pool_remove(sc, st, size, s):
    if not st[R_IN_POOL, s]:
        return
    st[R_IN_POOL, s] = 0
    p = st[R_POOL_PREV, s]
    n = st[R_POOL_NEXT, s]
    if p == -1:
        sc[S_POOL_HEAD] = n
    else:
        st[R_POOL_NEXT, p] = n
    if n == -1:
        sc[S_POOL_TAIL] = p
    else:
        st[R_POOL_PREV, n] = p
    sc[S_POOL_SIZE] -= 1
    sc[S_POOL_BYTES] -= size[s]


@njit(cache=True, inline="always")
def _lock(sc, st, size, s):
    """§6.2: a lock count leaving 0 takes the storage out of the pool. A lock
    needs a resident storage (§13.4)."""
    if sc[S_DEBUG] and not st[R_MATERIAL, s]:
        sc[S_ANOMALIES] += 1
    if st[R_LOCK, s] == 0:
        _pool_remove(sc, st, size, s)
    st[R_LOCK, s] += 1


@njit(cache=True, inline="always")
def _unlock(sc, st, size, s):
    """§6.5: a lock count returning to 0 appends the storage to the pool. An
    unlock needs a held lock (§13.2) on a resident storage (§13.4)."""
    if sc[S_DEBUG] and not st[R_MATERIAL, s]:
        sc[S_ANOMALIES] += 1
    st[R_LOCK, s] -= 1
    if st[R_LOCK, s] == 0:
        _pool_append(sc, st, size, s)
    elif st[R_LOCK, s] < 0:
        sc[S_ANOMALIES] += 1  # §13.2


# ---------------------------------------------------------------- the machine

@njit(cache=True)
def run_slice(g, pol, sc, st, fr, pending, scratch, mark, rg, stream, out, iv, pf, max_steps):
    """Advance the replay by at most `max_steps` steps; returns the status.

    pol: the policy's parameters (policies.P_*); out: the observers' buffers
    (`layout.Buffers`); iv: the interventions (`layout.Exclusions`, §14); pf: a
    policy from a file (`layout.FromFile`: its compiled score, the storages it
    never evicts, the features of the candidate whose score faulted).

    st: state rows (`layout.R_*`); fr: frame stack rows (`layout.FR_*`), one
    column per materialization in progress. Stops early (STATUS_RUNNING) when
    fewer than `out.event_room` event rows or `out.cand_room` candidate rows
    remain, so one step always fits.
    """
    emit = sc[S_EMIT] != 0
    steps = 0
    while True:
        if sc[S_STATUS] != STATUS_RUNNING:
            break
        if steps >= max_steps or _no_room(sc, rg, stream, out):
            break
        if sc[S_DEPTH] == 0 and 0 <= sc[S_STOP_CMD] <= sc[S_CMD_POS]:
            _keep_regions(g, pol, sc, st, mark, scratch, rg)   # a checkpoint digests them
            break   # the driver asked to stop at this command boundary
        steps += 1
        sc[S_STEPS] += 1
        if sc[S_DEPTH] == 0:
            _next_command(g, pol, sc, st, fr, scratch, mark, rg, stream, out, emit)
            continue
        f = sc[S_DEPTH] - 1
        phase = fr[FR_PHASE, f]
        if phase == PH_ENTER:
            _enter(g, sc, st, fr, pending, f)
        elif phase == PH_PARENT:
            _next_parent(g, sc, st, fr, pending, out, emit, f)
        elif phase == PH_PARENT_LOCK:
            _lock_parent(g, sc, st, fr, pending, f)
        elif phase == PH_CHECK:
            _allocation_check(g, sc, st, fr, out, emit, f)
        elif phase == PH_FREE:
            _free_one(g, pol, sc, st, fr, scratch, mark, rg, stream, out, emit, iv, pf, f)
        else:
            _compute_and_unlock(g, pol, sc, st, fr, scratch, mark, rg, out, emit, f)
    flush(g, sc, st, mark, scratch, rg)   # the driver reads, digests and snapshots regions
    return sc[S_STATUS]


@njit(cache=True, inline="always")
def _no_room(sc, rg, stream, out):
    """Whether a buffer could overflow within the next step (the driver then
    drains it, or compacts or grows the arena, and resumes)."""
    if sc[S_N_STREAM] >= stream.shape[0]:
        return True
    if sc[S_EMIT] != 0 and sc[S_N_EVENTS] + out.event_room > out.ev.shape[0]:
        return True
    if sc[S_EMIT_CANDS] != 0 and sc[S_N_CANDS] + out.cand_room > out.cand.shape[0]:
        return True
    return sc[S_ARENA_TOP] * 4 > rg.arena.shape[0] * 3


# ---------------------------------------------------------------- commands (§5)

@njit(cache=True, inline="always")
def _next_command(g, pol, sc, st, fr, scratch, mark, rg, stream, out, emit):
    """Run the schedule's next command, or end the run when there is none."""
    flush(g, sc, st, mark, scratch, rg)   # a compute command creates edges (§4.2)
    pos = sc[S_CMD_POS]
    if pos >= g.sched_kind.shape[0]:
        sc[S_STATUS] = STATUS_DONE
        return
    sc[S_CMD_POS] = pos + 1
    kind = g.sched_kind[pos]
    arg = g.sched_arg[pos]
    if pol[P_REGIONS] and sc[S_REGIONS_BUILT] == 0 and _regions_wanted(g, st, kind, arg):
        _keep_regions(g, pol, sc, st, mark, scratch, rg)
    if kind == CMD_COMPUTE:
        _start_compute(g, pol, sc, st, fr, mark, scratch, rg, out, emit, arg)
    elif kind == CMD_GET:
        st[R_REF_EXT, g.tensor_storage[arg]] += 1
    elif kind == CMD_RELEASE:
        _release(g, pol, sc, st, scratch, mark, rg, stream, out, emit, arg)
    else:  # CMD_PIN, §5.4
        if st[R_DEFINED, arg]:
            _pin(g, pol, sc, st, rg, out, emit, arg)
        else:
            _push(sc, fr, arg, 1, ACT_PIN)
            if emit:
                _emit(out, sc, EV_MATERIALIZE, arg, g.tensor_storage[arg], 0)


@njit(cache=True, inline="always")
def _regions_wanted(g, st, kind, arg):
    """Whether a command ends the wait of regions for their first reader (§8.7):
    a pin or a compute that rematerializes (an argument undefined), or a compute
    making a view whose op links another storage to the viewed one."""
    if kind == CMD_PIN:
        return not st[R_DEFINED, arg]
    if kind != CMD_COMPUTE:
        return False
    a0 = g.op_arg_ptr[arg]
    a1 = g.op_arg_ptr[arg + 1]
    for i in range(a0, a1):
        if not st[R_DEFINED, g.op_args[i]]:
            return True
    first = g.op_first_tensor[arg]
    for t in range(first, first + g.op_n_outputs[arg]):
        s = g.tensor_storage[t]
        if s != t and _links_another(g, arg, s):
            return True
    return False


@njit(cache=True, inline="always")
def _links_another(g, op, s):
    """Whether op, making a view of storage s, links another storage to it."""
    for i in range(g.op_arg_ptr[op], g.op_arg_ptr[op + 1]):
        if g.tensor_storage[g.op_args[i]] != s:
            return True
    return False


@njit(cache=True, inline="always")
def _keep_regions(g, pol, sc, st, mark, scratch, rg):
    """§8.7: the policy's regions are kept from here on, built now if they
    waited. Inside a compute command (its one frame: nothing rematerialized
    yet) they are built as they stood before its outputs were created."""
    if pol[P_REGIONS] and sc[S_REGIONS_BUILT] == 0:
        sc[S_REGIONS_BUILT] = 1
        created = sc[S_CREATED]
        if sc[S_DEPTH] > 0:
            created = g.op_first_tensor[sc[S_CUR_OP]]
        build_all(g, sc, st, mark, scratch, rg, created)


@njit(cache=True, inline="always")
def _start_compute(g, pol, sc, st, fr, mark, scratch, rg, out, emit, op):
    """§5.1: create the op's outputs (§4.1, §4.2), then materialize the first.
    A view tells the regions it may change (walks.view_made)."""
    sc[S_CUR_OP] = op
    first = g.op_first_tensor[op]
    regions_kept = pol[P_REGIONS] and sc[S_REGIONS_BUILT]
    for t in range(first, first + g.op_n_outputs[op]):
        sc[S_CREATED] = t + 1
        s = g.tensor_storage[t]
        if s == t:
            st[R_LAST_ACCESS, s] = NEVER
            st[R_COMPUTE, s] = 0
            st[R_LAST_OP, s] = -1
        elif regions_kept:
            view_made(g, sc, st, mark, scratch, rg, op, s)
        st[R_REF_EXT, s] += 1
        if st[R_LAST_OP, s] != op:  # a storage's compute counts each distinct op once
            st[R_LAST_OP, s] = op
            st[R_COMPUTE, s] += g.op_cost[op]
    _push(sc, fr, first, 0, ACT_COMPUTE)
    if emit:
        _emit(out, sc, EV_MATERIALIZE, first, g.tensor_storage[first], 0)


@njit(cache=True, inline="always")
def _release(g, pol, sc, st, scratch, mark, rg, stream, out, emit, t):
    """§5.3: drop a reference; a resident, unpinned storage left without any is
    freed at once (a dead free)."""
    s = g.tensor_storage[t]
    st[R_REF_EXT, s] -= 1
    if st[R_REF_EXT, s] == 0 and st[R_MATERIAL, s] and not st[R_PINNED, s]:
        if emit:
            _emit(out, sc, EV_FREE_DEAD, t, s, g.tensor_size[s])
        sc[S_DEAD] += 1
        _stream(sc, stream, STREAM_DEAD, s)
        _evict(g, pol, sc, st, mark, scratch, rg, s)


@njit(cache=True)
def _pin(g, pol, sc, st, rg, out, emit, t):
    """§5.4: lock a storage for good (it never returns to the pool); its regions
    known to be their walks are no longer kept (§8.9)."""
    s = g.tensor_storage[t]
    if st[R_PINNED, s]:
        return
    _lock(sc, st, g.tensor_size, s)
    st[R_PINNED, s] = 1
    if pol[P_REGIONS] and sc[S_REGIONS_BUILT]:
        pinned_now(rg, sc, s)
    if emit:
        _emit(out, sc, EV_PIN, t, s, g.tensor_size[s])


@njit(cache=True, inline="always")
def _push(sc, fr, t, remat, action):
    """Start materializing t (§6): a new frame on top of the stack."""
    f = sc[S_DEPTH]
    fr[FR_TENSOR, f] = t
    fr[FR_REMAT, f] = remat
    fr[FR_PHASE, f] = PH_ENTER
    fr[FR_INDEX, f] = 0
    fr[FR_PENDING_START, f] = sc[S_PEND_TOP]
    fr[FR_PENDING_COUNT, f] = 0
    fr[FR_ACTION, f] = action
    sc[S_DEPTH] = f + 1
    sc[S_MAX_DEPTH] = max(sc[S_MAX_DEPTH], f + 1)


# ---------------------------------------------------------------- materialization (§6)

@njit(cache=True, inline="always")
def _enter(g, sc, st, fr, pending, f):
    """§6.1 and the first half of §6.2: touch every parent, lock the defined
    ones, and list the undefined ones (on the `pending` stack) for later."""
    op = g.tensor_op[fr[FR_TENSOR, f]]
    a0 = g.op_arg_ptr[op]
    a1 = g.op_arg_ptr[op + 1]
    clock = sc[S_CLOCK]
    for i in range(a0, a1):
        st[R_LAST_ACCESS, g.tensor_storage[g.op_args[i]]] = clock
    for i in range(a0, a1):
        p = g.op_args[i]
        if st[R_DEFINED, p]:
            _lock(sc, st, g.tensor_size, g.tensor_storage[p])
    start = sc[S_PEND_TOP]
    for i in range(a0, a1):
        p = g.op_args[i]
        if not st[R_DEFINED, p]:
            pending[sc[S_PEND_TOP]] = p
            sc[S_PEND_TOP] += 1
    fr[FR_PENDING_START, f] = start
    fr[FR_PENDING_COUNT, f] = sc[S_PEND_TOP] - start
    fr[FR_INDEX, f] = 0
    fr[FR_PHASE, f] = PH_PARENT


@njit(cache=True, inline="always")
def _next_parent(g, sc, st, fr, pending, out, emit, f):
    """Second half of §6.2: materialize the next listed parent if it is still
    undefined (a frame on top), then lock it; after the last, the check."""
    if fr[FR_INDEX, f] >= fr[FR_PENDING_COUNT, f]:
        fr[FR_PHASE, f] = PH_CHECK
        return
    p = pending[fr[FR_PENDING_START, f] + fr[FR_INDEX, f]]
    fr[FR_PHASE, f] = PH_PARENT_LOCK
    if not st[R_DEFINED, p]:
        _push(sc, fr, p, 1, ACT_NONE)
        if emit:
            _emit(out, sc, EV_MATERIALIZE, p, g.tensor_storage[p], 0)


@njit(cache=True, inline="always")
def _lock_parent(g, sc, st, fr, pending, f):
    p = pending[fr[FR_PENDING_START, f] + fr[FR_INDEX, f]]
    _lock(sc, st, g.tensor_size, g.tensor_storage[p])
    fr[FR_INDEX, f] += 1
    fr[FR_PHASE, f] = PH_PARENT


@njit(cache=True, inline="always")
def _does_not_fit(sc, request):
    """The comparison of §6.3, recorded for the budget certificate (§11)."""
    value = sc[S_MEMORY] + request
    over = value > sc[S_BUDGET]
    if over:
        if value < sc[S_HI_TRUE]:   # NO_HI is larger than any value
            sc[S_HI_TRUE] = value
    elif value > sc[S_LO]:
        sc[S_LO] = value
    return over


@njit(cache=True, inline="always")
def _allocation_check(g, sc, st, fr, out, emit, f):
    """§6.3, first comparison: fits (compute next) or must free memory; a
    check that must free samples the pinned bytes (§12.6)."""
    t = fr[FR_TENSOR, f]
    request = _request(g, t)
    over = _does_not_fit(sc, request)
    if sc[S_DEBUG]:
        check_invariants(g, sc, st)
    if emit:
        row = _emit(out, sc, EV_ALLOC_CHECK, t, g.tensor_storage[t], request)
        out.ev[row, E_REQUEST] = request
        out.ev[row, E_FLAG] = 1 if over else 0
    if not over:
        fr[FR_PHASE, f] = PH_COMPUTE
        return
    pinned_bytes = sc[S_MEMORY] - sc[S_POOL_BYTES]
    if pinned_bytes > sc[S_MAXPIN_BYTES]:
        sc[S_MAXPIN_BYTES] = pinned_bytes
        sc[S_MAXPIN_DEPTH] = f + 1
        sc[S_MAXPIN_OP] = sc[S_CUR_OP]
    fr[FR_PHASE, f] = PH_FREE


@njit(cache=True, inline="always")
def _free_one(g, pol, sc, st, fr, scratch, mark, rg, stream, out, emit, iv, pf, f):
    """§6.3, the eviction loop: compare again; while it does not fit, evict one
    victim (§7) per step, or end the run out of memory (§10.3)."""
    t = fr[FR_TENSOR, f]
    request = _request(g, t)
    if not _does_not_fit(sc, request):
        fr[FR_PHASE, f] = PH_COMPUTE
        return
    if sc[S_POOL_SIZE] == 0:
        _out_of_memory(g, sc, out, emit, t, request)
        return
    _keep_regions(g, pol, sc, st, mark, scratch, rg)   # the scan reads them (§8.7)
    flush(g, sc, st, mark, scratch, rg)   # the scan reads every candidate's regions
    if sc[S_STATUS] != STATUS_RUNNING:
        return   # the arena filled (STATUS_ARENA_FULL)
    decision = sc[S_EVICTIONS]
    victim = _choose(g, pol, sc, st, mark, scratch, rg, out, emit, iv, pf, decision, t,
                     request)
    if victim == POLICY_FAULT:
        sc[S_POLICY_FAULT] = decision
        sc[S_STATUS] = STATUS_POLICY_FAULT
        return
    if victim == FORCED_NOT_CANDIDATE:
        sc[S_STATUS] = STATUS_FORCE_FAILED
        return
    if victim == NO_VICTIM:
        _out_of_memory(g, sc, out, emit, t, request)
        return
    sc[S_EVICTIONS] += 1
    st[R_TIMES_EVICTED, victim] += 1
    _stream(sc, stream, STREAM_PRESSURE, victim)
    _evict(g, pol, sc, st, mark, scratch, rg, victim)


@njit(cache=True, inline="always")
def _out_of_memory(g, sc, out, emit, t, request):
    sc[S_STATUS] = STATUS_OOM
    if emit:
        row = _emit(out, sc, EV_OOM, t, g.tensor_storage[t], request)
        out.ev[row, E_REQUEST] = request


@njit(cache=True, inline="always")
def _compute_and_unlock(g, pol, sc, st, fr, scratch, mark, rg, out, emit, f):
    """§6.4-§6.6, then the frame completes: the end of a compute command sets
    its outputs' last access (§5.1), the end of a pin pins (§5.4)."""
    t = fr[FR_TENSOR, f]
    op = g.tensor_op[t]
    _compute(g, pol, sc, st, mark, scratch, rg, out, emit, t, fr[FR_REMAT, f] != 0)
    for i in range(g.op_arg_ptr[op], g.op_arg_ptr[op + 1]):
        _unlock(sc, st, g.tensor_size, g.tensor_storage[g.op_args[i]])
    if sc[S_REMAT_COMPUTE] > sc[S_REMAT_LIMIT]:
        if sc[S_STATUS] == STATUS_RUNNING:   # an arena found full in this compute comes first
            sc[S_STATUS] = STATUS_THRASHED
        return
    sc[S_PEND_TOP] = fr[FR_PENDING_START, f]
    sc[S_DEPTH] = f
    action = fr[FR_ACTION, f]
    if action == ACT_COMPUTE:
        clock = sc[S_CLOCK]
        first = g.op_first_tensor[op]
        for u in range(first, first + g.op_n_outputs[op]):
            st[R_LAST_ACCESS, g.tensor_storage[u]] = clock
    elif action == ACT_PIN:
        _pin(g, pol, sc, st, rg, out, emit, t)


@njit(cache=True, inline="always")
def _stream(sc, stream, kind, s):
    row = sc[S_N_STREAM]
    sc[S_N_STREAM] = row + 1
    stream[row, STREAM_KIND] = kind
    stream[row, STREAM_STORAGE] = s
    stream[row, STREAM_OP] = sc[S_CUR_OP]
    stream[row, STREAM_CLOCK] = sc[S_CLOCK]


@njit(cache=True, inline="always")
def _evict(g, pol, sc, st, mark, scratch, rg, s):
    """§5.5, then the absorbs of §8.3. An eviction needs an unlocked, unpinned
    storage (§13.4)."""
    if sc[S_DEBUG] and (st[R_LOCK, s] != 0 or st[R_PINNED, s]):
        sc[S_ANOMALIES] += 1
    flush(g, sc, st, mark, scratch, rg)   # before residency changes (and absorbs read)
    regions_kept = pol[P_REGIONS] and sc[S_REGIONS_BUILT]   # none kept before (§8.7)
    if regions_kept:
        evicting(g, sc, st, mark, scratch, rg, s)   # while s is resident (§8.9)
    st[R_MATERIAL, s] = 0
    sc[S_MEMORY] -= g.tensor_size[s]
    _pool_remove(sc, st, g.tensor_size, s)
    created = sc[S_CREATED]
    for i in range(g.st_tensor_ptr[s], g.st_tensor_ptr[s + 1]):
        u = g.st_tensors[i]
        if u >= created:
            break
        st[R_DEFINED, u] = 0
    if regions_kept:
        members = scratch[SCRATCH_MEMBERS]
        for listing in (BACKWARD, FORWARD):
            taken = BACKWARD - listing
            sc[S_EPOCH] += 1
            n = frontier_members(rg, region(s, listing), members, mark, sc[S_EPOCH])
            absorb_into(sc, st[R_COMPUTE], mark, rg, members, n, taken, s, region(s, taken))
        clear(rg, sc, region(s, FORWARD))
        clear(rg, sc, region(s, BACKWARD))


@njit(cache=True, inline="always")
def _compute(g, pol, sc, st, mark, scratch, rg, out, emit, t, remat):
    """§6.4, then the neighbourhood rebuilds of §8.4."""
    defined = st[R_DEFINED]
    material = st[R_MATERIAL]
    op = g.tensor_op[t]
    first = g.op_first_tensor[op]
    n_out = g.op_n_outputs[op]
    newly = scratch[SCRATCH_NEW_RESIDENT]
    n_new = 0
    # storages that become resident: siblings in output order, then t
    for u in range(first, first + n_out):
        if u != t and not material[g.tensor_storage[u]]:
            newly[n_new] = g.tensor_storage[u]
            n_new += 1
    if not material[g.tensor_storage[t]]:
        newly[n_new] = g.tensor_storage[t]
        n_new += 1
    cost = g.op_cost[op]
    sc[S_CLOCK] += cost
    sc[S_MEMORY] += g.op_total_size[op]
    sc[S_PEAK] = max(sc[S_PEAK], sc[S_MEMORY])
    if remat:
        sc[S_REMAT_COMPUTE] += cost
        sc[S_REMATS] += 1
    else:
        sc[S_MODEL_COMPUTE] += cost
    material[g.tensor_storage[t]] = 1
    defined[t] = 1
    if emit:
        row = _emit(out, sc, EV_COMPUTE, t, g.tensor_storage[t], g.tensor_size[t])
        out.ev[row, E_FLAG] = FLAG_REMAT if remat else 0
        out.ev[row, E_COST] = cost
    for u in range(first, first + n_out):
        if u == t:
            continue
        if defined[u]:
            sc[S_MEMORY] -= g.tensor_size[u]  # computed twice: dropped
        else:
            material[g.tensor_storage[u]] = 1
            defined[u] = 1
            if remat:
                sc[S_COLLATERAL] += 1
            if emit:
                row = _emit(out, sc, EV_COMPUTE, u, g.tensor_storage[u], g.tensor_size[u])
                out.ev[row, E_FLAG] = FLAG_COLLATERAL | (FLAG_REMAT if remat else 0)
    for i in range(n_new):
        _pool_append(sc, st, g.tensor_size, newly[i])
    if pol[P_REGIONS] and sc[S_REGIONS_BUILT] and n_new > 0:   # none kept before (§8.7)
        rebuild_around(g, sc, st, mark, scratch, rg, newly, n_new)


# ---------------------------------------------------------------- victim choice (§7, §14)

@njit(cache=True, inline="always")
def _choose(g, pol, sc, st, mark, scratch, rg, out, emit, iv, pf, decision, t, request):
    """§7 for every policy: the scan's victim (§7.1), unless an intervention
    forces another (§14). Returns the victim or NO_VICTIM (S_NO_CANDIDATE notes
    a pool the filters emptied), FORCED_NOT_CANDIDATE or POLICY_FAULT (the
    candidate's features in `pf.probe`)."""
    forced = _forced_victim(iv.force, decision)
    ranked, forced_score, filtered = _scan(g, pol, sc, st, mark, scratch, rg, out, iv, pf,
                                           decision, request, forced)
    if ranked[0] == POLICY_FAULT:
        return POLICY_FAULT
    if ranked[0] == NO_VICTIM and filtered > 0:
        sc[S_NO_CANDIDATE] = decision
    if forced >= 0:
        ranked = _impose(g, pol, sc, st, mark, scratch, rg, iv, pf, decision, request, forced,
                         forced_score, ranked)
    if ranked[0] >= 0 and emit:
        _emit_eviction(g, pol, sc, st, mark, scratch, rg, out, decision, t, request, ranked)
    return ranked[0]


@njit(cache=True, inline="always")
def _scan(g, pol, sc, st, mark, scratch, rg, out, iv, pf, decision, request, forced):
    """§7.1: scan the pool in order, the last of equal minimal scores wins, the
    first zero stops the scan. Candidates: the pool less what a policy from a
    file filters out (min size, locked) and what an intervention excludes (§14).
    Returns the ranking (victim, its score, runner-up, its score; the victim
    NO_VICTIM for none, POLICY_FAULT when a policy from a file faulted), the
    score of `forced` if a policy from a file scored it, and how many storages
    the filters left out."""
    custom = pol[P_CUSTOM] != 0
    emit_cands = sc[S_EMIT_CANDS] != 0
    forbids = iv.forbid.shape[0] > 0
    pool_next = st[R_POOL_NEXT]
    forced_score = np.nan
    ranked = (np.int64(NO_VICTIM), np.inf, np.int64(-1), np.inf)
    position, filtered = 0, 0
    s = sc[S_POOL_HEAD]
    while s != -1:
        here = s
        s = pool_next[here]
        if custom and _filtered(g, pol, pf, here):
            filtered += 1
            continue
        if (iv.retain[here] or forbids) and _excluded(sc, iv, decision, here):
            continue
        if custom:
            score = _custom_score(g, pol, sc, st, mark, scratch, rg, pf, here, decision,
                                  position, request)
            if not score >= 0.0:
                faulted = (np.int64(POLICY_FAULT), np.inf, np.int64(-1), np.inf)
                return faulted, forced_score, filtered
            if here == forced:
                forced_score = score
            fwd, bwd = pf.probe[FT_FWD_COMPUTE], pf.probe[FT_BWD_COMPUTE]
        else:
            score, fwd, bwd = _builtin_score(g, pol, sc, st, mark, scratch, rg, here, emit_cands,
                                             ranked)
            if score < 0.0:
                position += 1
                continue  # certainly neither the victim nor the runner-up
        if emit_cands:
            _record_candidate(g, sc, st, out, decision, here, position, fwd, bwd, score)
        position += 1
        ranked = _rank(here, score, ranked)
        if score == 0.0:
            break
    return ranked, forced_score, filtered


@njit(cache=True, inline="always")
def _excluded(sc, iv, decision, s):
    """§14: whether an intervention keeps storage s out of this decision."""
    sc[S_EXCLUSION_CHECKS] += 1
    if iv.retain[s]:
        op = sc[S_CUR_OP]
        if iv.window[0] <= op <= iv.window[1]:
            return True
    for i in range(iv.forbid.shape[0]):
        if iv.forbid[i, 0] == decision and iv.forbid[i, 1] == s:
            return True
    return False


@njit(cache=True, inline="always")
def _filtered(g, pol, pf, s):
    """Whether a policy from a file's filters (min size, locked) leave storage s out."""
    locked = pf.locked
    return g.tensor_size[s] < pol[P_MIN_SIZE] or (locked.shape[0] > 0 and locked[s] != 0)


@njit(cache=True, inline="always")
def _rank(s, score, ranked):
    """§7.1's comparison of one more candidate: `<=` makes the last of equal
    scores the victim, and the victim it displaces becomes the runner-up.
    `ranked` and the result: (victim, best, runner, runner_score)."""
    victim, best, runner, runner_score = ranked
    if score <= best:
        return s, score, victim, best
    if score <= runner_score:
        return victim, best, s, score
    return ranked


@njit(cache=True)
def _impose(g, pol, sc, st, mark, scratch, rg, iv, pf, decision, request, forced, forced_score,
            ranked):
    """§14: a forced victim replaces the scan's, which becomes the runner-up.
    `forced_score`: its score if the scan met it (NaN if not). Returns the
    ranking as `_scan` does; the victim is FORCED_NOT_CANDIDATE when the forced
    storage is not a candidate, POLICY_FAULT when a policy from a file faults
    on it."""
    victim, best, runner, runner_score = ranked
    custom = pol[P_CUSTOM] != 0
    if not st[R_IN_POOL, forced] or (custom and _filtered(g, pol, pf, forced)) or \
            _excluded(sc, iv, decision, forced):
        return np.int64(FORCED_NOT_CANDIDATE), best, runner, runner_score
    if forced == victim:
        return ranked
    if not custom:
        forced_score = _exact_score(g, pol, sc, st, mark, scratch, rg, forced)
    elif forced_score != forced_score:  # after the scan stopped at a zero
        forced_score = _custom_score(g, pol, sc, st, mark, scratch, rg, pf, forced, decision, -1,
                                     request)
        if not forced_score >= 0.0:
            return np.int64(POLICY_FAULT), best, runner, runner_score
    return forced, forced_score, victim, best


@njit(cache=True, inline="always")
def _forced_victim(iv_force, decision):
    """The storage an intervention imposes at this decision, or -1 (the last
    pair for the decision wins)."""
    forced = -1
    for i in range(iv_force.shape[0]):
        if iv_force[i, 0] == decision:
            forced = iv_force[i, 1]
    return forced


# ---------------------------------------------------------------- scores (§7.2, §7.3)

# Relative error bound of a float-first ratio (two roundings) with a wide margin:
# a candidate whose float score exceeds both the best and the runner-up by more
# than this cannot be either, so its exact score is not needed.
APPROX_MARGIN = 1e-12


@njit(cache=True, inline="always")
def _builtin_score(g, pol, sc, st, mark, scratch, rg, s, exact, ranked):
    """A built-in policy's score of candidate s and its (fwd, bwd): float-first,
    and exact (§7.3) only where it may be the victim or the runner-up of
    `ranked`, or with `exact`; -1.0 when it certainly is neither."""
    fwd, bwd = _neighbourhoods(g, pol, sc, st, mark, scratch, rg, s)
    compute, size, last_access = st[R_COMPUTE, s], g.tensor_size[s], st[R_LAST_ACCESS, s]
    score = _score(pol, compute, size, last_access, sc[S_CLOCK], fwd, bwd, exact)
    sc[S_SCORE_EVALS] += 1
    if not exact:
        bound = score * (1.0 - APPROX_MARGIN)
        if bound > ranked[1] and bound > ranked[3]:
            return -1.0, fwd, bwd
        score = _score(pol, compute, size, last_access, sc[S_CLOCK], fwd, bwd, True)
    return score, fwd, bwd


@njit(cache=True)
def _exact_score(g, pol, sc, st, mark, scratch, rg, s):
    fwd, bwd = _neighbourhoods(g, pol, sc, st, mark, scratch, rg, s)
    return _score(pol, st[R_COMPUTE, s], g.tensor_size[s], st[R_LAST_ACCESS, s], sc[S_CLOCK],
                  fwd, bwd, True)


@njit(cache=True, inline="always")
def _score(pol, compute, size, last_access, clock, fwd, bwd, exact):
    """Score of a storage under the policy (§7.2), from its own compute, size and
    last access and its neighbourhood computes; with exact=False a float-first
    approximation (within APPROX_MARGIN), else the exact quotient (§7.3).
    Scalars only: this runs per candidate."""
    if pol[P_LRU]:
        return np.float64(last_access)
    num = 0
    if pol[P_ONE]:
        num = 1
    else:
        if pol[P_COMPUTE]:
            num += compute
        if pol[P_FWD]:
            num += fwd
        if pol[P_BWD]:
            num += bwd
    a = 1
    b = 1
    if pol[P_SIZE]:
        a = size
    if pol[P_STALENESS]:
        b = clock - last_access
    if not (pol[P_SIZE] or pol[P_STALENESS]):
        return np.float64(num)
    if a <= 0 or b <= 0:
        return np.inf
    if not exact:
        return np.float64(num) / (np.float64(a) * np.float64(b))
    return exact_ratio(num, a, b)


@njit(cache=True, inline="always")
def _neighbourhoods(g, pol, sc, st, mark, scratch, rg, s):
    """fwd and bwd of storage s as the policy reads them (§8): its regions'
    computes, from-scratch walks (§8.5's variant) or none."""
    fwd = 0
    bwd = 0
    if pol[P_FRESH]:
        fwd, bwd = _fresh_neighbourhoods(g, pol, sc, st[R_MATERIAL], st[R_COMPUTE], mark,
                                         scratch, s)
    elif pol[P_REGIONS]:
        fwd = rg.compute[region(s, FORWARD)]
        bwd = rg.compute[region(s, BACKWARD)]
    return fwd, bwd


@njit(cache=True)
def _fresh_neighbourhoods(g, pol, sc, material, st_compute, mark, scratch, s):
    """From-scratch neighbourhood computes (the dtr-exact-nbhd variant, §8.5). Kept out
    of the scan's common path: a call carrying the graph tuple costs far more
    than the region lookup it replaces."""
    fwd = 0
    bwd = 0
    if pol[P_FWD]:
        fwd = walk(g, sc, material, st_compute, mark, scratch[SCRATCH_INTERIOR],
                   scratch[SCRATCH_FRONTIER], s, FORWARD)[2]
    if pol[P_BWD]:
        bwd = walk(g, sc, material, st_compute, mark, scratch[SCRATCH_INTERIOR],
                   scratch[SCRATCH_FRONTIER], s, BACKWARD)[2]
    return fwd, bwd


@njit(cache=True)
def _custom_score(g, pol, sc, st, mark, scratch, rg, pf, s, decision, position, request):
    """The features of candidate s (engine/features.py) into `pf.probe`, and the
    policy's score of them."""
    fwd, bwd = _neighbourhoods(g, pol, sc, st, mark, scratch, rg, s)
    probe = pf.probe
    own = st[R_COMPUTE, s]
    clock = sc[S_CLOCK]
    probe[FT_COMPUTE] = own + fwd + bwd
    probe[FT_OWN_COMPUTE] = own
    probe[FT_FWD_COMPUTE] = fwd
    probe[FT_BWD_COMPUTE] = bwd
    probe[FT_SIZE] = g.tensor_size[s]
    probe[FT_STALENESS] = clock - st[R_LAST_ACCESS, s]
    probe[FT_LAST_ACCESS] = st[R_LAST_ACCESS, s]
    probe[FT_CLOCK] = clock
    probe[FT_TIMES_EVICTED] = st[R_TIMES_EVICTED, s]
    probe[FT_BACKWARD] = g.op_backward[g.tensor_op[s]]
    probe[FT_DEPTH] = sc[S_DEPTH]
    probe[FT_PINNED_BYTES] = sc[S_MEMORY] - sc[S_POOL_BYTES]
    probe[FT_MEMORY] = sc[S_MEMORY]
    probe[FT_REQUEST] = request
    probe[FT_STORAGE] = s
    probe[FT_DECISION] = decision
    probe[FT_POSITION] = position
    probe[FT_POOL_SIZE] = sc[S_POOL_SIZE]
    sc[S_SCORE_EVALS] += 1
    return call_score(pf.score_fn, probe)


# ---------------------------------------------------------------- what observers see (hooks.py)

@njit(cache=True, inline="always")
def _record_candidate(g, sc, st, out, decision, s, position, fwd, bwd, score):
    row = sc[S_N_CANDS]
    sc[S_N_CANDS] = row + 1
    cand = out.cand
    cand[row, C_DECISION] = decision
    cand[row, C_STORAGE] = s
    cand[row, C_POSITION] = position
    cand[row, C_COMPUTE] = st[R_COMPUTE, s]
    cand[row, C_FWD] = fwd
    cand[row, C_BWD] = bwd
    cand[row, C_SIZE] = g.tensor_size[s]
    cand[row, C_STALENESS] = sc[S_CLOCK] - st[R_LAST_ACCESS, s]
    out.candf[row] = score


@njit(cache=True)
def _emit_eviction(g, pol, sc, st, mark, scratch, rg, out, decision, t, request, ranked):
    """The `evict` event (hooks.py): the victim's score and its components."""
    victim, score, runner, runner_score = ranked
    row = _emit(out, sc, EV_EVICT, t, victim, g.tensor_size[victim])
    ev = out.ev
    ev[row, E_DECISION] = decision
    ev[row, E_RUNNER] = runner
    ev[row, E_REQUEST] = request
    fwd, bwd = _neighbourhoods(g, pol, sc, st, mark, scratch, rg, victim)
    ev[row, E_COMPUTE] = st[R_COMPUTE, victim]
    ev[row, E_FWD] = fwd
    ev[row, E_BWD] = bwd
    ev[row, E_STALENESS] = sc[S_CLOCK] - st[R_LAST_ACCESS, victim]
    out.evf[row, F_SCORE] = score
    out.evf[row, F_RUNNER_SCORE] = runner_score if runner >= 0 else np.nan


# ---------------------------------------------------------------- invariants (§13)

@njit(cache=True)
def check_invariants(g, sc, st):
    """Count the breaches of semantics.md §13.1 and §13.3 into S_ANOMALIES (one
    pass over the storages and the pool); returns how many were found. (§13.2
    is counted at every unlock, §13.4 at every lock, unlock and eviction in
    debug mode.)"""
    size = g.tensor_size
    created = sc[S_CREATED]
    found = 0
    resident = 0
    evictable = 0
    evictable_bytes = 0
    for s in range(created):
        if g.tensor_storage[s] != s:
            continue
        if st[R_LOCK, s] < 0:
            found += 1
        if st[R_MATERIAL, s]:
            resident += size[s]
        should_pool = st[R_MATERIAL, s] != 0 and st[R_LOCK, s] == 0
        if should_pool != (st[R_IN_POOL, s] != 0):
            found += 1
        if should_pool:
            evictable += 1
            evictable_bytes += size[s]
    listed = 0
    listed_bytes = 0
    s = sc[S_POOL_HEAD]
    while s != -1 and listed <= created:
        listed += 1
        listed_bytes += size[s]
        s = st[R_POOL_NEXT, s]
    if resident != sc[S_MEMORY]:
        found += 1
    if not (evictable == listed == sc[S_POOL_SIZE]):
        found += 1
    if not (evictable_bytes == listed_bytes == sc[S_POOL_BYTES]):
        found += 1
    sc[S_ANOMALIES] += found
    return found
