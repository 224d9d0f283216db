"""Evicted neighbourhoods' sets (semantics.md §8), behind one small interface:
`build` a set, list (iterate) a region's `frontier_members`, and `absorb` an
evicted storage (§8.3), into many regions at once with `absorb_into`; `clear`
empties a region, and `unkeep` stops keeping one (§8.9); `interior_has`,
`interior_remove`, `frontier_has`, `frontier_add` and `frontier_remove` change
one member (engine/cutoff.py).
`check` is the debug pass over their invariants.

Laid out as in `state.Regions`: each of the 2n regions (`region(s, d)`, storage
s's in direction d, layout.FORWARD or BACKWARD) has two sets, its interior (set id r) and its frontier (set id
2n + r). A set takes one of three forms:
- listed: a block of one int64 arena (start/cap/len per set). A set that
  grows past its block moves to a new block at the arena's top; abandoned
  blocks are reclaimed by compaction. Any call that may allocate can move
  blocks, so code re-reads `rg.start` after it.
- listed and indexed (frontiers of BITSET_MIN members or more): the block and
  a membership bitset (a row of `rg.bits`), so absorb tests membership in O(1)
  instead of re-marking. The bitset is the truth: the block may still hold
  removed or repeated entries, and `fr_live` counts the live members.
- a bitset alone (no block: cap 0, len its member count): large interiors, and
  large frontiers made by shared walks; listing hundreds of members per
  rebuild cost more than the rebuild itself.
"""

from __future__ import annotations

import numpy as np

from .bitsets import bits_list_range, clear_bit, in_bits, njit, pop_lowest, popcount, set_bit
from .layout import (
    S_ABSORB_WORK,
    S_ABSORBS,
    S_ARENA_TOP,
    S_EPOCH,
    S_FREE_SLOTS,
    S_FRONTIER_MISSES,
    S_STATUS,
    STATUS_ARENA_FULL,
    UNKEPT,
)

# From this many members a frontier is indexed and a large set is its bitset
# alone (while bitset rows last). Most absorbs go into small frontiers, whose
# listed form costs a search per removal and a mark per member per union: at 8
# instead of 64, unroll_gan at 1.0 replays in 0.060 s instead of 0.089 s of CPU,
# LSTM 0.264 in 2.01 s instead of 2.19 s (the same run, the same victims).
BITSET_MIN = 8


# ---------------------------------------------------------------- the interface

@njit(cache=True, inline="always")
def region(s, direction):
    """The region of storage s in `direction` (layout.FORWARD, BACKWARD)."""
    return 2 * s + direction


@njit(cache=True, inline="always")
def region_base(r):
    """The storage whose region r is."""
    return r >> 1


@njit(cache=True, inline="always")
def region_direction(r):
    """The direction of region r."""
    return r & 1


@njit(cache=True, inline="always")
def build(rg, sc, k, src, n):
    if k < rg.n_regions and n >= BITSET_MIN and _take_slot(rg, sc, k):
        slot = rg.bit_slot[k]
        rg.bits[slot, :] = 0
        for i in range(n):
            set_bit(rg.bits, slot, src[i])
        rg.len[k] = n
        rg.cap[k] = 0  # an indexed interior is its bitset alone; its block becomes garbage
        return
    rg.len[k] = 0
    if rg.cap[k] > 4 * max(n, 8):
        rg.cap[k] = 2 * max(n, 8)  # the block's tail becomes garbage for compaction
    if not _ensure(rg, sc, k, n):
        return
    base = rg.start[k]
    for i in range(n):
        rg.arena[base + i] = src[i]
    rg.len[k] = n
    if k < rg.n_regions:
        _drop_index(rg, sc, k)
    else:
        _index(rg, sc, k)


@njit(cache=True, inline="always")
def build_from_bits(rg, sc, k, bits, n, lo_w, hi_w, words, out):
    """Make set k the n members of `bits` (zero outside words lo_w..hi_w): the
    bitset alone when large and a bitset row is free, else a listed block (`out`
    is scratch for the list)."""
    if not (n >= BITSET_MIN and build_bits(rg, sc, k, bits, n, words)):
        bits_list_range(bits, lo_w, hi_w, out)
        build(rg, sc, k, out, n)


