"""A Dask cluster on loopback, started the way Dask users start one: a `dask
scheduler` process and `dask worker` processes (no nanny, so a worker's pid is
the process that runs the points), sharing no memory with the test. Every
process is killed when the block ends, even on failure."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dtrforensics

SRC = str(Path(dtrforensics.__file__).resolve().parent.parent)
START_SECONDS = 60.0


def dask_command() -> list[str]:
    """`dask` of this interpreter's environment (its bin/, else on PATH)."""
    here = Path(sys.executable).parent / "dask"
    found = str(here) if here.exists() else shutil.which("dask")
    if found is None:
        raise FileNotFoundError("no `dask` command beside this interpreter or on PATH")
    return [found]


class LoopbackCluster:
    """`address`, `scheduler` (its Popen), `workers` (their Popen), `kill_*`."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
                    "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
        self.scheduler: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.address = ""
        self._logs: list = []

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen:
        fh = open(self.root / log, "w")   # noqa: SIM115 - closed in stop()
        self._logs.append(fh)
        return subprocess.Popen(dask_command() + args, env=self.env, stdout=fh, stderr=fh,
                                stdin=subprocess.DEVNULL, start_new_session=True)

    def start_scheduler(self) -> str:
        file = self.root / "scheduler.json"
        file.unlink(missing_ok=True)
        self.scheduler = self._spawn(["scheduler", "--host", "127.0.0.1", "--port", "0",
                                      "--no-dashboard", "--scheduler-file", str(file)],
                                     "scheduler.log")
        limit = time.monotonic() + START_SECONDS
        while not file.exists() or not file.read_text().strip():
            if self.scheduler.poll() is not None or time.monotonic() > limit:
                raise RuntimeError("dask scheduler did not start: "
                                   + (self.root / "scheduler.log").read_text()[-2000:])
            time.sleep(0.05)
        self.address = json.loads(file.read_text())["address"]
        return self.address

    def start_workers(self, n: int, preload: str | None = None, nthreads: int = 1) -> None:
        """`n` more workers; `preload`: a Python file each runs first (`dask
        worker --preload`), e.g. to slow its runs down."""
        from distributed import Client
        first = len(self.workers)
        for i in range(first, first + n):
            self.workers.append(self._spawn(
                ["worker", self.address, "--nthreads", str(nthreads), "--no-nanny",
                 "--no-dashboard", "--host", "127.0.0.1", "--name", f"w{i}",
                 *(["--preload", preload] if preload else [])], f"worker{i}.log"))
        with Client(self.address, timeout="30s") as client:
            client.wait_for_workers(len([w for w in self.workers if w.poll() is None]),
                                    timeout=START_SECONDS)

    def kill_worker(self, i: int) -> None:
        self.workers[i].send_signal(signal.SIGKILL)
        self.workers[i].wait(timeout=30)

    def kill_scheduler(self) -> None:
        self.scheduler.send_signal(signal.SIGKILL)
        self.scheduler.wait(timeout=30)

    def stop(self) -> None:
        for proc in [*self.workers, self.scheduler]:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
        for fh in self._logs:
            fh.close()


@contextlib.contextmanager
def loopback_cluster(root: Path, workers: int = 2, preload: str | None = None):
    cluster = LoopbackCluster(root)
    try:
        cluster.start_scheduler()
        cluster.start_workers(workers, preload)
        yield cluster
    finally:
        cluster.stop()
