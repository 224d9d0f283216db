"""Sweeps, policy comparisons and findings maps on a real Dask cluster.

The cluster is a `dask scheduler` and `dask worker` processes on loopback
(tests/dask_cluster.py), sharing no memory with the test: the points reach
the workers as tasks and come back as rows. What a cluster run stores is
what a local run stores, row for row; a worker killed mid-map loses nothing;
the scheduler gone is one error line, and the sweep resumes elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from cli import command, dtrf_process
from dask_cluster import loopback_cluster
from sweeps import keys, table, write_logs

from dtrforensics.sweep import runner
from dtrforensics.sweep.store import SweepParams, SweepStore

pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    return write_logs(tmp_path_factory.mktemp("cluster-logs"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with loopback_cluster(tmp_path_factory.mktemp("cluster"), workers=2) as c:
        yield c


def dtrf(*args, **env):
    return dtrf_process(*args, columns=160, env=env, timeout=300)


def test_an_exact_sweep_on_the_cluster_stores_the_local_rows(logs, cluster, tmp_path):
    args = ["sweep", logs["hole"], "--from", "0.3", "--to", "1.0", "--exact",
            "--policy", "dtr,lru", "--no-progress"]
    on = dtrf(*args, "--scheduler", cluster.address, "--out", tmp_path / "d")
    assert on.returncode == 0, on.stderr
    here = dtrf(*args, "--jobs", "1", "--out", tmp_path / "i")
    assert here.returncode == 0, here.stderr
    assert len(table(tmp_path / "d")) > 30
    assert table(tmp_path / "d") == table(tmp_path / "i")
    workers = {r["worker"] for r in SweepStore(tmp_path / "d").read_runs().to_pylist()}
    local = {r["worker"] for r in SweepStore(tmp_path / "i").read_runs().to_pylist()}
    assert workers.isdisjoint(local)          # the points ran in the cluster's processes


def test_compare_policies_on_the_cluster_stores_the_local_rows(logs, cluster, tmp_path):
    args = ["compare-policies", logs["hole"], "--policy", "dtr,compute-only",
            "--from", "0.5", "--to", "1.0", "--exact", "--no-progress",
            "--json"]
    on = dtrf(*args, "--scheduler", cluster.address, "--out", tmp_path / "d")
    assert on.returncode == 0, on.stderr
    here = dtrf(*args, "--jobs", "1", "--out", tmp_path / "i")
    assert here.returncode == 0, here.stderr
    assert table(tmp_path / "d") == table(tmp_path / "i")
    assert on.stdout.replace(str(tmp_path / "d"), "") == here.stdout.replace(str(tmp_path / "i"), "")


def test_findings_maps_on_the_cluster_store_the_local_rows(cluster, tmp_path):
    from dtrforensics.reproduce import findings as F
    window = (0.90, 0.93)
    for where, scheduler, jobs in (("d", cluster.address, None), ("i", None, 1)):
        F.findings(tmp_path / where, map_seconds=600, run_timeout=None, jobs=jobs,
                   scheduler=scheduler, traces=("hole",), zoo=(), ratio_range=window)
    maps = sorted(p.name for p in (tmp_path / "i" / "maps").iterdir())
    assert maps and maps == sorted(p.name for p in (tmp_path / "d" / "maps").iterdir())
    def rows(where, name):          # a knob policy's file lives in the working folder
        return [{**r, "policy": r["policy"].replace(str(tmp_path / where), "WORK")}
                for r in table(tmp_path / where / "maps" / name)]
    for name in maps:
        assert rows("d", name) == rows("i", name)


def test_a_worker_killed_mid_map_loses_nothing(logs, tmp_path):
    """SIGKILL to one of two workers while the map runs: the scheduler reruns
    its points (those running and those whose results it held) on the other."""
    params = SweepParams(0.3, 0.9, 0.01)
    with loopback_cluster(tmp_path / "cluster", workers=2) as c:
        pids = {w.pid for w in c.workers}

        class KillOne(runner.SweepObserver):
            done = 0

            def finished(self, row: dict) -> None:
                self.done += 1
                if self.done == 10:       # the worker that ran this point: it holds results
                    pid = int(row["worker"].rsplit(":", 1)[1])
                    c.kill_worker(next(i for i, w in enumerate(c.workers) if w.pid == pid))

        result = runner.run_sweep(logs["chain"], params, tmp_path / "d", engine="dask",
                                  scheduler=c.address, observer=KillOne())
    assert result.ran == 61 and SweepStore(tmp_path / "d").read_doc()["status"] == "complete"
    ran_on = {int(r["worker"].rsplit(":", 1)[1])
              for r in SweepStore(tmp_path / "d").read_runs().to_pylist()}
    assert ran_on == pids                     # both ran points; the survivor finished the map
    runner.run_sweep(logs["chain"], params, tmp_path / "i", jobs=1)
    assert table(tmp_path / "d") == table(tmp_path / "i")


HOLDING_SWEEP = """
import os, sys
from pathlib import Path
from dtrforensics.cli.main import main
from dtrforensics.sweep.store import SweepStore

