"""The replay kernel: SEMANTICS.md sections 3-6 as a resumable state machine.

All state lives in arrays, so the kernel can stop at any step (slice budget
used up, event buffer full, wall clock to check) and resume where it was.
`materialize` recursion is an explicit frame stack: deep nesting is just a
taller array. Compiled with numba; with `NUMBA_DISABLE_JIT=1` it runs as plain
Python, which the tests use to cross-check.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .exactdiv import exact_ratio
from .hooks import (
    C_BWD, C_COMPUTE, C_DECISION, C_FWD, C_POSITION, C_SIZE, C_STALENESS, C_STORAGE,
    E_BWD, E_BYTES, E_CLOCK, E_COMPUTE, E_COST, E_DECISION, E_DEPTH, E_FLAG, E_FWD, E_KIND,
    E_MEMORY, E_OP, E_POOL_BYTES, E_POOL_SIZE, E_REQUEST, E_RUNNER, E_STALENESS, E_STORAGE,
    E_TENSOR,
    EV_ALLOC_CHECK, EV_COMPUTE, EV_EVICT, EV_FREE_DEAD, EV_MATERIALIZE, EV_OOM, EV_PIN,
    F_RUNNER_SCORE, F_SCORE, FLAG_COLLATERAL, FLAG_REMAT,
)
from .policies import (
    P_BWD, P_COMPUTE, P_FRESH, P_FWD, P_LRU, P_ONE, P_REGIONS, P_SIZE, P_STALENESS,
)

# Scalar state slots (int64 vector `sc`).
(S_CLOCK, S_MEMORY, S_CMD_POS, S_CREATED, S_CUR_OP, S_DEPTH, S_MAX_DEPTH, S_MODEL_COMPUTE,
 S_REMAT_COMPUTE, S_EVICTIONS, S_DEAD, S_REMATS, S_COLLATERAL, S_POOL_BYTES, S_POOL_SIZE,
 S_POOL_HEAD, S_POOL_TAIL, S_MAXPIN_BYTES, S_MAXPIN_DEPTH, S_MAXPIN_OP, S_LO, S_HI_TRUE,
 S_STATUS, S_PEAK, S_EPOCH, S_N_EVENTS, S_N_CANDS, S_PEND_TOP, S_SCORE_EVALS,
 S_ANOMALIES, S_BUDGET, S_EMIT, S_EMIT_CANDS, S_REMAT_LIMIT, S_N_STREAM, S_UNUSED,
 S_STEPS, S_REBUILDS, S_WALK_VISITS, S_ABSORBS, S_ABSORB_WORK, S_ARENA_TOP,
 S_FREE_SLOTS) = range(43)
N_SCALARS = 43
# Eviction stream rows: kind (0 pressure, 1 dead), storage, op id, clock.
STREAM_PRESSURE, STREAM_DEAD = 0, 1

# Kernel status codes.
(STATUS_RUNNING, STATUS_DONE, STATUS_OOM, STATUS_THRASHED, STATUS_FORCE_FAILED,
 STATUS_ARENA_FULL) = range(6)

# Frame phases of a materialization.
PH_ENTER, PH_PARENT, PH_PARENT_LOCK, PH_CHECK, PH_FREE, PH_COMPUTE = range(6)
# What to do when a top-level frame completes.
ACT_NONE, ACT_COMPUTE, ACT_PIN = range(3)

NO_HI = -1
NEVER = np.iinfo(np.int64).min // 4


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


# ---------------------------------------------------------------- pool

@njit(cache=True, inline="always")
def _pool_append(sc, st_size, pool_prev, pool_next, in_pool, s):
    if in_pool[s]:
        return
    in_pool[s] = True
    tail = sc[S_POOL_TAIL]
    pool_prev[s] = tail
    pool_next[s] = -1
    if tail == -1:
        sc[S_POOL_HEAD] = s
    else:
        pool_next[tail] = s
    sc[S_POOL_TAIL] = s
    sc[S_POOL_SIZE] += 1
    sc[S_POOL_BYTES] += st_size[s]


@njit(cache=True, inline="always")
def _pool_remove(sc, st_size, pool_prev, pool_next, in_pool, s):
    if not in_pool[s]:
        return
    in_pool[s] = False
    p = pool_prev[s]
    n = pool_next[s]
    if p == -1:
        sc[S_POOL_HEAD] = n
    else:
        pool_next[p] = n
    if n == -1:
        sc[S_POOL_TAIL] = p
    else:
        pool_prev[n] = p
    sc[S_POOL_SIZE] -= 1
    sc[S_POOL_BYTES] -= st_size[s]


# ---------------------------------------------------------------- regions

# Regions (see state.Regions). Each of the 2n regions (2*s forward, 2*s+1
# backward) has two sets: its interior (set id r) and frontier (set id 2n + r),
# stored as blocks of one int64 arena (start/cap/len per set). A set that grows
# past its block moves to a new block at the arena's top; abandoned blocks are
# reclaimed by compaction. Any call that may allocate can move blocks, so code
# re-reads `rg.start` after it. Large sets also get a membership bitset (a row
# of `rg.bits`), so absorb tests membership in O(1) instead of re-marking them.
BITSET_MIN = 64


@njit(cache=True)
def compact_arena(rg, sc):
    """Slide live blocks down over abandoned ones (blocks keep their order)."""
    order = np.argsort(rg.start)
    top = 0
    arena = rg.arena
    for i in range(order.shape[0]):
        k = order[i]
        cap = rg.cap[k]
        if cap == 0:
            continue
        src = rg.start[k]
        n = rg.len[k]
        if src != top:
            for j in range(n):
                arena[top + j] = arena[src + j]
            rg.start[k] = top
        top += cap
    sc[S_ARENA_TOP] = top


@njit(cache=True)
def _ensure(rg, sc, k, extra):
    """Room in set k for `extra` more members; returns False if the arena is
    exhausted even after compaction (the driver then reruns with a larger one)."""
    n = rg.len[k]
    need = n + extra
    if need <= rg.cap[k]:
        return True
    cap = max(8, 2 * need)
    if sc[S_ARENA_TOP] + cap > rg.arena.shape[0]:
        compact_arena(rg, sc)
        if sc[S_ARENA_TOP] + cap > rg.arena.shape[0]:
            sc[S_STATUS] = STATUS_ARENA_FULL
            return False
    new = sc[S_ARENA_TOP]
    sc[S_ARENA_TOP] = new + cap
    old = rg.start[k]
    arena = rg.arena
    for j in range(n):
        arena[new + j] = arena[old + j]
    rg.start[k] = new
    rg.cap[k] = cap
    return True


@njit(cache=True, inline="always")
def _in_bits(bits, slot, x):
    return (bits[slot, x >> 6] >> np.uint64(x & 63)) & np.uint64(1) != 0


@njit(cache=True, inline="always")
def _set_bit(bits, slot, x):
    bits[slot, x >> 6] |= np.uint64(1) << np.uint64(x & 63)


@njit(cache=True, inline="always")
def _clear_bit(bits, slot, x):
    bits[slot, x >> 6] &= ~(np.uint64(1) << np.uint64(x & 63))


@njit(cache=True)
def _drop_index(rg, sc, k):
    slot = rg.bit_slot[k]
    if slot >= 0:
        rg.bit_slot[k] = -1
        rg.free_slots[sc[S_FREE_SLOTS]] = slot
        sc[S_FREE_SLOTS] += 1


@njit(cache=True)
def _index(rg, sc, k):
    """Give set k a membership bitset if it is large (and a bitset is free)."""
    n = rg.len[k]
    if n < BITSET_MIN:
        _drop_index(rg, sc, k)
        return
    slot = rg.bit_slot[k]
    if slot < 0:
        if sc[S_FREE_SLOTS] == 0:
            return
        sc[S_FREE_SLOTS] -= 1
        slot = rg.free_slots[sc[S_FREE_SLOTS]]
        rg.bit_slot[k] = slot
    rg.bits[slot, :] = 0
    base = rg.start[k]
    for i in range(n):
        _set_bit(rg.bits, slot, rg.arena[base + i])


@njit(cache=True)
def _walk(g, sc, material, st_compute, mark, scratch_stack, out_int, out_fr, base, backward):
    """From-scratch evicted neighbourhood of `base` in one direction.
    Returns (interior count, frontier count, interior compute) into out arrays."""
    sc[S_EPOCH] += 1
    epoch = sc[S_EPOCH]
    created = sc[S_CREATED]
    if backward:
        ptr, nbr, when = g.bwd_ptr, g.bwd_nbr, g.bwd_time
    else:
        ptr, nbr, when = g.fwd_ptr, g.fwd_nbr, g.fwd_time
    top = 0
    scratch_stack[top] = base
    top += 1
    n_int = 0
    n_fr = 0
    comp = 0
    visits = 0
    while top > 0:
        top -= 1
        x = scratch_stack[top]
        visits += 1
        for e in range(ptr[x], ptr[x + 1]):
            if when[e] >= created:
                break
            u = nbr[e]
            if mark[u] == epoch or u == base:
                continue
            mark[u] = epoch
            if material[u]:
                out_fr[n_fr] = u
                n_fr += 1
            else:
                out_int[n_int] = u
                n_int += 1
                comp += st_compute[u]
                scratch_stack[top] = u
                top += 1
    sc[S_WALK_VISITS] += visits
    return n_int, n_fr, comp


@njit(cache=True)
def _store(rg, sc, k, src, n):
    rg.len[k] = 0
    if rg.cap[k] > 4 * max(n, 8):
        rg.cap[k] = 2 * max(n, 8)  # the block's tail becomes garbage for compaction
    if not _ensure(rg, sc, k, n):
        return
    base = rg.start[k]
    for i in range(n):
        rg.arena[base + i] = src[i]
    rg.len[k] = n
    _index(rg, sc, k)


@njit(cache=True)
def _rebuild(g, sc, material, st_compute, mark, scratch, rg, s, backward):
    r = 2 * s + backward
    sc[S_REBUILDS] += 1
    n_int, n_fr, comp = _walk(g, sc, material, st_compute, mark, scratch[0], scratch[1],
                              scratch[2], s, backward)
    _store(rg, sc, r, scratch[1], n_int)
    _store(rg, sc, rg.n_regions + r, scratch[2], n_fr)
    rg.compute[r] = comp
    rg.fr_live[r] = n_fr


@njit(cache=True)
def _clear(rg, sc, r):
    f = rg.n_regions + r
    rg.len[r] = 0
    rg.len[f] = 0
    rg.cap[r] = 0  # blocks become garbage for compaction
    rg.cap[f] = 0
    rg.fr_live[r] = 0
    rg.compute[r] = 0
    _drop_index(rg, sc, r)
    _drop_index(rg, sc, f)


@njit(cache=True)
def frontier_members(rg, r, out, mark, epoch):
    """The live, distinct members of region r's frontier into `out`; returns the
    count. (An indexed frontier's block may hold removed or repeated entries;
    its bitset is the truth.)"""
    f = rg.n_regions + r
    slot = rg.bit_slot[f]
    base = rg.start[f]
    n = 0
    for i in range(rg.len[f]):
        x = rg.arena[base + i]
        if slot >= 0 and not _in_bits(rg.bits, slot, x):
            continue
        if mark[x] == epoch:
            continue
        mark[x] = epoch
        out[n] = x
        n += 1
    return n


@njit(cache=True)
def _compact_frontier(rg, f):
    """Drop removed and repeated entries of an indexed frontier's block."""
    slot = rg.bit_slot[f]
    base = rg.start[f]
    n = 0
    for i in range(rg.len[f]):
        x = rg.arena[base + i]
        if _in_bits(rg.bits, slot, x):
            _clear_bit(rg.bits, slot, x)
            rg.arena[base + n] = x
            n += 1
    for i in range(n):
        _set_bit(rg.bits, slot, rg.arena[base + i])
    rg.len[f] = n


