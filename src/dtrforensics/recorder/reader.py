"""Reading recordings: `open_recording` for one folder, `find_recordings` for many.

Opening reads run.json, checks the format version and checks the folder
against the manifest in run.json (`manifest.verify`: every table present, with
its row count, size and SHA-256); tables are read as Arrow on first use. Folders left by a killed run (`.<name>.partial-<pid>`)
or an interrupted replacement (`.<name>.old-<pid>`) are never recordings:
`find_recordings` skips them with a `PartialRecordingWarning`.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import DataError, RefusedError
from . import manifest
from .schema import (
    META_FORMAT,
    OLD_MARK,
    PARTIAL_MARK,
    RUN_FILE,
    TABLES,
    check_version,
)


class NotARecordingError(DataError, FileNotFoundError):
    """A path that is not a complete recording (missing, partial or without run.json)."""


class PartialRecordingWarning(UserWarning):
    """An unfinished recording folder was skipped."""


def is_partial(path: Path) -> bool:
    name = Path(path).name
    return name.startswith(".") and (PARTIAL_MARK in name or OLD_MARK in name)


def is_recording(path: Path) -> bool:
    """A finished recording: a folder whose run.json is a recording manifest
    (`manifest.is_manifest`), damaged or not; nothing else is one."""
    path = Path(path)
    return path.is_dir() and not is_partial(path) and manifest.read_manifest(path) is not None


@dataclass
class Recording:
    """One recording folder: `run` is run.json parsed; `table(name)` reads a table."""

    path: Path
    run: dict
    _tables: dict = field(default_factory=dict, repr=False)

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def summary(self) -> dict:
        return self.run["summary"]

    @property
    def outcome(self) -> str:
        return self.run["outcome"]

    def table_path(self, name: str) -> Path | None:
        """The Parquet file of a table, or None if this recording does not have it."""
        spec = TABLES[name]
        if spec.file is None:
            raise ValueError(f"table {name!r} is derived, not a file")
        path = self.path / spec.file
        return path if path.is_file() else None

    def has(self, name: str) -> bool:
        return self.table_path(name) is not None

    def table(self, name: str) -> pa.Table:
        """The whole table as Arrow (cached); an optional table that is absent is empty."""
        if name not in self._tables:
            path = self.table_path(name)
            if path is None:
                if not TABLES[name].optional:
                    raise NotARecordingError(f"{self.path}: {TABLES[name].file} is missing")
                self._tables[name] = TABLES[name].arrow_schema().empty_table()
            else:
                with pq.ParquetFile(path) as fh:
                    version = (fh.schema_arrow.metadata or {}).get(META_FORMAT)
                    if version is not None:
                        check_version(version.decode(), str(path))
                    self._tables[name] = fh.read()
        return self._tables[name]

    def parquet_file(self, name: str) -> pq.ParquetFile:
        """For streaming a large table row group by row group."""
        path = self.table_path(name)
        if path is None:
            raise NotARecordingError(f"{self.path} has no {TABLES[name].file}")
        return pq.ParquetFile(path)


def open_recording(path: str | os.PathLike, *, verify: bool = True) -> Recording:
    """Open one recording folder, checked against its manifest (`manifest.verify`);
    raises NotARecordingError, RecordingFormatError or RecordingDamagedError."""
    path = Path(path)
    if is_partial(path):
        raise NotARecordingError(
            f"{path} is an unfinished recording (its run was killed or is still running)")
    run_file = path / RUN_FILE
    if not run_file.is_file():
        raise NotARecordingError(f"{path} is not a recording (no {RUN_FILE})")
    run = manifest.read_manifest(path)
    if run is None:
        raise NotARecordingError(f"{path} is not a recording: its {RUN_FILE} is not a "
                                 f"recording manifest ({_why_not_manifest(run_file)})")
    check_version(run["format_version"], str(path))
    if verify:
        manifest.verify(path, run)
    return Recording(path, run)


def _why_not_manifest(run_file: Path) -> str:
    try:
        run = json.loads(run_file.read_bytes().decode("utf-8"))
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    except ValueError:
        return "not UTF-8 JSON text"
    if not isinstance(run, dict) or "format_version" not in run:
        return "no format_version; a saved `dtrf run --json` is not a recording"
    return "no valid list of the recording's tables"


def enclosing_recording(path: str | os.PathLike) -> Path | None:
    """The recording (finished, damaged or unfinished) that `path` is or lies inside,
    if any: the one rule of "inside a recording" for every command that writes."""
    path = Path(path).absolute()
    for folder in (path, *path.parents):
        if is_partial(folder) or is_recording(folder):
            return folder
    return None


def refuse_inside_recording(path: str | os.PathLike, what: str = "an output file") -> None:
    """Raise RefusedError if `path` (an output file or folder) is a recording or
    lies inside one, links resolved."""
    folder = enclosing_recording(Path(path).resolve())
    if folder is not None:
        where = "is the recording" if Path(path).resolve() == folder else "is inside the recording"
        raise RefusedError(f"{path} {where} {folder}: a recording is never "
                           f"written to; choose {what} outside it")


def find_recordings(paths: Iterable[str | os.PathLike] | str | os.PathLike) -> list[Recording]:
    """Every recording under `paths`: each is a recording folder or a folder searched
    recursively (a recording's own folder is not searched further). Unfinished
    folders are skipped with a PartialRecordingWarning; a path that does not exist
    raises NotARecordingError. Order: as given, then sorted by path."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found: list[Recording] = []
    for given in paths:
        path = Path(given)
        if not path.exists():
            raise NotARecordingError(f"no such recording or folder: {path}")
        for folder in _walk(path):
            found.append(open_recording(folder))
    return found


def _walk(path: Path):
    if is_partial(path):
        why = ("a replaced recording whose deletion was interrupted" if OLD_MARK in path.name
               else "its run was killed or is still running")
        warnings.warn(f"skipping unfinished recording {path} ({why})", PartialRecordingWarning,
                      stacklevel=3)
        return
    if is_recording(path):
        yield path
        return
    if not path.is_dir():
        return
    for child in sorted(p for p in path.iterdir() if p.is_dir()):
        if child.name.startswith(".") and not is_partial(child):
            continue
        yield from _walk(child)
