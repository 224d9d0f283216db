"""Each long output's verdict (`verdict.Verdict`), built from its typed result:
what happened, the numbers that decide it, and the `dtrf` command to run next.

A builder reads only its result (and the run arguments the user gave, so that
the next command names runs and traces as they did). Module paths appear where
the result has them (a log with a where-file); for other logs nothing new is
said. Every number shown is the result's own.
"""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING

from ..concepts import OOM, completes
from .labels import failure_label, op_label, run_label, short_source
from .units import fmt_bytes, fmt_count, fmt_exact_bytes, fmt_overhead
from .verdict import Verdict

if TYPE_CHECKING:
    from ..analyses.diff import DiffReport
    from ..analyses.edges import EdgesReport
    from ..analyses.explain import Explanation
    from ..analyses.interventions import InterventionResult
    from ..analyses.oom import OomReport
    from ..analyses.policy_comparison import PolicyComparison
    from ..analyses.reevict import ReevictReport
    from ..analyses.regime import RegimeReport
    from ..analyses.replay_view import ReplayWindow
    from ..reproduce.protocol import Reproduction
    from ..sweep.holes import HolesReport, PolicyHoles


def command(*words: object) -> str:
    """A `dtrf` command line, each word quoted for a shell."""
    return " ".join(["dtrf", *(shlex.quote(str(w)) for w in words if w is not None)])


def here(path: object) -> str:
    """A folder as a command names it: relative to the current folder when
    inside it (the command runs from here), else whole."""
    text = str(path)
    cwd = os.getcwd().rstrip(os.sep) + os.sep
    return text[len(cwd):] if text.startswith(cwd) else text


def budget_args(budget: int, policy: str) -> list[str]:
    """`--budget B [--policy P]` of a run's trace-level command (explain, intervene)."""
    return ["--budget", str(budget)] + (["--policy", policy] if policy != "dtr" else [])


def _in(module: str | None, phase: str | None = None) -> str:
    """' in MODULE (PHASE)' where the log said where an op ran; '' otherwise."""
    if not module:
        return ""
    return f" in {module}" + (f" ({phase})" if phase else "")


def summary_lines(s: dict) -> list[str]:
    """A run summary's deciding numbers: outcome, budget, overhead, evictions."""
    budget = f"budget {fmt_exact_bytes(s['budget'])}"
    if completes(s["outcome"]):
        head = f"completed at {budget}, overhead {fmt_overhead(s['overhead'])}"
    else:
        head = f"{s['outcome']} at {budget}"
    return [head, f"{s['evictions']:,} pressure evictions, {s['remats']:,} rematerializations, "
                  f"max nesting depth {s['max_depth']}"]


def run_verdict(summary: dict, run: str) -> Verdict:
    """A recording or a run as a whole (`show`, a replay): its outcome and the
    next question, the failure's frontier or the evictions."""
    s = summary
    name = run_label(s["trace"], s.get("ratio"), s["budget"], s["policy"])
    oom = s.get("oom")
    if oom:
        head = (f"OOM: {name} fails at {failure_label(oom['op_id'], None, oom.get('final_pins'))}"
                f" allocating "
                f"{oom['tensor']}, {oom['request']:,} B")
        return Verdict(head, (summary_lines(s)[1],
                              f"{oom['pinned']:,} B pinned at depth {oom['depth']}"),
                       command("oom", run))
    head = f"{name}: {s['outcome']}" + (f", overhead {fmt_overhead(s['overhead'])}"
                                        if completes(s["outcome"]) else "")
    return Verdict(head, tuple(summary_lines(s)), command("replay", run, "--evicting"))


