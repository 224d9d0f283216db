"""The kernel's state layout (engine/layout.py): every scalar has one role, and
what reads roles (digest, splicing, extremes) reads them from there."""

from __future__ import annotations

import numpy as np

from dtrforensics.engine import digest, prefixes
from dtrforensics.engine import layout as L
from dtrforensics.engine.state import BudgetInterval, Extremes


def scalar_names() -> dict[int, str]:
    return {v: k for k, v in vars(L).items() if k.startswith("S_") and isinstance(v, int)}


def test_every_scalar_has_exactly_one_role():
    names = scalar_names()
    assert sorted(names) == list(range(L.N_SCALARS))
    for i in range(L.N_SCALARS):
        roles = [role for role, members in L.ROLES.items() if i in members]
        assert len(roles) == 1, f"{names[i]}: roles {roles}"


def test_the_readers_of_roles_take_them_from_the_layout():
    assert digest.STEERING.tolist() == list(L.STEERING)
    assert prefixes.ADDITIVE.tolist() == list(L.ADDITIVE)
    sc = np.zeros(L.N_SCALARS, dtype=np.int64)
    Extremes(BudgetInterval(1, 2), 3, 4, (5, 6, 7)).write(sc)
    assert np.flatnonzero(sc).tolist() == sorted(L.EXTREMES)
    assert sc[list(L.EXTREMES)].tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert Extremes.read(sc) == Extremes(BudgetInterval(1, 2), 3, 4, (5, 6, 7))


def test_a_budget_interval_has_one_sentinel_for_no_bound():
    open_ended = BudgetInterval(10)
    assert open_ended.hi is None and open_ended.admits(2**62) and not open_ended.admits(9)
    bounded = open_ended.meet(BudgetInterval(0, 21))
    assert bounded.pair() == (10, 20) and bounded.admits(20) and not bounded.admits(21)
    sc = np.zeros(L.N_SCALARS, dtype=np.int64)
    Extremes().write(sc)
    assert sc[L.S_HI_TRUE] == L.NO_HI and sc[L.S_MAXPIN_OP] == -1


def test_a_spliced_run_shifts_decisions_by_its_own_evictions():
    final, mine, theirs, own = (np.zeros(L.N_SCALARS, dtype=np.int64) for _ in range(4))
    final[L.S_EVICTIONS], final[L.S_NO_CANDIDATE], final[L.S_POLICY_FAULT] = 40, 38, -1
    theirs[L.S_EVICTIONS], mine[L.S_EVICTIONS] = 30, 31
    own[L.S_BUDGET], final[L.S_BUDGET] = 5, 9
    sc = prefixes._spliced_scalars(final, mine, theirs, own)
    assert (sc[L.S_EVICTIONS], sc[L.S_NO_CANDIDATE], sc[L.S_POLICY_FAULT]) == (41, 39, -1)
    assert sc[L.S_BUDGET] == 5
