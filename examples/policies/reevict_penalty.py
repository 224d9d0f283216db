"""A penalty on storages evicted many times, against DTR's slow regime.

In the LSTM's slow regime a few thousand storages are evicted, rematerialized
and evicted again, 8.27 times each on average at ratio 0.264 against 1.33 at
0.265. Multiplying DTR's score by (1 + k x times evicted) makes a storage that
keeps coming back ever more expensive to evict again.
"""

from dtrforensics.policy import policy, ratio


@policy
def dtr_reevict_penalty(compute, size, staleness, times_evicted):
    """DTR x (1 + times evicted)."""
    return ratio(compute, size, staleness) * (1.0 + times_evicted)


@policy
def dtr_reevict_penalty_strong(compute, size, staleness, times_evicted):
    """DTR x (1 + times evicted)^2."""
    return ratio(compute, size, staleness) * (1.0 + times_evicted) ** 2
