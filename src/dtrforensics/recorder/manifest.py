"""A recording's manifest: what run.json promises about the folder's files.

The recorder lists, when it finalizes a recording, every Parquet file with its
row count, size in bytes and SHA-256 (run.json `tables`). Opening a recording
checks the folder against that list, so a deleted, truncated, swapped or
edited table is an error naming the file instead of a silently wrong answer.
Recordings of format 1.0 list names and row counts only; those are checked.

The same list decides what `--overwrite` may delete: only a folder holding
nothing but a recording's own files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import DataError
from ..trace.parser import file_sha256
from .schema import FILE_TABLES, FORMAT_VERSION, RUN_FILE, RecordingFormatError, parse_version

RECORDING_FILES = frozenset([RUN_FILE, *(t.file for t in FILE_TABLES)])
REQUIRED_FILES = frozenset(t.file for t in FILE_TABLES if not t.optional)

# (path, size, mtime_ns) of files already checked in this process: each is hashed once.
_VERIFIED: set[tuple[str, int, int]] = set()


class RecordingDamagedError(DataError):
    """A recording whose files do not match its manifest."""


def is_manifest(run: object) -> bool:
    """Whether parsed run.json content is a recording manifest: an object with a
    format version and a `tables` list naming every table a recording must have and
    only recording tables (a newer major format is a manifest whatever it lists: the
    reader then refuses it by version). This alone makes a folder a recording: a
    stray run.json (a saved `dtrf run --json`) is an ordinary file."""
    if not isinstance(run, dict) or not isinstance(run.get("format_version"), str):
        return False
    try:
        major, _ = parse_version(run["format_version"])
    except RecordingFormatError:
        return False
    if major > parse_version(FORMAT_VERSION)[0]:
        return True
    tables = run.get("tables")
    if not isinstance(tables, list) or not all(
            isinstance(e, dict) and isinstance(e.get("file"), str) for e in tables):
        return False
    listed = {e["file"] for e in tables}
    return REQUIRED_FILES <= listed <= RECORDING_FILES - {RUN_FILE}


def read_manifest(folder: Path) -> dict | None:
    """run.json of `folder` parsed, if it is a recording manifest; None otherwise
    (no run.json, unreadable, not JSON, or JSON that is not a manifest)."""
    try:
        run = json.loads((Path(folder) / RUN_FILE).read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return None
    return run if is_manifest(run) else None


def file_entry(path: Path) -> dict:
    """The manifest entry of one Parquet file of a recording being finalized."""
    return {"file": path.name, "rows": pq.ParquetFile(path).metadata.num_rows,
            "bytes": path.stat().st_size, "sha256": file_sha256(path)}


def manifest_of(folder: Path) -> list[dict]:
    """Entries for every Parquet file in `folder`, by name."""
    return [file_entry(p) for p in sorted(folder.glob("*.parquet"))]


def _damaged(folder: Path, run: dict, problem: str) -> RecordingDamagedError:
    command = run.get("command_line") if isinstance(run, dict) else None
    again = "; record the run again"
    if isinstance(command, list) and command:
        again += f" (it was recorded by `{' '.join([Path(command[0]).name, *command[1:]])}`)"
    return RecordingDamagedError(f"{folder}: damaged recording: {problem}{again}")


RUN_CHECKSUM = "run_sha256"


def run_checksum(run: dict) -> str:
    """SHA-256 of run.json's content without its own checksum (keys sorted, compact):
    an edited run.json (a budget, an outcome, a summary) no longer matches."""
    body = {k: v for k, v in run.items() if k != RUN_CHECKSUM}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def verify(folder: Path, run: dict) -> None:
    """Raise RecordingDamagedError unless run.json matches its own checksum (format
    1.2 on) and the folder's entries are exactly run.json and the table files it
    lists (any other file or folder is an error naming it), each with its listed row
    count (and size and SHA-256)."""
    if RUN_CHECKSUM in run and run[RUN_CHECKSUM] != run_checksum(run):
        raise _damaged(folder, run, f"{RUN_FILE} was changed after it was written "
                                    "(its content no longer matches its checksum)")
    entries = run.get("tables")
    if not isinstance(entries, list) or not all(
            isinstance(e, dict) and isinstance(e.get("file"), str) for e in entries):
        raise _damaged(folder, run, f"{RUN_FILE} has no list of tables")
    listed = {e["file"]: e for e in entries}
    for name in sorted(REQUIRED_FILES - set(listed)):
        raise _damaged(folder, run, f"{RUN_FILE} does not list {name}")
    for name in sorted(set(listed) - RECORDING_FILES):
        raise _damaged(folder, run, f"{RUN_FILE} lists {name!r}, which is not a recording table")
    present = {e.name for e in os.scandir(folder)} - {RUN_FILE}
    for name in sorted(present - set(listed)):
        raise _damaged(folder, run, f"{name} is not in the manifest ({RUN_FILE}): a "
                                    "recording holds only the files it lists")
    for name, entry in sorted(listed.items()):
        _verify_file(folder, run, folder / name, entry)


def _verify_file(folder: Path, run: dict, path: Path, entry: dict) -> None:
    try:
        st = path.stat()
    except OSError:
        raise _damaged(folder, run, f"{path.name} is missing") from None
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key in _VERIFIED:
        return
    if "bytes" in entry and st.st_size != entry["bytes"]:
        raise _damaged(folder, run, f"{path.name} has {st.st_size:,} bytes, the manifest "
                                    f"says {entry['bytes']:,}")
    if "sha256" in entry and file_sha256(path) != entry["sha256"]:
        raise _damaged(folder, run, f"{path.name} does not match its SHA-256 in the manifest")
    try:
        rows = pq.ParquetFile(path).metadata.num_rows
    except (pa.ArrowException, OSError) as exc:
        raise _damaged(folder, run, f"{path.name} is not a readable Parquet file "
                                    f"({str(exc).splitlines()[0]})") from None
    if rows != entry.get("rows"):
        raise _damaged(folder, run, f"{path.name} has {rows:,} rows, the manifest says "
                                    f"{entry.get('rows')}")
    _VERIFIED.add(key)


def only_recording_files(folder: Path) -> bool:
    """A real folder (not a link) whose entries are all regular files named as a
    recording's files (possibly none)."""
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        return False
    return all(e.name in RECORDING_FILES and e.is_file(follow_symlinks=False)
               for e in os.scandir(folder))


def replaceable(folder: Path) -> bool:
    """Whether `--overwrite` may delete `folder`: an empty folder, or a folder
    (not a link) holding only a recording's own files, run.json among them and
    listing only recording tables. Anything else might be someone's data."""
    folder = Path(folder)
    if not only_recording_files(folder):
        return False
    if not any(folder.iterdir()):
        return True
    return read_manifest(folder) is not None


def discard_damaged(folder: Path) -> None:
    """Delete a damaged recording so it can be recorded again, if the folder holds
    only a recording's files; otherwise leave it (the recorder then refuses it)."""
    if only_recording_files(folder):
        shutil.rmtree(folder)
