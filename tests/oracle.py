"""A deliberately simple replay of docs/semantics.md §4-§11, used as a test oracle.

One Python object per storage, tensor and neighbourhood region; Python sets and
Python ints throughout; recursion for nested rematerialization. Nothing here is
optimised: every rule of the specification maps to a few readable lines, so that
the fast engine can be checked against it decision by decision.

Entry point: ``run(program, budget, policy="dtr", remat_limit=None)``.
"""

from __future__ import annotations

import hashlib
import math
import sys
from dataclasses import dataclass, field

from dtrforensics.trace.program import CMD_COMPUTE, CMD_GET, CMD_PIN, CMD_RELEASE, Program

# Nested rematerialization is plain recursion (a few Python frames per level).
# Python 3.11+ does not use the C stack for Python-to-Python calls, so a high
# limit is safe; depth is reported, never an outcome.
_RECURSION_LIMIT = 1_000_000
if sys.getrecursionlimit() < _RECURSION_LIMIT:
    sys.setrecursionlimit(_RECURSION_LIMIT)

# The reference's policies: every one the oracle runs, the one list the tests use.
POLICIES = ("dtr", "no-staleness", "no-size", "compute-only", "lru", "size", "msps", "dtr-local")
# One policy of every kind of score: neighbourhoods, staleness only, size only.
SCORE_KINDS = ("dtr", "lru", "size", "msps", "dtr-local")
# Policies whose score reads the evicted neighbourhoods (§8). The others
# skip the region bookkeeping, which changes nothing about their decisions.
REGION_POLICIES = frozenset({"dtr", "no-staleness", "no-size", "compute-only", "msps"})

NEG_INF = -math.inf


# --------------------------------------------------------------------------- #
# Result
# --------------------------------------------------------------------------- #

@dataclass
class OracleResult:
    outcome: str                      # "ok" | "oom" | "thrashed"
    clock: int
    model_compute: int                # baseline model compute (sum of op costs)
    remat_compute: int
    overhead: float                   # (model + remat) / model
    victims: list = field(default_factory=list)   # (storage_id, op_id, clock), pressure only
    stream: list = field(default_factory=list)    # (kind, storage_id, op_id), all evictions
    remats: int = 0
    collateral_remats: int = 0
    max_depth: int = 0
    max_pinned: tuple = (0, 0, -1)    # (bytes, depth, op_id)
    budget_interval: list = field(default_factory=lambda: [0, None])
    ops_done: int = 0
    oom: dict | None = None
    victims_sha256: str = ""
    evictions: int = 0
    dead_frees: int = 0
    distinct_evicted: int = 0
    stream_distinct: int = 0
    frontier_misses: int = 0          # absorbs of a storage missing from the frontier (§8.3)
    order_dependent: bool = False     # a storage absorbed itself: the misses depend on set order


class _OutOfMemory(Exception):
    pass


class _Thrashed(Exception):
    pass


# --------------------------------------------------------------------------- #
# Runtime objects (§4)
# --------------------------------------------------------------------------- #

class Op:
    def __init__(self, op_id: int, cost: int, total_size: int):
        self.id = op_id
        self.cost = cost
        self.total_size = total_size


class Storage:
    def __init__(self, storage_id: int, size: int):
        self.id = storage_id
        self.size = size
        self.tensors: list[Tensor] = []
        self.op_ids: set[int] = set()
        self.compute = 0              # sum of costs of the distinct ops of its tensors so far
        self.material = False
        self.pinned = False
        self.locks = 0
        self.ext_refs = 0
        self.last_access = NEG_INF
        self.fwd = Region(self, forward=True)    # through children
        self.bwd = Region(self, forward=False)   # through parents

    def add_tensor(self, t: Tensor) -> None:
        self.tensors.append(t)
        self.ext_refs += 1
        if t.op.id not in self.op_ids:
            self.op_ids.add(t.op.id)
            self.compute += t.op.cost

    def __repr__(self) -> str:
        return f"Storage({self.id})"


class Tensor:
    def __init__(self, tensor_id: int, name: str, op: Op, size: int,
                 parents: list[Tensor], storage: Storage):
        self.id = tensor_id
        self.name = name
        self.op = op
        self.size = size              # 0 for a view
        self.parents = list(parents)  # argument tensors, duplicates kept
        self.siblings: list[Tensor] = []
        self.children: list[Tensor] = []
        self.storage = storage
        self.defined = False
        self.ext_refs = 1

    def __repr__(self) -> str:
        return f"Tensor({self.id}, {self.name})"


