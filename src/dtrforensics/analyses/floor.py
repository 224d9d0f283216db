"""The floor of a trace: the bytes no budget can go below, said before any sweep.

Two things must be resident at once whatever the policy does. At each op: the
constants still alive there (pinned: never evicted; freed only when their
last reference goes) plus the op's working set (its outputs and its
non-constant arguments, the studies' single-op bottleneck). At the end of the
trace: every tensor still referenced (the final pins: gradients, updated
parameters, optimizer states). The floor is the larger of the two maxima;
`1 - floor / peak` is the share of the peak eviction can free at most.
The studies' "single-op bottleneck" is the working set alone, without the
constants beside it (`baseline.bottleneck_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.baseline import op_need
from ..jsonsafe import json_safe
from ..trace.program import CMD_COMPUTE, CMD_GET, CMD_RELEASE, Program

# Above this share of the peak, the floor is reported as the model's state.
STATE_BOUND_SHARE = 0.9


@dataclass(frozen=True)
class Floor:
    peak: int
    floor: int               # bytes no budget can go below
    floor_op_id: int         # where it binds; -1 for the end of the trace
    constant_bytes: int      # every constant (parameters, buffers, optimizer states, batch)
    constants_at_floor: int  # constants alive where the floor binds
    working_set: int         # that op's outputs and non-constant arguments
    final_bytes: int         # still referenced at the end (pinned there)
    bottleneck_bytes: int    # the studies' single-op bottleneck (working set alone)

    @property
    def evictable_share(self) -> float:
        return 1 - self.floor / self.peak if self.peak else 0.0

    @property
    def state_bound(self) -> bool:
        """Whether what the model keeps (parameters, gradients, optimizer states)
        is nearly all of the peak, so that almost no budget below it completes."""
        return self.peak > 0 and self.floor >= STATE_BOUND_SHARE * self.peak

    def to_json(self) -> dict:
        return json_safe({"peak_bytes": self.peak, "floor_bytes": self.floor,
                          "floor_op_id": self.floor_op_id, "constant_bytes": self.constant_bytes,
                          "constants_at_floor_bytes": self.constants_at_floor,
                          "working_set_bytes": self.working_set, "final_bytes": self.final_bytes,
                          "bottleneck_bytes": self.bottleneck_bytes,
                          "evictable_share": self.evictable_share, "state_bound": self.state_bound})


def floor(program: Program) -> Floor:
    """Walk the unconstrained schedule once, tracking the constants alive at each op
    (the walk of `baseline.baseline`, so its peak is the same)."""
    storage = program.tensor_storage.tolist()
    size = program.tensor_size.tolist()
    first = program.op_first_tensor.tolist()
    n_out = program.op_n_outputs.tolist()
    total = program.op_total_size.tolist()
    need = op_need(program).tolist()
    constant = [program.is_constant(o) for o in range(program.n_ops)]
    is_const_storage = [False] * program.n_tensors
    refs = [0] * program.n_tensors
    material = [False] * program.n_tensors
    memory = peak = constants = constant_bytes = 0
    best, best_op, best_constants = -1, -1, 0
    for kind, arg in zip(program.sched_kind.tolist(), program.sched_arg.tolist()):
        if kind == CMD_COMPUTE:
            if constant[arg]:
                constants += total[arg]
                constant_bytes += total[arg]
            elif constants + need[arg] > best:
                best, best_op, best_constants = constants + need[arg], arg, constants
            memory += total[arg]
            peak = max(peak, memory)
            for tid in range(first[arg], first[arg] + n_out[arg]):
                s = storage[tid]
                refs[s] += 1
                material[s] = True
                is_const_storage[s] = constant[arg]
        elif kind == CMD_GET:
            refs[storage[arg]] += 1
        elif kind == CMD_RELEASE:
            s = storage[arg]
            refs[s] -= 1
            if refs[s] == 0 and material[s]:
                material[s] = False
                memory -= size[s]
                if is_const_storage[s]:
                    constants -= size[s]
    if memory > best:
        best, best_op, best_constants = memory, -1, constants
    return Floor(peak=peak, floor=max(best, 0), floor_op_id=best_op,
                 constant_bytes=constant_bytes, constants_at_floor=best_constants,
                 working_set=need[best_op] if best_op >= 0 else 0, final_bytes=memory,
                 bottleneck_bytes=max(need, default=0))
