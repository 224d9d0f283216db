"""The whole run at a glance: memory, pinned bytes and nesting depth per
allocation check, one column per bucket of steps, a cursor on the current step."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ...analyses.replay_view import Step

BLOCKS = " ▁▂▃▄▅▆▇█"
LABEL = 7                       # "memory " / "pinned " / "depth  "
ROWS = (("memory", "dodger_blue1"), ("pinned", "magenta"), ("depth", "yellow"))


@dataclass(frozen=True)
class Buckets:
    """Steps [starts[c], ends[c]) in column c, and each row's level (0..8) per column."""
    starts: list[int]
    ends: list[int]
    levels: dict[str, list[int]]
    oom: list[bool]

    def columns_of(self, index: int) -> range:
        """The columns showing step `index` (several when steps are fewer than columns)."""
        first = next((c for c, e in enumerate(self.ends) if index < e), len(self.ends))
        last = first
        while last + 1 < len(self.starts) and self.starts[last + 1] <= index:
            last += 1
        return range(first, last + 1)


def _level(value: int, scale: int) -> int:
    if scale <= 0 or value <= 0:
        return 0
    return max(1, min(8, -(-value * 8 // scale)))


def bucket(steps: list[Step], width: int, budget: int) -> Buckets:
    """Columns over all `steps`: the most memory / pinned / depth in each bucket,
    memory and pinned against the budget, depth against the deepest step."""
    n = len(steps)
    starts = [c * n // width for c in range(width)]
    ends = [max(s + 1, (c + 1) * n // width) for c, s in enumerate(starts)]
    deepest = max((s.depth for s in steps), default=0)
    levels: dict[str, list[int]] = {"memory": [], "pinned": [], "depth": []}
    oom = []
    for s0, e0 in zip(starts, ends):
        part = steps[s0:e0]
        levels["memory"].append(_level(max(s.memory for s in part), budget))
        levels["pinned"].append(_level(max(s.pinned_bytes for s in part), budget))
        levels["depth"].append(_level(max(s.depth for s in part), deepest))
        oom.append(any(s.oom for s in part))
    return Buckets(starts, ends, levels, oom)


class RunStrip(Widget):
    """Three sparkline rows over every allocation check; `cursor` is the current step."""

    DEFAULT_CSS = """
    RunStrip { height: 6; border: round $accent; padding: 0 1; }
    """

    cursor: reactive[int] = reactive(0)

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.steps: list[Step] = []
        self.budget = 0
        self._cache: tuple[int, Buckets] | None = None
        self.border_title = "whole run"

    def load(self, steps: list[Step], budget: int) -> None:
        self.steps, self.budget, self._cache = list(steps), budget, None
        deepest = max((s.depth for s in steps), default=0)
        self.border_subtitle = (f"{len(steps):,} allocation checks · memory, pinned: share "
                                f"of the budget {budget:,} B · depth: of the deepest, {deepest}")
        self.refresh()

    def buckets(self, width: int) -> Buckets:
        if self._cache is None or self._cache[0] != width:
            self._cache = (width, bucket(self.steps, width, self.budget))
        return self._cache[1]

    def render(self) -> Text:
        width = self.content_region.width - LABEL
        if not self.steps or width < 4:
            return Text("loading steps…" if not self.steps else "", style="dim")
        b = self.buckets(width)
        at = b.columns_of(min(self.cursor, len(self.steps) - 1))
        t = Text(no_wrap=True, overflow="crop")
        for name, colour in ROWS:
            t.append(f"{name:<{LABEL}}", style="dim")
            for c, level in enumerate(b.levels[name]):
                style = "bold red" if b.oom[c] else colour
                t.append(BLOCKS[level] if level else "·" if name != "depth" else " ",
                         style=f"{style} reverse" if c in at else style)
            t.append("\n")
        step = self.steps[min(self.cursor, len(self.steps) - 1)]
        where = f"step {step.step:,} op {step.op_id}"
        pad = at.start + LABEL
        if pad + 1 + len(where) + 1 <= LABEL + width:
            t.append(" " * pad + "▲ ", style="bold")
            t.append(where, style="bold")
        else:
            t.append(" " * max(0, pad - len(where) - 1) + where + " ", style="bold")
            t.append("▲", style="bold")
        return t
