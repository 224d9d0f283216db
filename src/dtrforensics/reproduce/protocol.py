"""The studies' protocol, run by our own analyses: every claim computed, never typed in.

`reproduce(quick=...)` returns a `Reproduction`: one `Claim` per published
number (claims.py says how each is judged) and the material the report's
figures are drawn from. `quick` keeps the claims that need only short runs
(ResNet-32 and U-Net: about a minute); the full protocol adds the LSTM and
InceptionV4 claims.

Every replay goes through `Lab`, which loads each trace once, keeps every
summary it computed, and records (or sweeps) into one working folder so a
second reproduction reuses the first one's recordings and sweeps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import concepts as K
from ..analyses.oom import explain_oom
from ..engine.replay import Interventions, replay, resolve_budget
from ..recorder.reader import Recording, open_recording
from . import claims as C

Progress = Callable[[str], None]


class Lab:
    """Runs, recordings and sweeps of the protocol, each made once; `material`
    keeps what the report's figures are drawn from."""

    def __init__(self, workdir: Path, progress: Progress | None = None, policy: str = "dtr"):
        self.workdir = Path(workdir)
        self.policy = policy            # the policy the studies' DTR claims are computed with
        self.progress = progress or (lambda _msg: None)
        self.material: dict[str, object] = {}
        self._programs: dict[str, object] = {}
        self._summaries: dict[tuple[str, int, str], object] = {}

    def program(self, trace: str):
        if trace not in self._programs:
            from ..trace import load_trace
            self.progress(f"loading {trace}")
            self._programs[trace] = load_trace(trace)
        return self._programs[trace]

    def budget(self, trace: str, ratio: float) -> int:
        return resolve_budget(self.program(trace), None, ratio)[0]

    def summary(self, trace: str, ratio: float, policy: str | None = None):
        """The run summary (engine/summary.RunSummary) of TRACE at RATIO."""
        policy = policy or self.policy
        key = (trace, self.budget(trace, ratio), policy)
        if key not in self._summaries:
            self.progress(f"replaying {trace} at {ratio} ({policy})")
            self._summaries[key] = replay(self.program(trace), ratio=ratio, policy=policy).summary
        return self._summaries[key]

    def recording(self, trace: str, ratio: float, policy: str | None = None) -> Recording:
        """TRACE at RATIO recorded into the working folder once (`analyses.runs.record_spec`)."""
        from ..analyses.runs import RunSpec, record_spec
        return record_spec(RunSpec(trace, ratio, policy or self.policy), cache=self.workdir / "recordings",
                           on_record=lambda spec, _folder: self.progress(f"recording {spec}"))

    def sweep(self, trace: str, ratio_from: float, ratio_to: float, *,
              step: float | None = None, policies: tuple[str, ...] | None = None):
        """A sweep (a grid with `step`, else the exact certificate walk) into the
        working folder, resumed when present; returns its HolesReport."""
        from ..recorder.record import policy_label
        from ..sweep.holes import analyze
        from ..sweep.runner import run_sweep
        from ..sweep.store import SweepParams
        policies = policies or (self.policy,)
        params = SweepParams(ratio_from=ratio_from, ratio_to=ratio_to, step=step,
                             policies=policies, exact=step is None, max_runs=5000)
        kind = f"step{step}" if step else "exact"
        out = self.workdir / "sweeps" / f"{trace}-{ratio_from}-{ratio_to}-{kind}-{'+'.join(map(policy_label, policies))}"
        self.progress(f"sweeping {trace} over {ratio_from}-{ratio_to} "
                      f"({'step ' + str(step) if step else 'exact'}; {', '.join(policies)})")
        run_sweep(self.program(trace), params, out)
        return analyze(out)

    def exact_map(self, trace: str, ratio_from: float, ratio_to: float,
                  policy: str | None = None):
        """The certified partition of [ratio_from, ratio_to] (sweep --exact)."""
        policy = policy or self.policy
        return self.sweep(trace, ratio_from, ratio_to, policies=(policy,)).policy(policy).exact


