"""`dtrf reevict REC [REC2]`: how often the same storages are evicted again."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.console import Group
from rich.table import Table

from ..analyses.reevict import ReevictReport, RunFigures, reevict
from ..analyses.runs import DEFAULT_CACHE, RunSpecError
from .diff_cmd import CacheOption, JsonOption, console, open_run
from .errors import CommandError
from .format import fmt_bytes

SCOPE_LABEL = {"pressure": "pressure victims only", "stream": "whole stream (pressure + dead)"}


def register(app: typer.Typer) -> None:
    app.command("reevict")(reevict_command)


def reevict_command(
    recording: Annotated[str, typer.Argument(help="A recording, or TRACE@RATIO[:POLICY].")],
    other: Annotated[Optional[str], typer.Argument(help="A second run of the same trace: adds the overlap of the evicted sets.")] = None,
    top: Annotated[int, typer.Option(help="Most re-evicted storages listed per run and scope.")] = 10,
    cache: CacheOption = DEFAULT_CACHE,
    as_json: JsonOption = False,
) -> None:
    """Re-eviction figures (evictions per storage, concentration, collateral remats),
    each over pressure victims alone and over the whole eviction stream."""
    if top < 0:
        raise CommandError("--top must be >= 0")
    recs = [open_run(recording, scores="victims", cache=cache)]
    if other is not None:
        recs.append(open_run(other, scores="victims", cache=cache))
    try:
        report = reevict(recs, top=top)
    except RunSpecError as exc:
        raise CommandError(str(exc)) from None
    if as_json:
        print(json.dumps(report.to_json(), indent=2, allow_nan=False))
        return
    console().print(render(report, top))


def _f(x, digits=2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _figures_table(r: ReevictReport) -> Table:
    t = Table(title="Re-eviction figures", title_justify="left")
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
        ("share of the top 10", lambda s: _pct(s.top10_share)),
        ("remats bringing them back", lambda s: f"{s.remats:,} + {s.collateral_remats:,} collateral"),
        ("collateral remat share", lambda s: _pct(s.collateral_share)),
    ]
    for name, cell in rows:
        t.add_row(name, *[cell(getattr(run, scope)) for run in r.runs
                          for scope in ("pressure", "stream")])
    return t


def _top_table(run: RunFigures, scope: str) -> Table:
    figures = getattr(run, scope)
    t = Table(title=f"{run.run_id}: most evicted, {SCOPE_LABEL[scope]}", title_justify="left")
    for col in ("#", "storage", "evictions", "pressure", "dead", "size", "tensor", "made by"):
        t.add_column(col, justify="left" if col in ("tensor", "made by") else "right")
    for s in figures.top:
        t.add_row(str(s.rank), str(s.storage), f"{s.evictions:,}", f"{s.pressure:,}",
                  f"{s.dead:,}", fmt_bytes(s.bytes), s.tensor,
                  f"op {s.op_id} (#{s.paper_op}) {s.op_name}")
    return t


def _overlap_table(r: ReevictReport) -> Table:
    a, b = r.runs
    t = Table(title=f"Overlap of the evicted sets: A = {a.run_id}, B = {b.run_id}",
              title_justify="left")
    for col in ("scope", "|A|", "|B|", "|A ∩ B|", "|A ∪ B|", "Jaccard", "A in B", "B in A"):
        t.add_column(col, justify="left" if col == "scope" else "right")
    for scope in ("pressure", "stream"):
        o = r.overlap[scope]
        t.add_row(SCOPE_LABEL[scope], f"{o.a_storages:,}", f"{o.b_storages:,}", f"{o.common:,}",
                  f"{o.union_storages:,}", _f(o.jaccard, 4), _pct(o.a_in_b), _pct(o.b_in_a))
    return t


def render(r: ReevictReport, top: int) -> Group:
    parts = [_figures_table(r)]
    if r.overlap is not None:
        parts.append(_overlap_table(r))
    if top:
        parts += [_top_table(run, scope) for run in r.runs for scope in ("pressure", "stream")]
    return Group(*parts)

