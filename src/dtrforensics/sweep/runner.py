"""Run a sweep: plan points, run them in parallel, store results as they finish.

`run_sweep` drives the stages in order -- grid, interior samples, refinement
rounds, the exact walk, confirmation repeats -- through one scheduler that
keeps every worker busy, appends each finished run to the sweep's Parquet
dataset (flushed in small batches) and skips every point already stored, so an
interrupted sweep rerun with the same parameters resumes where it stopped.

Backends (all run `replay` on a program loaded once per worker process):

* `inline`  -- in this process, one run at a time (`jobs=1`).
* `process` -- a `concurrent.futures.ProcessPoolExecutor`; each worker loads the
  program and the compiled kernel once, in the pool's initializer.
* `dask`    -- an existing Dask distributed cluster (`scheduler` address); a
  worker plugin ships the compiled program to every worker once.

Confirmation repeats always run on a fresh local process pool per round, so a
rerun never shares a process with the run it checks.
"""

from __future__ import annotations

import bisect
import concurrent.futures as cf
import ctypes
import multiprocessing
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import validate
from ..engine.prefixes import PrefixCache
from ..engine.replay import prepared, replay
from ..errors import OptionError, UserError
from ..trace.program import Program
from . import grid
from .exact import ExactWalk, Gap, WalkRounds
from .store import Point, SweepParams, SweepStore, TraceInfo, row_from_summary

ENGINES = ("process", "dask", "inline")
PR_SET_PDEATHSIG = 1     # linux/prctl.h
PARENT_WATCH_SECONDS = 0.5
MAX_POINTS = 100_000     # runs a sweep may plan unless asked for more (--max-points)
# fork: workers inherit the loaded program and the compiled kernel from this
# process (ready in milliseconds); spawn re-imports and reloads both (~2 s).
DEFAULT_START_METHOD = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
# Confirmation reruns want processes that share nothing with the sweep: spawn.
REPEAT_START_METHOD = "spawn"


# --- worker side ---------------------------------------------------------------------

_PROGRAMS: dict[str, tuple[Program, float]] = {}
_PREFIXES = PrefixCache()


def _install(program: Program, thrash_factor: float) -> None:
    """Keep the program in this process and load the compiled kernel now
    (a budget-0 replay stops at the first allocation)."""
    prepared(program)
    replay(program, budget=0)
    _PROGRAMS[program.sha256] = (program, thrash_factor)


