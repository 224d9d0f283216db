"""`dtrf diff A B`: where two executions part, why, and what follows.

A and B are recordings or run specs `TRACE@RATIO[:POLICY]` (recorded once, with
every candidate's score, into the cache folder). A is the control. The
analysis is `analyses/diff.py`, the rendering `render/diff.py`.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .common import (
    DEFAULT_CACHE,
    BriefOption,
    CacheOption,
    JsonOption,
    open_runs,
    print_json,
    verdict_first,
)
from .errors import CommandError
from .options import RUN_SPEC_TRUST, at_least


def register(app: typer.Typer) -> None:
    app.command("diff")(diff_command)


def diff_command(
    a: Annotated[str, typer.Argument(help="Control: a recording or TRACE@RATIO[:POLICY]. " + RUN_SPEC_TRUST)],
    b: Annotated[str, typer.Argument(help="Test: a recording or TRACE@RATIO[:POLICY]. " + RUN_SPEC_TRUST)],
    window: Annotated[Optional[int], typer.Option(callback=at_least(1), help="Ops per aftermath window (default: about 20 windows).")] = None,
    cache: CacheOption = DEFAULT_CACHE,
    as_json: JsonOption = False,
    brief: BriefOption = False,
) -> None:
    """Compare two executions of one trace: first divergence of the eviction streams,
    first divergent choice, aftermath, and what a failing run lost."""
    from ..analyses.diff import diff
    from ..analyses.runs import RunSpecError
    from ..render.console import wide_console
    from ..render.diff import print_diff
    from ..render.verdict import with_verdict
    from ..render.verdicts import diff_verdict

    if window is not None and window < 1:
        raise CommandError("--window must be at least 1")
    rec_a, rec_b = open_runs([a, b], scores="all", cache=cache)
    try:
        report = diff(rec_a, rec_b, window_ops=window)
    except RunSpecError as exc:
        raise CommandError(str(exc)) from None
    verdict = diff_verdict(report, a, b)
    if as_json:
        print_json(with_verdict(report.to_json(), verdict, brief=brief))
        return
    out = wide_console()
    if not verdict_first(out, verdict, brief=brief):
        print_diff(report, out)
