"""Cost of the real DTR step (`dtrforensics.torch.execute`) against a plain step.

For each model and budget: the plain training step (forward, loss, backward,
no dispatch mode) and the real step under the executor following the engine's
schedule (recording and replay done once beforehand, not timed), both from
the same state, interleaved, after one warm-up each; CPU time of the process
(fair on a shared machine) and wall time, the best of --repeat runs.

Goal (issue 29): at most 1.5x a plain step at an unconstrained budget on
zoo:gpt. Also at half of the peak where the step's floor allows it (zoo:gpt at
its default size is mostly parameters, so its floor is above half of its peak;
the larger batch below is where half of the peak runs).

    python benchmarks/torch_execute.py [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch

from dtrforensics.engine.baseline import baseline
from dtrforensics.torch import record
from dtrforensics.torch.execute import _plain_step, _real_step, _State
from dtrforensics.torch.schedule import floor, plan
from dtrforensics.torch.zoo import ZOO
from dtrforensics.trace.parser import parse_file

CASES = [("gpt", {}), ("gpt", {"batch": 16, "seq": 64})]


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def bench(name: str, options: dict, repeat: int) -> list[dict]:
    torch.manual_seed(0)
    model, batch, loss_fn = ZOO[name](**options)
    state = _State(model)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "step.log"
        record(model, batch, loss_fn, path)
        lines = path.read_text().splitlines()
        program = parse_file(path)
    state.restore()
    peak, least = baseline(program).peak, floor(program)
    rows = []
    for label, budget in (("unconstrained", peak), ("half of peak", peak // 2)):
        if budget < least:
            rows.append({"model": name, **options, "budget": label, "skipped":
                         f"half of the peak {peak // 2:,} is below the floor {least:,}"})
            continue
        schedule = plan(program, budget)
        plain, real = [], []
        for i in range(repeat + 1):
            state.restore()
            _, w, c = timed(lambda: _plain_step(model, batch, loss_fn))
            state.restore()
            (ex, _, stop, _), w2, c2 = timed(lambda s=schedule, b=budget: _real_step(
                model, batch, loss_fn, program, lines, s, b))
            assert stop is None and ex.stats.mismatches == 0
            if i:  # the first round warms up
                plain.append((w, c))
                real.append((w2, c2))
        def best(xs, k):
            return min(x[k] for x in xs)

        rows.append({
            "model": name, **options, "budget": label, "budget_bytes": budget,
            "evictions": schedule.result.summary.evictions, "remats": schedule.result.summary.remats,
            "plain_wall_s": best(plain, 0), "plain_cpu_s": best(plain, 1),
            "real_wall_s": best(real, 0), "real_cpu_s": best(real, 1),
            "cpu_ratio": best(real, 1) / best(plain, 1), "wall_ratio": best(real, 0) / best(plain, 0),
        })
    state.restore()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = [row for name, options in CASES for row in bench(name, options, args.repeat)]
    for row in rows:
        print(json.dumps(row))
    goal = next(r for r in rows if r["model"] == "gpt" and "batch" not in r and r["budget"] == "unconstrained")
    verdict = "met" if goal["cpu_ratio"] <= 1.5 else "NOT met"
    print(f"goal <= 1.5x a plain step on zoo:gpt unconstrained: {goal['cpu_ratio']:.2f}x CPU, "
          f"{goal['wall_ratio']:.2f}x wall: {verdict}")


if __name__ == "__main__":
    main()
