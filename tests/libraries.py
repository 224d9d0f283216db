"""The model libraries a test module needs, looked up without importing them.

`pytest.importorskip("timm")` at a module's top imports timm at collection, and
timm brings torchvision and TorchDynamo: seconds of CPU in every worker, for
tests that run on one. `require` skips the module when a library is not
installed, as importorskip would; the tests import the library when they use it.
"""

from __future__ import annotations

from importlib.util import find_spec

import pytest


def require(*names: str) -> None:
    """Skip the calling module unless every package in `names` is installed."""
    for name in names:
        if find_spec(name) is None:
            pytest.skip(f"could not import {name!r}: no module named {name!r}",
                        allow_module_level=True)
