"""How the tool names things in text: ops (both numberings) and runs."""

from __future__ import annotations


def op_label(op_id: int | None, name: str | None = None) -> str:
    """An op in both numberings, ours (0-based ids) and the papers' (1-based):
    'op 469 (paper #470) add'; '-' for no op."""
    if op_id is None or op_id < 0:
        return "-"
    return f"op {op_id} (paper #{op_id + 1})" + (f" {name}" if name else "")


def run_label(trace: str, ratio: float | None, budget: int, policy: str) -> str:
    """'resnet32 ratio 0.104 dtr', or the budget in bytes when no ratio was given."""
    amount = f"ratio {ratio:g}" if ratio is not None else f"{budget:,} B"
    return f"{trace} {amount} {policy}"
