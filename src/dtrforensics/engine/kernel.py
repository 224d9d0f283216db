"""The replay kernel: semantics.md §4-§8 as a resumable state machine.

All state lives in arrays (named in `layout`), so the kernel can stop at any
step (slice budget used up, event buffer full, wall clock to check) and resume
where it was. `materialize` recursion (§6) is an explicit frame stack: deep
nesting is just a taller array. One step runs one command (§5) or one phase of
the innermost materialization; each phase is a function below, named after
the section it implements. Compiled with numba; with `NUMBA_DISABLE_JIT=1` it
runs as plain Python (the test suite checks that form against the oracle).
"""

from __future__ import annotations

import numpy as np

from ..trace.program import CMD_COMPUTE, CMD_GET, CMD_RELEASE
from .bitsets import (
    bits_compute,
    bits_count_range,
    bits_list,
    clear_bit,
    lowest_bit,
    njit,
    set_bit,
)
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
    G_MASK_COST,
    G_MASK_ROUNDS,
    G_MASK_SAVED,
    G_MEMO_FAILURES,
    G_MEMO_SKIP,
    MASK_BASES,
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
    S_REMAT_COMPUTE,
    S_REMAT_LIMIT,
    S_REMATS,
    S_SCORE_EVALS,
    S_STATUS,
    S_STEPS,
    S_STOP_CMD,
    S_WALK_VISITS,
    SCRATCH_AFFECTED,
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
    BITSET_MIN,
    absorb_into,
    build,
    build_bits,
    build_from_bits,
    clear,
    compact_arena,
    frontier_members,
)
from .score_call import call_score

# What `_choose` returns instead of a storage when it finds no victim.
NO_VICTIM = -1              # every pool member is excluded by an intervention
FORCED_NOT_CANDIDATE = -2   # the forced victim is not in the pool (or is excluded)
POLICY_FAULT = -3           # a policy from a file scored NaN or below 0 (or raised)


@njit(cache=True, inline="always")
def _emit(ev, evf, sc, kind, tensor, storage, nbytes):
    row = sc[S_N_EVENTS]
    sc[S_N_EVENTS] = row + 1
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
    evf[row, F_SCORE] = np.nan
    evf[row, F_RUNNER_SCORE] = np.nan
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
    """§6.2: a lock count leaving 0 takes the storage out of the pool."""
    if st[R_LOCK, s] == 0:
        _pool_remove(sc, st, size, s)
    st[R_LOCK, s] += 1


@njit(cache=True, inline="always")
def _unlock(sc, st, size, s):
    """§6.5: a lock count returning to 0 appends the storage to the pool."""
    st[R_LOCK, s] -= 1
    if st[R_LOCK, s] == 0:
        _pool_append(sc, st, size, s)
    elif st[R_LOCK, s] < 0:
        sc[S_ANOMALIES] += 1  # §13.2


@njit(cache=True)
def check_invariants(g, sc, st):
    """Count the breaches of semantics.md §13.1 and §13.3 into S_ANOMALIES (one
    pass over the storages and the pool); returns how many were found."""
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


# ---------------------------------------------------------------- walks (§8.2)

# A region's sets are kept by engine/regions.py (build, contains, iterate,
# absorb); here they are computed: a plain walk from one base, or the shared
# walks of many bases after a compute (below).

@njit(cache=True, inline="always")
def _walk(g, sc, material, st_compute, mark, out_int, out_fr, base, backward):
    """From-scratch evicted neighbourhood of `base` in one direction (§8.2).
    Returns (interior count, frontier count, interior compute) into out arrays.
    The interior list is the walk's own work list (breadth-first: the sets, not
    their order, are the region)."""
    sc[S_EPOCH] += 1
    epoch = sc[S_EPOCH]
    created = sc[S_CREATED]
    if backward:
        ptr, nbr, when = g.bwd_ptr, g.bwd_nbr, g.bwd_time
    else:
        ptr, nbr, when = g.fwd_ptr, g.fwd_nbr, g.fwd_time
    mark[base] = epoch  # never its own frontier
    n_int = 0
    n_fr = 0
    comp = 0
    visits = 0
    x = base
    while True:
        visits += 1
        for e in range(ptr[x], ptr[x + 1]):
            if when[e] >= created:
                break
            u = nbr[e]
            if mark[u] == epoch:
                continue
            mark[u] = epoch
            if material[u]:
                out_fr[n_fr] = u
                n_fr += 1
            else:
                out_int[n_int] = u
                n_int += 1
                comp += st_compute[u]
        if visits > n_int:
            break
        x = out_int[visits - 1]
    sc[S_WALK_VISITS] += visits
    return n_int, n_fr, comp


@njit(cache=True, inline="always")
def _rebuild(g, sc, material, st_compute, mark, scratch, rg, s, backward):
    """§8.2: recompute one region of storage s from scratch."""
    r = 2 * s + backward
    sc[S_REBUILDS] += 1
    interior = scratch[SCRATCH_INTERIOR]
    frontier = scratch[SCRATCH_FRONTIER]
    n_int, n_fr, comp = _walk(g, sc, material, st_compute, mark, interior, frontier, s,
                              backward)
    build(rg, sc, r, interior, n_int)
    build(rg, sc, rg.n_regions + r, frontier, n_fr)
    rg.compute[r] = comp
    rg.fr_live[r] = n_fr


# ---------------------------------------------------------------- scoring

# Relative error bound of a float-first ratio (two roundings) with a wide margin:
# a candidate whose float score exceeds both the best and the runner-up by more
# than this cannot be either, so its exact score is not needed.
APPROX_MARGIN = 1e-12


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


@njit(cache=True)
def _fresh_neighbourhoods(g, pol, sc, material, st_compute, mark, scratch, s):
    """From-scratch neighbourhood computes (the dtr-exact-nbhd variant, §8.5). Kept out
    of the scan's common path: a call carrying the graph tuple costs far more
    than the region lookup it replaces."""
    fwd = 0
    bwd = 0
    if pol[P_FWD]:
        fwd = _walk(g, sc, material, st_compute, mark, scratch[SCRATCH_INTERIOR],
                    scratch[SCRATCH_FRONTIER], s, FORWARD)[2]
    if pol[P_BWD]:
        bwd = _walk(g, sc, material, st_compute, mark, scratch[SCRATCH_INTERIOR],
                    scratch[SCRATCH_FRONTIER], s, BACKWARD)[2]
    return fwd, bwd


