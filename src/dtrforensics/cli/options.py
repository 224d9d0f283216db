"""Option parsing shared by commands: op windows, victim pins, intervention sets,
and typer callbacks that check a value where it enters (`dtrforensics.validate`)."""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from .. import validate
from .errors import CommandError

if TYPE_CHECKING:       # the engine loads numba: commands import it only when they run
    from ..engine.replay import Interventions


def check_timeout(param: typer.CallbackParam, value: float | None) -> float | None:
    """Callback of every --timeout: None or a finite number of seconds > 0."""
    return validate.timeout(value, param.opts[0])


def check_seed(param: typer.CallbackParam, value: int) -> int:
    return validate.seed(value, param.opts[0])


# Every int and float option of every command has a callback of this module, so a
# value out of its range (nan, inf, 1e308, 2**63) is one error line before any work
# (tests/test_hostile.py holds every option to it).

def check_ratio(param: typer.CallbackParam, value: float | None) -> float | None:
    """Callback of a budget ratio: finite, > 0, and a budget below MAX_BYTES for any peak."""
    return value if value is None else validate.ratio(value, param.opts[0])


def check_budget(param: typer.CallbackParam, value: int | None) -> int | None:
    """Callback of a budget in bytes: 1 to MAX_BYTES (`validate.budget`)."""
    return value if value is None else validate.budget(value, param.opts[0])


def check_thrash_limit(param: typer.CallbackParam, value: float | None) -> float | None:
    return value if value is None else validate.thrash_limit(value, what=param.opts[0])


def check_jobs(param: typer.CallbackParam, value: int | None) -> int | None:
    """Callback of --jobs: 1 to 8 worker processes per core."""
    return value if value is None else validate.jobs(value, param.opts[0])


def check_size(param: typer.CallbackParam, value: int | None) -> int | None:
    """Callback of a tensor size (--batch, --seq, --image-size): 1 to MAX_DIM."""
    return value if value is None else validate.at_least(value, 1, param.opts[0],
                                                          maximum=validate.MAX_DIM)


def number(minimum: float = 0.0, maximum: float = validate.MAX_FACTOR, above: bool = False):
    """Callback for a float option (or an unset optional one): finite, in [minimum,
    maximum] ((minimum, maximum] with `above`); by default at most MAX_FACTOR, beyond
    which no ratio step, overhead factor or jump means anything."""
    def check(param: typer.CallbackParam, value: float | None) -> float | None:
        return value if value is None else validate.number(value, param.opts[0], minimum,
                                                            maximum, above)
    return check


positive = number(0.0, above=True)      # steps, thresholds: finite and > 0
seconds = number(0.0, validate.MAX_SECONDS, above=True)     # a time limit: > 0, at most a year


def at_least(minimum: int):
    """Callback for an integer option (or an unset optional one) that must be >= minimum."""
    def check(param: typer.CallbackParam, value: int | None) -> int | None:
        return value if value is None else validate.at_least(value, minimum, param.opts[0])
    return check


def between(minimum: int, maximum: int):
    """Callback for an integer option that must lie in [minimum, maximum]."""
    def check(param: typer.CallbackParam, value: int) -> int:
        return validate.at_least(value, minimum, param.opts[0], maximum)
    return check


def parse_int_list(text: str | None, what: str) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        ids = tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise CommandError(f"{what} must be comma-separated integers, got {text!r}") from None
    return tuple(validate.index(x, f"an id of {what}") for x in ids)


def parse_window(text: str | None) -> tuple[int, int] | None:
    """'A..B' (inclusive op ids) -> (A, B)."""
    if not text:
        return None
    try:
        lo, hi = text.split("..")
        window = int(lo), int(hi)
    except ValueError:
        raise CommandError(f"an op window is written A..B, got {text!r}") from None
    for op in window:
        validate.index(op, f"op window {text}: an op id")
    return validate.op_window(window, None, "op window")


def parse_victim_at(texts: list[str] | None, what: str) -> tuple[tuple[int, int], ...]:
    """['S@K', ...] -> ((storage, decision index), ...), each in 0..MAX_INT."""
    pairs = []
    for text in texts or []:
        try:
            storage, decision = text.split("@")
            pair = int(storage), int(decision)
        except ValueError:
            raise CommandError(f"{what} is written STORAGE@DECISION, got {text!r}") from None
        pairs.append((validate.index(pair[0], f"{what} {text}: the storage id"),
                      validate.index(pair[1], f"{what} {text}: the decision index")))
    return tuple(pairs)


def interventions_from_options(retain: str | None, retain_ops: str | None,
                               forbid: list[str] | None, force: list[str] | None,
                               control: bool = False) -> Interventions:
    window = parse_window(retain_ops)
    storages = parse_int_list(retain, "--retain")
    if window and not storages:
        raise CommandError("--retain-ops needs --retain")
    from ..engine.replay import Interventions
    return Interventions(retain=storages, retain_ops=window,
                         forbid=parse_victim_at(forbid, "--forbid-victim"),
                         force=parse_victim_at(force, "--force-victim"), control=control)


