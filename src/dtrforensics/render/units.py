"""Numbers as people read them: bytes, nanoseconds, scores, overheads, ratios."""

from __future__ import annotations


def fmt_bytes(n: int | None) -> str:
    """1536 -> '1.50 KiB' (bytes under 1 KiB stay exact: '12 B')."""
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


def fmt_score(x: float | None) -> str:
    """An eviction score (compute / (size x staleness)), six significant digits."""
    return "-" if x is None else f"{x:.6g}"


def fmt_ratio(x: float | None) -> str:
    """A budget ratio (fraction of peak memory), six significant digits."""
    return "-" if x is None else f"{x:.6g}"


def fmt_overhead(x: float | None, digits: int = 4) -> str:
    """Simulated clock over model compute: '1.0412x'."""
    return "-" if not x else f"{x:.{digits}f}x"


def fmt_fraction(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def fmt_count(n: int, noun: str, plural: str = "s") -> str:
    """A count with its noun, pluralized: "1 hole", "2,048 runs"."""
    return f"{n:,} {noun}" + ("" if n == 1 else plural)
