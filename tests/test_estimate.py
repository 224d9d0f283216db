"""A sweep's cost estimated before it is spent (`sweep/estimate.py`).

The calibration is checked against partitions whose executions are known:
a planted partition answered by a fake backend (wide intervals, each with a
run of narrow ones below it) and the engine's own partition of a synthetic
trace, walked budget by budget.
"""

from __future__ import annotations

import concurrent.futures as cf

from cli import dtrf
from sweeps import hole_log, walk

from dtrforensics.sweep import estimate as E
from dtrforensics.sweep import grid
from dtrforensics.sweep.backends import InlineBackend
from dtrforensics.sweep.store import Point, SweepParams
from dtrforensics.trace import load_trace


class PartitionBackend:
    """Answers a point from a planted partition [(lo, hi)], every run `seconds` long."""

    capacity = 3

    def __init__(self, partition, seconds=1.0, cpu=None):
        self.partition, self.seconds, self.cpu, self.runs = partition, seconds, cpu, 0

    def submit(self, point, timeout, lane=0):
        self.runs += 1
        lo, hi = next((a, b) for a, b in self.partition if a <= point.budget <= b)
        fut = cf.Future()
        fut.set_result({"interval_lo": lo, "interval_hi": hi, "wall_seconds": self.seconds,
                        "cpu_seconds": self.cpu})
        return fut

    def wait(self, futures, timeout):
        return list(futures)


class Prog:
    name = "planted"


def planted(units: int, wide: int, narrow: int, start: int = 0):
    """`units` times: `narrow` one-byte intervals, then a wide one above them."""
    out, b = [], start
    for _ in range(units):
        for _ in range(narrow):
            out.append((b, b))
            b += 1
        out.append((b, b + wide - 1))
        b += wide
    return out


def test_narrow_runs_below_wide_intervals_are_counted():
    part = planted(units=40, wide=5000, narrow=7)            # 320 executions, 8 per unit
    rng = (part[0][0], part[-1][1])
    params = SweepParams(0.0, 1.0, exact=True, max_runs=100_000)
    backend = PartitionBackend(part, seconds=0.5)
    est = E.calibrate(backend, Prog(), params, peak=rng[1] + 1, rng=rng, per_policy=8)
    assert abs(est.executions - len(part)) / len(part) < 0.01
    assert abs(est.cpu_seconds - 0.5 * len(part)) / (0.5 * len(part)) < 0.01
    assert est.sample_runs == backend.runs < len(part) / 4     # a sample, not the map
    assert est.samples == 8
    # uniform budgets alone would count the wide intervals only
    alone = E.from_samples("planted", params, rng[1] + 1, rng,
                           [E.Sample(s.policy, s.budget, s.weight, s.width, s.seconds)
                            for s in _samples(part, params, rng)], workers=1)
    assert alone.executions < len(part) / 4


def test_the_estimate_is_of_cpu_time_not_wall_time():
    """Runs that waited for a core (wall 1 s, CPU 0.25 s) cost their CPU time."""
    part = planted(units=40, wide=5000, narrow=7)
    rng = (part[0][0], part[-1][1])
    params = SweepParams(0.0, 1.0, exact=True, max_runs=100_000)
    est = E.calibrate(PartitionBackend(part, seconds=1.0, cpu=0.25), Prog(), params,
                      peak=rng[1] + 1, rng=rng, per_policy=8)
    assert abs(est.cpu_seconds - 0.25 * len(part)) / (0.25 * len(part)) < 0.01


class CacheBackend(PartitionBackend):
    """A run costs 1 s when the interval next to it ran among the last `keep`
    runs (its snapshots are still in the process's cache), else 5 s."""

    def __init__(self, partition, keep=8):
        super().__init__(partition)
        self.keep, self.recent = keep, []

    def submit(self, point, timeout, lane=0):
        fut = super().submit(point, timeout, lane)
        row = fut.result()
        i = self.partition.index((row["interval_lo"], row["interval_hi"]))
        near = {i - 1, i + 1} & set(self.recent[-self.keep:])
        row["cpu_seconds"] = 1.0 if near else 5.0
        self.recent.append(i)
        return fut


