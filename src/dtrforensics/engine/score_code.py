"""A policy's score as code, read before numba compiles it: what it calls, and
its loops.

A score may call compiled functions (`numba.njit`) of its own file or of other
modules. Numba compiles recursion, and a deep one overflows the native stack:
the process dies of SIGSEGV without a word. So the functions a score names are
read from their source, transitively, and a cycle among them is refused before
anything is compiled. And a loop could run for ever inside one compiled call,
where neither `--timeout` nor Ctrl-C reaches; so every loop of that code
(`while`, `for`, comprehensions) is compiled with a check of the run's watch
(engine/score_watch.py). Functions of dtrforensics itself are trusted and not
read; a function whose source is not at hand is called as it is.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from dataclasses import dataclass, field
from typing import Callable

from ..errors import PolicyError
from . import score_check

_CHECK = "__dtrforensics_loop_check__"
_CALLEE = "__dtrforensics_callee_{}__"
_LOOPS = (ast.For, ast.While, ast.comprehension)


def compiled_source(obj) -> Callable | None:
    """The Python function behind a compiled function a score may call (numba's
    dispatchers keep it as `py_func`)."""
    func = getattr(obj, "py_func", None)
    if not isinstance(func, types.FunctionType):
        return None
    module = getattr(func, "__module__", "") or ""
    if module == "dtrforensics" or module.startswith("dtrforensics."):
        return None
    return func


@dataclass(eq=False)
class Function:
    """One function of a score's code: its definition and what it names."""
    func: Callable
    tree: ast.Module | None             # the definition alone, at its file's lines
    compiled: object = None             # the dispatcher it came from (None: the score)
    callees: list[tuple[ast.expr, Function]] = field(default_factory=list)

    @property
    def where(self) -> str:
        return inspect.getsourcefile(self.func) or "<unknown>"

    @property
    def has_loops(self) -> bool:
        return self.tree is not None and any(isinstance(n, _LOOPS) for n in ast.walk(self.tree))


def _parse(func: Callable) -> ast.Module | None:
    try:
        lines, first = inspect.getsourcelines(func)
    except (OSError, TypeError):
        return None
    tree = ast.parse(textwrap.dedent("".join(lines)))
    if not tree.body or not isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    tree.body[0].decorator_list = []
    ast.increment_lineno(tree, first - 1)
    return tree


def _namespace(func: Callable) -> dict:
    names = dict(func.__globals__)
    if func.__closure__:
        for name, cell in zip(func.__code__.co_freevars, func.__closure__):
            try:
                names[name] = cell.cell_contents
            except ValueError:        # a cell not filled yet
                pass
    return names


def _local_names(definition: ast.AST) -> set[str]:
    local = {a.arg for a in ast.walk(definition) if isinstance(a, ast.arg)}
    local |= {n.id for n in ast.walk(definition)
              if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
    return local


def _resolve(node: ast.expr, names: dict, local: set[str]):
    """What a name or a dotted name through modules (`helpers.depth`) refers to."""
    if isinstance(node, ast.Name):
        return None if node.id in local else names.get(node.id)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, names, local)
        if isinstance(owner, types.ModuleType):
            return getattr(owner, node.attr, None)
    return None


def _references(tree: ast.Module, func: Callable):
    """Every outermost name or dotted name in `tree` that refers to compiled code."""
    names, local = _namespace(func), _local_names(tree)
    found = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(
                getattr(node, "ctx", None), ast.Load):
            target = _resolve(node, names, local)
            if target is not None and compiled_source(target) is not None:
                found.append((node, target))
                return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


