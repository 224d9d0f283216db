"""The sweep scheduler: points from a source onto a backend, results into the store.

A point source (`take(n)`, `absorb(point, row)`, `queue_per_worker`) says what
to run next: a fixed list (`Static`) or the exact walk's rounds
(`exact.WalkRounds`). The scheduler keeps every worker busy, skips every point
already stored (rows indexed by key), appends each finished run to the store
(flushed in small batches), stops at a deadline, and turns a worker that died
into one error naming it and the point it ran.
"""

from __future__ import annotations

import bisect
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from ..errors import ClusterError, UserError
from .store import Point, SweepStore

# --- progress -------------------------------------------------------------------------

class SweepObserver:
    """What a sweep reports while it runs (the CLI draws it; tests may raise
    from it to simulate a kill). Every method may be left as is."""

    def stage(self, name: str, todo: int, skipped: int) -> None:
        """A stage starts: `todo` points to run, `skipped` already stored."""

    def grow(self, n: int) -> None:
        """The current stage planned n more points (refinement rounds, the walk)."""

    def finished(self, row: dict) -> None:
        """One run finished and was appended to the store's buffer."""

    def coverage(self, fractions: dict[str, float]) -> None:
        """Exact walk: certified fraction of the range, per policy."""

    def estimated(self, estimate) -> None:
        """Before any stage: what the sweep will cost (`sweep/estimate.py`), when asked."""

    def notice(self, text: str) -> None:
        """What the sweep waits for, said once (e.g. a cluster with no workers yet)."""


# --- point sources --------------------------------------------------------------------

class Static:
    """A fixed list of points (queued two per worker, so no worker waits)."""

    queue_per_worker = 2

    def __init__(self, points: list[Point]):
        self.points = list(reversed(points))

    def take(self, n: int) -> list[Point]:
        out = []
        while self.points and len(out) < n:
            out.append(self.points.pop())
        return out

    def absorb(self, point: Point, row: dict) -> None:
        pass


# --- the scheduler --------------------------------------------------------------------

class Lanes:
    """Which worker runs a point: the one that ran the nearest finished run below
    its budget (whose snapshots it resumes from), unless that worker already has
    its share of the queue, then the least busy one. Only where work goes
    depends on this, never what a run yields."""

    def __init__(self):
        self._below: dict[str, list[tuple[int, int]]] = {}   # policy -> sorted (budget, lane)
        self.inflight: dict[tuple, int] = {}                  # point key -> lane
        self.order: dict[tuple, int] = {}                     # point key -> submission number
        self.submitted = 0

    def choose(self, point: Point, lanes: int, per_lane: int) -> int:
        busy = [0] * lanes
        for lane in self.inflight.values():
            busy[lane % lanes] += 1
        runs = self._below.get(point.policy, [])
        i = bisect.bisect_left(runs, (point.budget, -1)) - 1
        lane = runs[i][1] % lanes if i >= 0 else -1
        if lane < 0 or busy[lane] >= per_lane:
            lane = min(range(lanes), key=busy.__getitem__)
        self.inflight[point.key] = lane
        self.submitted += 1
        self.order[point.key] = self.submitted
        return lane

    def finished(self, point: Point, row: dict) -> None:
        lane = self.inflight.pop(point.key, None)
        self.order.pop(point.key, None)
        if lane is not None:
            bisect.insort(self._below.setdefault(point.policy, []), (point.budget, lane))


@dataclass
class StageCount:
    ran: int = 0
    skipped: int = 0


class OutOfTime(Exception):
    """The sweep's deadline passed: it stops submitting, keeps what finished."""


class WorkerDiedError(UserError):
    """A worker process of a sweep died (killed, out of memory) while running a
    point; the runs finished before it are stored, and the sweep resumes."""


