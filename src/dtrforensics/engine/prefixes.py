"""Shared work: runs at nearby budgets resume from, and splice onto, each other.

Two runs of one trace, policy, interventions and thrash limit make the same
steps up to their first budget comparison with a different outcome. A run
handed a `PrefixCache` leaves snapshots of its state along the way (each with
the interval of budgets its prefix admits, `state.Snapshot`), and starts from
the furthest snapshot that admits its own budget instead of from op 0.

After they part, nearby runs usually meet again within a few commands (one
eviction made a check later, say) and stay together. So a run also leaves
checkpoints: at chosen top-level command boundaries, the digest of its state
(engine/digest.py), its counters and the extremes of the rest of the run
(certificate, maxima). A later run takes checkpoints at the same boundaries;
when its digest equals that of its donor (the run whose snapshot it resumed)
or of any recent run, and its budget is inside the certificate of that run's
remainder, the rest is that run's rest: the run ends there, with the other
run's remaining eviction stream appended and counters shifted.

Only unobserved runs take part: a recorded run must see every event from
op 0, so `replay` neither resumes nor snapshots when observers are attached.

Memory is bounded: a run takes at most `per_run` snapshots, spaced
geometrically after its starting point, and the cache drops its least
recently used snapshots beyond `max_bytes`.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field, replace

import numpy as np

from . import layout as L
from .digest import state_digest
from .state import Extremes, MachineState, Snapshot

# Where a run takes checkpoints: CHECKPOINT_OFFSETS commands after its start (nearby
# runs meet again within a few commands of parting, which is usually soon after the
# later one starts), and at every multiple of `checkpoint_every`, where all runs of a
# family take them, so a run may meet any earlier run there, not only its donor.
CHECKPOINT_EVERY = 64
CHECKPOINT_OFFSETS = sorted({int(1.5 ** i) for i in range(9)})
# Counters a spliced run adds up: its own so far plus the donor's after the meeting point.
ADDITIVE = np.array(L.ADDITIVE, dtype=np.int64)
DECISIONS = np.array(L.DECISIONS, dtype=np.int64)
SETTINGS = np.array(L.SETTINGS, dtype=np.int64)

DEFAULT_MAX_BYTES = 256 << 20
SNAPSHOTS_PER_RUN = 16
MAX_RECORDS = 256  # finished runs whose checkpoints later runs may meet
FIRST_SPACING = 8  # steps


@dataclass
class PrefixStats:
    runs: int = 0
    resumed: int = 0
    steps_skipped: int = 0   # steps not replayed thanks to a snapshot
    steps_run: int = 0
    snapshots_taken: int = 0
    spliced: int = 0
    steps_spliced: int = 0   # donor steps a spliced run did not replay


class PrefixCache:
    """Snapshots of earlier runs, by run family (everything but the budget)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, per_run: int = SNAPSHOTS_PER_RUN,
                 first_spacing: int = FIRST_SPACING, max_records: int = MAX_RECORDS,
                 checkpoint_every: int = CHECKPOINT_EVERY):
        if max_bytes < 0 or min(per_run, first_spacing, checkpoint_every) < 1:
            raise ValueError("a prefix cache needs max_bytes >= 0, and per_run, "
                             "first_spacing and checkpoint_every >= 1")
        self.checkpoint_every = checkpoint_every
        self.max_bytes = max_bytes
        self.per_run = per_run
        self.first_spacing = first_spacing
        self.nbytes = 0
        self.peak_nbytes = 0
        self.stats = PrefixStats()
        self.max_records = max_records
        self._families: dict[tuple, _Shelf] = {}
        self._lru: OrderedDict[int, tuple[tuple, Snapshot]] = OrderedDict()
        self._records: OrderedDict[int, tuple[tuple, "RunRecord"]] = OrderedDict()
        self._meetings: dict[tuple, dict[tuple, list["RunRecord"]]] = {}

    def __len__(self) -> int:
        return len(self._lru)

    def best(self, family: tuple, budget: int) -> Snapshot | None:
        """The furthest snapshot of `family` whose prefix admits `budget`."""
        shelf = self._families.get(family)
        found = shelf.best(budget) if shelf is not None else None
        if found is not None:
            self._lru.move_to_end(id(found))
        return found

    def add(self, family: tuple, snap: Snapshot) -> None:
        self._families.setdefault(family, _Shelf()).add(snap)
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

    def publish(self, family: tuple, record: "RunRecord") -> None:
        """Offer a finished run's checkpoints to every later run of `family`
        (the `max_records` most recent runs are kept)."""
        index = self._meetings.setdefault(family, {})
        for cmd, cp in record.checkpoints.items():
            index.setdefault((cmd, cp.digest), []).append(record)
        self._records[id(record)] = (family, record)
        while len(self._records) > self.max_records:
            _, (fam, old) = self._records.popitem(last=False)
            index = self._meetings[fam]
            for cmd, cp in old.checkpoints.items():
                runs = index[(cmd, cp.digest)]
                runs.remove(old)
                if not runs:
                    del index[(cmd, cp.digest)]

    def meetings(self, family: tuple, cmd: int, digest: tuple[int, int]) -> list["RunRecord"]:
        """Finished runs of `family` whose state before command `cmd` had this digest."""
        return self._meetings.get(family, {}).get((cmd, digest), [])

    def taker(self, family: tuple, start_steps: int) -> "SnapshotTaker":
        return SnapshotTaker(self, family, start_steps)

    def finished(self, family: tuple, resumed_at: int, steps_run: int,
                 steps_spliced: int = 0) -> None:
        """A run of `family` ended: `resumed_at` steps skipped, `steps_run`
        replayed, `steps_spliced` taken from a donor."""
        self.stats.runs += 1
        self.stats.resumed += resumed_at > 0
        self.stats.spliced += steps_spliced > 0
        self.stats.steps_skipped += resumed_at
        self.stats.steps_run += steps_run
        self.stats.steps_spliced += steps_spliced


