"""Messages of the replay view: every message the app's widgets exchange."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from ..analyses.replay_view import Candidate, StackLevel, Victim


class StepsLoaded(Message):
    """The recording's steps are in memory (posted by the loading worker)."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count


@dataclass
class StepDetails(Message):
    """Victims, candidates and the materialization stack of one step (from a worker)."""

    index: int
    offset: int                   # which of the step's decisions was asked for
    victims: list[Victim]
    decision: int | None          # the decision whose candidates are shown
    candidates: list[Candidate]
    stack: list[StackLevel]


class StorageFound(Message):
    """Where a storage jump lands (from a worker): a step index, or None."""

    def __init__(self, storage: int, index: int | None, kind: str | None) -> None:
        super().__init__()
        self.storage = storage
        self.index = index
        self.kind = kind
