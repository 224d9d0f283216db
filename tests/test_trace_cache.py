"""The Parquet program cache: exact round trips, served without parsing, self-healing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from dtrforensics.trace import cache, parser
from dtrforensics.trace.cache import (
    CACHE_HIT,
    CACHE_MISS,
    CACHE_OFF,
    CACHE_REBUILT,
    FORMAT_VERSION,
    CacheEntryError,
    cache_dir,
    cache_path,
    load_program,
    load_program_with_status,
    program_from_table,
    program_to_table,
)
from dtrforensics.trace.parser import parse_file
from dtrforensics.trace.program import Program

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"


def public_trace_dir() -> Path | None:
    explicit = os.environ.get("DTRF_TRACES")
    folder = Path(explicit) if explicit else SHARED
    return folder if any(folder.rglob("lstm-*.log")) else None


def rich_log(tmp_path: Path, name: str = "mix-1.log") -> Path:
    """A small log touching every lowering rule, with non-ASCII names."""
    records = [
        {"INSTRUCTION": "ANNOTATE", "ANNOTATION": "START"},
        {"INSTRUCTION": "CONSTANT", "NAME": "wé"},
        {"INSTRUCTION": "MEMORY", "NAME": "wé", "MEMORY": "4096"},
        {"INSTRUCTION": "CALL", "RESULT": ["h", "ĥ"], "NAME": "split→", "ARGS": ["wé", "wé"],
         "TIME": 123},
        {"INSTRUCTION": "MEMORY", "NAME": "h", "MEMORY": "1024"},
        {"INSTRUCTION": "ALIAS", "NAME": "h", "ALIAS": -1},
        {"INSTRUCTION": "MEMORY", "NAME": "ĥ", "MEMORY": "1024"},
        {"INSTRUCTION": "ALIAS", "NAME": "ĥ", "ALIAS": 1},
        {"INSTRUCTION": "COPY", "DST": "h2", "SRC": "h"},
        {"INSTRUCTION": "ANNOTATE", "ANNOTATION": "BACKWARD"},
        {"INSTRUCTION": "MUTATE", "NAME": "add_", "ARGS": ["ĥ", "h"], "MUTATE": [0], "TIME": 9},
        {"INSTRUCTION": "COPY_FROM", "DST": "h2", "SRC": "wé"},
        {"INSTRUCTION": "RELEASE", "NAME": "h"},
        {"INSTRUCTION": "RELEASE", "NAME": "unknown"},
        {"INSTRUCTION": "CALL", "RESULT": [""], "NAME": "", "ARGS": [], "TIME": 0},
        {"INSTRUCTION": "MEMORY", "NAME": "", "MEMORY": "0"},
        {"INSTRUCTION": "ALIAS", "NAME": "", "ALIAS": -1},
    ]
    path = tmp_path / name
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DTRF_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def assert_same_program(a: Program, b: Program) -> None:
    for name in Program.ARRAY_FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        assert x.shape == y.shape, name
        assert np.array_equal(x, y), name
        assert not y.flags.writeable, name
    assert a.op_names == b.op_names
    assert a.tensor_names == b.tensor_names
    assert all(type(s) is str for s in b.op_names + b.tensor_names)
    assert (a.name, a.sha256, a.source) == (b.name, b.sha256, b.source)


def test_table_round_trip_is_exact(tmp_path):
    program = parse_file(rich_log(tmp_path))
    assert "split→" in program.op_names and "" in program.tensor_names
    assert_same_program(program, program_from_table(program_to_table(program)))


def test_disk_round_trip_is_exact(tmp_path):
    log = rich_log(tmp_path)
    first, status = load_program_with_status(log)
    assert status == CACHE_MISS
    second, status = load_program_with_status(log)
    assert status == CACHE_HIT
    assert_same_program(parse_file(log), first)
    assert_same_program(parse_file(log), second)


def test_second_load_does_not_parse(tmp_path, monkeypatch):
    log = rich_log(tmp_path)
    expected = load_program(log)

    def no_parsing(*args, **kwargs):
        raise AssertionError("the parser was called on a cached trace")

    monkeypatch.setattr(parser, "parse_file", no_parsing)
    monkeypatch.setattr(parser, "parse_lines", no_parsing)
    program, status = load_program_with_status(log)
    assert status == CACHE_HIT
    assert_same_program(expected, program)


def test_cached_program_takes_name_and_source_of_the_load(tmp_path):
    log = rich_log(tmp_path)
    load_program(log)
    copy = tmp_path / "other-7.log"
    copy.write_bytes(log.read_bytes())
    program, status = load_program_with_status(copy)
    assert status == CACHE_HIT                       # same bytes, same entry
    assert (program.name, program.source) == ("other", str(copy))
    assert load_program(copy, name="custom").name == "custom"


def test_entry_is_keyed_by_content_and_format_version(tmp_path, isolated_cache):
    log = rich_log(tmp_path)
    program = load_program(log)
    entry = cache_path(program.sha256)
    assert entry.parent == isolated_cache
    assert program.sha256 in entry.name and f"v{FORMAT_VERSION}" in entry.name
    assert [p.name for p in isolated_cache.iterdir()] == [entry.name]   # no temp files left
    with log.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"INSTRUCTION": "RELEASE", "NAME": "wé"}) + "\n")
    edited, status = load_program_with_status(log)
    assert status == CACHE_MISS
    assert edited.sha256 != program.sha256
    assert edited.n_commands == program.n_commands + 1


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "wrong_sha", "inconsistent"])
def test_corrupt_entry_is_ignored_and_rewritten(tmp_path, damage):
    log = rich_log(tmp_path)
    program = load_program(log)
    entry = cache_path(program.sha256)
    if damage == "garbage":
        entry.write_bytes(b"this is not parquet" * 10)
    elif damage == "truncated":
        entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage == "wrong_sha":
        cache.write_entry(Program(**{**vars(program), "sha256": "0" * 64}), entry)
    elif damage == "inconsistent":
        fields = {k: v for k, v in vars(program).items() if k != "_index"}
        fields["op_arg_ptr"] = fields["op_arg_ptr"][:-1].copy()
        cache.write_entry(Program(**fields), entry)
    recovered, status = load_program_with_status(log)
    assert status == CACHE_REBUILT
    assert_same_program(program, recovered)
    again, status = load_program_with_status(log)
    assert status == CACHE_HIT
    assert_same_program(program, again)


def test_consistency_check_rejects_out_of_range_ids(tmp_path):
    program = parse_file(rich_log(tmp_path))
    table = program_to_table(program)
    fields = {k: v for k, v in vars(program).items() if k != "_index"}
    fields["op_names"] = fields["op_names"][:1]
    with pytest.raises(CacheEntryError, match="op_name_id points outside op_names"):
        program_from_table(program_to_table(Program(**fields)))
    stale = table.replace_schema_metadata({**table.schema.metadata,
                                           b"dtrforensics.format": b"0"})
    with pytest.raises(CacheEntryError, match="format version"):
        program_from_table(stale)


def test_failed_write_leaves_nothing_behind(tmp_path, isolated_cache, monkeypatch):
    log = rich_log(tmp_path)

    def broken_write(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(cache.pq, "write_table", broken_write)
    program, status = load_program_with_status(log)
    assert status == CACHE_OFF
    assert_same_program(parse_file(log), program)
    assert list(isolated_cache.iterdir()) == []


def test_unusable_cache_dir_still_loads(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("DTRF_CACHE", str(blocker / "cache"))
    program, status = load_program_with_status(rich_log(tmp_path))
    assert status == CACHE_OFF
    assert program.n_ops == 4


def test_cache_disabled(tmp_path, isolated_cache):
    program, status = load_program_with_status(rich_log(tmp_path), cache=False)
    assert status == CACHE_OFF and program.n_ops == 4
    assert not isolated_cache.exists()


def test_parse_errors_are_not_cached(tmp_path, isolated_cache):
    bad = tmp_path / "bad-1.log"
    bad.write_text('{"INSTRUCTION": "FROB"}\n')
    with pytest.raises(parser.TraceError, match="unknown instruction"):
        load_program(bad)
    assert not isolated_cache.exists() or list(isolated_cache.iterdir()) == []


def test_cache_dir_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("DTRF_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("DTRF_CACHE")
    assert cache_dir() == tmp_path / "xdg" / "dtrforensics"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == tmp_path / "home" / ".cache" / "dtrforensics"


@pytest.mark.public
def test_public_round_trip():
    folder = public_trace_dir()
    if folder is None:
        pytest.skip("public DTR traces not found (set DTRF_TRACES or provide ../shared/traces)")
    for log in sorted(folder.rglob("*.log")):
        parsed = parse_file(log)
        load_program(log)
        cached, status = load_program_with_status(log)
        assert status == CACHE_HIT
        assert_same_program(parsed, cached)
