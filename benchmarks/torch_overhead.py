"""How well does the simulator predict the real slowdown of DTR? (issue 29, overhead)

For each zoo model: record one step with `measured` costs (wall ns per op on
this machine), then over budgets from the step's floor to its peak: the
engine's overhead for that log ((model + rematerialization compute) / model
compute) beside the real step's, the CPU time of the real step under the
executor at that budget over its CPU time at the unconstrained budget (the
same executor, so the dispatch mode's own cost cancels), best of --repeat.
Writes docs/figures/runtime-overhead.json and .png.

    python benchmarks/torch_overhead.py [--repeat N] [--points N]
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
from dtrforensics.torch.execute import _real_step, _State
from dtrforensics.torch.schedule import floor, plan
from dtrforensics.torch.zoo import ZOO
from dtrforensics.trace.parser import parse_file

MODELS = ("gpt", "resnet")
OUT = ROOT / "docs" / "figures" / "runtime-overhead"


def real_cpu(model, batch, loss_fn, program, lines, schedule, budget, state, repeat) -> float:
    best = None
    for _ in range(repeat):
        state.restore()
        start = time.process_time()
        ex, _, stop, _ = _real_step(model, batch, loss_fn, program, lines, schedule, budget)
        took = time.process_time() - start
        assert stop is None and ex.stats.mismatches == 0
        best = took if best is None else min(best, took)
    return best


def study(name: str, points: int, repeat: int) -> list[dict]:
    torch.manual_seed(0)
    model, batch, loss_fn = ZOO[name]()
    state = _State(model)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "step.log"
        record(model, batch, loss_fn, path, cost="measured")
        lines = path.read_text().splitlines()
        program = parse_file(path)
    state.restore()
    peak, least = baseline(program).peak, floor(program)
    free = plan(program, peak)
    real_cpu(model, batch, loss_fn, program, lines, free, peak, state, 1)  # warm-up
    base = real_cpu(model, batch, loss_fn, program, lines, free, peak, state, repeat)
    rows = []
    for i in range(points + 1):
        budget = least + (peak - least) * i // points
        schedule = plan(program, budget)
        s = schedule.result.summary
        row = {"model": name, "budget": budget, "ratio": budget / peak, "outcome": s.outcome,
               "simulated_overhead": s.overhead, "evictions": s.evictions, "remats": s.remats}
        if s.outcome == "ok":
            took = real_cpu(model, batch, loss_fn, program, lines, schedule, budget, state, repeat)
            row["real_overhead"] = took / base
        rows.append(row)
        print(json.dumps(row), flush=True)
    state.restore()
    return rows


def draw(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(MODELS), figsize=(10, 3.8))
    for ax, name in zip(axes, MODELS):
        ok = [r for r in rows if r["model"] == name and r["outcome"] == "ok"]
        ratios = [r["ratio"] for r in ok]
        ax.plot(ratios, [r["simulated_overhead"] for r in ok], "o-", label="simulated (measured costs)")
        ax.plot(ratios, [r["real_overhead"] for r in ok], "s--", label="real (CPU time / unconstrained)")
        for r in rows:
            if r["model"] == name and r["outcome"] != "ok":
                ax.axvline(r["ratio"], color="0.85", zorder=0)
        ax.set_title(f"zoo:{name}")
        ax.set_xlabel("budget / peak")
        ax.set_ylabel("overhead")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--points", type=int, default=10)
    args = parser.parse_args()
    rows = [row for name in MODELS for row in study(name, args.points, args.repeat)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    draw(rows, OUT.with_suffix(".png"))
    print(f"wrote {OUT.with_suffix('.json')} and {OUT.with_suffix('.png')}")


if __name__ == "__main__":
    main()
