"""The worked example of docs/api.md runs as written and prints what the page says."""

from __future__ import annotations

import doctest
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def test_the_api_worked_example(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)                   # recordings/ and sweeps land here
    result = doctest.testfile(str(DOC), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 10
    assert result.failed == 0, f"{result.failed} example(s) of docs/api.md failed"


def test_every_api_function_is_documented():
    from dtrforensics import api
    page = DOC.read_text()
    for name in api.__all__:
        assert f"api.{name}(" in page, name