# ---------------------------------------------------------------- the machine

@njit(cache=True)
def run_slice(g, pol, sc, st, fr, pending, scratch, mark, rg, stream, ev, evf, cand, candf,
              iv_retain, iv_window, iv_forbid, iv_force, score_fn, locked, probe,
              max_steps, event_room, cand_room):
    """Advance the replay by at most `max_steps` steps; returns the status.

    score_fn, locked: the address of a policy from a file's compiled score
    (0 for a built-in: the kernel scores it) and storages never evicted
    (engine/user_policy.py); probe receives the features of the candidate
    whose score faulted.

    st: state rows (`layout.R_*`); fr: frame stack rows (`layout.FR_*`), one
    column per materialization in progress. Stops early (STATUS_RUNNING) when
    fewer than `event_room` event rows or `cand_room` candidate rows remain, so
    one step always fits.
    """
    emit = sc[S_EMIT] != 0
    steps = 0
    while True:
        if sc[S_STATUS] != STATUS_RUNNING:
            break
        if steps >= max_steps or _no_room(sc, rg, stream, ev, cand, event_room, cand_room):
            break
        if sc[S_DEPTH] == 0 and 0 <= sc[S_STOP_CMD] <= sc[S_CMD_POS]:
            break   # the driver asked to stop at this command boundary
        steps += 1
        sc[S_STEPS] += 1
        if sc[S_DEPTH] == 0:
            _next_command(g, pol, sc, st, fr, scratch, mark, rg, stream, ev, evf, emit)
            continue
        f = sc[S_DEPTH] - 1
        phase = fr[FR_PHASE, f]
        if phase == PH_ENTER:
            _enter(g, sc, st, fr, pending, f)
        elif phase == PH_PARENT:
            _next_parent(g, sc, st, fr, pending, ev, evf, emit, f)
        elif phase == PH_PARENT_LOCK:
            _lock_parent(g, sc, st, fr, pending, f)
        elif phase == PH_CHECK:
            _allocation_check(g, sc, st, fr, ev, evf, emit, f)
        elif phase == PH_FREE:
            _free_one(g, pol, sc, st, fr, scratch, mark, rg, stream, ev, evf, cand, candf, emit,
                      iv_retain, iv_window, iv_forbid, iv_force, score_fn, locked, probe, f)
        else:
            _compute_and_unlock(g, pol, sc, st, fr, scratch, mark, rg, ev, evf, emit, f)
    _flush(g, sc, st, mark, scratch, rg)   # the driver reads, digests and snapshots regions
    return sc[S_STATUS]


@njit(cache=True, inline="always")
def _no_room(sc, rg, stream, ev, cand, event_room, cand_room):
    """Whether a buffer could overflow within the next step (the driver then
    drains it, or compacts or grows the arena, and resumes)."""
    if sc[S_N_STREAM] >= stream.shape[0]:
        return True
    if sc[S_EMIT] != 0 and sc[S_N_EVENTS] + event_room > ev.shape[0]:
        return True
    if sc[S_EMIT_CANDS] != 0 and sc[S_N_CANDS] + cand_room > cand.shape[0]:
        return True
    return sc[S_ARENA_TOP] * 4 > rg.arena.shape[0] * 3


# ---------------------------------------------------------------- commands (§5)

@njit(cache=True, inline="always")
def _next_command(g, pol, sc, st, fr, scratch, mark, rg, stream, ev, evf, emit):
    """Run the schedule's next command, or end the run when there is none."""
    _flush(g, sc, st, mark, scratch, rg)   # a compute command creates edges (§4.2)
    pos = sc[S_CMD_POS]
    if pos >= g.sched_kind.shape[0]:
        sc[S_STATUS] = STATUS_DONE
        return
    sc[S_CMD_POS] = pos + 1
    kind = g.sched_kind[pos]
    arg = g.sched_arg[pos]
    if kind == CMD_COMPUTE:
        _start_compute(g, sc, st, fr, ev, evf, emit, arg)
    elif kind == CMD_GET:
        st[R_REF_EXT, g.tensor_storage[arg]] += 1
    elif kind == CMD_RELEASE:
        _release(g, pol, sc, st, scratch, mark, rg, stream, ev, evf, emit, arg)
    else:  # CMD_PIN, §5.4
        if st[R_DEFINED, arg]:
            _pin(g, sc, st, ev, evf, emit, arg)
        else:
            _push(sc, fr, arg, 1, ACT_PIN)
            if emit:
                _emit(ev, evf, sc, EV_MATERIALIZE, arg, g.tensor_storage[arg], 0)


@njit(cache=True, inline="always")
def _start_compute(g, sc, st, fr, ev, evf, emit, op):
    """§5.1: create the op's outputs (§4.1, §4.2), then materialize the first."""
    sc[S_CUR_OP] = op
    first = g.op_first_tensor[op]
    for t in range(first, first + g.op_n_outputs[op]):
        sc[S_CREATED] = t + 1
        s = g.tensor_storage[t]
        if s == t:
            st[R_LAST_ACCESS, s] = NEVER
            st[R_COMPUTE, s] = 0
            st[R_LAST_OP, s] = -1
        st[R_REF_EXT, s] += 1
        if st[R_LAST_OP, s] != op:  # a storage's compute counts each distinct op once
            st[R_LAST_OP, s] = op
            st[R_COMPUTE, s] += g.op_cost[op]
    _push(sc, fr, first, 0, ACT_COMPUTE)
    if emit:
        _emit(ev, evf, sc, EV_MATERIALIZE, first, g.tensor_storage[first], 0)


@njit(cache=True, inline="always")
def _release(g, pol, sc, st, scratch, mark, rg, stream, ev, evf, emit, t):
    """§5.3: drop a reference; a resident, unpinned storage left without any is
    freed at once (a dead free)."""
    s = g.tensor_storage[t]
    st[R_REF_EXT, s] -= 1
    if st[R_REF_EXT, s] == 0 and st[R_MATERIAL, s] and not st[R_PINNED, s]:
        if emit:
            _emit(ev, evf, sc, EV_FREE_DEAD, t, s, g.tensor_size[s])
        sc[S_DEAD] += 1
        _stream(sc, stream, STREAM_DEAD, s)
        _evict(g, pol, sc, st, mark, scratch, rg, s)


