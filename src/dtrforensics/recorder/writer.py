"""The recorder: an engine observer that streams a run into a recording folder.

Events, decisions and (with scores=all) candidates go to Parquet as they
arrive, one row group per `ROW_GROUP_ROWS` rows, so memory stays bounded
whatever the run's length. The static tables (storages, tensors, ops) are
written at the start, `run.json` at the end.

Nothing half-written ever reads as a recording: everything goes into the
hidden sibling `.<name>.partial-<pid>`, which is renamed to `<name>` only once
every file is closed and synced. A killed process leaves just the partial
folder (readers skip it with a warning; the next recording to the same place
removes it). Replacing a recording (overwrite=True) writes the new one, renames
the old one aside, renames the new one into place, then deletes the old one.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import __version__
from ..engine.hooks import (
    C_DECISION,
    C_POSITION,
    C_STORAGE,
    CANDIDATE_COLUMNS,
    E_BWD,
    E_BYTES,
    E_CLOCK,
    E_COMPUTE,
    E_COST,
    E_DECISION,
    E_DEPTH,
    E_FLAG,
    E_FWD,
    E_KIND,
    E_MEMORY,
    E_OP,
    E_POOL_BYTES,
    E_POOL_SIZE,
    E_REQUEST,
    E_RUNNER,
    E_STALENESS,
    E_STORAGE,
    E_TENSOR,
    EV_ALLOC_CHECK,
    EV_COMPUTE,
    EV_EVICT,
    EV_FREE_DEAD,
    EV_MATERIALIZE,
    EV_OOM,
    EVENT_KINDS,
    F_RUNNER_SCORE,
    F_SCORE,
    FLAG_COLLATERAL,
    FLAG_REMAT,
    CandidateBatch,
    EventBatch,
    Observer,
)
from ..errors import RefusedError
from ..fsutil import exchange, pid_alive, utc_now
from ..jsonsafe import json_safe
from ..trace.program import CONSTANT_OP_NAME, Program
from . import manifest
from .schema import (
    CANDIDATES,
    DECISIONS,
    EVENTS,
    FORMAT_VERSION,
    OLD_MARK,
    OPS,
    PARTIAL_MARK,
    RUN_FILE,
    STORAGES,
    TENSORS,
    WHERE_TYPE,
    Table,
)

ROW_GROUP_ROWS = 1 << 17
SCORES = ("victims", "all")
_KINDS = pa.array(EVENT_KINDS, pa.string())


class RecordingExistsError(RefusedError, ValueError):
    """The target folder exists and may not be replaced."""


def partial_path(final: Path, pid: int | None = None) -> Path:
    return final.with_name(f".{final.name}{PARTIAL_MARK}{os.getpid() if pid is None else pid}")


# --- engine batches -> Arrow ------------------------------------------------------

def events_batch(batch: EventBatch, budget: int, program: Program | None = None) -> pa.RecordBatch:
    """Event rows as the `events` table (a copy: the engine reuses its buffer);
    `program`: the run's, whose where-file (if any) fills module, phase, source."""
    n = len(batch)
    cols = np.ascontiguousarray(batch.ints.T)
    kind = cols[E_KIND]
    flag = cols[E_FLAG]
    is_compute = kind == EV_COMPUTE
    not_compute = ~is_compute
    is_evict = kind == EV_EVICT
    is_check = kind == EV_ALLOC_CHECK
    has_request = is_check | is_evict | (kind == EV_OOM)
    memory = cols[E_MEMORY]
    return EVENTS.record_batch({
        "seq": pa.array(np.arange(batch.first_seq, batch.first_seq + n, dtype=np.int64)),
        "kind": pa.DictionaryArray.from_arrays(pa.array(kind.astype(np.int8)), _KINDS),
        "op_id": pa.array(cols[E_OP]),
        "clock": pa.array(cols[E_CLOCK]),
        "depth": pa.array(cols[E_DEPTH]),
        "tensor_id": pa.array(cols[E_TENSOR]),
        "storage_id": pa.array(cols[E_STORAGE]),
        "bytes": pa.array(cols[E_BYTES], mask=kind == EV_MATERIALIZE),
        "memory": pa.array(memory),
        "pinned_bytes": pa.array(memory - cols[E_POOL_BYTES], mask=~has_request),
        "pool_bytes": pa.array(cols[E_POOL_BYTES]),
        "pool_size": pa.array(cols[E_POOL_SIZE]),
        "budget": pa.array(np.full(n, budget, dtype=np.int64)),
        "request": pa.array(cols[E_REQUEST], mask=~has_request),
        "decision": pa.array(cols[E_DECISION], mask=~is_evict),
        "remat": pa.array((flag & FLAG_REMAT) != 0, mask=not_compute),
        "collateral": pa.array((flag & FLAG_COLLATERAL) != 0, mask=not_compute),
        "must_free": pa.array(flag != 0, mask=~is_check),
        "cost": pa.array(cols[E_COST], mask=not_compute),
        **_event_where(program, kind, cols[E_TENSOR], cols[E_STORAGE]),
    })


