"""Helpers of the hostile-input tests: fingerprint folders (`dtrf` itself is run by
cli.py, the one way tests run it)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def fingerprint(root: str | os.PathLike) -> dict[str, str]:
    """Every file and folder under `root` (links not followed): relative path ->
    SHA-256 of its bytes, 'dir' or 'link -> target'."""
    root = Path(root)
    found: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = f"link -> {os.readlink(path)}"
            elif path.is_dir():
                found[rel] = "dir"
            else:
                try:
                    found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
                except OSError as exc:
                    found[rel] = f"unreadable: {exc.strerror}"
    return found
