"""The build of the package beyond pyproject.toml's metadata: the replay
kernel is compiled when the package is built, not at a user's first command.

`build_kernel` runs after setuptools' own build steps, in a child process
importing the package being built (for a wheel, `pip install .`: the copy
in build/; for `pip install -e .`, which the Makefile uses: src/). It runs
`python -m dtrforensics.cli.kernel_notice`, which calls
`dtrforensics.engine.compiled.prepare`, the path every replay takes on a
cold machine: numba compiles the kernel for the driver's types, the kernel
is written out as the native library (engine/native_build.py, with the
system's C compiler), and prefix sharing's digest is compiled. Both land in
the package's `engine/__pycache__`, where the installed package looks first
(numba's cache, and engine/native.py's `PACKAGED`). It takes about two
minutes (two processes where two cores are free: engine/split_compile.py),
said on the terminal as it goes (pip keeps a build's own
output for `pip install -v`). A failure never fails the install: without a
C compiler the wheel carries numba's cache alone; without numba importable
it carries nothing, and the first replay compiles, as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from setuptools import Command, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build import build

ROOT = Path(__file__).resolve().parent


def _say(text: str) -> None:
    """A progress line on stderr and, since pip hides a build's output, on the
    terminal when there is one."""
    line = f"dtrforensics: {text}\n"
    sys.stderr.write(line)
    sys.stderr.flush()
    if sys.stderr.isatty():
        return
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(line)
    except OSError:
        pass


class build_kernel(Command):
    """Compile the replay kernel into the package being built (see above)."""

    description = "compile the replay kernel and write it out as a native library"
    user_options: list = []
    editable_mode = False

    def initialize_options(self) -> None:
        self.build_lib = None

    def finalize_options(self) -> None:
        self.set_undefined_options("build_py", ("build_lib", "build_lib"))

    def _package_root(self) -> Path:
        return ROOT / "src" if self.editable_mode else Path(self.build_lib)

    def run(self) -> None:
        if os.environ.get("DTRF_BUILD_KERNEL") == "0":
            _say("DTRF_BUILD_KERNEL=0: the replay kernel is left to the first replay")
            return
        root = self._package_root()
        cache = root / "dtrforensics" / "engine" / "__pycache__"
        if not self.editable_mode and cache.is_dir():    # a wheel carries only this build's
            for stale in [*cache.glob("native-*"), *cache.glob("*.nb[ic]")]:
                stale.unlink()
        env = {k: v for k, v in os.environ.items()
               if k not in ("NUMBA_CACHE_DIR", "DTRF_NATIVE", "NUMBA_DISABLE_JIT")}
        env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        _say("compiling the replay kernel, once per install (about 2 minutes)...")
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "dtrforensics.cli.kernel_notice"], env=env, cwd=root,
                              capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            sys.stderr.write(done.stdout + done.stderr)
            _say(f"the replay kernel was not compiled ({seconds:.0f} s; see above): "
                 "the first replay compiles it")
            return
        _say(f"{done.stdout.strip().removeprefix('dtrforensics: ')} in {seconds:.0f} s, in {cache}")

    def get_outputs(self) -> list[str]:
        return []

    def get_output_mapping(self) -> dict[str, str]:
        return {}

    def get_source_files(self) -> list[str]:
        return []


class build_with_kernel(build):
    sub_commands = [*build.sub_commands, ("build_kernel", None)]


class bdist_wheel_for_this_machine(bdist_wheel):
    """The wheel holds code compiled for this machine: tagged for its platform
    and Python, not as pure Python."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False


setup(cmdclass={"build": build_with_kernel, "build_kernel": build_kernel,
                "bdist_wheel": bdist_wheel_for_this_machine})
