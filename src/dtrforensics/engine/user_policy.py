"""Eviction policies written in Python, loaded from a file, compiled with numba.

A policy is a score function decorated with `dtrforensics.policy`; its
parameters name the features it reads (engine/features.py). The kernel scans
the pool exactly as for the built-in policies (semantics.md §7.1: the last of
equal minimal scores wins, the first zero stops the scan), calling the
compiled score once per candidate. Integers divide the way the reference
divides (§7.2: a denominator that is not positive scores plus infinity; §7.3:
one correct rounding): `ratio(num, a, b)` spells it out, and a score's own `/`
between integers is compiled to it, so `compute / (size * staleness)` and
`ratio(compute, size, staleness)` both make exactly the built-in `dtr`'s
decisions.

Filters, applied before scoring: `min_size` (smaller storages are never
candidates) and `locked` (a function of the trace's `Program` returning
storage ids that are never candidates, computed once per trace).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import inspect
import math
import os
import re
import stat
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from numba import cfunc, njit, types
from numba.extending import overload

from ..errors import PolicyError
from .exactdiv import exact_ratio
from .features import FEATURE_NAMES, HISTORY_FEATURES, NEIGHBOURHOOD_FEATURES
from .score_code import ScoreCode

MAX_MIN_SIZE = 2**62          # the kernel reads min_size as an int64
MAX_POLICY_BYTES = 1 << 20    # a policy file is Python source: 1 MiB is far beyond any
SCORE_SIGNATURE = types.float64(*([types.int64] * len(FEATURE_NAMES)))
NEIGHBOURHOOD_MODES = ("incremental", "fresh")


@njit(cache=True)
def ratio(num, a, b=1):
    """num / (a * b) as the reference divides: plus infinity if a or b is not
    positive, else the correctly rounded quotient (integers below 2**53)."""
    if a <= 0 or b <= 0:
        return np.inf
    return exact_ratio(num, a, b)


@njit(cache=True)
def _reference_quotient(num, a, b):
    """num / (a * b) for integers as the reference divides: plus infinity unless
    the product is positive, else the correctly rounded quotient, signed."""
    if a == 0 or b == 0 or (a > 0) != (b > 0):
        return np.inf
    q = exact_ratio(abs(num), abs(a), abs(b))
    return -q if num < 0 else q


def _integral(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def divide(num, den):
    """A score's `num / den`: integers as the reference divides (a denominator
    that is not positive scores plus infinity), anything else as Python does."""
    if _integral(num) and _integral(den):
        return math.inf if den <= 0 else num / den
    return num / den


def divide_product(num, a, b):
    """A score's `num / (a * b)`: integers as the reference divides, with the
    product exact (it often exceeds 2**53), anything else as Python does."""
    if _integral(num) and _integral(a) and _integral(b):
        return divide(num, a * b)
    return num / (a * b)


@overload(divide)
def _divide_compiled(num, den):
    if isinstance(num, types.Integer) and isinstance(den, types.Integer):
        return lambda num, den: _reference_quotient(num, den, 1)
    return lambda num, den: num / den


@overload(divide_product)
def _divide_product_compiled(num, a, b):
    if all(isinstance(x, types.Integer) for x in (num, a, b)):
        return lambda num, a, b: _reference_quotient(num, a, b)
    return lambda num, a, b: num / (a * b)


_DIVIDE, _DIVIDE_PRODUCT = "__dtrforensics_divide__", "__dtrforensics_divide_product__"


class _Divisions(ast.NodeTransformer):
    """Every `/` of a score becomes `divide` (`x / (a * b)`: `divide_product`)."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Div):
            return node
        right = node.right
        if isinstance(right, ast.BinOp) and isinstance(right.op, ast.Mult):
            call = _call(_DIVIDE_PRODUCT, node.left, right.left, right.right)
        else:
            call = _call(_DIVIDE, node.left, right)
        return ast.copy_location(call, node)

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        if not (isinstance(node.op, ast.Div) and isinstance(node.target, ast.Name)):
            return node
        value = _call(_DIVIDE, ast.Name(node.target.id, ast.Load()), node.value)
        return ast.copy_location(ast.Assign([ast.Name(node.target.id, ast.Store())], value),
                                 node)


