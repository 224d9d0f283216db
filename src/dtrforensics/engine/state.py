"""Allocation of the kernel's resumable state (one `MachineState` per run)."""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numpy as np
from numba import njit
from numba.typed import List

from . import kernel as K
from .graph import KernelGraph

# Rows of the per-storage/tensor state matrix `st` (indexed by tensor or storage id).
STATE_ROWS = ("defined", "material", "pinned", "lock", "ref_ext", "last_access", "compute",
              "last_op", "in_pool", "pool_prev", "pool_next")
FRAME_ROWS = ("tensor", "remat", "phase", "index", "pending_start", "pending_count", "action")


Regions = namedtuple("Regions", ["int_lists", "int_n", "fr_lists", "fr_n", "compute", "bits",
                                 "bits_on"])
Regions.__doc__ = """Evicted neighbourhoods, two per storage (index 2*s forward, 2*s+1
backward): interior and frontier sets as arrays with lengths, interior compute,
and a membership bitset for large interiors."""


@njit(cache=True)
def _array_list(n, dtype):
    lists = List()
    for _ in range(n):
        lists.append(np.empty(0, dtype=dtype))
    return lists


def new_regions(n_tensors: int) -> Regions:
    n = 2 * n_tensors
    return Regions(
        int_lists=_array_list(n, np.int64), int_n=np.zeros(n, dtype=np.int64),
        fr_lists=_array_list(n, np.int64), fr_n=np.zeros(n, dtype=np.int64),
        compute=np.zeros(n, dtype=np.int64), bits=_array_list(n, np.uint64),
        bits_on=np.zeros(n, dtype=np.int64))


@dataclass
class MachineState:
    sc: np.ndarray
    st: np.ndarray
    frames: np.ndarray
    pending: np.ndarray
    scratch: np.ndarray
    mark: np.ndarray
    regions: Regions
    stream: np.ndarray

    @classmethod
    def new(cls, g: KernelGraph, budget: int, remat_limit: int, stream_capacity: int = 4096) -> "MachineState":
        n = len(g.tensor_op)
        sc = np.zeros(K.N_SCALARS, dtype=np.int64)
        sc[K.S_CLOCK] = 1
        sc[K.S_CUR_OP] = -1
        sc[K.S_POOL_HEAD] = -1
        sc[K.S_POOL_TAIL] = -1
        sc[K.S_HI_TRUE] = K.NO_HI
        sc[K.S_BUDGET] = budget
        sc[K.S_MAXPIN_OP] = -1  # reference convention: (0, 0, -1) until a check frees memory
        sc[K.S_REMAT_LIMIT] = remat_limit
        st = np.zeros((len(STATE_ROWS), n), dtype=np.int64)
        st[STATE_ROWS.index("last_access")] = K.NEVER
        st[STATE_ROWS.index("pool_prev")] = -1
        st[STATE_ROWS.index("pool_next")] = -1
        return cls(
            sc=sc, st=st,
            frames=np.zeros((len(FRAME_ROWS), n + 2), dtype=np.int64),
            pending=np.zeros(len(g.op_args) + n + 8, dtype=np.int64),
            scratch=np.zeros((5, n + 2), dtype=np.int64),
            mark=np.zeros(n, dtype=np.int64),
            regions=new_regions(n),
            stream=np.zeros((stream_capacity, 4), dtype=np.int64),
        )

    def row(self, name: str) -> np.ndarray:
        return self.st[STATE_ROWS.index(name)]
