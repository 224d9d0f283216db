"""Regions of pinned storages not kept (walks.pinned_now, semantics.md §8.9).

A pinned storage's regions never steer a run: they only show in its frontier
misses (§8.3). A run stops keeping them while they are known to be their
walks, and builds one again before a change after which it might not be. The
oracle keeps every region: these tests hold the engine's frontier misses and
victims to it, and every region left unkept to the oracle's region at the
run's end; and they check that some regions were left unkept.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from logdsl import Log
from logs import random_logs
from oracle import runtime

from dtrforensics.engine import layout as K
from dtrforensics.engine import walks as W
from dtrforensics.engine.baseline import baseline
from dtrforensics.engine.regions import region
from dtrforensics.engine.replay import prepared, replay
from dtrforensics.synth.generator import SynthSpec, generate
from dtrforensics.trace import parse_lines


def _against_oracle(program, budget) -> int:
    """Replay with the engine and the oracle: the same victims and frontier
    misses, and every region the engine left unkept the oracle's (its frontier;
    a backward one's interior and compute too). Returns how many were unkept."""
    result = replay(program, budget=budget, debug=True, keep_state=True)
    oracle = runtime(program, budget)     # kept, to read its regions
    oracle.replay()
    s = result.summary
    assert s.anomalies == 0
    assert [tuple(v) for v in result.victims.tolist()] == [tuple(v) for v in oracle.victims]
    state = result.state
    if oracle.order_dependent:   # a storage absorbed itself: the reference's set order decides
        return int((state.regions.compute == K.UNKEPT).sum())
    assert s.frontier_misses == oracle.frontier_misses
    graph, _ = prepared(program)
    rg, st_ = state.regions, state.st
    unkept = np.flatnonzero(rg.compute == K.UNKEPT)
    n = st_.shape[1]
    for r in unkept.tolist():
        base, direction = r // 2, r % 2
        assert st_[K.R_PINNED, base] and region(base, direction) == r
        interior, frontier = np.zeros(n + 2, np.int64), np.zeros(n + 2, np.int64)
        n_int, n_fr, compute = W.walk(graph, state.sc.copy(), st_[K.R_MATERIAL],
                                      st_[K.R_COMPUTE], state.mark.copy(), interior, frontier,
                                      base, direction)
        want = oracle.storages[base].fwd if direction == K.FORWARD else oracle.storages[base].bwd
        assert set(frontier[:n_fr].tolist()) == {x.id for x in want.frontier}
        if direction == K.BACKWARD:
            assert set(interior[:n_int].tolist()) == {x.id for x in want.interior}
            assert compute == want.compute
    return len(unkept)


@pytest.mark.parametrize("kind", ["rnn", "resnet", "mixed"])
@pytest.mark.parametrize("fraction", [0.3, 0.5])
def test_pinned_storages_regions_are_not_kept_and_the_run_is_the_oracles(kind, fraction):
    spec = SynthSpec(kind=kind, depth=16, width=2, seed=7, backward=True)
    program = parse_lines(generate(spec).splitlines(), name=f"{kind}-unkept")
    assert _against_oracle(program, int(fraction * baseline(program).peak)) > 0


def test_a_miss_in_a_pinned_storages_region_is_counted():
    """o's op views the constant w and reads a: w's backward region, unkept
    since the regions were first built, is built as it stood before the view
    (it never sees a), so freeing a is the reference's frontier miss."""
    p = (Log().const("w", 8).call("a", "f", ["w"], 1, 10)
         .call(["o", "v"], "g", ["w", "a"], 1, [10, 0], aliases=[-1, 0]).release("a").program())
    result = replay(p, budget=10**6, keep_state=True)
    assert result.summary.frontier_misses == 1
    w = p.tensor_storage[p.tensor_by_name("w")]
    assert result.state.regions.compute[region(w, K.BACKWARD)] != K.UNKEPT


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=random_logs(), fraction=st.floats(0.05, 1.1))
def test_unkept_regions_on_random_traces(program, fraction):
    """Random logs are where views link constants to other storages, so that
    regions not kept are built again."""
    _against_oracle(program, int(fraction * baseline(program).peak))