flush = SweepStore.flush


def flush_then_hold(self):
    path = flush(self)
    if len(self.part_files()) == 1 and not Path(os.environ["HELD_MARK"]).exists():
        Path(os.environ["HELD_MARK"]).write_text(str(path))
        sys.stdin.readline()              # until the test has killed the scheduler
    return path


SweepStore.flush = flush_then_hold
sys.argv = ["dtrf", *sys.argv[1:]]
main()
"""


def test_the_scheduler_gone_is_one_error_line_and_the_sweep_resumes(logs, tmp_path):
    out, mark, script = tmp_path / "s", tmp_path / "held", tmp_path / "holding_sweep.py"
    script.write_text(HOLDING_SWEEP, encoding="utf-8")
    args = ["sweep", logs["chain"], "--from", "0.3", "--to", "0.9", "--step", "0.01",
            "--flush-rows", "4", "--no-progress", "--out", out]
    with loopback_cluster(tmp_path / "cluster", workers=2) as c:
        proc = subprocess.Popen([sys.executable, str(script), *map(str, args),
                                 "--scheduler", c.address],
                                # stderr wraps at COLUMNS: the error line whole
                                env={**os.environ, "HELD_MARK": str(mark), "COLUMNS": "1000",
                                     # how long the client tries to reconnect (30 s by default)
                                     "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "3s"},
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            limit = time.monotonic() + 120
            while not mark.exists():
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < limit
                time.sleep(0.02)
            c.kill_scheduler()
            _, err = proc.communicate("go\n", timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 2, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err
    assert f"the Dask scheduler at {c.address} is gone" in lines[0] and str(out) in lines[0]
    assert SweepStore(out).read_doc()["status"] == "interrupted"
    kept = len(keys(out))
    assert 1 <= kept < 61
    done = dtrf(*args, "--jobs", "1")                # resumed here, without the cluster
    assert done.returncode == 0, done.stderr
    assert f"{kept} already stored (resumed)" in done.stderr
    runner.run_sweep(logs["chain"], SweepParams(0.3, 0.9, 0.01), tmp_path / "ref", jobs=1)
    assert table(out) == table(tmp_path / "ref")


def test_no_scheduler_at_the_address_is_one_error_line(logs, tmp_path):
    import socket
    with socket.socket() as s:                       # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = dtrf("sweep", logs["hole"], "--from", "0.5", "--to", "1.0", "--step", "0.1",
               "--scheduler", f"tcp://127.0.0.1:{port}", "--out", tmp_path / "s",
               DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="2s",
               COLUMNS="1000")                       # stderr wraps at COLUMNS: the line whole
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert res.stderr.strip().splitlines()[-1].startswith(
        f"error: cannot reach the Dask scheduler at tcp://127.0.0.1:{port}")


SLOW_RUNS = """
import time
from dtrforensics.sweep import backends

# dask imports a preload more than once: slow the original down, once
run_point = backends.__dict__.setdefault("fast_run_point", backends.run_point)


def slow_run_point(*args):
    time.sleep(0.5)
    return run_point(*args)