def op_timeline(recording: Path) -> list[dict]:
    """Per op: most resident and pinned bytes and the deepest nesting (`queries/run/op_timeline`)."""
    from ..analyses.runs import open_together
    from ..rows import fetch_dicts
    con, (run_id,) = open_together([open_recording(recording)])
    try:
        return fetch_dicts(con, "SELECT op_id, memory_max, pinned_max, depth_max FROM op_timeline "
                                "WHERE run_id = ? ORDER BY op_id", [run_id])
    finally:
        con.close()


def _bytes(n: int) -> str:
    return f"{n:,} B"


def _hole_note(view, lo_budget: int, hi_budget: int) -> str:
    """The certified failing region(s) within [lo_budget, hi_budget], byte-exact."""
    regions = [r for r in view.failure_regions if r.lo <= hi_budget and r.hi >= lo_budget]
    if not regions:
        return ""
    texts = [f"{_bytes(r.lo)}-{_bytes(r.hi)} ({r.hi - r.lo + 1:,} B wide, "
             f"{r.intervals} distinct executions)" for r in regions]
    return f"certified failing budgets: {'; '.join(texts)}; coverage {view.coverage:.0%}"


# --- ResNet-32 (both studies) ---------------------------------------------------------

RESNET_HOLE = (0.101, 0.102, 0.103, 0.104, 0.105, 0.106, 0.107)
RESNET_MAP = (0.095, 0.115)


def _resnet_map_note(view, peak: int, ok_below: int, ok_above: int) -> str:
    """What the certified map adds: the hole's byte edges, the micro-holes below
    it and the failing intervals above it in its fringe (`concepts.fringes`)."""
    regions = sorted(view.failure_regions, key=lambda r: r.lo)
    main = max((r for r in regions if ok_below < r.lo <= r.hi < ok_above),
               key=lambda r: r.hi - r.lo, default=None)
    if main is None:
        return ""
    below = [r for r in regions if r.hi < main.lo and r.hole and K.is_micro(r.hi - r.lo + 1, peak)]
    at = regions.index(main)
    last = next((b for a, b in K.fringes([(r.lo, r.hi) for r in regions], peak)
                 if a <= at <= b), at)
    above = regions[at + 1:last + 1]
    parts = [f"the hole is exactly {_bytes(main.lo)}-{_bytes(main.hi)} "
             f"({main.hi - main.lo + 1:,} B; {main.lo - 1:,} B completes)"]
    if below:
        widths = ", ".join(f"{_bytes(r.lo)}-{_bytes(r.hi)}" for r in below[:4])
        parts.append(f"{len(below)} micro-hole(s) below it ({widths}"
                     f"{', ...' if len(below) > 4 else ''})")
    if above:
        parts.append(f"a fringe of {len(above)} failing interval(s) within "
                     f"{above[-1].hi - main.hi:,} B above it")
    parts.append(f"map of {RESNET_MAP[0]}-{RESNET_MAP[1]} certified at {view.coverage:.0%}")
    return "; ".join(parts)


def resnet32(lab: Lab, *, exact_map: bool) -> list[C.Claim]:
    study = C.HOLES_STUDY
    s = {r: lab.summary("resnet32", r) for r in RESNET_HOLE + (0.111,)}
    note = ""
    if exact_map:
        sweep = lab.sweep("resnet32", *RESNET_MAP)
        lab.material["resnet32_map"] = sweep
        view = sweep.policy(lab.policy).exact
        note = _resnet_map_note(view, sweep.trace.peak, s[0.101].budget, s[0.107].budget)
    out = [C.claim("resnet32.hole", study, "ResNet-32 outcomes across the hole",
                   "0.101 ok, 0.102-0.106 oom, 0.107 ok",
                   C.outcomes_text(RESNET_HOLE, [s[r].outcome for r in RESNET_HOLE]),
                   sharper_note=note)]
    for r, published in ((0.107, "2.077x"), (0.111, "3.212x")):
        out.append(C.claim(f"resnet32.overhead_{r}", study, f"ResNet-32 overhead at {r}",
                           published, C.overhead_text(s[r].overhead, 3)))
    oom = s[0.104].oom
    out += [
        C.claim("resnet32.oom_0.104.pinned", study, "ResNet-32 OOM at 0.104: pinned bytes",
                "889.8 MB", C.megabytes(oom.pinned) if oom else "no OOM",
                note=(f"{oom.pinned:,} B = {oom.pinned / (1 << 20):.2f} MiB (the study writes "
                      "decimal MB)") if oom else ""),
        C.claim("resnet32.oom_0.104.request", study, "ResNet-32 OOM at 0.104: the request",
                "179.8 MB", C.megabytes(oom.request) if oom else "no OOM",
                note=(f"{oom.request:,} B = {oom.request / (1 << 20):.2f} MiB (the study writes "
                      "decimal MB)") if oom else ""),
        C.claim("resnet32.oom_0.104.depth", study, "ResNet-32 OOM at 0.104: nesting depth",
                "118", str(oom.depth) if oom else "no OOM"),
        C.claim("resnet32.depth_at_peak_pinned", study,
                "ResNet-32 depth at peak pinned memory at 0.101 / 0.104 / 0.107",
                "8 / 118 / 30", " / ".join(str(s[r].max_pinned.depth) for r in (0.101, 0.104, 0.107))),
    ]
    return out + resnet32_retention(lab, s[0.104])


