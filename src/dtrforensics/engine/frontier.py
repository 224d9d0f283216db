"""The pinned frontier at an OOM: the chain of in-progress materializations.

Built from the kernel's frame stack after a failed allocation (semantics.md
§12.6): outermost first, each level with the storages it holds locked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace.program import Program
from . import layout as L
from .layout import FR_INDEX, FR_PENDING_COUNT, FR_PENDING_START, FR_PHASE, FR_REMAT, FR_TENSOR
from .state import MachineState


@dataclass(frozen=True)
class FrontierLevel:
    depth: int
    tensor_id: int
    tensor: str
    op_id: int            # the op producing this level's tensor
    op_name: str
    remat: bool
    locked_storages: tuple[int, ...]  # distinct storages this level holds locks on
    locked_bytes: int                 # their bytes
    new_locked_bytes: int             # bytes not already locked by an outer level
    cumulative_bytes: int


@dataclass(frozen=True)
class Frontier:
    levels: tuple[FrontierLevel, ...]
    request: int
    budget: int
    memory: int
    pool_bytes: int
    pool_size: int
    pinned_bytes: int          # memory - pool bytes
    pinned_storage_bytes: int  # bytes of storages pinned for good (constants, outputs)

    @property
    def shortfall(self) -> int:
        return self.memory + self.request - self.budget

    def to_json(self) -> dict:
        return {
            "request": self.request, "budget": self.budget, "memory": self.memory,
            "pinned": self.pinned_bytes, "pool_bytes": self.pool_bytes,
            "pool_size": self.pool_size, "shortfall": self.shortfall,
            "pinned_storage_bytes": self.pinned_storage_bytes,
            "depth": len(self.levels),
            "frontier": [{
                "depth": lv.depth, "tensor": lv.tensor, "tensor_id": lv.tensor_id,
                "op_id": lv.op_id, "op_name": lv.op_name, "remat": lv.remat,
                "locked_bytes": lv.locked_bytes, "new_locked_bytes": lv.new_locked_bytes,
                "cumulative_bytes": lv.cumulative_bytes,
                "locked_storages": list(lv.locked_storages),
            } for lv in self.levels],
        }


def _locked_parents(program: Program, state: MachineState, f: int) -> list[int]:
    frames = state.frames
    t = int(frames[FR_TENSOR, f])
    phase = int(frames[FR_PHASE, f])
    if phase == L.PH_ENTER:
        return []
    op = int(program.tensor_op[t])
    args = program.op_args_of(op).tolist()
    start = int(frames[FR_PENDING_START, f])
    count = int(frames[FR_PENDING_COUNT, f])
    index = int(frames[FR_INDEX, f])
    snapshot = state.pending[start:start + count].tolist()
    remaining = list(snapshot)
    defined_at_entry = []
    for p in args:
        if p in remaining:
            remaining.remove(p)
        else:
            defined_at_entry.append(p)
    done = count if phase >= L.PH_CHECK else index
    return defined_at_entry + snapshot[:done]


def build_frontier(program: Program, state: MachineState, request: int) -> Frontier:
    sc = state.sc
    depth = int(sc[L.S_DEPTH])
    size = program.tensor_size
    seen: set[int] = set()
    cumulative = 0
    levels = []
    for f in range(depth):
        t = int(state.frames[FR_TENSOR, f])
        storages = sorted({int(program.tensor_storage[p]) for p in _locked_parents(program, state, f)})
        locked = int(sum(int(size[s]) for s in storages))
        new = int(sum(int(size[s]) for s in storages if s not in seen))
        seen.update(storages)
        cumulative += new
        op = int(program.tensor_op[t])
        levels.append(FrontierLevel(
            depth=f + 1, tensor_id=t, tensor=program.tensor_name(t), op_id=op,
            op_name=program.op_name(op),
            remat=bool(state.frames[FR_REMAT, f]),
            locked_storages=tuple(storages), locked_bytes=locked, new_locked_bytes=new,
            cumulative_bytes=cumulative))
    pinned_flag = state.row("pinned").astype(bool) & state.row("material").astype(bool)
    memory = int(sc[L.S_MEMORY])
    return Frontier(
        levels=tuple(levels), request=request, budget=int(sc[L.S_BUDGET]), memory=memory,
        pool_bytes=int(sc[L.S_POOL_BYTES]), pool_size=int(sc[L.S_POOL_SIZE]),
        pinned_bytes=memory - int(sc[L.S_POOL_BYTES]),
        pinned_storage_bytes=int(np.sum(size[pinned_flag])))
