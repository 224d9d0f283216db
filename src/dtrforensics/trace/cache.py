"""A content-addressed cache of compiled programs, stored as Parquet.

Parsing a large public log takes a few tenths of a second; reading its compiled
`Program` back from Parquet takes a few milliseconds. An entry is keyed by the
log's SHA-256 and by `FORMAT_VERSION`, so an edited log never hits a stale entry
and a new layout (or a change to the lowering) never reads an old one: bump
`FORMAT_VERSION` whenever the parser's output or the layout below changes.

Layout: one Parquet file per program with a single row; every `Program` array
is a list column of its own numpy dtype (int8/int32/int64/bool survive as such)
and the two string tables are `list<string>` columns, so ids into them stay
valid. The schema metadata holds the format version, the SHA-256 and the name
and path of the log the entry was built from.

Entries are written to a temporary file and renamed into place, so a reader
never sees half a file. An entry that cannot be read or fails the consistency
checks is ignored, and replaced by a freshly parsed one. A cache directory that
cannot be written only costs speed: the parsed program is returned anyway.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..fsutil import atomic_path
from . import parser as _parser
from .parser import file_sha256, trace_name_from_path
from .program import Program

FORMAT_VERSION = 1

# Outcomes of a load, as reported by `load_program_with_status`.
CACHE_HIT = "hit"            # served from the cache
CACHE_MISS = "miss"          # parsed, entry written
CACHE_REBUILT = "rebuilt"    # the entry was unreadable or inconsistent: parsed, rewritten
CACHE_OFF = "off"            # caching disabled, or the entry could not be written

_META_FORMAT = b"dtrforensics.format"
_META_SHA = b"dtrforensics.sha256"
_META_NAME = b"dtrforensics.name"
_META_SOURCE = b"dtrforensics.source"
_STRING_FIELDS = ("op_names", "tensor_names")


def cache_dir() -> Path:
    """`$DTRF_CACHE`, else `$XDG_CACHE_HOME/dtrforensics`, else `~/.cache/dtrforensics`."""
    explicit = os.environ.get("DTRF_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "dtrforensics"


def cache_path(sha256: str) -> Path:
    """Where the entry for a log with this SHA-256 lives (whether or not it exists)."""
    return cache_dir() / f"program-v{FORMAT_VERSION}-{sha256}.parquet"


# --- Program <-> Arrow ---------------------------------------------------------

def _list_column(values: pa.Array) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array([0, len(values)], type=pa.int32()), values)


def program_to_table(program: Program) -> pa.Table:
    """The program as a one-row table: one list column per array and string table."""
    columns: dict[str, pa.Array] = {}
    for name in Program.ARRAY_FIELDS:
        array = np.ascontiguousarray(getattr(program, name))
        columns[name] = _list_column(pa.array(array, type=pa.from_numpy_dtype(array.dtype)))
    for name in _STRING_FIELDS:
        columns[name] = _list_column(pa.array(list(getattr(program, name)), type=pa.string()))
    metadata = {
        _META_FORMAT: str(FORMAT_VERSION).encode(),
        _META_SHA: program.sha256.encode(),
        _META_NAME: program.name.encode(),
        _META_SOURCE: program.source.encode("utf-8", "surrogateescape"),
    }
    return pa.table(columns).replace_schema_metadata(metadata)


class CacheEntryError(ValueError):
    """A cache entry that does not hold a consistent program."""


def _values(table: pa.Table, name: str) -> pa.Array:
    try:
        column = table.column(name)
    except KeyError:
        raise CacheEntryError(f"missing column {name!r}") from None
    if column.num_chunks != 1 or len(column) != 1:
        raise CacheEntryError(f"column {name!r} is not a single row")
    lists = column.chunk(0)
    if not isinstance(lists, pa.ListArray):
        raise CacheEntryError(f"column {name!r} is not a list column")
    # Slice the child by hand: ListArray.flatten would import pyarrow.compute (~0.1 s).
    start, stop = lists.offsets[0].as_py(), lists.offsets[1].as_py()
    return lists.values.slice(start, stop - start)


def program_from_table(table: pa.Table, *, name: str | None = None,
                       source: str | None = None) -> Program:
    """Inverse of `program_to_table`; `name` and `source` override the stored ones.

    Raises `CacheEntryError` if the table is not a consistent program of this
    format version.
    """
    meta = table.schema.metadata or {}
    if meta.get(_META_FORMAT) != str(FORMAT_VERSION).encode():
        raise CacheEntryError(
            f"format version {meta.get(_META_FORMAT)!r}, expected {FORMAT_VERSION}")
    fields: dict = {}
    for field_name in Program.ARRAY_FIELDS:
        fields[field_name] = _values(table, field_name).to_numpy(zero_copy_only=False)
    for field_name in _STRING_FIELDS:
        fields[field_name] = tuple(_values(table, field_name).to_pylist())
    _check_consistent(fields)
    return Program(
        name=name if name is not None else meta.get(_META_NAME, b"").decode(),
        sha256=meta.get(_META_SHA, b"").decode(),
        source=source if source is not None
        else meta.get(_META_SOURCE, b"").decode("utf-8", "surrogateescape"),
        **fields,
    )


def _check_consistent(f: dict) -> None:
    """Cheap structural checks: lengths agree and every id points inside its table."""
    n_ops, n_tensors = len(f["op_cost"]), len(f["tensor_op"])
    same = {
        n_ops: ("op_cost", "op_total_size", "op_first_tensor", "op_n_outputs",
                "op_backward", "op_line", "op_name_id"),
        n_tensors: ("tensor_op", "tensor_index", "tensor_size", "tensor_alias",
                    "tensor_storage", "tensor_name_id"),
        len(f["sched_kind"]): ("sched_arg",),
    }
    for length, names in same.items():
        for field_name in names:
            if len(f[field_name]) != length:
                raise CacheEntryError(
                    f"{field_name} has {len(f[field_name])} rows, expected {length}")
    ptr = f["op_arg_ptr"]
    if len(ptr) != n_ops + 1 or ptr[0] != 0 or ptr[-1] != len(f["op_args"]):
        raise CacheEntryError("op_arg_ptr does not index op_args")
    for ids, table in (("op_name_id", "op_names"), ("tensor_name_id", "tensor_names")):
        if len(f[ids]) and (f[ids].min() < 0 or f[ids].max() >= len(f[table])):
            raise CacheEntryError(f"{ids} points outside {table}")
    for ids in ("op_args", "tensor_storage"):
        if len(f[ids]) and (f[ids].min() < 0 or f[ids].max() >= n_tensors):
            raise CacheEntryError(f"{ids} points outside the tensors")


# --- Reading and writing entries -----------------------------------------------

def read_entry(path: Path, sha256: str, *, name: str | None = None,
               source: str | None = None) -> Program:
    """Read one entry; raises (any exception) if it is missing, unreadable or wrong."""
    # ParquetFile.read skips the datasets layer of read_table: several times faster here.
    with pq.ParquetFile(path) as fh:
        table = fh.read()
    program = program_from_table(table, name=name, source=source)
    if program.sha256 != sha256:
        raise CacheEntryError(f"entry is for SHA-256 {program.sha256}, expected {sha256}")
    return program


def write_entry(program: Program, path: Path) -> None:
    """Write atomically: a temporary file in the same directory, then a rename."""
    with atomic_path(path, make_parents=True) as tmp:
        pq.write_table(program_to_table(program), tmp, compression="zstd")


def load_program_with_status(path: str | Path, name: str | None = None, *,
                             cache: bool = True) -> tuple[Program, str]:
    """`load_program`, also saying how it was served (one of the CACHE_* values);
    the log's where-file, when it has one, is attached (`trace/where.py`)."""
    return load_program_with_where(path, name, cache=cache)


