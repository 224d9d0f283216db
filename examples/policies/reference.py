"""The reference simulator's heuristics written through the policy API.

Each makes exactly the decisions of the built-in policy of the same name
(`dtr`, `no-staleness`, `no-size`, `compute-only`, `lru`, `size`, `msps`,
`dtr-local`; the test suite checks it on every reference point): `ratio`
divides integers the way the reference does. Start your own policy from one.
"""

from dtrforensics.policy import policy, ratio


@policy
def dtr(compute, size, staleness):
    """DTR: (c + fwd + bwd) / (size * staleness)."""
    return ratio(compute, size, staleness)


@policy
def no_staleness(compute, size):
    """DTR without staleness: (c + fwd + bwd) / size."""
    return ratio(compute, size)


@policy
def no_size(compute, staleness):
    """DTR without size: (c + fwd + bwd) / staleness."""
    return ratio(compute, staleness)


@policy
def compute_only(compute):
    """DTR, compute only: c + fwd + bwd."""
    return float(compute)


@policy
def lru(last_access):
    """Least recently used: the oldest access is evicted first."""
    return float(last_access)


@policy
def size(size):
    """Largest storage first: 1 / size."""
    return ratio(1, size)


@policy
def msps(own_compute, bwd_compute, size):
    """MSPS: (c + bwd) / size."""
    return ratio(own_compute + bwd_compute, size)


@policy
def dtr_local(own_compute, size, staleness):
    """DTR without neighbourhoods: c / (size * staleness)."""
    return ratio(own_compute, size, staleness)
