"""`dtrf sql` and `dtrf show`: query and look at recordings (`dtrf run --record`)."""

from __future__ import annotations

import csv
import json
import math
import os
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import numpy as np
import typer
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..recorder.reader import Recording, find_recordings, open_recording
from ..recorder.schema import RecordingFormatError
from .errors import CommandError
from .format import fmt_bytes, fmt_exact_bytes
from .options import at_least

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
SPARK = " ▁▂▃▄▅▆▇█"
LABEL_WIDTH = 10
SCALE_WIDTH = 24


def register(app: typer.Typer) -> None:
    app.command("sql")(sql)
    app.command("show")(show)


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


def wide_console() -> Console:
    """In a pipe (no terminal, no COLUMNS), do not wrap at 80 columns."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=max(console.width, 200))
    return console


def _recordings(paths: list[str]) -> list[Recording]:
    try:
        with _warnings_to_stderr():
            recs = find_recordings(paths)
    except RecordingFormatError as exc:
        raise CommandError(str(exc)) from None
    if not recs:
        raise CommandError(f"no recordings found in {', '.join(paths)}")
    return recs


# --- dtrf sql ------------------------------------------------------------------------

def sql(
    query: Annotated[str, typer.Argument(help="DuckDB SQL over the views runs, events, "
                                              "decisions, candidates, storages, tensors, ops "
                                              "and the shipped queries (e.g. failing_allocation).")],
    recordings: Annotated[list[str], typer.Argument(help="Recording folders, or folders holding recordings.")],
    as_csv: Annotated[bool, typer.Option("--csv", help="Write CSV to stdout.")] = False,
    parquet: Annotated[Optional[Path], typer.Option("--parquet", help="Write the result to this Parquet file.")] = None,
    as_json: JsonOption = False,
    limit: Annotated[int, typer.Option(callback=at_least(0), help="Rows shown in the table (CSV, JSON and Parquet get all).")] = 100,
) -> None:
    """Run SQL over one or several recordings (one `run_id` column tells them apart).

    SQL may read the views and the given recordings' own Parquet files, nothing
    else; it cannot write: COPY, EXPORT, ATTACH, INSTALL, LOAD, PRAGMA and SET are
    refused (save a result with --csv, --json or --parquet FILE, outside any recording)."""
    if sum([as_csv, parquet is not None, as_json]) > 1:
        raise CommandError("choose one of --csv, --parquet and --json")
    if not query.strip():
        raise CommandError("the SQL query is empty")
    import duckdb  # loaded here, not at import: every `dtrf` command imports this module

    from .. import db
    from ..recorder.reader import refuse_inside_recording
    if parquet is not None:
        refuse_inside_recording(parquet)
    con = db.connect(_recordings(recordings))
    db.install_queries(con)
    try:
        db.check_read_only(con, query)
        if parquet is not None:
            rows = write_parquet_result(con.sql(query), parquet)
            print(f"wrote {rows} rows to {parquet}", file=sys.stderr)
            return
        con.execute(query)
        columns = [d[0] for d in con.description or ()]
        if as_csv:
            _write_csv(con, columns)
        elif as_json:
            rows = [{c: _json_value(v) for c, v in zip(columns, row)} for row in con.fetchall()]
            print(json.dumps(rows, indent=2, default=str))
        else:
            _print_table(con, limit)
    except duckdb.Error as exc:
        raise CommandError(f"SQL: {str(exc).strip().splitlines()[0]}") from None


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


def _json_value(value: Any):
    """Valid JSON: an infinite score (a storage accessed this instant) becomes "inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _write_csv(con, columns: list[str]) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    writer.writerow(columns)
    while rows := con.fetchmany(10_000):
        writer.writerows(rows)


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _print_table(con, limit: int) -> None:
    """The first `limit` rows of the pending result of `con` as a rich table."""
    numeric_types = ("BIGINT", "INTEGER", "DOUBLE", "HUGEINT", "SMALLINT", "TINYINT", "FLOAT",
                     "UBIGINT", "UINTEGER")
    description = con.description or ()
    rows = con.fetchmany(limit + 1)
    if len(rows) > limit:
        con.abort()
    table = Table(show_lines=False)
    for name, type_, *_ in description:
        is_num = str(type_) in numeric_types or str(type_).startswith("DECIMAL")
        table.add_column(name, justify="right" if is_num else "left", overflow="fold")
    for row in rows[:limit]:
        table.add_row(*map(_cell, row))
    console = wide_console()
    console.print(table)
    if len(rows) > limit:
        console.print(f"[dim]first {limit} rows shown (--limit N, or --csv for all)[/dim]")


# --- dtrf show -----------------------------------------------------------------------

def show(
    recording: Annotated[str, typer.Argument(help="A recording folder.")],
    as_json: JsonOption = False,
    width: Annotated[Optional[int], typer.Option(help="Timeline width in columns (default: the terminal's).")] = None,
) -> None:
    """A recording's run summary and a per-op timeline of memory, pinned bytes and depth."""
    try:
        rec = open_recording(recording)
    except RecordingFormatError as exc:
        raise CommandError(str(exc)) from None
    timeline = op_timeline(rec)
    if as_json:
        out = {"recording": str(rec.path), "run": rec.run,
               "timeline": {k: v.tolist() for k, v in timeline.items()}}
        print(json.dumps(out, indent=2, default=str))
        return
    console = wide_console()
    cols = (width or console.width) - LABEL_WIDTH - SCALE_WIDTH - 10
    console.print(summary_panel(rec, _op_names(rec)))
    console.print(timeline_panel(rec, timeline, max(cols, 10)))


