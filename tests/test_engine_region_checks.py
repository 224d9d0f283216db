"""The neighbourhoods' debug pass (engine/regions.py `check`): on over a few
traces it finds nothing and changes nothing, and it catches a broken set."""

from __future__ import annotations

import numpy as np
import pytest
from test_prefixes import everything, synthetic_resnet

from dtrforensics.engine import regions
from dtrforensics.engine.baseline import baseline
from dtrforensics.engine.layout import CHECK_REGIONS_ENV
from dtrforensics.engine.replay import replay
from dtrforensics.synth.generator import SynthSpec, generate
from dtrforensics.trace import load_trace, parse_lines


def mixed():
    spec = SynthSpec(kind="mixed", depth=24, width=2, view_prob=0.5, seed=1)
    return parse_lines(generate(spec).splitlines(), name="mixed-1")


def programs():
    yield synthetic_resnet()
    yield mixed()      # views; sets in all three forms
    yield load_trace("hole-rnn-seed16")


@pytest.mark.parametrize("program", list(programs()), ids=lambda p: p.name)
def test_checked_runs_find_nothing_and_equal_unchecked_ones(program, monkeypatch):
    peak = baseline(program).peak
    budgets = [int(r * peak) for r in (0.25, 0.5, 0.8)]
    plain = [everything(replay(program, budget=b)) for b in budgets]
    monkeypatch.setenv(CHECK_REGIONS_ENV, "1")
    checked = [everything(replay(program, budget=b)) for b in budgets]
    tiny = [everything(replay(program, budget=b, arena_size=64)) for b in budgets]
    assert checked == plain == tiny


def test_the_pass_catches_broken_sets():
    program = mixed()
    state = replay(program, budget=int(0.5 * baseline(program).peak), keep_state=True).state
    rg, sc = state.regions, state.sc
    regions.check(rg, sc)
    alone = np.flatnonzero((rg.bit_slot >= 0) & (rg.cap == 0))
    indexed = np.flatnonzero((rg.bit_slot >= 0) & (rg.cap > 0))
    listed = np.flatnonzero((rg.bit_slot < 0) & (rg.len > 1))
    assert len(alone) and len(indexed) and len(listed)
    broken = rg.len.copy()
    broken[alone[0]] += 1
    with pytest.raises(AssertionError, match="len"):
        regions.check(rg._replace(len=broken), sc)
    k = listed[0]
    arena = rg.arena.copy()
    arena[rg.start[k] + 1] = arena[rg.start[k]]
    with pytest.raises(AssertionError, match="twice"):
        regions.check(rg._replace(arena=arena), sc)
    live = rg.fr_live.copy()
    live[indexed[0] - rg.n_regions] += 1
    with pytest.raises(AssertionError, match="fr_live"):
        regions.check(rg._replace(fr_live=live), sc)
    slots = rg.bit_slot.copy()
    slots[listed[0]] = slots[alone[0]]
    with pytest.raises(AssertionError, match="two sets"):
        regions.check(rg._replace(bit_slot=slots), sc)