def _call(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(ast.Name(name, ast.Load()), list(args), [])


def _score_as_compiled(code: ScoreCode) -> Callable:
    """The score with its divisions made the reference's and its loops watched,
    compiled from its own source at its own lines; the score itself when
    neither changes it or its source is not at hand."""
    tree = code.score.tree
    divides = tree is not None and any(
        isinstance(n, (ast.BinOp, ast.AugAssign)) and isinstance(n.op, ast.Div)
        for n in ast.walk(tree))
    return code.rewrite_score(_Divisions() if divides else None,
                              {_DIVIDE: divide, _DIVIDE_PRODUCT: divide_product})


@dataclass(frozen=True, eq=False)
class PolicyDefinition:
    """What `@dtrforensics.policy` makes of a score function."""
    func: Callable
    features: tuple[str, ...]
    min_size: int = 0
    locked: Callable | None = None
    neighbourhoods: str = "incremental"
    doc: str = ""

    @property
    def file(self) -> str:
        return inspect.getsourcefile(self.func) or "<unknown>"

    @property
    def line(self) -> int:
        return self.func.__code__.co_firstlineno


def policy(func: Callable | None = None, *, min_size: int = 0,
           locked: Callable | None = None, neighbourhoods: str = "incremental"):
    """Declare a score function as an eviction policy (docs/policies.md).

    Use bare (`@policy`) or with filters (`@policy(min_size=2**20)`). The
    function's parameters are feature names; it returns a number, lower is
    evicted first.
    """
    def declare(f: Callable) -> PolicyDefinition:
        where = f"{inspect.getsourcefile(f)}:{f.__code__.co_firstlineno}"
        if isinstance(min_size, bool) or not isinstance(min_size, int) or not (
                0 <= min_size <= MAX_MIN_SIZE):
            raise PolicyError(f"{where}: min_size must be a whole number of bytes from 0 to "
                              f"{MAX_MIN_SIZE:,}, not {min_size!r}")
        if locked is not None and not callable(locked):
            raise PolicyError(f"{where}: locked must be a function of the trace, "
                              f"not {locked!r}")
        if neighbourhoods not in NEIGHBOURHOOD_MODES:
            raise PolicyError(f"{where}: neighbourhoods must be one of "
                              f"{', '.join(NEIGHBOURHOOD_MODES)}, not {neighbourhoods!r}")
        return PolicyDefinition(f, _features_of(f, where), min_size, locked, neighbourhoods,
                                inspect.getdoc(f) or "")
    return declare(func) if func is not None else declare


def _features_of(f: Callable, where: str) -> tuple[str, ...]:
    names = []
    for p in inspect.signature(f).parameters.values():
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or \
                p.default is not p.empty:
            raise PolicyError(f"{where}: parameter {p.name!r}: a score takes plain feature "
                              "names (no defaults, *args or **kwargs)")
        if p.name not in FEATURE_NAMES:
            raise PolicyError(f"{where}: parameter {p.name!r} is not a feature; features: "
                              f"{', '.join(FEATURE_NAMES)}")
        names.append(p.name)
    return tuple(names)


@dataclass(frozen=True, eq=False)
class CustomScore:
    """A loaded, compiled policy: what the engine needs to run it."""
    spec: str
    definition: PolicyDefinition
    source_sha256: str
    compiled: object                      # the cfunc the kernel calls
    score: Callable                       # the score as compiled, in Python (divisions made the reference's)
    watched: bool = False                 # its code has loops, which check the run's watch
    _locked_masks: dict = field(default_factory=dict, repr=False)

    @property
    def reads_neighbourhoods(self) -> bool:
        return bool(NEIGHBOURHOOD_FEATURES & set(self.definition.features))

    @property
    def reads_history(self) -> bool:
        """Whether the score reads run counters that a state digest leaves out
        (engine/digest.py): such runs cannot be spliced onto another's end."""
        return bool(HISTORY_FEATURES & set(self.definition.features))

    def locked_mask(self, program) -> np.ndarray:
        """One byte per storage id: 1 where the policy's `locked` keeps it out."""
        if self.definition.locked is None:
            return np.zeros(0, dtype=np.uint8)
        mask = self._locked_masks.get(program.sha256)
        if mask is None:
            try:
                found = self.definition.locked(program)
            except Exception as exc:  # the user's code: report it with its file and line
                raise PolicyError(_exception_line(exc, self.definition, "locked")) from None
            ids = self._storage_ids(found, program)
            storage = program.tensor_storage
            bad = ids[(ids < 0) | (ids >= len(storage))]
            if len(bad) == 0 and len(ids):
                bad = ids[storage[ids] != ids]
            if len(bad):
                raise PolicyError(f"{self._locked_where()}: locked returned {int(bad[0])}, which "
                                  f"is not a storage id of {program.name}")
            mask = np.zeros(program.n_tensors, dtype=np.uint8)
            mask[ids] = 1
            self._locked_masks[program.sha256] = mask
        return mask

    def _locked_where(self) -> str:
        code = getattr(self.definition.locked, "__code__", None)
        return f"{code.co_filename}:{code.co_firstlineno}" if code else self.spec

    def _storage_ids(self, found, program) -> np.ndarray:
        """What `locked` returned as storage ids: an iterable of whole numbers."""
        where = self._locked_where()
        if isinstance(found, (str, bytes)) or not hasattr(found, "__iter__"):
            raise PolicyError(f"{where}: locked must return storage ids (whole numbers), "
                              f"not {type(found).__name__}")
        values = list(found)
        wrong = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, np.integer))]
        if wrong:
            raise PolicyError(f"{where}: locked returned {wrong[0]!r}; storage ids are whole "
                              f"numbers (the `storage` feature's ids)")
        if any(not -2**63 <= int(v) < 2**63 for v in values):
            raise PolicyError(f"{where}: locked returned an id out of range")
        return np.asarray(values, dtype=np.int64)

    def describe_fault(self, probe: np.ndarray, op_label: str) -> str:
        """Why the score failed at the candidate whose features are `probe`:
        the Python function is called again with them to find the line."""
        values = dict(zip(FEATURE_NAMES, (int(v) for v in probe)))
        where = (f"storage {values['storage']} at decision {values['decision']} "
                 f"({op_label})")
        d = self.definition
        try:
            score = self.score(*(values[name] for name in d.features))
        except ZeroDivisionError as exc:  # a float divided by zero
            return (f"{_exception_line(exc, d, 'score')}, scoring {where}; integers divide "
                    "as the reference does (a zero denominator scores plus infinity), floats "
                    "as Python does: divide the integer features themselves, or use "
                    "ratio(num, a, b)")
        except Exception as exc:  # the user's code
            return f"{_exception_line(exc, d, 'score')}, scoring {where}"
        return (f"{d.file}:{d.line}: the score of {where} is {score!r}; scores must be "
                "numbers >= 0 (NaN and negative scores have no place in the scan)")


