"""Stopping a policy file's score that runs too long: `--timeout` and Ctrl-C
reach into its loops.

The driver looks at the wall clock between slices of the kernel, and Python
runs a signal handler only between bytecodes, so neither can stop a score
that loops inside one compiled call. So every loop of a policy's code checks
one process-wide cell (engine/score_check.py, engine/score_code.py): whether
to stop, the run's deadline, and the read end of a pipe into which Python's
own C-level signal handler writes the signal's number (`signal.set_wakeup_fd`).
A `ScoreWatch` arms the cell around each slice of a run. A stopped check
raises, the score's wrapper turns that into a fault, the kernel returns, and
the driver ends the run as a timeout, or Python's handler raises
`KeyboardInterrupt`. This module imports no numba: a replay without a policy
file never does.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np

(STOP, DEADLINE, WAKE_FD, COUNT, LAST_READ, TS_SECONDS, TS_NANOSECONDS, BYTE) = range(8)
RUNNING, TIMED_OUT, INTERRUPTED = 0, 1, 2
CHECK_EVERY = 1 << 12            # loop iterations between looks at the clock
READ_EVERY_NS = 5_000_000        # between reads of the signal pipe
NO_DEADLINE = np.iinfo(np.int64).max

CELL = np.zeros(8, dtype=np.int64)
CELL[DEADLINE] = NO_DEADLINE
CELL[WAKE_FD] = -1
CELL_ADDRESS = CELL.ctypes.data
CLOCK = getattr(time, "CLOCK_MONOTONIC", 1)


class _WakePipe:
    """The pipe Python's signal handler writes into while a watched slice runs:
    one per process (a forked child makes its own)."""

    fds: tuple[int, int] | None = None

    @classmethod
    def get(cls) -> tuple[int, int]:
        if cls.fds is None:
            read_end, write_end = os.pipe()
            os.set_blocking(read_end, False)
            os.set_blocking(write_end, False)
            cls.fds = (read_end, write_end)
        return cls.fds

    @classmethod
    def forget(cls) -> None:
        if cls.fds is not None:
            for fd in cls.fds:
                os.close(fd)
        cls.fds = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WakePipe.forget)


class ScoreWatch:
    """The watch over one run's score: `call` runs a kernel slice with the
    watch armed; `stopped` says whether a loop of the score was stopped (the
    run's result is then a timeout). A no-op for policies with no loop."""

    def __init__(self, watched: bool, started: float, timeout: float | None):
        self.watched = watched
        self.deadline = NO_DEADLINE
        if watched and timeout is not None:
            # The time spent is read before the clock, so the deadline is never
            # earlier than `started + timeout`.
            left = max(0.0, (timeout - (time.perf_counter() - started)) * 1e9)
            now = time.clock_gettime_ns(CLOCK)
            if left < NO_DEADLINE - now:              # else: later than an int64 can say
                self.deadline = now + int(left)
        self.stopped = False

    @classmethod
    def for_policy(cls, policy, started: float, timeout: float | None) -> ScoreWatch:
        custom = policy.custom
        return cls(custom is not None and custom.watched, started, timeout)

    def call(self, kernel_function, *args):
        """`kernel_function(*args)` with the watch armed. After a Ctrl-C,
        Python's handler raises KeyboardInterrupt as soon as Python code runs
        again; a handler that does not raise still ends the run here."""
        if not self.watched:
            return kernel_function(*args)
        wake = self._arm()
        try:
            return kernel_function(*args)
        finally:
            cause = int(CELL[STOP])
            self.stopped = cause != RUNNING
            self._disarm(wake, cause)

    def _arm(self) -> int | None:
        """Reset the cell, set the deadline, and take the wake-up fd when this is
        the main thread and no one else holds it (an event loop keeps its own)."""
        CELL[STOP], CELL[COUNT], CELL[LAST_READ] = RUNNING, 0, 0
        CELL[DEADLINE], CELL[WAKE_FD] = self.deadline, -1
        if threading.current_thread() is not threading.main_thread():
            return None
        read_end, write_end = _WakePipe.get()
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        if previous not in (-1, write_end):
            signal.set_wakeup_fd(previous)
            return None
        CELL[WAKE_FD] = read_end
        return read_end

    @staticmethod
    def _disarm(wake: int | None, cause: int) -> None:
        """Give the wake-up fd back and empty the pipe (an interrupted disarm
        leaves both to the next `_arm`, which takes them over)."""
        CELL[STOP], CELL[DEADLINE], CELL[WAKE_FD] = RUNNING, NO_DEADLINE, -1
        if wake is not None:
            signal.set_wakeup_fd(-1)
            try:
                while os.read(wake, 512):
                    pass
            except BlockingIOError:
                pass
        if cause == INTERRUPTED:
            raise KeyboardInterrupt
