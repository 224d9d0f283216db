"""Unconstrained replay: the trace's peak memory and model compute.

docs/semantics.md §10.1: no budget and no heuristic; a storage is freed as soon
as its external reference count reaches 0, pinned or not.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace.program import CMD_COMPUTE, CMD_GET, CMD_RELEASE, Program


@dataclass(frozen=True)
class Baseline:
    peak: int
    model_compute: int
    peak_op_id: int
    bottleneck_bytes: int
    bottleneck_op_id: int


def baseline(program: Program) -> Baseline:
    """Replay without a budget. Also finds the single-op bottleneck: the largest
    outputs-plus-non-constant-arguments footprint any one op needs at once."""
    storage = program.tensor_storage.tolist()
    size = program.tensor_size.tolist()
    total = program.op_total_size.tolist()
    first = program.op_first_tensor.tolist()
    n_out = program.op_n_outputs.tolist()
    refs = [0] * program.n_tensors
    material = [False] * program.n_tensors
    memory = peak = 0
    peak_op = -1
    for kind, arg in zip(program.sched_kind.tolist(), program.sched_arg.tolist()):
        if kind == CMD_COMPUTE:
            memory += total[arg]
            for tid in range(first[arg], first[arg] + n_out[arg]):
                s = storage[tid]
                refs[s] += 1
                material[s] = True
            if memory > peak:
                peak, peak_op = memory, arg
        elif kind == CMD_GET:
            refs[storage[arg]] += 1
        elif kind == CMD_RELEASE:
            s = storage[arg]
            refs[s] -= 1
            if refs[s] == 0 and material[s]:
                material[s] = False
                memory -= size[s]
    need = op_need(program)
    bottleneck_op = int(np.argmax(need))
    return Baseline(peak=peak, model_compute=int(program.op_cost.sum()), peak_op_id=peak_op,
                    bottleneck_bytes=int(need[bottleneck_op]), bottleneck_op_id=bottleneck_op)


def op_need(program: Program) -> np.ndarray:
    """Per op, the bytes it needs at once besides constants: its outputs plus its
    non-constant arguments (0 for constants). Its maximum is the bottleneck."""
    need = np.asarray(program.op_total_size, dtype=np.int64).copy()
    const = np.array([program.is_constant(o) for o in range(program.n_ops)])
    arg_ops = program.tensor_op[program.op_args]
    arg_sizes = np.where(const[arg_ops], 0, program.tensor_size[program.op_args])
    owner = np.repeat(np.arange(program.n_ops), np.diff(program.op_arg_ptr))
    np.add.at(need, owner, arg_sizes)
    need[const] = 0
    return need


def budget_for_ratio(ratio: float, peak: int) -> int:
    """floor(ratio * peak) with the product taken in float64, as the reference does."""
    return int(float(ratio) * peak)