def warn_unreached(interventions: Interventions, decisions: int) -> None:
    """A victim pin at a decision the run never reached changed nothing: say so."""
    for what, pins in (("--forbid-victim", interventions.forbid),
                       ("--force-victim", interventions.force)):
        for storage, k in pins:
            if k >= decisions:
                warnings.warn(f"{what} {storage}@{k} never applied: the run made only "
                              f"{decisions} eviction decisions", stacklevel=2)


POLICY_TRUST = ("A policy file is Python code, run as you (with your privileges) when it "
                "loads, here and in every sweep worker and Dask worker: load only files you "
                "trust.")
RUN_SPEC_TRUST = ("A :POLICY that is PATH.py:NAME is a policy file: Python code, run as you "
                  "when the spec is read (docs/policies.md); load only files you trust.")
POLICY_HELP = ("Eviction policy: a built-in (dtr, no-staleness, no-size, compute-only, lru, "
               "size, msps, dtr-local, dtr-exact-nbhd) or PATH.py:NAME, a policy in a file "
               "(docs/policies.md). " + POLICY_TRUST)


def check_policy(param: typer.CallbackParam, value: str | None) -> str | None:
    """Callback of --policy: a built-in name or a policy file that loads and compiles."""
    if value is not None:
        from ..engine.policies import get_policy
        get_policy(value)
    return value


def check_policies(param: typer.CallbackParam, value: str) -> str:
    """Callback of a comma-separated --policy list: each policy loads, and none is
    named twice (`a.py:x,./a.py:x` is one policy file's policy twice)."""
    seen: dict[object, str] = {}
    for name in split_policies(value):
        check_policy(param, name)
        key = policy_identity(name)
        if key in seen:
            raise validate.OptionError(f"{param.opts[0]} names one policy twice: {seen[key]!r} "
                                       f"and {name!r}")
        seen[key] = name
    if not split_policies(value):
        raise validate.OptionError(f"{param.opts[0]} names no policy")
    return value


def policy_identity(name: str) -> object:
    """What makes two policy names the same policy: a built-in's name, or a policy
    file's real path (links and `./` resolved) and the policy's name in it."""
    from ..engine.policies import POLICIES
    if name in POLICIES:
        return name
    path, _, attr = name.rpartition(":")
    return (os.path.realpath(path), attr)


