"""Knobs production DTR runtimes offer, written as policies for the findings' hole maps.

Loaded as a policy file (`PATH.py:NAME`, docs/policies.md), never imported by
the package. MegEngine's DTR never evicts a tensor below its
`evictee_minimum_size` (1 MiB in its documentation's example): evicting a
small tensor frees little and costs a rematerialization all the same.
"""

from dtrforensics.engine.user_policy import policy, ratio


@policy(min_size=1 << 20)
def dtr_min_1mib(compute, size, staleness):
    """DTR over storages of at least 1 MiB (MegEngine's minimum evictee size)."""
    return ratio(compute, size, staleness)
