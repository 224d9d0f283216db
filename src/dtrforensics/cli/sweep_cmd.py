"""`dtrf sweep`: run (or resume, or extend) a budget sweep into a folder, then
map it as `dtrf holes` does. Computing is in `dtrforensics.sweep`; this module
parses options and renders (rich progress and tables, JSON).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import BriefOption, report_sweep, sweeping
from .errors import CommandError
from .kernel_notice import announce_compile
from .options import (
    POLICY_HELP,
    SCHEDULER_HELP,
    at_least,
    check_jobs,
    check_policies,
    check_ratio,
    check_seed,
    check_timeout,
    output_folder,
    positive,
    seconds,
    split_policies,
    sweep_engine,
)


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)


def sweep(
    trace: Annotated[str, typer.Argument(help="Short name (resnet32, lstm, ...) or path to a DTR log.")],
    ratio_from: Annotated[float, typer.Option("--from", callback=check_ratio, help="Lowest budget ratio of the range.")] = 0.05,
    ratio_to: Annotated[float, typer.Option("--to", callback=check_ratio, help="Highest budget ratio of the range.")] = 1.0,
    step: Annotated[Optional[float], typer.Option(callback=positive, help="Grid step in ratio units (stage A).")] = None,
    policy: Annotated[str, typer.Option(callback=check_policies, help="Policies, comma-separated. " + POLICY_HELP)] = "dtr",
    interior: Annotated[int, typer.Option(callback=at_least(0), help="Seeded random samples inside every grid interval.")] = 0,
    seed: Annotated[int, typer.Option(callback=check_seed, help="Seed of the interior samples.")] = 0,
    refine: Annotated[bool, typer.Option("--refine", help="Refine intervals whose neighbouring samples differ in outcome or jump in overhead.")] = False,
    min_step: Annotated[float, typer.Option(callback=positive, help="Finest refinement step (ratio units).")] = 0.0001,
    overhead_jump: Annotated[float, typer.Option(callback=positive, help="Relative overhead difference that calls for refinement (0.25 = 25%).")] = 0.25,
    exact: Annotated[bool, typer.Option("--exact", help="Partition the range into exact budget intervals by walking the engine's certificates.")] = False,
    max_runs: Annotated[int, typer.Option(callback=at_least(1), help="Exact mode: at most this many walk runs per policy.")] = 2000,
    resolution: Annotated[int, typer.Option(callback=at_least(1), help="Exact mode: leave gaps narrower than this many bytes uncertified.")] = 1,
    repeats: Annotated[int, typer.Option(callback=at_least(0), help="Rerun the edge points N times in fresh processes and check they agree.")] = 0,
    timeout: Annotated[Optional[float], typer.Option(callback=check_timeout, help="Wall-clock limit per run (s); a timed-out point is unresolved.")] = None,
    jobs: Annotated[Optional[int], typer.Option(callback=check_jobs, help="Worker processes (default: all cores; 1 runs in this process).")] = None,
    engine: Annotated[Optional[str], typer.Option(help="process (default), dask (with --scheduler) or inline.")] = None,
    scheduler: Annotated[Optional[str], typer.Option(help=SCHEDULER_HELP)] = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", callback=output_folder, help="Sweep folder (default recordings/sweeps/<trace>-<time>/, or the latest one with the same parameters, to resume).")] = None,
    max_points: Annotated[int, typer.Option(callback=at_least(1), help="Refuse a sweep that could make more runs than this (grid, interior, refinement and exact runs, all policies).")] = 100_000,
    flush_rows: Annotated[int, typer.Option(callback=at_least(1), help="Runs per Parquet part file (a kill loses at most one unflushed batch; batches are also flushed every 2 s).")] = 64,
    max_seconds: Annotated[Optional[float], typer.Option(callback=seconds, help="Stop cleanly after this many seconds (runs in flight are dropped); the same command continues the sweep. With --estimate: calibrate at most this long.")] = None,
    estimate: Annotated[bool, typer.Option("--estimate", help="Only say what the sweep would cost (executions, CPU-hours, time on the workers), from a short sample of runs; store nothing.")] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the holes report as JSON.")] = False,
    brief: BriefOption = False,
) -> None:
    """Replay TRACE over a range of budgets, in parallel, resumably; then map its holes."""
    from ..render.console import err_console
    from ..sweep.estimate import START_SAMPLES
    from ..sweep.resume import sweep_folder
    from ..sweep.runner import check_size, run_sweep
    from ..sweep.store import SweepParams
    from ..trace import load_trace

    policies = split_policies(policy)
    engine = sweep_engine(engine, scheduler)
    if jobs is not None and jobs < 1:
        raise CommandError("--jobs must be >= 1")
    if flush_rows < 1:
        raise CommandError("--flush-rows must be >= 1")
    if max_seconds is not None and not 0 < max_seconds < float("inf"):
        raise CommandError("--max-seconds must be a positive number")
    params = SweepParams(ratio_from=ratio_from, ratio_to=ratio_to, step=step, policies=policies,
                         interior=interior, seed=seed, refine=refine, min_step=min_step,
                         overhead_jump=overhead_jump, exact=exact, max_runs=max_runs,
                         resolution=resolution, repeats=repeats, timeout=timeout)
    try:
        params.validate()
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    check_size(params, max_points)
    program = load_trace(trace)
    announce_compile(sharing=True)     # before the deadline: --max-seconds never counts a compile
    import time
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    if estimate:
        _estimate(program, params, jobs, engine, scheduler, as_json, deadline)
        return
    out = out if out is not None else sweep_folder(program.name, program.sha256, params)
    with sweeping(out, f"sweep of {program.name} -> {out}",
                  progress=not no_progress) as observer:
        result = run_sweep(program, params, out, jobs=jobs, engine=engine, scheduler=scheduler,
                           observer=observer, flush_rows=flush_rows, max_points=max_points,
                           deadline=deadline, estimate_samples=START_SAMPLES)
    err_console().print(f"{result.ran} runs in {result.seconds:.1f} s"
              + (f", {result.skipped} already stored (resumed)" if result.skipped else "")
              + ("; stopped at --max-seconds: the same command continues it"
                 if result.stopped else ""))
    report_sweep(out, None, None, as_json, brief)


def _estimate(program, params, jobs, engine, scheduler, as_json: bool,
              deadline: float | None) -> None:
    """`--estimate`: the calibration sample alone (until `deadline`, from
    --max-seconds), its estimate on stdout."""
    from ..render.console import err_console
    from ..render.sweep import SweepProgress, estimate_line
    from ..sweep.estimate import ESTIMATE_SECONDS, SAMPLES
    from ..sweep.runner import estimate_sweep
    err = err_console()
    err.print(f"estimating the sweep of {program.name} from {SAMPLES} samples per policy")
    est = estimate_sweep(program, params, jobs=jobs, engine=engine, scheduler=scheduler,
                         samples=SAMPLES, seconds=ESTIMATE_SECONDS,
                         observer=SweepProgress(err, enabled=False), until=deadline)
    if as_json:
        from .common import print_json
        print_json(est.to_json())
    else:
        from ..render.lines import say
        say(estimate_line(est, workers=(1,)))
