"""Human formatting shared by the commands: bytes, nanoseconds, ratios, op ids."""

from __future__ import annotations

from ..trace.program import Program


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def fmt_exact_bytes(n: int | None) -> str:
    """Bytes with thousands separators and a readable unit: '889,795,480 (848.58 MiB)'."""
    if n is None:
        return "-"
    return f"{n:,} ({fmt_bytes(n)})"


def fmt_ns(ns: int) -> str:
    if ns >= 1_000_000_000:
        return f"{ns / 1e9:.3f} s"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1_000:
        return f"{ns / 1e3:.3f} us"
    return f"{ns} ns"


def fmt_op(program: Program, op_id: int) -> str:
    """An op in both numberings: ours (0-based ids) and the papers' (1-based)."""
    if op_id < 0:
        return "-"
    return f"op {op_id} (paper #{op_id + 1}) {program.op_name(op_id)}"
