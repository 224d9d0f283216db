"""Re-eviction figures (`analyses.reevict.ReevictReport`): per run and scope, the
overlap of two runs' evicted sets, and the most re-evicted storages."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from ..analyses.reevict import ReevictReport, RunFigures
from .labels import op_label
from .tables import FitTable
from .units import fmt_bytes, fmt_fraction

MODULES_SHOWN = 12   # (module, phase) rows of the by-module table (the JSON has every one)
SCOPE_LABEL = {"pressure": "pressure victims only", "stream": "whole stream (pressure + dead)"}


def _f(x, digits=2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _figures_table(r: ReevictReport) -> FitTable:
    t = FitTable(title="Re-eviction figures", title_justify="left")
    t.add_column("figure", style="bold")
    for run in r.runs:
        amount = f"{run.ratio:g}" if run.ratio is not None else f"{run.budget:,} B"
        for scope in ("pressure", "stream"):
            t.add_column(f"{run.run_id}\n{amount} {run.outcome}\n{SCOPE_LABEL[scope]}",
                         justify="right")
    rows = [
        ("evictions", lambda s: f"{s.evictions:,}"),
        ("distinct storages", lambda s: f"{s.distinct_storages:,}"),
        ("evictions per storage (mean)", lambda s: _f(s.mean_per_storage)),
        ("evictions per storage (max)", lambda s: "-" if s.max_per_storage is None
         else f"{s.max_per_storage:,}"),
        ("share of the top 10", lambda s: fmt_fraction(s.top10_share)),
        ("remats bringing them back", lambda s: f"{s.remats:,} + {s.collateral_remats:,} collateral"),
        ("collateral remat share", lambda s: fmt_fraction(s.collateral_share)),
    ]
    for name, cell in rows:
        t.add_row(name, *[cell(getattr(run, scope)) for run in r.runs
                          for scope in ("pressure", "stream")])
    return t


def _top_table(run: RunFigures, scope: str) -> FitTable:
    figures = getattr(run, scope)
    t = FitTable(title=f"{run.run_id}: most evicted, {SCOPE_LABEL[scope]}", title_justify="left")
    modules = any(s.module for s in figures.top)
    for col in ("#", "storage", "evictions", "pressure", "dead", "size", "tensor", "made by",
                *(("module",) if modules else ())):
        t.add_column(col, justify="left" if col in ("tensor", "made by", "module") else "right")
    for s in figures.top:
        t.add_row(str(s.rank), str(s.storage), f"{s.evictions:,}", f"{s.pressure:,}",
                  f"{s.dead:,}", fmt_bytes(s.bytes), s.tensor,
                  op_label(s.op_id, s.op_name), *((s.module or "-",) if modules else ()))
    return t


def _by_module_table(run: RunFigures) -> FitTable:
    """What the run evicted (count, bytes) and the compute its rematerializations
    cost, by module and phase (`run/work_by_module`; the JSON adds remat counts)."""
    t = FitTable(box=None, padding=(0, 1, 0, 0))
    for col in ("module", "phase", "evicted", "bytes", "recompute"):
        t.add_column(col, justify="left" if col in ("module", "phase") else "right")
    shown, rest = run.by_module[:MODULES_SHOWN], run.by_module[MODULES_SHOWN:]
    for m in shown:
        t.add_row(m.module or "-", m.phase or "-", f"{m.evictions:,}",
                  fmt_bytes(m.evicted_bytes), f"{m.remat_compute:,}")
    if rest:
        t.add_row(f"{len(rest):,} more (--json lists all)", "",
                  f"{sum(m.evictions for m in rest):,}",
                  fmt_bytes(sum(m.evicted_bytes for m in rest)),
                  f"{sum(m.remat_compute for m in rest):,}")
    return t


def _overlap_table(r: ReevictReport) -> FitTable:
    a, b = r.runs
    t = FitTable(title=f"Overlap of the evicted sets: A = {a.run_id}, B = {b.run_id}",
              title_justify="left")
    for col in ("scope", "|A|", "|B|", "|A ∩ B|", "|A ∪ B|", "Jaccard", "A in B", "B in A"):
        t.add_column(col, justify="left" if col == "scope" else "right")
    for scope in ("pressure", "stream"):
        o = r.overlap[scope]
        t.add_row(SCOPE_LABEL[scope], f"{o.a_storages:,}", f"{o.b_storages:,}", f"{o.common:,}",
                  f"{o.union_storages:,}", _f(o.jaccard, 4), fmt_fraction(o.a_in_b), fmt_fraction(o.b_in_a))
    return t


def reevict_view(r: ReevictReport, top: int) -> Group:
    parts = [_figures_table(r)]
    if r.overlap is not None:
        parts.append(_overlap_table(r))
    if top:
        parts += [_top_table(run, scope) for run in r.runs for scope in ("pressure", "stream")]
    for run in r.runs:
        if run.by_module:       # a heading of its own: a narrow table would wrap its title
            parts += [Text(f"{run.run_id}: evictions and recompute by module", style="italic"),
                      _by_module_table(run)]
    return Group(*parts)
