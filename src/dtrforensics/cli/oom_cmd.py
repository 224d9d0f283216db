"""`dtrf oom REC`: the pinned frontier of an OOM, as a tree (`render/oom.py`)."""

from __future__ import annotations

from typing import Annotated

import typer

from .common import (
    DEFAULT_CACHE,
    BriefOption,
    CacheOption,
    JsonOption,
    open_run,
    print_json,
    trace_of,
    verdict_first,
)
from .errors import CommandError
from .options import RUN_SPEC_TRUST


def register(app: typer.Typer) -> None:
    app.command("oom")(oom_command)


def oom_command(
    recording: Annotated[str, typer.Argument(help="A recording that ended OOM, or TRACE@RATIO[:POLICY]. " + RUN_SPEC_TRUST)],
    full: Annotated[bool, typer.Option("--full", help="Show every level of the frontier.")] = False,
    cache: CacheOption = DEFAULT_CACHE,
    as_json: JsonOption = False,
    brief: BriefOption = False,
) -> None:
    """Explain an OOM: the chain of in-progress materializations down to the failing
    allocation, the bytes each level holds locked, and proof the pool was empty."""
    from ..analyses.oom import NotAnOomError, explain_oom
    from ..render.console import wide_console
    from ..render.oom import oom_view
    from ..render.verdict import with_verdict
    from ..render.verdicts import oom_verdict

    rec = open_run(recording, scores="victims", cache=cache)
    try:
        report = explain_oom(rec)
    except NotAnOomError as exc:
        raise CommandError(str(exc)) from None
    verdict = oom_verdict(report, trace_of(recording, rec))
    if as_json:
        print_json(with_verdict(report.to_json(), verdict, brief=brief))
        return
    out = wide_console()
    if not verdict_first(out, verdict, brief=brief):
        out.print(oom_view(report, full=full))