class ScoreCode:
    """The score and every function it reaches, each read once."""

    def __init__(self, score: Callable, label: str):
        self.label = label
        self._read: dict[Callable, Function] = {}
        self._watched: dict[Function, bool] = {}
        self.score = self._function(score, None)
        self._refuse_cycles(self.score, [], set())

    def _function(self, func: Callable, compiled) -> Function:
        known = self._read.get(func)
        if known is not None:
            return known
        f = Function(func, _parse(func), compiled)
        self._read[func] = f
        if f.tree is not None:
            for node, target in _references(f.tree, func):
                f.callees.append((node, self._function(compiled_source(target), target)))
        return f

    def _refuse_cycles(self, f: Function, path: list[Function], cleared: set) -> None:
        """Depth first from `f`: a callee on the path closes a cycle."""
        path.append(f)
        for node, callee in f.callees:
            if callee in cleared:
                continue
            if callee in path:
                cycle = path[path.index(callee):] + [callee]
                names = " -> ".join(c.func.__name__ for c in cycle)
                raise PolicyError(
                    f"{f.where}:{node.lineno}: policy {self.label}: {names}: a score may not "
                    "call itself, directly or through other functions (a deep recursion "
                    "overflows the native stack and kills the process); write it as a loop")
            self._refuse_cycles(callee, path, cleared)
        path.pop()
        cleared.add(f)

    def watched(self, f: Function | None = None) -> bool:
        """Whether `f` (the score by default) or anything it calls has a loop."""
        f = f or self.score
        if f not in self._watched:
            self._watched[f] = f.has_loops or any(self.watched(c) for _, c in f.callees)
        return self._watched[f]

    def rewrite_score(self, transform: ast.NodeTransformer | None, namespace: dict) -> Callable:
        """The score as a Python function: its loops checked, its callees
        watched, and `transform` applied; the score itself when there is
        nothing to change (or no source)."""
        if self.score.tree is None or (transform is None and not self.watched()):
            return self.score.func
        return self._rewrite(self.score, transform, namespace, {})

    def _rewrite(self, f: Function, transform, namespace: dict, done: dict) -> Callable:
        tree = _parse(f.func)            # a fresh tree: the same references, in the same order
        names = _namespace(f.func)
        names.update(namespace, **{_CHECK: score_check.check})
        renamed = {}
        for k, ((node, _), (_, callee)) in enumerate(zip(_references(tree, f.func), f.callees)):
            if self.watched(callee):
                renamed[id(node)] = _CALLEE.format(k)
                names[_CALLEE.format(k)] = self._watched_callee(callee, done)
        tree = _CheckLoops().visit(_Rename(renamed).visit(tree))
        if transform is not None:
            tree = transform.visit(tree)
        exec(compile(ast.fix_missing_locations(tree), f.where, "exec"), names)
        return names[tree.body[0].name]

    def _watched_callee(self, f: Function, done: dict):
        """`f` compiled again from its source with its loops checked (once)."""
        if f not in done:
            from numba import njit
            options = dict(getattr(f.compiled, "targetoptions", {}))
            for option in ("cache", "nopython"):   # never cached; njit implies nopython
                options.pop(option, None)
            done[f] = njit(**options)(self._rewrite(f, None, {}, done))
        return done[f]


class _Rename(ast.NodeTransformer):
    """Names (or dotted names) replaced by new names, node by node."""

    def __init__(self, renamed: dict[int, str]):
        self.renamed = renamed

    def visit(self, node: ast.AST) -> ast.AST:
        if id(node) in self.renamed:
            return ast.copy_location(ast.Name(self.renamed[id(node)], ast.Load()), node)
        return super().visit(node)


class _CheckLoops(ast.NodeTransformer):
    """Every loop body starts with a check of the watch; every comprehension
    gets the check as its first condition (always true unless it raises)."""

    def _check(self, at: ast.AST) -> ast.Call:
        return ast.copy_location(ast.Call(ast.Name(_CHECK, ast.Load()), [], []), at)

    def _loop(self, node):
        self.generic_visit(node)
        node.body.insert(0, ast.copy_location(ast.Expr(self._check(node)), node))
        return node

    visit_For = visit_While = _loop

    def visit_comprehension(self, node: ast.comprehension) -> ast.comprehension:
        self.generic_visit(node)
        proceed = ast.Compare(self._check(node.iter), [ast.Is()], [ast.Constant(None)])
        node.ifs.insert(0, ast.copy_location(proceed, node.iter))
        return node
