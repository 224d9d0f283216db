"""Numbers as people read them: bytes, nanoseconds, scores, overheads, ratios.

One unit convention everywhere: KiB = 2^10, MiB = 2^20 and GiB = 2^30 bytes,
written with two decimals beside the exact byte count where it matters.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


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


SCORE_MIN_DIGITS = 6
SCORE_MAX_DIGITS = 17        # enough for any double to read back exactly


@dataclass(frozen=True)
class ScoreFormat:
    """Eviction scores written with `digits` significant digits."""
    digits: int = SCORE_MIN_DIGITS

    def __call__(self, score: float | None) -> str:
        return "-" if score is None else f"{score:.{self.digits}g}"


def score_format(scores: Iterable[float | None]) -> ScoreFormat:
    """The format for eviction scores shown together: the fewest significant
    digits (at least six) that keep every two different scores different, so a
    victim never seems to tie its runner-up unless the scores are equal."""
    distinct = {x for x in scores if x is not None}
    for digits in range(SCORE_MIN_DIGITS, SCORE_MAX_DIGITS):
        if len({f"{x:.{digits}g}" for x in distinct}) == len(distinct):
            return ScoreFormat(digits)
    return ScoreFormat(SCORE_MAX_DIGITS)


fmt_score = ScoreFormat()
"""A score on its own (compute / (size x staleness)), six significant digits;
scores shown together go through `score_format`."""


def fmt_ratio(x: float | None) -> str:
    """A budget ratio (fraction of peak memory) on its own, six significant digits;
    ratios shown together go through `ratio_format`."""
    return "-" if x is None else f"{x:.6g}"


RATIO_MIN_DIGITS = 6
RATIO_MAX_DIGITS = 9


@dataclass(frozen=True)
class RatioFormat:
    """Ratios written with `digits` decimals; a text shared by different ratios
    (`alike`) gets its budget in bytes beside it."""
    digits: int
    alike: frozenset[str] = frozenset()

    def __call__(self, ratio: float | None, budget: int | None = None) -> str:
        if ratio is None:
            return "-"
        text = f"{ratio:.{self.digits}f}"
        if budget is not None and text in self.alike:
            text += f" ({budget:,} B)"
        return text


def ratio_format(ratios: Iterable[float | None], *, least: int = RATIO_MIN_DIGITS,
                 most: int = RATIO_MAX_DIGITS) -> RatioFormat:
    """The format for ratios shown together: the fewest decimals (at least
    `least`) that tell every distinct ratio from the others; where `most`
    decimals still do not, the texts two ratios share are marked for bytes."""
    distinct = {r for r in ratios if r is not None}
    for digits in range(least, most + 1):
        if len({f"{r:.{digits}f}" for r in distinct}) == len(distinct):
            return RatioFormat(digits)
    seen: dict[str, int] = {}
    for r in distinct:
        key = f"{r:.{most}f}"
        seen[key] = seen.get(key, 0) + 1
    return RatioFormat(most, frozenset(k for k, n in seen.items() if n > 1))


def fmt_overhead(x: float | None, digits: int = 4) -> str:
    """Simulated clock over model compute: '1.0412x'."""
    return "-" if not x else f"{x:.{digits}f}x"


def fmt_fraction(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def fmt_count(n: int, noun: str, plural: str = "s") -> str:
    """A count with its noun, pluralized: "1 hole", "2,048 runs"."""
    return f"{n:,} {noun}" + ("" if n == 1 else plural)
