"""How well does the simulator predict the real slowdown of DTR? (issue 29, overhead)

For each zoo model: record one step with `measured` costs (wall ns per op on
this machine), then over budgets from the step's floor to its peak: the
engine's overhead for that log ((model + rematerialization compute) / model
compute) beside the real step's: the CPU time of the real step under the
executor at that budget over its CPU time at the unconstrained budget (the
same executor, so the dispatch mode's own cost cancels), each the best of
--repeat runs, the two alternating so that a change in the machine's load
moves both. PyTorch runs on one intra-op thread. Writes
docs/figures/runtime-overhead.json and .png.

    python benchmarks/torch_overhead.py [--repeat N] [--points N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from common import ROOT

from dtrforensics.analyses.floor import floor
from dtrforensics.torch.execute import prepare
from dtrforensics.torch.schedule import plan
from dtrforensics.torch.zoo import ZOO

MODELS = ("gpt", "resnet")
OUT = ROOT / "docs" / "figures" / "runtime-overhead"


def real_ratio(step, schedule, budget, free, repeat) -> tuple[float, float]:
    """(CPU ratio, wall ratio) of the step at `budget` over the unconstrained one,
    best of `repeat` alternating runs of each."""
    at, base = [], []
    for _ in range(repeat):
        run = step.real(schedule, budget)
        assert run.stop is None and run.executor.stats.mismatches == 0
        at.append(run.timing)
        base.append(step.real(free, step.peak).timing)
    return (min(t.cpu for t in at) / min(t.cpu for t in base),
            min(t.wall for t in at) / min(t.wall for t in base))


def study(name: str, points: int, repeat: int) -> list[dict]:
    torch.manual_seed(0)
    step = prepare(*ZOO[name](), cost="measured")
    peak, least = step.peak, floor(step.program).floor
    free = plan(step.program, peak)
    step.real(free, peak)   # warm-up
    rows = []
    for i in range(points + 1):
        budget = least + (peak - least) * i // points
        schedule = plan(step.program, budget)
        s = schedule.result.summary
        row = {"model": name, "budget": budget, "ratio": budget / peak, "outcome": s.outcome,
               "simulated_overhead": s.overhead, "evictions": s.evictions, "remats": s.remats}
        if s.outcome == "ok":
            row["real_overhead"], row["real_wall_overhead"] = real_ratio(step, schedule, budget, free, repeat)
        rows.append(row)
        print(json.dumps(row), flush=True)
    step.state.restore()
    return rows


def draw(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(MODELS), figsize=(10, 4.4))
    for ax, name in zip(axes, MODELS):
        ok = [r for r in rows if r["model"] == name and r["outcome"] == "ok"]
        ratios = [r["ratio"] for r in ok]
        ax.axhline(1.0, color="0.8", lw=0.8, zorder=0)
        ax.plot(ratios, [r["simulated_overhead"] for r in ok], "o-", label="simulated (measured costs)")
        ax.plot(ratios, [r["real_overhead"] for r in ok], "s--", label="real, CPU time / unconstrained")
        ax.plot(ratios, [r["real_wall_overhead"] for r in ok], "^:", color="tab:green", alpha=0.7,
                label="real, wall time / unconstrained")
        failed = [r["ratio"] for r in rows if r["model"] == name and r["outcome"] != "ok"]
        if failed:
            low = ax.get_ylim()[0]
            ax.plot(failed, [low] * len(failed), "x", color="tab:red", clip_on=False,
                    label="out of memory (simulated; not run)")
        ax.set_title(f"zoo:{name}")
        ax.set_xlabel("budget / unconstrained peak")
        ax.set_ylabel("overhead (x)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--points", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [row for name in MODELS for row in study(name, args.points, args.repeat)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.with_suffix(".json").write_text(json.dumps(rows, indent=1) + "\n")
    draw(rows, OUT.with_suffix(".png"))
    print(f"wrote {OUT.with_suffix('.json')} and {OUT.with_suffix('.png')}")


if __name__ == "__main__":
    main()