_NO_STRINGS = pa.array([], pa.string())


def _event_where(program: Program | None, kind: np.ndarray, tensor: np.ndarray,
                 storage: np.ndarray) -> dict[str, pa.Array]:
    """module, phase, source of each event's op (evict, free_dead: the storage's
    maker; others: `tensor`'s), dictionary-encoded; null without a where-file."""
    where = program.where if program is not None else None
    names = [c.name for c in EVENTS.columns if c.type == WHERE_TYPE]
    if where is None or not len(kind):
        none = pa.array(np.zeros(len(kind), dtype=np.int32), mask=np.ones(len(kind), bool))
        return {name: pa.DictionaryArray.from_arrays(none, _NO_STRINGS) for name in names}
    ids = np.where((kind == EV_EVICT) | (kind == EV_FREE_DEAD), storage, tensor)
    valid = (ids >= 0) & (ids < program.n_tensors)
    ops = program.tensor_op[np.where(valid, ids, 0)]
    strings = pa.array(where.strings, pa.string())
    found = {}
    for name in names:
        index = np.where(valid, getattr(where, name)[ops], -1).astype(np.int32)
        found[name] = pa.DictionaryArray.from_arrays(pa.array(index, mask=index < 0), strings)
    return found


def decisions_batch(batch: EventBatch, budget: int) -> pa.RecordBatch | None:
    """The `evict` rows of a batch as the `decisions` table (None if there are none)."""
    rows = np.flatnonzero(batch.ints[:, E_KIND] == EV_EVICT)
    if not len(rows):
        return None
    cols = np.ascontiguousarray(batch.ints[rows].T)
    floats = batch.floats[rows]
    score = floats[:, F_SCORE].copy()
    runner_score = floats[:, F_RUNNER_SCORE].copy()
    runner = cols[E_RUNNER]
    no_runner = runner < 0
    with np.errstate(invalid="ignore", divide="ignore"):
        margin = runner_score - score
        relative = margin / runner_score
    memory, request = cols[E_MEMORY], cols[E_REQUEST]
    return DECISIONS.record_batch({
        "decision": pa.array(cols[E_DECISION]),
        "seq": pa.array(batch.first_seq + rows.astype(np.int64)),
        "op_id": pa.array(cols[E_OP]),
        "clock": pa.array(cols[E_CLOCK]),
        "depth": pa.array(cols[E_DEPTH]),
        "tensor_id": pa.array(cols[E_TENSOR]),
        "request": pa.array(request),
        "memory": pa.array(memory),
        "pinned_bytes": pa.array(memory - cols[E_POOL_BYTES]),
        "shortfall": pa.array(memory + request - budget),
        "pool_size": pa.array(cols[E_POOL_SIZE]),
        "pool_bytes": pa.array(cols[E_POOL_BYTES]),
        "victim": pa.array(cols[E_STORAGE]),
        "victim_bytes": pa.array(cols[E_BYTES]),
        "score": pa.array(score),
        "compute": pa.array(cols[E_COMPUTE]),
        "fwd_compute": pa.array(cols[E_FWD]),
        "bwd_compute": pa.array(cols[E_BWD]),
        "staleness": pa.array(cols[E_STALENESS]),
        "runner_up": pa.array(runner, mask=no_runner),
        "runner_up_score": pa.array(runner_score, mask=no_runner),
        "margin": pa.array(margin, mask=no_runner | np.isnan(margin)),
        "relative_margin": pa.array(relative, mask=no_runner | np.isnan(relative)
                                    | ~np.isfinite(runner_score) | (runner_score == 0)),
    })


