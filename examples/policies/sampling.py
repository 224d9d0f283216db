"""MegEngine-style sqrt sampling, seeded: score a random sqrt(n) of the pool.

MegEngine's DTR can score only a random sample of about sqrt(n) of the n
evictable tensors at each eviction, trading decision quality for speed. Here
each candidate is kept with probability sqrt(n)/n by a hash of (seed,
decision, storage): the same run always samples the same candidates, so
every result reproduces. An unsampled candidate scores +inf; when no
candidate is sampled the scan's rule for all-infinite scores picks the last
pool entry.
"""

import math

from numba import njit

from dtrforensics.policy import policy, ratio

SEED = 20231116


@njit
def _mix(x):
    """splitmix64's finalizer: a well-spread 64-bit hash of x."""
    z = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


@njit
def sampled(decision, storage, pool_size):
    """Whether this candidate is in this decision's sample of ~sqrt(pool_size)."""
    h = _mix(_mix(SEED * 1000003 + decision) + storage)
    keep = int(math.sqrt(pool_size))
    return h % pool_size < keep if pool_size > 0 else False


@policy
def dtr_sqrt_sampled(compute, size, staleness, decision, storage, pool_size):
    """DTR over a seeded sample of about sqrt(n) candidates."""
    if not sampled(decision, storage, pool_size):
        return math.inf
    return ratio(compute, size, staleness)
