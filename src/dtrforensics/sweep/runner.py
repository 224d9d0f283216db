"""Run a sweep: plan points, run them in parallel, store results as they finish.

`run_sweep` drives the stages in order -- grid, interior samples, refinement
rounds, the exact walk, confirmation repeats -- through one scheduler
(`sweep/scheduler.py`) on one backend (`sweep/backends.py`), which keeps every
worker busy, appends each finished run to the sweep's Parquet dataset and skips
every point already stored, so an interrupted sweep rerun with the same
parameters resumes where it stopped (and a larger run limit or a wider range
extends it).

Confirmation repeats always run on a fresh local process pool per round, so a
rerun never shares a process with the run it checks.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from .. import validate
from ..engine.replay import prepared
from ..errors import OptionError
from ..trace.program import Program
from . import grid
from .backends import (  # noqa: F401
    DEFAULT_START_METHOD,
    ENGINES,
    REPEAT_START_METHOD,
    ProcessBackend,
    check_engine,
    default_jobs,
    make_backend,
)
from .estimate import ESTIMATE_SECONDS, SAMPLES, Estimate, calibrate
from .exact import ExactWalk, Gap, WalkRounds
from .scheduler import OutOfTime, Scheduler, StageCount, Static, SweepObserver, WorkerDiedError  # noqa: F401
from .store import Point, SweepParams, SweepStore, TraceInfo

MAX_POINTS = 100_000     # runs a sweep may plan unless asked for more (--max-points)
CALIBRATION_SHARE = 0.5  # of a deadline's time, the most a new sweep's calibration takes


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


def check_size(params: SweepParams, max_points: int = MAX_POINTS) -> int:
    """The sweep's bound on runs (`grid.planned_points`); OptionError above `max_points`."""
    n = grid.planned_points(params)
    if n > max_points:
        raise OptionError(f"this sweep could make up to {n:,} runs, more than --max-points "
                          f"{max_points:,}: widen --step, lower --interior or --max-runs, "
                          f"or raise --max-points")
    return n


def run_sweep(trace: str | Program, params: SweepParams, out: str | os.PathLike, *,
              jobs: int | None = None, engine: str | None = None,
              scheduler: str | None = None, observer: SweepObserver | None = None,
              start_method: str = DEFAULT_START_METHOD, flush_rows: int = 64,
              flush_seconds: float = 2.0, max_points: int = MAX_POINTS,
              deadline: float | None = None, estimate_samples: int = 0) -> SweepResult:
    """Run (or resume, or extend) the sweep `params` of `trace` into the folder `out`.

    `trace`: a trace spec or path (see `load_trace`), or a Program read from a
    log file. `engine` defaults to `inline` for jobs=1, else `process`. A sweep
    that could make more than `max_points` runs is refused before it plans any.
    `deadline`: a `time.monotonic()` instant at which the sweep stops submitting
    runs, drops those in flight, stores what finished and returns with
    `stopped == "deadline"` (status "stopped" in sweep.json; the same call
    resumes it). A run already under way in this process (jobs=1) ends first.
    `estimate_samples`: a new sweep first runs that many calibration runs per
    policy (within half its time to the deadline; stored nowhere) and tells the
    observer what it will cost (`estimate.py`); a resumed one does not again.
    """
    started = time.perf_counter()
    params.validate()
    check_size(params, max_points)
    observer = observer or SweepObserver()
    program, base, jobs, engine = _prepare(trace, params, jobs, engine, scheduler)
    peak = base.peak
    validate.thrash_limit(params.thrash_factor, base.model_compute)
    info = TraceInfo(program.name, program.sha256, str(program.source), peak, base.model_compute)
    lo, hi = grid.range_bytes(params, peak)
    # the backend first: a cluster that cannot be reached leaves no folder behind
    backend = make_backend(engine, program, params.thrash_factor, jobs=jobs,
                           scheduler=scheduler, start_method=start_method,
                           notice=observer.notice)
    try:
        store = SweepStore(out, flush_rows=flush_rows, flush_seconds=flush_seconds)
        resumed = store.open_or_create(params, info, (lo, hi))
        store.acquire()
    except BaseException:
        backend.close(abort=True)
        raise
    if resumed:     # calibrated when it started: a resumed sweep goes on with its runs
        estimate_samples = 0
    result = SweepResult(store.path, info, resumed)
    sched = None
    try:
        store.set_aside_corrupt()
        sched = Scheduler(store, store.read_runs().to_pylist(), observer, params.timeout,
                           deadline)
        _run_stages(sched, backend, program, params, (lo, hi), result, jobs=jobs,
                    estimate_samples=estimate_samples)
    except OutOfTime:
        result.stopped = "deadline"
    except BaseException:
        _leave(store, "interrupted", sched)
        raise
    _leave(store, "stopped" if result.stopped else "complete", sched)
    result.stages = sched.counts
    result.seconds = time.perf_counter() - started
    return result


