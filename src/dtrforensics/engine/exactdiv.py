"""Correctly rounded `num / (a * b)` for integers, in float64, without big ints.

The reference scores with Python integers: the product `size * staleness` is
exact (often above 2**53) and the one division is correctly rounded. A float
product first would round twice and, rarely, give a different float, and one
different float can change a victim. We start from the cheap float quotient and
settle it exactly: the sign of `num - m * d` for a rounding midpoint `m` is
decided with error-free transformations (Dekker products, Shewchuk expansions).
"""

from __future__ import annotations

import numpy as np
from numba import njit

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


@njit(cache=True)
def _sign_of_sum(terms, n):
    """Exact sign of the sum of `terms[:n]` (grow an expansion, read its top)."""
    exp = np.empty(n, dtype=np.float64)
    m = 0
    for i in range(n):
        q = terms[i]
        for j in range(m):
            q, h = _two_sum(q, exp[j])
            exp[j] = h
        exp[m] = q
        m += 1
    for j in range(m - 1, -1, -1):
        if exp[j] > 0.0:
            return 1
        if exp[j] < 0.0:
            return -1
    return 0


@njit(cache=True)
def _residual_sign(n_hi, n_lo, d_hi, d_lo, a, h):
    """sign(num - (a + h) * d) exactly, with num = n_hi + n_lo, d = d_hi + d_lo."""
    terms = np.empty(8, dtype=np.float64)
    p1, e1 = _two_prod(a, d_hi)
    p2, e2 = _two_prod(a, d_lo)
    terms[0] = n_hi
    terms[1] = n_lo
    terms[2] = -p1
    terms[3] = -e1
    terms[4] = -p2
    terms[5] = -e2
    terms[6] = -(h * d_hi)
    terms[7] = -(h * d_lo)
    return _sign_of_sum(terms, 8)


@njit(cache=True)
def _is_even(x):
    return (np.int64(np.float64(x).view(np.int64)) & 1) == 0


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
        up = np.nextafter(q, np.inf)
        s_up = _residual_sign(n_hi, n_lo, d_hi, d_lo, q, (up - q) * 0.5)
        if s_up > 0:
            q = up
            continue
        if s_up == 0:
            return q if _is_even(q) else up
        down = np.nextafter(q, -np.inf)
        s_down = _residual_sign(n_hi, n_lo, d_hi, d_lo, q, (down - q) * 0.5)
        if s_down < 0:
            q = down
            continue
        if s_down == 0:
            return q if _is_even(q) else down
        return q
    return q