@njit(cache=True)
def _absorb(sc, st_compute, mark, rg, r, e, r2):
    """Region r absorbs evicted storage e whose same-direction region is r2
    (SEMANTICS.md section 6)."""
    sc[S_ABSORBS] += 1
    arena = rg.arena
    bits = rg.bits
    # frontier: remove e, add r2's frontier (set union)
    f = rg.n_regions + r
    f2 = rg.n_regions + r2
    if not _ensure(rg, sc, f, rg.len[f2]):
        return
    fslot = rg.bit_slot[f]
    fbase = rg.start[f]
    epoch = 0
    if fslot >= 0:
        if _in_bits(bits, fslot, e):
            _clear_bit(bits, fslot, e)
            rg.fr_live[r] -= 1
        else:
            sc[S_ANOMALIES] += 1
    else:
        n = rg.len[f]
        found = False
        for i in range(n):
            if arena[fbase + i] == e:
                arena[fbase + i] = arena[fbase + n - 1]
                rg.len[f] = n - 1
                rg.fr_live[r] = n - 1
                found = True
                break
        if not found:
            sc[S_ANOMALIES] += 1
        sc[S_EPOCH] += 1
        epoch = sc[S_EPOCH]
        for i in range(rg.len[f]):
            mark[arena[fbase + i]] = epoch
    f2slot = rg.bit_slot[f2]
    f2base = rg.start[f2]
    n = rg.len[f]
    for i in range(rg.len[f2]):
        x = arena[f2base + i]
        if f2slot >= 0 and not _in_bits(bits, f2slot, x):
            continue
        if fslot >= 0:
            if _in_bits(bits, fslot, x):
                continue
            _set_bit(bits, fslot, x)
        else:
            if mark[x] == epoch:
                continue
            mark[x] = epoch
        arena[fbase + n] = x
        n += 1
    rg.fr_live[r] += n - rg.len[f]
    rg.len[f] = n
    if fslot >= 0:
        if n > 2 * rg.fr_live[r] + 32:
            _compact_frontier(rg, f)
    elif n >= BITSET_MIN:
        _index(rg, sc, f)
    # interior: new members are (r2.interior - r.interior) + {e}; e's compute always counts
    if not _ensure(rg, sc, r, rg.len[r2] + 1):
        return
    sc[S_EPOCH] += 2
    in_r = sc[S_EPOCH] - 1
    in_diff = sc[S_EPOCH]
    slot = rg.bit_slot[r]
    base = rg.start[r]
    n_before = rg.len[r]
    if slot < 0:
        for i in range(n_before):
            mark[arena[base + i]] = in_r
        sc[S_ABSORB_WORK] += n_before
    base2 = rg.start[r2]
    n2 = rg.len[r2]
    sc[S_ABSORB_WORK] += n2
    added = 0
    n = n_before
    for i in range(n2):
        x = arena[base2 + i]
        if mark[x] == in_diff:
            continue
        if slot >= 0:
            if _in_bits(bits, slot, x):
                continue
        elif mark[x] == in_r:
            continue
        mark[x] = in_diff
        added += st_compute[x]
        arena[base + n] = x
        n += 1
    if mark[e] != in_diff:
        added += st_compute[e]
        present = _in_bits(bits, slot, e) if slot >= 0 else mark[e] == in_r
        if not present:
            arena[base + n] = e
            n += 1
    rg.len[r] = n
    rg.compute[r] += added
    if slot >= 0:
        for i in range(n_before, n):
            _set_bit(bits, slot, arena[base + i])
    elif n >= BITSET_MIN:
        _index(rg, sc, r)


