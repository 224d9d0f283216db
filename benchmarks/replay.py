"""Replay speed on the reference points.

Prints, for every non-timeout line of the reference results, our wall time
beside the reference simulator's recorded seconds (`secs`) and the ratio;
then the median ratio and the slowest reference points. As a baseline
measured in this same run, the simple object-per-tensor oracle of the test
suite (a straightforward implementation of docs/semantics.md) is timed on the
points where it takes under a few seconds.

    python benchmarks/replay.py [--traces DIR] [--reference FILE] [--no-oracle]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from dtrforensics.engine.replay import replay  # noqa: E402
from dtrforensics.trace import parse_file  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=str(ROOT.parent / "shared" / "traces"))
    ap.add_argument("--reference", default=str(ROOT.parent / "shared" / "reference" / "dtr-simrd.jsonl"))
    ap.add_argument("--no-oracle", action="store_true", help="skip the same-run oracle baseline")
    args = ap.parse_args()
    files = {p.name.split("-")[0]: p for p in Path(args.traces).glob("**/*.log")}
    lines = [json.loads(x) for x in open(args.reference) if x.strip()]
    lines = [ln for ln in lines if ln["outcome"] != "timeout" and ln["trace"] in files]
    if not lines:
        sys.exit("no reference points with traces found")
    programs = {}
    warm = parse_file(files[lines[0]["trace"]])
    replay(warm, ratio=0.5)  # load the compiled kernel once, outside the timings
    rows = []
    print(f"{'trace':15} {'policy':13} {'ratio':>6} {'outcome':8} {'ours s':>8} {'ref s':>8} {'speedup':>8}")
    for ln in lines:
        program = programs.get(ln["trace"]) or programs.setdefault(ln["trace"], parse_file(files[ln["trace"]]))
        replay(program, ratio=1.0)  # per-trace preparation (graph, baseline) is cached after this
        start = time.perf_counter()
        result = replay(program, ratio=ln["ratio"], policy=ln["heuristic"])
        ours = time.perf_counter() - start
        assert result.summary.victims_sha256 == ln["victims_sha256"], ln
        rows.append((ln, ours))
        print(f"{ln['trace']:15} {ln['heuristic']:13} {ln['ratio']:>6} {ln['outcome']:8} "
              f"{ours:8.3f} {ln['secs']:8.2f} {ln['secs'] / ours:7.1f}x")
    ratios = [ln["secs"] / ours for ln, ours in rows]
    print(f"\npoints: {len(rows)}; median speedup vs reference: {statistics.median(ratios):.1f}x; "
          f"min {min(ratios):.1f}x; total ours {sum(o for _, o in rows):.1f} s vs reference "
          f"{sum(ln['secs'] for ln, _ in rows):.1f} s")
    slowest = sorted(rows, key=lambda r: -r[0]["secs"])[:5]
    print("slowest reference points:")
    for ln, ours in slowest:
        print(f"  {ln['trace']} {ln['heuristic']} {ln['ratio']}: reference {ln['secs']:.1f} s, ours {ours:.2f} s")
    if not args.no_oracle:
        from oracle import run as oracle_run
        print("\nsame-run baseline: the simple oracle (tests/oracle.py) on ResNet-32 points")
        speed = []
        for ln, ours in rows:
            if ln["trace"] != "resnet32" or ln["secs"] > 3:
                continue
            start = time.perf_counter()
            oracle_run(programs["resnet32"], ln["budget"], ln["heuristic"])
            simple = time.perf_counter() - start
            speed.append(simple / ours)
        print(f"  {len(speed)} points; median engine speedup over the oracle: "
              f"{statistics.median(speed):.1f}x")


if __name__ == "__main__":
    main()
