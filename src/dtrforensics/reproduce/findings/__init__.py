"""What the studies left open, answered with exact maps (`dtrf reproduce --findings`).

Every answer is read off certified budget maps (`sweep --exact`) or the
studies' own grids, each one sweep folder under the working folder, run for
at most `map_seconds` per invocation and resumed by the next one, so a second
run of the command fills in what the first left uncertified. The steps are
apart: `plan` (which maps, in which order, and their content keys), `run`
(each map for its share of the time, never past the deadline), `read` (what a
stored map answers, through the sweep store) and `judge` (the open claims).

Budgets are bytes; a ratio r means floor(r x peak) as everywhere else.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from . import plan as P
from .judge import open_claims
from .read import (
    Findings,
    GridFindings,
    KnobWindow,
    MapFindings,
    not_started,
    read_grid,
    read_map,
    remaining,
)
from .run import MAPS_DIR, Clock, Mapper, MapProgress, Progress

__all__ = ["Findings", "MapProgress", "findings"]


READ_GUESS = 0.5        # seconds to read a stored map, until one has been read
WRITE_MARGIN = 1.0      # seconds kept for judging and writing findings.md


class _Driver:
    """Runs each planned map in turn, then reads it. A map stops in time to read
    every stored map not read yet (at the slowest read so far) and write the
    report; once the deadline has cut a map short, no further map runs."""

    def __init__(self, mapper: Mapper, clock: Clock):
        self.m, self.clock = mapper, clock
        self.read_seconds: list[float] = []

    def until(self) -> float | None:
        """When the map about to run must stop (monotonic; None: no deadline)."""
        if self.clock.deadline is None:
            return None
        if self.m.out_of_time:
            return -math.inf
        stored = self.m.workdir / MAPS_DIR
        unread = sum(1 for p in stored.iterdir() if not p.name.endswith(".stale")) \
            - len(self.read_seconds) if stored.is_dir() else 0
        per_read = max(self.read_seconds, default=READ_GUESS)
        return self.clock.deadline - WRITE_MARGIN - per_read * (max(unread, 0) + 1)

    def time_up(self) -> bool:
        until = self.until()
        return until is not None and until <= time.monotonic()

    def _run(self, spec: P.MapSpec) -> bool:
        return self.m.run(spec, self.until())

    def _timed(self, read, *args):
        started = time.monotonic()
        out = read(*args)
        self.read_seconds.append(time.monotonic() - started)
        return out

    def map(self, spec: P.MapSpec) -> MapFindings:
        if not self._run(spec):
            return not_started(spec, self.peak(spec))
        return self._timed(read_map, spec, self.m.folder(spec), self.m.seconds(spec))

    def grid(self, spec: P.MapSpec) -> GridFindings:
        if not self._run(spec):
            return GridFindings(spec, self.peak(spec), [], 0.0)
        return self._timed(read_grid, spec, self.m.folder(spec), self.m.seconds(spec))

    def peak(self, spec: P.MapSpec) -> int:
        from ...engine.replay import prepared
        return prepared(self.m.program(spec.trace))[1].peak


def record_zoo(workdir: Path, name: str) -> Path:
    """zoo:NAME at its default sizes, flops costs, seed 0, recorded once."""
    path = workdir / "zoo" / f"{name}.log"
    if not path.is_file():
        import torch

        from ...torch import record
        from ...torch.spec import build
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(0)
        model, data, loss_fn = build(f"zoo:{name}")
        record(model, data, loss_fn, path, cost="flops")
    return path


def findings(workdir: Path, *, map_seconds: float = 600.0, run_timeout: float | None = 120.0,
             jobs: int | None = None, scheduler: str | None = None,
             progress: Progress | None = None, on_estimate=None, total_seconds: float | None = None, traces: tuple[str, ...] = P.PUBLIC,
             zoo: tuple[str, ...] = P.ZOO, ratio_range: tuple[float, float] = P.RANGE,
             zoo_range: tuple[float, float] = P.ZOO_RANGE) -> Findings:
    """Run (or resume) every map the findings need, and read them. Within
    `total_seconds` of the call everything is done: the map running when the
    time is up stops, and the maps not reached are read as they are stored.
    `scheduler`: a Dask scheduler's address, to run the maps on its cluster;
    `on_estimate(spec, estimate)` hears what each map will cost before it runs."""
    clock = Clock(total_seconds)
    workdir = Path(workdir)
    m = Mapper(workdir, map_seconds=map_seconds, run_timeout=run_timeout, jobs=jobs,
               scheduler=scheduler, progress=progress, on_estimate=on_estimate)
    d = _Driver(m, clock)
    out = Findings(settings={"map_seconds": map_seconds, "run_timeout": run_timeout,
                             "total_seconds": total_seconds, "range": ratio_range,
                             "traces": traces, "zoo": zoo, "zoo_range": zoo_range})
    knobs = P.knob_policies(workdir)
    m.total = P.count(traces, zoo, len(knobs))
    for spec in P.grids(traces, ratio_range):
        grid = d.grid(spec)
        if spec.group == "window":
            out.window_grid = grid
        else:
            out.grids[spec.trace] = grid
    for spec in P.public(traces, ratio_range):
        out.public[spec.trace] = d.map(spec)
        out.public[spec.trace].remaining = remaining(out.public[spec.trace], out.grids[spec.trace])
    for name in zoo:
        try:
            if not (workdir / "zoo" / f"{name}.log").is_file() and d.time_up():
                raise TimeoutError("not recorded yet: the time ran out")
            log = record_zoo(workdir, name)
        except (ImportError, TimeoutError) as exc:
            out.zoo_errors[name] = (f"PyTorch is not installed ({exc})"
                                    if isinstance(exc, ImportError) else str(exc))
            m.out_of_time |= isinstance(exc, TimeoutError)
            m.index += 1
            continue
        out.zoo[(name, "dtr")] = d.map(P.zoo_map(log, name, zoo_range))
    # the hole windows are narrow: they come before the long maps
    windows = {t: P.hole_windows(out.public[t].holes, out.public[t].peak) for t in traces}
    m.total -= sum(P.MAX_HOLE_WINDOWS - len(w) for w in windows.values()) * len(knobs)
    for t in traces:
        for hole, lo, hi in windows[t]:
            for spec in P.knob_maps(t, lo, hi, knobs):
                out.knobs.append(KnobWindow(t, hole, spec.policy, d.map(spec)))
    for spec in P.window(traces):
        out.window = d.map(spec)
        out.window.remaining = remaining(out.window, out.window_grid)
    for spec in P.ablations(traces, ratio_range):
        out.ablations[(spec.trace, spec.policy)] = d.map(spec)
    out.claims = open_claims(out)
    out.out_of_time = m.out_of_time
    return out
