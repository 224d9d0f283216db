"""The failing run's snapshots, from which `explain`'s other runs resume.

Every run of a hindsight search replays the failing run's trace, budget and
policy with one change, and a change steers nothing before it is first read:

- a forced victim at decision K reads nothing before decision K: a run may
  resume where at most K pressure decisions were made;
- a retained storage is read when a decision's scan reaches it, never before
  it is created: a run may resume where its tensor was not created yet;
- a control (and a forbid) checks every candidate of every decision: it may
  resume before the first decision.

So the failing run leaves snapshots evenly along its steps (`ResumePoints`,
a `PrefixCache` whose first run is the failing run), and each later run with
a change starts from the furthest one its change has not read yet: its state
there is the failing run's, counters included, so its result is the one it
has from op 0. Runs with a change never splice onto another run's rest (their
rest differs) and leave no snapshots. Runs without a change (the nearby
budgets' probes) share with the failing run as any walk does
(engine/prefixes.py).
"""

from __future__ import annotations

from dataclasses import replace

from ..engine import layout as L
from ..engine.prefixes import PrefixCache, SnapshotTaker
from ..engine.replay import Interventions
from ..engine.state import Snapshot

NEVER = -1          # a scalar limit no snapshot meets
NO_CHECKPOINTS = 1 << 62
EVEN_SPACING = 64   # steps between the failing run's first snapshots
MAX_POINTS = 48     # past this many, every other one goes and the spacing doubles


def resume_limit(interventions: Interventions) -> tuple[int, int]:
    """(scalar slot, limit): a snapshot whose slot is at most the limit was
    taken before the change was first read (see the module doc)."""
    if interventions.control or interventions.forbid:
        return L.S_EVICTIONS, 0
    limits = []
    if interventions.force:
        limits.append((L.S_EVICTIONS, min(k for _, k in interventions.force)))
    if interventions.retain:
        limits.append((L.S_CREATED, min(interventions.retain)))
    if len(limits) != 1:
        return (L.S_EVICTIONS, NEVER) if limits else (L.S_EVICTIONS, 0)
    return limits[0]


class _Evenly(SnapshotTaker):
    """The failing run's snapshots, evenly spaced: at most `max_points` kept,
    and at most the cache's `max_bytes` once there are a few; past either,
    every other one goes and the spacing doubles."""

    def __init__(self, cache: "ResumePoints", family: tuple, start_steps: int):
        super().__init__(cache, family, start_steps)
        self.spacing = cache.even_spacing
        self.next_at = start_steps + self.spacing

    def take(self, snap: Snapshot) -> None:
        self.cache.add(self.family, snap)
        points = self.cache.points
        points.append(snap)
        if len(points) > self.cache.max_points or (
                len(points) > 4 and sum(p.nbytes for p in points) > self.cache.max_bytes):
            points[:] = points[1::2]
            self.spacing *= 2
        self.next_at = snap.steps + self.spacing


class _Nothing(SnapshotTaker):
    """A run with a change leaves no snapshot."""

    def __init__(self, cache: PrefixCache, family: tuple, start_steps: int):
        super().__init__(cache, family, start_steps)
        self.next_at = -1


class ResumePoints(PrefixCache):
    """A prefix cache for one hindsight search (one trace, budget, policy and
    thrash limit). Its first run is the failing run; runs of that family share
    as in any walk; a run with a change resumes from the failing run's
    snapshots once `expect(interventions)` named its change."""

    def __init__(self, even_spacing: int = EVEN_SPACING, max_points: int = MAX_POINTS,
                 **kwargs):
        super().__init__(**kwargs)
        if min(even_spacing, max_points) < 1:
            raise ValueError("even_spacing and max_points are at least 1")
        self.even_spacing, self.max_points = even_spacing, max_points
        self.points: list[Snapshot] = []
        self.plain: tuple | None = None
        self.expected: Interventions | None = None
        self.resumed = 0

    def portable(self) -> "ResumePoints":
        """What another process needs to resume runs with a change (the failing
        run's family and points, without the run records behind them): small
        enough to send to a worker process."""
        out = ResumePoints(self.even_spacing, self.max_points, max_bytes=self.max_bytes)
        out.plain = self.plain
        out.points = [replace(p, run=None) for p in self.points]
        return out

    def expect(self, interventions: Interventions) -> None:
        """The change of the next run (and of every later one: runs with a
        change come after the failing run and its probes). They never splice,
        so they take no checkpoints beyond the few right after their start."""
        self.expected = interventions
        self.checkpoint_every = NO_CHECKPOINTS

    def taker(self, family: tuple, start_steps: int) -> SnapshotTaker:
        if self.plain is None:
            self.plain = family
            return _Evenly(self, family, start_steps)
        if family == self.plain:
            return super().taker(family, start_steps)
        return _Nothing(self, family, start_steps)

    def best(self, family: tuple, budget: int) -> Snapshot | None:
        if self.plain is None or family == self.plain:
            return super().best(family, budget)
        if self.expected is None or self.expected not in family:
            return None   # not the change announced: from op 0, never a wrong start
        slot, limit = resume_limit(self.expected)
        found = None
        for snap in self.points:
            if snap.state.sc[slot] > limit:
                break
            if snap.admits(budget):
                found = snap
        if found is None:
            return None
        self.resumed += 1
        return replace(found, run=None)   # no donor: its rest is not this run's

    def publish(self, family: tuple, record) -> None:
        if family == self.plain:
            super().publish(family, record)
