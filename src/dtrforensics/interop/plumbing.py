"""What the exporters share: reading a recording's tables row by row, its static
tables as lists, checks that its events nest consistently, and writing an
output file atomically (or to stdout, or gzip-compressed)."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import IO, Iterator

from ..fsutil import replaceable_target, require_parent
from ..recorder.reader import Recording, open_recording, refuse_inside_recording
from ..sweep.store import refuse_sweep_file

BATCH_ROWS = 4096


class ExportError(ValueError):
    """A recording whose events do not describe a consistent run (never expected)."""


def as_recording(recording: Recording | str | os.PathLike) -> Recording:
    return recording if isinstance(recording, Recording) else open_recording(recording)


def iter_rows(rec: Recording, table: str, columns: tuple[str, ...],
              batch_rows: int = BATCH_ROWS) -> Iterator[tuple]:
    """Rows of a table as tuples (in `columns` order), one row group batch at a time."""
    with contextlib.closing(rec.parquet_file(table)) as pf:
        for batch in pf.iter_batches(batch_size=batch_rows, columns=list(columns)):
            yield from zip(*(batch.column(name).to_pylist() for name in columns))


@dataclass
class Static:
    """The static tables, as plain lists indexed by id."""

    op_name: list[str]
    op_cost: list[int]
    op_line: list[int]
    op_backward: list[bool]
    op_first: list[int]
    op_n_outputs: list[int]
    op_outputs: list[list[str]]
    op_args: list[list[int]]
    tensor_name: list[str]
    tensor_op: list[int]
    tensor_storage: list[int]
    tensor_size: list[int]
    storage_tensor: dict[int, str]

    @classmethod
    def load(cls, rec: Recording) -> "Static":
        ops = rec.table("ops").to_pydict()
        tensors = rec.table("tensors").to_pydict()
        storages = rec.table("storages").to_pydict()
        if ops["op_id"] != list(range(len(ops["op_id"]))) or \
                tensors["tensor_id"] != list(range(len(tensors["tensor_id"]))):
            raise ExportError(f"{rec.path}: ops/tensors tables are not indexed by id")
        return cls(ops["name"], ops["cost"], ops["line"], ops["backward"], ops["first_tensor"],
                   ops["n_outputs"], ops["outputs"], ops["args"], tensors["name"],
                   tensors["op_id"], tensors["storage_id"], tensors["size"],
                   dict(zip(storages["storage_id"], storages["tensor"])))

    def outputs_of(self, op: int) -> range:
        first = self.op_first[op]
        return range(first, first + self.op_n_outputs[op])


@contextlib.contextmanager
def open_output(out: str | os.PathLike | IO, binary: bool, gzip_ok: bool = False):
    """A writable stream for `out`: an open file object is used as is; '-' is stdout;
    a path is written to a temporary sibling and renamed into place on success
    (gzip-compressed when it ends in .gz and `gzip_ok`)."""
    if not isinstance(out, (str, os.PathLike)):
        yield out
        return
    if str(out) == "-":
        stream = sys.stdout.buffer if binary else sys.stdout
        yield stream
        stream.flush()
        return
    path = replaceable_target(require_parent(out))
    refuse_inside_recording(path)
    refuse_sweep_file(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)    # as a plain open() would have created it
        with os.fdopen(fd, "wb") as raw:
            zipped = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) \
                if gzip_ok and path.suffix == ".gz" else None
            target = zipped if zipped is not None else raw
            stream = target if binary else io.TextIOWrapper(target, encoding="utf-8",
                                                            newline="\n")
            yield stream
            stream.flush()
            if not binary:
                stream.detach()
            if zipped is not None:
                zipped.close()
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def output_name(out: str | os.PathLike | IO) -> str:
    if isinstance(out, (str, os.PathLike)):
        return "<stdout>" if str(out) == "-" else str(out)
    return getattr(out, "name", "<stream>")


def check_depth(rec: Recording, seq: int, stack_depth: int, depth: int) -> None:
    if stack_depth != depth:
        raise ExportError(f"{rec.path}: event {seq} has depth {depth} but {stack_depth} "
                          "materializations are open")


def pop_frame(rec: Recording, stack: list, seq: int, tensor: int, depth: int):
    """The open materialization a primary `compute` event closes (checked)."""
    if not stack or stack[-1].tensor != tensor or len(stack) != depth:
        raise ExportError(f"{rec.path}: compute event {seq} (tensor {tensor}, depth {depth}) "
                          "does not close the innermost open materialization")
    return stack.pop()