def die_with_parent(parent: int) -> None:
    """Make this worker die when the process `parent` does, even by kill -9:
    Linux's PR_SET_PDEATHSIG, plus a watch thread where that is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl")
    except (OSError, AttributeError):
        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(PARENT_WATCH_SECONDS)
            os._exit(1)
        threading.Thread(target=watch, name="dtrf-parent-watch", daemon=True).start()
    if os.getppid() != parent:     # it died before the request took effect
        os._exit(1)


def _init_process_worker(path: str, sha256: str, thrash_factor: float, parent: int) -> None:
    """ProcessPoolExecutor initializer: die with the sweep, then load the trace
    once per worker (a forked worker already holds it, installed by its parent).
    Ctrl-C is left to the coordinator, which stops submitting and flushes what
    finished."""
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sha256 in _PROGRAMS:
        return
    from ..trace.cache import load_program
    program = load_program(path)
    if program.sha256 != sha256:
        raise RuntimeError(f"{path} changed since the sweep started (sha256 {program.sha256})")
    _install(program, thrash_factor)


def _install_from_ipc(sha256: str, payload: bytes, thrash_factor: float) -> None:
    if sha256 in _PROGRAMS:
        return
    import pyarrow as pa

    from ..trace.cache import program_from_table
    table = pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
    _install(program_from_table(table), thrash_factor)


def run_point(sha256: str, point: Point, timeout: float | None) -> dict:
    """Replay one point with the installed program; a runs-table row. Runs in
    one process share prefixes (nearby budgets resume from earlier snapshots),
    except confirmation repeats, which must not lean on other runs."""
    program, thrash = _PROGRAMS[sha256]
    result = replay(program, budget=point.budget, policy=point.policy, timeout=timeout,
                    thrash_factor=thrash,
                    prefixes=None if point.stage == "repeat" else _PREFIXES)
    return row_from_summary(point, result.summary)


# --- backends -------------------------------------------------------------------------

class InlineBackend:
    """Runs each point at submit time, in this process."""

    def __init__(self, program: Program, thrash_factor: float):
        _install(program, thrash_factor)
        self.sha256 = program.sha256
        self.capacity = 1

    def submit(self, point: Point, timeout: float | None, lane: int = 0) -> cf.Future:
        fut: cf.Future = cf.Future()
        try:
            fut.set_result(run_point(self.sha256, point, timeout))
        except Exception as exc:  # noqa: BLE001 - re-raised by fut.result()
            fut.set_exception(exc)
        return fut

    def wait(self, futures, timeout: float) -> list:
        return [f for f in futures if f.done()]

    def close(self, abort: bool = False) -> None:
        pass


class ProcessBackend:
    """Worker processes that each load the program once (initializer), one pool of
    one process per worker: a point goes to the worker its scheduler names (its
    lane), so runs at neighbouring budgets meet the snapshots they resume from,
    which live in one worker's memory."""

    def __init__(self, program: Program, thrash_factor: float, jobs: int,
                 start_method: str = DEFAULT_START_METHOD):
        if not program.source or not Path(program.source).is_file():
            raise ValueError(f"program {program.name} has no log file to load in workers")
        self.sha256 = program.sha256
        self.capacity = jobs
        if start_method == "fork":
            _install(program, thrash_factor)     # inherited by every worker
        context = multiprocessing.get_context(start_method)
        self._workers: dict[int, list] = {}      # lane -> its pool's processes (to name them)
        self.pools = [cf.ProcessPoolExecutor(
            max_workers=1, mp_context=context, initializer=_init_process_worker,
            initargs=(str(program.source), program.sha256, thrash_factor, os.getpid()))
            for _ in range(jobs)]

    def submit(self, point: Point, timeout: float | None, lane: int = 0) -> cf.Future:
        pool = self.pools[lane % len(self.pools)]
        fut = pool.submit(run_point, self.sha256, point, timeout)
        self._workers[lane % len(self.pools)] = list((getattr(pool, "_processes", None)
                                                      or {}).values()) or \
            self._workers.get(lane % len(self.pools), [])
        return fut

    def worker_name(self, lane: int) -> str:
        """'worker 2 of 2 (pid 4242, killed by signal 9)': who ran `lane`'s points."""
        lane %= len(self.pools)
        what = []
        for process in self._workers.get(lane, []):
            process.join(timeout=1)
            code = process.exitcode
            end = ("" if code is None else f", killed by signal {-code}" if code < 0
                   else f", exit code {code}")
            what.append(f"pid {process.pid}{end}")
        return f"worker {lane + 1} of {len(self.pools)}" + (f" ({'; '.join(what)})" if what else "")

    def wait(self, futures, timeout: float) -> list:
        done, _ = cf.wait(list(futures), timeout=timeout, return_when=cf.FIRST_COMPLETED)
        return list(done)

    def close(self, abort: bool = False) -> None:
        """Stop the workers; `abort` (an interrupted sweep) does not wait for the
        runs in flight: the workers are terminated, their results dropped."""
        if abort:   # the executors keep their processes private; only theirs are stopped
            for pool in self.pools:
                for process in list((getattr(pool, "_processes", None) or {}).values()):
                    process.terminate()
        for pool in self.pools:
            pool.shutdown(wait=not abort, cancel_futures=True)


class DaskBackend:
    """Tasks on a Dask distributed cluster; a worker plugin installs the program."""

    def __init__(self, program: Program, thrash_factor: float, scheduler: str,
                 jobs: int | None = None):
        try:
            from distributed import Client
        except ImportError:
            raise ImportError("--engine dask needs the 'dask' extra: "
                              "pip install 'dtrforensics[dask]'") from None
        self.sha256 = program.sha256
        self.client = Client(scheduler, timeout="30s")
        self.client.register_plugin(_program_plugin(program, thrash_factor),
                                    name=f"dtrf-program-{program.sha256[:16]}")
        threads = sum(self.client.nthreads().values())
        self.capacity = jobs or max(1, threads)

    def submit(self, point: Point, timeout: float | None, lane: int = 0):
        return self.client.submit(run_point, self.sha256, point, timeout, pure=False)

    def wait(self, futures, timeout: float) -> list:
        from distributed import wait
        futures = list(futures)
        try:
            wait(futures, timeout=timeout, return_when="FIRST_COMPLETED")
        except TimeoutError:
            pass
        return [f for f in futures if f.done()]

    def close(self, abort: bool = False) -> None:
        self.client.close()


