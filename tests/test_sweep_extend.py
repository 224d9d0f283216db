"""Sweeps that stop for time and sweeps extended without starting again
(issue 27: a larger --max-runs, a wider range, more time; issue 28: the
deadline `reproduce --findings` stops its maps with)."""

from __future__ import annotations

import json

import pytest
from sweeps import table, write_logs

from dtrforensics.sweep import holes, runner, scheduler
from dtrforensics.sweep.store import ParamsMismatch, SweepParams, SweepStore


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    return write_logs(tmp_path_factory.mktemp("logs"))


class Clock(runner.SweepObserver):
    """A monotonic clock that advances one second per finished run, so a deadline
    falls after a known number of runs whatever the machine's speed."""

    def __init__(self):
        self.now = 0.0

    def finished(self, row):
        self.now += 1.0

    def __call__(self):
        return self.now


def test_a_deadline_stops_the_sweep_resumably(logs, tmp_path, monkeypatch):
    params = SweepParams(0.5, 0.9, exact=True)
    runner.run_sweep(logs["chain"], params, tmp_path / "ref", jobs=1)
    reference = table(tmp_path / "ref")
    clock = Clock()
    monkeypatch.setattr(scheduler.time, "monotonic", clock)
    stopped = runner.run_sweep(logs["chain"], params, tmp_path / "s", jobs=1, observer=clock,
                               deadline=5.0)
    monkeypatch.undo()
    assert stopped.stopped == "deadline"
    stored = len(table(tmp_path / "s"))
    assert 5 <= stored < len(reference) and stopped.ran == stored
    assert 0 < stopped.coverage["dtr"] < 1
    store = SweepStore(tmp_path / "s")
    assert store.status == "stopped" and store.read_doc()["runs"] == stored
    assert holes.analyze(tmp_path / "s").status == "stopped"
    done = runner.run_sweep(logs["chain"], params, tmp_path / "s", jobs=1)
    assert done.stopped is None and done.resumed and done.skipped == stored
    assert table(tmp_path / "s") == reference


def test_a_passed_deadline_runs_nothing_and_resumes(logs, tmp_path):
    params = SweepParams(0.5, 0.9, 0.1, exact=True)
    result = runner.run_sweep(logs["chain"], params, tmp_path / "s", jobs=2, deadline=0.0)
    assert result.stopped == "deadline" and result.ran == 0
    assert SweepStore(tmp_path / "s").status == "stopped"
    runner.run_sweep(logs["chain"], params, tmp_path / "s", jobs=2)
    runner.run_sweep(logs["chain"], params, tmp_path / "ref", jobs=2)
    assert table(tmp_path / "s") == table(tmp_path / "ref")


def test_a_larger_max_runs_extends_to_the_rows_of_one_sweep(logs, tmp_path):
    big = SweepParams(0.5, 0.9, exact=True, max_runs=40)
    runner.run_sweep(logs["chain"], big, tmp_path / "one", jobs=2)
    reference = table(tmp_path / "one")
    small = runner.run_sweep(logs["chain"], SweepParams(0.5, 0.9, exact=True, max_runs=13),
                             tmp_path / "ext", jobs=2)
    assert small.stages["exact"].ran == 13 and small.coverage["dtr"] < 1
    extended = runner.run_sweep(logs["chain"], big, tmp_path / "ext", jobs=1)
    assert extended.resumed and extended.stages["exact"].skipped == 13
    assert table(tmp_path / "ext") == reference
    assert SweepStore(tmp_path / "ext").params.max_runs == 40


def test_a_wider_range_extends_and_reruns_nothing_it_holds(logs, tmp_path):
    inner = SweepParams(0.6, 0.8, exact=True)
    runner.run_sweep(logs["chain"], inner, tmp_path / "s", jobs=1)
    held = {(r["budget"], r["rep"]) for r in table(tmp_path / "s")}
    wide = SweepParams(0.5, 0.9, exact=True)
    runner.run_sweep(logs["chain"], wide, tmp_path / "s", jobs=1)
    grown = {(r["budget"], r["rep"]) for r in table(tmp_path / "s")}
    assert held < grown
    doc = json.loads((tmp_path / "s" / "sweep.json").read_text())
    assert (doc["params"]["ratio_from"], doc["params"]["ratio_to"]) == (0.5, 0.9)
    runner.run_sweep(logs["chain"], wide, tmp_path / "fresh", jobs=1)
    a = holes.analyze(tmp_path / "s").policy("dtr").exact
    b = holes.analyze(tmp_path / "fresh").policy("dtr").exact
    assert a.coverage == b.coverage == 1.0
    assert [(m.lo, m.hi, m.outcome) for m in a.merged] == [(m.lo, m.hi, m.outcome) for m in b.merged]
    # no interval of the inner sweep was run a second time
    rows = SweepStore(tmp_path / "s").read_runs().to_pylist()
    intervals = [(r["interval_lo"], r["interval_hi"]) for r in rows if r["stage"] == "exact"]
    assert len(intervals) == len(set(intervals))


def test_a_narrower_range_or_another_identity_is_refused(logs, tmp_path):
    runner.run_sweep(logs["hole"], SweepParams(0.5, 0.9, exact=True), tmp_path / "s", jobs=1)
    with pytest.raises(ParamsMismatch, match="may only be widened"):
        runner.run_sweep(logs["hole"], SweepParams(0.6, 0.9, exact=True), tmp_path / "s", jobs=1)
    with pytest.raises(ParamsMismatch, match="timeout"):
        runner.run_sweep(logs["hole"], SweepParams(0.5, 0.9, exact=True, timeout=9.0),
                         tmp_path / "s", jobs=1)


def test_a_sampled_sweep_extends_to_an_exact_one(logs, tmp_path):
    grid = SweepParams(0.3, 1.0, 0.05)
    runner.run_sweep(logs["hole"], grid, tmp_path / "s", jobs=1)
    exact = SweepParams(0.3, 1.0, 0.05, exact=True)
    result = runner.run_sweep(logs["hole"], exact, tmp_path / "s", jobs=1)
    assert result.stages["grid"].skipped == 15 and result.stages["grid"].ran == 0
    runner.run_sweep(logs["hole"], exact, tmp_path / "ref", jobs=1)
    assert table(tmp_path / "s") == table(tmp_path / "ref")
    with pytest.raises(ParamsMismatch, match="exact"):
        runner.run_sweep(logs["hole"], grid, tmp_path / "s", jobs=1)
