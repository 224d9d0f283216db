"""The best-ranked candidates of the decision at the current step."""

from __future__ import annotations

from rich.cells import cell_len
from textual.widgets import DataTable

from ...analyses.replay_view import Candidate
from ...render.units import fmt_bytes, score_format

COLUMNS = ("rank", "score", "storage", "size", "staleness", "tensor", "")


class CandidatesTable(DataTable):
    """Rank and score first (what decides), then storage, size, staleness, tensor;
    the evicted one marked. Scores get the digits that tell them apart.

    Each column is as wide as its widest cell from the moment its rows are added:
    a DataTable sizes automatic columns only when it next goes idle, and keeps
    what it drew before then (a score cut to its header's width) until its rows
    change again."""

    DEFAULT_CSS = """
    CandidatesTable { height: 1fr; border: round $accent; }
    """

    def on_mount(self) -> None:
        self.border_title = "candidates"
        self.cursor_type = "row"
        self.shown: list[Candidate] = []
        self._fill([])

    def show(self, decision: int | None, candidates: list[Candidate]) -> None:
        self.shown = list(candidates)
        if decision is None:
            self.border_title = "candidates: no eviction at this step"
            self.border_subtitle = ""
            self._fill([])
            return
        self.border_title = f"candidates of decision {decision:,}"
        self.border_subtitle = ("" if not candidates or candidates[0].source == "candidates"
                                else "victim and runner-up only: --scores all records all")
        fmt_score = score_format(c.score for c in candidates)
        self._fill([(str(c.rank), fmt_score(c.score), str(c.storage),
                     fmt_bytes(c.size) if c.size is not None else "-",
                     "-" if c.staleness is None else f"{c.staleness:,}",
                     c.tensor or "-", "evicted" if c.chosen else "") for c in candidates])

    def _fill(self, rows: list[tuple[str, ...]]) -> None:
        self.clear(columns=True)
        for i, label in enumerate(COLUMNS):
            self.add_column(label, width=max(cell_len(text) for text in
                                             (label, *(row[i] for row in rows))))
        for row in rows:
            self.add_row(*row)
