"""Whole-process start-up of `dtrf`, against baselines measured in the same run.

    python benchmarks/startup.py [--repeat N]

Times, as whole processes (the best and the median of N runs each):

* `python -c pass`: the interpreter alone, the floor of any Python tool;
* `dtrf --help`: goal at most 0.25 s (issue 12, goal 3);
* `dtrf run resnet32 --ratio 0.104 --json` with a warm kernel cache: goal at
  most 0.5 s;
* the reference simulator's own import (`import simrd.runtime`) when
  `DTRF_SIMRD` names an unpacked dtr-prototype `simrd` package folder.

Also prints the imports `dtrf --help` must not make (analyses, numba, DuckDB,
Arrow, Textual, matplotlib) if it makes any. Run it on a quiet machine: the
ratios to `python -c pass` say how much of a slow reading is the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("dtrforensics.analyses", "dtrforensics.engine", "numba", "duckdb", "pyarrow",
         "textual", "matplotlib")
RUN_ARGS = ("run", "resnet32", "--ratio", "0.104", "--json")
GOALS = {"dtrf --help": 0.25, "dtrf run resnet32 --ratio 0.104 --json": 0.5}

def dtrf_cmd(*args: str) -> list[str]:
    script = Path(sys.executable).with_name("dtrf")
    return [str(script), *args] if script.exists() else \
        [sys.executable, "-m", "dtrforensics.cli.main", *args]


def timed(cmd: list[str], repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - start)
    return times


def heavy_imports(cmd_args: tuple[str, ...]) -> list[str]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "dtrforensics.cli.main",
                           *cmd_args], capture_output=True, text=True)
    names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()
             if line.startswith("import time:")}
    return sorted(n for n in names if any(n == h or n.startswith(h + ".") for h in HEAVY))


def reference_cmd() -> list[str] | None:
    """The reference simulator's own import (`simrd.runtime`), the least its
    process does for any point; None when `DTRF_SIMRD` is not set."""
    simrd = os.environ.get("DTRF_SIMRD")
    if not simrd:
        return None
    parent = str(Path(simrd).resolve().parent)
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {parent!r}); "
                                  "import simrd.runtime"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10, help="runs per command")
    args = ap.parse_args()

    subprocess.run(dtrf_cmd(*RUN_ARGS), stdout=subprocess.DEVNULL, check=False)  # warm caches
    rows = [("python -c pass", timed([sys.executable, "-c", "pass"], args.repeat)),
            ("dtrf --help", timed(dtrf_cmd("--help"), args.repeat))]
    try:
        rows.append((" ".join(("dtrf",) + RUN_ARGS), timed(dtrf_cmd(*RUN_ARGS), args.repeat)))
    except subprocess.CalledProcessError:
        print("resnet32 not found: set DTRF_TRACES to time `dtrf run`", file=sys.stderr)
    ref = reference_cmd()
    if ref is not None:
        rows.append(("reference: import simrd.runtime", timed(ref, args.repeat)))
    else:
        print("DTRF_SIMRD not set: cannot compare with the reference's start-up",
              file=sys.stderr)
    floor = min(rows[0][1])
    print(f"{'process':<44}{'best':>9}{'median':>9}{'x pass':>8}  goal")
    for name, times in rows:
        best, median = min(times), statistics.median(times)
        goal = GOALS.get(name)
        mark = "" if goal is None else f"{goal:.2f} s " + ("met" if best <= goal else "missed")
        print(f"{name:<44}{best:>8.3f}s{median:>8.3f}s{best / floor:>8.1f}  {mark}")
    heavy = heavy_imports(("--help",))
    print("dtrf --help imports: " + (", ".join(heavy) if heavy else "nothing heavy"), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
