"""No test may hang the suite, nor leave a process behind (a pytest plugin,
loaded by conftest.py).

pytest-timeout's thread method (pyproject: `timeout`) dumps every thread's
stack and ends the run, but only if its timer thread can run: a hang inside
compiled code that holds the GIL (a numba loop, a C call) keeps it waiting
for ever. And `os._exit` leaves the processes a test started running, holding
the CI log's pipe open. So:

- the timer is ours: on expiry it kills every process the run started
  (pytest is a child subreaper, so orphans of its children stay its
  descendants), then lets pytest-timeout dump the stacks and exit;
- a watchdog process, told each test's deadline, sends SIGABRT when the run
  is still there `GRACE` seconds later: faulthandler (which pytest enables)
  prints every thread's stack without needing the GIL and the run ends; the
  watchdog then kills what the run started;
- if the run ends any other way (a crash), the watchdog kills what it last
  saw the run had started; at a normal end, pytest kills its leftovers itself.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

GRACE = float(os.environ.get("DTRF_TEST_HANG_GRACE", "60"))
PR_SET_CHILD_SUBREAPER = 36      # linux/prctl.h
_PROC = Path("/proc")


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (Linux /proc; empty elsewhere)."""
    found = {}
    for entry in _PROC.glob("[0-9]*/stat") if _PROC.is_dir() else ():
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        found[int(entry.parent.name)] = int(fields[1])
    return found


def alive(pid: int) -> bool:
    """Whether `pid` is a process that has not ended (a zombie has)."""
    try:
        state = (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def descendants(root: int, spare: tuple[int, ...] = ()) -> list[int]:
    """Every process below `root`, children before their own children; the
    processes in `spare` and everything below them are left out."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    order, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in spare:
                order.append(child)
                todo.append(child)
    return order


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class _Watchdog:
    """A forked process, told each test's deadline through a pipe."""

    def __init__(self):
        self.run_pid = os.getpid()
        read_end, self.pipe = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:                                 # pragma: no cover - the watchdog
            os.close(self.pipe)
            try:
                self._watch(read_end)
            finally:
                os._exit(0)
        os.close(read_end)

    def tell(self, message: str) -> None:
        try:
            os.write(self.pipe, message.encode() + b"\n")
        except OSError:
            pass

    def _watch(self, read_end: int) -> None:               # pragma: no cover - the watchdog
        import select
        signal.signal(signal.SIGINT, signal.SIG_IGN)       # Ctrl-C is the run's to handle
        deadline, seen, buffer, done = None, [], b"", False
        while True:
            wait = 2.0 if deadline is None else max(0.0, min(2.0, deadline - time.monotonic()))
            if select.select([read_end], [], [], wait)[0]:
                data = os.read(read_end, 4096)
                if not data:
                    break
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    word, _, value = line.decode().partition(" ")
                    deadline = time.monotonic() + float(value) + GRACE if word == "arm" else None
                    done |= word == "done"
            seen = descendants(self.run_pid, spare=(os.getpid(),)) or seen
            if deadline is not None and time.monotonic() >= deadline:
                sys.stderr.write(f"\nhang_guard: the run is still there {GRACE:g} s past its "
                                 "test's timeout (compiled code holding the GIL?): SIGABRT, "
                                 "faulthandler prints every thread's stack\n")
                sys.stderr.flush()
                kill_all(seen)
                os.kill(self.run_pid, signal.SIGABRT)
                deadline = None
        if not done:
            kill_all(seen)


_watchdog: _Watchdog | None = None


def pytest_configure(config):
    global _watchdog
    if not _PROC.is_dir() or config.getoption("timeout", None) == 0:
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    _watchdog = _Watchdog()


def pytest_unconfigure(config):
    """The run is over: whatever it started and left running goes too."""
    if _watchdog is None or os.getpid() != _watchdog.run_pid:
        return
    kill_all(descendants(os.getpid(), spare=(_watchdog.pid,)))
    _watchdog.tell("done")
    os.close(_watchdog.pipe)
    os.waitpid(_watchdog.pid, 0)


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item, settings):
    if settings.method != "thread" or _watchdog is None:
        return None                                        # pytest-timeout's own
    import pytest_timeout

    def expire():
        kill_all(descendants(os.getpid(), spare=(_watchdog.pid,)))
        pytest_timeout.timeout_timer(item, settings)       # every thread's stack, os._exit(1)

    timer = threading.Timer(settings.timeout, expire)
    timer.name = f"hang_guard {item.nodeid}"
    _watchdog.tell(f"arm {settings.timeout}")

    def cancel():
        timer.cancel()
        timer.join()
        _watchdog.tell("disarm")

    item.cancel_timeout = cancel
    timer.start()
    return True
