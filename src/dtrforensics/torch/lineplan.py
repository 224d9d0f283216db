"""Which log ops each aten call of the step makes, read once from the recording.

The recorder writes one aten call as a CALL (with a MEMORY and an ALIAS line
per result), a MUTATE, or both, followed by the `alias` CALLs that rebind the
other names of a written storage. Before each aten call the executor
(`runtime.py`) looks up the plan of the recording's current line (`planned`):
the log ops the call makes, in order, each with its kind (`call`, `mutate`,
`view`), so it can apply the engine's events up to each op's compute.
"""

from __future__ import annotations

from typing import NamedTuple

OP_INSTRUCTIONS = ("CONSTANT", "CALL", "MUTATE")


class MutateAfter(NamedTuple):
    """The MUTATE of the same aten op right after a CALL's records."""

    op: int                   # its log op
    args: list[str]           # its arguments: the call's, when it is the same call


class CallLine(NamedTuple):
    """The plan of a CALL line."""

    name: str                 # the aten op's name
    args: list[str]           # its arguments (the call's, then the storages its results alias)
    op: int                   # its log op
    mutate: MutateAfter | None
    views_after_mutate: list[tuple[int, str]]   # the `alias` CALLs after that MUTATE
    views: list[tuple[int, str]]                # the `alias` CALLs right after the CALL


class MutateLine(NamedTuple):
    """The plan of a MUTATE line (an aten call that writes and makes nothing)."""

    name: str
    args: list[str]
    op: int
    views: list[tuple[int, str]]    # the `alias` CALLs rebinding the written storages' names


def op_lines(records: list[dict]) -> dict[int, int]:
    """Line index -> log op, for each line that is an op."""
    found, op = {}, 0
    for i, rec in enumerate(records):
        if rec["INSTRUCTION"] in OP_INSTRUCTIONS:
            found[i] = op
            op += 1
    return found


def plan_lines(exp: list[dict], line_op: dict[int, int]) -> dict[int, CallLine | MutateLine]:
    """Per CALL or MUTATE line of the recording, what `planned` needs from it: for a
    CALL its name, arguments, op, the MUTATE of the same op that may follow it
    and the views (`alias` CALLs of its results, and of the names that MUTATE
    writes) after that MUTATE or, without one, after the CALL; for a MUTATE its
    name, arguments, op and the views of the names it writes after it (the
    other names of their storages, rebound)."""
    def at(j):
        return exp[j] if j < len(exp) else {}

    def views(j, results):
        found = []
        r = at(j)
        while r.get("INSTRUCTION") == "CALL" and r["NAME"] == "alias" and r["ARGS"][0] in results:
            found.append((line_op[j], "view"))
            j += 3
            r = at(j)
        return found

    plans: dict[int, CallLine | MutateLine] = {}
    for i, r in enumerate(exp):
        if r["INSTRUCTION"] == "MUTATE":
            plans[i] = MutateLine(r["NAME"], r["ARGS"], line_op[i], views(i + 1, _written(r)))
        elif r["INSTRUCTION"] == "CALL":
            results = set(r["RESULT"])
            j = i + 1 + 2 * len(r["RESULT"])
            m = at(j)
            mutate = MutateAfter(line_op[j], m["ARGS"]) if m.get("INSTRUCTION") == "MUTATE" and \
                m["NAME"] == r["NAME"] else None
            plans[i] = CallLine(r["NAME"], r["ARGS"], line_op[i], mutate,
                                views(j + 1, results | _written(m)) if mutate else [], views(j, results))
    return plans


def _written(mutate: dict) -> set[str]:
    """The names a MUTATE record writes: the recorder rebinds the other names of
    their storages to views of them (`alias` CALLs right after it)."""
    return {mutate["ARGS"][m] for m in mutate["MUTATE"]}


def planned(p: CallLine | MutateLine | None, name: str, arg_names: list[str]) -> list[tuple[int, str]]:
    """The log ops a call of aten op `name` on `arg_names` writes, where `p` is the
    plan of the recording's current line: a CALL (with its MUTATE and views) or a
    MUTATE; none where the call is not the line's (the log will say it differs)."""
    if p is None or p.name != name:
        return []
    if type(p) is MutateLine:
        return [(p.op, "mutate"), *p.views] if p.args == arg_names else []
    if p.args[:len(arg_names)] != arg_names:
        return []
    found = [(p.op, "call")]
    mutate = p.mutate
    if mutate is not None and mutate.args == arg_names:
        found.append((mutate.op, "mutate"))
        found += p.views_after_mutate
    else:
        found += p.views
    return found
