"""Evicted neighbourhoods computed (semantics.md §8.2, §8.4, §8.6).

A region's sets are kept by engine/regions.py (build, iterate, absorb); here
they are computed. `walk` is §8.2's walk from one base and `rebuild` makes a
region of it. After a compute (§8.4) `rebuild_around` rebuilds the new
residents' regions at once and defers the others to their next reader
(`defer`, `flush`). Many rebuilds of one direction are computed together
(§8.6): by memo rows, one per non-resident storage, or by masked walks, one
walk for up to MASK_BASES bases; each gives a region exactly the sets of
`walk`, which tests/test_engine_regions.py holds them to.
"""

from __future__ import annotations

import numpy as np

from .bitsets import (
    bits_compute,
    bits_count_range,
    bits_list,
    clear_bit,
    lowest_bit,
    njit,
    pop_lowest,
    pop_next,
    set_bit,
)
from .cutoff import (
    arrive,
    arrived_now,
    close_period,
    cut_off,
    from_parent,
    note_cause,
    peel,
    stamp,
)
from .layout import (
    BACKWARD,
    ERA_ARRIVALS,
    FORWARD,
    G_MEMO_FAILURES,
    G_MEMO_SKIP,
    MASK_BASES,
    R_COMPUTE,
    R_MATERIAL,
    R_PINNED,
    S_ANOMALIES,
    S_CREATED,
    S_DEBUG,
    S_EPOCH,
    S_REBUILDS,
    S_WALK_VISITS,
    SCRATCH_AFFECTED,
    SCRATCH_FRONTIER,
    SCRATCH_INTERIOR,
    SCRATCH_MEMBERS,
)
from .regions import (
    BITSET_MIN,
    build,
    build_bits,
    build_from_bits,
    frontier_has,
    frontier_members,
    interior_has,
    kept,
    region,
    region_base,
    region_direction,
    unkeep,
)


@njit(cache=True, inline="always")
def edges(g, backward):
    """The storage edges of one direction (§8.2): CSR pointers, neighbours and the
    tensor id from which each edge exists, children (forward) or parents."""
    if backward:
        return g.bwd_ptr, g.bwd_nbr, g.bwd_time
    return g.fwd_ptr, g.fwd_nbr, g.fwd_time


# ---------------------------------------------------------------- one walk (§8.2)

@njit(cache=True, inline="always")
def walk(g, sc, material, st_compute, mark, out_int, out_fr, base, backward):
    """From-scratch evicted neighbourhood of `base` in one direction (§8.2).
    Returns (interior count, frontier count, interior compute) into out arrays.
    The interior list is the walk's own work list (breadth-first: the sets, not
    their order, are the region)."""
    sc[S_EPOCH] += 1
    epoch = sc[S_EPOCH]
    created = sc[S_CREATED]
    ptr, nbr, when = edges(g, backward)
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


@njit(cache=True)
def walk_apart(g, sc, material, st_compute, mark, out_int, out_fr, base, backward):
    """`walk` as a function of its own, for the walks off the hot path (one
    compiled copy instead of one inlined at each of their call sites)."""
    return walk(g, sc, material, st_compute, mark, out_int, out_fr, base, backward)


@njit(cache=True, inline="always")
def rebuild(g, sc, material, st_compute, mark, scratch, rg, s, backward):
    """§8.2: recompute one region of storage s from scratch."""
    r = region(s, backward)
    sc[S_REBUILDS] += 1
    interior = scratch[SCRATCH_INTERIOR]
    frontier = scratch[SCRATCH_FRONTIER]
    n_int, n_fr, comp = walk(g, sc, material, st_compute, mark, interior, frontier, s,
                              backward)
    build(rg, sc, r, interior, n_int)
    build(rg, sc, rg.n_regions + r, frontier, n_fr)
    rg.compute[r] = comp
    rg.fr_live[r] = n_fr
    stamp(rg, sc, r)



# ---------------------------------------------------------------- after a compute (§8.4)