# ---------------------------------------------------------------- scoring

# Relative error bound of a float-first ratio (two roundings) with a wide margin:
# a candidate whose float score exceeds both the best and the runner-up by more
# than this cannot be either, so its exact score is not needed.
APPROX_MARGIN = 1e-12


@njit(cache=True, inline="always")
def _score(pol, compute, size, last_access, clock, fwd, bwd, exact):
    """Score of a storage under the policy, from its own compute, size and last
    access and its neighbourhood computes; with exact=False a float-first
    approximation (within APPROX_MARGIN). Scalars only: this runs per candidate."""
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
    """From-scratch neighbourhood computes (the dtr-exact-nbhd variant). Kept out
    of the scan's common path: a call carrying the graph tuple costs far more
    than the region lookup it replaces."""
    fwd = 0
    bwd = 0
    if pol[P_FWD]:
        fwd = _walk(g, sc, material, st_compute, mark, scratch[0], scratch[1], scratch[2], s, 0)[2]
    if pol[P_BWD]:
        bwd = _walk(g, sc, material, st_compute, mark, scratch[0], scratch[1], scratch[2], s, 1)[2]
    return fwd, bwd


# ---------------------------------------------------------------- the machine

@njit(cache=True)
def run_slice(g, pol, sc, st, fr, pending, scratch, mark, rg, stream, ev, evf, cand, candf,
              iv_retain, iv_window, iv_forbid, iv_force, max_steps, event_room, cand_room):
    """Advance the replay by at most `max_steps` steps; returns the status.

    st: per-storage/tensor state rows (see `state.STATE_ROWS`); fr: frame stack
    rows (tensor, remat, phase, index, pending start, pending count, action).
    Stops early (STATUS_RUNNING) when fewer than `event_room` event rows or
    `cand_room` candidate rows remain, so one step always fits.
    """
    defined = st[0]
    material = st[1]
    pinned = st[2]
    ref_ext = st[4]
    last_access = st[5]
    st_compute = st[6]
    st_last_op = st[7]
    st_size = g.tensor_size
    f_tensor = fr[0]
    f_remat = fr[1]
    f_phase = fr[2]
    f_idx = fr[3]
    f_pstart = fr[4]
    f_pn = fr[5]
    f_action = fr[6]
    emit = sc[S_EMIT] != 0
    emit_cands = sc[S_EMIT_CANDS] != 0
    budget = sc[S_BUDGET]
    n_cmds = g.sched_kind.shape[0]
    steps = 0
    while True:
        if sc[S_STATUS] != STATUS_RUNNING:
            return sc[S_STATUS]
        if steps >= max_steps or sc[S_N_STREAM] >= stream.shape[0]:
            return STATUS_RUNNING
        if emit and sc[S_N_EVENTS] + event_room > ev.shape[0]:
            return STATUS_RUNNING
        if emit_cands and sc[S_N_CANDS] + cand_room > cand.shape[0]:
            return STATUS_RUNNING
        if sc[S_ARENA_TOP] * 4 > rg.arena.shape[0] * 3:
            return STATUS_RUNNING  # the driver compacts or grows the arena
        steps += 1
        sc[S_STEPS] += 1
        depth = sc[S_DEPTH]
        if depth == 0:
            pos = sc[S_CMD_POS]
            if pos >= n_cmds:
                sc[S_STATUS] = STATUS_DONE
                continue
            sc[S_CMD_POS] = pos + 1
            kind = g.sched_kind[pos]
            arg = g.sched_arg[pos]
            if kind == 0:  # compute
                op = arg
                sc[S_CUR_OP] = op
                first = g.op_first_tensor[op]
                for t in range(first, first + g.op_n_outputs[op]):
                    sc[S_CREATED] = t + 1
                    s = g.tensor_storage[t]
                    if s == t:
                        last_access[s] = NEVER
                        st_compute[s] = 0
                        st_last_op[s] = -1
                    ref_ext[s] += 1
                    if st_last_op[s] != op:
                        st_last_op[s] = op
                        st_compute[s] += g.op_cost[op]
                _push(sc, fr, first, 0, ACT_COMPUTE)
                if emit:
                    _emit(ev, evf, sc, EV_MATERIALIZE, first, g.tensor_storage[first], 0)
            elif kind == 1:  # get
                ref_ext[g.tensor_storage[arg]] += 1
            elif kind == 2:  # release
                s = g.tensor_storage[arg]
                ref_ext[s] -= 1
                if ref_ext[s] == 0 and material[s] and not pinned[s]:
                    if emit:
                        _emit(ev, evf, sc, EV_FREE_DEAD, arg, s, st_size[s])
                    sc[S_DEAD] += 1
                    _stream(sc, stream, STREAM_DEAD, s)
                    _evict(g, pol, sc, st, mark, scratch, rg, s)
            else:  # pin
                if not defined[arg]:
                    _push(sc, fr, arg, 1, ACT_PIN)
                    if emit:
                        _emit(ev, evf, sc, EV_MATERIALIZE, arg, g.tensor_storage[arg], 0)
                else:
                    _pin(g, sc, st, ev, evf, emit, arg)
            continue

        f = depth - 1
        t = f_tensor[f]
        op = g.tensor_op[t]
        phase = f_phase[f]
        if phase == PH_ENTER:
            a0 = g.op_arg_ptr[op]
            a1 = g.op_arg_ptr[op + 1]
            clock = sc[S_CLOCK]
            for i in range(a0, a1):
                last_access[g.tensor_storage[g.op_args[i]]] = clock
            for i in range(a0, a1):
                p = g.op_args[i]
                if defined[p]:
                    _lock(sc, st, st_size, g.tensor_storage[p])
            start = sc[S_PEND_TOP]
            for i in range(a0, a1):
                p = g.op_args[i]
                if not defined[p]:
                    pending[sc[S_PEND_TOP]] = p
                    sc[S_PEND_TOP] += 1
            f_pstart[f] = start
            f_pn[f] = sc[S_PEND_TOP] - start
            f_idx[f] = 0
            f_phase[f] = PH_PARENT
        elif phase == PH_PARENT:
            if f_idx[f] >= f_pn[f]:
                f_phase[f] = PH_CHECK
                continue
            p = pending[f_pstart[f] + f_idx[f]]
            f_phase[f] = PH_PARENT_LOCK
            if not defined[p]:
                _push(sc, fr, p, 1, ACT_NONE)
                if emit:
                    _emit(ev, evf, sc, EV_MATERIALIZE, p, g.tensor_storage[p], 0)
        elif phase == PH_PARENT_LOCK:
            p = pending[f_pstart[f] + f_idx[f]]
            _lock(sc, st, st_size, g.tensor_storage[p])
            f_idx[f] += 1
            f_phase[f] = PH_PARENT
        elif phase == PH_CHECK:
            request = g.op_total_size[op]
            value = sc[S_MEMORY] + request
            over = value > budget
            _compare(sc, value, over)
            if emit:
                row = _emit(ev, evf, sc, EV_ALLOC_CHECK, t, g.tensor_storage[t], request)
                ev[row, E_REQUEST] = request
                ev[row, E_FLAG] = 1 if over else 0
            if over:
                pinned_bytes = sc[S_MEMORY] - sc[S_POOL_BYTES]
                if pinned_bytes > sc[S_MAXPIN_BYTES]:
                    sc[S_MAXPIN_BYTES] = pinned_bytes
                    sc[S_MAXPIN_DEPTH] = depth
                    sc[S_MAXPIN_OP] = sc[S_CUR_OP]
                f_phase[f] = PH_FREE
            else:
                f_phase[f] = PH_COMPUTE
        elif phase == PH_FREE:
            request = g.op_total_size[op]
            value = sc[S_MEMORY] + request
            over = value > budget
            _compare(sc, value, over)
            if not over:
                f_phase[f] = PH_COMPUTE
                continue
            if sc[S_POOL_SIZE] == 0:
                sc[S_STATUS] = STATUS_OOM
                if emit:
                    row = _emit(ev, evf, sc, EV_OOM, t, g.tensor_storage[t], request)
                    ev[row, E_REQUEST] = request
                continue
            decision = sc[S_EVICTIONS]
            victim = _choose(g, pol, sc, st, mark, scratch, rg, ev, evf, cand, candf,
                             emit, emit_cands, iv_retain, iv_window, iv_forbid, iv_force,
                             decision, t, request)
            if victim < 0:
                if victim == -2:
                    sc[S_STATUS] = STATUS_FORCE_FAILED
                    continue
                # every pool member is excluded by an intervention
                sc[S_STATUS] = STATUS_OOM
                if emit:
                    row = _emit(ev, evf, sc, EV_OOM, t, g.tensor_storage[t], request)
                    ev[row, E_REQUEST] = request
                continue
            sc[S_EVICTIONS] += 1
            _stream(sc, stream, STREAM_PRESSURE, victim)
            _evict(g, pol, sc, st, mark, scratch, rg,
                   victim)
        else:  # PH_COMPUTE
            _compute(g, pol, sc, st, mark, scratch, rg, ev, evf, emit, t, f_remat[f] != 0)
            for i in range(g.op_arg_ptr[op], g.op_arg_ptr[op + 1]):
                _unlock(sc, st, st_size, g.tensor_storage[g.op_args[i]])
            if sc[S_REMAT_COMPUTE] > sc[S_REMAT_LIMIT]:
                sc[S_STATUS] = STATUS_THRASHED
                continue
            # pop the frame
            sc[S_PEND_TOP] = f_pstart[f]
            sc[S_DEPTH] = f
            action = f_action[f]
            if action == ACT_COMPUTE:
                clock = sc[S_CLOCK]
                first = g.op_first_tensor[op]
                for u in range(first, first + g.op_n_outputs[op]):
                    last_access[g.tensor_storage[u]] = clock
            elif action == ACT_PIN:
                _pin(g, sc, st, ev, evf, emit, t)


