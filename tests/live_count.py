"""An independent count of live storage bytes during a PyTorch step, knowing
nothing of the recorder: the tests' and `benchmarks/model_coverage.py`'s
memory truth (the log's peak must equal it)."""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytesTracker(TorchDispatchMode):
    """Live storage bytes, knowing nothing of log names or reference counts: a
    storage counts from the first op that reads or returns it until PyTorch
    frees it; `peak` is the maximum after any op.

    `versioned_peak` adds the simulator's rule for writes (docs/torch.md, "Memory
    truth"): an op that writes a storage in place counts it a second time at that
    moment (the new version beside the old), except the storages of `in_place`
    (optimizer states, which the optimizer step writes as views)."""

    def __init__(self, existing=(), in_place=()):
        super().__init__()
        self.live = 0
        self._seen: set[int] = set()
        for t in existing:
            self._see(t)
        self._in_place = {t.untyped_storage()._cdata for t in in_place}
        self.peak = self.versioned_peak = self.live

    def _see(self, t) -> None:
        storage = t.untyped_storage()
        if storage._cdata in self._seen:
            return
        self._seen.add(storage._cdata)
        self.live += storage.nbytes()
        weakref.finalize(storage, self._free, storage._cdata, storage.nbytes())

    def _free(self, key: int, nbytes: int) -> None:
        self._seen.discard(key)
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor):
                self._see(t)
        versions = {s._cdata: s.nbytes() for s in _written_storages(func, args, kwargs)
                    if s._cdata not in self._in_place}
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._see(t)
        self.peak = max(self.peak, self.live)
        self.versioned_peak = max(self.versioned_peak, self.live + sum(versions.values()))
        return out


def _written_storages(func, args, kwargs) -> list:
    """The storages an op writes: arguments its schema marks written, and batch norm's
    running statistics in training mode (which its schema does not mark)."""
    schema = func._schema.arguments
    values = {a.name: args[i] if i < len(args) else kwargs.get(a.name) for i, a in enumerate(schema)}
    names = [a.name for a in schema if a.is_write]
    if "batch_norm" in func.overloadpacket.__name__ and values.get("training"):
        names += ["running_mean", "running_var"]
    return [t.untyped_storage() for name in names for t in tree_flatten(values[name])[0]
            if isinstance(t, torch.Tensor)]
