"""A replay window (`analyses.replay_view.ReplayWindow`) as one table: one row per
allocation check, one row per victim under it."""

from __future__ import annotations

from rich.text import Text

from ..analyses.replay_view import ReplayWindow, Step
from .tables import FitTable
from .units import fmt_bytes, score_format

SHORTFALL_NOTE = ("short at start: memory + request - budget when the check starts, before "
                  "any eviction (negative: room to spare); `dtrf oom` gives the shortfall "
                  "left after the pool drained")


def fmt_shortfall(shortfall: int) -> Text:
    """A signed shortfall in the unit of the other byte columns: '+23.81 MiB' short
    (red), '-190.57 MiB' to spare (dim)."""
    if shortfall > 0:
        return Text(f"+{fmt_bytes(shortfall)}", style="red")
    return Text(fmt_bytes(shortfall), style="dim")


def _step_cells(s: Step) -> list:
    kind = "OOM" if s.oom else ("remat" if s.remat else "")
    return [f"{s.step:,}", f"{s.op_id} (#{s.paper_op})", str(s.depth),
            f"{s.tensor} ← {s.op_name}" + (f" ({s.module})" if s.module else ""),
            Text(kind, style="bold red" if s.oom else "yellow"),
            fmt_bytes(s.request), fmt_bytes(s.memory), fmt_bytes(s.pinned_bytes),
            f"{fmt_bytes(s.pool_bytes)} ({s.pool_size})", fmt_shortfall(s.shortfall)]


def replay_table(view: ReplayWindow) -> FitTable:
    where = ("the whole run" if view.hi_op is None
             else f"ops {view.lo_op}..{view.hi_op} (paper #{view.lo_op + 1}..#{view.hi_op + 1})")
    amount = f"ratio {view.ratio:g}" if view.ratio is not None else f"{view.budget:,} B"
    t = FitTable(title=f"{view.run_id}: {view.trace} {amount} {view.policy}, outcome "
                       f"{view.outcome}, budget {view.budget:,} B; allocation checks of {where}",
                 title_justify="left", caption=SHORTFALL_NOTE, caption_justify="left",
                 heading=True)
    for col, justify in (("step", "right"), ("op", "right"), ("d", "right"),
                         ("allocation", "left"), ("", "left"), ("request", "right"),
                         ("memory", "right"), ("pinned", "right"), ("pool", "right"),
                         ("short at start", "right")):
        t.add_column(col, justify=justify)
    blank = [""] * 5
    fmt_score = score_format(x for s in view.steps for v in s.victims
                             for x in (v.score, v.runner_up_score))
    for s in view.steps:
        t.add_row(*_step_cells(s))
        for v in s.victims:
            runner = ("no runner-up" if v.runner_up is None else
                      f"runner-up {v.runner_up} {v.runner_up_tensor} {fmt_score(v.runner_up_score)}")
            made = f" of {v.module}" if v.module else ""
            t.add_row("", "", "", Text(f"  ↳ evict {v.victim} {v.tensor}{made} "
                                       f"({fmt_bytes(v.bytes)}) score {fmt_score(v.score)}; "
                                       f"{runner}", style="cyan"),
                      Text(f"#{v.decision}", style="dim"), *blank)
        if s.oom:
            t.add_row("", "", "", Text("  ↳ pool empty, still short: out of memory",
                                       style="bold red"), "", *blank)
    return t
