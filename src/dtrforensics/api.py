"""The Python API: every question the `dtrf` command answers, for notebooks.

Each function returns the analysis's typed result (a frozen dataclass with a
`to_json()`), never printed text. A *run* argument is a `Recording`, a
recording folder, or a run spec: `"resnet32@0.104"`, `"lstm@0.264:lru"`, or a
budget in bytes, `"resnet32@1024657200B"`; a spec is recorded once into
`cache` and reused. A *trace* argument is a short name (`"resnet32"`, the
embedded `"hole"`), a log path, or a `Program`.

    from dtrforensics import api
    summary = api.run("resnet32", ratio=0.104)         # RunSummary: outcome, overhead, ...
    report = api.diff("inceptionv4@0.2343", "inceptionv4@0.235")
    print(report.first_divergence.explanation)

`docs/api.md` has a worked example (tested by `tests/test_api.py`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .analyses.runs import DEFAULT_CACHE, resolve_run
from .engine.replay import Interventions, replay
from .recorder.reader import Recording
from .trace.program import Program

RunArg = Recording | str | os.PathLike


def trace(spec: str | os.PathLike | Program) -> Program:
    """A trace by short name or path, parsed (and cached by content): a `Program`."""
    if isinstance(spec, Program):
        return spec
    from .trace import load_trace
    return load_trace(str(spec))


def run(trace_spec: str | os.PathLike | Program, *, ratio: float | None = None,
        budget: int | None = None, policy: str = "dtr",
        interventions: Interventions | None = None, timeout: float | None = None):
    """Replay a trace under a budget (`ratio` of peak, or `budget` bytes) without
    recording; returns its `RunSummary` (outcome, overhead, budget interval, ...)."""
    return replay(trace(trace_spec), ratio=ratio, budget=budget, policy=policy,
                  interventions=interventions, timeout=timeout).summary


def recording(run_arg: RunArg, *, scores: str = "victims",
              cache: str | os.PathLike = DEFAULT_CACHE) -> Recording:
    """A `Recording`: opened, or recorded from a run spec (scores="all" also keeps every
    candidate's score)."""
    if isinstance(run_arg, Recording):
        return run_arg
    return resolve_run(run_arg, scores=scores, cache=cache)


def diff(control: RunArg, test: RunArg, *, window_ops: int | None = None,
         cache: str | os.PathLike = DEFAULT_CACHE):
    """Where two executions of one trace part, why, and what follows (`DiffReport`)."""
    from .analyses.diff import diff as _diff
    return _diff(recording(control, scores="all", cache=cache),
                 recording(test, scores="all", cache=cache), window_ops=window_ops)


def oom(run_arg: RunArg, *, cache: str | os.PathLike = DEFAULT_CACHE):
    """The pinned frontier of an OOM (`OomReport`); raises NotAnOomError otherwise."""
    from .analyses.oom import explain_oom
    return explain_oom(recording(run_arg, cache=cache))


def replay_view(run_arg: RunArg, ops: tuple[int, int] | None = None, *,
                only_evicting: bool = False, cache: str | os.PathLike = DEFAULT_CACHE):
    """Allocation by allocation: every check of ops `ops` with its victims (`ReplayWindow`)."""
    from .analyses.replay_view import replay_window
    return replay_window(recording(run_arg, cache=cache), ops, only_evicting=only_evicting)


def reevict(*runs: RunArg, top: int = 10, cache: str | os.PathLike = DEFAULT_CACHE):
    """Re-eviction figures of one or two runs (`ReevictReport`)."""
    from .analyses.reevict import reevict as _reevict
    return _reevict([recording(r, cache=cache) for r in runs], top=top)


def regime(control: RunArg, test: RunArg, *, cache: str | os.PathLike = DEFAULT_CACHE, **rule):
    """Two runs in different regimes: onset, drivers, link to the divergence
    (`RegimeReport`); `rule` takes window_ops, factor, min_excess, sustain, top."""
    from .analyses.regime import regime as _regime
    return _regime(recording(control, cache=cache), recording(test, cache=cache), **rule)


def intervene(trace_spec: str | os.PathLike | Program, *, ratio: float | None = None,
              budget: int | None = None, policy: str = "dtr", retain: Sequence[int] = (),
              forbid: Sequence[tuple[int, int]] = (), force: Sequence[tuple[int, int]] = (),
              record_root: Path | None = None):
    """Baseline, intervention and control at one budget (`InterventionResult`); the
    control must reproduce the baseline (`control_matches`)."""
    from .analyses.interventions import intervene as _intervene
    changes = Interventions(retain=tuple(retain), forbid=tuple(map(tuple, forbid)),
                            force=tuple(map(tuple, force)))
    return _intervene(trace(trace_spec), changes, ratio=ratio, budget=budget, policy=policy,
                      record_root=record_root)


def explain(trace_spec: str | os.PathLike | Program, *, ratio: float | None = None,
            budget: int | None = None, policy: str = "dtr", jobs: int | None = 1, **search):
    """Which single change (a retention or a forced victim) turns a failure into a
    completion (`Explanation`); `search` takes max_attempts, max_combo,
    last_decisions, kinds, stop_after_fixes, record_root, timeout, share."""
    from .analyses.explain import explain as _explain
    return _explain(trace(trace_spec), ratio=ratio, budget=budget, policy=policy, jobs=jobs,
                    **search)


def sweep(trace_spec: str | os.PathLike | Program, out: str | os.PathLike, *,
          ratio_from: float, ratio_to: float, step: float | None = None, exact: bool = False,
          policies: Sequence[str] = ("dtr",), jobs: int | None = 1, **params):
    """Sweep budgets into the folder `out` (resumed when it exists) and map it:
    returns its `HolesReport` (failure regions, holes, regime switches, exact view)."""
    from .sweep.holes import analyze
    from .sweep.runner import run_sweep
    from .sweep.store import SweepParams
    spec = SweepParams(ratio_from=ratio_from, ratio_to=ratio_to, step=step, exact=exact,
                       policies=tuple(policies), **params)
    run_sweep(trace(trace_spec), spec, out, jobs=jobs)
    return analyze(out)


def holes(sweep_dir: str | os.PathLike, *, threshold: float | None = None):
    """The `HolesReport` of an existing sweep folder."""
    from .sweep.holes import analyze
    return analyze(sweep_dir, threshold=threshold)


def edges(sweep_dir: str | os.PathLike, *, policy: str | None = None,
          threshold: float | None = None, max_edges: int = 20,
          cache: str | os.PathLike = DEFAULT_CACHE):
    """Both sides of every edge of a sweep, with the decisive comparison (`EdgesReport`)."""
    from .analyses.edges import edges as _edges
    return _edges(sweep_dir, policy=policy, threshold=threshold, max_edges=max_edges,
                  cache=cache)


def plan(spec: str, folder: str | os.PathLike, *, target: int | None = None,
         ratio: float | None = None, **options):
    """DTR against PyTorch's checkpointing for one training step (`dtrf torch plan`):
    the step's peak and floor, DTR's exact map, every option's recorded peak and
    overhead, the compile knob, a target's answer (`PlanResult`); `options`
    takes settings (a `PlanSettings`), seed, optimizer, autocast and the
    factory's keywords (batch, seq, config keys). Needs the torch extra."""
    from .torch.plan import plan as _plan
    return _plan(spec, folder, target=target, ratio=ratio, **options)


def sql(query: str, *runs: RunArg, cache: str | os.PathLike = DEFAULT_CACHE) -> list[dict]:
    """Rows of a read-only SQL query over recordings (views runs, events, decisions,
    candidates, storages, tensors, ops; every shipped query installed), as dicts."""
    from . import db
    from .analyses.runs import open_together
    from .rows import fetch_dicts
    con, _ = open_together([recording(r, cache=cache) for r in runs], every_query=True, in_memory=False)
    try:
        db.check_read_only(con, query)
        return fetch_dicts(con, query)
    finally:
        con.close()


__all__ = ["diff", "edges", "explain", "holes", "intervene", "oom", "plan", "recording", "reevict",
           "regime", "replay_view", "run", "sql", "sweep", "trace"]
