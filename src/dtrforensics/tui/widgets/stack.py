"""The stack of in-progress materializations at the current step: every level,
outermost first, scrolled with s / S; the title says which levels are in view."""

from __future__ import annotations

from rich.text import Text

from ...analyses.replay_view import StackLevel
from .wrapped import WrappedLines


def level_text(lv: StackLevel) -> Text:
    t = Text()
    t.append(f"d{lv.depth:<3} ", style="dim")
    t.append(lv.tensor, style="bold")
    t.append(f" ← {lv.op_name} (op {lv.op_id})")
    if lv.remat:
        t.append(" remat", style="yellow")
    return t


class StackView(WrappedLines):
    DEFAULT_CSS = """
    StackView { height: 1fr; border: round $accent; padding: 0 0 0 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.border_title = "stack"
        self.levels: list[StackLevel] = []

    def show(self, levels: list[StackLevel]) -> None:
        self.levels = list(levels)
        super().show([level_text(lv) for lv in levels]
                     or [Text("(no materialization in progress)", style="dim")])

    def scrolled(self) -> None:
        """The title leads with the numbers, so a narrow border cuts words, not them."""
        shown = self.in_view()
        if not self.levels or not shown:
            self.border_title = "stack: empty" if not self.levels else "stack"
            return
        first, last = self.levels[shown.start].depth, self.levels[shown[-1]].depth
        whole = len(shown) == len(self.levels)
        self.border_title = (f"stack {len(self.levels):,} deep" if whole else
                             f"stack d{first}-d{last} of {len(self.levels):,} (s/S scroll)")
