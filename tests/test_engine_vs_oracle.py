"""Property tests: the engine and the simple oracle agree on random traces, and
the budget-interval certificate holds (same execution inside, not just outside)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from logdsl import Log
from oracle import run as oracle_run

from dtrforensics.engine.baseline import baseline
from dtrforensics.engine.replay import replay

SIZES = (0, 8, 16, 16, 24, 64, 100, 128)
COSTS = (0, 1, 1, 5, 10, 100)
POLICIES = ("dtr", "no-staleness", "no-size", "compute-only", "lru", "size", "msps", "dtr-local")


@st.composite
def random_logs(draw):
    """A valid log mixing every instruction kind over a small live-name pool."""
    log = Log()
    live: list[str] = []
    counter = [0]

    def fresh():
        counter[0] += 1
        return f"x{counter[0]}"

    for _ in range(draw(st.integers(1, 3))):
        name = fresh()
        log.const(name, draw(st.sampled_from(SIZES[1:])))
        live.append(name)
    for _ in range(draw(st.integers(3, 28))):
        action = draw(st.sampled_from(("call", "call", "call", "call", "view", "mutate",
                                       "copy", "copy_from", "release", "release")))
        if action in ("call", "view"):
            args = draw(st.lists(st.sampled_from(live), min_size=1, max_size=3))
            n_out = draw(st.integers(1, 3)) if action == "call" else 1
            results = [fresh() for _ in range(n_out)]
            aliases = ([0] if action == "view" else
                       [draw(st.sampled_from([-1, -1, -1, 0])) for _ in results])
            sizes = [draw(st.sampled_from(SIZES)) for _ in results]
            log.call(results, "backward_op" if draw(st.booleans()) and len(live) > 4 else "op",
                     args, draw(st.sampled_from(COSTS)), sizes, aliases)
            live.extend(results)
        elif action == "mutate":
            args = draw(st.lists(st.sampled_from(live), min_size=1, max_size=2, unique=True))
            log.mutate("add_", args, [0], draw(st.sampled_from(COSTS)))
        elif action == "copy":
            name = fresh()
            log.copy(name, draw(st.sampled_from(live)))
            live.append(name)
        elif action == "copy_from":
            log.copy_from(draw(st.sampled_from(live)), draw(st.sampled_from(live)))
        elif len(live) > 1:
            name = draw(st.sampled_from(live))
            log.release(name)
            if draw(st.booleans()):
                live.remove(name)
    if draw(st.booleans()):
        log.release("never_defined")
    return log.program()


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
    if want.oom is None:
        assert s.oom is None
    else:
        assert (s.oom.op_id, s.oom.request, s.oom.memory, s.oom.pinned, s.oom.depth,
                s.oom.tensor, s.oom.root_tensor) == tuple(
            want.oom[k] for k in ("op_id", "request", "memory", "pinned", "depth", "tensor",
                                  "root_tensor"))


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
