"""The best-ranked candidates of the decision at the current step."""

from __future__ import annotations

from textual.widgets import DataTable

from ...analyses.replay_view import Candidate
from ...render.units import fmt_bytes, fmt_score


class CandidatesTable(DataTable):
    """Rank, storage, tensor, score, size, staleness; the evicted one marked."""

    DEFAULT_CSS = """
    CandidatesTable { height: 1fr; border: round $accent; }
    """

    def on_mount(self) -> None:
        self.border_title = "candidates"
        self.cursor_type = "row"
        self.add_columns("rank", "storage", "tensor", "score", "size", "staleness", "")
        self.shown: list[Candidate] = []

    def show(self, decision: int | None, candidates: list[Candidate]) -> None:
        self.clear()
        self.shown = list(candidates)
        if decision is None:
            self.border_title = "candidates (no eviction at this step)"
            return
        source = "" if not candidates or candidates[0].source == "candidates" else \
            ", victim and runner-up only: record with scores=all for all"
        self.border_title = f"candidates of decision {decision}{source}"
        for c in candidates:
            self.add_row(str(c.rank), str(c.storage), c.tensor or "-",
                         fmt_score(c.score),
                         fmt_bytes(c.size) if c.size is not None else "-",
                         "-" if c.staleness is None else f"{c.staleness:,}",
                         "evicted" if c.chosen else "")