def replay_verdict(view: ReplayWindow, summary: dict, run: str) -> Verdict:
    """`replay`: the run's outcome, and the window's allocation checks (all of them:
    `view` is the whole window, however many the table below shows)."""
    base = run_verdict(summary, run)
    fail = next((st for st in view.steps if st.oom), None)
    shown = (f"window: {fmt_count(view.matched, 'allocation check')}, "
             f"{sum(st.evictions for st in view.steps):,} evictions among them")
    lines = [*base.lines, shown]
    if fail is not None:
        lines.append(f"failing check: {fail.tensor}{_in(fail.module)}, short at start: "
                     f"{fail.shortfall:,} B, {fmt_count(fail.pool_size, 'candidate')}")
    return Verdict(base.headline, tuple(lines), base.next)


def oom_verdict(r: OomReport, trace: str) -> Verdict:
    """`oom`: the failing op, what it asked, what was pinned and where in the model."""
    name = run_label(r.trace, r.ratio, r.budget, r.policy)
    head = (f"OOM: {name} fails at {failure_label(r.op_id, r.op_name, r.final_pins)}"
            + (f", pinning {r.root_tensor}{_in(r.op_module)}" if r.final_pins
               else _in(r.op_module)))
    source = f" at {short_source(r.tensor_source)}" if r.tensor_source else ""
    lines = [f"allocating {r.tensor}{_in(r.tensor_module, r.tensor_phase)}{source}: "
             f"{r.request:,} B with {r.memory:,} B resident, {r.shortfall:,} B "
             f"short of the budget {r.budget:,} B after the pool drained",
             f"{r.pinned:,} B pinned, {r.locked_total:,} B locked by a frontier "
             f"{fmt_count(r.depth, 'level')} deep; " + ("the pool was empty" if r.pool_empty else
                                           f"{r.pool_size:,} candidates left")]
    top = [m for m in r.by_module if m.module][:3]
    if top:
        lines.append("resident by module: " + ", ".join(
            f"{m.module} {fmt_bytes(m.bytes)}" for m in top))
    return Verdict(head, tuple(lines),
                   command("explain", trace, *budget_args(r.budget, r.policy)))


def explain_verdict(found: Explanation, trace: str, args: list[str]) -> Verdict:
    """`explain`: the first fix (as `dtrf intervene` flags), or none tried."""
    base = found.baseline
    if base["outcome"] != OOM:
        return Verdict(f"the run does not fail (outcome {base['outcome']}): nothing to explain",
                       (), command("run", trace, *args))
    oom = base["oom"]
    where = _in(found.failing_module)
    head = (f"{fmt_count(len(found.fixes), 'change')} of {len(found.attempts):,} tried "
            f"complete the run failing at "
            f"{failure_label(oom['op_id'], None, oom.get('final_pins'))}")
    lines = [f"failure: allocating {oom['tensor']}{where} at depth {oom['depth']}, budget "
             f"{fmt_exact_bytes(base['budget'])}"]
    if found.fixes:
        first = found.fixes[0]
        modules = [m for m in found.modules_of(first.change) if m]
        lines.append(f"first fix: {' '.join(first.args)}"
                     + (f" (made in {', '.join(modules)})" if modules else "")
                     + f", overhead {fmt_overhead(first.summary['overhead'])}")
        nxt = command("intervene", trace, *args, *first.args)
    else:
        lines.append(f"no tried change completes the run; {found.singles_untried:,} single "
                     "changes untried")
        nxt = command("oom", f"{trace}@{base['budget']}B" + _policy_tail(base["policy"]))
    if not found.control_matches:
        lines.append("a control or a rerun did not reproduce the failure: not valid")
    return Verdict(head, tuple(lines), nxt)


def _policy_tail(policy: str) -> str:
    return "" if policy == "dtr" else f":{policy}"


