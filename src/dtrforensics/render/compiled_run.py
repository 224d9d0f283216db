"""`dtrf torch run --compiled` as text: the lowered steps beside the engine and the plain step."""

from __future__ import annotations

from .units import fmt_bytes, fmt_exact_bytes, fmt_overhead


def compiled_lines(doc: dict) -> list[str]:
    """Lines for a `CompiledRunResult.to_json()` document."""
    sim, real, low = doc["simulated"], doc["real"], doc["lowered"]
    steps = f"{doc['steps']} steps" if doc["steps"] > 1 else "one step"
    inner = doc["inner"]
    lines = [
        (f"compiled step (dtr_backend, {inner}) at budget "
         f"{fmt_exact_bytes(doc['budget_asked'])}"
         f"{_reserve_words(doc)} "
         f"(joint graph's peak {fmt_exact_bytes(doc['peak'])}), policy {doc['policy']}, "
         f"{doc['cost']} costs"
         f"{', optimizer ' + doc['optimizer'] if doc['optimizer'] else ''}, {steps}: "
         f"{_headline(doc)}"),
        *([doc["verdict"][0].upper() + doc["verdict"][1:]] if doc["verdict"] else []),
        (f"schedule: evictions {sim['evictions']:,}, rematerializations {sim['remats']:,}, "
         f"overhead {fmt_overhead(sim['overhead'])}; victims sha256 {sim['victims_sha256']}"),
        (f"lowered: victims {'equal to' if low['victims_equal'] else 'DIFFERENT from'} the "
         f"engine's, {low['remats']:,} recomputed nodes, {low['saved_for_backward']:,} values "
         "saved for the backward"),
    ]
    if inner == "inductor":
        lines += [
            ("memory: not checked under inductor: its fusions change what is allocated, so its "
             "live bytes are not the engine's (the drops are left to inductor's own frees)"),
            (f"values: {real['values_compared']:,} tensors (losses, buffers, gradients, "
             f"parameters), the largest difference {real['largest_relative_difference']:.3g} of "
             "the tensor's largest value against the plain aot_eager step with inductor's "
             "decompositions (its dropouts draw as inductor's do; inductor reorders "
             "float arithmetic: not bitwise)"),
        ]
        return _closing_lines(doc, lines)
    lines += [
        (f"memory: {real['alloc_checks']:,} allocation checks, live storage bytes equal to the "
         f"engine's at {real['alloc_checks'] - real['memory_mismatches']:,}, over budget at "
         f"{real['over_budget_checks']:,}; peak live {fmt_bytes(real['peak_live_bytes'])} "
         f"({real['peak_live_bytes']:,} bytes)"),
        (f"values: {real['values_compared']:,} tensors (losses, buffers, gradients, parameters) "
         f"{'' if real['values_bitwise_equal'] else 'NOT '}bitwise equal to the plain "
         "aot_eager step"),
    ]
    lines += _allocator_lines(doc["allocator"])
    return _closing_lines(doc, lines)


def _reserve_words(doc: dict) -> str:
    reserved = doc["reserved_workspace"]
    return (f" less {reserved:,} bytes reserved for workspaces (planned at {doc['budget']:,})"
            if reserved else "")


def _headline(doc: dict) -> str:
    """The schedule's outcome, and the allocator's peak where it exceeds the budget."""
    outcome = doc["simulated"]["outcome"]
    if doc["allocator_within_budget"] is False:
        return (f"schedule {outcome}, allocator peak {doc['allocator']['over_budget']:,} bytes "
                "OVER the budget")
    return outcome


def _closing_lines(doc: dict, lines: list[str]) -> list[str]:
    real = doc["real"]
    if real["slowdown"] is not None:
        checked = ("with the live count's dispatch mode on; benchmarks/compiled_backend.py "
                   "times it without" if doc["inner"] == "aot_eager"
                   else "nothing checked")
        lines.append(f"wall time after the compiling step: {real['wall_seconds']:.3f} s against "
                     f"{real['plain_wall_seconds']:.3f} s for aot_eager ({real['slowdown']:.2f}x, "
                     f"{checked})")
    if doc["mismatch"]:
        lines.append(f"not faithful to the simulation: {doc['mismatch']}")
    return lines


def _allocator_lines(alloc: dict | None) -> list[str]:
    """The measured step's allocator peak against the budget and the workspaces."""
    if alloc is None:
        return []
    ws = alloc["workspaces"]
    over = (f"{alloc['over_budget']:,} bytes over the budget" if alloc["over_budget"]
            else "within the budget")
    largest = (f"the largest {ws['largest']:,} bytes at op {ws['op_id']} ({ws['op_name']}"
               f"{', in ' + ws['module'] if ws['module'] else ''})" if ws["largest"]
               else "none: no op allocated scratch memory beyond its outputs")
    verdict = "within" if alloc["within_budget_plus_workspaces"] else "ABOVE"
    states = alloc["generator_states"]
    states = (f" plus the {states:,} bytes of generator states kept for random reruns"
              if states else "")
    return [(f"allocator (one more step, measured; {ws['method']}): peak "
             f"{alloc['allocator_peak']:,} bytes, {over}, {verdict} the budget plus the largest "
             f"workspace{states} ({alloc['bound']:,}); "
             "workspaces (scratch an op "
             f"frees inside itself, which DTR does not model): {largest}; {ws['total']:,} bytes "
             f"over {ws['with_workspace']:,} of {ws['op_runs']:,} op runs")]
