"""Search synthetic traces for planted-looking pathologies (issue: synthetic traces).

`find_hole(...)` generates small traces (seeds x parameters), replays each on a
fine grid of budget ratios under one policy and keeps the traces that show both

* a **feasibility hole**: a ratio that runs out of memory with completing
  ratios below and above it (docs/semantics.md §12.8), and
* an **overhead regime switch**: two adjacent grid ratios, both completing,
  whose overheads differ by more than `factor` (max/min).

The grid is walked upwards using each run's `budget_interval` (every budget in
it gives an identical execution), so grid points inside an interval already
seen are not replayed: a 0.0005 grid costs little more than a 0.002 one.
`exact_sweep` goes further and enumerates every distinct execution between two
budgets, byte-exact, which shows where a switch really happens (two budgets one
byte apart).

Grid ratios are the float64 values of their decimal text (`0.302`, not
`0.3 + 0.002`), as a user would type them, and budgets are
`budget_for_ratio(ratio, peak)`.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from decimal import Decimal

from ..engine.baseline import baseline, budget_for_ratio
from ..engine.replay import replay
from ..trace.parser import parse_lines
from ..trace.program import Program
from .generator import SynthSpec, generate


@dataclass(frozen=True)
class Point:
    """One grid ratio and its run."""
    ratio: float
    budget: int
    outcome: str
    overhead: float | None
    evictions: int
    remat_compute: int


@dataclass(frozen=True)
class Hole:
    ok_below: float
    oom: float
    ok_above: float


@dataclass(frozen=True)
class Switch:
    lo_ratio: float
    hi_ratio: float
    lo_overhead: float
    hi_overhead: float

    @property
    def factor(self) -> float:
        a, b = self.lo_overhead, self.hi_overhead
        return max(a, b) / min(a, b)


@dataclass
class Finding:
    """A trace with a hole and a switch, and the evidence.

    `holes`/`switches` are from the finest grid examined (`step`); `coarse` holds
    the (holes, switches) of the first, coarser grid when a fine re-check ran.
    `exact_switch`: the strongest switch located to the byte (two budgets one
    byte apart, both completing, overheads differing by more than the factor),
    when the exact sweep between the switch's two grid budgets finds one.
    """
    spec: SynthSpec
    n_ops: int
    file_bytes: int
    peak: int
    model_compute: int
    step: str
    holes: list[Hole]
    switches: list[Switch]
    coarse: tuple[str, list[Hole], list[Switch]] | None = None
    exact_switch: tuple[Point, Point] | None = None
    points: list[Point] = field(repr=False, default_factory=list)

    @property
    def best_switch(self) -> Switch:
        return max(self.switches, key=lambda s: s.factor)

    @property
    def widest_hole(self) -> Hole:
        return max(self.holes, key=lambda h: h.ok_above - h.ok_below)

    def to_json(self) -> dict:
        def sw(s: Switch) -> dict:
            return dict(asdict(s), factor=s.factor)
        out = {"spec": self.spec.to_json(), "n_ops": self.n_ops, "file_bytes": self.file_bytes,
               "peak": self.peak, "model_compute": self.model_compute, "step": self.step,
               "holes": [asdict(h) for h in self.holes],
               "switches": [sw(s) for s in self.switches]}
        if self.coarse is not None:
            step, hs, ss = self.coarse
            out["coarse"] = {"step": step, "holes": [asdict(h) for h in hs],
                             "switches": [sw(s) for s in ss]}
        if self.exact_switch is not None:
            out["exact_switch"] = [asdict(p) for p in self.exact_switch]
        return out


# --------------------------------------------------------------------------- #
# Scans
# --------------------------------------------------------------------------- #

def ratio_grid(lo: str | float, hi: str | float, step: str | float) -> list[float]:
    """Ratios lo, lo+step, ..., <= hi, each the float of its exact decimal text."""
    lo_d, hi_d, step_d = Decimal(str(lo)), Decimal(str(hi)), Decimal(str(step))
    if step_d <= 0:
        raise ValueError(f"step must be > 0, got {step}")
    out, k = [], 0
    while lo_d + k * step_d <= hi_d:
        out.append(float(str(lo_d + k * step_d)))
        k += 1
    return out


def scan(program: Program, ratios: list[float], policy: str = "dtr",
         timeout: float | None = 5.0) -> list[Point]:
    """Replay at every ratio (ascending), skipping ratios whose budget falls in the
    identical-execution interval of an earlier run."""
    peak = baseline(program).peak
    points: list[Point] = []
    known: tuple[int, int | None, Point] | None = None
    for ratio in sorted(ratios):
        budget = budget_for_ratio(ratio, peak)
        if known is not None and known[0] <= budget and (known[1] is None or budget <= known[1]):
            p = known[2]
            points.append(Point(ratio, budget, p.outcome, p.overhead, p.evictions,
                                p.remat_compute))
            continue
        s = replay(program, budget=budget, policy=policy, timeout=timeout).summary
        p = Point(ratio, budget, s.outcome, s.overhead, s.evictions, s.remat_compute)
        points.append(p)
        lo, hi = s.budget_interval
        known = (lo, hi, p) if s.outcome != "timeout" else None
    return points


def exact_sweep(program: Program, lo_budget: int, hi_budget: int, policy: str = "dtr",
                max_runs: int = 100_000) -> list[tuple[int, int | None, Point]]:
    """Every distinct execution for budgets in [lo_budget, hi_budget]:
    (interval lo, interval hi, run) in budget order."""
    out = []
    budget = lo_budget
    peak = baseline(program).peak
    while budget <= hi_budget and len(out) < max_runs:
        s = replay(program, budget=budget, policy=policy).summary
        lo, hi = s.budget_interval
        out.append((lo, hi, Point(budget / peak, budget, s.outcome, s.overhead, s.evictions,
                                  s.remat_compute)))
        if hi is None:
            break
        budget = max(hi + 1, budget + 1)
    return out


def holes(points: list[Point]) -> list[Hole]:
    """OOM ratios with a completing ratio below and above (nearest ones reported)."""
    found = []
    oks = [i for i, p in enumerate(points) if p.outcome == "ok"]
    for i, p in enumerate(points):
        if p.outcome != "oom":
            continue
        k = bisect.bisect_left(oks, i)          # oks[k - 1] < i < oks[k]
        if 0 < k < len(oks):
            found.append(Hole(points[oks[k - 1]].ratio, p.ratio, points[oks[k]].ratio))
    return found


def switches(points: list[Point], factor: float = 1.25) -> list[Switch]:
    """Adjacent completing ratios whose overheads differ by more than `factor`."""
    found = []
    for a, b in zip(points, points[1:]):
        if a.outcome == b.outcome == "ok" and a.overhead and b.overhead:
            sw = Switch(a.ratio, b.ratio, a.overhead, b.overhead)
            if sw.factor > factor:
                found.append(sw)
    return found


# --------------------------------------------------------------------------- #
# Search
# --------------------------------------------------------------------------- #

DEFAULT_PARAMS = {
    "kind": ("chain", "resnet", "rnn", "mixed"),
    "depth": (4, 8, 12),
    "width": (1, 2),
    "size_levels": (0, 3),
}


def candidate_specs(seeds, params: dict | None = None, base: SynthSpec | None = None):
    """Every (parameter combination, seed), parameters varying slowest."""
    params = dict(DEFAULT_PARAMS if params is None else params)
    base = base or SynthSpec()
    keys = list(params)
    for values in itertools.product(*(params[k] for k in keys)):
        for seed in seeds:
            yield base.with_(seed=int(seed), **dict(zip(keys, values)))


def _program(spec: SynthSpec) -> tuple[Program, int]:
    text = generate(spec)
    program = parse_lines(text.splitlines(keepends=True), f"<synth {spec.kind} {spec.seed}>",
                          f"synth-{spec.kind}-{spec.seed}")
    return program, len(text.encode("utf-8"))


def examine(spec: SynthSpec, *, lo: str = "0.05", hi: str = "1.0", step: str = "0.002",
            fine_step: str | None = None, factor: float = 1.25, policy: str = "dtr",
            max_ops: int = 400, max_bytes: int = 200_000) -> Finding | None:
    """Scan one spec; a Finding when it shows both a hole and a switch on the
    `step` grid and, if given, again on the `fine_step` grid."""
    program, size = _program(spec)
    if size > max_bytes or program.n_ops > max_ops:
        return None
    points = scan(program, ratio_grid(lo, hi, step), policy)
    found_holes, found_switches = holes(points), switches(points, factor)
    if not (found_holes and found_switches):
        return None
    base = baseline(program)
    finding = Finding(spec, program.n_ops, size, base.peak, base.model_compute, str(step),
                      found_holes, found_switches, points=points)
    if fine_step is not None:
        fine = scan(program, ratio_grid(lo, hi, fine_step), policy)
        fine_holes, fine_switches = holes(fine), switches(fine, factor)
        if not (fine_holes and fine_switches):
            return None
        finding.coarse = (str(step), found_holes, found_switches)
        finding.step, finding.holes, finding.switches = str(fine_step), fine_holes, fine_switches
        finding.points = fine
    finding.exact_switch = locate_switch(program, finding.best_switch, base.peak, factor,
                                         policy)
    return finding


def locate_switch(program: Program, switch: Switch, peak: int, factor: float = 1.25,
                  policy: str = "dtr") -> tuple[Point, Point] | None:
    """The byte where a grid switch happens: adjacent distinct executions between the
    switch's two budgets, both completing, with the largest overhead ratio (when it
    exceeds `factor`)."""
    lo_b = budget_for_ratio(switch.lo_ratio, peak)
    hi_b = budget_for_ratio(switch.hi_ratio, peak)
    runs = exact_sweep(program, lo_b, hi_b, policy, max_runs=5_000)
    best, best_factor = None, factor
    for (_, hi_a, a), (lo_b2, _, b) in zip(runs, runs[1:]):
        if a.outcome == b.outcome == "ok" and a.overhead and b.overhead:
            f = max(a.overhead, b.overhead) / min(a.overhead, b.overhead)
            if f > best_factor:
                best_factor = f
                best = (Point(hi_a / peak, hi_a, a.outcome, a.overhead, a.evictions,
                              a.remat_compute),
                        Point(lo_b2 / peak, lo_b2, b.outcome, b.overhead, b.evictions,
                              b.remat_compute))
    return best


def _rank(f: Finding):
    # smaller traces first, then the stronger switch, then the wider hole
    return (f.n_ops, -f.best_switch.factor,
            -(f.widest_hole.ok_above - f.widest_hole.ok_below))


def find_hole(seeds=range(50), params: dict | None = None, *, base: SynthSpec | None = None,
              lo: str = "0.05", hi: str = "1.0", step: str = "0.002",
              fine_step: str | None = "0.0005", factor: float = 1.25, policy: str = "dtr",
              max_ops: int = 400, max_bytes: int = 200_000, time_limit: float | None = None,
              stop_after: int | None = 1, verbose: bool = False) -> list[Finding]:
    """Search seeds x params (see `candidate_specs`) for traces with a feasibility
    hole and an overhead regime switch (adjacent grid ratios, overhead ratio >
    `factor`) on the `step` grid, confirmed on the `fine_step` grid. Returns the
    findings best first (fewest ops, strongest switch, widest hole); stops after
    `stop_after` findings or `time_limit` seconds (None: no limit)."""
    started = time.perf_counter()
    findings: list[Finding] = []
    varied = list(DEFAULT_PARAMS if params is None else params)
    for n, spec in enumerate(candidate_specs(seeds, params, base), start=1):
        if time_limit is not None and time.perf_counter() - started > time_limit:
            break
        found = examine(spec, lo=lo, hi=hi, step=step, fine_step=fine_step, factor=factor,
                        policy=policy, max_ops=max_ops, max_bytes=max_bytes)
        if found is None:
            continue
        findings.append(found)
        if verbose:
            h, s = found.widest_hole, found.best_switch
            what = " ".join(f"{k}={getattr(spec, k)}" for k in varied)
            print(f"[{n} specs, {time.perf_counter() - started:.0f}s] {what} seed "
                  f"{spec.seed}: {found.n_ops} ops, hole "
                  f"ok {h.ok_below} / oom {h.oom} / ok {h.ok_above}, switch {s.lo_ratio}->"
                  f"{s.hi_ratio} x{s.factor:.3f}", file=sys.stderr)
        if stop_after is not None and len(findings) >= stop_after:
            break
    findings.sort(key=_rank)
    return findings


def _parse_params(items: list[str]) -> dict:
    params: dict = {}
    for item in items:
        key, _, values = item.partition("=")
        conv = str if key == "kind" else (float if key.endswith("prob") else int)
        params[key] = tuple(conv(v) for v in values.split(","))
    return params


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m dtrforensics.synth.search",
        description="Search synthetic traces for a feasibility hole plus an overhead "
                    "regime switch (prints the best finding as JSON).")
    ap.add_argument("--seeds", default="0-49", help="seed range A-B (inclusive)")
    ap.add_argument("--param", action="append", default=[],
                    help="KEY=V1,V2,... (SynthSpec field); replaces the default grid "
                         "when given at least once")
    ap.add_argument("--step", default="0.002")
    ap.add_argument("--fine-step", default="0.0005",
                    help="re-check grid step ('none' to skip)")
    ap.add_argument("--lo", default="0.05")
    ap.add_argument("--hi", default="1.0")
    ap.add_argument("--factor", type=float, default=1.25)
    ap.add_argument("--policy", default="dtr")
    ap.add_argument("--time-limit", type=float, default=None)
    ap.add_argument("--stop-after", type=int, default=1)
    args = ap.parse_args(argv)
    a, _, b = args.seeds.partition("-")
    seeds = range(int(a), int(b or a) + 1)
    params = _parse_params(args.param) if args.param else None
    findings = find_hole(seeds, params, lo=args.lo, hi=args.hi, step=args.step,
                         fine_step=None if args.fine_step == "none" else args.fine_step,
                         factor=args.factor, policy=args.policy,
                         time_limit=args.time_limit, stop_after=args.stop_after, verbose=True)
    if not findings:
        print("no trace found", file=sys.stderr)
        return 1
    print(json.dumps([f.to_json() for f in findings], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
