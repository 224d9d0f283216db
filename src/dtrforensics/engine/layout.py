"""Where the kernel keeps its state: named slots of the arrays of a `MachineState`.

The kernel's state is plain int64 arrays so that a run can stop and resume at
any step; this module gives every row and slot its name, once, for the kernel,
the state allocator and the readers of a stopped machine.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

# Scalar slots (the int64 vector `sc`).
(S_CLOCK, S_MEMORY, S_CMD_POS, S_CREATED, S_CUR_OP, S_DEPTH, S_MAX_DEPTH, S_MODEL_COMPUTE,
 S_REMAT_COMPUTE, S_EVICTIONS, S_DEAD, S_REMATS, S_COLLATERAL, S_POOL_BYTES, S_POOL_SIZE,
 S_POOL_HEAD, S_POOL_TAIL, S_MAXPIN_BYTES, S_MAXPIN_DEPTH, S_MAXPIN_OP, S_LO, S_HI_TRUE,
 S_STATUS, S_PEAK, S_EPOCH, S_N_EVENTS, S_N_CANDS, S_PEND_TOP, S_SCORE_EVALS,
 S_ANOMALIES, S_BUDGET, S_EMIT, S_EMIT_CANDS, S_REMAT_LIMIT, S_N_STREAM,
 S_STEPS, S_REBUILDS, S_WALK_VISITS, S_ABSORBS, S_ABSORB_WORK, S_ARENA_TOP,
 S_FREE_SLOTS, S_DEBUG, S_EXCLUSION_CHECKS, S_FRONTIER_MISSES, S_STOP_CMD, S_POLICY_FAULT,
 S_NO_CANDIDATE, S_REGIONS_BUILT) = range(49)
N_SCALARS = 49
# S_POLICY_FAULT: the decision at which a policy from a file scored NaN, a
# negative number or raised (-1: none; the kernel then stops, STATUS_POLICY_FAULT).
# S_NO_CANDIDATE: the decision at which the policy's filters left no candidate
# in a non-empty pool (-1: none; the run ends out of memory).
# S_REGIONS_BUILT: 0 while a policy's regions wait for their first reader (§8.7:
# none kept before it), 1 once they are kept.

# Each scalar's role, declared once: every scalar is in exactly one of these
# (tests/test_engine_layout.py). What reads them: the digest of a state
# (engine/digest.py), a run spliced onto another (engine/prefixes.py), the
# extremes folded stretch by stretch (state.Extremes).
# What the machine is: two states equal in these, the pool's order and the
# state rows make the same steps from there on (the digest hashes them).
STEERING = (S_CLOCK, S_MEMORY, S_CMD_POS, S_CREATED, S_CUR_OP, S_DEPTH, S_MODEL_COMPUTE,
            S_REMAT_COMPUTE, S_POOL_BYTES, S_POOL_SIZE, S_PEND_TOP, S_STATUS, S_REGIONS_BUILT)
# The pool list's ends: the digest hashes the order they start, not their values.
POOL_ENDS = (S_POOL_HEAD, S_POOL_TAIL)
# Counters: a spliced run adds its own so far to its donor's after the meeting.
ADDITIVE = (S_EVICTIONS, S_DEAD, S_REMATS, S_COLLATERAL, S_SCORE_EVALS, S_STEPS, S_ANOMALIES,
            S_REBUILDS, S_WALK_VISITS, S_ABSORBS, S_ABSORB_WORK, S_FRONTIER_MISSES,
            S_EXCLUSION_CHECKS)
# The budget certificate (§11) and running maxima (§12.5, §12.6), in the order of
# the fields of `state.Extremes`, which folds them stretch by stretch.
EXTREMES = (S_LO, S_HI_TRUE, S_MAX_DEPTH, S_PEAK, S_MAXPIN_BYTES, S_MAXPIN_DEPTH, S_MAXPIN_OP)
# Decision indices (the S_EVICTIONS at that decision, -1: none): a spliced run
# shifts its donor's by the pressure evictions it made more than the donor.
DECISIONS = (S_POLICY_FAULT, S_NO_CANDIDATE)
# The run's settings, written by the driver (a spliced run keeps its own).
SETTINGS = (S_BUDGET, S_EMIT, S_EMIT_CANDS, S_REMAT_LIMIT, S_DEBUG, S_STOP_CMD)
# Where the state sits and what the buffers hold, not what the machine is: mark
# epochs, buffer fills, the arena's top, free bitset slots (never digested).
BOOKKEEPING = (S_EPOCH, S_N_EVENTS, S_N_CANDS, S_N_STREAM, S_ARENA_TOP, S_FREE_SLOTS)
ROLES = {"steering": STEERING, "pool ends": POOL_ENDS, "additive": ADDITIVE,
         "extremes": EXTREMES, "decisions": DECISIONS, "settings": SETTINGS,
         "bookkeeping": BOOKKEEPING}

# The kernel's arguments bundled, besides the graph (graph.KernelGraph), the policy's
# parameters, the state arrays and the regions (state.Regions); the driver makes
# them once per run (engine/replay.py).
Buffers = namedtuple("Buffers", ["ev", "evf", "cand", "candf", "event_room", "cand_room"])
Buffers.__doc__ = """What observers receive (hooks.py): event ints and floats, candidate
ints and scores, and the rows one step may write of each (a slice stops before
fewer are left)."""
Exclusions = namedtuple("Exclusions", ["retain", "window", "forbid", "force"])
Exclusions.__doc__ = """Interventions (semantics.md §14) as the kernel reads them:
storages retained (one flag each) within an op window, and forbidden and forced
(decision, storage) pairs."""
FromFile = namedtuple("FromFile", ["score_fn", "locked", "probe"])
FromFile.__doc__ = """A policy from a file (engine/user_policy.py): the address of its
compiled score (0 for a built-in: the kernel scores it), the storages it never
evicts (one byte each, empty: none) and the features of the candidate scored
last (read when a score faults)."""

# Rows of the state matrix `st`. R_DEFINED is indexed by tensor id, every other
# row by storage id (semantics.md §4.1, §4.2); R_IN_POOL/R_POOL_PREV/R_POOL_NEXT
# are the pool as a doubly linked list in pool order (§4.4).
(R_DEFINED, R_MATERIAL, R_PINNED, R_LOCK, R_REF_EXT, R_LAST_ACCESS, R_COMPUTE, R_LAST_OP,
 R_IN_POOL, R_POOL_PREV, R_POOL_NEXT, R_TIMES_EVICTED) = range(12)
STATE_ROWS = ("defined", "material", "pinned", "lock", "ref_ext", "last_access", "compute",
              "last_op", "in_pool", "pool_prev", "pool_next", "times_evicted")

# Rows of the frame stack `frames`: one column per materialization in progress.
(FR_TENSOR, FR_REMAT, FR_PHASE, FR_INDEX, FR_PENDING_START, FR_PENDING_COUNT,
 FR_ACTION) = range(7)
FRAME_ROWS = ("tensor", "remat", "phase", "index", "pending_start", "pending_count", "action")

# Directions of an evicted neighbourhood (semantics.md §8.1): region 2*s + d.
FORWARD, BACKWARD = 0, 1
# A region's compute while it is not kept: a pinned storage's region, known to
# be its walk (semantics.md §8.9; every kept compute is >= 0).
UNKEPT = -1

# Slots of `Regions.memo_gate`: how the memo rows of shared walks have fared
# lately (walks.shared_rebuilds): failed attempts, and rebuild rounds left to
# walk plainly before trying again.
G_MEMO_FAILURES, G_MEMO_SKIP = range(2)
N_GATES = 2

# Slots of `Regions.era` (engine/cutoff.py): the current period (flushes so
# far: a flush closes one), the arrivals so far in it; the backward rebuilds
# made as differences, the forward ones, and the forward regions made from a
# parent's (counts for tests and benchmarks; work space, so a resumed run
# counts from 0).
ERA_NOW, ERA_ARRIVALS, ERA_CUTS, ERA_PEELS, ERA_FROM_PARENT = range(5)
N_ERA = 5

# Rows of the work matrix `scratch` (no state: reused by every step).
(SCRATCH_INTERIOR, SCRATCH_FRONTIER, SCRATCH_NEW_RESIDENT, SCRATCH_AFFECTED,
 SCRATCH_MEMBERS) = range(5)
N_SCRATCH_ROWS = 5

# Phases of a materialization (semantics.md §6): enter (§6.1, first half of
# §6.2), materialize the next undefined parent, lock it, allocation check
# (§6.3), free one victim, compute and unlock (§6.4-6.6).
PH_ENTER, PH_PARENT, PH_PARENT_LOCK, PH_CHECK, PH_FREE, PH_COMPUTE = range(6)
# What a frame does when it completes: nothing (a parent), the end of a
# compute command (§5.1) or of a pin command (§5.4).
ACT_NONE, ACT_COMPUTE, ACT_PIN = range(3)

# Kernel status codes.
(STATUS_RUNNING, STATUS_DONE, STATUS_OOM, STATUS_THRASHED, STATUS_FORCE_FAILED,
 STATUS_ARENA_FULL, STATUS_POLICY_FAULT) = range(7)

# Eviction stream: one row per eviction (semantics.md §12.3).
STREAM_KIND, STREAM_STORAGE, STREAM_OP, STREAM_CLOCK = range(4)
STREAM_PRESSURE, STREAM_DEAD = 0, 1

# The environment switch of the neighbourhoods' debug pass (regions.check), read
# by the driver, which imports regions (and numba) only when it is on.
CHECK_REGIONS_ENV = "DTRF_CHECK_REGIONS"

# Bases per masked walk (walks.mask_rebuilds): one bit of a uint64 each. The
# first MASK_BASES rows of the walk work space are zero between walks.
MASK_BASES = 64

NO_HI = np.iinfo(np.int64).max            # S_HI_TRUE when no comparison failed yet (§11)
NEVER = np.iinfo(np.int64).min // 4        # last_access of a storage never touched
