"""The where-file: module paths, phases and source lines of a log's ops, beside it.

A log recorded from PyTorch (`dtrf torch record`) keeps the format of the
2020 logs, which the reference simulator reads, and says where each op ran in
a second file beside it, `<log>.where.json`:

    {"format": "dtrforensics.where", "version": 1, "log_sha256": "<hex>",
     "strings": ["forward", "layers.0", ...],
     "ops": {"line": [2, 4, ...], "module": [1, -1, ...], "chain": [...],
             "phase": [...], "source": [...]}}

One entry per op, keyed by the 1-based line of its CONSTANT, CALL or MUTATE
record in the log (an op's `op_line`); each field an index into `strings`, -1
for none. `log_sha256` is the SHA-256 of the log it describes: a where-file
left beside another log (the log edited, or replaced) is ignored. Loading a
log (`trace.cache.load_program`) attaches it to the `Program` as `where`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

import numpy as np

from ..fsutil import atomic_path
from .parser import TraceError
from .program import OpWhere, Program

FORMAT = "dtrforensics.where"
VERSION = 1
SUFFIX = ".where.json"
MAX_BYTES = 1 << 30     # about 30 bytes an op: tens of millions of ops


def where_path(log: str | Path) -> Path:
    """The where-file of a log: beside it, its name plus `.where.json`."""
    log = Path(log)
    return log.with_name(log.name + SUFFIX)


def where_text(log_sha256: str, contexts: list[tuple[int, tuple | None]]) -> str:
    """The where-file's text for (line, (module, chain, phase, source)) per op."""
    strings: dict[str, int] = {}
    columns: dict[str, list] = {"line": [], **{name: [] for name in OpWhere.FIELDS}}
    for line, context in contexts:
        columns["line"].append(line)
        for name, value in zip(OpWhere.FIELDS, context or (None,) * 4):
            columns[name].append(-1 if value is None else strings.setdefault(value, len(strings)))
    return json.dumps({"format": FORMAT, "version": VERSION, "log_sha256": log_sha256,
                       "strings": list(strings), "ops": columns}, separators=(",", ":"))


def write_where(log: str | Path, log_sha256: str, contexts: list) -> Path:
    path = where_path(log)
    with atomic_path(path) as tmp:
        tmp.write_text(where_text(log_sha256, contexts) + "\n", encoding="utf-8")
    return path


def read_where(program: Program, log: str | Path) -> OpWhere | None:
    """The where-file of `log` for `program`, or None: none there, or one made for
    another log. A where-file that is not one is an error naming it."""
    path = where_path(log)
    try:
        text = _read_regular(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TraceError(str(path), None, f"cannot read the where-file: {exc}") from None
    try:
        data = json.loads(text)
        if data.get("format") != FORMAT or data.get("version") != VERSION:
            raise ValueError(f"not a {FORMAT} file of version {VERSION}")
        if data.get("log_sha256") != program.sha256:
            return None
        return _lowered(program, data)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        raise TraceError(str(path), None, f"malformed where-file ({exc}); delete it to read "
                         "the log without module paths") from None


def _read_regular(path: Path) -> str:
    """The text of `path` if it is a regular file of at most `MAX_BYTES`, checked on
    the opened file (a FIFO is opened without blocking, a link to /dev/zero is
    not read without end)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > MAX_BYTES:
            raise ValueError(f"{info.st_size:,} bytes, more than {MAX_BYTES:,}")
        return fh.read(MAX_BYTES + 1).decode("utf-8")


def _lowered(program: Program, data: dict) -> OpWhere:
    if not isinstance(data["strings"], list) or not isinstance(data["ops"], dict) or \
            not all(isinstance(data["ops"].get(k), list) for k in ("line", *OpWhere.FIELDS)):
        raise ValueError("'strings' and each column of 'ops' must be lists")
    strings = tuple(str(s) for s in data["strings"])
    ops = data["ops"]
    lines = [int(x) for x in ops["line"]]
    row_of = {line: row for row, line in enumerate(lines)}
    rows = np.array([row_of.get(int(line), -1) for line in program.op_line.tolist()],
                    dtype=np.int64)
    fields = {}
    for name in OpWhere.FIELDS:
        values = np.array([int(x) for x in ops[name]], dtype=np.int32)
        if len(values) != len(lines) or (len(values) and (values.min() < -1
                                                          or values.max() >= len(strings))):
            raise ValueError(f"column {name!r} does not match the lines and strings")
        picked = np.full(len(rows), -1, dtype=np.int32)
        found = rows >= 0
        picked[found] = values[rows[found]]
        picked.setflags(write=False)
        fields[name] = picked
    return OpWhere(strings=strings, **fields)


def with_where(program: Program, log: str | Path) -> Program:
    """`program` with its where-file attached, when the log has one."""
    where = read_where(program, log)
    return program if where is None else dataclasses.replace(program, where=where)
