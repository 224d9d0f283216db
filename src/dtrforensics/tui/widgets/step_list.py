"""Every allocation check of the run, one line each, scrolled lazily: only the
lines on screen are ever rendered, so a run of any length opens at once.

A line: step, op id, depth, `evN` (N evictions made room) or `OOM`, `R` (a
rematerialization), then the tensor allocated and its op."""

from __future__ import annotations

from rich.text import Text
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ...analyses.replay_view import Step
from .wrapped import line_strip


def step_line(step: Step) -> Text:
    """One check: step, op, depth, what is allocated, and what happened."""
    t = Text(no_wrap=True, end="")
    t.append(f"{step.step:>6} ", style="bold")
    t.append(f"{step.op_id:>5} d{step.depth:<3} ", style="dim")
    if step.oom:
        t.append(f"{'OOM':<5}", style="bold red")
    elif step.evictions:
        t.append(f"{'ev' + str(step.evictions):<5}", style="cyan")
    else:
        t.append(" " * 5)
    t.append("R " if step.remat else "  ", style="yellow")
    t.append(f"{step.tensor} ← {step.op_name}")
    if step.module:
        t.append(f" {step.module}", style="green")
    return t


class StepList(ScrollView, can_focus=False):
    """The steps; `cursor` marks the current one, a click chooses one."""

    DEFAULT_CSS = """
    StepList { border: round $accent; }
    """

    class Chosen(Message):
        """A step was clicked."""

        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

    cursor: reactive[int] = reactive(0)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.steps: list[Step] = []
        self.border_title = "allocation checks"

    def load(self, steps: list[Step]) -> None:
        self.steps = list(steps)
        self.border_title = f"allocation checks ({len(steps):,})"
        self.border_subtitle = "step · op · depth · evN / OOM · R remat"
        self.virtual_size = Size(self.size.width, len(self.steps))
        self.refresh()

    def watch_cursor(self, index: int) -> None:
        top = self.scroll_offset.y
        if not top <= index < top + self.scrollable_content_region.height:
            self.scroll_to_region(Region(0, index, 1, 1), animate=False, center=True,
                                  force=True)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        index = self.scroll_offset.y + y
        text = step_line(self.steps[index]) if index < len(self.steps) else None
        if text is not None and index == self.cursor:
            text.stylize("reverse")
        return line_strip(self, text, self.size.width)

    def on_click(self, event) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        index = self.scroll_offset.y + offset.y
        if 0 <= index < len(self.steps):
            self.post_message(self.Chosen(index))
