"""The sweep folder: parameters in `sweep.json`, runs as a Parquet dataset.

Layout of a sweep directory:

    sweep.json              format, parameters, trace identity, byte range, status
    runs/part-*.parquet     one file per flushed batch of finished runs (RUN_COLUMNS)
    sweep.lock              "PID HOST STARTED" of the sweep writing here, flock'ed
                            by it (removed when it stops; a lock no live process
                            holds is stale: the sweep was killed)

A part file is written under a temporary name and renamed into place, so a
reader (or a resumed sweep) never sees half a file; a killed sweep loses at most
the runs finished since the last flush. Parts carry Parquet page checksums and
the identity of the sweep that wrote them (`SweepStore.identity`: trace
SHA-256, policies and their files' hashes, parameters) and are checked when
read: a part that is unreadable, altered, of another schema or of another
sweep (a stranger copied in) is skipped with a `CorruptPartWarning` by
readers, and moved aside into `runs/corrupt/` by a resumed sweep, which then
reruns its points. A run is
identified by its key `(policy, budget, rep)`: a resumed sweep skips every key
already stored, so no point is ever run twice. `rep` 0 is the point's own run; `rep` k >= 1 is its
k-th confirmation rerun in a fresh process.

Parameters that decide which points exist and what their results are
(`SweepParams`) are stored with the results; resuming with different ones is
refused (`ParamsMismatch`), except the exact walk's run limit and resolution
(any), the range (wider) and `exact` (a sampled sweep made exact): these
extend the sweep, and sweep.json then holds the new ones. How the sweep is executed (jobs, engine, scheduler)
is not a parameter: a sweep started on a pool may be resumed on a cluster.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import hashlib
import json
import os
import socket
import time
import warnings
from dataclasses import asdict, dataclass, fields
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .. import validate
from ..concepts import (  # noqa: F401 (re-exported)
    REGIME_JUMP,
    STATUS_OK,
    STATUS_UNRESOLVED,
    TIMEOUT,
    status_of,
    sweep_status,
)
from ..errors import DataError, OptionError, RefusedError
from ..fsutil import atomic_path, pid_alive, utc_now
from .schema import RUNS

FORMAT_VERSION = 1
PARAMS_FILE = "sweep.json"
RUNS_DIR = "runs"
LOCK_FILE = "sweep.lock"
CORRUPT_DIR = "corrupt"
# Parquet key-value metadata of a part: the identity of the sweep that wrote it.
IDENTITY_KEY, TRACE_KEY = b"dtrf.sweep.identity", b"dtrf.sweep.trace_sha256"

# Parameters a resumed sweep may change: the walk's run limit and resolution (any),
# the range (wider) and exact (from a sampled sweep to an exact one).
EXTENDABLE = ("max_runs", "resolution", "ratio_from", "ratio_to", "exact")


class SweepStoreError(DataError):
    """A sweep directory that cannot be used as asked (message says why)."""


class CorruptPartWarning(UserWarning):
    """A part file of a sweep could not be read and was skipped (or set aside)."""


class ParamsMismatch(SweepStoreError):
    """Resuming a sweep with parameters other than the stored ones."""


# --- what no other writer may touch: the sweep's own files ---------------------------

OWN_ENTRIES = (PARAMS_FILE, LOCK_FILE, RUNS_DIR)   # runs/ with everything under it
_DOC_LIMIT = 1 << 24                               # a sweep.json is a few kilobytes


def is_sweep(folder: str | os.PathLike) -> bool:
    """A sweep folder: its sweep.json is a sweep description (a JSON object with a
    `format`), whatever its format or status; a stray file of that name is not one."""
    doc = Path(folder) / PARAMS_FILE
    try:
        if not doc.is_file() or doc.stat().st_size > _DOC_LIMIT:
            return False
        content = json.loads(doc.read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(content, dict) and "format" in content


def enclosing_sweep(path: str | os.PathLike) -> Path | None:
    """The sweep folder whose own file `path` is (its sweep.json, its sweep.lock, or
    its runs/ folder or anything under it), if any: the one rule for every writer."""
    path = Path(os.path.abspath(path))
    for folder in path.parents:
        if path.relative_to(folder).parts[0] in OWN_ENTRIES and is_sweep(folder):
            return folder
    return None


def refuse_sweep_file(path: str | os.PathLike, what: str = "an output file") -> None:
    """Raise RefusedError if `path` (an output file or folder), as given or with its
    links resolved, is a sweep's own file or lies in its runs/ folder."""
    for candidate in dict.fromkeys((Path(os.path.abspath(path)), Path(path).resolve())):
        folder = enclosing_sweep(candidate)
        if folder is not None:
            inside = len(candidate.relative_to(folder).parts) > 1
            where = (f"in the sweep {folder}'s {RUNS_DIR}/ folder" if inside else
                     f"the sweep {folder}'s own {candidate.name}")
            raise RefusedError(f"{path} is {where} (only that sweep writes its {PARAMS_FILE}, "
                               f"{LOCK_FILE} and {RUNS_DIR}/): choose {what} elsewhere")


