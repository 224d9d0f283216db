"""`dtrf intervene` and `dtrf explain`: what-if changes and the hindsight search."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from .errors import CommandError
from .kernel_notice import announce_compile
from .options import POLICY_HELP, at_least, check_policy, check_timeout, output_folder

RecordRoot = Annotated[str, typer.Option(callback=output_folder, help="Where the runs are recorded (reused when present); '' to not record.")]


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
    policy: Annotated[str, typer.Option(callback=check_policy, help=POLICY_HELP)] = "dtr",
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
    from ..analyses.interventions import intervene
    from ..engine.replay import InterventionError
    from ..trace import load_trace
    from .options import interventions_from_options

    ivs = interventions_from_options(retain, retain_ops, forbid_victim, force_victim)
    if ivs.is_empty():
        raise CommandError("nothing to change: give --retain, --forbid-victim or --force-victim")
    program = load_trace(trace)
    announce_compile()
    try:
        result = intervene(program, ivs, policy=policy, timeout=timeout,
                           record_root=Path(record_root) if record_root else None,
                           **_budget_args(ratio, budget))
    except InterventionError as exc:
        raise CommandError(str(exc)) from None
    if as_json:
        from ..render.jsonout import dumps
        typer.echo(dumps(result.to_json()))
    else:
        from ..render.console import wide_console
        from ..render.interventions import CONTROL_VERDICT, side_by_side
        console = wide_console()
        console.print(side_by_side(result, ivs.to_json()))
        console.print(CONTROL_VERDICT[result.control_matches])
        if result.baseline.recording and result.intervention.recording:
            _print_diff(console, result.baseline.recording, result.intervention.recording)
    _require_control(result.control_matches)


def _require_control(matches: bool | None) -> None:
    """A control that does not reproduce the plain run makes every comparison void."""
    if matches is False:
        from ..errors import NotDeterministicError
        raise NotDeterministicError("the control (the intervention code path with nothing "
                                    "changed) did not reproduce the plain run")


def _print_diff(console, baseline: Path, intervention: Path) -> None:
    """Baseline (run a) vs intervention (run b): where the eviction streams part."""
    from ..analyses.diff import diff
    from ..recorder.reader import open_recording
    from ..render.diff import print_diff
    print_diff(diff(open_recording(baseline), open_recording(intervention)), console,
               roles=("baseline", "intervention"))


class Kind(str, Enum):
    retain = "retain"
    force_victim = "force-victim"


def explain_command(
    trace: Annotated[str, typer.Argument(help="Short name or path to a DTR log.")],
    ratio: Annotated[Optional[float], typer.Option(help="Budget as a fraction of peak memory.")] = None,
    budget: Annotated[Optional[int], typer.Option(help="Budget in bytes.")] = None,
    policy: Annotated[str, typer.Option(callback=check_policy, help=POLICY_HELP)] = "dtr",
    max_attempts: Annotated[int, typer.Option(callback=at_least(1), help="At most this many changes are tried, every single change before any combination.")] = 32,
    max_combo: Annotated[int, typer.Option(callback=at_least(1), help="Largest retained set tried (1 = singles only).")] = 2,
    last_decisions: Annotated[int, typer.Option(callback=at_least(0), help="Force the runner-up at this many of the failing run's last decisions.")] = 16,
    kind: Annotated[Optional[list[Kind]], typer.Option(help="Search only these changes (repeatable; default both).")] = None,
    timeout: Annotated[Optional[float], typer.Option(callback=check_timeout, help="Wall-clock limit per attempt, seconds (a timed-out attempt is unresolved).")] = None,
    jobs: Annotated[Optional[int], typer.Option(callback=at_least(1), help="Parallel processes (default: all cores).")] = None,
    first: Annotated[Optional[int], typer.Option(callback=at_least(1), help="Stop after this many fixes are found.")] = None,
    record_root: RecordRoot = "recordings/explain",
    as_json: Annotated[bool, typer.Option("--json", help="Print {fixes, tried, untried, search, control, ...} as JSON.")] = False,
) -> None:
    """For a failing run, find the single changes that turn the failure into a
    completion: retaining a storage the failing frontier needed, or forcing
    another victim at the first divergent choice against a nearby completing
    budget or at one of the last decisions; singles first, then retained pairs."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    from ..analyses.explain import explain
    from ..render.console import err_console, wide_console
    from ..render.explain import change_text, print_explanation
    from ..trace import load_trace

    program = load_trace(trace)
    announce_compile()
    console = wide_console(stderr=as_json)
    kinds = tuple(dict.fromkeys(k.value.replace("-", "_") for k in kind or list(Kind)))
    # Progress is for a person watching: on stderr, and only when it is a terminal,
    # so a pipe or a file gets the result alone.
    progress_console = err_console()
    with Progress(TextColumn("[bold]changes"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), TextColumn("{task.fields[last]}"),
                  console=progress_console, disable=not progress_console.is_terminal,
                  transient=True) as progress:
        task = progress.add_task("explain", total=None, last="")

        def on_attempt(attempt, done, total):
            progress.update(task, completed=done, total=total,
                            last=f"{change_text(attempt)}: {attempt.summary['outcome']}")

        result = explain(program, policy=policy, max_attempts=max_attempts, max_combo=max_combo,
                         last_decisions=last_decisions, kinds=kinds, timeout=timeout, jobs=jobs,
                         stop_after_fixes=first,
                         record_root=Path(record_root) if record_root else None,
                         on_attempt=on_attempt, **_budget_args(ratio, budget))
    if as_json:
        from ..render.jsonout import dumps
        typer.echo(dumps(result.to_json()))
    else:
        where = f"--ratio {ratio}" if ratio is not None else f"--budget {budget}"
        where += f" --policy {policy}" if policy != "dtr" else ""
        print_explanation(result, console, reproduce=f"dtrf intervene {trace} {where}")
    _require_control(result.control_matches)
