"""Wrapping that never breaks a number, a digest, a path or a number and its unit.

rich wraps text at any space and folds a word longer than the line. Our
consoles (`console.py`) wrap every text they draw with `divide` instead: a
line breaks only at a space that does not join a number to its unit
(`472.92 MiB`, `1.0412 x`) or `Σ` to its number, a word is never folded (a
64-digit digest on a 60-column terminal runs past the edge whole, so it can be
copied), and an indented line continues two columns deeper than it starts
(the scores of a replay's eviction lines stay under their line).
"""

from __future__ import annotations

import re

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions
from rich.measure import Measurement
from rich.text import Lines, Text

UNITS = r"(?:B|KiB|MiB|GiB|TiB|bytes|ns|us|ms|s|x)(?!\w)"
NOBREAK = re.compile(rf"(?<=\d) (?={UNITS})|(?<=Σ) (?=[\d-])")
WORD = re.compile(r"\s*\S+\s*")
HANG = 2                # extra indent of a continued indented line


def words(plain: str) -> list[tuple[int, str]]:
    """(start, word with its trailing spaces) of each unbreakable word."""
    masked = NOBREAK.sub("_", plain)
    return [(m.start(), plain[m.start():m.end()]) for m in WORD.finditer(masked)]


def divide(plain: str, width: int, hang: int = 0) -> list[int]:
    """Offsets to break `plain` at so each line fits `width` (continuation lines
    `width - hang`), breaking only between unbreakable words."""
    offsets: list[int] = []
    used = 0
    room = width
    for start, word in words(plain):
        if used and used + cell_len(word.rstrip()) > room:
            offsets.append(start)
            used, room = 0, max(1, width - hang)
        used += cell_len(word)
    return offsets


def indent_of(plain: str) -> int:
    return len(plain) - len(plain.lstrip(" "))


class KeptText(Text):
    """A `Text` that wraps by `divide`: what it holds is never cut."""

    @classmethod
    def of(cls, text: Text) -> KeptText:
        kept = cls(text.plain, style=text.style, justify=text.justify, overflow=text.overflow,
                   no_wrap=text.no_wrap, end=text.end, tab_size=text.tab_size)
        kept._spans = list(text._spans)
        return kept

    def wrap(self, console: Console, width: int, *, justify=None, overflow=None,
             tab_size: int = 8, no_wrap=None) -> Lines:
        if no_wrap or (no_wrap is None and self.no_wrap) or overflow == "ignore":
            return super().wrap(console, width, justify=justify, overflow=overflow,
                                tab_size=tab_size, no_wrap=no_wrap)
        lines = Lines()
        for line in self.split(allow_blank=True):
            if "\t" in line:
                line.expand_tabs(tab_size)
            lead = indent_of(line.plain)
            hang = lead + HANG if lead else 0
            parts = line.divide(divide(line.plain, width, hang))
            for k, part in enumerate(parts):
                part.rstrip()
                if k and hang:
                    part.pad_left(hang)
            lines.extend(parts)
        return lines

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        plain = self.plain
        widest = max((cell_len(line) for line in plain.splitlines()), default=0)
        longest = max((cell_len(w.strip()) for _, w in words(plain)), default=widest)
        return Measurement(longest, widest)


def kept(text: Text | str) -> KeptText:
    """`text` (markup when a string) as a `KeptText`."""
    if isinstance(text, KeptText):
        return text
    return KeptText.of(text if isinstance(text, Text) else Text.from_markup(text))


def kept_progress(*columns, **kwargs):
    """A rich `Progress` whose counts and times are never cut: its text and bar
    columns give way first (the text wraps by `divide` onto a further line, the
    bar shortens), so that `1000/1000` and `0:01:23` stay whole on a narrow
    terminal (rich would otherwise shrink every column alike: `1000/100`)."""
    from rich.progress import BarColumn, Progress, TextColumn
    from rich.table import Column
    for column in columns:
        if isinstance(column, (TextColumn, BarColumn)):
            column._table_column = Column(no_wrap=False)
    return Progress(*columns, **kwargs)


SHELL_WORD = re.compile(r"""(?:'[^']*'|"(?:\\.|[^"\\])*"|[^\s'"])+""")


def shell_wrap(head: str, command: str, width: int) -> list[str]:
    """`head` then a shell `command`, in lines of at most `width` columns where a
    word allows: the command breaks only between its shell words (never inside
    a quoted one) and each of its broken lines ends with ` \\`, so that the lines
    pasted into a shell run it as it is; continued lines start two columns in."""
    tokens = [(w, False) for w in head.split()] + [(w, True) for w in SHELL_WORD.findall(command)]
    lines: list[str] = []
    line, in_command = "", False
    for word, shell in tokens:
        room = width - (2 if shell else 0)          # room for ` \` inside the command
        if line.strip() and cell_len(line) + 1 + cell_len(word) > room:
            lines.append(line + (" \\" if in_command else ""))
            line = " " * HANG
        line += ("" if not line.strip() else " ") + word
        in_command |= shell
    return lines + [line]
