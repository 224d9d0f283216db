"""Budget sweeps on synthetic traces with a feasibility hole planted in them.

`hole_log(pad)` is a 14-op log found by searching random small logs with the
engine; under DTR its budget axis is (bytes, pad = 0):

    0..391 OOM | 392..423 ok | 424..439 OOM (the hole) | 440.. ok      peak 536

A constant of `pad` bytes that no op reads is resident all along: it shifts
every budget above by `pad` and changes nothing else, so with pad = 6665 (peak
7201) the whole ok band and the hole sit between the 0.98 and 0.99 grid points.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from cli import dtrf, dtrf_process
from rich.console import Console
from sweeps import (
    Crash,
    CrashAfter,
    FakeAxis,
    chain_log,
    hole_log,
    keys,
    table,
    walk,
    write_logs,
)

from dtrforensics.engine.replay import replay
from dtrforensics.render.sweep import holes_view
from dtrforensics.sweep import backends, grid, holes, runner
from dtrforensics.sweep.exact import ExactWalk
from dtrforensics.sweep.store import ParamsMismatch, SweepParams, SweepStore


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    return write_logs(tmp_path_factory.mktemp("logs"), padded=True)


# --- the planted structure -------------------------------------------------------------

def test_the_hole_is_planted():
    merged = []
    for lo, hi, outcome in walk(hole_log().program()):
        if merged and merged[-1][2] == outcome:
            merged[-1][1] = hi
        else:
            merged.append([lo, hi, outcome])
    assert merged == [[0, 391, "oom"], [392, 423, "ok"], [424, 439, "oom"], [440, None, "ok"]]
    padded = walk(hole_log(6665).program(), 6665 + 392)
    assert padded[:3] == [(7057, 7088, "ok"), (7089, 7104, "oom"), (7105, 7120, "ok")]


# --- sampling ---------------------------------------------------------------------------

def test_grid_maps_the_hole(logs, tmp_path):
    result = runner.run_sweep(logs["hole"], SweepParams(0.3, 1.0, 0.01), tmp_path / "s", jobs=1)
    assert result.ran == 71 and not result.resumed
    rep = holes.analyze(tmp_path / "s").policy("dtr")
    # 0.73 -> 391 B fails, 0.74 -> 396 B completes; 0.80..0.82 -> 428..439 B fail
    assert (rep.first_success.sample.ratio, rep.first_success.sample.budget) == (0.74, 396)
    assert rep.first_success.failing_below == 44
    assert [[r.lo.ratio, r.hi.ratio] for r in rep.failure_regions] == [[0.8, 0.82]]
    region = rep.failure_regions[0]
    assert (region.below.ratio, region.above.ratio) == (0.79, 0.83)
    assert [(e.direction, e.ok.ratio, e.fail.ratio) for e in rep.edge_brackets] == [
        ("fail->ok", 0.74, 0.73), ("ok->fail", 0.79, 0.8), ("fail->ok", 0.83, 0.82)]
    assert rep.unresolved == [] and rep.exact is None
    out = holes.analyze(tmp_path / "s").to_json()["policies"]["dtr"]
    assert out["failure_regions"] == [[0.8, 0.82]] and out["first_sampled_success"]["ratio"] == 0.74


def test_refinement_finds_a_hole_the_grid_misses(logs, tmp_path):
    plain = SweepParams(0.9, 1.0, 0.01)
    runner.run_sweep(logs["padded"], plain, tmp_path / "grid", jobs=1)
    rep = holes.analyze(tmp_path / "grid").policy("dtr")
    assert rep.first_success.sample.ratio == 0.99 and rep.failure_regions == []

    runner.run_sweep(logs["padded"], replace(plain, refine=True), tmp_path / "refined", jobs=1)
    rep = holes.analyze(tmp_path / "refined").policy("dtr")
    assert rep.first_success.sample.budget == 7057          # the ok band's first byte
    [region] = rep.failure_regions
    assert (region.lo.budget, region.hi.budget) == (7089, 7104)      # byte-exact here
    assert (region.below.budget, region.above.budget) == (7088, 7105)


def test_refinement_rounds_are_decimal_and_stop_at_min_step():
    assert grid.decimal_grid(0.095, 0.1, 0.001) == [0.095, 0.096, 0.097, 0.098, 0.099, 0.1]
    assert grid.decimal_grid(0.1, 0.125, 0.01) == [0.1, 0.11, 0.12, 0.125]
    peak = 10**9
    samples = {"dtr": [grid.Sample(int(0.09 * peak), 0.09, "fail", "oom", 1.0),
                       grid.Sample(int(0.1 * peak), 0.1, "ok", "ok", 2.0),
                       grid.Sample(int(0.11 * peak), 0.11, "ok", "ok", 2.1),
                       grid.Sample(int(0.12 * peak), 0.12, "ok", "ok", 3.0)]}
    params = SweepParams(0.09, 0.12, 0.01, refine=True, min_step=0.001)
    ratios = [p.ratio for p in grid.plan_refinement(samples, params, peak)]
    # 0.09|0.10 differ in outcome, 0.11|0.12 jump by 43%; 0.10|0.11 by 5% only
    assert ratios == [0.091, 0.092, 0.093, 0.094, 0.095, 0.096, 0.097, 0.098, 0.099,
                      0.111, 0.112, 0.113, 0.114, 0.115, 0.116, 0.117, 0.118, 0.119]
    fine = {"dtr": [grid.Sample(1, 0.097, "fail", "oom", 1.0), grid.Sample(2, 0.098, "ok", "ok", 2.0)]}
    assert grid.plan_refinement(fine, params, peak) == []            # width = min_step


def test_interior_samples_are_seeded():
    params = SweepParams(0.1, 0.2, 0.05, interior=3, seed=7)
    a = grid.plan_interior(params, 10**6)
    assert a == grid.plan_interior(params, 10**6)
    assert a != grid.plan_interior(replace(params, seed=8), 10**6)
    budgets = sorted(p.budget for p in a)
    assert len(budgets) == 6
    assert all(100_000 < b < 150_000 for b in budgets[:3])
    assert all(150_000 < b < 200_000 for b in budgets[3:])


# --- exact mode -------------------------------------------------------------------------

def test_exact_partition_covers_the_range_and_reproduces(logs, tmp_path):
    result = runner.run_sweep(logs["hole"], SweepParams(0.3, 1.0, exact=True), tmp_path / "x",
                              jobs=1)
    assert result.coverage == {"dtr": 1.0} and result.gaps == {"dtr": []}
    rep = holes.analyze(tmp_path / "x").policy("dtr")
    x = rep.exact
    assert x.coverage == 1.0 and x.gaps == [] and x.overlaps == []
    lo, hi = 160, 536                                    # floor(0.3 * 536), floor(1.0 * 536)
    assert x.partition[0].lo == lo and x.partition[-1].hi == hi
    for a, b in zip(x.partition, x.partition[1:]):
        assert b.lo == a.hi + 1                          # no gap, no overlap
    program = hole_log().program()
    rows = {(r["interval_lo"], r["interval_hi"]): r for r in SweepStore(tmp_path / "x").read_runs().to_pylist()}
    for iv in x.partition:
        raw = next(r for (a, b), r in rows.items() if a <= iv.lo and (b is None or iv.hi <= b))
        for budget in (iv.lo, iv.hi):
            s = replay(program, budget=budget).summary
            assert (s.outcome, s.clock, s.victims_sha256, s.budget_interval[0]) == (
                raw["outcome"], raw["clock"], raw["victims_sha256"], raw["interval_lo"])
    assert [[r.lo, r.hi] for r in x.holes] == [[424, 439]]
    assert x.holes[0].lo_exact and x.holes[0].hi_exact
    assert [(m.lo, m.hi, m.outcome) for m in x.merged] == [
        (160, 391, "oom"), (392, 423, "ok"), (424, 439, "oom"), (440, 536, "ok")]
    out = holes.analyze(tmp_path / "x").to_json()["policies"]["dtr"]
    assert out["failure_regions_bytes"] == [[424, 439]] and out["coverage"] == 1.0
    # the report's first success is the certified byte, not the first completing sample
    first = x.first_success(lo)
    assert replay(program, budget=first).summary.outcome == "ok"
    assert replay(program, budget=first - 1).summary.outcome == "oom"
    console = Console(record=True, width=120)
    for part in holes_view(holes.analyze(tmp_path / "x")):
        console.print(part)
    text = console.export_text()
    assert f"first success: {first:,} B" in text and "first sampled success" in text
    assert "exact (all budgets below it certified to fail)" in text


def test_exact_uses_every_sample_certificate(logs, tmp_path):
    both = SweepParams(0.3, 1.0, 0.05, exact=True)
    result = runner.run_sweep(logs["hole"], both, tmp_path / "x", jobs=1)
    alone = len(walk(hole_log().program(), 160))
    assert result.stages["grid"].ran == 15
    assert result.stages["exact"].ran < alone            # grid certificates were reused
    assert holes.analyze(tmp_path / "x").policy("dtr").exact.coverage == 1.0


def test_exact_run_limit_and_resolution_leave_reported_gaps(logs, tmp_path):
    limited = runner.run_sweep(logs["hole"], SweepParams(0.3, 1.0, exact=True, max_runs=3),
                               tmp_path / "lim", jobs=1)
    assert limited.stages["exact"].ran == 3 and limited.coverage["dtr"] < 1
    x = holes.analyze(tmp_path / "lim").policy("dtr").exact
    assert x.coverage == pytest.approx(limited.coverage["dtr"])
    assert x.gaps and {g.reason for g in x.gaps} == {"run-limit"}
    coarse = runner.run_sweep(logs["padded"], SweepParams(0.9, 1.0, exact=True, resolution=64),
                              tmp_path / "res", jobs=1)
    x = holes.analyze(tmp_path / "res").policy("dtr").exact
    assert all(g.reason == "below-resolution" and g.width < 64 for g in x.gaps)
    assert coarse.stages["exact"].ran <= (7201 - 6480) // 64 + 2


def test_exact_walk_with_parallel_out_of_order_results():
    axis = FakeAxis()
    walk_ = ExactWalk(10, 900, max_runs=10_000)
    asked, pending = [], []
    while True:
        pending += walk_.take(3 - len(pending))
        if not pending:
            break
        b = pending.pop(len(pending) // 2)              # finish out of order
        asked.append(b)
        walk_.absorb(b, "ok", axis.run(b), walk_run=True)
    assert walk_.coverage() == 1.0 and walk_.gaps() == []
    assert len(asked) == len(set(asked))
    intervals = {axis.run(b) for b in asked}
    assert len(asked) - len(intervals) <= 6              # a few split runs may duplicate
    assert len(intervals) == (900 // 7) - (10 // 7) + 1


def test_exact_walk_timeout_blocks_without_certifying():
    walk_ = ExactWalk(0, 99, max_runs=50)
    [b] = walk_.take(1)
    walk_.absorb(b, "unresolved", (None, None), walk_run=True)
    assert walk_.coverage() == 0.0
    nxt = walk_.take(1)
    assert nxt and nxt[0] != b                           # never the timed-out budget again
    walk_.absorb(nxt[0], "ok", (40, 99), walk_run=True)
    assert walk_.gaps() == [(0, 39)]


# --- resuming ---------------------------------------------------------------------------

def test_resume_after_a_crash_gives_the_same_table(logs, tmp_path):
    params = SweepParams(0.9, 1.0, 0.01, refine=True, interior=2, seed=3, exact=True,
                         max_runs=40)
    runner.run_sweep(logs["padded"], params, tmp_path / "ref", jobs=1)
    with pytest.raises(Crash):
        runner.run_sweep(logs["padded"], params, tmp_path / "s", jobs=1, observer=CrashAfter(17),
                         flush_rows=5)
    stored = len(keys(tmp_path / "s"))
    assert stored == 17                                   # the partial batch was flushed too
    assert SweepStore(tmp_path / "s").read_doc()["status"] == "interrupted"
    with pytest.raises(Crash):                            # crash again, later
        runner.run_sweep(logs["padded"], params, tmp_path / "s", jobs=1, observer=CrashAfter(20))
    result = runner.run_sweep(logs["padded"], params, tmp_path / "s", jobs=1)
    assert result.resumed and result.skipped == 37
    ks = keys(tmp_path / "s")
    assert len(ks) == len(set(ks))
    assert [{k: r[k] for k in r if k != "stage"} for r in table(tmp_path / "s")] == [
        {k: r[k] for k in r if k != "stage"} for r in table(tmp_path / "ref")]
    assert holes.analyze(tmp_path / "s").to_json()["policies"] == \
        holes.analyze(tmp_path / "ref").to_json()["policies"]


HOLDING_SWEEP = """
import faulthandler, os, signal, sys
from pathlib import Path
faulthandler.register(signal.SIGUSR1, file=open(os.environ["STACKS"], "w"), all_threads=True)
from dtrforensics.cli.main import main
from dtrforensics.sweep.store import SweepStore

