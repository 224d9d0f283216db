"""Parse DTR prototype logs (one JSON object per line) into a `Program`.

The lowering follows docs/semantics.md §2 exactly: constants become
zero-cost ops followed by a pin, mutations become new ops whose results are
named `<old>$`, COPY/COPY_FROM/RELEASE become reference-count commands, PIN
(ours, §2.1) a pin, and the names still referenced at the end are pinned in
first-insertion order.
Every malformed input raises `TraceError` naming the file, the line and the
problem.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..errors import DataError
from .program import (
    CMD_COMPUTE,
    CMD_GET,
    CMD_PIN,
    CMD_RELEASE,
    CONSTANT_OP_NAME,
    Program,
)


class TraceError(DataError, ValueError):
    """A trace file that cannot be parsed: where and what."""

    def __init__(self, path: str, line: int | None, problem: str):
        self.path, self.line, self.problem = path, line, problem
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {problem}")


def stream_sha256(fh: BinaryIO) -> str:
    """SHA-256 (hex) of everything left in a binary stream, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    for chunk in iter(lambda: fh.read(1 << 20), b""):
        digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: str | Path) -> str:
    with open(path, "rb") as fh:
        return stream_sha256(fh)


def trace_name_from_path(path: str | Path) -> str:
    """Short name of a log: the part of the file name before the first '-'."""
    stem = Path(path).name
    if stem.endswith(".log"):
        stem = stem[:-4]
    return stem.split("-")[0] or stem


class _Builder:
    """Accumulates ops, tensors and commands while walking the log."""

    def __init__(self, path: str):
        self.path = path
        self.op_cost: list[int] = []
        self.op_total_size: list[int] = []
        self.op_first_tensor: list[int] = []
        self.op_n_outputs: list[int] = []
        self.op_arg_ptr: list[int] = [0]
        self.op_args: list[int] = []
        self.op_backward: list[bool] = []
        self.op_line: list[int] = []
        self.op_name_id: list[int] = []
        self.op_names: dict[str, int] = {}
        self.tensor_op: list[int] = []
        self.tensor_index: list[int] = []
        self.tensor_size: list[int] = []
        self.tensor_alias: list[int] = []
        self.tensor_storage: list[int] = []
        self.tensor_name_id: list[int] = []
        self.tensor_names: dict[str, int] = {}
        self.tensor_name_list: list[str] = []
        self.sched_kind: list[int] = []
        self.sched_arg: list[int] = []
        self.sums = {"MEMORY": 0, "TIME": 0}      # over the whole trace, kept inside int64

    def _intern(self, table: dict[str, int], text: str) -> int:
        ident = table.get(text)
        if ident is None:
            ident = table[text] = len(table)
        return ident

    def add_op(self, line: int, name: str, cost: int, args: list[int],
               sizes: list[int], aliases: list[int], result_names: list[str],
               backward: bool) -> list[int]:
        op_id = len(self.op_cost)
        first = len(self.tensor_op)
        total = 0
        for index, (size, alias) in enumerate(zip(sizes, aliases)):
            tid = first + index
            if alias >= 0:
                storage = self.tensor_storage[args[alias]]
                size = 0
            else:
                storage = tid
            total += size
            self.tensor_op.append(op_id)
            self.tensor_index.append(index)
            self.tensor_size.append(size)
            self.tensor_alias.append(alias)
            self.tensor_storage.append(storage)
            self.tensor_name_id.append(self._intern(self.tensor_names, result_names[index]))
            self.tensor_name_list.append(result_names[index])
        self._add_to_sums(line, total, cost)
        self.op_cost.append(cost)
        self.op_total_size.append(total)
        self.op_first_tensor.append(first)
        self.op_n_outputs.append(len(sizes))
        self.op_args.extend(args)
        self.op_arg_ptr.append(len(self.op_args))
        self.op_backward.append(backward)
        self.op_line.append(line)
        self.op_name_id.append(self._intern(self.op_names, name))
        self.command(CMD_COMPUTE, op_id)
        return list(range(first, first + len(sizes)))

    def _add_to_sums(self, line: int, size: int, cost: int) -> None:
        """Every sum of sizes (live bytes, a peak) and of costs (model compute) the
        engine forms is at most the trace's total: it must fit int64."""
        for what, amount in (("MEMORY", size), ("TIME", cost)):
            self.sums[what] += amount
            if self.sums[what] > INT64_MAX:
                raise TraceError(self.path, line, f"the trace's {what} values add up to more "
                                 f"than {INT64_MAX:,} by this line: the engine's int64 sums "
                                 "would overflow")

    def command(self, kind: int, arg: int) -> None:
        self.sched_kind.append(kind)
        self.sched_arg.append(arg)

    def storage_size_of(self, tensor_id: int) -> int:
        return self.tensor_size[self.tensor_storage[tensor_id]]

    def tensor_name(self, tensor_id: int) -> str:
        return self.tensor_name_list[tensor_id]

    def program(self, name: str, sha256: str) -> Program:
        i64 = lambda xs: np.asarray(xs, dtype=np.int64)  # noqa: E731
        return Program(
            name=name, sha256=sha256, source=self.path,
            op_cost=i64(self.op_cost), op_total_size=i64(self.op_total_size),
            op_first_tensor=i64(self.op_first_tensor),
            op_n_outputs=np.asarray(self.op_n_outputs, dtype=np.int32),
            op_arg_ptr=i64(self.op_arg_ptr), op_args=i64(self.op_args),
            op_backward=np.asarray(self.op_backward, dtype=np.bool_),
            op_line=i64(self.op_line),
            op_name_id=np.asarray(self.op_name_id, dtype=np.int32),
            op_names=tuple(self.op_names),
            tensor_op=i64(self.tensor_op),
            tensor_index=np.asarray(self.tensor_index, dtype=np.int32),
            tensor_size=i64(self.tensor_size),
            tensor_alias=np.asarray(self.tensor_alias, dtype=np.int32),
            tensor_storage=i64(self.tensor_storage),
            tensor_name_id=np.asarray(self.tensor_name_id, dtype=np.int32),
            tensor_names=tuple(self.tensor_names),
            sched_kind=np.asarray(self.sched_kind, dtype=np.int8),
            sched_arg=i64(self.sched_arg),
        )


