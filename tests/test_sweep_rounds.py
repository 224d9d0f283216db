"""The exact walk probes the same budgets whatever the timing, the number of
workers or an interruption (issue 13 item 9)."""

from __future__ import annotations

import random

import pytest
from sweeps import Crash, CrashAfter, FakeAxis, chain_log, keys, table

from dtrforensics.sweep import runner
from dtrforensics.sweep.exact import ExactWalk, WalkRounds
from dtrforensics.sweep.store import SweepParams


def probes(finish_order_seed: int, stored: dict | None = None) -> tuple[list[int], WalkRounds]:
    """Drive WalkRounds over FakeAxis, finishing in-flight points in a seeded
    random order, with up to 3 in flight; the budgets actually run."""
    axis = FakeAxis()
    rng = random.Random(finish_order_seed)
    source = WalkRounds({"dtr": ExactWalk(10, 900, max_runs=10_000)}, 1000, stored or {})
    ran, inflight = [], []
    while True:
        inflight += source.take(3 - len(inflight))
        if not inflight:
            return ran, source
        point = inflight.pop(rng.randrange(len(inflight)))
        ran.append(point.budget)
        lo, hi = axis.run(point.budget)
        source.absorb(point, {"status": "ok", "interval_lo": lo, "interval_hi": hi})


def test_rounds_probe_the_same_budgets_in_any_finishing_order():
    first, source = probes(0)
    assert source.walks["dtr"].coverage() == 1.0
    for seed in (1, 2, 3):
        assert sorted(probes(seed)[0]) == sorted(first)


def test_rounds_take_stored_runs_instead_of_running_them():
    full, _ = probes(0)
    axis = FakeAxis()
    stored = {}
    for b in full[:len(full) // 2]:
        lo, hi = axis.run(b)
        stored[("dtr", b)] = {"status": "ok", "interval_lo": lo, "interval_hi": hi}
    rest, source = probes(5, stored)
    assert not set(rest) & {b for _, b in stored}
    assert sorted(rest + [b for _, b in stored]) == sorted(full)
    assert source.walks["dtr"].coverage() == 1.0


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    path = tmp_path_factory.mktemp("logs") / "chain.log"
    path.write_text(chain_log().text())
    return str(path)


def test_exact_sweeps_are_row_for_row_identical_across_jobs_repeats_and_resumes(chain, tmp_path):
    params = SweepParams(0.5, 0.9, exact=True)
    runner.run_sweep(chain, params, tmp_path / "a", jobs=2)
    reference = table(tmp_path / "a")
    runner.run_sweep(chain, params, tmp_path / "b", jobs=2)
    assert table(tmp_path / "b") == reference
    runner.run_sweep(chain, params, tmp_path / "c", jobs=1)
    assert table(tmp_path / "c") == reference
    with pytest.raises(Crash):
        runner.run_sweep(chain, params, tmp_path / "d", jobs=2, observer=CrashAfter(7),
                         flush_rows=3)
    assert 0 < len(keys(tmp_path / "d")) < len(reference)
    resumed = runner.run_sweep(chain, params, tmp_path / "d", jobs=2)
    assert resumed.resumed and resumed.stages["exact"].skipped > 0
    assert table(tmp_path / "d") == reference