class Region:
    """An evicted neighbourhood of `base` in one direction (§8.1)."""

    def __init__(self, base: Storage, forward: bool):
        self.base = base
        self.forward = forward
        self.interior: set[Storage] = set()
        self.frontier: set[Storage] = set()
        self.compute = 0

    def neighbours(self, t: Tensor) -> list[Tensor]:
        return t.children if self.forward else t.parents

    def clear(self) -> None:
        self.interior = set()
        self.frontier = set()
        self.compute = 0

    def rebuild(self) -> None:
        """§8.2: walk from the base afresh."""
        self.clear()
        stack = [self.base]
        while stack:
            s = stack.pop()
            for t in s.tensors:
                for u in self.neighbours(t):
                    us = u.storage
                    if us.material:
                        if us is not self.base:
                            self.frontier.add(us)
                        continue
                    if us not in self.interior:
                        self.interior.add(us)
                        self.compute += us.compute
                        stack.append(us)

    def absorb(self, evicted: Storage) -> bool:
        """§8.3: `evicted` (a frontier member of this region) was just evicted.
        Whether it was in the frontier (the reference asserts it: a miss)."""
        other = evicted.fwd if self.forward else evicted.bwd
        # The reference asserts `evicted` is in the frontier; discard keeps the
        # oracle usable on inputs where that invariant would not hold.
        missed = evicted not in self.frontier
        self.frontier.discard(evicted)
        self.frontier |= other.frontier
        new_members = (other.interior - self.interior) | {evicted}
        for s in new_members:
            self.compute += s.compute
        self.interior |= new_members
        return not missed


# --------------------------------------------------------------------------- #
# Runtime (sections 4-7)
# --------------------------------------------------------------------------- #

def _storage_id(s: Storage) -> int:
    return s.id


