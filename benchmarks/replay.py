"""Replay speed against the reference simulator, measured side by side.

A fixed set of points (`POINTS`: every public trace, both regimes of the LSTM,
OOM and completing points, several policies) is replayed by our engine (kernel
loaded, trace prepared: the best of three runs) and, when `DTRF_SIMRD` names an
unpacked dtr-prototype `simrd` folder, by the reference simulator in a
separate process in this same run (log parsed once and untimed, as its own
evaluation does; the best of two runs: a single run of the reference read up
to three times its best on a shared machine). Both executions must end with the same outcome and clock.
Times are CPU seconds of each process (`time.process_time`), so a busy
machine slows both sides alike instead of charging a short point for its
neighbours' work. It prints each point's two times and their ratio, the median, the smallest
ratio, and whether each goal (issue 45) is met: a median of at least 150x, no
point below 60x, LSTM 0.264 within 0.5 s; InceptionV4 0.235, the other slow
point, is held to the 2 s of issue 30.

`--before REV` also times another revision of the engine in this same run:
REV is a git revision of this repository (its `src/` is exported to a
temporary folder, whose first replay compiles its kernel outside the timings)
or a folder holding a checkout (`src/dtrforensics`). benchmarks/replay_engine.py
replays every point there in its own process; the table then gives both
engines' CPU seconds and the speedup, and the run ends with exit status 3 if
any point's outcome, clock or victims differ between the two.

Without `DTRF_SIMRD` it says it cannot compare and measures the simple
object-per-tensor oracle of the test suite instead (a same-run baseline).
`--recorded` compares every reference line with the seconds recorded in the
reference results, which were measured on another day and machine.

    python benchmarks/replay.py [--traces DIR] [--long] [--recorded] [--before REV]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from common import ROOT

from dtrforensics.engine.replay import replay
from dtrforensics.trace import parse_file

MEDIAN_GOAL = 150.0
FLOOR_GOAL = 60.0
REFERENCE_REPEATS = 2

# (trace, policy, ratio, why it is here, simulate). `simulate` is False where
# the reference takes many minutes (InceptionV4 0.235: 1,201 s recorded; LSTM
# 0.264 runs six times the clock of 0.265, itself minutes): those points are
# timed against the absolute goal, and against the reference only with `--long`.
POINTS = [
    ("resnet32", "dtr", 0.101, "ok just below the hole", True),
    ("resnet32", "dtr", 0.104, "OOM inside the hole, depth 118", True),
    ("resnet32", "dtr", 0.111, "ok above the hole", True),
    ("resnet32", "no-size", 0.2, "ablation", True),
    ("resnet32", "compute-only", 0.2, "ablation", True),
    ("resnet32", "lru", 0.3, "other policy", True),
    ("resnet32", "msps", 0.15, "other policy", True),
    ("unet", "dtr", 0.42, "OOM on the grid", True),
    ("unet", "dtr", 0.44, "ok", True),
    ("lstm", "dtr", 0.265, "fast regime", True),
    ("lstm", "dtr", 0.264, "slow regime", False),
    ("inceptionv4", "dtr", 0.6, "ok", True),
    ("inceptionv4", "dtr", 0.235, "OOM, 797 M neighbourhood nodes walked", False),
    ("tv_densenet121", "dtr", 0.4, "ok", True),
    ("transformer", "dtr", 0.5, "ok", True),
    ("treelstm", "dtr", 1.0, "ok", True),
    ("unroll_gan", "dtr", 1.0, "ok", True),
]
SLOW_POINT_GOAL_SECONDS = {("lstm", 0.264): 0.5, ("inceptionv4", 0.235): 2.0}


def trace_files(traces: str) -> dict[str, Path]:
    return {p.name.split("-")[0]: p for p in Path(traces).glob("**/*.log")}


def time_ours(program, ratio: float, policy: str, repeats: int = 3):
    """CPU seconds of the best of `repeats` replays, the trace's preparation done
    beforehand (CPU time on both sides: wall time on a shared machine measures the load)."""
    replay(program, ratio=1.0)
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.process_time()
        result = replay(program, ratio=ratio, policy=policy)
        best = min(best, time.process_time() - start)
    return best, result.summary


def time_reference(simrd: str, log: Path, points: list[tuple[str, int]]) -> list[dict]:
    """Run the reference on `points` of one log in a fresh process, each the best
    of REFERENCE_REPEATS runs."""
    request = json.dumps({"log": str(log), "points": points, "repeats": REFERENCE_REPEATS})
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "reference_sim.py"), simrd],
                          input=request, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"the reference simulator failed on {log.name}:\n{proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if len(rows) != len(points):
        sys.exit(f"the reference simulator answered {len(rows)} of {len(points)} points on {log.name}")
    return rows


def before_source(rev: str, into: Path) -> Path:
    """The `src/` folder of the engine `--before` names: a checkout's, or a git
    revision's exported under `into`."""
    folder = Path(rev)
    if (folder / "src" / "dtrforensics").is_dir():
        return (folder / "src").resolve()
    archive = into / "src.tar"
    with open(archive, "wb") as out:
        proc = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], stdout=out,
                              stderr=subprocess.PIPE, text=False, check=False)
    if proc.returncode != 0:
        sys.exit(f"--before {rev}: neither a checkout nor a revision of this repository "
                 f"({proc.stderr.decode(errors='replace').strip()})")
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def time_before(rev: str, files: dict[str, Path], keys: list[tuple]) -> dict[tuple, dict]:
    """Every point in `keys` replayed by the engine of `rev`, in its own process
    (benchmarks/replay_engine.py, the best of three as ours)."""
    with tempfile.TemporaryDirectory(prefix="dtrf-before-") as tmp:
        src = before_source(rev, Path(tmp))
        print(f"  timing the engine before: {rev} ({src}; a first replay may compile its "
              "kernel, outside the timings)", file=sys.stderr)
        request = json.dumps({"traces": {t: str(files[t]) for t in dict.fromkeys(k[0] for k in keys)},
                              "points": keys, "repeats": 3})
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NUMBA_CACHE_DIR")}
        env["PYTHONPATH"] = str(src)
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "replay_engine.py")],
                              input=request, capture_output=True, text=True, env=env, check=False)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or len(rows) != len(keys):
        sys.exit(f"the engine before ({rev}) failed:\n{proc.stderr[-2000:]}")
    return dict(zip(keys, rows))


