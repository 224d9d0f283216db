"""The observer interface: the only door between the engine and its consumers.

The kernel writes events into a preallocated buffer (only when an observer is
attached, so an unobserved replay pays nothing) and the driver hands them to
observers in batches, in `seq` order. Each event carries the state it was
taken in (clock, depth, memory, pool bytes), so observers never read live
engine state.

When each kind fires, relative to the state change:
- `materialize`: a materialization starts (depth already includes it), before
  its parents are locked or rematerialized.
- `alloc_check`: the allocation check of a materialization, after every parent
  is resident and locked, before anything is freed. `bytes` = request,
  `flag` = 1 when memory must be freed.
- `evict`: a pressure eviction, after the victim was chosen and before it is
  evicted (`memory` and pool still include it). `tensor_id` = the tensor being
  materialized, `storage_id`/`bytes` = the victim, `request` = the allocation,
  `decision` = its index, `runner_up` = runner-up storage (-1 if none), the
  victim's score components, `score`/`runner_up_score` in the float columns.
- `free_dead`: an eager (dead) eviction, before the storage is freed.
- `compute`: after an op ran (clock advanced, memory grown). `flag` bit 0 =
  rematerialization, bit 1 = collateral (a sibling output; no cost).
- `pin`: a storage was pinned.
- `oom`: the failed allocation: `bytes` = `request`, `memory` = the memory in
  use: the pinned bytes when the pool is empty, more when a policy's filters
  or the interventions left no candidate in it (`pool_bytes`, `pool_size`
  say what it holds). The full frontier goes to `Observer.on_oom`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EV_MATERIALIZE, EV_ALLOC_CHECK, EV_EVICT, EV_FREE_DEAD, EV_COMPUTE, EV_PIN, EV_OOM = range(7)
EVENT_KINDS = ("materialize", "alloc_check", "evict", "free_dead", "compute", "pin", "oom")

# Integer event columns.
(E_KIND, E_OP, E_CLOCK, E_DEPTH, E_TENSOR, E_STORAGE, E_BYTES, E_MEMORY, E_POOL_BYTES,
 E_POOL_SIZE, E_REQUEST, E_DECISION, E_FLAG, E_RUNNER, E_COMPUTE, E_FWD, E_BWD,
 E_STALENESS, E_COST) = range(19)
N_EVENT_COLUMNS = 19
EVENT_COLUMNS = ("kind", "op_id", "clock", "depth", "tensor_id", "storage_id", "bytes",
                 "memory", "pool_bytes", "pool_size", "request", "decision", "flag",
                 "runner_up", "compute", "fwd_compute", "bwd_compute", "staleness", "cost")
# Float event columns.
F_SCORE, F_RUNNER_SCORE = range(2)
N_EVENT_FLOAT_COLUMNS = 2
EVENT_FLOAT_COLUMNS = ("score", "runner_up_score")

FLAG_REMAT = 1
FLAG_COLLATERAL = 2

# Candidate columns (one row per storage scored at a decision, with scores=all).
(C_DECISION, C_STORAGE, C_POSITION, C_COMPUTE, C_FWD, C_BWD, C_SIZE, C_STALENESS) = range(8)
N_CANDIDATE_COLUMNS = 8
CANDIDATE_COLUMNS = ("decision", "storage_id", "position", "compute", "fwd_compute",
                     "bwd_compute", "size", "staleness")


@dataclass(frozen=True)
class EventBatch:
    """Consecutive events; `first_seq` is the seq of row 0. Arrays are views of
    the engine's buffer, valid only during the callback: copy what you keep."""

    first_seq: int
    ints: np.ndarray     # (n, N_EVENT_COLUMNS) int64
    floats: np.ndarray   # (n, N_EVENT_FLOAT_COLUMNS) float64

    def __len__(self) -> int:
        return len(self.ints)

    def column(self, name: str) -> np.ndarray:
        if name == "seq":
            return np.arange(self.first_seq, self.first_seq + len(self), dtype=np.int64)
        if name in EVENT_FLOAT_COLUMNS:
            return self.floats[:, EVENT_FLOAT_COLUMNS.index(name)]
        return self.ints[:, EVENT_COLUMNS.index(name)]


@dataclass(frozen=True)
class CandidateBatch:
    ints: np.ndarray     # (n, N_CANDIDATE_COLUMNS) int64
    scores: np.ndarray   # (n,) float64

    def __len__(self) -> int:
        return len(self.ints)

    def column(self, name: str) -> np.ndarray:
        if name == "score":
            return self.scores
        return self.ints[:, CANDIDATE_COLUMNS.index(name)]


class Observer:
    """Base class: override what you need. Callbacks run in the driver, between
    kernel slices, in this order: on_start, (on_events | on_candidates)*,
    on_oom (only for an OOM), on_finish."""

    #: Ask the kernel for every candidate's score at every decision.
    wants_candidates: bool = False

    def on_start(self, run) -> None:
        """`run` is the `ReplayContext` (program, budget, policy, interventions)."""

    def on_events(self, batch: EventBatch) -> None:
        """A batch of events in seq order."""

    def on_candidates(self, batch: CandidateBatch) -> None:
        """Candidate rows of decisions whose `evict` events were already delivered."""

    def on_oom(self, frontier) -> None:
        """The pinned frontier (`engine.frontier.Frontier`) of a failed allocation."""

    def on_finish(self, summary) -> None:
        """The run summary (`engine.summary.RunSummary`), also for oom/thrash/timeout."""
