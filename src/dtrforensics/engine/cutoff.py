"""Deferred rebuilds as differences (semantics.md §8.8).

After a rematerialization, §8.4 rebuilds the backward region of every storage
in the new resident's forward frontier. In a remat chain (LSTM 0.264) those
regions hold a long evicted stretch, and the new resident is near its far end:
a walk from scratch crosses the whole stretch to drop a few storages. Where a
region is known to be its walk as of the period's start (no arrival since, no
edge the rules do not follow), its rebuild is instead what the period's
arrivals cut off: the arrivals and the storages reachable from the base only
through them leave the interior, frontier members that only they reached leave
the frontier, and the arrivals that the remaining interior (or the base)
reaches join it (`cut_off`). Forward regions peel instead (`peel`): what the
arrivals cut off is taken in id order, each storage decided by its parents,
so the work is what leaves, not the stretch ahead. A new resident's own forward
region is peeled likewise from its parent's (`from_parent`). The sets are
those of the walk, which tests/test_engine_cutoff.py holds them to.

What this module keeps (state.Regions' work space, all zero meaning nothing
known):
- a stamp per region (`fresh`): period + 1 when the region was last made its
  walk, kept through absorbs of regions that were (§8.3's union of two walks is
  the walk), 0 after a frontier miss, a cycle, or a change the rules' upkeep
  misses (walks.evicting, walks.view_made). A backward region's stamp vouches
  for its sets and compute; a forward one's for its frontier (the outputs of
  an op join forward interiors while they are not computed, which changes no
  frontier), which is all an absorb needs of it, and for its sets and compute
  too while no tensor was created since its walk (`walked_at`: the tensors
  created then; an absorb keeps it only from a region walked with the same);
- the period (`era[ERA_NOW]`): flushes so far (walks.flush closes one; only
  computes happen within a period, but for one eviction just after its flush),
  and its arrivals so far (`era[ERA_ARRIVALS]`: `peel` needs them all listed);
- a stamp per storage (`arrived`): period + 1 when it last became resident;
- per deferred backward region the arrivals that deferred it (`cause_*`: those
  whose forward frontier held its base at the flush).
"""

from __future__ import annotations

from .bitsets import clear_bit, njit, set_bit
from .layout import (
    ERA_ARRIVALS,
    ERA_CUTS,
    ERA_FROM_PARENT,
    ERA_NOW,
    ERA_PEELS,
    FORWARD,
    R_COMPUTE,
    R_MATERIAL,
    S_CREATED,
    S_EPOCH,
    S_REBUILDS,
    S_WALK_VISITS,
    SCRATCH_FRONTIER,
    SCRATCH_INTERIOR,
    SCRATCH_MEMBERS,
    SCRATCH_NEW_RESIDENT,
)
from .regions import (
    build,
    build_from_bits,
    frontier_add,
    frontier_has,
    frontier_members,
    frontier_remove,
    interior_has,
    interior_remove,
    kept,
    region,
    region_base,
)

CUT_MIN = 32   # storages a difference may visit however small the region; beyond
               # half the interior as well, a walk from scratch is no dearer
CUT_LISTED_MAX = 16   # a larger interior without a bitset row (rows ran out) takes a walk
PEEL_SHARE = 32   # a forward difference gives up when more than CUT_MIN storages and
                  # this share of the interior go besides the arrivals: what is left is
                  # then mostly small (an arrival in a remat chain cuts off all its
                  # parent's region ahead), its walk cheap, and a longer attempt the
                  # waste (LSTM 0.264)


@njit(cache=True, inline="always")
def stamp(rg, sc, r):
    """Region r is its walk as of now."""
    rg.fresh[r] = rg.era[ERA_NOW] + 1
    rg.walked_at[r] = sc[S_CREATED]


@njit(cache=True, inline="always")
def arrive(rg, s):
    """Storage s became resident in this period."""
    rg.arrived[s] = rg.era[ERA_NOW] + 1
    rg.era[ERA_ARRIVALS] += 1


@njit(cache=True, inline="always")
def arrived_now(rg, s):
    """Whether storage s became resident in this period."""
    return rg.arrived[s] == rg.era[ERA_NOW] + 1


