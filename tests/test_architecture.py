"""The one-way import rule of ARCHITECTURE.md, checked on every module's imports.

Every `import` and `from ... import` statement of every module under
src/dtrforensics (at module level or inside a function: a lazy import is an
import) is resolved to the module it names and checked against the layers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "dtrforensics"

# Lowest first: a module may import its own layer and the layers below it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("dtrforensics", "dtrforensics.fsutil", "dtrforensics.jsonsafe", "dtrforensics.rows"),
    ("dtrforensics.trace", "dtrforensics.synth.generator"),
    ("dtrforensics.engine",),
    ("dtrforensics.recorder", "dtrforensics.db"),
    ("dtrforensics.analyses", "dtrforensics.sweep", "dtrforensics.interop",
     "dtrforensics.synth.search", "dtrforensics.reproduce", "dtrforensics.torch"),
    ("dtrforensics.render",),
    ("dtrforensics.cli", "dtrforensics.tui", "dtrforensics.api", "dtrforensics.policy"),
)
TUI_DOOR = "dtrforensics.tui"           # the CLI may import this package, none of its modules


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


KNOWN = modules()


def imports_of(name: str, source: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, imported module) for every import in the module, relative ones resolved;
    `from X import y` counts as X.y when X.y is a module of the package, else as X."""
    tree = ast.parse(source)
    package = name if is_package else name.rpartition(".")[0]
    known = KNOWN
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


def layer_of(name: str) -> int:
    best, rank = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
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
