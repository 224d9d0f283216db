"""Sweep folders as DuckDB views, as `db.connect` opens recordings: `runs`, every
stored run of each sweep (docs/sweep-format.md) behind a leading `sweep_id`,
and `sweeps`, one row per sweep from its sweep.json. The connection reads the
sweeps' own part files and nothing else (`db.lock_down`); a part a sweep would
skip (unreadable, or a stranger's) is skipped here too, with its warning."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pyarrow as pa

from .. import db
from .schema import RUNS, SWEEP_FILE, SWEEPS
from .store import SweepStore


def is_sweep(path: str | os.PathLike) -> bool:
    return (Path(path) / SWEEP_FILE).is_file()


def sweeps_table(stores: list[SweepStore], ids: list[str]) -> pa.Table:
    """The `sweeps` view's rows, columns as declared in schema.SWEEPS. The status is
    the sweep's own (`SweepStore.status`: a "running" sweep whose writer is gone
    is "killed"), read here, in Python, as `dtrf holes` reads it."""
    docs = [{**s.read_doc(), "status": s.status} for s in stores]
    return db.folder_table(SWEEPS, ids, [s.path for s in stores], docs)


def connect_sweeps(paths: list[str | os.PathLike], *,
                   read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """One connection over the sweep folders `paths` (SweepStoreError: one is not a
    sweep folder or its sweep.json is unreadable)."""
    stores = [SweepStore(p) for p in paths]
    for store in stores:
        store.read_doc()
    ids = db.folder_ids([s.path.resolve() for s in stores], "sweeps")
    con = duckdb.connect()
    con.register("_dtrf_sweeps", sweeps_table(stores, ids))
    con.execute("CREATE OR REPLACE VIEW sweeps AS SELECT * FROM _dtrf_sweeps")
    parts = [(sweep_id, [str(p.absolute()) for p in store.part_files()])
             for sweep_id, store in zip(ids, stores)]
    db.union_view(con, "runs", RUNS.query_schema(), "sweep_id", parts)
    if read_only:
        db.lock_down(con, [f for _, files in parts for f in files])
    return con