def side_by_side(files: dict[str, Path], simrd: str | None, long: bool,
                 before: str | None = None) -> bool:
    """The table and the goals; returns False when the engine `before` disagrees
    with ours on a point."""
    programs = {}
    ours = {}
    for trace, policy, ratio, _, _ in POINTS:
        if trace not in files:
            print(f"  (no trace file for {trace}: skipped)")
            continue
        print(f"  timing ours: {trace} {policy} {ratio}", file=sys.stderr)
        program = programs.get(trace) or programs.setdefault(trace, parse_file(files[trace]))
        ours[trace, policy, ratio] = time_ours(program, ratio, policy)
    old = time_before(before, files, list(ours)) if before else {}
    if simrd is None:
        print("DTRF_SIMRD is not set: cannot compare with the reference simulator in this run.\n"
              "Point it at an unpacked dtr-prototype simrd/ folder (commit eff53cc4).")
    reference = {}
    if simrd:
        for trace in dict.fromkeys(t for t, *_ in POINTS if t in files):
            print(f"  timing the reference: {trace}", file=sys.stderr)
            keys = [(t, p, r) for t, p, r, _, sim in POINTS if t == trace and (sim or long)]
            wanted = [(p, ours[t, p, r][1].budget) for t, p, r in keys]
            reference.update(zip(keys, time_reference(simrd, files[trace], wanted)))
    extra = f" {'before s':>8} {'faster':>7} {'victims':8}" if old else ""
    print(f"\n{'trace':14} {'policy':12} {'ratio':>6} {'outcome':8} {'ours s':>7} {'simrd s':>8} "
          f"{'ratio':>7}{extra}")
    ratios, agree = [], True
    for trace, policy, ratio, why, _ in POINTS:
        if (trace, policy, ratio) not in ours:
            continue
        secs, summary = ours[trace, policy, ratio]
        ref = reference.get((trace, policy, ratio))
        if ref and (ref["outcome"], ref["clock"]) != (summary.outcome, summary.clock):
            sys.exit(f"MISMATCH at {trace} {policy} {ratio}: ours {summary.outcome} clock "
                     f"{summary.clock}, reference {ref['outcome']} clock {ref['clock']}")
        cells = (f"{ref['secs']:8.2f} {ref['secs'] / secs:6.1f}x" if ref else f"{'-':>8} {'-':>7}")
        if ref:
            ratios.append(ref["secs"] / secs)
        if old:
            was = old[trace, policy, ratio]
            same = (was["outcome"], was["clock"], was["victims_sha256"]) == \
                (summary.outcome, summary.clock, summary.victims_sha256)
            agree &= same
            cells += f" {was['secs']:8.3f} {was['secs'] / secs:6.1f}x {'same' if same else 'DIFFER'}"
        print(f"{trace:14} {policy:12} {ratio:>6} {summary.outcome:8} {secs:7.3f} {cells}")
    if old:
        print(f"\nthe engine before ({before}): "
              + ("same outcome, clock and victims on every point" if agree
                 else "DIFFERS from ours (outcome, clock or victims) where marked"))
    if ratios:
        median, floor = statistics.median(ratios), min(ratios)
        print(f"\n{len(ratios)} points side by side, same outcome and clock on each.")
        print(f"median speedup {median:.1f}x (goal {MEDIAN_GOAL:.0f}x): "
              f"{'met' if median >= MEDIAN_GOAL else 'NOT met'}")
        print(f"smallest {floor:.1f}x (goal {FLOOR_GOAL:.0f}x): {'met' if floor >= FLOOR_GOAL else 'NOT met'}")
    for (trace, ratio), goal in sorted(SLOW_POINT_GOAL_SECONDS.items()):
        for (t, p, r), (secs, _) in ours.items():
            if (t, r) == (trace, ratio):
                verdict = "met" if secs <= goal else "NOT met"
                print(f"{trace} {ratio}: {secs:.2f} s (goal {goal:g} s): {verdict}")
    if simrd is None:
        oracle_baseline(programs, ours)
    return agree


