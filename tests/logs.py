"""The hand-written logs the tests share (their stories are told in the docstrings
of test_queries.py and test_forensics_queries.py; `planted` is the interventions'
and explain's), a log placed with its where-file, and the random-log strategy of
the property tests."""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st
from logdsl import Log

from dtrforensics.trace.cache import load_program
from dtrforensics.trace.parser import file_sha256
from dtrforensics.trace.where import write_where


def tiny_log() -> Log:
    return (Log().const("w", 10)
           .call("a", "conv", ["w"], 10, 40)
           .call("b", "conv", ["w"], 20, 40)
           .call("x", "relu", ["w"], 5, 1).release("x")
           .call("c", "conv", ["w"], 30, 40)
           .call("d", "batch_norm", ["a", "b"], 40, 20)
           .release("a").release("b").release("c"))


def tiny_program():
    return tiny_log().program("tiny")


def shift_log() -> Log:
    return (Log().const("w", 10)
            .call("a", "f", ["w"], 10, 40)
            .call("b", "f", ["w"], 20, 40)
            .call("x", "f", ["w"], 5, 1).release("x")
            .call("c", "f", ["w"], 30, 40).release("b")
            .call("d", "g", ["c"], 1, 50)
            .release("a").release("c").release("d")
            .call("e", "f", ["w"], 1, 1).release("e"))


def chain_log() -> Log:
    return (Log().const("w", 10)
            .call("a", "f", ["w"], 10, 20)
            .call("b", "f", ["a"], 10, 20).release("a")
            .call("c", "f", ["b"], 10, 20).release("b")
            .call("d", "f", ["w"], 10, 30)
            .call("e", "h", ["c", "d"], 10, 10)
            .release("c").release("d").release("e"))


def fan_log(n: int = 8) -> Log:
    log = Log().const("w", 10)
    for i in range(n):
        log.call(f"x{i}", "f", ["w"], 3 + (i * 7) % 5, 10)
    for i in range(n):
        log.release(f"x{i}")
    return log


def mixed_log() -> Log:
    """A small DAG whose budgets 80/90 and 100/120 part at a choice (see test_forensics)."""
    log = Log().const("w", 10)
    log.call("a", "f", ["w"], 4, 20)
    log.call("b", "f", ["a"], 6, 10)
    log.call("c", "f", ["w"], 3, 30)
    log.call("d", "f", ["b", "c"], 8, 10)
    log.call("e", "f", ["a"], 2, 20)
    log.call("g", "f", ["d", "e"], 5, 10)
    log.call("h", "f", ["c"], 7, 20)
    log.call("i", "f", ["g", "h"], 9, 10)
    for name in "abcdeghi":
        log.release(name)
    return log


MIXED_BUDGET = 60         # mixed_log fails here with six retention candidates


PLANTED_BUDGET = 170      # planted() fails here; retaining x makes it complete


def planted_log(q_cost: int = 1000) -> Log:
    """x is evicted for y (it is stale and cheap, q is fresh); z then needs x back,
    whose parent p is dead: rematerializing p and x with y locked does not fit.
    Retaining x makes q the victim instead, and q is never needed again. Another
    cost for q fails at the same budget with a different clock."""
    return (Log().const("w", 8).call("p", "f", ["w"], 1, 50).call("x", "g", ["p"], 1, 50)
            .release("p").call("q", "n", ["w"], q_cost, 60).call("y", "k", ["w"], 100, 100)
            .call("z", "m", ["x", "y"], 1, 10).release("q").release("x").release("y"))


def planted():
    """The program of `planted_log()`."""
    return planted_log().program()


OP_RECORDS = ("CONSTANT", "CALL", "MUTATE")


def placed(log: Log, where: list[tuple], path: Path):
    """Write `log` at `path` and a where-file giving its ops, in order, the
    (module, chain, phase, source) of `where`; the loaded program."""
    path.write_text(log.text())
    lines = [n for n, r in enumerate(log.lines, start=1) if r["INSTRUCTION"] in OP_RECORDS]
    assert len(lines) == len(where)
    write_where(path, file_sha256(path), list(zip(lines, where)))
    return load_program(path, cache=False)


def w(module, phase="forward", line=1):
    """A where entry: `module` (its own chain) in `phase` at model.py:`line`."""
    return (module, module, phase, f"model.py:{line}" if phase else None)


SIZES = (0, 8, 16, 16, 24, 64, 100, 128)
COSTS = (0, 1, 1, 5, 10, 100)


@st.composite
def random_logs(draw):
    """A valid log mixing every instruction kind over a small live-name pool. The
    references each tensor holds are counted as the parser counts them
    (semantics.md §2.2), so a PIN names a tensor that still has one."""
    log = Log()
    live: list[str] = []
    counter = [0]
    tensor_of: dict[str, int] = {}
    refs: dict[int, int] = {}

    def fresh():
        counter[0] += 1
        return f"x{counter[0]}"

    def bind(name):     # a new tensor, one reference
        tensor_of[name] = len(refs)
        refs[tensor_of[name]] = 1

    for _ in range(draw(st.integers(1, 3))):
        name = fresh()
        log.const(name, draw(st.sampled_from(SIZES[1:])))
        live.append(name)
        bind(name)
    for _ in range(draw(st.integers(3, 28))):
        action = draw(st.sampled_from(("call", "call", "call", "call", "view", "mutate",
                                       "copy", "copy_from", "release", "release", "pin")))
        if action in ("call", "view"):
            args = draw(st.lists(st.sampled_from(live), min_size=1, max_size=3))
            n_out = draw(st.integers(1, 3)) if action == "call" else 1
            results = [fresh() for _ in range(n_out)]
            aliases = ([0] if action == "view" else
                       [draw(st.sampled_from([-1, -1, -1, 0])) for _ in results])
            sizes = [draw(st.sampled_from(SIZES)) for _ in results]
            log.call(results, "backward_op" if draw(st.booleans()) and len(live) > 4 else "op",
                     args, draw(st.sampled_from(COSTS)), sizes, aliases)
            live.extend(results)
            for name in results:
                bind(name)
        elif action == "mutate":
            args = draw(st.lists(st.sampled_from(live), min_size=1, max_size=2, unique=True))
            log.mutate("add_", args, [0], draw(st.sampled_from(COSTS)))
            refs[tensor_of[args[0]]] -= 1
            bind(args[0])
        elif action == "copy":
            name, source = fresh(), draw(st.sampled_from(live))
            log.copy(name, source)
            live.append(name)
            tensor_of[name] = tensor_of[source]
            refs[tensor_of[source]] += 1
        elif action == "copy_from":
            dst, src = draw(st.sampled_from(live)), draw(st.sampled_from(live))
            log.copy_from(dst, src)
            refs[tensor_of[dst]] -= 1
            tensor_of[dst] = tensor_of[src]
            refs[tensor_of[src]] += 1
        elif action == "pin":
            held = [name for name in live if refs[tensor_of[name]] > 0]
            if held:
                log.pin(draw(st.sampled_from(held)))
        elif len(live) > 1:
            name = draw(st.sampled_from(live))
            log.release(name)
            refs[tensor_of[name]] -= 1
            if draw(st.booleans()):
                live.remove(name)
    if draw(st.booleans()):
        log.release("never_defined")
    return log.program()
