"""`dtrf explain`: the hindsight search for the single changes that avoid an OOM."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import BriefOption, RecordRoot, budget_args, require_control, run_flags, verdict_first
from .kernel_notice import announce_compile
from .options import (
    POLICY_HELP,
    at_least,
    between,
    check_budget,
    check_policy,
    check_ratio,
    check_timeout,
)

# Each attempt is one replay of the trace: 100,000 of them is hours already.
MAX_ATTEMPTS = 100_000
# Every smaller change is tried before a retained set of k, and there are at
# least 2**k - 2 of those (k candidates or more): with at most MAX_ATTEMPTS
# attempts no set larger than this is ever reached.
MAX_COMBO = 16


def register(app: typer.Typer) -> None:
    app.command("explain")(explain_command)


class Kind(str, Enum):
    retain = "retain"
    force_victim = "force-victim"


def explain_command(
    trace: Annotated[str, typer.Argument(help="Short name or path to a DTR log.")],
    ratio: Annotated[Optional[float], typer.Option(callback=check_ratio, help="Budget as a fraction of peak memory.")] = None,
    budget: Annotated[Optional[int], typer.Option(callback=check_budget, help="Budget in bytes.")] = None,
    policy: Annotated[str, typer.Option(callback=check_policy, help=POLICY_HELP)] = "dtr",
    max_attempts: Annotated[int, typer.Option(callback=between(1, MAX_ATTEMPTS), help=f"At most this many changes are tried (each one replay of the trace), every single change before any combination; 1 to {MAX_ATTEMPTS:,}.")] = 32,
    max_combo: Annotated[int, typer.Option(callback=between(1, MAX_COMBO), help=f"Largest retained set tried (1 = singles only), 1 to {MAX_COMBO}. With n candidates there are C(n, k) sets of k, tried only after every smaller change, of which there are at least 2^k - 2: past {MAX_COMBO}, more than --max-attempts allows.")] = 2,
    last_decisions: Annotated[int, typer.Option(callback=at_least(0), help="Force the runner-up at this many of the failing run's last decisions.")] = 16,
    kind: Annotated[Optional[list[Kind]], typer.Option(help="Search only these changes (repeatable; default both).")] = None,
    timeout: Annotated[Optional[float], typer.Option(callback=check_timeout, help="Wall-clock limit per attempt, seconds (a timed-out attempt is unresolved).")] = None,
    jobs: Annotated[Optional[int], typer.Option(callback=at_least(1), help="Parallel processes (default: all cores, once the attempts take longer than starting them, about 2 s).")] = None,
    first: Annotated[Optional[int], typer.Option(callback=at_least(1), help="Stop after this many fixes are found.")] = None,
    record_root: RecordRoot = "recordings/explain",
    as_json: Annotated[bool, typer.Option("--json", help="Print {fixes, tried, untried, search, control, ...} as JSON.")] = False,
    brief: BriefOption = False,
) -> None:
    """For a failing run, find the single changes that turn the failure into a
    completion: retaining a storage the failing frontier needed, or forcing
    another victim at the first divergent choice against a nearby completing
    budget or at one of the last decisions; singles first, then retained pairs."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    from ..analyses.explain import explain
    from ..render.console import err_console, wide_console
    from ..render.explain import change_text, print_explanation
    from ..render.verdict import with_verdict
    from ..render.verdicts import explain_verdict
    from ..render.wrapping import kept_progress as Progress
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
                         on_attempt=on_attempt, **budget_args(ratio, budget))
    verdict = explain_verdict(result, trace, run_flags(ratio, budget, policy))
    if as_json:
        from ..render.jsonout import dumps
        typer.echo(dumps(with_verdict(result.to_json(), verdict, brief=brief)))
    elif not verdict_first(console, verdict, brief=brief):
        where = f"--ratio {ratio}" if ratio is not None else f"--budget {budget}"
        where += f" --policy {policy}" if policy != "dtr" else ""
        print_explanation(result, console, reproduce=f"dtrf intervene {trace} {where}")
    require_control(result.control_matches)