class _Shelf:
    """The snapshots of one family with their prefix intervals (`lo`, `hi_true`
    of each `BudgetInterval`) and step counts in arrays, so finding the furthest
    one that admits a budget is one vector scan."""

    def __init__(self):
        self.lo = np.zeros(64, dtype=np.int64)
        self.hi_true = np.zeros(64, dtype=np.int64)
        self.steps = np.full(64, -1, dtype=np.int64)     # -1: a free slot
        self.snaps: list[Snapshot | None] = [None] * 64
        self.slot: dict[int, int] = {}
        self.free: list[int] = list(range(63, -1, -1))

    def add(self, snap: Snapshot) -> None:
        if not self.free:
            n = len(self.snaps)
            self.lo, self.hi_true = np.resize(self.lo, 2 * n), np.resize(self.hi_true, 2 * n)
            self.steps = np.concatenate([self.steps, np.full(n, -1, dtype=np.int64)])
            self.snaps += [None] * n
            self.free = list(range(2 * n - 1, n - 1, -1))
        i = self.free.pop()
        self.lo[i], self.hi_true[i] = snap.interval.lo, snap.interval.hi_true
        self.steps[i] = snap.steps
        self.snaps[i] = snap
        self.slot[id(snap)] = i

    def remove(self, snap: Snapshot) -> None:
        i = self.slot.pop(id(snap))
        self.steps[i] = -1
        self.snaps[i] = None
        self.free.append(i)

    def __iter__(self):
        return (s for s in self.snaps if s is not None)

    def best(self, budget: int) -> Snapshot | None:
        admitted = np.where((self.lo <= budget) & (budget < self.hi_true), self.steps, -1)
        i = int(np.argmax(admitted))
        return self.snaps[i] if admitted[i] >= 0 else None


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


# --- splicing -------------------------------------------------------------------------

@dataclass
class Checkpoint:
    """A run's state at the boundary before top-level command `cmd`."""

    cmd: int
    digest: tuple[int, int]
    sc: np.ndarray               # the scalars there (counters)
    stream_at: int               # eviction stream rows before it
    suffix: Extremes = Extremes()  # of the rest of the run from here (set when it ends)


@dataclass
class RunRecord:
    """What a run leaves for later runs that meet it: its checkpoints and its end."""

    checkpoints: dict[int, Checkpoint] = field(default_factory=dict)
    complete: bool = False       # ended without timeout: its rest may be spliced on
    final_sc: np.ndarray | None = None
    stream: np.ndarray | None = None
    frontier: object = None
    status: int = L.STATUS_RUNNING


@dataclass
class Splice:
    """A run's end taken from its donor (see module doc)."""

    sc: np.ndarray
    stream: np.ndarray
    frontier: object
    status: int
    steps: int                   # donor steps not replayed