@njit(cache=True, inline="always")
def rebuild_around(g, sc, st, mark, scratch, rg, newly, n_new):
    """§8.4 for the storages a compute made resident (the period's arrivals,
    engine/cutoff.py): their backward regions are built now, and their
    backward frontiers say which forward regions follow; those and the
    arrivals' own forward regions are deferred to their next reader (`defer`),
    which rebuilds them together, their walks shared, and then finds the
    backward regions to rebuild in the arrivals' forward frontiers."""
    material = st[R_MATERIAL]
    st_compute = st[R_COMPUTE]
    members = scratch[SCRATCH_AFFECTED]
    sc[S_EPOCH] += 1
    epoch = sc[S_EPOCH]
    for i in range(n_new):
        arrive(rg, newly[i])
        rebuild(g, sc, material, st_compute, mark, scratch, rg, newly[i], BACKWARD)
        defer(rg, region(newly[i], FORWARD))
        mark[newly[i]] = epoch
    for i in range(n_new):
        n = frontier_members(rg, region(newly[i], BACKWARD), members, mark, epoch)
        for j in range(n):
            defer(rg, region(members[j], FORWARD))


# What is known of regions (engine/cutoff.py) where the rules' upkeep misses a
# change: an eviction whose own regions are not known to be their walks (some
# region holding it in its frontier may miss its absorb), and a view (a compute
# added to a storage the regions' sums hold, edges no rebuild follows). A region
# not kept (§8.9) is built from its walk first, as it stood before the change.

@njit(cache=True)
def unsure_beyond(g, sc, st, mark, scratch, rg, s, direction, spared, created):
    """The regions whose walk reaches storage s from the other side (the bases in
    the frontier of s's walk in `direction`, each one's region of the opposite
    direction) are no longer known to be their walks; those whose base is in
    region `spared`'s frontier (-1: none) keep what is known. Those not kept are
    built first over the edges of tensors below `created`."""
    interior = scratch[SCRATCH_INTERIOR]
    frontier = scratch[SCRATCH_FRONTIER]
    _, n_fr, _ = walk_apart(g, sc, st[R_MATERIAL], st[R_COMPUTE], mark, interior, frontier, s,
                            direction)
    unkept = scratch[SCRATCH_MEMBERS]
    n_unkept = 0
    for i in range(n_fr):
        b = frontier[i]
        if spared < 0 or not frontier_has(rg, spared, b):
            r = region(b, BACKWARD - direction)
            if kept(rg, r):
                rg.fresh[r] = 0
            else:
                unkept[n_unkept] = r
                n_unkept += 1
    for i in range(n_unkept):   # after the loop: a build walks in the frontier's row
        _unsure(g, sc, st, mark, scratch, rg, unkept[i], created)


@njit(cache=True, inline="always")
def evicting(g, sc, st, mark, scratch, rg, s):
    """Storage s is about to be evicted (still resident); the regions holding it
    in their frontier absorb it only where their base is in s's opposite
    frontier (§8.3). Where one of s's regions is not known to be its walk, those
    its walk reaches and it lacks miss their absorb: they are no longer known to
    be their walks. The regions not kept that would not stay their walks are
    built first (§8.9)."""
    for direction in (FORWARD, BACKWARD):
        r = region(s, direction)
        _keep_absorbing(g, sc, st, mark, scratch, rg, s, direction)
        if rg.fresh[r] == 0:
            unsure_beyond(g, sc, st, mark, scratch, rg, s, direction, r, sc[S_CREATED])


@njit(cache=True)
def _keep_absorbing(g, sc, st, mark, scratch, rg, s, direction):
    """§8.9: each region not kept that absorbs s as a member of s's `direction`
    frontier (its base's region of the other direction) is built from its walk
    now, unless the absorb leaves it its walk: s's region listing it and s's
    region it takes in are known to be their walks, and its base is not in the
    latter's frontier (a cycle)."""
    listing = region(s, direction)
    taken = region(s, BACKWARD - direction)
    sure = rg.fresh[listing] != 0 and rg.fresh[taken] != 0
    members = scratch[SCRATCH_MEMBERS]
    sc[S_EPOCH] += 1
    n = frontier_members(rg, listing, members, mark, sc[S_EPOCH])
    for i in range(n):
        b = members[i]
        r = region(b, BACKWARD - direction)
        if not kept(rg, r) and not (sure and not frontier_has(rg, taken, b)):
            keep_again(g, sc, st, mark, scratch, rg, r, sc[S_CREATED])


