"""Allocation of the kernel's resumable state (one `MachineState` per run)."""

from __future__ import annotations

import os
from collections import namedtuple
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from . import compiled
from . import layout as L
from .graph import KernelGraph
from .layout import (
    FRAME_ROWS,
    N_SCRATCH_ROWS,
    R_LAST_ACCESS,
    R_POOL_NEXT,
    R_POOL_PREV,
    STATE_ROWS,
)

Regions = namedtuple("Regions", ["n_regions", "arena", "start", "cap", "len", "compute",
                                 "fr_live", "bit_slot", "bits", "free_slots",
                                 "memo_row", "memo_node", "memo_int", "memo_fr", "memo_stats",
                                 "memo_acc", "memo_stack", "memo_gate",
                                 "block_order", "deferred", "deferred_list",
                                 "deferred_n", "fresh", "walked_at", "era", "arrived", "cause_head",
                                 "cause_next", "cause_of", "cause_n"])
# (the last twenty: WORK_FIELDS)
Regions.__doc__ = """Evicted neighbourhoods (engine/regions.py), two per storage (region 2*s forward, 2*s+1
backward). Sets (interior r, frontier n_regions + r) are blocks of one int64
arena; `compute` is each region's interior compute, or layout.UNKEPT for a
pinned storage's region that is not kept (semantics.md §8.9); large sets have a
membership bitset (a row of `bits`, taken from the `free_slots` stack), and
some are that bitset alone (`cap` 0, `len` the member count, no block): large
interiors, and large frontiers made by shared walks.
`memo_*` is work space of the shared walks of one direction's rebuilds
(walks.shared_rebuilds: memo rows, and masked walks, which borrow memo_row,
memo_node and the first rows of memo_int and memo_fr; memo_gate holds how
memo rows have fared lately, slots `layout.G_*`), `block_order` of the arena's
compaction, and `deferred*` the regions whose rebuild waits for their next
reader (walks.defer: a flag per region, the list, its length), none left
between slices. `fresh`, `walked_at`, `era`, `arrived` and `cause_*` tell
which regions are known to be their walk and what arrived in their walk since
(engine/cutoff.py: a stamp per region and the tensors created at its walk,
the period, a stamp per storage, and the (region, arrival) pairs that
deferred a backward region, as lists);
all zero means nothing known, so a state without them is only slower.
None of this is state (a snapshot holds None there)."""

ARENA_MIN = 1 << 22
STREAM_CAPACITY = 4096
BITSETS_BYTES = 32 << 20
MEMO_BYTES = 16 << 20
CAUSES_PER_TENSOR = 4   # (region, arrival) pairs one period may note (cutoff.note_cause)


# What a new state's Regions arrays hold, where not 0 and not free_slots (every
# slot, in order); `MachineState._clear` reads both declarations.
REGIONS_FILL = {"bit_slot": -1, "memo_stats": -1}
# Contents no step reads before writing them, left as they are by `_clear`: the
# arena outside live blocks, bitset rows not taken (taking one zeroes or
# overwrites it) and walk rows past the first MASK_BASES (opening one zeroes it).
UNREAD_BEFORE_WRITTEN = ("arena", "bits", "memo_int", "memo_fr")


