"""DTR and its three ablations written through the policy API.

These make exactly the decisions of the built-in `dtr`, `no-staleness`,
`no-size` and `compute-only` (the test suite checks it on every reference
point): `ratio` divides integers the way the reference does.
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
