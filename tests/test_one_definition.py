"""Each concept of the house defined once (issue 43, point 5): a check written
in one function that every caller uses, and no word of `concepts.py` that
nothing reads."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dtrforensics import validate
from dtrforensics.errors import OptionError

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "dtrforensics"


def _sources(root: Path = PACKAGE):
    for path in sorted(root.rglob("*.py")):
        yield path.relative_to(root).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _is_none_test(node: ast.AST) -> str | None:
    """`X is None` -> the name X (a plain name), else None."""
    if (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Is)
            and isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value is None
            and isinstance(node.left, ast.Name)):
        return node.left.id
    return None


def budget_or_ratio_checks(tree: ast.AST) -> list[int]:
    """Lines comparing `(budget is None)` with `(ratio is None)`: the exactly-one check."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Compare) and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.Eq, ast.NotEq))
            and {_is_none_test(node.left), _is_none_test(node.comparators[0])} == {"budget", "ratio"}]


def test_the_budget_or_ratio_check_is_written_once():
    found = {name: lines for name, tree in _sources() if (lines := budget_or_ratio_checks(tree))}
    assert set(found) == {"validate.py"}, found
    assert len(found["validate.py"]) == 1


def test_the_check_finder_sees_either_order():
    tree = ast.parse("if (ratio is None) == (budget is None): pass\n"
                     "if (budget is None) != (ratio is None): pass\n"
                     "if (budget is None) == (peak is None): pass\n")
    assert budget_or_ratio_checks(tree) == [1, 2]


@pytest.mark.parametrize("budget, ratio", [(None, None), (1024, 0.5)])
def test_neither_and_both_are_refused_in_the_callers_words(budget, ratio):
    with pytest.raises(OptionError, match="^give exactly one of --ratio or --budget$"):
        validate.budget_or_ratio(budget, ratio)
    with pytest.raises(ValueError, match=r"^give exactly one of budget \(bytes\) or ratio$"):
        validate.budget_or_ratio(budget, ratio, validate.ARGUMENTS)


def test_one_of_them_passes():
    assert validate.budget_or_ratio(1024, None) is None
    assert validate.budget_or_ratio(None, 0.5) is None


def _public_names(tree: ast.Module) -> list[str]:
    names = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                elts = target.elts if isinstance(target, ast.Tuple) else [target]
                names += [e.id for e in elts if isinstance(e, ast.Name)]
    return [n for n in names if not n.startswith("_")]


def _read_names(tree: ast.AST) -> set[str]:
    """Every name read (a load, an attribute, an import) in a module."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            out.update(a.name for a in node.names)
    return out


def test_every_word_of_concepts_is_read_somewhere():
    """A definition nothing reads (a tuple of statuses, a predicate the code never
    calls) only looks like the one definition; tests count as readers."""
    concepts = ast.parse((PACKAGE / "concepts.py").read_text(encoding="utf-8"))
    read = set()
    for _, tree in _sources():
        read |= _read_names(tree)
    for path in sorted((ROOT / "tests").glob("*.py")):
        read |= _read_names(ast.parse(path.read_text(encoding="utf-8")))
    assert [n for n in _public_names(concepts) if n not in read] == []


RUN_RESULTS = [("diff", "RunRef"), ("oom", "OomReport"), ("reevict", "RunFigures"),
               ("regime", "RegimeRun"), ("replay_view", "ReplayWindow")]


@pytest.mark.parametrize("module, name", RUN_RESULTS)
def test_results_about_a_run_take_its_identity_from_one_class(module, name):
    """The fields naming a run (run_id, trace, policy, ratio, budget, outcome) are
    declared once, in `RunIdentity`, and come first in every result about one run."""
    import dataclasses
    import importlib

    from dtrforensics.analyses.runs import RunIdentity
    cls = getattr(importlib.import_module(f"dtrforensics.analyses.{module}"), name)
    identity = [f.name for f in dataclasses.fields(RunIdentity)]
    assert issubclass(cls, RunIdentity)
    assert [f.name for f in dataclasses.fields(cls)][:len(identity)] == identity
    assert not set(identity) & set(cls.__dict__.get("__annotations__", {}))


def overhead_factors(tree: ast.AST) -> list[int]:
    """Lines dividing a max(...) by a min(...): how far apart two overheads are."""
    def call(node, name):
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
            and call(node.left, "max") and call(node.right, "min")]


def test_the_regime_switch_factor_is_computed_in_concepts_only():
    """Two overheads' factor (max / min) and the threshold it is held to are
    `concepts.overhead_factor` and `concepts.REGIME_JUMP` / `DOUBLING`: the reproduction's
    largest jump and the synthetic search's switches count with them."""
    found = {name: lines for name, tree in _sources() if (lines := overhead_factors(tree))}
    assert set(found) == {"concepts.py"}, found
    from dtrforensics import concepts
    from dtrforensics.synth import search
    assert search.SWITCH_FACTOR == 1 + concepts.REGIME_JUMP


OUTCOME_WORDS = {"ok", "oom", "thrashed", "error", "timeout", "fail", "unresolved",
                 "running", "killed", "complete", "stopped", "interrupted"}
# Where outcomes are made (the engine's summary, the PyTorch executor's real run)
# they are named there; what reads them compares through concepts.py. A dask
# client's `status` ("running") is dask's word, not ours.
MAKERS = ("engine/", "torch/")
NOT_OURS = {"sweep/backends.py"}


def spelled_outcomes(tree: ast.AST) -> list[str]:
    """Comparisons of an outcome or status with one of concepts.py's words as a literal."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        parts = [node.left, *node.comparators]
        words = [e.value for p in parts
                 for e in (p.elts if isinstance(p, (ast.Tuple, ast.List, ast.Set)) else [p])
                 if isinstance(e, ast.Constant) and e.value in OUTCOME_WORDS]
        if words and any("outcome" in ast.unparse(p) or "status" in ast.unparse(p)
                         for p in parts):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_outcome_words_are_read_through_concepts():
    found = {name: hits for name, tree in _sources()
             if not name.startswith(MAKERS) and name not in NOT_OURS
             and name != "concepts.py" and (hits := spelled_outcomes(tree))}
    assert found == {}


def test_the_outcome_finder_sees_a_spelled_word():
    tree = ast.parse('a = rec.outcome == "ok"\nb = r["status"] in ("fail", None)\n'
                     'c = rec.outcome == OK\n')
    assert spelled_outcomes(tree) == ["1: rec.outcome == 'ok'", "2: r['status'] in ('fail', None)"]
