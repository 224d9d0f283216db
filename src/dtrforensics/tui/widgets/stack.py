"""The stack of in-progress materializations at the current step."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ...analyses.replay_view import StackLevel

SHOWN = 40      # levels listed; deeper stacks show the outermost and innermost ones


def stack_text(levels: list[StackLevel]) -> Text:
    t = Text()
    if not levels:
        return Text("(no materialization in progress)", style="dim")
    shown = levels
    if len(levels) > SHOWN:
        half = SHOWN // 2
        shown = levels[:half] + [None] + levels[-half:]
    for lv in shown:
        if lv is None:
            t.append(f"  … {len(levels) - SHOWN} levels …\n", style="yellow")
            continue
        t.append(f"d{lv.depth:<3} ", style="dim")
        t.append(lv.tensor, style="bold")
        t.append(f" ← {lv.op_name} (op {lv.op_id})")
        if lv.remat:
            t.append(" remat", style="yellow")
        t.append("\n")
    return t


class StackView(Static):
    DEFAULT_CSS = """
    StackView { height: 1fr; border: round $accent; padding: 0 1; overflow-y: auto; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("", **kwargs)
        self.border_title = "materializations in progress"
        self.levels: list[StackLevel] = []

    def show(self, levels: list[StackLevel]) -> None:
        self.levels = list(levels)
        self.border_title = f"materializations in progress ({len(levels)})"
        self.update(stack_text(levels))