def _field(record: dict, key: str, path: str, line: int):
    try:
        return record[key]
    except KeyError:
        raise TraceError(path, line, f"{record.get('INSTRUCTION')} is missing field {key!r}") from None


INT64_MAX = (1 << 63) - 1     # sizes, costs and their sums over a trace are int64 in the engine


def _nonneg_int(value, what: str, path: str, line: int) -> int:
    if isinstance(value, bool):
        raise TraceError(path, line, f"{what} is not an integer: {value!r}")
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        raise TraceError(path, line, f"{what} is not an integer: {value!r}") from None
    if isinstance(value, float) and number != value:
        raise TraceError(path, line, f"{what} is not an integer: {value!r}")
    if number < 0:
        raise TraceError(path, line, f"negative {what}: {number}")
    if number > INT64_MAX:
        raise TraceError(path, line, f"{what} {number} is outside the int64 range the engine "
                                     f"counts in (at most {INT64_MAX:,})")
    return number


def _name_list(value, what: str, path: str, line: int) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise TraceError(path, line, f"{what} must be a list of names, got {value!r}")
    return value


def parse_lines(lines, path: str = "<memory>", name: str | None = None,
                sha256: str = "") -> Program:
    """Parse an iterable of text lines (a whole log) into a Program."""
    records: list[tuple[int, dict]] = []
    started = False
    pending_start: list[tuple[int, dict]] = []
    last_line_no = 0
    for line_no, raw in enumerate(lines, start=1):
        last_line_no = line_no
        text = raw.strip()
        if not text:
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            truncated = not raw.endswith("\n")
            hint = " (the file looks truncated)" if truncated else ""
            raise TraceError(path, line_no, f"invalid JSON: {exc.msg}{hint}") from None
        if not isinstance(record, dict) or "INSTRUCTION" not in record:
            raise TraceError(path, line_no, "not an instruction object (no 'INSTRUCTION' key)")
        if not started:
            if record.get("INSTRUCTION") == "ANNOTATE" and record.get("ANNOTATION") == "START":
                started = True
            else:
                pending_start.append((line_no, record))
            continue
        records.append((line_no, record))
    if not started:
        # No START marker: the whole file is the program.
        records = pending_start
    return _lower(records, path, name or trace_name_from_path(path), sha256, last_line_no)


def _lower(records: list[tuple[int, dict]], path: str, name: str, sha256: str,
           last_line_no: int) -> Program:
    """Lower the program's records to ops and commands (semantics.md §2.2)."""
    lowering = _Lowering(records, path, last_line_no)
    while lowering.pos < len(records):
        line_no, rec = records[lowering.pos]
        lowering.pos += 1
        instr = rec["INSTRUCTION"]
        step = _STEPS.get(instr) if isinstance(instr, str) else None
        if step is not None:
            step(lowering, line_no, rec)
        elif instr == "ANNOTATE":
            if rec.get("ANNOTATION") == "BACKWARD":
                lowering.in_backward = True
        elif instr in ("MEMORY", "ALIAS"):
            raise TraceError(path, line_no,
                             f"{instr} for {rec.get('NAME')!r} does not follow a CONSTANT or CALL")
        else:
            raise TraceError(path, line_no, f"unknown instruction {instr!r}")
    b = lowering.b
    if not b.op_cost:
        raise TraceError(path, None, "the trace contains no operators")
    for tid in lowering.name_map.values():
        if lowering.refs[tid] > 0:
            b.command(CMD_PIN, tid)
    return b.program(name, sha256)


