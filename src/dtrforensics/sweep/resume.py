"""Where a sweep goes: the latest folder holding the same sweep (to resume it),
else a new time-stamped folder."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path

from .store import SweepParams, SweepStore, SweepStoreError

SWEEPS_DIR = Path("recordings") / "sweeps"


def resumable_folder(name: str, sha256: str, params: SweepParams,
                     root: Path = SWEEPS_DIR) -> Path | None:
    """The newest `root/<name>-*` sweep of the trace with this SHA-256 that these
    parameters resume or extend (same identity, a range inside theirs), or None.
    Unreadable folders are skipped."""
    for folder in sorted(Path(root).glob(f"{name}-*"), reverse=True):
        store = SweepStore(folder)
        try:
            if (store.trace.sha256 == sha256 and not store.params.extension_problems(params)
                    and not store.changed_policy_files(params)):
                return folder
        except (SweepStoreError, KeyError, TypeError):
            continue
    return None


def new_folder(name: str, root: Path = SWEEPS_DIR) -> Path:
    """`root/<name>-<YYYYmmdd-HHMMSS>[-n]`, not yet existing."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    folder, n = Path(root) / f"{name}-{stamp}", 1
    while folder.exists():
        n += 1
        folder = Path(root) / f"{name}-{stamp}-{n}"
    return folder


def sweep_folder(name: str, sha256: str, params: SweepParams, root: Path = SWEEPS_DIR) -> Path:
    """The folder to resume, else a new one."""
    return resumable_folder(name, sha256, params, root) or new_folder(name, root)
