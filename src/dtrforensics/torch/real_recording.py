"""A real step as a recording: the same Parquet tables as a replay's (recorder/).

The events are the ones the real step applied, in order, with PyTorch's
measures where it has them: `memory` at each allocation check is the live
storage bytes, and `cost` of each compute row is the op's (or rebuild's) wall
time in nanoseconds. `clock` stays the log's cost clock, so `dtrf diff`
compares the real step's decisions with the simulation's op by op.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..engine.hooks import E_COST, E_MEMORY, EventBatch
from ..engine.policies import get_policy
from ..engine.replay import DEFAULT_THRASH_FACTOR, Interventions, ReplayContext
from ..recorder.writer import Recorder
from ..trace.program import Program


def write_real_recording(folder: str | Path, program: Program, schedule, executor, summary,
                         ratio: float | None, overwrite: bool = False) -> Path:
    """Write the real step `executor` ran (following `schedule`) into `folder`."""
    n = executor.pos
    ints = schedule.events[:n].copy()
    for index, live in executor.measured_memory.items():
        ints[index, E_MEMORY] = live
    for index, ns in executor.measured_ns.items():
        ints[index, E_COST] = ns
    floats = np.ascontiguousarray(schedule.scores[:n])
    recorder = Recorder(folder, overwrite=overwrite)
    recorder.check_target()
    remat_limit = int((DEFAULT_THRASH_FACTOR - 1.0) * summary.model_compute)
    ctx = ReplayContext(program, summary.budget, ratio, get_policy(summary.policy),
                        Interventions(), remat_limit, None)
    try:
        recorder.on_start(ctx)
        recorder.on_events(EventBatch(0, ints, floats))
        if schedule.frontier is not None and summary.outcome == "oom":
            recorder.on_oom(schedule.frontier)
        recorder.on_finish(summary)
    except BaseException:
        recorder.abort()
        raise
    return recorder.path
