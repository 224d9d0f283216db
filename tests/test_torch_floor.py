"""The torch the package declares is the torch it runs on: the installed torch
satisfies pyproject's floor, every private torch API the package calls is
declared once (`torch/private_api.py`) and exists in it, and the one the
executor cannot do without is asked for with a clear refusal."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from dtrforensics.torch import RecordError, private_api  # noqa: E402
from dtrforensics.torch.private_api import PRIVATE_TORCH_API  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "dtrforensics"


def _version(text: str) -> tuple[int, ...]:
    """`2.14.0+cpu` -> (2, 14, 0): the release numbers, local and pre-release tags aside."""
    return tuple(int(n) for n in re.match(r"\d+(?:\.\d+)*", text).group(0).split("."))


def declared_floors() -> dict[str, tuple[int, ...]]:
    """Each optional extra of pyproject.toml naming torch -> the floor it declares."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    found = {}
    for extra, requirements in project["optional-dependencies"].items():
        for requirement in requirements:
            m = re.fullmatch(r"torch\s*>=\s*([\d.]+)", requirement.split(";")[0].strip())
            if m:
                found[extra] = _version(m.group(1))
    return found


def test_the_installed_torch_satisfies_the_declared_floor():
    floors = declared_floors()
    assert "torch" in floors, "pyproject's [torch] extra declares no torch>= floor"
    installed = _version(torch.__version__)
    assert all(installed >= floor for floor in floors.values()), (torch.__version__, floors)


@pytest.mark.parametrize("path", PRIVATE_TORCH_API)
def test_every_declared_private_api_exists_in_the_installed_torch(path):
    private_api.resolve(path)       # raises where it is missing
    assert private_api.exists(path)


# --- every private torch name the package calls is declared -------------------------------

def _chain(node: ast.AST) -> list[str] | None:
    """`torch._C._x` -> ["torch", "_C", "_x"]; None unless a chain of names."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _defined(trees: list[ast.AST]) -> set[str]:
    """Every name the package itself defines (functions, classes, attributes and
    variables it assigns, arguments, strings that name fields): a private
    attribute read with one of these names is the package's own."""
    names = set()
    for tree in trees:
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(n.name)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.add(n.id)
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                names.add(n.attr)
            elif isinstance(n, ast.arg):
                names.add(n.arg)
            elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier():
                names.add(n.value)
    return names


def undeclared(sources: dict[str, str], declared=PRIVATE_TORCH_API) -> list[str]:
    """`module: name` for each private torch name a module uses and `declared`
    lacks: a torch import or attribute chain with a private part (declared as the
    whole dotted path), or, in a module importing torch, a private attribute of
    some object (`s._cdata`) that the package does not define and that is not
    read from another imported module (`sys._getframe`), declared as the last
    part of a path."""
    trees = {name: _with_parents(ast.parse(source)) for name, source in sources.items()}
    own, tails = _defined(list(trees.values())), {p.rsplit(".", 1)[-1] for p in declared}
    found = []
    for module, tree in trees.items():
        modules = {a.asname or a.name.split(".")[0] for n in ast.walk(tree)
                   if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        used = []
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and not n.level and (n.module or "").split(".")[0] == "torch":
                used += [f"{n.module}.{a.name}" for a in n.names]
            elif isinstance(n, ast.Import):
                used += [a.name for a in n.names if a.name.split(".")[0] == "torch"]
            elif isinstance(n, ast.Attribute):
                chain = _chain(n)
                if chain and chain[0] == "torch":
                    if not isinstance(n.parent, ast.Attribute):
                        used.append(".".join(chain))
                elif "torch" in modules and n.attr.startswith("_") and not n.attr.startswith("__") \
                        and n.attr not in own and n.attr not in tails and not (chain and chain[0] in modules):
                    found.append(f"{module}: {n.attr}")
        found += [f"{module}: {u}" for u in used
                  if any(p.startswith("_") and not p.startswith("__") for p in u.split("."))
                  and u not in declared]
    return sorted(set(found))


def _with_parents(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child.parent = node
    return tree


def package_sources() -> dict[str, str]:
    return {str(p.relative_to(PACKAGE)): p.read_text(encoding="utf-8")
            for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_private_torch_api_the_package_calls_is_declared():
    missing = undeclared(package_sources())
    assert not missing, ("private torch API called but not declared in "
                         f"torch/private_api.py's PRIVATE_TORCH_API: {missing}")


def test_the_declaration_check_finds_an_undeclared_private_call():
    planted = {
        "a.py": "import torch\nx = torch._C._planted_call()\n",
        "b.py": "from torch._planted import thing\n",
        "c.py": "import torch\ndef f(s):\n    return s._planted_field.x\n",
        "d.py": "import torch\nimport sys\nclass K:\n    _mine = 1\ndef g(k):\n"
                "    return k._mine, sys._getframe(0), torch.nn.Linear\n",
    }
    assert undeclared(planted, declared=()) == [
        "a.py: torch._C._planted_call", "b.py: torch._planted.thing", "c.py: _planted_field"]
    declared = ("torch._C._planted_call", "torch._planted.thing", "torch.Thing._planted_field")
    assert undeclared(planted, declared=declared) == []


# --- the executor asks for the one it cannot do without -------------------------------------

def test_a_torch_without_the_pointer_swap_is_refused_in_one_line(monkeypatch):
    """Where the installed torch lacks `UntypedStorage._swap_data_ptr_` (a torch the
    floor admits may), the real step is refused before it runs, naming it."""
    from dtrforensics.torch.execute import execute
    from dtrforensics.torch.zoo import ZOO
    path = "torch.UntypedStorage._swap_data_ptr_"
    monkeypatch.setitem(private_api._FOUND, path, False)
    with pytest.raises(RecordError) as caught:
        execute(*ZOO["mlp"](), ratio=1.0)
    message = str(caught.value)
    assert "\n" not in message and path in message and torch.__version__ in message
    assert message.startswith("the real step (dtrf torch run) needs ")
    with pytest.raises(ValueError, match="not declared"):
        private_api.require("torch._C._undeclared", "this")
