"""Figure files drawn again only when what they show has changed.

`dtrf compare-policies` draws its figure on every call, also when it resumes a
finished sweep to print a verdict or its JSON again: drawing the same picture
a second time was most of such a call's time. Each PNG and SVG written through
`save_figure` carries a key, in its own metadata (the PNG's `Description` text
chunk, the SVG's `dc:description`): a digest of what the figure shows (the
caller's content, by `repr`), of the code that draws it (this package's
`render/` modules) and of matplotlib's version. When both files of a stem
carry the key of this call, they are the figure this call would draw, and are
left as they are; any other file (missing, older, another program's) is
replaced.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Callable
from pathlib import Path

KEY_FIELD = "Description"
KEY_PREFIX = "dtrforensics figure "
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def figure_key(content: object) -> str:
    """The key of a figure showing `content`, drawn by this package's renderers."""
    import matplotlib
    digest = hashlib.sha256()
    digest.update(repr(content).encode("utf-8", "surrogateescape"))
    digest.update(matplotlib.__version__.encode())
    for module in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(module.name.encode())
        digest.update(module.read_bytes())
    return KEY_PREFIX + digest.hexdigest()


def png_text(path: str | os.PathLike, field: str) -> str | None:
    """The value of the PNG's first uncompressed text chunk (`tEXt`) named `field`,
    read up to the image data; None: no such chunk, or not a PNG."""
    with open(path, "rb") as f:
        if f.read(8) != PNG_SIGNATURE:
            return None
        while True:
            head = f.read(8)
            if len(head) < 8:
                return None
            length, kind = struct.unpack(">I4s", head)
            if kind in (b"IDAT", b"IEND"):
                return None
            data = f.read(length)
            f.seek(4, os.SEEK_CUR)                      # the chunk's CRC
            if kind == b"tEXt":
                name, _, value = data.partition(b"\0")
                if name == field.encode("latin-1"):
                    return value.decode("latin-1")


def svg_has(path: str | os.PathLike, key: str) -> bool:
    """The SVG's Dublin Core description is `key` (matplotlib's metadata block)."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    return f"<dc:description>{key}</dc:description>" in text


def is_current(paths: list[Path], key: str) -> bool:
    """Every file of the figure (PNG and SVG) exists and carries `key`."""
    try:
        return all(png_text(p, KEY_FIELD) == key if p.suffix == ".png" else svg_has(p, key)
                   for p in paths)
    except OSError:
        return False


def save_figure(draw: Callable[[], object], stem: str | os.PathLike, content: object,
                ) -> tuple[list[Path], bool]:
    """STEM.png and STEM.svg of the figure `draw()` makes, which shows `content`:
    drawn and written (atomically, as `sweep_plot.save`) unless both files are
    already that figure. Returns the paths and whether they were written."""
    from .sweep_plot import figure_paths, save
    key = figure_key(content)
    paths = figure_paths(stem)
    if is_current(paths, key):
        return paths, False
    return save(draw(), stem, metadata={KEY_FIELD: key}), True