backends.run_point = slow_run_point
"""


def _kill_scheduler_when(tmp_path, args, ready) -> tuple[subprocess.Popen, str, str]:
    """Run `dtrf *args` on a loopback cluster whose runs take half a second
    each; kill its scheduler once `ready()` (the client is then waiting for
    runs); (the process, its stderr, the scheduler's address)."""
    preload = tmp_path / "slow_runs.py"
    preload.write_text(SLOW_RUNS, encoding="utf-8")
    with loopback_cluster(tmp_path / "cluster", workers=2, preload=str(preload)) as c:
        proc = subprocess.Popen([*command(), *map(str, args), "--scheduler", c.address],
                                env={**os.environ, "COLUMNS": "160",
                                     "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "3s"},
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            limit = time.monotonic() + 120
            while not ready():
                assert proc.poll() is None, proc.communicate()[1]
                if time.monotonic() > limit:
                    proc.kill()
                    raise AssertionError(proc.communicate()[1])
                time.sleep(0.05)
            c.kill_scheduler()
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    return proc, err, c.address


def test_the_scheduler_gone_while_the_client_waits_is_one_error_line(logs, tmp_path):
    out = tmp_path / "s"
    args = ["sweep", logs["chain"], "--from", "0.3", "--to", "0.9", "--step", "0.01",
            "--flush-rows", "2", "--no-progress", "--out", out]
    proc, err, address = _kill_scheduler_when(
        tmp_path, args, lambda: any((out / "runs").glob("*.parquet")))
    assert proc.returncode == 2, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"the Dask scheduler at {address} is gone" in lines[0]
    assert SweepStore(out).read_doc()["status"] == "interrupted"
    done = dtrf(*args, "--jobs", "1")                # resumed here, without the cluster
    assert done.returncode == 0, done.stderr
    runner.run_sweep(logs["chain"], SweepParams(0.3, 0.9, 0.01), tmp_path / "ref", jobs=1)
    assert table(out) == table(tmp_path / "ref")


def test_the_scheduler_gone_while_calibrating_is_one_error_line(logs, tmp_path):
    started = time.monotonic()
    proc, err, address = _kill_scheduler_when(
        tmp_path, ["sweep", logs["chain"], "--from", "0.3", "--to", "0.9", "--exact",
                   "--estimate"], lambda: time.monotonic() > started + 8)
    assert proc.returncode == 2, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"the Dask scheduler at {address} is gone" in lines[0]


def test_an_empty_scheduler_address_is_one_error_line_and_makes_nothing(logs, tmp_path):
    for args in (("--scheduler", ""), ("--scheduler", " "), ("--engine", "dask",
                                                             "--scheduler", "")):
        res = dtrf("sweep", logs["hole"], "--from", "0.5", "--to", "1.0", "--step", "0.1",
                   *args, "--out", tmp_path / "s")
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert res.stderr.strip().splitlines()[-1].startswith(
            "error: --engine dask needs --scheduler ADDRESS")
        assert not (tmp_path / "s").exists()
    with pytest.raises(ValueError, match="--scheduler ADDRESS"):
        runner.run_sweep(logs["hole"], SweepParams(0.5, 1.0, 0.1), tmp_path / "s",
                         engine="dask", scheduler="")
    assert not (tmp_path / "s").exists()


def test_a_scheduler_without_workers_says_so_and_gives_up(logs, tmp_path, monkeypatch):
    from dask_cluster import LoopbackCluster

    from dtrforensics.errors import ClusterError
    from dtrforensics.sweep import backends
    monkeypatch.setattr(backends.DaskBackend, "WORKERS_SECONDS", 3.0)
    heard = []

    class Hear(runner.SweepObserver):
        def notice(self, text):
            heard.append(text)

    cluster = LoopbackCluster(tmp_path / "cluster")
    try:
        address = cluster.start_scheduler()           # and no worker
        with pytest.raises(ClusterError, match="had no workers for 3 s") as exc:
            runner.run_sweep(logs["hole"], SweepParams(0.5, 1.0, 0.1), tmp_path / "s",
                             engine="dask", scheduler=address, observer=Hear())
        from dtrforensics.reproduce import findings as F
        with pytest.warns(UserWarning, match="has no workers yet"), \
                pytest.raises(ClusterError, match="had no workers"):
            F.findings(tmp_path / "f", map_seconds=600, run_timeout=None, jobs=None,
                       scheduler=address, traces=("hole",), zoo=(), ratio_range=(0.90, 0.93))
    finally:
        cluster.stop()
    assert f"dask worker {address} --nthreads 1" in str(exc.value)
    assert len(heard) == 1 and "has no workers yet: waiting" in heard[0]
    assert not (tmp_path / "s").exists()             # nothing made: nothing to resume


def test_workers_with_more_than_one_thread_are_refused(logs, tmp_path, monkeypatch):
    """Runs in one process share its caches (prefixes, compiled scores), which
    threads may not share: a worker runs one thread."""
    from dask_cluster import LoopbackCluster
    cluster = LoopbackCluster(tmp_path / "cluster")
    try:
        address = cluster.start_scheduler()
        cluster.start_workers(1, nthreads=2)
        res = dtrf("sweep", logs["hole"], "--from", "0.5", "--to", "1.0", "--step", "0.1",
                   "--scheduler", address, "--out", tmp_path / "s",
                   COLUMNS="1000")       # stderr wraps at COLUMNS: the error line whole
    finally:
        cluster.stop()
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    line = res.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: 1 of the 1 Dask workers at {address} run 2 threads each")
    assert f"`dask worker {address} --nthreads 1`" in line
    assert not (tmp_path / "s").exists()
    # a worker that joins later with more threads: the test below


@pytest.mark.parametrize("who", ["client", "worker"])
def test_a_worker_with_more_threads_joining_mid_sweep_runs_none_of_its_points(
        logs, tmp_path, monkeypatch, who):
    """A worker of two threads that joined a running sweep ran its points (16 of
    41): the sweep stops with the one-thread error line, none of its rows stored,
    the folder keeping the others named. The client sees it join (it reads the
    cluster every few seconds), and the worker refuses every point it is given
    (`who`: the client reads it once only); which comes first is a race, and the
    line is the same either way."""
    from dtrforensics.errors import ClusterError
    from dtrforensics.sweep import backends
    if who == "worker":
        monkeypatch.setattr(backends.DaskBackend, "CAPACITY_SECONDS", float("inf"))
    preload = tmp_path / "slow_runs.py"
    preload.write_text(SLOW_RUNS, encoding="utf-8")
    with loopback_cluster(tmp_path / "cluster", workers=1, preload=str(preload)) as c:

        class JoinTwoThreads(runner.SweepObserver):
            def finished(self, row: dict) -> None:
                if len(c.workers) == 1:
                    c.start_workers(1, preload=str(preload), nthreads=2)

        with pytest.raises(ClusterError, match="2 threads") as exc:
            runner.run_sweep(logs["chain"], SweepParams(0.3, 0.9, 0.01), tmp_path / "d",
                             engine="dask", scheduler=c.address, observer=JoinTwoThreads())
        joiner = c.workers[1].pid
    assert "--nthreads 1`" in str(exc.value)
    assert str(tmp_path / "d") in str(exc.value)      # the runs kept
    ran_on = {int(r["worker"].rsplit(":", 1)[1])
              for r in SweepStore(tmp_path / "d").read_runs().to_pylist()}
    assert ran_on and joiner not in ran_on
    assert SweepStore(tmp_path / "d").read_doc()["status"] == "interrupted"


def test_the_last_worker_gone_is_said_and_given_up_on(logs, tmp_path, monkeypatch):
    """Its points would wait for a worker in silence: the sweep says so, and
    after a while stops with one error, its finished runs kept."""
    from dtrforensics.errors import ClusterError
    from dtrforensics.sweep import backends
    monkeypatch.setattr(backends.DaskBackend, "WORKERS_SECONDS", 3.0)
    preload = tmp_path / "slow_runs.py"
    preload.write_text(SLOW_RUNS, encoding="utf-8")
    heard = []
    with loopback_cluster(tmp_path / "cluster", workers=1, preload=str(preload)) as c:

        class KillIt(runner.SweepObserver):
            def finished(self, row: dict) -> None:
                if c.workers[0].poll() is None:
                    c.kill_worker(0)

            def notice(self, text: str) -> None:
                heard.append(text)

        with pytest.raises(ClusterError, match="has had no workers for 3 s") as exc:
            runner.run_sweep(logs["chain"], SweepParams(0.3, 0.9, 0.01), tmp_path / "d",
                             engine="dask", scheduler=c.address, observer=KillIt())
    assert len(heard) == 1 and "has no workers left: waiting" in heard[0]
    assert str(tmp_path / "d") in str(exc.value)
    assert SweepStore(tmp_path / "d").read_doc()["status"] == "interrupted"
    assert len(keys(tmp_path / "d")) >= 1
