"""`dtrf reevict REC [REC2]`: how often the same storages are evicted again."""

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
    app.command("reevict")(reevict_command)


def reevict_command(
    recording: Annotated[str, typer.Argument(help="A recording, or TRACE@RATIO[:POLICY]. " + RUN_SPEC_TRUST)],
    other: Annotated[Optional[str], typer.Argument(help="A second run of the same trace: adds the overlap of the evicted sets.")] = None,
    top: Annotated[int, typer.Option(callback=at_least(0), help="Most re-evicted storages listed per run and scope.")] = 10,
    cache: CacheOption = DEFAULT_CACHE,
    as_json: JsonOption = False,
    brief: BriefOption = False,
) -> None:
    """Re-eviction figures (evictions per storage, concentration, collateral remats),
    each over pressure victims alone and over the whole eviction stream."""
    from ..analyses.reevict import reevict
    from ..analyses.runs import RunSpecError
    from ..render.console import wide_console
    from ..render.reevict import reevict_view
    from ..render.verdict import with_verdict
    from ..render.verdicts import reevict_verdict

    if top < 0:
        raise CommandError("--top must be >= 0")
    recs = open_runs([recording] + ([other] if other is not None else []), scores="victims",
                     cache=cache)
    try:
        report = reevict(recs, top=top)
    except RunSpecError as exc:
        raise CommandError(str(exc)) from None
    verdict = reevict_verdict(report, [recording] + ([other] if other is not None else []))
    if as_json:
        print_json(with_verdict(report.to_json(), verdict, brief=brief))
        return
    out = wide_console()
    if not verdict_first(out, verdict, brief=brief):
        out.print(reevict_view(report, top))
