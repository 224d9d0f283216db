"""`dtrf torch run` as text: the real step's outcome beside its simulation."""

from __future__ import annotations

from .labels import short_source
from .torch_workspace import workspace_lines
from .units import fmt_bytes, fmt_count, fmt_exact_bytes, fmt_overhead


def run_lines(doc: dict) -> list[str]:
    """Lines for an `ExecuteResult.to_json()` document."""
    real, sim = doc["real"], doc["simulated"]
    same = "same as" if doc["matches_simulation"] else "DIFFERENT from"
    lines = [
        (f"real step at budget {fmt_exact_bytes(doc['budget'])} (peak {fmt_exact_bytes(doc['peak'])}, "
        f"floor {fmt_exact_bytes(doc['floor'])}), policy {doc['policy']}"
        f"{', optimizer ' + doc['optimizer'] if doc['optimizer'] else ''}: {doc['outcome']}"),
        (f"evictions {doc['evictions']:,}, rematerializations {doc['remats']:,}, clock {doc['clock']:,}, "
        f"overhead {fmt_overhead(doc['overhead'])}; victims sha256 {doc['victims_sha256']}"),
        (f"{same} the simulation: {sim['outcome']}, evictions {sim['evictions']:,}, "
        f"rematerializations {sim['remats']:,}, clock {sim['clock']:,}"),
        (f"memory: {real['alloc_checks']:,} allocation checks, live storage bytes equal to the "
        f"engine's at {real['alloc_checks'] - real['memory_mismatches']:,}, over budget at "
        f"{real['over_budget_checks']:,}; peak live {fmt_bytes(real['peak_live_bytes'])} "
        f"({real['peak_live_bytes']:,} bytes)"),
    ]
    if real["first_mismatch"] and real["first_mismatch"] not in (doc["mismatch"] or ""):
        lines.append(f"first mismatch: {real['first_mismatch']}")
    lines += workspace_lines(doc)
    if doc["mismatch"]:
        lines.append(f"not faithful to the simulation: {doc['mismatch']}")
    if doc["oom"]:
        oom = doc["oom"]
        lines.append(f"out of memory at op {oom['op_id']} (paper #{oom['op_id'] + 1}) {oom['op_name']} "
                     f"({oom['tensor']}): request {oom['request']:,} bytes, live {oom['live_bytes']:,}, "
                     f"shortfall {fmt_count(oom['shortfall'], 'byte')}; the model was left as before the step")
        if oom.get("final_pins"):
            lines.append("it failed pinning, rebuilding what the step keeps after the op "
                         "named (the last one computed)")
        if oom.get("module"):
            lines.append(f"{oom['tensor']} is made by an op of {oom['module']} "
                         f"({oom['phase']}), at {short_source(oom['source'])}")
        front = doc["frontier"]
        if front:
            lines.append(f"pinned frontier: {front['pinned']:,} bytes pinned, depth {front['depth']}, "
                         f"engine shortfall {front['shortfall']:,} bytes")
            lines += _frontier_modules(front)
    else:
        values = (f"values: loss bitwise equal {real['loss_bitwise_equal']}, "
                  f"{real['grads_compared']} gradients bitwise equal {real['grads_bitwise_equal']}")
        if doc["optimizer"]:
            values += (f", {real['updates_compared']} tensors after the {doc['optimizer']} step "
                       f"(parameters and states) bitwise equal {real['updates_bitwise_equal']}")
        lines.append(values)
    if doc.get("n_steps", 1) > 1:
        lines += step_lines(doc)
    lines.append(f"one run each: wall time {real['wall_seconds']:.4f} s against "
                 f"{real['plain_wall_seconds']:.4f} s for the plain step{_times(real['slowdown'])}, "
                 f"CPU time {real['cpu_seconds']:.4f} s against {real['plain_cpu_seconds']:.4f} s"
                 f"{_times(real['cpu_slowdown'])} (benchmarks/torch_execute.py measures the cost)")
    return lines


def _frontier_modules(front: dict, shown: int = 3) -> list[str]:
    """The frontier's levels summed by the module their op ran in, most bytes locked
    first; nothing for a log without a where-file."""
    by_module: dict[str, list[int]] = {}
    for level in front["frontier"]:
        if level.get("module"):
            entry = by_module.setdefault(level["module"], [0, 0])
            entry[0] += 1
            entry[1] += level["new_locked_bytes"]
    ranked = sorted(by_module.items(), key=lambda kv: (-kv[1][1], kv[0]))
    if not ranked:
        return []
    rest = ranked[shown:]
    more = ([f"  and {fmt_count(sum(n for _, (n, _) in rest), 'level')} in "
             f"{fmt_count(len(rest), 'more module')}, {sum(b for _, (_, b) in rest):,} bytes "
             "locked (--json lists every level)"] if rest else [])
    return ["its levels by the module their op ran in, most bytes locked first:"] + [
            f"  {fmt_count(levels, 'level')} in {module}, {locked:,} bytes locked"
            for module, (levels, locked) in ranked[:shown]] + more


def step_lines(doc: dict) -> list[str]:
    """One line per step of `torch run --steps N`, then the final parameters' verdict."""
    steps, n = doc["steps"], doc["n_steps"]
    lines = [f"{n:,} steps under the recorded step's schedule, each beside the plain step of "
             "the same number from the same starting state (the lines above: step 1):"]
    for s in steps:
        loss = "no loss" if s["loss"] is None else f"loss {s['loss']!r}"
        lines.append(f"step {s['step']} of {n}: {s['outcome']}, {loss} bitwise equal "
                     f"{s['loss_bitwise_equal']}, memory equal at "
                     f"{s['alloc_checks'] - s['memory_mismatches']:,} of {s['alloc_checks']:,} "
                     f"checks, evictions {s['evictions']:,}, rematerializations {s['remats']:,}"
                     + (f"; differs: {s['mismatch']}" if s["mismatch"] else ""))
    last = steps[-1]
    if len(steps) < n:
        lines.append(f"stopped after step {last['step']}: steps {last['step'] + 1} to {n} not run")
    elif last["updates_bitwise_equal"] is not None:
        lines.append(f"after step {n}: parameters and optimizer states bitwise equal "
                     f"{last['updates_bitwise_equal']}")
    return lines


def _times(ratio: float | None) -> str:
    return f" ({ratio:.2f}x)" if ratio is not None else ""