def op_timeline(rec: Recording) -> dict[str, np.ndarray]:
    """The shipped `run/op_timeline` query for one recording, as numpy columns."""
    from .. import db
    con = db.connect([rec])
    db.install_query(con, "run/op_timeline")
    data = con.sql("SELECT op_id, memory_max, coalesce(pinned_max, 0) AS pinned_max, "
                   "depth_max, evictions, remats FROM op_timeline ORDER BY op_id").fetchnumpy()
    return {k: np.asarray(v) for k, v in data.items()}


def _op_names(rec: Recording) -> list[str]:
    return rec.table("ops").column("name").to_pylist()


def _op(names: list[str], op_id: int | None) -> str:
    if op_id is None or op_id < 0:
        return "-"
    name = names[op_id] if op_id < len(names) else "?"
    return f"op {op_id} (paper #{op_id + 1}) {name}"


def summary_panel(rec: Recording, names: list[str]) -> Panel:
    run, s = rec.run, rec.summary
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    budget = fmt_exact_bytes(run["budget"])
    if run.get("ratio") is not None:
        budget += f"  ratio {run['ratio']:g}"
    rows = [
        ("outcome", f"[bold]{run['outcome']}[/bold]" + (f"  ({s['error']})" if s.get("error") else "")),
        ("trace", f"{run['trace']['name']}  sha256 {run['trace']['sha256'][:16]}…"),
        ("policy / scores", f"{run['policy']} / {run['scores']}"),
        ("budget", budget),
        ("overhead", f"{s['overhead']:.4f}x" if s.get("overhead") else "-"),
        ("clock / remat compute", f"{s['clock']:,} / {s['remat_compute']:,} ns"),
        ("evictions", f"{s['evictions']:,} pressure, {s['dead_frees']:,} dead"),
        ("rematerializations", f"{s['remats']:,} (+{s['collateral_remats']:,} collateral)"),
        ("max nesting depth", str(s["max_depth"])),
    ]
    mp = s.get("max_pinned")
    if mp and mp.get("op_id", -1) >= 0:
        rows.append(("peak pinned at a check", f"{fmt_exact_bytes(mp['bytes'])} at depth "
                                                f"{mp['depth']}, {_op(names, mp['op_id'])}"))
    oom = s.get("oom")
    if oom:
        rows += [("OOM at", f"{_op(names, oom['op_id'])}, depth {oom['depth']}"),
                 ("failing allocation", f"{oom['tensor']} ({fmt_exact_bytes(oom['request'])}), "
                                        f"chain rooted at {oom['root_tensor']}"),
                 ("pinned at failure", fmt_exact_bytes(oom["pinned"]))]
    iv = run.get("interventions") or {}
    if iv.get("retain") or iv.get("forbid") or iv.get("force"):
        rows.append(("interventions", json.dumps(iv)))
    rows.append(("recorded", f"{run['started_at']} → {run['finished_at']}"))
    for key, value in rows:
        grid.add_row(key, value)
    return Panel(grid, title=f"{rec.run_id}", expand=False)


def bucket_max(values: np.ndarray, width: int) -> np.ndarray:
    """Max of each of `width` consecutive slices (one slice per value if it fits)."""
    values = np.asarray(values)
    if len(values) <= width:
        return values
    edges = np.linspace(0, len(values), width + 1).astype(np.int64)[:-1]
    return np.maximum.reduceat(values, edges)


def sparkline(values: np.ndarray, top: float) -> str:
    """One character per value, 8 levels from 0 to `top`; any positive value shows."""
    if top <= 0:
        return " " * len(values)
    levels = np.ceil(np.asarray(values, dtype=np.float64) / top * 8).clip(0, 8).astype(int)
    return "".join(SPARK[i] for i in levels)


def timeline_panel(rec: Recording, t: dict[str, np.ndarray], width: int) -> Panel:
    """Sparklines of the per-op series, `width` columns wide, with an op axis."""
    n = len(t["op_id"])
    if n == 0:
        return Panel("no ops ran", title="timeline", expand=False)
    budget = rec.run["budget"]
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", width=LABEL_WIDTH, no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column(style="dim", no_wrap=True)
    for label, values, top, scale in (
        ("memory", t["memory_max"], budget, f"0..budget {fmt_bytes(budget)}"),
        ("pinned", t["pinned_max"], budget, f"0..budget {fmt_bytes(budget)}"),
        ("depth", t["depth_max"], int(t["depth_max"].max()), f"0..{int(t['depth_max'].max())}"),
        ("evictions", t["evictions"], int(t["evictions"].max()), f"0..{int(t['evictions'].max())}"),
        ("remats", t["remats"], int(t["remats"].max()), f"0..{int(t['remats'].max())}"),
    ):
        grid.add_row(label, Text(sparkline(bucket_max(values, width), top), style="cyan"), scale)
    cols = min(n, width)
    first, last = f"op {int(t['op_id'][0])}", f"op {int(t['op_id'][-1])}"
    grid.add_row("", Text(first.ljust(max(cols - len(last), len(first) + 1)) + last, style="dim"), "")
    oom = rec.summary.get("oom")
    if oom:
        where = min(int(np.searchsorted(t["op_id"], oom["op_id"])) * cols // n, cols - 1)
        tag = f"▲ OOM at op {oom['op_id']}"
        if where + len(tag) > cols:
            tag = f"OOM at op {oom['op_id']} ▲"
            where = max(where - len(tag) + 1, 0)
        grid.add_row("", Text(" " * where + tag, style="red"), "")
    per = "op" if n <= width else f"{n / cols:.1f} ops (max of each)"
    return Panel(grid, title=f"timeline: {n:,} ops, one column per {per}", expand=False)