def _load_program_with_status(path: str | Path, name: str | None = None, *,
                              cache: bool = True) -> tuple[Program, str]:
    path = Path(path)
    name = name or trace_name_from_path(path)
    if not cache:
        return _parser.parse_file(path, name), CACHE_OFF
    try:
        sha256 = file_sha256(path)
    except OSError:
        # Let the parser report the unreadable file in its usual words.
        return _parser.parse_file(path, name), CACHE_OFF
    entry = cache_path(sha256)
    status = CACHE_MISS
    if entry.exists():
        try:
            return read_entry(entry, sha256, name=name, source=str(path)), CACHE_HIT
        except Exception:  # noqa: BLE001 - any unreadable entry is simply rebuilt
            status = CACHE_REBUILT
    program = _parser.parse_file(path, name)
    if program.sha256 != sha256:
        # The file changed between hashing and parsing: do not file it under either.
        return program, CACHE_OFF
    try:
        write_entry(program, entry)
    except Exception:  # noqa: BLE001 - read-only or full cache dir, unencodable names
        status = CACHE_OFF
    return program, status


def load_program(path: str | Path, name: str | None = None, *, cache: bool = True) -> Program:
    """Parse a log, or read its compiled program from the cache (see module doc)."""
    return load_program_with_status(path, name, cache=cache)[0]


def load_program_with_where(path: str | Path, name: str | None = None, *,
                            cache: bool = True) -> tuple[Program, str]:
    """`load_program_with_status`, with the log's where-file attached when it has
    one (`trace/where.py`: module paths, phases and source lines of its ops)."""
    from .where import with_where
    program, status = _load_program_with_status(path, name, cache=cache)
    return with_where(program, path), status