def candidate_ranks(decision: np.ndarray, score: np.ndarray, position: np.ndarray) -> np.ndarray:
    """1-based preference rank within each decision: score ascending, then the later
    pool position first (the scan keeps the last of equal minima)."""
    n = len(decision)
    order = np.lexsort((-position, score, decision))
    sorted_d = decision[order]
    start = np.r_[True, sorted_d[1:] != sorted_d[:-1]] if n else np.zeros(0, bool)
    index = np.arange(n)
    group_start = np.maximum.accumulate(np.where(start, index, 0)) if n else index
    rank = np.empty(n, dtype=np.int64)
    rank[order] = index - group_start + 1
    return rank


def candidates_batch(batch: CandidateBatch, victims: dict[int, int]) -> pa.RecordBatch:
    """Candidate rows with their rank; `victims` (decision -> victim) entries are used up."""
    cols = np.ascontiguousarray(batch.ints.T)
    decision = cols[C_DECISION]
    scores = batch.scores.copy()
    rank = candidate_ranks(decision, scores, cols[C_POSITION])
    unique, inverse = np.unique(decision, return_inverse=True)
    victim = np.array([victims.pop(int(d), -1) for d in unique], dtype=np.int64)
    chosen = cols[C_STORAGE] == victim[inverse]
    values = {name: cols[CANDIDATE_COLUMNS.index(name)] for name in CANDIDATE_COLUMNS}
    values.update(score=scores, rank=rank, chosen=chosen)
    return CANDIDATES.record_batch({name: pa.array(values[name])
                                    for name in CANDIDATES.column_names})


# --- static tables --------------------------------------------------------------------

def _names(program: Program, ids: np.ndarray) -> pa.Array:
    table = np.array(program.tensor_names, dtype=object)
    return pa.array(table[program.tensor_name_id[ids]], pa.string())


