"""One run summary panel, for a replay just run (`dtrf run`) and for a recording
(`dtrf show`): both hand in the run summary's JSON (`RunSummary.to_json()`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from rich.panel import Panel

from .console import esc, styled
from .labels import op_label
from .tables import FitPanel, FitTable
from .units import fmt_exact_bytes, fmt_overhead, ratio_format

OUTCOME_STYLE = {"ok": "bold green", "oom": "bold red", "thrashed": "bold yellow",
                 "timeout": "bold magenta", "error": "bold red"}


def outcome_text(outcome: str) -> str:
    """The outcome in its colour, as markup (wrap it, and what joins it, in `styled`)."""
    return f"[{OUTCOME_STYLE.get(outcome, 'bold')}]{esc(outcome)}[/]"


def _interval(s: dict) -> str | None:
    if not s.get("budget_interval"):
        return None
    lo, hi = s["budget_interval"]
    lo_r, hi_r = s.get("budget_interval_ratio") or (lo / s["peak"],
                                                    None if hi is None else hi / s["peak"])
    fr = ratio_format([lo_r, hi_r])
    return (f"[{lo:,}, {'∞' if hi is None else f'{hi:,}'}] bytes = ratio "
            f"[{fr(lo_r)}, {'∞' if hi_r is None else fr(hi_r)}]")


def summary_panel(s: dict, op_name: Callable[[int], str], *, title: str,
                  extra: Sequence[tuple[str, str]] = ()) -> Panel:
    """Outcome, budget, overhead, evictions, depth, pinned peak, the OOM if any, the
    budget interval; `extra` rows (where it was recorded, ...) go last."""
    def op(op_id: int) -> str:
        return op_label(op_id, op_name(op_id) if op_id >= 0 else None)

    budget = fmt_exact_bytes(s["budget"])
    if s.get("ratio") is not None:
        budget += f"  ratio {s['ratio']:g}"
    rows = [
        ("outcome", styled(outcome_text(s["outcome"])
                           + (f"  ({esc(s['error'])})" if s.get("error") else ""))),
        ("budget", budget),
        ("peak / model compute", f"{fmt_exact_bytes(s['peak'])} / {s['model_compute']:,} ns"),
        ("overhead", fmt_overhead(s.get("overhead"))),
        ("clock / remat compute", f"{s['clock']:,} / {s['remat_compute']:,} ns"),
        ("evictions", f"{s['evictions']:,} pressure + {s['dead_frees']:,} dead = "
                      f"{s['evictions'] + s['dead_frees']:,} stream entries; "
                      f"{s['distinct_evicted']:,} distinct pressure victims, "
                      f"{s['stream_distinct']:,} distinct storages in the stream"),
        ("rematerializations", f"{s['remats']:,} (+{s['collateral_remats']:,} collateral)"),
        ("max nesting depth", str(s["max_depth"])),
    ]
    pinned = s.get("max_pinned") or {}
    if pinned.get("op_id", -1) >= 0:
        rows.append(("peak pinned at a check", f"{fmt_exact_bytes(pinned['bytes'])} at depth "
                                                f"{pinned['depth']}, {op(pinned['op_id'])}"))
    oom = s.get("oom")
    if oom:
        rows += [
            ("OOM at", ("the pins after " if oom.get("final_pins") else "")
             + f"{op(oom['op_id'])}, depth {oom['depth']}"),
            ("failing allocation", f"{oom['tensor']} ({fmt_exact_bytes(oom['request'])}) in a "
                                   f"chain rooted at {oom['root_tensor']}"),
            ("pinned at failure", fmt_exact_bytes(oom["pinned"])),
        ]
    if s.get("note"):
        rows.append(("note", s["note"]))
    interval = _interval(s)
    if interval:
        rows.append(("budget interval", interval))
    rows.append(("victims sha256", s["victims_sha256"]))
    if s.get("wall_seconds") is not None:
        rows.append(("wall time", f"{s['wall_seconds']:.3f} s"))
    iv = s.get("interventions") or {}
    if iv.get("retain") or iv.get("forbid") or iv.get("force"):
        rows.append(("interventions", json.dumps(iv)))
    rows += list(extra)
    grid = FitTable.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for key, value in rows:
        grid.add_row(key, value)
    return FitPanel(grid, title=title, expand=False)
