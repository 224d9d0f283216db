"""The best-ranked candidates of the decision at the current step."""

from __future__ import annotations

from textual.widgets import DataTable

from ...analyses.replay_view import Candidate
from ...render.units import fmt_bytes, score_format

COLUMNS = ("rank", "score", "storage", "size", "staleness", "tensor", "")


class CandidatesTable(DataTable):
    """Rank and score first (what decides), then storage, size, staleness, tensor;
    the evicted one marked. Scores get the digits that tell them apart."""

    DEFAULT_CSS = """
    CandidatesTable { height: 1fr; border: round $accent; }
    """

    def on_mount(self) -> None:
        self.border_title = "candidates"
        self.cursor_type = "row"
        self.add_columns(*COLUMNS)
        self.shown: list[Candidate] = []

    def show(self, decision: int | None, candidates: list[Candidate]) -> None:
        self.clear()
        self.shown = list(candidates)
        if decision is None:
            self.border_title = "candidates: no eviction at this step"
            self.border_subtitle = ""
            return
        self.border_title = f"candidates of decision {decision:,}"
        self.border_subtitle = ("" if not candidates or candidates[0].source == "candidates"
                                else "victim and runner-up only: --scores all records all")
        fmt_score = score_format(c.score for c in candidates)
        for c in candidates:
            self.add_row(str(c.rank), fmt_score(c.score), str(c.storage),
                         fmt_bytes(c.size) if c.size is not None else "-",
                         "-" if c.staleness is None else f"{c.staleness:,}",
                         c.tensor or "-", "evicted" if c.chosen else "")
