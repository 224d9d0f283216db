"""`dtrf intervene`: a what-if change against its baseline and a control."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import BriefOption, RecordRoot, budget_args, require_control, run_flags, verdict_first
from .errors import CommandError
from .kernel_notice import announce_compile
from .options import POLICY_HELP, check_budget, check_policy, check_ratio, check_timeout


def register(app: typer.Typer) -> None:
    app.command("intervene")(intervene_command)


def intervene_command(
    trace: Annotated[str, typer.Argument(help="Short name or path to a DTR log.")],
    ratio: Annotated[Optional[float], typer.Option(callback=check_ratio, help="Budget as a fraction of peak memory.")] = None,
    budget: Annotated[Optional[int], typer.Option(callback=check_budget, help="Budget in bytes.")] = None,
    policy: Annotated[str, typer.Option(callback=check_policy, help=POLICY_HELP)] = "dtr",
    retain: Annotated[Optional[str], typer.Option(help="Storages never offered as victims, e.g. 3131 or 612,302.")] = None,
    retain_ops: Annotated[Optional[str], typer.Option(help="Limit --retain to decisions inside top-level ops A..B.")] = None,
    forbid_victim: Annotated[Optional[list[str]], typer.Option(help="S@K: exclude storage S at decision K.")] = None,
    force_victim: Annotated[Optional[list[str]], typer.Option(help="S@K: evict S at decision K instead.")] = None,
    timeout: Annotated[Optional[float], typer.Option(callback=check_timeout, help="Wall-clock limit per run, seconds.")] = None,
    record_root: RecordRoot = "recordings/interventions",
    as_json: Annotated[bool, typer.Option("--json", help="Print {baseline, intervention, control, control_matches}.")] = False,
    brief: BriefOption = False,
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
                           **budget_args(ratio, budget))
    except InterventionError as exc:
        raise CommandError(str(exc)) from None
    from ..render.verdict import with_verdict
    from ..render.verdicts import intervene_verdict
    verdict = intervene_verdict(result, trace, run_flags(ratio, budget, policy))
    if as_json:
        from ..render.jsonout import dumps
        typer.echo(dumps(with_verdict(result.to_json(), verdict, brief=brief)))
    else:
        from ..render.console import wide_console
        from ..render.interventions import CONTROL_VERDICT, side_by_side
        console = wide_console()
        if verdict_first(console, verdict, brief=brief):
            require_control(result.control_matches)
            return
        console.print(side_by_side(result, ivs.to_json()))
        console.print(CONTROL_VERDICT[result.control_matches])
        if result.baseline.recording and result.intervention.recording:
            _print_diff(console, result.baseline.recording, result.intervention.recording)
    require_control(result.control_matches)


def _print_diff(console, baseline: Path, intervention: Path) -> None:
    """Baseline (run a) vs intervention (run b): where the eviction streams part."""
    from ..analyses.diff import diff
    from ..recorder.reader import open_recording
    from ..render.diff import print_diff
    print_diff(diff(open_recording(baseline), open_recording(intervention)), console,
               roles=("baseline", "intervention"))
