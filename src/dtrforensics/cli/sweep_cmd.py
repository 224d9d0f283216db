"""`dtrf sweep`, `dtrf holes`, `dtrf plot`: budget sweeps and their maps.

`sweep` runs (or resumes) a sweep into a folder; `holes` and `plot` read that
folder. Computing is in `dtrforensics.sweep`; this module parses options and
renders (rich progress and tables, JSON).
"""

from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console, Group
from rich.panel import Panel
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)
from rich.table import Table

from ..engine.policies import POLICIES
from ..errors import NotDeterministicError
from ..sweep.store import SweepStoreError
from .errors import CommandError
from .format import fmt_exact_bytes

SWEEPS_DIR = Path("recordings") / "sweeps"
MAX_ROWS = 40


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
    app.command("holes")(holes_cmd)
    app.command("plot")(plot_cmd)


# --- dtrf sweep ------------------------------------------------------------------------

def sweep(
    trace: Annotated[str, typer.Argument(help="Short name (resnet32, lstm, ...) or path to a DTR log.")],
    ratio_from: Annotated[float, typer.Option("--from", help="Lowest budget ratio of the range.")] = 0.05,
    ratio_to: Annotated[float, typer.Option("--to", help="Highest budget ratio of the range.")] = 1.0,
    step: Annotated[Optional[float], typer.Option(help="Grid step in ratio units (stage A).")] = None,
    policy: Annotated[str, typer.Option(help=f"Policies, comma-separated: {', '.join(POLICIES)}.")] = "dtr",
    interior: Annotated[int, typer.Option(help="Seeded random samples inside every grid interval.")] = 0,
    seed: Annotated[int, typer.Option(help="Seed of the interior samples.")] = 0,
    refine: Annotated[bool, typer.Option("--refine", help="Refine intervals whose neighbouring samples differ in outcome or jump in overhead.")] = False,
    min_step: Annotated[float, typer.Option(help="Finest refinement step (ratio units).")] = 0.0001,
    overhead_jump: Annotated[float, typer.Option(help="Relative overhead difference that calls for refinement (0.25 = 25%).")] = 0.25,
    exact: Annotated[bool, typer.Option("--exact", help="Partition the range into exact budget intervals by walking the engine's certificates.")] = False,
    max_runs: Annotated[int, typer.Option(help="Exact mode: at most this many walk runs per policy.")] = 2000,
    resolution: Annotated[int, typer.Option(help="Exact mode: leave gaps narrower than this many bytes uncertified.")] = 1,
    repeats: Annotated[int, typer.Option(help="Rerun the edge points N times in fresh processes and check they agree.")] = 0,
    timeout: Annotated[Optional[float], typer.Option(help="Wall-clock limit per run (s); a timed-out point is unresolved.")] = None,
    jobs: Annotated[Optional[int], typer.Option(help="Worker processes (default: all cores; 1 runs in this process).")] = None,
    engine: Annotated[Optional[str], typer.Option(help="process (default), dask (with --scheduler) or inline.")] = None,
    scheduler: Annotated[Optional[str], typer.Option(help="Dask scheduler address, e.g. tcp://host:8786.")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Sweep folder (default recordings/sweeps/<trace>-<time>/, or the latest one with the same parameters, to resume).")] = None,
    max_points: Annotated[int, typer.Option(help="Refuse a sweep that could make more runs than this (grid, interior, refinement and exact runs, all policies).")] = 100_000,
    flush_rows: Annotated[int, typer.Option(help="Runs per Parquet part file (a kill loses at most one unflushed batch; batches are also flushed every 2 s).")] = 64,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the holes report as JSON.")] = False,
) -> None:
    """Replay TRACE over a range of budgets, in parallel, resumably; then map its holes."""
    from ..sweep.runner import ENGINES, check_size, run_sweep
    from ..sweep.store import SweepParams
    from ..trace import load_trace

    policies = tuple(p for p in policy.replace(" ", "").split(",") if p)
    for p in policies:
        if p not in POLICIES:
            raise CommandError(f"unknown policy {p!r}; known: {', '.join(POLICIES)}")
    if engine is not None and engine not in ENGINES:
        raise CommandError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    if (engine == "dask") != (scheduler is not None):
        raise CommandError("--engine dask and --scheduler ADDRESS go together")
    if jobs is not None and jobs < 1:
        raise CommandError("--jobs must be >= 1")
    if flush_rows < 1:
        raise CommandError("--flush-rows must be >= 1")
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
    out = out if out is not None else default_out(program.name, program.sha256, params)
    err = Console(stderr=True)
    observer = _RichObserver(err, enabled=not no_progress and err.is_terminal)
    err.print(f"sweep of {program.name} -> {out}")
    try:
        with observer:
            result = run_sweep(program, params, out, jobs=jobs, engine=engine,
                               scheduler=scheduler, observer=observer, flush_rows=flush_rows,
                               max_points=max_points)
    except SweepStoreError as exc:
        raise CommandError(str(exc)) from None
    except KeyboardInterrupt:
        err.print(f"[yellow]interrupted: finished runs are kept in {out}; rerun the same "
                  f"command (with --out {out}) to resume[/]")
        sys.exit(130)   # typer turns KeyboardInterrupt into a return value main() drops
    err.print(f"{result.ran} runs in {result.seconds:.1f} s"
              + (f", {result.skipped} already stored (resumed)" if result.skipped else ""))
    _report(out, None, None, as_json)


def default_out(name: str, sha256: str, params) -> Path:
    """The latest sweep of this trace with these parameters (to resume), else a new folder."""
    from ..sweep.store import SweepStore
    for folder in sorted(SWEEPS_DIR.glob(f"{name}-*"), reverse=True):
        store = SweepStore(folder)
        try:
            if store.trace.sha256 == sha256 and not store.params.differences(params):
                return folder
        except (SweepStoreError, KeyError, TypeError):
            continue
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    folder, n = SWEEPS_DIR / f"{name}-{stamp}", 1
    while folder.exists():
        n += 1
        folder = SWEEPS_DIR / f"{name}-{stamp}-{n}"
    return folder


class _RichObserver:
    """Progress bar with ETA on stderr: one task per stage, coverage in exact mode."""

    def __init__(self, console: Console, enabled: bool):
        self.enabled = enabled
        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description:<14}"), BarColumn(),
            MofNCompleteColumn(), TextColumn("{task.fields[note]}"), TimeElapsedColumn(),
            TextColumn("eta"), TimeRemainingColumn(), console=console, transient=False,
            disable=not enabled)
        self.task = None
        self.counts = {"ok": 0, "fail": 0, "unresolved": 0}
        self.exact = False

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def stage(self, name: str, todo: int, skipped: int) -> None:
        self.counts = {"ok": 0, "fail": 0, "unresolved": 0}
        self.exact = name == "exact"
        note = f"{skipped} stored" if skipped else ""
        total = 1000 if self.exact else todo
        self.task = self.progress.add_task(name, total=total, note=note)

    def grow(self, n: int) -> None:
        if self.task is not None and not self.exact:
            task = self.progress.tasks[-1]
            self.progress.update(self.task, total=(task.total or 0) + n)

    def finished(self, row: dict) -> None:
        self.counts[row["status"]] = self.counts.get(row["status"], 0) + 1
        c = self.counts
        note = f"ok {c['ok']} fail {c['fail']}" + (f" timeout {c['unresolved']}"
                                                    if c["unresolved"] else "")
        if self.exact:
            self.progress.update(self.task, note=f"{sum(c.values())} runs, " + note)
        else:
            self.progress.update(self.task, advance=1, note=note)

    def coverage(self, fractions: dict[str, float]) -> None:
        if self.task is not None and fractions:
            mean = sum(fractions.values()) / len(fractions)
            self.progress.update(self.task, completed=int(mean * 1000),
                                 description=f"exact {mean:6.1%}")


