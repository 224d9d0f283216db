"""fsutil.atomic_path: a writer killed with kill -9 leaves its temporary file behind;
the next atomic write to the same file removes it, and never a live writer's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from dtrforensics.fsutil import atomic_path

# A writer that dies with kill -9 in the middle of an atomic write, saying its temp file.
KILLED = """
import os, sys
from dtrforensics.fsutil import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_bytes(b"half a file")
    print(tmp, flush=True)
    os.kill(os.getpid(), 9)
"""


def _temps(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if p.name.endswith(".tmp")}


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path):
    dest = tmp_path / "out.parquet"
    killed = subprocess.run([sys.executable, "-c", KILLED, str(dest)], capture_output=True,
                            text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    left = Path(killed.stdout.strip())
    assert left.is_file() and not dest.exists()
    with atomic_path(dest) as tmp:
        tmp.write_bytes(b"whole")
    assert dest.read_bytes() == b"whole"
    assert not left.exists()
    assert _temps(tmp_path) == set()


def test_a_live_writers_temporary_file_is_kept(tmp_path):
    dest = tmp_path / "out.parquet"
    killed = subprocess.run([sys.executable, "-c", KILLED, str(dest)], capture_output=True,
                            text=True)
    left = Path(killed.stdout.strip())
    # a live writer's temporary file of the same destination (this process), and a dead
    # writer's of another destination whose name starts alike
    live = tmp_path / _with_pid(left.name, os.getpid())
    live.write_bytes(b"being written")
    other = tmp_path / left.name.replace(".out.parquet.", ".out.parquet.old.")
    other.write_bytes(b"another file's")
    with atomic_path(dest) as tmp:
        tmp.write_bytes(b"whole")
    assert live.read_bytes() == b"being written"
    assert other.exists()          # a temporary file of another destination is not ours to judge
    assert _temps(tmp_path) == {live.name, other.name}


def _with_pid(name: str, pid: int) -> str:
    """`.NAME.PID-HOST.RANDOM.tmp` with another writer's pid."""
    head, writer, rand = name[:-len(".tmp")].rsplit(".", 2)
    return f"{head}.{pid}-{writer.split('-')[1]}.{rand}.tmp"
