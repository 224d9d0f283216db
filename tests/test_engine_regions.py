"""Shared walks (kernel._shared_rebuilds) against plain walks (§8.2).

After a compute, the rebuilds of one direction share their walks through
bitsets; each region must come out with exactly the interior, frontier and
compute a plain walk from its base gives. Indexed interiors, and frontiers
made by shared walks, are their bitset alone, so sets are read through
`region_sets`.
"""

from __future__ import annotations

import numpy as np
import pytest
from public import program_or_skip

from dtrforensics.engine import kernel as K
from dtrforensics.engine.replay import prepared, replay
from dtrforensics.synth.generator import SynthSpec, generate
from dtrforensics.trace import parse_lines


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
        r = 2 * s + backward
        out[s] = (members(rg, r), members(rg, rg.n_regions + r), int(rg.compute[r]))
    return out


def shared_and_plain(program, budget):
    """Both directions' regions of every resident storage at the end of a run,
    rebuilt with shared walks and then with plain ones; and the failed attempts."""
    state = replay(program, budget=budget, keep_state=True).state
    graph, _ = prepared(program)
    sc, st, rg = state.sc, state.st, state.regions
    ids = np.arange(st.shape[1])
    bases = np.flatnonzero((st[K.R_MATERIAL] == 1) & (ids < sc[K.S_CREATED])
                           & (graph.tensor_storage == ids))
    assert len(bases) >= K.MEMO_MIN_BASES
    results = []
    for backward in (K.FORWARD, K.BACKWARD):
        K._shared_rebuilds(graph, sc, st[K.R_MATERIAL], st[K.R_COMPUTE], state.mark,
                           state.scratch, rg, bases, len(bases), backward)
        bitset_alone(rg)
        shared = region_sets(rg, bases, backward)
        assert not rg.memo_row.any()  # the work space is left empty
        for s in bases:
            K._rebuild(graph, sc, st[K.R_MATERIAL], st[K.R_COMPUTE], state.mark, state.scratch,
                       rg, s, backward)
        results.append((shared, region_sets(rg, bases, backward)))
    return results, int(rg.memo_gate[0])


@pytest.mark.public
def test_shared_walks_equal_plain_walks_on_inceptionv4():
    program = program_or_skip("inceptionv4")
    results, failures = shared_and_plain(program, 2_349_000_000)
    assert failures == 0
    for shared, plain in results:
        assert shared == plain
    assert any(len(interior) >= K.BITSET_MIN for interior, _, _ in results[0][1].values())
    assert any(len(frontier) >= K.BITSET_MIN for _, frontier, _ in results[0][0].values())


@pytest.mark.public
def test_a_state_with_sets_that_are_bitsets_alone_resumes_to_the_same_digest():
    """Snapshot and resume keep interiors and frontiers that are their bitset
    alone: the resumed state has the same sets and the same digest."""
    from dtrforensics.engine.digest import state_digest
    from dtrforensics.engine.state import MachineState
    program = program_or_skip("inceptionv4")
    budget = 2_349_000_000
    state = replay(program, budget=budget, keep_state=True).state
    alone = bitset_alone(state.regions)
    assert any(k >= state.regions.n_regions for k in alone) and any(
        k < state.regions.n_regions for k in alone)
    snap = state.snapshot()
    again = MachineState.resume(snap, budget)
    assert bitset_alone(again.regions) == alone
    assert state_digest(again) == state_digest(state)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_shared_walks_equal_plain_walks_with_views(seed):
    spec = SynthSpec(kind="mixed", depth=24, width=2, view_prob=0.5, seed=seed)
    program = parse_lines(generate(spec).splitlines(), name=f"mixed-{seed}")
    peak = replay(program, ratio=1.0).summary.peak
    results, _ = shared_and_plain(program, peak // 4)
    for shared, plain in results:
        assert shared == plain
