"""`dtrf replay REC [--ops A..B]`: a recording allocation by allocation.

Plain rich output by default (fine in pipes and CI); `--tui` opens the
interactive view through `dtrforensics.tui.run_replay_app`.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import validate
from .common import (
    DEFAULT_CACHE,
    BriefOption,
    CacheOption,
    JsonOption,
    open_run,
    print_json,
    verdict_first,
)
from .errors import CommandError
from .options import RUN_SPEC_TRUST, at_least

DEFAULT_LIMIT = 200     # steps printed when no --limit is given (JSON: all)


def register(app: typer.Typer) -> None:
    app.command("replay")(replay_command)


def replay_command(
    recording: Annotated[str, typer.Argument(help="A recording, or TRACE@RATIO[:POLICY]. " + RUN_SPEC_TRUST)],
    ops: Annotated[Optional[str], typer.Option(help="Top-level op window A..B (inclusive op ids).")] = None,
    evicting: Annotated[bool, typer.Option("--evicting", help="Only the allocations that evicted something or failed.")] = False,
    limit: Annotated[Optional[int], typer.Option(callback=at_least(0), help=f"Steps to show (default {DEFAULT_LIMIT}; --json: all).")] = None,
    tui: Annotated[bool, typer.Option("--tui", help="Interactive view of the whole run: a memory/pinned/depth strip with a cursor, every check in a list; keys: arrows step, e/r/o next eviction/remat/OOM, c next decision of the step, s/S scroll the stack, j jump to an op (460 or #461), a storage (s 612) or a step, l next page below 140 columns, q quit.")] = False,
    scores: Annotated[str, typer.Option(help="For a run spec: record 'all' candidate scores or only 'victims'.")] = "all",
    cache: CacheOption = DEFAULT_CACHE,
    as_json: JsonOption = False,
    brief: BriefOption = False,
) -> None:
    """Replay a recording allocation by allocation: request, memory, budget, pinned
    and pool bytes at each check, and every victim with its score and runner-up."""
    from .options import parse_window
    window = parse_window(ops)
    if limit is not None and limit < 0:
        raise CommandError("--limit must be >= 0")
    if scores not in ("victims", "all"):
        raise CommandError("--scores is 'victims' or 'all'")
    rec = open_run(recording, scores=scores, cache=cache)
    if window is not None:
        validate.op_window(window, rec.table("ops").num_rows, "--ops")
    if tui:
        from ..tui import run_replay_app
        run_replay_app(rec, ops=window)
        return
    from ..analyses.replay_view import replay_window
    from ..render.console import styled, wide_console
    from ..render.replay import replay_table
    from ..render.verdict import with_verdict
    from ..render.verdicts import replay_verdict

    shown = limit if limit is not None else (None if as_json else DEFAULT_LIMIT)
    whole = replay_window(rec, window, limit=None, only_evicting=evicting)
    view = whole if shown is None else replay_window(rec, window, limit=shown,
                                                     only_evicting=evicting)
    verdict = replay_verdict(whole, rec.summary, recording)   # the same words however many shown
    if as_json:
        print_json(with_verdict(view.to_json(), verdict, brief=brief))
        return
    out = wide_console()
    if verdict_first(out, verdict, brief=brief):
        return
    out.print(replay_table(view))
    if view.matched > len(view.steps):
        out.print(styled(f"[dim]{len(view.steps):,} of {view.matched:,} steps shown: narrow "
                         "--ops, use --evicting, or raise --limit[/dim]"))
