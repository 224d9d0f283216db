"""Invariants of docs/semantics.md §13: a correct run has none broken, and an
injected inconsistency is counted, reported in the summary and, in strict mode
(the test suite's default), fails the run."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from logdsl import Log

from dtrforensics.engine import kernel as K
from dtrforensics.engine.replay import STRICT_INVARIANTS_ENV, InvariantError, prepared, replay


def evicting_program():
    """Three 100-byte outputs of one constant under 250 bytes: evictions, a
    dead free and a rematerialization by the final pins."""
    return (Log().const("w", 8).call("a", "f", ["w"], 10, 100).call("b", "g", ["w"], 10, 100)
            .call("c", "h", ["w"], 10, 100).release("c").call("d", "k", ["a", "b"], 5, 40)
            .program())


def test_a_correct_run_breaks_no_invariant_even_when_checked_at_every_allocation():
    s = replay(evicting_program(), budget=250, debug=True).summary
    assert s.evictions > 0 and s.dead_frees > 0 and s.remats > 0
    assert s.anomalies == 0
    assert s.to_json()["anomalies"] == 0


def _inflate_one_op(program, extra: int):
    """Corrupt the kernel's copy of the trace: the op of 'b' allocates `extra`
    bytes that no storage accounts for (memory drifts from the resident sizes)."""
    graph, _ = prepared(program)
    total = graph.op_total_size.copy()
    total[program.tensor_op[program.tensor_by_name("b")]] += extra
    program._index["kernel_graph"] = graph._replace(op_total_size=total)


def test_an_injected_memory_drift_fails_the_run_in_strict_mode():
    program = evicting_program()
    _inflate_one_op(program, 8)
    with pytest.raises(InvariantError, match="broken invariants"):
        replay(program, budget=10**6)


def test_an_injected_memory_drift_is_counted_at_the_end_and_at_every_check(monkeypatch):
    monkeypatch.delenv(STRICT_INVARIANTS_ENV, raising=False)
    program = evicting_program()
    _inflate_one_op(program, 8)
    at_end = replay(program, budget=10**6).summary
    every_check = replay(program, budget=10**6, debug=True).summary
    assert at_end.anomalies == 1
    # b's op is the third of five allocation checks: the two after it see the drift
    assert every_check.anomalies == at_end.anomalies + 2


@pytest.mark.parametrize("corrupt", ["memory", "negative lock", "pool bytes", "pool member"])
def test_each_invariant_is_checked(corrupt):
    program = evicting_program()
    state = replay(program, budget=250, keep_state=True).state
    graph, _ = prepared(program)
    assert K.check_invariants(graph, state.sc.copy(), state.st) == 0
    sc, st = state.sc.copy(), copy.deepcopy(state.st)
    a = program.tensor_by_name("a")
    if corrupt == "memory":
        sc[K.S_MEMORY] += 1
    elif corrupt == "negative lock":
        st[K.R_LOCK, a] = -1
    elif corrupt == "pool bytes":
        sc[K.S_POOL_BYTES] += 1
    else:
        st[K.R_IN_POOL, program.tensor_by_name("w")] = 1  # a pinned constant
    assert K.check_invariants(graph, sc, st) >= 1
    assert sc[K.S_ANOMALIES] >= 1


def test_a_view_made_after_the_last_rebuild_is_a_frontier_miss_not_an_anomaly():
    # o's op views w and reads a: a's forward region (rebuilt for o) sees w
    # through the view, w's backward region (built when w was computed) never
    # sees a. Freeing a makes w's backward region absorb a storage it lacks.
    p = (Log().const("w", 8).call("a", "f", ["w"], 1, 10)
         .call(["o", "v"], "g", ["w", "a"], 1, [10, 0], aliases=[-1, 0]).release("a").program())
    s = replay(p, budget=10**6).summary
    assert s.dead_frees == 1
    assert s.frontier_misses == 1 and s.anomalies == 0


def _run_corrupted(program, budget: int, steps: int, corrupt, debug: bool) -> int:
    """The anomalies of a run whose state `corrupt` changes after `steps` steps."""
    from dtrforensics.engine import replay as R
    from dtrforensics.engine.state import MachineState
    run = R._setup(program, budget, None, "dtr", (), None, None, R.DEFAULT_THRASH_FACTOR, debug)
    state = MachineState.new(run.graph, budget, run.ctx.remat_limit)
    state.sc[K.S_DEBUG] = debug
    run.run_slice(state, steps)
    corrupt(program, state)
    run.run_slice(state, 10**6)
    assert state.sc[K.S_STATUS] != K.STATUS_RUNNING
    return int(state.sc[K.S_ANOMALIES])


def _pin_the_pool(program, state):
    """Every storage in the pool marked pinned but left in it (no invariant of
    §13.1-§13.3 reads the pin): the next pressure eviction breaks §13.4."""
    s = state.sc[K.S_POOL_HEAD]
    while s != -1:
        state.st[K.R_PINNED, s] = 1
        s = state.st[K.R_POOL_NEXT, s]


def _drop_the_constant(program, state):
    """The pinned constant w made non-resident while its tensor stays defined,
    memory and pool kept consistent: the next op reading w locks and unlocks a
    storage that is not resident (§13.4)."""
    w = program.tensor_by_name("w")
    state.st[K.R_MATERIAL, w] = 0
    state.sc[K.S_MEMORY] -= program.tensor_size[w]


@pytest.mark.parametrize("corrupt, steps", [(_pin_the_pool, 17), (_drop_the_constant, 6)])
def test_a_broken_precondition_is_counted_in_debug_mode(monkeypatch, corrupt, steps):
    monkeypatch.delenv(STRICT_INVARIANTS_ENV, raising=False)
    program = evicting_program()
    assert _run_corrupted(program, 250, steps, lambda p, s: None, debug=True) == 0
    assert _run_corrupted(program, 250, steps, corrupt, debug=False) == 0
    assert _run_corrupted(program, 250, steps, corrupt, debug=True) >= 1


def _reverse_first_segment(ptr, values, length=2):
    """`values` with the first segment of `ptr` holding `length` or more reversed."""
    values = values.copy()
    sizes = np.diff(ptr)
    x = int(np.flatnonzero((sizes >= length) & (np.array(
        [len(set(values[a:b].tolist())) > 1 for a, b in zip(ptr[:-1], ptr[1:])])))[0])
    values[ptr[x]:ptr[x + 1]] = values[ptr[x]:ptr[x + 1]][::-1]
    return values, x


@pytest.mark.parametrize("broken", ["fwd_time", "bwd_time", "st_tensors"])
def test_a_graph_out_of_the_order_walks_rely_on_is_caught_at_build(broken):
    from dtrforensics.engine.graph import GraphOrderError, check_order, kernel_graph
    program = (Log().const("w", 8).call("a", "f", ["w"], 1, 10).call("b", "g", ["w"], 1, 10)
               .call(["o", "v"], "h", ["w", "a"], 1, [10, 0], aliases=[-1, 0])
               .call(["q", "u"], "m", ["w", "b"], 1, [10, 0], aliases=[-1, 0])
               .call("c", "k", ["a", "b", "v", "u"], 1, 10).program())   # w's parents: a, b
    graph = kernel_graph(program)
    check_order(graph)
    ptr = graph.st_tensor_ptr if broken == "st_tensors" else getattr(graph, broken[:3] + "_ptr")
    values, storage = _reverse_first_segment(ptr, getattr(graph, broken))
    with pytest.raises(GraphOrderError, match=f"storage {storage}"):
        check_order(graph._replace(**{broken: values}))