@njit(cache=True, inline="always")
def build_bits(rg, sc, k, bits, n, words):
    """Make set k the bitset `bits` (n members) alone, with no block; False,
    changing nothing, when no bitset row is free."""
    if not _take_slot(rg, sc, k):
        return False
    slot = rg.bit_slot[k]
    for w in range(words):
        rg.bits[slot, w] = bits[w]
    rg.len[k] = n
    rg.cap[k] = 0  # its block, if any, becomes garbage for compaction
    return True


@njit(cache=True, inline="always")
def frontier_members(rg, r, out, mark, epoch):
    """The live, distinct members of region r's frontier into `out`; returns the
    count. (An indexed frontier's block may hold removed or repeated entries,
    its bitset is the truth; a frontier that is its bitset alone has no block.)"""
    f = rg.n_regions + r
    slot = rg.bit_slot[f]
    n = 0
    if _bits_only(rg, f):
        for w in range(rg.bits.shape[1]):
            b = rg.bits[slot, w]
            while b:
                j, b = pop_lowest(b)
                x = w * 64 + j
                if mark[x] != epoch:
                    mark[x] = epoch
                    out[n] = x
                    n += 1
        return n
    base = rg.start[f]
    for i in range(rg.len[f]):
        x = rg.arena[base + i]
        if slot >= 0 and not in_bits(rg.bits, slot, x):
            continue
        if mark[x] == epoch:
            continue
        mark[x] = epoch
        out[n] = x
        n += 1
    return n


@njit(cache=True)
def absorb_into(sc, st_compute, mark, rg, bases, n, direction, e, r2):
    """`absorb` of e (region r2) into the `direction` region of each of
    bases[:n], in their order: one call for all of an eviction's frontier
    (a call carrying the regions tuple cost more than most absorbs)."""
    for i in range(n):
        r = region(bases[i], direction)
        if kept(rg, r):   # one not kept stays its walk (§8.9, walks.evicting)
            absorb(sc, st_compute, mark, rg, r, e, r2)


@njit(cache=True, inline="always")
def absorb(sc, st_compute, mark, rg, r, e, r2):
    """§8.3: region r absorbs evicted storage e, whose region of r's direction
    is r2: e leaves r's frontier, r2's frontier is added to it, and the new
    interior members, (r2's interior - r's interior) + e, join r's interior
    and add their computes. The reference asserts e was in r's frontier; a
    run where it is not goes on as the oracle does and counts a frontier miss."""
    sc[S_ABSORBS] += 1
    f = rg.n_regions + r
    if not _bits_only(rg, f) and not _ensure(rg, sc, f, rg.len[rg.n_regions + r2]):
        return   # no room for the union (STATUS_ARENA_FULL)
    if not _frontier_discard(rg, r, e):
        sc[S_FRONTIER_MISSES] += 1
        rg.fresh[r] = 0
    _frontier_union(sc, mark, rg, r, r2)
    _interior_absorb(sc, st_compute, mark, rg, r, e, r2)
    if rg.fresh[r] != 0 and (rg.fresh[r2] == 0 or frontier_has(rg, r, region_base(r))):
        rg.fresh[r] = 0   # not known to be the walk (engine/cutoff.py): r2 was not, or a cycle
    if rg.walked_at[r] != rg.walked_at[r2]:
        rg.walked_at[r] = -1   # the union of walks over different edges


@njit(cache=True, inline="always")
def clear(rg, sc, r):
    """§8.3: empty region r (its blocks become garbage for compaction)."""
    f = rg.n_regions + r
    rg.len[r] = 0
    rg.len[f] = 0
    rg.cap[r] = 0  # blocks become garbage for compaction
    rg.cap[f] = 0
    rg.fr_live[r] = 0
    rg.compute[r] = 0
    rg.fresh[r] = 0
    _drop_index(rg, sc, r)
    _drop_index(rg, sc, f)


@njit(cache=True, inline="always")
def unkeep(rg, sc, r):
    """§8.9: region r (of a pinned storage, known to be its walk) is no longer kept."""
    clear(rg, sc, r)
    rg.compute[r] = UNKEPT


@njit(cache=True, inline="always")
def kept(rg, r):
    """Whether region r is kept (§8.9)."""
    return rg.compute[r] != UNKEPT