def _program_plugin(program: Program, thrash_factor: float):
    """A WorkerPlugin carrying the compiled program (Arrow IPC bytes): each
    worker deserializes it and loads the kernel once, at setup."""
    import pyarrow as pa
    from distributed.diagnostics.plugin import WorkerPlugin

    from ..trace.cache import program_to_table

    sink = pa.BufferOutputStream()
    table = program_to_table(program)
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    payload = sink.getvalue().to_pybytes()

    class ProgramPlugin(WorkerPlugin):
        idempotent = True

        def __init__(self, sha256, payload, thrash_factor):
            self.sha256, self.payload, self.thrash_factor = sha256, payload, thrash_factor

        def setup(self, worker):
            _install_from_ipc(self.sha256, self.payload, self.thrash_factor)

    return ProgramPlugin(program.sha256, payload, thrash_factor)


def check_size(params: SweepParams, max_points: int = MAX_POINTS) -> int:
    """The sweep's bound on runs (`grid.planned_points`); OptionError above `max_points`."""
    n = grid.planned_points(params)
    if n > max_points:
        raise OptionError(f"this sweep could make up to {n:,} runs, more than --max-points "
                          f"{max_points:,}: widen --step, lower --interior or --max-runs, "
                          f"or raise --max-points")
    return n


def make_backend(engine: str, program: Program, thrash_factor: float, *, jobs: int,
                 scheduler: str | None = None, start_method: str = DEFAULT_START_METHOD):
    if engine == "inline":
        return InlineBackend(program, thrash_factor)
    if engine == "process":
        return ProcessBackend(program, thrash_factor, jobs, start_method)
    if engine == "dask":
        if not scheduler:
            raise ValueError("--engine dask needs --scheduler ADDRESS")
        return DaskBackend(program, thrash_factor, scheduler)
    raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


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


# --- point sources --------------------------------------------------------------------

class _Static:
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


@dataclass
class SweepResult:
    """What one `run_sweep` call did (the analysis is `holes.analyze`)."""

    path: Path
    trace: TraceInfo
    resumed: bool
    stages: dict[str, StageCount] = field(default_factory=dict)
    coverage: dict[str, float] = field(default_factory=dict)
    gaps: dict[str, list[Gap]] = field(default_factory=dict)
    seconds: float = 0.0
    stopped: str | None = None     # "deadline": stopped for time, resumable; None: ran to its end

    @property
    def ran(self) -> int:
        return sum(s.ran for s in self.stages.values())

    @property
    def skipped(self) -> int:
        return sum(s.skipped for s in self.stages.values())


class OutOfTime(Exception):
    """The sweep's deadline passed: it stops submitting, keeps what finished."""


class WorkerDiedError(UserError):
    """A worker process of a sweep died (killed, out of memory) while running a
    point; the runs finished before it are stored, and the sweep resumes."""


