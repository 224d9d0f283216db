"""MegEngine-style minimum evictee size: small storages are never evicted.

MegEngine's DTR skips tensors below a minimum size (its `evictee_minimum_size`
option): evicting a small tensor frees little and costs a rematerialization
all the same. Candidates below the threshold are filtered out before DTR's
score is taken; everything else is DTR.
"""

from dtrforensics.policy import policy, ratio


@policy(min_size=1 << 20)
def dtr_min_1mib(compute, size, staleness):
    """DTR over storages of at least 1 MiB."""
    return ratio(compute, size, staleness)


@policy(min_size=1 << 16)
def dtr_min_64kib(compute, size, staleness):
    """DTR over storages of at least 64 KiB."""
    return ratio(compute, size, staleness)
