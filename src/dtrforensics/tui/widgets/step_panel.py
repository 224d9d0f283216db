"""The current allocation check: where, what, how much, and the victims taken."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from ...analyses.replay_view import Step, Victim
from ...render.labels import op_label
from ...render.units import fmt_bytes, fmt_exact_bytes, fmt_score


def step_text(step: Step, total: int, victims: list[Victim] | None) -> Text:
    """The panel's content (a plain function, so tests can read it too)."""
    t = Text()
    t.append(f"step {step.step:,} ", style="bold")
    t.append(f"({total:,} in view)  ", style="dim")
    t.append(f"{op_label(step.op_id)}  depth {step.depth}\n")
    t.append("allocating ", style="dim")
    t.append(step.tensor, style="bold")
    t.append(f" ← {step.op_name} (op {step.tensor_op_id})")
    if step.oom:
        t.append("  OUT OF MEMORY", style="bold red")
    elif step.remat:
        t.append("  rematerialization", style="yellow")
    t.append("\n")
    rows = [("request", fmt_exact_bytes(step.request)), ("memory", fmt_exact_bytes(step.memory)),
            ("budget", fmt_exact_bytes(step.budget)),
            ("pinned", fmt_exact_bytes(step.pinned_bytes)),
            ("pool", f"{fmt_exact_bytes(step.pool_bytes)} in {step.pool_size:,} storages")]
    for key, value in rows:
        t.append(f"{key:>9} ", style="dim")
        t.append(value + "\n")
    if step.shortfall > 0:
        t.append(f"short by {step.shortfall:,} B: {step.evictions} eviction"
                 f"{'s' if step.evictions != 1 else ''}\n", style="red")
    else:
        t.append(f"fits ({-step.shortfall:,} B to spare)\n", style="green")
    if victims is None and step.evictions:
        t.append("loading victims…\n", style="dim")
    for v in victims or []:
        t.append(f"  ↳ #{v.decision} evict {v.victim} {v.tensor} ({fmt_bytes(v.bytes)}) "
                 f"score {fmt_score(v.score)}", style="cyan")
        if v.runner_up is not None:
            t.append(f"; runner-up {v.runner_up} {fmt_score(v.runner_up_score)}", style="dim")
        t.append("\n")
    return t


class StepPanel(Static):
    """Shows one step; `show` redraws it (victims None: still loading)."""

    DEFAULT_CSS = """
    StepPanel { height: auto; border: round $accent; padding: 0 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("loading steps…", **kwargs)
        self.border_title = "allocation check"
        self.text = ""

    def show(self, step: Step, total: int, victims: list[Victim] | None) -> None:
        content = step_text(step, total, victims)
        self.text = content.plain
        self.update(content)
