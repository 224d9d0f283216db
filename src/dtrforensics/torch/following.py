"""Following the recording: the step's DTR log written again, checked line by line.

The executor (`runtime.py`) writes the log of the step it runs as the
recorder did; `FollowingLog` compares each record with the recording's as it
is written (costs aside). `RecordedLog` is the recording as the executor
follows it, read once per recorded step and shared, read only, by every run:
its records, their comparison keys, the log op of each op line and the plan
of each CALL and MUTATE line (`lineplan.py`).
"""

from __future__ import annotations

import json

from .lineplan import OP_INSTRUCTIONS, op_lines, plan_lines
from .log import LogWriter


def _costless(record: dict) -> dict:
    """A log record without its cost: the executor does not recompute costs."""
    return {k: v for k, v in record.items() if k != "TIME"}


# The fields of each log instruction, in the order `FollowingLog` compares them.
FIELDS = {"ANNOTATE": ("ANNOTATION",), "CONSTANT": ("NAME",), "MEMORY": ("NAME", "MEMORY"),
          "ALIAS": ("NAME", "ALIAS"), "CALL": ("NAME", "ARGS", "RESULT"),
          "MUTATE": ("NAME", "ARGS", "MUTATE"), "COPY": ("DST", "SRC"), "RELEASE": ("NAME",)}
NUMBERS = ("MEMORY", "ALIAS")     # written as decimal strings, compared as the integers


def _key(record: dict) -> tuple:
    """A costless record as a tuple the writer can build without a dict: equal to
    the tuple of a written record exactly when the two records are equal."""
    fields = FIELDS.get(record.get("INSTRUCTION"))
    if fields is None or record.keys() != {"INSTRUCTION", *fields}:
        return (object(),)        # equal to nothing the writer makes: compared as a dict
    values = []
    for f in fields:
        v = record[f]
        if f in NUMBERS and isinstance(v, str) and v.lstrip("-").isdigit() and str(int(v)) == v:
            v = int(v)
        values.append(v)
    return (record["INSTRUCTION"], *values)


class RecordedLog:
    """A step's DTR log as the executor follows it, read once per recording (each
    run of the step reuses it, read only): its records, each as a costless dict
    and as a `_key`, the log op of each op line (`line_op`) and the `plans` of
    its CALL and MUTATE lines (`lineplan.planned`)."""

    def __init__(self, lines: list[str]):
        self.expected = [json.loads(line) for line in lines]
        self.want = [_costless(r) for r in self.expected]
        self.keys = [_key(r) for r in self.want]
        self.line_op = op_lines(self.expected)
        self.plans = plan_lines(self.expected, self.line_op)


class FollowingLog(LogWriter):
    """A log writer that checks every record against the recording as it is written
    (compared as tuples of its fields, the recording's made once; a record that
    differs is compared again as a dict, so the first difference is found and
    named as before). A mismatch is kept (finalizers cannot raise) and raised at
    the next op."""

    def __init__(self, expected: list[str] | RecordedLog):
        rec = self.recording = expected if isinstance(expected, RecordedLog) else RecordedLog(expected)
        self.expected, self._want, self._keys = rec.expected, rec.want, rec.keys
        self.diverged: int | None = None
        self._ran: dict | None = None
        self.ops = 0
        self.written = 0
        super().__init__()

    def _emit(self, **record) -> None:
        index = self.written
        self.written += 1
        if record["INSTRUCTION"] in OP_INSTRUCTIONS:
            self.ops += 1
        if self.diverged is None:
            record.pop("TIME", None)
            if index >= len(self._want) or record != self._want[index]:
                self.diverged, self._ran = index, record

    def _follows(self, key: tuple) -> bool:
        """The next record is `key`: counted as written, True; else nothing done."""
        i = self.written
        if self.diverged is None and i < len(self._keys) and self._keys[i] == key:
            self.written = i + 1
            return True
        return False

    def call(self, op: str, args: list[str], results: list[tuple[str, int, int]], cost: int) -> None:
        i, keys = self.written, self._keys
        end = i + 1 + 2 * len(results)
        if self.diverged is None and end <= len(keys) and keys[i] == ("CALL", op, args, [r[0] for r in results]):
            j = i + 1
            for name, nbytes, alias in results:
                if keys[j] != ("MEMORY", name, nbytes) or keys[j + 1] != ("ALIAS", name, alias):
                    break
                j += 2
            else:
                self.written = end
                self.ops += 1
                return
        super().call(op, args, results, cost)

    def release(self, name: str) -> None:
        if not self._follows(("RELEASE", name)):
            super().release(name)

    def copy(self, dst: str, src: str) -> None:
        if not self._follows(("COPY", dst, src)):
            super().copy(dst, src)

    def mutate(self, op: str, args: list[str], mutated: list[int], cost: int) -> None:
        if self._follows(("MUTATE", op, args, mutated)):
            self.ops += 1
        else:
            super().mutate(op, args, mutated, cost)

    def divergence(self) -> str:
        i = self.diverged
        want = json.dumps(self._want[i], sort_keys=True) if i < len(self._want) else "the end of the log"
        ran = json.dumps(self._ran, sort_keys=True) if self._ran is not None else "the end of the step"
        return (f"the step ran differently from its recording at log line {i + 1}: "
                f"recorded {want}, ran {ran}")