def refuse_unsafe_folder(folder: str | os.PathLike, what: str = "a sweep folder", *,
                         own: bool = False) -> None:
    """The one check of a folder a writer fills (a sweep folder, its runs/): RefusedError
    if it is a link (its files would land wherever it points), lies inside a recording
    or (unless it is the writer's `own` sweep file) is a sweep's own file, as given or
    with its links resolved. Run it before anything is created, for a folder given or a
    default one alike."""
    from ..recorder.reader import refuse_inside_recording
    folder = Path(folder)
    if folder.is_symlink():
        raise RefusedError(f"{folder} is a link, not a folder: refusing to write through it "
                           f"(its files would land in {os.path.realpath(folder)}); "
                           f"choose {what}")
    refuse_inside_recording(folder, what)
    if not own:
        refuse_sweep_file(folder, what)


@dataclass(frozen=True)
class SweepParams:
    """Everything that decides which points a sweep runs and what they yield.

    Ratios are budget fractions of the trace's peak memory (budget =
    floor(ratio x peak) bytes); `step`, `min_step` in ratio units;
    `resolution` in bytes; `timeout` in wall-clock seconds per run.
    """

    ratio_from: float
    ratio_to: float
    step: float | None = None
    policies: tuple[str, ...] = ("dtr",)
    interior: int = 0
    seed: int = 0
    refine: bool = False
    min_step: float = 0.0001
    overhead_jump: float = REGIME_JUMP
    exact: bool = False
    max_runs: int = 2000
    resolution: int = 1
    repeats: int = 0
    timeout: float | None = None
    thrash_factor: float = 60.0

    def validate(self) -> None:
        """Raise OptionError (a ValueError) for parameters that cannot describe a sweep."""
        for name, what in (("ratio_from", "--from"), ("ratio_to", "--to"),
                           ("min_step", "--min-step"), ("overhead_jump", "--overhead-jump")):
            validate.finite(getattr(self, name), what)
        if self.step is not None:
            validate.finite(self.step, "--step")
        validate.timeout(self.timeout)
        validate.seed(self.seed)
        validate.thrash_limit(self.thrash_factor)
        if not 0 < self.ratio_from < self.ratio_to:
            raise OptionError(f"need 0 < --from < --to, got {self.ratio_from} and {self.ratio_to}")
        if self.step is None and not self.exact:
            raise OptionError("give --step (a grid) or --exact (the certificate walk), or both")
        width = Decimal(repr(self.ratio_to)) - Decimal(repr(self.ratio_from))
        if self.step is not None and not 0 < Decimal(repr(self.step)) <= width:
            raise OptionError(f"--step must be in (0, to - from], got {self.step}")
        if not self.policies:
            raise OptionError("no policy given")
        if len(set(self.policies)) != len(self.policies):
            raise OptionError(f"a policy is named twice: {','.join(self.policies)}")
        if self.interior < 0 or self.repeats < 0:
            raise OptionError("--interior and --repeats must be >= 0")
        if self.interior and self.step is None:
            raise OptionError("--interior samples grid intervals: give --step")
        if self.refine and self.step is None:
            raise OptionError("--refine refines grid intervals: give --step")
        if not self.min_step > 0 or not self.overhead_jump > 0:
            raise OptionError("--min-step and --overhead-jump must be > 0")
        if self.max_runs < 1 or self.resolution < 1:
            raise OptionError("--max-runs and --resolution must be >= 1")

    def to_json(self) -> dict:
        out = asdict(self)
        out["policies"] = list(self.policies)
        return out

    @classmethod
    def from_json(cls, doc: dict) -> "SweepParams":
        if not isinstance(doc, dict):
            raise SweepStoreError(f"the sweep parameters are not an object: {doc!r}")
        known = {f.name for f in fields(cls)}
        unknown = set(doc) - known
        if unknown:
            raise SweepStoreError(f"unknown sweep parameters {sorted(unknown)}")
        doc = dict(doc)
        doc["policies"] = tuple(doc.get("policies", ("dtr",)) or ())
        try:
            return cls(**doc)
        except TypeError as exc:
            raise SweepStoreError(f"the sweep parameters are incomplete: {exc}") from None

    def differences(self, other: "SweepParams") -> list[str]:
        """Human lines `name: stored X, given Y` for every differing parameter of
        the sweep's identity: the walk's run limit and resolution, the range and
        `exact` are not part of it (`extension_problems` says how they may change)."""
        a, b = self.to_json(), other.to_json()
        return [f"{k}: stored {a[k]!r}, given {b[k]!r}" for k in a
                if a[k] != b[k] and k not in EXTENDABLE]

    def extension_problems(self, other: "SweepParams") -> list[str]:
        """Why `other` cannot resume or extend a sweep of these parameters (none: it can)."""
        out = self.differences(other)
        if self.exact and not other.exact:
            out.append("exact: stored True, given False (an exact sweep stays exact: --exact)")
        if other.ratio_from > self.ratio_from or other.ratio_to < self.ratio_to:
            out.append(f"range: stored {self.ratio_from!r}-{self.ratio_to!r}, given "
                       f"{other.ratio_from!r}-{other.ratio_to!r} (a range may only be widened)")
        return out