@njit(cache=True, inline="always")
def interior_has(rg, r, x):
    """Whether x is in region r's interior."""
    return _has(rg, r, x)


@njit(cache=True, inline="always")
def interior_remove(rg, r, x):
    """Remove member x from region r's interior (its compute is the caller's)."""
    slot = rg.bit_slot[r]
    if slot >= 0:
        clear_bit(rg.bits, slot, x)
        rg.len[r] -= 1
        return
    _block_remove(rg, r, x)


@njit(cache=True, inline="always")
def frontier_has(rg, r, x):
    """Whether x is in region r's frontier."""
    return _has(rg, rg.n_regions + r, x)


@njit(cache=True, inline="always")
def _has(rg, k, x):
    """Whether x is in set k: its bitset is the truth where it has one (an
    interior's is the whole set, an indexed frontier's its live members)."""
    slot = rg.bit_slot[k]
    if slot >= 0:
        return in_bits(rg.bits, slot, x)
    base = rg.start[k]
    for i in range(rg.len[k]):
        if rg.arena[base + i] == x:
            return True
    return False


@njit(cache=True, inline="always")
def frontier_remove(rg, r, x):
    """Remove x from region r's frontier; False if it was not there."""
    return _frontier_discard(rg, r, x)


@njit(cache=True, inline="always")
def frontier_add(rg, sc, r, x):
    """Add x, not a member, to region r's frontier (False, changing nothing,
    when the arena has no room: STATUS_ARENA_FULL)."""
    f = rg.n_regions + r
    slot = rg.bit_slot[f]
    if slot < 0 or rg.cap[f] > 0:   # a block: listed, or indexed
        if not _ensure(rg, sc, f, 1):
            return False
        n = rg.len[f]
        rg.arena[rg.start[f] + n] = x
        rg.len[f] = n + 1
    if slot >= 0:
        set_bit(rg.bits, slot, x)
    rg.fr_live[r] += 1
    if slot >= 0 and rg.cap[f] == 0:
        rg.len[f] = rg.fr_live[r]
    elif slot < 0:
        if rg.len[f] >= BITSET_MIN:
            _index(rg, sc, f)
    elif rg.len[f] > 2 * rg.fr_live[r] + 32:
        _compact_frontier(rg, f)
    return True


# ---------------------------------------------------------------- storage

@njit(cache=True, inline="always")
def _bits_only(rg, k):
    """Whether set k is its bitset alone, with no block."""
    return rg.bit_slot[k] >= 0 and rg.cap[k] == 0


@njit(cache=True, inline="always")
def _take_slot(rg, sc, k):
    """A bitset row for set k (kept if it has one); False when none is free."""
    if rg.bit_slot[k] >= 0:
        return True
    if sc[S_FREE_SLOTS] == 0:
        return False
    sc[S_FREE_SLOTS] -= 1
    rg.bit_slot[k] = rg.free_slots[sc[S_FREE_SLOTS]]
    return True


@njit(cache=True, inline="always")
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
        set_bit(rg.bits, slot, rg.arena[base + i])


@njit(cache=True, inline="always")
def _drop_index(rg, sc, k):
    slot = rg.bit_slot[k]
    if slot >= 0:
        rg.bit_slot[k] = -1
        rg.free_slots[sc[S_FREE_SLOTS]] = slot
        sc[S_FREE_SLOTS] += 1


@njit(cache=True, inline="always")
def _ensure(rg, sc, k, extra):
    """Room in set k for `extra` more members; returns False if the arena is
    exhausted even after compaction (the driver then reruns with a larger one).
    The common case, room already there, is tested without a call."""
    if rg.len[k] + extra <= rg.cap[k]:
        return True
    return _move_set(rg, sc, k, extra)


@njit(cache=True)
def _move_set(rg, sc, k, extra):
    """`_ensure` when set k must move to a larger block at the arena's top."""
    n = rg.len[k]
    need = n + extra
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


@njit(cache=True)
def compact_arena(rg, sc):
    """Slide live blocks down over abandoned ones (blocks keep their order)."""
    order = rg.block_order
    m = 0
    for k in range(rg.start.shape[0]):
        if rg.cap[k] != 0:
            order[m] = k
            m += 1
    _heapsort_by(rg.start, order, m)
    top = 0
    arena = rg.arena
    for i in range(m):
        k = order[i]
        cap = rg.cap[k]
        src = rg.start[k]
        n = rg.len[k]
        if src != top:
            for j in range(n):
                arena[top + j] = arena[src + j]
            rg.start[k] = top
        top += cap
    sc[S_ARENA_TOP] = top


