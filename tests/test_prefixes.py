"""Runs resumed from another run's snapshot equal runs from op 0, and the oracle."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from logs import random_logs
from oracle import POLICIES
from oracle import run as oracle_run
from public import program_or_skip

from dtrforensics.engine.baseline import baseline
from dtrforensics.engine.prefixes import PrefixCache
from dtrforensics.engine.replay import replay
from dtrforensics.engine.state import MachineState
from dtrforensics.recorder.record import record_run
from dtrforensics.synth.generator import SynthSpec, generate
from dtrforensics.trace import load_trace, parse_lines


def everything(result) -> tuple:
    """All a run reports, but its wall time."""
    summary = dataclasses.asdict(result.summary)
    summary.pop("wall_seconds")
    frontier = None
    if result.frontier is not None:
        frontier = [dataclasses.asdict(level) for level in result.frontier.levels]
    return summary, result.stream.tolist(), frontier


def walk_budgets(first: int, interval: tuple[int, int | None], extra: list[int]) -> list[int]:
    """Neighbours of the first run's interval on both sides, then other budgets."""
    lo, hi = interval
    out = [] if hi is None else [hi + 1, hi + 2]
    out += [lo - 1] if lo > 0 else []
    return out + extra


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=random_logs(), fractions=st.lists(st.floats(0.05, 1.1), min_size=2, max_size=4),
       policy=st.sampled_from(POLICIES), thrash=st.sampled_from((60.0, 1.5)))
def test_resumed_runs_equal_runs_from_scratch_and_the_oracle(program, fractions, policy, thrash):
    peak = baseline(program).peak
    budgets = [int(f * peak) for f in fractions]
    cache = PrefixCache(first_spacing=1, per_run=64, checkpoint_every=2)
    first = replay(program, budget=budgets[0], policy=policy, thrash_factor=thrash,
                   prefixes=cache)
    assert everything(first) == everything(
        replay(program, budget=budgets[0], policy=policy, thrash_factor=thrash))
    for budget in walk_budgets(budgets[0], first.summary.budget_interval, budgets[1:]):
        got = replay(program, budget=budget, policy=policy, thrash_factor=thrash, prefixes=cache)
        want = replay(program, budget=budget, policy=policy, thrash_factor=thrash)
        assert everything(got) == everything(want)
        model = int(program.op_cost.sum())
        oracle = oracle_run(program, budget, policy, remat_limit=int((thrash - 1.0) * model))
        assert [tuple(v) for v in got.victims.tolist()] == [tuple(v) for v in oracle.victims]
        assert (got.summary.outcome, got.summary.clock) == (oracle.outcome, oracle.clock)
        assert list(got.summary.budget_interval) == list(oracle.budget_interval)
    event(f"resumed: {cache.stats.resumed > 0}, spliced: {cache.stats.spliced > 0}")


def synthetic_resnet():
    text = generate(SynthSpec(kind="resnet", seed=2))
    return parse_lines(text.splitlines(keepends=True), "<synth>", "synth-resnet-2")


def test_a_walk_resumes_splices_and_changes_nothing():
    program = synthetic_resnet()
    peak = baseline(program).peak
    cache = PrefixCache(first_spacing=4)
    budget = int(0.3 * peak)
    for _ in range(12):
        got = replay(program, budget=budget, prefixes=cache)
        assert everything(got) == everything(replay(program, budget=budget))
        budget = got.summary.budget_interval[1] + 1
    assert cache.stats.resumed >= 6 and cache.stats.spliced >= 3
    assert cache.stats.steps_skipped > 0 and cache.stats.steps_spliced > 0
    assert 0 < cache.nbytes <= cache.max_bytes


def filtering_policy(tmp_path, min_size: int) -> str:
    path = tmp_path / "filtering.py"
    path.write_text("from dtrforensics.policy import policy, ratio\n\n\n"
                    f"@policy(min_size={min_size})\n"
                    "def p(compute, size, staleness):\n"
                    "    return ratio(compute, size, staleness)\n")
    return f"{path}:p"


def test_a_walk_under_a_filtering_policy_splices_and_changes_nothing(tmp_path):
    """A spliced run's scalars that are decision indices (S_NO_CANDIDATE) are its
    own, shifted from its donor's: a run that meets its donor after one more
    pressure eviction (the donor freed that storage dead later) says the decision
    at which the filters left no candidate as a fresh run does."""
    program = parse_lines(generate(SynthSpec(kind="chain", seed=1)).splitlines(keepends=True),
                          "<synth>", "synth-chain-1")
    peak = baseline(program).peak
    spec = filtering_policy(tmp_path, 512)   # ignores storages under 512 bytes
    cache = PrefixCache()
    budget, notes = int(0.3 * peak), 0
    for _ in range(60):
        got = replay(program, budget=budget, policy=spec, prefixes=cache)
        assert everything(got) == everything(replay(program, budget=budget, policy=spec))
        notes += got.summary.note is not None
        budget = got.summary.budget_interval[1] + 1
    assert cache.stats.spliced >= 10 and notes >= 10


@pytest.mark.public
def test_a_walk_on_unet_under_a_policy_ignoring_storages_under_1_mib(tmp_path):
    """The walk where a spliced run said "no candidate at decision 137" where a
    fresh run says 136 (the run at 3,334,945,940 B)."""
    program = program_or_skip("unet")
    spec = filtering_policy(tmp_path, 1 << 20)
    cache = PrefixCache()
    budget, notes = 3_320_000_000, 0
    for _ in range(30):
        got = replay(program, budget=budget, policy=spec, prefixes=cache)
        assert everything(got) == everything(replay(program, budget=budget, policy=spec))
        notes += got.summary.note is not None
        budget = got.summary.budget_interval[1] + 1
    assert cache.stats.spliced >= 10 and notes >= 10


def test_the_cache_stays_within_its_byte_bound():
    program = load_trace("hole-rnn-seed16")
    peak = baseline(program).peak
    probe = PrefixCache(first_spacing=2)
    replay(program, budget=int(0.2 * peak), prefixes=probe)
    small = PrefixCache(max_bytes=3 * probe.nbytes // len(probe), first_spacing=2)
    for ratio in np.linspace(0.2, 0.9, 8):
        replay(program, budget=int(ratio * peak), prefixes=small)
        assert small.nbytes <= small.max_bytes
    assert small.stats.snapshots_taken > len(small)


def test_observed_runs_neither_resume_nor_leave_snapshots(tmp_path):
    program = load_trace("hole-rnn-seed16")
    budget = int(0.3 * baseline(program).peak)
    cache = PrefixCache(first_spacing=4)
    replay(program, budget=budget, prefixes=cache)
    taken = cache.stats.snapshots_taken
    assert taken > 0
    result, _ = record_run(program, budget=budget + 1, out_dir=tmp_path / "rec")
    assert cache.stats.snapshots_taken == taken
    plain = replay(program, budget=budget + 1)
    assert everything(result)[1:] == everything(plain)[1:]


def test_a_snapshot_refuses_a_budget_its_prefix_does_not_admit():
    program = load_trace("hole-rnn-seed16")
    budget = int(0.3 * baseline(program).peak)
    cache = PrefixCache(first_spacing=4)
    replay(program, budget=budget, prefixes=cache)
    snap = max((s for fam in cache._families.values() for s in fam), key=lambda s: s.steps)
    outside = snap.lo - 1 if snap.lo > 0 else snap.hi + 1
    with pytest.raises(ValueError, match="outside the snapshot"):
        MachineState.resume(snap, outside)
