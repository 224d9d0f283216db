"""Shared and masked walks (walks.shared_rebuilds, walks.mask_rebuilds)
against plain walks (§8.2).

After a compute, the rebuilds of one direction share their walks, through
memo bitsets (many bases) or one walk carrying a mask of the bases (a few
bases with large regions); each region must come out with exactly the
interior, frontier and compute a plain walk from its base gives. Indexed
interiors, and frontiers made by shared walks, are their bitset alone, so sets
are read through `region_sets`.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from logdsl import Log
from logs import random_logs
from oracle import run as oracle_run
from public import program_or_skip
from region_walks import (
    assert_work_space_empty,
    bitset_alone,
    masked_and_plain,
    plain_rebuilds,
    region_sets,
    shared_and_plain,
)

from dtrforensics.engine import layout as K
from dtrforensics.engine import walks as W
from dtrforensics.engine.baseline import baseline
from dtrforensics.engine.regions import BITSET_MIN
from dtrforensics.engine.replay import prepared, replay
from dtrforensics.synth.generator import SynthSpec, generate
from dtrforensics.trace import parse_lines


@pytest.mark.public
def test_shared_walks_equal_plain_walks_on_inceptionv4():
    program = program_or_skip("inceptionv4")
    results, failures = shared_and_plain(program, 2_349_000_000)
    assert failures == 0
    for shared, plain in results:
        assert shared == plain
    assert any(len(interior) >= BITSET_MIN for interior, _, _ in results[0][1].values())
    assert any(len(frontier) >= BITSET_MIN for _, frontier, _ in results[0][0].values())


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


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_masked_walks_equal_plain_walks_with_views(seed):
    spec = SynthSpec(kind="mixed", depth=24, width=2, view_prob=0.5, seed=seed)
    program = parse_lines(generate(spec).splitlines(), name=f"mixed-{seed}")
    peak = replay(program, ratio=1.0).summary.peak
    for fraction in (3, 4, 6):
        for masked, plain in masked_and_plain(program, peak // fraction, trials=8, seed=seed):
            assert masked == plain


@pytest.mark.public
def test_masked_walks_equal_plain_walks_on_the_lstm():
    """The slow regime's neighbourhood: large evicted stretches, sets in every form."""
    program = program_or_skip("lstm")
    results = masked_and_plain(program, 1_482_623_728, trials=6)
    for masked, plain in results:
        assert masked == plain
    assert any(len(interior) >= BITSET_MIN for m, _ in results for interior, _, _ in m.values())


@settings(max_examples=200, deadline=None)
@given(program=random_logs(), fraction=st.floats(0.05, 0.8), seed=st.integers(0, 1 << 16))
def test_masked_walks_equal_plain_walks_on_random_traces(program, fraction, seed):
    """Random logs have views of one argument among several: edges against the id
    order, which take a masked walk another pass."""
    budget = int(fraction * baseline(program).peak)
    results = masked_and_plain(program, budget, trials=4, seed=seed)
    assume(results)
    for masked, plain in results:
        assert masked == plain


def test_a_masked_walk_follows_an_edge_against_the_id_order():
    """w views v but is made from v and q: q (a later storage) gets v as a child.
    Walking forward from p (q's parent, not v's) with v and q not resident, v is
    reached only through q, after v's place in id order has been passed; a
    second pass from v must still reach c, v's child."""
    log = (Log().const("r", 8).const("p", 8).call("v", "op", ["r"], 10, 100)
           .call("q", "op", ["p"], 10, 100).call("w", "view", ["v", "q"], 10, 0, aliases=[0])
           .call("c", "op", ["w"], 10, 100))
    program = log.program("against-order")
    state = replay(program, ratio=1.0, keep_state=True).state
    graph, _ = prepared(program)
    st, rg = state.st, state.regions
    p, v, q, c = (int(program.tensor_storage[program.tensor_by_name(n)]) for n in "pvqc")
    assert v < q and q in graph.fwd_nbr[graph.fwd_ptr[p]:graph.fwd_ptr[p + 1]]
    st[K.R_MATERIAL, [p, c]] = 1
    st[K.R_MATERIAL, [v, q]] = 0
    bases = np.array([p, c], dtype=np.int64)
    W.mask_rebuilds(graph, state.sc, st[K.R_MATERIAL], st[K.R_COMPUTE], state.scratch, rg,
                     bases, 2, K.FORWARD)
    assert_work_space_empty(rg)
    interior, frontier, _ = region_sets(rg, bases, K.FORWARD)[p]
    assert interior == {v, q} and frontier == {c}


