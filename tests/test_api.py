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


def test_result_types_section_is_current():
    """docs/api.md lists every field of every type the API returns, generated
    from the dataclasses (`python -m dtrforensics.api_doc` rewrites it)."""
    from dtrforensics import api_doc
    page = DOC.read_text()
    assert api_doc.BEGIN in page and api_doc.END in page
    generated = page[page.index(api_doc.BEGIN):page.index(api_doc.END) + len(api_doc.END)] + "\n"
    assert generated == api_doc.render(), "docs/api.md is stale: python -m dtrforensics.api_doc"


def test_result_types_cover_every_function_and_field():
    import dataclasses

    from dtrforensics import api, api_doc
    assert set(api.__all__) == set(api_doc.RESULTS) | set(api_doc.NOT_A_TYPE)
    for name in api_doc.RESULTS:        # the docstring names what the function returns
        doc = getattr(api, name).__doc__
        cls = api_doc.result_class(name)
        assert f"`{cls.__name__}`" in doc, name
    page = DOC.read_text()
    for cls in api_doc.reachable([api_doc.result_class(n) for n in api_doc.RESULTS]):
        section = page.split(f"### `{cls.__name__}`\n", 1)[1].split("\n### ", 1)[0]
        for f in dataclasses.fields(cls):
            assert f.name.startswith("_") or f"- `{f.name}`: `{f.type}`" in section, (cls, f.name)


def test_field_comments_are_read_from_the_source():
    from dtrforensics import api_doc
    from dtrforensics.analyses.diff import Rank
    notes = api_doc.field_comments(Rank)
    assert notes["rank"] == "1 = the policy's choice" and "score" not in notes
    assert notes["candidates"] == "storages scored at that decision"