flush, held = SweepStore.flush, []


def flush_then_hold(self):
    path = flush(self)
    if not held and len(self.part_files()) >= int(os.environ["HOLD_AT_PARTS"]):
        held.append(path)
        Path(os.environ["HELD_MARK"]).write_text(str(path))
        sys.stdin.read()                  # until a signal: the sweep cannot finish
    return path


SweepStore.flush = flush_then_hold
sys.argv = ["dtrf", *sys.argv[1:]]
main()
"""


def interruptible():
    """Give the child Ctrl-C back. A shell starts a background job (`make test &`, a CI
    step) with SIGINT ignored, every process inherits that, and Python installs its
    KeyboardInterrupt handler only where SIGINT is not ignored at start: the sweep would
    ignore the test's Ctrl-C, as such a job is meant to."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def start_and_stop(args, out, sig, parts, tmp_path):
    """Start the CLI sweep with its store patched to stop right after the flush that
    makes `parts` part files (rows flushed, the sweep unable to go on), send `sig` to
    its process group (the sweep and its workers) once it holds there; its exit code."""
    script, mark = tmp_path / "holding_sweep.py", tmp_path / f"held-{sig}"
    script.write_text(HOLDING_SWEEP, encoding="utf-8")
    stacks = tmp_path / f"stacks-{sig}"
    env = dict(os.environ, HOLD_AT_PARTS=str(parts), HELD_MARK=str(mark), STACKS=str(stacks))
    proc = subprocess.Popen([sys.executable, str(script), *map(str, args)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=interruptible)
    try:
        while not mark.exists():
            assert proc.poll() is None, "the sweep ended before it could be stopped"
            time.sleep(0.01)
    finally:
        os.killpg(proc.pid, sig)
        try:
            code = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(2)
            proc.kill()
            pytest.fail(f"the sweep ignored signal {sig} for 120 s; its threads:\n"
                        + stacks.read_text())
    return code


def test_resume_after_ctrl_c_and_kill(logs, tmp_path):
    """Ctrl-C, then kill -9, then a resume that completes the sweep exactly.

    The sweep is started `interruptible`: inside a suite run as a background job its
    SIGINT arrived ignored, and the sweep ran on until the 120 s wait gave up."""
    out = tmp_path / "s"
    args = ["sweep", logs["chain"], "--from", "0.3", "--to", "0.9", "--step", "0.01",
            "--jobs", "2", "--flush-rows", "2", "--out", out, "--no-progress"]
    assert start_and_stop(args, out, signal.SIGINT, 1, tmp_path) == 130  # Ctrl-C: flush, stop
    assert SweepStore(out).read_doc()["status"] == "interrupted"
    first = len(keys(out))
    assert start_and_stop(args, out, signal.SIGKILL, 2 + first // 2, tmp_path) == -signal.SIGKILL
    second = len(keys(out))
    assert first < second < 61
    done = dtrf_process(*args, columns=160)
    assert done.returncode == 0, done.stderr
    assert f"{second} already stored (resumed)" in done.stderr
    ks = keys(out)
    assert len(ks) == len(set(ks)) == 61
    runner.run_sweep(logs["chain"], SweepParams(0.3, 0.9, 0.01), tmp_path / "ref", jobs=2)
    assert table(out) == table(tmp_path / "ref")


def test_resume_with_other_parameters_is_refused(logs, tmp_path):
    runner.run_sweep(logs["hole"], SweepParams(0.3, 1.0, 0.1), tmp_path / "s", jobs=1)
    with pytest.raises(ParamsMismatch, match="step: stored 0.1, given 0.05"):
        runner.run_sweep(logs["hole"], SweepParams(0.3, 1.0, 0.05), tmp_path / "s", jobs=1)
    res = dtrf_process("sweep", logs["padded"], "--from", "0.3", "--to", "1.0", "--step", "0.1",
                       "--jobs", "1", "--out", tmp_path / "s", columns=160)
    assert res.returncode == 2 and "holds a sweep of trace hole" in res.stderr


def test_default_folder_is_reused_with_the_same_parameters(logs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ("sweep", logs["hole"], "--from", "0.5", "--to", "1.0", "--step", "0.1", "--jobs", "1")
    assert dtrf(*args).code == 0
    again = dtrf(*args)
    assert again.code == 0 and "already stored (resumed)" in again.err
    assert len(list((tmp_path / "recordings" / "sweeps").iterdir())) == 1
    dtrf(*args[:-4], "--step", "0.05", "--jobs", "1")
    assert len(list((tmp_path / "recordings" / "sweeps").iterdir())) == 2


# --- timeouts, repeats, engines ---------------------------------------------------------

def test_timed_out_points_are_unresolved(logs, tmp_path, monkeypatch):
    real = backends.replay

    def slow_at_some_budgets(program, *, budget, **kw):       # the engine's timeout, simulated
        result = real(program, budget=budget, **kw)
        if budget in (428, 434):
            result.summary = replace(result.summary, outcome="timeout")
        return result

    monkeypatch.setattr(backends, "replay", slow_at_some_budgets)
    runner.run_sweep(logs["hole"], SweepParams(0.7, 1.0, 0.01, exact=True, timeout=5.0),
                     tmp_path / "s", jobs=1)
    rep = holes.analyze(tmp_path / "s").policy("dtr")
    assert [u.budget for u in rep.unresolved] == [428, 434]
    rows = {r["budget"]: r for r in SweepStore(tmp_path / "s").read_runs().to_pylist()}
    assert rows[428]["status"] == "unresolved" and rows[428]["interval_lo"] is None
    # 0.81 (434 B) is unresolved: the sampled region is 0.80 (428: unresolved too), 0.82
    assert [[r.lo.ratio, r.hi.ratio] for r in rep.failure_regions] == [[0.82, 0.82]]
    assert rep.failure_regions[0].timeouts_inside == 2
    # the walk still certifies the hole around them, from other budgets
    assert [[r.lo, r.hi] for r in rep.exact.holes] == [[424, 439]]


def test_real_timeouts_are_unresolved(tmp_path):
    # The engine checks its wall clock between kernel slices (4096 steps when a
    # timeout is set): chain_log(1000) fails at 0.1 within 79 steps, before the
    # first check, while at 0.7 it runs for several slices and the 1 ns limit bites.
    path = tmp_path / "chain1000.log"
    path.write_text(chain_log(1000).text())
    runner.run_sweep(str(path), SweepParams(0.1, 0.7, 0.6, timeout=1e-9), tmp_path / "s", jobs=1)
    rows = {round(r["ratio"], 3): r for r in SweepStore(tmp_path / "s").read_runs().to_pylist()}
    assert rows[0.7]["outcome"] == "timeout" and rows[0.7]["status"] == "unresolved"
    assert rows[0.7]["interval_lo"] is None and rows[0.7]["overhead"] is None
    assert rows[0.1]["status"] == "fail"
    rep = holes.analyze(tmp_path / "s").policy("dtr")
    assert [u.ratio for u in rep.unresolved] == [0.7] and rep.edge_brackets == []


def test_process_pool_and_repeats(logs, tmp_path):
    params = SweepParams(0.3, 1.0, 0.01, repeats=1)
    result = runner.run_sweep(logs["hole"], params, tmp_path / "p", jobs=2, engine="process")
    assert result.stages["grid"].ran == 71
    assert result.stages["repeat"].ran == 6          # first success, both sides of 2 edges
    rep = holes.analyze(tmp_path / "p").policy("dtr")
    assert rep.reruns == 6 and rep.disagreements == []
    workers = {r["worker"] for r in SweepStore(tmp_path / "p").read_runs().to_pylist()
               if r["rep"] == 1}
    grid_workers = {r["worker"] for r in SweepStore(tmp_path / "p").read_runs().to_pylist()
                    if r["rep"] == 0}
    assert workers.isdisjoint(grid_workers)          # reruns ran in fresh processes
    runner.run_sweep(logs["hole"], replace(params, repeats=0), tmp_path / "i", jobs=1)
    assert [r for r in table(tmp_path / "p") if r["rep"] == 0] == table(tmp_path / "i")


def test_every_run_records_its_cpu_seconds(logs, tmp_path):
    params = SweepParams(0.3, 1.0, 0.1, repeats=1)
    runner.run_sweep(logs["chain"], params, tmp_path / "p", jobs=2, engine="process")
    runner.run_sweep(logs["chain"], params, tmp_path / "i", jobs=1)
    for path in (tmp_path / "p", tmp_path / "i"):
        rows = SweepStore(path).read_runs().to_pylist()
        assert rows and all(r["cpu_seconds"] is not None and r["cpu_seconds"] > 0 for r in rows)


def test_a_store_from_before_cpu_seconds_reads_and_resumes(logs, tmp_path):
    """Parts written before runs recorded CPU time read with the column null, and
    the sweep resumes (here: extends) on them, its new runs carrying it."""
    import pyarrow.parquet as pq
    out = tmp_path / "old"
    small = SweepParams(0.3, 1.0, exact=True, max_runs=3)
    runner.run_sweep(logs["hole"], small, out, jobs=1)
    for part in SweepStore(out).part_files():
        old = pq.read_table(part)
        pq.write_table(old.drop(["cpu_seconds"]).replace_schema_metadata(old.schema.metadata),
                       part, compression="zstd", write_page_checksum=True)
    before = SweepStore(out).read_runs().to_pylist()
    assert len(before) == 3 and all(r["cpu_seconds"] is None for r in before)
    assert holes.analyze(out).policy("dtr").exact.coverage < 1
    result = runner.run_sweep(logs["hole"], replace(small, max_runs=1000), out, jobs=1)
    assert result.resumed and result.coverage == {"dtr": 1.0}
    rows = SweepStore(out).read_runs().to_pylist()
    assert sum(r["cpu_seconds"] is None for r in rows) == 3 < len(rows)
    assert holes.analyze(out).policy("dtr").exact.coverage == 1.0
    runner.run_sweep(logs["hole"], replace(small, max_runs=1000), tmp_path / "new", jobs=1)
    assert holes.analyze(out).to_json()["policies"] == \
        holes.analyze(tmp_path / "new").to_json()["policies"]


# --- the CLI ----------------------------------------------------------------------------

def test_cli_sweep_holes_and_plot(logs, tmp_path):
    out = tmp_path / "s"
    doc = dtrf("sweep", logs["hole"], "--from", "0.3", "--to", "1.0", "--step", "0.02",
               "--exact", "--jobs", "1", "--out", out, "--json").json()
    pol = doc["policies"]["dtr"]
    assert pol["failure_regions_bytes"] == [[424, 439]] and pol["coverage"] == 1.0
    assert set(pol) >= {"first_success", "failure_regions", "edge_brackets", "unresolved",
                        "regime_switches"}
    text = dtrf("holes", out).ok()
    assert "424" in text and "hole" in text
    assert dtrf("holes", out, "--json").json()["policies"] == doc["policies"]
    pytest.importorskip("matplotlib")
    text = dtrf("plot", out).ok()
    png, svg = out / "plot.png", out / "plot.svg"
    assert text.split() == [str(png), str(svg)]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and b"<svg" in svg.read_bytes()[:400]
    bad = dtrf("holes", tmp_path / "nothing")                # through main(): one clear line
    assert bad.refused("not a sweep directory")


FAILING_RUN = """
import sys
from dtrforensics.sweep import backends, runner
from dtrforensics.sweep.store import SweepParams


def boom(*args):
    raise RuntimeError("boom")


backends.run_point = boom
runner.run_sweep(sys.argv[1], SweepParams(0.5, 1.0, 0.1), sys.argv[2], jobs=1)
"""


def test_a_run_that_fails_in_this_process_raises_its_own_error(logs, tmp_path):
    """With jobs=1 no process pool is ever imported: a failing run's error is
    its own, not one raised while asking whether a pool broke."""
    res = subprocess.run([sys.executable, "-c", FAILING_RUN, logs["hole"], str(tmp_path / "s")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1] == "RuntimeError: boom", res.stderr[-2000:]


# --- workers forked from a process with threads ---------------------------------------

class _Finalized:
    """A reference cycle whose finalizer writes the pid of the process that ran
    it, holding a DuckDB connection (whose database runs threads)."""

    def __init__(self, path):
        import duckdb
        self.path, self.me, self.con = str(path), self, duckdb.connect()
        self.con.execute("SELECT 1").fetchall()

    def __del__(self):
        with open(self.path, "a") as fh:
            fh.write(f"{os.getpid()}\n")


_run_point = backends.run_point


def _collect_then_run(*args):
    gc.collect()
    return _run_point(*args)


def test_a_forked_worker_never_finalizes_an_object_of_the_sweep(logs, tmp_path, monkeypatch):
    """Garbage of the sweep's process (a cycle not collected yet) is out of the
    forked workers' collector: a worker that collects every generation before
    its run leaves it to the sweep, whose threads its finalizer may need. (A
    worker that collected this one died of signal 11 in DuckDB's destructor:
    its database's threads are not copied by the fork.)"""
    from dtrforensics.engine.replay import DEFAULT_THRASH_FACTOR
    from dtrforensics.sweep.store import Point
    from dtrforensics.trace.cache import load_program
    monkeypatch.setattr(backends, "run_point", _collect_then_run)   # inherited by the fork
    marks = tmp_path / "finalized"
    gc.disable()
    try:
        _Finalized(marks)                  # garbage from here on, uncollected
        backend = backends.ProcessBackend(load_program(logs["hole"]), DEFAULT_THRASH_FACTOR, 2,
                                           "fork")
        try:
            futures = [backend.submit(Point("dtr", 10**9, 0, 1.0, "grid"), None, lane)
                       for lane in (0, 1)]
            assert [f.result(timeout=120)["outcome"] for f in futures] == ["ok", "ok"]
        finally:
            backend.close()
        assert not marks.exists()          # no worker ran the finalizer
    finally:
        gc.enable()
        gc.collect()                       # here, where its threads are
    assert marks.read_text().split() == [str(os.getpid())]


def test_forking_keeps_a_freeze_the_caller_holds():
    """heap_frozen never unfreezes what its caller froze (gc.unfreeze would
    free all of it at once)."""
    gc.freeze()
    try:
        held = gc.get_freeze_count()
        with backends.heap_frozen():
            pass
        assert gc.get_freeze_count() >= held > 0
    finally:
        gc.unfreeze()
    with backends.heap_frozen():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
