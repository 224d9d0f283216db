"""Recordings as one DuckDB database: several runs compared in one query.

`connect(recordings)` returns an in-memory DuckDB connection with one view per
table of the recording format (`events`, `decisions`, `candidates`,
`storages`, `tensors`, `ops`) plus `runs` (one row per recording, from
run.json). Every view has a leading `run_id` column: the recording folder's
name. Views read the Parquet files in place (nothing is loaded up front),
unless `load_below` says the files are small enough to read into memory at
once: the views are then tables of the same rows. Every query over a view
binds its Parquet files anew, and over the few kilobytes of a small
recording that binding, not the reading, is most of a query's time. A
table a recording lacks (candidates without scores=all) contributes no rows,
and every view has all its declared columns and types even when empty.

Connections are read-only by default: once the views exist, DuckDB itself is
told to touch no file but the recordings' own Parquet files
(`allowed_paths`, `enable_external_access = false`, then
`lock_configuration = true`), so SQL can read the views and those files and
nothing else -- no other file, no network, no extension, no ATTACH. Turning
external access off lets DuckDB keep its temporary directory, which defaults
to `.tmp` of the current folder (anyone's files); it is first moved into a
private, new folder of the system's temporary directory (removed with the
connection), and the lock-down checks that DuckDB allows no other folder. The
recordings' files could still be written by a COPY naming them:
`check_read_only(con, sql)` refuses every statement that is not a query or an
in-memory definition, and `dtrf sql` runs it on every statement it is given.

Shipped questions live in `dtrforensics/queries/<area>/<name>.sql` (the
repository's top-level `queries/` links there): `load_query("oom/failing_allocation")`
returns the text, `install_query(con, ...)` runs it, `install_queries(con)`
runs them all. `QueriesOnDemand(con)` installs each one the first time SQL run
through it names one of its views or macros (installing all costs about 0.3 s
per connection, more than most commands' own queries).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import signal
import socket
import tempfile
import threading
import weakref
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path

import duckdb
import pyarrow as pa

from .errors import RefusedError
from .recorder.reader import Recording, find_recordings
from .recorder.schema import FILE_TABLES, RUNS, Table

QUERY_PACKAGE = "dtrforensics"
QUERY_DIR = "queries"


def quote(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def ident(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def folder_ids(paths: list[Path], what: str = "recordings") -> list[str]:
    """Folder names; a name shared by several folders gets its parent's name prefixed."""
    names = [p.name for p in paths]
    ids = [name if names.count(name) == 1 else f"{p.parent.name}/{name}"
           for p, name in zip(paths, names)]
    if len(set(ids)) != len(ids):
        raise ValueError(f"two {what} share an id: " + ", ".join(map(str, paths)))
    return ids


def _run_ids(recordings: list[Recording]) -> list[str]:
    return folder_ids([r.path for r in recordings])


def _lookup(doc, dotted: str):
    """A dotted path into a JSON document; a number indexes a list (`range_bytes.0`)."""
    value = doc
    for key in dotted.split("."):
        if isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        elif isinstance(value, dict):
            value = value.get(key)
        else:
            return None
    return value


def folder_table(table: Table, ids: list[str], folders: list[Path], docs: list[dict]) -> pa.Table:
    """One row per folder, columns as `table` declares them: its first column the
    folder's id, `path` the folder, every other column read from the folder's
    JSON document at the column's `source`."""
    id_column = table.columns[0].name
    columns = {}
    for column in table.columns:
        if column.name == id_column:
            values = ids
        elif column.name == "path":
            values = [str(f.resolve()) for f in folders]
        else:
            values = [_lookup(doc, column.source) for doc in docs]
        columns[column.name] = pa.array(values, column.type)
    return pa.table(columns, schema=table.query_schema())


def runs_table(recordings: list[Recording], run_ids: list[str] | None = None) -> pa.Table:
    """The `runs` view's rows: one per recording, columns as declared in schema.RUNS."""
    return folder_table(RUNS, run_ids or _run_ids(recordings), [r.path for r in recordings],
                        [r.run for r in recordings])


