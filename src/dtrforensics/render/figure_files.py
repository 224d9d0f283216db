"""Figure files drawn again only when what they show has changed.

`dtrf compare-policies` draws its figure on every call, also when it resumes a
finished sweep to print a verdict or its JSON again: drawing the same picture
a second time was most of such a call's time. Each PNG and SVG written through
`save_figure` carries a key, in its own metadata (the PNG's `Description` text
chunk, the SVG's `dc:description`): a digest of what the figure shows (the
caller's content, by `repr`), of the code that draws it (this package's
source, all of it: drawing reads names and labels from beyond `render/`) and
of matplotlib's version. When both files of a stem are whole (a PNG's every
chunk matches its CRC up to its end chunk, an SVG closes its root element)
and carry the key of this call, they are the figure this call would draw, and
are left as they are; any other file (missing, cut short, damaged, older,
another program's) is replaced.
"""

from __future__ import annotations

import functools
import hashlib
import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

KEY_FIELD = "Description"
KEY_PREFIX = "dtrforensics figure "
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def figure_key(content: object) -> str:
    """The key of a figure showing `content`, drawn by this version of the package."""
    import matplotlib
    digest = hashlib.sha256()
    digest.update(repr(content).encode("utf-8", "surrogateescape"))
    digest.update(matplotlib.__version__.encode())
    digest.update(_package_digest())
    return KEY_PREFIX + digest.hexdigest()


@functools.cache
def _package_digest() -> bytes:
    """A digest of every Python source of the package (its names, then bytes)."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for module in sorted(root.rglob("*.py")):
        digest.update(module.relative_to(root).as_posix().encode())
        digest.update(module.read_bytes())
    return digest.digest()


def png_text(path: str | os.PathLike, field: str) -> str | None:
    """The value of the first uncompressed text chunk (`tEXt`) named `field` of a
    whole PNG; None: no such chunk, not a PNG, or not whole (a chunk cut short
    or unlike its CRC, no end chunk)."""
    found = None
    with open(path, "rb") as f:
        if f.read(8) != PNG_SIGNATURE:
            return None
        while True:
            head = f.read(8)
            if len(head) < 8:
                return None
            length, kind = struct.unpack(">I4s", head)
            data = f.read(length)
            crc = f.read(4)
            if len(data) < length or len(crc) < 4 or \
                    struct.unpack(">I", crc)[0] != zlib.crc32(data, zlib.crc32(kind)):
                return None
            if kind == b"IEND":
                return found
            if kind == b"tEXt" and found is None:
                name, _, value = data.partition(b"\0")
                if name == field.encode("latin-1"):
                    found = value.decode("latin-1")


def svg_has(path: str | os.PathLike, key: str) -> bool:
    """The SVG's Dublin Core description is `key` (matplotlib's metadata block)
    and the file ends where its root element closes."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    return f"<dc:description>{key}</dc:description>" in text and text.rstrip().endswith("</svg>")


def is_current(paths: list[Path], key: str) -> bool:
    """Every file of the figure (PNG and SVG) exists, is whole and carries `key`."""
    try:
        return all(png_text(p, KEY_FIELD) == key if p.suffix == ".png" else svg_has(p, key)
                   for p in paths)
    except OSError:
        return False


def save_figure(draw: Callable[[], object], stem: str | os.PathLike,
                content: object) -> list[Path]:
    """STEM.png and STEM.svg of the figure `draw()` makes, which shows `content`:
    drawn and written (atomically, as `sweep_plot.save`) unless both files are
    already that figure. Returns both paths."""
    from .sweep_plot import figure_paths, save
    key = figure_key(content)
    paths = figure_paths(stem)
    if is_current(paths, key):
        return paths
    return save(draw(), stem, metadata={KEY_FIELD: key})