class _Lowering:
    """The state of one lowering: the names in scope, their reference counts,
    whether the backward pass began, and the next record."""

    def __init__(self, records: list[tuple[int, dict]], path: str, last_line_no: int):
        self.b = _Builder(path)
        self.records, self.path, self.last_line_no = records, path, last_line_no
        self.name_map: dict[str, int] = {}
        self.refs: dict[int, int] = {}
        self.in_backward = False
        self.pos = 0

    def take(self, kind: str, for_name: str, after: str, after_line: int) -> tuple[int, dict]:
        """The next record, which must be the `kind` line for `for_name`."""
        path = self.path
        if self.pos >= len(self.records):
            raise TraceError(path, self.last_line_no,
                             f"truncated file: {after} on line {after_line} is not followed by "
                             f"its {kind} line for {for_name!r}")
        line_no, record = self.records[self.pos]
        self.pos += 1
        if record["INSTRUCTION"] != kind:
            raise TraceError(path, line_no,
                             f"expected {kind} for {for_name!r} after {after} on line "
                             f"{after_line}, got {record['INSTRUCTION']}")
        got = record.get("NAME")
        if got != for_name:
            raise TraceError(path, line_no,
                             f"{kind} names {got!r} but {after} on line {after_line} "
                             f"needs {for_name!r}")
        return line_no, record

    def lookup(self, tensor_name: str, line_no: int, role: str) -> int:
        try:
            return self.name_map[tensor_name]
        except KeyError:
            raise TraceError(self.path, line_no,
                             f"{role} {tensor_name!r} was never defined") from None

    def field(self, rec: dict, key: str, line_no: int):
        return _field(rec, key, self.path, line_no)

    def name(self, rec: dict, key: str, line_no: int) -> str:
        """Field `key` of the record, which must be a tensor name (a string)."""
        value = self.field(rec, key, line_no)
        if not isinstance(value, str):
            raise TraceError(self.path, line_no, f"{key} must be a name, got {value!r}")
        return value

    def constant(self, line_no: int, rec: dict) -> None:
        path = self.path
        cname = self.name(rec, "NAME", line_no)
        if cname in self.name_map:
            raise TraceError(path, line_no, f"result name {cname!r} is already defined")
        mline, mem = self.take("MEMORY", cname, "CONSTANT", line_no)
        size = _nonneg_int(_field(mem, "MEMORY", path, mline), "MEMORY", path, mline)
        (tid,) = self.b.add_op(line_no, CONSTANT_OP_NAME, 0, [], [size], [-1], [cname],
                               self.in_backward)
        self.b.command(CMD_PIN, tid)
        self.name_map[cname] = tid
        self.refs[tid] = 1

    def call(self, line_no: int, rec: dict) -> None:
        path = self.path
        results = _name_list(self.field(rec, "RESULT", line_no), "RESULT", path, line_no)
        op_name = self.field(rec, "NAME", line_no)
        if not isinstance(op_name, str):
            raise TraceError(path, line_no, f"NAME must be a string, got {op_name!r}")
        arg_names = _name_list(self.field(rec, "ARGS", line_no), "ARGS", path, line_no)
        cost = _nonneg_int(self.field(rec, "TIME", line_no), "TIME", path, line_no)
        self.in_backward = self.in_backward or "backward" in op_name
        sizes, aliases = [], []
        for result in results:
            mline, mem = self.take("MEMORY", result, "CALL", line_no)
            sizes.append(_nonneg_int(_field(mem, "MEMORY", path, mline), "MEMORY", path, mline))
            aliases.append(self._alias(result, line_no, len(arg_names)))
        args = [self.lookup(a, line_no, "argument") for a in arg_names]
        for result in results:
            if result in self.name_map:
                raise TraceError(path, line_no, f"result name {result!r} is already defined")
        if len(set(results)) != len(results):
            raise TraceError(path, line_no, "RESULT lists the same name twice")
        tids = self.b.add_op(line_no, op_name, cost, args, sizes, aliases, results,
                             self.in_backward)
        for result, tid in zip(results, tids):
            self.name_map[result] = tid
            self.refs[tid] = 1

    def _alias(self, result: str, line_no: int, n_args: int) -> int:
        """The ALIAS line after a result's MEMORY line: an argument index or -1."""
        path = self.path
        aline, ali = self.take("ALIAS", result, "CALL", line_no)
        value = _field(ali, "ALIAS", path, aline)
        try:
            alias = int(value)
        except (TypeError, ValueError, OverflowError):
            raise TraceError(path, aline, f"ALIAS is not an integer: {value!r}") from None
        if isinstance(value, bool) or (isinstance(value, float) and alias != value):
            raise TraceError(path, aline, f"ALIAS is not an integer: {value!r}")
        if alias < -1 or alias >= n_args:
            raise TraceError(path, aline,
                             f"ALIAS index {alias} out of range for {n_args} argument(s)")
        return alias

    def mutate(self, line_no: int, rec: dict) -> None:
        path, b = self.path, self.b
        op_name = self.field(rec, "NAME", line_no)
        arg_names = _name_list(self.field(rec, "ARGS", line_no), "ARGS", path, line_no)
        mutated = self.field(rec, "MUTATE", line_no)
        if not isinstance(mutated, list) or not all(isinstance(m, int) for m in mutated):
            raise TraceError(path, line_no, f"MUTATE must be a list of argument indices, got {mutated!r}")
        for m in mutated:
            if m < 0 or m >= len(arg_names):
                raise TraceError(path, line_no,
                                 f"MUTATE index {m} out of range for {len(arg_names)} argument(s)")
        cost = _nonneg_int(self.field(rec, "TIME", line_no), "TIME", path, line_no)
        self.in_backward = self.in_backward or "backward" in str(op_name)
        args = [self.lookup(a, line_no, "argument") for a in arg_names]
        sizes = [b.storage_size_of(args[m]) for m in mutated]
        new_names = [b.tensor_name(args[m]) + "$" for m in mutated]
        tids = b.add_op(line_no, str(op_name), cost, args, sizes, [-1] * len(mutated),
                        new_names, self.in_backward)
        for m, tid in zip(mutated, tids):
            old = self.name_map[arg_names[m]]
            self.name_map[arg_names[m]] = tid
            self.refs[tid] = 1
            self.refs[old] -= 1
            b.command(CMD_RELEASE, old)

    def copy(self, line_no: int, rec: dict) -> None:
        dst, src = self.name(rec, "DST", line_no), self.name(rec, "SRC", line_no)
        if dst in self.name_map:
            raise TraceError(self.path, line_no, f"COPY destination {dst!r} is already defined")
        tid = self.lookup(src, line_no, "SRC")
        self.name_map[dst] = tid
        self.refs[tid] += 1
        self.b.command(CMD_GET, tid)

    def copy_from(self, line_no: int, rec: dict) -> None:
        dst, src = self.name(rec, "DST", line_no), self.name(rec, "SRC", line_no)
        old = self.lookup(dst, line_no, "DST")
        tid = self.lookup(src, line_no, "SRC")
        self.name_map[dst] = tid
        self.refs[old] -= 1
        self.refs[tid] += 1
        self.b.command(CMD_RELEASE, old)
        self.b.command(CMD_GET, tid)

    def release(self, line_no: int, rec: dict) -> None:
        rname = self.name(rec, "NAME", line_no)
        if rname in self.name_map:
            tid = self.name_map[rname]
            self.refs[tid] -= 1
            self.b.command(CMD_RELEASE, tid)

    def pin(self, line_no: int, rec: dict) -> None:
        pname = self.name(rec, "NAME", line_no)
        tid = self.lookup(pname, line_no, "PIN")
        if self.refs[tid] <= 0:
            raise TraceError(self.path, line_no,
                             f"PIN {pname!r}: every reference to it was released")
        self.b.command(CMD_PIN, tid)


_STEPS = {"CONSTANT": _Lowering.constant, "CALL": _Lowering.call, "MUTATE": _Lowering.mutate,
          "COPY": _Lowering.copy, "COPY_FROM": _Lowering.copy_from,
          "RELEASE": _Lowering.release, "PIN": _Lowering.pin}


def parse_file(path: str | Path, name: str | None = None) -> Program:
    """Parse a log file from disk (no caching; see `trace.cache.load_program`)."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.readlines()
    except UnicodeDecodeError as exc:
        raise TraceError(str(path), None, f"not a UTF-8 text file ({exc.reason})") from None
    except OSError as exc:
        raise TraceError(str(path), None, f"cannot read: {exc.strerror}") from None
    return parse_lines(lines, str(path), name or trace_name_from_path(path), file_sha256(path))
