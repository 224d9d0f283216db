"""The engine's storages as real ones, and the memory truth: PyTorch's live bytes.

Each storage id of the log is a real `UntypedStorage` of the step: held weakly
while PyTorch holds it (a tensor of the step, a view, a tensor autograd saved),
or by the executor (a *ghost*: a storage PyTorch let die that the engine
rebuilt as a parent; an old version of a written storage). `Storages` keeps
which are resident, evicts (resizes to 0 bytes: every view sees it) and
installs rebuilt bytes (swapping the new data pointer in, no copy).

The live bytes are the sum of `nbytes()` of every tracked storage PyTorch (or
the executor) holds alive, kept as PyTorch frees and resizes them: a death is
PyTorch's (a weak reference's callback), a size is read again after anything
that can change it (`reread`). `live_bytes()` sums them afresh.
"""

from __future__ import annotations

import weakref

import torch

from .private_api import require


class Storages:
    """The step's storages by engine storage id, and their live bytes. `stats` (the
    executor's `Stats`) counts victims, dead frees, ghosts and the peak."""

    def __init__(self, stats):
        require("torch.UntypedStorage._swap_data_ptr_", "the real step (dtrf torch run)")
        self.stats = stats
        self.tracked: dict[int, tuple[weakref.ref, int]] = {}   # storage key -> (storage, bytes)
        self.live = 0          # bytes of the tracked storages PyTorch holds alive
        self.weak: dict[int, weakref.ref] = {}
        self.strong: dict[int, torch.UntypedStorage] = {}
        self.resident: set[int] = set()

    # --- the memory truth ------------------------------------------------------------

    def track(self, storage: torch.UntypedStorage, watched: bool = False) -> None:
        """Count `storage` in the live bytes until PyTorch frees it. A storage the
        recorder already `watched` (it named it) is uncounted through the
        recorder's listener (`died`), not by a callback of its own."""
        key = storage._cdata
        if key in self.tracked:
            return
        size = storage.nbytes()
        ref = weakref.ref(storage) if watched else \
            weakref.ref(storage, lambda _, key=key: self._gone(key))
        self.tracked[key] = (ref, size)
        self.live += size
        self.peaked()

    def _gone(self, key: int) -> None:
        self.live -= self.tracked.pop(key)[1]

    def died(self, key: int) -> None:
        """A named storage died (the recorder's callback): uncounted, if tracked."""
        entry = self.tracked.pop(key, None)
        if entry is not None:
            self.live -= entry[1]

    def reread(self, storage: torch.UntypedStorage) -> None:
        """Read a tracked storage's size again (after an eviction, a rebuild, or an
        op that may have resized it)."""
        entry = self.tracked.get(storage._cdata)
        if entry is not None and entry[1] != (size := storage.nbytes()):
            self.live += size - entry[1]
            self.tracked[storage._cdata] = (entry[0], size)
            self.peaked()

    def peaked(self) -> None:
        """The step's peak: the live bytes after every allocation, a check's request
        included (what PyTorch held, not what the engine was asked before it)."""
        if self.live > self.stats.peak_live:
            self.stats.peak_live = self.live

    def live_bytes(self) -> int:
        """Bytes of the step's storages PyTorch holds alive now, summed afresh from
        every storage (`live` is the same sum kept as PyTorch frees and resizes
        them: each death is PyTorch's, each size read from the storage after
        anything that can change it)."""
        return sum(s.nbytes() for ref, _ in self.tracked.values() if (s := ref()) is not None)

    # --- engine storages ---------------------------------------------------------------

    def bind(self, sid: int, storage: torch.UntypedStorage) -> None:
        """Engine storage `sid` is `storage`, which PyTorch holds (tracked, watched)."""
        self.weak[sid] = weakref.ref(storage)
        self.track(storage, watched=True)

    def keep(self, sid: int, storage: torch.UntypedStorage) -> None:
        """Engine storage `sid` is `storage`, held here (an old version)."""
        self.strong[sid] = storage
        self.weak.pop(sid, None)
        self.track(storage)

    def storage(self, sid: int) -> torch.UntypedStorage | None:
        s = self.strong.get(sid)
        if s is not None:
            return s
        ref = self.weak.get(sid)
        return ref() if ref is not None else None

    def evict(self, sid: int, pressure: bool) -> bool:
        """Release a storage's memory; False when it does not exist yet. A storage
        PyTorch holds is resized to 0 bytes under pressure (PyTorch's RuntimeError
        if it cannot be); one held here is dropped."""
        if sid not in self.strong and sid not in self.weak:
            return False
        self.resident.discard(sid)
        if pressure:
            self.stats.victims.append(sid)
        else:
            self.stats.dead_frees += 1
        if self.strong.pop(sid, None) is not None:
            return True
        s = self.weak[sid]()
        if s is not None and pressure:
            s.resize_(0)
            self.reread(s)
        return True

    def install(self, sid: int, new: torch.UntypedStorage) -> None:
        """Make storage `sid` resident with the bytes of `new`: swapped into the
        evicted storage PyTorch still holds, or held here as a ghost."""
        current = self.storage(sid)
        if current is None:
            self.strong[sid] = new
            self.track(new)
            self.stats.ghosts += 1
        else:
            current._swap_data_ptr_(new)
            self.reread(current)
        self.resident.add(sid)
