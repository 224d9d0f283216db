"""The runtime's proofs on a CUDA device, with the allocator's own count beside the live count.

For zoo:gpt, zoo:mlp and a small transformers Llama built from its config (no
download), each moved to the first CUDA device, at two budgets (where a DTR
run evicts nothing: the peak of a run with memory to spare; and the lowest
budget of a 10-point grid from the floor up where the engine completes with
evictions), `execute(..., optimizer="adamw", steps=--steps)` runs the steps
for real under the engine's schedule. Per model and budget the table says:
whether every step matched (`ExecuteResult.mismatch()` is None: decisions the
engine's, live bytes the engine's memory at every allocation check, loss,
gradients, parameters and optimizer states bitwise those of the plain steps),
the checks and evictions per step, and, around every real step, the
allocator's truth from `torch.cuda.memory_stats()`: its peak of allocated
bytes above what was allocated when the step began, beside the executor's
live count's peak above its count at that moment (the step's constants).
The allocator's figure may exceed the live count by its rounding (512-byte
blocks) and by kernel workspaces (cuBLAS), which the engine does not model;
`num_alloc_retries` and `num_ooms` say whether the caching allocator had to
free cached blocks or failed.

Then, per model at its evicting budget, one step with `workspaces=True` (the
allocator's statistics around each op: its largest workspace, op and module,
and live bytes plus the running op's allocations) and one with
`reserve_workspace="auto"`, whose live bytes plus workspace must stay within
the budget (exit 3 otherwise). These are separate runs: the per-op reset of
the peak statistics would spoil the table's step-wide peak.

`--backend` runs only the compiled backend's checks (`backend_checks`, a few
minutes): zoo:gpt (batch 8) on CUDA compiled with `dtr_backend(checking=True)`
at the first of ratios 0.9, 0.85, 0.95 of its joint graph's peak that evicts:
loss and gradients bitwise those of the plain `aot_eager` step, live bytes the
engine's at every check, then one measured step (`measure_next`: each op's
workspace from the allocator's statistics) and one more step watched by
`torch.cuda.max_memory_allocated`: the step's peak (above what was allocated
when it began, plus the parameters, buffers and batch it started from) at most
the budget plus the largest workspace, plus the caching allocator's rounding
(at most 511 bytes for each storage of the joint graph's log: a loose bound,
said beside the raw excess).

Bitwise comparisons on CUDA need deterministic kernels: the script sets
`CUBLAS_WORKSPACE_CONFIG=:4096:8` and `torch.use_deterministic_algorithms(True,
warn_only=True)` before CUDA starts (an op without a deterministic kernel
warns, and its values then show whether it mattered). A run that raises is a
row with its error. It exits 3 when a run does not match or raised, 0
otherwise, and 0 with one line on a machine without CUDA.

    python benchmarks/cuda_checks.py [--steps N] [--backend]
"""

from __future__ import annotations

import argparse
import os
import sys

import common  # noqa: F401  (this checkout's src/ first on the path)

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402
from torch.utils._pytree import tree_map  # noqa: E402

import dtrforensics.torch.execute as execute_module  # noqa: E402
from dtrforensics.analyses.floor import floor  # noqa: E402
from dtrforensics.engine.replay import replay  # noqa: E402
from dtrforensics.torch.execute import execute, prepare  # noqa: E402
from dtrforensics.torch.spec import build  # noqa: E402

MODELS = [("zoo:gpt", {"batch": 8}), ("zoo:mlp", {}),
          ("hf:LlamaForCausalLM", {"seq": 64, "batch": 4, "hidden_size": 64,
                                   "intermediate_size": 128})]
OPTIMIZER = "adamw"


def on_cuda(spec: str, options: dict):
    """The model, batch and loss function of `spec`, built on the CPU from seed 0
    and moved to the first CUDA device."""
    torch.manual_seed(0)
    model, batch, loss_fn = build(spec, **options)
    moved = tree_map(lambda x: x.cuda() if isinstance(x, torch.Tensor) else x, tuple(batch))
    return model.cuda(), moved, loss_fn