@njit(cache=True)
def _pin(g, sc, st, ev, evf, emit, t):
    """§5.4: lock a storage for good (it never returns to the pool)."""
    s = g.tensor_storage[t]
    if st[R_PINNED, s]:
        return
    _lock(sc, st, g.tensor_size, s)
    st[R_PINNED, s] = 1
    if emit:
        _emit(ev, evf, sc, EV_PIN, t, s, g.tensor_size[s])


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
    if f + 1 > sc[S_MAX_DEPTH]:
        sc[S_MAX_DEPTH] = f + 1


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
def _next_parent(g, sc, st, fr, pending, ev, evf, emit, f):
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
            _emit(ev, evf, sc, EV_MATERIALIZE, p, g.tensor_storage[p], 0)


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
def _allocation_check(g, sc, st, fr, ev, evf, emit, f):
    """§6.3, first comparison: fits (compute next) or must free memory; a
    check that must free samples the pinned bytes (§12.6)."""
    t = fr[FR_TENSOR, f]
    request = g.op_total_size[g.tensor_op[t]]
    over = _does_not_fit(sc, request)
    if sc[S_DEBUG]:
        check_invariants(g, sc, st)
    if emit:
        row = _emit(ev, evf, sc, EV_ALLOC_CHECK, t, g.tensor_storage[t], request)
        ev[row, E_REQUEST] = request
        ev[row, E_FLAG] = 1 if over else 0
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
def _free_one(g, pol, sc, st, fr, scratch, mark, rg, stream, ev, evf, cand, candf, emit,
              iv_retain, iv_window, iv_forbid, iv_force, score_fn, locked, probe, f):
    """§6.3, the eviction loop: compare again; while it does not fit, evict one
    victim (§7) per step, or end the run out of memory (§10.3)."""
    t = fr[FR_TENSOR, f]
    request = g.op_total_size[g.tensor_op[t]]
    if not _does_not_fit(sc, request):
        fr[FR_PHASE, f] = PH_COMPUTE
        return
    if sc[S_POOL_SIZE] == 0:
        _out_of_memory(g, sc, ev, evf, emit, t, request)
        return
    _flush(g, sc, st, mark, scratch, rg)   # the scan reads every candidate's regions
    if sc[S_STATUS] != STATUS_RUNNING:
        return   # the arena filled (STATUS_ARENA_FULL)
    decision = sc[S_EVICTIONS]
    victim = _choose(g, pol, sc, st, mark, scratch, rg, ev, evf, cand, candf, emit,
                     sc[S_EMIT_CANDS] != 0, iv_retain, iv_window, iv_forbid, iv_force,
                     score_fn, locked, probe, decision, t, request)
    if victim == POLICY_FAULT:
        sc[S_POLICY_FAULT] = decision
        sc[S_STATUS] = STATUS_POLICY_FAULT
        return
    if victim == FORCED_NOT_CANDIDATE:
        sc[S_STATUS] = STATUS_FORCE_FAILED
        return
    if victim == NO_VICTIM:
        _out_of_memory(g, sc, ev, evf, emit, t, request)
        return
    sc[S_EVICTIONS] += 1
    st[R_TIMES_EVICTED, victim] += 1
    _stream(sc, stream, STREAM_PRESSURE, victim)
    _evict(g, pol, sc, st, mark, scratch, rg, victim)


@njit(cache=True, inline="always")
def _out_of_memory(g, sc, ev, evf, emit, t, request):
    sc[S_STATUS] = STATUS_OOM
    if emit:
        row = _emit(ev, evf, sc, EV_OOM, t, g.tensor_storage[t], request)
        ev[row, E_REQUEST] = request


@njit(cache=True, inline="always")
def _compute_and_unlock(g, pol, sc, st, fr, scratch, mark, rg, ev, evf, emit, f):
    """§6.4-§6.6, then the frame completes: the end of a compute command sets
    its outputs' last access (§5.1), the end of a pin pins (§5.4)."""
    t = fr[FR_TENSOR, f]
    op = g.tensor_op[t]
    _compute(g, pol, sc, st, mark, scratch, rg, ev, evf, emit, t, fr[FR_REMAT, f] != 0)
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
        _pin(g, sc, st, ev, evf, emit, t)


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
    """§5.5, then the absorbs of §8.3."""
    _flush(g, sc, st, mark, scratch, rg)   # before residency changes (and absorbs read)
    st[R_MATERIAL, s] = 0
    sc[S_MEMORY] -= g.tensor_size[s]
    _pool_remove(sc, st, g.tensor_size, s)
    created = sc[S_CREATED]
    for i in range(g.st_tensor_ptr[s], g.st_tensor_ptr[s + 1]):
        u = g.st_tensors[i]
        if u >= created:
            break
        st[R_DEFINED, u] = 0
    if pol[P_REGIONS]:
        rf = 2 * s + FORWARD
        rb = 2 * s + BACKWARD
        members = scratch[SCRATCH_MEMBERS]
        sc[S_EPOCH] += 1
        n = frontier_members(rg, rb, members, mark, sc[S_EPOCH])
        absorb_into(sc, st[R_COMPUTE], mark, rg, members, n, FORWARD, s, rf)
        sc[S_EPOCH] += 1
        n = frontier_members(rg, rf, members, mark, sc[S_EPOCH])
        absorb_into(sc, st[R_COMPUTE], mark, rg, members, n, BACKWARD, s, rb)
        clear(rg, sc, rf)
        clear(rg, sc, rb)


