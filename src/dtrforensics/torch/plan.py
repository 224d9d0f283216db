"""`plan`: DTR against PyTorch's own activation checkpointing at the same bytes.

One training step, every way of fitting it into less memory, on one axis:

- the plain step's peak and its floor (`analyses/floor.py`);
- DTR's exact map of the budget axis from the floor to the peak: the
  certificate walk of `sweep/exact.py` (holes, first success, overhead of every
  budget), bounded by runs and seconds and resumable, partial where it stopped
  (what is open, and the command that finishes it);
- each checkpointing option (`torch/checkpointing.py`: per block, SAC, a
  torch.compile knob and solver) recorded for real: its peak and overhead;
- torch.compile's `activation_memory_budget` knob mapped to real peak on a
  grid, refined between two grid points whose recorded plans differ until the
  two knobs are within a tolerance (or the plans are equal), so every change
  of plan shows;
- for a target: the cheapest option that fits, where the target and that
  option's peak lie against DTR's holes, and the knob value that meets it;
- every place where a lower knob gives a higher peak, with the two plans
  diffed (`plan_diff`): the first tensor saved in one and recomputed in the
  other, what is alive at each peak by module, and by how much each part grew.

A plan's folder holds the logs recorded and the DTR sweep; run again with the
same arguments, it records nothing it has and resumes the sweep. PyTorch is
imported only inside the functions that record.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..analyses.floor import Floor, floor
from ..errors import OptionError
from ..jsonsafe import json_safe
from ..sweep.holes import HolesReport
from ..trace.program import CMD_COMPUTE, CMD_GET, CMD_RELEASE, Program

DEFAULT_OPTIONS = ("block", "sac:matmul")
KNOB_STEP = 0.1            # the knob's grid
KNOB_TOLERANCE = 0.01      # refined until adjacent knobs whose plans differ are this close
DEFAULT_SOLVER = "dp"
SOLVERS = ("dp", "greedy", "ilp")
MAX_KNOB_POINTS = 200      # recordings of the knob at most (grid and refinement)
MAX_DIFFS = 4              # inversions diffed (the largest first)
TOP_MODULES = 5            # modules listed at each peak


@dataclass(frozen=True)
class HoleSpan:
    """A DTR hole: budgets [lo, hi] certified to fail, with completions on both sides
    (an edge `open` where uncertified budgets border it)."""
    lo: int
    hi: int
    lo_edge: str            # exact, range-start or open
    hi_edge: str            # exact, range-end or open

    @property
    def width(self) -> int:
        return self.hi - self.lo + 1


@dataclass(frozen=True)
class CurveSpan:
    """Budgets [lo, hi] with one DTR outcome (ok: its overhead), certified."""
    lo: int
    hi: int
    outcome: str
    overhead: float | None


@dataclass(frozen=True)
class DtrMap:
    """DTR's exact map of [floor, peak] for one policy, as far as its walk went."""
    policy: str
    range_bytes: tuple[int, int]
    sweep: Path                     # the sweep folder (resumable)
    first_success: int | None       # the lowest budget certified to complete
    first_success_exact: bool       # every budget below it certified to fail
    first_overhead: float | None    # overhead at the first success
    holes: list[HoleSpan]
    curve: list[CurveSpan]          # the certified partition, adjacent equal outcomes apart
    uncertified_bytes: int          # budgets of the range no run certifies
    complete: bool                  # every byte of the range certified
    ended: str                      # what ended the walk (`sweep.holes.ENDINGS`)
    intervals: int                  # distinct executions certified
    report: HolesReport             # the sweep's own analysis (what finishes it, figures)

    def at(self, budget: int) -> CurveSpan | None:
        """The certified span holding `budget` (None: uncertified or outside the range)."""
        for span in self.curve:
            if span.lo <= budget <= span.hi:
                return span
        return None


@dataclass(frozen=True)
class OptionPoint:
    """One checkpointing option recorded for real: its peak and overhead."""
    text: str                       # as `--option` reads it (`block`, `sac:matmul`, `compile:0.5:dp`)
    label: str                      # in words (`checkpoint each block`)
    kind: str                       # none, block, sac or compile
    knob: float | None              # compile's activation_memory_budget
    peak: int                       # the recorded step's unconstrained peak (bytes)
    overhead: float                 # its compute over the plain step's
    compute: int                    # its log's total op cost
    log: Path
    plan: str                       # SHA-256 of its log: equal plans, equal logs


