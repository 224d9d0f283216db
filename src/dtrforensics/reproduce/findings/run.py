"""Running the maps: each one resumed into its folder for its share of the time.

A map runs for at most `map_seconds` per invocation and never past the
invocation's deadline; the wall time spent on each map, all invocations
together, is kept in `seconds.json` beside the maps.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...concepts import COMPLETE
from ...engine.policies import POLICIES
from ...fsutil import atomic_path
from ...sweep.estimate import START_SAMPLES
from ...sweep.store import SweepStore, SweepStoreError
from .plan import MAX_WALK_RUNS, STUDY_RUN_LIMIT, MapSpec

MAPS_DIR = "maps"
LEDGER = "seconds.json"


@dataclass(frozen=True)
class MapProgress:
    """What the command shows while the maps run."""

    index: int                  # 1-based, of `total`
    total: int
    spec: MapSpec
    coverage: float
    seconds: float              # spent on this map in this invocation
    limit: float                # what it may spend
    state: str = "running"      # "running" | "done" | "out of time" (not run: read as stored)


Progress = Callable[[MapProgress], None]


class Clock:
    """The invocation's deadline (monotonic seconds; None: no limit)."""

    def __init__(self, total_seconds: float | None):
        self.started = time.monotonic()
        self.deadline = None if total_seconds is None else self.started + total_seconds

    def left(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()


class Mapper:
    """Runs (or resumes) maps into `workdir/maps`, each until `map_seconds` are
    spent in this invocation or `until` (a monotonic time) comes."""

    def __init__(self, workdir: Path, *, map_seconds: float, run_timeout: float | None,
                 jobs: int | None, scheduler: str | None = None,
                 progress: Progress | None = None,
                 on_estimate: Callable[[MapSpec, object], None] | None = None):
        self.workdir = Path(workdir)
        self.map_seconds, self.run_timeout, self.jobs = map_seconds, run_timeout, jobs
        self.scheduler = scheduler      # a Dask scheduler's address: the maps run there
        self.on_estimate = on_estimate  # hears each map's cost (sweep/estimate.py) first
        self.progress = progress or (lambda _p: None)
        self.ledger_path = self.workdir / LEDGER
        self.ledger: dict[str, float] = (json.loads(self.ledger_path.read_text())
                                         if self.ledger_path.is_file() else {})
        self._programs: dict[str, object] = {}
        self.index, self.total = 0, 0
        self.out_of_time = False        # a map was cut short, or not run, by the deadline

    def program(self, trace: str):
        if trace not in self._programs:
            from ...trace import load_trace
            self._programs[trace] = load_trace(trace)
        return self._programs[trace]

    def key(self, spec: MapSpec) -> str:
        return spec.key(self.program(spec.trace).sha256)

    def folder(self, spec: MapSpec) -> Path:
        return self.workdir / MAPS_DIR / self.key(spec)

    def seconds(self, spec: MapSpec) -> float:
        return self.ledger.get(self.key(spec), 0.0)

    def run(self, spec: MapSpec, until: float | None) -> bool:
        """Run or resume the map of `spec` until its share of time is spent, it is
        complete, or `until` (monotonic) comes; False when nothing of it is stored."""
        self.index += 1
        folder = self.folder(spec)
        self._adopt_unkeyed(folder, spec)
        _set_aside_if_other_policy(folder, spec)
        store = SweepStore(folder)
        started = time.monotonic()
        stop = started + self.map_seconds if until is None else min(until, started + self.map_seconds)
        if store.exists() and store.read_doc().get("status") == COMPLETE:
            self.progress(MapProgress(self.index, self.total, spec, 1.0, 0.0, 0.0, "done"))
            return True
        by_deadline = until is not None and until < started + self.map_seconds
        if stop <= started:
            self.out_of_time = True
            self.progress(MapProgress(self.index, self.total, spec, 0.0, 0.0, 0.0, "out of time"))
            return store.exists()
        share = 0.0

        def report(coverage: float) -> None:
            nonlocal share
            share = coverage
            self.progress(MapProgress(self.index, self.total, spec, share,
                                      time.monotonic() - started, self.map_seconds))

        if _run_until(self.program(spec.trace), spec, self._timeout(store, spec), folder, stop,
                      jobs=self.jobs, scheduler=self.scheduler, report=report,
                      on_estimate=(None if self.on_estimate is None else
                                   lambda est: self.on_estimate(spec, est))) and by_deadline:
            self.out_of_time = True
        spent = time.monotonic() - started
        self.progress(MapProgress(self.index, self.total, spec, share, spent,
                                  self.map_seconds, "done"))
        self._spent(folder.name, spent)
        return True

    def _spent(self, key: str, seconds: float, old: str | None = None) -> None:
        self.ledger[key] = self.ledger.get(key, 0.0) + seconds + self.ledger.pop(old, 0.0)
        self.ledger_path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.ledger_path) as tmp:
            tmp.write_text(json.dumps(self.ledger, indent=1, sort_keys=True) + "\n")

    def _timeout(self, store: SweepStore, spec: MapSpec) -> float | None:
        """The run timeout a stored map was started with (it resumes with it); else the
        studies' limit for a grid (their protocol, so their timeouts compare with ours),
        ours for an exact map."""
        if store.exists():
            return store.params.timeout
        return STUDY_RUN_LIMIT if spec.step else self.run_timeout

    def _adopt_unkeyed(self, folder: Path, spec: MapSpec) -> None:
        """A map an earlier version stored under its name alone (trace, policy,
        range) moves to its content-keyed folder when it holds this trace and
        these parameters (a policy file's spelling is checked next)."""
        old = folder.with_name(folder.name.rsplit("-", 1)[0])
        if folder.exists() or not SweepStore(old).exists():
            return
        try:
            store = SweepStore(old)
            stored, sha = store.params.to_json(), store.trace.sha256
        except (SweepStoreError, TypeError, KeyError):
            return          # unreadable: left where it is
        wanted = spec.params(stored["timeout"]).to_json()
        if spec.policy not in POLICIES:
            stored["policies"] = wanted["policies"]
        if sha == self.program(spec.trace).sha256 and stored == wanted:
            old.rename(folder)
            self._spent(folder.name, 0.0, old=old.name)