def budgets(spec: str, options: dict, points: int = 10) -> dict[str, int]:
    """No eviction (the peak of a DTR run with memory to spare) and the lowest
    budget of a grid from the floor up where the engine completes with evictions."""
    program = prepare(*on_cuda(spec, options), optimizer=OPTIMIZER).program
    least = floor(program).floor
    top = replay(program, budget=1 << 62).summary.peak_memory
    found = {"no eviction": top}
    for budget in (least + (top - least) * i // points for i in range(points)):
        summary = replay(program, budget=budget).summary
        if summary.outcome == "ok" and summary.evictions > 0:
            found["evicting"] = budget
            break
    return found


class AllocatorWatch:
    """`torch.cuda.memory_stats()` around every real step: the peak of allocated
    bytes above the allocated bytes when the step's training step began, and the
    executor's live count then (its constants)."""

    def __init__(self):
        self.steps: list[dict] = []
        self._training_step = execute_module._training_step
        self._real_step = execute_module.Step._real_step

    def install(self) -> None:
        watch = self

        def training_step(ex, *args):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            stats = torch.cuda.memory_stats()
            watch.steps.append({"allocated_at_start": stats["allocated_bytes.all.current"],
                                "live_at_start": ex.live, "executor": ex})
            return watch._training_step(ex, *args)

        def real_step(step, *args):
            run = watch._real_step(step, *args)
            torch.cuda.synchronize()
            stats = torch.cuda.memory_stats()
            now = watch.steps[-1]
            ex = now.pop("executor")
            now.update(allocator_over_start=stats["allocated_bytes.all.peak"] - now["allocated_at_start"],
                       live_over_start=ex.stats.peak_live - now["live_at_start"],
                       retries=stats["num_alloc_retries"], ooms=stats["num_ooms"])
            return run

        execute_module._training_step = training_step
        execute_module.Step._real_step = real_step


def check(spec: str, options: dict, label: str, budget: int, steps: int, watch: AllocatorWatch) -> dict:
    watch.steps.clear()
    result = execute(*on_cuda(spec, options), budget=budget, optimizer=OPTIMIZER, steps=steps)
    over = [s["allocator_over_start"] - s["live_over_start"] for s in watch.steps]
    return {"model": spec, "budget kind": label, "budget": budget, "mismatch": result.mismatch(),
            "steps": f"{sum(c.mismatch is None for c in result.steps)}/{steps}",
            "checks": result.steps[0].alloc_checks,
            "memory equal": all(c.memory_mismatches == 0 for c in result.steps),
            "evictions": result.steps[0].evictions, "remats": result.steps[0].remats,
            "peak live": result.peak_live_bytes,
            "live over start": max(s["live_over_start"] for s in watch.steps),
            "allocator over start": max(s["allocator_over_start"] for s in watch.steps),
            "allocator - live": f"{min(over):,}..{max(over):,}",
            "retries": sum(s["retries"] for s in watch.steps),
            "ooms": sum(s["ooms"] for s in watch.steps)}


COLUMNS = ("model", "budget kind", "budget", "mismatch", "steps", "checks", "memory equal",
           "evictions", "remats", "peak live", "live over start", "allocator over start",
           "allocator - live", "retries", "ooms")


def failed_row(spec: str, label: str, budget: int, exc: Exception) -> dict:
    """A row for a run that raised: the error as its mismatch, the rest empty."""
    row = dict.fromkeys(COLUMNS, "-")
    first = str(exc).strip().split("\n")[0]
    row.update({"model": spec, "budget kind": label, "budget": budget,
                "mismatch": f"raised {type(exc).__name__}: {first}"})
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--backend", action="store_true", help="only the compiled backend's checks")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/cuda_checks.py needs a CUDA GPU: torch.cuda.is_available() is False "
              "here, nothing was run")
        return 0
    # an op without a deterministic kernel warns; its values then show it
    torch.use_deterministic_algorithms(True, warn_only=True)
    if args.backend:
        return backend_checks()
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"optimizer {OPTIMIZER}, {args.steps} steps")
    watch = AllocatorWatch()
    watch.install()
    rows = []
    for spec, options in MODELS:
        try:
            found = budgets(spec, options)
        except Exception as exc:    # noqa: BLE001 - one model's failure is a row of the table
            found = {}
            rows.append(failed_row(spec, "any", 0, exc))
        for label, budget in found.items():
            try:
                rows.append(check(spec, options, label, budget, args.steps, watch))
            except Exception as exc:    # noqa: BLE001
                rows.append(failed_row(spec, label, budget, exc))
            print(rows[-1], flush=True)
    print_table(rows)
    for spec, options in MODELS:
        rows += workspace_rows(spec, options, budgets(spec, options).get("evicting"))
    failed = [r for r in rows if r["mismatch"] is not None]
    for r in failed:
        print(f"NOT FAITHFUL: {r['model']} at {r['budget']:,} B: {r['mismatch']}")
    return 3 if failed else 0