@dataclass(frozen=True)
class KnobMap:
    """The knob mapped to real peak, sorted by knob."""
    solver: str
    points: list[OptionPoint]
    step: float
    tolerance: float
    refined: int                    # points added between grid points whose plans differ
    changes: int                    # adjacent points with different plans
    unresolved: int                 # changes whose knobs are still wider apart than tolerance
    inversions: int = 0             # adjacent points where the lower knob peaks higher
    stopped: str | None = None      # why refinement stopped with changes unresolved
    #                                 (`--max-seconds`, or the cap on knob points); None when
    #                                 every change is within tolerance


@dataclass(frozen=True)
class PeakModule:
    """Bytes alive at a peak, made by one module in one phase."""
    module: str
    phase: str
    bytes: int


@dataclass(frozen=True)
class PeakView:
    """What is alive at a log's unconstrained peak."""
    peak: int
    op_id: int
    op: str
    module: str | None
    phase: str | None
    by_phase: dict[str, int]        # constant, forward (saved), backward, recompute, ...
    top: list[PeakModule]


@dataclass(frozen=True)
class Decision:
    """One forward output and what each plan does with it: saved (alive when
    backward starts), recomputed (computed again in backward) or dropped."""
    op: str
    module: str | None
    sizes: tuple[int, ...]          # its outputs' bytes (a view's 0)
    index: int                      # its occurrence among the forward ops of that name and sizes
    bytes: int
    low: str                        # in the plan at the lower knob
    high: str                       # in the plan at the higher knob


@dataclass(frozen=True)
class PlanDiff:
    """Two plans of the knob where the lower knob peaks higher."""
    low_knob: float
    high_knob: float
    low_peak: int
    high_peak: int
    first_decision: Decision | None  # the first forward output saved in one, recomputed in the other
    saved_only_low: int             # forward outputs saved only at the lower knob (count)
    saved_only_high: int
    nodes_recomputed_low: list[str]  # the partitioner's forward nodes saved at the higher
    #                                  knob and recomputed at the lower (`OptionRecording.saved`)
    nodes_recomputed_high: list[str]  # saved at the lower knob, recomputed at the higher
    low_at_peak: PeakView
    high_at_peak: PeakView
    growth: dict[str, int]          # bytes at the peak by phase, low less high
    why: str


@dataclass(frozen=True)
class HoleMargin:
    """A DTR budget against DTR's holes: its outcome, inside a hole or not, and the
    distance to the nearest hole edge (None: no hole)."""
    budget: int
    outcome: str                    # ok, a failure, or uncertified
    overhead: float | None
    inside: bool
    hole: HoleSpan | None           # the nearest hole (the one holding it when inside)
    distance: int | None            # bytes to that hole's nearest edge
    complete: bool = True           # DTR's map is complete: no hole is left to find


@dataclass(frozen=True)
class TargetAnswer:
    """What fits a target."""
    target: int
    fits: list[OptionPoint]         # options peaking at or under it, cheapest first
    cheapest: OptionPoint | None
    dtr: HoleMargin                 # DTR run at the target
    cheapest_margin: HoleMargin | None  # DTR run at the cheapest option's peak
    knob: OptionPoint | None        # the highest knob point that fits (least recomputation)


@dataclass(frozen=True)
class PlanResult:
    """`dtrf torch plan`: the step, DTR's map, every option, the knob, a target."""
    spec: str
    folder: Path
    peak: int
    floor: Floor
    compute: int                    # the plain step's compute
    dtr: DtrMap | None              # None when the floor is at or above the peak
    options: list[OptionPoint]
    knob: KnobMap | None
    inversions: list[PlanDiff]      # lower knob, higher peak; the largest first
    target: TargetAnswer | None
    seconds: float
    sets: dict = field(default_factory=dict)   # the factory's keywords the step was built with
    notes: list[str] = field(default_factory=list)
    cost: str = "flops"             # what every overhead is a ratio of: flops or measured

    def to_json(self) -> dict:
        out = asdict(self)
        out["floor"] = self.floor.to_json()
        if self.dtr is not None:
            out["dtr"].pop("report")
            out["dtr"]["holes"] = [{**h, "width": w.width}
                                   for h, w in zip(out["dtr"]["holes"], self.dtr.holes)]
        return json_safe(_jsonable(out))


