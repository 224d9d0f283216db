"""`dtrf intervene` and `dtrf explain`: what-if retentions and the hindsight search."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from ..analyses.explain import explain
from ..analyses.interventions import InterventionResult, intervene
from ..engine.policies import POLICIES
from ..engine.replay import InterventionError
from ..trace import load_trace
from .errors import CommandError
from .format import fmt_exact_bytes
from .options import at_least, check_timeout, interventions_from_options

RecordRoot = Annotated[str, typer.Option(help="Where the runs are recorded (reused when present); '' to not record.")]


def register(app: typer.Typer) -> None:
    app.command("intervene")(intervene_command)
    app.command("explain")(explain_command)


def _budget_args(ratio, budget):
    if (ratio is None) == (budget is None):
        raise CommandError("give exactly one of --ratio or --budget")
    return {"ratio": ratio} if ratio is not None else {"budget": budget}


def intervene_command(
    trace: Annotated[str, typer.Argument(help="Short name or path to a DTR log.")],
    ratio: Annotated[Optional[float], typer.Option(help="Budget as a fraction of peak memory.")] = None,
    budget: Annotated[Optional[int], typer.Option(help="Budget in bytes.")] = None,
    policy: Annotated[str, typer.Option(help=f"Policy: {', '.join(POLICIES)}.")] = "dtr",
    retain: Annotated[Optional[str], typer.Option(help="Storages never offered as victims, e.g. 3131 or 612,302.")] = None,
    retain_ops: Annotated[Optional[str], typer.Option(help="Limit --retain to decisions inside top-level ops A..B.")] = None,
    forbid_victim: Annotated[Optional[list[str]], typer.Option(help="S@K: exclude storage S at decision K.")] = None,
    force_victim: Annotated[Optional[list[str]], typer.Option(help="S@K: evict S at decision K instead.")] = None,
    timeout: Annotated[Optional[float], typer.Option(callback=check_timeout, help="Wall-clock limit per run, seconds.")] = None,
    record_root: RecordRoot = "recordings/interventions",
    as_json: Annotated[bool, typer.Option("--json", help="Print {baseline, intervention, control, control_matches}.")] = False,
) -> None:
    """Run TRACE at a budget three times: baseline, with the intervention, and a
    control (same code path, nothing changed) that must reproduce the baseline."""
    ivs = interventions_from_options(retain, retain_ops, forbid_victim, force_victim)
    if ivs.is_empty():
        raise CommandError("nothing to change: give --retain, --forbid-victim or --force-victim")
    program = load_trace(trace)
    try:
        result = intervene(program, ivs, policy=policy, timeout=timeout,
                           record_root=Path(record_root) if record_root else None,
                           **_budget_args(ratio, budget))
    except InterventionError as exc:
        raise CommandError(str(exc)) from None
    if as_json:
        typer.echo(json.dumps(result.to_json()))
        return
    console = Console()
    console.print(side_by_side(result, ivs.to_json()))
    verdict = ("[green]the control reproduces the baseline exactly[/]" if result.control_matches
               else "[bold red]the control does NOT reproduce the baseline: the comparison is not valid[/]")
    console.print(verdict)
    _print_diff(console, result)


def side_by_side(result: InterventionResult, interventions: dict) -> Table:
    table = Table(title="baseline / intervention / control")
    table.add_column("")
    for name in ("baseline", "intervention", "control"):
        table.add_column(name, justify="right")
    runs = (result.baseline.summary, result.intervention.summary, result.control.summary)
    rows = [
        ("outcome", lambda s: s["outcome"]),
        ("overhead", lambda s: f"{s['overhead']:.4f}x"),
        ("pressure evictions", lambda s: f"{s['evictions']:,}"),
        ("remats", lambda s: f"{s['remats']:,}"),
        ("peak pinned", lambda s: fmt_exact_bytes(s["max_pinned"]["bytes"])),
        ("depth at peak pinned", lambda s: str(s["max_pinned"]["depth"])),
        ("max nesting depth", lambda s: str(s["max_depth"])),
        ("victims sha256", lambda s: s["victims_sha256"][:12]),
    ]
    for label, get in rows:
        table.add_row(label, *(get(s) for s in runs))
    table.caption = f"intervention: {json.dumps({k: v for k, v in interventions.items() if v})}"
    return table


def _print_diff(console: Console, result: InterventionResult) -> None:
    """Baseline vs intervention: the first divergence, when the diff analysis is present."""
    if not (result.baseline.recording and result.intervention.recording):
        return
    try:
        from ..analyses.diff import diff
        from .diff_cmd import render_diff
    except ImportError:
        return
    console.print(render_diff(diff(result.baseline.recording, result.intervention.recording)))


def explain_command(
    trace: Annotated[str, typer.Argument(help="Short name or path to a DTR log.")],
    ratio: Annotated[Optional[float], typer.Option(help="Budget as a fraction of peak memory.")] = None,
    budget: Annotated[Optional[int], typer.Option(help="Budget in bytes.")] = None,
    policy: Annotated[str, typer.Option(help=f"Policy: {', '.join(POLICIES)}.")] = "dtr",
    max_attempts: Annotated[int, typer.Option(callback=at_least(1), help="At most this many retentions are tried.")] = 32,
    max_combo: Annotated[int, typer.Option(callback=at_least(1), help="Largest retained set tried (1 = singles only).")] = 2,
    timeout: Annotated[Optional[float], typer.Option(callback=check_timeout, help="Wall-clock limit per attempt, seconds (a timed-out attempt is unresolved).")] = None,
    jobs: Annotated[Optional[int], typer.Option(callback=at_least(1), help="Parallel processes (default: all cores).")] = None,
    first: Annotated[Optional[int], typer.Option(callback=at_least(1), help="Stop after this many fixes are found.")] = None,
    record_root: RecordRoot = "recordings/explain",
    as_json: Annotated[bool, typer.Option("--json", help="Print {fixes, tried, control, ...} as JSON.")] = False,
) -> None:
    """For a failing run, find the storages whose retention turns the failure into
    a completion: candidates are storages the failing frontier needed that were
    evicted earlier (latest first); singles, then small combinations."""
    program = load_trace(trace)
    console = Console(stderr=as_json)
    with Progress(TextColumn("[bold]retentions"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), TextColumn("{task.fields[last]}"), console=console,
                  transient=as_json) as progress:
        task = progress.add_task("explain", total=None, last="")

        def on_attempt(attempt, done, total):
            progress.update(task, completed=done, total=total,
                            last=f"{attempt.retain}: {attempt.summary['outcome']}")

        result = explain(program, policy=policy, max_attempts=max_attempts, max_combo=max_combo,
                         timeout=timeout, jobs=jobs, stop_after_fixes=first,
                         record_root=Path(record_root) if record_root else None,
                         on_attempt=on_attempt, **_budget_args(ratio, budget))
    if as_json:
        typer.echo(json.dumps(result.to_json()))
        return
    base = result.baseline
    if base["outcome"] != "oom":
        console.print(f"The run does not fail (outcome {base['outcome']}): nothing to explain.")
        return
    console.print(f"Baseline: [bold red]oom[/] at op {base['oom']['op_id']} allocating "
                  f"{base['oom']['tensor']} at depth {base['oom']['depth']}; "
                  f"{len(result.candidates)} candidate storages; {len(result.attempts)} tried.")
    table = Table(title="retentions that complete the run")
    for col in ("retain", "overhead", "max depth", "peak pinned", "depth at peak pinned"):
        table.add_column(col, justify="right")
    for a in result.fixes:
        s = a.summary
        table.add_row(",".join(map(str, a.retain)), f"{s['overhead']:.4f}x", str(s["max_depth"]),
                      fmt_exact_bytes(s["max_pinned"]["bytes"]), str(s["max_pinned"]["depth"]))
    console.print(table if result.fixes else "[yellow]No tried retention completes the run.[/]")
    console.print("Controls: " + ("the control and every worker's control reproduced the "
                                  "failure exactly." if result.control_matches else
                                  "[bold red]a control did not reproduce the failure[/]"))
    console.print(f"[dim]{result.note}[/]")
