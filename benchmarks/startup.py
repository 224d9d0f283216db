"""Whole-process start-up of `dtrf`, against baselines measured in the same run.

    python benchmarks/startup.py [--repeat N]

Times, as whole processes (the best and the median of N runs each):

* `python -c pass`: the interpreter alone, the floor of any Python tool;
* `python -c "import numba"`: the floor of any process that runs a
  numba-compiled kernel, before a single cached function is loaded;
* `dtrf --help`: goal at most 0.25 s (issue 12, goal 3);
* `dtrf run resnet32 --ratio 0.104 --json` with a warm kernel cache: goal at
  most 0.5 s, and faster than the reference's whole process; it loads the
  kernel's native library (engine/native.py);
* the same with `DTRF_NATIVE=0`: the kernel loaded from numba's cache, the
  baseline the native library is measured against;
* the reference simulator's whole process for the same point (start, parse
  the log, the unconstrained baseline, the run: `reference_sim.py`) when
  `DTRF_SIMRD` names an unpacked dtr-prototype `simrd` package folder.

Wall times (best and median) and the best CPU time of each. Also prints the
imports `dtrf --help` must not make (analyses, numba, DuckDB,
Arrow, Textual, matplotlib) if it makes any, and the heavy ones `dtrf run`
makes. Child processes run with Python's bytecode cache on (as an installed
package has it) even where PYTHONDONTWRITEBYTECODE is set: without it every
process compiles every module it imports from source. Run it on a quiet machine: the
ratios to `python -c pass` say how much of a slow reading is the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import children_cpu

HEAVY = ("dtrforensics.analyses", "dtrforensics.engine", "numba", "duckdb", "pyarrow",
         "textual", "matplotlib")
RUN_ARGS = ("run", "resnet32", "--ratio", "0.104", "--json")
RUN_NAME = " ".join(("dtrf",) + RUN_ARGS)
NUMBA_RUN_NAME = "  the same, DTRF_NATIVE=0 (numba's cache)"
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
REFERENCE_NAME = "reference: whole process, same point"
GOALS = {"dtrf --help": 0.25, RUN_NAME: 0.5}
ROOT = Path(__file__).resolve().parent

def dtrf_cmd(*args: str) -> list[str]:
    script = Path(sys.executable).with_name("dtrf")
    return [str(script), *args] if script.exists() else \
        [sys.executable, "-m", "dtrforensics.cli.main", *args]


def timed(cmd: list[str], repeat: int, stdin: str | None = None,
          env: dict | None = None) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of each of `repeat` runs of `cmd` as a whole process.
    CPU time (user + system) is the fair measure on a shared, loaded machine."""
    times = []
    for _ in range(repeat):
        start, cpu = time.perf_counter(), children_cpu()
        subprocess.run(cmd, input=stdin, text=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=True, env=env or CHILD_ENV)
        times.append((time.perf_counter() - start, children_cpu() - cpu))
    return times


def heavy_imports(cmd_args: tuple[str, ...]) -> list[str]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "dtrforensics.cli.main",
                           *cmd_args], capture_output=True, text=True, env=CHILD_ENV)
    names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:")}
    return sorted(n for n in names if any(n == h or n.startswith(h + ".") for h in HEAVY))


def timed_reference(simrd: str, summary: dict, repeat: int) -> list[tuple[float, float]]:
    """The reference's whole process for the point `summary` describes: start,
    parse the log, measure the baseline, run (`reference_sim.py`)."""
    from dtrforensics.trace.registry import resolve_trace
    request = json.dumps({"log": str(resolve_trace(summary["trace"])),
                          "points": [[summary["policy"], summary["budget"]]]})
    return timed([sys.executable, str(ROOT / "reference_sim.py"), simrd], repeat, request)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10, help="runs per command")
    args = ap.parse_args()

    warm = subprocess.run(dtrf_cmd(*RUN_ARGS), capture_output=True, text=True, check=False,
                          env=CHILD_ENV)   # compiles or builds what is missing, writes bytecode
    rows = [("python -c pass", timed([sys.executable, "-c", "pass"], args.repeat)),
            ('python -c "import numba"', timed([sys.executable, "-c", "import numba"],
                                               args.repeat)),
            ("dtrf --help", timed(dtrf_cmd("--help"), args.repeat))]
    if warm.returncode == 0:
        rows.append((RUN_NAME, timed(dtrf_cmd(*RUN_ARGS), args.repeat)))
        rows.append((NUMBA_RUN_NAME, timed(dtrf_cmd(*RUN_ARGS), args.repeat,
                                           env=dict(CHILD_ENV, DTRF_NATIVE="0"))))
    else:
        print("resnet32 not found: set DTRF_TRACES to time `dtrf run`", file=sys.stderr)
    simrd = os.environ.get("DTRF_SIMRD")
    if simrd and warm.returncode == 0:
        rows.append((REFERENCE_NAME, timed_reference(simrd, json.loads(warm.stdout),
                                                     args.repeat)))
    elif not simrd:
        print("DTRF_SIMRD not set: cannot compare with the reference's whole process",
              file=sys.stderr)
    floor = min(t for t, _ in rows[0][1])
    best_of = {name: (min(t for t, _ in times), min(c for _, c in times)) for name, times in rows}
    print(f"{'process':<44}{'wall':>8}{'median':>8}{'CPU':>8}{'x pass':>8}  goal (wall, best)")
    for name, times in rows:
        (best, cpu), median = best_of[name], statistics.median(t for t, _ in times)
        goal = GOALS.get(name)
        mark = "" if goal is None else f"{goal:.2f} s " + ("met" if best <= goal else "missed")
        print(f"{name:<44}{best:>7.3f}s{median:>7.3f}s{cpu:>7.3f}s{best / floor:>8.1f}  {mark}")
    if RUN_NAME in best_of and REFERENCE_NAME in best_of:
        wall = best_of[REFERENCE_NAME][0] / best_of[RUN_NAME][0]
        cpu = best_of[REFERENCE_NAME][1] / best_of[RUN_NAME][1]
        print(f"dtrf run against the reference's whole process: {wall:.2f}x wall, "
              f"{cpu:.2f}x CPU (above 1: dtrf is faster)")
    if RUN_NAME in best_of and NUMBA_RUN_NAME in best_of:
        print(f"native library against numba's cache: "
              f"{best_of[NUMBA_RUN_NAME][0] / best_of[RUN_NAME][0]:.2f}x wall")
    heavy = heavy_imports(("--help",))
    print("dtrf --help imports: " + (", ".join(heavy) if heavy else "nothing heavy"), flush=True)
    if warm.returncode == 0:
        numba = [n for n in heavy_imports(RUN_ARGS) if n == "numba"]
        print(f"{RUN_NAME} imports numba: {'yes' if numba else 'no'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
