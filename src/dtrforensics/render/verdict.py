"""The answer first: a command's verdict, drawn above its details.

A `Verdict` is what a long output comes to: a headline (what happened), a few
lines with the numbers that decide it (in the model's words -- module paths --
where the recording has them), and the next command to run, a real `dtrf`
line. `verdict_lines` draws it in at most `MAX_LINES` lines of at most `WIDTH`
columns, whatever the terminal: lines break where `wrapping.divide` allows
(never inside a number, digest, path or number-unit pair) and the command
between its shell words, continued with ` \\`; when the lines do not fit at
80 columns, the last detail lines give way, never the headline or the command
(a narrower terminal gets the same words in more, narrower lines). `--brief`
prints these lines alone; `--json` carries the verdict as `{"verdict": ...}`.
The verdicts of each result are built in `verdicts.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.text import Text

from .wrapping import HANG, divide, shell_wrap

MAX_LINES = 8           # the verdict, the next command included
WIDTH = 80              # columns, whatever the terminal (a narrower one: its width)
MAX_DETAILS = MAX_LINES - 2     # a headline, the details, a one-line command
NEXT = "next:"


@dataclass(frozen=True)
class Verdict:
    """What an output comes to: `headline`, up to `MAX_DETAILS` `lines`, and
    `next`, the command to run next (None: nothing left to ask)."""
    headline: str
    lines: tuple[str, ...] = ()
    next: str | None = None

    def __post_init__(self) -> None:
        lines = tuple(line for line in self.lines if line)
        if len(lines) > MAX_DETAILS:
            raise ValueError(f"a verdict has at most {MAX_DETAILS} detail lines, not {len(lines)}")
        object.__setattr__(self, "lines", lines)

    def to_json(self) -> dict:
        return {"headline": self.headline, "lines": list(self.lines), "next": self.next,
                "text": verdict_lines(self)}


def _wrapped(line: str, width: int, indent: int) -> list[str]:
    """`line` (indented by `indent`) at `width`, continued lines `HANG` deeper."""
    text = " " * indent + line
    cuts = divide(text, width, indent + HANG)
    parts = [text[a:b].rstrip() for a, b in zip([0, *cuts], [*cuts, len(text)])]
    return [parts[0], *(" " * (indent + HANG) + p.lstrip() for p in parts[1:])]


def kept_lines(verdict: Verdict) -> tuple[str, ...]:
    """The detail lines that fit, with the headline and the command, in
    `MAX_LINES` lines of `WIDTH` columns: the last ones give way first."""
    used = len(_wrapped(verdict.headline, WIDTH, 0))
    used += len(shell_wrap(NEXT, verdict.next, WIDTH)) if verdict.next else 0
    kept: list[str] = []
    for line in verdict.lines:
        used += len(_wrapped(line, WIDTH, 2))
        if used > MAX_LINES:
            break
        kept.append(line)
    return tuple(kept)


def verdict_lines(verdict: Verdict, width: int = WIDTH) -> list[str]:
    """The verdict as drawn: at most `MAX_LINES` lines of at most `WIDTH`
    columns. A narrower terminal gets the same words in lines of its width
    (more of them: what a verdict says does not depend on the terminal); a
    single word wider than the line, such as a long path, is kept whole."""
    width = min(width, WIDTH)
    lines = _wrapped(verdict.headline, width, 0)
    for line in kept_lines(verdict):
        lines += _wrapped(line, width, 2)
    return lines + (shell_wrap(NEXT, verdict.next, width) if verdict.next else [])


def print_verdict(console: Console, verdict: Verdict, *, brief: bool = False) -> None:
    """The verdict at the top of an output (bold headline), then a blank line
    before the details; `brief`: the verdict alone."""
    lines = verdict_lines(verdict, console.width)
    for k, line in enumerate(lines):
        console.print(Text(line, style="bold" if k == 0 else ""), soft_wrap=True)
    if not brief:
        console.print()


def with_verdict(data: dict, verdict: Verdict, *, brief: bool = False) -> dict:
    """A result's JSON with its verdict; `brief`: the verdict alone."""
    return {"verdict": verdict.to_json()} if brief else {**data, "verdict": verdict.to_json()}
