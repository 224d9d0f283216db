"""One vocabulary, one unit, one way to name an output (issue 14, item 5).

Counts have one name each (stream entries, distinct storages, rematerializations
completed against nested materializations begun), a shortfall says when it was
measured, every output path takes `-o` and `--out`, an existing output is
replaced with a word on stderr, exports land in `recordings/`, and commands
over two runs refuse two traces before recording anything.
"""

from __future__ import annotations

import contextlib
import json
import re

import pytest
from public import SKIP_TRACES, traces_dir
from typer.testing import CliRunner

from dtrforensics.cli.main import COMMANDS, app, load_command
from dtrforensics.errors import UserError

OUTPUT_OPTIONS = {"export", "synth", "torch record", "regime", "sweep", "plot", "demo",
                  "reproduce", "compare-policies"}
HOLE = "hole@25200000B"      # the embedded trace inside its hole: OOM


def dtrf(cwd, *args: str):
    with contextlib.chdir(cwd):
        return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def refused(res, message: str) -> bool:
    """A user error: a `UserError` such as `CommandError` or an option's `OptionError`
    (one `error:` line, exit 2, from the entry point)."""
    return isinstance(res.exception, UserError) and message in str(res.exception)


def ok(cwd, *args: str) -> str:
    res = dtrf(cwd, *args)
    assert res.exit_code == 0, res.output
    return res.stdout


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
    first = dtrf(tmp_path, "export", "rec", "--format", "perfetto")
    assert first.exit_code == 0, first.output
    assert (tmp_path / "recordings" / "rec.perfetto.json").is_file()
    assert "replaced" not in first.stderr
    assert re.search(rf"\d[\d,]* nested materializations begun, {remats:,} "
                     "rematerializations completed", first.stderr)
    again = dtrf(tmp_path, "export", "rec", "--format", "perfetto", "--out",
                 "recordings/rec.perfetto.json")
    assert again.exit_code == 0
    assert "replaced recordings/rec.perfetto.json" in again.stderr


def test_synth_says_when_it_replaces_a_file(tmp_path):
    assert "replaced" not in dtrf(tmp_path, "synth", "chain", "--out", "c.log").stderr
    assert "replaced c.log" in dtrf(tmp_path, "synth", "chain", "-o", "c.log").stderr


def test_a_negative_max_nesting_is_an_error(tmp_path):
    ok(tmp_path, "run", "hole", "--budget", "25200000", "--record", "rec")
    res = dtrf(tmp_path, "export", "rec", "--format", "perfetto", "--max-nesting", "-1")
    assert refused(res, "--max-nesting must be >= 0")
    assert not (tmp_path / "recordings" / "rec.perfetto.json").exists()


@pytest.mark.parametrize("command", ["diff", "regime", "reevict"])
def test_two_traces_are_refused_before_recording(tmp_path, command):
    ok(tmp_path, "synth", "chain", "-o", "chain.log")
    res = dtrf(tmp_path, command, HOLE, "chain.log@0.5")
    assert refused(res, "different traces")
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
