"""Property tests: the engine and the simple oracle agree on random traces, and
the budget-interval certificate holds (same execution inside, not just outside)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from logs import random_logs
from oracle import POLICIES
from oracle import run as oracle_run

from dtrforensics.engine.baseline import baseline
from dtrforensics.engine.replay import replay


def _same_execution(a, b) -> bool:
    return (a.summary.outcome == b.summary.outcome and a.summary.clock == b.summary.clock
            and a.stream.tolist() == b.stream.tolist())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=random_logs(), fraction=st.one_of(st.floats(0.05, 1.1), st.floats(0.6, 1.1)),
       policy=st.sampled_from(POLICIES))
def test_engine_agrees_with_oracle(program, fraction, policy):
    peak = baseline(program).peak
    budget = int(fraction * peak)
    got = replay(program, budget=budget, policy=policy, debug=True)
    want = oracle_run(program, budget, policy)
    s = got.summary
    assert s.anomalies == 0
    assert [tuple(v) for v in got.victims.tolist()] == [tuple(v) for v in want.victims]
    assert [(("pressure", "dead")[k], st_, op) for k, st_, op, _ in got.stream.tolist()] == \
        [tuple(e) for e in want.stream]
    assert (s.outcome, s.clock, s.remat_compute, s.remats, s.collateral_remats, s.max_depth) == \
        (want.outcome, want.clock, want.remat_compute, want.remats, want.collateral_remats,
         want.max_depth)
    assert list(s.budget_interval) == list(want.budget_interval)
    assert (s.max_pinned.bytes, s.max_pinned.depth, s.max_pinned.op_id) == tuple(want.max_pinned)
    assert s.ops_done == want.ops_done
    if not want.order_dependent:
        assert s.frontier_misses == want.frontier_misses
    if want.oom is None:
        assert s.oom is None
    else:
        assert (s.oom.op_id, s.oom.request, s.oom.memory, s.oom.pinned, s.oom.depth,
                s.oom.tensor, s.oom.root_tensor, s.oom.final_pins) == tuple(
            want.oom[k] for k in ("op_id", "request", "memory", "pinned", "depth", "tensor",
                                  "root_tensor", "final_pins"))


@settings(max_examples=200, deadline=None)
@given(program=random_logs(), fraction=st.floats(0.05, 1.0), policy=st.sampled_from(POLICIES))
def test_budget_interval_certifies_the_execution(program, fraction, policy):
    budget = int(fraction * baseline(program).peak)
    run = replay(program, budget=budget, policy=policy)
    lo, hi = run.summary.budget_interval
    assert lo <= budget and (hi is None or budget <= hi)
    for inside in (lo, hi):
        if inside is not None:
            assert _same_execution(replay(program, budget=inside, policy=policy), run)
    # Just outside, at least one comparison flips: the interval is tight.
    for outside, side in ((lo - 1, "lo"), (None if hi is None else hi + 1, "hi")):
        if outside is None or outside < 0:
            continue
        other = replay(program, budget=outside, policy=policy)
        assert other.summary.budget_interval != run.summary.budget_interval, side
