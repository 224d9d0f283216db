"""Helpers of the hostile-input tests: run `dtrf` in this process, fingerprint folders."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

from dtrforensics.cli.main import main


@dataclass
class Outcome:
    code: int
    out: str
    err: str
    traceback: str | None = None

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("error:")]


def dtrf(*args, cwd: str | os.PathLike | None = None) -> Outcome:
    """`dtrf ARGS` through the console entry point, in this process (no interpreter
    start-up per case); an exception escaping main() is recorded, not raised."""
    out, err = io.StringIO(), io.StringIO()
    old_argv, old_cwd, old_show = sys.argv, os.getcwd(), warnings.showwarning
    sys.argv = ["dtrf", *map(str, args)]
    code, tb = 0, None
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings():
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:  # noqa: BLE001 - a traceback is what the tests look for
                code, tb = 1, traceback.format_exc()
    finally:
        sys.argv = old_argv
        os.chdir(old_cwd)
        warnings.showwarning = old_show
    return Outcome(code, out.getvalue(), err.getvalue(), tb)


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