def _jsonable(value):
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


# --- the plan ---------------------------------------------------------------------------

@dataclass(frozen=True)
class PlanSettings:
    """What decides a plan besides the step: the options, the knob's grid, DTR's walk."""
    options: tuple[str, ...] = DEFAULT_OPTIONS
    knob: bool = True
    knob_step: float = KNOB_STEP
    knob_tolerance: float = KNOB_TOLERANCE
    knob_range: tuple[float, float] = (0.0, 1.0)
    solver: str = DEFAULT_SOLVER
    policy: str = "dtr"
    max_runs: int = 2000
    max_seconds: float | None = None
    jobs: int | None = 1
    cost: str = "flops"

    def validate(self) -> None:
        if not 0 < self.knob_step <= 1:
            raise OptionError(f"--knob-step must be in (0, 1], got {self.knob_step}")
        if not 0 < self.knob_tolerance <= self.knob_step:
            raise OptionError(f"--knob-tolerance must be in (0, --knob-step], got "
                              f"{self.knob_tolerance}")
        lo, hi = self.knob_range
        if not 0.0 <= lo < hi <= 1.0:
            raise OptionError(f"the knob's range must satisfy 0 <= from < to <= 1, got {lo} and {hi}")
        if self.solver not in SOLVERS:
            raise OptionError(f"unknown solver {self.solver!r}; known: {', '.join(SOLVERS)}")
        if self.max_runs < 1:
            raise OptionError("--max-runs must be >= 1")
        if self.max_seconds is not None and not 0 < self.max_seconds < float("inf"):
            raise OptionError("--max-seconds must be a positive number")


def plan(spec: str, folder: str | os.PathLike, *, target: int | None = None,
         ratio: float | None = None, settings: PlanSettings | None = None,
         seed: int = 0, optimizer: str | None = None, autocast: str | None = None,
         **sets) -> PlanResult:
    """Plan SPEC's step into `folder` (made if absent; resumed when it holds the
    same step): see the module doc. `sets`: the factory's keywords as `torch
    record` passes them (batch, seq, --set keys); `target` in bytes, or `ratio`
    of the plain step's peak. Returns a `PlanResult`."""
    started = time.perf_counter()
    settings = settings or PlanSettings()
    settings.validate()
    if target is not None and ratio is not None:
        raise OptionError("give at most one of --target or --ratio")
    deadline = None if settings.max_seconds is None else time.monotonic() + settings.max_seconds
    step = {"spec": spec, "cost": settings.cost, "seed": seed, "sets": sets,
            "optimizer": optimizer, "autocast": autocast}
    folder = _plan_folder(Path(folder), step)
    from .checkpointing import CheckpointOption
    plain = _record(step, CheckpointOption("none"), folder, None)
    program = _load(plain.log)
    bounds = floor(program)
    compute = int(program.op_cost.sum())
    if ratio is not None:
        from .. import validate
        validate.ratio(ratio, "--ratio", bounds.peak)
        target = int(ratio * bounds.peak)
    options, notes = _options(step, folder, settings, plain)
    dtr = _dtr_map(program, bounds, folder, settings, deadline)
    knob = _knob_map(step, folder, settings, plain, deadline) if settings.knob else None
    inversions = _inversions(knob) if knob is not None else []
    answer = None if target is None else _target(target, options, knob, dtr)
    if dtr is None:
        notes.append(f"the floor ({bounds.floor:,} B) is at or above the peak "
                     f"({bounds.peak:,} B): DTR cannot go below the peak")
    return PlanResult(spec, folder, bounds.peak, bounds, compute, dtr, options, knob,
                      inversions, answer, time.perf_counter() - started, dict(sets), notes,
                      settings.cost)


def _options(step: dict, folder: Path, settings: PlanSettings,
             plain: OptionPoint) -> tuple[list[OptionPoint], list[str]]:
    """The plain step and each option recorded; an option that does not apply to
    the model (no repeated block) is left out with a note saying why."""
    from .checkpointing import CheckpointOption, CheckpointOptionError
    options, notes = [plain], []
    for text in settings.options:
        option = CheckpointOption.parse(text)
        try:
            options.append(_record(step, option, folder, plain))
        except CheckpointOptionError as exc:
            notes.append(f"option {text} left out: {exc}")
    return options, notes


