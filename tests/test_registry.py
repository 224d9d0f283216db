"""Trace registry: name resolution order, verified imports, offline fetch."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from cli import dtrf_process

from dtrforensics.trace import known, registry
from dtrforensics.trace.registry import (
    TraceNotFoundError,
    TraceStoreError,
    fetch,
    import_traces,
    resolve_trace,
)

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"

TINY_LOG = "".join(json.dumps(r) + "\n" for r in (
    {"INSTRUCTION": "CONSTANT", "NAME": "x"},
    {"INSTRUCTION": "MEMORY", "NAME": "x", "MEMORY": "8"},
    {"INSTRUCTION": "CALL", "RESULT": ["y"], "NAME": "relu", "ARGS": ["x"], "TIME": 5},
    {"INSTRUCTION": "MEMORY", "NAME": "y", "MEMORY": "8"},
    {"INSTRUCTION": "ALIAS", "NAME": "y", "ALIAS": -1},
))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_log(folder: Path, name: str, text: str = TINY_LOG) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """Isolated public, user and repo folders; nothing from the real machine leaks in."""
    public = tmp_path / "public"
    user = tmp_path / "user"
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pyproject.toml").write_text("")
    monkeypatch.setenv("DTRF_TRACES", str(public))
    monkeypatch.setenv("DTRF_TRACE_DIR", str(user))
    monkeypatch.setenv("DTRF_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(registry, "_REPO_ROOT", repo)
    monkeypatch.chdir(tmp_path)
    return {"public": public, "user": user, "repo": repo, "tmp": tmp_path}


@pytest.fixture
def known_fake(monkeypatch):
    """Pretend `fake-1-default.log` (with TINY_LOG's bytes) is a published log."""
    table = {"fake-1-default.log": sha256(TINY_LOG.encode())}
    monkeypatch.setattr(known, "KNOWN_TRACE_SHA256", table)
    return table


# --- resolution ----------------------------------------------------------------------

def test_public_dir_wins_over_user_dir(dirs):
    public = make_log(dirs["public"] / "dtr-2020", "lstm-128-a.log")
    user = make_log(dirs["user"] / "dtr-2020", "lstm-128-b.log")
    assert resolve_trace("lstm") == public
    public.unlink()
    assert resolve_trace("lstm") == user


def test_search_is_recursive_and_by_short_name_prefix(dirs):
    deep = make_log(dirs["public"] / "a" / "b", "unroll_gan-512-x.log")
    make_log(dirs["public"], "unet_variant-1.log")
    unet = make_log(dirs["public"], "unet-6-x.log")
    assert resolve_trace("unroll_gan") == deep
    assert resolve_trace("unet") == unet


@pytest.mark.parametrize("spec, target", [
    ("densenet", "tv_densenet121"), ("densenet121", "tv_densenet121"),
    ("tv_densenet121", "tv_densenet121"), ("gan", "unroll_gan"), ("LSTM", "lstm"),
])
def test_aliases(dirs, spec, target):
    path = make_log(dirs["public"], f"{target}-1-x.log")
    assert resolve_trace(spec) == path


def test_published_file_name_preferred(dirs):
    name = next(n for n in known.KNOWN_TRACE_SHA256 if n.startswith("resnet32-"))
    make_log(dirs["public"], "resnet32-0-aaa.log")
    published = make_log(dirs["public"], name)
    assert resolve_trace("resnet32") == published


def test_full_stem_resolves(dirs):
    path = make_log(dirs["user"], "treelstm-6-custom.log")
    assert resolve_trace("treelstm-6-custom") == path


def test_existing_path_wins(dirs):
    make_log(dirs["public"], "lstm-1-x.log")
    local = make_log(dirs["tmp"], "lstm")           # a file literally named like the trace
    assert resolve_trace("lstm") == local
    other = make_log(dirs["tmp"] / "elsewhere", "anything.log")
    assert resolve_trace(str(other)) == other
    assert resolve_trace(other) == other


def test_missing_path_is_reported_as_such(dirs):
    with pytest.raises(TraceNotFoundError, match="no such trace file: nowhere/x.log"):
        resolve_trace("nowhere/x.log")


def test_repo_synthetic_traces_resolve_by_stem(dirs):
    chain = make_log(dirs["repo"] / "traces" / "synthetic", "chain_4.log")
    assert resolve_trace("chain_4") == chain
    # Public names come first.
    make_log(dirs["repo"] / "traces", "lstm.log")
    public = make_log(dirs["public"], "lstm-1-x.log")
    assert resolve_trace("lstm") == public


def test_default_public_dirs_relative_to_cwd_and_repo(dirs, monkeypatch):
    monkeypatch.delenv("DTRF_TRACES")
    work = dirs["tmp"] / "work"
    from_cwd = make_log(work / "shared" / "traces" / "dtr-2020", "transformer-10-x.log")
    (work / "main").mkdir()
    monkeypatch.chdir(work / "main")
    assert resolve_trace("transformer") == from_cwd.resolve()
    # From elsewhere, the repository's sibling shared/ is used.
    repo = work / "checkout"
    repo.mkdir()
    (repo / "pyproject.toml").write_text("")
    monkeypatch.setattr(registry, "_REPO_ROOT", work / "checkout")
    monkeypatch.chdir(dirs["tmp"])
    from_repo = make_log(work / "shared" / "traces", "inceptionv4-64-x.log")
    assert resolve_trace("inceptionv4") == from_repo.resolve()
    assert registry.public_trace_dirs() == [(work / "shared" / "traces").resolve()]


def test_user_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("DTRF_TRACE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert registry.user_trace_dir() == tmp_path / "explicit"
    monkeypatch.delenv("DTRF_TRACE_DIR")
    assert registry.user_trace_dir() == tmp_path / "xdg" / "dtrforensics" / "traces"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert registry.user_trace_dir() == (tmp_path / "home" / ".local" / "share" / "dtrforensics"
                                         / "traces")


def test_unknown_public_name_explains_how_to_get_traces(dirs):
    with pytest.raises(TraceNotFoundError) as info:
        resolve_trace("lstm")
    message = str(info.value)
    assert str(dirs["public"]) in message and str(dirs["user"]) in message
    assert "dtrf traces fetch" in message and "dtrf traces import PATH" in message
    assert isinstance(info.value, FileNotFoundError)       # main() reports it, exit 2


def test_unknown_name_lists_known_names(dirs):
    with pytest.raises(TraceNotFoundError, match="unknown trace 'bogus'.*Known short names: "
                                                 "resnet32, lstm"):
        resolve_trace("bogus")


def test_available_traces_and_missing(dirs):
    make_log(dirs["public"], "lstm-1-x.log")
    make_log(dirs["user"] / "dtr-2020", "unet-6-x.log")
    make_log(dirs["user"] / "imported", "mine-1.log")
    make_log(dirs["repo"] / "traces", "chain_4.log")
    entries = [(e.name, e.origin, e.public) for e in registry.available_traces()]
    assert entries == [("lstm", "public", True), ("unet", "user", True),
                       ("mine", "user", False), ("chain_4", "synthetic", False)]
    assert "lstm" not in registry.missing_public()
    assert "resnet32" in registry.missing_public()


# --- import --------------------------------------------------------------------------

def test_import_folder_verifies_known_logs(dirs, known_fake):
    source = dirs["tmp"] / "incoming"
    make_log(source / "nested", "fake-1-default.log")
    make_log(source, "other-2.log")
    result = import_traces(source)
    assert result.ok and not result.refused
    good = dirs["user"] / registry.PUBLIC_SUBDIR / "fake-1-default.log"
    unknown = dirs["user"] / registry.IMPORTED_SUBDIR / "other-2.log"
    assert sorted(result.imported) == sorted([good, unknown])
    assert good.read_text() == TINY_LOG
    assert len(result.warnings) == 1 and "other-2.log" in result.warnings[0]
    assert "not one of the published" in result.warnings[0]
    again = import_traces(source)
    assert again.imported == [] and sorted(again.unchanged) == sorted([good, unknown])
    assert resolve_trace("fake") == good


def test_import_refuses_a_known_name_with_other_bytes(dirs, known_fake):
    source = dirs["tmp"] / "incoming"
    make_log(source, "fake-1-default.log", TINY_LOG[:-10] + "\n")
    make_log(source, "other-2.log")
    result = import_traces(source)
    assert not result.ok
    assert len(result.refused) == 1
    message = result.refused[0]
    assert "fake-1-default.log" in message and known_fake["fake-1-default.log"] in message
    assert not (dirs["user"] / registry.PUBLIC_SUBDIR / "fake-1-default.log").exists()
    assert (dirs["user"] / registry.IMPORTED_SUBDIR / "other-2.log").exists()  # others go on


def test_import_zip(dirs, known_fake):
    archive = dirs["tmp"] / "logs.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("logs/fake-1-default.log", TINY_LOG)
        zf.writestr("logs/readme.txt", "not a log")
        zf.writestr("__MACOSX/logs/._fake-1-default.log", "resource fork")
    result = import_traces(archive)
    assert result.ok and result.warnings == []
    assert result.imported == [dirs["user"] / registry.PUBLIC_SUBDIR / "fake-1-default.log"]
    assert result.imported[0].read_text() == TINY_LOG


def test_import_errors(dirs):
    with pytest.raises(TraceStoreError, match="does not exist"):
        import_traces(dirs["tmp"] / "nope")
    (dirs["tmp"] / "empty").mkdir()
    with pytest.raises(TraceStoreError, match="no .log files found"):
        import_traces(dirs["tmp"] / "empty")
    junk = dirs["tmp"] / "junk.zip"
    junk.write_text("not a zip")
    with pytest.raises(TraceStoreError, match="neither a folder nor a zip"):
        import_traces(junk)


# --- fetch ---------------------------------------------------------------------------

def test_fetch_offline_fails_fast_pointing_to_import(dirs):
    with pytest.raises(TraceStoreError) as info:
        fetch(urls=("http://dtrf-offline.invalid/logs.zip",), timeout=2)
    message = str(info.value)
    assert "dtrf traces import PATH" in message
    assert "dtrf-offline.invalid" in message
    assert not dirs["user"].exists()


def test_fetch_verifies_and_imports(dirs, known_fake, monkeypatch):
    archive = dirs["tmp"] / "served" / "logs.zip"
    archive.parent.mkdir()
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("logs/fake-1-default.log", TINY_LOG)
    url = archive.as_uri()
    seen: list[tuple[int, int | None]] = []
    monkeypatch.setattr(known, "LOGS_ZIP_SHA256", "0" * 64)
    with pytest.raises(TraceStoreError, match="is not the published"):
        fetch(urls=(url,))
    monkeypatch.setattr(known, "LOGS_ZIP_SHA256", sha256(archive.read_bytes()))
    result = fetch(urls=(url,), progress=lambda done, total: seen.append((done, total)))
    assert result.ok
    assert result.imported == [dirs["user"] / registry.PUBLIC_SUBDIR / "fake-1-default.log"]
    assert seen[-1][0] == archive.stat().st_size


# --- CLI -----------------------------------------------------------------------------

def run_dtrf(env_dirs: dict, *args: str) -> subprocess.CompletedProcess:
    env = {"DTRF_TRACES": str(env_dirs["public"]), "DTRF_TRACE_DIR": str(env_dirs["user"]),
           "DTRF_CACHE": str(env_dirs["tmp"] / "cache")}
    return dtrf_process(*args, env=env, installed=True, cwd=env_dirs["tmp"], timeout=120)


def test_cli_import_list_info(dirs):
    make_log(dirs["tmp"] / "incoming", "mine-3.log")
    done = run_dtrf(dirs, "traces", "import", str(dirs["tmp"] / "incoming"))
    assert done.returncode == 0, done.stderr
    assert "imported" in done.stdout and "warning" in done.stderr
    listed = run_dtrf(dirs, "traces", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    # the imported log, then the project's own synthetic traces (traces/)
    assert [t["name"] for t in data["traces"]][0] == "mine"
    assert "hole" in [t["name"] for t in data["traces"]]
    assert data["traces"][0]["ops"] == 2 and data["traces"][0]["peak_bytes"] == 16
    assert "lstm" in data["missing_public"]
    info = run_dtrf(dirs, "traces", "info", str(dirs["user"] / "imported" / "mine-3.log"),
                    "--json")
    assert info.returncode == 0, info.stderr
    detail = json.loads(info.stdout)
    assert detail["constants"] == 1 and detail["backward_ops"] == 0
    assert detail["top_ops"] == [{"name": "relu", "count": 1}]
    assert detail["cache"]["status"] in ("hit", "miss")
    assert detail["verified"] is None
    text = run_dtrf(dirs, "traces", "info", str(dirs["user"] / "imported" / "mine-3.log"))
    floor = detail["floor"]["floor_bytes"]
    assert f"floor: {floor} B ({floor:,} B)" in text.stdout and "floor: floor" not in text.stdout


def test_cli_import_refusal_exits_2(dirs):
    name = next(iter(known.KNOWN_TRACE_SHA256))
    make_log(dirs["tmp"] / "incoming", name)          # a published name, wrong bytes
    done = run_dtrf(dirs, "traces", "import", str(dirs["tmp"] / "incoming"))
    assert done.returncode == 2
    assert f"refused {dirs['tmp'] / 'incoming' / name}" in done.stderr.replace("\n", "")
    assert "Traceback" not in done.stderr


def test_cli_unknown_trace_exits_2(dirs):
    done = run_dtrf(dirs, "traces", "info", "lstm")
    assert done.returncode == 2
    assert done.stderr.startswith("error: unknown trace 'lstm'")
    assert "dtrf traces fetch" in done.stderr and "Traceback" not in done.stderr


# --- the real public traces ----------------------------------------------------------

def public_trace_dir() -> Path | None:
    explicit = os.environ.get("DTRF_TRACES")
    folder = Path(explicit) if explicit else SHARED
    return folder if any(folder.rglob("lstm-*.log")) else None


@pytest.fixture
def public_dir():
    folder = public_trace_dir()
    if folder is None:
        pytest.skip("public DTR traces not found (set DTRF_TRACES or provide ../shared/traces)")
    return folder


@pytest.mark.public
def test_all_public_names_resolve_to_published_bytes(public_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("DTRF_TRACES", str(public_dir))
    monkeypatch.setenv("DTRF_TRACE_DIR", str(tmp_path / "user"))
    for short in (*known.PUBLIC_TRACE_NAMES, *known.TRACE_ALIASES):
        path = resolve_trace(short)
        assert path.name in known.KNOWN_TRACE_SHA256
        assert registry.known_sha256(path) == sha256(path.read_bytes())


@pytest.mark.public
def test_import_public_folder_verifies_every_log(public_dir, tmp_path):
    result = import_traces(public_dir, tmp_path / "user")
    assert result.ok and result.warnings == []
    assert sorted(p.name for p in result.imported) == sorted(known.KNOWN_TRACE_SHA256)
