"""The sweep folder's lock and what it says about its writer (issue 39).

Many processes racing `SweepStore.acquire()` on one folder: exactly one
holds it, whether the folder had no lock, a stale one (its sweep killed) or
an empty one. A lock held by a live process is never taken over, whatever
its file says; a killed sweep reads `killed` in every view of it.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from sweeps import write_logs

from dtrforensics.sweep import holes, runner
from dtrforensics.sweep.backends import heap_frozen
from dtrforensics.sweep.store import SweepParams, SweepStore, SweepStoreError
from dtrforensics.sweep.views import connect_sweeps

RACERS = 8
TRIALS = 30
BARRIER_SECONDS = 120.0


def _racer(folders: list[str], barrier, results) -> None:
    """One of RACERS processes: at each trial, all race acquire() on the trial's
    folder at once; those that got it hold it until every racer has tried."""
    for trial, folder in enumerate(folders):
        store = SweepStore(folder)
        barrier.wait()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                store.acquire()
            got = True
        except SweepStoreError:
            got = False
        results.put((trial, os.getpid(), got))
        barrier.wait()                      # every racer has tried: the winners still hold it
        if got:
            store.release()


def _prepare(folder: Path, lock: str | None) -> None:
    folder.mkdir()
    if lock == "stale":
        (folder / "sweep.lock").write_text("999999999\n")     # a pid no process has
    elif lock == "empty":
        (folder / "sweep.lock").write_text("")


@pytest.mark.parametrize("lock", [None, "stale", "empty"])
def test_racing_processes_never_hold_the_lock_together(tmp_path, lock):
    folders = []
    for trial in range(TRIALS):
        _prepare(tmp_path / f"t{trial}", lock)
        folders.append(str(tmp_path / f"t{trial}"))
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(RACERS, timeout=BARRIER_SECONDS), ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(folders, barrier, results)) for _ in range(RACERS)]
    with heap_frozen():         # a forked child never collects this process's cycles
        for p in procs:
            p.start()
    try:
        got = [results.get(timeout=BARRIER_SECONDS) for _ in range(RACERS * TRIALS)]
    finally:
        for p in procs:
            p.join(timeout=BARRIER_SECONDS)
            if p.exitcode is None:
                p.kill()
    assert all(p.exitcode == 0 for p in procs)
    winners = [sum(ok for t, _, ok in got if t == trial) for trial in range(TRIALS)]
    assert winners == [1] * TRIALS


# A process that takes a folder's lock as a sweep does, or (EMPTY) holds its
# flock on an empty lock file, says so, and waits to be killed.
HOLDER = """
import fcntl, os, signal, sys
from dtrforensics.sweep.store import SweepStore
folder, how = sys.argv[1], sys.argv[2]
child = 0
if how == "empty":
    fd = os.open(os.path.join(folder, "sweep.lock"), os.O_CREAT | os.O_WRONLY, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
else:
    SweepStore(folder).acquire()
if how == "fork":                   # a worker forked by the sweep, lingering
    started, ready = os.pipe()
    child = os.fork()
    if child == 0:                  # at-fork handlers have run once the child's code does
        os.write(ready, b"x")
        signal.pause()
        os._exit(0)
    os.read(started, 1)             # the child runs: killing the parent earlier raced it
print("holding", child, flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def holder(tmp_path):
    """holder(folder, how): a live process holding the folder's lock (killed at the end)."""
    procs = []

    def start(folder: Path, how: str = "sweep") -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), how],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        word, child = proc.stdout.readline().split()
        assert word == "holding"
        proc.child = int(child)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=30)
        if proc.child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.child, signal.SIGKILL)


def test_an_empty_lock_a_live_process_holds_is_refused(tmp_path, holder):
    """The moment a lock file exists before its pid is written was read as a
    stale lock and taken over: a lock is held while its holder lives."""
    holder(tmp_path, "empty")
    assert (tmp_path / "sweep.lock").read_text() == ""
    with pytest.raises(SweepStoreError, match="another sweep .* is writing"):
        SweepStore(tmp_path).acquire()
    assert SweepStore(tmp_path).lock_holder() is not None


def test_an_empty_lock_no_process_holds_is_taken_over(tmp_path):
    (tmp_path / "sweep.lock").write_text("")
    store = SweepStore(tmp_path)
    store.acquire()
    assert store.lock_holder() == os.getpid()
    assert (tmp_path / "sweep.lock").read_text().split()[0] == str(os.getpid())
    store.release()
    assert not (tmp_path / "sweep.lock").exists()


def test_the_lock_of_a_killed_sweep_is_taken_over(tmp_path, holder):
    proc = holder(tmp_path)
    assert SweepStore(tmp_path).lock_holder() == proc.pid
    with pytest.raises(SweepStoreError, match=f"another sweep \\(pid {proc.pid}\\)"):
        SweepStore(tmp_path).acquire()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert SweepStore(tmp_path).lock_holder() is None
    store = SweepStore(tmp_path)
    with pytest.warns(UserWarning, match="no longer running"):
        store.acquire()
    assert store.lock_holder() == os.getpid()
    store.release()


def test_a_forked_child_does_not_hold_the_lock_of_its_parent(tmp_path, holder):
    """A sweep's forked workers inherit its open files: the lock's is closed in
    them, so the lock of a sweep killed -9 is free even while a worker lingers."""
    sweep = holder(tmp_path, "fork")
    sweep.send_signal(signal.SIGKILL)
    sweep.wait(timeout=30)
    os.kill(sweep.child, 0)                   # the worker still runs
    assert SweepStore(tmp_path).lock_holder() is None
    store = SweepStore(tmp_path)
    with pytest.warns(UserWarning, match="no longer running"):
        store.acquire()
    store.release()


def _sweep_status(out: Path) -> dict[str, str]:
    """The sweep's status in each view of it: holes (as `dtrf holes` reads it), the
    store, and the `sweeps` view of `dtrf sql`."""
    con = connect_sweeps([out])
    try:
        (view,) = con.execute("SELECT sweep_status FROM sweeps").fetchall()[0]
    finally:
        con.close()
    return {"holes": holes.analyze(out).status, "store": SweepStore(out).status, "sql": view}


def test_a_killed_sweep_reads_killed_in_every_view(tmp_path, holder):
    """`dtrf holes` said killed where the sweeps view of `dtrf sql` said running."""
    out = tmp_path / "s"
    runner.run_sweep(write_logs(tmp_path)["chain"], SweepParams(0.5, 1.0, 0.25), out, jobs=1)
    doc = json.loads((out / "sweep.json").read_text())
    (out / "sweep.json").write_text(json.dumps({**doc, "status": "running"}))
    writer = holder(out)                      # the sweep's writer, alive
    assert set(_sweep_status(out).values()) == {"running"}
    writer.send_signal(signal.SIGKILL)        # kill -9: its lock file stays behind
    writer.wait(timeout=30)
    assert (out / "sweep.lock").exists()
    assert set(_sweep_status(out).values()) == {"killed"}