def connect(recordings: Iterable[Recording | str | os.PathLike] | str | os.PathLike = (),
            *, database: str = ":memory:", read_only: bool = True,
            load_below: int = 0) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection over the given recordings (Recording objects, recording
    folders, or folders holding recordings; partial folders are skipped with a warning).
    read_only: the connection may read the recordings' files and no other (see above).
    load_below: where the recordings' Parquet files total at most this many bytes,
    their rows are read into memory once (tables, not views; see above)."""
    if isinstance(recordings, (str, os.PathLike, Recording)):
        recordings = [recordings]
    recs: list[Recording] = []
    for item in recordings:
        recs.extend([item] if isinstance(item, Recording) else find_recordings([item]))
    run_ids = _run_ids(recs)
    con = duckdb.connect(database)
    con.register("_dtrf_runs", runs_table(recs, run_ids))
    con.execute("CREATE OR REPLACE VIEW runs AS SELECT * FROM _dtrf_runs")
    parts = {table.name: [(run_id, [str(path.absolute())])
                          for rec, run_id in zip(recs, run_ids)
                          if (path := rec.table_path(table.name)) is not None]
             for table in FILE_TABLES}
    files = [f for table_parts in parts.values() for _, (f,) in table_parts]
    load = load_below > 0 and sum(os.path.getsize(f) for f in files) <= load_below
    for table in FILE_TABLES:
        union_view(con, table.name, table.query_schema(), "run_id", parts[table.name],
                   load=load)
    if read_only:
        lock_down(con, files)
    return con


def lock_down(con: duckdb.DuckDBPyConnection, files: list[str]) -> None:
    """From here on `con` may read `files` and nothing else (see above)."""
    spill = _private_spill_folder(con)
    con.execute(f"SET temp_directory = {quote(spill)}")
    con.execute(f"SET allowed_paths = [{', '.join(map(quote, files))}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    allowed = con.sql("SELECT current_setting('allowed_directories')").fetchall()[0][0]
    if any(os.path.normpath(folder) != spill for folder in allowed or ()):
        con.close()
        raise RuntimeError(f"DuckDB allows reading {allowed} after the lock-down; "
                           f"only {spill} was expected")


def _private_spill_folder(con: duckdb.DuckDBPyConnection) -> str:
    """A folder for DuckDB's temporary files inside a new folder only this user can
    enter (DuckDB makes it when it spills and removes it when it closes); the
    private folder goes when `con` does, removed by the process that made it."""
    private = tempfile.mkdtemp(prefix="dtrf-sql-")
    weakref.finalize(con, _remove_private, private, os.getpid())
    return os.path.join(private, "spill")


def _remove_private(folder: str, owner: int) -> None:
    if os.getpid() == owner:        # not a forked child's copy of the connection
        shutil.rmtree(folder, ignore_errors=True)


def union_view(con: duckdb.DuckDBPyConnection, name: str, schema: pa.Schema, id_column: str,
               parts: list[tuple[str, list[str]]], *, load: bool = False) -> None:
    """A view `name`: a leading `id_column`, then `schema`'s columns, over the
    Parquet files of each (id, files) part; typed and empty when there are none.
    load: a table of those rows instead, read now."""
    empty = f"_dtrf_empty_{name}"
    con.register(empty, schema.empty_table())
    cols = ", ".join(ident(c) for c in (id_column, *schema.names))
    selects = [f"SELECT CAST(NULL AS VARCHAR) AS {ident(id_column)}, * FROM {empty}"]
    selects += [f"SELECT {quote(part_id)} AS {ident(id_column)}, * "
                f"FROM read_parquet([{', '.join(map(quote, files))}], union_by_name = true)"
                for part_id, files in parts if files]
    union = "\nUNION ALL BY NAME\n".join(selects)
    kind = "TABLE" if load else "VIEW"
    con.execute(f"CREATE OR REPLACE {kind} {name} AS SELECT {cols} FROM ({union})")


# Statements that only read, or define things in the in-memory database.
READ_ONLY_STATEMENTS = frozenset({"SELECT", "EXPLAIN", "CREATE", "DROP", "INSERT", "UPDATE",
                                  "DELETE", "MULTI"})


class SqlRefusedError(RefusedError):
    """A statement that could write a file or change the connection's guards."""


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str) -> None:
    """Raise SqlRefusedError for any statement of `sql` (parsed by DuckDB) that is
    not a query or an in-memory definition: COPY, EXPORT, ATTACH, INSTALL, LOAD,
    PRAGMA, SET and the like."""
    for statement in con.extract_statements(sql):
        kind = statement.type.name
        if kind not in READ_ONLY_STATEMENTS:
            raise SqlRefusedError(
                f"{kind} statements are refused: dtrf sql only reads recordings (save a "
                f"result with --csv, --json or --parquet FILE)")