def oracle_baseline(programs: dict, ours: dict) -> None:
    """The test suite's object-per-tensor oracle on the ResNet-32 points, same run."""
    from oracle import run as oracle_run
    speed = []
    for (trace, policy, ratio), (secs, summary) in ours.items():
        if trace == "resnet32":
            start = time.process_time()
            oracle_run(programs[trace], summary.budget, policy)
            speed.append((time.process_time() - start) / secs)
    if speed:
        print(f"\nsame-run baseline: the oracle (tests/oracle.py) on {len(speed)} ResNet-32 points; "
              f"median engine speedup {statistics.median(speed):.1f}x")


def against_recorded(files: dict[str, Path], reference: str) -> None:
    """Every reference line against its recorded `secs` (another day and machine)."""
    lines = [json.loads(x) for x in open(reference) if x.strip()]
    lines = [ln for ln in lines if ln["outcome"] != "timeout" and ln["trace"] in files]
    programs, ratios = {}, []
    print("Against seconds recorded in the reference results on another day and machine:")
    for ln in lines:
        program = programs.get(ln["trace"]) or programs.setdefault(ln["trace"], parse_file(files[ln["trace"]]))
        secs, summary = time_ours(program, ln["ratio"], ln["heuristic"], repeats=1)
        assert summary.victims_sha256 == ln["victims_sha256"], ln
        ratios.append(ln["secs"] / secs)
    print(f"  {len(ratios)} points; median {statistics.median(ratios):.1f}x, smallest {min(ratios):.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=os.environ.get("DTRF_TRACES", str(ROOT.parent / "shared" / "traces")))
    ap.add_argument("--reference", default=str(ROOT.parent / "shared" / "reference" / "dtr-simrd.jsonl"))
    ap.add_argument("--long", action="store_true",
                    help="run the reference on the slow points too (an hour or more)")
    ap.add_argument("--recorded", action="store_true",
                    help="also compare every reference line with its recorded seconds")
    ap.add_argument("--before", metavar="REV",
                    help="also time the engine of this git revision (or checkout folder) in "
                         "this run; exit 3 if its outcomes, clocks or victims differ from ours")
    args = ap.parse_args()
    files = trace_files(args.traces)
    if not files:
        sys.exit(f"no traces under {args.traces}: set DTRF_TRACES or run `dtrf traces fetch`")
    replay(parse_file(next(iter(files.values()))), ratio=0.5)  # load the kernel outside the timings
    agree = side_by_side(files, os.environ.get("DTRF_SIMRD") or None, args.long, args.before)
    if args.recorded:
        against_recorded(files, args.reference)
    if not agree:
        sys.exit(3)


if __name__ == "__main__":
    main()
