"""What-if runs as tables: baseline / intervention / control side by side, and the
retentions the hindsight search tried."""

from __future__ import annotations

import json


from ..analyses.explain import Explanation
from ..analyses.interventions import InterventionResult
from .tables import FitTable
from .units import fmt_exact_bytes, fmt_overhead

CONTROL_VERDICT = {
    True: "[green]the control reproduces the baseline exactly[/]",
    False: "[bold red]the control does NOT reproduce the baseline: the comparison is not "
           "valid[/]",
}


def side_by_side(result: InterventionResult, interventions: dict) -> FitTable:
    """Outcome, overhead, evictions, remats, pinned peak and depth of the three runs."""
    table = FitTable(title="baseline / intervention / control")
    table.add_column("")
    for name in ("baseline", "intervention", "control"):
        table.add_column(name, justify="right")
    runs = (result.baseline.summary, result.intervention.summary, result.control.summary)
    rows = [
        ("outcome", lambda s: s["outcome"]),
        ("overhead", lambda s: fmt_overhead(s["overhead"])),
        ("pressure evictions", lambda s: f"{s['evictions']:,}"),
        ("remats", lambda s: f"{s['remats']:,}"),
        ("peak pinned", lambda s: fmt_exact_bytes(s["max_pinned"]["bytes"])),
        ("depth at peak pinned", lambda s: str(s["max_pinned"]["depth"])),
        ("max nesting depth", lambda s: str(s["max_depth"])),
        ("victims sha256", lambda s: s["victims_sha256"][:12]),
    ]
    for label, get in rows:
        table.add_row(label, *(get(s) for s in runs))
    table.caption = f"intervention: {json.dumps({k: v for k, v in interventions.items() if v})}"
    return table


def fixes_table(found: Explanation) -> FitTable:
    """The retentions that turn the failure into a completion."""
    table = FitTable(title="retentions that complete the run")
    for col in ("retain", "overhead", "max depth", "peak pinned", "depth at peak pinned"):
        table.add_column(col, justify="right")
    for a in found.fixes:
        s = a.summary
        table.add_row(",".join(map(str, a.retain)), fmt_overhead(s["overhead"]),
                      str(s["max_depth"]), fmt_exact_bytes(s["max_pinned"]["bytes"]),
                      str(s["max_pinned"]["depth"]))
    return table


def attempts_table(found: Explanation) -> FitTable:
    """Every retention tried, with the op that last evicted each retained storage."""
    table = FitTable()
    for col in ("retain storage", "evicted at op", "outcome", "overhead", "max depth"):
        table.add_column(col, justify="right")
    evicted_at = {c.storage: c.last_evicted_op for c in found.candidates}
    for a in found.attempts:
        s = a.summary
        table.add_row(",".join(map(str, a.retain)),
                      ",".join(str(evicted_at[r]) for r in a.retain), s["outcome"],
                      fmt_overhead(s["overhead"]), str(s["max_depth"]))
    return table