def split_policies(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


FILE, FOLDER = "an output file", "an output folder"


def _output(param: typer.CallbackParam, value, *, stdout: bool, what: str,
            ctx: typer.Context | None = None):
    """The one check of every output path: `-` is stdout where the command offers it and
    refused where it does not (`./-` names a file called `-`); a path that is or lies
    inside a recording (`recorder.reader.enclosing_recording`), or is a sweep's own file
    (`sweep.store.enclosing_sweep`: its sweep.json, sweep.lock, runs/), is refused; an
    output file's folder must exist (`fsutil.require_parent`: no folder is created),
    and so must a named output folder's parent (the folder itself may be made)."""
    if value is None or str(value) == "":
        return value
    if str(value) == "-":
        if stdout:
            return value
        raise validate.OptionError(f"{param.opts[0]} -: this command writes a file, not stdout; "
                                   "give a file name (./- for a file named '-')")
    refuse_protected(value, what)
    if what == FILE:
        from ..fsutil import require_parent
        require_parent(value)
    elif given(ctx, param):
        require_folder_parent(value)
    return value


def given(ctx: typer.Context | None, param: typer.CallbackParam) -> bool:
    """Whether the user named this option's value (not its default): a folder the user
    names is made, but never its parent (output paths never create folders a typo
    named); a default folder (`recordings/cache`) is the tool's own and made whole."""
    source = ctx.get_parameter_source(param.name) if ctx is not None else None
    return source is None or source.name != "DEFAULT"


def require_folder_parent(value) -> None:
    """OptionError unless a named output folder's parent exists: the folder is made,
    never a missing parent a typo named, except inside the tool's own `recordings/`
    of the current folder (`--record recordings/r`, `-o recordings/sweeps/s`)."""
    from ..fsutil import require_parent
    own = Path("recordings").absolute()
    path = Path(value).absolute()
    if path != own and not path.is_relative_to(own):
        require_parent(value)


def refuse_protected(path, what: str = FILE) -> None:
    """RefusedError for a path no command may write: inside a recording, or a sweep's
    own file."""
    from ..recorder.reader import refuse_inside_recording
    from ..sweep.store import refuse_sweep_file
    refuse_inside_recording(path, what)
    refuse_sweep_file(path, what)


def output_file(param: typer.CallbackParam, value):
    """Callback of an output file option that cannot be stdout."""
    return _output(param, value, stdout=False, what=FILE)


def output_file_or_stdout(param: typer.CallbackParam, value):
    """Callback of an output file option where `-` is stdout."""
    return _output(param, value, stdout=True, what=FILE)


def recording_folder(ctx: typer.Context, param: typer.CallbackParam, value):
    """Callback of a --record folder: the folder may be a recording (`--overwrite`
    replaces it, `recorder.writer.Recorder.check_target`), but not lie inside one
    nor be a sweep's own file."""
    if value is None or str(value) == "":
        return value
    from ..recorder.reader import refuse_inside_recording
    from ..sweep.store import refuse_sweep_file
    refuse_inside_recording(Path(value).absolute().parent, "a recording folder")
    refuse_sweep_file(value, "a recording folder")
    if given(ctx, param):
        require_folder_parent(value)    # the recording's folder is made, not its parent
    return value


def new_recording_folder(ctx: typer.Context, param: typer.CallbackParam, value):
    """Callback of a --record folder of a command that never replaces a recording
    (`torch run`): refused, with what to do, when the folder exists."""
    recording_folder(ctx, param, value)
    if value is not None and str(value) != "" and os.path.lexists(value):
        raise validate.OptionError(f"{param.opts[0]} {value}: it already exists, and this "
                                   "command never replaces a folder; choose a new folder "
                                   f"(or delete {value} first)")
    return value


def output_folder(ctx: typer.Context, param: typer.CallbackParam, value):
    """Callback of an output folder option (sweeps, runs, reports)."""
    return _output(param, value, stdout=False, what=FOLDER, ctx=ctx)


def _setting_value(text: str, pair: str = ""):
    """An integer, a float, true/false, a list of these in brackets (`[2,4]`, `[]`),
    or the text itself."""
    if text.startswith("[") and text.endswith("]"):
        items = [t.strip() for t in text[1:-1].split(",")]
        if items == [""]:
            return []
        if "" in items:
            raise CommandError(f"--set {pair}: a list takes values between commas, e.g. [2,4]")
        return [_setting_value(t, pair) for t in items]
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def factory_settings(pairs: list[str], given: dict[str, object]) -> dict[str, object]:
    """--set KEY=VALUE pairs; a key set twice, or also given by its own option
    (--batch, --seq, --image-size, --dtype), is refused rather than one silently winning."""
    settings: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key or not value:
            raise CommandError(f"--set takes KEY=VALUE (e.g. layers=4), got {pair!r}")
        if key in settings:
            raise CommandError(f"--set {key} is given twice ({key}={settings[key]} and {pair}): "
                               "give it once")
        if given.get(key) is not None:
            raise CommandError(f"--set {pair} and --{key.replace('_', '-')} {given[key]} both set {key}: give one")
        settings[key] = _setting_value(value, pair)
        for number in (settings[key] if isinstance(settings[key], list) else [settings[key]]):
            if isinstance(number, (int, float)) and not isinstance(number, bool):
                _check_setting(pair, number)
    return _nested(settings)


def _nested(settings: dict[str, object]) -> dict[str, object]:
    """Dotted keys (`text_config.hidden_size=64`) as nested dicts; a key set both
    whole and by its parts (`a=1` and `a.b=2`) is refused."""
    found: dict[str, object] = {}
    for key, value in settings.items():
        *outer, last = key.split(".")
        if "" in outer or not last:
            raise CommandError(f"--set {key}: a nested key is NAME.NAME (e.g. text_config.hidden_size)")
        place = found
        for i, part in enumerate(outer):
            place = place.setdefault(part, {})
            if not isinstance(place, dict):
                raise CommandError(f"--set {key} and --set {'.'.join(outer[:i + 1])} both set it: give one")
        if last in place:
            raise CommandError(f"--set {key} and --set {key}.KEY both set {key}: give one")
        place[last] = value
    return found


def _check_setting(pair: str, number: int | float) -> None:
    """A number given with --set: finite, and (a whole number) inside int64."""
    if isinstance(number, float) and not math.isfinite(number):
        raise CommandError(f"--set {pair}: the value must be a finite number")
    if isinstance(number, int) and not -validate.MAX_INT - 1 <= number <= validate.MAX_INT:
        raise CommandError(f"--set {pair}: the value is outside the int64 range")


SCHEDULER_HELP = ("A Dask scheduler's address (tcp://host:8786): run the points on its "
                  "cluster (docs/cluster.md); implies --engine dask.")


def sweep_engine(engine: str | None, scheduler: str | None) -> str | None:
    """`--engine` and `--scheduler` as the sweep takes them: a scheduler address
    means the dask engine, and the dask engine needs one."""
    from ..sweep.backends import ENGINES, check_engine
    if engine is not None and engine not in ENGINES:
        raise CommandError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    if scheduler is not None and engine in (None, "dask"):
        engine = "dask"
    elif (engine == "dask") != (scheduler is not None):
        raise CommandError("--engine dask and --scheduler ADDRESS go together")
    if engine is not None:
        check_engine(engine, scheduler)
    return engine
