"""The current allocation check: where, what, how much, and the victims taken;
the decision whose candidates are shown is marked and kept in view."""

from __future__ import annotations

from rich.text import Text

from ...analyses.replay_view import Step, Victim
from ...render.labels import op_label
from ...render.units import ScoreFormat, fmt_bytes, fmt_exact_bytes, score_format
from .wrapped import WrappedLines


def check_lines(step: Step, total: int) -> list[Text]:
    """The check itself: one item per line."""
    head = Text()
    head.append(f"step {step.step:,} ", style="bold")
    head.append(f"({total:,} in view)  ", style="dim")
    head.append(f"{op_label(step.op_id)}  depth {step.depth}")
    what = Text()
    what.append("allocating ", style="dim")
    what.append(step.tensor, style="bold")
    what.append(f" ← {step.op_name} (op {step.tensor_op_id})")
    if step.module:
        what.append(f" in {step.module}", style="green")
    if step.oom:
        what.append("  OUT OF MEMORY", style="bold red")
    elif step.remat:
        what.append("  rematerialization", style="yellow")
    lines = [head, what]
    pairs = ((("request", fmt_exact_bytes(step.request)), ("memory", fmt_exact_bytes(step.memory))),
             (("budget", fmt_exact_bytes(step.budget)),
              ("pinned", fmt_exact_bytes(step.pinned_bytes))),
             (("pool", f"{fmt_exact_bytes(step.pool_bytes)} in {step.pool_size:,} storages"),))
    for pair in pairs:        # two to a line: a narrow panel wraps between them
        line = Text()
        for k, (key, value) in enumerate(pair):
            line.append(f"{'   ' if k else ''}{key:>7} ", style="dim")
            line.append(value)
        lines.append(line)
    if step.shortfall > 0:
        lines.append(Text(f"short by {step.shortfall:,} B: {step.evictions:,} eviction"
                          f"{'s' if step.evictions != 1 else ''}", style="red"))
    else:
        lines.append(Text(f"fits ({-step.shortfall:,} B to spare)", style="green"))
    return lines


def victim_line(v: Victim, fmt_score: ScoreFormat, current: bool) -> Text:
    t = Text("  ▶ " if current else "  ↳ ", style="bold" if current else "cyan")
    made = f" of {v.module}" if v.module else ""
    t.append(f"#{v.decision} evict {v.victim} {v.tensor}{made} ({fmt_bytes(v.bytes)}) "
             f"score {fmt_score(v.score)}", style="cyan")
    if v.runner_up is not None:
        t.append(f"; runner-up {v.runner_up} {fmt_score(v.runner_up_score)}", style="dim")
    return t


def step_items(step: Step, total: int, victims: list[Victim] | None,
               current: int = 0) -> list[Text]:
    """The panel's items (a plain function, so tests can read it too)."""
    items = check_lines(step, total)
    if victims is None and step.evictions:
        items.append(Text("loading victims…", style="dim"))
    fmt = score_format(x for v in victims or [] for x in (v.score, v.runner_up_score))
    marked = len(victims or []) > 1
    items += [victim_line(v, fmt, marked and k == current) for k, v in enumerate(victims or [])]
    return items


class StepPanel(WrappedLines):
    """Shows one step; `show` redraws it (victims None: still loading)."""

    DEFAULT_CSS = """
    StepPanel { height: auto; border: round $accent; padding: 0 0 0 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.border_title = "allocation check"
        self.text = "loading steps…"
        self.victims: list[Victim] = []

    def on_mount(self) -> None:
        super().on_mount()
        self.show([Text(self.text)])

    def message(self, text: str) -> None:
        self.text = text
        self.show([Text(text)])

    def show_step(self, step: Step, total: int, victims: list[Victim] | None,
                  current: int = 0) -> None:
        items = step_items(step, total, victims, current)
        self.victims = list(victims or [])
        self.text = Text("\n").join(items).plain
        self.show(items)
        if len(self.victims) > 1:
            # after the layout, which sizes the panel to its new content
            self.call_after_refresh(self.reveal, len(items) - len(self.victims) + current)
            self.border_title = (f"allocation check: decision {current + 1:,} of "
                                 f"{len(self.victims):,} (c next)")
        else:
            self.border_title = "allocation check"
