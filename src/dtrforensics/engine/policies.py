"""Eviction policies: each is one `Policy`, a record declaring its score formula.

Every reference heuristic scores a storage as a ratio
`numerator / denominator` built from the same features (docs/semantics.md §7.2):
numerator terms `compute` (own), `fwd`/`bwd` (evicted-neighbourhood compute),
denominator factors `size` and `staleness`; LRU scores by last access instead.
The kernel evaluates the declared formula with the reference's exact rounding,
so adding a built-in policy is adding a `Policy` to POLICIES here. A policy can also come from
a file, `PATH.py:NAME` wherever a policy name is taken (engine/user_policy.py,
docs/policies.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import OptionError

if TYPE_CHECKING:   # numba compiles policy files: imported when one is named
    from .user_policy import CustomScore

# Layout of the int64 parameter vector the kernel reads. P_CUSTOM: scores come
# from a policy file's compiled function; P_MIN_SIZE: smaller storages are
# never candidates.
(P_COMPUTE, P_FWD, P_BWD, P_ONE, P_SIZE, P_STALENESS, P_LRU, P_REGIONS, P_FRESH, P_CUSTOM,
 P_MIN_SIZE) = range(11)
N_POLICY_PARAMS = 11


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
    custom: CustomScore | None = None   # a policy from a file

    @property
    def uses_regions(self) -> bool:
        """Whether the incremental neighbourhood bookkeeping is read."""
        return (self.fwd or self.bwd) and not self.fresh_neighbourhoods

    def params(self) -> np.ndarray:
        p = np.zeros(N_POLICY_PARAMS, dtype=np.int64)
        p[P_COMPUTE], p[P_FWD], p[P_BWD], p[P_ONE] = self.compute, self.fwd, self.bwd, self.one
        p[P_SIZE], p[P_STALENESS], p[P_LRU] = self.size, self.staleness, self.lru
        p[P_REGIONS], p[P_FRESH] = self.uses_regions, self.fresh_neighbourhoods
        if self.custom is not None:
            p[P_CUSTOM] = 1
            p[P_MIN_SIZE] = self.custom.definition.min_size
        return p

    def identity(self) -> tuple:
        """What makes two runs' policies the same: the name, the parameters and,
        for a policy from a file, the file's content."""
        source = self.custom.source_sha256 if self.custom is not None else ""
        return (self.name, self.params().tobytes(), source)

    def score_address(self) -> int:
        """Address of the compiled score the kernel calls (0 for a built-in:
        the kernel scores it itself)."""
        return self.custom.compiled.address if self.custom is not None else 0

    def locked_mask(self, program) -> np.ndarray:
        """Storages the policy never evicts, one byte per storage id (empty: none)."""
        if self.custom is None:
            return np.zeros(0, dtype=np.uint8)
        return self.custom.locked_mask(program)

    def formula(self) -> str:
        if self.custom is not None:
            d = self.custom.definition
            return f"{d.func.__name__}({', '.join(d.features)}) from {d.file}"
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
           fwd=True, bwd=True, size=True, staleness=True, fresh_neighbourhoods=True),
)}


def get_policy(name: str) -> Policy:
    """A built-in policy by name, or a policy from a file (`PATH.py:NAME`)."""
    if name in POLICIES:
        return POLICIES[name]
    from .user_policy import is_policy_file_spec
    if is_policy_file_spec(name):
        return policy_from_file(name)
    raise OptionError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}, "
                      "or PATH.py:NAME for a policy in a file")


def policy_from_file(spec: str) -> Policy:
    from .user_policy import load_policy
    custom = load_policy(spec)
    d = custom.definition
    nbhd = custom.reads_neighbourhoods
    return Policy(spec, d.doc.splitlines()[0] if d.doc else f"{d.func.__name__} from {d.file}",
                  compute=False, fwd=nbhd, bwd=nbhd,
                  fresh_neighbourhoods=nbhd and d.neighbourhoods == "fresh", custom=custom)


def policy_sources(names) -> dict[str, str]:
    """SHA-256 of the file of every policy from a file among `names` (what a
    stored sweep must still match to be resumed)."""
    return {name: get_policy(name).custom.source_sha256 for name in names
            if name not in POLICIES}
