"""What the hindsight search may change in a failing run: storages to retain and
single victims to force.

Retention candidates are the storages the failing frontier needed that were
pressure-evicted earlier. Forced victims are single different evictions
(`--force-victim S@K`, semantics.md §14) at two kinds of decision: the first
divergent choice against a nearby completing budget (that run's victim there,
and the failing run's runner-up), and the failing run's last decisions (the
runner-up instead of the victim): those made before the failing op, latest
first, then those inside it (which all serve the materializations that fail,
and come last, as retentions evicted only inside it do).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..concepts import completes
from ..engine.hooks import EV_EVICT, EVENT_COLUMNS, Observer
from ..engine.replay import RunResult, replay
from ..trace.program import Program
from .interventions import same_execution

if TYPE_CHECKING:   # its digests import numba: only runs that share import it
    from ..engine.prefixes import PrefixCache

# The nearby completion: at most this many probe runs; after the adjacent
# executions, the walk jumps budget >> FIRST_JUMP_SHIFT bytes out, then doubles.
MAX_PROBES = 48
FIRST_JUMP_SHIFT = 12


@dataclass(frozen=True)
class RetentionCandidate:
    storage: int
    last_evicted_op: int
    evictions: int
    why: str  # which frontier level or argument needed it


@dataclass(frozen=True)
class ForcedVictim:
    """Evict `storage` at decision `decision` (at op `op_id` of the failing run)
    instead of the failing run's own victim `instead_of`."""

    storage: int
    decision: int
    op_id: int
    instead_of: int
    source: str  # "divergent_choice" or "last_decisions"
    why: str


@dataclass(frozen=True)
class NearbyCompletion:
    """A completing budget near the failing one, and where their choices part:
    decision `decision` (None when the failing run made no decision there)."""

    budget: int
    ratio: float              # budget / peak
    overhead: float | None
    probes: int               # runs made to find it
    common_choices: int       # identical leading pressure decisions
    decision: int | None
    failing_victim: int | None
    completing_victim: int | None
    victim_in_pool: bool | None  # was the completing run's victim a candidate of the failing run?

    def to_json(self) -> dict:
        return dict(self.__dict__)


def frontier_candidates(program: Program, result: RunResult) -> list[RetentionCandidate]:
    """Storages the failing frontier needed that were pressure-evicted earlier:
    evicted before the failing op, latest first; then those evicted only during
    the failing op's own recursion, by id."""
    if result.frontier is None:
        return []
    needed: dict[int, str] = {}
    for level in result.frontier.levels:
        own = int(program.tensor_storage[level.tensor_id])
        needed.setdefault(own, f"rematerialized at depth {level.depth} ({level.tensor})")
        for arg in program.op_args_of(level.op_id).tolist():
            s = int(program.tensor_storage[arg])
            needed.setdefault(s, f"argument of {level.op_name} at depth {level.depth} "
                                 f"({program.tensor_name(arg)})")
    failing_op = result.summary.oom.op_id
    last_op: dict[int, int] = {}
    last_before: dict[int, int] = {}
    count: dict[int, int] = {}
    for storage, op_id, _ in result.victims.tolist():
        if storage in needed:
            last_op[storage] = op_id
            count[storage] = count.get(storage, 0) + 1
            if op_id < failing_op:
                last_before[storage] = op_id
    ordered = sorted(last_op, key=lambda s: (s not in last_before, -last_before.get(s, 0), s))
    return [RetentionCandidate(s, last_before.get(s, last_op[s]), count[s], needed[s])
            for s in ordered]


def nearby_completion(program: Program, failing: RunResult, *, policy: str,
                      timeout: float | None,
                      prefixes: PrefixCache | None = None) -> tuple[RunResult | None, int]:
    """The completing run nearest to the failing budget that a walk outward finds,
    and the number of runs the walk made.

    The walk steps below and above in turn. The first step on each side is
    the adjacent execution (just past the failing run's budget interval); each
    later one jumps past the interval of the previous run on its side and at
    least `budget >> FIRST_JUMP_SHIFT` bytes, doubling every round, from the
    failing budget, so it ends in a few dozen runs. Of the completions of one
    round the closer wins (below on a tie). The probes share `prefixes` with
    the failing run when it ran with them."""
    budget = failing.summary.budget
    lo, hi = failing.summary.budget_interval
    edge = {-1: lo - 1, 1: None if hi is None else hi + 1}
    jump = 0
    probes = 0
    while probes < MAX_PROBES and any(e is not None for e in edge.values()):
        found = []
        for side in (-1, 1):
            if edge[side] is None:
                continue
            target = (min(edge[side], budget - jump) if side < 0
                      else max(edge[side], budget + jump))
            if target < 1:
                edge[side] = None
                continue
            run = replay(program, budget=target, policy=policy, timeout=timeout,
                         prefixes=prefixes)
            probes += 1
            if completes(run.summary.outcome):
                found.append((abs(target - budget), side, run))
                continue
            r_lo, r_hi = run.summary.budget_interval
            edge[side] = (r_lo - 1 if side < 0 else (None if r_hi is None else r_hi + 1))
        if found:
            return min(found, key=lambda f: f[:2])[2], probes
        jump = max(2 * jump, budget >> FIRST_JUMP_SHIFT, 1)
    return None, probes


