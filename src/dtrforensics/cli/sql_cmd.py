"""`dtrf sql`: read-only SQL over recordings (`dtrf run --record`) or sweep
folders (`dtrf sweep -o DIR`)."""

from __future__ import annotations

import csv
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import EXIT_INTERRUPTED
from .common import print_json, reporting_replaced
from .errors import CommandError
from .options import at_least, output_file

JsonOption = Annotated[bool, typer.Option("--json", help="Print the rows as a JSON list.")]


def register(app: typer.Typer) -> None:
    app.command("sql")(sql)


@contextmanager
def _warnings_to_stderr():
    """Skipped partial recordings and the like: one `warning:` line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for w in caught:
                print(f"warning: {w.message}", file=sys.stderr)


def _connect(paths: list[str]):
    """Sweep folders open as sweeps (views runs, sweeps), anything else as recordings
    (every shipped query installed); the two do not mix in one connection."""
    from ..sweep.store import SweepStoreError
    from ..sweep.views import connect_sweeps, is_sweep
    sweeps = [p for p in paths if is_sweep(p)]
    if not sweeps:
        from ..analyses.runs import open_together
        return open_together(_recordings(paths), every_query=True, in_memory=False)[0]
    if len(sweeps) != len(paths):
        other = next(p for p in paths if p not in sweeps)
        raise CommandError(f"{sweeps[0]} is a sweep folder and {other} is not: give "
                           "sweep folders or recordings, not both")
    try:
        with _warnings_to_stderr():
            return connect_sweeps(sweeps)
    except (SweepStoreError, ValueError) as exc:
        raise CommandError(str(exc)) from None


def _recordings(paths: list[str]) -> list:
    from ..recorder.reader import find_recordings
    from ..recorder.schema import RecordingFormatError
    try:
        with _warnings_to_stderr():
            recs = find_recordings(paths)
    except RecordingFormatError as exc:
        raise CommandError(str(exc)) from None
    if not recs:
        raise CommandError(f"no recordings found in {', '.join(paths)}")
    return recs


def sql(
    query: Annotated[str, typer.Argument(help="DuckDB SQL. Recordings: the views runs, events, "
                                              "decisions, candidates, storages, tensors, ops "
                                              "and the shipped queries (e.g. failing_allocation). "
                                              "Sweep folders: the views runs (every stored run, "
                                              "with sweep_id) and sweeps (docs/sweep-format.md).")],
    recordings: Annotated[list[str], typer.Argument(metavar="RECORDINGS_OR_SWEEPS...", help="Recording folders, or folders holding recordings; or sweep folders (dtrf sweep -o DIR).")],
    as_csv: Annotated[bool, typer.Option("--csv", help="Write CSV to stdout.")] = False,
    parquet: Annotated[Optional[Path], typer.Option("--parquet", callback=output_file, help="Write the result to this Parquet file.")] = None,
    as_json: JsonOption = False,
    limit: Annotated[int, typer.Option(callback=at_least(0), help="Rows shown in the table (CSV, JSON and Parquet get all).")] = 100,
) -> None:
    """Run SQL over recordings (one `run_id` column tells them apart) or sweep folders (one `sweep_id` column).

    A sweep folder opens as the views `runs` (its runs table,
    docs/sweep-format.md) and `sweeps` (its sweep.json). SQL may read the
    views and the given folders' own Parquet files, nothing else (DuckDB's
    temporary files go to a new private folder, not .tmp of the current
    folder); it cannot write: COPY, EXPORT, ATTACH, INSTALL, LOAD, PRAGMA and
    SET are refused (save a result with --csv, --json or --parquet FILE,
    outside any recording). Values print as they are stored. Ctrl-C stops any
    query (exit 130)."""
    if sum([as_csv, parquet is not None, as_json]) > 1:
        raise CommandError("choose one of --csv, --parquet and --json")
    if not query.strip():
        raise CommandError("the SQL query is empty")
    import duckdb

    from .. import db
    con = _connect(recordings)
    try:
        with db.interruptible(con):
            db.check_read_only(con, query)
            _answer(con, query, as_csv=as_csv, parquet=parquet, as_json=as_json, limit=limit)
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C): the query was stopped", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)  # typer would turn KeyboardInterrupt into exit 1
    except duckdb.Error as exc:
        raise CommandError(f"SQL: {str(exc).strip().splitlines()[0]}") from None
    finally:
        con.close()


def _answer(con, query: str, *, as_csv: bool, parquet: Path | None, as_json: bool,
            limit: int) -> None:
    """Run `query` and hand its rows to the chosen output."""
    if parquet is not None:
        with reporting_replaced(parquet):
            rows = write_parquet_result(con.sql(query), parquet)
        print(f"wrote {rows} rows to {parquet}", file=sys.stderr)
        return
    con.execute(query)
    columns = [d[0] for d in con.description or ()]
    if as_csv:
        _write_csv(con, columns)
    elif as_json:
        print_json([dict(zip(columns, row)) for row in con.fetchall()])
    else:
        _print_table(con, limit)


def write_parquet_result(relation, path: Path) -> int:
    """Stream a query result into a Parquet file (written whole or not at all);
    the number of rows."""
    import pyarrow.parquet as pq

    from ..fsutil import atomic_path
    if relation is None:
        raise CommandError("--parquet needs a query that returns rows")
    reader = relation.to_arrow_reader()
    rows = 0
    with atomic_path(path) as tmp, pq.ParquetWriter(tmp, reader.schema) as writer:
        for batch in reader:
            writer.write_batch(batch)
            rows += batch.num_rows
    return rows


def _write_csv(con, columns: list[str]) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(columns)
    while rows := con.fetchmany(10_000):
        writer.writerows(rows)


def _print_table(con, limit: int) -> None:
    """The first `limit` rows of the pending result of `con` as a rich table."""
    from ..render.console import styled, wide_console
    from ..render.recording import result_table
    columns = [(name, str(type_)) for name, type_, *_ in con.description or ()]
    rows = con.fetchmany(limit + 1)
    if len(rows) > limit:
        con.abort()
    console = wide_console()
    console.print(result_table(columns, rows[:limit]))
    if len(rows) > limit:
        console.print(styled(f"[dim]first {limit} rows shown (--limit N, or --csv for all)[/dim]"))