@njit(cache=True, inline="always")
def _compute(g, pol, sc, st, mark, scratch, rg, ev, evf, emit, t, remat):
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
    if sc[S_MEMORY] > sc[S_PEAK]:
        sc[S_PEAK] = sc[S_MEMORY]
    if remat:
        sc[S_REMAT_COMPUTE] += cost
        sc[S_REMATS] += 1
    else:
        sc[S_MODEL_COMPUTE] += cost
    material[g.tensor_storage[t]] = 1
    defined[t] = 1
    if emit:
        row = _emit(ev, evf, sc, EV_COMPUTE, t, g.tensor_storage[t], g.tensor_size[t])
        ev[row, E_FLAG] = FLAG_REMAT if remat else 0
        ev[row, E_COST] = cost
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
                row = _emit(ev, evf, sc, EV_COMPUTE, u, g.tensor_storage[u], g.tensor_size[u])
                ev[row, E_FLAG] = FLAG_COLLATERAL | (FLAG_REMAT if remat else 0)
    for i in range(n_new):
        _pool_append(sc, st, g.tensor_size, newly[i])
    if pol[P_REGIONS] and n_new > 0:
        _rebuild_around(g, sc, st, mark, scratch, rg, newly, n_new)


@njit(cache=True, inline="always")
def _rebuild_around(g, sc, st, mark, scratch, rg, newly, n_new):
    """§8.4: both regions of each new resident storage, then the forward regions
    of their backward frontiers and the backward regions of their forward
    frontiers. The new residents' regions are built now (their frontiers say
    which others follow); the others are deferred to their next reader
    (`_defer`), which rebuilds them together, their walks shared."""
    material = st[R_MATERIAL]
    st_compute = st[R_COMPUTE]
    for i in range(n_new):
        _rebuild(g, sc, material, st_compute, mark, scratch, rg, newly[i], BACKWARD)
    _shared_rebuilds(g, sc, material, st_compute, mark, scratch, rg, newly, n_new, FORWARD)
    members = scratch[SCRATCH_AFFECTED]
    for direction in (FORWARD, BACKWARD):
        sc[S_EPOCH] += 1
        epoch = sc[S_EPOCH]
        if direction == FORWARD:  # built already
            for i in range(n_new):
                mark[newly[i]] = epoch
        for i in range(n_new):
            r = 2 * newly[i] + (BACKWARD - direction)  # the opposite frontier
            n = frontier_members(rg, r, members, mark, epoch)
            for j in range(n):
                _defer(rg, 2 * members[j] + direction)


# Deferred rebuilds. Most regions a compute rebuilds are read only by the next
# eviction (its scan's scores, its absorbs), and a remat chain rebuilds many of
# them again at its next compute before any eviction. A deferred region is built
# by the first `_flush` (before an eviction, before a command, at the end of a
# slice) from the state then, which gives the sets a rebuild at deferral would
# have: until the flush only computes change the state and no edge appears
# (a command is a flush point), and a compute that makes a storage of the
# region's walk resident defers the region again (the walk back from that
# storage, rebuilt at once, reaches the region's base through the same
# non-resident storages), while one that does not leaves the walk as it was.

@njit(cache=True, inline="always")
def _defer(rg, r):
    """Region r's rebuild waits for the next `_flush` (once, however often asked)."""
    if rg.deferred[r] == 0:
        rg.deferred[r] = 1
        n = rg.deferred_n[0]
        rg.deferred_list[n] = r
        rg.deferred_n[0] = n + 1


@njit(cache=True, inline="always")
def _flush(g, sc, st, mark, scratch, rg):
    """`_rebuild_deferred` when a region waits: most flushes find none, and a
    call carrying the graph and regions tuples costs more than the test."""
    if rg.deferred_n[0] != 0:
        _rebuild_deferred(g, sc, st, mark, scratch, rg)


@njit(cache=True)
def _rebuild_deferred(g, sc, st, mark, scratch, rg):
    """Rebuild every deferred region, one direction at a time, walks shared (on
    LSTM 0.264 a flush's dozen backward bases share one masked walk: 224 M
    plain visits become 85 M, where the gate of `_shared_rebuilds` declined
    seven in eight)."""
    n = rg.deferred_n[0]
    rg.deferred_n[0] = 0
    bases = scratch[SCRATCH_AFFECTED]
    for direction in (FORWARD, BACKWARD):
        m = 0
        for i in range(n):
            r = rg.deferred_list[i]
            if r - 2 * (r >> 1) == direction:
                rg.deferred[r] = 0
                bases[m] = r >> 1
                m += 1
        if m > 0:
            _rebuild_batch(g, sc, st[R_MATERIAL], st[R_COMPUTE], mark, scratch, rg, bases, m,
                           direction, True)


# Shared walks. All rebuilds of one direction after a compute see the same
# resident set, and the walks of neighbouring bases cover the same evicted
# storages again and again (hundreds of bases around one evicted stretch of
# InceptionV4). `_shared_rebuilds` walks each non-resident storage x once per
# direction, keeping as bitsets the non-resident storages reachable from x
# (x included) and the resident storages next to them; a base's region is the
# union over its non-resident neighbours, the same sets as `_walk` (§8.2). It
# needs the non-resident part to be acyclic (views can close cycles) and the
# memo rows to suffice; otherwise that rebuild walks as before, and later
# rounds walk plainly for a while (`memo_gate` G_MEMO_FAILURES, G_MEMO_SKIP).
# Where memo rows do not pay, bases with large regions take masked walks instead.
MEMO_MIN_BASES = 16
MEMO_WORDS_PER_BASE = 2    # a shared walk costs bitset words per edge, a plain one a visit per base
MEMO_MAX_BACKOFF = 12      # after the k-th failure, 2**min(k, 12) rebuild rounds walk plainly


@njit(cache=True)
def _shared_rebuilds(g, sc, material, st_compute, mark, scratch, rg, bases, n_bases, backward):
    """§8.2 for `bases` (all resident), one direction, walks shared: by memo rows
    for many bases, else by masked walks where the regions are large and recent
    masked walks shared enough, else plain."""
    _rebuild_batch(g, sc, material, st_compute, mark, scratch, rg, bases, n_bases, backward,
                   False)


