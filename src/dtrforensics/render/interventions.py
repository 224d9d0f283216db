"""What-if runs as a table: baseline / intervention / control side by side."""

from __future__ import annotations

import json

from rich.console import Group

from ..analyses.interventions import InterventionResult
from .console import styled
from .labels import short_source
from .tables import FitTable
from .units import fmt_exact_bytes, fmt_overhead

CONTROL_VERDICT = {
    True: styled("[green]the control reproduces the baseline exactly[/]"),
    False: styled("[bold red]the control does NOT reproduce the baseline: the comparison is "
                  "not valid[/]"),
}


def side_by_side(result: InterventionResult, interventions: dict) -> Group:
    """Outcome, overhead, evictions, remats, pinned peak and depth of the three runs,
    then each run's victims SHA-256 whole, one to a line."""
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
    ]
    for label, get in rows:
        table.add_row(label, *(get(s) for s in runs))
    table.caption = f"intervention: {json.dumps({k: v for k, v in interventions.items() if v})}"
    digests = [f"victims sha256, {name}: {s['victims_sha256']}"
               for name, s in zip(("baseline", "intervention", "control"), runs)]
    return Group(table, *digests, *named_storages(result.where))


def named_storages(where: dict[int, dict]) -> list[str]:
    """Each storage the interventions name, with where its maker ran in the model;
    nothing for a log without a where-file."""
    return [f"storage {s}: made in {w['module'] or 'no module'}"
            + (f" ({w['phase']})" if w["phase"] else "")
            + (f" at {short_source(w['source'])}" if w["source"] else "")
            for s, w in sorted(where.items())]

