"""Allocation of the kernel's resumable state (one `MachineState` per run)."""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numpy as np

from . import kernel as K
from .graph import KernelGraph
from .layout import (
    FRAME_ROWS, N_SCRATCH_ROWS, R_LAST_ACCESS, R_POOL_NEXT, R_POOL_PREV, STATE_ROWS,
)


Regions = namedtuple("Regions", ["n_regions", "arena", "start", "cap", "len", "compute",
                                 "fr_live", "bit_slot", "bits", "free_slots"])
Regions.__doc__ = """Evicted neighbourhoods, two per storage (region 2*s forward, 2*s+1
backward). Sets (interior r, frontier n_regions + r) are blocks of one int64
arena; `compute` is each region's interior compute; large sets have a
membership bitset (a row of `bits`, taken from the `free_slots` stack)."""

ARENA_MIN = 1 << 22
BITSETS_BYTES = 32 << 20


def new_regions(n_tensors: int, arena_size: int | None = None) -> Regions:
    n = 2 * n_tensors
    words = n_tensors // 64 + 1
    slots = int(min(2 * n, max(64, BITSETS_BYTES // (8 * words))))
    return Regions(
        n_regions=n,
        arena=np.zeros(arena_size or max(ARENA_MIN, 128 * n_tensors), dtype=np.int64),
        start=np.zeros(2 * n, dtype=np.int64), cap=np.zeros(2 * n, dtype=np.int64),
        len=np.zeros(2 * n, dtype=np.int64), compute=np.zeros(n, dtype=np.int64),
        fr_live=np.zeros(n, dtype=np.int64), bit_slot=np.full(2 * n, -1, dtype=np.int64),
        bits=np.zeros((slots, words), dtype=np.uint64),
        free_slots=np.arange(slots, dtype=np.int64))


def grow_arena(regions: Regions, sc: np.ndarray) -> Regions:
    """Compact the arena; double it when it stays more than half full."""
    K.compact_arena(regions, sc)
    if sc[K.S_ARENA_TOP] * 2 <= len(regions.arena):
        return regions
    bigger = np.zeros(2 * len(regions.arena), dtype=np.int64)
    bigger[:len(regions.arena)] = regions.arena
    return regions._replace(arena=bigger)


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
        regions = new_regions(n)
        sc[K.S_FREE_SLOTS] = len(regions.free_slots)
        sc[K.S_REMAT_LIMIT] = remat_limit
        st = np.zeros((len(STATE_ROWS), n), dtype=np.int64)
        st[R_LAST_ACCESS] = K.NEVER
        st[R_POOL_PREV] = -1
        st[R_POOL_NEXT] = -1
        return cls(
            sc=sc, st=st,
            frames=np.zeros((len(FRAME_ROWS), n + 2), dtype=np.int64),
            pending=np.zeros(len(g.op_args) + n + 8, dtype=np.int64),
            scratch=np.zeros((N_SCRATCH_ROWS, n + 2), dtype=np.int64),
            mark=np.zeros(n, dtype=np.int64),
            regions=regions,
            stream=np.zeros((stream_capacity, 4), dtype=np.int64),
        )

    def row(self, name: str) -> np.ndarray:
        return self.st[STATE_ROWS.index(name)]
