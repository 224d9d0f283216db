"""The reproduction's verdict table (`reproduce.protocol.Reproduction`) for a terminal.

A table when it fits the console; otherwise one block of `key: value` lines
per claim, so no number is ever cut or elided.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..reproduce.claims import DIFFERS, MATCH, NOT_REPRODUCIBLE, SHARPER
from ..reproduce.protocol import Reproduction

VERDICT_STYLE = {MATCH: "green", SHARPER: "cyan", DIFFERS: "bold red", NOT_REPRODUCIBLE: "yellow"}
TABLE_MIN_WIDTH = 120


def verdict_table(rep: Reproduction) -> Table:
    t = Table(title=f"Reproduction ({'quick subset' if rep.quick else 'full protocol'})",
              title_justify="left", show_lines=False)
    t.add_column("study")
    t.add_column("claim")
    t.add_column("published", justify="right", no_wrap=True)
    t.add_column("ours", justify="right", no_wrap=True)
    t.add_column("verdict", no_wrap=True)
    for c in rep.claims:
        t.add_row(c.study, c.text, c.published, c.ours,
                  Text(c.verdict, style=VERDICT_STYLE.get(c.verdict, "")))
    return t


def verdict_lines(rep: Reproduction) -> Group:
    parts = []
    for c in rep.claims:
        parts.append(Text(c.id, style="bold"))
        for key, value in (("claim", c.text), ("study", c.study), ("published", c.published),
                           ("ours", c.ours)):
            parts.append(Text(f"  {key}: {value}"))
        parts.append(Text.assemble("  verdict: ", (c.verdict, VERDICT_STYLE.get(c.verdict, ""))))
        if c.note:
            parts.append(Text(f"  note: {c.note}"))
    return Group(*parts)


def notes(rep: Reproduction) -> Group:
    return Group(*[Text(f"{c.id}: {c.note}") for c in rep.claims if c.note])


def summary_line(rep: Reproduction) -> Text:
    counts = rep.counts()
    return Text("  ".join(f"{v}: {n}" for v, n in counts.items()))


def print_reproduction(console: Console, rep: Reproduction) -> None:
    if console.width >= TABLE_MIN_WIDTH:
        console.print(verdict_table(rep))
        if any(c.note for c in rep.claims):
            console.print(Text("\nNotes", style="bold"))
            console.print(notes(rep))
    else:
        console.print(verdict_lines(rep))
    console.print(summary_line(rep))
