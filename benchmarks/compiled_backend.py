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
PyTorch, which the flops cost model only estimates. At each evicting ratio
the step is also planned under measured op costs (`dtr_backend(cost=
"measured")`: each op's wall time, the joint graph run once when compiling),
so the policy picks its victims by time and the simulated overhead is in
the same unit as the real slowdown. A ratio the schedule cannot meet is said
as such and skipped (measured costs vary from run to run, and a hole with
them).

`--against-knob`: zoo:gpt's and zoo:resnet's steps compiled by `aot_eager_decomp_partition` at
`activation_memory_budget` KNOB (1, 0.5, 0; solver dp), its peak recorded by
`record_option`, then `dtr_backend` at a budget of that many bytes, and the
dispatch-mode executor (`execute`) at the same bytes: the plain `aot_eager`
step, the knob's and DTR's compiled steps timed interleaved in one process,
each beside its simulated overhead (the knob's recorded log against the plain
log; DTR's engine on the joint graph's log).

    python benchmarks/compiled_backend.py [--repeat N] [--threads N] [--against-knob]
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path

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
        for cost in ("flops", "measured") if ratio < 1 else ("flops",):
            run, be = dtr_at(model, loss_fn, batch, ratio=ratio, cost=cost)
            if run is None:
                rows.append({"model": name, **options, "ratio": ratio, "cost": cost, "skipped": be})
                continue
            runs[ratio, cost], backends[ratio, cost] = run, be
    times: dict = {key: [] for key in runs}
    for i in range(repeat + 1):
        for key, run in runs.items():
            t = timed(run, batch)
            if i:
                times[key].append(t)
    plain_cpu = min(c for c, _ in times["plain"])
    plain_wall = min(w for _, w in times["plain"])
    for (ratio, cost), be in backends.items():
        (graph,) = be.graphs
        s = graph.summary
        key = ratio, cost
        cpu, wall = min(c for c, _ in times[key]), min(w for _, w in times[key])
        rows.append({"model": name, **options, "ratio": ratio, "cost": cost, "budget": graph.budget,
                     "peak": s.peak, "evictions": s.evictions, "remats": s.remats,
                     "simulated_overhead": s.overhead, "plain_cpu_s": plain_cpu, "dtr_cpu_s": cpu,
                     "cpu_ratio": cpu / plain_cpu, "wall_ratio": wall / plain_wall})
    return rows


KNOBS = (1.0, 0.5, 0.0)
KNOB_MODELS = ("gpt", "resnet")     # each at its default size


def knob_compiled(model, loss_fn, knob: float, batch):
    """The step `aot_eager_decomp_partition` compiles at KNOB (solver dp), compiled now."""
    from torch._functorch import config
    run = compiled(model, loss_fn, "aot_eager_decomp_partition")
    with config.patch(activation_memory_budget=knob, activation_memory_budget_solver="dp"):
        run(*batch)     # the partitioner runs here, at this knob
    return run


def dtr_at(model, loss_fn, batch, **at):
    """The step compiled with dtr_backend at `at` (budget= or ratio=), compiled now:
    (run, backend), or (None, the refusal's first 160 characters)."""
    be = dtr_backend(**at)
    run = compiled(model, loss_fn, be)
    try:
        run(*batch)
    except Exception as exc:     # dynamo wraps the refusal
        inner = getattr(exc, "inner_exception", exc)
        if not isinstance(inner, BudgetNotMet):
            raise
        return None, str(inner)[:160]
    return run, be


def executor_at(name: str, budget: int) -> dict:
    from dtrforensics.torch.execute import execute
    torch.manual_seed(0)
    model, batch, loss_fn = ZOO[name]()
    try:
        r = execute(model, batch, loss_fn, budget=budget)
    except Exception as exc:     # a budget below the eager step's floor
        return {"executor": f"refused: {str(exc)[:100]}"}
    return {"executor_outcome": r.outcome, "executor_cpu_ratio": r.cpu_seconds / r.plain_cpu_seconds,
            "executor_wall_ratio": r.wall_seconds / r.plain_wall_seconds,
            "executor_overhead": r.overhead}


def against_knob(name: str, repeat: int) -> list[dict]:
    from dtrforensics.torch.checkpointing import record_option
    torch._dynamo.config.recompile_limit = 64      # one code object, compiled per step
    with tempfile.TemporaryDirectory(prefix="dtrf-knob-") as folder:
        recs = {knob: record_option(f"zoo:{name}", f"compile:{knob:g}:dp",
                                    Path(folder) / f"knob{knob:g}.log") for knob in KNOBS}
    torch.manual_seed(0)
    model, batch, loss_fn = ZOO[name]()
    torch._dynamo.reset()
    runs = {"plain": compiled(model, loss_fn, "aot_eager")}
    runs["plain"](*batch)
    rows, dtr = [], {}
    for knob, rec in recs.items():
        runs[("knob", knob)] = knob_compiled(model, loss_fn, knob, batch)
        run, be = dtr_at(model, loss_fn, batch, budget=rec.peak_bytes)
        if run is not None:
            runs[("dtr", knob)], dtr[knob] = run, be
        else:
            dtr[knob] = be      # the refusal's text
    times: dict = {key: [] for key in runs}
    for i in range(repeat + 1):
        for key, run in runs.items():
            cpu = timed(run, batch)[0]
            if i:
                times[key].append(cpu)
    plain = min(times["plain"])
    for knob, rec in recs.items():
        row = {"model": name, "knob": knob, "budget": rec.peak_bytes,
               "knob_cpu_ratio": min(times[("knob", knob)]) / plain,
               "knob_overhead": rec.overhead, "plain_cpu_s": plain}
        be = dtr[knob]
        if isinstance(be, str):
            row["dtr"] = f"refused: {be}"
        else:
            (graph,) = be.graphs
            s, joint_peak = graph.summary, _joint_peak(graph)
            row.update({"joint_peak": joint_peak, "dtr_ratio": rec.peak_bytes / joint_peak,
                        "evictions": s.evictions, "remats": s.remats,
                        "dtr_cpu_ratio": min(times[("dtr", knob)]) / plain,
                        "dtr_overhead": s.overhead})
        row.update(executor_at(name, rec.peak_bytes))
        rows.append(row)
    return rows


def _joint_peak(graph) -> int:
    from dtrforensics.engine.baseline import baseline
    return int(baseline(graph.joint.program).peak)


def main_against_knob(repeat: int) -> None:
    for name in KNOB_MODELS:
        for row in against_knob(name, repeat):
            print(json.dumps(row), flush=True)
            dtr = row.get("dtr") or (f"DTR at {row['dtr_ratio']:.3f} of the joint peak "
                                     f"({row['evictions']} evictions): {row['dtr_cpu_ratio']:.3f}x "
                                     f"(simulated {row['dtr_overhead']:.3f}x)")
            print(f"zoo:{name} knob {row['knob']:g} ({row['budget']:,} bytes): knob step "
                  f"{row['knob_cpu_ratio']:.3f}x the plain aot_eager step in CPU time (simulated "
                  f"{row['knob_overhead']:.3f}x); {dtr}; executor "
                  f"{row.get('executor_cpu_ratio', float('nan')):.2f}x the plain eager step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--against-knob", action="store_true",
                        help="zoo:gpt and zoo:resnet at activation_memory_budget 1, 0.5, 0 against DTR at its bytes")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.against_knob:
        main_against_knob(args.repeat)
        return
    rows = []
    for name, options, ratios in CASES:
        for row in bench(name, options, ratios, args.repeat):
            print(json.dumps(row), flush=True)
            rows.append(row)
    for row in rows:
        size = ", ".join(f"{k} {v}" for k, v in row.items() if k in ("batch", "seq", "image")) \
            or "default size"
        at = f"zoo:{row['model']} ({size}) at ratio {row['ratio']}, {row['cost']} costs"
        if "skipped" in row:
            print(f"{at}: refused ({row['skipped']})")
            continue
        goal = ""
        if row["evictions"] == 0:
            goal = f"; goal <= 1.05x {'met' if row['cpu_ratio'] <= 1.05 else 'NOT met'}"
        print(f"{at} ({row['evictions']} evictions): "
              f"{row['cpu_ratio']:.3f}x the plain compiled step in CPU time ({row['wall_ratio']:.3f}x "
              f"wall), simulated overhead {row['simulated_overhead']:.3f}x{goal}")


if __name__ == "__main__":
    main()
