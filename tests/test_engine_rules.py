"""One test per semantic rule (docs/semantics.md §4-§11) on tiny hand-written traces.

Each trace is built so that the rule alone decides the expected outcome; the
simple oracle (tests/oracle.py) must agree with the engine on each.
"""

from __future__ import annotations

import random

from logdsl import Log
from oracle import run as oracle_run

from dtrforensics.engine.exactdiv import exact_ratio
from dtrforensics.engine.replay import replay


def _both(program, budget, policy="dtr"):
    result = replay(program, budget=budget, policy=policy)
    expected = oracle_run(program, budget, policy)
    assert result.summary.outcome == expected.outcome
    assert [tuple(v) for v in result.victims.tolist()] == [tuple(v) for v in expected.victims]
    assert result.summary.clock == expected.clock
    return result


def test_last_of_equal_scores_wins():
    # (a, b) come from one op: same compute, size and staleness, so equal scores.
    # The pool holds siblings first, then the materialized tensor: [b, a].
    p = (Log().const("w", 8).call(["a", "b"], "split", ["w"], 10, [100, 100])
         .call("c", "g", ["w"], 10, 100).program())
    result = _both(p, budget=300)
    assert result.victims[0, 0] == p.tensor_by_name("a")


def test_first_zero_score_stops_the_scan():
    # A zero-cost op gives zero scores (once the clock has moved on, so staleness
    # is not 0, which would score +inf); the first zero in pool order wins: b.
    p = (Log().const("w", 8).call(["a", "b"], "split", ["w"], 0, [100, 100])
         .call("x", "tick", ["w"], 5, 1).call("c", "g", ["w"], 10, 100).program())
    result = _both(p, budget=300)
    assert result.victims[0, 0] == p.tensor_by_name("b")


def test_stale_storage_is_evicted_before_fresh_one():
    p = (Log().const("w", 8).call("a", "f", ["w"], 10, 100).call("b", "f", ["w"], 10, 100)
         .call("c", "g", ["w"], 10, 100).program())
    result = _both(p, budget=300)
    assert result.victims[0, 0] == p.tensor_by_name("a")


def test_eager_eviction_frees_a_dead_storage():
    p = Log().const("w", 8).call("a", "f", ["w"], 10, 100).release("a").program()
    result = _both(p, budget=10**6)
    assert result.stream.tolist() == [[1, p.tensor_by_name("a"), 1, 11]]
    assert result.summary.dead_frees == 1 and result.summary.evictions == 0


def test_view_keeps_storage_alive_and_shares_it():
    p = (Log().const("w", 8).call("a", "f", ["w"], 10, 100)
         .call("v", "view", ["a"], 1, 0, aliases=[0]).release("a").program())
    v = p.tensor_by_name("v")
    assert p.tensor_storage[v] == p.tensor_by_name("a")
    result = _both(p, budget=10**6)
    assert result.summary.dead_frees == 0  # v still references the storage


def test_double_computed_sibling_is_not_counted_twice():
    # c forces a out (a scores lower than its small sibling b); d needs a back,
    # which recomputes (a, b) while b is still resident: b's copy is dropped.
    p = (Log().const("w", 8).call(["a", "b"], "split", ["w"], 10, [100, 20])
         .call("c", "g", ["w"], 1, 100).release("c")
         .call("d", "h", ["a", "b"], 1, 10).program())
    result = _both(p, budget=220)
    s = result.summary
    assert result.victims[:, 0].tolist() == [p.tensor_by_name("a")]
    assert (s.remats, s.collateral_remats) == (1, 0)
    assert s.peak_memory == 8 + 20 + 120  # the recompute allocates both outputs
    final = replay(p, budget=220, keep_state=True).state
    from dtrforensics.engine import kernel as K
    assert final.sc[K.S_MEMORY] == 8 + 100 + 20 + 10


def test_mutation_makes_a_new_result_sized_as_the_storage():
    p = (Log().const("w", 8).call("a", "f", ["w"], 10, 100)
         .call("v", "view", ["a"], 1, 0, aliases=[0]).mutate("relu_", ["v"], [0], 5).program())
    t = p.tensor_by_name("v$")
    assert p.tensor_size[t] == 100 and p.tensor_storage[t] == t
    _both(p, budget=10**6)


