"""The floor of a trace in words (`analyses/floor.py`): one line for the numbers,
one more when the floor lies above the unconstrained peak (why) or when the
model's state is nearly all of the peak."""

from __future__ import annotations

from .units import fmt_bytes


def floor_lines(data: dict, lead: str = "floor ") -> list[str]:
    """`data` is `Floor.to_json()`; the first line starts with `lead` (none where
    a `floor:` key already names it)."""
    peak, low = data["peak_bytes"], data["floor_bytes"]
    share = ("so no budget up to it completes" if data["above_peak_bytes"] else
             f"eviction can free at most {data['evictable_share']:.1%} of the peak")
    lines = [f"{lead}{fmt_bytes(low)} ({low:,} B) {where_it_binds(data)}; unconstrained peak "
             f"{fmt_bytes(peak)} ({peak:,} B); {share}"]
    if data["above_peak_bytes"]:
        lines.append(above_peak_line(data))
    elif data["state_bound"]:
        lines.append(f"parameters, gradients and optimizer states are {low / peak:.1%} of the "
                     f"peak: no budget below {low:,} B completes, and rematerialisation "
                     "has almost nothing to trade")
    return lines


def where_it_binds(data: dict) -> str:
    if data["floor_op_id"] < 0:
        return "at the end of the step (every constant and every tensor still referenced, pinned)"
    return (f"at op {data['floor_op_id']}: {fmt_bytes(data['constants_at_floor_bytes'])} of "
            f"constants + {fmt_bytes(data['working_set_bytes'])} working set")


def above_peak_line(data: dict) -> str:
    """Why no budget at the unconstrained peak completes: the constants a DTR run
    keeps pinned that the unconstrained run frees, old versions first."""
    old, freed = data["old_version_bytes"], data["freed_constant_bytes"]
    what = ("old versions of tensors written in place (the parameters an optimizer updates, "
            "batch norm's running statistics), pinned beside their new versions")
    versions = (f": {what}" if old == freed else f", {old:,} B of them {what}" if old else "")
    return (f"the floor lies {data['above_peak_bytes']:,} B above the unconstrained peak: a DTR "
            f"run never frees a constant, and the unconstrained run frees {freed:,} B of "
            f"them{versions}")


def budget_refusal(budget: int, data: dict) -> str:
    """One line refusing a budget below the floor: where the floor binds and, where
    it lies above the unconstrained peak, why."""
    why = f"; {above_peak_line(data)}" if data["above_peak_bytes"] else ""
    return (f"budget {budget:,} bytes is below the step's floor of {data['floor_bytes']:,} bytes, "
            f"what every run holds at once {where_it_binds(data)}: no policy can run it{why}")
