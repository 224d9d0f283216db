"""Fault injection: kill a recording, a replacement and a sweep at random points
(SIGKILL at the k-th file-system call of a forked child) and check that nothing
is lost: a target always holds a whole, verified recording (the old one or the
new one) or nothing, and a resumed sweep equals an uninterrupted one row for row."""

from __future__ import annotations

import builtins
import functools
import json
import multiprocessing
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path
from xml.etree import ElementTree

import pytest
from hang_guard import alive

from dtrforensics.recorder.reader import find_recordings, open_recording
from dtrforensics.recorder.record import record_run
from dtrforensics.sweep.backends import heap_frozen
from dtrforensics.sweep.runner import run_sweep
from dtrforensics.sweep.store import SweepParams, SweepStore
from dtrforensics.trace import load_trace

KILLS = 8               # random kill points per scenario (the suite stays fast)
TRIPPED = ("open", "mkdir", "rename", "replace", "unlink", "rmdir", "fsync", "scandir")


def _tripwire(k: int, calls: list[str]) -> None:
    """In a child: append the name of every file-system call to `calls`, and
    SIGKILL ourselves at the k-th (k = 0: never)."""
    def wrap(name, fn):
        def tripped(*args, **kwargs):
            calls.append(name)
            if len(calls) == k:
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*args, **kwargs)
        return tripped

    for name in TRIPPED:
        setattr(os, name, wrap(name, getattr(os, name)))
    builtins.open = wrap("open", builtins.open)


def _in_child(action, k: int, log: Path | None = None, warm=None) -> bool:
    """Run `action` in a forked child killed at its k-th file-system call; True if
    it was killed, False if it finished (then the calls' names go to `log`). The
    child never collects this process's garbage (heap_frozen). With `warm`, the
    child is a new interpreter that runs `warm` before the tripwire (to
    import what `action` imports), for an action a fork of this process cannot
    run: PyTorch's autograd refuses to, once compiled steps started its threads
    here (`_fresh_interpreters`). `action` and `warm` must then pickle."""
    if warm is not None:
        child = _fresh_interpreters().Process(target=_child, args=(action, k, log, warm))
        child.start()
        child.join()
        if child.exitcode == -signal.SIGKILL:
            return True
        assert child.exitcode == 0, f"the child failed (k={k})"
        return False
    with heap_frozen():
        pid = os.fork()
        if pid == 0:                               # pragma: no cover - the child
            _child(action, k, log)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status):
        assert os.WEXITSTATUS(status) == 0, f"the child failed (k={k})"
        return False
    assert os.WTERMSIG(status) == signal.SIGKILL
    return True


@functools.cache
def _fresh_interpreters():
    """Children for `_in_child(warm=...)`: forked from a fork server, a new
    interpreter that imported PyTorch and the recorder once (and never ran a
    step), instead of each child importing them again (spawn: 3 s a child)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch", "dtrforensics.torch", "dtrforensics.torch.spec"])
    return context


def _child(action, k: int, log: Path | None, warm=None) -> None:  # pragma: no cover - the child
    """The child's part of `_in_child`: it never returns."""
    code, calls = 0, []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if warm is not None:
                warm()
            real_open = builtins.open
            _tripwire(k, calls)
            action()
            if log is not None:
                with real_open(log, "w") as fh:
                    fh.write("\n".join(calls))
    except BaseException:                         # noqa: BLE001 - reported by the exit code
        traceback.print_exc()
        code = 3
    finally:
        os._exit(code)


def kill_points(action, reset, tmp_path: Path, seed: int, kills: int = KILLS,
                warm=None) -> list[int]:
    """Where to kill `action`: `kills` random file-system calls of an uninterrupted
    run, and as many of its renames (just before one, or just after), where a
    kill is most dangerous (`warm`: as `_in_child`'s)."""
    reset()
    log = tmp_path / "calls.log"
    assert not _in_child(action, 0, log, warm)
    calls = log.read_text().split("\n")
    log.unlink()
    reset()
    renames = {i + d for i, name in enumerate(calls, 1) if name in ("rename", "replace")
               for d in (0, 1)}
    rng = random.Random(seed)
    return sorted(set(rng.sample(range(1, len(calls) + 1), min(kills, len(calls))))
                  | set(rng.sample(sorted(renames), min(kills, len(renames)))))


@pytest.fixture(scope="module")
def program():
    return load_trace("hole")


def _fingerprint(rec) -> tuple:
    return (rec.run["budget"], rec.outcome, rec.table("events").num_rows,
            rec.run["summary"]["victims_sha256"])


