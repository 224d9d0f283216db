"""Writing DTR prototype logs: one JSON object per line, keys sorted, numbers
as the 2020 logs spell them (MEMORY, ALIAS and TIME as decimal strings). A
recorded step's log keeps the 2020 format; a compiled step's joint log adds
PIN lines (ours, docs/semantics.md §2.1)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..fsutil import atomic_path
from ..trace.where import write_where


class LogWriter:
    """Collects log lines in memory; `write` puts them on disk atomically."""

    def __init__(self):
        self.lines: list[str] = []
        self.context: tuple | None = None     # where the op written next ran (`where.py`)
        self.contexts: list[tuple[int, tuple | None]] = []   # (its line, context) per op
        self.annotate("START")

    def _op(self) -> None:
        """Note the context of the op whose first line is written next."""
        self.contexts.append((len(self.lines) + 1, self.context))

    def _emit(self, **record) -> None:
        self.lines.append(json.dumps(record, sort_keys=True, separators=(",", ":")))

    def annotate(self, annotation: str) -> None:
        self._emit(INSTRUCTION="ANNOTATE", ANNOTATION=annotation)

    def constant(self, name: str, nbytes: int) -> None:
        self._op()
        self._emit(INSTRUCTION="CONSTANT", NAME=name)
        self._emit(INSTRUCTION="MEMORY", NAME=name, MEMORY=str(nbytes))

    def call(self, op: str, args: list[str], results: list[tuple[str, int, int]], cost: int) -> None:
        """`results` are (name, storage bytes, alias index or -1) per output."""
        self._op()
        self._emit(INSTRUCTION="CALL", NAME=op, ARGS=args, RESULT=[r[0] for r in results],
                   TIME=str(cost))
        for name, nbytes, alias in results:
            self._emit(INSTRUCTION="MEMORY", NAME=name, MEMORY=str(nbytes))
            self._emit(INSTRUCTION="ALIAS", NAME=name, ALIAS=str(alias))

    def mutate(self, op: str, args: list[str], mutated: list[int], cost: int) -> None:
        self._op()
        self._emit(INSTRUCTION="MUTATE", NAME=op, ARGS=args, MUTATE=mutated, TIME=str(cost))

    def copy(self, dst: str, src: str) -> None:
        self._emit(INSTRUCTION="COPY", DST=dst, SRC=src)

    def release(self, name: str) -> None:
        self._emit(INSTRUCTION="RELEASE", NAME=name)

    def pin(self, name: str) -> None:
        """Held from here on (docs/semantics.md §2.1: ours, not the 2020 format's)."""
        self._emit(INSTRUCTION="PIN", NAME=name)

    def write(self, path: str | Path) -> Path | None:
        """The log, and beside it its where-file when ops have contexts
        (`trace/where.py`: the log keeps its format); the where-file's path."""
        text = "\n".join(self.lines) + "\n"
        with atomic_path(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
        if any(context is not None for _, context in self.contexts):
            digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
            return write_where(path, digest, self.contexts)
        return None
