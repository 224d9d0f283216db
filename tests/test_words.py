"""One vocabulary, one unit, one way to name an output (issue 14, item 5).

Counts have one name each (stream entries, distinct storages, rematerializations
completed against nested materializations begun), a shortfall says when it was
measured, every output path takes `-o` and `--out`, an existing output is
replaced with a word on stderr, exports land in `recordings/`, and commands
over two runs refuse two traces before recording anything.
"""

from __future__ import annotations

import json
import re

import pytest
from cli import dtrf
from public import SKIP_TRACES, traces_dir

from dtrforensics.cli.main import COMMANDS, load_command

OUTPUT_OPTIONS = {"export", "synth", "torch record", "torch plan", "regime", "sweep", "plot", "demo",
                  "reproduce", "compare-policies"}
HOLE = "hole@25200000B"      # the embedded trace inside its hole: OOM


def ok(cwd, *args: str) -> str:
    return dtrf(*args, cwd=cwd, columns=200).ok()


def all_commands():
    for name in COMMANDS:
        command = load_command(name)
        if hasattr(command, "commands"):
            for sub, c in command.commands.items():
                yield f"{name} {sub}", c
        else:
            yield name, command


def test_every_output_path_takes_o_and_out():
    with_output = set()
    for name, command in all_commands():
        for param in command.params:
            opts = set(param.opts) | set(param.secondary_opts)
            if opts & {"-o", "--out", "--output"}:
                assert {"-o", "--out"} <= opts, (name, param.opts)
                with_output.add(name)
    assert with_output == OUTPUT_OPTIONS


def test_run_and_diff_count_the_same_stream_entries(tmp_path):
    run = json.loads(ok(tmp_path, "run", "hole", "--budget", "25200000", "--json"))
    entries = run["evictions"] + run["dead_frees"]
    text = " ".join(ok(tmp_path, "run", "hole", "--budget", "25200000").split())
    assert f"{entries:,} stream entries" in text
    assert f"{run['stream_distinct']:,} distinct storages in the stream" in text
    diff = json.loads(ok(tmp_path, "diff", HOLE, "hole@25177835B", "--json"))
    assert diff["a"]["stream_entries"] == entries
    assert "stream entries" in ok(tmp_path, "diff", HOLE, "hole@25177835B")


def test_export_names_both_remat_counts_defaults_to_recordings_and_says_replaced(tmp_path):
    ok(tmp_path, "run", "hole", "--budget", "25200000", "--record", "rec")
    remats = json.loads((tmp_path / "rec" / "run.json").read_text())["summary"]["remats"]
    first = dtrf("export", "rec", "--format", "perfetto", cwd=tmp_path, columns=200)
    assert first.code == 0, first.err
    assert (tmp_path / "recordings" / "rec.perfetto.json").is_file()
    assert "replaced" not in first.err
    assert re.search(rf"\d[\d,]* nested materializations begun, {remats:,} "
                     "rematerializations completed", first.err)
    again = dtrf("export", "rec", "--format", "perfetto", "--out",
                 "recordings/rec.perfetto.json", cwd=tmp_path, columns=200)
    assert again.code == 0
    assert "replaced recordings/rec.perfetto.json" in again.err


def test_synth_says_when_it_replaces_a_file(tmp_path):
    assert "replaced" not in dtrf("synth", "chain", "--out", "c.log", cwd=tmp_path).err
    assert "replaced c.log" in dtrf("synth", "chain", "-o", "c.log", cwd=tmp_path).err


def test_a_negative_max_nesting_is_an_error(tmp_path):
    ok(tmp_path, "run", "hole", "--budget", "25200000", "--record", "rec")
    res = dtrf("export", "rec", "--format", "perfetto", "--max-nesting", "-1", cwd=tmp_path)
    assert res.refused("--max-nesting must be >= 0")
    assert not (tmp_path / "recordings" / "rec.perfetto.json").exists()


@pytest.mark.parametrize("command", ["diff", "regime", "reevict"])
def test_two_traces_are_refused_before_recording(tmp_path, command):
    ok(tmp_path, "synth", "chain", "-o", "chain.log")
    res = dtrf(command, HOLE, "chain.log@0.5", cwd=tmp_path)
    assert res.refused("different traces")
    assert not (tmp_path / "recordings" / "cache").exists()


def test_replay_and_oom_name_the_moment_of_their_shortfall(tmp_path):
    oom = json.loads(ok(tmp_path, "oom", HOLE, "--json"))
    text = " ".join(ok(tmp_path, "oom", HOLE).split())
    assert f"{oom['shortfall']:,} (" in text and "after the pool drained" in text
    replay = " ".join(ok(tmp_path, "replay", HOLE).split())
    assert "short at start" in replay and "before any eviction" in replay


@pytest.mark.skipif(traces_dir() is None, reason=SKIP_TRACES)
def test_oom_says_the_chain_and_pinned_for_good_overlap(tmp_path):
    oom = json.loads(ok(tmp_path, "oom", "resnet32@0.104", "--json"))
    excess = oom["locked_total"] + oom["pinned_storage_bytes"] - oom["pinned"]
    assert excess > 0
    text = " ".join(ok(tmp_path, "oom", "resnet32@0.104").split())
    assert f"exceed pinned by {excess:,} (" in text and "some storages are both" in text


def test_pinned_bytes_is_null_where_it_means_nothing(tmp_path):
    ok(tmp_path, "run", "hole", "--budget", "25200000", "--record", "rec")
    rows = json.loads(ok(tmp_path, "sql", "SELECT kind, count(pinned_bytes) AS filled, "
                         "count(*) AS n FROM events GROUP BY kind ORDER BY kind", "rec",
                         "--json"))
    filled = {r["kind"]: (r["filled"], r["n"]) for r in rows}
    for kind, (have, n) in filled.items():
        assert have == (n if kind in ("alloc_check", "evict", "oom") else 0), kind
