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


def _broken_one_by_one(rg) -> list[int]:
    """The sets `regions._check_set` finds broken, asked set by set."""
    broken = []
    for k in range(len(rg.cap)):
        frontier = k >= rg.n_regions
        try:
            regions._check_set(rg, k, frontier, k - rg.n_regions if frontier else k)
        except regions.RegionsBroken:
            broken.append(k)
    return broken


def test_the_pass_finds_the_sets_a_set_by_set_check_finds():
    """The pass looks at all sets at once; on random breaks (a count, a live
    count, a repeated entry, a stray bit) it finds exactly the sets that the
    per-set check finds, first one first."""
    program = mixed()
    state = replay(program, budget=int(0.5 * baseline(program).peak), keep_state=True).state
    rg, top = state.regions, int(state.sc[regions.S_ARENA_TOP])
    rng = np.random.default_rng(0)
    rows = rg.bit_slot[rg.bit_slot >= 0]
    found = set()
    for _ in range(32):
        field = ["len", "fr_live", "arena", "bits"][rng.integers(4)]
        broken = getattr(rg, field).copy()
        if field == "len":
            broken[rng.integers(len(broken))] += 1
        elif field == "fr_live":
            broken[rng.integers(len(broken))] -= 1
        elif field == "arena":
            k = rng.choice(np.flatnonzero(rg.len > 1))
            broken[rg.start[k] + rng.integers(1, rg.len[k])] = broken[rg.start[k]]
        else:
            broken[rng.choice(rows), rng.integers(broken.shape[1])] ^= np.uint64(1) << np.uint64(
                rng.integers(64))
        damaged = rg._replace(**{field: broken})
        try:
            regions._check_blocks(damaged, top)
        except regions.RegionsBroken:
            continue
        broken_sets = list(regions._broken_sets(damaged))
        assert broken_sets == _broken_one_by_one(damaged)
        if broken_sets:
            found.add(field)
    assert found == {"len", "fr_live", "arena", "bits"}
    assert list(regions._broken_sets(rg)) == _broken_one_by_one(rg) == []


def _spare_entry(rg) -> tuple[int, int]:
    """An indexed frontier (set k) and an entry i of its block that no live
    member needs: removed (its bit clear) or listed again later."""
    for k in np.flatnonzero((rg.bit_slot >= 0) & (rg.cap > 0)).tolist():
        block = rg.arena[rg.start[k]:rg.start[k] + rg.len[k]].tolist()
        row = np.unpackbits(rg.bits[rg.bit_slot[k]].view(np.uint8), bitorder="little")
        for i, x in enumerate(block):
            if not row[x] or x in block[i + 1:]:
                return k, i
    raise AssertionError("no indexed frontier with a removed or repeated entry")


def test_the_pass_names_a_negative_len_or_an_entry_that_is_no_storage(monkeypatch):
    """Damage the vectorized pass could not read is named, not a crash: a
    negative len, an entry outside the storages; and it counts bits alike
    without NumPy 2's bitwise_count."""
    program = mixed()
    state = replay(program, budget=int(0.5 * baseline(program).peak), keep_state=True).state
    rg, sc = state.regions, state.sc
    length = rg.len.copy()
    length[np.flatnonzero(rg.cap > 0)[0]] = -1
    with pytest.raises(regions.RegionsBroken, match="negative len"):
        regions.check(rg._replace(len=length), sc)
    k, i = _spare_entry(rg)
    arena = rg.arena.copy()
    arena[rg.start[k] + i] = -1
    with pytest.raises(regions.RegionsBroken, match=f"set {k} "):
        regions.check(rg._replace(arena=arena), sc)
    rows = rg.bits[rg.bit_slot[rg.bit_slot >= 0]]
    counted = regions._popcounts(rows)
    monkeypatch.delattr(np, "bitwise_count")
    assert list(regions._popcounts(rows)) == list(counted) and counted.sum() > 0