def test_walk_runs_cost_what_the_maps_runs_cost():
    """The map walks down, each run resuming from the one just above it (1 s
    each here); the calibration's walk runs must resume as theirs do, not from
    states its other strata pushed out of the cache."""
    part = planted(units=40, wide=5000, narrow=7)
    rng = (part[0][0], part[-1][1])
    params = SweepParams(0.0, 1.0, exact=True, max_runs=100_000)
    est = E.calibrate(CacheBackend(part), Prog(), params, peak=rng[1] + 1, rng=rng,
                      per_policy=16)
    assert abs(est.executions - len(part)) / len(part) < 0.05
    assert est.cpu_seconds / len(part) < 1.25


def test_a_wave_of_slow_walks_gets_its_share_of_runs(monkeypatch):
    """Strata 2 and 6 of 8 (walked together, the second pair started) run 20 s a
    run, the others 1 s (a fake clock). A fixed share of the time per walk gives
    each of theirs 800 s / 4 pairs / 40 s a round = 5 runs, and they then stand
    for their units at the cost of their first few runs; their share of the
    runs that fit is more than twice that."""
    part = planted(units=40, wide=5000, narrow=40)
    rng = (part[0][0], part[-1][1])
    now = [0.0]

    class Clock(PartitionBackend):
        capacity = 1

        def submit(self, point, timeout, lane=0):
            stratum = point.budget * 8 // (rng[1] + 1)
            now[0] += 20.0 if stratum in (2, 6) else 1.0
            return super().submit(point, timeout, lane)

    monkeypatch.setattr(E.time, "perf_counter", lambda: now[0])
    params = SweepParams(0.0, 1.0, exact=True, max_runs=100_000)
    source = E.Calibration(params, rng[1] + 1, rng, 8, seconds=800.0)
    from dtrforensics.sweep.scheduler import Scheduler, SweepObserver
    Scheduler(None, [], SweepObserver(), None).run(Clock(part), "calibrate", source, keep=False)
    walks = [c.narrow for c in source.chains]
    assert all(not c.first for c in source.chains) and source.cut
    assert walks[2] >= 10 and walks[6] >= 10, walks
    assert now[0] <= 800.0 + 2 * 20.0                   # within its time, but for a round


def _samples(part, params, rng):
    chains = [E._Chain(p, b, w) for p, b, w in E.plan_samples(params, rng, 8)]
    backend = PartitionBackend(part)
    for c in chains:
        c.absorb(backend.submit(Point(c.policy, c.budget, 0, 0.0, "exact"), None).result(),
                 rng, walk=False)
    return [c.sample() for c in chains]


def test_the_run_limit_caps_runs_not_executions():
    part = planted(units=40, wide=5000, narrow=7)
    rng = (part[0][0], part[-1][1])
    params = SweepParams(0.0, 1.0, exact=True, max_runs=100)
    est = E.calibrate(PartitionBackend(part), Prog(), params, peak=rng[1] + 1, rng=rng)
    assert est.capped and est.runs == 100 and est.executions > 300
    assert abs(est.cpu_seconds - 100) < 1e-6


def test_one_stratum_per_byte_counts_the_engines_executions_exactly(tmp_path):
    path = tmp_path / "hole.log"
    path.write_text(hole_log().text())
    program = load_trace(str(path))
    params = SweepParams(0.5, 1.0, exact=True, max_runs=100_000)
    peak = 536
    rng = grid.range_bytes(params, peak)
    truth = [(lo, hi) for lo, hi, _ in walk(program) if hi is None or hi >= rng[0]]
    truth = [(lo, hi) for lo, hi in truth if lo <= rng[1]]
    est = E.calibrate(InlineBackend(program, params.thrash_factor), program, params, peak, rng,
                      per_policy=rng[1] - rng[0] + 1)
    assert E.wide(rng) == 1                 # a narrow range: every interval is wide
    assert round(est.executions, 9) == len(truth)


def test_a_grid_is_counted_and_timed_by_the_sample_mean():
    params = SweepParams(0.1, 0.9, 0.1, interior=2, policies=("dtr", "lru"))
    samples = [E.Sample("dtr", 10, 1, 5, 2.0), E.Sample("dtr", 20, 1, 5, 4.0),
               E.Sample("lru", 10, 1, 5, 1.0)]
    est = E.from_samples("t", params, 1000, (100, 900), samples, workers=4)
    points = len(grid.plan_grid(params, 1000)) + len(grid.plan_interior(params, 1000))
    assert est.executions == est.runs == points
    assert est.cpu_seconds == points / 2 * 3.0 + points / 2 * 1.0
    assert est.wall_seconds(2) == est.cpu_seconds / 2 and est.wall_seconds() == est.cpu_seconds / 4