def _run_until(program, spec: MapSpec, timeout: float | None, folder: Path, until: float, *,
               jobs: int | None, report: Callable[[float], None],
               scheduler: str | None = None,
               on_estimate: Callable[[object], None] | None = None) -> bool:
    """The one call of `run_sweep`: run or resume the map of `spec` into `folder`
    until the monotonic time `until`, calling `report` with the certified share
    (exact walk) or the share of grid points run as runs finish; True when the
    time ran out first. Runs in flight then are dropped: their budgets stay
    uncertified and run again when the map resumes."""
    from ...sweep.runner import SweepObserver, run_sweep

    class Watch(SweepObserver):
        done = 0

        def coverage(self, fractions: dict[str, float]) -> None:
            report(fractions[spec.policy])

        def finished(self, row: dict) -> None:
            self.done += 1
            if spec.step:
                report(self.done / spec.planned)

        def estimated(self, estimate) -> None:
            on_estimate(estimate)

        def notice(self, text: str) -> None:        # e.g. a cluster with no workers yet
            warnings.warn(text, stacklevel=2)

    engine = "dask" if scheduler else None
    result = run_sweep(program, spec.params(timeout), folder, jobs=jobs, engine=engine,
                       scheduler=scheduler, observer=Watch(), max_points=MAX_WALK_RUNS,
                       deadline=until, estimate_samples=START_SAMPLES if on_estimate else 0)
    return result.stopped is not None


def _set_aside_if_other_policy(folder: Path, spec: MapSpec) -> None:
    """A stored map made under another spelling or content of the map's policy
    file (the working folder moved, or the file was edited in place) answers
    for another policy: it is renamed FOLDER.stale and the map starts again."""
    store = SweepStore(folder)
    if not store.exists() or spec.policy in POLICIES:
        return
    from ...engine.policies import policy_sources
    stored = store.read_doc()
    if (stored["params"]["policies"] == [spec.policy]
            and stored.get("policy_sources") == policy_sources((spec.policy,))):
        return
    stale = folder.with_name(folder.name + ".stale")
    if stale.exists():
        shutil.rmtree(stale)
    folder.rename(stale)
    moved = stored["params"]["policies"] != [spec.policy]
    why = (f"made with {stored['params']['policies'][0]}, not {spec.policy}" if moved
           else f"made with another content of {spec.policy}")
    warnings.warn(f"{folder}: {why}; set aside as {stale.name}, mapping again")