def test_a_killed_recording_leaves_nothing_or_a_whole_recording(tmp_path, program):
    target = tmp_path / "rec"
    reference = _fingerprint(open_recording(
        record_run(program, ratio=0.6, out_dir=tmp_path / "reference")[1]))

    def record():
        record_run(program, ratio=0.6, out_dir=target)

    def reset():
        shutil.rmtree(target, ignore_errors=True)
        for stale in tmp_path.glob(".rec.*"):
            shutil.rmtree(stale)

    kills = 0
    for k in kill_points(record, reset, tmp_path, seed=13):
        kills += _in_child(record, k)      # a warmer parent may need fewer calls: then it ends
        if target.exists():
            assert _fingerprint(open_recording(target)) == reference
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for rec in find_recordings(tmp_path):
                open_recording(rec.path)           # every listed recording is whole
        # the next recording to the same place succeeds and cleans up after the killed one
        shutil.rmtree(target, ignore_errors=True)
        record_run(program, ratio=0.6, out_dir=target)
        assert _fingerprint(open_recording(target)) == reference
        assert sorted(p.name for p in tmp_path.iterdir()) == ["rec", "reference"]
        shutil.rmtree(target)
    assert kills >= KILLS // 2


def test_a_killed_overwrite_keeps_the_old_or_the_new_recording(tmp_path, program):
    target = tmp_path / "rec"
    old = _fingerprint(open_recording(record_run(program, ratio=0.5, out_dir=target)[1]))
    new = _fingerprint(open_recording(record_run(program, ratio=0.6, out_dir=tmp_path / "n")[1]))
    shutil.rmtree(tmp_path / "n")

    def overwrite():
        record_run(program, ratio=0.6, out_dir=target, overwrite=True)

    def reset():
        shutil.rmtree(target, ignore_errors=True)
        for stale in tmp_path.glob(".rec.*"):
            shutil.rmtree(stale)
        record_run(program, ratio=0.5, out_dir=target)

    seen, kills = set(), 0
    for k in kill_points(overwrite, reset, tmp_path, seed=29):
        kills += _in_child(overwrite, k)
        got = _fingerprint(open_recording(target))   # never missing, never damaged
        assert got in (old, new)
        seen.add(got)
        reset()
    assert old in seen and kills >= KILLS // 2


@pytest.fixture(scope="module")
def sweep_params():
    return SweepParams(ratio_from=0.3, ratio_to=1.0, step=0.1, interior=1, seed=3)


def _rows(out: Path) -> list[tuple]:
    table = SweepStore(out).read_runs().drop(["wall_seconds", "cpu_seconds", "worker", "finished_at"])
    return sorted(tuple(r.values()) for r in table.to_pylist())


def test_a_killed_sweep_resumes_to_the_uninterrupted_result(tmp_path, program, sweep_params):
    run_sweep(program, sweep_params, tmp_path / "reference", jobs=1, flush_rows=1)
    expected = _rows(tmp_path / "reference")
    out = tmp_path / "sweep"

    def sweep():
        run_sweep(program, sweep_params, out, jobs=1, flush_rows=1)

    def reset():
        shutil.rmtree(out, ignore_errors=True)

    points = kill_points(sweep, reset, tmp_path, seed=7)
    kills = 0
    for k in points:
        kills += _in_child(sweep, k)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(2):                       # killed once more, part-way through resuming
                if not _in_child(sweep, random.Random(k).randint(1, points[-1])):
                    break
            result = run_sweep(program, sweep_params, out, jobs=1, flush_rows=1)
        assert _rows(out) == expected
        assert result.ran + result.skipped == len(expected)
        assert SweepStore(out).status == "complete"
        shutil.rmtree(out)
    assert kills >= KILLS // 2