def intervene_verdict(result: InterventionResult, trace: str, args: list[str]) -> Verdict:
    """`intervene`: baseline against intervention, and whether the control holds."""
    b, i = result.baseline.summary, result.intervention.summary
    change = ("completes" if not completes(b["outcome"]) and completes(i["outcome"]) else
              "breaks" if completes(b["outcome"]) and not completes(i["outcome"]) else "changes")
    same = b["victims_sha256"] == i["victims_sha256"]
    head = (f"the intervention {change if not same else 'changes nothing in'} the run: "
            f"{b['outcome']} -> {i['outcome']}")
    lines = [f"overhead {fmt_overhead(b['overhead'])} -> {fmt_overhead(i['overhead'])}, "
             f"pressure evictions {b['evictions']:,} -> {i['evictions']:,}, "
             f"remats {b['remats']:,} -> {i['remats']:,}",
             f"budget {fmt_exact_bytes(b['budget'])}",
             "the control reproduces the baseline exactly" if result.control_matches else
             "the control does NOT reproduce the baseline: the comparison is not valid"]
    modules = sorted({w["module"] for w in result.where.values() if w["module"]})
    if modules:
        lines.insert(1, "the storages named are made in " + ", ".join(modules))
    if result.baseline.recording and result.intervention.recording and not same:
        nxt = command("diff", here(result.baseline.recording), here(result.intervention.recording))
    else:
        nxt = command("explain", trace, *args)
    return Verdict(head, tuple(lines), nxt)


def diff_verdict(r: DiffReport, a: str, b: str) -> Verdict:
    """`diff`: where the eviction streams part, what the failing run lost, and
    whether the histories agree again."""
    runs = (f"a {r.a.outcome} at {r.a.budget:,} B ({r.a.stream_entries:,} stream entries), "
            f"b {r.b.outcome} at {r.b.budget:,} B ({r.b.stream_entries:,})")
    d = r.first_divergence
    if d is None:     # the same decisions: what differs is an allocation check's answer
        failing = a if not completes(r.a.outcome) else b if not completes(r.b.outcome) else None
        return Verdict("the eviction streams are the same", (runs,),
                       command("oom", failing) if failing else command("replay", a))
    head = (f"the runs part at stream entry {d.position:,}, {op_label(d.op_id, d.op_name)}: "
            f"a {_entry(d.a)}, b {_entry(d.b)}")
    lines = [runs, f"cause: {d.cause}"]
    for f in r.failures[:2]:
        text = (f"run {f.run} fails at {op_label(f.op_id, f.op_name)} allocating {f.tensor}, "
                f"{f.shortfall:,} B short")
        if f.culprit is not None:
            c = f.culprit.storage
            text += f"; it needed storage {c.storage} ({c.tensor}), kept by the other run"
        lines.append(text)
    if r.aftermath is not None:
        lines.append(f"the histories agree again from op {r.aftermath.reconverge_op}"
                     if r.aftermath.reconverge_op is not None else
                     "the histories never agree again")
    failing = next((f.run for f in r.failures), None)
    nxt = command("oom", a if failing == "a" else b) if failing else command("regime", a, b)
    return Verdict(head, tuple(lines), nxt)


def _entry(side) -> str:
    if side.victim is None:
        return "ends its stream"
    verb = "evicts" if side.kind == "pressure" else "frees"
    return f"{verb} {side.victim}{_in(side.module)}"


def reevict_verdict(r: ReevictReport, runs: list[str]) -> Verdict:
    """`reevict`: how concentrated each run's pressure evictions are, and on what."""
    lines = []
    for f in r.runs[:2]:
        p = f.pressure
        text = (f"{run_label(f.trace, f.ratio, f.budget, f.policy)} ({f.outcome}): "
                f"{p.evictions:,} pressure evictions of {p.distinct_storages:,} storages, "
                f"{fmt_count(p.collateral_remats, 'collateral remat')}")
        lines.append(text)
        if p.top:
            t = p.top[0]
            lines.append(f"most evicted: storage {t.storage} ({t.tensor}{_in(t.module)}, "
                         f"{fmt_bytes(t.bytes)}) {fmt_count(t.evictions, 'time')}")
    names = ("a", "b") if len(r.runs) > 1 else ("",)
    head = "re-eviction: " + "; ".join(
        (f"{name + ' ' if name else ''}up to {fmt_count(f.pressure.max_per_storage, 'eviction')}"
         f" of one storage, mean {f.pressure.mean_per_storage:.2f}" if f.pressure.evictions
         else f"{name + ' ' if name else ''}no pressure eviction")
        for name, f in zip(names, r.runs))
    if r.overlap and "pressure" in r.overlap:
        o = r.overlap["pressure"]
        lines.append(f"evicted by both runs: {o.common:,} of {o.union_storages:,} storages")
    nxt = command("regime", *runs) if len(runs) == 2 else command("replay", runs[0], "--evicting")
    return Verdict(head, tuple(lines), nxt)


