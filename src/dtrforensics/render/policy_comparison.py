"""A policy comparison (`analyses.policy_comparison`) as lines of text (every
number whole, at any width) and as JSON."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import PurePath

from rich.console import Group
from rich.text import Text

from ..analyses.policy_comparison import DominanceSpan, PolicyComparison, PolicyStanding
from .units import RatioFormat, fmt_count, ratio_format


def short_names(policies) -> dict[str, str]:
    """Built-ins keep their name; a policy from a file is called by its NAME
    (by FILE.py:NAME when two files share a NAME)."""
    def short(p: str, with_file: bool) -> str:
        path, sep, name = p.rpartition(":")
        if not sep or not path.endswith(".py"):
            return p
        return f"{PurePath(path).name}:{name}" if with_file else name
    names = {p: short(p, False) for p in policies}
    clash = {n for n in names.values() if list(names.values()).count(n) > 1}
    return {p: short(p, True) if n in clash else n for p, n in names.items()}


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"


def first_success_text(s: PolicyStanding, peak: int, fr: RatioFormat) -> str:
    """The first success as far as the policy's certificates settle it."""
    if s.first_success is None:
        if s.first_success_exact:
            return "nothing completes (every budget certified to fail)"
        return f"no success certified yet ({s.uncertified_below_bytes:,} B uncertified)"
    at = f"{fr(s.first_success_ratio)} ({s.first_success:,} B)"
    if s.first_success_below_range:
        return f"completes at the range's lowest budget {at}: the first success is at or below it"
    if s.first_success_exact:
        return f"first success {at}, exact"
    low = s.first_success_lowest_possible
    return (f"first success between {fr(low / peak)} ({low:,} B) and {at}, "
            f"{s.uncertified_below_bytes:,} B below it uncertified")


def _standing_lines(s: PolicyStanding, peak: int, fr: RatioFormat) -> list[Text]:
    first = first_success_text(s, peak, fr)
    certified = "certified to the byte" if s.holes_exact else "between failing samples"
    found = "no hole" if s.holes == 0 else (
        f"{fmt_count(s.holes, 'hole')}, {s.hole_bytes:,} B in all ({certified})")
    holes = found if s.holes_complete else (
        f"{found} among the certified budgets, {s.uncertified_bytes:,} B uncertified")
    return [Text(s.policy, style="bold"),
            Text(f"  {first}; {holes}"),
            Text(f"  overhead p50 {_x(s.overhead_p50)}, p90 {_x(s.overhead_p90)}, max "
                 f"{_x(s.overhead_max)}; {fmt_count(s.regime_switches, 'regime switch', 'es')}"),
            Text(f"  {s.points:,} points: {s.completed:,} completed, {s.failed:,} failed"
                 + (f", {s.unresolved:,} unresolved (timeout)" if s.unresolved else ""),
                 style="dim")]


def _span_line(d: DominanceSpan, names: dict[str, str], fr: RatioFormat) -> Text:
    where = f"{fr(d.lo_ratio)}-{fr(d.hi_ratio)} ({d.lo:,}-{d.hi:,} B)"
    if not d.best:
        return Text(f"  {where}: no policy completes", style="red")
    overhead = (_x(d.overhead_min) if d.overhead_min == d.overhead_max
                else f"{_x(d.overhead_min)}-{_x(d.overhead_max)}")
    return Text(f"  {where}: {' = '.join(names[p] for p in d.best)} ({overhead})")


def comparison_view(c: PolicyComparison) -> Group:
    lo, hi = c.range_bytes
    how = "exact (certified intervals)" if c.exact else "sampled"
    fr = ratio_format([lo / c.peak, hi / c.peak]
                      + [s.first_success_ratio for s in c.policies]
                      + [r for d in c.dominance for r in (d.lo_ratio, d.hi_ratio)])
    from .sweep import ended_text
    parts = [Text(f"{c.trace}: {len(c.policies)} policies over {fr(lo / c.peak)}-"
                  f"{fr(hi / c.peak)} ({lo:,}-{hi:,} B), {how}; sweep {c.sweep}",
                  style="bold"),
             Text(f"sweep ended: {ended_text(c.report)}")]
    names = short_names(s.policy for s in c.policies)
    for s in c.policies:
        parts += _standing_lines(s, c.peak, fr)
        if names[s.policy] != s.policy:
            parts[-4].append(f"  (called {names[s.policy]} below and in the figure)", style="dim")
    parts.append(Text("best policy by budget (completes, then least overhead)", style="bold"))
    parts += [_span_line(d, names, fr) for d in c.dominance]
    if not c.dominance:
        parts.append(Text("  no budget where every policy has an answer"))
    return Group(*parts)


def finish_lines(c: PolicyComparison) -> list[str]:
    """What to run to settle what the certificates leave open (nothing if complete)."""
    if all(s.holes_complete for s in c.policies):
        return []
    return ["to finish (nothing is run again): " + finish_command(c)]


def finish_command(c: PolicyComparison) -> str:
    """The command that extends the comparison's sweep to settle what is open."""
    from .sweep import next_max_runs, sweep_command
    params = c.report.params
    return sweep_command(c.report.trace.source, params, c.sweep,
                         max_runs=next_max_runs(c.report) if params.exact else None,
                         exact=True, command="compare-policies")


def comparison_json(c: PolicyComparison) -> dict:
    complete = all(s.holes_complete for s in c.policies)
    return {"trace": c.trace, "peak": c.peak, "range_bytes": list(c.range_bytes),
            "exact": c.exact, "sweep": str(c.sweep), "ended": c.report.ended,
            "complete": complete,
            "finish": None if complete else finish_command(c),
            "policies": [asdict(s) for s in c.policies],
            "dominance": [asdict(d) for d in c.dominance]}


def figure(c: PolicyComparison):
    """Overhead against budget for every policy, failures marked (the sweep's
    figure), policies from files called by their short names."""
    from .sweep_plot import draw
    names = short_names(c.points.keys() | {p.policy for p in c.report.policies})
    report = replace(c.report, policies=[replace(p, policy=names[p.policy])
                                         for p in c.report.policies])
    return draw(report, {names[k]: v for k, v in c.points.items()}, failure_panel=False)