def resnet32_retention(lab: Lab, failing) -> list[C.Claim]:
    """The storage evicted five operators before the failure: retaining it completes
    the run; the control (same code path, nothing retained) fails as the plain run."""
    from ..analyses.explain import explain
    from ..analyses.interventions import intervene
    study = C.HOLES_STUDY
    program = lab.program("resnet32")
    found = explain(program, ratio=0.104, policy=lab.policy, stop_after_fixes=1, jobs=1,
                    kinds=("retain",),
                    record_root=lab.workdir / "runs")
    fix = found.fixes[0] if found.fixes else None
    if fix is None:
        return [C.claim("resnet32.retention", study, "ResNet-32 0.104: a retention completes it",
                        "completes at 2.24x", "no retention found")]
    (storage,) = fix.retain
    runs = intervene(program, Interventions(retain=(storage,)), ratio=0.104, policy=lab.policy,
                     record_root=lab.workdir / "runs")
    lab.material["resnet32_retention"] = {
        "storage": storage,
        "timelines": {label: op_timeline(run.recording) for label, run in (
            ("baseline", runs.baseline), ("intervention", runs.intervention),
            ("control", runs.control))}}
    lab.material["resnet32_oom"] = explain_oom(open_recording(runs.baseline.recording))
    evicted_at = next(c.last_evicted_op for c in found.candidates if c.storage == storage)
    before = failing.oom.op_id - evicted_at
    return [
        C.claim("resnet32.retention.when", study,
                "ResNet-32 0.104: the retained storage was evicted N operators before the failure",
                "5", str(before), note=f"storage {storage}, evicted at op id {evicted_at}, "
                                       f"failure at op id {failing.oom.op_id}"),
        C.claim("resnet32.retention.overhead", study,
                "ResNet-32 0.104 with that storage retained", "2.24x",
                C.overhead_text(fix.summary["overhead"])),
        C.claim("resnet32.retention.control", study, "ResNet-32 0.104: the control",
                "oom", str(found.control_outcome),
                note="control reproduces the plain run exactly" if found.control_matches
                else "control does NOT reproduce the plain run"),
    ]


# --- U-Net (holes study) --------------------------------------------------------------

UNET_HOLE = (0.431, 0.432, 0.433, 0.434, 0.435, 0.436)


def unet(lab: Lab) -> list[C.Claim]:
    study = C.HOLES_STUDY
    s = {r: lab.summary("unet", r) for r in UNET_HOLE + (0.42,)}
    view = lab.exact_map("unet", UNET_HOLE[0], UNET_HOLE[-1])
    note = _hole_note(view, s[0.431].budget, s[0.436].budget)
    return [
        C.claim("unet.hole", study, "U-Net outcomes across its hole",
                "0.431 ok, 0.432-0.435 oom, 0.436 ok",
                C.outcomes_text(UNET_HOLE, [s[r].outcome for r in UNET_HOLE]), sharper_note=note),
        C.claim("unet.grid_0.42", study, "U-Net at the grid point 0.42", "oom", s[0.42].outcome),
    ]


# --- LSTM (regime study) --------------------------------------------------------------