@njit(cache=True)
def _heapsort_by(keys, idx, m):
    """Sort idx[:m] by keys[idx] in place (heapsort: no allocation)."""
    for start in range(m // 2 - 1, -1, -1):
        _sift_down(keys, idx, start, m)
    for end in range(m - 1, 0, -1):
        idx[0], idx[end] = idx[end], idx[0]
        _sift_down(keys, idx, 0, end)


@njit(cache=True, inline="always")
def _sift_down(keys, idx, root, end):
    while True:
        child = 2 * root + 1
        if child >= end:
            return
        if child + 1 < end and keys[idx[child + 1]] > keys[idx[child]]:
            child += 1
        if keys[idx[root]] >= keys[idx[child]]:
            return
        idx[root], idx[child] = idx[child], idx[root]
        root = child


# ---------------------------------------------------------------- the parts of absorb

@njit(cache=True, inline="always")
def _frontier_discard(rg, r, e):
    """Remove e from region r's frontier; False if it was not there."""
    f = rg.n_regions + r
    slot = rg.bit_slot[f]
    if slot >= 0:    # indexed, or a bitset alone: the bitset is the truth
        if not in_bits(rg.bits, slot, e):
            return False
        clear_bit(rg.bits, slot, e)
        rg.fr_live[r] -= 1
        return True
    if not _block_remove(rg, f, e):
        return False
    rg.fr_live[r] = rg.len[f]
    return True


@njit(cache=True, inline="always")
def _block_remove(rg, k, x):
    """Remove x from listed set k (the last entry takes its place); False if it
    was not there."""
    base = rg.start[k]
    n = rg.len[k]
    for i in range(n):
        if rg.arena[base + i] == x:
            rg.arena[base + i] = rg.arena[base + n - 1]
            rg.len[k] = n - 1
            return True
    return False


@njit(cache=True, inline="always")
def _frontier_union(sc, mark, rg, r, r2):
    """Add r2's frontier to r's (a listed one has room: `absorb` made it)."""
    f = rg.n_regions + r
    f2 = rg.n_regions + r2
    if _bits_only(rg, f):
        _frontier_union_bits(rg, r, f, f2)
        return
    arena = rg.arena
    bits = rg.bits
    fslot = rg.bit_slot[f]
    fbase = rg.start[f]
    epoch = 0
    if fslot < 0:    # not indexed: mark the members
        sc[S_EPOCH] += 1
        epoch = sc[S_EPOCH]
        for i in range(rg.len[f]):
            mark[arena[fbase + i]] = epoch
    f2slot = rg.bit_slot[f2]
    n = rg.len[f]
    if _bits_only(rg, f2):
        for w in range(bits.shape[1]):
            b = bits[f2slot, w]
            while b:
                j, b = pop_lowest(b)
                n = _frontier_add(arena, bits, mark, fslot, fbase, epoch, w * 64 + j, n)
    else:
        f2base = rg.start[f2]
        for i in range(rg.len[f2]):
            x = arena[f2base + i]
            if f2slot >= 0 and not in_bits(bits, f2slot, x):
                continue
            n = _frontier_add(arena, bits, mark, fslot, fbase, epoch, x, n)
    rg.fr_live[r] += n - rg.len[f]
    rg.len[f] = n
    if fslot >= 0:
        if n > 2 * rg.fr_live[r] + 32:
            _compact_frontier(rg, f)
    elif n >= BITSET_MIN:
        _index(rg, sc, f)


@njit(cache=True, inline="always")
def _frontier_add(arena, bits, mark, fslot, fbase, epoch, x, n):
    """Append x to a listed frontier of n entries at fbase unless it is there
    (its bitset, else the `epoch` marks, tells); returns the new length."""
    if fslot >= 0:
        if in_bits(bits, fslot, x):
            return n
        set_bit(bits, fslot, x)
    else:
        if mark[x] == epoch:
            return n
        mark[x] = epoch
    arena[fbase + n] = x
    return n + 1


@njit(cache=True, inline="always")
def _frontier_union_bits(rg, r, f, f2):
    """`_frontier_union` into a frontier that is its bitset alone."""
    bits = rg.bits
    fslot = rg.bit_slot[f]
    added = 0
    f2slot = rg.bit_slot[f2]
    if f2slot >= 0:
        for w in range(bits.shape[1]):
            d = bits[f2slot, w] & ~bits[fslot, w]
            if d:
                bits[fslot, w] |= d
                added += popcount(d)
    else:
        base2 = rg.start[f2]
        for i in range(rg.len[f2]):
            x = rg.arena[base2 + i]
            if not in_bits(bits, fslot, x):
                set_bit(bits, fslot, x)
                added += 1
    rg.fr_live[r] += added
    rg.len[f] = rg.fr_live[r]


@njit(cache=True)
def _compact_frontier(rg, f):
    """Drop removed and repeated entries of an indexed frontier's block."""
    slot = rg.bit_slot[f]
    base = rg.start[f]
    n = 0
    for i in range(rg.len[f]):
        x = rg.arena[base + i]
        if in_bits(rg.bits, slot, x):
            clear_bit(rg.bits, slot, x)
            rg.arena[base + n] = x
            n += 1
    for i in range(n):
        set_bit(rg.bits, slot, rg.arena[base + i])
    rg.len[f] = n


@njit(cache=True, inline="always")
def _interior_absorb(sc, st_compute, mark, rg, r, e, r2):
    """(r2's interior - r's interior) + e join r's interior, adding their
    computes: e's counts even when e was a member already (as the oracle's
    set union does). An interior with a bitset row is that bitset alone."""
    sc[S_ABSORB_WORK] += rg.len[r2]
    if rg.bit_slot[r] >= 0:
        _interior_absorb_bits(st_compute, rg, r, e, r2)
    else:
        _interior_absorb_listed(sc, st_compute, mark, rg, r, e, r2)


@njit(cache=True, inline="always")
def _interior_absorb_bits(st_compute, rg, r, e, r2):
    """`_interior_absorb` into an interior that is its bitset alone."""
    bits = rg.bits
    slot = rg.bit_slot[r]
    slot2 = rg.bit_slot[r2]
    added = 0
    count = 0
    e_before = in_bits(bits, slot, e)
    if slot2 >= 0:
        for w in range(bits.shape[1]):
            d = bits[slot2, w] & ~bits[slot, w]
            if d:
                bits[slot, w] |= d
                while d:
                    j, d = pop_lowest(d)
                    added += st_compute[w * 64 + j]
                    count += 1
    else:
        base2 = rg.start[r2]
        for i in range(rg.len[r2]):
            x = rg.arena[base2 + i]
            if not in_bits(bits, slot, x):
                set_bit(bits, slot, x)
                added += st_compute[x]
                count += 1
    e_new = not e_before and in_bits(bits, slot, e)  # e came with r2's interior
    if not e_new:
        added += st_compute[e]
        if not e_before:
            set_bit(bits, slot, e)
            count += 1
    rg.len[r] += count
    rg.compute[r] += added


@njit(cache=True, inline="always")
def _interior_absorb_listed(sc, st_compute, mark, rg, r, e, r2):
    """`_interior_absorb` into a listed interior (which takes a bitset, and drops
    its block, when it grows large)."""
    n2 = rg.len[r2]
    if not _ensure(rg, sc, r, n2 + 1):
        return
    arena = rg.arena
    bits = rg.bits
    slot2 = rg.bit_slot[r2]
    added = 0
    sc[S_EPOCH] += 2
    in_r = sc[S_EPOCH] - 1
    in_diff = sc[S_EPOCH]
    base = rg.start[r]
    n_before = rg.len[r]
    for i in range(n_before):
        mark[arena[base + i]] = in_r
    sc[S_ABSORB_WORK] += n_before
    n = n_before
    if slot2 >= 0:
        for w in range(bits.shape[1]):
            d = bits[slot2, w]
            while d:
                j, d = pop_lowest(d)
                x = w * 64 + j
                if mark[x] == in_r:
                    continue
                mark[x] = in_diff
                added += st_compute[x]
                arena[base + n] = x
                n += 1
    else:
        base2 = rg.start[r2]
        for i in range(n2):
            x = arena[base2 + i]
            if mark[x] == in_diff or mark[x] == in_r:
                continue
            mark[x] = in_diff
            added += st_compute[x]
            arena[base + n] = x
            n += 1
    if mark[e] != in_diff:
        added += st_compute[e]
        if mark[e] != in_r:
            arena[base + n] = e
            n += 1
    rg.len[r] = n
    rg.compute[r] += added
    if n >= BITSET_MIN and _take_slot(rg, sc, r):
        slot = rg.bit_slot[r]
        bits[slot, :] = 0
        for i in range(n):
            set_bit(bits, slot, arena[base + i])
        rg.cap[r] = 0


# ---------------------------------------------------------------- the debug pass

class RegionsBroken(AssertionError):
    """A broken invariant of the neighbourhoods' sets, found by `check`; raised
    explicitly, so that `python -O` does not strip the pass."""


def _bit_members(rg, k) -> set[int]:
    bits = np.unpackbits(rg.bits[rg.bit_slot[k]].view(np.uint8), bitorder="little")
    return set(np.flatnonzero(bits).tolist())


def check(rg, sc) -> None:
    """Check the invariants of the sets' storage, raising `RegionsBroken` at the
    first broken one (simrd's style: it stops the run). Run between slices when
    DTRF_CHECK_REGIONS=1 (off by default: it walks every set). What holds whatever the history:
    - bitset rows: each used row belongs to one set, the free stack holds the
      others, and only frontiers keep a block beside theirs (an interior with
      a row is that bitset alone);
    - blocks: inside the arena below its top, never overlapping, len <= cap;
    - a bitset alone: `len` counts its members, and a frontier's `fr_live` too;
    - an indexed frontier: its bitset, counted by `fr_live`, lists only
      entries of its block;
    - a listed frontier: distinct members, `fr_live` of them;
    - a listed interior: distinct members."""
    n_regions = rg.n_regions
    top = int(sc[S_ARENA_TOP])
    used = rg.bit_slot[rg.bit_slot >= 0]
    free = rg.free_slots[:int(sc[S_FREE_SLOTS])]
    if len(set(used.tolist())) != len(used):
        raise RegionsBroken("a bitset row serves two sets")
    if set(used.tolist()) & set(free.tolist()):
        raise RegionsBroken("a used bitset row is on the free stack")
    if len(used) + len(free) != rg.bits.shape[0]:
        raise RegionsBroken("bitset rows lost or doubled")
    if not (0 <= top <= len(rg.arena)):
        raise RegionsBroken(f"arena top {top} outside the arena")
    _check_blocks(rg, top)
    broken = _broken_sets(rg)
    if len(broken):
        k = int(broken[0])
        _check_set(rg, k, k >= n_regions, k - n_regions if k >= n_regions else k)
        raise RegionsBroken(f"set {k} lists an entry that is no storage")


def _check_blocks(rg, top: int) -> None:
    """`check` of the blocks, in the arena's order: no overlap, below the top,
    0 <= len <= cap."""
    negative = np.flatnonzero(rg.len < 0)
    if len(negative):
        raise RegionsBroken(f"set {int(negative[0])} has a negative len")
    with_block = np.flatnonzero(rg.cap > 0)
    order = with_block[np.lexsort((with_block, rg.cap[with_block], rg.start[with_block]))]
    starts, ends = rg.start[order], rg.start[order] + rg.cap[order]
    overlap = starts < np.concatenate(([0], ends[:-1]))
    bad = np.flatnonzero(overlap | (ends > top) | (rg.len[order] > rg.cap[order]))
    if len(bad):
        i = int(bad[0])
        k = int(order[i])
        if overlap[i]:
            raise RegionsBroken(f"set {k}'s block overlaps the one before it")
        if ends[i] > top:
            raise RegionsBroken(f"set {k}'s block runs past the arena top")
        raise RegionsBroken(f"set {k} holds more than its block")


def _broken_sets(rg) -> np.ndarray:
    """The sets that `_check_set` finds broken, in order, found for all sets
    at once (the pass runs between slices; set by set it cost more than the run)."""
    n_sets, n_regions = len(rg.cap), rg.n_regions
    ks = np.arange(n_sets)
    frontier = ks >= n_regions
    live = np.where(frontier, rg.fr_live[ks % n_regions], -1)
    slot = rg.bit_slot
    counts = np.zeros(n_sets, dtype=np.int64)
    has_row = slot >= 0
    counts[has_row] = _popcounts(rg.bits[slot[has_row]])
    alone = has_row & (rg.cap == 0)
    indexed = has_row & (rg.cap > 0)
    listed = ~has_row
    bad = alone & ((rg.len != counts) | (frontier & (live != counts)))
    bad |= indexed & (~frontier | (live != counts))
    bad |= listed & ~((rg.cap > 0) | (rg.len == 0))
    bad |= listed & frontier & (live != np.where(rg.cap > 0, rg.len, 0))
    owner, members = _block_members(rg, np.flatnonzero(rg.cap > 0))
    wild = (members < 0) | (members >= 64 * rg.bits.shape[1])
    bad[owner[wild]] = True
    owner, members = owner[~wild], members[~wild]
    in_listed = listed[owner]
    o, m = owner[in_listed], members[in_listed]
    order = np.lexsort((m, o))
    o, m = o[order], m[order]
    twice = (o[1:] == o[:-1]) & (m[1:] == m[:-1])
    bad[o[1:][twice]] = True
    bad[_bits_outside_block(rg, owner, members, np.flatnonzero(indexed & frontier))] = True
    return np.flatnonzero(bad)


def _popcounts(rows: np.ndarray) -> np.ndarray:
    """Members of each bitset row (np.bitwise_count from NumPy 2.0 on)."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(rows).sum(axis=1)
    return np.unpackbits(rows.view(np.uint8), axis=1).sum(axis=1)


def _block_members(rg, sets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owning set, entry) of every entry in the blocks of `sets`."""
    lens = rg.len[sets].astype(np.int64)
    first = np.repeat(rg.start[sets] - (np.cumsum(lens) - lens), lens)
    entries = rg.arena[first + np.arange(int(lens.sum()))]
    return np.repeat(sets, lens), entries


def _bits_outside_block(rg, owner, members, sets: np.ndarray) -> np.ndarray:
    """The indexed frontiers among `sets` with a bit that no entry of their
    block has."""
    if not len(sets):
        return sets
    row_of = np.full(len(rg.cap), -1)
    row_of[sets] = np.arange(len(sets))
    mine = row_of[owner] >= 0
    listed = np.zeros((len(sets), rg.bits.shape[1]), dtype=np.uint64)
    entry = members[mine].astype(np.uint64)
    np.bitwise_or.at(listed, (row_of[owner[mine]], (entry >> np.uint64(6)).astype(np.int64)),
                     np.left_shift(np.uint64(1), entry & np.uint64(63)))
    outside = (rg.bits[rg.bit_slot[sets]] & ~listed).any(axis=1)
    return sets[outside]


def _check_set(rg, k: int, is_frontier: bool, r: int) -> None:
    """`check` of set k (region r's frontier or interior)."""
    slot = rg.bit_slot[k]
    listed = rg.arena[rg.start[k]:rg.start[k] + rg.len[k]].tolist() if rg.cap[k] > 0 else []
    if slot >= 0 and rg.cap[k] == 0:
        members = _bit_members(rg, k)
        if rg.len[k] != len(members):
            raise RegionsBroken(f"set {k}: len {rg.len[k]} != {len(members)} bits")
        if is_frontier and rg.fr_live[r] != len(members):
            raise RegionsBroken(f"frontier {k}: fr_live != its bits")
        return
    if slot >= 0:
        if not is_frontier:
            raise RegionsBroken(f"interior {k} keeps a block beside its bitset")
        members = _bit_members(rg, k)
        if not members <= set(listed):
            raise RegionsBroken(f"frontier {k}: a bit with no entry in its block")
        if rg.fr_live[r] != len(members):
            raise RegionsBroken(f"frontier {k}: fr_live != its bits")
        return
    if not (rg.cap[k] > 0 or rg.len[k] == 0):
        raise RegionsBroken(f"set {k}: members but no block")
    if len(set(listed)) != len(listed):
        raise RegionsBroken(f"set {k}: a member listed twice")
    if is_frontier and rg.fr_live[r] != len(listed):
        raise RegionsBroken(f"frontier {k}: fr_live != its length")