@njit(cache=True)
def _rebuild_batch(g, sc, material, st_compute, mark, scratch, rg, bases, n_bases, backward,
                   masks_pay):
    """`_shared_rebuilds`; with `masks_pay`, masked walks wherever the regions are
    large, whatever recent ones shared (a flush's bases crowd around the same
    evicted stretches). Leaves the work space as masked walks expect it
    (memo_row, and the first MASK_BASES rows of memo_int and memo_fr, zero)."""
    words = rg.memo_int.shape[1]
    gate = rg.memo_gate
    use_memo = n_bases >= MEMO_MIN_BASES and n_bases * MEMO_WORDS_PER_BASE >= words
    if use_memo and gate[G_MEMO_SKIP] > 0:
        gate[G_MEMO_SKIP] -= 1  # backing off after failed attempts
        use_memo = False
    if not use_memo and n_bases >= 2 and _large_regions(rg, bases, n_bases, backward):
        gate[G_MASK_ROUNDS] += 1
        if (masks_pay or gate[G_MASK_SAVED] >= MASK_MIN_SHARING * gate[G_MASK_COST]
                or gate[G_MASK_ROUNDS] % MASK_PROBE_EVERY == 0):
            per_walk = min(MASK_BASES, rg.memo_int.shape[0])
            cost = 0
            served = 0
            for j in range(0, n_bases, per_walk):
                c, n = _mask_rebuilds(g, sc, material, st_compute, scratch, rg, bases[j:],
                                      min(per_walk, n_bases - j), backward)
                cost += c
                served += n
            gate[G_MASK_COST] += cost - (gate[G_MASK_COST] >> MASK_MEMORY)
            gate[G_MASK_SAVED] += served - (gate[G_MASK_SAVED] >> MASK_MEMORY)
            return
    memo_tried = use_memo
    used = 0
    for j in range(n_bases):
        s = bases[j]
        if use_memo:
            used = _memo_rebuild(g, sc, material, st_compute, scratch, rg, s, backward, used)
            if used >= 0:
                continue
            used = -used - 1
            use_memo = False
            gate[G_MEMO_FAILURES] += 1
            gate[G_MEMO_SKIP] = 1 << min(gate[G_MEMO_FAILURES], MEMO_MAX_BACKOFF)
        _rebuild(g, sc, material, st_compute, mark, scratch, rg, s, backward)
    for r in range(used):
        rg.memo_row[rg.memo_node[r]] = 0
    if memo_tried:   # leave what masked walks expect to find zero
        for r in range(min(used, MASK_BASES)):
            rg.memo_int[r, :] = 0
            rg.memo_fr[r, :] = 0


# Masked walks. Where memo rows do not pay (too few bases for the bitset width, or
# backing off) but the regions are large (the LSTM's slow regime: a handful of
# bases around one evicted stretch of a thousand storages), one walk carries a
# bitmask of the bases that reach each storage, for up to MASK_BASES bases at a
# time: the stretch is walked once, not once per base.
MASK_MIN_INTERIOR = 128  # mean interior, as the regions stood before, that may pay for one
MASK_MIN_SHARING = 2.0   # visits plain walks would make per visit a masked walk costs,
                         # over recent masked walks (memo_gate G_MASK_COST, G_MASK_SAVED:
                         # decaying by 2**-MASK_MEMORY a walk); below it, plain walks,
                         # with a masked walk every MASK_PROBE_EVERY-th time
MASK_MEMORY = 4
MASK_PROBE_EVERY = 16    # per G_MASK_ROUNDS: rounds that could have taken a masked walk
MASK_SCANS_PER_VISIT = 8  # ids a pass scans in the time of one visit (the gate's cost)


@njit(cache=True, inline="always")
def _large_regions(rg, bases, n_bases, backward):
    """Whether the bases' regions, as they stand before the rebuild, are large enough
    on average for a masked walk to beat plain walks (it has a fixed cost per base)."""
    prior = 0
    for j in range(n_bases):
        prior += rg.len[2 * bases[j] + backward]
    return prior >= MASK_MIN_INTERIOR * n_bases


@njit(cache=True)
def _mask_rebuilds(g, sc, material, st_compute, scratch, rg, bases, n_bases, backward):
    """§8.2 for up to MASK_BASES bases (all of one direction) in one walk: the
    same interiors, frontiers and computes as a plain walk from each base.
    Returns its cost in visits (storages walked from, and the id scans counted
    MASK_SCANS_PER_VISIT to a visit) and the visits plain walks would have made.
    It borrows the shared walks' work space: memo_row holds the masks (as
    uint64), memo_int[j] and memo_fr[j] the interior and frontier of bases[j],
    memo_node[j] its compute. All but memo_node are zero before and after
    (`_shared_rebuilds` leaves them so)."""
    if backward:
        ptr, nbr, when = g.bwd_ptr, g.bwd_nbr, g.bwd_time
    else:
        ptr, nbr, when = g.fwd_ptr, g.fwd_nbr, g.fwd_time
    words = rg.memo_int.shape[1]
    masks = rg.memo_row.view(np.uint64)
    for j in range(n_bases):
        rg.memo_node[j] = 0
    visits_before = sc[S_WALK_VISITS]
    lo, hi, scanned = _mask_propagate(sc, material, masks, ptr, nbr, when, sc[S_CREATED], bases,
                                      n_bases, backward)
    scans = scanned + max(0, hi - lo + 1)   # the passes' ids, then the collection's
    cost = sc[S_WALK_VISITS] - visits_before + scans // MASK_SCANS_PER_VISIT
    served = 0
    _mask_collect(material, st_compute, masks, rg.memo_int, rg.memo_fr, rg.memo_node, lo, hi)
    lo_w = lo >> 6
    hi_w = hi >> 6 if hi >= 0 else -1
    interior = scratch[SCRATCH_INTERIOR]
    frontier = scratch[SCRATCH_FRONTIER]
    for j in range(n_bases):
        r = 2 * bases[j] + backward
        sc[S_REBUILDS] += 1
        n_int = bits_count_range(rg.memo_int[j], lo_w, hi_w)
        build_from_bits(rg, sc, r, rg.memo_int[j], n_int, lo_w, hi_w, words, interior)
        n_fr = bits_count_range(rg.memo_fr[j], lo_w, hi_w)
        build_from_bits(rg, sc, rg.n_regions + r, rg.memo_fr[j], n_fr, lo_w, hi_w, words, frontier)
        rg.compute[r] = rg.memo_node[j]
        rg.fr_live[r] = n_fr
        served += n_int + 1
        for w in range(lo_w, hi_w + 1):
            rg.memo_int[j, w] = 0
            rg.memo_fr[j, w] = 0
    return cost, served


