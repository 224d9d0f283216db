"""Regions rebuilt three ways, read back as sets: shared walks (memo rows),
masked walks and plain walks (engine/walks.py, semantics.md §8.2, §8.6); and
regions a run still vouches for, held to walks (engine/cutoff.py, §8.8).
Used by tests/test_engine_regions.py, and by tests/compile_ahead.py, which
makes numba compile these calls before the suite runs; imports no test tool.
"""

from __future__ import annotations

import numpy as np

from dtrforensics.engine import layout as K
from dtrforensics.engine import walks as W
from dtrforensics.engine.regions import region
from dtrforensics.engine.replay import prepared, replay


def members(rg, k) -> frozenset[int]:
    slot = rg.bit_slot[k]
    if slot >= 0:
        bits = np.unpackbits(rg.bits[slot].view(np.uint8), bitorder="little")
        if k < rg.n_regions or rg.cap[k] == 0:
            return frozenset(np.flatnonzero(bits).tolist())
        listed = rg.arena[rg.start[k]:rg.start[k] + rg.len[k]]
        return frozenset(x for x in listed.tolist() if bits[x])
    return frozenset(rg.arena[rg.start[k]:rg.start[k] + rg.len[k]].tolist())


def bitset_alone(rg) -> list[int]:
    """The sets that are their bitset alone, each checked: `len` counts its bits,
    and a frontier's live count is that too."""
    sets = [k for k in range(len(rg.cap)) if rg.bit_slot[k] >= 0 and rg.cap[k] == 0]
    for k in sets:
        count = int(np.unpackbits(rg.bits[rg.bit_slot[k]].view(np.uint8)).sum())
        assert rg.len[k] == count
        if k >= rg.n_regions:
            assert rg.fr_live[k - rg.n_regions] == count
    return sets


def region_sets(rg, bases, backward) -> dict[int, tuple]:
    out = {}
    for s in bases.tolist():
        r = region(s, backward)
        out[s] = (members(rg, r), members(rg, rg.n_regions + r), int(rg.compute[r]))
    return out


def plain_rebuilds(graph, state, bases, backward):
    """The regions of `bases` rebuilt by plain walks, one from each base (§8.2)."""
    for s in bases:
        W.rebuild(graph, state.sc, state.st[K.R_MATERIAL], state.st[K.R_COMPUTE], state.mark,
                   state.scratch, state.regions, s, backward)
    return region_sets(state.regions, bases, backward)


def assert_work_space_empty(rg):
    """What every walk leaves behind: no mask, no masked walk's rows."""
    assert not rg.memo_row.any()
    assert not rg.memo_int[:K.MASK_BASES].any() and not rg.memo_fr[:K.MASK_BASES].any()


def masked_and_plain(program, budget, trials, seed=0):
    """Regions of random sets of storages (resident or not; up to 140, more than
    one masked walk takes) rebuilt by masked walks and then by plain walks, in
    the state at the end of a run."""
    state = replay(program, budget=budget, keep_state=True).state
    graph, _ = prepared(program)
    sc, st, rg = state.sc, state.st, state.regions
    ids = np.arange(st.shape[1])
    storages = np.flatnonzero((ids < sc[K.S_CREATED]) & (graph.tensor_storage == ids))
    rng = np.random.default_rng(seed)
    results = []
    for _ in range(trials if len(storages) >= 2 else 0):
        size = int(rng.integers(2, min(len(storages), 140) + 1))
        bases = rng.choice(storages, size=size, replace=False).astype(np.int64)
        for backward in (K.FORWARD, K.BACKWARD):
            for j in range(0, size, K.MASK_BASES):
                W.mask_rebuilds(graph, sc, st[K.R_MATERIAL], st[K.R_COMPUTE], state.scratch,
                                 rg, bases[j:], min(K.MASK_BASES, size - j), backward)
            bitset_alone(rg)
            masked = region_sets(rg, bases, backward)
            assert_work_space_empty(rg)
            results.append((masked, plain_rebuilds(graph, state, bases, backward)))
    return results


def shared_and_plain(program, budget):
    """Both directions' regions of every resident storage at the end of a run,
    rebuilt with shared walks and then with plain ones; and the failed attempts."""
    state = replay(program, budget=budget, keep_state=True).state
    graph, _ = prepared(program)
    sc, st, rg = state.sc, state.st, state.regions
    ids = np.arange(st.shape[1])
    bases = np.flatnonzero((st[K.R_MATERIAL] == 1) & (ids < sc[K.S_CREATED])
                           & (graph.tensor_storage == ids))
    assert len(bases) >= W.MEMO_MIN_BASES
    results = []
    for backward in (K.FORWARD, K.BACKWARD):
        W.shared_rebuilds(graph, sc, st[K.R_MATERIAL], st[K.R_COMPUTE], state.mark,
                           state.scratch, rg, bases, len(bases), backward)
        bitset_alone(rg)
        shared = region_sets(rg, bases, backward)
        assert_work_space_empty(rg)
        results.append((shared, plain_rebuilds(graph, state, bases, backward)))
    return results, int(rg.memo_gate[0])


def known_but_not_walks(program, budget) -> list[tuple[int, int]]:
    """(storage, direction) of every region at the run's end that is known to be
    its walk (cutoff.py: a stamp) but is not: one whose interior, frontier or
    compute differ from a walk from its base, or for a forward one walked before
    the last tensor was created, whose frontier does (all its stamp vouches for)."""
    state = replay(program, budget=budget, keep_state=True).state
    graph, _ = prepared(program)
    rg, material = state.regions, state.st[K.R_MATERIAL]
    n = state.st.shape[1]
    wrong = []
    for s in np.flatnonzero(material).tolist():
        for direction in (K.FORWARD, K.BACKWARD):
            r = region(s, direction)
            if rg.fresh[r] == 0:
                continue
            interior, frontier = np.zeros(n + 2, np.int64), np.zeros(n + 2, np.int64)
            n_int, n_fr, compute = W.walk(graph, state.sc.copy(), material,
                                          state.st[K.R_COMPUTE], state.mark.copy(), interior,
                                          frontier, s, direction)
            same_frontier = members(rg, rg.n_regions + r) == frozenset(frontier[:n_fr].tolist())
            frontier_only = direction == K.FORWARD and rg.walked_at[r] != state.sc[K.S_CREATED]
            same = same_frontier and (frontier_only or (
                members(rg, r) == frozenset(interior[:n_int].tolist())
                and rg.compute[r] == compute))
            if not same:
                wrong.append((s, direction))
    return wrong
