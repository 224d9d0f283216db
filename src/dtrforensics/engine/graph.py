"""Static, storage-level view of a Program, laid out for the replay kernel.

The reference walks tensors' parent and child lists to rebuild evicted
neighbourhoods. Region contents are sets of storages, so only the storage-level
edges matter; we precompute them once, deduplicated, each stamped with the
tensor id at whose creation the edge appears (an edge is visible once that
many tensors exist). Walks then scan integer arrays instead of object lists.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..trace.program import Program

KernelGraph = namedtuple("KernelGraph", [
    "op_cost", "op_total_size", "op_first_tensor", "op_n_outputs", "op_arg_ptr", "op_args",
    "tensor_op", "tensor_size", "tensor_storage",
    "st_tensor_ptr", "st_tensors",
    "fwd_ptr", "fwd_nbr", "fwd_time", "bwd_ptr", "bwd_nbr", "bwd_time",
    "sched_kind", "sched_arg", "op_backward", "ascending",
])
KernelGraph.__doc__ = """Arrays the kernel reads. Storage-indexed arrays use the storage id
(root tensor id) as index and have one slot per tensor; non-root slots are unused.
`*_ptr/*_nbr/*_time`: CSR adjacency of storages through children (fwd) and
parents (bwd), with the tensor id that makes each edge visible. `ascending`
(one element): 1 when every edge leads from a storage to one of larger id, as
an op's outputs come after its arguments unless a view makes an older storage
a child; then id order is an order of every walk and no walk meets a cycle
(engine/cutoff.py `peel` relies on it)."""


class GraphOrderError(RuntimeError):
    """A kernel graph breaks an order the walks' early exits rely on."""


def request_bytes(g, t) -> int:
    """What materializing tensor t allocates: all its op's outputs (§6.3). The
    kernel compiles this very function (kernel._request)."""
    return g.op_total_size[g.tensor_op[t]]


def _unsorted_segment(ptr: np.ndarray, values: np.ndarray) -> int:
    """The first segment of a CSR (`ptr`) whose values decrease somewhere, or -1."""
    if len(values) < 2:
        return -1
    starts = np.zeros(len(values), dtype=bool)
    starts[ptr[:-1][ptr[:-1] < len(values)]] = True
    falls = np.flatnonzero((np.diff(values) < 0) & ~starts[1:])
    return -1 if not len(falls) else int(np.searchsorted(ptr, falls[0], side="right") - 1)


def check_order(g: KernelGraph) -> None:
    """Raise GraphOrderError unless each storage's edges come in the order of the
    tensor that makes them visible (walks stop at the first not yet created)
    and each storage's tensors ascend (an eviction stops at the first not yet
    created)."""
    for name in ("fwd", "bwd"):
        bad = _unsorted_segment(getattr(g, f"{name}_ptr"), getattr(g, f"{name}_time"))
        if bad >= 0:
            raise GraphOrderError(f"the {name} edges of storage {bad} are not sorted by time")
    bad = _unsorted_segment(g.st_tensor_ptr, g.st_tensors)
    if bad >= 0:
        raise GraphOrderError(f"the tensors of storage {bad} do not ascend")


def _csr(sources: np.ndarray, targets: np.ndarray, times: np.ndarray, n: int):
    """Deduplicate (source, target) keeping the earliest time; CSR sorted by time."""
    keep = sources != targets
    sources, targets, times = sources[keep], targets[keep], times[keep]
    order = np.lexsort((times, targets, sources))
    sources, targets, times = sources[order], targets[order], times[order]
    first = np.ones(len(sources), dtype=bool)
    first[1:] = (sources[1:] != sources[:-1]) | (targets[1:] != targets[:-1])
    sources, targets, times = sources[first], targets[first], times[first]
    order = np.lexsort((times, sources))
    sources, targets, times = sources[order], targets[order], times[order]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(ptr, sources + 1, 1)
    return np.cumsum(ptr), targets.astype(np.int64), times.astype(np.int64)


def _ascending(ptr: np.ndarray, nbr: np.ndarray) -> int:
    """1 when every edge of a CSR leads to a larger id than its source's."""
    sources = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    return int(bool(np.all(nbr > sources)))


def kernel_graph(program: Program) -> KernelGraph:
    n = program.n_tensors
    storage = program.tensor_storage.astype(np.int64)
    # Every (argument tensor p, output tensor c) pair of an op: c's storage is a
    # child of p's storage, and p's storage a parent of c's, from c's creation on.
    arg_counts = np.diff(program.op_arg_ptr)
    n_out = program.op_n_outputs.astype(np.int64)
    pair_counts = arg_counts * n_out
    op_of_pair = np.repeat(np.arange(program.n_ops), pair_counts)
    within = np.arange(pair_counts.sum()) - np.repeat(np.cumsum(pair_counts) - pair_counts, pair_counts)
    outs_of_pair = n_out[op_of_pair]
    arg_tensor = program.op_args[program.op_arg_ptr[op_of_pair] + within // np.maximum(outs_of_pair, 1)]
    out_tensor = program.op_first_tensor[op_of_pair] + within % np.maximum(outs_of_pair, 1)
    parent_st, child_st = storage[arg_tensor], storage[out_tensor]
    fwd = _csr(parent_st, child_st, out_tensor, n)
    bwd = _csr(child_st, parent_st, out_tensor, n)
    order = np.argsort(storage, kind="stable")
    st_ptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(st_ptr, storage + 1, 1)
    g = KernelGraph(
        op_cost=program.op_cost, op_total_size=program.op_total_size,
        op_first_tensor=program.op_first_tensor,
        op_n_outputs=program.op_n_outputs.astype(np.int64),
        op_arg_ptr=program.op_arg_ptr, op_args=program.op_args,
        tensor_op=program.tensor_op, tensor_size=program.tensor_size,
        tensor_storage=storage,
        st_tensor_ptr=np.cumsum(st_ptr), st_tensors=order.astype(np.int64),
        fwd_ptr=fwd[0], fwd_nbr=fwd[1], fwd_time=fwd[2],
        bwd_ptr=bwd[0], bwd_nbr=bwd[1], bwd_time=bwd[2],
        sched_kind=program.sched_kind.astype(np.int64), sched_arg=program.sched_arg,
        op_backward=program.op_backward.astype(np.int64),
        ascending=np.array([_ascending(fwd[0], fwd[1])], dtype=np.int64),
    )
    check_order(g)
    return g
