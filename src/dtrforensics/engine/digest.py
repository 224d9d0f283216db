"""A digest of everything between two top-level commands that decides the rest of a run.

Two runs whose states have the same digest at the same command boundary make
the same steps from there on (as long as their budgets admit the same
comparisons). Left out, because they do not steer the run: additive counters,
running maxima, the budget certificate (all handled by the caller), and the
layout of the state (where sets sit in the arena, which set has a bitset, mark
epochs, the stream buffer). A set is digested by its distinct members in any
order (a bitset-indexed set by its bitset: digests only ever miss a meeting,
never invent one, up to hash collisions of 128 bits).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import layout as L

# Scalars that steer the run (counters and maxima are compared by the caller).
STEERING = np.array(L.STEERING, dtype=np.int64)
ROWS = L.R_IN_POOL + 1  # defined .. in_pool of layout.STATE_ROWS; the pool links are
                        # digested as an order

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xC2B2AE3D27D4EB4F)


@njit(cache=True, inline="always")
def _mix(h, x):
    h ^= np.uint64(x) + _M1 + (h << np.uint64(6)) + (h >> np.uint64(2))
    return h * _M2


@njit(cache=True, inline="always")
def _scramble(x):
    z = np.uint64(x) * _M1
    z ^= z >> np.uint64(31)
    return z * _M2


@njit(cache=True)
def _digest(sc, steering, st, n_rows, rg, seen):
    h1 = np.uint64(1)
    h2 = np.uint64(7)
    for i in range(steering.shape[0]):
        h1 = _mix(h1, sc[steering[i]])
    for r in range(n_rows):
        row = st[r]
        for i in range(row.shape[0]):
            h1 = _mix(h1, row[i])
            h2 = _mix(h2, row[i] + r)
    s = sc[L.S_POOL_HEAD]
    while s != -1:
        h2 = _mix(h2, s)
        s = st[L.R_POOL_NEXT, s]
    n_sets = rg.start.shape[0]
    for k in range(n_sets):
        if k < rg.n_regions:
            h2 = _mix(h2, rg.compute[k])
        slot = rg.bit_slot[k]
        if slot >= 0:
            h1 = _mix(h1, -1 - k)
            words = rg.bits[slot]
            for w in range(words.shape[0]):
                h1 = _mix(h1, words[w])
            continue
        # distinct members, in any order: a sum of scrambled ids
        total = np.uint64(0)
        count = 0
        base = rg.start[k]
        for i in range(rg.len[k]):
            x = rg.arena[base + i]
            if seen[x] != k + 1:
                seen[x] = k + 1
                total += _scramble(x)
                count += 1
        h2 = _mix(_mix(h2, count), total)
    return h1, h2


def state_digest(state) -> tuple[int, int]:
    """The digest of a machine state at a top-level command boundary."""
    seen = np.zeros(state.st.shape[1], dtype=np.int64)
    h1, h2 = _digest(state.sc, STEERING, state.st, ROWS, state.regions, seen)
    return int(h1), int(h2)
