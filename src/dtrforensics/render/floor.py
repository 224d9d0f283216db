"""The floor of a trace in words (`analyses/floor.py`): one line for the numbers,
one more when the model's state is nearly all of the peak."""

from __future__ import annotations

from .units import fmt_bytes


def floor_lines(data: dict, lead: str = "floor ") -> list[str]:
    """`data` is `Floor.to_json()`; the first line starts with `lead` (none where
    a `floor:` key already names it)."""
    peak, low = data["peak_bytes"], data["floor_bytes"]
    where = ("at the end of the step (everything still referenced there)"
             if data["floor_op_id"] < 0 else
             f"at op {data['floor_op_id']}: {fmt_bytes(data['constants_at_floor_bytes'])} of "
             f"constants + {fmt_bytes(data['working_set_bytes'])} working set")
    lines = [f"{lead}{fmt_bytes(low)} ({low:,} B) {where}; unconstrained peak {fmt_bytes(peak)} "
             f"({peak:,} B); eviction can free at most {data['evictable_share']:.1%} of the peak"]
    if data["state_bound"]:
        lines.append(f"parameters, gradients and optimizer states are {low / peak:.1%} of the "
                     f"peak: no budget below {low:,} B completes, and rematerialisation "
                     "has almost nothing to trade")
    return lines