def _exception_line(exc: BaseException, d: PolicyDefinition, what: str) -> str:
    """`file:line: Type: message` at the innermost frame in the policy's file."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == d.file]
    line = frames[-1].lineno if frames else d.line
    return f"{d.file}:{line}: {what} raised {type(exc).__name__}: {exc}"


_LOADED: dict[tuple[str, str], CustomScore] = {}


def is_policy_file_spec(spec: str) -> bool:
    """Whether `spec` names a policy in a file (`PATH.py:NAME`)."""
    path, sep, name = str(spec).rpartition(":")
    return bool(sep) and path.endswith(".py") and bool(name)


def load_policy(spec: str) -> CustomScore:
    """`PATH.py:NAME` -> the compiled policy (once per process and file content)."""
    path_text, _, name = spec.rpartition(":")
    path = Path(path_text)
    source = read_policy_source(path, spec)
    sha = hashlib.sha256(source).hexdigest()
    key = (str(path.resolve()), sha + ":" + name)
    if key in _LOADED:
        return _LOADED[key]
    definition = _import_definition(path, name, sha, spec, source)
    code = ScoreCode(definition.func, spec)          # a recursive score is refused here
    score = _score_as_compiled(code)
    loaded = CustomScore(spec, definition, sha, _compile(definition, score), score,
                         watched=code.watched())
    _LOADED[key] = loaded
    return loaded


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


def read_policy_source(path: Path, spec: str) -> bytes:
    """A policy file's bytes. It must be a regular file of at most MAX_POLICY_BYTES,
    checked on the opened file before reading: a FIFO would block (it is opened
    without waiting for a writer) and a link to /dev/zero would never end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise PolicyError(f"policy {spec}: cannot read {path}: "
                          f"{exc.strerror or exc}") from None
    try:
        found = os.fstat(fd)
        mode, size = found.st_mode, found.st_size
        if not stat.S_ISREG(mode):
            kind = next((k for test, k in _FILE_KINDS if test(mode)), "not a file")
            raise PolicyError(f"policy {spec}: {path} is {kind}, not a regular file of "
                              "Python source")
        with os.fdopen(os.dup(fd), "rb") as fh:
            source = fh.read(MAX_POLICY_BYTES + 1) if size <= MAX_POLICY_BYTES else b""
    finally:
        os.close(fd)
    if size > MAX_POLICY_BYTES or len(source) > MAX_POLICY_BYTES:
        raise PolicyError(f"policy {spec}: {path} is larger than the {MAX_POLICY_BYTES:,} "
                          "bytes a policy file may be")
    return source


