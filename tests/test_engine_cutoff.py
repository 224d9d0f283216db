"""Rebuilds as differences (engine/cutoff.py, semantics.md §8.8).

In a debug run every region rebuilt as a difference is compared at once with
a walk from its base (walks._check_difference); a mismatch is an anomaly. So
these tests run with `debug=True`, assert no anomaly, and assert that
differences were made (a run that made none would check nothing).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from logdsl import Log
from logs import random_logs
from oracle import run as oracle_run
from public import program_or_skip
from region_walks import known_but_not_walks

from dtrforensics.engine import layout as K
from dtrforensics.engine.baseline import baseline
from dtrforensics.engine.graph import kernel_graph
from dtrforensics.engine.replay import prepared, replay
from dtrforensics.synth.generator import SynthSpec, generate
from dtrforensics.trace import parse_lines


def _checked(program, budget, policy="dtr"):
    result = replay(program, budget=budget, policy=policy, debug=True, keep_state=True)
    assert result.summary.anomalies == 0
    return result, int(result.state.regions.era[K.ERA_CUTS])


def _from_parents(result) -> int:
    """Forward regions the run made from a parent's (cutoff.from_parent)."""
    return int(result.state.regions.era[K.ERA_FROM_PARENT])


def _peels(result) -> int:
    """Forward regions holding an arrival that the run rebuilt as differences
    (cutoff.peel)."""
    return int(result.state.regions.era[K.ERA_PEELS])


@pytest.mark.parametrize("kind", ["rnn", "resnet", "mixed"])
@pytest.mark.parametrize("fraction", [0.3, 0.5])
def test_differences_are_walks_and_give_the_oracles_run(kind, fraction):
    """Remat-heavy synthetic traces: every difference equals its walk, and the
    run evicts what the oracle (which walks every rebuild) evicts."""
    spec = SynthSpec(kind=kind, depth=16, width=2, seed=7, backward=True)
    program = parse_lines(generate(spec).splitlines(), name=f"{kind}-cut")
    budget = int(fraction * baseline(program).peak)
    got, cuts = _checked(program, budget)
    want = oracle_run(program, budget, "dtr")
    assert [tuple(v) for v in got.victims.tolist()] == [tuple(v) for v in want.victims]
    assert (got.summary.outcome, got.summary.clock) == (want.outcome, want.clock)
    if got.summary.remats:
        assert cuts > 0
    if kind == "rnn" and got.summary.remats:
        assert _from_parents(got) > 0 and _peels(got) > 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_differences_with_views_are_walks(seed):
    """Views linking other storages leave no region known to be its walk;
    the regions rebuilt after them make differences again."""
    spec = SynthSpec(kind="mixed", depth=24, width=2, view_prob=0.6, seed=seed, backward=True)
    program = parse_lines(generate(spec).splitlines(), name=f"views-cut-{seed}")
    made = 0
    for fraction in (0.3, 0.5):
        _, cuts = _checked(program, int(fraction * baseline(program).peak))
        made += cuts
    assert made > 0


def test_a_view_that_makes_an_older_storage_a_child_breaks_the_id_order():
    """The view v of w (an output of h aliasing w) links a -> w: w is older."""
    views = (Log().const("w", 8).call("a", "f", ["w"], 1, 10)
             .call(["o", "v"], "h", ["w", "a"], 1, [10, 0], aliases=[-1, 0]).program())
    plain = Log().const("w", 8).call("a", "f", ["w"], 1, 10).call("o", "h", ["w", "a"], 1, 10)
    assert kernel_graph(views).ascending.tolist() == [0]
    assert kernel_graph(plain.program()).ascending.tolist() == [1]


def test_without_ascending_edges_forward_regions_take_walks_and_decide_the_same():
    """Forward differences rely on id order (KernelGraph.ascending). The same
    remat-heavy trace, its graph marked as not ascending, makes none and
    replays to the same victims."""
    spec = SynthSpec(kind="rnn", depth=16, width=2, seed=7, backward=True)
    program = parse_lines(generate(spec).splitlines(), name="rnn-order")
    budget = int(0.3 * baseline(program).peak)
    ordered, _ = _checked(program, budget)
    assert _peels(ordered) > 0 and _from_parents(ordered) > 0
    graph, _ = prepared(program)
    program._index["kernel_graph"] = graph._replace(ascending=np.zeros(1, dtype=np.int64))
    unordered, _ = _checked(program, budget)
    assert _peels(unordered) == 0 and _from_parents(unordered) == 0
    assert [tuple(v) for v in unordered.victims.tolist()] == \
        [tuple(v) for v in ordered.victims.tolist()]
    assert unordered.summary.clock == ordered.summary.clock


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=random_logs(), fraction=st.floats(0.05, 0.9))
def test_differences_are_walks_on_random_traces(program, fraction):
    _checked(program, int(fraction * baseline(program).peak))


@pytest.mark.public
def test_differences_are_walks_on_the_lstm():
    """The regime they are for, on the LSTM just above ratio 0.265 (1,726
    evictions): backward rebuilds made as differences, each equal to its walk."""
    program = program_or_skip("lstm")
    result, cuts = _checked(program, 1_482_623_728)
    assert cuts > result.summary.evictions and _from_parents(result) > 0 and _peels(result) > 0


@pytest.mark.public
@pytest.mark.slow
def test_differences_are_walks_on_the_lstm_at_0264():
    """LSTM at ratio 0.264 (38,059 evictions), about 4 s checked."""
    program = program_or_skip("lstm")
    result, cuts = _checked(program, int(0.264 * baseline(program).peak))
    assert result.summary.evictions == 38_059 or result.summary.outcome != "ok"
    assert cuts > result.summary.evictions and _from_parents(result) > result.summary.evictions // 2
    assert _peels(result) > result.summary.evictions // 8


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=random_logs(), fraction=st.floats(0.05, 0.9))
def test_regions_known_to_be_walks_are_walks_on_random_traces(program, fraction):
    """Views of one argument among several link storages the rules' upkeep never
    relinks; whatever a run did, a region it still vouches for is its walk.
    (Without walks.view_made, or walks.evicting, a few hundred examples find a
    region that is not.)"""
    assert known_but_not_walks(program, int(fraction * baseline(program).peak)) == []