def new_regions(n_tensors: int, arena_size: int | None = None) -> Regions:
    n = 2 * n_tensors
    words = n_tensors // 64 + 1
    slots = int(min(2 * n, max(64, BITSETS_BYTES // (8 * words))))
    return Regions(
        n_regions=n,
        arena=np.zeros(arena_size or max(ARENA_MIN, 128 * n_tensors), dtype=np.int64),
        start=np.zeros(2 * n, dtype=np.int64), cap=np.zeros(2 * n, dtype=np.int64),
        len=np.zeros(2 * n, dtype=np.int64), compute=np.zeros(n, dtype=np.int64),
        fr_live=np.zeros(n, dtype=np.int64),
        bit_slot=np.full(2 * n, REGIONS_FILL["bit_slot"], dtype=np.int64),
        bits=np.zeros((slots, words), dtype=np.uint64),
        free_slots=np.arange(slots, dtype=np.int64), **_work_space(n_tensors))


WORK_FIELDS = ("memo_row", "memo_node", "memo_int", "memo_fr", "memo_stats", "memo_acc",
               "memo_stack", "memo_gate", "block_order", "deferred", "deferred_list",
               "deferred_n", "fresh", "walked_at", "era", "arrived", "cause_head", "cause_next",
               "cause_of", "cause_n")


def _work_space(n_tensors: int) -> dict:
    """Work space of the shared walks (a row of two bitsets per walked storage),
    of the arena's compaction (one slot per set) and of the deferred rebuilds
    (one slot per region): the kernel allocates nothing."""
    words = n_tensors // 64 + 1
    rows = int(min(n_tensors, max(64, MEMO_BYTES // (16 * words))))
    return dict(block_order=np.zeros(4 * n_tensors, dtype=np.int64),
                memo_row=np.zeros(n_tensors, dtype=np.int64),
                memo_node=np.zeros(rows, dtype=np.int64),
                memo_int=np.zeros((rows, words), dtype=np.uint64),
                memo_fr=np.zeros((rows, words), dtype=np.uint64),
                memo_stats=np.full((rows, 2), REGIONS_FILL["memo_stats"], dtype=np.int64),
                memo_acc=np.zeros((2, words), dtype=np.uint64),
                memo_stack=np.zeros((rows + 1, 2), dtype=np.int64),
                memo_gate=np.zeros(L.N_GATES, dtype=np.int64),
                deferred=np.zeros(2 * n_tensors, dtype=np.int64),
                deferred_list=np.zeros(2 * n_tensors, dtype=np.int64),
                deferred_n=np.zeros(1, dtype=np.int64),
                fresh=np.zeros(2 * n_tensors, dtype=np.int64),
                walked_at=np.zeros(2 * n_tensors, dtype=np.int64),
                era=np.zeros(L.N_ERA, dtype=np.int64),
                arrived=np.zeros(n_tensors, dtype=np.int64),
                cause_head=np.zeros(2 * n_tensors, dtype=np.int64),
                cause_next=np.zeros(CAUSES_PER_TENSOR * n_tensors, dtype=np.int64),
                cause_of=np.zeros(CAUSES_PER_TENSOR * n_tensors, dtype=np.int64),
                cause_n=np.zeros(1, dtype=np.int64))


def grow_arena(regions: Regions, sc: np.ndarray) -> Regions:
    """Compact the arena; double it when it stays more than half full."""
    compiled.compact_arena(regions, sc)
    if sc[L.S_ARENA_TOP] * 2 <= len(regions.arena):
        return regions
    bigger = np.zeros(2 * len(regions.arena), dtype=np.int64)
    bigger[:len(regions.arena)] = regions.arena
    return regions._replace(arena=bigger)


@dataclass(frozen=True)
class BudgetInterval:
    """The budgets that answer every comparison of a stretch of a run alike
    (semantics.md §11): `lo <= budget < hi_true`. `hi_true` is the smallest
    failing `memory + request`, `layout.NO_HI` while none failed: the kernel
    keeps both in S_LO and S_HI_TRUE, and this is their one reading."""

    lo: int = 0
    hi_true: int = L.NO_HI

    @property
    def hi(self) -> int | None:
        """The largest budget admitted, None for no bound."""
        return None if self.hi_true == L.NO_HI else self.hi_true - 1

    def admits(self, budget: int) -> bool:
        return self.lo <= budget < self.hi_true

    def meet(self, other: "BudgetInterval") -> "BudgetInterval":
        """The budgets both admit."""
        return BudgetInterval(max(self.lo, other.lo), min(self.hi_true, other.hi_true))

    def pair(self) -> tuple[int, int | None]:
        """(lo, hi): the summary's `budget_interval`."""
        return self.lo, self.hi


@dataclass(frozen=True)
class Extremes:
    """The budget certificate and running maxima over a stretch of a run: the
    scalars of `layout.EXTREMES`, in its order.

    The kernel keeps them in scalar registers; a driver that splits a run
    into stretches (to splice runs, engine/prefixes.py) folds each stretch's
    registers into the earlier ones with `then` and resets them.
    """

    interval: BudgetInterval = BudgetInterval()
    max_depth: int = 0
    peak: int = 0
    maxpin: tuple[int, int, int] = (0, 0, -1)   # bytes, depth, op (§12.6)

    @classmethod
    def read(cls, sc: np.ndarray) -> "Extremes":
        lo, hi_true, max_depth, peak, *maxpin = (int(x) for x in sc[list(L.EXTREMES)])
        return cls(BudgetInterval(lo, hi_true), max_depth, peak, tuple(maxpin))

    def write(self, sc: np.ndarray) -> None:
        sc[list(L.EXTREMES)] = (self.interval.lo, self.interval.hi_true, self.max_depth,
                                self.peak, *self.maxpin)

    def then(self, later: "Extremes") -> "Extremes":
        """This stretch followed by `later` (the first maximum of pinned bytes is kept)."""
        return Extremes(self.interval.meet(later.interval),
                        max(self.max_depth, later.max_depth), max(self.peak, later.peak),
                        later.maxpin if later.maxpin[0] > self.maxpin[0] else self.maxpin)

    def admits(self, budget: int) -> bool:
        return self.interval.admits(budget)


# Per process: finished runs' states, one per shape, for the next run's `new`. A
# forked child starts without them and makes its own.
_SPARES: dict[tuple, "MachineState"] = {}
MAX_SPARES = 4
os.register_at_fork(after_in_child=_SPARES.clear)


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
    _key: tuple = ()

    @classmethod
    def new(cls, g: KernelGraph, budget: int, remat_limit: int,
            stream_capacity: int = STREAM_CAPACITY,
            arena_size: int | None = None) -> "MachineState":
        """The state before a run's first step: a finished run's arrays when
        `recycle` left some of this shape (and of `arena_size`, when one is
        asked for: a rerun's larger arena, a test's tiny one), else new ones."""
        n = len(g.tensor_op)
        key = (n, len(g.op_args), stream_capacity)
        state = _SPARES.pop(key, None)
        if state is not None and arena_size not in (None, len(state.regions.arena)):
            _SPARES[key] = state
            state = None
        if state is None:
            regions = new_regions(n, arena_size)
            state = cls(
                sc=np.zeros(L.N_SCALARS, dtype=np.int64),
                st=np.zeros((len(STATE_ROWS), n), dtype=np.int64),
                frames=np.zeros((len(FRAME_ROWS), n + 2), dtype=np.int64),
                pending=np.zeros(len(g.op_args) + n + 8, dtype=np.int64),
                scratch=np.zeros((N_SCRATCH_ROWS, n + 2), dtype=np.int64),
                mark=np.zeros(n, dtype=np.int64),
                regions=regions,
                stream=np.zeros((stream_capacity, 4), dtype=np.int64))
        else:
            state._clear()
        state._key = key
        sc = state.sc
        sc[L.S_CLOCK] = 1
        sc[L.S_CUR_OP] = -1
        sc[L.S_POOL_HEAD] = -1
        sc[L.S_POOL_TAIL] = -1
        Extremes().write(sc)    # max pinned (0, 0, -1) until a check frees memory (§12.6)
        sc[L.S_BUDGET] = budget
        sc[list(L.DECISIONS)] = -1
        sc[L.S_STOP_CMD] = -1   # no command boundary to stop at (engine/prefixes.py sets one)
        sc[L.S_FREE_SLOTS] = len(state.regions.free_slots)
        sc[L.S_REMAT_LIMIT] = remat_limit
        state.st[R_LAST_ACCESS] = L.NEVER
        state.st[R_POOL_PREV] = -1
        state.st[R_POOL_NEXT] = -1
        return state

    def recycle(self) -> None:
        """Leave this finished run's arrays to the next `new` of its shape: a
        run of a large trace spent a fifth of its time having the kernel zero
        fresh pages (the arena, bitsets and walk rows are tens of MB). Only for
        a state nothing refers to any more (a run whose state is not kept)."""
        if len(_SPARES) >= MAX_SPARES:
            _SPARES.pop(next(iter(_SPARES)))
        _SPARES[self._key] = self

    def _clear(self) -> None:
        """Every array as `new_regions` and `new` make it, except the contents no
        step reads before writing them (UNREAD_BEFORE_WRITTEN, but for the
        first MASK_BASES walk rows)."""
        for a in (self.sc, self.st, self.frames, self.pending, self.scratch, self.mark,
                  self.stream):
            a.fill(0)
        rg = self.regions
        for name, a in zip(rg._fields, rg):
            if name == "free_slots":
                a[:] = np.arange(len(a))
            elif name not in UNREAD_BEFORE_WRITTEN and isinstance(a, np.ndarray):
                a.fill(REGIONS_FILL.get(name, 0))
        rg.memo_int[:L.MASK_BASES] = 0
        rg.memo_fr[:L.MASK_BASES] = 0

    def row(self, name: str) -> np.ndarray:
        return self.st[STATE_ROWS.index(name)]

    def snapshot(self, stream_chunks: tuple[np.ndarray, ...] = (),
                 before: Extremes = Extremes(), run=None) -> "Snapshot":
        """A copy of the state between two steps (see `Snapshot`); `before`: the
        extremes of the stretches folded out of the registers so far; `run`:
        what the run taking it leaves for splicing. Compacts the neighbourhood
        arena first when abandoned blocks outweigh live ones, so mostly live blocks
        are copied."""
        rg = self.regions
        if self.sc[L.S_ARENA_TOP] > 2 * int(rg.cap.sum()):
            compiled.compact_arena(rg, self.sc)
        top = int(self.sc[L.S_ARENA_TOP])
        used = np.flatnonzero(rg.bit_slot >= 0)
        slots = rg.bit_slot[used]
        regions = rg._replace(
            arena=rg.arena[:top].copy(), start=rg.start.copy(), cap=rg.cap.copy(),
            len=rg.len.copy(), compute=rg.compute.copy(), fr_live=rg.fr_live.copy(),
            bit_slot=rg.bit_slot.copy(), bits=rg.bits[slots].copy(),
            free_slots=rg.free_slots.copy(), **dict.fromkeys(WORK_FIELDS))
        prefix = before.then(Extremes.read(self.sc))
        return Snapshot(
            steps=int(self.sc[L.S_STEPS]), interval=prefix.interval, before=before, run=run,
            arena_len=len(rg.arena), bit_rows=rg.bits.shape,
            state=MachineState(
                sc=self.sc.copy(), st=self.st.copy(), frames=self.frames.copy(),
                pending=self.pending.copy(), scratch=self.scratch.copy(), mark=self.mark.copy(),
                regions=regions, stream=self.stream[:int(self.sc[L.S_N_STREAM])].copy()),
            stream_chunks=tuple(stream_chunks))

    @classmethod
    def resume(cls, snap: "Snapshot", budget: int,
               arena_size: int | None = None) -> "MachineState":
        """A fresh state equal to the snapshot's, running at `budget` (which
        the snapshot must admit: then every step so far would have been the same),
        with an arena of at least `arena_size` slots."""
        if not snap.admits(budget):
            raise ValueError(f"budget {budget} is outside the snapshot's prefix interval "
                             f"[{snap.lo}, {snap.hi}]")
        s = snap.state
        rg = s.regions
        arena = np.zeros(max(snap.arena_len, arena_size or 0), dtype=np.int64)
        arena[:len(rg.arena)] = rg.arena
        bits = np.zeros(snap.bit_rows, dtype=np.uint64)
        used = rg.bit_slot[rg.bit_slot >= 0]
        bits[used] = rg.bits
        regions = rg._replace(
            arena=arena, start=rg.start.copy(), cap=rg.cap.copy(), len=rg.len.copy(),
            compute=rg.compute.copy(), fr_live=rg.fr_live.copy(), bit_slot=rg.bit_slot.copy(),
            bits=bits, free_slots=rg.free_slots.copy(), **_work_space(s.st.shape[1]))
        stream = np.zeros((max(STREAM_CAPACITY, len(s.stream)), 4), dtype=np.int64)
        stream[:len(s.stream)] = s.stream
        sc = s.sc.copy()
        sc[L.S_BUDGET] = budget
        return cls(sc=sc, st=s.st.copy(), frames=s.frames.copy(), pending=s.pending.copy(),
                   scratch=s.scratch.copy(), mark=s.mark.copy(), regions=regions, stream=stream)


@dataclass(frozen=True, eq=False)
class Snapshot:
    """A run's machine state after `steps` steps, with its prefix certificate.

    Budgets only enter the kernel through `memory + request > budget`
    comparisons, and [lo, hi] is the set of budgets for which every
    comparison made so far has the same outcome (`interval`): a run at any of them makes
    exactly these steps, so it may resume here instead of at op 0. The budget
    scalar is the only state a resumed run changes; the certificate so far
    (lo, hi), the counters, the pool, the neighbourhoods and the eviction
    stream (`stream_chunks` + the buffer in `state.stream`) carry over as they
    are. Taken with observers off only: no event is buffered at a snapshot.
    `before` holds the extremes of stretches already folded out of the
    registers, and `run` the record of the run that took it (for splicing).
    """

    steps: int
    interval: BudgetInterval
    before: Extremes
    run: object
    arena_len: int
    bit_rows: tuple[int, int]
    state: MachineState
    stream_chunks: tuple[np.ndarray, ...]

    @property
    def lo(self) -> int:
        return self.interval.lo

    @property
    def hi(self) -> int | None:
        return self.interval.hi

    def admits(self, budget: int) -> bool:
        return self.interval.admits(budget)

    @cached_property
    def nbytes(self) -> int:
        s = self.state
        arrays = (s.sc, s.st, s.frames, s.pending, s.scratch, s.mark, s.stream,
                  *(a for a in s.regions if isinstance(a, np.ndarray)))
        return sum(a.nbytes for a in arrays)
