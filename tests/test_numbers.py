"""Ratios shown together read apart (render/units.py `ratio_format`).

A budget ratio is budget / peak. Budgets one byte apart under a 5,210,000 B peak
differ by 1.9e-7, so seven decimals tell them apart where six may not; one byte apart under a
5.21e9 B peak (1.9e-10) not even nine do, so their bytes go beside them.
"""

from __future__ import annotations

from dtrforensics.render.units import ratio_format


def texts(budgets, peak):
    fr = ratio_format([b / peak for b in budgets])
    return [fr(b / peak, b) for b in budgets]


def test_neighbours_get_the_digits_that_tell_them_apart():
    got = texts([530_002, 530_003, 531_000], 5_210_000)     # 0.101728 both, at six
    assert got == ["0.1017278", "0.1017280", "0.1019194"]
    assert len(set(got)) == 3


def test_far_apart_ratios_keep_six_decimals():
    assert texts([1_000_000, 2_000_000], 5_210_000) == ["0.191939", "0.383877"]


def test_bytes_go_beside_ratios_nine_decimals_cannot_tell_apart():
    got = texts([531_000_000, 531_000_001, 600_000_000], 5_210_000_000)
    assert got[:2] == ["0.101919386 (531,000,000 B)", "0.101919386 (531,000,001 B)"]
    assert got[2] == "0.115163148"         # no neighbour reads like it: no bytes
