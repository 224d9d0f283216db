"""Option parsing shared by commands: op windows, victim pins, intervention sets."""

from __future__ import annotations

from ..engine.replay import Interventions
from .errors import CommandError


def parse_int_list(text: str | None, what: str) -> tuple[int, ...]:
    if not text:
        return ()
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise CommandError(f"{what} must be comma-separated integers, got {text!r}") from None


def parse_window(text: str | None) -> tuple[int, int] | None:
    """'A..B' (inclusive op ids) -> (A, B)."""
    if not text:
        return None
    try:
        lo, hi = text.split("..")
        return int(lo), int(hi)
    except ValueError:
        raise CommandError(f"an op window is written A..B, got {text!r}") from None


def parse_victim_at(texts: list[str] | None, what: str) -> tuple[tuple[int, int], ...]:
    """['S@K', ...] -> ((storage, decision index), ...)."""
    pairs = []
    for text in texts or []:
        try:
            storage, decision = text.split("@")
            pairs.append((int(storage), int(decision)))
        except ValueError:
            raise CommandError(f"{what} is written STORAGE@DECISION, got {text!r}") from None
    return tuple(pairs)


def interventions_from_options(retain: str | None, retain_ops: str | None,
                               forbid: list[str] | None, force: list[str] | None,
                               control: bool = False) -> Interventions:
    window = parse_window(retain_ops)
    storages = parse_int_list(retain, "--retain")
    if window and not storages:
        raise CommandError("--retain-ops needs --retain")
    return Interventions(retain=storages, retain_ops=window,
                         forbid=parse_victim_at(forbid, "--forbid-victim"),
                         force=parse_victim_at(force, "--force-victim"), control=control)
