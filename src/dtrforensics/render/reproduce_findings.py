"""`docs/findings.md`: the open questions of the two studies, answered from exact maps.

Rendering only: every number comes from `reproduce.findings.read.Findings`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..concepts import completes
from ..fsutil import atomic_path
from ..reproduce import claims as C
from ..reproduce.findings import plan as P
from ..reproduce.findings.read import Findings, GridFindings, MapFindings

LIST_LIMIT = 12     # regions, switches, gaps listed per map (the rest are counted)


def _b(n: int) -> str:
    return f"{n:,}"


def _r(m: MapFindings, budget: int) -> str:
    return f"{budget / m.peak:.5f}"


def _state(m: MapFindings) -> str:
    return "complete" if m.complete else f"partial ({m.coverage:.2%})"


def _more(items: list, shown: int) -> list[str]:
    return [f"- ... and {len(items) - shown} more"] if len(items) > shown else []


def _partial(m: MapFindings) -> str:
    """A partial map, its coverage and what it may still need."""
    narrow = f" {m.spec.ratio_from:g}-{m.spec.ratio_to:g}" if m.spec.group in ("window", "knob") \
        else ""   # several maps of one trace and policy: the range tells them apart
    text = f"{m.spec.name} {m.spec.policy_name}{narrow} {m.coverage:.1%}"
    left = m.remaining
    if left is None:
        return text
    hours = left.run_seconds / 3600
    pace = (f"{hours:,.1f} hours of replay" if hours >= 0.1
            else f"{left.run_seconds:,.0f} s of replay")
    unknown = (f"{_b(left.unknown_bytes)} B with grid points that timed out"
               if left.unknown_bytes else "")
    if not left.executions:
        return f"{text}: {unknown}" if unknown else text
    return f"{text}: about {_b(left.executions)} executions left, {pace}" + (
        f", and {unknown}" if unknown else "")


def _summary_table(maps: list[MapFindings]) -> list[str]:
    out = ["| trace | policy | range | certified | distinct executions | failure regions | "
           "holes (micro) | fringes | feasibility switches | regime switches (> 2x) | "
           "slowest run | wall time |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for m in maps:
        micro = len(m.micro_holes())
        out.append(
            f"| {m.spec.name} | {m.spec.policy_name} | {m.spec.ratio_from:g}-{m.spec.ratio_to:g} | "
            f"{_state(m)} | {_b(m.executions)} | {len(m.regions)} | {len(m.holes)} ({micro}) | "
            f"{len(m.fringes)} | {m.feasibility_switches} | {len(m.regime_switches)} | "
            f"{m.slowest_run:.1f} s | {m.seconds:.0f} s |")
    return out


def _edges(m: MapFindings, r) -> str:
    """Each edge of a failure region: byte-exact, the end of the mapped range, or
    open (uncertified budgets next to it); and the uncertified bytes it spans."""
    if r.lo_exact and r.hi_exact:
        both = "exact"
    else:
        def side(exact: bool, at_end: bool, end: str) -> str:
            return "exact" if exact else end if at_end else "open"
        both = (f"below: {side(r.lo_exact, r.lo == m.range_bytes[0], 'range start')}, "
                f"above: {side(r.hi_exact, r.hi == m.range_bytes[1], 'range end')}")
    return both + (f"; {_b(r.gap_bytes)} B inside uncertified" if r.gap_bytes else "")


def _map_detail(m: MapFindings) -> list[str]:
    out = [f"#### {m.spec.name}, {m.spec.policy_name}, {m.spec.ratio_from:g}-{m.spec.ratio_to:g}", "",
           f"Peak {_b(m.peak)} B; budgets {_b(m.range_bytes[0])}-{_b(m.range_bytes[1])} B; "
           f"{_state(m)}, {_b(m.executions)} distinct executions.", ""]
    if m.regions:
        out += ["| failing budgets (B) | ratio | width (B) | executions | outcomes | hole | edges |",
                "|---|---|---|---|---|---|---|"]
        for r in m.regions[:LIST_LIMIT]:
            out.append(f"| {_b(r.lo)}-{_b(r.hi)} | {_r(m, r.lo)}-{_r(m, r.hi)} | "
                       f"{_b(r.hi - r.lo + 1)} | {r.intervals} | {r.outcomes} | "
                       f"{'yes' if r.hole else 'no'} | {_edges(m, r)} |")
        out += _more(m.regions, LIST_LIMIT) + [""]
    else:
        out += ["No certified failing budget.", ""]
    for fr in m.fringes[:LIST_LIMIT]:
        out.append(f"- fringe {_b(fr.lo)}-{_b(fr.hi)} B ({_r(m, fr.lo)}-{_r(m, fr.hi)}): "
                   f"{fr.regions} failure regions, {fr.switches} feasibility switches within "
                   f"{_b(fr.hi - fr.lo + 1)} B")
    out += _more(m.fringes, LIST_LIMIT)
    for budget, below, above in m.regime_switches[:LIST_LIMIT]:
        out.append(f"- regime switch at {_b(budget)} B ({_r(m, budget)}): overhead "
                   f"{below:.2f}x below, {above:.2f}x from there")
    out += _more(m.regime_switches, LIST_LIMIT)
    for g in m.gaps[:LIST_LIMIT]:
        out.append(f"- uncertified {_b(g.lo)}-{_b(g.hi)} B ({_r(m, g.lo)}-{_r(m, g.hi)}), "
                   f"{g.reason}" + (f", {g.timeouts} timed-out runs" if g.timeouts else ""))
    out += _more(m.gaps, LIST_LIMIT)
    return out + [""]


def _grid_table(grids: dict[str, GridFindings]) -> list[str]:
    out = ["| trace | points with an outcome | ok | failing | without an outcome | hole on the grid | "
           "failing ratios | slowest run | wall time |", "|---|---|---|---|---|---|---|---|---|"]
    for t, g in grids.items():
        grid = g.as_grid()
        failing = [r for r, _, o in grid if o is not None and not completes(o)]
        shown = _runs_of_ratios(failing, [r for r, _, _ in grid])
        out.append(f"| {t} | {g.planned - g.unresolved} of {g.planned} | "
                   f"{sum(completes(o) for _, _, o in grid)} | {len(failing)} | {g.unresolved} | "
                   f"{'yes' if g.hole else 'no'} | {shown or '-'} | {g.slowest:.1f} s | "
                   f"{g.seconds:.0f} s |")
    return out + [""]


def _runs_of_ratios(chosen: list[float], grid: list[float]) -> str:
    """Chosen grid ratios as runs of consecutive grid points: '0.05-0.12, 0.3'
    (every ratio accounted for, none elided)."""
    index = {r: i for i, r in enumerate(grid)}
    runs: list[list[float]] = []
    for r in chosen:
        if runs and index[r] == index[runs[-1][-1]] + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    return ", ".join(f"{run[0]:g}" if len(run) == 1 else f"{run[0]:g}-{run[-1]:g}"
                     for run in runs)


def _claims(f: Findings) -> list[str]:
    if not f.claims:
        return ["Not computed: the maps these claims read are not in this run.", ""]
    out = ["| claim | published | ours | verdict | note |", "|---|---|---|---|---|"]
    for c in f.claims:
        out.append(f"| {c.text} | {c.published} | {c.ours} | {c.verdict} | {c.note} |")
    return out + [""]


def _knobs(f: Findings) -> list[str]:
    out = [f"Around each of the {P.MAX_HOLE_WINDOWS} widest DTR holes of every public trace "
           "(the hole and as much again, at least 0.001 of peak, on either side), the same "
           "budgets under exact neighbourhoods (`dtr-exact-nbhd`) and under a minimum evictee "
           "size of 1 MiB as MegEngine's DTR offers (`knobs.dtr_min_1mib`, the policy file "
           "`reproduce/knobs.py`: DTR's score over storages of at least 1 MiB).", ""]
    if not f.knobs:
        return out + ["No DTR hole was certified, so no window was mapped.", ""]
    out += ["| trace | DTR hole (B) | width (B) | policy | window | certified | holes there | "
            "hole survives |", "|---|---|---|---|---|---|---|---|"]
    for k in f.knobs:
        m = k.map
        verdict = {True: "yes", False: "no", None: "not known yet"}[k.survives]
        out.append(f"| {k.trace} | {_b(k.hole.lo)}-{_b(k.hole.hi)} | {_b(k.hole.hi - k.hole.lo + 1)} | "
                   f"{m.spec.policy_name} | {m.spec.ratio_from:g}-{m.spec.ratio_to:g} | {_state(m)} | "
                   f"{len(m.holes)} | {verdict} |")
    return out + [""]


def render(f: Findings, *, command: str, wall_seconds: float) -> str:
    s = f.settings
    maps = f.maps()
    partial = [m for m in maps if not m.complete]
    out = [
        "# Findings: what the DTR studies left open, answered with exact maps", "",
        f"Generated by `{command}` in {wall_seconds:,.0f} s of wall time (maps already "
        f"certified by earlier runs in the working folder are reused; the wall time of each "
        f"map, all runs together, is in the tables). Each map partitions its budget range into "
        f"byte intervals that each give one execution (`dtrf sweep --exact`); a map gets at most "
        f"{s['map_seconds']:g} s per invocation and each run at most "
        f"{s['run_timeout'] if s['run_timeout'] else 'unlimited'} s (a grid point "
        f"{P.STUDY_RUN_LIMIT:g} s, the studies' limit)"
        + (f"; this invocation had {s['total_seconds']:g} s in all"
           if s.get("total_seconds") else "")
        + ". Running the command again resumes every partial map.", "",
    ]
    if f.out_of_time:
        out += [f"**Partial**: the {s['total_seconds']:g} s of this invocation ran out before "
                "every map had its share; the maps it did not reach, or stopped, are shown "
                "as far as they are stored.", ""]
    if partial:
        out += [f"**Incomplete**: {len(partial)} of {len(maps)} maps are not fully certified "
                f"yet ({', '.join(_partial(m) for m in partial)}). "
                "What is listed for them holds for the certified budgets only; run the "
                "command again to fill them."
                + (" The executions left are a rough extrapolation from the studies' grid "
                   "over the same range, not a certificate: the budgets of each gap are "
                   "taken to behave like the grid points inside it (or the nearest one), "
                   "their executions as wide and their runs as slow; the time is that of "
                   "runs from op 0, and an exact map resumes runs from snapshots, so it "
                   "may well take less." if any(m.remaining for m in partial) else ""), ""]
    out += ["Terms: a *failure region* is a maximal stretch of failing certified budgets "
            "(uncertified budgets inside it are counted apart); its *edge* is exact when the "
            "next budget is certified to complete, open when uncertified budgets lie next to "
            "it; a *hole* is "
            "one with completing budgets on both sides; *micro* holes are narrower than 0.001 "
            "of peak (the studies' finest grid); a *fringe* is two or more failure regions "
            "closer together than 0.001 of peak; a *feasibility switch* is a byte where the "
            "outcome changes between ok and failing; a *regime switch* is a byte where the "
            "overhead of neighbouring completing executions changes by more than 2x.", ""]
    span = f"{s['range'][0]:g}-{s['range'][1]:g}"
    zoo_lo, zoo_hi = s.get("zoo_range", P.ZOO_RANGE)
    out += [f"## 1. Every public trace over {span}: DTR and its ablations", "",
            "### The studies' 0.01 grid under DTR (each point run, as they did)", ""]
    out += _grid_table(f.grids)
    if f.window_grid is not None:
        lo, hi = P.INCEPTION_WINDOW
        out += [f"### The holes study's {P.WINDOW_STEP:g} grid over InceptionV4 {lo:g}-{hi:g}", ""]
        out += _grid_table({"inceptionv4": f.window_grid})
    out += ["### Exact maps", ""]
    out += _summary_table(list(f.public.values()) + list(f.ablations.values())) + [""]
    out += ["### The claims of the holes study still open", ""] + _claims(f)
    out += ["### Details per map", ""]
    for m in list(f.public.values()) + ([f.window] if f.window else []) + list(f.ablations.values()):
        out += _map_detail(m)
    out += ["## 2. Do holes survive exact neighbourhoods (and other knobs)?", ""] + _knobs(f)
    for k in f.knobs:
        out += _map_detail(k.map)
    out += ["## 3. Models recorded from PyTorch", "",
            "The zoo of `dtrf torch record` at its default sizes (flops costs, seed 0), "
            "recorded into the working folder and mapped under DTR over "
            f"{zoo_lo:g}-{zoo_hi:g} (up to the full peak, so that each map reaches the "
            "budgets where its model completes).", ""]
    for name, why in f.zoo_errors.items():
        out.append(f"- zoo:{name} not recorded: {why}")
    if f.zoo:
        out += _summary_table(list(f.zoo.values())) + [""]
        for m in f.zoo.values():
            out += _map_detail(m)
    return "\n".join(out).rstrip() + "\n"


def progress_line(p) -> str:
    """One line of progress (a `run.MapProgress`) for a log or a pipe."""
    where = (f"[{p.index}/{p.total}] {p.spec.name} {p.spec.policy_name} "
             f"{p.spec.ratio_from:g}-{p.spec.ratio_to:g}"
             + (f" (grid {p.spec.step:g})" if p.spec.step else ""))
    if p.state == "out of time":
        return f"{where}: not run, the time is up (read as stored)"
    if p.state == "done" and not p.limit:
        return f"{where}: complete (stored)"
    if p.state == "done":
        return f"{where}: {p.coverage:.1%} certified after {p.seconds:,.0f} s"
    return f"{where}: {p.coverage:.1%} certified, {p.seconds:,.0f} s of at most {p.limit:g} s"


MAP_STATE = re.compile(r"Peak [\d,]+ B; budgets [^;]*; (?:(complete)|partial \(([\d.]+)%\)), ")
VERDICT_COLUMN = 3      # claim | published | ours | verdict | note


@dataclass(frozen=True)
class Completeness:
    """How much a findings report has certified, read off its text (so a report
    written by an earlier run compares with this one's): each map's certified
    share (by its heading), the maps certified whole, and the claims judged
    (a verdict other than incomplete)."""

    shares: dict[str, float]
    complete: frozenset[str]
    judged: int

    def covers(self, other: Completeness) -> bool:
        """Certifies at least what `other` does: every map of it as far, every
        map it has whole whole, and as many claims judged."""
        return (self.judged >= other.judged and other.complete <= self.complete
                and all(self.shares.get(k, -1.0) >= v for k, v in other.shares.items()))

    def describe(self) -> str:
        return (f"{len(self.complete)} of {len(self.shares)} maps certified whole, "
                f"{self.judged} claims judged")


def completeness(text: str) -> Completeness:
    """The `Completeness` of a findings report's text (a file of another kind: none)."""
    shares: dict[str, float] = {}
    complete: set[str] = set()
    heading, judged, claims = None, 0, False
    for line in text.splitlines():
        if line.startswith("#### "):
            heading = line[5:].strip()
        elif heading and (m := MAP_STATE.match(line)):
            shares[heading] = 100.0 if m.group(1) else float(m.group(2))
            complete |= {heading} if m.group(1) else set()
            heading = None
        elif line.startswith("| claim | published | ours | verdict |"):
            claims = True
        elif claims and line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            judged += len(cells) > VERDICT_COLUMN and cells[VERDICT_COLUMN] in C.VERDICTS
        else:
            claims = False
    return Completeness(shares, frozenset(complete), judged)


@dataclass(frozen=True)
class Placed:
    """Where a findings report went: `path`; `replaced` when a file was there
    before; `kept`, the more complete report left as it was beside it."""

    path: Path
    replaced: bool
    kept: Path | None = None
    ours: Completeness | None = None
    theirs: Completeness | None = None


def place_findings(f: Findings, out_dir: Path, *, command: str, wall_seconds: float) -> Placed:
    """Write OUT/findings.md, unless the findings.md there is more complete than
    this run's: then this run's report goes beside it, to findings.partial.md."""
    text = render(f, command=command, wall_seconds=wall_seconds)
    path = Path(out_dir) / "findings.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = ours = theirs = None
    if path.is_file():
        ours = completeness(text)
        theirs = completeness(path.read_text(encoding="utf-8", errors="replace"))
        if not ours.covers(theirs):
            kept, path = path, path.with_name(PARTIAL_NAME)
    replaced = path.is_file()
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Placed(path, replaced, kept, ours, theirs)


PARTIAL_NAME = "findings.partial.md"


def write_findings(f: Findings, out_dir: Path, *, command: str, wall_seconds: float) -> Path:
    """`place_findings`, and the path written."""
    return place_findings(f, out_dir, command=command, wall_seconds=wall_seconds).path