@njit(cache=True, inline="always")
def _compare(sc, value, over):
    """Record one `memory + request > budget` comparison for the budget interval."""
    if over:
        if sc[S_HI_TRUE] == NO_HI or value < sc[S_HI_TRUE]:
            sc[S_HI_TRUE] = value
    elif value > sc[S_LO]:
        sc[S_LO] = value


@njit(cache=True, inline="always")
def _stream(sc, stream, kind, s):
    row = sc[S_N_STREAM]
    sc[S_N_STREAM] = row + 1
    stream[row, 0] = kind
    stream[row, 1] = s
    stream[row, 2] = sc[S_CUR_OP]
    stream[row, 3] = sc[S_CLOCK]


@njit(cache=True, inline="always")
def _push(sc, fr, t, remat, action):
    f = sc[S_DEPTH]
    fr[0, f] = t
    fr[1, f] = remat
    fr[2, f] = PH_ENTER
    fr[3, f] = 0
    fr[4, f] = sc[S_PEND_TOP]
    fr[5, f] = 0
    fr[6, f] = action
    sc[S_DEPTH] = f + 1
    if f + 1 > sc[S_MAX_DEPTH]:
        sc[S_MAX_DEPTH] = f + 1


@njit(cache=True, inline="always")
def _lock(sc, st, st_size, s):
    if st[3, s] == 0:
        _pool_remove(sc, st_size, st[9], st[10], st[8], s)
    st[3, s] += 1


