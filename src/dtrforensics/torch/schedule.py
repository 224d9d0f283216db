"""The engine's decisions for a recorded step: the event stream the real step follows.

`plan` replays a step's DTR log under a budget with an observer that keeps
every event (materializations, allocation checks, evictions, dead frees,
computes, pins, the OOM), in `seq` order. (The budget below which no policy
can run a log at all is `analyses/floor.py`'s.) The real step following
these events stops at the schedule's OOM (`RealOutOfMemory`) or its end
(`ScheduleEnded`), and refuses what it cannot follow faithfully
(`ScheduleError`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..engine.frontier import Frontier
from ..engine.hooks import N_EVENT_COLUMNS, N_EVENT_FLOAT_COLUMNS, EventBatch, Observer
from ..engine.replay import RunResult, replay
from ..trace.program import Program
from .recorder import RecordError


class ScheduleError(RecordError):
    """The real step cannot follow its schedule faithfully: which op and why."""


class RealOutOfMemory(Exception):
    """The engine's schedule ends in an OOM here: the real step stops at the same check."""

    def __init__(self, op_id: int, tensor_id: int, request: int, live: int, memory: int):
        super().__init__(f"out of memory at op {op_id}: request {request}")
        self.op_id, self.tensor_id, self.request, self.live, self.memory = (
            op_id, tensor_id, request, live, memory)


class ScheduleEnded(Exception):
    """The engine's run stopped (thrashed, timeout, error) before the real step did."""


def op_text(program: Program, op: int) -> str:
    """A log op as a refusal names it: `op N (name)`, or the step (op -1)."""
    return f"op {op} ({program.op_name(op)})" if op >= 0 else "the step"


def refused_op(program: Program, op: int) -> str:
    """`op_text`, with the op's module where the log's where-file names it."""
    module = program.op_where(op) if op >= 0 else None
    return op_text(program, op) + (f" in module {module}" if module else "")


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