class Runtime:
    def __init__(self, program: Program, budget: int, policy: str, remat_limit):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; expected one of {POLICIES}")
        self.program = program
        self.budget = int(budget)
        self.policy = policy
        self.use_regions = policy in REGION_POLICIES
        self.remat_limit = remat_limit

        self.ops = [Op(i, int(c), int(ts)) for i, (c, ts) in enumerate(
            zip(program.op_cost.tolist(), program.op_total_size.tolist()))]
        self.tensors: dict[int, Tensor] = {}
        self.storages: dict[int, Storage] = {}
        self.pool: dict[Storage, None] = {}   # insertion-ordered evictable storages

        self.memory = 0
        self.clock = 1
        self.remat_compute = 0
        self.current_op = -1              # id of the most recently started compute command

        # forensic state
        self.depth = 0
        self.chain: list[Tensor] = []     # tensors of the materialize calls in progress
        self.max_depth = 0
        self.max_pinned = (0, 0, -1)
        self.interval_lo = 0
        self.interval_hi = None
        self.remats = 0
        self.collateral_remats = 0
        self.victims: list[tuple[int, int, int]] = []
        self.stream: list[tuple[str, int, int]] = []
        self.frontier_misses = 0
        self.order_dependent = False      # a storage absorbed itself: see evict
        self.oom: dict | None = None

    # ---- pool and locks ---------------------------------------------------- #

    def make_evictable(self, s: Storage) -> None:
        if s not in self.pool:
            self.pool[s] = None

    def lock(self, s: Storage) -> None:
        if s.locks == 0:
            self.pool.pop(s, None)
        s.locks += 1

    def unlock(self, s: Storage) -> None:
        s.locks -= 1
        if s.locks == 0:
            self.make_evictable(s)

    def pool_bytes(self) -> int:
        return sum(s.size for s in self.pool)

    # ---- eviction ---------------------------------------------------------- #

    def evict(self, s: Storage, kind: str) -> None:
        """§5.5, then the absorbs of §8.3."""
        s.material = False
        self.memory -= s.size
        self.pool.pop(s, None)
        for t in s.tensors:
            t.defined = False
        if self.use_regions:
            # In id order, not the reference's set order: that order only shows where
            # s is in its own frontier (a cycle of views), and then s's region absorbs
            # s amid the others' absorbs of it, so what they take in, and the misses
            # that follow, depend on it: no count is then the reference's (§8.3).
            self.order_dependent |= s in s.bwd.frontier or s in s.fwd.frontier
            for p in sorted(s.bwd.frontier, key=_storage_id):
                self.frontier_misses += not p.fwd.absorb(s)
            for c in sorted(s.fwd.frontier, key=_storage_id):
                self.frontier_misses += not c.bwd.absorb(s)
            s.fwd.clear()
            s.bwd.clear()
        if kind == "pressure":
            self.victims.append((s.id, self.current_op, self.clock))
        self.stream.append((kind, s.id, self.current_op))

    # ---- scores (§7) ----------------------------------------------------- #

    @staticmethod
    def ratio(num: int, den):
        # int / int is a single correctly-rounded division; den may be inf or nan.
        return num / den if den > 0 else math.inf

    def score(self, s: Storage):
        """§7.2, one exact division (§7.3)."""
        policy = self.policy
        staleness = self.clock - s.last_access        # int, or inf if never accessed
        if policy == "lru":
            return s.last_access
        if policy == "size":
            return 1 / s.size if s.size > 0 else math.inf
        if policy == "dtr-local":
            return self.ratio(s.compute, s.size * staleness)
        if policy == "msps":
            return self.ratio(s.compute + s.bwd.compute, s.size)
        total = s.compute + s.fwd.compute + s.bwd.compute
        if policy == "dtr":
            return self.ratio(total, s.size * staleness)
        if policy == "no-staleness":
            return self.ratio(total, s.size)
        if policy == "no-size":
            return self.ratio(total, staleness)
        if policy == "compute-only":
            return total
        raise AssertionError(policy)

    def choose_victim(self) -> Storage:
        """§7.1: the last of equal minimal scores, or the first zero."""
        best = math.inf
        victim = None
        for s in self.pool:
            sc = self.score(s)
            if sc <= best:
                best = sc
                victim = s
            if sc == 0:
                break
        return victim

    # ---- allocation -------------------------------------------------------- #

    def does_not_fit(self, request: int) -> bool:
        """§6.3's comparison, recorded for the budget certificate (§11)."""
        value = self.memory + request
        result = value > self.budget
        if result:
            if self.interval_hi is None or value - 1 < self.interval_hi:
                self.interval_hi = value - 1
        elif value > self.interval_lo:
            self.interval_lo = value
        return result

    def allocate(self, t: Tensor) -> None:
        request = t.op.total_size
        if not self.does_not_fit(request):
            return
        pinned = self.memory - self.pool_bytes()
        if pinned > self.max_pinned[0]:
            self.max_pinned = (pinned, self.depth, self.current_op)
        while self.does_not_fit(request):
            if not self.pool:
                self.oom = {
                    "op_id": self.current_op,
                    "request": request,
                    "memory": self.memory,
                    "pinned": self.memory - self.pool_bytes(),
                    "depth": self.depth,
                    "tensor": t.name,
                    "root_tensor": self.chain[0].name,
                    "budget": self.budget,
                }
                raise _OutOfMemory()
            self.evict(self.choose_victim(), "pressure")

    # ---- materialize (§6) ----------------------------------------------- #

    def materialize(self, t: Tensor, remat: bool) -> None:
        assert not t.defined
        self.depth += 1
        self.chain.append(t)
        self.max_depth = max(self.max_depth, self.depth)

        # §6.1 touch parents
        for p in t.parents:
            p.storage.last_access = self.clock
        # §6.2 lock defined parents, then rematerialize and lock undefined ones
        defined_now = [p for p in t.parents if p.defined]
        undefined_now = [p for p in t.parents if not p.defined]
        for p in defined_now:
            self.lock(p.storage)
        for p in undefined_now:
            if not p.defined:
                self.materialize(p, remat=True)
            self.lock(p.storage)
        # §6.3 allocation check
        self.allocate(t)
        # §6.4 compute
        self.run_op(t, remat)
        # §6.5 unlock in argument order
        for p in t.parents:
            self.unlock(p.storage)
        # §6.6 thrash check
        if self.remat_compute > self.remat_limit:
            raise _Thrashed()

        self.chain.pop()
        self.depth -= 1

    def run_op(self, t: Tensor, remat: bool) -> None:
        """§6.4, then the rebuilds of §8.4."""
        op = t.op
        already_defined = [u for u in t.siblings if u.defined]
        newly_defined = [u for u in t.siblings if not u.defined]
        newly_material = [u.storage for u in t.siblings + [t] if not u.storage.material]

        self.clock += op.cost
        self.memory += op.total_size

        t.storage.material = True
        t.defined = True
        if remat:
            self.remat_compute += op.cost
            self.remats += 1
        for u in newly_defined:
            u.storage.material = True
            u.defined = True
            if remat:
                self.collateral_remats += 1
        for u in already_defined:           # double-computed outputs are dropped
            self.memory -= u.size
        for s in newly_material:
            self.make_evictable(s)

        if self.use_regions:
            forward_to_rebuild: set[Storage] = set()
            backward_to_rebuild: set[Storage] = set()
            for s in newly_material:
                s.fwd.rebuild()
                s.bwd.rebuild()
                forward_to_rebuild |= s.bwd.frontier
                backward_to_rebuild |= s.fwd.frontier
            for s in forward_to_rebuild:
                s.fwd.rebuild()
            for s in backward_to_rebuild:
                s.bwd.rebuild()

    # ---- commands ---------------------------------------------------------- #

    def compute(self, op_id: int) -> None:
        """§5.1 (children linked at creation, §4.2)."""
        program = self.program
        op = self.ops[op_id]
        self.current_op = op_id
        args = [self.tensors[a] for a in program.op_args_of(op_id).tolist()]
        outputs = []
        for tid in program.op_outputs_of(op_id):
            alias = int(program.tensor_alias[tid])
            size = int(program.tensor_size[tid])
            if alias >= 0:
                storage = args[alias].storage
            else:
                storage = Storage(tid, size)
                self.storages[tid] = storage
            assert storage.id == int(program.tensor_storage[tid])
            t = Tensor(tid, program.tensor_name(tid), op, size, args, storage)
            storage.add_tensor(t)
            self.tensors[tid] = t
            outputs.append(t)
        for t in outputs:
            t.siblings = [u for u in outputs if u is not t]
        for p in args:
            p.children.extend(outputs)

        self.materialize(outputs[0], remat=False)
        for t in outputs:
            t.storage.last_access = self.clock

    def get(self, tensor_id: int) -> None:
        t = self.tensors[tensor_id]
        t.ext_refs += 1
        t.storage.ext_refs += 1

    def release(self, tensor_id: int) -> None:
        """§5.3: a dead free when the last reference goes."""
        t = self.tensors[tensor_id]
        t.ext_refs -= 1
        s = t.storage
        s.ext_refs -= 1
        if s.ext_refs == 0 and s.material and not s.pinned:
            self.evict(s, "dead")

    def pin(self, tensor_id: int) -> None:
        """§5.4: recompute if needed, then lock for good."""
        t = self.tensors[tensor_id]
        if not t.defined:
            self.materialize(t, remat=True)
        s = t.storage
        if not s.pinned:
            self.lock(s)
            s.pinned = True

    def replay(self) -> str:
        program = self.program
        kinds = program.sched_kind.tolist()
        for kind, arg in zip(kinds, program.sched_arg.tolist()):
            try:
                if kind == CMD_COMPUTE:
                    self.compute(arg)
                elif kind == CMD_GET:
                    self.get(arg)
                elif kind == CMD_RELEASE:
                    self.release(arg)
                elif kind == CMD_PIN:
                    self.pin(arg)
                else:
                    raise ValueError(f"unknown command kind {kind}")
            except _OutOfMemory:
                self.oom["final_pins"] = kind == CMD_PIN    # §2.3, or a PIN line (§2.2)
                return "oom"
            except _Thrashed:
                return "thrashed"
        return "ok"