@njit(cache=True, inline="always")
def _unlock(sc, st, st_size, s):
    st[3, s] -= 1
    if st[3, s] == 0:
        _pool_append(sc, st_size, st[9], st[10], st[8], s)


@njit(cache=True)
def _pin(g, sc, st, ev, evf, emit, t):
    s = g.tensor_storage[t]
    if st[2, s]:
        return
    _lock(sc, st, g.tensor_size, s)
    st[2, s] = 1
    if emit:
        _emit(ev, evf, sc, EV_PIN, t, s, g.tensor_size[s])


@njit(cache=True)
def _evict(g, pol, sc, st, mark, scratch, rg, s):
    st[1, s] = 0
    sc[S_MEMORY] -= g.tensor_size[s]
    _pool_remove(sc, g.tensor_size, st[9], st[10], st[8], s)
    created = sc[S_CREATED]
    for i in range(g.st_tensor_ptr[s], g.st_tensor_ptr[s + 1]):
        u = g.st_tensors[i]
        if u >= created:
            break
        st[0, u] = 0
    if pol[P_REGIONS]:
        rf = 2 * s
        rb = 2 * s + 1
        members = scratch[5]
        sc[S_EPOCH] += 1
        n = frontier_members(rg, rb, members, mark, sc[S_EPOCH])
        for i in range(n):
            _absorb(sc, st[6], mark, rg, 2 * members[i], s, rf)
        sc[S_EPOCH] += 1
        n = frontier_members(rg, rf, members, mark, sc[S_EPOCH])
        for i in range(n):
            _absorb(sc, st[6], mark, rg, 2 * members[i] + 1, s, rb)
        _clear(rg, sc, rf)
        _clear(rg, sc, rb)


