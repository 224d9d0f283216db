"""How the tool names things in text: ops (both numberings) and runs."""

from __future__ import annotations

from ..trace.program import op_label

__all__ = ["op_label", "run_label"]


def run_label(trace: str, ratio: float | None, budget: int, policy: str) -> str:
    """'resnet32 ratio 0.104 dtr', or the budget in bytes when no ratio was given."""
    amount = f"ratio {ratio:g}" if ratio is not None else f"{budget:,} B"
    return f"{trace} {amount} {policy}"