@njit(cache=True)
def view_made(g, sc, st, mark, scratch, rg, op, s):
    """An output of op views storage s (§9.1): the op's cost joins s's compute,
    and each argument on another storage a links a -> s. Regions holding s's
    old compute (backward walks reaching s while it is not resident), s's
    backward and a's forward region, and forward walks reaching a while it is
    not resident, are no longer known to be their walks. (The view is the last
    tensor created.)"""
    material = st[R_MATERIAL]
    before = sc[S_CREATED] - 1
    if not material[s]:
        unsure_beyond(g, sc, st, mark, scratch, rg, s, FORWARD, -1, before)
    for i in range(g.op_arg_ptr[op], g.op_arg_ptr[op + 1]):
        a = g.tensor_storage[g.op_args[i]]
        if a == s:
            continue
        _unsure(g, sc, st, mark, scratch, rg, region(s, BACKWARD), before)
        _unsure(g, sc, st, mark, scratch, rg, region(a, FORWARD), before)
        if not material[a]:
            unsure_beyond(g, sc, st, mark, scratch, rg, a, BACKWARD, -1, before)


@njit(cache=True, inline="always")
def _unsure(g, sc, st, mark, scratch, rg, r, created):
    """Region r is no longer known to be its walk (built first if not kept)."""
    if not kept(rg, r):
        keep_again(g, sc, st, mark, scratch, rg, r, created)
    rg.fresh[r] = 0


# Regions of pinned storages (§8.9). A pinned storage is never a candidate nor
# a victim, so the rules never read its regions but to count frontier misses,
# while the whole LSTM's weights' forward regions are rebuilt around every
# remat chain and unroll_gan's constants absorb most dead frees. Such a region,
# known to be its walk, is not kept: no rebuild, no absorb, until a change
# after which it may not be its walk (above) builds it again.

@njit(cache=True)
def pinned_now(rg, sc, s):
    """Storage s was pinned: its regions known to be their walks (and not
    waiting for a rebuild) are no longer kept."""
    for direction in (FORWARD, BACKWARD):
        r = region(s, direction)
        if rg.fresh[r] != 0 and rg.deferred[r] == 0:
            unkeep(rg, sc, r)


@njit(cache=True)
def keep_again(g, sc, st, mark, scratch, rg, r, created):
    """Region r, not kept, built as its walk over the edges of tensors below
    `created`: the sets it stood for (the walk before the change at hand)."""
    now = sc[S_CREATED]
    sc[S_CREATED] = created
    base = scratch[SCRATCH_AFFECTED]   # one base: a plain rebuild
    base[0] = region_base(r)
    shared_rebuilds(g, sc, st[R_MATERIAL], st[R_COMPUTE], mark, scratch, rg, base, 1,
                    region_direction(r))
    sc[S_CREATED] = now


# Deferred rebuilds. Most regions a compute rebuilds are read only by the next
# eviction (its scan's scores, its absorbs), and a remat chain rebuilds many of
# them again at its next compute before any eviction. A deferred region is built
# by the first `flush` (before an eviction, before a command, at the end of a
# slice) from the state then, which gives the sets a rebuild at deferral would
# have: until the flush only computes change the state and no edge appears
# (a command is a flush point), and a compute that makes a storage of the
# region's walk resident defers the region again (the walk back from that
# storage, rebuilt at once, reaches the region's base through the same
# non-resident storages), while one that does not leaves the walk as it was.

@njit(cache=True, inline="always")
def defer(rg, r):
    """Region r's rebuild waits for the next `flush` (once, however often asked;
    never for a region not kept, which is its walk, §8.9)."""
    if rg.deferred[r] == 0 and kept(rg, r):
        rg.deferred[r] = 1
        n = rg.deferred_n[0]
        rg.deferred_list[n] = r
        rg.deferred_n[0] = n + 1


@njit(cache=True, inline="always")
def flush(g, sc, st, mark, scratch, rg):
    """`_rebuild_deferred` when a region waits: most flushes find none, and a
    call carrying the graph and regions tuples costs more than the test. Every
    flush closes a period (engine/cutoff.py)."""
    if rg.deferred_n[0] != 0:
        _rebuild_deferred(g, sc, st, mark, scratch, rg)
    else:
        close_period(rg, rg.deferred_list, 0)


