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


def test_scores_shown_together_keep_the_digits_that_order_them():
    """A victim and a runner-up 1e-9 apart in relative terms read apart (six
    digits would show a tie the engine never saw); equal scores read equal."""
    from dtrforensics.render.units import score_format
    victim, runner_up = 2.4664512345e-06, 2.4664512377e-06
    fmt = score_format([victim, runner_up, None])
    assert f"{victim:.6g}" == f"{runner_up:.6g}"               # what six digits would show
    assert fmt(victim) != fmt(runner_up) and fmt(victim) < fmt(runner_up)
    assert float(fmt(victim)) < float(fmt(runner_up))
    assert fmt(None) == "-"
    assert score_format([1.5e-07, 1.5e-07]).digits == 6                   # a real tie
    assert score_format([8.818103451000077e-07, 9.323328323446858e-07]).digits == 6
    nearest = 0.1 + 0.2
    assert score_format([0.3, nearest])(nearest) == repr(nearest)         # 17 digits at most