def default_folder(spec: str, sets: dict, optimizer: str | None, seed: int) -> Path:
    """recordings/plans/<spec>-<key>/: one folder per step (its parents made)."""
    key = json.dumps([spec, {k: repr(v) for k, v in sorted(sets.items())}, optimizer, seed])
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in spec)
    folder = Path("recordings") / "plans" / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    return folder


def _plan_folder(folder: Path, step: dict) -> Path:
    """The folder, made if absent, keyed by the step it plans: a folder holding
    another step's plan is refused, never mixed."""
    key = {k: ({n: repr(v) for n, v in sorted(step["sets"].items())} if k == "sets" else v)
           for k, v in step.items()}
    doc = folder / "plan.json"
    if folder.exists():
        if not folder.is_dir():
            raise OptionError(f"{folder} is not a folder")
        if doc.exists():
            if json.loads(doc.read_text(encoding="utf-8")) != key:
                raise OptionError(f"{folder} holds the plan of another step: "
                                  "choose another folder")
        elif any(folder.iterdir()):
            raise OptionError(f"{folder} is not empty and holds no plan: choose another folder")
    else:
        from ..fsutil import require_parent
        require_parent(folder)
        folder.mkdir()
    if not doc.exists():
        from ..fsutil import atomic_path
        with atomic_path(doc) as tmp:
            tmp.write_text(json.dumps(key, indent=1), encoding="utf-8")
    return folder


def _load(path: Path) -> Program:
    from ..trace import load_trace
    return load_trace(str(path))


def _record(step: dict, option, folder: Path, plain: OptionPoint | None) -> OptionPoint:
    """The option recorded into the folder (kept: a log already there is read,
    not recorded again), as a point; its overhead against `plain`'s compute."""
    from ..engine.baseline import baseline
    text = str(option)
    path = folder / "options" / f"{text.replace(':', '-').replace('/', '_').replace('@', '-')}.log"
    path.parent.mkdir(exist_ok=True)
    nodes = path.with_name(path.name + ".plan.json")
    if not path.exists() or not nodes.exists():
        from .checkpointing import record_option
        recorded = record_option(step["spec"], option, path, cost=step["cost"],
                                 seed=step["seed"], sets=step["sets"],
                                 optimizer=step["optimizer"], autocast=step["autocast"],
                                 plain=_plain_recording(plain))
        from ..fsutil import atomic_path
        with atomic_path(nodes) as tmp:
            tmp.write_text(json.dumps({"saved": list(getattr(recorded, "saved", ())),
                                       "recomputed": list(getattr(recorded, "recomputed", ()))}),
                           encoding="utf-8")
    program = _load(path)
    compute = int(program.op_cost.sum())
    base = compute if plain is None else plain.compute
    return OptionPoint(text, option.label, option.kind, option.knob,
                       baseline(program).peak, compute / base if base else 1.0, compute,
                       path, _sha256(path))


def _plain_recording(plain: OptionPoint | None):
    """The plain step as `record_option` takes it (its compute is what it reads),
    so that it is not recorded again for each option."""
    if plain is None:
        return None
    from .checkpointing import CheckpointOption, OptionRecording
    return OptionRecording(CheckpointOption("none"), plain.log, None, plain.peak, 0,
                           plain.compute, plain.compute, 0, None, "")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- DTR's map --------------------------------------------------------------------------

def _dtr_map(program: Program, bounds: Floor, folder: Path, settings: PlanSettings,
             deadline: float | None) -> DtrMap | None:
    """The exact walk over [floor, peak] (resumed in `folder/dtr`), as a map."""
    if bounds.floor >= bounds.peak:
        return None
    from ..sweep.holes import analyze
    from ..sweep.runner import run_sweep
    from ..sweep.store import SweepParams
    ratio_from = max(bounds.floor, 1) / bounds.peak
    out = folder / "dtr"
    max_runs = settings.max_runs
    if (out / "sweep.json").exists():   # extended by its finishing command: never cut back
        from ..sweep.holes import open_sweep
        max_runs = max(max_runs, open_sweep(out).params.max_runs)
    params = SweepParams(ratio_from=ratio_from, ratio_to=1.0, policies=(settings.policy,),
                         exact=True, max_runs=max_runs)
    run_sweep(program, params, out, jobs=settings.jobs, deadline=deadline)
    report = analyze(out)
    return dtr_map_of(report, settings.policy)


