"""File-system helpers for writing without ever leaving a half-written file."""

from __future__ import annotations

import contextlib
import ctypes
import datetime as _dt
import errno
import os
import re
import socket
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from .errors import OptionError, RefusedError


def require_parent(dest: str | os.PathLike) -> Path:
    """`dest` as a Path; OptionError unless its folder exists (an output path never
    creates folders a typo named)."""
    dest = Path(dest)
    parent = dest.parent
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        raise OptionError(f"cannot write {dest}: the folder {parent} {what} (create it first)")
    return dest


def replaceable_target(dest: Path) -> Path:
    """The file an atomic write renames onto: for a symlink, the file it points to (the
    link stays); refused unless that is a regular file or nothing yet, since a rename
    would replace a device, pipe or folder with a plain file."""
    if dest.is_symlink():
        dest = Path(os.path.realpath(dest))
    if dest.exists() and not dest.is_file():
        raise RefusedError(f"{dest} is not a regular file (a folder, device or pipe): "
                           "refusing to replace it; write to a file (or '-' where offered)")
    return dest


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike, *, make_parents: bool = False) -> Iterator[Path]:
    """A temporary file beside `dest` (same directory, so the rename is atomic),
    renamed onto `dest` when the block succeeds and removed when it fails.
    The folder must exist unless `make_parents` (for the tool's own folders)."""
    dest = Path(dest)
    if make_parents:
        dest.parent.mkdir(parents=True, exist_ok=True)
    require_parent(dest)
    dest = replaceable_target(dest)
    _remove_dead_temps(dest)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.{os.getpid()}-{_HOST_TAG}.", suffix=".tmp",
                               dir=dest.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # as a plain open() would have created it
    try:
        yield Path(tmp)
        if os.path.lexists(dest):
            key = os.path.realpath(dest)
            _REPLACED[key] = _REPLACED.get(key, 0) + 1
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


_HOST_TAG = f"{zlib.crc32(socket.gethostname().encode()):08x}"
_REPLACED: dict[str, int] = {}  # file -> times an atomic write of this process renamed onto it


def replacements(path: str | os.PathLike) -> int:
    """How many times an atomic write of this process replaced a file at `path` (links
    followed), one that appeared after the command looked (written meanwhile by
    another command) included, which a before/after comparison cannot see: compare
    the count before and after a command."""
    return _REPLACED.get(os.path.realpath(path), 0)


def _remove_dead_temps(dest: Path) -> None:
    """The temporary files of atomic writes to `dest` whose process died (kill -9
    runs no cleanup) are removed, so that they never pile up: each is named
    `.NAME.PID-HOST.RANDOM.tmp`, and one of this host whose pid is gone is stale."""
    stale = re.compile(rf"\.{re.escape(dest.name)}\.(\d{{1,9}})-{_HOST_TAG}\.[a-z0-9_]+\.tmp")
    with contextlib.suppress(OSError):
        for entry in os.scandir(dest.parent):
            found = stale.fullmatch(entry.name)
            if found and not pid_alive(int(found[1])):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


RENAME_EXCHANGE = 2      # linux/fs.h
AT_FDCWD = -100


def exchange(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Swap two existing paths in one atomic step (Linux `renameat2` with
    RENAME_EXCHANGE), so `b` is never missing; False where the system or the
    file system cannot (the caller then falls back to two renames)."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), os.fspath(a), None, os.fspath(b))


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="microseconds")


OWN_MARK = ".dtrforensics-own"


def claim_folder(folder: str | os.PathLike, *, owner: str,
                 may_hold: frozenset[str] = frozenset(), create: bool = True) -> Path:
    """A working folder `owner` may fill: created (with a mark file naming the owner)
    when missing, reused when it carries that mark, and adopted (marked) when it is
    empty or holds only entries named in `may_hold` (what the owner itself creates
    there, from before the mark). Anything else belongs to someone else: refused, so
    a command's runs never land in a folder like `/work` that it did not make.
    `create=False` only checks (before the work starts)."""
    folder = Path(folder)
    mark = folder / OWN_MARK
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise RefusedError(f"{folder} is not a folder {owner} made: refusing to write into it; "
                           "choose another output folder")
    if folder.is_dir():
        if mark.is_file():
            return folder
        strangers = sorted(e.name for e in os.scandir(folder) if e.name not in may_hold)
        if strangers:
            shown = ", ".join(strangers[:3]) + (", ..." if len(strangers) > 3 else "")
            raise RefusedError(f"{folder} exists and was not made by {owner} (it holds {shown}): "
                               "refusing to write into it; choose a new or empty output folder")
    if not create:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    mark.write_text(f"made by {owner}; its contents may be replaced by the next run\n",
                    encoding="utf-8")
    return folder