@contextlib.contextmanager
def interruptible(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Ctrl-C (SIGINT) stops what `con` runs inside the block, which then raises
    KeyboardInterrupt -- also a query that never hands control back to Python (a
    recursive CTE without end), whose Python signal handler would never run: Python's
    C handler writes the signal's number to a wakeup socket, and a thread waiting on
    it calls `con.interrupt()`. Outside the main thread, a plain block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    hit = threading.Event()

    def on_sigint(signum, frame):
        hit.set()
        con.interrupt()
        raise KeyboardInterrupt

    reader, writer = socket.socketpair()
    writer.setblocking(False)
    watcher = threading.Thread(target=_watch, args=(reader, con, hit), daemon=True,
                               name="dtrf-sql-interrupt")
    watcher.start()
    old_handler = signal.signal(signal.SIGINT, on_sigint)
    old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    try:
        yield
    except (duckdb.Error, RuntimeError):
        if hit.is_set():
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.set_wakeup_fd(old_fd)
        signal.signal(signal.SIGINT, old_handler)
        writer.close()                      # the watcher reads the end and returns
        watcher.join()
        reader.close()


def _watch(reader: socket.socket, con: duckdb.DuckDBPyConnection, hit: threading.Event) -> None:
    while data := reader.recv(64):
        if signal.SIGINT in data:
            hit.set()
            con.interrupt()


# --- shipped queries -------------------------------------------------------------------

def _query_root():
    return resources.files(QUERY_PACKAGE) / QUERY_DIR


def list_queries() -> list[str]:
    """Names (`area/name`) of every shipped query, sorted."""
    names = []
    root = _query_root()
    for area in root.iterdir():
        if area.is_dir():
            names += [f"{area.name}/{f.name[:-4]}" for f in area.iterdir()
                      if f.name.endswith(".sql")]
    return sorted(names)


def load_query(name: str) -> str:
    """The SQL text of `queries/<area>/<name>.sql` (`area/name` or `area.name`)."""
    area, _, stem = name.replace(".", "/").partition("/")
    if not stem or "/" in stem:
        raise ValueError(f"a query is named AREA/NAME, got {name!r}")
    path = _query_root() / area / f"{stem}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"no query {name!r}; known: {', '.join(list_queries())}")
    return path.read_text(encoding="utf-8")


def install_query(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Run a query file: its views and macros become available on `con`."""
    con.execute(load_query(name))


def install_queries(con: duckdb.DuckDBPyConnection) -> list[str]:
    names = list_queries()
    for name in names:
        install_query(con, name)
    return names


_CREATES = re.compile(r"CREATE\s+OR\s+REPLACE\s+(?:TEMP\s+)?(?:MACRO|VIEW)\s+(\w+)", re.I)
_WORDS = re.compile(r"\w+")


@functools.cache
def _query_needs() -> tuple[dict[str, str], dict[str, frozenset[str]]]:
    """(view or macro name, lower case -> the query creating it; query -> the
    queries installing it needs, itself included: those whose objects its text
    names, and theirs)."""
    texts = {name: load_query(name) for name in list_queries()}
    creator = {obj.lower(): name for name, text in texts.items() for obj in _CREATES.findall(text)}
    direct = {name: {creator[w] for w in set(_WORDS.findall(text.lower())) if w in creator}
              for name, text in texts.items()}
    needs = {}
    for name in texts:
        seen, todo = {name}, [name]
        while todo:
            for other in direct[todo.pop()] - seen:
                seen.add(other)
                todo.append(other)
        needs[name] = frozenset(seen)
    return creator, needs


def queries_named(sql: str) -> set[str]:
    """The shipped queries that running `sql` needs installed: those creating a
    view or macro it names, and what they read."""
    creator, needs = _query_needs()
    found: set[str] = set()
    for word in set(_WORDS.findall(sql.lower())):
        if word in creator:
            found |= needs[creator[word]]
    return found


class QueriesOnDemand:
    """A DuckDB connection whose `execute` and `sql` first install the shipped
    queries the SQL names (`queries_named`), each once, in `list_queries` order,
    the order `install_queries` uses; everything else is the connection's own."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self.connection = con
        self.installed: set[str] = set()

    def install_named(self, sql: str) -> None:
        missing = queries_named(sql) - self.installed
        for name in sorted(missing):
            install_query(self.connection, name)
        self.installed |= missing

    def execute(self, sql: str, *args, **kwargs):
        self.install_named(sql)
        return self.connection.execute(sql, *args, **kwargs)

    def sql(self, sql: str, *args, **kwargs):
        self.install_named(sql)
        return self.connection.sql(sql, *args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.connection, name)

    def __enter__(self) -> QueriesOnDemand:
        return self

    def __exit__(self, *exc) -> None:
        self.connection.close()