def _policy_sources(policies: tuple[str, ...]) -> dict[str, str]:
    """SHA-256 of each policy file among `policies` (built-ins have none); the
    engine, which compiles them, is imported only when there is one."""
    if not any(":" in p for p in policies):
        return {}
    from ..engine.policies import policy_sources
    return policy_sources(policies)


@dataclass(frozen=True)
class TraceInfo:
    """The swept trace: enough to analyse a sweep without reloading it."""

    name: str
    sha256: str
    source: str
    peak: int
    model_compute: int


@dataclass(frozen=True)
class Point:
    """One run to make. `ratio` is the requested ratio (grid and refinement
    points) or budget / peak (points chosen in bytes)."""

    policy: str
    budget: int
    rep: int
    ratio: float
    stage: str

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.policy, self.budget, self.rep)


# --- the runs table -------------------------------------------------------------------

RUN_COLUMNS = RUNS.columns          # declared in sweep/schema.py (docs/sweep-format.md)
RUN_SCHEMA = RUNS.query_schema()
# A part written before runs recorded their CPU time has no `cpu_seconds`: it is
# read (and resumed) with the column null.
_BEFORE_CPU = RUN_SCHEMA.remove(RUN_SCHEMA.get_field_index("cpu_seconds"))

# Columns that describe the execution itself (a rerun must reproduce them exactly).
EXECUTION_COLUMNS = ("outcome", "clock", "remat_compute", "evictions", "remats", "max_depth",
                     "interval_lo", "interval_hi", "victims_sha256", "oom_op_id", "oom_pinned")


