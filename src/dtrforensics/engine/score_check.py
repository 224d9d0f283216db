"""The check compiled at the top of every loop of a policy's code
(engine/score_code.py): it raises when the run's watch (engine/score_watch.py)
says stop, and otherwise, every `CHECK_EVERY` iterations, reads the monotonic
clock against the deadline and, at most every `READ_EVERY_NS`, the pipe
Python's signal handler writes into. The cell is read and written through its
address with atomic loads and stores, and the clock and the pipe through libc
by address: the check needs neither the GIL nor a thread, and works the same
under the numba kernel and the native library. Compiled per process, never
cached: the addresses are this process's.
"""

from __future__ import annotations

import ctypes
import signal
import time

from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

from .score_watch import (
    BYTE,
    CELL,
    CELL_ADDRESS,
    CHECK_EVERY,
    CLOCK,
    COUNT,
    DEADLINE,
    INTERRUPTED,
    LAST_READ,
    READ_EVERY_NS,
    RUNNING,
    STOP,
    TIMED_OUT,
    TS_NANOSECONDS,
    TS_SECONDS,
    WAKE_FD,
)


def _libc_address(name: str) -> int:
    try:
        return ctypes.cast(getattr(ctypes.CDLL(None), name), ctypes.c_void_p).value or 0
    except (OSError, AttributeError):
        return 0


_CLOCK_GETTIME = _libc_address("clock_gettime")
_READ = _libc_address("read")
_SIGINT = int(signal.SIGINT)


# The cell's slots by address: constants of the compiled code.
_STOP_AT, _DEADLINE_AT, _WAKE_FD_AT = (CELL_ADDRESS + 8 * k for k in (STOP, DEADLINE, WAKE_FD))
_COUNT_AT, _LAST_READ_AT, _BYTE_AT = (CELL_ADDRESS + 8 * k for k in (COUNT, LAST_READ, BYTE))
_SECONDS_AT, _NANOSECONDS_AT = (CELL_ADDRESS + 8 * k for k in (TS_SECONDS, TS_NANOSECONDS))


@intrinsic
def _load(typingctx, address):
    """The int64 at `address`, read anew at every call (an atomic load the
    optimizer may not hoist out of a loop)."""
    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        return builder.load_atomic(pointer, "monotonic", 8)
    return types.int64(types.int64), codegen


@intrinsic
def _store(typingctx, address, value):
    def codegen(context, builder, signature, args):
        pointer = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        builder.store_atomic(args[1], pointer, "monotonic", 8)
        return context.get_dummy_value()
    return types.none(types.int64, types.int64), codegen


@intrinsic
def _c_clock_gettime(typingctx, function, clock, timespec):
    """`clock_gettime(clock, timespec)` through the C function at `function`."""
    def codegen(context, builder, signature, args):
        i32, pointer = ir.IntType(32), ir.IntType(8).as_pointer()
        c_type = ir.FunctionType(i32, [i32, pointer])
        target = builder.inttoptr(args[0], c_type.as_pointer())
        result = builder.call(target, [builder.trunc(args[1], i32),
                                       builder.inttoptr(args[2], pointer)])
        return builder.sext(result, ir.IntType(64))
    return types.int64(types.int64, types.int64, types.int64), codegen


@intrinsic
def _c_read(typingctx, function, fd, buffer, count):
    """`read(fd, buffer, count)` through the C function at `function`."""
    def codegen(context, builder, signature, args):
        i32, i64, pointer = ir.IntType(32), ir.IntType(64), ir.IntType(8).as_pointer()
        c_type = ir.FunctionType(i64, [i32, pointer, i64])
        target = builder.inttoptr(args[0], c_type.as_pointer())
        return builder.call(target, [builder.trunc(args[1], i32),
                                     builder.inttoptr(args[2], pointer), args[3]])
    return types.int64(types.int64, types.int64, types.int64, types.int64), codegen


@njit(no_cpython_wrapper=True)
def _look() -> int:
    """The slow path: the clock against the deadline, then the signal pipe."""
    if _CLOCK_GETTIME != 0:
        _c_clock_gettime(_CLOCK_GETTIME, CLOCK, _SECONDS_AT)
        now = _load(_SECONDS_AT) * 1_000_000_000 + _load(_NANOSECONDS_AT)
        if now >= _load(_DEADLINE_AT):
            _store(_STOP_AT, TIMED_OUT)
            return TIMED_OUT
        fd = _load(_WAKE_FD_AT)
        if fd < 0 or _READ == 0 or now - _load(_LAST_READ_AT) < READ_EVERY_NS:
            return RUNNING
        _store(_LAST_READ_AT, now)
        while _c_read(_READ, fd, _BYTE_AT, 1) == 1:
            if _load(_BYTE_AT) & 0xFF == _SIGINT:
                _store(_STOP_AT, INTERRUPTED)
                return INTERRUPTED
    return RUNNING


def check() -> None:
    """Raise if the run's watch says stop (called at the top of every loop of a
    policy's code). Uncompiled (NUMBA_DISABLE_JIT=1), Python itself raises
    KeyboardInterrupt inside the loop, so only the deadline is looked at."""
    if CELL[STOP] == RUNNING and time.clock_gettime_ns(CLOCK) >= CELL[DEADLINE]:
        CELL[STOP] = TIMED_OUT
    if CELL[STOP] != RUNNING:
        raise RuntimeError("the score was stopped (--timeout or Ctrl-C)")


@overload(check)
def _check_compiled():
    def compiled_check():
        if _load(_STOP_AT) == RUNNING:
            n = _load(_COUNT_AT) + 1
            _store(_COUNT_AT, n)
            if n & (CHECK_EVERY - 1) != 0 or _look() == RUNNING:
                return
        raise RuntimeError("the score was stopped (--timeout or Ctrl-C)")
    return compiled_check
