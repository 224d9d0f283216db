"""`dtrf replay REC [--ops A..B]`: a recording allocation by allocation.

Plain rich output by default (fine in pipes and CI); `--tui` opens the
interactive view (`dtrforensics.tui`).
"""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.table import Table
from rich.text import Text

from .. import validate
from ..analyses.replay_view import ReplayWindow, Step, replay_window
from ..analyses.runs import DEFAULT_CACHE
from .diff_cmd import CacheOption, JsonOption, console, open_run
from .errors import CommandError
from .format import fmt_bytes
from .options import parse_window

DEFAULT_LIMIT = 200     # steps printed when no --limit is given (JSON: all)


def register(app: typer.Typer) -> None:
    app.command("replay")(replay_command)


def replay_command(
    recording: Annotated[str, typer.Argument(help="A recording, or TRACE@RATIO[:POLICY].")],
    ops: Annotated[Optional[str], typer.Option(help="Top-level op window A..B (inclusive op ids).")] = None,
    evicting: Annotated[bool, typer.Option("--evicting", help="Only the allocations that evicted something or failed.")] = False,
    limit: Annotated[Optional[int], typer.Option(help=f"Steps to show (default {DEFAULT_LIMIT}; --json: all).")] = None,
    tui: Annotated[bool, typer.Option("--tui", help="Interactive view: step, jump to evictions, remats, the OOM.")] = False,
    scores: Annotated[str, typer.Option(help="For a run spec: record 'all' candidate scores or only 'victims'.")] = "all",
    cache: CacheOption = DEFAULT_CACHE,
    as_json: JsonOption = False,
) -> None:
    """Replay a recording allocation by allocation: request, memory, budget, pinned
    and pool bytes at each check, and every victim with its score and runner-up."""
    window = parse_window(ops)
    if limit is not None and limit < 0:
        raise CommandError("--limit must be >= 0")
    if scores not in ("victims", "all"):
        raise CommandError("--scores is 'victims' or 'all'")
    rec = open_run(recording, scores=scores, cache=cache)
    if window is not None:
        validate.op_window(window, rec.table("ops").num_rows, "--ops")
    if tui:
        from ..tui.app import ReplayApp
        ReplayApp(rec, ops=window).run()
        return
    shown = limit if limit is not None else (None if as_json else DEFAULT_LIMIT)
    view = replay_window(rec, window, limit=shown, only_evicting=evicting)
    if as_json:
        print(json.dumps(view.to_json(), indent=2, allow_nan=False))
        return
    out = console()
    out.print(render(view))
    if view.matched > len(view.steps):
        out.print(f"[dim]{len(view.steps):,} of {view.matched:,} steps shown: narrow --ops, "
                  "use --evicting, or raise --limit[/dim]")


def _score(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def _step_cells(s: Step) -> list:
    kind = "OOM" if s.oom else ("remat" if s.remat else "")
    shortfall = (Text(f"+{s.shortfall:,}", style="red") if s.shortfall > 0
                 else Text(f"{s.shortfall:,}", style="dim"))
    return [str(s.step), f"{s.op_id} (#{s.paper_op})", str(s.depth),
            f"{s.tensor} ← {s.op_name}", Text(kind, style="bold red" if s.oom else "yellow"),
            fmt_bytes(s.request), fmt_bytes(s.memory), fmt_bytes(s.pinned_bytes),
            f"{fmt_bytes(s.pool_bytes)} ({s.pool_size})", shortfall]


def render(view: ReplayWindow) -> Table:
    where = ("the whole run" if view.hi_op is None
             else f"ops {view.lo_op}..{view.hi_op} (paper #{view.lo_op + 1}..#{view.hi_op + 1})")
    amount = f"ratio {view.ratio:g}" if view.ratio is not None else f"{view.budget:,} B"
    t = Table(title=f"{view.run_id}: {view.trace} {amount} {view.policy}, outcome "
                    f"{view.outcome}, budget {view.budget:,} B; allocation checks of {where}",
              title_justify="left")
    for col, justify in (("step", "right"), ("op", "right"), ("d", "right"),
                         ("allocation", "left"), ("", "left"), ("request", "right"),
                         ("memory", "right"), ("pinned", "right"), ("pool", "right"),
                         ("shortfall", "right")):
        t.add_column(col, justify=justify)
    for s in view.steps:
        t.add_row(*_step_cells(s))
        for v in s.victims:
            runner = ("no runner-up" if v.runner_up is None else
                      f"runner-up {v.runner_up} {v.runner_up_tensor} {_score(v.runner_up_score)}")
            t.add_row("", "", "", Text(f"  ↳ evict {v.victim} {v.tensor} "
                                       f"({fmt_bytes(v.bytes)}) score {_score(v.score)}; "
                                       f"{runner}", style="cyan"),
                      Text(f"#{v.decision}", style="dim"), "", "", "", "", "")
        if s.oom:
            t.add_row("", "", "", Text("  ↳ pool empty, still short: out of memory",
                                       style="bold red"),
                      "", "", "", "", "", "")
    return t