def storages_table(program: Program) -> pa.Table:
    ids = program.storage_ids()
    n_ops = max(program.n_ops, 1)
    pairs = np.unique(program.tensor_storage.astype(np.int64) * n_ops + program.tensor_op)
    compute = np.zeros(program.n_tensors, dtype=np.int64)
    np.add.at(compute, pairs // n_ops, program.op_cost[pairs % n_ops].astype(np.int64))
    op = program.tensor_op[ids].astype(np.int64)
    op_names = np.array(program.op_names, dtype=object)[program.op_name_id[op]]
    return STORAGES.arrow_table({
        "storage_id": pa.array(ids.astype(np.int64)),
        "size": pa.array(program.tensor_size[ids].astype(np.int64)),
        "tensor": _names(program, ids),
        "op_id": pa.array(op),
        "paper_op": pa.array(op + 1),
        "op_name": pa.array(op_names, pa.string()),
        "compute": pa.array(compute[ids]),
        "n_tensors": pa.array(np.bincount(program.tensor_storage,
                                          minlength=program.n_tensors)[ids].astype(np.int64)),
        "constant": pa.array(op_names == CONSTANT_OP_NAME),
        **_op_where(program, STORAGES, op),
    })


def _op_where(program: Program, table, ops: np.ndarray) -> dict[str, pa.Array]:
    """`table`'s where-columns (module, phase, source ...) for each of `ops`: the
    strings of the log's where-file, null without one."""
    names = [c.name for c in table.columns if c.name in ("module", "module_chain", "phase",
                                                          "source")]
    if program.where is None:
        return {name: pa.nulls(len(ops), pa.string()) for name in names}
    strings = np.array([*program.where.strings, None], dtype=object)   # -1: None
    return {name: pa.array(strings[getattr(program.where, name.replace("module_", ""))[ops]],
                           pa.string()) for name in names}


def tensors_table(program: Program) -> pa.Table:
    ids = np.arange(program.n_tensors, dtype=np.int64)
    alias = program.tensor_alias.astype(np.int64)
    return TENSORS.arrow_table({
        "tensor_id": pa.array(ids),
        "name": _names(program, ids),
        "op_id": pa.array(program.tensor_op.astype(np.int64)),
        "output_index": pa.array(program.tensor_index.astype(np.int64)),
        "storage_id": pa.array(program.tensor_storage.astype(np.int64)),
        "size": pa.array(program.tensor_size.astype(np.int64)),
        "view_of_arg": pa.array(alias, mask=alias < 0),
    })


def ops_table(program: Program) -> pa.Table:
    n_out = program.op_n_outputs.astype(np.int64)
    first = program.op_first_tensor.astype(np.int64)
    offsets = np.r_[0, np.cumsum(n_out)].astype(np.int32)
    outputs = np.repeat(first, n_out) + (np.arange(offsets[-1]) - np.repeat(offsets[:-1], n_out))
    op_ids = np.arange(program.n_ops, dtype=np.int64)
    return OPS.arrow_table({
        "op_id": pa.array(op_ids),
        "paper_op": pa.array(op_ids + 1),
        "name": pa.array(np.array(program.op_names, dtype=object)[program.op_name_id],
                         pa.string()),
        "cost": pa.array(program.op_cost.astype(np.int64)),
        "n_outputs": pa.array(n_out),
        "total_size": pa.array(program.op_total_size.astype(np.int64)),
        "backward": pa.array(program.op_backward.astype(bool)),
        "line": pa.array(program.op_line.astype(np.int64)),
        "first_tensor": pa.array(first),
        "outputs": pa.ListArray.from_arrays(pa.array(offsets), _names(program, outputs)),
        "args": pa.ListArray.from_arrays(pa.array(program.op_arg_ptr.astype(np.int32)),
                                         pa.array(program.op_args.astype(np.int64))),
        **_op_where(program, OPS, op_ids),
    })


# --- sinks ------------------------------------------------------------------------------

class _Sink:
    """One Parquet file written in row groups of at most `rows_per_group` rows."""

    def __init__(self, path: Path, table: Table, rows_per_group: int):
        self.schema = table.arrow_schema()
        self.writer = pq.ParquetWriter(path, self.schema, compression="zstd",
                                       compression_level=1)
        self.rows_per_group = rows_per_group
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        self.rows = 0

    def add(self, batch: pa.RecordBatch | None) -> None:
        if batch is None or not len(batch):
            return
        self.pending.append(batch)
        self.pending_rows += len(batch)
        self.rows += len(batch)
        if self.pending_rows >= self.rows_per_group:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.writer.write_table(pa.Table.from_batches(self.pending, self.schema),
                                    row_group_size=self.rows_per_group)
            self.pending, self.pending_rows = [], 0

    def close(self) -> None:
        self.flush()
        self.writer.close()


def _write_static(folder: Path, table: Table, data: pa.Table) -> int:
    pq.write_table(data, folder / table.file, compression="zstd", compression_level=1)
    return data.num_rows


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False          # ours from an earlier, aborted recorder: stale
    return pid_alive(pid)


def _remove_stale_partials(final: Path) -> None:
    prefix = f".{final.name}{PARTIAL_MARK}"
    for path in final.parent.glob(f"{prefix}*"):
        pid = path.name[len(prefix):]
        if pid.isdigit() and not _pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- the observer ---------------------------------------------------------------------

class Recorder(Observer):
    """Record a run into the folder `path` (see the module doc).

    scores: "victims" records decisions (victim, runner-up, their scores);
    "all" also every candidate's score at every decision (candidates.parquet).
    """

    def __init__(self, path: str | os.PathLike, *, scores: str = "victims",
                 overwrite: bool = False, rows_per_group: int = ROW_GROUP_ROWS):
        if scores not in SCORES:
            raise ValueError(f"scores must be one of {', '.join(SCORES)}, got {scores!r}")
        self.path = Path(path).absolute()
        self.scores = scores
        self.overwrite = overwrite
        self.wants_candidates = scores == "all"
        self.rows_per_group = rows_per_group
        self.partial: Path | None = None
        self.complete = False
        self._sinks: dict[str, _Sink] = {}
        self._victims: dict[int, int] = {}
        self._frontier = None
        self._ctx = None
        self._started_at = None

    # -- lifecycle

    def check_target(self) -> None:
        """Raise RecordingExistsError if the target folder may not be (re)written, and
        RefusedError if it would lie inside another recording."""
        from .reader import refuse_inside_recording
        refuse_inside_recording(self.path.parent, "a recording folder")
        if self.path.exists() or self.path.is_symlink():
            if not self.overwrite:
                raise RecordingExistsError(
                    f"{self.path} already exists: choose another folder or overwrite it (--overwrite)")
            if not manifest.replaceable(self.path):
                raise RecordingExistsError(
                    f"{self.path} exists and is not a recording (only a folder holding "
                    f"nothing but the files its {RUN_FILE} lists may be replaced): refusing "
                    f"to delete it; choose another folder")

    def on_start(self, run) -> None:
        self.check_target()
        self._ctx = run
        self._started_at = utc_now()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _remove_stale_partials(self.path)
        self.partial = partial_path(self.path)
        try:
            self.partial.mkdir()
        except OSError as exc:
            raise RefusedError(f"cannot record into {self.path.parent}: {exc.strerror}") from None
        try:
            program = run.program
            for table, build in ((STORAGES, storages_table), (TENSORS, tensors_table),
                                 (OPS, ops_table)):
                _write_static(self.partial, table, build(program))
            tables = [EVENTS, DECISIONS] + ([CANDIDATES] if self.wants_candidates else [])
            for table in tables:
                self._sinks[table.name] = _Sink(self.partial / table.file, table,
                                                self.rows_per_group)
        except BaseException:
            self.abort()
            raise

    def on_events(self, batch: EventBatch) -> None:
        budget = self._ctx.budget
        self._sinks["events"].add(events_batch(batch, budget, self._ctx.program))
        decisions = decisions_batch(batch, budget)
        self._sinks["decisions"].add(decisions)
        if self.wants_candidates and decisions is not None:
            self._victims.update(zip(decisions.column("decision").to_pylist(),
                                     decisions.column("victim").to_pylist()))

    def on_candidates(self, batch: CandidateBatch) -> None:
        self._sinks["candidates"].add(candidates_batch(batch, self._victims))

    def on_oom(self, frontier) -> None:
        self._frontier = frontier

    def on_finish(self, summary) -> None:
        try:
            for sink in self._sinks.values():
                sink.close()
            self._sinks = {}
            self._write_run_json(summary, manifest.manifest_of(self.partial))
            for path in self.partial.iterdir():
                _fsync(path)
            self._publish()
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Drop the partial folder (the run failed with an exception, not an outcome)."""
        for sink in self._sinks.values():
            try:
                sink.writer.close()
            except Exception:  # noqa: BLE001 - already failing; the folder goes anyway
                pass
        self._sinks = {}
        if self.partial is not None and not self.complete:
            shutil.rmtree(self.partial, ignore_errors=True)

    # -- details

    def _write_run_json(self, summary, tables: list[dict]) -> None:
        ctx = self._ctx
        program = ctx.program
        doc = {
            "format_version": FORMAT_VERSION,
            "trace": {"name": program.name, "sha256": program.sha256, "source": program.source},
            "budget": ctx.budget,
            "ratio": ctx.ratio,
            "policy": ctx.policy.name,
            "scores": self.scores,
            "interventions": ctx.interventions.to_json(),
            "remat_limit": ctx.remat_limit,
            "timeout": ctx.timeout,
            "tool": {"name": "dtrforensics", "version": __version__},
            "command_line": list(sys.argv),
            "started_at": self._started_at,
            "finished_at": utc_now(),
            "outcome": summary.outcome,
            "summary": summary.to_json(),
            "frontier": self._frontier.to_json() if self._frontier is not None else None,
            "tables": tables,
        }
        doc = json_safe(doc)
        doc[manifest.RUN_CHECKSUM] = manifest.run_checksum(doc)
        text = json.dumps(doc, indent=2, allow_nan=False) + "\n"     # one write: json.dump writes per token
        (self.partial / RUN_FILE).write_text(text, encoding="utf-8")

    def _publish(self) -> None:
        """Rename the finished folder into place. A recording being replaced is
        swapped with it atomically where the system can (the target always holds
        the old or the new recording), else renamed aside first."""
        final = self.path
        if final.exists() or final.is_symlink():
            self.check_target()   # still ours to replace?
            if exchange(self.partial, final):
                self.complete = True
                _fsync(final.parent)
                shutil.rmtree(self.partial, ignore_errors=True)   # now the old recording
                return
            old = final.with_name(f".{final.name}{OLD_MARK}{os.getpid()}")
            os.rename(final, old)
            os.rename(self.partial, final)
            self.complete = True
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(self.partial, final)
            self.complete = True
        _fsync(final.parent)
