"""The engine's decisions for a recorded step: the event stream the real step follows.

`plan` replays a step's DTR log under a budget with an observer that keeps
every event (materializations, allocation checks, evictions, dead frees,
computes, pins, the OOM), in `seq` order. (The budget below which no policy
can run a log at all is `analyses/floor.py`'s.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.frontier import Frontier
from ..engine.hooks import N_EVENT_COLUMNS, N_EVENT_FLOAT_COLUMNS, EventBatch, Observer
from ..engine.replay import RunResult, replay
from ..trace.program import Program


class _Collector(Observer):
    def __init__(self):
        self.chunks: list[np.ndarray] = []
        self.float_chunks: list[np.ndarray] = []
        self.frontier: Frontier | None = None

    def on_events(self, batch: EventBatch) -> None:
        self.chunks.append(batch.ints.copy())
        self.float_chunks.append(batch.floats.copy())

    def on_oom(self, frontier) -> None:
        self.frontier = frontier


@dataclass(frozen=True)
class Plan:
    """The engine's run of the log: its result and every event it emitted."""

    result: RunResult
    events: np.ndarray            # (n, N_EVENT_COLUMNS) int64, seq order
    scores: np.ndarray            # (n, N_EVENT_FLOAT_COLUMNS) float64
    frontier: Frontier | None


def plan(program: Program, budget: int, policy="dtr") -> Plan:
    collector = _Collector()
    result = replay(program, budget=budget, policy=policy, observers=[collector])
    events = (np.concatenate(collector.chunks) if collector.chunks
              else np.zeros((0, N_EVENT_COLUMNS), dtype=np.int64))
    scores = (np.concatenate(collector.float_chunks) if collector.float_chunks
              else np.zeros((0, N_EVENT_FLOAT_COLUMNS), dtype=np.float64))
    return Plan(result=result, events=events, scores=scores, frontier=collector.frontier)