def test_the_walk_uses_at_most_its_round_of_workers():
    params = SweepParams(0.1, 0.9, exact=True)
    est = E.from_samples("t", params, 1000, (100, 900), [E.Sample("dtr", 500, 801, 801, 8.0)],
                         workers=64)
    assert est.executions == 1 and est.cpu_seconds == 8.0
    assert est.wall_seconds() == 8.0 / E.WALK_ROUND


def test_sweep_estimate_stores_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "hole.log"
    path.write_text(hole_log().text())
    est = dtrf("sweep", path, "--from", "0.5", "--to", "1.0", "--exact",
               "--jobs", "1", "--estimate", "--json").json()
    assert est["executions"] >= 1 and est["cpu_seconds"] > 0 and est["sample_runs"] >= 1
    assert not (tmp_path / "recordings").exists()
    out = dtrf("sweep", path, "--from", "0.5", "--to", "1.0", "--exact",
               "--jobs", "1", "--estimate").ok()
    assert out.startswith("estimate: about ")


def test_an_estimate_keeps_to_max_seconds(tmp_path):
    """`--estimate --max-seconds` stops calibrating then (it ran its whole
    calibration, 6 min on LSTM with --max-seconds 2); with no run finished
    there is nothing to estimate from: one error line."""
    path = tmp_path / "hole.log"
    path.write_text(hole_log().text())
    args = ("sweep", path, "--from", "0.5", "--to", "1.0", "--exact", "--jobs", "1",
            "--estimate")
    stopped = dtrf(*args, "--max-seconds", "1e-9")
    assert stopped.code == 2 and not stopped.out and stopped.traceback is None
    assert stopped.error_lines == [
        "error: no calibration run finished within --max-seconds: nothing to estimate "
        "from (give it more time)"]
    assert dtrf(*args, "--max-seconds", "600").ok().startswith("estimate: about ")


def test_a_long_sweep_says_its_estimate_first(tmp_path, monkeypatch):
    path = tmp_path / "hole.log"
    path.write_text(hole_log().text())
    args = ("sweep", path, "--from", "0.5", "--to", "1.0", "--exact", "--jobs", "1",
            "--no-progress")
    short = dtrf(*args, "--out", tmp_path / "a")
    assert short.code == 0 and "estimate:" not in short.err          # short: nothing to say
    monkeypatch.setattr(E, "LONG_SECONDS", 0.0)
    long = dtrf(*args, "--out", tmp_path / "b")
    assert long.code == 0, long.err
    err = long.err
    assert "estimate: about " in err and err.index("estimate:") < err.index("runs in")


def test_the_sweeps_own_wall_time_is_at_the_parallelism_its_calibration_achieved():
    params = SweepParams(0.1, 0.9, 0.1)
    samples = [E.Sample("dtr", 10, 1, 5, 2.0)]
    est = E.from_samples("t", params, 1000, (100, 900), samples, workers=4, parallelism=1.5)
    assert est.wall_seconds() == est.cpu_seconds / 1.5      # four workers sharing 1.5 cores
    assert est.wall_seconds(4) == est.cpu_seconds / 4       # four with a core each


def test_a_worker_that_got_half_a_core_takes_twice_its_cpu_time():
    params = SweepParams(0.1, 0.9, 0.1)
    samples = [E.Sample("dtr", 10, 1, 5, 2.0)]
    est = E.from_samples("t", params, 1000, (100, 900), samples, workers=1, parallelism=0.5)
    assert est.wall_seconds() == est.cpu_seconds / 0.5      # one worker at low priority
    assert est.wall_seconds(1) == est.cpu_seconds           # one with a core of its own


def test_a_findings_map_hears_its_estimate_before_it_runs(tmp_path):
    from dtrforensics.reproduce.findings import plan as P
    from dtrforensics.reproduce.findings import run as RUN
    spec = P.MapSpec("hole", "dtr", 0.90, 0.93, "public")
    heard, shares = [], []
    import time
    RUN._run_until(load_trace("hole"), spec, None, tmp_path / "m", time.monotonic() + 600, jobs=1,
                   report=shares.append, on_estimate=heard.append)
    assert len(heard) == 1 and heard[0].exact and heard[0].executions >= 1
    assert shares and shares[-1] == 1.0                  # then the map ran to its end