@njit(cache=True)
def _mask_propagate(sc, material, mask, ptr, nbr, when, created, bases, n_bases, backward):
    """Bit j of mask[x]: x is in the region of bases[j] (interior if non-resident,
    frontier if resident). Bits flow from each base's neighbours through
    non-resident storages to a fixpoint, storages taken in id order: children
    have larger ids than their parents (the backward direction goes down), so
    one pass suffices unless a view's edge points against that order, which
    calls for another pass from where it points. Returns the range of storage
    ids reached and the ids the passes scanned."""
    one = np.uint64(1)
    lo = mask.shape[0]
    hi = -1
    for j in range(n_bases):
        b = bases[j]
        bit = one << np.uint64(j)
        for e in range(ptr[b], ptr[b + 1]):
            if when[e] >= created:
                break
            u = nbr[e]
            mask[u] |= bit
            lo = min(lo, u)
            hi = max(hi, u)
    visits = n_bases
    scanned = 0
    start = hi if backward else lo
    while start >= 0:
        x = start
        start = -1
        while (x >= lo) if backward else (x <= hi):
            scanned += 1
            m = mask[x]
            if m != 0 and not material[x]:
                visits += 1
                for e in range(ptr[x], ptr[x + 1]):
                    if when[e] >= created:
                        break
                    u = nbr[e]
                    old = mask[u]
                    if old | m == old:
                        continue
                    mask[u] = old | m
                    if not material[u] and ((u > x) if backward else (u < x)):
                        start = u if start < 0 else (max(start, u) if backward else min(start, u))
                    lo = min(lo, u)
                    hi = max(hi, u)
            x += -1 if backward else 1
    sc[S_WALK_VISITS] += visits
    for j in range(n_bases):
        mask[bases[j]] &= ~(one << np.uint64(j))   # never its own interior or frontier
    return lo, hi, scanned


@njit(cache=True)
def _mask_collect(material, st_compute, mask, interiors, frontiers, computes, lo, hi):
    """Each base's interior and frontier into its bitset rows and its interior
    compute into `computes`, from the masks of storages lo..hi, which it clears."""
    one = np.uint64(1)
    for x in range(lo, hi + 1):
        m = mask[x]
        if m == 0:
            continue
        mask[x] = 0
        xw = x >> 6
        xbit = one << np.uint64(x & 63)
        if material[x]:
            while m:
                frontiers[lowest_bit(m), xw] |= xbit
                m &= m - one
        else:
            c = st_compute[x]
            while m:
                j = lowest_bit(m)
                m &= m - one
                interiors[j, xw] |= xbit
                computes[j] += c


@njit(cache=True, inline="always")
def _memo_rebuild(g, sc, material, st_compute, scratch, rg, base, backward, used):
    """Rebuild one region of `base` from the shared walks; returns the memo rows
    in use, or -(rows in use) - 1 when it cannot (then nothing was written).
    A large interior is stored as its bitset alone, so its members are never
    listed; when it is one walked storage's row, its size and compute come
    from that row's cache (`_memo_stats`) instead of a pass over its bits."""
    if backward:
        ptr, nbr, when = g.bwd_ptr, g.bwd_nbr, g.bwd_time
    else:
        ptr, nbr, when = g.fwd_ptr, g.fwd_nbr, g.fwd_time
    created = sc[S_CREATED]
    words = rg.memo_int.shape[1]
    acc_int = rg.memo_acc[0]
    acc_fr = rg.memo_acc[1]
    for w in range(words):
        acc_int[w] = 0
        acc_fr[w] = 0
    row_runs = 0     # rows OR-ed in, a repeat of the previous one not counted
    last_row = -1
    for e in range(ptr[base], ptr[base + 1]):
        if when[e] >= created:
            break
        u = nbr[e]
        if u == base:
            continue
        if material[u]:
            set_bit(rg.memo_acc, 1, u)
            continue
        if rg.memo_row[u] <= 0:
            used = _memo_walk(sc, material, rg.memo_row, rg.memo_node, rg.memo_int, rg.memo_fr,
                              rg.memo_stats, rg.memo_stack, ptr, nbr, when, created, u, used)
            if used < 0:
                return used
        row = rg.memo_row[u] - 1
        if row != last_row:
            row_runs += 1
            last_row = row
        for w in range(words):
            acc_int[w] |= rg.memo_int[row, w]
            acc_fr[w] |= rg.memo_fr[row, w]
    clear_bit(rg.memo_acc, 1, base)
    sc[S_REBUILDS] += 1
    sc[S_WALK_VISITS] += 1
    r = 2 * base + backward
    comp = -1
    if row_runs == 1:
        n_int, comp = _memo_stats(rg, st_compute, last_row, words)
    else:
        n_int = bits_count_range(acc_int, 0, words - 1)
    if n_int >= BITSET_MIN and build_bits(rg, sc, r, acc_int, n_int, words):
        if comp < 0:
            comp = bits_compute(acc_int, st_compute, words)
    else:
        interior = scratch[SCRATCH_INTERIOR]
        n_int = bits_list(acc_int, words, interior)
        comp = 0
        for i in range(n_int):
            comp += st_compute[interior[i]]
        build(rg, sc, r, interior, n_int)
    n_fr = bits_count_range(acc_fr, 0, words - 1)
    build_from_bits(rg, sc, rg.n_regions + r, acc_fr, n_fr, 0, words - 1, words,
               scratch[SCRATCH_FRONTIER])
    rg.compute[r] = comp
    rg.fr_live[r] = n_fr
    return used


@njit(cache=True, inline="always")
def _memo_stats(rg, st_compute, row, words):
    """(members, compute) of a memo row's interior, counted once per row."""
    if rg.memo_stats[row, 0] < 0:
        rg.memo_stats[row, 0] = bits_count_range(rg.memo_int[row], 0, words - 1)
        rg.memo_stats[row, 1] = bits_compute(rg.memo_int[row], st_compute, words)
    return rg.memo_stats[row, 0], rg.memo_stats[row, 1]


