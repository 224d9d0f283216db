"""The compiled form of a DTR trace: an immutable program of numpy arrays.

A `Program` is what every layer above the parser works with. Identifiers follow
docs/semantics.md §3: op ids index `compute` commands in schedule order
(constants included), tensor ids are assigned in creation order (an op's outputs
are consecutive), and a storage id is the tensor id of its owning tensor.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Schedule command kinds (docs/semantics.md §2.2, lowering).
CMD_COMPUTE = 0
CMD_GET = 1
CMD_RELEASE = 2
CMD_PIN = 3

CONSTANT_OP_NAME = "constant"


def op_label(op_id: int | None, name: str | None = None) -> str:
    """An op in both numberings, ours (0-based ids) and the papers' (1-based):
    'op 469 (paper #470) add'; '-' for no op."""
    if op_id is None or op_id < 0:
        return "-"
    return f"op {op_id} (paper #{op_id + 1})" + (f" {name}" if name else "")


@dataclass(frozen=True, eq=False)
class OpWhere:
    """Where each op ran in the model it was recorded from (a `torch record` log's
    sidecar, `trace/where.py`): per op an index into `strings`, -1 for none.
    module: the innermost module path; chain: the modules around it, outermost
    first, joined by ' > '; phase: forward, loss, backward, optimizer or
    recompute; source: 'file:line'. The engine never reads them."""

    module: np.ndarray
    chain: np.ndarray
    phase: np.ndarray
    source: np.ndarray
    strings: tuple[str, ...]

    FIELDS = ("module", "chain", "phase", "source")

    def of(self, field_name: str, op_id: int) -> str | None:
        index = int(getattr(self, field_name)[op_id])
        return None if index < 0 else self.strings[index]

    def column(self, field_name: str) -> list[str | None]:
        """One field for every op, in op order."""
        strings = self.strings
        return [None if i < 0 else strings[i] for i in getattr(self, field_name).tolist()]


@dataclass(frozen=True, eq=False)
class Program:
    """A lowered trace. Arrays are read-only; names are interned string tables.

    Ops:     op_cost (ns), op_total_size (bytes, views count 0), op_first_tensor,
             op_n_outputs, op_arg_ptr/op_args (CSR of argument tensor ids, in
             order, duplicates kept), op_backward, op_line (1-based source line),
             op_name_id into `op_names`.
    Tensors: tensor_op, tensor_index (output position), tensor_size (0 for a
             view), tensor_alias (argument index or -1), tensor_storage,
             tensor_name_id into `tensor_names`.
    Schedule: sched_kind (CMD_*) and sched_arg (op id for compute, else tensor id).
    where: module path, phase and source line per op (`OpWhere`), for a log
    recorded with them; None for the rest (the 2020 logs). The engine ignores it.
    """

    name: str
    sha256: str
    source: str
    op_cost: np.ndarray
    op_total_size: np.ndarray
    op_first_tensor: np.ndarray
    op_n_outputs: np.ndarray
    op_arg_ptr: np.ndarray
    op_args: np.ndarray
    op_backward: np.ndarray
    op_line: np.ndarray
    op_name_id: np.ndarray
    op_names: tuple[str, ...]
    tensor_op: np.ndarray
    tensor_index: np.ndarray
    tensor_size: np.ndarray
    tensor_alias: np.ndarray
    tensor_storage: np.ndarray
    tensor_name_id: np.ndarray
    tensor_names: tuple[str, ...]
    sched_kind: np.ndarray
    sched_arg: np.ndarray
    _index: dict = field(default_factory=dict, repr=False, compare=False)
    where: OpWhere | None = field(default=None, repr=False, compare=False)

    ARRAY_FIELDS = (
        "op_cost", "op_total_size", "op_first_tensor", "op_n_outputs", "op_arg_ptr",
        "op_args", "op_backward", "op_line", "op_name_id", "tensor_op", "tensor_index",
        "tensor_size", "tensor_alias", "tensor_storage", "tensor_name_id",
        "sched_kind", "sched_arg",
    )

    def __post_init__(self) -> None:
        for name in self.ARRAY_FIELDS:
            getattr(self, name).setflags(write=False)

    @property
    def n_ops(self) -> int:
        return len(self.op_cost)

    @property
    def n_tensors(self) -> int:
        return len(self.tensor_op)

    @property
    def n_commands(self) -> int:
        return len(self.sched_kind)

    def op_name(self, op_id: int) -> str:
        return self.op_names[self.op_name_id[op_id]]

    def tensor_name(self, tensor_id: int) -> str:
        return self.tensor_names[self.tensor_name_id[tensor_id]]

    def op_args_of(self, op_id: int) -> np.ndarray:
        return self.op_args[self.op_arg_ptr[op_id]:self.op_arg_ptr[op_id + 1]]

    def op_outputs_of(self, op_id: int) -> range:
        first = int(self.op_first_tensor[op_id])
        return range(first, first + int(self.op_n_outputs[op_id]))

    def storage_ids(self) -> np.ndarray:
        """Ids of all storages (tensors that own their storage)."""
        return np.flatnonzero(self.tensor_storage == np.arange(self.n_tensors))

    def tensor_by_name(self, name: str) -> int:
        """The last tensor created under this name (a `$` suffix names mutation results)."""
        index = self._index.get("tensor")
        if index is None:
            index = {}
            for tid, nid in enumerate(self.tensor_name_id.tolist()):
                index[self.tensor_names[nid]] = tid
            self._index["tensor"] = index
        try:
            return index[name]
        except KeyError:
            raise KeyError(f"no tensor named {name!r} in trace {self.name}") from None

    def op_where(self, op_id: int, field_name: str = "module") -> str | None:
        """`field_name` (module, chain, phase, source) of an op; None where unknown."""
        if self.where is None or op_id is None or op_id < 0:
            return None
        return self.where.of(field_name, op_id)

    def maker_where(self, storage: int) -> dict[str, str | None]:
        """Where the op that made a storage (its owning tensor) ran: module, phase and
        source; all None for a log without a where-file."""
        op = int(self.tensor_op[storage])
        return {f: self.op_where(op, f) for f in ("module", "phase", "source")}

    def is_constant(self, op_id: int) -> bool:
        return self.op_name(op_id) == CONSTANT_OP_NAME