def regime_verdict(r: RegimeReport, a: str, b: str) -> Verdict:
    """`regime`: where the slow regime starts, how much more it evicts, its driver."""
    runs = tuple(f"{x.label}: {x.outcome} at {x.budget:,} B"
                 + (f", overhead {fmt_overhead(x.overhead)}" if x.overhead else "")
                 + f", {x.evictions:,} pressure evictions" for x in (r.a, r.b))
    o = r.onset
    if o is None or r.slow is None:
        failing = a if not completes(r.a.outcome) else b if not completes(r.b.outcome) else None
        return Verdict("no slow regime: no sustained blow-up of evictions under the rule",
                       runs, command("oom", failing) if failing else command("diff", a, b))
    head = (f"run {r.slow} turns slow at op {o.op}: {o.regime_slow_evictions:,} pressure "
            f"evictions from there against {o.regime_fast_evictions:,}")
    lines = list(runs)
    if r.drivers:
        d = r.drivers[0]
        lines.append(f"top driver: storage {d.storage} ({d.tensor}{_in(d.module)}, "
                     f"{fmt_bytes(d.bytes)}), {d.slow_evictions:,} evictions against "
                     f"{d.fast_evictions:,}")
    if r.divergence is not None and r.divergence.ops_before_onset is not None:
        lines.append(f"the streams part at entry {r.divergence.position:,}, "
                     f"{r.divergence.ops_before_onset:,} ops before the onset")
    return Verdict(head, tuple(lines), command("diff", a, b))


def edges_verdict(r: EdgesReport) -> Verdict:
    """`edges`: the first edge, the comparison that decides it, its first
    divergent victim."""
    if not r.edges:
        return Verdict(f"no edge in the sweep of {r.trace} ({r.policy})",
                       (f"{r.unlocated:,} edges lie in uncertified gaps",) if r.unlocated else (),
                       command("holes", r.sweep))
    e = r.edges[0]
    head = (f"{fmt_count(r.found, 'edge')} in the sweep of {r.trace} ({r.policy}); first: "
            f"{e.below.budget:,} B {e.below.outcome}, {e.above.budget:,} B {e.above.outcome}")
    lines = [f"{e.kind} edge, " + ("byte-exact" if e.exact else f"{e.gap_bytes:,} B between")]
    if e.decisive is not None:
        lines.append(f"decided at {op_label(e.decisive.op_id)}: {e.decisive.tensor} asks "
                     f"{e.decisive.request:,} B with {e.decisive.memory:,} B resident")
    v = e.first_divergent_victim
    if v is not None:
        lines.append(f"first divergent victim (entry {v.position:,}): below {v.below}, "
                     f"above {v.above}")            # each entry names its maker's module
    return Verdict(head, tuple(lines), command("diff", here(e.below.recording), here(e.above.recording)))


def _regions(p: PolicyHoles) -> list[tuple[int, int]]:
    if p.exact is not None:
        return [(x.lo, x.hi) for x in p.exact.failure_regions if x.hole]
    return [(x.lo.budget, x.hi.budget) for x in p.failure_regions]


def _holes_text(policy: str, regions: list[tuple[int, int]]) -> str:
    if not regions:
        return f"{policy}: no hole"
    lo, hi = regions[0]
    return (f"{policy}: {fmt_count(len(regions), 'hole')}, first {lo:,}-{hi:,} B "
            f"({hi - lo + 1:,} B)")


