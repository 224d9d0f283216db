"""Parser: every malformed input names its line and problem; lowering follows docs/semantics.md §2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli import dtrf_process

from dtrforensics.trace.parser import TraceError, parse_file
from dtrforensics.trace.program import CMD_COMPUTE, CMD_GET, CMD_PIN, CMD_RELEASE

# --- tiny log writers -------------------------------------------------------------

def constant(name: str, size: int = 8) -> list[dict]:
    return [{"INSTRUCTION": "CONSTANT", "NAME": name},
            {"INSTRUCTION": "MEMORY", "NAME": name, "MEMORY": str(size)}]


def call(op: str, results: list[str], args: list[str], time: int = 10,
         sizes: list[int] | None = None, aliases: list[int] | None = None) -> list[dict]:
    sizes = sizes or [8] * len(results)
    aliases = aliases or [-1] * len(results)
    lines: list[dict] = [{"INSTRUCTION": "CALL", "RESULT": results, "NAME": op, "ARGS": args,
                          "TIME": time}]
    for name, size, alias in zip(results, sizes, aliases):
        lines.append({"INSTRUCTION": "MEMORY", "NAME": name, "MEMORY": str(size)})
        lines.append({"INSTRUCTION": "ALIAS", "NAME": name, "ALIAS": alias})
    return lines


def write_log(tmp_path: Path, records: list, name: str = "tiny-1.log",
              trailing_newline: bool = True) -> Path:
    """One JSON object per line; a `str` record is written verbatim (for broken lines)."""
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path = tmp_path / name
    path.write_text("\n".join(lines) + ("\n" if trailing_newline else ""), encoding="utf-8")
    return path


def parse_error(tmp_path: Path, records: list, **kw) -> tuple[Path, TraceError]:
    path = write_log(tmp_path, records, **kw)
    with pytest.raises(TraceError) as info:
        parse_file(path)
    return path, info.value


def schedule(program) -> list[tuple[str, int]]:
    names = {CMD_COMPUTE: "compute", CMD_GET: "get", CMD_RELEASE: "release", CMD_PIN: "pin"}
    return [(names[k], a) for k, a in zip(program.sched_kind.tolist(), program.sched_arg.tolist())]


# --- parse errors -----------------------------------------------------------------

def test_invalid_json(tmp_path):
    path, err = parse_error(tmp_path, [*constant("x"), '{"INSTRUCTION": "CALL", "RESULT": [}',
                                       *constant("y")])
    assert err.path == str(path)
    assert err.line == 3
    assert err.problem.startswith("invalid JSON: ")
    assert "truncated" not in err.problem


def test_not_an_instruction_object(tmp_path):
    _, err = parse_error(tmp_path, [*constant("x"), "[1, 2]"])
    assert (err.line, err.problem) == (3, "not an instruction object (no 'INSTRUCTION' key)")


def test_unknown_instruction(tmp_path):
    _, err = parse_error(tmp_path, [*constant("x"), {"INSTRUCTION": "FROB", "NAME": "x"}])
    assert (err.line, err.problem) == (3, "unknown instruction 'FROB'")


def test_call_not_followed_by_memory(tmp_path):
    records = [*constant("x"),
               {"INSTRUCTION": "CALL", "RESULT": ["y"], "NAME": "f", "ARGS": ["x"], "TIME": 1},
               {"INSTRUCTION": "RELEASE", "NAME": "x"}]
    _, err = parse_error(tmp_path, records)
    assert err.line == 4
    assert err.problem == "expected MEMORY for 'y' after CALL on line 3, got RELEASE"


def test_call_memory_not_followed_by_alias(tmp_path):
    records = [*constant("x"),
               {"INSTRUCTION": "CALL", "RESULT": ["y"], "NAME": "f", "ARGS": ["x"], "TIME": 1},
               {"INSTRUCTION": "MEMORY", "NAME": "y", "MEMORY": "8"},
               {"INSTRUCTION": "MEMORY", "NAME": "y", "MEMORY": "8"}]
    _, err = parse_error(tmp_path, records)
    assert err.line == 5
    assert err.problem == "expected ALIAS for 'y' after CALL on line 3, got MEMORY"


def test_constant_not_followed_by_memory(tmp_path):
    records = [{"INSTRUCTION": "CONSTANT", "NAME": "x"}, *constant("y")]
    _, err = parse_error(tmp_path, records)
    assert err.line == 2
    assert err.problem == "expected MEMORY for 'x' after CONSTANT on line 1, got CONSTANT"


def test_memory_for_the_wrong_name(tmp_path):
    records = [*constant("x"),
               {"INSTRUCTION": "CALL", "RESULT": ["y"], "NAME": "f", "ARGS": ["x"], "TIME": 1},
               {"INSTRUCTION": "MEMORY", "NAME": "z", "MEMORY": "8"},
               {"INSTRUCTION": "ALIAS", "NAME": "y", "ALIAS": -1}]
    _, err = parse_error(tmp_path, records)
    assert err.line == 4
    assert err.problem == "MEMORY names 'z' but CALL on line 3 needs 'y'"


def test_alias_for_the_wrong_name(tmp_path):
    records = [*constant("x"),
               {"INSTRUCTION": "CALL", "RESULT": ["y", "w"], "NAME": "f", "ARGS": ["x"],
                "TIME": 1},
               {"INSTRUCTION": "MEMORY", "NAME": "y", "MEMORY": "8"},
               {"INSTRUCTION": "ALIAS", "NAME": "w", "ALIAS": -1}]
    _, err = parse_error(tmp_path, records)
    assert err.line == 5
    assert err.problem == "ALIAS names 'w' but CALL on line 3 needs 'y'"


def test_stray_memory_line(tmp_path):
    _, err = parse_error(tmp_path, [*constant("x"),
                                    {"INSTRUCTION": "MEMORY", "NAME": "x", "MEMORY": "8"}])
    assert (err.line, err.problem) == (3, "MEMORY for 'x' does not follow a CONSTANT or CALL")


def test_argument_never_defined(tmp_path):
    _, err = parse_error(tmp_path, [*constant("x"), *call("f", ["y"], ["x", "ghost"])])
    assert (err.line, err.problem) == (3, "argument 'ghost' was never defined")


def test_copy_src_never_defined(tmp_path):
    _, err = parse_error(tmp_path, [*constant("x"),
                                    {"INSTRUCTION": "COPY", "DST": "y", "SRC": "ghost"}])
    assert (err.line, err.problem) == (3, "SRC 'ghost' was never defined")


def test_copy_from_src_never_defined(tmp_path):
    _, err = parse_error(tmp_path, [*constant("x"),
                                    {"INSTRUCTION": "COPY_FROM", "DST": "x", "SRC": "ghost"}])
    assert (err.line, err.problem) == (3, "SRC 'ghost' was never defined")


def test_pin_of_a_name_never_bound(tmp_path):
    _, err = parse_error(tmp_path, [*constant("x"), {"INSTRUCTION": "PIN", "NAME": "ghost"}])
    assert (err.line, err.problem) == (3, "PIN 'ghost' was never defined")


def test_pin_of_a_name_whose_references_were_released(tmp_path):
    """It would rebuild a dead tensor and hold it for good."""
    _, err = parse_error(tmp_path, [*constant("w"), *call("f", ["a"], ["w"]),
                                    {"INSTRUCTION": "RELEASE", "NAME": "a"},
                                    {"INSTRUCTION": "PIN", "NAME": "a"}])
    assert (err.line, err.problem) == (7, "PIN 'a': every reference to it was released")


@pytest.mark.parametrize("record", [
    {"INSTRUCTION": "PIN", "NAME": ["x"]}, {"INSTRUCTION": "RELEASE", "NAME": {"x": 1}},
    {"INSTRUCTION": "COPY", "DST": 3, "SRC": "x"}, {"INSTRUCTION": "COPY_FROM", "DST": "x", "SRC": None}])
def test_a_name_that_is_no_string_is_refused_on_its_line(tmp_path, record):
    key = next(k for k, v in record.items() if k != "INSTRUCTION" and not isinstance(v, str))
    _, err = parse_error(tmp_path, [*constant("x"), record])
    assert (err.line, err.problem) == (3, f"{key} must be a name, got {record[key]!r}")


def test_pin_pins_where_it_stands(tmp_path):
    """PIN (ours, semantics.md §2.1) is a pin of the name's tensor at its line, before
    the ops after it; the final pins then pin it again (which does nothing)."""
    program = parse_file(write_log(tmp_path, [
        *constant("w"), *call("f", ["a"], ["w"]), {"INSTRUCTION": "PIN", "NAME": "a"},
        *call("g", ["b"], ["a"])]))
    assert schedule(program) == [("compute", 0), ("pin", 0), ("compute", 1), ("pin", 1),
                                 ("compute", 2), ("pin", 0), ("pin", 1), ("pin", 2)]


def test_result_name_reused(tmp_path):
    _, err = parse_error(tmp_path, [*constant("x"), *call("f", ["y"], ["x"]),
                                    *call("g", ["y"], ["x"])])
    assert (err.line, err.problem) == (6, "result name 'y' is already defined")


def test_constant_name_reused(tmp_path):
    _, err = parse_error(tmp_path, [*constant("x"), *constant("x")])
    assert (err.line, err.problem) == (3, "result name 'x' is already defined")


def test_copy_destination_reused(tmp_path):
    _, err = parse_error(tmp_path, [*constant("x"), *constant("y"),
                                    {"INSTRUCTION": "COPY", "DST": "y", "SRC": "x"}])
    assert (err.line, err.problem) == (5, "COPY destination 'y' is already defined")


def test_alias_index_out_of_range(tmp_path):
    _, err = parse_error(tmp_path, [*constant("x"), *call("view", ["v"], ["x"], aliases=[1])])
    assert (err.line, err.problem) == (5, "ALIAS index 1 out of range for 1 argument(s)")


def test_alias_below_minus_one(tmp_path):
    _, err = parse_error(tmp_path, [*constant("x"), *call("view", ["v"], ["x"], aliases=[-2])])
    assert (err.line, err.problem) == (5, "ALIAS index -2 out of range for 1 argument(s)")


def test_mutate_index_out_of_range(tmp_path):
    records = [*constant("x"), {"INSTRUCTION": "MUTATE", "NAME": "add_", "ARGS": ["x"],
                                "MUTATE": [1], "TIME": 1}]
    _, err = parse_error(tmp_path, records)
    assert (err.line, err.problem) == (3, "MUTATE index 1 out of range for 1 argument(s)")


def test_negative_size(tmp_path):
    _, err = parse_error(tmp_path, [*constant("x"), *call("f", ["y"], ["x"], sizes=[-8])])
    assert (err.line, err.problem) == (4, "negative MEMORY: -8")


def test_negative_constant_size(tmp_path):
    _, err = parse_error(tmp_path, constant("x", size=-1))
    assert (err.line, err.problem) == (2, "negative MEMORY: -1")


def test_negative_time(tmp_path):
    _, err = parse_error(tmp_path, [*constant("x"), *call("f", ["y"], ["x"], time=-3)])
    assert (err.line, err.problem) == (3, "negative TIME: -3")


def test_size_not_an_integer(tmp_path):
    _, err = parse_error(tmp_path, [*constant("x"), *call("f", ["y"], ["x"], sizes=["big"])])
    assert (err.line, err.problem) == (4, "MEMORY is not an integer: 'big'")


BEYOND_INT64 = str(1 << 63)


@pytest.mark.parametrize("records, line, what", [
    (constant("x", size=BEYOND_INT64), 2, "MEMORY"),
    ([*constant("x"), *call("f", ["y"], ["x"], sizes=[BEYOND_INT64])], 4, "MEMORY"),
    ([*constant("x"), *call("f", ["y"], ["x"], time=BEYOND_INT64)], 3, "TIME"),
    ([*constant("x"), *call("f", ["y"], ["x"], time="99999999999999999999")], 3, "TIME"),
])
def test_a_number_beyond_int64_is_refused_where_it_is(tmp_path, records, line, what):
    _, err = parse_error(tmp_path, records)
    assert err.line == line
    assert err.problem == (f"{what} {int(records[line - 1][what])} is outside the int64 range "
                           f"the engine counts in (at most {(1 << 63) - 1:,})")


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e300, 2.5, True])
def test_a_json_number_that_is_no_int64_is_refused(tmp_path, value):
    _, err = parse_error(tmp_path, [*constant("x"), *call("f", ["y"], ["x"], time=value)])
    assert err.line == 3 and err.problem.startswith("TIME ")


@pytest.mark.parametrize("alias", [float("inf"), float("-inf"), 0.5, True])
def test_an_alias_that_is_no_integer_is_refused(tmp_path, alias):
    _, err = parse_error(tmp_path, [*constant("x"), *call("f", ["y"], ["x"], aliases=[alias])])
    assert (err.line, err.problem) == (5, f"ALIAS is not an integer: {alias!r}")


@pytest.mark.parametrize("field", ["MEMORY", "TIME"])
def test_sums_beyond_int64_are_refused_at_the_line_that_overflows(tmp_path, field):
    half = 1 << 62                  # each fits int64; the two together do not
    big = {"sizes": [half]} if field == "MEMORY" else {"time": half}
    records = [*constant("x"), *call("f", ["y"], ["x"], **big), *call("g", ["z"], ["y"], **big)]
    _, err = parse_error(tmp_path, records)
    assert err.line == 6
    assert err.problem.startswith(f"the trace's {field} values add up to more than")


def test_missing_field(tmp_path):
    records = [*constant("x"), {"INSTRUCTION": "CALL", "RESULT": ["y"], "NAME": "f",
                                "ARGS": ["x"]}]
    _, err = parse_error(tmp_path, records)
    assert (err.line, err.problem) == (3, "CALL is missing field 'TIME'")


def test_truncated_mid_json(tmp_path):
    full = json.dumps({"INSTRUCTION": "CALL", "RESULT": ["y"], "NAME": "f", "ARGS": ["x"],
                       "TIME": 1})
    _, err = parse_error(tmp_path, [*constant("x"), full[:25]], trailing_newline=False)
    assert err.line == 3
    assert err.problem.startswith("invalid JSON: ")
    assert err.problem.endswith(" (the file looks truncated)")


def test_truncated_call_at_eof(tmp_path):
    records = [*constant("x"),
               {"INSTRUCTION": "CALL", "RESULT": ["y"], "NAME": "f", "ARGS": ["x"], "TIME": 1}]
    _, err = parse_error(tmp_path, records)
    assert err.line == 3
    assert err.problem == ("truncated file: CALL on line 3 is not followed by its MEMORY line "
                           "for 'y'")


def test_truncated_between_memory_and_alias(tmp_path):
    records = [*constant("x"), *call("f", ["y"], ["x"])][:-1]
    _, err = parse_error(tmp_path, records)
    assert err.line == 4
    assert err.problem == ("truncated file: CALL on line 3 is not followed by its ALIAS line "
                           "for 'y'")


def test_no_operators(tmp_path):
    _, err = parse_error(tmp_path, [{"INSTRUCTION": "ANNOTATE", "ANNOTATION": "START"}])
    assert (err.line, err.problem) == (None, "the trace contains no operators")


def test_error_message_is_file_line_problem(tmp_path):
    path, err = parse_error(tmp_path, [*constant("x"), {"INSTRUCTION": "FROB"}])
    assert str(err) == f"{path}:3: unknown instruction 'FROB'"


def test_not_utf8(tmp_path):
    path = tmp_path / "binary-1.log"
    path.write_bytes(b'{"INSTRUCTION": "CONSTANT", "NAME": "\xff"}\n')
    with pytest.raises(TraceError) as info:
        parse_file(path)
    assert info.value.line is None
    assert info.value.problem.startswith("not a UTF-8 text file")


# --- the CLI reports parse errors as one line, exit code 2 ---------------------------

def run_dtrf(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"DTRF_CACHE": str(tmp_path / "cache"), "DTRF_TRACE_DIR": str(tmp_path / "user-traces")}
    return dtrf_process(*args, env=env, installed=True, timeout=120)


@pytest.mark.parametrize("records, line, problem", [
    ([*constant("x"), *call("f", ["y"], ["x", "ghost"])], 3, "argument 'ghost' was never defined"),
    ([*constant("x"), {"INSTRUCTION": "CALL", "RESULT": ["y"], "NAME": "f", "ARGS": ["x"],
                       "TIME": 1}],
     3, "truncated file: CALL on line 3 is not followed by its MEMORY line for 'y'"),
    ([*constant("x"), *call("f", ["y"], ["x"], time=-3)], 3, "negative TIME: -3"),
    ([*constant("x"), *call("f", ["y"], ["x"], sizes=[1 << 63])], 4,
     f"MEMORY {1 << 63} is outside the int64 range"),
    ([*constant("x"), *call("f", ["y"], ["x"], time=str(1 << 64))], 3,
     f"TIME {1 << 64} is outside the int64 range"),
])
def test_cli_info_reports_parse_error(tmp_path, records, line, problem):
    path = write_log(tmp_path, records)
    done = run_dtrf(tmp_path, "traces", "info", str(path))
    assert done.returncode == 2, done.stderr
    assert f"{path}:{line}: {problem}" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_cli_run_refuses_a_size_beyond_int64(tmp_path):
    path = write_log(tmp_path, [*constant("x"), *call("f", ["y"], ["x"], sizes=[1 << 63])])
    done = run_dtrf(tmp_path, "run", str(path), "--ratio", "0.5")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: {path}:4: MEMORY {1 << 63} is outside the int64 range the engine counts in "
        f"(at most {(1 << 63) - 1:,})"]


def test_cli_info_unknown_trace(tmp_path):
    done = run_dtrf(tmp_path, "traces", "info", "no_such_trace")
    assert done.returncode == 2
    assert "unknown trace 'no_such_trace'" in done.stderr
    assert "Traceback" not in done.stderr


# --- lowering -----------------------------------------------------------------------

def test_start_marker_skips_prologue(tmp_path):
    records = [*constant("junk"), {"INSTRUCTION": "ANNOTATE", "ANNOTATION": "START"},
               *constant("x", 16)]
    program = parse_file(write_log(tmp_path, records))
    assert program.n_ops == 1
    assert program.tensor_name(0) == "x"
    assert program.op_line.tolist() == [4]


def test_constant_is_computed_then_pinned(tmp_path):
    records = [*constant("w", 64), *call("f", ["y"], ["w"], time=7)]
    program = parse_file(write_log(tmp_path, records))
    assert schedule(program)[:3] == [("compute", 0), ("pin", 0), ("compute", 1)]
    assert program.is_constant(0) and program.op_name(0) == "constant"
    assert program.op_cost.tolist() == [0, 7]
    assert program.tensor_size.tolist() == [64, 8]
    assert program.op_args_of(0).tolist() == []


def test_mutate_makes_dollar_results_sized_as_the_storage(tmp_path):
    records = [*constant("a", 100),
               *call("view", ["v"], ["a"], sizes=[40], aliases=[0]),
               {"INSTRUCTION": "MUTATE", "NAME": "add_", "ARGS": ["v", "a"], "MUTATE": [0],
                "TIME": 5}]
    program = parse_file(write_log(tmp_path, records))
    mutated = program.tensor_by_name("v$")
    assert mutated == 2
    assert program.tensor_size[mutated] == 100          # the storage of `v` (owned by `a`)
    assert program.tensor_storage[mutated] == mutated   # a new storage
    assert program.op_name(2) == "add_" and program.op_cost[2] == 5
    assert program.op_args_of(2).tolist() == [1, 0]
    assert schedule(program)[3:5] == [("compute", 2), ("release", 1)]
    # `v` now names the mutation result: the final pins pin it, not the old view.
    assert schedule(program)[5:] == [("pin", 0), ("pin", 2)]


def test_copy_is_a_get(tmp_path):
    records = [*constant("a"), {"INSTRUCTION": "COPY", "DST": "b", "SRC": "a"}]
    program = parse_file(write_log(tmp_path, records))
    assert schedule(program) == [("compute", 0), ("pin", 0), ("get", 0), ("pin", 0), ("pin", 0)]


def test_copy_from_releases_old_then_gets(tmp_path):
    records = [*constant("a"), *constant("b"),
               {"INSTRUCTION": "COPY_FROM", "DST": "a", "SRC": "b"}]
    program = parse_file(write_log(tmp_path, records))
    assert schedule(program)[4:6] == [("release", 0), ("get", 1)]
    # `a` lost its only reference: only tensor 1 is pinned at the end (once per name).
    assert schedule(program)[6:] == [("pin", 1), ("pin", 1)]


def test_release_of_unknown_name_is_ignored(tmp_path):
    records = [*constant("a"), {"INSTRUCTION": "RELEASE", "NAME": "ghost"},
               {"INSTRUCTION": "RELEASE", "NAME": "a"}]
    program = parse_file(write_log(tmp_path, records))
    assert schedule(program) == [("compute", 0), ("pin", 0), ("release", 0)]


def test_views_share_the_root_storage(tmp_path):
    records = [*constant("a", 64), *call("f", ["b"], ["a"], sizes=[32]),
               *call("view", ["v1"], ["b"], sizes=[32], aliases=[0]),
               *call("slice", ["v2", "own"], ["v1"], sizes=[16, 16], aliases=[0, -1])]
    program = parse_file(write_log(tmp_path, records))
    b, v1, v2, own = (program.tensor_by_name(n) for n in ("b", "v1", "v2", "own"))
    assert program.tensor_storage[v1] == b
    assert program.tensor_storage[v2] == b                  # view of a view -> root
    assert program.tensor_storage[own] == own
    assert program.tensor_size[v1] == program.tensor_size[v2] == 0
    assert program.tensor_alias[[v1, v2, own]].tolist() == [0, 0, -1]
    assert program.op_total_size.tolist() == [64, 32, 0, 16]
    assert program.storage_ids().tolist() == [0, b, own]


def test_final_pins_in_first_insertion_order_of_names(tmp_path):
    records = [*constant("p"), *constant("q"), *call("f", ["r"], ["q"]),
               {"INSTRUCTION": "COPY_FROM", "DST": "p", "SRC": "r"}]
    program = parse_file(write_log(tmp_path, records))
    # Names in insertion order p, q, r: p now maps to r's tensor 2.
    assert schedule(program)[-3:] == [("pin", 2), ("pin", 1), ("pin", 2)]


def test_released_names_are_not_pinned(tmp_path):
    records = [*constant("a"), *call("f", ["y"], ["a"]), {"INSTRUCTION": "RELEASE", "NAME": "y"}]
    program = parse_file(write_log(tmp_path, records))
    assert schedule(program)[-2:] == [("release", 1), ("pin", 0)]


def test_backward_flag(tmp_path):
    records = [*constant("a"), *call("f", ["b"], ["a"]),
               *call("mul_backward", ["c"], ["b"]), *call("g", ["d"], ["c"])]
    program = parse_file(write_log(tmp_path, records))
    assert program.op_backward.tolist() == [False, False, True, True]

    records = [*constant("a"), *call("f", ["b"], ["a"]),
               {"INSTRUCTION": "ANNOTATE", "ANNOTATION": "BACKWARD"},
               *call("g", ["c"], ["b"]), *constant("k")]
    program = parse_file(write_log(tmp_path, records, name="annot-1.log"))
    assert program.op_backward.tolist() == [False, False, True, True]


def test_identifiers_and_dtypes(tmp_path):
    records = [*constant("a"), *call("split", ["x", "y"], ["a", "a"], time=3)]
    program = parse_file(write_log(tmp_path, records))
    assert program.name == "tiny"
    assert program.op_first_tensor.tolist() == [0, 1]
    assert program.op_n_outputs.tolist() == [1, 2]
    assert program.op_args_of(1).tolist() == [0, 0]           # duplicates kept
    assert program.tensor_index.tolist() == [0, 0, 1]
    assert program.op_line.tolist() == [1, 3]
    assert program.op_names == ("constant", "split")
    assert program.tensor_names == ("a", "x", "y")
    assert program.sched_kind.dtype == np.int8
    assert program.op_backward.dtype == np.bool_
