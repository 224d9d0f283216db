"""Coop-style: DTR's score without its size term.

Coop (Zhang et al., 2023) argues that dividing by size makes DTR evict large
tensors in an order that fragments memory; its cost density drops the size
term. Here: (c + fwd + bwd) / staleness, DTR's `no-size` ablation.
"""

from dtrforensics.policy import policy, ratio


@policy
def no_size_term(compute, staleness):
    """(c + fwd + bwd) / staleness: cheap, stale storages first, whatever their size."""
    return ratio(compute, staleness)