def dtr_map_of(report, policy: str) -> DtrMap:
    """A sweep's analysis (`sweep.holes.HolesReport`) as DTR's map of its range."""
    p = report.policy(policy)
    x, claim = p.exact, p.certain.first_success
    holes = [HoleSpan(r.lo, r.hi, r.lo_edge, r.hi_edge) for r in x.holes]
    curve = [CurveSpan(i.lo, i.hi, i.outcome, i.overhead)
             for i in sorted(x.partition, key=lambda i: i.lo)]
    return DtrMap(policy, report.range_bytes, report.path, claim.budget, claim.exact,
                  claim.overhead, holes, curve, p.certain.uncertified_bytes,
                  p.certain.complete, report.ended, len(x.partition), report)


# --- the knob ---------------------------------------------------------------------------

def knob_label(knob: float, solver: str) -> str:
    """The option of the compiled step at a knob: `compile:0.5:dp`."""
    return f"compile:{knob:g}:{solver}"


def _knob_map(step: dict, folder: Path, settings: PlanSettings,
              plain: OptionPoint, deadline: float | None = None) -> KnobMap:
    """The knob on its grid, then between adjacent points whose plans differ,
    halved until they are within the tolerance or their plans are equal, or
    until the deadline (`--max-seconds`) or the cap on points: then `stopped`
    says which, and the plan's folder resumes the refinement when run again."""
    from .checkpointing import CheckpointOption

    def at(knob: float) -> OptionPoint:
        option = CheckpointOption.parse(knob_label(knob, settings.solver))
        return _record(step, option, folder, plain)

    lo, hi = settings.knob_range
    n = max(1, round((hi - lo) / settings.knob_step))
    grid = sorted({round(min(hi, lo + i * settings.knob_step), 6) for i in range(n + 1)} | {hi})
    points = {k: at(k) for k in grid}
    refined, stopped = 0, None
    while _wide_changes(points, settings.knob_tolerance) and stopped is None:
        before = len(points)
        for lo, hi in _wide_changes(points, settings.knob_tolerance):
            if len(points) >= MAX_KNOB_POINTS:
                stopped = f"the cap of {MAX_KNOB_POINTS} knob points"
                break
            if deadline is not None and time.monotonic() >= deadline:
                stopped = "--max-seconds"
                break
            mid = round((lo + hi) / 2, 6)
            if mid in points:
                continue
            points[mid] = at(mid)
            refined += 1
        if stopped is None and len(points) == before:
            stopped = "the knob's resolution (1e-6)"
    ordered = [points[k] for k in sorted(points)]
    changes = sum(a.plan != b.plan for a, b in zip(ordered, ordered[1:]))
    return KnobMap(settings.solver, ordered, settings.knob_step, settings.knob_tolerance,
                   refined, changes, len(_wide_changes(points, settings.knob_tolerance)),
                   sum(a.peak > b.peak for a, b in zip(ordered, ordered[1:])), stopped)


def _wide_changes(points: dict[float, OptionPoint], tolerance: float) -> list[tuple[float, float]]:
    """Adjacent knobs whose plans differ and that are wider apart than `tolerance`."""
    knobs = sorted(points)
    return [(a, b) for a, b in zip(knobs, knobs[1:])
            if points[a].plan != points[b].plan and b - a > tolerance + 1e-9]


def _inversions(knob: KnobMap) -> list[PlanDiff]:
    """Each adjacent pair of knob points where the lower knob peaks higher, diffed;
    the largest increases first (at most `MAX_DIFFS`)."""
    pts = knob.points
    pairs = [(a, b) for a, b in zip(pts, pts[1:]) if a.peak > b.peak]
    pairs.sort(key=lambda ab: ab[1].peak - ab[0].peak)
    return [plan_diff(a, b) for a, b in pairs[:MAX_DIFFS]]


# --- two plans diffed --------------------------------------------------------------------

