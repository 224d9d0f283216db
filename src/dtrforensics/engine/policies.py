"""Eviction policies: each is one small class declaring its score formula.

Every reference heuristic scores a storage as a ratio
`numerator / denominator` built from the same features (docs/semantics.md §7.2):
numerator terms `compute` (own), `fwd`/`bwd` (evicted-neighbourhood compute),
denominator factors `size` and `staleness`; LRU scores by last access instead.
The kernel evaluates the declared formula with the reference's exact rounding,
so adding a policy is adding a class here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import OptionError

# Layout of the int64 parameter vector the kernel reads.
P_COMPUTE, P_FWD, P_BWD, P_ONE, P_SIZE, P_STALENESS, P_LRU, P_REGIONS, P_FRESH = range(9)
N_POLICY_PARAMS = 9


@dataclass(frozen=True)
class Policy:
    name: str
    doc: str
    compute: bool = True
    fwd: bool = False
    bwd: bool = False
    one: bool = False          # numerator is the constant 1 (size-only policies)
    size: bool = False
    staleness: bool = False
    lru: bool = False          # score = last access time
    fresh_neighbourhoods: bool = False
    reference_compatible: bool = True

    @property
    def uses_regions(self) -> bool:
        """Whether the incremental neighbourhood bookkeeping is read."""
        return (self.fwd or self.bwd) and not self.fresh_neighbourhoods

    def params(self) -> np.ndarray:
        p = np.zeros(N_POLICY_PARAMS, dtype=np.int64)
        p[P_COMPUTE], p[P_FWD], p[P_BWD], p[P_ONE] = self.compute, self.fwd, self.bwd, self.one
        p[P_SIZE], p[P_STALENESS], p[P_LRU] = self.size, self.staleness, self.lru
        p[P_REGIONS], p[P_FRESH] = self.uses_regions, self.fresh_neighbourhoods
        return p

    def formula(self) -> str:
        if self.lru:
            return "last_access"
        terms = [t for t, on in (("c", self.compute), ("fwd", self.fwd), ("bwd", self.bwd)) if on]
        num = "1" if self.one else " + ".join(terms)
        den = " * ".join(f for f, on in (("size", self.size), ("staleness", self.staleness)) if on)
        return f"({num}) / ({den})" if den else f"{num}"


POLICIES: dict[str, Policy] = {p.name: p for p in (
    Policy("dtr", "DTR: (c + fwd + bwd) / (size * staleness), incremental neighbourhoods",
           fwd=True, bwd=True, size=True, staleness=True),
    Policy("no-staleness", "DTR ablation without staleness: (c + fwd + bwd) / size",
           fwd=True, bwd=True, size=True),
    Policy("no-size", "DTR ablation without size: (c + fwd + bwd) / staleness",
           fwd=True, bwd=True, staleness=True),
    Policy("compute-only", "DTR ablation, compute only: c + fwd + bwd", fwd=True, bwd=True),
    Policy("lru", "least recently used: last access time", compute=False, lru=True),
    Policy("size", "largest storage first: 1 / size", compute=False, one=True, size=True),
    Policy("msps", "MSPS: (c + bwd) / size", bwd=True, size=True),
    Policy("dtr-local", "DTR without neighbourhoods: c / (size * staleness)",
           size=True, staleness=True),
    Policy("dtr-exact-nbhd",
           "research variant: DTR with exact, from-scratch evicted neighbourhoods at every "
           "score (not reference-compatible: the reference's incremental neighbourhoods "
           "can be stale)",
           fwd=True, bwd=True, size=True, staleness=True, fresh_neighbourhoods=True,
           reference_compatible=False),
)}


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise OptionError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None