@njit(cache=True, inline="always")
def note_cause(rg, r, y):
    """Arrival y deferred region r (r's base is in y's forward frontier)."""
    head = rg.cause_head[r]
    if head < 0:
        return   # some were lost: r takes a walk
    n = rg.cause_n[0]
    if n >= rg.cause_of.shape[0]:
        rg.cause_head[r] = -1
        return
    rg.cause_of[n] = y
    rg.cause_next[n] = head
    rg.cause_head[r] = n + 1
    rg.cause_n[0] = n + 1


@njit(cache=True, inline="always")
def close_period(rg, regions, n):
    """Forget the causes of regions[:n] (every region deferred in the period)
    and begin the next period."""
    for i in range(n):
        rg.cause_head[regions[i]] = 0
    rg.cause_n[0] = 0
    rg.era[ERA_NOW] += 1
    rg.era[ERA_ARRIVALS] = 0


@njit(cache=True)
def _supported(g, rg, r, base, x, in_k, mark, created):
    """Whether a child of x is the base or stays in r's interior (a member not
    cut off: marked `in_k` are)."""
    for e in range(g.fwd_ptr[x], g.fwd_ptr[x + 1]):
        if g.fwd_time[e] >= created:
            break
        c = g.fwd_nbr[e]
        if c == base or (mark[c] != in_k and interior_has(rg, r, c)):
            return True
    return False


