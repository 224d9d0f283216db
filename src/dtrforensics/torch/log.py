"""Writing DTR prototype logs: one JSON object per line, keys sorted, numbers
as the 2020 logs spell them (MEMORY, ALIAS and TIME as decimal strings)."""

from __future__ import annotations

import json
from pathlib import Path

from ..fsutil import atomic_path


class LogWriter:
    """Collects log lines in memory; `write` puts them on disk atomically."""

    def __init__(self):
        self.lines: list[str] = []
        self.annotate("START")

    def _emit(self, **record) -> None:
        self.lines.append(json.dumps(record, sort_keys=True, separators=(",", ":")))

    def annotate(self, annotation: str) -> None:
        self._emit(INSTRUCTION="ANNOTATE", ANNOTATION=annotation)

    def constant(self, name: str, nbytes: int) -> None:
        self._emit(INSTRUCTION="CONSTANT", NAME=name)
        self._emit(INSTRUCTION="MEMORY", NAME=name, MEMORY=str(nbytes))

    def call(self, op: str, args: list[str], results: list[tuple[str, int, int]], cost: int) -> None:
        """`results` are (name, storage bytes, alias index or -1) per output."""
        self._emit(INSTRUCTION="CALL", NAME=op, ARGS=args, RESULT=[r[0] for r in results],
                   TIME=str(cost))
        for name, nbytes, alias in results:
            self._emit(INSTRUCTION="MEMORY", NAME=name, MEMORY=str(nbytes))
            self._emit(INSTRUCTION="ALIAS", NAME=name, ALIAS=str(alias))

    def mutate(self, op: str, args: list[str], mutated: list[int], cost: int) -> None:
        self._emit(INSTRUCTION="MUTATE", NAME=op, ARGS=args, MUTATE=mutated, TIME=str(cost))

    def copy(self, dst: str, src: str) -> None:
        self._emit(INSTRUCTION="COPY", DST=dst, SRC=src)

    def release(self, name: str) -> None:
        self._emit(INSTRUCTION="RELEASE", NAME=name)

    def write(self, path: str | Path) -> None:
        with atomic_path(path) as tmp:
            tmp.write_text("\n".join(self.lines) + "\n", encoding="utf-8")