def _import_definition(path: Path, name: str, sha: str, spec: str,
                       source: bytes) -> PolicyDefinition:
    """Run the policy file (the bytes read and hashed, not the file again) as a module."""
    where = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    module_name = f"dtrforensics_policy_{where}_{sha[:12]}"
    module = sys.modules.get(module_name)
    if module is None:
        loader = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(loader)
        try:
            code = compile(source, str(path), "exec", dont_inherit=True)
            exec(code, module.__dict__)         # the user's code, with the user's privileges
        except SyntaxError as exc:
            raise PolicyError(f"{path}:{exc.lineno}: SyntaxError: {exc.msg}") from None
        except PolicyError:
            raise
        except (Exception, SystemExit) as exc:  # the user's module raised (or exited) while loading
            frames = [f for f in traceback.extract_tb(exc.__traceback__)
                      if Path(f.filename).resolve() == path.resolve()]
            line = frames[-1].lineno if frames else 1
            raise PolicyError(f"{path}:{line}: loading the policy raised "
                              f"{type(exc).__name__}: {exc}") from None
        sys.modules[module_name] = module
    found = getattr(module, name, None)
    if found is None:
        defined = sorted(k for k, v in vars(module).items() if isinstance(v, PolicyDefinition))
        raise PolicyError(f"policy {spec}: {path} defines no {name!r}; policies there: "
                          f"{', '.join(defined) or 'none'}")
    if not isinstance(found, PolicyDefinition):
        raise PolicyError(f"policy {spec}: {name!r} is not decorated with "
                          "@dtrforensics.policy")
    return found


_NUMBA_NOISE = re.compile(r"^(Failed in .* mode pipeline|During: |\s*$|No implementation of "
                          r"function .*found for signature:|\[\d\] During)")


def _compile(d: PolicyDefinition, score: Callable):
    """`score` (the user's function, its divisions the reference's) in nopython
    mode, wrapped into the kernel's score signature; an exception inside it
    becomes a NaN score (a fault the driver explains by calling it again in Python)."""
    from numba.core.errors import NumbaError

    user = njit(score)
    try:
        user.compile(tuple([types.int64] * len(d.features)))
    except NumbaError as exc:
        raise PolicyError(_compile_error_line(exc, d)) from None
    except Exception as exc:  # numba failing to lower what it typed
        raise PolicyError(f"{d.file}:{d.line}: the score does not compile in nopython mode: "
                          f"{type(exc).__name__}") from None
    returned = user.nopython_signatures[0].return_type
    if not isinstance(returned, (types.Integer, types.Float, types.Boolean)):
        raise PolicyError(f"{d.file}:{d.line}: the score must return a number, "
                          f"not {returned}")
    params = ", ".join(FEATURE_NAMES)
    body = (f"def score({params}):\n"
            f"    try:\n"
            f"        return np.float64(user({', '.join(d.features)}))\n"
            f"    except Exception:\n"
            f"        return np.nan\n")
    namespace = {"user": user, "np": np}
    exec(compile(body, f"<policy wrapper for {d.func.__name__}>", "exec"), namespace)
    try:
        return cfunc(SCORE_SIGNATURE)(namespace["score"])
    except Exception as exc:  # a return type numba cannot turn into a float64
        raise PolicyError(f"{d.file}:{d.line}: the score's {returned} result cannot be used "
                          f"as a float64 score ({type(exc).__name__})") from None


def _line_naming(d: PolicyDefinition, message: str) -> int:
    """The first line of the score that uses the name an error message quotes
    (numba's NameError carries no location), else the `def` line."""
    quoted = re.search(r"name '(\w+)'", message)
    if quoted:
        source, first = inspect.getsourcelines(d.func)
        for i, text in enumerate(source):
            if re.search(rf"\b{quoted.group(1)}\b", text):
                return first + i
    return d.line


def _compile_error_line(exc: Exception, d: PolicyDefinition) -> str:
    text = str(exc)
    file = re.escape(d.file)
    lines = [int(m) for m in re.findall(rf'File "{file}", line (\d+)', text)]
    message = next((ln.strip() for ln in text.splitlines() if not _NUMBA_NOISE.match(ln)),
                   type(exc).__name__)
    message = re.sub(r"\x1b\[[0-9;]*m", "", message)
    line = lines[-1] if lines else _line_naming(d, message)
    return f"{d.file}:{line}: the score does not compile in nopython mode: {message}"
