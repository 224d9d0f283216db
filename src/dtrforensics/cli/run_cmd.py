"""`dtrf run`: replay one trace under a budget and summarize (optionally record)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import validate
from ..concepts import ERROR
from .common import reporting_replaced
from .errors import CommandError
from .kernel_notice import announce_compile
from .options import (
    POLICY_HELP,
    check_budget,
    check_policy,
    check_ratio,
    check_thrash_limit,
    check_timeout,
    recording_folder,
)


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def run(
    trace: Annotated[str, typer.Argument(help="Short name (resnet32, lstm, ...) or path to a DTR log.")],
    ratio: Annotated[Optional[float], typer.Option(callback=check_ratio, help="Budget as a fraction of the trace's peak memory: floor(ratio x peak) bytes.")] = None,
    budget: Annotated[Optional[int], typer.Option(callback=check_budget, help="Budget in bytes (instead of --ratio).")] = None,
    policy: Annotated[str, typer.Option(callback=check_policy, help=POLICY_HELP)] = "dtr",
    timeout: Annotated[Optional[float], typer.Option(callback=check_timeout, help="Wall-clock limit in seconds; the run is then 'timeout' (unresolved).")] = None,
    thrash_limit: Annotated[Optional[float], typer.Option(callback=check_thrash_limit, help="Overhead at which a run counts as thrashed (default: the engine's, 60).", show_default=False)] = None,
    retain: Annotated[Optional[str], typer.Option(help="Storages never offered as victims, e.g. 612,3131.")] = None,
    retain_ops: Annotated[Optional[str], typer.Option(help="Limit --retain to decisions inside top-level ops A..B.")] = None,
    forbid_victim: Annotated[Optional[list[str]], typer.Option(help="S@K: exclude storage S at decision K (repeatable).")] = None,
    force_victim: Annotated[Optional[list[str]], typer.Option(help="S@K: evict storage S at decision K instead of the policy's choice (repeatable).")] = None,
    control: Annotated[bool, typer.Option("--control", help="Also run a control (the intervention code path with nothing changed) and check it reproduces the plain run exactly.")] = False,
    record: Annotated[Optional[str], typer.Option(callback=recording_folder, help="Record the run; value: output directory, or '' for the default under recordings/.", show_default=False)] = None,
    scores: Annotated[str, typer.Option(help="With --record: 'victims' (decisions only) or 'all' (every candidate's score).")] = "victims",
    overwrite: Annotated[bool, typer.Option("--overwrite", help="With --record: replace an existing recording in that folder.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (the run summary).")] = False,
) -> None:
    """Replay TRACE under a memory budget exactly as the reference DTR simulator."""
    from ..engine.replay import InterventionError, replay
    from ..trace import load_trace
    from .options import interventions_from_options, warn_unreached

    validate.budget_or_ratio(budget, ratio)
    if scores not in ("victims", "all"):
        raise CommandError("--scores is 'victims' or 'all'")
    program = load_trace(trace)
    announce_compile()
    interventions = interventions_from_options(retain, retain_ops, forbid_victim, force_victim)
    run_args = dict(ratio=ratio, budget=budget, policy=policy, timeout=timeout)
    if thrash_limit is not None:
        run_args["thrash_factor"] = thrash_limit
    where = None
    try:
        if record is not None:
            from ..recorder.record import record_run
            with reporting_replaced(record or None):    # --overwrite never replaces silently
                result, where = record_run(program, out_dir=record or None, scores=scores,
                                           interventions=interventions, overwrite=overwrite,
                                           **run_args)
        else:
            result = replay(program, interventions=interventions, **run_args)
    except (InterventionError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    warn_unreached(interventions, result.summary.evictions)
    summary = result.summary.to_json()
    control_matches = None
    if control:
        from ..analyses.interventions import control_reproduces
        control_matches = control_reproduces(program, result, interventions=interventions,
                                             **run_args)
    if as_json:
        if where is not None:
            summary["recording"] = str(where)
        if control:
            summary["control_matches"] = control_matches
        from ..render.jsonout import dumps
        typer.echo(dumps(summary))
    else:
        _print_summary(program, summary, where, control_matches)
    if summary["outcome"] == ERROR:
        raise CommandError(summary["error"])
    if control and not control_matches:
        from ..errors import NotDeterministicError
        raise NotDeterministicError("the control (the intervention code path with nothing "
                                    "changed) did not reproduce the plain run")


def _print_summary(program, summary: dict, where, control_matches: bool | None) -> None:
    from ..render.console import console as make_console
    from ..render.console import styled
    from ..render.panels import summary_panel
    console = make_console()
    extra = [("recording", str(where))] if where is not None else []
    console.print(summary_panel(summary, program.op_name, extra=extra,
                                title=f"{summary['trace']} · {summary['policy']}"))
    if control_matches is not None:
        console.print(styled("[green]control: the empty intervention reproduces the plain "
                             "run exactly[/]" if control_matches else
                             "[bold red]control: the empty intervention does NOT reproduce "
                             "the plain run[/]"))
