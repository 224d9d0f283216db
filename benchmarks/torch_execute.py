"""Cost of the real DTR step (`dtrforensics.torch.execute`) against a plain step.

For each model and budget, three steps from the same state, interleaved, one
warm-up round, then the best of --repeat rounds:

- plain: forward, loss, backward with no dispatch mode;
- pass-through: the same under a `TorchDispatchMode` that only calls each op,
  which is the least any executor built on a dispatch mode can cost (every op
  makes a round trip through Python);
- executor: the real step following the engine's schedule (`Step.real`;
  recording, parsing and planning are done once beforehand, not timed).

Beside them, what is not in the executor's time: reading the recording for
the executor (`following.RecordedLog`, once per recorded step) and the setup of
each run (its `FollowingLog` and `Executor`), best of --repeat, CPU time.
Allocation checks are always verified (live storage bytes against the
engine's memory): the benchmark asserts no mismatch.

Times are the step's own CPU seconds with PyTorch on one intra-op thread
(--threads): CPU time is fair on a shared machine, and a second thread's
spinning would count as work. Wall seconds are printed beside them.

Goal (issue 29): the executor at most 1.5x a plain step at an unconstrained
budget on zoo:gpt. At its default size (a 3-5 ms step of 315 ops) the
pass-through mode alone costs more than that, so the larger sizes below show
where the executor's own cost per op stops mattering. Half of the peak runs
where the step's floor allows it (zoo:gpt at its default size is mostly
parameters, so its floor is above half of its peak).

With --before DIR (the `src/dtrforensics` folder of a copy of the package at
another commit, e.g. from `git archive`), the executor as it was runs in the
same rounds, on its own recording of the same step (the copy is imported under
another name, `dtrf_before`): `before_cpu_s`, its cost an op above the
pass-through and `after_over_before`, the same run's ratio.

    python benchmarks/torch_execute.py [--repeat N] [--threads N] [--before DIR]
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import common  # noqa: F401  (this checkout's src/ first on the path)
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dtrforensics.analyses.floor import floor
from dtrforensics.torch.execute import prepare
from dtrforensics.torch.following import FollowingLog, RecordedLog
from dtrforensics.torch.runtime import Executor
from dtrforensics.torch.schedule import plan
from dtrforensics.torch.step import ModuleLocator
from dtrforensics.torch.zoo import ZOO

CASES = [("gpt", {}), ("gpt", {"batch": 16, "seq": 64}), ("gpt", {"batch": 8, "seq": 128, "width": 256})]


class PassThrough(TorchDispatchMode):
    """Calls every op and nothing else."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def passing_through(step):
    with PassThrough():
        return step.plain()


def setup_seconds(step, schedule, budget: int, repeat: int) -> tuple[float, float]:
    """CPU seconds to read the recording for the executor (once per step) and to
    set up one run (its log follower and executor), best of `repeat`."""
    read, per_run = [], []
    for _ in range(repeat):
        start = time.process_time()
        recording = RecordedLog(step.lines)
        read.append(time.process_time() - start)
        start = time.process_time()
        Executor(FollowingLog(recording), step.program, schedule.events, budget, ModuleLocator(step.model).where)
        per_run.append(time.process_time() - start)
    return min(read), min(per_run)


def before_package(folder: str):
    """The package copy at `folder`, imported as `dtrf_before` (its modules import
    each other relatively): its `execute`, `schedule` and `zoo` modules. The
    engine's native libraries of this checkout go beside its engine (each is
    keyed by the engine's sources: one that does not fit is not loaded)."""
    root = Path(tempfile.mkdtemp(prefix="dtrf-before-"))
    atexit.register(shutil.rmtree, root, True)     # the copy goes with the run
    copy = root / "dtrf_before"
    shutil.copytree(folder, copy)
    cache = copy / "engine" / "__pycache__"
    cache.mkdir(exist_ok=True)
    for library in (common.ROOT / "src" / "dtrforensics" / "engine" / "__pycache__").glob("native-*"):
        shutil.copy(library, cache)
    sys.path.insert(0, str(root))
    return tuple(importlib.import_module(f"dtrf_before.torch.{m}") for m in ("execute", "schedule", "zoo"))


