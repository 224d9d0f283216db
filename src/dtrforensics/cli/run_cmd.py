"""`dtrf run`: replay one trace under a budget and summarize (optionally record)."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from ..engine.policies import POLICIES
from ..analyses.interventions import same_execution
from ..engine.replay import DEFAULT_THRASH_FACTOR, InterventionError, Interventions, replay
from ..engine.summary import RunSummary
from ..errors import NotDeterministicError
from ..trace import load_trace
from ..trace.program import Program
from .errors import CommandError
from .format import fmt_exact_bytes, fmt_op
from .options import check_timeout, interventions_from_options, warn_unreached

OUTCOME_STYLE = {"ok": "bold green", "oom": "bold red", "thrashed": "bold yellow",
                 "timeout": "bold magenta", "error": "bold red"}


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def run(
    trace: Annotated[str, typer.Argument(help="Short name (resnet32, lstm, ...) or path to a DTR log.")],
    ratio: Annotated[Optional[float], typer.Option(help="Budget as a fraction of the trace's peak memory: floor(ratio x peak) bytes.")] = None,
    budget: Annotated[Optional[int], typer.Option(help="Budget in bytes (instead of --ratio).")] = None,
    policy: Annotated[str, typer.Option(help=f"Eviction policy: {', '.join(POLICIES)}.")] = "dtr",
    timeout: Annotated[Optional[float], typer.Option(callback=check_timeout, help="Wall-clock limit in seconds; the run is then 'timeout' (unresolved).")] = None,
    thrash_limit: Annotated[float, typer.Option(help="Overhead at which a run counts as thrashed.")] = DEFAULT_THRASH_FACTOR,
    retain: Annotated[Optional[str], typer.Option(help="Storages never offered as victims, e.g. 612,3131.")] = None,
    retain_ops: Annotated[Optional[str], typer.Option(help="Limit --retain to decisions inside top-level ops A..B.")] = None,
    forbid_victim: Annotated[Optional[list[str]], typer.Option(help="S@K: exclude storage S at decision K (repeatable).")] = None,
    force_victim: Annotated[Optional[list[str]], typer.Option(help="S@K: evict storage S at decision K instead of the policy's choice (repeatable).")] = None,
    control: Annotated[bool, typer.Option("--control", help="Also run a control (the intervention code path with nothing changed) and check it reproduces the plain run exactly.")] = False,
    record: Annotated[Optional[str], typer.Option(help="Record the run; value: output directory, or '' for the default under recordings/.", show_default=False)] = None,
    scores: Annotated[str, typer.Option(help="With --record: 'victims' (decisions only) or 'all' (every candidate's score).")] = "victims",
    overwrite: Annotated[bool, typer.Option("--overwrite", help="With --record: replace an existing recording in that folder.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (the run summary).")] = False,
) -> None:
    """Replay TRACE under a memory budget exactly as the reference DTR simulator."""
    if (ratio is None) == (budget is None):
        raise CommandError("give exactly one of --ratio or --budget")
    if policy not in POLICIES:
        raise CommandError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
    if scores not in ("victims", "all"):
        raise CommandError("--scores is 'victims' or 'all'")
    program = load_trace(trace)
    interventions = interventions_from_options(retain, retain_ops, forbid_victim, force_victim)
    try:
        if record is not None:
            from ..recorder.record import record_from_cli
            result, where = record_from_cli(program, ratio=ratio, budget=budget, policy=policy,
                                            record_dir=record or None, scores=scores,
                                            timeout=timeout, interventions=interventions,
                                            thrash_factor=thrash_limit, overwrite=overwrite)
        else:
            result = replay(program, ratio=ratio, budget=budget, policy=policy, timeout=timeout,
                            interventions=interventions, thrash_factor=thrash_limit)
            where = None
    except (InterventionError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    summary = result.summary
    warn_unreached(interventions, summary.evictions)
    control_matches = None
    if control:
        same = dict(ratio=ratio, budget=budget, policy=policy, timeout=timeout,
                    thrash_factor=thrash_limit)
        plain = result if interventions.is_empty() else replay(program, **same)
        checked = replay(program, interventions=Interventions(control=True), **same)
        control_matches = same_execution(plain.summary.to_json(), checked.summary.to_json())
    if as_json:
        out = summary.to_json()
        if where is not None:
            out["recording"] = str(where)
        if control:
            out["control_matches"] = control_matches
        typer.echo(json.dumps(out))
    else:
        console = Console()
        console.print(summary_panel(program, summary, recording=where))
        if control:
            console.print("[green]control: the empty intervention reproduces the plain run "
                          "exactly[/]" if control_matches else
                          "[bold red]control: the empty intervention does NOT reproduce the "
                          "plain run[/]")
    if summary.outcome == "error":
        raise CommandError(summary.error)
    if control and not control_matches:
        raise NotDeterministicError("the control (the intervention code path with nothing "
                                    "changed) did not reproduce the plain run")


def summary_panel(program: Program, s: RunSummary, recording=None) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    budget_line = f"{fmt_exact_bytes(s.budget)}"
    if s.ratio is not None:
        budget_line += f"  ratio {s.ratio:g}"
    lo, hi = s.budget_interval
    lo_r, hi_r = s.budget_interval_ratio
    rows = [
        ("outcome", f"[{OUTCOME_STYLE.get(s.outcome, 'bold')}]{s.outcome}[/]"
                    + (f"  ({s.error})" if s.error else "")),
        ("budget", budget_line),
        ("peak / model compute", f"{fmt_exact_bytes(s.peak)} / {s.model_compute:,} ns"),
        ("overhead", f"{s.overhead:.4f}x" if s.overhead else "-"),
        ("clock / remat compute", f"{s.clock:,} / {s.remat_compute:,} ns"),
        ("evictions", f"{s.evictions:,} pressure, {s.dead_frees:,} dead; "
                      f"{s.distinct_evicted:,} distinct victims, {s.stream_distinct:,} in the stream"),
        ("rematerializations", f"{s.remats:,} (+{s.collateral_remats:,} collateral)"),
        ("max nesting depth", str(s.max_depth)),
    ]
    if s.max_pinned.op_id >= 0:
        rows.append(("peak pinned at a check", f"{fmt_exact_bytes(s.max_pinned.bytes)} at depth "
                     f"{s.max_pinned.depth}, {fmt_op(program, s.max_pinned.op_id)}"))
    if s.oom:
        o = s.oom
        rows += [
            ("OOM at", f"{fmt_op(program, o.op_id)}, depth {o.depth}"),
            ("failing allocation", f"{o.tensor} ({fmt_exact_bytes(o.request)}) in a chain rooted at {o.root_tensor}"),
            ("pinned at failure", fmt_exact_bytes(o.pinned)),
        ]
    rows += [
        ("budget interval", f"[{lo:,}, {'∞' if hi is None else f'{hi:,}'}] bytes = ratio "
                            f"[{lo_r:.6f}, {'∞' if hi_r is None else f'{hi_r:.6f}'}]"),
        ("victims sha256", s.victims_sha256),
        ("wall time", f"{s.wall_seconds:.3f} s"),
    ]
    if s.interventions and (s.interventions.get("retain") or s.interventions.get("forbid")
                            or s.interventions.get("force")):
        rows.append(("interventions", json.dumps(s.interventions)))
    if recording is not None:
        rows.append(("recording", str(recording)))
    for key, value in rows:
        grid.add_row(key, value)
    title = f"{s.trace} · {s.policy}"
    return Panel(grid, title=title, expand=False)