def test_a_resumed_sweep_with_a_short_deadline_makes_progress(tmp_path, monkeypatch):
    """The calibration keeps to the sweep's deadline and runs for a new sweep
    only: every call of a sweep stopped by its deadline stores more runs."""
    import time

    from sweeps import chain_log

    from dtrforensics.sweep import backends, runner
    path = tmp_path / "chain.log"
    path.write_text(chain_log().text())
    slow = backends.run_point

    def run_point(*args):           # every run takes a while: calibrating is not cheap
        time.sleep(0.1)
        return slow(*args)

    monkeypatch.setattr(backends, "run_point", run_point)
    heard = []

    class Hear(runner.SweepObserver):
        def estimated(self, estimate):
            heard.append(estimate)

    params = SweepParams(0.3, 1.0, exact=True)
    stored = []
    for _ in range(3):
        result = runner.run_sweep(str(path), params, tmp_path / "s", jobs=1, observer=Hear(),
                                  deadline=time.monotonic() + 1.0, estimate_samples=8)
        assert result.stopped == "deadline"
        stored.append(len(runner.SweepStore(tmp_path / "s").read_runs()))
    assert 0 < stored[0] < stored[1] < stored[2]
    assert len(heard) == 1 and heard[0].cut      # the first call's, cut short for time


def test_the_estimate_line_wraps_and_says_no_zero_and_no_exponent():
    from dtrforensics.render.sweep import duration, estimate_line
    tiny = E.Estimate("t", True, 1, 8, 9, 0.01, 3.0, 3.0, False, 0, 0.004, 0.004, 2)
    huge = E.Estimate("t", True, 2, 32, 900, 338.0, 526_000.0, 4000.0, True, 8,
                      4171 * 3600.0, 4171 * 3600.0, 64, 1.5)
    for est in (tiny, huge):
        text = estimate_line(est, workers=(1, 4), prefix="lstm dtr 0.25-0.28: ")
        lines = text.splitlines()
        assert len(lines) > 1 and all(len(line) <= 80 for line in lines)
        assert lines[0].startswith("lstm dtr 0.25-0.28: estimate: about ")
        assert "e+" not in text and "e-" not in text
        assert " 0 s" not in text and "0.0 s" not in text
    assert "4,171 CPU-hours" in estimate_line(huge)
    assert duration(0.004) == "under 0.1 s" and duration(0.3) == "0.3 s"
    assert duration(0) == "0 s"


def test_a_budget_landing_in_a_narrow_interval_walks_and_counts_its_unit(monkeypatch):
    """Up to the wide interval above it, then down below it: the whole unit, landed
    in with the probability of its span, not of its wide interval alone."""
    part = planted(units=1, wide=5000, narrow=7)             # 0..6 narrow, 7..5006 wide
    rng = (0, 5006)
    params = SweepParams(0.0, 1.0, exact=True, max_runs=100_000)
    monkeypatch.setattr(E, "plan_samples", lambda *a, **k: [("dtr", 3, 5007)])
    backend = PartitionBackend(part)
    est = E.calibrate(backend, Prog(), params, peak=5007, rng=rng, per_policy=1)
    assert est.executions == len(part) == 8 and backend.runs == 8


def test_intervals_just_wider_than_wide_do_not_swing_the_count():
    """Wide intervals of very different widths (as LSTM's near its limit), with
    narrow ones below some: most seeds' counts are within 2x."""
    part, b = [], 0
    for i in range(12):
        for width in ((1_000_000, 20_400, 95_200, 20_400) if i % 2 else (700_000, 20_400)):
            part.append((b, b + width - 1))
            b += width
    rng = (0, b - 1)
    params = SweepParams(0.0, 1.0, exact=True, max_runs=100_000)
    within = 0
    for seed in range(40):
        est = E.calibrate(PartitionBackend(part), Prog(), params, peak=b, rng=rng,
                          per_policy=16, seed=seed)
        within += 0.5 <= est.executions / len(part) <= 2
    assert within >= 36
