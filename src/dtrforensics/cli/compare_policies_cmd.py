"""`dtrf compare-policies TRACE --policy a,b,c`: several policies over one budget range."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import (
    BriefOption,
    JsonOption,
    print_json,
    reporting_replaced,
    require_figures,
    sweeping,
    verdict_first,
)
from .errors import CommandError
from .kernel_notice import announce_compile
from .options import (
    POLICY_HELP,
    SCHEDULER_HELP,
    at_least,
    check_jobs,
    check_policies,
    check_ratio,
    check_timeout,
    output_file,
    output_folder,
    positive,
    split_policies,
    sweep_engine,
)


def register(app: typer.Typer) -> None:
    app.command("compare-policies")(compare_policies_command)


def compare_policies_command(
    trace: Annotated[str, typer.Argument(help="Short name (resnet32, lstm, ...) or path to a DTR log.")],
    policy: Annotated[str, typer.Option(callback=check_policies, help="Policies to compare, comma-separated. " + POLICY_HELP)] = "dtr,no-staleness,no-size,compute-only",
    ratio_from: Annotated[float, typer.Option("--from", callback=check_ratio, help="Lowest budget ratio.")] = 0.05,
    ratio_to: Annotated[float, typer.Option("--to", callback=check_ratio, help="Highest budget ratio.")] = 0.6,
    step: Annotated[Optional[float], typer.Option(callback=positive, help="Grid step in ratio units: give --step, --exact, or both.")] = None,
    exact: Annotated[bool, typer.Option("--exact", help="Certified intervals instead of samples: hole edges and widths to the byte.")] = False,
    max_runs: Annotated[int, typer.Option(callback=at_least(1), help="Exact mode: at most this many walk runs per policy.")] = 2000,
    timeout: Annotated[Optional[float], typer.Option(callback=check_timeout, help="Wall-clock limit per run (s); a timed-out point is unresolved.")] = None,
    jobs: Annotated[Optional[int], typer.Option(callback=check_jobs, help="Worker processes (default: all cores).")] = None,
    scheduler: Annotated[Optional[str], typer.Option(help=SCHEDULER_HELP)] = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", callback=output_folder, help="Sweep folder (default recordings/sweeps/<trace>-<time>/, or the latest with the same parameters, to resume).")] = None,
    figure: Annotated[Optional[Path], typer.Option(callback=output_file, help="Figure path without suffix (default SWEEP/compare-policies): .png and .svg.")] = None,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
    as_json: JsonOption = False,
    brief: BriefOption = False,
) -> None:
    """Several eviction policies over one budget range: holes, first success,
    overheads, regime switches, and which policy is best where, with a figure.

    The policies are swept together into one resumable sweep folder; each is
    a built-in name or a policy in a file (PATH.py:NAME, docs/policies.md)."""
    from ..analyses.policy_comparison import compare_policies
    from ..render.console import wide_console
    from ..render.policy_comparison import comparison_json, comparison_view, finish_lines
    from ..render.sweep import print_commands
    from ..sweep.estimate import START_SAMPLES
    from ..sweep.resume import sweep_folder
    from ..sweep.store import SweepParams
    from ..trace import load_trace

    if jobs is not None and jobs < 1:
        raise CommandError("--jobs must be >= 1")
    engine = sweep_engine(None, scheduler)
    policies = split_policies(policy)
    if len(set(policies)) != len(policies):
        raise CommandError("--policy names a policy twice")
    require_figures("dtrf compare-policies")
    program = load_trace(trace)
    announce_compile()
    params = SweepParams(ratio_from=ratio_from, ratio_to=ratio_to, step=step,
                         policies=policies, exact=exact, timeout=timeout, max_runs=max_runs)
    try:
        params.validate()
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    out = out if out is not None else sweep_folder(program.name, program.sha256, params)
    with sweeping(out, f"sweep of {program.name}, {len(policies)} policies -> {out}",
                  progress=not no_progress) as observer:
        result = compare_policies(program, policies, ratio_from=ratio_from, ratio_to=ratio_to,
                                  step=step, exact=exact, out=out, jobs=jobs, timeout=timeout,
                                  max_runs=max_runs, observer=observer, engine=engine,
                                  scheduler=scheduler, estimate_samples=START_SAMPLES)
    from ..render.verdict import with_verdict
    from ..render.verdicts import comparison_verdict
    figures = _figure(result, figure if figure is not None else out / "compare-policies")
    verdict = comparison_verdict(result)
    if as_json:
        print_json(with_verdict({**comparison_json(result), "figures": [str(p) for p in figures]},
                                verdict, brief=brief))
        return
    console = wide_console()
    if verdict_first(console, verdict, brief=brief):
        return
    console.print(comparison_view(result))
    print_commands(console, finish_lines(result))
    for path in figures:
        console.print(f"figure: {path}")


def _figure(result, stem: Path) -> list[Path]:
    """The comparison's figure, drawn again only if it changed (`figure_files`)."""
    from ..render.figure_files import save_figure
    from ..render.policy_comparison import figure
    from ..render.sweep_plot import figure_paths
    with reporting_replaced(*figure_paths(stem)):
        return save_figure(lambda: figure(result), stem, result)