_EVICT_COLUMNS = tuple(EVENT_COLUMNS.index(c) for c in ("decision", "storage_id", "runner_up",
                                                         "op_id"))


class _Decisions(Observer):
    """Each pressure decision's victim, runner-up and op, and the candidates of
    the decisions in `pools`."""

    def __init__(self, pools: set[int]):
        self.pools = pools
        self.rows: list[np.ndarray] = []
        self.pool: dict[int, set[int]] = {k: set() for k in pools}
        self.wants_candidates = bool(pools)

    def on_events(self, batch) -> None:
        kind = batch.column("kind")
        picked = batch.ints[kind == EV_EVICT]
        if len(picked):
            self.rows.append(picked[:, list(_EVICT_COLUMNS)])

    def on_candidates(self, batch) -> None:
        decision, storage = batch.column("decision"), batch.column("storage_id")
        for k in self.pools:
            self.pool[k].update(storage[decision == k].tolist())

    def table(self) -> np.ndarray:
        """(decision, storage, runner-up, op id) per decision, in decision order."""
        if not self.rows:
            return np.zeros((0, 4), dtype=np.int64)
        out = np.concatenate(self.rows)
        return out[np.argsort(out[:, 0], kind="stable")]


def forced_victims(program: Program, failing: RunResult, completing: RunResult | None, *,
                   policy: str, timeout: float | None, last_decisions: int,
                   probes: int = 0) -> tuple[list[ForcedVictim], NearbyCompletion | None, bool]:
    """Single different evictions to try, the nearby completion they were drawn
    from, and whether the failing run replayed under observation was the same
    execution (a rerun that disagrees voids the search)."""
    victims = failing.victims[:, 0]
    divergent = None
    if completing is not None:
        theirs = completing.victims[:, 0]
        n = min(len(victims), len(theirs))
        parted = np.flatnonzero(victims[:n] != theirs[:n])
        divergent = int(parted[0]) if len(parted) else n
    in_failing = divergent is not None and divergent < len(victims)
    seen = _Decisions({divergent} if in_failing else set())
    again = replay(program, budget=failing.summary.budget, policy=policy, timeout=timeout,
                   observers=[seen])
    same = same_execution(again.summary.to_json(), failing.summary.to_json())
    table = seen.table()
    out: list[ForcedVictim] = []

    def add(storage: int, k: int, source: str, why: str) -> None:
        _, victim, _, op_id = (int(x) for x in table[k])
        if storage >= 0 and storage != victim and not any(
                f.storage == storage and f.decision == k for f in out):
            out.append(ForcedVictim(storage, k, op_id, victim, source, why))

    nearby = None
    if completing is not None:
        s = completing.summary
        theirs = completing.victims[:, 0]
        choice = int(theirs[divergent]) if divergent < len(theirs) else None
        in_pool = (choice in seen.pool[divergent]) if in_failing and choice is not None else None
        nearby = NearbyCompletion(s.budget, s.budget / s.peak, s.overhead, probes, divergent,
                                  divergent if in_failing else None,
                                  int(victims[divergent]) if in_failing else None, choice,
                                  in_pool)
        if in_failing and len(table) == len(victims):
            if in_pool:
                add(choice, divergent, "divergent_choice",
                    f"the choice of the completing run at {s.budget:,} B")
            add(int(table[divergent, 2]), divergent, "divergent_choice",
                "the runner-up at the first divergent choice")
    if len(table) == len(victims):
        failing_op = failing.summary.oom.op_id
        latest = sorted(range(len(table)), key=lambda k: (int(table[k, 3]) >= failing_op, -k))
        for k in latest[:last_decisions]:
            add(int(table[k, 2]), k, "last_decisions",
                f"the runner-up at decision {k} (op {int(table[k, 3])})")
    return out, nearby, same
