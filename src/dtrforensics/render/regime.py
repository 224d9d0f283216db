"""A regime comparison (`analyses.regime.RegimeReport`) as lines of text.

Every value is written out in full on its own line, so nothing is cut at 80
columns; the per-window rates are listed only on request (the figure shows them).
"""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from ..analyses.regime import OnsetRule, RegimeReport, RegimeRun
from .labels import op_label
from .units import fmt_count


def _run_line(run: RegimeRun, slow: str | None) -> Text:
    amount = f"{run.budget:,} B" + (f" (ratio {run.ratio})" if run.ratio is not None else "")
    overhead = f"{run.overhead:.4f}x" if run.overhead is not None else run.outcome
    tag = " (slow regime)" if run.label == slow else ""
    return Text(f"  {run.label}: {run.run_id} at {amount}: {overhead}, {run.evictions:,} "
                f"pressure evictions, {run.remats:,} rematerializations{tag}")


def onset_rule(rule: OnsetRule) -> str:
    """The onset's definition in words (the text and the figure's caption)."""
    return (f"Onset rule: a window of {rule.window_ops:,} ops is blown when the slow run makes "
            f">= {rule.factor:g}x the fast run's pressure evictions there and >= "
            f"{rule.min_excess:,} more; the regime is the streak of >= "
            f"{fmt_count(rule.sustain, 'blown window')} with the most excess evictions; the onset is its first op where the "
            f"slow run makes >= {rule.factor:g}x the fast run's evictions and "
            f">= {max(rule.min_excess, 1):,} more.")


def regime_view(r: RegimeReport, *, windows: bool = False) -> Group:
    rule = r.rule
    parts: list[Text] = [Text("Runs", style="bold"), _run_line(r.a, r.slow), _run_line(r.b, r.slow)]
    parts.append(Text(onset_rule(rule), style="dim"))
    if r.slow is None:
        parts.append(Text("Both runs make as many pressure evictions: no slow regime.", style="bold"))
    elif r.onset is None:
        parts.append(Text("No onset: the slow run never evicts that much faster under the rule.",
                          style="bold"))
    else:
        o = r.onset
        parts.append(Text(f"Onset: {op_label(o.op)}, in the window of ops "
                          f"{o.first_op:,}-{o.last_op:,}: from it to op {o.regime_last_op:,} the "
                          f"slow run makes {o.regime_slow_evictions:,} pressure evictions against "
                          f"{o.regime_fast_evictions:,}", style="bold"))
    d = r.divergence
    if d is None:
        parts.append(Text("The eviction streams are identical."))
    else:
        when = ("" if d.ops_before_onset is None else
                f", {d.ops_before_onset:,} ops before the onset" if d.ops_before_onset >= 0
                else f", {-d.ops_before_onset:,} ops after the onset")
        drivers = (f"; entry {', '.join(map(str, d.drivers_among_entries))} is a driver"
                   if d.drivers_among_entries else "")
        parts.append(Text(f"First divergence: stream position {d.position:,} at op {d.op_id:,}"
                          f" ({_entry('a', d.a_storage)}, {_entry('b', d.b_storage)}){when}"
                          f"{drivers}"))
    if r.drivers:
        parts.append(Text("Drivers: storages the slow run evicts more often from the onset on",
                          style="bold"))
        for dr in r.drivers:
            parts.append(Text(f"  {dr.rank:>2}. storage {dr.storage} ({dr.tensor}, {dr.bytes:,} B, "
                              f"made by {dr.op_name} op {dr.op_id}"
                              f"{f' in {dr.module}' if dr.module else ''}): "
                              f"{fmt_count(dr.slow_evictions, 'eviction')} "
                              f"against {dr.fast_evictions:,} (+{dr.excess:,}), first at "
                              f"op {dr.first_slow_op:,}"))
    if windows:
        parts.append(Text("Windows: first op, last op, pressure evictions a / b, remats a / b",
                          style="bold"))
        for w in r.windows:
            parts.append(Text(f"  {w.first_op:,}-{w.last_op:,}: {_n(w.a.evictions)} / "
                              f"{_n(w.b.evictions)}, {_n(w.a.remats)} / {_n(w.b.remats)}"))
    return Group(*parts)


def _entry(run: str, storage: int | None) -> str:
    """What run `run` has at the divergent stream position."""
    return f"run {run}'s stream has ended" if storage is None else \
        f"run {run}'s entry is storage {storage}"


def _n(x: int | None) -> str:
    return "-" if x is None else f"{x:,}"