def plan_diff(low: OptionPoint, high: OptionPoint) -> PlanDiff:
    """Two plans (logs) of one step: the first forward output saved in one and
    recomputed in the other, what is alive at each one's peak, and why `low`'s
    peak is higher."""
    a, b = _load(low.log), _load(high.log)
    da, db = forward_decisions(a), forward_decisions(b)
    first = None
    for key, (status, module, size) in da.items():
        other = db.get(key, ("absent", None, 0))[0]
        if {status, other} == {"saved", "recomputed"}:
            first = Decision(key[0], module, key[1], key[2], size, status, other)
            break
    saved_a = {k for k, v in da.items() if v[0] == "saved"}
    saved_b = {k for k, v in db.items() if v[0] == "saved"}
    pa, pb = peak_view(a), peak_view(b)
    growth = {ph: pa.by_phase.get(ph, 0) - pb.by_phase.get(ph, 0)
              for ph in sorted(set(pa.by_phase) | set(pb.by_phase))}
    na, nb = _nodes(low.log), _nodes(high.log)
    return PlanDiff(low.knob, high.knob, low.peak, high.peak, first, len(saved_a - saved_b),
                    len(saved_b - saved_a),
                    sorted(set(nb["saved"]) & set(na["recomputed"])),
                    sorted(set(na["saved"]) & set(nb["recomputed"])),
                    pa, pb, growth, _why(low, high, pa, pb, growth))


def _nodes(log: Path) -> dict[str, list[str]]:
    """The partitioner's plan beside a compiled step's log: forward nodes saved and
    recomputed (empty for other options)."""
    path = log.with_name(log.name + ".plan.json")
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {
        "saved": [], "recomputed": []}


def _why(low: OptionPoint, high: OptionPoint, pa: PeakView, pb: PeakView,
         growth: dict[str, int]) -> str:
    """One sentence: where each peak is, and which part of it grew most."""
    where = (f"at knob {low.knob:g} the peak is at {pa.op} ({pa.phase}"
             + (f", {pa.module}" if pa.module else "") + f"), at knob {high.knob:g} at "
             f"{pb.op} ({pb.phase}" + (f", {pb.module}" if pb.module else "") + ")")
    grown = sorted(((v, k) for k, v in growth.items() if v > 0), reverse=True)
    parts = ", ".join(f"{k} tensors +{v:,} B" for v, k in grown) or "no part grew"
    return f"{where}; alive at the peak: {parts}"


def _tainted(program: Program) -> list[bool]:
    """Per storage: made in backward from a gradient (the first backward op, the
    seed, and everything computed from it). A backward op reading no such storage
    computes again from forward values: a recomputation."""
    storage = program.tensor_storage.tolist()
    backward = program.op_backward.tolist()
    taint = [False] * program.n_tensors
    seeded = False
    for kind, op in zip(program.sched_kind.tolist(), program.sched_arg.tolist()):
        if kind != CMD_COMPUTE or not backward[op] or program.is_constant(op):
            continue
        hot = not seeded or any(taint[storage[t]] for t in program.op_args_of(op).tolist())
        seeded = True
        for t in program.op_outputs_of(op):
            taint[storage[t]] = taint[storage[t]] or hot
    return taint


def op_role(program: Program, op: int, taint: list[bool]) -> str:
    """constant, forward, recompute (backward, from forward values) or backward."""
    if program.is_constant(op):
        return "constant"
    if not program.op_backward[op]:
        return "forward"
    first = int(program.op_first_tensor[op])
    n = int(program.op_n_outputs[op])
    hot = any(taint[int(program.tensor_storage[t])] for t in range(first, first + n))
    return "backward" if hot or n == 0 else "recompute"


def _key(program: Program, op: int) -> tuple[str, tuple[int, ...]]:
    sizes = tuple(int(program.tensor_size[t]) for t in program.op_outputs_of(op))
    return program.op_name(op), sizes


def _live(program: Program):
    """Walk the log's schedule: yield each computed op with the storages alive
    just before it runs (one set, updated in place as the walk goes on)."""
    storage = program.tensor_storage.tolist()
    refs = [0] * program.n_tensors
    alive: set[int] = set()
    for kind, arg in zip(program.sched_kind.tolist(), program.sched_arg.tolist()):
        if kind == CMD_COMPUTE:
            yield arg, alive
            for t in program.op_outputs_of(arg):
                refs[storage[t]] += 1
                alive.add(storage[t])
        elif kind == CMD_GET:
            refs[storage[arg]] += 1
        elif kind == CMD_RELEASE:
            refs[storage[arg]] -= 1
            if refs[storage[arg]] == 0:
                alive.discard(storage[arg])