def test_copy_from_rebinds_a_name():
    p = (Log().const("w", 8).call("a", "f", ["w"], 10, 100).call("b", "f", ["w"], 10, 100)
         .copy_from("a", "b").program())
    result = _both(p, budget=10**6)
    assert result.summary.dead_frees == 1  # a's tensor lost its only reference


def test_final_pin_rematerializes_an_evicted_output():
    # a is evicted to make room for c; c dies; the final pin of a recomputes it.
    p = (Log().const("w", 8).call("a", "f", ["w"], 10, 100).call("b", "g", ["w"], 10, 100)
         .call("c", "h", ["w"], 10, 100).release("c").program())
    result = _both(p, budget=250)
    s = result.summary
    assert result.victims[:, 0].tolist() == [p.tensor_by_name("a")]
    assert s.outcome == "ok" and s.remats == 1 and s.ops_done == p.n_ops


def test_oom_when_nothing_is_evictable():
    p = Log().const("w", 100).call("a", "f", ["w"], 10, 100).program()
    result = _both(p, budget=150)
    assert result.summary.outcome == "oom"
    assert result.summary.oom.request == 100 and result.summary.oom.pinned == 100


def test_thrash_limit_ends_the_run():
    log = Log().const("w", 8).call("a0", "f", ["w"], 10, 100)
    for i in range(1, 30):
        log.call(f"a{i}", "f", [f"a{i-1}"], 10, 100)
    for i in range(29, -1, -1):
        log.call(f"g{i}", "b", [f"a{i}"], 10, 10).release(f"g{i}")
    p = log.program()
    result = replay(p, budget=330, thrash_factor=1.5)
    assert result.summary.outcome == "thrashed"
    assert result.summary.remat_compute > 0.5 * result.summary.model_compute


def test_exact_ratio_matches_python_integer_division_where_floats_disagree():
    rng = random.Random(7)
    hazards = 0
    for _ in range(20000):
        num = rng.randrange(1, 2**40)
        a, b = rng.randrange(2**20, 2**34), rng.randrange(2**20, 2**40)
        want = num / (a * b)
        hazards += (num / (float(a) * float(b))) != want
        assert exact_ratio(num, a, b) == want
    assert hazards > 1000  # the cases the rounding rule exists for were exercised


def test_deep_nesting_does_not_recurse():
    n = 3000
    log = Log().const("w", 8).call("a0", "f", ["w"], 1, 10)
    for i in range(1, n):
        log.call(f"a{i}", "f", [f"a{i-1}"], 1, 10)
    log.call("z", "f", [f"a{n-1}", "a0"], 1, 10)
    p = log.program()
    # Evict everything early, then need a0 at the end: a long recomputation chain
    # is not needed (a0 recomputes from w), but the final pins rematerialize all.
    result = replay(p, budget=60)
    assert result.summary.outcome in ("ok", "oom")
    assert result.summary.max_depth >= 2


def _chain_needed_at_the_end(n: int, k: int):
    """A chain a0 -> a1 -> ... of n ops whose links are released as soon as used, except
    a_k, which the last op z needs. Under a budget of w + two links, a_k is evicted
    while the chain runs, so z rematerializes a_k, which rematerializes a_{k-1}, ...
    down to a0: k + 2 materializations in progress at once (z, a_k, ..., a0)."""
    log = Log().const("w", 8).call("a0", "f", ["w"], 1, 10)
    for i in range(1, n):
        log.call(f"a{i}", "f", [f"a{i - 1}"], 1, 10)
        if i - 1 != k:
            log.release(f"a{i - 1}")
    return log.call("z", "g", [f"a{k}"], 1, 10).release(f"a{k}").release(f"a{n - 1}").program()


def test_thousands_of_nested_rematerializations():
    """Nesting is an explicit frame stack: 5,002 levels deep, no recursion limit."""
    k = 5000
    result = replay(_chain_needed_at_the_end(k + 500, k), budget=28)
    assert result.summary.outcome == "ok"
    assert result.summary.max_depth == k + 2
    assert result.summary.remats == k + 1


def test_nested_rematerialization_chain_agrees_with_the_oracle():
    """The same construction, shallow enough for the recursive oracle."""
    k = 150
    result = _both(_chain_needed_at_the_end(k + 50, k), budget=28)
    assert result.summary.max_depth == k + 2
