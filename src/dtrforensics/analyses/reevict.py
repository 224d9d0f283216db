"""Re-eviction: how often the same storages are evicted again, in one run or two.

Every figure comes in two scopes, always labelled:
- `pressure`: pressure victims alone (the heuristic's choices);
- `stream`: the whole eviction stream, pressure victims and dead frees
  (docs/semantics.md §12.3). The published LSTM figures (0.265 vs 0.264: 5,233
  vs 5,236 distinct storages, Jaccard 0.999, 1.33 vs 8.27 evictions per
  storage) are stream figures.

Per run (`queries/reevict/reeviction_figures`, `evictions_per_storage_top`):
evictions, distinct storages, evictions per storage (mean, max), the most
re-evicted storages, the share of evictions taken by the top 10, and the
collateral share of the rematerializations that brought those storages back.
For two runs (`queries/reevict/reevicted_overlap`): Jaccard overlap of the
evicted sets and each set's containment in the other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from ..jsonsafe import json_safe
from ..recorder.reader import Recording
from ..rows import fetch_dicts
from .runs import RunIdentity, open_together, same_trace

TOP = 10


@dataclass(frozen=True)
class TopStorage:
    rank: int
    storage: int
    evictions: int           # in the scope
    pressure: int
    dead: int
    bytes: int
    tensor: str
    op_id: int
    paper_op: int
    op_name: str
    module: str | None = None  # where its maker ran (the log's where-file)


@dataclass(frozen=True)
class ModuleWork:
    """A run's evictions and rematerializations in one module and phase
    (`run/work_by_module`): what the run spent where in the model."""
    module: str | None
    phase: str | None
    evictions: int           # pressure evictions of storages made there
    evicted_bytes: int
    remats: int              # rematerializations of its ops
    remat_compute: int       # their compute


@dataclass(frozen=True)
class ScopeFigures:
    scope: str               # 'pressure' or 'stream'
    evictions: int
    distinct_storages: int
    mean_per_storage: float | None
    max_per_storage: int | None
    top10_evictions: int | None
    top10_share: float | None
    remats: int              # rematerializations of storages last removed in the scope
    collateral_remats: int
    collateral_share: float | None
    top: tuple[TopStorage, ...]


@dataclass(frozen=True)
class RunFigures(RunIdentity):
    pressure: ScopeFigures
    stream: ScopeFigures
    # by module and phase, most recompute first; empty for a log without a where-file
    by_module: tuple[ModuleWork, ...] = ()


@dataclass(frozen=True)
class Overlap:
    scope: str
    a_storages: int
    b_storages: int
    common: int
    union_storages: int
    jaccard: float | None
    a_in_b: float | None     # share of a's evicted storages that b evicted too
    b_in_a: float | None


@dataclass(frozen=True)
class ReevictReport:
    runs: tuple[RunFigures, ...]
    overlap: dict[str, Overlap] | None      # by scope; two runs only

    def to_json(self) -> dict:
        return json_safe(asdict(self))


def reevict(recordings: Sequence[Recording], *, top: int = TOP) -> ReevictReport:
    """Figures for one or two recordings (two: also their overlap)."""
    if not 1 <= len(recordings) <= 2:
        raise ValueError("re-eviction analysis takes one or two recordings")
    if len(recordings) == 2:
        same_trace(recordings)
    con, ids = open_together(recordings)
    try:
        runs = tuple(_run_figures(con, rec, run_id, top) for rec, run_id in zip(recordings, ids))
        overlap = None
        if len(ids) == 2:
            overlap = {r["scope"]: Overlap(**r) for r in fetch_dicts(
                con, "SELECT * FROM reevicted_overlap(?, ?)", ids)}
    finally:
        con.close()
    return ReevictReport(runs=runs, overlap=overlap)


def _run_figures(con, rec: Recording, run_id: str, top: int) -> RunFigures:
    modules = dict(con.execute("SELECT storage_id, module FROM storages WHERE run_id = ? "
                               "AND module IS NOT NULL", [run_id]).fetchall())
    scopes = {}
    for r in fetch_dicts(con, "SELECT * FROM reeviction_figures WHERE run_id = ?", [run_id]):
        tops = tuple(TopStorage(
            rank=t["rank"], storage=t["storage_id"], evictions=t["evictions"],
            pressure=t["pressure"], dead=t["dead"], bytes=t["bytes"], tensor=t["tensor"],
            op_id=t["op_id"], paper_op=t["paper_op"], op_name=t["op_name"],
            module=modules.get(t["storage_id"]))
            for t in fetch_dicts(con, "SELECT * FROM evictions_per_storage_top(?, ?, ?)",
                                 [run_id, r["scope"], top]))
        scopes[r["scope"]] = ScopeFigures(
            scope=r["scope"], evictions=r["evictions"], distinct_storages=r["distinct_storages"],
            mean_per_storage=r["mean_per_storage"], max_per_storage=r["max_per_storage"],
            top10_evictions=r["top10_evictions"], top10_share=r["top10_share"],
            remats=r["remats"], collateral_remats=r["collateral_remats"],
            collateral_share=r["collateral_share"], top=tops)
    return RunFigures(**RunIdentity.of(rec, run_id),
                      pressure=scopes["pressure"], stream=scopes["stream"],
                      by_module=_work_by_module(con, run_id) if modules else ())


def _work_by_module(con, run_id: str) -> tuple[ModuleWork, ...]:
    rows = fetch_dicts(con, "SELECT * FROM work_by_module WHERE run_id = ? ORDER BY "
                            "remat_compute DESC, evictions DESC, module, phase", [run_id])
    return tuple(ModuleWork(**{k: r[k] for k in ModuleWork.__dataclass_fields__}) for r in rows)