LSTM_POINTS = {0.266: "10.10x", 0.265: "1.38x", 0.264: "8.78x", 0.262: "1.39x"}
LSTM_GRID = (0.255, 0.275)


def lstm(lab: Lab) -> list[C.Claim]:
    from ..analyses.reevict import reevict
    from ..sweep.holes import analyze
    study = C.REGIME_STUDY
    ratios = (0.262, 0.263, 0.264, 0.265, 0.266)
    s = {r: lab.summary("lstm", r) for r in ratios}
    out = [C.claim(f"lstm.overhead_{r}", study, f"LSTM overhead at {r}", published,
                   C.overhead_text(s[r].overhead)) for r, published in LSTM_POINTS.items()]
    pairs = [(a, b) for a, b in zip(ratios, ratios[1:])
             if s[a].overhead is not None and s[b].overhead is not None]
    jump, (a, b) = max((K.overhead_factor(s[a].overhead, s[b].overhead), (a, b))
                       for a, b in pairs)
    out.append(C.claim("lstm.max_jump", study,
                       "LSTM: largest overhead ratio between budgets 0.1% of peak apart",
                       "7.3x", f"{jump:.1f}x", note=f"between {a} and {b}"))
    ablations = ("no-staleness", "no-size", "compute-only")
    grid = lab.sweep("lstm", *LSTM_GRID, step=0.001, policies=(lab.policy,) + ablations)
    lab.material["lstm_grid"] = grid
    doubling = {p.policy: len(p.regime_switches)
                for p in analyze(grid.path, threshold=K.DOUBLING).policies}
    default = {p.policy: len(p.regime_switches) for p in grid.policies}
    out.append(C.claim(
        "lstm.ablations_alternate", study,
        "LSTM: the ablations without staleness, without size and compute-only alternate "
        "between regimes (two or more overhead jumps of more than 2x between neighbouring "
        "budgets)", "no / no / no",
        " / ".join("yes" if doubling[p] > 1 else "no" for p in ablations),
        note=f"regime switches over {LSTM_GRID[0]}-{LSTM_GRID[1]} at step 0.001, jumps of "
             f"more than {1 + K.DOUBLING:g}x: " + ", ".join(f"{p} {n}" for p, n in doubling.items())
             + f"; jumps of more than {grid.threshold:.0%}: "
             + ", ".join(f"{p} {n}" for p, n in default.items())))
    figures = reevict([lab.recording("lstm", 0.265), lab.recording("lstm", 0.264)])
    fast, slow = (run.stream for run in figures.runs)
    out += [
        C.claim("lstm.evictions_per_storage", study,
                "LSTM evictions per storage at 0.265 / 0.264 (whole stream)", "1.33 / 8.27",
                f"{fast.mean_per_storage:.2f} / {slow.mean_per_storage:.2f}"),
        C.claim("lstm.distinct_storages", study,
                "LSTM distinct evicted storages at 0.265 / 0.264", "5,233 / 5,236",
                f"{fast.distinct_storages:,} / {slow.distinct_storages:,}"),
        C.claim("lstm.jaccard", study, "LSTM Jaccard overlap of the evicted sets",
                "0.999", f"{figures.overlap['stream'].jaccard:.3f}"),
    ]
    return out


# --- InceptionV4 (both studies) -------------------------------------------------------