@njit(cache=True)
def _compute(g, pol, sc, st, mark, scratch, rg,
             ev, evf, emit, t, remat):
    """SEMANTICS.md section 4 step 4, then the neighbourhood rebuilds of section 6."""
    defined = st[0]
    material = st[1]
    op = g.tensor_op[t]
    first = g.op_first_tensor[op]
    n_out = g.op_n_outputs[op]
    newly = scratch[3]
    n_new = 0
    # storages that become material: siblings in output order, then t
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
            sc[S_MEMORY] -= g.tensor_size[u]
        else:
            material[g.tensor_storage[u]] = 1
            defined[u] = 1
            if remat:
                sc[S_COLLATERAL] += 1
            if emit:
                row = _emit(ev, evf, sc, EV_COMPUTE, u, g.tensor_storage[u], g.tensor_size[u])
                ev[row, E_FLAG] = FLAG_COLLATERAL | (FLAG_REMAT if remat else 0)
    for i in range(n_new):
        _pool_append(sc, g.tensor_size, st[9], st[10], st[8], newly[i])
    if pol[P_REGIONS] and n_new > 0:
        st_compute = st[6]
        for i in range(n_new):
            s = newly[i]
            _rebuild(g, sc, material, st_compute, mark, scratch, rg, s, 0)
            _rebuild(g, sc, material, st_compute, mark, scratch, rg, s, 1)
        # affected: forward regions of the new storages' backward frontiers and
        # backward regions of their forward frontiers (deduplicated)
        affected = scratch[4]
        for direction in range(2):
            sc[S_EPOCH] += 1
            epoch = sc[S_EPOCH]
            n_aff = 0
            for i in range(n_new):
                r = 2 * newly[i] + (1 - direction)
                n_aff += frontier_members(rg, r, affected[n_aff:], mark, epoch)
            for j in range(n_aff):
                _rebuild(g, sc, material, st_compute, mark, scratch, rg, affected[j], direction)