def runtime(program: Program, budget: int, policy: str = "dtr",
            remat_limit: float | None = None) -> Runtime:
    """The oracle's runtime for `program` under `budget` bytes with eviction policy
    `policy`, not yet replayed; remat_limit defaults to 59 x the model's compute."""
    if remat_limit is None:
        remat_limit = 59 * int(program.op_cost.sum())
    return Runtime(program, budget, policy, remat_limit)


def run(program: Program, budget: int, policy: str = "dtr",
        remat_limit: float | None = None) -> OracleResult:
    """Replay `program` under `budget` bytes with eviction policy `policy`."""
    model_compute = int(program.op_cost.sum())
    rt = runtime(program, budget, policy, remat_limit)
    outcome = rt.replay()

    victim_ids = [sid for sid, _, _ in rt.victims]
    sha = hashlib.sha256(("[" + ", ".join(str(v) for v in victim_ids) + "]").encode("utf-8"))
    return OracleResult(
        outcome=outcome,
        clock=rt.clock,
        model_compute=model_compute,
        remat_compute=rt.remat_compute,
        overhead=(model_compute + rt.remat_compute) / model_compute if model_compute else math.nan,
        victims=list(rt.victims),
        stream=list(rt.stream),
        remats=rt.remats,
        collateral_remats=rt.collateral_remats,
        max_depth=rt.max_depth,
        max_pinned=rt.max_pinned,
        budget_interval=[rt.interval_lo, rt.interval_hi],
        ops_done=rt.current_op + 1,
        oom=rt.oom,
        victims_sha256=sha.hexdigest(),
        evictions=len(rt.victims),
        dead_frees=sum(1 for kind, _, _ in rt.stream if kind == "dead"),
        distinct_evicted=len(set(victim_ids)),
        stream_distinct=len({sid for _, sid, _ in rt.stream}),
        frontier_misses=rt.frontier_misses,
        order_dependent=rt.order_dependent,
    )
