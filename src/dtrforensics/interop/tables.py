"""Sweep results as one table, for CSV or Parquet: a sweep folder's runs, or every
Parquet file under a folder, sorted by (policy, budget, rep)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ..sweep.store import SweepStore, SweepStoreError
from .plumbing import open_output, output_name

SORT_KEYS = ("policy", "budget", "rep")


class TableExportError(ValueError):
    """A folder that holds no runs table (or Parquet files that do not form one)."""


@dataclass(frozen=True)
class TableExport:
    """What a sweep-table export wrote."""

    format: str
    path: str
    rows: int
    columns: int

    def to_json(self) -> dict:
        return asdict(self)


def sweep_table(folder: Path) -> pa.Table:
    """The runs of a sweep folder (or every Parquet file under a folder), sorted by
    (policy, budget, rep) when it has those columns."""
    if not folder.is_dir():
        raise TableExportError(f"{folder} is not a folder")
    store = SweepStore(folder)
    if store.exists():
        try:
            store.read_doc()
            table = store.read_runs()
        except SweepStoreError as exc:
            raise TableExportError(str(exc)) from None
    else:
        files = sorted(p for p in folder.rglob("*.parquet")
                       if not any(part.startswith(".") for part in p.relative_to(folder).parts))
        if not files:
            raise TableExportError(f"{folder} is neither a sweep (no sweep.json) nor a folder "
                                   "of Parquet results")
        try:
            table = pa.concat_tables([pq.read_table(p) for p in files],
                                     promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise TableExportError(f"{folder}: its Parquet files do not form one table: "
                                   f"{exc}") from None
    keys = [k for k in SORT_KEYS if k in table.column_names]
    return table.sort_by([(k, "ascending") for k in keys]) if keys else table


def export_table(folder: Path, fmt: str, out: str) -> TableExport:
    """Write `folder`'s runs table as `fmt` (csv, gzip-compressed for a .gz name, or
    parquet with zstd) to `out` ('-' for stdout)."""
    table = sweep_table(folder)
    with open_output(out, binary=True, gzip_ok=fmt == "csv") as fh:
        if fmt == "csv":
            pacsv.write_csv(table, fh)
        else:
            pq.write_table(table, fh, compression="zstd")
    return TableExport(fmt, output_name(out), table.num_rows, table.num_columns)