def inceptionv4(lab: Lab) -> list[C.Claim]:
    from ..analyses.diff import diff
    from ..analyses.interventions import intervene
    from ..analyses.regime import regime
    study = C.HOLES_STUDY
    ok, bad = lab.summary("inceptionv4", 0.2343), lab.summary("inceptionv4", 0.235)
    out = [C.claim("inceptionv4.outcomes", study, "InceptionV4 at 0.2343 / 0.235",
                   "ok / oom", f"{ok.outcome} / {bad.outcome}")]
    rec_ok, rec_bad = lab.recording("inceptionv4", 0.2343), lab.recording("inceptionv4", 0.235)
    report = diff(rec_ok, rec_bad)
    lab.material["inceptionv4_regime"] = regime(rec_ok, rec_bad)
    first = report.first_divergence
    out.append(C.claim("inceptionv4.divergence", study,
                       "InceptionV4 0.2343 vs 0.235: shared evictions, then the operator where "
                       "they differ", "13, operator 945",
                       f"{report.common_prefix}, operator {first.op_id + 1}" if first else "identical",
                       note=f"cause: {first.cause}" if first else ""))
    oom = explain_oom(rec_bad)
    out += [
        C.claim("inceptionv4.oom.operator", study, "InceptionV4 0.235 fails at operator",
                "2,270", f"{oom.paper_op:,}"),
        C.claim("inceptionv4.oom.max_depth", study, "InceptionV4 0.235: maximum nesting",
                "193", str(oom.max_depth)),
        C.claim("inceptionv4.oom.depth_at_peak_pinned", study,
                "InceptionV4 0.235: depth at peak pinned memory", "188",
                str(oom.depth_at_peak_pinned)),
        C.claim("inceptionv4.oom.pinned", study, "InceptionV4 0.235: pinned bytes",
                "2.63 GB", C.gigabytes(oom.peak_pinned or 0), note=f"{oom.peak_pinned:,} B"),
    ]
    program = lab.program("inceptionv4")
    kept = intervene(program, Interventions(retain=(3131,)), ratio=0.235, policy=lab.policy,
                     record_root=lab.workdir / "runs")
    fixed = kept.intervention.summary
    out += [
        C.claim("inceptionv4.storage_3131", study, "InceptionV4: storage 3131, its size and maker",
                "247,775,232 B, operator 2,266",
                f"{int(program.tensor_size[3131]):,} B, operator {int(program.tensor_op[3131]) + 1:,}"),
        C.claim("inceptionv4.retain_3131.overhead", study,
                "InceptionV4 0.235 with storage 3131 retained", "1.477x",
                C.overhead_text(fixed["overhead"], 3),
                note=f"control {'reproduces' if kept.control_matches else 'does NOT reproduce'} "
                     "the failing run"),
        C.claim("inceptionv4.retain_3131.pinned", study,
                "InceptionV4 0.235, 3131 retained: peak pinned bytes", "0.99 GB",
                C.gigabytes(fixed["max_pinned"]["bytes"])),
        C.claim("inceptionv4.retain_3131.depth", study,
                "InceptionV4 0.235, 3131 retained: maximum nesting depth", "30",
                str(fixed["max_depth"]),
                note=f"depth at its peak pinned memory: {fixed['max_pinned']['depth']}"),
    ]
    return out


# --- score variants the studies name but do not define --------------------------------

def undefined_variants() -> list[C.Claim]:
    why = ("the study names this score variant but does not define its formula; no "
           "faithful definition exists to run it again")
    return [C.Claim(f"holes.variant.{name}", C.HOLES_STUDY,
                    f"the score variant '{label}' does not remove the holes", "does not help",
                    "-", C.NOT_REPRODUCIBLE, why)
            for name, label in (("nbhd_penalty", "NbhdPenalty"),
                                ("t_control", "T-Control-inspired"))]


# --- the whole protocol ---------------------------------------------------------------

@dataclass
class Reproduction:
    quick: bool
    claims: list[C.Claim] = field(default_factory=list)
    material: dict[str, object] = field(default_factory=dict)   # what the figures draw

    def counts(self) -> dict[str, int]:
        return {v: sum(c.verdict == v for c in self.claims) for v in C.VERDICTS}

    def to_json(self) -> dict:
        return {"quick": self.quick, "counts": self.counts(),
                "claims": [c.to_json() for c in self.claims]}


def reproduce(*, quick: bool = False, workdir: Path = Path("recordings") / "reproduce",
              progress: Progress | None = None, policy: str = "dtr") -> Reproduction:
    """Run the protocol (the quick subset, or all of it) and judge every claim.
    `policy` stands in for DTR in every claim about DTR (the ablation claims
    keep their ablations): do the studies' findings hold under it?"""
    lab = Lab(workdir, progress, policy)
    out = Reproduction(quick=quick)
    out.claims += resnet32(lab, exact_map=not quick)
    out.claims += unet(lab)
    if not quick:
        out.claims += lstm(lab)
        out.claims += inceptionv4(lab)
    out.claims += undefined_variants()
    out.material = lab.material
    return out
