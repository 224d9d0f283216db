"""A finished run's state is recycled for the next run of its shape
(`MachineState.recycle`): the next run starts from what a fresh state holds,
and the contents left uncleared (arena, untaken bitset rows, walk rows past
the first MASK_BASES) are never read before written, so garbage there
changes nothing."""

from __future__ import annotations

import numpy as np
import pytest
from public import program_or_skip
from test_prefixes import everything, synthetic_resnet

from dtrforensics.engine import layout as L
from dtrforensics.engine import state as S
from dtrforensics.engine.baseline import baseline
from dtrforensics.engine.replay import prepared, replay

UNCLEARED = S.UNREAD_BEFORE_WRITTEN


def _fresh(program, budget):
    S._SPARES.clear()
    return everything(replay(program, budget=budget))


def _poison_spares(seed: int) -> int:
    """Fill every spare's uncleared contents with garbage; how many spares."""
    rng = np.random.default_rng(seed)
    for state in S._SPARES.values():
        for name in UNCLEARED:
            a = getattr(state.regions, name)
            if name in ("memo_int", "memo_fr"):       # all but the first MASK_BASES rows
                a = a[L.MASK_BASES:]
            a[...] = (rng.integers(0, 2**63, a.shape, dtype=np.uint64) if a.dtype.kind == "u"
                      else rng.integers(-2**40, 2**40, a.shape))
    return len(S._SPARES)


def test_a_recycled_state_is_cleared_to_a_fresh_one():
    program = synthetic_resnet()
    graph, base = prepared(program)
    budget = int(0.4 * base.peak)
    S._SPARES.clear()
    fresh = S.MachineState.new(graph, budget, 10**9)
    replay(program, budget=int(0.3 * base.peak))      # leaves its state, dirty, as a spare
    (spare,) = S._SPARES.values()
    assert spare.regions.len.any() or spare.st.any()
    recycled = S.MachineState.new(graph, budget, 10**9)
    assert recycled is spare and not S._SPARES
    for name in ("sc", "st", "frames", "pending", "scratch", "mark", "stream"):
        assert np.array_equal(getattr(recycled, name), getattr(fresh, name)), name
    for name, value in recycled.regions._asdict().items():
        if name in UNCLEARED:
            continue
        assert np.array_equal(value, getattr(fresh.regions, name)), name
    for name in ("memo_int", "memo_fr"):
        assert not getattr(recycled.regions, name)[:L.MASK_BASES].any(), name


@pytest.mark.parametrize("policy", ["dtr", "lru", "dtr-exact-nbhd"])
def test_garbage_left_in_a_spare_changes_no_run(policy):
    program = synthetic_resnet()
    peak = baseline(program).peak
    for seed, ratio in enumerate((0.25, 0.4, 0.7, 1.0)):
        budget = int(ratio * peak)
        S._SPARES.clear()
        expected = everything(replay(program, budget=budget, policy=policy))
        assert _poison_spares(seed) == 1
        assert everything(replay(program, budget=budget, policy=policy)) == expected


@pytest.mark.parametrize("trace, ratio", [("resnet32", 0.104), ("lstm", 0.265),
                                          ("unroll_gan", 1.0)])
def test_garbage_left_in_a_spare_changes_no_public_run(trace, ratio):
    """Traces whose rebuilds take memo rows (ResNet-32), masked walks (LSTM) and
    many absorbs of dead frees (Unrolled GAN)."""
    program = program_or_skip(trace)
    budget = int(ratio * baseline(program).peak)
    expected = _fresh(program, budget)
    assert _poison_spares(1) == 1
    assert everything(replay(program, budget=budget)) == expected


def test_a_kept_state_is_not_recycled():
    program = synthetic_resnet()
    peak = baseline(program).peak
    S._SPARES.clear()
    kept = replay(program, budget=int(0.3 * peak), keep_state=True)
    assert not S._SPARES
    before = kept.state.st.copy()
    replay(program, budget=int(0.5 * peak))
    assert np.array_equal(kept.state.st, before)


def test_an_arena_size_asked_for_is_given_even_with_a_spare():
    program = synthetic_resnet()
    graph, base = prepared(program)
    S._SPARES.clear()
    replay(program, budget=int(0.3 * base.peak))
    (spare,) = S._SPARES.values()
    tiny = S.MachineState.new(graph, base.peak, 10**9, arena_size=16)
    assert len(tiny.regions.arena) == 16 and tiny is not spare
    assert S.MachineState.new(graph, base.peak, 10**9) is spare