@njit(cache=True, inline="always")
def _excluded(sc, iv_retain, iv_window, iv_forbid, decision, s):
    if iv_retain[s]:
        op = sc[S_CUR_OP]
        if iv_window[0] <= op <= iv_window[1]:
            return True
    for i in range(iv_forbid.shape[0]):
        if iv_forbid[i, 0] == decision and iv_forbid[i, 1] == s:
            return True
    return False


@njit(cache=True)
def _choose(g, pol, sc, st, mark, scratch, rg, ev, evf, cand, candf, emit, emit_cands,
            iv_retain, iv_window, iv_forbid, iv_force, decision, t, request):
    """Scan the pool in order; the last of equal minimal scores wins, the first
    zero stops the scan (SEMANTICS.md section 5). Returns the victim, -1 when
    every candidate is excluded, -2 when a forced victim is not a candidate."""
    st_size = g.tensor_size
    material = st[1]
    st_compute = st[6]
    last_access = st[5]
    pool_next = st[10]
    fresh = pol[P_FRESH] != 0
    reg_compute = rg.compute
    forbids = iv_forbid.shape[0] > 0
    forced = -1
    for i in range(iv_force.shape[0]):
        if iv_force[i, 0] == decision:
            forced = iv_force[i, 1]
    best = np.inf
    victim = -1
    runner = -1
    runner_score = np.inf
    position = 0
    s = sc[S_POOL_HEAD]
    while s != -1:
        if (iv_retain[s] or forbids) and _excluded(sc, iv_retain, iv_window, iv_forbid,
                                                   decision, s):
            s = pool_next[s]
            continue
        if fresh:
            fwd, bwd = _fresh_neighbourhoods(g, pol, sc, material, st_compute, mark,
                                             scratch, s)
        else:
            fwd = reg_compute[2 * s]
            bwd = reg_compute[2 * s + 1]
        score = _score(pol, st_compute[s], st_size[s], last_access[s], sc[S_CLOCK], fwd, bwd,
                       emit_cands)
        sc[S_SCORE_EVALS] += 1
        if not emit_cands:
            bound = score * (1.0 - APPROX_MARGIN)
            if bound > best and bound > runner_score:
                position += 1
                s = pool_next[s]
                continue  # certainly neither the victim nor the runner-up
            score = _score(pol, st_compute[s], st_size[s], last_access[s], sc[S_CLOCK], fwd, bwd,
                           True)
        if emit_cands:
            row = sc[S_N_CANDS]
            sc[S_N_CANDS] = row + 1
            cand[row, C_DECISION] = decision
            cand[row, C_STORAGE] = s
            cand[row, C_POSITION] = position
            cand[row, C_COMPUTE] = st_compute[s]
            cand[row, C_FWD] = fwd
            cand[row, C_BWD] = bwd
            cand[row, C_SIZE] = st_size[s]
            cand[row, C_STALENESS] = sc[S_CLOCK] - last_access[s]
            candf[row] = score
        position += 1
        if score <= best:
            runner = victim
            runner_score = best
            best = score
            victim = s
        elif score <= runner_score:
            runner = s
            runner_score = score
        if score == 0.0:
            break
        s = pool_next[s]
    if forced >= 0:
        if not (st[8, forced] and not _excluded(sc, iv_retain, iv_window, iv_forbid,
                                                 decision, forced)):
            return -2
        if forced != victim:
            runner = victim
            runner_score = best
            victim = forced
            if fresh:
                fwd, bwd = _fresh_neighbourhoods(g, pol, sc, material, st_compute, mark,
                                                 scratch, forced)
            else:
                fwd = reg_compute[2 * forced]
                bwd = reg_compute[2 * forced + 1]
            best = _score(pol, st_compute[forced], st_size[forced], last_access[forced],
                          sc[S_CLOCK], fwd, bwd, True)
    if victim >= 0 and emit:
        row = _emit(ev, evf, sc, EV_EVICT, t, victim, st_size[victim])
        ev[row, E_DECISION] = decision
        ev[row, E_RUNNER] = runner
        ev[row, E_REQUEST] = request
        if fresh:
            fwd, bwd = _fresh_neighbourhoods(g, pol, sc, material, st_compute, mark,
                                             scratch, victim)
        else:
            fwd = reg_compute[2 * victim]
            bwd = reg_compute[2 * victim + 1]
        ev[row, E_COMPUTE] = st_compute[victim]
        ev[row, E_FWD] = fwd
        ev[row, E_BWD] = bwd
        ev[row, E_STALENESS] = sc[S_CLOCK] - last_access[victim]
        evf[row, F_SCORE] = best
        evf[row, F_RUNNER_SCORE] = runner_score if runner >= 0 else np.nan
    return victim