def row_from_summary(point: Point, s, cpu_seconds: float | None = None) -> dict:
    """One runs-table row from a `RunSummary` (a timeout certifies nothing) and the
    CPU seconds its replay took."""
    timed_out = s.outcome == TIMEOUT
    lo, hi = s.budget_interval
    oom = s.oom
    return {
        "policy": point.policy, "budget": point.budget, "rep": point.rep, "ratio": point.ratio,
        "stage": point.stage, "status": status_of(s.outcome), "outcome": s.outcome,
        "overhead": None if timed_out else s.overhead, "clock": s.clock,
        "remat_compute": s.remat_compute, "evictions": s.evictions, "remats": s.remats,
        "max_depth": s.max_depth, "peak_memory": s.peak_memory,
        "max_pinned_bytes": s.max_pinned.bytes, "max_pinned_depth": s.max_pinned.depth,
        "interval_lo": None if timed_out else lo, "interval_hi": None if timed_out else hi,
        "victims_sha256": s.victims_sha256,
        "oom_op_id": oom.op_id if oom else None, "oom_request": oom.request if oom else None,
        "oom_pinned": oom.pinned if oom else None, "oom_depth": oom.depth if oom else None,
        "wall_seconds": s.wall_seconds, "cpu_seconds": cpu_seconds, "worker": f"{socket.gethostname()}:{os.getpid()}",
        "finished_at": _dt.datetime.now(_dt.timezone.utc),
    }


# --- the folder -----------------------------------------------------------------------

