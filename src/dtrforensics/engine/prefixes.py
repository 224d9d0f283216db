"""Shared prefixes: runs at nearby budgets resume from each other's snapshots.

Two runs of one trace, policy, interventions and thrash limit make the same
steps up to their first budget comparison with a different outcome. A run
handed a `PrefixCache` leaves snapshots of its state along the way (each with
the interval of budgets its prefix admits, `state.Snapshot`), and starts from
the furthest snapshot that admits its own budget instead of from op 0.

Only unobserved runs take part: a recorded run must see every event from
op 0, so `replay` neither resumes nor snapshots when observers are attached.

Memory is bounded: a run takes at most `per_run` snapshots, spaced
geometrically after its starting point, and the cache drops its least
recently used snapshots beyond `max_bytes`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from .state import Snapshot

DEFAULT_MAX_BYTES = 256 << 20
SNAPSHOTS_PER_RUN = 16
FIRST_SPACING = 8  # steps


@dataclass
class PrefixStats:
    runs: int = 0
    resumed: int = 0
    steps_skipped: int = 0   # steps not replayed thanks to a snapshot
    steps_run: int = 0
    snapshots_taken: int = 0

    @property
    def skipped_fraction(self) -> float:
        total = self.steps_skipped + self.steps_run
        return self.steps_skipped / total if total else 0.0


class PrefixCache:
    """Snapshots of earlier runs, by run family (everything but the budget)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, per_run: int = SNAPSHOTS_PER_RUN,
                 first_spacing: int = FIRST_SPACING):
        if max_bytes < 0 or per_run < 1 or first_spacing < 1:
            raise ValueError("a prefix cache needs max_bytes >= 0, per_run >= 1 and "
                             "first_spacing >= 1")
        self.max_bytes = max_bytes
        self.per_run = per_run
        self.first_spacing = first_spacing
        self.nbytes = 0
        self.peak_nbytes = 0
        self.stats = PrefixStats()
        self._families: dict[tuple, list[Snapshot]] = {}
        self._lru: OrderedDict[int, tuple[tuple, Snapshot]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def best(self, family: tuple, budget: int) -> Snapshot | None:
        """The furthest snapshot of `family` whose prefix admits `budget`."""
        found = None
        for snap in self._families.get(family, ()):
            if snap.admits(budget) and (found is None or snap.steps > found.steps):
                found = snap
        if found is not None:
            self._lru.move_to_end(id(found))
        return found

    def add(self, family: tuple, snap: Snapshot) -> None:
        self._families.setdefault(family, []).append(snap)
        self._lru[id(snap)] = (family, snap)
        self.nbytes += snap.nbytes
        self.stats.snapshots_taken += 1
        while self.nbytes > self.max_bytes and self._lru:
            _, (fam, old) = self._lru.popitem(last=False)
            self._drop(fam, old)
        self.peak_nbytes = max(self.peak_nbytes, self.nbytes)

    def _drop(self, family: tuple, snap: Snapshot) -> None:
        self._families[family].remove(snap)
        self.nbytes -= snap.nbytes

    def taker(self, family: tuple, start_steps: int) -> "SnapshotTaker":
        return SnapshotTaker(self, family, start_steps)

    def finished(self, family: tuple, resumed_at: int, steps: int) -> None:
        """A run of `family` ended after `steps` steps, the first `resumed_at` skipped."""
        self.stats.runs += 1
        self.stats.resumed += resumed_at > 0
        self.stats.steps_skipped += resumed_at
        self.stats.steps_run += steps - resumed_at


class SnapshotTaker:
    """Where one run leaves its snapshots: geometrically spaced after its start.

    A run that resumed at step k typically first differs from a run at the
    next budget of a walk a few steps after k (the comparison that ended the
    previous interval), and a fresh run anywhere; so the spacing starts at
    `first_spacing` and doubles, and at most `per_run` snapshots are taken.
    """

    def __init__(self, cache: PrefixCache, family: tuple, start_steps: int):
        self.cache, self.family = cache, family
        self.spacing = cache.first_spacing
        self.taken = 0
        self.next_at = start_steps + self.spacing

    def take(self, snap: Snapshot) -> None:
        self.cache.add(self.family, snap)
        self.taken += 1
        self.spacing *= 2
        self.next_at = snap.steps + self.spacing if self.taken < self.cache.per_run else -1
