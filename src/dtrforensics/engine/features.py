"""What a policy from a file may read about an eviction candidate (docs/policies.md).

A score function names the features it reads as its parameters; the kernel
calls every score with all of them, in this order, as int64 values read at
the moment the candidate is scored: during the scan of the pool at one
eviction decision (semantics.md §7.1), after the allocation check found that
the request does not fit and before anything is evicted for it.
"""

from __future__ import annotations

from typing import NamedTuple


class Feature(NamedTuple):
    name: str
    doc: str


FEATURES: tuple[Feature, ...] = (
    Feature("compute", "DTR's compute: own_compute + fwd_compute + bwd_compute (§7.2)."),
    Feature("own_compute", "The storage's own compute: the cost of every distinct op that "
            "wrote it (§5.1)."),
    Feature("fwd_compute", "Compute of its forward evicted neighbourhood (§8), as the "
            "policy's neighbourhood mode keeps it."),
    Feature("bwd_compute", "Compute of its backward evicted neighbourhood (§8)."),
    Feature("size", "Bytes of the storage."),
    Feature("staleness", "clock - last_access (0 if touched at this very clock)."),
    Feature("last_access", "Clock of the storage's last access (§6.1)."),
    Feature("clock", "The current clock (§4.3)."),
    Feature("times_evicted", "How often this storage was evicted by earlier decisions of this "
            "run (pressure evictions; dead frees do not count)."),
    Feature("backward", "1 if the op that made the storage runs in the backward pass (from "
            "the trace's first op whose name contains 'backward' on), else 0."),
    Feature("depth", "Current nesting depth of rematerialization (1 = the op being run)."),
    Feature("pinned_bytes", "Resident bytes that are not candidates now (locked by the "
            "chain being materialized or pinned for good)."),
    Feature("memory", "Resident bytes now."),
    Feature("request", "Bytes the op being materialized needs (the failed check's request)."),
    Feature("storage", "The candidate's storage id."),
    Feature("decision", "The decision's number: evictions so far in this run (0-based)."),
    Feature("position", "The candidate's position in the pool scan (0-based; filtered "
            "storages are skipped and not counted)."),
    Feature("pool_size", "Storages in the pool at this decision, before filtering."),
)
# Where each feature sits in the kernel's call (and in a fault's probe vector).
(FT_COMPUTE, FT_OWN_COMPUTE, FT_FWD_COMPUTE, FT_BWD_COMPUTE, FT_SIZE, FT_STALENESS,
 FT_LAST_ACCESS, FT_CLOCK, FT_TIMES_EVICTED, FT_BACKWARD, FT_DEPTH, FT_PINNED_BYTES, FT_MEMORY,
 FT_REQUEST, FT_STORAGE, FT_DECISION, FT_POSITION, FT_POOL_SIZE) = range(18)
N_FEATURES = len(FEATURES)
FEATURE_NAMES: tuple[str, ...] = tuple(f.name for f in FEATURES)
NEIGHBOURHOOD_FEATURES = frozenset({"compute", "fwd_compute", "bwd_compute"})
HISTORY_FEATURES = frozenset({"times_evicted", "decision"})