class SweepStore:
    """A sweep directory. `open_or_create` checks parameters; `append` buffers
    rows and `flush` writes them as one part file."""

    def __init__(self, path: str | os.PathLike, *, flush_rows: int = 64,
                 flush_seconds: float = 2.0):
        self.path = Path(path)
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self._buffer: list[dict] = []
        self._last_flush = time.monotonic()
        self._parts = 0
        self._doc: dict | None = None
        self._lock_fd: int | None = None        # the lock's open file, flock'ed
        self._lock_pid = 0                      # the process that took it

    # parameters ------------------------------------------------------------------
    @property
    def params_path(self) -> Path:
        return self.path / PARAMS_FILE

    @property
    def runs_dir(self) -> Path:
        return self.path / RUNS_DIR

    def exists(self) -> bool:
        return self.params_path.is_file()

    def read_doc(self) -> dict:
        if self._doc is None:
            if not self.exists():
                raise SweepStoreError(f"{self.path} is not a sweep directory (no {PARAMS_FILE})")
            try:
                doc = json.loads(self.params_path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise SweepStoreError(f"cannot read {self.params_path}: {exc}") from None
            if not isinstance(doc, dict):
                raise SweepStoreError(f"{self.params_path} is not a sweep description")
            if doc.get("format") != FORMAT_VERSION:
                raise SweepStoreError(f"{self.params_path}: format {doc.get('format')!r}, "
                                      f"this version reads {FORMAT_VERSION}")
            self._doc = doc
        return self._doc

    @property
    def params(self) -> SweepParams:
        return SweepParams.from_json(self.read_doc()["params"])

    @property
    def trace(self) -> TraceInfo:
        return TraceInfo(**self.read_doc()["trace"])

    @property
    def range_bytes(self) -> tuple[int, int]:
        lo, hi = self.read_doc()["range_bytes"]
        return int(lo), int(hi)

    def open_or_create(self, params: SweepParams, trace: TraceInfo,
                       range_bytes: tuple[int, int]) -> bool:
        """Create the sweep, or check a stored one matches. True when resuming.
        The folder and its runs/ pass `refuse_unsafe_folder` first."""
        refuse_unsafe_folder(self.path)
        refuse_unsafe_folder(self.runs_dir, "another sweep folder", own=True)
        if self.exists():
            stored = self.read_doc()
            if stored["trace"]["sha256"] != trace.sha256:
                raise ParamsMismatch(
                    f"{self.path} holds a sweep of trace {stored['trace']['name']} "
                    f"(sha256 {stored['trace']['sha256'][:12]}...), not of {trace.name} "
                    f"({trace.sha256[:12]}...): use another --out directory")
            diffs = self.params.extension_problems(params) + self.changed_policy_files(params)
            if diffs:
                raise ParamsMismatch(
                    f"{self.path} was swept with other parameters, refusing to resume:\n  "
                    + "\n  ".join(diffs)
                    + "\nrerun with the stored parameters (a larger --max-runs or a wider "
                    "range extends it), or choose another --out directory")
            if params != self.params or list(range_bytes) != list(stored["range_bytes"]):
                stored.update(params=params.to_json(), range_bytes=list(range_bytes))
                self._write_doc()
            return True
        if self.path.exists() and not all(map(self._leftover, self.path.iterdir())):
            raise SweepStoreError(f"{self.path} exists, is not empty and holds no {PARAMS_FILE}")
        now = utc_now()
        self._doc = {"format": FORMAT_VERSION, "params": params.to_json(),
                     "policy_sources": _policy_sources(params.policies),
                     "trace": asdict(trace), "range_bytes": list(range_bytes),
                     "created": now, "updated": now, "status": "running"}
        self._doc["identity"] = self.identity()
        self._write_doc()          # first: a folder with sweep.json is resumable
        self.runs_dir.mkdir(exist_ok=True)
        return False

    def identity(self) -> str:
        """SHA-256 of what makes this sweep's runs its own: the trace's SHA-256, the
        policies and their files' hashes, and every parameter a resume may not
        change. Each part file carries it; a part carrying another is a stranger."""
        doc = self.read_doc() if self._doc is None else self._doc
        params = SweepParams.from_json(doc["params"]).to_json()
        ident = {"trace_sha256": doc["trace"]["sha256"],
                 "policy_sources": doc.get("policy_sources", {}),
                 "params": {k: v for k, v in params.items() if k not in EXTENDABLE}}
        return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()

    def _expected(self) -> tuple[str, str, bool] | None:
        """(identity, trace SHA-256, strict) the parts are checked against; strict:
        the sweep was made by a version whose parts all carry it (an older sweep's
        parts without one are its own)."""
        try:
            doc = self.read_doc()
            return self.identity(), doc["trace"]["sha256"], "identity" in doc
        except (SweepStoreError, KeyError, TypeError):
            return None

    def changed_policy_files(self, params: SweepParams) -> list[str]:
        """Lines naming the policy files whose content differs from the sweep's."""
        stored = self.read_doc().get("policy_sources", {})
        now = _policy_sources(params.policies)
        return [f"policy file of {name}: changed since the sweep started (sha256 "
                f"{stored.get(name, 'none')[:12]}..., now {sha[:12]}...)"
                for name, sha in now.items() if stored.get(name) != sha]

    def _leftover(self, path: Path) -> bool:
        """What a sweep killed before its first sweep.json was written leaves behind."""
        return ((path.name.startswith(f".{PARAMS_FILE}.") and path.name.endswith(".tmp"))
                or (path == self.runs_dir and path.is_dir() and not any(path.iterdir())))

    def set_status(self, status: str, **extra) -> None:
        doc = self.read_doc()
        doc.update(status=status, updated=utc_now(), **extra)
        self._write_doc()

    def _write_doc(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.params_path) as tmp:
            tmp.write_text(json.dumps(self._doc, indent=2) + "\n", encoding="utf-8")

    @property
    def status(self) -> str:
        """The stored status, except that a "running" sweep whose writer is gone
        is "killed" (rerunning the same command resumes it): `concepts.sweep_status`."""
        return sweep_status(self.read_doc().get("status", "?"), self.lock_holder() is not None)

    # lock ------------------------------------------------------------------------
    # How it works (docs/sweep-format.md, "The lock"): the lock file is made whole
    # (pid, host, start) under a temporary name, flock'ed, and hard-linked onto
    # sweep.lock, so a lock that exists is never empty and its holder's flock is on
    # it from the start; the kernel drops the flock when the holder dies, however.
    # A lock no process holds is stale: a taker waits for its flock and removes it
    # only while the name still names that file, so two takers never both win.
    @property
    def lock_path(self) -> Path:
        return self.path / LOCK_FILE

    def lock_holder(self) -> int | None:
        """The pid of the live sweep holding the lock (0: a holder whose lock names
        none), or None (no lock, or a stale one)."""
        try:
            fd = _open_lock(self.lock_path)
        except SweepStoreError:
            return None                       # unreadable: no sweep of ours holds it
        if fd is None:
            return None
        try:
            text = _read_lock(fd)
            return (_lock_pid(text) or 0) if _lock_held(fd, text) else None
        finally:
            os.close(fd)

    def acquire(self) -> None:
        """Take the folder's lock; refuse while a live sweep holds it. A stale lock
        (its sweep was killed) is taken over with a warning."""
        if self._lock_fd is not None and self._lock_pid == os.getpid():
            return
        for _ in range(LOCK_ROUNDS):
            fd = _link_lock(self.path)
            if fd is not None:
                self._lock_fd, self._lock_pid = fd, os.getpid()
                _HELD_LOCKS.add(fd)
                return
            if not self._take_stale():
                return          # this process holds it already (another SweepStore of it)
        raise SweepStoreError(f"could not take the lock {self.lock_path}: other sweeps took "
                              "it meanwhile")

    def _take_stale(self) -> bool:
        """With sweep.lock there: True when it is gone or was stale and removed here
        (take it again), False when this process holds it already; SweepStoreError
        when a live sweep holds it."""
        fd = _open_lock(self.lock_path)
        if fd is None:
            return True
        try:
            text = _read_lock(fd)
            if _lock_held(fd, text):
                pid = _lock_pid(text)
                if not _names(self.lock_path, fd):       # released meanwhile
                    return True
                if pid == os.getpid():
                    return False
                if _dead_here(text):        # a stale lock another taker is removing
                    _wait_flock(fd, fcntl.LOCK_SH, self.lock_path)
                    return True
                raise SweepStoreError(
                    f"another sweep (pid {pid or 'unknown'}) is writing to {self.path}: wait "
                    f"for it or stop it; if no such sweep runs (a pid reused by another "
                    f"program), delete {self.lock_path}")
            # only other takers can hold this file's flock now, each for a moment
            _wait_flock(fd, fcntl.LOCK_EX, self.lock_path)
            if _names(self.lock_path, fd):
                if _lock_pid(text) not in (None, os.getpid()):
                    warnings.warn(f"{self.lock_path} was left by a sweep that is no longer "
                                  "running (killed?): taking it over", stacklevel=3)
                self.lock_path.unlink()
            return True
        finally:
            os.close(fd)

    def release(self) -> None:
        """Give the lock up (only the process that took it does)."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is None or self._lock_pid != os.getpid():
            return
        _HELD_LOCKS.discard(fd)
        try:
            if _names(self.lock_path, fd):
                self.lock_path.unlink()
        except OSError:
            pass
        finally:
            os.close(fd)

    # runs ------------------------------------------------------------------------
    @property
    def corrupt_dir(self) -> Path:
        return self.runs_dir / CORRUPT_DIR

    def part_files(self) -> list[Path]:
        """The readable part files (a corrupt one is skipped with a CorruptPartWarning)."""
        good = []
        for path, problem in self.checked_parts():
            if problem is None:
                good.append(path)
            else:
                warnings.warn(f"skipping {path}: {problem}; resuming the sweep (the same "
                              "command) sets it aside and reruns its points",
                              CorruptPartWarning, stacklevel=2)
        return good

    def checked_parts(self) -> list[tuple[Path, str | None]]:
        """Every part file with what is wrong with it (None: nothing). Only the
        folder's own regular files are read: a link (to a file anywhere) is a problem,
        and a runs/ that is a link is not read at all (warned)."""
        if self.runs_dir.is_symlink():
            warnings.warn(f"skipping {self.runs_dir}: a link, not the sweep's own folder",
                          CorruptPartWarning, stacklevel=3)
            return []
        if not self.runs_dir.is_dir():
            return []
        expected = self._expected()
        return [(p, "a link, not a file of the sweep's own" if p.is_symlink()
                 else _part_problem(p, expected))
                for p in sorted(self.runs_dir.glob("part-*.parquet"))]

    def set_aside_corrupt(self) -> list[Path]:
        """Move unreadable parts into runs/corrupt/ (their points are then missing,
        so a resumed sweep runs them again); the new paths. Call with the lock held."""
        moved = []
        for path, problem in self.checked_parts():
            if problem is not None:
                self.corrupt_dir.mkdir(exist_ok=True)
                dest = self.corrupt_dir / path.name
                os.replace(path, dest)
                warnings.warn(f"set aside {path} ({problem}) as {dest}: its points run again",
                              CorruptPartWarning, stacklevel=2)
                moved.append(dest)
        return moved

    def read_runs(self) -> pa.Table:
        """Every stored run (all readable part files), in RUN_SCHEMA."""
        tables = [_read_part(p) for p in self.part_files()]
        return pa.concat_tables(tables) if tables else RUN_SCHEMA.empty_table()

    def append(self, row: dict) -> None:
        self._buffer.append(row)

    def maybe_flush(self) -> None:
        if len(self._buffer) >= self.flush_rows or (
                self._buffer and time.monotonic() - self._last_flush >= self.flush_seconds):
            self.flush()

    def flush(self) -> Path | None:
        """Write buffered rows as one part file (atomically); None if nothing to write."""
        self._last_flush = time.monotonic()
        if not self._buffer:
            return None
        table = pa.Table.from_pylist(self._buffer, schema=RUN_SCHEMA).replace_schema_metadata(
            {IDENTITY_KEY: self.identity().encode(),
             TRACE_KEY: self.read_doc()["trace"]["sha256"].encode()})
        refuse_unsafe_folder(self.runs_dir, "another sweep folder", own=True)
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self._parts += 1
        name = f"part-{time.time_ns():020d}-{os.getpid()}-{self._parts:05d}.parquet"
        final = self.runs_dir / name
        with atomic_path(final) as tmp:
            pq.write_table(table, tmp, compression="zstd", write_page_checksum=True)
        self._buffer.clear()
        return final


# --- the lock file ---------------------------------------------------------------------

LOCK_ROUNDS = 100       # takers beaten to a freed lock try again, this many times at most
_HOST = socket.gethostname()
# Lock files this process holds open: a forked child closes its copies (the flock
# stays with the parent's), so a lock never outlives its sweep in a child.
_HELD_LOCKS: set[int] = set()


def _close_held_locks() -> None:
    for fd in _HELD_LOCKS:
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD_LOCKS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_held_locks)


def _link_lock(folder: Path) -> int | None:
    """sweep.lock made whole under a temporary name, flock'ed, and linked onto
    its name; its open file, or None when a lock is there already."""
    tmp = folder / f".{LOCK_FILE}.{os.getpid()}.{time.time_ns()}.tmp"
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), 0o644)
    linked = False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{os.getpid()} {_HOST} {utc_now()}\n".encode())
        os.link(tmp, folder / LOCK_FILE)
        linked = True
    except FileExistsError:
        return None
    except OSError as exc:
        raise SweepStoreError(f"cannot lock {folder / LOCK_FILE}: {exc.strerror or exc} (the "
                              "sweep folder's file system must support flock and hard links)"
                              ) from None
    finally:
        if not linked:
            os.close(fd)
        tmp.unlink(missing_ok=True)
    return fd


def _open_lock(lock: Path) -> int | None:
    """The lock file open for reading, or None when there is none."""
    try:
        return os.open(lock, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SweepStoreError(f"cannot read the lock {lock}: {exc.strerror or exc}") from None


def _wait_flock(fd: int, op: int, lock: Path) -> None:
    try:
        fcntl.flock(fd, op)
    except OSError as exc:
        raise SweepStoreError(f"cannot lock {lock}: {exc.strerror or exc} (the sweep folder's "
                              "file system must support flock)") from None


def _read_lock(fd: int) -> str:
    return os.pread(fd, 256, 0).decode(errors="replace")


def _lock_pid(text: str) -> int | None:
    """The pid a lock names ("PID HOST START"; an older version's: "PID")."""
    words = text.split()
    return int(words[0]) if words and words[0].isdigit() else None


def _lock_held(fd: int, text: str) -> bool:
    """Whether a live process holds the lock open as `fd` (saying `text`): it holds
    its flock, or (a lock of a version before flock) the pid it names on this host
    lives and is not this process."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        pass                                  # no flock here: the pid alone tells
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
    pid = _lock_pid(text)
    return pid is not None and pid != os.getpid() and _here(text) and pid_alive(pid)


def _here(text: str) -> bool:
    """Whether a lock was taken on this host (an older version's names none: yes)."""
    words = text.split()
    return len(words) < 2 or words[1] == _HOST


def _dead_here(text: str) -> bool:
    """Whether the process a lock names is gone: it named one, on this host."""
    pid = _lock_pid(text)
    return pid is not None and _here(text) and not pid_alive(pid)


def _names(lock: Path, fd: int) -> bool:
    """Whether `lock` still names the file open as `fd`."""
    try:
        st = os.stat(lock)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _read_part(path: Path) -> pa.Table:
    return pq.read_table(path, schema=RUN_SCHEMA, page_checksum_verification=True)


# (path, size, mtime_ns, expected identity) of parts read whole in this process:
# each is checked once.
_CHECKED_PARTS: set[tuple] = set()


def _part_problem(path: Path, expected: tuple[str, str, bool] | None = None) -> str | None:
    """Why a part file cannot be used (unreadable, bad checksum, other schema, or
    written by another sweep than `expected`: identity, trace SHA-256, strict), or None."""
    try:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns, expected)
        if key in _CHECKED_PARTS:
            return None
        schema = pq.read_schema(path)
        if not any(schema.remove_metadata().equals(s) for s in (RUN_SCHEMA, _BEFORE_CPU)):
            return "not a runs table of this sweep format (other columns or types)"
        if expected is not None:
            stranger = _stranger(schema.metadata or {}, *expected)
            if stranger:
                return stranger
        _read_part(path)
    except (pa.ArrowException, OSError) as exc:
        return f"unreadable ({str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__})"
    _CHECKED_PARTS.add(key)
    return None


def _stranger(metadata: dict, identity: str, trace_sha256: str, strict: bool) -> str | None:
    """Why a part's identity shows another sweep wrote it (None: this one did)."""
    got = metadata.get(IDENTITY_KEY)
    if got is None:
        return "a part of no sweep of this version (it carries no sweep identity)" if strict else None
    if got.decode(errors="replace") == identity:
        return None
    trace = metadata.get(TRACE_KEY, b"").decode(errors="replace")
    if trace and trace != trace_sha256:
        return f"a part of a sweep of another trace (sha256 {trace[:12]}..., not {trace_sha256[:12]}...)"
    return "a part of another sweep of this trace (other policies, policy files or parameters)"
