"""Bitsets over storage ids for the compiled kernel: rows of uint64 words,
and the compiler settings every kernel module shares (`njit`).

Bit scans compile to single instructions (cttz, ctpop); run as plain Python
(`NUMBA_DISABLE_JIT=1`) they are the obvious loops.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
from numba import njit as numba_njit
from numba.core import types
from numba.cpython.unsafe.numbers import leading_zeros, trailing_zeros
from numba.extending import intrinsic, overload

from . import native


def njit(*args, **options):
    """numba's njit without its runtime's reference counting. The kernel never
    allocates (every array comes from the driver, which owns it), and counting
    references cost atomic operations on every call that passes the graph or
    the regions (a third of a small trace's replay).

    A cached function is keyed by every source of the kernel (`engine_stamp`),
    not by its own file alone as numba keys it: the kernel's functions inline
    each other across modules, so a change to one module (regions.py, say)
    must recompile the functions of the others that carry a copy of its code;
    otherwise numba's cache would give them their old copy.

    A function called from the kernel, not inlined, is compiled for its
    arguments' types without literals (`_one_typing`)."""
    jit = numba_njit(*args, _nrt=False, **options)
    if not options.get("cache"):
        return jit

    def decorate(fn):
        dispatcher = jit(fn)
        index = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
        if index is not None:   # none under NUMBA_DISABLE_JIT
            index._source_stamp = engine_stamp()
            if options.get("inline", "never") == "never":
                _one_typing(dispatcher)
        return dispatcher
    return decorate


def _one_typing(dispatcher) -> None:
    """Have numba type a call of `dispatcher` from compiled code with its
    arguments' literal types widened (`Literal[int](0)` to int64). numba's type
    inference asks for a callee's type with the literal types a call's
    arguments have at first, a constant's or a loop variable's before the loop
    widens it, and compiled the callee anew for each: 13 of the kernel's
    functions twice to four times over, 18 compiles too many, for copies
    that mostly went unused. The literal's value is the same int64 either
    way, and the machine code the same (a replay's instructions counted)."""
    typed = dispatcher.get_call_template

    def get_call_template(args, kws):
        return typed(tuple(types.unliteral(a) for a in args),
                     {k: types.unliteral(v) for k, v in kws.items()})
    dispatcher.get_call_template = get_call_template


@functools.cache
def engine_stamp(engine: Path | None = None) -> str:
    """The kernel's sources' hash (native.sources_stamp), once per process."""
    return native.sources_stamp(engine)


@njit(cache=True, inline="always")
def in_bits(bits, slot, x):
    """Whether x is in row `slot` of `bits`."""
    return (bits[slot, x >> 6] >> np.uint64(x & 63)) & np.uint64(1) != 0


@njit(cache=True, inline="always")
def set_bit(bits, slot, x):
    bits[slot, x >> 6] |= np.uint64(1) << np.uint64(x & 63)


@njit(cache=True, inline="always")
def clear_bit(bits, slot, x):
    bits[slot, x >> 6] &= ~(np.uint64(1) << np.uint64(x & 63))


def lowest_bit(x):
    """Index of the lowest set bit of a nonzero uint64 (cttz when compiled)."""
    x = int(x)
    return (x & -x).bit_length() - 1


@overload(lowest_bit)
def _lowest_bit_compiled(x):
    return lambda x: np.int64(trailing_zeros(x))


def highest_bit(x):
    """Index of the highest set bit of a nonzero uint64 (ctlz when compiled)."""
    return int(x).bit_length() - 1


@overload(highest_bit)
def _highest_bit_compiled(x):
    return lambda x: np.int64(63 - leading_zeros(x))


def popcount(x):
    """Number of set bits of a uint64 (ctpop when compiled)."""
    return bin(int(x)).count("1")


@intrinsic
def _ctpop(typingctx, x):
    """LLVM's population count of a uint64."""
    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])
    return types.uint64(types.uint64), codegen


@overload(popcount)
def _popcount_compiled(x):
    return lambda x: np.int64(_ctpop(x))


@njit(cache=True, inline="always")
def pop_lowest(b):
    """(index of the lowest set bit of nonzero word b, b without that bit): one
    step of a scan over a word's members, `while b: j, b = pop_lowest(b)`."""
    return lowest_bit(b), b & (b - np.uint64(1))


@njit(cache=True, inline="always")
def pop_next(b, downward):
    """`pop_lowest`, or with `downward` its mirror: (index of the highest set
    bit of nonzero word b, b without that bit)."""
    if downward:
        j = highest_bit(b)
        return j, b & ~(np.uint64(1) << np.uint64(j))
    return pop_lowest(b)


@njit(cache=True, inline="always")
def bits_list(bits, words, out):
    """The members of a bitset, in increasing order, into `out`; returns how many."""
    return bits_list_range(bits, 0, words - 1, out)


@njit(cache=True, inline="always")
def bits_count_range(bits, lo_w, hi_w):
    """The number of members of a bitset whose words outside [lo_w, hi_w] are zero."""
    n = 0
    for w in range(lo_w, hi_w + 1):
        n += popcount(bits[w])
    return n


@njit(cache=True, inline="always")
def bits_list_range(bits, lo_w, hi_w, out):
    """`bits_list` of a bitset whose words outside [lo_w, hi_w] are zero."""
    n = 0
    for w in range(lo_w, hi_w + 1):
        b = bits[w]
        while b:
            j, b = pop_lowest(b)
            out[n] = w * 64 + j
            n += 1
    return n


@njit(cache=True, inline="always")
def bits_compute(bits, st_compute, words):
    """The summed compute of a bitset's members."""
    comp = 0
    for w in range(words):
        b = bits[w]
        while b:
            j, b = pop_lowest(b)
            comp += st_compute[w * 64 + j]
    return comp
