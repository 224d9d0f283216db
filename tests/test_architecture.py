"""The one-way import rule of ARCHITECTURE.md, checked on every module's imports.

The layers are read from ARCHITECTURE.md's table, so the document is the rule.
Every `import` and `from ... import` statement of every module under
src/dtrforensics (at module level or inside a function: a lazy import is an
import) is resolved to the module it names and checked against the layers;
every module must be in a layer and be named under its package in "Where
things are".
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "dtrforensics"
ARCHITECTURE = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
TUI_DOOR = "dtrforensics.tui"           # the CLI may import this package, none of its modules


def dotted(name: str) -> str:
    """A table entry as a module name: a package `cli/` -> `dtrforensics.cli.`
    (a prefix: every module inside it), a module `synth/search.py` ->
    `dtrforensics.synth.search`, `synth/__init__.py` -> `dtrforensics.synth`
    (the package's own module only)."""
    parts = [p for p in name.removesuffix(".py").split("/") if p and p != "__init__"]
    return ".".join(["dtrforensics", *parts]) + ("." if name.endswith("/") else "")


def layer_table(text: str) -> tuple[tuple[str, ...], ...]:
    """The layers of ARCHITECTURE.md's table, lowest first: the backticked
    packages and modules of each `| N. name | ... |` row."""
    rows = {}
    for number, cells in re.findall(r"^\| (\d+)\. [^|]+\| ([^|]+) \|", text, re.M):
        rows[int(number)] = tuple(dotted(n) for n in re.findall(r"`([^`]+)`", cells))
    assert sorted(rows) == list(range(len(rows))), f"layers numbered {sorted(rows)}"
    return tuple(rows[i] for i in range(len(rows)))


# Lowest first: a module may import its own layer and the layers below it.
LAYERS = layer_table(ARCHITECTURE)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


KNOWN = modules()


def imports_of(name: str, source: str, is_package: bool, known=None) -> list[tuple[int, str]]:
    """(line, imported module) for every import in the module, relative ones resolved;
    `from X import y` counts as X.y when X.y is a module of the package (`known`:
    the package's modules, by default those under src/), else as X."""
    tree = ast.parse(source)
    package = name if is_package else name.rpartition(".")[0]
    known = KNOWN if known is None else known
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((node.lineno, sub if sub in known else target))
    return [(line, mod) for line, mod in found if mod.split(".")[0] == "dtrforensics"]


def layer_of(name: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> int:
    """The layer of the longest entry naming `name`: the module itself, or a
    package (`pkg.`) holding it or being it (-1: none)."""
    best, rank = -1, -1
    for i, entries in enumerate(layers):
        for entry in entries:
            package = entry.endswith(".")
            hit = (name + ".").startswith(entry) if package else name == entry
            if hit and len(entry) > best:
                best, rank = len(entry), i
    return rank


def is_command(name: str) -> bool:
    return name.startswith("dtrforensics.cli.") and name.endswith("_cmd")


def violations(name: str, source: str, is_package: bool = False) -> list[str]:
    out = []
    mine = layer_of(name)
    for line, target in imports_of(name, source, is_package):
        where = f"{name}:{line} imports {target}"
        if layer_of(target) > mine:
            out.append(f"{where} (a higher layer)")
        elif name.startswith("dtrforensics.tui") and target.startswith("dtrforensics.cli"):
            out.append(f"{where} (the TUI never imports the CLI)")
        elif (name.startswith("dtrforensics.cli") and target.startswith("dtrforensics.tui")
              and target != TUI_DOOR):
            out.append(f"{where} (the CLI opens the TUI only through {TUI_DOOR})")
        elif is_command(name) and is_command(target) and target != name:
            out.append(f"{where} (a command never imports another command)")
    return out


def test_every_module_has_a_layer():
    unplaced = [name for name in KNOWN if layer_of(name) < 0]
    assert not unplaced, f"modules outside every layer of ARCHITECTURE.md: {unplaced}"


def test_a_new_module_has_no_layer_until_the_table_names_it():
    """The check can fail: a probe module `dtrforensics.probe` is in no layer,
    while every module under a listed package is."""
    assert layer_of("dtrforensics.probe") == -1
    assert layer_of("dtrforensics.engine.probe") == layer_of("dtrforensics.engine.kernel") == 2
    assert layer_of("dtrforensics") == 0


def where_things_are(text: str) -> dict[str, str]:
    """Each bullet of "Where things are" that starts with a package (`pkg/`:)
    -> its text (the names it lists); other bullets under the key ""."""
    section = text.split("## Where things are", 1)[1]
    out: dict[str, str] = {}
    for bullet in re.split(r"^- ", section, flags=re.M)[1:]:
        m = re.match(r"`([a-z_]+)/`:", bullet)
        key = m.group(1) if m else ""
        out[key] = out.get(key, "") + bullet
    return out


def unnamed_modules(text: str, paths) -> list[str]:
    """Module files not named in the bullet of their package (`render/diff.py`
    as `diff.py` under `render/`, `tui/widgets/stack.py` as `widgets/stack.py`
    under `tui/`, a subpackage as `widgets/`); top-level modules anywhere in the
    document."""
    bullets = where_things_are(text)
    names = set(re.findall(r"`([^`]+)`", text))
    missing = []
    for rel in paths:
        parts = rel.parts
        if len(parts) == 1:
            if rel.name != "__init__.py" and rel.name not in names:
                missing.append(str(rel))
            continue
        inner = "/".join(parts[1:])
        if rel.name == "__init__.py":
            inner = "/".join(parts[1:-1]) + "/" if len(parts) > 2 else None
        if inner and f"`{inner}`" not in bullets.get(parts[0], ""):
            missing.append(str(rel))
    return missing


def test_architecture_names_every_module_under_its_package():
    paths = [p.relative_to(PACKAGE) for p in sorted(PACKAGE.rglob("*.py"))]
    missing = unnamed_modules(ARCHITECTURE, paths)
    assert not missing, ("modules ARCHITECTURE.md does not name under their package "
                         f"(\"Where things are\"): {missing}")


def test_the_naming_check_fails_on_a_missing_or_misplaced_module():
    doc = "## Where things are\n\n- `engine/`: `replay.py`, `kernel.py`.\n- `sweep/`: `plot.py`.\n"
    assert unnamed_modules(doc, [Path("engine/replay.py"), Path("engine/kernel.py")]) == []
    assert unnamed_modules(doc, [Path("engine/probe.py")]) == ["engine/probe.py"]
    assert unnamed_modules(doc, [Path("render/plot.py")]) == ["render/plot.py"]   # misplaced
    assert unnamed_modules(doc, [Path("probe.py")]) == ["probe.py"]


def test_imports_go_one_way():
    found = [v for name, path in KNOWN.items()
             for v in violations(name, path.read_text(encoding="utf-8"),
                                 path.name == "__init__.py")]
    assert not found, "imports against ARCHITECTURE.md:\n" + "\n".join(found)


def test_engine_imports_no_io_or_rendering_library():
    banned = ("pyarrow", "duckdb", "rich", "typer", "textual", "matplotlib")
    found = []
    for name, path in KNOWN.items():
        if not name.startswith("dtrforensics.engine"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            roots = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            found += [f"{name}: {r}" for r in roots if r.split(".")[0] in banned]
    assert not found, found


def import_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """module -> the modules of the package it imports (lazy imports included), from
    `sources`: module -> (its source, whether it is a package's `__init__`)."""
    return {name: {t for _, t in imports_of(name, source, is_package, sources) if t in sources and t != name}
            for name, (source, is_package) in sources.items()}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle: the groups of two or more modules each reaching the others
    through imports (strongly connected components), each sorted."""
    order, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(root: str) -> None:
        work = [(root, iter(sorted(graph[root])))]
        order[root] = low[root] = len(order)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in order:
                    order[step] = low[step] = len(order)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], order[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == order[node]:
                group = []
                while not group or group[-1] != node:
                    group.append(stack.pop())
                    on_stack.discard(group[-1])
                if len(group) > 1:
                    circles.append(sorted(group))

    for name in sorted(graph):
        if name not in order:
            visit(name)
    return sorted(circles)


def test_no_import_circle():
    """No module imports one that imports it back, however indirectly, lazy imports
    included: each layer's modules form a one-way order too."""
    sources = {name: (path.read_text(encoding="utf-8"), path.name == "__init__.py")
               for name, path in KNOWN.items()}
    circles = import_circles(import_graph(sources))
    assert not circles, f"import circles (modules importing each other): {circles}"


def test_the_circle_check_finds_a_circle_a_lazy_import_closes():
    sources = {"dtrforensics.a": ("from . import b\n", False),
               "dtrforensics.b": ("def f():\n    from .c import x\n", False),
               "dtrforensics.c": ("from .a import y\n", False),
               "dtrforensics.d": ("from . import a\n", False)}
    assert import_circles(import_graph(sources)) == [["dtrforensics.a", "dtrforensics.b",
                                                      "dtrforensics.c"]]
    del sources["dtrforensics.c"]
    assert import_circles(import_graph(sources)) == []


@pytest.mark.parametrize("name, statement, rule", [
    ("dtrforensics.engine.kernel", "from ..recorder import writer", "a higher layer"),
    ("dtrforensics.tui.widgets.stack", "from ...cli import common", "never imports the CLI"),
    ("dtrforensics.tui.app", "from ..cli.errors import CommandError", "never imports the CLI"),
    ("dtrforensics.cli.run_cmd", "from ..tui.app import ReplayApp", "only through"),
    ("dtrforensics.cli.oom_cmd", "from .diff_cmd import open_run", "another command"),
    ("dtrforensics.render.units", "import dtrforensics.cli.common", "a higher layer"),
    ("dtrforensics.trace.parser", "from ..engine import replay", "a higher layer"),
])
def test_the_checker_catches(name, statement, rule):
    """Each rule fails on a planted import, also when it hides inside a function."""
    found = violations(name, f"def f():\n    {statement}\n")
    assert any(rule in v for v in found), found


def test_the_checker_allows_the_tui_door_and_lower_layers():
    assert violations("dtrforensics.cli.replay_cmd", "from ..tui import run_replay_app\n"
                      "from ..render.replay import replay_table\n") == []
    assert violations("dtrforensics.tui", "from .app import ReplayApp\n", is_package=True) == []


# --- function length (ARCHITECTURE.md, "The rules": 80 lines, or say why) -------------------

MAX_LINES = 80
LONG_MARK = "# long:"


def long_functions(module: str, source: str) -> list[tuple[str, int, bool]]:
    """(qualified name, lines, says why) of every function over MAX_LINES lines,
    counted from its `def` to its last line; it says why when its body starts
    with a one-line `# long: <why>` comment (after its docstring, if any)."""
    lines = source.splitlines()
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}"
                if not isinstance(child, ast.ClassDef):
                    length = child.end_lineno - child.lineno + 1
                    if length > MAX_LINES:
                        found.append((name, length, _says_why(child, lines)))
                visit(child, name)

    visit(ast.parse(source), module)
    return found


def _says_why(func: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> bool:
    """Whether the comment lines just before the first statement (or, after a
    docstring, before the second) start with `# long: <why>`."""
    body = func.body
    documented = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
        and isinstance(body[0].value.value, str) and len(body) > 1
    statement = body[1] if documented else body[0]
    comments, i = [], statement.lineno - 1                # 1-based line before the statement
    while i >= func.lineno and (not lines[i - 1].strip() or lines[i - 1].strip()[0] == "#"):
        if lines[i - 1].strip():
            comments.append(lines[i - 1].strip())
        i -= 1
    return bool(comments) and comments[-1].startswith(LONG_MARK) and \
        len(comments[-1]) > len(LONG_MARK) + 1


def test_no_function_is_over_80_lines_unless_it_says_why():
    unexplained = {name: length for module, path in KNOWN.items()
                   for name, length, why in long_functions(module,
                                                           path.read_text(encoding="utf-8"))
                   if not why}
    assert not unexplained, (f"functions over {MAX_LINES} lines whose body does not start "
                             f"with a `{LONG_MARK} <why>` line: {unexplained}")


def _function(lines: int, head: str = "") -> str:
    return "def f(a,\n      b):\n" + head + "    x = 1\n" * (lines - 2 - head.count("\n"))


def test_the_length_check_counts_from_def_to_end_and_reads_the_reason():
    assert long_functions("m", _function(80)) == []
    assert long_functions("m", _function(81)) == [("m.f", 81, False)]
    why = "    # long: one state machine, split it and the hot loop slows down\n"
    assert long_functions("m", _function(81, why)) == [("m.f", 81, True)]
    documented = '    """What it does."""\n' + why
    assert long_functions("m", _function(81, documented)) == [("m.f", 81, True)]
    assert long_functions("m", _function(81, "    # long:\n")) == [("m.f", 81, False)]
    late = "    y = 2\n" + why
    assert long_functions("m", _function(81, late)) == [("m.f", 81, False)]
    nested = "class C:\n" + "\n".join("    " + ln for ln in _function(90).splitlines()) + "\n"
    assert long_functions("m", nested) == [("m.C.f", 90, False)]
