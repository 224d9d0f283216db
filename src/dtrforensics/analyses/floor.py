"""The floor of a trace: the bytes below which no DTR run of it completes, under
any policy, said before any sweep (docs/semantics.md §4, §7).

At an allocation check nothing can be evicted that is pinned or locked, and a
run's memory never exceeds its budget. So at the top-level compute of each op
three things are resident at once, whatever the policy did before:

- every pinned storage: the constants made so far, and what a `PIN` line
  pinned (semantics.md §2.2; a DTR run never frees a pinned storage, not even a
  constant whose last reference went);
- the op's argument storages, each once (a view argument holds its whole
  storage; an argument given twice is one storage);
- the op's request (its new outputs).

At the end, the final pins make every constant and every tensor still
referenced resident at once. The floor is the largest of these sums: a budget
one byte below it fails at that op (or at the end) in every run. It is a lower
bound, not a promise: the greedy choices of a policy can fail above it
(docs/torch.md says by how much on the zoo and the public traces).

`1 - floor / peak` is the share of the unconstrained peak eviction can free at
most. The floor can lie above that peak: the unconstrained run frees a
constant when its last reference goes (the old version of a parameter written
in place by an optimizer, batch norm's old running statistics), a DTR run
keeps it pinned (`freed_constant_bytes`, `old_version_bytes`). The studies'
"single-op bottleneck" is another, smaller quantity: one op's outputs and
non-constant arguments, counted per tensor (`baseline.bottleneck_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.baseline import baseline
from ..jsonsafe import json_safe
from ..trace.program import CMD_COMPUTE, CMD_GET, CMD_PIN, CMD_RELEASE, Program

# At or above this share of the peak, the floor is reported as the model's state.
STATE_BOUND_SHARE = 0.9


@dataclass(frozen=True)
class Floor:
    peak: int
    floor: int               # bytes no budget can go below
    floor_op_id: int         # where it binds; -1 for the end of the trace (the final pins)
    constant_bytes: int      # every constant (parameters, buffers, optimizer states, batch)
    constants_at_floor: int  # pinned where the floor binds: the constants made so far (and
                             # what PIN lines pinned)
    working_set: int         # that op's distinct unpinned argument storages and its outputs
    final_bytes: int         # resident at the end: every constant and every final pin
    bottleneck_bytes: int    # the studies' single-op bottleneck (outputs, non-constant args)
    freed_constant_bytes: int  # constants the unconstrained run frees, a DTR run keeps pinned
    old_version_bytes: int   # of those, old versions of constants written in place (MUTATE)

    @property
    def above_peak(self) -> int:
        """Bytes by which the floor exceeds the unconstrained peak (0 if it does not)."""
        return max(self.floor - self.peak, 0)

    @property
    def evictable_share(self) -> float:
        return max(1 - self.floor / self.peak, 0.0) if self.peak else 0.0

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
                          "freed_constant_bytes": self.freed_constant_bytes,
                          "old_version_bytes": self.old_version_bytes,
                          "above_peak_bytes": self.above_peak,
                          "evictable_share": self.evictable_share, "state_bound": self.state_bound})


def floor(program: Program) -> Floor:
    """Walk the schedule once, keeping the pinned storages (see the module doc)."""
    storage = program.tensor_storage.tolist()
    size = program.tensor_size.tolist()
    total = program.op_total_size.tolist()
    ptr, args = program.op_arg_ptr.tolist(), program.op_args.tolist()
    constant = [program.is_constant(o) for o in range(program.n_ops)]
    pinned_set: set[int] = set()
    pinned = 0
    best, best_op, best_pinned, best_work = -1, -1, 0, 0
    for kind, arg in zip(program.sched_kind.tolist(), program.sched_arg.tolist()):
        if kind == CMD_COMPUTE:
            inputs = {storage[t] for t in args[ptr[arg]:ptr[arg + 1]]} - pinned_set
            work = sum(size[s] for s in inputs) + total[arg]
            if pinned + work > best:
                best, best_op, best_pinned, best_work = pinned + work, arg, pinned, work
        elif kind == CMD_PIN and storage[arg] not in pinned_set:
            pinned_set.add(storage[arg])
            pinned += size[storage[arg]]
            if pinned > best:      # a final pin or a PIN line (a constant's follows its
                # compute); what a PIN line pins stays to the end, where -1 places it
                best, best_op, best_pinned, best_work = pinned, -1, pinned, 0
    freed, old = _freed_constants(program, constant)
    base = baseline(program)
    return Floor(peak=base.peak, floor=max(best, 0), floor_op_id=best_op,
                 constant_bytes=sum(total[o] for o in range(program.n_ops) if constant[o]),
                 constants_at_floor=best_pinned, working_set=best_work, final_bytes=pinned,
                 bottleneck_bytes=base.bottleneck_bytes,
                 freed_constant_bytes=freed, old_version_bytes=old)


def _freed_constants(program: Program, constant: list[bool]) -> tuple[int, int]:
    """Bytes of the constants the unconstrained run frees (their last reference
    released), and of those the old versions of constants written in place
    (a MUTATE names its new version `<name>$`, semantics.md §1)."""
    storage = program.tensor_storage.tolist()
    size = program.tensor_size.tolist()
    names = set(program.tensor_names)
    refs = [0] * program.n_tensors
    gone: set[int] = set()
    freed = old = 0
    for kind, arg in zip(program.sched_kind.tolist(), program.sched_arg.tolist()):
        if kind == CMD_COMPUTE:
            for tid in program.op_outputs_of(arg):
                refs[storage[tid]] += 1
        elif kind == CMD_GET:
            refs[storage[arg]] += 1
        elif kind == CMD_RELEASE:
            s = storage[arg]
            refs[s] -= 1
            if refs[s] == 0 and constant[int(program.tensor_op[s])] and s not in gone:
                gone.add(s)
                freed += size[s]
                if program.tensor_name(s) + "$" in names:
                    old += size[s]
    return freed, old