def workspace_rows(spec: str, options: dict, budget: int | None) -> list[dict]:
    """One step measuring workspaces at `budget`, one reserving them; printed as they
    run, a row (with its mismatch) for each."""
    if budget is None:
        return []
    rows = []
    for label, kwargs in (("workspaces", {"workspaces": True}),
                          ("reserve auto", {"reserve_workspace": "auto"})):
        try:
            result = execute(*on_cuda(spec, options), budget=budget, optimizer=OPTIMIZER, **kwargs)
            ws = result.workspaces
            mismatch = result.mismatch()
            if mismatch is None and label == "reserve auto" and ws.peak_with_workspaces > budget:
                mismatch = (f"live plus workspace {ws.peak_with_workspaces:,} B over the "
                            f"budget {budget:,} B despite the reserve")
            print(f"{spec} at {budget:,} B, {label}: engine budget {result.budget:,} B, largest "
                  f"workspace {ws.largest:,} B at op {ws.op_id} ({ws.op_name}) in {ws.module}, "
                  f"total {ws.total:,} B over {ws.with_workspace:,} of {ws.op_runs:,} calls, live "
                  f"plus workspace at most {ws.peak_with_workspaces:,} B; mismatch {mismatch}",
                  flush=True)
        except Exception as exc:    # noqa: BLE001 - a row of its own
            mismatch = f"raised {type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
            print(f"{spec} at {budget:,} B, {label}: {mismatch}", flush=True)
        rows.append({"model": spec, "budget": budget, "mismatch": mismatch})
    return rows


def _compiled_step(model, loss_fn, backend):
    import copy
    m = copy.deepcopy(model)
    step = torch.compile(lambda x, y: loss_fn(m(x), y), backend=backend, dynamic=False)

    def run(x, y):
        for p in m.parameters():
            p.grad = None
        loss = step(x, y)
        loss.backward()
        return [loss.detach().clone(), *(p.grad.clone() for p in m.parameters())]
    return m, run


def backend_checks() -> int:
    """The compiled backend on CUDA (see the module docstring); 3 when a check fails."""
    from dtrforensics.torch import BudgetNotMet, dtr_backend
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}: dtr_backend")
    model, (x, y), loss_fn = on_cuda("zoo:gpt", {"batch": 8})
    torch._dynamo.reset()
    plain = _compiled_step(model, loss_fn, "aot_eager")[1](x, y)
    for ratio in (0.9, 0.85, 0.95):
        be = dtr_backend(ratio=ratio, checking=True)
        m, run = _compiled_step(model, loss_fn, be)
        try:
            mine = run(x, y)
        except Exception as exc:     # noqa: BLE001 - dynamo wraps a refused budget
            if isinstance(getattr(exc, "inner_exception", None), BudgetNotMet):
                print(f"ratio {ratio}: refused when compiling, trying the next")
                continue
            raise
        if be.graphs[0].summary.evictions:
            break
    else:
        print("no ratio evicted: nothing checked")
        return 3
    (graph,) = be.graphs
    be.measure_next()
    run(x, y)
    (measured,) = graph.peaks
    base = sum({t.untyped_storage()._cdata: t.untyped_storage().nbytes()
                for t in [*m.parameters(), *m.buffers(), x, y]}.values())
    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    run(x, y)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - start + base
    rounding = 511 * len(graph.joint.program.storage_ids())
    failures = []
    if not all(torch.equal(a, b) for a, b in zip(plain, mine)):
        failures.append("loss or gradients not bitwise those of aot_eager")
    if graph.checks[0].mismatches or measured.check.mismatches:
        failures.append(f"live bytes differ from the engine's: {graph.checks[0].first_mismatch}")
    if peak > measured.bound + rounding:
        failures.append(f"max_memory_allocated peak {peak:,} B above the budget plus the largest "
                        f"workspace plus rounding ({measured.bound + rounding:,} B)")
    ws = measured.workspaces
    print(f"zoo:gpt batch 8 at ratio {ratio} ({graph.budget:,} B, {graph.summary.evictions} "
          f"evictions): {graph.checks[0].checks} checks; step peak by max_memory_allocated "
          f"{peak:,} B, {peak - graph.budget:,} B over the budget; measured step's allocator "
          f"peak {measured.allocator_peak:,} B; largest workspace {ws.largest:,} B at op "
          f"{ws.op_id} ({ws.op_name}) in {ws.module}; bound {measured.bound:,} B (+{rounding:,} "
          f"B rounding allowed)")
    for f in failures:
        print(f"NOT FAITHFUL: {f}")
    return 3 if failures else 0


def print_table(rows: list[dict]) -> None:
    keys = [k for k in COLUMNS if k != "mismatch"]
    cells = [[f"{r[k]:,}" if isinstance(r[k], int) and not isinstance(r[k], bool) else str(r[k])
              for k in keys] for r in rows]
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in cells:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    sys.exit(main())