def _prepare(trace: str | Program, params: SweepParams, jobs: int | None,
             engine: str | None, scheduler: str | None):
    """The trace loaded and prepared, `--to` checked against its peak, the jobs and
    engine settled: what a sweep and its estimate both start from."""
    if engine is not None:
        check_engine(engine, scheduler)
    if isinstance(trace, Program):
        program = trace
    else:
        from ..trace import load_trace
        program = load_trace(trace)
    jobs = validate.jobs(jobs or default_jobs())
    engine = engine or ("inline" if jobs == 1 else "process")
    _, base = prepared(program)
    validate.ratio(params.ratio_to, "--to", base.peak)
    return program, base, jobs, engine


def estimate_sweep(trace: str | Program, params: SweepParams, *, jobs: int | None = None,
                   engine: str | None = None, scheduler: str | None = None,
                   samples: int = SAMPLES, seconds: float = ESTIMATE_SECONDS,
                   start_method: str = DEFAULT_START_METHOD,
                   observer: SweepObserver | None = None,
                   until: float | None = None) -> Estimate:
    """What the sweep `params` of `trace` would cost (`estimate.py`), from
    `samples` strata per policy calibrated on the backend it would run on, the
    walks below wide intervals for at most `seconds`; no sweep folder is made.
    `observer` hears only notices (what the backend waits for). At the
    monotonic instant `until` the calibration stops and estimates from what
    finished (OptionError when nothing did)."""
    params.validate()
    program, base, jobs, engine = _prepare(trace, params, jobs, engine, scheduler)
    backend = make_backend(engine, program, params.thrash_factor, jobs=jobs,
                           scheduler=scheduler, start_method=start_method,
                           notice=(observer or SweepObserver()).notice)
    try:
        estimate = calibrate(backend, program, params, base.peak,
                             grid.range_bytes(params, base.peak), samples, seconds,
                             until=until)
    except BaseException:
        backend.close(abort=True)
        raise
    # stopped at `until`: the runs still in flight are not waited for
    backend.close(abort=until is not None and time.monotonic() >= until)
    if not estimate.samples:
        raise OptionError("no calibration run finished within --max-seconds: nothing to "
                          "estimate from (give it more time)")
    return estimate


def _leave(store: SweepStore, status: str, sched: "Scheduler | None") -> None:
    """Record how the sweep ended and release its folder. `runs` counts the rows
    this call knows of (those stored before it and every one it flushed)."""
    try:
        store.set_status(status, **({"runs": len(sched.rows)} if sched is not None else {}))
    finally:
        store.release()


def _run_stages(sched: Scheduler, backend, program: Program, params: SweepParams,
                rng: tuple[int, int], result: SweepResult, *, jobs: int,
                estimate_samples: int = 0) -> None:
    """Every stage in order on `backend`, closed after them (repeats run on their
    own fresh pools)."""
    peak = result.trace.peak
    try:
        if estimate_samples:
            sched.observer.estimated(calibrate(backend, program, params, peak, rng,
                                               estimate_samples, sched=sched,
                                               until=_calibration_ends(sched.deadline)))
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


def _calibration_ends(deadline: float | None) -> float | None:
    """When a sweep with a deadline stops calibrating: half its time is left
    to its runs."""
    if deadline is None:
        return None
    return time.monotonic() + CALIBRATION_SHARE * max(0.0, deadline - time.monotonic())


def _sample_stages(sched: Scheduler, backend, params: SweepParams, peak: int,
                   observer: SweepObserver) -> None:
    planned: set = set()
    for stage, points in (("grid", grid.plan_grid(params, peak)),
                          ("interior", grid.plan_interior(params, peak))):
        points = [p for p in points if p.key not in planned]
        planned.update(p.key for p in points)
        todo = sched.split(stage, points)
        if points:
            observer.stage(stage, len(todo), len(points) - len(todo))
            sched.run(backend, stage, Static(todo))
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
        sched.run(backend, "refine", Static(todo))


def _exact_walks(sched: Scheduler, params: SweepParams,
                 rng: tuple[int, int]) -> dict[str, ExactWalk]:
    """One walk per policy, fed every stored certificate that is not a walk run."""
    walks = {p: ExactWalk(*rng, max_runs=params.max_runs, resolution=params.resolution)
             for p in params.policies}
    for r in sched.rows:
        if r["rep"] == 0 and r["policy"] in walks and r["stage"] != "exact":
            walks[r["policy"]].absorb(r["budget"], r["status"],
                                      (r["interval_lo"], r["interval_hi"]), walk_run=False)
    return walks


def _exact_stage(sched: Scheduler, backend, peak: int, walks: dict[str, ExactWalk]) -> None:
    stored = {(r["policy"], r["budget"]): r for r in sched.rows
              if r["rep"] == 0 and r["policy"] in walks and r["stage"] == "exact"}
    sched.counts.setdefault("exact", StageCount()).skipped += len(stored)
    sched.observer.stage("exact", 0, len(stored))
    report = lambda: sched.observer.coverage(  # noqa: E731
        {p: w.coverage() for p, w in walks.items()})
    report()
    sched.run(backend, "exact", WalkRounds(walks, peak, stored, report))


def _repeat_stage(sched: Scheduler, program: Program, params: SweepParams, jobs: int,
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
            sched.run(backend, "repeat", Static(todo))
        except BaseException:
            backend.close(abort=True)
            raise
        backend.close()