class Scheduler:
    """Runs the points of one sweep call. `by_key` holds every stored row by its
    key (policy, budget, rep): a stored point is taken from it, never rerun.
    Without a store (an estimate alone) it keeps nothing."""

    def __init__(self, store: SweepStore | None, rows: list[dict], observer: SweepObserver,
                 timeout: float | None, deadline: float | None = None):
        self.store, self.rows, self.observer, self.timeout = store, rows, observer, timeout
        self.deadline = deadline
        self.by_key = {(r["policy"], r["budget"], r["rep"]): r for r in rows}
        self.counts: dict[str, StageCount] = {}
        self.lanes = Lanes()

    @property
    def done(self):
        return self.by_key.keys()

    def _check_time(self, until: float | None = None) -> None:
        ends = [t for t in (self.deadline, until) if t is not None]
        if ends and time.monotonic() >= min(ends):
            raise OutOfTime

    def _kept(self) -> str:
        """What a lost sweep keeps, for its error line."""
        if self.store is None:
            return "nothing was stored"
        return (f"the {len(self.rows):,} runs finished are kept in {self.store.path}: rerun "
                f"the same command to resume")

    def _died(self, backend, point: Point, others) -> WorkerDiedError:
        """The error naming the worker that died and the point it was running: of
        the points queued on its lane, the one submitted first (a worker runs its
        queue in order; the others failed with it, unrun)."""
        lane = self.lanes.inflight.get(point.key, 0)
        queued = [p for p in (point, *others) if self.lanes.inflight.get(p.key) == lane]
        point = min(queued, key=lambda p: self.lanes.order[p.key])
        who = backend.worker_name(lane) if hasattr(backend, "worker_name") else "a worker"
        return WorkerDiedError(
            f"{who} died while running {point.policy} at {point.budget:,} B (ratio "
            f"{point.ratio:.6g}, {point.stage} stage); {self._kept()}")

    def _lost(self, backend, point: Point, inflight: dict,
              exc: BaseException) -> UserError | None:
        """The error for a point that failed because its worker or the cluster
        was lost (None: the run itself failed, its exception stands)."""
        if isinstance(exc, BrokenProcessPool):
            return self._died(backend, point, _unfinished(inflight))
        if isinstance(exc, ClusterError):   # a worker refusing its points (run_point)
            return ClusterError(f"{exc}; {self._kept()}")
        kind = backend.failure(exc) if hasattr(backend, "failure") else None
        if kind == "worker":        # the task killed every worker it ran on: it names itself
            return self._died(backend, point, ())
        if kind == "scheduler":
            return ClusterError(
                f"the Dask scheduler at {backend.address} is gone (connection lost); "
                f"{self._kept()}"
                + (", with --scheduler of a running cluster or without --engine dask"
                   if self.store is not None else ""))
        return None

    def _wait_seconds(self, until: float | None = None) -> float:
        ends = [t for t in (self.deadline, until) if t is not None]
        if not ends:
            return 0.25
        return max(0.0, min(0.25, min(ends) - time.monotonic()))

    def _wait(self, backend, inflight: dict, until: float | None) -> list:
        """The futures done; a cluster given up on says what the sweep keeps."""
        try:
            return backend.wait(inflight, self._wait_seconds(until))
        except ClusterError as exc:
            raise ClusterError(f"{exc}; {self._kept()}") from None

    def split(self, stage: str, points: list[Point]) -> list[Point]:
        """The points not stored yet (counted as skipped otherwise)."""
        count = self.counts.setdefault(stage, StageCount())
        todo = [p for p in points if p.key not in self.done]
        count.skipped += len(points) - len(todo)
        return todo

    def run(self, backend, stage: str, source, *, keep: bool = True,
            until: float | None = None) -> None:
        """Run `source`'s points on `backend` until it has none left. `keep`:
        store each row (a calibration's are only read); `until`: a monotonic
        instant before the sweep's deadline at which this call stops the same
        way (OutOfTime)."""
        count = self.counts.setdefault(stage, StageCount()) if keep else StageCount()
        inflight: dict = {}
        try:
            while True:
                self._check_time(until)
                room = backend.capacity * source.queue_per_worker - len(inflight)
                if room > 0:
                    for point in source.take(room):
                        if point.key in self.by_key:      # stored by an earlier run
                            source.absorb(point, self.by_key[point.key])
                            continue
                        self._check_time(until)
                        lane = self.lanes.choose(point, backend.capacity, source.queue_per_worker)
                        try:
                            fut = backend.submit(point, self.timeout, lane)
                        except BrokenProcessPool:   # the lane's worker died already
                            raise self._died(backend, point, _unfinished(inflight)) from None
                        inflight[fut] = point
                if not inflight:
                    break
                for fut in self._wait(backend, inflight, until):
                    point = inflight.pop(fut)
                    try:
                        row = fut.result()
                    except Exception as exc:
                        lost = self._lost(backend, point, inflight, exc)
                        if lost is None:
                            raise
                        raise lost from None
                    self.lanes.finished(point, row)
                    if keep:
                        self._keep(point, row)
                        count.ran += 1
                    source.absorb(point, row)
                    if keep:
                        self.observer.finished(row)
                if self.store is not None:
                    self.store.maybe_flush()
        finally:
            for fut in inflight:
                try:
                    fut.cancel()
                except Exception:  # noqa: BLE001 - a cluster lost: nothing left to cancel
                    pass
            self.lanes.inflight.clear()
            self.lanes.order.clear()
            if self.store is not None:
                self.store.flush()

    def _keep(self, point: Point, row: dict) -> None:
        if self.store is not None:
            self.store.append(row)
        self.rows.append(row)
        self.by_key[point.key] = row


def _unfinished(inflight: dict) -> list[Point]:
    """The points of a process pool's futures whose runs have not ended well: a
    run that finished on a worker may wait in the same batch as that worker's
    death, and is not the point it died running."""
    return [p for f, p in inflight.items()
            if not f.done() or f.cancelled() or f.exception() is not None]
