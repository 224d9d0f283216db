"""How the tests run `dtrf`, in one place.

`dtrf(ARGS)` runs the console entry point in this process (no interpreter
start-up per call): the exit code, stdout, stderr and `error:` lines a user
sees, a traceback recorded rather than raised. `dtrf_process(ARGS)` runs it in a
fresh process, for what only a process shows: what start-up imports, signals,
a worker's environment, the installed `dtrf` script.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

from dtrforensics.cli.main import main

SRC = Path(__file__).resolve().parents[1] / "src"


@dataclass
class Outcome:
    code: int
    out: str
    err: str
    traceback: str | None = None
    out_bytes: bytes = b""          # stdout as written (a binary export to `-o -`)

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("error:")]

    def ok(self) -> str:
        """stdout of a run that must succeed."""
        assert self.code == 0 and self.traceback is None, (self.code, self.err, self.traceback)
        return self.out

    def json(self):
        """stdout of a successful `--json` run, parsed."""
        return json.loads(self.ok())

    def refused(self, message: str) -> bool:
        """A user error saying `message`: exit 2, one `error:` line, no traceback."""
        return (self.code == 2 and self.traceback is None and len(self.error_lines) == 1
                and message in self.error_lines[0])


@contextlib.contextmanager
def _environment(env: dict[str, str]):
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def dtrf(*args, cwd: str | os.PathLike | None = None, columns: int | None = None,
         env: dict[str, str] | None = None) -> Outcome:
    """`dtrf ARGS` through the console entry point, in this process, in `cwd`, with
    COLUMNS=`columns` and `env` set for the call; an exception escaping main() is
    recorded, not raised."""
    stdout = io.BytesIO()
    out = io.TextIOWrapper(stdout, encoding="utf-8", errors="surrogateescape", write_through=True)
    err = io.StringIO()
    old_argv, old_cwd, old_show = sys.argv, os.getcwd(), warnings.showwarning
    sys.argv = ["dtrf", *map(str, args)]
    extra = {**(env or {}), **({"COLUMNS": str(columns)} if columns is not None else {})}
    code, tb = 0, None
    try:
        if cwd is not None:
            os.chdir(cwd)
        with _environment(extra), contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err), warnings.catch_warnings():
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
        out.flush()
        out.detach()
    data = stdout.getvalue()
    return Outcome(code, data.decode("utf-8", "surrogateescape"), err.getvalue(), tb, data)


def command(installed: bool = False, prelude: str = "") -> list[str]:
    """The command line that starts `dtrf`: the installed script (when `installed` and
    it exists beside this interpreter), else this interpreter calling the entry point
    as the script does (the program named `dtrf`), after `prelude` (Python run first)."""
    script = Path(sys.executable).with_name("dtrf")
    if installed and script.exists() and not prelude:
        return [str(script)]
    return [sys.executable, "-c", f"import sys\n{prelude}\nsys.argv[0] = 'dtrf'\n"
            "from dtrforensics.cli.main import main\nmain()\n"]


def dtrf_process(*args, columns: int | None = None, env: dict[str, str] | None = None,
                 installed: bool = False, prelude: str = "",
                 **kwargs) -> subprocess.CompletedProcess:
    """`dtrf ARGS` in a fresh process reading this tree's sources (text, stdout and
    stderr captured unless `kwargs` say otherwise), with `env` added to this
    process's environment."""
    path = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    full = {**os.environ, "PYTHONPATH": path,
            **({"COLUMNS": str(columns)} if columns is not None else {}), **(env or {})}
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.run([*command(installed, prelude), *map(str, args)], text=True,
                          env=full, **streams)