def bench(name: str, options: dict, repeat: int, before=None) -> list[dict]:
    torch.manual_seed(0)
    step = prepare(*ZOO[name](**options))
    if before is not None:
        torch.manual_seed(0)
        old_step = before[0].prepare(*before[2].ZOO[name](**options))
        assert old_step.lines == step.lines
    peak, least = step.peak, floor(step.program).floor
    rows = []
    for label, budget in (("unconstrained", peak), ("half of peak", peak // 2)):
        row = {"model": name, **options, "ops": step.program.n_ops, "budget": label}
        if budget < least:
            rows.append({**row, "skipped": f"half of the peak {peak // 2:,} is below the floor {least:,}"})
            continue
        schedule = plan(step.program, budget)
        old_schedule = before[1].plan(old_step.program, budget) if before is not None else None
        if schedule.result.summary.outcome != "ok":
            rows.append({**row, "skipped": f"the engine's run at {budget:,} bytes ends "
                                           f"{schedule.result.summary.outcome}"})
            continue
        plain, through, real, old = [], [], [], []
        for i in range(repeat + 1):
            p, t = step.plain()[1], passing_through(step)[1]
            if before is not None:
                old_run = old_step.real(old_schedule, budget)
                assert old_run.stop is None and old_run.executor.stats.mismatches == 0
            run = step.real(schedule, budget)
            assert run.stop is None and run.executor.stats.mismatches == 0
            if i:   # the first round warms up
                plain.append(p)
                through.append(t)
                real.append(run.timing)
                if before is not None:
                    old.append(old_run.timing)
        best = {key: (min(x.cpu for x in xs), min(x.wall for x in xs))
                for key, xs in (("plain", plain), ("through", through), ("real", real), ("old", old))
                if xs}
        read_s, setup_s = setup_seconds(step, schedule, budget, repeat)
        summary = schedule.result.summary
        rows.append({
            **row, "budget_bytes": budget, "evictions": summary.evictions, "remats": summary.remats,
            "plain_cpu_s": best["plain"][0], "pass_through_cpu_s": best["through"][0],
            "executor_cpu_s": best["real"][0], "executor_wall_s": best["real"][1],
            "plain_wall_s": best["plain"][1],
            "cpu_ratio": best["real"][0] / best["plain"][0],
            "pass_through_cpu_ratio": best["through"][0] / best["plain"][0],
            "wall_ratio": best["real"][1] / best["plain"][1],
            "executor_us_per_op_above_pass_through":
                (best["real"][0] - best["through"][0]) / step.program.n_ops * 1e6,
            "recording_read_cpu_s": read_s, "executor_setup_cpu_s": setup_s,
        })
        if before is not None:
            rows[-1].update({
                "before_cpu_s": best["old"][0], "after_over_before": best["real"][0] / best["old"][0],
                "before_us_per_op_above_pass_through":
                    (best["old"][0] - best["through"][0]) / step.program.n_ops * 1e6})
    step.state.restore()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--before", metavar="DIR",
                        help="a copy of the package (its src/dtrforensics) to time in the same rounds")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    before = before_package(args.before) if args.before else None
    rows = []
    for name, options in CASES:
        for row in bench(name, options, args.repeat, before):
            print(json.dumps(row), flush=True)
            rows.append(row)
    for row in rows:
        if "skipped" in row:
            continue
        size = ", ".join(f"{k} {v}" for k, v in row.items() if k in ("batch", "seq", "width")) or "default size"
        verdict = "met" if row["cpu_ratio"] <= 1.5 else "NOT met"
        print(f"zoo:{row['model']} ({size}), {row['budget']}: executor {row['cpu_ratio']:.2f}x a plain "
              f"step in CPU time ({row['wall_ratio']:.2f}x wall), pass-through mode "
              f"{row['pass_through_cpu_ratio']:.2f}x, {row['executor_us_per_op_above_pass_through']:.1f} "
              f"us an op above it; goal <= 1.5x {verdict} (not timed: setup of the run "
              f"{row['executor_setup_cpu_s'] * 1e3:.2f} ms, recording read once "
              f"{row['recording_read_cpu_s'] * 1e3:.2f} ms)")
        if "before_cpu_s" in row:
            print(f"  before: {row['before_cpu_s'] * 1e3:.2f} ms, "
                  f"{row['before_us_per_op_above_pass_through']:.1f} us an op above the pass-through; "
                  f"after {row['executor_cpu_s'] * 1e3:.2f} ms ({row['after_over_before']:.3f}x before)")


if __name__ == "__main__":
    main()