def forward_decisions(program: Program) -> dict[tuple, tuple[str, str | None, int]]:
    """Each forward op's outputs, keyed (op name, output sizes, occurrence), in
    forward order: saved (alive when backward starts), recomputed (computed again
    in backward from forward values) or dropped; with its module and bytes."""
    storage = program.tensor_storage.tolist()
    alive: set[int] = set()
    order: list[int] = []
    for op, live in _live(program):
        if program.op_backward[op]:
            alive = set(live)
            break
        if not program.is_constant(op):
            order.append(op)
    else:
        alive = set(live) if program.n_ops else set()
    taint = _tainted(program)
    again: dict[tuple, int] = {}
    for op in range(program.n_ops):
        if program.op_backward[op] and op_role(program, op, taint) == "recompute":
            again[_key(program, op)] = again.get(_key(program, op), 0) + 1
    out: dict[tuple, tuple[str, str | None, int]] = {}
    seen: dict[tuple, int] = {}
    for op in order:
        if int(program.op_total_size[op]) == 0:     # a view: no bytes of its own to save
            continue
        name, sizes = _key(program, op)
        n = seen[(name, sizes)] = seen.get((name, sizes), -1) + 1
        outs = {storage[t] for t in program.op_outputs_of(op)}
        if outs & alive:
            status = "saved"
        elif again.get((name, sizes), 0) > 0:
            again[(name, sizes)] -= 1
            status = "recomputed"
        else:
            status = "dropped"
        out[(name, sizes, n)] = (status, program.op_where(op), int(program.op_total_size[op]))
    return out


def peak_view(program: Program) -> PeakView:
    """What is alive just after the op where the unconstrained run peaks."""
    from ..engine.baseline import baseline
    base = baseline(program)
    size = program.tensor_size.tolist()
    alive: set[int] = set()
    storage = program.tensor_storage.tolist()
    for op, live in _live(program):
        if op == base.peak_op_id:         # alive just after it: its outputs too
            alive = live | {storage[t] for t in program.op_outputs_of(op)}
            break
    taint = _tainted(program)
    by_phase: dict[str, int] = {}
    by_module: dict[tuple[str, str], int] = {}
    for s in alive:
        maker = int(program.tensor_op[s])
        role = op_role(program, maker, taint)
        by_phase[role] = by_phase.get(role, 0) + size[s]
        key = (program.op_where(maker) or program.op_name(maker), role)
        by_module[key] = by_module.get(key, 0) + size[s]
    top = sorted(by_module.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_MODULES]
    op = base.peak_op_id
    return PeakView(base.peak, op, program.op_name(op), program.op_where(op),
                    op_role(program, op, taint), by_phase,
                    [PeakModule(m, r, b) for (m, r), b in top])


# --- a target -----------------------------------------------------------------------------

def hole_margin(dtr: DtrMap | None, budget: int) -> HoleMargin:
    """DTR at `budget`: its certified outcome, and the nearest hole."""
    if dtr is None:
        return HoleMargin(budget, "fail", None, False, None, None)
    partial = not dtr.complete
    span = dtr.at(budget)
    lo, hi = dtr.range_bytes
    outcome = ("ok" if budget > hi else "below-floor" if budget < lo
               else span.outcome if span is not None else "uncertified")
    overhead = span.overhead if span is not None else (1.0 if budget > hi else None)
    best: tuple[int, HoleSpan] | None = None
    for h in dtr.holes:
        inside = h.lo <= budget <= h.hi
        d = min(budget - h.lo, h.hi - budget) + 1 if inside else (
            h.lo - budget if budget < h.lo else budget - h.hi)
        if inside:
            return HoleMargin(budget, outcome, overhead, True, h, d, not partial)
        if best is None or d < best[0]:
            best = (d, h)
    return HoleMargin(budget, outcome, overhead, False, best and best[1], best and best[0],
                      not partial)


def _target(target: int, options: list[OptionPoint], knob: KnobMap | None,
            dtr: DtrMap | None) -> TargetAnswer:
    every = options + (knob.points if knob is not None else [])
    every = list({o.text: o for o in reversed(every)}.values())   # an option also a knob point once
    fits = sorted((o for o in every if o.peak <= target), key=lambda o: (o.overhead, o.peak))
    cheapest = fits[0] if fits else None
    knob_fits = [p for p in (knob.points if knob is not None else []) if p.peak <= target]
    return TargetAnswer(target, fits, cheapest, hole_margin(dtr, target),
                        hole_margin(dtr, cheapest.peak) if cheapest is not None else None,
                        max(knob_fits, key=lambda p: p.knob) if knob_fits else None)