class _Scheduler:
    def __init__(self, store: SweepStore, rows: list[dict], observer: SweepObserver,
                 timeout: float | None, deadline: float | None = None):
        self.store, self.rows, self.observer, self.timeout = store, rows, observer, timeout
        self.deadline = deadline
        self.by_key = {(r["policy"], r["budget"], r["rep"]): r for r in rows}
        self.counts: dict[str, StageCount] = {}
        self.lanes = Lanes()

    @property
    def done(self):
        return self.by_key.keys()

    def _check_time(self) -> None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise OutOfTime

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
            f"{point.ratio:.6g}, {point.stage} stage); the runs finished before it are kept "
            f"in {self.store.path}: rerun the same command to resume")

    def _wait_seconds(self) -> float:
        if self.deadline is None:
            return 0.25
        return max(0.0, min(0.25, self.deadline - time.monotonic()))

    def split(self, stage: str, points: list[Point]) -> list[Point]:
        """The points not stored yet (counted as skipped otherwise)."""
        count = self.counts.setdefault(stage, StageCount())
        todo = [p for p in points if p.key not in self.done]
        count.skipped += len(points) - len(todo)
        return todo

    def run(self, backend, stage: str, source) -> None:
        count = self.counts.setdefault(stage, StageCount())
        inflight: dict = {}
        try:
            while True:
                self._check_time()
                room = backend.capacity * source.queue_per_worker - len(inflight)
                if room > 0:
                    for point in source.take(room):
                        if point.key in self.by_key:      # stored by an earlier run
                            source.absorb(point, self.by_key[point.key])
                            continue
                        self._check_time()
                        lane = self.lanes.choose(point, backend.capacity, source.queue_per_worker)
                        inflight[backend.submit(point, self.timeout, lane)] = point
                if not inflight:
                    break
                for fut in backend.wait(inflight, self._wait_seconds()):
                    point = inflight.pop(fut)
                    try:
                        row = fut.result()
                    except cf.process.BrokenProcessPool:
                        raise self._died(backend, point, inflight.values()) from None
                    self.lanes.finished(point, row)
                    self.store.append(row)
                    self.rows.append(row)
                    self.by_key[point.key] = row
                    count.ran += 1
                    source.absorb(point, row)
                    self.observer.finished(row)
                self.store.maybe_flush()
        finally:
            for fut in inflight:
                fut.cancel()
            self.lanes.inflight.clear()
            self.lanes.order.clear()
            self.store.flush()


def run_sweep(trace: str | Program, params: SweepParams, out: str | os.PathLike, *,
              jobs: int | None = None, engine: str | None = None,
              scheduler: str | None = None, observer: SweepObserver | None = None,
              start_method: str = DEFAULT_START_METHOD, flush_rows: int = 64,
              flush_seconds: float = 2.0, max_points: int = MAX_POINTS,
              deadline: float | None = None) -> SweepResult:
    """Run (or resume, or extend) the sweep `params` of `trace` into the folder `out`.

    `trace`: a trace spec or path (see `load_trace`), or a Program read from a
    log file. `engine` defaults to `inline` for jobs=1, else `process`. A sweep
    that could make more than `max_points` runs is refused before it plans any.
    `deadline`: a `time.monotonic()` instant at which the sweep stops submitting
    runs, drops those in flight, stores what finished and returns with
    `stopped == "deadline"` (status "stopped" in sweep.json; the same call
    resumes it). A run already under way in this process (jobs=1) ends first.
    """
    started = time.perf_counter()
    params.validate()
    check_size(params, max_points)
    observer = observer or SweepObserver()
    if isinstance(trace, Program):
        program = trace
    else:
        from ..trace import load_trace
        program = load_trace(trace)
    jobs = validate.jobs(jobs or default_jobs())
    engine = engine or ("inline" if jobs == 1 else "process")
    _, base = prepared(program)
    peak = base.peak
    validate.ratio(params.ratio_to, "--to", peak)
    validate.thrash_limit(params.thrash_factor, base.model_compute)
    info = TraceInfo(program.name, program.sha256, str(program.source), peak, base.model_compute)
    lo, hi = grid.range_bytes(params, peak)
    store = SweepStore(out, flush_rows=flush_rows, flush_seconds=flush_seconds)
    resumed = store.open_or_create(params, info, (lo, hi))
    store.acquire()
    result = SweepResult(store.path, info, resumed)
    sched = None
    try:
        store.set_aside_corrupt()
        sched = _Scheduler(store, store.read_runs().to_pylist(), observer, params.timeout,
                           deadline)
        _run_stages(sched, program, params, peak, (lo, hi), result, engine=engine, jobs=jobs,
                    scheduler=scheduler, start_method=start_method)
    except OutOfTime:
        result.stopped = "deadline"
    except BaseException:
        _leave(store, "interrupted", sched)
        raise
    _leave(store, "stopped" if result.stopped else "complete", sched)
    result.stages = sched.counts
    result.seconds = time.perf_counter() - started
    return result


def _leave(store: SweepStore, status: str, sched: "_Scheduler | None") -> None:
    """Record how the sweep ended and release its folder. `runs` counts the rows
    this call knows of (those stored before it and every one it flushed)."""
    try:
        store.set_status(status, **({"runs": len(sched.rows)} if sched is not None else {}))
    finally:
        store.release()


