"""No command's deadline counts a compile of the replay kernel: `--timeout`,
`sweep --max-seconds` and `reproduce --total-seconds` start their clocks
after the kernel is ready (engine/compiled.py `prepare`).

The quick tests make the process's first look for the kernel take 1000 s of
the clocks the deadlines read (a compile on a busy machine, as those clocks
see it) and give the command a deadline far shorter; the slow one compiles
for real, into an empty numba cache with the native library off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from dtrforensics.cli.main import app
from dtrforensics.engine import compiled

COMPILE = 1000.0     # seconds the fake compile takes on the deadlines' clocks


@pytest.fixture
def slow_compile(monkeypatch):
    """This process has not looked for the kernel yet, and its first look
    moves `time.monotonic` and `time.perf_counter` on by COMPILE seconds."""
    offset = [0.0]
    for name in ("monotonic", "perf_counter"):
        real = getattr(time, name)
        monkeypatch.setattr(time, name, lambda real=real: real() + offset[0])
    found = compiled._native_kernel

    def first_look():
        offset[0] = COMPILE
        return found()

    monkeypatch.setattr(compiled, "_native_kernel", first_look)
    monkeypatch.setattr(compiled, "_prepared", set())
    return offset


def test_a_runs_timeout_does_not_count_the_compile(slow_compile):
    done = CliRunner().invoke(app, ["run", "hole-rnn-seed16", "--ratio", "0.5",
                                    "--timeout", "60", "--json"])
    assert slow_compile[0] == COMPILE, "the kernel was never looked for"
    assert done.exit_code == 0, done.output
    summary = json.loads(done.stdout)
    assert summary["outcome"] in ("ok", "oom")      # not "timeout"
    assert summary["wall_seconds"] < 60             # the run's own clock, without the compile


def test_a_sweeps_max_seconds_does_not_count_the_compile(slow_compile, tmp_path):
    done = CliRunner().invoke(app, ["sweep", "hole-rnn-seed16", "--from", "0.3", "--to", "0.9",
                                    "--step", "0.2", "--engine", "inline", "--max-seconds", "60",
                                    "--no-progress", "-o", str(tmp_path / "sweep"), "--json"])
    assert slow_compile[0] == COMPILE, "the kernel was never looked for"
    assert done.exit_code == 0, done.output
    assert "stopped at --max-seconds" not in done.stderr
    status = json.loads((tmp_path / "sweep" / "sweep.json").read_text())["status"]
    assert status == "complete"


@pytest.mark.slow
def test_a_cold_estimate_within_a_short_max_seconds(tmp_path):
    """A first `sweep --estimate --max-seconds 20` with numba's cache empty and
    the native library off compiles the kernel (minutes) and still estimates."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), DTRF_NATIVE="0")
    done = subprocess.run([sys.executable, "-m", "dtrforensics.cli.main", "sweep",
                           "hole-rnn-seed16", "--exact", "--estimate", "--max-seconds", "20",
                           "--jobs", "1", "--json"], env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compiling the replay kernel" in done.stderr
    assert json.loads(done.stdout)["samples"]