def _boundaries(sched_kind: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each wanted command index, the first boundary at or after it that
    follows a get or a release: a run gets there at depth 0 within one step of
    starting the command before it, so slices can stop exactly there."""
    after_simple = np.flatnonzero((sched_kind[:-1] == 1) | (sched_kind[:-1] == 2)) + 1
    at = np.searchsorted(after_simple, wanted)
    return np.unique(after_simple[at[at < len(after_simple)]])


def _spliced_scalars(final: np.ndarray, mine: np.ndarray, theirs: np.ndarray,
                     own: np.ndarray) -> np.ndarray:
    """A spliced run's scalars at its end, by role (layout.ROLES): the donor's
    `final` ones, counters shifted by what this run counted more than the donor
    up to the meeting (`mine` against `theirs`), decision indices by the pressure
    evictions it made more, its `own` settings. Steering scalars, the pool's ends
    and bookkeeping are the donor's; the caller writes the extremes."""
    sc = final.copy()
    sc[ADDITIVE] += mine[ADDITIVE] - theirs[ADDITIVE]
    made = sc[DECISIONS] >= 0
    sc[DECISIONS] += np.where(made, mine[L.S_EVICTIONS] - theirs[L.S_EVICTIONS], 0)
    sc[SETTINGS] = own[SETTINGS]
    return sc


class Sharing:
    """One run's part in shared work: snapshots, checkpoints, the splice."""

    def __init__(self, cache: PrefixCache, family: tuple, budget: int, start: Snapshot | None,
                 state: MachineState, sched_kind: np.ndarray, can_splice: bool):
        self.cache, self.family, self.budget = cache, family, budget
        self.record = RunRecord()
        self.before = start.before if start is not None else Extremes()
        self.resumed_at = int(state.sc[L.S_STEPS])
        self.taker = cache.taker(family, self.resumed_at)
        donor = start.run if start is not None else None
        self.can_splice = can_splice
        self.donor: RunRecord | None = donor if can_splice and donor and donor.complete else None
        here = int(state.sc[L.S_CMD_POS])
        wanted = [here + d for d in CHECKPOINT_OFFSETS]   # near the start, as the donor did
        every = cache.checkpoint_every
        wanted += range(here + -here % every, len(sched_kind), every)
        own = set(_boundaries(sched_kind, np.array(wanted, dtype=np.int64)).tolist())
        theirs = set(self.donor.checkpoints) if self.donor else set()
        self.plan = sorted(c for c in own | theirs if here <= c < len(sched_kind))
        self.stretches: list[tuple[Checkpoint, Extremes]] = []  # checkpoint, stretch before it

    def slice_limit(self, sc: np.ndarray, steps: int) -> int:
        """At most `steps`, stopping at the next snapshot; the kernel stops by itself
        at the next checkpoint boundary (`S_STOP_CMD`)."""
        if 0 <= self.taker.next_at:
            steps = min(steps, self.taker.next_at - int(sc[L.S_STEPS]))
        sc[L.S_STOP_CMD] = self.plan[0] if self.plan else -1
        return max(1, steps)

    def after_slice(self, state: MachineState, stream_chunks: list) -> Splice | None:
        sc = state.sc
        if 0 <= self.taker.next_at <= sc[L.S_STEPS]:
            self.taker.take(state.snapshot(tuple(stream_chunks), self.before, self.record))
        while self.plan and self.plan[0] < sc[L.S_CMD_POS]:
            self.plan.pop(0)   # passed inside a deep command: no boundary there
        if not (self.plan and self.plan[0] == sc[L.S_CMD_POS] and sc[L.S_DEPTH] == 0):
            return None
        cmd = self.plan.pop(0)
        stretch = Extremes.read(sc)
        self.before = self.before.then(stretch)
        Extremes().write(sc)
        stream_at = sum(len(c) for c in stream_chunks) + int(sc[L.S_N_STREAM])
        mine = Checkpoint(cmd, state_digest(state), sc.copy(), stream_at)
        self.record.checkpoints[cmd] = mine
        self.stretches.append((mine, stretch))
        if not self.can_splice:
            return None
        donors = ([self.donor] if self.donor else []) + self.cache.meetings(self.family, cmd,
                                                                          mine.digest)
        for donor in donors:
            theirs = donor.checkpoints.get(cmd)
            if theirs is not None and theirs.digest == mine.digest \
                    and theirs.suffix.admits(self.budget):
                return self._splice(donor, mine, theirs, stream_chunks, state)
        return None

    def _splice(self, donor: RunRecord, mine: Checkpoint, theirs: Checkpoint,
                stream_chunks: list, state: MachineState) -> Splice:
        sc = _spliced_scalars(donor.final_sc, mine.sc, theirs.sc, state.sc)
        shift = mine.sc[ADDITIVE] - theirs.sc[ADDITIVE]
        self.before.then(theirs.suffix).write(sc)
        own = stream_chunks + [state.stream[:int(state.sc[L.S_N_STREAM])]]
        stream = np.concatenate(own + [donor.stream[theirs.stream_at:]])
        frontier = donor.frontier
        if frontier is not None:
            frontier = replace(frontier, budget=self.budget)
        rows = mine.stream_at - theirs.stream_at
        for cmd, cp in donor.checkpoints.items():   # the donor's later checkpoints are ours
            if cmd > mine.cmd:
                moved = cp.sc.copy()
                moved[ADDITIVE] += shift
                self.record.checkpoints[cmd] = Checkpoint(cmd, cp.digest, moved,
                                                          cp.stream_at + rows, cp.suffix)
        splice = Splice(sc, stream, frontier, donor.status,
                        int(donor.final_sc[L.S_STEPS] - theirs.sc[L.S_STEPS]))
        self._close(theirs.suffix)
        self._keep(sc, stream, frontier, donor.status)
        return splice

    def finish(self, state: MachineState, stream: np.ndarray, frontier, status: int,
               complete: bool) -> None:
        """The run ended on its own: fold its extremes into the registers."""
        last = Extremes.read(state.sc)
        total = self.before.then(last)
        total.write(state.sc)
        self._close(last)
        if complete:
            self._keep(state.sc.copy(), stream, frontier, status)

    def _close(self, rest: Extremes) -> None:
        """Each own checkpoint's suffix: the stretches after it, then `rest`."""
        for cp, stretch in reversed(self.stretches):
            cp.suffix = rest
            rest = stretch.then(rest)

    def _keep(self, sc, stream, frontier, status) -> None:
        r = self.record
        r.final_sc, r.stream, r.frontier, r.status, r.complete = sc, stream, frontier, status, True
        if self.can_splice:
            self.cache.publish(self.family, r)


class PrefixSharing:
    """The prefix sharing strategy `replay` takes with a cache (its default,
    `replay.NoSharing`, does nothing): each start resumes from the furthest
    snapshot the budget admits, and the run snapshots, checkpoints and splices
    through a `Sharing`. A run started again (a larger arena) resumes the same
    way, from the furthest snapshot its budget admits, which may be one its
    first attempt left (taken between slices, before the step that outgrew
    the arena)."""

    cuts_slices = True
    recycles_state = False  # splices and snapshots may hold views of a run's arrays

    def __init__(self, cache: PrefixCache, family: tuple, sched_kind: np.ndarray,
                 can_splice: bool):
        self.cache, self.family = cache, family
        self.sched_kind, self.can_splice = sched_kind, can_splice
        self.sharing: Sharing | None = None

    def begin(self, graph, budget: int, remat_limit: int,
              arena_size: int | None) -> tuple[MachineState, list]:
        start = self.cache.best(self.family, budget)
        state = (MachineState.new(graph, budget, remat_limit, arena_size=arena_size)
                 if start is None else MachineState.resume(start, budget, arena_size))
        self.sharing = Sharing(self.cache, self.family, budget, start, state, self.sched_kind,
                               self.can_splice)
        return state, list(start.stream_chunks) if start is not None else []

    def slice_limit(self, sc: np.ndarray, steps: int) -> int:
        return self.sharing.slice_limit(sc, steps)

    def after_slice(self, state: MachineState, stream_chunks: list) -> Splice | None:
        return self.sharing.after_slice(state, stream_chunks)

    def finish(self, state: MachineState, stream: np.ndarray, frontier, status: int,
               complete: bool) -> None:
        self.sharing.finish(state, stream, frontier, status, complete)

    def finished(self, sc: np.ndarray, spliced: Splice | None) -> None:
        """Count the run in the cache's statistics."""
        sharing = self.sharing
        spliced_steps = spliced.steps if spliced is not None else 0
        steps_run = int(sc[L.S_STEPS]) - sharing.resumed_at - spliced_steps
        self.cache.finished(self.family, sharing.resumed_at, steps_run, spliced_steps)