@njit(cache=True)
def _rebuild_deferred(g, sc, st, mark, scratch, rg):
    """Rebuild every deferred forward region, walks shared (on LSTM 0.264 a
    flush's bases share one masked walk); then defer the backward region of
    every storage in an arrival's forward frontier, noting the arrival, and
    rebuild those as differences (engine/cutoff.py) or by shared walks."""
    bases = scratch[SCRATCH_AFFECTED]
    n = rg.deferred_n[0]
    n_all = n
    for direction in (FORWARD, BACKWARD):
        m = 0
        if direction == FORWARD:
            k = _arrivals_first(rg, n)
            if k == rg.era[ERA_ARRIVALS]:   # every arrival listed: differences may be made
                for i in range(k):   # before any region changes: they read them as they were
                    r = rg.deferred_list[i]
                    if from_parent(g, sc, st, mark, scratch, rg, region_base(r),
                                   rg.deferred_list, k):
                        rg.deferred[r] = 0
                        if sc[S_DEBUG]:
                            _check_difference(g, sc, st, mark, scratch, rg, r)
                for i in range(k, n):   # regions holding an arrival
                    r = rg.deferred_list[i]
                    if peel(g, sc, st, mark, scratch, rg, r, r, rg.deferred_list, k):
                        rg.deferred[r] = 0
                        if sc[S_DEBUG]:
                            _check_difference(g, sc, st, mark, scratch, rg, r)
            for i in range(n):
                r = rg.deferred_list[i]
                if rg.deferred[r] == 0:
                    continue   # made from its parent's
                rg.deferred[r] = 0
                bases[m] = region_base(r)
                m += 1
        else:
            _defer_backward(sc, mark, scratch, rg, n)
            n_all = rg.deferred_n[0]
            for i in range(n, n_all):
                r = rg.deferred_list[i]
                rg.deferred[r] = 0
                if cut_off(g, sc, st, mark, scratch, rg, r):
                    if sc[S_DEBUG]:
                        _check_difference(g, sc, st, mark, scratch, rg, r)
                    continue
                bases[m] = region_base(r)
                m += 1
        if m > 0:
            shared_rebuilds(g, sc, st[R_MATERIAL], st[R_COMPUTE], mark, scratch, rg, bases, m,
                            direction)
    rg.deferred_n[0] = 0
    close_period(rg, rg.deferred_list, n_all)


@njit(cache=True, inline="always")
def _arrivals_first(rg, n):
    """Reorder the deferred regions deferred_list[:n] so that the arrivals' own
    come first; returns how many. (The order changes no rebuild's sets.)"""
    k = 0
    for i in range(n):
        r = rg.deferred_list[i]
        if arrived_now(rg, region_base(r)):
            rg.deferred_list[i] = rg.deferred_list[k]
            rg.deferred_list[k] = r
            k += 1
    return k


@njit(cache=True, inline="always")
def _defer_backward(sc, mark, scratch, rg, n):
    """§8.4's backward rebuilds, found once the arrivals' forward regions are
    rebuilt (the deferred forward regions deferred_list[:n] whose base arrived
    in this period): each storage in such a frontier, with a note of every
    (region, arrival) pair, not each region once."""
    members = scratch[SCRATCH_MEMBERS]
    for i in range(n):
        r = rg.deferred_list[i]
        y = region_base(r)
        if not arrived_now(rg, y):
            continue
        sc[S_EPOCH] += 1
        k = frontier_members(rg, r, members, mark, sc[S_EPOCH])
        for j in range(k):
            b = region(members[j], BACKWARD)
            if kept(rg, b):   # §8.9
                defer(rg, b)
                note_cause(rg, b, y)


@njit(cache=True)
def _check_difference(g, sc, st, mark, scratch, rg, r):
    """Debug runs: a region rebuilt as a difference (engine/cutoff.py) has the sets
    and compute a walk from its base gives; each one that does not is counted
    in S_ANOMALIES."""
    interior = scratch[SCRATCH_INTERIOR]
    frontier = scratch[SCRATCH_FRONTIER]
    n_int, n_fr, comp = walk_apart(g, sc, st[R_MATERIAL], st[R_COMPUTE], mark, interior,
                                   frontier, region_base(r), region_direction(r))
    same = n_int == rg.len[r] and n_fr == rg.fr_live[r] and comp == rg.compute[r]
    for i in range(n_int):
        same = same and interior_has(rg, r, interior[i])
    for i in range(n_fr):
        same = same and frontier_has(rg, r, frontier[i])
    if not same:
        sc[S_ANOMALIES] += 1


# Regions kept from their first reader on (§8.7). Until a run's first eviction
# scan or rematerialization, every region a rebuild or an absorb keeps is the
# fresh walk of §8.2 (nothing resident returns, and only a view linking another
# storage to the viewed one adds an edge no rebuild follows); so none is kept
# until then, and `build_all` then builds every resident storage's two regions
# at once, the sets they would have held.