def holes_verdict(report: HolesReport) -> Verdict:
    """`holes`, `sweep`: each policy's holes, and what to run next: finish the
    map, else look at its edges."""
    from .sweep import ended_text, finish_lines
    lo, hi = report.range_bytes
    regions = {p.policy: _regions(p) for p in report.policies}
    total = sum(len(v) for v in regions.values())
    head = f"{report.trace.name}: {fmt_count(total, 'hole')} in {lo:,}-{hi:,} B"
    lines = [f"sweep ended: {ended_text(report)}"]
    lines += [_holes_text(p, v) for p, v in list(regions.items())[:4]]
    bad = [p.policy for p in report.policies
           if p.disagreements or (p.exact is not None and p.exact.overlaps)]
    if bad:
        lines.insert(0, f"reruns or certificates disagree for {', '.join(bad)}: not deterministic")
    finish = [line.partition(": dtrf ")[2] for line in finish_lines(report)]
    holed = [p for p, v in regions.items() if v]
    if any(finish):
        nxt = "dtrf " + next(f for f in finish if f)
    elif holed:
        nxt = command("edges", report.path, "--policy", holed[0])
    else:
        nxt = command("plot", report.path)
    return Verdict(head, tuple(lines[:5]), nxt)


def _first_success(s) -> str:
    """A policy's first success as far as its certificates settle it (the words
    of `policy_comparison.first_success_text`, shorter)."""
    if s.first_success is None:
        return "none" if s.first_success_exact else "none certified yet"
    if s.first_success_below_range:
        return f"at or below {s.first_success:,} B"
    if s.first_success_exact:
        return f"{s.first_success:,} B"
    return f"between {s.first_success_lowest_possible:,} and {s.first_success:,} B"


def comparison_verdict(c: PolicyComparison) -> Verdict:
    """`compare-policies`: each policy's holes and first success, and which is best."""
    from .sweep import finish_lines
    lo, hi = c.range_bytes
    head = f"{c.trace}: {len(c.policies)} policies over {lo:,}-{hi:,} B"
    lines = []
    for s in c.policies[:4]:
        holes = f"{fmt_count(s.holes, 'hole')} ({s.hole_bytes:,} B)" + (
            "" if s.holes_complete else f" so far, {s.uncertified_bytes:,} B uncertified")
        lines.append(f"{s.policy}: {holes}, first success {_first_success(s)}, overhead p50 "
                     f"{fmt_overhead(s.overhead_p50, 3)}")
    widest = max((s for s in c.policies if s.completed), default=None,
                 key=lambda s: sum(d.hi - d.lo + 1 for d in c.dominance if s.policy in d.best))
    if widest is not None:
        partial = not all(s.holes_complete for s in c.policies)
        lines.append(f"best over the most {'certified ' if partial else ''}budgets: "
                     f"{widest.policy}")
    finish = [line.partition(": dtrf ")[2] for line in finish_lines(c.report, "compare-policies")]
    holed = [s.policy for s in sorted(c.policies, key=lambda s: -s.hole_bytes) if s.holes]
    nxt = ("dtrf " + next(f for f in finish if f) if any(finish) else
           command("edges", c.sweep, "--policy", holed[0]) if holed else command("holes", c.sweep))
    return Verdict(head, tuple(lines[:6]), nxt)


def reproduction_verdict(rep: Reproduction, out: str) -> Verdict:
    """`reproduce`: how many claims match, and which differ."""
    counts = rep.counts()
    head = f"{len(rep.claims)} claims: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    off = [c for c in rep.claims if c.verdict not in ("match", "sharper")]
    lines = tuple(f"{c.id}: {c.verdict}; published {c.published}, ours {c.ours}" for c in off[:4])
    nxt = command("reproduce", "-o", out) if rep.quick else \
        command("reproduce", "--findings", "-o", out)
    return Verdict(head, lines, nxt)

