"""An independent measure of live storage bytes during a step, for the memory-truth tests.

It knows nothing of log names or reference counts: it adds a storage's bytes
the first time any op reads or returns it and subtracts them when PyTorch
frees the storage, and keeps the maximum seen after every op.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytesTracker(TorchDispatchMode):
    def __init__(self, existing=()):
        super().__init__()
        self.live = 0
        self.peak = 0
        self._seen: set[int] = set()
        for t in existing:
            self._see(t)
        self.peak = self.live

    def _see(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self._seen:
            return
        self._seen.add(key)
        self.live += storage.nbytes()
        weakref.finalize(storage, self._free, key, storage.nbytes())

    def _free(self, key: int, nbytes: int) -> None:
        self._seen.discard(key)
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for t in tree_flatten((args, kwargs or {}))[0]:
            if isinstance(t, torch.Tensor):
                self._see(t)
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._see(t)
        self.peak = max(self.peak, self.live)
        return out
