"""A replay window (`analyses.replay_view.ReplayWindow`) as one table: one row per
allocation check, one indented row per victim."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from ..analyses.replay_view import ReplayWindow, Step
from .units import fmt_bytes, fmt_score


def _step_cells(s: Step) -> list:
    kind = "OOM" if s.oom else ("remat" if s.remat else "")
    shortfall = (Text(f"+{s.shortfall:,}", style="red") if s.shortfall > 0
                 else Text(f"{s.shortfall:,}", style="dim"))
    return [str(s.step), f"{s.op_id} (#{s.paper_op})", str(s.depth),
            f"{s.tensor} ← {s.op_name}", Text(kind, style="bold red" if s.oom else "yellow"),
            fmt_bytes(s.request), fmt_bytes(s.memory), fmt_bytes(s.pinned_bytes),
            f"{fmt_bytes(s.pool_bytes)} ({s.pool_size})", shortfall]


def replay_table(view: ReplayWindow) -> Table:
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
                      f"runner-up {v.runner_up} {v.runner_up_tensor} {fmt_score(v.runner_up_score)}")
            t.add_row("", "", "", Text(f"  ↳ evict {v.victim} {v.tensor} "
                                       f"({fmt_bytes(v.bytes)}) score {fmt_score(v.score)}; "
                                       f"{runner}", style="cyan"),
                      Text(f"#{v.decision}", style="dim"), "", "", "", "", "")
        if s.oom:
            t.add_row("", "", "", Text("  ↳ pool empty, still short: out of memory",
                                       style="bold red"),
                      "", "", "", "", "", "")
    return t
