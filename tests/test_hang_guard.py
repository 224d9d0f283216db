"""A hanging test ends the run with every thread's stack, and the processes it
started die with it (tests/hang_guard.py), whether the hang lets Python's
threads run or holds the GIL in compiled code."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hang_guard import alive

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

HANGS = '''
import ctypes, subprocess, sys, threading, time
from pathlib import Path


def _start_a_child():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    Path("child.pid").write_text(str(child.pid))


def test_hangs_in_python():
    _start_a_child()
    threading.Thread(target=time.sleep, args=(600,), name="a-helper-thread", daemon=True).start()
    time.sleep(600)


def test_hangs_holding_the_gil():
    _start_a_child()
    ctypes.PyDLL(None).sleep(600)     # libc sleep, called without releasing the GIL
'''


@pytest.mark.parametrize("test,said", [
    ("test_hangs_in_python", ["Timeout", "Stack of a-helper-thread", "time.sleep(600)"]),
    ("test_hangs_holding_the_gil", ["past its test's timeout", "Fatal Python error: Aborted",
                                    "test_hangs_holding_the_gil"]),
])
def test_a_hang_ends_the_run_with_every_stack_and_kills_what_it_started(tmp_path, test, said):
    (tmp_path / "test_hangs.py").write_text(textwrap.dedent(HANGS))
    env = {**os.environ, "DTRF_TEST_HANG_GRACE": "2",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get(
               "PYTHONPATH", "")])}
    started = time.monotonic()
    try:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "hang_guard", "-p", "no:cacheprovider",
             "-o", "timeout=1", "-o", "timeout_method=thread", f"test_hangs.py::{test}"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the hanging test was still running after 120 s")
    output = run.stdout + run.stderr
    assert run.returncode != 0 and time.monotonic() - started < 60
    for words in said:
        assert words in output, output[-3000:]
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child), "a process the hanging test started outlived the run"
