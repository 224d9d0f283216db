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
reaches join it. Likewise a new resident's own forward region, which would
walk the whole stretch ahead of it, is its parent's less itself where the
parent's walk went through it alone (`from_parent`). The sets are those of the
walk, which tests/test_engine_cutoff.py holds them to.

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
  computes happen within a period, but for one eviction just after its flush);
- a stamp per storage (`arrived`): period + 1 when it last became resident;
- per deferred backward region the arrivals that deferred it (`cause_*`: those
  whose forward frontier held its base at the flush).
"""

from __future__ import annotations

from .bitsets import clear_bit, njit, set_bit
from .layout import (
    ERA_CUTS,
    ERA_FROM_PARENT,
    ERA_NOW,
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


@njit(cache=True, inline="always")
def stamp(rg, sc, r):
    """Region r is its walk as of now."""
    rg.fresh[r] = rg.era[ERA_NOW] + 1
    rg.walked_at[r] = sc[S_CREATED]


@njit(cache=True, inline="always")
def arrive(rg, s):
    """Storage s became resident in this period."""
    rg.arrived[s] = rg.era[ERA_NOW] + 1


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
    for j in range(nl):
        frontier_remove(rg, r, leaves[j])
    for j in range(nj):
        if not frontier_add(rg, sc, r, joins[j]):
            return True   # STATUS_ARENA_FULL: the driver reruns with a larger arena
    sc[S_REBUILDS] += 1
    rg.era[ERA_CUTS] += 1
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
def from_parent(g, sc, st, mark, scratch, rg, y, deferred, n):
    """Build arrival y's forward region from a parent p's (§8.8's argument, one
    storage along): when p's forward region is its walk as of the period's start,
    with no tensor created since, and reached all it holds through y (p's other
    children resident, no other arrival of the period in it, p not reached back
    from it), y's walk holds the same interior but y, its compute less y's, and
    the frontier members a parent of which is y or in that interior. The
    period's arrivals are the bases of deferred[:n] that arrived now. False,
    changing nothing, when no parent qualifies."""
    created = sc[S_CREATED]
    material = st[R_MATERIAL]
    for e in range(g.bwd_ptr[y], g.bwd_ptr[y + 1]):
        if g.bwd_time[e] >= created:
            break
        p = g.bwd_nbr[e]
        if _walked_through(g, rg, p, y, material, created, deferred, n):
            return _derive(g, sc, st, mark, scratch, rg, p, y)
    return False


@njit(cache=True)
def _walked_through(g, rg, p, y, material, created, deferred, n):
    """Whether p's forward region reached all it holds through y (`from_parent`)."""
    rp = region(p, FORWARD)
    known = rg.fresh[rp]
    if known == 0 or known > rg.era[ERA_NOW] or rg.walked_at[rp] != created or not kept(rg, rp):
        return False
    if not interior_has(rg, rp, y):
        return False
    for e in range(g.fwd_ptr[p], g.fwd_ptr[p + 1]):
        if g.fwd_time[e] >= created:
            break
        c = g.fwd_nbr[e]
        if c != y and not material[c]:
            return False
    for e in range(g.bwd_ptr[p], g.bwd_ptr[p + 1]):
        if g.bwd_time[e] >= created:
            break
        q = g.bwd_nbr[e]
        if q == y or interior_has(rg, rp, q):
            return False   # p would be in y's frontier
    for i in range(n):
        z = region_base(deferred[i])
        if z != y and arrived_now(rg, z) and interior_has(rg, rp, z):
            return False
    return True


@njit(cache=True)
def _derive(g, sc, st, mark, scratch, rg, p, y):
    """y's forward region from p's (`from_parent`). A full arena is the driver's
    to mend, as for every build (STATUS_ARENA_FULL: it reruns with a larger one)."""
    rp = region(p, FORWARD)
    ry = region(y, FORWARD)
    acc = rg.memo_acc
    words = acc.shape[1]
    acc[0, :] = 0
    slot = rg.bit_slot[rp]
    if slot >= 0:
        for w in range(words):
            acc[0, w] = rg.bits[slot, w]
    else:
        for i in range(rg.len[rp]):
            set_bit(acc, 0, rg.arena[rg.start[rp] + i])
    clear_bit(acc, 0, y)
    kept_fr = scratch[SCRATCH_FRONTIER]
    members = scratch[SCRATCH_MEMBERS]
    sc[S_EPOCH] += 1
    nf = frontier_members(rg, rp, members, mark, sc[S_EPOCH])
    m = 0
    for i in range(nf):
        c = members[i]
        for e in range(g.bwd_ptr[c], g.bwd_ptr[c + 1]):
            if g.bwd_time[e] >= sc[S_CREATED]:
                break
            q = g.bwd_nbr[e]
            if q == y or (q != p and interior_has(rg, rp, q)):
                kept_fr[m] = c
                m += 1
                break
    compute = rg.compute[rp] - st[R_COMPUTE, y]
    build_from_bits(rg, sc, ry, acc[0], rg.len[rp] - 1, 0, words - 1, words,
                    scratch[SCRATCH_INTERIOR])
    build(rg, sc, rg.n_regions + ry, kept_fr, m)
    rg.compute[ry] = compute
    rg.fr_live[ry] = m
    sc[S_REBUILDS] += 1
    sc[S_WALK_VISITS] += 1
    rg.era[ERA_FROM_PARENT] += 1
    stamp(rg, sc, ry)
    return True