@njit(cache=True)
def cut_off(g, sc, st, mark, scratch, rg, r):
    """Rebuild backward region r as the difference its period's arrivals make,
    if r is known to be its walk as of the period's start; False, changing
    nothing, when it is not (or the difference would cost a walk), and the
    caller walks."""
    known = rg.fresh[r]
    if known == 0 or known > rg.era[ERA_NOW] or rg.cause_head[r] <= 0:
        return False
    if rg.bit_slot[r] < 0 and rg.len[r] > CUT_LISTED_MAX:
        return False   # a listed interior's membership test is a search
    material = st[R_MATERIAL]
    base = region_base(r)
    created = sc[S_CREATED]
    sc[S_EPOCH] += 3
    in_k = sc[S_EPOCH] - 2
    cut = scratch[SCRATCH_INTERIOR]
    nk = _cut(g, rg, r, material, mark, cut, in_k, created, max(CUT_MIN, rg.len[r] // 2))
    if nk < 0:
        return False
    sc[S_WALK_VISITS] += nk
    _keep(g, rg, r, base, material, mark, cut, nk, in_k, in_k + 1, created,
          scratch[SCRATCH_FRONTIER])
    joins = scratch[SCRATCH_NEW_RESIDENT]
    leaves = scratch[SCRATCH_MEMBERS]
    nj, nl = _frontier_changes(g, rg, r, base, material, mark, cut, nk, in_k, created, joins,
                               leaves)
    if nj < 0:
        return False
    lost = 0
    for j in range(nk):
        v = cut[j]
        if mark[v] == in_k:
            interior_remove(rg, r, v)
            lost += st[R_COMPUTE, v]
    rg.compute[r] -= lost
    if _settle(rg, sc, r, leaves, nl, joins, nj):
        rg.era[ERA_CUTS] += 1
    return True


@njit(cache=True, inline="always")
def _settle(rg, sc, r, leaves, nl, joins, nj):
    """The frontier changes of a difference made on region r in place, which is
    then its walk; False when the arena is full (STATUS_ARENA_FULL: the driver
    reruns with a larger one)."""
    for j in range(nl):
        frontier_remove(rg, r, leaves[j])
    for j in range(nj):
        if not frontier_add(rg, sc, r, joins[j]):
            return False
    sc[S_REBUILDS] += 1
    stamp(rg, sc, r)
    return True


@njit(cache=True)
def _cut(g, rg, r, material, mark, cut, in_k, created, limit):
    """K into `cut`, marked `in_k`: the arrivals that deferred r and what r's
    interior holds behind them (their parents' side), each a member of the
    interior. Returns its size, or -1 when it passes `limit` or meets what the
    rules do not expect (then a walk decides)."""
    nk = 0
    k = rg.cause_head[r] - 1
    while k >= 0:
        y = rg.cause_of[k]
        k = rg.cause_next[k] - 1
        if mark[y] == in_k:
            continue
        if not interior_has(rg, r, y):
            return -1
        mark[y] = in_k
        cut[nk] = y
        nk += 1
    i = 0
    while i < nk:
        v = cut[i]
        i += 1
        for e in range(g.bwd_ptr[v], g.bwd_ptr[v + 1]):
            if g.bwd_time[e] >= created:
                break
            u = g.bwd_nbr[e]
            if mark[u] == in_k or (material[u] and not arrived_now(rg, u)):
                continue   # K already, or a frontier member
            if nk >= limit or not interior_has(rg, r, u):
                return -1
            mark[u] = in_k
            cut[nk] = u
            nk += 1
    return nk


@njit(cache=True)
def _keep(g, rg, r, base, material, mark, cut, nk, in_k, stays, created, kept):
    """Mark `stays` what of K stays in the interior: members not resident whose
    child is the base or a member outside K, and their parents in K that are
    not resident, transitively."""
    ns = 0
    for j in range(nk):
        v = cut[j]
        if not material[v] and _supported(g, rg, r, base, v, in_k, mark, created):
            mark[v] = stays
            kept[ns] = v
            ns += 1
    i = 0
    while i < ns:
        v = kept[i]
        i += 1
        for e in range(g.bwd_ptr[v], g.bwd_ptr[v + 1]):
            if g.bwd_time[e] >= created:
                break
            u = g.bwd_nbr[e]
            if mark[u] == in_k and not material[u]:
                mark[u] = stays
                kept[ns] = u
                ns += 1


@njit(cache=True)
def _frontier_changes(g, rg, r, base, material, mark, cut, nk, in_k, created, joins, leaves):
    """What leaves K (still marked `in_k`) does to the frontier, found before
    anything changes: the arrivals among it that a remaining member (or the
    base) still reaches join; resident parents of it that nothing remaining
    reaches leave. Returns (joins, leaves), or (-1, 0) when the frontier is not
    what the rules expect."""
    seen = in_k + 2
    nj = 0
    nl = 0
    for j in range(nk):
        v = cut[j]
        if mark[v] != in_k:
            continue
        if material[v]:
            if frontier_has(rg, r, v):
                return -1, 0
            if _supported(g, rg, r, base, v, in_k, mark, created):
                joins[nj] = v
                nj += 1
        for e in range(g.bwd_ptr[v], g.bwd_ptr[v + 1]):
            if g.bwd_time[e] >= created:
                break
            p = g.bwd_nbr[e]
            if mark[p] >= in_k or not material[p]:
                continue   # K (stays or not), already seen, or not resident
            mark[p] = seen
            if not _supported(g, rg, r, base, p, in_k, mark, created):
                if not frontier_has(rg, r, p):
                    return -1, 0
                leaves[nl] = p
                nl += 1
    return nj, nl


@njit(cache=True)
def from_parent(g, sc, st, mark, scratch, rg, y, arrivals, n):
    """Build arrival y's forward region from the forward region of a parent of
    y that holds y (the smallest such), by `peel` (arrivals[:n]: the regions of
    every arrival of the period). False, changing nothing, when it cannot (then
    y's region takes a walk)."""
    created = sc[S_CREATED]
    best = -1
    for e in range(g.bwd_ptr[y], g.bwd_ptr[y + 1]):
        if g.bwd_time[e] >= created:
            break
        rp = region(g.bwd_nbr[e], FORWARD)
        if _known_exact(rg, sc, rp) and interior_has(rg, rp, y) and (
                best < 0 or rg.len[rp] < rg.len[best]):
            best = rp
    if best < 0:
        return False
    if not peel(g, sc, st, mark, scratch, rg, best, region(y, FORWARD), arrivals, n):
        return False
    rg.era[ERA_FROM_PARENT] += 1
    return True


@njit(cache=True, inline="always")
def _known_exact(rg, sc, r):
    """Whether forward region r is kept and its walk as of the period's start,
    sets and compute, with no tensor created since (see `walked_at`)."""
    known = rg.fresh[r]
    return (known != 0 and known <= rg.era[ERA_NOW] and rg.walked_at[r] == sc[S_CREATED]
            and kept(rg, r))


@njit(cache=True)
def peel(g, sc, st, mark, scratch, rg, rs, rt, arrivals, n):
    """Make forward region rt what region rs, known to be its walk as of the
    period's start, leaves reachable from rt's base (§8.8, forward): rt is rs
    (a region holding an arrival), or rt's base is an arrival in rs's interior
    and rs its parent's region. The interior loses D: the period's arrivals in
    it (the bases of arrivals[:n], the regions of every arrival of the
    period) and, taken in id order,
    each member none of whose parents is rt's base or a member left, starting
    from the children of D and of rs's base when that is not rt's. Taken in id
    order, every parent's standing is final when its child's is decided,
    which needs the graph's edges to ascend (`KernelGraph.ascending`: then the
    id order is the walks' order, no cycle). The frontier keeps the resident
    children of what is left and of rt's base. False, changing nothing, when
    rs is not known to be its walk or D passes its limit (then a walk costs
    little more)."""
    if g.ascending[0] == 0 or not _known_exact(rg, sc, rs):
        return False
    if rg.bit_slot[rs] < 0 and rg.len[rs] > CUT_LISTED_MAX:
        return False   # a listed interior's membership test is a search
    material = st[R_MATERIAL]
    created = sc[S_CREATED]
    old_base = region_base(rs)
    base = region_base(rt)
    sc[S_EPOCH] += 3
    gone = sc[S_EPOCH] - 2
    queued = gone + 1
    seen = gone + 2
    cut = scratch[SCRATCH_INTERIOR]
    heap = scratch[SCRATCH_NEW_RESIDENT]
    nd = 0
    for i in range(n):
        z = region_base(arrivals[i])
        if mark[z] != gone and interior_has(rg, rs, z):
            mark[z] = gone
            cut[nd] = z
            nd += 1
    if nd == 0 or (base == old_base and not _has_child_away(g, material, created, base)):
        return False   # nothing cut off; or nothing left, which a walk finds at once
    limit = max(CUT_MIN, rg.len[rs] // PEEL_SHARE)
    nh = 0
    if base != old_base:
        nh = _queue_children(g, rg, rs, material, mark, gone, queued, created, old_base, heap, nh)
    for i in range(nd):
        nh = _queue_children(g, rg, rs, material, mark, gone, queued, created, cut[i], heap, nh)
    visits = nd
    while nh > 0:
        z = heap[0]
        nh -= 1
        _heap_pop(heap, nh)
        visits += 1
        if _supported_by(g, rg, rs, base, material, mark, gone, created, z):
            continue
        if nd >= limit:
            return False
        mark[z] = gone
        cut[nd] = z
        nd += 1
        nh = _queue_children(g, rg, rs, material, mark, gone, queued, created, z, heap, nh)
    if rt == rs:
        made = _peel_in_place(g, sc, st, mark, scratch, rg, rs, nd, gone, seen)
    else:
        made = _peel_into(g, sc, st, mark, scratch, rg, rs, rt, nd, gone, seen)
    if made:
        sc[S_WALK_VISITS] += visits
    return made


@njit(cache=True, inline="always")
def _has_child_away(g, material, created, x):
    """Whether a child of x is not resident."""
    for e in range(g.fwd_ptr[x], g.fwd_ptr[x + 1]):
        if g.fwd_time[e] >= created:
            break
        if not material[g.fwd_nbr[e]]:
            return True
    return False


@njit(cache=True, inline="always")
def _supported_by(g, rg, rs, base, material, mark, gone, created, x):
    """Whether a parent of x is `base` or a non-resident member of region rs's
    interior not marked `gone`."""
    for e in range(g.bwd_ptr[x], g.bwd_ptr[x + 1]):
        if g.bwd_time[e] >= created:
            break
        q = g.bwd_nbr[e]
        if q == base or (mark[q] != gone and not material[q] and interior_has(rg, rs, q)):
            return True
    return False


@njit(cache=True, inline="always")
def _queue_children(g, rg, rs, material, mark, gone, queued, created, x, heap, nh):
    """Queue (a min-heap of ids) the children of x in region rs's interior, not
    resident, not yet queued or gone; returns the heap's new size."""
    for e in range(g.fwd_ptr[x], g.fwd_ptr[x + 1]):
        if g.fwd_time[e] >= created:
            break
        c = g.fwd_nbr[e]
        if mark[c] == gone or mark[c] == queued or material[c] or not interior_has(rg, rs, c):
            continue
        mark[c] = queued
        i = nh
        while i > 0 and heap[(i - 1) >> 1] > c:
            heap[i] = heap[(i - 1) >> 1]
            i = (i - 1) >> 1
        heap[i] = c
        nh += 1
    return nh


@njit(cache=True, inline="always")
def _heap_pop(heap, nh):
    """Drop the least of a min-heap of nh + 1 ids: its last moves down from the top."""
    last = heap[nh]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= nh:
            break
        if c + 1 < nh and heap[c + 1] < heap[c]:
            c += 1
        if heap[c] >= last:
            break
        heap[i] = heap[c]
        i = c
    heap[i] = last


@njit(cache=True)
def _peel_in_place(g, sc, st, mark, scratch, rg, r, nd, gone, seen):
    """`peel` where rt is rs: D (scratch's interior row, marked `gone`) leaves
    the interior; arrivals in D that what is left (or the base) still reaches
    join the frontier; resident children of D that nothing left reaches leave it."""
    material = st[R_MATERIAL]
    created = sc[S_CREATED]
    base = region_base(r)
    cut = scratch[SCRATCH_INTERIOR]
    joins = scratch[SCRATCH_FRONTIER]
    leaves = scratch[SCRATCH_MEMBERS]
    nj = 0
    nl = 0
    for i in range(nd):
        z = cut[i]
        if material[z] and _supported_by(g, rg, r, base, material, mark, gone, created, z):
            joins[nj] = z
            nj += 1
        for e in range(g.fwd_ptr[z], g.fwd_ptr[z + 1]):
            if g.fwd_time[e] >= created:
                break
            c = g.fwd_nbr[e]
            if not material[c] or mark[c] == gone or mark[c] == seen:
                continue   # not resident, an arrival in D, or decided
            mark[c] = seen
            if not _supported_by(g, rg, r, base, material, mark, gone, created, c):
                if not frontier_has(rg, r, c):
                    return False   # not what the rules expect: a walk decides
                leaves[nl] = c
                nl += 1
    lost = 0
    for i in range(nd):
        interior_remove(rg, r, cut[i])
        lost += st[R_COMPUTE, cut[i]]
    rg.compute[r] -= lost
    if _settle(rg, sc, r, leaves, nl, joins, nj):
        rg.era[ERA_PEELS] += 1
    return True


@njit(cache=True)
def _peel_into(g, sc, st, mark, scratch, rg, rs, rt, nd, gone, seen):
    """`peel` where rt's base y is an arrival in rs's interior: rt's interior is
    rs's less D (y among it), its frontier the members of rs's frontier and the
    arrivals in D that y or what is left reaches. A full arena is the driver's
    to mend, as for every build (STATUS_ARENA_FULL: it reruns with a larger one)."""
    material = st[R_MATERIAL]
    created = sc[S_CREATED]
    y = region_base(rt)
    cut = scratch[SCRATCH_INTERIOR]
    kept_fr = scratch[SCRATCH_FRONTIER]
    members = scratch[SCRATCH_MEMBERS]
    acc = rg.memo_acc
    words = acc.shape[1]
    slot = rg.bit_slot[rs]
    if slot >= 0:
        for w in range(words):
            acc[0, w] = rg.bits[slot, w]
    else:
        for w in range(words):
            acc[0, w] = 0
        for i in range(rg.len[rs]):
            set_bit(acc, 0, rg.arena[rg.start[rs] + i])
    lost = 0
    m = 0
    for i in range(nd):
        z = cut[i]
        clear_bit(acc, 0, z)
        lost += st[R_COMPUTE, z]
        if z != y and material[z] and _supported_by(g, rg, rs, y, material, mark, gone, created, z):
            kept_fr[m] = z
            m += 1
    nf = frontier_members(rg, rs, members, mark, seen)
    for i in range(nf):
        c = members[i]
        if _supported_by(g, rg, rs, y, material, mark, gone, created, c):
            kept_fr[m] = c
            m += 1
    compute = rg.compute[rs] - lost
    build_from_bits(rg, sc, rt, acc[0], rg.len[rs] - nd, 0, words - 1, words, cut)
    build(rg, sc, rg.n_regions + rt, kept_fr, m)
    rg.compute[rt] = compute
    rg.fr_live[rt] = m
    sc[S_REBUILDS] += 1
    stamp(rg, sc, rt)
    return True
