"""A tiny builder for hand-written DTR logs in tests."""

from __future__ import annotations

import json

from dtrforensics.trace import parse_lines


class Log:
    def __init__(self, start: bool = True):
        self.lines: list[dict] = [{"INSTRUCTION": "ANNOTATE", "ANNOTATION": "START"}] if start else []

    def _add(self, **record) -> "Log":
        self.lines.append(record)
        return self

    def const(self, name: str, size: int) -> "Log":
        self._add(INSTRUCTION="CONSTANT", NAME=name)
        return self._add(INSTRUCTION="MEMORY", NAME=name, MEMORY=str(size))

    def call(self, results, op: str, args, time: int, sizes, aliases=None) -> "Log":
        results = [results] if isinstance(results, str) else list(results)
        sizes = [sizes] if isinstance(sizes, int) else list(sizes)
        aliases = aliases or [-1] * len(results)
        self._add(INSTRUCTION="CALL", RESULT=results, NAME=op, ARGS=list(args), TIME=str(time))
        for name, size, alias in zip(results, sizes, aliases):
            self._add(INSTRUCTION="MEMORY", NAME=name, MEMORY=str(size))
            self._add(INSTRUCTION="ALIAS", NAME=name, ALIAS=alias)
        return self

    def mutate(self, op: str, args, mutate, time: int) -> "Log":
        return self._add(INSTRUCTION="MUTATE", NAME=op, ARGS=list(args), MUTATE=list(mutate),
                         TIME=str(time))

    def copy(self, dst: str, src: str) -> "Log":
        return self._add(INSTRUCTION="COPY", DST=dst, SRC=src)

    def pin(self, name: str) -> "Log":
        return self._add(INSTRUCTION="PIN", NAME=name)

    def copy_from(self, dst: str, src: str) -> "Log":
        return self._add(INSTRUCTION="COPY_FROM", DST=dst, SRC=src)

    def release(self, name: str) -> "Log":
        return self._add(INSTRUCTION="RELEASE", NAME=name)

    def backward(self) -> "Log":
        return self._add(INSTRUCTION="ANNOTATE", ANNOTATION="BACKWARD")

    def text(self) -> str:
        return "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in self.lines)

    def program(self, name: str = "handmade"):
        return parse_lines(self.text().splitlines(keepends=True), f"<{name}>", name)
