"""docs/glossary.md defines every term the outputs use, and every --help points to it.

The terms below are taken from what render/ and cli/ print (each is checked to
occur there, as printed), plus a few words of the user's model that the
outputs name by example ($ names, the rival of explain).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli import dtrf

from dtrforensics.cli.main import COMMANDS, load_command

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "glossary.md"
SOURCES = [*(ROOT / "src" / "dtrforensics" / "render").glob("*.py"),
           *(ROOT / "src" / "dtrforensics" / "cli").glob("*.py")]

# term -> how render/ or cli/ prints it (a regular expression over the source)
PRINTED = {
    "depth": r"depth", "collateral": r"collateral", "frontier": r"frontier",
    "pinned": r"pinned", "stream entry": r"stream entr", "flops costs": r"costs",
    "range start": r"range start", "exact": r"exact", "paper #N": r"paper #",
    "hole": r"hole", "fringe": r"fringe", "certified": r"certified",
    "uncertified": r"uncertified", "regime": r"regime", "staleness": r"staleness",
    "score": r"score", "rematerialization": r"rematerialization", "eviction": r"eviction",
    "decision": r"decision", "check": r"check", "budget ratio": r"ratio", "floor": r"floor",
    "victim": r"victim", "runner-up": r"runner-up", "dead free": r"dead free",
    "pressure victim": r"pressure victim", "pool": r"pool", "shortfall": r"shortfall",
    "short at start": r"short at start", "budget interval": r"budget interval",
    "victims sha256": r"victims sha256", "overhead": r"overhead", "clock": r"clock",
    "bottleneck": r"bottleneck", "peak": r"peak", "request": r"request",
    "locked": r"locked", "control": r"control", "baseline": r"baseline",
    "intervention": r"intervention", "aftermath": r"[Aa]ftermath", "onset": r"onset",
    "driver": r"[Dd]rivers", "edge": r"edge", "bracket": r"bracket",
    "failure region": r"failure region", "feasibility switch": r"feasibility switch",
    "micro": r"micro", "thrashed": r"thrashed", "cause": r"cause", "candidate": r"candidate",
    "first divergence": r"[Ff]irst divergence", "first divergent choice": r"divergent choice",
    "resident": r"resident", "retain": r"retain", "step": r"step", "storage": r"storage",
    "window": r"window", "map": r"map", "grid": r"grid", "complete": r"complete",
    "open": r"open", "outcome": r"outcome", "policy": r"policy", "estimate": r"estimate",
    "model compute": r"model compute", "ablation": r"ablation", "jaccard": r"Jaccard",
    "A in B": r"A in B", "neighbourhood": r"neighbourhood",
    "nesting depth": r"nesting depth", "unresolved": r"unresolved", "timeout": r"timeout",
    "verdict": r"verdict", "distinct executions": r"distinct executions", "knob": r"knob",
    "sample": r"sample", "first success": r"first success", "gap": r"gap",
    "overlapping certificates": r"overlapping certificates", "partition": r"partition",
    "pinned for good": r"pinned for good", "working set": r"working set",
    "reconverge": r"re-?converge", "concentration": r"concentration",
}
# words of the model the outputs name by example, not by the word
MODEL_WORDS = ("$ name", "rival", "phase", "module path", "source line", "run spec",
               "tensor name")


def entries() -> dict[str, str]:
    """name -> text of each glossary entry (a `### a / b (c)` heading names a, b, b (c)
    and c's bare word)."""
    found: dict[str, str] = {}
    for block in GLOSSARY.read_text(encoding="utf-8").split("\n### ")[1:]:
        heading, _, body = block.partition("\n")
        for name in heading.split(" / "):
            for variant in (name, re.sub(r"\s*\(.*?\)", "", name)):
                found[variant.strip().lower()] = body
    return found


@pytest.mark.parametrize("term", [*PRINTED, *MODEL_WORDS])
def test_every_term_has_an_entry_with_an_example(term):
    known = entries()
    name = re.sub(r"\s*#N$", " #n", term.lower())
    assert name in known, f"docs/glossary.md has no entry for {term!r}"
    assert "Example:" in known[name], f"{term!r} has no example"


def test_the_terms_are_ones_the_outputs_print():
    text = "\n".join(p.read_text(encoding="utf-8") for p in SOURCES)
    absent = [t for t, pattern in PRINTED.items() if not re.search(pattern, text)]
    assert not absent, absent


def _commands():
    yield ()
    for name in COMMANDS:
        command = load_command(name)
        yield tuple(name.split())
        for sub in getattr(command, "commands", {}):
            yield (name, sub)


@pytest.mark.parametrize("words", list(_commands()), ids=lambda w: " ".join(w) or "dtrf")
def test_every_help_points_to_the_glossary(words):
    out = dtrf(*words, "--help", columns=80).ok()
    assert "Terms: docs/glossary.md" in out, out