@njit(cache=True)
def build_all(g, sc, st, mark, scratch, rg, created):
    """Both regions of every resident storage (§8.2), walks shared (§8.6),
    following the edges of tensors below `created` only; a pinned storage's
    are not kept (§8.9): they would be their walks."""
    material = st[R_MATERIAL]
    pinned = st[R_PINNED]
    bases = scratch[SCRATCH_AFFECTED]
    m = 0
    for s in range(material.shape[0]):
        if material[s] and pinned[s]:
            unkeep(rg, sc, region(s, FORWARD))
            unkeep(rg, sc, region(s, BACKWARD))
        elif material[s]:
            bases[m] = s
            m += 1
    if m == 0:
        return
    now = sc[S_CREATED]
    sc[S_CREATED] = created
    for direction in (FORWARD, BACKWARD):
        shared_rebuilds(g, sc, material, st[R_COMPUTE], mark, scratch, rg, bases, m, direction)
    sc[S_CREATED] = now


# ---------------------------------------------------------------- many at once (§8.6)

# Shared walks. All rebuilds of one direction after a compute see the same
# resident set, and the walks of neighbouring bases cover the same evicted
# storages again and again (hundreds of bases around one evicted stretch of
# InceptionV4). `shared_rebuilds` walks each non-resident storage x once per
# direction, keeping as bitsets the non-resident storages reachable from x
# (x included) and the resident storages next to them; a base's region is the
# union over its non-resident neighbours, the same sets as `walk` (§8.2). It
# needs the non-resident part to be acyclic (views can close cycles) and the
# memo rows to suffice; otherwise that rebuild walks as before, and later
# rounds walk plainly for a while (`memo_gate` G_MEMO_FAILURES, G_MEMO_SKIP).
# Where memo rows do not pay, bases with large regions take masked walks instead.
MEMO_MIN_BASES = 16
MEMO_WORDS_PER_BASE = 2    # a shared walk costs bitset words per edge, a plain one a visit per base
MEMO_MAX_BACKOFF = 12      # after the k-th failure, 2**min(k, 12) rebuild rounds walk plainly


@njit(cache=True)
def shared_rebuilds(g, sc, material, st_compute, mark, scratch, rg, bases, n_bases, backward):
    """§8.2 for `bases` (all resident), one direction, walks shared: by memo rows
    for many bases, else by masked walks where the regions are large, else
    plain. Leaves the work space as masked walks expect it (memo_row, and the
    first MASK_BASES rows of memo_int and memo_fr, zero)."""
    words = rg.memo_int.shape[1]
    gate = rg.memo_gate
    use_memo = n_bases >= MEMO_MIN_BASES and n_bases * MEMO_WORDS_PER_BASE >= words
    if use_memo and gate[G_MEMO_SKIP] > 0:
        gate[G_MEMO_SKIP] -= 1  # backing off after failed attempts
        use_memo = False
    if not use_memo and n_bases >= 2 and _large_regions(rg, bases, n_bases, backward):
        per_walk = min(MASK_BASES, rg.memo_int.shape[0])
        for j in range(0, n_bases, per_walk):
            mask_rebuilds(g, sc, material, st_compute, scratch, rg, bases[j:],
                          min(per_walk, n_bases - j), backward)
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
        rebuild(g, sc, material, st_compute, mark, scratch, rg, s, backward)
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


@njit(cache=True, inline="always")
def _large_regions(rg, bases, n_bases, backward):
    """Whether the bases' regions, as they stand before the rebuild, are large enough
    on average for a masked walk to beat plain walks (it has a fixed cost per base)."""
    prior = 0
    for j in range(n_bases):
        prior += rg.len[region(bases[j], backward)]
    return prior >= MASK_MIN_INTERIOR * n_bases