# --- dtrf holes ------------------------------------------------------------------------

def holes_cmd(
    sweep_dir: Annotated[Path, typer.Argument(metavar="SWEEP", help="A sweep folder (made by dtrf sweep).")],
    policy: Annotated[Optional[str], typer.Option(help="Only these policies (comma-separated).")] = None,
    threshold: Annotated[Optional[float], typer.Option(help="Overhead jump for a regime switch (default: the sweep's --overhead-jump).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Feasibility holes, edges, timeouts and regime switches of a sweep."""
    _report(sweep_dir, policy, threshold, as_json)


def _report(sweep_dir: Path, policy: str | None, threshold: float | None, as_json: bool) -> None:
    from ..sweep.holes import analyze
    policies = [p for p in policy.split(",") if p] if policy else None
    try:
        report = analyze(sweep_dir, threshold=threshold, policies=policies)
    except (SweepStoreError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=1))
    else:
        Console().print(*render_report(report))
    bad = [p.policy for p in report.policies
           if p.disagreements or (p.exact is not None and p.exact.overlaps)]
    if bad:
        raise NotDeterministicError(f"reruns or certificates disagree for {', '.join(bad)}: "
                                    "the replay is not deterministic")


def render_report(report) -> list:
    trace = report.trace
    lo, hi = report.range_bytes
    head = (f"[bold]{trace.name}[/] peak {fmt_exact_bytes(trace.peak)}; range ratio "
            f"{report.params.ratio_from:g}-{report.params.ratio_to:g} = bytes {lo:,}-{hi:,}; "
            f"sweep {report.status}")
    return [head] + [_policy_panel(report, p) for p in report.policies]


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def _ov(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}x"


def _policy_panel(report, p) -> Panel:
    peak = report.trace.peak
    parts: list = []
    fs = p.first_success
    first = (f"ratio {_r(fs.sample.ratio)} ({fs.sample.budget:,} B, overhead {_ov(fs.sample.overhead)})"
             if fs.sample else "[red]none: no sample completes[/]")
    parts.append(f"samples {fs.samples}; first success {first}; {fs.failing_below} failing below it")
    if p.failures_above:
        shown = ", ".join(_r(s.ratio) for s in p.failures_above[:12])
        more = f" (+{len(p.failures_above) - 12})" if len(p.failures_above) > 12 else ""
        parts.append(f"[red]{len(p.failures_above)} failing samples above the first success:[/] "
                     f"{shown}{more}")
    if p.failure_regions:
        t = Table(title="failure regions (samples)", title_justify="left")
        for c in ("#", "failing ratios", "failing bytes", "samples", "outcome",
                  "last ok below", "first ok above", "timeouts"):
            t.add_column(c)
        for i, r in enumerate(p.failure_regions, 1):
            t.add_row(str(i), f"{_r(r.lo.ratio)} - {_r(r.hi.ratio)}",
                      f"{r.lo.budget:,} - {r.hi.budget:,}", str(r.failing), r.outcomes,
                      f"{_r(r.below.ratio)} ({_ov(r.below.overhead)})",
                      f"{_r(r.above.ratio)} ({_ov(r.above.overhead)})", str(r.timeouts_inside))
        parts.append(t)
    else:
        parts.append("[green]no sample-supported failure region[/]")
    if p.edge_brackets:
        t = Table(title="edge brackets", title_justify="left")
        for c in ("edge", "last ok / first ok", "failing sample", "bracket width"):
            t.add_column(c)
        for e in p.edge_brackets[:MAX_ROWS]:
            t.add_row(e.direction, f"{_r(e.ok.ratio)} ({e.ok.budget:,} B)",
                      f"{_r(e.fail.ratio)} ({e.fail.budget:,} B, {e.fail.outcome})",
                      f"{e.width_bytes:,} B")
        parts.append(t)
    if p.regime_switches:
        t = Table(title=f"regime switches (overhead jump > {report.threshold:.0%})",
                  title_justify="left")
        for c in ("from ratio", "to ratio", "overheads", "factor"):
            t.add_column(c)
        for s in p.regime_switches[:MAX_ROWS]:
            t.add_row(_r(s.lo.ratio), _r(s.hi.ratio),
                      f"{_ov(s.lo.overhead)} -> {_ov(s.hi.overhead)}", f"{s.factor:.2f} {s.direction}")
        parts.append(t)
    if p.unresolved:
        parts.append("[magenta]unresolved (timeout): "
                     + ", ".join(f"{_r(u.ratio)}" + (f" rep {u.rep}" if u.rep else "")
                                 for u in p.unresolved[:20]) + "[/]")
    if p.exact is not None:
        parts += _exact_parts(p.exact, peak)
    if p.reruns or p.disagreements:
        if p.disagreements:
            t = Table(title="[red]reruns that disagree[/]", title_justify="left")
            for c in ("ratio", "budget", "rep", "differs in", "outcomes"):
                t.add_column(c)
            for d in p.disagreements:
                t.add_row(_r(d.ratio), f"{d.budget:,}", str(d.rep), ", ".join(d.differing),
                          f"{d.outcome_run} / {d.outcome_rerun}")
            parts.append(t)
        else:
            parts.append(f"[green]{p.reruns} reruns in fresh processes, all identical[/]")
    return Panel(Group(*parts), title=f"{report.trace.name} · {p.policy}", expand=False)


def _exact_parts(x, peak: int) -> list:
    parts: list = [f"exact: {x.coverage:.4%} of the range certified "
                   f"({x.certified_bytes:,} of {x.range_bytes:,} bytes), "
                   f"{len(x.partition)} distinct executions, {len(x.merged)} runs of equal outcome"]
    if x.failure_regions:
        t = Table(title="failing budgets (exact)", title_justify="left")
        for c in ("first byte", "last byte", "width", "ratios", "executions", "edges", "kind"):
            t.add_column(c)
        for r in x.failure_regions:
            edges = ("exact" if r.lo_exact and r.hi_exact else
                     f"{'exact' if r.lo_exact else 'open'}/{'exact' if r.hi_exact else 'open'}")
            kind = "hole" if r.hole else ("below first success" if r.below_status is None
                                          else "top of range" if r.above_status is None else "-")
            t.add_row(f"{r.lo:,}", f"{r.hi:,}", f"{r.hi - r.lo + 1:,}",
                      f"{r.lo / peak:.6f} - {r.hi / peak:.6f}", str(r.intervals), edges, kind)
        parts.append(t)
    t = Table(title="partition (adjacent equal outcomes merged)", title_justify="left")
    for c in ("from byte", "to byte", "width", "outcome", "executions", "min overhead"):
        t.add_column(c)
    for m in x.merged[:MAX_ROWS]:
        t.add_row(f"{m.lo:,}", f"{m.hi:,}", f"{m.hi - m.lo + 1:,}", m.outcome, str(m.intervals),
                  _ov(m.overhead))
    if len(x.merged) > MAX_ROWS:
        t.add_row("...", f"{len(x.merged) - MAX_ROWS} more (--json)", "", "", "", "")
    parts.append(t)
    if x.gaps:
        by_reason: dict[str, list] = {}
        for g in x.gaps:
            by_reason.setdefault(g.reason, []).append(g)
        parts.append("[yellow]uncertified: " + "; ".join(
            f"{len(gs)} gaps {reason} ({sum(g.width for g in gs):,} bytes)"
            for reason, gs in by_reason.items()) + "[/]")
    if x.overlaps:
        parts.append(f"[red]{len(x.overlaps)} overlapping certificates[/]")
    return parts


# --- dtrf plot -------------------------------------------------------------------------

def plot_cmd(
    sweep_dir: Annotated[Path, typer.Argument(metavar="SWEEP", help="A sweep folder (made by dtrf sweep).")],
    out: Annotated[Optional[Path], typer.Option(help="Output path without suffix (default SWEEP/plot): writes .png and .svg.")] = None,
    policy: Annotated[Optional[str], typer.Option(help="Only these policies (comma-separated).")] = None,
    failure_panel: Annotated[bool, typer.Option(help="Second panel: pinned bytes and depth at each OOM.")] = True,
) -> None:
    """Overhead against budget ratio per policy, failing budgets and holes marked."""
    from ..sweep.holes import analyze, load_points
    try:
        from ..sweep.plot import draw, save
        report = analyze(sweep_dir, policies=[p for p in policy.split(",") if p] if policy else None)
        fig = draw(report, load_points(sweep_dir), failure_panel=failure_panel)
    except (SweepStoreError, ValueError, ImportError) as exc:
        raise CommandError(str(exc)) from None
    for path in save(fig, out if out is not None else Path(sweep_dir) / "plot"):
        print(path)
