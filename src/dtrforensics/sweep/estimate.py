"""What a sweep will cost, known before it is spent: executions, CPU time and
wall time on N workers, calibrated from a short sample of runs.

A run at budget b certifies the interval I(b) of budgets that yield its
execution; an exact map makes one run per interval. On the public traces a
few wide intervals hold almost every byte of a range and the many narrow ones
come in runs just below a wide one, so budgets drawn uniformly would nearly
always land in a wide interval and count the wide ones alone. The partition
is therefore cut into units: a wide interval J (at least 1/`WIDE` of the
range) and the narrow intervals below it, down to the next wide one. The
calibration draws one budget in each of a few equal strata of the range (per
policy, seeded) and walks the unit it lands in, as the map itself will: from
J down through the narrow intervals; from a narrow interval up to the wide
one above it, then down below where it landed (at most `CLUSTER_RUNS` runs).
A stratum of width W whose budget landed in a unit spanning S bytes of the
range stands for W / S units, with their intervals: an unbiased count when
no unit is cut short, since a unit is landed in with probability S / W. (A
threshold of wide against the whole range keeps the units few runs long
where narrow intervals are dense; landing in a narrow interval counts its
unit too, so intervals just narrower than wide do not each weigh W / |J|.)
Time is CPU time, what each run's replay spent (`cpu_seconds`; wall time
also waits for cores other work holds). A unit's time is its intervals at the
mean time of its walk runs: the map reaches each resuming from the one above,
and so do they (`Calibration` runs a few chains at a time, so each walk run
finds its chain's last snapshots still cached); a stratum's first run resumes
from far away, as no map run does. A grid's runs are counted, not estimated;
their time is the sampled runs' mean.

The exact walk keeps at most `WALK_ROUND` runs per policy in flight, so more
workers than that do not shorten it.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from ..trace.program import Program
from . import grid
from .exact import WALK_ROUND
from .store import Point, SweepParams

SAMPLES = 16            # strata per policy for `dtrf sweep --estimate`
START_SAMPLES = 8       # per policy, when a sweep starts (its line is printed when long)
WIDE = 256              # an interval of at least 1/WIDE of the range is wide
CLUSTER_RUNS = 64       # runs of the walk through a unit, at most
CALIBRATION_SECONDS = 60.0  # wall time the walks below wide intervals may take, at most
ESTIMATE_SECONDS = 300.0    # the same for `dtrf sweep --estimate`, which does nothing else
LONG_SECONDS = 60.0     # CPU seconds from which a sweep is long
SEED = 0


@dataclass(frozen=True)
class Sample:
    """One stratum's calibration: the bytes of the range it stands for, those
    its unit's certificates cover inside the range (None: its first run
    certified nothing, e.g. timed out), its first run's time, and the other
    intervals of its unit walked (their count and time)."""

    policy: str
    budget: int
    weight: int
    width: int | None
    seconds: float
    narrow: int = 0             # the unit's other intervals walked
    narrow_seconds: float = 0.0


@dataclass(frozen=True)
class Estimate:
    """A sweep's cost, estimated. `executions`: distinct executions in the
    range (exact) or grid points, all policies; `runs`: what this sweep makes
    of them (`--max-runs` caps the walk); `cpu_seconds`: their total run time."""

    trace: str
    exact: bool
    policies: int
    samples: int                # strata sampled, all policies
    sample_runs: int            # calibration runs made (the walks below wide intervals too)
    sample_seconds: float       # wall time the calibration took
    executions: float
    runs: float
    capped: bool                # --max-runs stops the walk before the range is done
    cut: int                    # walks below wide intervals cut by the calibration's time
    cpu_seconds: float
    walk_cpu_seconds: float     # of which the exact walk's (at most WALK_ROUND runs at once)
    workers: int
    parallelism: float = 0.0    # CPU seconds of runs per wall second the calibration achieved
                                # (runs at once, less what other work took; 0: not measured)

    def wall_seconds(self, workers: int | None = None) -> float:
        """About how long on `workers` free cores; by default on the sweep's
        workers, at the CPU rate its calibration achieved on them (workers
        sharing cores with other work, or at low priority, get less than a
        core each)."""
        n = max(1, workers or self.workers)
        if workers is None and self.parallelism:
            n = min(n, self.parallelism)
        walk = self.walk_cpu_seconds / min(n, WALK_ROUND * self.policies)
        return (self.cpu_seconds - self.walk_cpu_seconds) / n + walk

    @property
    def long(self) -> bool:
        return self.cpu_seconds >= LONG_SECONDS

    def to_json(self) -> dict:
        return {"trace": self.trace, "exact": self.exact, "policies": self.policies,
                "samples": self.samples, "sample_runs": self.sample_runs,
                "sample_seconds": self.sample_seconds,
                "executions": self.executions, "runs": self.runs, "capped": self.capped,
                "cut_walks": self.cut,
                "cpu_seconds": self.cpu_seconds, "cpu_hours": self.cpu_seconds / 3600,
                "workers": self.workers, "parallelism": self.parallelism,
                "wall_seconds": self.wall_seconds()}


def plan_samples(params: SweepParams, rng: tuple[int, int], per_policy: int,
                 seed: int = SEED) -> list[tuple[str, int, int]]:
    """(policy, budget, weight): one seeded budget in each of `per_policy` equal
    strata of the range, the same budgets for every policy."""
    lo, hi = rng
    k = max(1, min(per_policy, hi - lo + 1))
    draw = random.Random(f"{seed}:{lo}:{hi}:{k}")
    strata = []
    for s in range(k):
        a, b = lo + (hi - lo + 1) * s // k, lo + (hi - lo + 1) * (s + 1) // k - 1
        strata.append((draw.randint(a, b), b - a + 1))
    return [(policy, budget, weight) for policy in params.policies for budget, weight in strata]


def wide(rng: tuple[int, int]) -> int:
    """The narrowest interval that is wide in the range `rng`."""
    return max(1, (rng[1] - rng[0] + 1) // WIDE)


def from_samples(trace: str, params: SweepParams, peak: int, rng: tuple[int, int],
                 samples: list[Sample], *, workers: int, sample_seconds: float = 0.0,
                 sample_runs: int | None = None, cut: int = 0,
                 parallelism: float = 0.0) -> Estimate:
    """The estimate the samples give (module docstring)."""
    grid_points = len(grid.plan_grid(params, peak)) + len(grid.plan_interior(params, peak))
    executions = runs = cpu = walk_cpu = 0.0
    capped = False
    for policy in params.policies:
        mine = [s for s in samples if s.policy == policy]
        if not mine:
            continue
        points = grid_points / len(params.policies)
        executions += points
        runs += points
        cpu += points * sum(s.seconds for s in mine) / len(mine)
        if not params.exact:
            continue
        n = t = 0.0
        # strata the calibration had no time for: the others stand for them
        scale = (rng[1] - rng[0] + 1) / sum(s.weight for s in mine)
        for s in mine:
            if s.width is None:             # no certificate: one run for the stratum
                n, t = n + 1, t + s.seconds
            else:
                share = s.weight / max(s.width, params.resolution)
                n += share * (1 + s.narrow)
                # the map reaches J from the unit above, resuming as its narrow
                # runs do; the calibration's run of J started cold
                t += share * ((1 + s.narrow) * s.narrow_seconds / s.narrow if s.narrow
                              else s.seconds)
        n, t = n * scale, t * scale
        made = min(n, params.max_runs)
        capped |= n > params.max_runs
        executions += n
        runs += made
        cpu += t * made / n if n else 0.0
        walk_cpu += t * made / n if n else 0.0
    return Estimate(trace, params.exact, len(params.policies), len(samples),
                    sum(1 + s.narrow for s in samples) if sample_runs is None else sample_runs,
                    sample_seconds, executions, runs, capped, cut, cpu, walk_cpu, workers,
                    parallelism)


class _Chain:
    """One stratum's calibration: its budget's run, then the walk through its
    unit: from a wide interval down through the narrow ones below it; from a
    narrow one up to the wide one above it, then down below the landing."""

    def __init__(self, policy: str, budget: int, weight: int):
        self.policy, self.budget, self.weight = policy, budget, weight
        self.width: int | None = None       # bytes of the range the unit's runs certify
        self.seconds, self.narrow, self.narrow_seconds = 0.0, 0, 0.0
        self.first, self.up, self.landed = True, False, 0
        self.steps = 0                          # walk runs taken

    def absorb(self, row: dict, rng: tuple[int, int], walk: bool) -> int | None:
        """Take a run's row; the next budget to run, or None when done."""
        width = _width(row, rng)
        if self.first:
            self.first, self.width, self.seconds = False, width, cpu_seconds(row)
            if width is None or not walk:
                return None
            self.landed = row["interval_lo"]
            self.up = width < wide(rng)
            return self._next(row, rng)
        if width is None or (not self.up and width >= wide(rng)):
            return None                     # the next wide interval below: the unit ends
        self.narrow += 1
        self.narrow_seconds += cpu_seconds(row)
        self.width += width
        if self.up and width >= wide(rng):  # the unit's wide top: on below the landing
            self.up = False
            return self._down(self.landed, rng)
        return self._next(row, rng)

    def _next(self, row: dict, rng: tuple[int, int]) -> int | None:
        if self.narrow >= CLUSTER_RUNS:
            return None
        if not self.up:
            return self._down(row["interval_lo"], rng)
        if row["interval_hi"] is not None and row["interval_hi"] < rng[1]:
            return row["interval_hi"] + 1
        self.up = False                     # the range's top: the unit has no wide one
        return self._down(self.landed, rng)

    def _down(self, lo: int, rng: tuple[int, int]) -> int | None:
        return lo - 1 if lo - 1 >= rng[0] and self.narrow < CLUSTER_RUNS else None

    def sample(self) -> Sample:
        return Sample(self.policy, self.budget, self.weight, self.width, self.seconds,
                      self.narrow, self.narrow_seconds)


