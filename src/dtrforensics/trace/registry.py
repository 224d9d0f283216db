"""Where traces live: short names -> log files, and getting the public logs.

Resolution of a trace spec (`resolve_trace`), first match wins:

1. an existing file path (returned absolute);
2. a public short name (`lstm`, `densenet`, ...) or a log's file stem, searched
   recursively as `<short>-*.log` in the public trace folders (`$DTRF_TRACES`;
   when unset, `../shared/traces` from the current directory and from the
   repository), then in the user trace directory (`user_trace_dir()`);
3. the stem of a `.log` under the repository's own `traces/` folder (small
   synthetic traces).

The user trace directory is filled by `fetch` (downloads the published
`logs.zip`) or `import_traces` (a folder or zip already on disk). Every log
whose file name is one of the eight published ones must match its published
SHA-256, or it is refused.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..errors import DataError
from ..fsutil import atomic_path
from . import known
from .parser import stream_sha256, trace_name_from_path

PUBLIC_SUBDIR = "dtr-2020"      # where fetched/imported public logs go
IMPORTED_SUBDIR = "imported"    # where other imported logs go
FETCH_TIMEOUT = 10.0            # seconds, per connection attempt

_REPO_ROOT = Path(__file__).resolve().parents[3]   # <repo>/src/dtrforensics/trace/


class TraceNotFoundError(DataError, FileNotFoundError):
    """No trace matches a spec. The message says where we looked and what to do.

    A `FileNotFoundError`, so the CLI reports it as a user error (exit code 2).
    """


class TraceStoreError(DataError):
    """Fetching or importing traces failed; the message says why and what to do."""


# --- Directories -----------------------------------------------------------------

_PACKAGED_TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def repo_root() -> Path | None:
    """The source checkout this package runs from, if it runs from one."""
    return _REPO_ROOT if (_REPO_ROOT / "pyproject.toml").is_file() else None


def public_trace_dirs() -> list[Path]:
    """Folders holding the public logs: `$DTRF_TRACES`, else the existing
    `../shared/traces` next to the current directory and next to the repository."""
    explicit = os.environ.get("DTRF_TRACES")
    if explicit:
        return [Path(explicit).expanduser()]
    candidates = [Path.cwd() / ".." / "shared" / "traces"]
    root = repo_root()
    if root is not None:
        candidates.append(root / ".." / "shared" / "traces")
    found: list[Path] = []
    for candidate in candidates:
        if candidate.is_dir():
            resolved = candidate.resolve()
            if resolved not in found:
                found.append(resolved)
    return found


def user_trace_dir() -> Path:
    """`$DTRF_TRACE_DIR`, else `$XDG_DATA_HOME/dtrforensics/traces`, else
    `~/.local/share/dtrforensics/traces`."""
    explicit = os.environ.get("DTRF_TRACE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "dtrforensics" / "traces"


def repo_trace_dir() -> Path | None:
    """The project's own synthetic traces (`traces/` in the repository, shipped in
    the package as `dtrforensics/data/traces`)."""
    root = repo_root()
    folder = root / "traces" if root is not None else _PACKAGED_TRACES
    return folder if folder.is_dir() else None


def search_dirs() -> list[Path]:
    """Every folder searched for short names, in order."""
    return [*public_trace_dirs(), user_trace_dir()]


# --- Resolution --------------------------------------------------------------------

def canonical_name(spec: str) -> str:
    """The public short name for a spelling (`densenet` -> `tv_densenet121`)."""
    lowered = spec.lower()
    return known.TRACE_ALIASES.get(lowered, lowered)


def _logs_under(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*.log") if p.is_file())


def _pick(candidates: list[Path]) -> Path | None:
    """Prefer a published file name; otherwise the first in sorted order."""
    for candidate in candidates:
        if candidate.name in known.KNOWN_TRACE_SHA256:
            return candidate
    return candidates[0] if candidates else None


def _find_in(folder: Path, short: str, stem: str) -> Path | None:
    logs = _logs_under(folder)
    by_short = [p for p in logs if p.name.startswith(f"{short}-")]
    return _pick(by_short) or _pick([p for p in logs if p.stem == stem])


def resolve_trace(spec: str | os.PathLike) -> Path:
    """The log file a spec names (see the module doc for the order).

    Raises `TraceNotFoundError` listing where it looked and how to get the
    public traces.
    """
    text = os.fspath(spec)
    as_path = Path(text).expanduser()
    if as_path.is_file():
        return as_path.absolute()
    looks_like_path = os.sep in text or "/" in text or text.endswith(".log")
    if not looks_like_path and text:
        short = canonical_name(text)
        for folder in search_dirs():
            hit = _find_in(folder, short, text)
            if hit is not None:
                return hit
        synthetic = repo_trace_dir()
        if synthetic is not None:
            hit = _find_in(synthetic, text, text)
            if hit is not None:
                return hit
    raise TraceNotFoundError(_not_found_message(text, looks_like_path))


def _why_not_a_file(spec: str, path: Path) -> str:
    """What a path that is not a readable trace file is instead."""
    try:
        path.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{spec} is a symbolic link loop, not a trace file"
        if path.is_symlink():
            return f"{spec} is a broken symbolic link, not a trace file"
        return f"no such trace file: {spec}"
    if path.is_dir():
        return f"{spec} is a directory, not a trace file (give the log file inside it)"
    return f"{spec} is not a regular file, so not a trace file"


def _not_found_message(spec: str, looks_like_path: bool) -> str:
    if looks_like_path:
        return _why_not_a_file(spec, Path(spec).expanduser())
    looked = [*search_dirs()]
    synthetic = repo_trace_dir()
    if synthetic is not None:
        looked.append(synthetic)
    where = "; ".join(f"{p}{'' if p.is_dir() else ' (missing)'}" for p in looked) or "nowhere"
    names = ", ".join(known.PUBLIC_TRACE_NAMES)
    if canonical_name(spec) in known.PUBLIC_TRACE_NAMES:
        hint = (" The public DTR traces are not installed: run `dtrf traces fetch`, or "
                "`dtrf traces import PATH` with a folder or logs.zip holding them, or "
                "set DTRF_TRACES to a folder that has them.")
    else:
        hint = (f" Known short names: {names} (get them with `dtrf traces fetch` or "
                "`dtrf traces import PATH`); any path to a .log file also works.")
    return f"unknown trace {spec!r}: looked in {where}.{hint}"


@dataclass(frozen=True)
class TraceEntry:
    """One available log: its short name, where it is and where it came from."""

    name: str
    path: Path
    origin: str          # "public", "user" or "synthetic"
    public: bool         # one of the eight published logs (by name)


def available_traces() -> list[TraceEntry]:
    """Every log found: the public ones in their canonical order, then user and
    synthetic logs. One entry per public short name (the one `resolve_trace` picks)."""
    entries: list[TraceEntry] = []
    for short in known.PUBLIC_TRACE_NAMES:
        for folder in search_dirs():
            hit = _find_in(folder, short, short)
            if hit is not None:
                origin = "user" if folder == user_trace_dir() else "public"
                entries.append(TraceEntry(short, hit, origin, True))
                break
    seen = {e.path.resolve() for e in entries}
    extra_dirs = [(user_trace_dir(), "user")]
    if repo_trace_dir() is not None:
        extra_dirs.append((repo_trace_dir(), "synthetic"))
    for folder, origin in extra_dirs:
        for log in _logs_under(folder):
            if log.resolve() in seen or trace_name_from_path(log) in known.PUBLIC_TRACE_NAMES:
                continue
            seen.add(log.resolve())
            name = log.stem if origin == "synthetic" else trace_name_from_path(log)
            entries.append(TraceEntry(name, log, origin, False))
    return entries


def missing_public() -> list[str]:
    """Public short names no folder provides."""
    present = {e.name for e in available_traces() if e.public}
    return [n for n in known.PUBLIC_TRACE_NAMES if n not in present]


def known_sha256(path: str | Path) -> str | None:
    """The published SHA-256 for this file name, if it is one of the public logs."""
    return known.KNOWN_TRACE_SHA256.get(Path(path).name)


# --- Import ------------------------------------------------------------------------

@dataclass
class ImportResult:
    """What `import_traces` did with each log it found."""

    imported: list[Path] = field(default_factory=list)     # copied (verified or unknown)
    unchanged: list[Path] = field(default_factory=list)    # already there, same bytes
    refused: list[str] = field(default_factory=list)       # messages, one per refused file
    warnings: list[str] = field(default_factory=list)      # unknown files, accepted

    @property
    def ok(self) -> bool:
        return not self.refused


def _iter_logs(source: Path) -> Iterator[tuple[str, str, Callable[[], BinaryIO]]]:
    """(display name, file name, opener) for each `.log` in a folder or zip."""
    if source.is_dir():
        for log in _logs_under(source):
            yield str(log), log.name, (lambda log=log: open(log, "rb"))
        return
    try:
        archive = zipfile.ZipFile(source)
    except zipfile.BadZipFile:
        raise TraceStoreError(f"{source} is neither a folder nor a zip archive") from None
    with archive:
        for info in archive.infolist():
            base = Path(info.filename).name
            if info.is_dir() or not base.endswith(".log") or info.filename.startswith("__MACOSX/"):
                continue
            yield f"{source}:{info.filename}", base, (lambda info=info: archive.open(info))


def _copy_atomic(opener: Callable[[], BinaryIO], dest: Path) -> None:
    with atomic_path(dest, make_parents=True) as tmp, open(tmp, "wb") as out, opener() as src:
        shutil.copyfileobj(src, out, 1 << 20)


def _copy_where(source: Path, shown: str, target: Path) -> None:
    """A log's where-file (module paths of its ops, `trace/where.py`) travels with
    it out of a folder (not out of a zip)."""
    from .where import where_path
    if not source.is_dir():
        return
    side = where_path(Path(shown))
    if side.is_file():
        _copy_atomic(lambda: open(side, "rb"), where_path(target))


def _file_sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return stream_sha256(fh)


def import_traces(source: str | Path, dest: str | Path | None = None) -> ImportResult:
    """Copy every `.log` of a folder (recursively) or zip into the user trace dir.

    A published file name must carry its published SHA-256, else that file is
    refused; other logs are accepted with a warning (into `imported/`). Raises
    `TraceStoreError` if the source is missing, unreadable or holds no log.
    """
    source = Path(source).expanduser()
    dest_root = Path(dest) if dest is not None else user_trace_dir()
    if not source.exists():
        raise TraceStoreError(f"nothing to import: {source} does not exist")
    result = ImportResult()
    found = False
    try:
        for shown, base, opener in _iter_logs(source):
            found = True
            with opener() as fh:
                digest = stream_sha256(fh)
            expected = known.KNOWN_TRACE_SHA256.get(base)
            if expected is not None and digest != expected:
                result.refused.append(
                    f"refused {shown}: its SHA-256 is {digest}, but the published {base} "
                    f"has {expected} (a truncated or edited copy?)")
                continue
            if expected is None:
                result.warnings.append(
                    f"{shown} is not one of the published DTR logs; imported without "
                    "verification")
            target = dest_root / (PUBLIC_SUBDIR if expected else IMPORTED_SUBDIR) / base
            _copy_where(source, shown, target)
            if target.is_file() and _file_sha256(target) == digest:
                result.unchanged.append(target)
                continue
            _copy_atomic(opener, target)
            result.imported.append(target)
    except (OSError, zipfile.BadZipFile) as exc:
        raise TraceStoreError(f"cannot import from {source}: {exc}") from None
    if not found:
        raise TraceStoreError(f"no .log files found in {source}")
    return result


# --- Fetch -------------------------------------------------------------------------

Progress = Callable[[int, int | None], None]   # (bytes so far, total or None)


def _download(url: str, out: BinaryIO, timeout: float, progress: Progress | None) -> None:
    import urllib.request  # here, not at the top: every trace lookup imports this module
    request = urllib.request.Request(url, headers={"User-Agent": "dtrforensics"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        length = response.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        done = 0
        if progress:
            progress(0, total)
        for chunk in iter(lambda: response.read(1 << 16), b""):
            out.write(chunk)
            done += len(chunk)
            if progress:
                progress(done, total)


def fetch(dest: str | Path | None = None, *, urls: tuple[str, ...] = known.LOGS_ZIP_URLS,
          timeout: float = FETCH_TIMEOUT, progress: Progress | None = None) -> ImportResult:
    """Download the published `logs.zip`, check its SHA-256 and import its logs.

    Raises `TraceStoreError` quickly when offline, pointing at `dtrf traces import`.
    """
    import urllib.error
    dest_root = Path(dest) if dest is not None else user_trace_dir()
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="dtrf-fetch-") as tmpdir:
        archive = Path(tmpdir) / "logs.zip"
        for url in urls:
            try:
                with open(archive, "wb") as out:
                    _download(url, out, timeout, progress)
            except urllib.error.HTTPError as exc:
                failures.append(f"{url}: HTTP {exc.code}")
                continue          # try the next address
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                failures.append(f"{url}: {reason}")
                break             # the network itself is unreachable: fail fast
            digest = _file_sha256(archive)
            if digest != known.LOGS_ZIP_SHA256:
                failures.append(f"{url}: SHA-256 {digest} is not the published "
                                f"{known.LOGS_ZIP_SHA256}")
                continue
            return import_traces(archive, dest_root)
    raise TraceStoreError(
        "could not download the public DTR traces (" + "; ".join(failures) + "). "
        "On a machine without internet access, copy logs.zip (simrd/logs.zip of the "
        "uwsampl/dtr-prototype repository) or its .log files here and run "
        "`dtrf traces import PATH`.")