def _random_states(seed, trials):
    """States of a synthetic trace with views and a backward pass, each with a random
    resident set and a random cutoff of visible edges: (graph, state, storages)."""
    spec = SynthSpec(kind="mixed", depth=30, width=2, view_prob=0.6, seed=seed, backward=True)
    program = parse_lines(generate(spec).splitlines(), name=f"views-{seed}")
    state = replay(program, ratio=0.3, keep_state=True).state
    graph, _ = prepared(program)
    sc, st = state.sc, state.st
    created = int(sc[K.S_CREATED])
    ids = np.arange(st.shape[1])
    storages = np.flatnonzero((ids < created) & (graph.tensor_storage == ids))
    rng = np.random.default_rng(seed)
    for _ in range(trials):
        st[K.R_MATERIAL, storages] = rng.random(len(storages)) < rng.random()
        sc[K.S_CREATED] = int(rng.integers(1, created + 1))
        yield graph, state, storages, rng


@pytest.mark.parametrize("seed", [0, 1])
def test_shared_rebuilds_equal_plain_walks_on_random_resident_sets(seed):
    """The whole of `_shared_rebuilds` (memo rows, masked walks of up to 64 bases,
    plain walks) on any resident set and edge cutoff, with storage 0 among the
    bases; the work space is left empty every time."""
    for graph, state, storages, rng in _random_states(seed, 25):
        size = int(rng.integers(2, min(len(storages), 200) + 1))
        bases = rng.choice(storages, size=size, replace=False).astype(np.int64)
        if rng.random() < 0.3:
            bases[0] = storages[0]
        for backward in (K.FORWARD, K.BACKWARD):
            W.shared_rebuilds(graph, state.sc, state.st[K.R_MATERIAL], state.st[K.R_COMPUTE],
                               state.mark, state.scratch, state.regions, bases, size, backward)
            assert_work_space_empty(state.regions)
            shared = region_sets(state.regions, bases, backward)
            assert shared == plain_rebuilds(graph, state, bases, backward)


def test_shared_rebuilds_with_few_memo_rows():
    """Five memo rows: the memo path runs out of rows midway and masked walks go
    five bases at a time; the regions and the empty work space stay as they must."""
    for graph, state, storages, rng in _random_states(2, 20):
        words = state.regions.memo_int.shape[1]
        rg = state.regions = state.regions._replace(
            memo_node=np.zeros(5, np.int64), memo_int=np.zeros((5, words), np.uint64),
            memo_fr=np.zeros((5, words), np.uint64), memo_stats=np.full((5, 2), -1, np.int64),
            memo_stack=np.zeros((6, 2), np.int64))
        resident = storages[state.st[K.R_MATERIAL, storages] == 1].astype(np.int64)
        for bases in (resident, resident[:7]):
            if len(bases) < 2:
                continue
            for backward in (K.FORWARD, K.BACKWARD):
                rg.memo_gate[1] = 0   # no backing off: every round tries the memo rows
                W.shared_rebuilds(graph, state.sc, state.st[K.R_MATERIAL],
                                   state.st[K.R_COMPUTE], state.mark, state.scratch, rg, bases,
                                   len(bases), backward)
                assert not rg.memo_row.any() and not rg.memo_int.any() and not rg.memo_fr.any()
                shared = region_sets(rg, bases, backward)
                assert shared == plain_rebuilds(graph, state, bases, backward)


def test_a_run_that_never_evicts_keeps_no_regions():
    """Regions wait for their first reader (§8.7): a run whose dead frees are its
    only evictions makes no rebuild and no absorb, and its regions are never built."""
    log = (Log().const("x", 8).call("a", "op", ["x"], 10, 100).call("b", "op", ["a"], 10, 100)
           .release("a").call("c", "op", ["b"], 10, 100).release("b")
           .call("d", "op", ["c", "x"], 10, 100))
    program = log.program("no-eviction")
    result = replay(program, ratio=1.0, keep_state=True)
    sc = result.state.sc
    assert result.summary.dead_frees == 2 and result.summary.evictions == 0
    assert (sc[K.S_REBUILDS], sc[K.S_ABSORBS], sc[K.S_WALK_VISITS]) == (0, 0, 0)
    assert sc[K.S_REGIONS_BUILT] == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("fraction", [0.3, 0.55, 0.8])
def test_regions_built_at_their_first_reader_give_the_oracles_run(seed, fraction):
    """Regions built all at once at the first scan, rematerialization or view
    linking another storage (§8.7) are those kept all along: the oracle, which
    keeps them all along, evicts the same storages in the same order."""
    spec = SynthSpec(kind="mixed", depth=20, width=2, view_prob=0.6, seed=seed, backward=True)
    program = parse_lines(generate(spec).splitlines(), name=f"views-{seed}")
    budget = int(fraction * baseline(program).peak)
    got = replay(program, budget=budget, debug=True)
    want = oracle_run(program, budget, "dtr")
    assert got.summary.evictions > 0
    assert [tuple(v) for v in got.victims.tolist()] == [tuple(v) for v in want.victims]
    assert (got.summary.outcome, got.summary.clock) == (want.outcome, want.clock)
