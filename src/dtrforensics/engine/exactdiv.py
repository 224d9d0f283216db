"""Correctly rounded `num / (a * b)` for integers, in float64, without big ints.

The reference scores with Python integers: the product `size * staleness` is
exact (often above 2**53) and the one division is correctly rounded. A float
product first would round twice and, rarely, give a different float, and one
different float can change a victim. We start from the cheap float quotient and
settle it exactly: the sign of `num - m * d` for a rounding midpoint `m` is
decided with error-free transformations (Dekker products, Shewchuk expansions).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit
from numba.core import cgutils, types
from numba.extending import intrinsic, overload

_SPLITTER = 134217729.0  # 2**27 + 1


@njit(cache=True, inline="always")
def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


@njit(cache=True, inline="always")
def _split(a):
    c = _SPLITTER * a
    hi = c - (c - a)
    return hi, a - hi


@njit(cache=True, inline="always")
def _two_prod(a, b):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def stack_floats8():
    """Work space of eight float64s: an array in plain Python; compiled, a
    pointer to eight slots of the calling function's stack frame. The kernel
    runs without numba's runtime (kernel.njit): nothing on its path allocates."""
    return np.empty(8, dtype=np.float64)


@intrinsic
def _alloca_floats8(typingctx):
    def codegen(context, builder, signature, args):
        return cgutils.alloca_once(builder, ir.DoubleType(), size=8)
    return types.CPointer(types.float64)(), codegen


@overload(stack_floats8, inline="always")  # inlined: the slots are the caller's own
def _stack_floats8_compiled():
    return lambda: _alloca_floats8()


@njit(cache=True, inline="always")
def _sign_of_sum(terms, n):
    """Exact sign of the sum of `terms[:n]`: grows an expansion in place (term i
    becomes component i), then reads its top nonzero component."""
    for i in range(1, n):
        q = terms[i]
        for j in range(i):
            q, h = _two_sum(q, terms[j])
            terms[j] = h
        terms[i] = q
    for j in range(n - 1, -1, -1):
        if terms[j] > 0.0:
            return 1
        if terms[j] < 0.0:
            return -1
    return 0


_FILTER = 16.0 * 2.0 ** -53  # bound on the float sum's error, relative to sum |terms|


@njit(cache=True)
def _residual_sign(n_hi, n_lo, d_hi, d_lo, a, h):
    """sign(num - (a + h) * d) exactly, with num = n_hi + n_lo, d = d_hi + d_lo.

    The terms are exact (Dekker products); their float sum decides the sign
    unless it is within its own error bound of zero, and only then is the
    exact expansion built (rare: a true tie or a near-tie)."""
    p1, e1 = _two_prod(a, d_hi)
    p2, e2 = _two_prod(a, d_lo)
    t6 = h * d_hi
    t7 = h * d_lo
    approx = (n_hi - p1) + n_lo - e1 - p2 - e2 - t6 - t7
    size = (abs(n_hi) + abs(p1) + abs(n_lo) + abs(e1) + abs(p2) + abs(e2) + abs(t6)
            + abs(t7))
    if abs(approx) > _FILTER * size:
        return 1 if approx > 0.0 else -1
    terms = stack_floats8()
    terms[0] = n_hi
    terms[1] = n_lo
    terms[2] = -p1
    terms[3] = -e1
    terms[4] = -p2
    terms[5] = -e2
    terms[6] = -t6
    terms[7] = -t7
    return _sign_of_sum(terms, 8)


@njit(cache=True, inline="always")
def _ulp(x):
    """Spacing of float64s just above positive normal x."""
    return math.ldexp(1.0, math.frexp(x)[1] - 53)


@njit(cache=True, inline="always")
def _next_down(x):
    m, e = math.frexp(x)
    return x - (math.ldexp(1.0, e - 54) if m == 0.5 else math.ldexp(1.0, e - 53))


@njit(cache=True)
def _is_even(x):
    return np.int64(x / _ulp(x)) % 2 == 0


@njit(cache=True)
def exact_ratio(num, a, b):
    """Correctly rounded float64 of num / (a * b); num, a, b >= 0 integers < 2**53,
    a * b > 0. Python's `num / (a * b)` on ints gives the same float."""
    fa = np.float64(a)
    fb = np.float64(b)
    if b == 1 or (a < 67108864 and b < 67108864):  # a*b < 2**52: exact in float64
        return np.float64(num) / (fa * fb)
    d_hi, d_lo = _two_prod(fa, fb)
    if d_lo == 0.0:
        return np.float64(num) / d_hi
    n_hi = np.float64(num)
    n_lo = np.float64(num - np.int64(n_hi))
    q = n_hi / d_hi
    if q == 0.0:
        return q
    for _ in range(8):
        up = q + _ulp(q)
        s_up = _residual_sign(n_hi, n_lo, d_hi, d_lo, q, (up - q) * 0.5)
        if s_up > 0:
            q = up
            continue
        if s_up == 0:
            return q if _is_even(q) else up
        down = _next_down(q)
        s_down = _residual_sign(n_hi, n_lo, d_hi, d_lo, q, (down - q) * 0.5)
        if s_down < 0:
            q = down
            continue
        if s_down == 0:
            return q if _is_even(q) else down
        return q
    return q