HANGING_SWEEP = """
import pathlib, sys, time
from dtrforensics.sweep.runner import SweepObserver, run_sweep
from dtrforensics.sweep.store import SweepParams

class Hang(SweepObserver):
    def finished(self, row):
        pathlib.Path(sys.argv[1]).write_text("running")
        time.sleep(600)

run_sweep("hole", SweepParams(ratio_from=0.3, ratio_to=1.0, step=0.01), sys.argv[2], jobs=2,
          engine="process", observer=Hang())
"""


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(x) for x in path.read_text().split()] if path.exists() else []


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_sweep_workers_die_with_a_killed_parent(tmp_path):
    ready = tmp_path / "ready"
    parent = subprocess.Popen([sys.executable, "-c", HANGING_SWEEP, ready, tmp_path / "sweep"])
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 300
        while not ready.exists():                  # a run finished: the pool is up
            assert parent.poll() is None, "the sweep ended early"
            assert time.monotonic() < deadline, "the sweep never started"
            time.sleep(0.1)
        workers += _children(parent.pid)
        assert len(workers) == 2
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 60
        while any(map(alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(map(alive, workers)), "workers outlived their sweep"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for pid in filter(alive, workers):      # only ours, by pid: a failed test leaves none
            os.kill(pid, signal.SIGKILL)


# --- the newer writers: a torch log, findings maps and their report, compare-policies ------

# These writers run for seconds: the default suite kills each at one random
# file-system call and just before or after one rename; `make test-full` at
# four of each.
NEWER_KILLS = [pytest.param(1, id="one-kill"), pytest.param(4, id="kills", marks=pytest.mark.slow)]


def _leftovers(folder: Path, keep: set[str]) -> set[str]:
    return {p.name for p in folder.iterdir()} - keep


def _record_mlp(path: Path) -> None:
    """`dtrf torch record zoo:mlp -o PATH`, on one intra-op thread."""
    import torch

    from dtrforensics.torch import record
    from dtrforensics.torch.spec import build
    torch.set_num_threads(1)
    model, data, loss_fn = build("zoo:mlp")
    record(model, data, loss_fn, path)


@pytest.mark.parametrize("kills", NEWER_KILLS)
def test_a_killed_torch_record_leaves_no_log_or_the_whole_log(tmp_path, one_thread, kills):
    """`dtrf torch record -o LOG` killed anywhere: LOG is missing or the whole
    log (and its where-file whole, or none); what else is left is a dot-named temporary that no trace listing
    takes for a log, and the next record writes LOG whole."""
    pytest.importorskip("torch")
    from dtrforensics.trace.registry import _logs_under

    record_to = _record_mlp
    record_to(tmp_path / "reference.log")
    want = (tmp_path / "reference.log").read_bytes()
    want_where = (tmp_path / "reference.log.where.json").read_bytes()
    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / "mlp.log"

    def reset():
        shutil.rmtree(folder)
        folder.mkdir()

    killed = 0
    action = functools.partial(record_to, target)
    warm = functools.partial(record_to, tmp_path / "warm.log")   # outside `folder`
    for k in kill_points(action, reset, tmp_path, seed=41, kills=kills, warm=warm):
        killed += _in_child(action, k, warm=warm)
        if target.exists():
            assert target.read_bytes() == want
        where = folder / "mlp.log.where.json"     # written whole after the log, or not at all
        if where.exists():
            assert target.exists() and where.read_bytes() == want_where
        assert all(name.startswith(".mlp.log.") and name.endswith(".tmp")
                   for name in _leftovers(folder, {"mlp.log", where.name}))
        assert _logs_under(folder) == ([target] if target.exists() else [])
        record_to(target)
        assert target.read_bytes() == want
        reset()
    assert killed >= max(1, kills // 2)


def _timeless(text: str) -> str:
    """findings.md without its wall times (they differ from run to run)."""
    return re.sub(r"[\d,]+(\.\d+)? s\b", "# s", text)


@pytest.mark.parametrize("kills", NEWER_KILLS)
def test_a_killed_findings_run_resumes_to_the_same_report(tmp_path, kills):
    """`reproduce --findings` killed anywhere (its maps, its time ledger, the
    adoption of maps, findings.md): findings.md is missing or whole, the
    ledger is JSON, and the next invocation writes the uninterrupted report."""
    from dtrforensics.render.reproduce_findings import write_findings
    from dtrforensics.reproduce.findings import findings

    def run(out: Path) -> str:
        result = findings(out / "work", map_seconds=600, run_timeout=None, jobs=1,
                          traces=("hole",), zoo=(), ratio_range=(0.912, 0.922))
        return write_findings(result, out, command="dtrf reproduce --findings",
                              wall_seconds=0.0).read_text()

    out = tmp_path / "findings"
    out.mkdir()
    want = _timeless(run(out))     # here, so that every child has its policy files compiled

    def reset():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()

    killed = 0
    for k in kill_points(lambda: run(out), reset, tmp_path, seed=43, kills=kills):
        killed += _in_child(lambda: run(out), k)
        report = out / "findings.md"
        if report.exists():
            assert _timeless(report.read_text()) == want
        ledger = out / "work" / "seconds.json"
        if ledger.exists():
            json.loads(ledger.read_text())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert _timeless(run(out)) == want
        reset()
    assert killed >= max(1, kills // 2)


def _whole_figure(path: Path) -> None:
    data = path.read_bytes()
    if path.suffix == ".png":
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and data.endswith(b"IEND\xaeB`\x82"), path
    else:
        ElementTree.fromstring(data)


@pytest.mark.parametrize("kills", NEWER_KILLS)
def test_a_killed_compare_policies_resumes_and_leaves_no_half_figure(tmp_path, kills):
    """`dtrf compare-policies` killed anywhere: its figures are missing or
    whole, and the same command then gives the uninterrupted answer."""
    from cli import dtrf

    def args(out: Path) -> list:
        return ["compare-policies", "hole", "--from", "0.9", "--to", "0.93", "--step", "0.01",
                "--policy", "dtr,lru", "--jobs", "1", "--no-progress", "--out", out, "--json"]

    def answer(out: Path) -> dict:
        result = dtrf(*args(out), cwd=tmp_path)
        assert result.code == 0, result.err
        return json.loads(result.out.replace(str(out), "OUT"))

    want = answer(tmp_path / "reference")
    out = tmp_path / "compared"

    def compare():
        assert dtrf(*args(out), cwd=tmp_path).code == 0

    def reset():
        shutil.rmtree(out, ignore_errors=True)

    killed = 0
    for k in kill_points(compare, reset, tmp_path, seed=47, kills=kills):
        killed += _in_child(compare, k)
        for figure in out.glob("compare-policies*"):
            _whole_figure(figure)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert answer(out) == want
        for figure in out.glob("compare-policies.*"):
            _whole_figure(figure)
        reset()
    assert killed >= max(1, kills // 2)
