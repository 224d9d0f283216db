"""Plain lines on a stream, wrapped at the terminal's width where `wrapping.divide` allows.

`dtrf` writes everything on stderr (notes, progress lines, `replaced` lines,
warnings and errors) through `wrapped_stderr`, and its plain stdout lines
through `say`: a line wider than the terminal breaks at a space that splits no
number, digest, path or number-unit pair, and goes on two columns deeper (the
rich consoles of `console.py` wrap alike). The width is COLUMNS when set, else
the terminal's; a stream that is no terminal, with COLUMNS unset, is left as
it is: a pipe or a file cuts nothing, and a message stays one line to grep.

This module imports nothing of weight (`dtrf --help` wraps its stderr too):
rich is imported only for a line that may be too wide.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from typing import Iterator, TextIO

HANG = 2        # a continued line starts this much deeper than the line it continues


def width_of(stream: TextIO) -> int | None:
    """Columns to wrap `stream` at: COLUMNS, else the terminal's; None: no wrapping."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        pass
    return None


STYLE = re.compile(r"\x1b\[[0-9;]*m")      # colours and bold: they take no column


def wrap_line(line: str, width: int) -> str:
    """`line` broken into lines of at most `width` columns at the places
    `wrapping.divide` allows (a word wider than the width stays whole); colour
    codes take no column, and a line with other control codes (a live progress
    bar redrawing itself) is left alone."""
    if (line.isascii() and len(line) <= width) or "\r" in line:
        return line
    plain = STYLE.sub("", line)
    if "\x1b" in plain:
        return line
    from rich.cells import cell_len

    from .wrapping import divide, indent_of
    if cell_len(plain) <= width:
        return line
    styled = {i for m in STYLE.finditer(line) for i in range(m.start(), m.end())}
    at = [i for i in range(len(line)) if i not in styled]      # plain index -> line's
    hang = indent_of(plain) + HANG
    cuts = [at[c] for c in divide(plain, width, hang)]
    parts = [line[a:b].rstrip(" ") for a, b in zip([0, *cuts], [*cuts, len(line)])]
    return "\n".join([parts[0], *(" " * hang + p for p in parts[1:])])


def wrap_text(text: str, width: int | None) -> str:
    """Every line of `text` wrapped by `wrap_line` (None: `text` as it is)."""
    if width is None:
        return text
    return "\n".join(wrap_line(line, width) for line in text.split("\n"))


def say(text: str = "", *, err: bool = False) -> None:
    """Print one message (its lines wrapped) on stdout, or stderr with `err`."""
    stream = sys.stderr if err else sys.stdout
    print(wrap_text(text, width_of(stream)), file=stream, flush=err)


class WrappedStream:
    """A text stream that writes each whole line wrapped (`wrap_line`); an
    unfinished line waits for its end, or goes as it is when flushed."""

    def __init__(self, stream: TextIO, width: int):
        self.stream, self.width, self.pending = stream, width, ""

    def write(self, text: str) -> int:
        self.pending += text
        if "\n" in self.pending:
            *whole, self.pending = self.pending.split("\n")
            self.stream.write("".join(wrap_line(line, self.width) + "\n" for line in whole))
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.stream.write(self.pending)
            self.pending = ""
        self.stream.flush()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


@contextlib.contextmanager
def wrapped_stderr() -> Iterator[None]:
    """sys.stderr wrapped at its width inside the block (unchanged where `width_of`
    says none), and put back after it."""
    original = sys.stderr
    width = width_of(original)
    if width is None:
        yield
        return
    sys.stderr = wrapped = WrappedStream(original, width)
    try:
        yield
    finally:
        wrapped.flush()
        sys.stderr = original