@njit(cache=True)
def mask_rebuilds(g, sc, material, st_compute, scratch, rg, bases, n_bases, backward):
    """§8.2 for up to MASK_BASES bases (all of one direction) in one walk: the
    same interiors, frontiers and computes as a plain walk from each base.
    It borrows the shared walks' work space: memo_row holds the masks (as
    uint64), memo_acc[0] the storages a mask reached, memo_int[j] and
    memo_fr[j] the interior and frontier of bases[j], memo_node[j] its compute.
    memo_row, memo_int and memo_fr are zero before and after (`shared_rebuilds`
    leaves them so)."""
    ptr, nbr, when = edges(g, backward)
    words = rg.memo_int.shape[1]
    masks = rg.memo_row.view(np.uint64)
    reached = rg.memo_acc[0]
    for w in range(words):
        reached[w] = 0
    for j in range(n_bases):
        rg.memo_node[j] = 0
    lo, hi = _mask_propagate(sc, material, masks, reached, ptr, nbr, when, sc[S_CREATED], bases,
                             n_bases, backward)
    _mask_collect(material, st_compute, masks, reached, rg.memo_int, rg.memo_fr, rg.memo_node,
                  lo, hi)
    lo_w = lo >> 6
    hi_w = hi >> 6 if hi >= 0 else -1
    interior = scratch[SCRATCH_INTERIOR]
    frontier = scratch[SCRATCH_FRONTIER]
    for j in range(n_bases):
        r = region(bases[j], backward)
        sc[S_REBUILDS] += 1
        n_int = bits_count_range(rg.memo_int[j], lo_w, hi_w)
        build_from_bits(rg, sc, r, rg.memo_int[j], n_int, lo_w, hi_w, words, interior)
        n_fr = bits_count_range(rg.memo_fr[j], lo_w, hi_w)
        build_from_bits(rg, sc, rg.n_regions + r, rg.memo_fr[j], n_fr, lo_w, hi_w, words, frontier)
        rg.compute[r] = rg.memo_node[j]
        rg.fr_live[r] = n_fr
        stamp(rg, sc, r)
        for w in range(lo_w, hi_w + 1):
            rg.memo_int[j, w] = 0
            rg.memo_fr[j, w] = 0


@njit(cache=True)
def _mask_propagate(sc, material, mask, reached, ptr, nbr, when, created, bases, n_bases,
                    backward):
    """Bit j of mask[x]: x is in the region of bases[j] (interior if non-resident,
    frontier if resident). Bits flow from each base's neighbours through
    non-resident storages to a fixpoint, storages taken in id order: children
    have larger ids than their parents (the backward direction goes down), so
    one pass suffices unless a view's edge points against that order, which
    calls for another pass from where it points. A pass takes the storages of
    the bitset `reached` (those a bit reached), not every id between the first
    and the last: on LSTM 0.264 a walk reached one id in eight of its range.
    Returns the range of storage ids reached."""
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
            reached[u >> 6] |= one << np.uint64(u & 63)
            mask[u] |= bit
            lo = min(lo, u)
            hi = max(hi, u)
    visits = n_bases
    start = hi if backward else lo
    while start >= 0:
        w = start >> 6
        at = np.uint64(start & 63)
        if backward:   # the bits of word w from `start` on, in the pass's order
            pending = reached[w] & (((one << at) - one) | (one << at))
        else:
            pending = reached[w] & ~((one << at) - one)
        start = -1
        while True:
            while pending:
                i, pending = pop_next(pending, backward)
                x = w * 64 + i
                if material[x]:
                    continue
                m = mask[x]
                visits += 1
                for e in range(ptr[x], ptr[x + 1]):
                    if when[e] >= created:
                        break
                    u = nbr[e]
                    old = mask[u]
                    if old | m == old:
                        continue
                    mask[u] = old | m
                    u_bit = one << np.uint64(u & 63)
                    reached[u >> 6] |= u_bit
                    if (u < x) if backward else (u > x):
                        if u >> 6 == w:
                            pending |= u_bit   # later in this very word
                    elif not material[u]:
                        start = u if start < 0 else (max(start, u) if backward else min(start, u))
                    lo = min(lo, u)
                    hi = max(hi, u)
            w += -1 if backward else 1
            if (w < lo >> 6) if backward else (w > hi >> 6):
                break
            pending = reached[w]
    sc[S_WALK_VISITS] += visits
    for j in range(n_bases):
        mask[bases[j]] &= ~(one << np.uint64(j))   # never its own interior or frontier
    return lo, hi


@njit(cache=True)
def _mask_collect(material, st_compute, mask, reached, interiors, frontiers, computes, lo, hi):
    """Each base's interior and frontier into its bitset rows and its interior
    compute into `computes`, from the masks of the storages in `reached` (ids
    lo..hi), clearing both."""
    one = np.uint64(1)
    for xw in range(lo >> 6, (hi >> 6) + 1 if hi >= 0 else 0):
        b = reached[xw]
        reached[xw] = 0
        while b:
            i, b = pop_lowest(b)
            x = xw * 64 + i
            m = mask[x]
            mask[x] = 0
            xbit = one << np.uint64(i)
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
    ptr, nbr, when = edges(g, backward)
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
    r = region(base, backward)
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
    stamp(rg, sc, r)
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
