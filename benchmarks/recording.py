"""Cost of recording: replay time and peak memory with and without a recorder.

For ResNet-32 at ratio 0.104 and LSTM at 0.264 (public traces; the LSTM is the
largest, 8,319 tensors, and 0.264 its slow regime: 38,059 evictions, 12 M
candidate scores), times in this process (best of --repeat, compiled kernel
and per-trace preparation loaded beforehand) for:

    none             replay, no observer (the baseline of the ratios)
    null observer    events emitted by the kernel and dropped (emission cost alone)
    events+decisions record_run(scores="victims"): events, decisions, static tables
    scores=all       record_run(scores="all"): also every candidate's score

and the peak RSS of a fresh process doing one run of each mode. Both CPU time
(of this process: fair on a shared, loaded machine) and wall time are shown,
each as the best of the interleaved repeats. Goal (issue 12, goal 4): a full
recording (scores=all) within 2x of the bare run; each point ends with that
verdict.

    python benchmarks/recording.py [--repeat N] [--traces DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT

from dtrforensics.engine.hooks import Observer
from dtrforensics.engine.replay import replay
from dtrforensics.recorder.record import record_run
from dtrforensics.trace.cache import load_program

POINTS = (("resnet32", 0.104), ("lstm", 0.264))
# Ratios use the best (minimum) time of each mode over --repeat interleaved runs.
MODES = ("none", "null observer", "events+decisions", "scores=all")
FULL_GOAL = 2.0


class NullObserver(Observer):
    def on_events(self, batch):
        pass


def find_trace(folder: Path, short: str) -> Path | None:
    for path in sorted(folder.glob("**/*.log")):
        if path.name.split("-")[0] == short:
            return path
    return None


def run_mode(program, ratio: float, mode: str, scratch: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one run in `mode` (recordings go under `scratch`, then deleted).
    CPU time (this process) is the fair measure on a shared, loaded machine."""
    out = scratch / "rec"
    start, cpu = time.perf_counter(), time.process_time()
    if mode == "none":
        replay(program, ratio=ratio)
    elif mode == "null observer":
        replay(program, ratio=ratio, observers=[NullObserver()])
    else:
        record_run(program, ratio=ratio, out_dir=out,
                   scores="all" if mode == "scores=all" else "victims")
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    shutil.rmtree(out, ignore_errors=True)
    return seconds, cpu


def recording_size(program, ratio: float, mode: str, scratch: Path) -> int:
    out = scratch / "sized"
    record_run(program, ratio=ratio, out_dir=out,
               scores="all" if mode == "scores=all" else "victims")
    size = sum(p.stat().st_size for p in out.iterdir())
    shutil.rmtree(out)
    return size


def child(path: str, ratio: float, mode: str) -> None:
    """One run in a fresh process; prints peak RSS in MiB."""
    program = load_program(path)
    with tempfile.TemporaryDirectory(prefix="dtrf-bench-rec-") as tmp:
        run_mode(program, ratio, mode, Path(tmp))
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per mode (best is kept)")
    ap.add_argument("--traces", default=os.environ.get("DTRF_TRACES",
                                                       str(ROOT.parent / "shared" / "traces")))
    ap.add_argument("--child", nargs=3, metavar=("PATH", "RATIO", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], float(args.child[1]), args.child[2])
        return 0
    points = [(name, ratio, find_trace(Path(args.traces), name)) for name, ratio in POINTS]
    points = [(n, r, p) for n, r, p in points if p is not None]
    if not points:
        print(f"no public traces under {args.traces}: set DTRF_TRACES", file=sys.stderr)
        return 1
    print(f"{'trace':10}{'ratio':>7}  {'mode':18}{'CPU s':>8}{'x none':>8}{'wall s':>8}"
          f"{'x none':>8}{'peak RSS':>11}{'on disk':>10}")
    with tempfile.TemporaryDirectory(prefix="dtrf-bench-rec-") as tmp:
        scratch = Path(tmp)
        for name, ratio, path in points:
            program = load_program(path)
            run_mode(program, ratio, "none", scratch)          # compile/load, prepare
            run_mode(program, ratio, "scores=all", scratch)    # writer warm-up
            wall, cpu = {}, {}
            for _ in range(args.repeat):
                for mode in MODES:                             # interleaved: fair to drift
                    w, c = run_mode(program, ratio, mode, scratch)
                    wall[mode] = min(wall.get(mode, float("inf")), w)
                    cpu[mode] = min(cpu.get(mode, float("inf")), c)
            for mode in MODES:
                rss = subprocess.run(
                    [sys.executable, __file__, "--child", str(path), str(ratio), mode],
                    capture_output=True, text=True, check=True).stdout.strip()
                disk = ("" if mode in ("none", "null observer")
                        else f"{recording_size(program, ratio, mode, scratch) / 2**20:.1f} MiB")
                print(f"{name:10}{ratio:>7}  {mode:18}{cpu[mode]:>8.3f}"
                      f"{cpu[mode] / cpu['none']:>8.2f}{wall[mode]:>8.3f}"
                      f"{wall[mode] / wall['none']:>8.2f}{float(rss):>8.0f} MiB{disk:>10}",
                      flush=True)
            full = cpu["scores=all"] / cpu["none"]
            print(f"{name} {ratio}: full recording {full:.2f}x the bare run (CPU; goal "
                  f"{FULL_GOAL:.0f}x): {'met' if full <= FULL_GOAL else 'NOT met'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