class Calibration:
    """The calibration as a point source for the sweep's scheduler. Its chains
    run a few at a time, as many as the scheduler asks for at once: each
    stratum's first run, then straight on through its unit, so that every walk
    run resumes from the snapshots its chain's last run just left, as the map's
    walkers' runs do (a process keeps the snapshots of a few runs only: LSTM's
    take about 40 MB a run against a 256 MB cache, so walks taken breadth first
    across all strata resumed from far older states and read high). Every walk
    gets about as many runs as the others: it goes on while it has taken fewer
    than its share of the runs that fit in what is left of `seconds`, at the
    wall time per run so far (`_share`; a walk of a few slow runs would stand
    for its whole unit at their cost). Every walk is cut once `seconds` have
    passed since the first point, but every stratum has its first run. Strata
    are started in an order that spreads any prefix of them over the range, so
    those a deadline (`until`) leaves unstarted leave the others standing for it
    evenly. Chains that meet at one budget share its run."""

    queue_per_worker = 2

    def __init__(self, params: SweepParams, peak: int, rng: tuple[int, int],
                 per_policy: int, seconds: float, seed: int = SEED):
        self.params, self.peak, self.rng, self.seconds = params, peak, rng, seconds
        self.chains = [_Chain(p, b, w) for p, b, w in plan_samples(params, rng, per_policy,
                                                                   seed)]
        strata = len(self.chains) // len(params.policies)
        self.fresh = [c for _, c in sorted(enumerate(self.chains), key=lambda ic: (
            _spread(ic[0] % strata), ic[0] // strata))]
        self.todo: list[tuple[_Chain, int]] = []              # taken from the front
        self.waiting: dict[tuple, list[_Chain]] = {}          # point key -> chains
        self.rows: dict[tuple, dict] = {}                     # rows seen, by point key
        self.started: float | None = None
        self.live: list[_Chain] = []                          # chains under way
        self.width = 0
        self.runs, self.finished, self.run_seconds, self.cut = 0, 0, 0.0, 0

    def take(self, n: int) -> list[Point]:
        if self.started is None:
            self.started = time.perf_counter()
        self.width = max(self.width, n)     # chains under way, at most
        out: list[Point] = []
        while len(out) < n:
            if self.todo:
                chain, budget = self.todo.pop(0)
            elif self.fresh and len(self.live) < self.width:
                chain = self.fresh.pop(0)
                self.live.append(chain)
                budget = chain.budget
            else:
                break
            point = Point(chain.policy, budget, 0, budget / self.peak, "exact")
            if point.key in self.rows:          # another chain's run: no run of its own
                self._advance(chain, self.rows[point.key])
            elif point.key in self.waiting:
                self.waiting[point.key].append(chain)
            else:
                self.waiting[point.key] = [chain]
                self.runs += 1
                out.append(point)
        return out

    def absorb(self, point: Point, row: dict) -> None:
        self.rows[point.key] = row
        self.finished += 1
        self.run_seconds += cpu_seconds(row)
        for chain in self.waiting.pop(point.key, []):
            self._advance(chain, row)

    def _advance(self, chain: "_Chain", row: dict) -> None:
        walking = not chain.first
        below = chain.absorb(row, self.rng, self.params.exact)
        chain.steps += walking
        elapsed = time.perf_counter() - self.started
        if below is not None and (elapsed > self.seconds or chain.steps >= self._share(elapsed)):
            self.cut += 1
            below = None
        if below is None:
            self.live.remove(chain)
        else:
            self.todo.append((chain, below))

    def _share(self, elapsed: float) -> float:
        """Walk runs each chain not yet done may take: the runs that fit in the
        time left (at the wall time per run so far), less the first runs still
        to make, plus the walk runs the chains under way took, shared evenly."""
        per_run = elapsed / max(1, self.finished)
        if per_run <= 0:
            return CLUSTER_RUNS
        fit = (self.seconds - elapsed) / per_run
        walking = [c for c in self.live if not c.first]
        starting = len(self.fresh) + len(self.live) - len(walking)
        return (fit - starting + sum(c.steps for c in walking)) / max(1, starting + len(walking))

    def estimate(self, name: str, workers: int, stopped: bool = False) -> Estimate:
        """The estimate of the runs absorbed; `stopped`: the calibration ran out
        of time, its unfinished chains count as cut (those with no first run
        are left out: the others stand for the range)."""
        wall = time.perf_counter() - self.started if self.started is not None else 0.0
        cut = self.cut + (len(self.fresh) + len(self.todo) + sum(map(len, self.waiting.values()))
                          if stopped else 0)
        return from_samples(name, self.params, self.peak, self.rng,
                            [c.sample() for c in self.chains if not c.first],
                            workers=workers, sample_runs=self.runs, cut=cut,
                            sample_seconds=wall,
                            parallelism=self.run_seconds / wall if wall else 0.0)


def calibrate(backend, program: Program, params: SweepParams, peak: int,
              rng: tuple[int, int], per_policy: int = SAMPLES,
              seconds: float = CALIBRATION_SECONDS, *, sched=None,
              until: float | None = None, seed: int = SEED) -> Estimate:
    """Run the calibration on `backend` (a chain per stratum, a few at once:
    `Calibration`) and estimate. A grid samples one run per stratum; an exact
    map walks, each walk for its share of `seconds`, where it is cut (counted
    as cut: its unit then stands at the density of its part walked). The runs go through
    `sched` (the sweep's scheduler: its deadline, its handling of lost workers and
    clusters; by default one that stores nothing); at the monotonic instant
    `until` the calibration stops, its runs in flight dropped, and estimates
    from what finished. `seed` draws the strata's budgets."""
    from .scheduler import OutOfTime, Scheduler, SweepObserver
    sched = sched or Scheduler(None, [], SweepObserver(), params.timeout)
    source = Calibration(params, peak, rng, per_policy, seconds, seed)
    try:
        sched.run(backend, "calibrate", source, keep=False, until=until)
    except OutOfTime:
        if sched.deadline is not None and time.monotonic() >= sched.deadline:
            raise                           # the sweep's own deadline: it stops
        return source.estimate(program.name, backend.capacity, stopped=True)
    return source.estimate(program.name, backend.capacity)


def cpu_seconds(row: dict) -> float:
    """The CPU time a run's replay spent (its wall time when the row has none)."""
    cpu = row.get("cpu_seconds")
    return row["wall_seconds"] if cpu is None else cpu


def _spread(i: int) -> float:
    """The i-th point of the van der Corput sequence: any first k of them spread
    over [0, 1) about evenly."""
    x, f = 0.0, 0.5
    while i:
        x, i, f = x + f * (i & 1), i >> 1, f / 2
    return x


def _width(row: dict, rng: tuple[int, int]) -> int | None:
    """Bytes of the range the row's certificate covers (None: it has none)."""
    if row["interval_lo"] is None:
        return None
    hi = rng[1] if row["interval_hi"] is None else min(row["interval_hi"], rng[1])
    return max(1, hi - max(row["interval_lo"], rng[0]) + 1)