def _run_stages(sched: _Scheduler, program: Program, params: SweepParams, peak: int,
                rng: tuple[int, int], result: SweepResult, *, engine: str, jobs: int,
                scheduler: str | None, start_method: str) -> None:
    """Every stage in order on one backend (repeats on their own fresh pools)."""
    backend = make_backend(engine, program, params.thrash_factor, jobs=jobs,
                           scheduler=scheduler, start_method=start_method)
    try:
        _sample_stages(sched, backend, params, peak, sched.observer)
        if params.exact:
            walks = _exact_walks(sched, params, rng)
            result.coverage = {p: w.coverage() for p, w in walks.items()}
            try:
                _exact_stage(sched, backend, peak, walks)
            finally:
                result.coverage = {p: w.coverage() for p, w in walks.items()}
                result.gaps = {p: w.classified_gaps() for p, w in walks.items()}
    except BaseException:
        backend.close(abort=True)
        raise
    backend.close()
    if params.repeats:
        _repeat_stage(sched, program, params, jobs, sched.observer)


def _sample_stages(sched: _Scheduler, backend, params: SweepParams, peak: int,
                   observer: SweepObserver) -> None:
    planned: set = set()
    for stage, points in (("grid", grid.plan_grid(params, peak)),
                          ("interior", grid.plan_interior(params, peak))):
        points = [p for p in points if p.key not in planned]
        planned.update(p.key for p in points)
        todo = sched.split(stage, points)
        if points:
            observer.stage(stage, len(todo), len(points) - len(todo))
            sched.run(backend, stage, _Static(todo))
    if not params.refine:
        return
    observer.stage("refine", 0, 0)
    while True:
        # A round plans from the points planned before it only (never from exact
        # or repeat runs), so a resumed sweep plans the very same rounds.
        samples = grid.samples_from_rows(
            [r for r in sched.rows if (r["policy"], r["budget"], r["rep"]) in planned])
        points = [p for p in grid.plan_refinement(samples, params, peak) if p.key not in planned]
        if not points:
            break
        planned.update(p.key for p in points)
        todo = sched.split("refine", points)
        observer.grow(len(todo))
        sched.run(backend, "refine", _Static(todo))


def _exact_walks(sched: _Scheduler, params: SweepParams,
                 rng: tuple[int, int]) -> dict[str, ExactWalk]:
    """One walk per policy, fed every stored certificate that is not a walk run."""
    walks = {p: ExactWalk(*rng, max_runs=params.max_runs, resolution=params.resolution)
             for p in params.policies}
    for r in sched.rows:
        if r["rep"] == 0 and r["policy"] in walks and r["stage"] != "exact":
            walks[r["policy"]].absorb(r["budget"], r["status"],
                                      (r["interval_lo"], r["interval_hi"]), walk_run=False)
    return walks


def _exact_stage(sched: _Scheduler, backend, peak: int, walks: dict[str, ExactWalk]) -> None:
    stored = {(r["policy"], r["budget"]): r for r in sched.rows
              if r["rep"] == 0 and r["policy"] in walks and r["stage"] == "exact"}
    sched.counts.setdefault("exact", StageCount()).skipped += len(stored)
    sched.observer.stage("exact", 0, len(stored))
    report = lambda: sched.observer.coverage(  # noqa: E731
        {p: w.coverage() for p, w in walks.items()})
    report()
    sched.run(backend, "exact", WalkRounds(walks, peak, stored, report))


def _repeat_stage(sched: _Scheduler, program: Program, params: SweepParams, jobs: int,
                  observer: SweepObserver) -> None:
    samples = grid.samples_from_rows(sched.rows)
    chosen = grid.select_repeats(samples, params)
    ratio_of = {(r["policy"], r["budget"]): r["ratio"] for r in sched.rows if r["rep"] == 0}
    for rep in range(1, params.repeats + 1):
        points = [Point(pol, b, rep, ratio_of[(pol, b)], "repeat") for pol, b in chosen]
        todo = sched.split("repeat", points)
        observer.stage(f"repeat {rep}", len(todo), len(points) - len(todo))
        if not todo:
            continue
        # a fresh pool per round: no rerun shares a process with an earlier run
        backend = ProcessBackend(program, params.thrash_factor, min(jobs, len(todo)),
                                 REPEAT_START_METHOD)
        try:
            sched.run(backend, "repeat", _Static(todo))
        except BaseException:
            backend.close(abort=True)
            raise
        backend.close()
