"""Cost of the compiled DTR step (`dtr_backend`) against the plain compiled step.

For each model, the training step `loss_fn(model(x), y)` (forward and
backward) is compiled once with `aot_eager` and once per budget with
`dtr_backend` (the engine's schedule of the joint graph lowered into the
forward and backward graphs, no checking), in the same process; then, after
a warm-up round, the steps run interleaved and the best of --repeat rounds
is kept (CPU seconds on one intra-op thread, wall seconds beside them).
Budgets: the joint graph's peak (nothing evicted; goal: at most 1.05x the
plain step) and evicting ratios, each beside the engine's simulated
overhead (flops costs): the real slowdown is what recomputing costs in
PyTorch, which the flops cost model only estimates. A ratio the schedule
cannot meet is said as such and skipped.

    python benchmarks/compiled_backend.py [--repeat N] [--threads N]
"""

from __future__ import annotations

import argparse
import copy
import json
import time

import common  # noqa: F401  (this checkout's src/ first on the path)
import torch

from dtrforensics.torch import BudgetNotMet, dtr_backend
from dtrforensics.torch.zoo import ZOO

CASES = [("gpt", {}, (1.0, 0.95, 0.85)), ("gpt", {"batch": 16, "seq": 64}, (1.0, 0.8, 0.6)),
         ("resnet", {}, (1.0, 0.8, 0.7)), ("resnet", {"batch": 16, "image": 32}, (1.0, 0.8, 0.6))]


def compiled(model, loss_fn, backend):
    m = copy.deepcopy(model)
    step = torch.compile(lambda x, y: loss_fn(m(x), y), backend=backend, dynamic=False)

    def run(x, y):
        loss = step(x, y)
        loss.backward()
        for p in m.parameters():
            p.grad = None
    return run


def timed(run, batch) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    run(*batch)
    return time.process_time() - cpu, time.perf_counter() - wall


def bench(name: str, options: dict, ratios, repeat: int) -> list[dict]:
    torch.manual_seed(0)
    model, batch, loss_fn = ZOO[name](**options)
    torch._dynamo.reset()     # once per model: a reset would recompile the steps compiled before
    runs = {"plain": compiled(model, loss_fn, "aot_eager")}
    runs["plain"](*batch)
    backends, rows = {}, []
    for ratio in ratios:
        be = dtr_backend(ratio=ratio)
        run = compiled(model, loss_fn, be)
        try:
            run(*batch)
        except Exception as exc:     # dynamo wraps the refusal
            inner = getattr(exc, "inner_exception", exc)
            if not isinstance(inner, BudgetNotMet):
                raise
            rows.append({"model": name, **options, "ratio": ratio, "skipped": str(inner)[:160]})
            continue
        runs[ratio], backends[ratio] = run, be
    times: dict = {key: [] for key in runs}
    for i in range(repeat + 1):
        for key, run in runs.items():
            t = timed(run, batch)
            if i:
                times[key].append(t)
    plain_cpu = min(c for c, _ in times["plain"])
    plain_wall = min(w for _, w in times["plain"])
    for ratio, be in backends.items():
        (graph,) = be.graphs
        s = graph.summary
        cpu, wall = min(c for c, _ in times[ratio]), min(w for _, w in times[ratio])
        rows.append({"model": name, **options, "ratio": ratio, "budget": graph.budget,
                     "peak": s.peak, "evictions": s.evictions, "remats": s.remats,
                     "simulated_overhead": s.overhead, "plain_cpu_s": plain_cpu, "dtr_cpu_s": cpu,
                     "cpu_ratio": cpu / plain_cpu, "wall_ratio": wall / plain_wall})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for name, options, ratios in CASES:
        for row in bench(name, options, ratios, args.repeat):
            print(json.dumps(row), flush=True)
            rows.append(row)
    for row in rows:
        size = ", ".join(f"{k} {v}" for k, v in row.items() if k in ("batch", "seq", "image")) \
            or "default size"
        if "skipped" in row:
            print(f"zoo:{row['model']} ({size}) at ratio {row['ratio']}: refused ({row['skipped']})")
            continue
        goal = ""
        if row["evictions"] == 0:
            goal = f"; goal <= 1.05x {'met' if row['cpu_ratio'] <= 1.05 else 'NOT met'}"
        print(f"zoo:{row['model']} ({size}) at ratio {row['ratio']} ({row['evictions']} evictions): "
              f"{row['cpu_ratio']:.3f}x the plain compiled step in CPU time ({row['wall_ratio']:.3f}x "
              f"wall), simulated overhead {row['simulated_overhead']:.3f}x{goal}")


if __name__ == "__main__":
    main()