@njit(cache=True)
def _memo_walk(sc, material, memo_row, memo_node, memo_int, memo_fr, memo_stats, stack, ptr,
               nbr, when, created, x, used):
    """Make sure non-resident x has its memo row (depth-first, post-order);
    returns the rows in use, or -(rows in use) - 1 on a cycle or when the rows
    run out. memo_row: 0 unwalked, row + 1 done, -(row + 1) in progress."""
    state = memo_row[x]
    if state > 0:
        return used
    if state < 0:
        return -used - 1
    rows = memo_int.shape[0]
    words = memo_int.shape[1]
    top = 0
    if used >= rows:
        return -used - 1
    _memo_open(memo_row, memo_node, memo_int, memo_fr, memo_stats, x, used, words)
    used += 1
    stack[0, 0] = x
    stack[0, 1] = ptr[x]
    top = 1
    visits = 0
    while top > 0:
        y = stack[top - 1, 0]
        e = stack[top - 1, 1]
        row = -memo_row[y] - 1
        pushed = False
        while e < ptr[y + 1]:
            if when[e] >= created:
                e = ptr[y + 1]
                break
            u = nbr[e]
            e += 1
            if material[u]:
                set_bit(memo_fr, row, u)
                continue
            su = memo_row[u]
            if su < 0:
                return -used - 1  # a cycle through non-resident storages
            if su > 0:
                _memo_union(memo_int, memo_fr, row, su - 1, words)
                continue
            if used >= rows:
                return -used - 1
            _memo_open(memo_row, memo_node, memo_int, memo_fr, memo_stats, u, used, words)
            used += 1
            stack[top - 1, 1] = e
            stack[top, 0] = u
            stack[top, 1] = ptr[u]
            top += 1
            pushed = True
            break
        if pushed:
            continue
        visits += 1
        memo_row[y] = row + 1
        top -= 1
        if top > 0:
            _memo_union(memo_int, memo_fr, -memo_row[stack[top - 1, 0]] - 1, row, words)
    sc[S_WALK_VISITS] += visits
    return used


@njit(cache=True, inline="always")
def _memo_open(memo_row, memo_node, memo_int, memo_fr, memo_stats, x, row, words):
    memo_row[x] = -(row + 1)
    memo_node[row] = x
    memo_stats[row, 0] = -1  # not counted yet (`_memo_stats`)
    for w in range(words):
        memo_int[row, w] = 0
        memo_fr[row, w] = 0
    set_bit(memo_int, row, x)


@njit(cache=True, inline="always")
def _memo_union(memo_int, memo_fr, into, row, words):
    for w in range(words):
        memo_int[into, w] |= memo_int[row, w]
        memo_fr[into, w] |= memo_fr[row, w]


# ---------------------------------------------------------------- victim choice (§7, §14)

@njit(cache=True, inline="always")
def _excluded(sc, iv_retain, iv_window, iv_forbid, decision, s):
    """§14: whether an intervention keeps storage s out of this decision."""
    sc[S_EXCLUSION_CHECKS] += 1
    if iv_retain[s]:
        op = sc[S_CUR_OP]
        if iv_window[0] <= op <= iv_window[1]:
            return True
    for i in range(iv_forbid.shape[0]):
        if iv_forbid[i, 0] == decision and iv_forbid[i, 1] == s:
            return True
    return False


@njit(cache=True, inline="always")
def _filtered(g, pol, locked, s):
    """Whether a policy from a file's filters (min size, locked) leave storage s out."""
    return g.tensor_size[s] < pol[P_MIN_SIZE] or (locked.shape[0] > 0 and locked[s] != 0)


@njit(cache=True, inline="always")
def _rank(s, score, victim, best, runner, runner_score):
    """§7.1's comparison of one more candidate: `<=` makes the last of equal
    scores the victim, and the victim it displaces becomes the runner-up.
    Returns (victim, best, runner, runner_score)."""
    if score <= best:
        return s, score, victim, best
    if score <= runner_score:
        return victim, best, s, score
    return victim, best, runner, runner_score


@njit(cache=True, inline="always")
def _choose(g, pol, sc, st, mark, scratch, rg, ev, evf, cand, candf, emit, emit_cands,
            iv_retain, iv_window, iv_forbid, iv_force, score_fn, locked, probe,
            decision, t, request):
    """§7.1 for every policy: scan the pool in order, the last of equal minimal
    scores wins, the first zero stops the scan. Candidates: the pool less what
    a policy from a file filters out (min size, locked) and what an
    intervention excludes (§14). A built-in scores float-first, exactly only
    a possible victim or runner-up (§7.3); a policy from a file is one call of
    its compiled score. Returns the victim or NO_VICTIM (S_NO_CANDIDATE notes
    a pool the filters emptied), FORCED_NOT_CANDIDATE or POLICY_FAULT (the
    candidate's features in `probe`)."""
    st_size = g.tensor_size
    st_compute = st[R_COMPUTE]
    last_access = st[R_LAST_ACCESS]
    pool_next = st[R_POOL_NEXT]
    custom = pol[P_CUSTOM] != 0
    fresh = pol[P_FRESH] != 0
    forbids = iv_forbid.shape[0] > 0
    forced = _forced_victim(iv_force, decision)
    forced_score = np.nan
    victim, best, runner, runner_score = NO_VICTIM, np.inf, -1, np.inf
    position, filtered = 0, 0
    s = sc[S_POOL_HEAD]
    while s != -1:
        if custom and _filtered(g, pol, locked, s):
            filtered += 1
            s = pool_next[s]
            continue
        if (iv_retain[s] or forbids) and _excluded(sc, iv_retain, iv_window, iv_forbid,
                                                   decision, s):
            s = pool_next[s]
            continue
        if custom:
            score = _custom_score(g, pol, sc, st, mark, scratch, rg, score_fn, probe, s,
                                  decision, position, request)
            if not score >= 0.0:
                return POLICY_FAULT
            if s == forced:
                forced_score = score
            fwd = probe[FT_FWD_COMPUTE]
            bwd = probe[FT_BWD_COMPUTE]
        else:
            if fresh:
                fwd, bwd = _fresh_neighbourhoods(g, pol, sc, st[R_MATERIAL], st_compute, mark,
                                                 scratch, s)
            else:
                fwd, bwd = rg.compute[2 * s], rg.compute[2 * s + 1]
            score = _score(pol, st_compute[s], st_size[s], last_access[s], sc[S_CLOCK], fwd,
                           bwd, emit_cands)
            sc[S_SCORE_EVALS] += 1
            if not emit_cands:
                bound = score * (1.0 - APPROX_MARGIN)
                if bound > best and bound > runner_score:
                    position += 1
                    s = pool_next[s]
                    continue  # certainly neither the victim nor the runner-up
                score = _score(pol, st_compute[s], st_size[s], last_access[s], sc[S_CLOCK],
                               fwd, bwd, True)
        if emit_cands:
            _record_candidate(sc, cand, candf, decision, s, position, st_compute[s], fwd, bwd,
                              st_size[s], sc[S_CLOCK] - last_access[s], score)
        position += 1
        victim, best, runner, runner_score = _rank(s, score, victim, best, runner,
                                                   runner_score)
        if score == 0.0:
            break
        s = pool_next[s]
    if victim == NO_VICTIM and filtered > 0:
        sc[S_NO_CANDIDATE] = decision
    if forced >= 0:
        victim, best, runner, runner_score = _impose(
            g, pol, sc, st, mark, scratch, rg, iv_retain, iv_window, iv_forbid, score_fn,
            locked, probe, decision, request, forced, forced_score, victim, best, runner,
            runner_score)
        if victim < 0:
            return victim
    if victim >= 0 and emit:
        _emit_eviction(g, pol, sc, st, mark, scratch, rg, ev, evf, decision, t, request,
                       victim, best, runner, runner_score)
    return victim


