"""Cost models: the TIME written for each recorded op.

`flops` is deterministic and needs no data: the op's FLOP count from
`torch.utils.flop_counter` where PyTorch has a formula (matrix products,
convolutions, attention), else the elements the op touches (elements of its
tensor arguments read, plus elements of its new outputs and of the arguments
it writes in place), since such ops are bound by memory traffic. An op that
only makes views touches nothing and costs 1.
Every cost is at least 1: a zero-cost op would score 0 and be evicted first
whatever its size.

`measured` is wall time in nanoseconds on this machine: the op's own run, and
for ops under a millisecond (where timer noise is large) the median of that
run and two repeats. Ops that draw random numbers or write their arguments
are never repeated, so recording changes no result.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch
from torch.utils.flop_counter import flop_registry

from ..validate import COST_MODELS  # noqa: F401 (the names live with the option checks)

REPEAT_BELOW_NS = 1_000_000
REPEATS = 3


def flop_cost(func, args: tuple, kwargs: dict, out, inputs: Sequence[torch.Tensor],
              written: Sequence[torch.Tensor]) -> int:
    """The `flops` cost of one op call; `written` are its new outputs and the
    arguments it writes (see the module docstring for the rule)."""
    formula = flop_registry.get(func.overloadpacket)
    if formula is not None:
        return max(1, int(formula(*args, **kwargs, out_val=out)))
    if not written:
        return 1
    return max(1, sum(t.numel() for t in inputs) + sum(t.numel() for t in written))


def is_repeatable(func, mutates: bool) -> bool:
    """Whether running the op again leaves every result and the RNG as they were."""
    return not mutates and torch.Tag.nondeterministic_seeded not in func.tags


def timed_call(call: Callable[[], object], repeatable: bool) -> tuple[object, int]:
    """Run the op once for real; return its result and its measured cost in ns."""
    start = time.perf_counter_ns()
    out = call()
    samples = [time.perf_counter_ns() - start]
    if repeatable and samples[0] < REPEAT_BELOW_NS:
        for _ in range(REPEATS - 1):
            start = time.perf_counter_ns()
            call()
            samples.append(time.perf_counter_ns() - start)
    return out, max(1, int(statistics.median(samples)))
