"""The published claims of the two studies, and how a claim is judged.

The studies ("Deterministic Regime Switching and Feasibility Inversion in
DTR" and "When More Memory Fails: Hidden Feasibility Holes in DTR") ran the
reference simulator at commit eff53cc4 on the public traces. They number
operators from 1 (our op id + 1) and take budgets as floor(ratio x peak).

A `Claim` pairs a published value with ours, computed by our own analyses,
and a verdict:

- `match`: equal at the precision the study published;
- `differs`: not equal (the note says how);
- `sharper`: equal, and an exact budget certificate says more than a sampled
  budget could (byte edges, widths, what lies between samples);
- `not reproducible`: the study does not define what it ran well enough to
  run it again (the note says what is missing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MATCH = "match"
DIFFERS = "differs"
SHARPER = "sharper"
NOT_REPRODUCIBLE = "not reproducible"
VERDICTS = (MATCH, DIFFERS, SHARPER, NOT_REPRODUCIBLE)

REGIME_STUDY = "regime switching"
HOLES_STUDY = "feasibility holes"


@dataclass(frozen=True)
class Claim:
    id: str                  # stable name, e.g. "resnet32.oom_0.104.depth"
    study: str
    text: str                # the claim in a few words
    published: str           # as the study states it
    ours: str                # our value, in the same unit and precision
    verdict: str
    note: str = ""           # what a sharper answer adds, or how they differ

    def to_json(self) -> dict:
        return {"id": self.id, "study": self.study, "text": self.text,
                "published": self.published, "ours": self.ours, "verdict": self.verdict,
                "note": self.note}


@dataclass(frozen=True)
class Published:
    """A claim as a study states it, before ours is computed."""

    id: str
    study: str
    text: str
    published: str


# The holes study's claims the findings answer (`reproduce --findings`), as published.
OPEN_CLAIMS = {p.id: p for p in (
    Published("inceptionv4.failure_region_0.2526", HOLES_STUDY,
              "InceptionV4: a failure region at 0.2526-0.2527 (0.0001 grid)", "0.2526-0.2527"),
    Published("inceptionv4.switches_0.209_0.26", HOLES_STUDY,
              "InceptionV4: feasibility switches between 0.209 and 0.26 (0.0001 grid)", "6"),
    Published("grid_0.01.no_hole", HOLES_STUDY,
              "the 0.01 grid over 0.05-0.60 shows no hole on the six confirmatory traces",
              "0 of 6"),
    Published("grid_0.01.timeouts", HOLES_STUDY,
              "grid points left unresolved by a 20-minute limit per run",
              "13 grid points (and 46 TreeLSTM samples)"),
    Published("grid_0.001.holes", HOLES_STUDY,
              "holes appear on three of the six traces at 0.001 resolution (read off the exact "
              "maps)", "3 of 6"),
)}


def ratio_span(text: str) -> tuple[float, float]:
    """`0.2526-0.2527` -> (0.2526, 0.2527); a single ratio is a span of one."""
    lo, _, hi = text.partition("-")
    return float(lo), float(hi or lo)


def judge(published: str, ours: str, *, sharper_note: str = "") -> tuple[str, str]:
    """Verdict of two values written at the same precision; a note upgrades a match
    to `sharper`."""
    if published != ours:
        return DIFFERS, ""
    return (SHARPER, sharper_note) if sharper_note else (MATCH, "")


def claim(id: str, study: str, text: str, published: str, ours: str, *,
          sharper_note: str = "", note: str = "") -> Claim:
    verdict, extra = judge(published, ours, sharper_note=sharper_note)
    return Claim(id, study, text, published, ours, verdict, "; ".join(x for x in (extra, note) if x))


def fixed(value: float | None, digits: int) -> str:
    """A number at the study's precision (`None`: the run did not complete)."""
    return "did not complete" if value is None else f"{value:.{digits}f}"


def overhead_text(value: float | None, digits: int = 2) -> str:
    return "did not complete" if value is None else f"{value:.{digits}f}x"


def megabytes(nbytes: int, digits: int = 1) -> str:
    """Decimal megabytes, as the studies print them (889,795,480 B -> 889.8 MB)."""
    return f"{nbytes / 1e6:.{digits}f} MB"


def gigabytes(nbytes: int, digits: int = 2) -> str:
    return f"{nbytes / 1e9:.{digits}f} GB"


def outcomes_text(ratios: Sequence[float], outcomes: Sequence[str]) -> str:
    """`0.101 ok, 0.102-0.106 oom, 0.107 ok`: runs of equal outcomes merged."""
    parts: list[tuple[float, float, str]] = []
    for r, o in zip(ratios, outcomes):
        if parts and parts[-1][2] == o:
            parts[-1] = (parts[-1][0], r, o)
        else:
            parts.append((r, r, o))
    return ", ".join(f"{lo:g} {o}" if lo == hi else f"{lo:g}-{hi:g} {o}" for lo, hi, o in parts)