@njit(cache=True)
def _impose(g, pol, sc, st, mark, scratch, rg, iv_retain, iv_window, iv_forbid, score_fn,
            locked, probe, decision, request, forced, forced_score, victim, best, runner,
            runner_score):
    """§14: a forced victim replaces the scan's, which becomes the runner-up.
    `forced_score`: its score if the scan met it (NaN if not). Returns
    (victim, score, runner, runner score); the victim is FORCED_NOT_CANDIDATE
    when the forced storage is not a candidate, POLICY_FAULT when a policy from
    a file faults on it."""
    custom = pol[P_CUSTOM] != 0
    if not st[R_IN_POOL, forced] or (custom and _filtered(g, pol, locked, forced)) or \
            _excluded(sc, iv_retain, iv_window, iv_forbid, decision, forced):
        return FORCED_NOT_CANDIDATE, best, runner, runner_score
    if forced == victim:
        return victim, best, runner, runner_score
    if not custom:
        forced_score = _exact_score(g, pol, sc, st, mark, scratch, rg, forced)
    elif forced_score != forced_score:  # after the scan stopped at a zero
        forced_score = _custom_score(g, pol, sc, st, mark, scratch, rg, score_fn, probe,
                                     forced, decision, -1, request)
        if not forced_score >= 0.0:
            return POLICY_FAULT, best, runner, runner_score
    return forced, forced_score, victim, best


@njit(cache=True)
def _custom_score(g, pol, sc, st, mark, scratch, rg, score_fn, probe, s, decision, position,
                  request):
    """The features of candidate s (engine/features.py) into `probe`, and the
    policy's score of them."""
    fwd = 0
    bwd = 0
    if pol[P_FRESH]:
        fwd, bwd = _fresh_neighbourhoods(g, pol, sc, st[R_MATERIAL], st[R_COMPUTE], mark,
                                         scratch, s)
    elif pol[P_REGIONS]:
        fwd = rg.compute[2 * s]
        bwd = rg.compute[2 * s + 1]
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
    return call_score(score_fn, probe)


@njit(cache=True, inline="always")
def _record_candidate(sc, cand, candf, decision, s, position, compute, fwd, bwd, size,
                      staleness, score):
    row = sc[S_N_CANDS]
    sc[S_N_CANDS] = row + 1
    cand[row, C_DECISION] = decision
    cand[row, C_STORAGE] = s
    cand[row, C_POSITION] = position
    cand[row, C_COMPUTE] = compute
    cand[row, C_FWD] = fwd
    cand[row, C_BWD] = bwd
    cand[row, C_SIZE] = size
    cand[row, C_STALENESS] = staleness
    candf[row] = score


@njit(cache=True, inline="always")
def _forced_victim(iv_force, decision):
    """The storage an intervention imposes at this decision, or -1 (the last
    pair for the decision wins)."""
    forced = -1
    for i in range(iv_force.shape[0]):
        if iv_force[i, 0] == decision:
            forced = iv_force[i, 1]
    return forced


@njit(cache=True)
def _neighbourhoods(g, pol, sc, st, mark, scratch, rg, s):
    """fwd and bwd of storage s as the policy reads them (§8)."""
    if pol[P_FRESH]:
        return _fresh_neighbourhoods(g, pol, sc, st[R_MATERIAL], st[R_COMPUTE], mark,
                                     scratch, s)
    return rg.compute[2 * s], rg.compute[2 * s + 1]


@njit(cache=True)
def _exact_score(g, pol, sc, st, mark, scratch, rg, s):
    fwd, bwd = _neighbourhoods(g, pol, sc, st, mark, scratch, rg, s)
    return _score(pol, st[R_COMPUTE, s], g.tensor_size[s], st[R_LAST_ACCESS, s], sc[S_CLOCK],
                  fwd, bwd, True)


@njit(cache=True)
def _emit_eviction(g, pol, sc, st, mark, scratch, rg, ev, evf, decision, t, request, victim,
                   score, runner, runner_score):
    """The `evict` event (hooks.py): the victim's score and its components."""
    row = _emit(ev, evf, sc, EV_EVICT, t, victim, g.tensor_size[victim])
    ev[row, E_DECISION] = decision
    ev[row, E_RUNNER] = runner
    ev[row, E_REQUEST] = request
    fwd, bwd = _neighbourhoods(g, pol, sc, st, mark, scratch, rg, victim)
    ev[row, E_COMPUTE] = st[R_COMPUTE, victim]
    ev[row, E_FWD] = fwd
    ev[row, E_BWD] = bwd
    ev[row, E_STALENESS] = sc[S_CLOCK] - st[R_LAST_ACCESS, victim]
    evf[row, F_SCORE] = score
    evf[row, F_RUNNER_SCORE] = runner_score if runner >= 0 else np.nan
