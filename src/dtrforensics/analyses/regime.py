"""Regime switches: where one execution's evictions blow up, and which storages drive it.

Two runs of one trace at nearby budgets can land in different regimes (the
LSTM at 0.265 runs at 1.38x overhead, at 0.264 at 8.78x). `regime(control,
test)` compares them window by window and returns a `RegimeReport`:

- the pressure evictions, rematerializations and rematerialization compute
  of both runs per window of ops (`queries/regime/eviction_rate`);
- the slow run (more pressure evictions) and the onset of its regime
  (`queries/regime/regime_onset`): a window is blown when the slow run evicts
  there at least `factor` times as often as the fast run and at least
  `min_excess` more; the regime is the streak of at least `sustain` consecutive
  blown windows holding the most excess evictions (so a short early blip does
  not pass for it), and its onset is the first op of that streak at which the
  slow run itself evicts `factor` times as often and `min_excess` more: where
  the slow regime's evictions begin;
- the drivers: the storages the slow run evicts again and again from the
  onset op on, by excess over the fast run (`queries/regime/regime_drivers`);
- the link to the first divergence of the two eviction streams
  (`queries/diff/first_divergence`): how many ops before the onset the runs
  parted (negative: the divergence falls after the onset op), and
  whether the first divergent entries are themselves drivers.

On the LSTM (0.265 against 0.264, 100 windows of 81 ops) the streams part at
op 720, where the slow run evicts storage 155, its second strongest driver;
the rates stay equal until the backward pass. A blip at ops 7614-7775 (104 and
13 evictions against 18 and 3) is not the regime: it begins at op 7981, in the
window 7938-8018, where the slow run evicts 3,773 times in one op, and it makes
28,872 of its 38,059 evictions in the last 63 ops (8000-8062).

It computes; rendering (tables, the evictions-per-window figure) is separate.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..concepts import completes
from ..jsonsafe import json_safe
from ..recorder.reader import Recording
from ..rows import fetch_dicts
from .runs import RunIdentity, open_together, same_trace

DEFAULT_WINDOWS = 100   # windows over the longer run when no window size is given
FACTOR = 2.0
MIN_EXCESS = 10
SUSTAIN = 1
TOP_DRIVERS = 10


@dataclass(frozen=True)
class OnsetRule:
    """The rule that places the onset (see the module docstring)."""
    window_ops: int
    factor: float
    min_excess: int
    sustain: int


@dataclass(frozen=True)
class RegimeRun(RunIdentity):
    label: str               # 'a' (control) or 'b' (test)
    overhead: float | None   # null unless the run completed
    evictions: int           # pressure evictions over the whole run
    remats: int
    last_op: int             # the last op the run reached


@dataclass(frozen=True)
class WindowRates:
    evictions: int | None    # null: the run never reached this window
    remats: int | None
    remat_compute: int | None


@dataclass(frozen=True)
class RegimeWindow:
    first_op: int
    last_op: int
    a: WindowRates
    b: WindowRates


@dataclass(frozen=True)
class Onset:
    """The slow regime (see the module docstring): its first window, the op where
    its evictions begin, and how many each run makes from that op to its end."""
    first_op: int            # the regime's first window
    last_op: int
    slow_evictions: int      # in that window
    fast_evictions: int
    op: int                  # where the regime's evictions begin
    regime_last_op: int      # the last op of the regime's last window (or of the runs)
    regime_slow_evictions: int   # from `op` to `regime_last_op`
    regime_fast_evictions: int


@dataclass(frozen=True)
class Driver:
    rank: int
    storage: int
    slow_evictions: int      # pressure evictions from the onset on
    fast_evictions: int
    excess: int
    first_slow_op: int
    bytes: int
    tensor: str
    op_id: int
    paper_op: int
    op_name: str
    module: str | None = None     # where that op ran (the log's where-file)


@dataclass(frozen=True)
class DivergenceLink:
    position: int            # 1-based position in the eviction streams
    a_storage: int | None    # each run's entry there (null: that stream had ended)
    b_storage: int | None
    op_id: int               # op of the entry that comes first in program order
    ops_before_onset: int | None
    drivers_among_entries: tuple[int, ...]  # divergent entries that are drivers


@dataclass(frozen=True)
class RegimeReport:
    a: RegimeRun
    b: RegimeRun
    slow: str | None         # 'a', 'b', or null when both evict equally often
    rule: OnsetRule
    windows: tuple[RegimeWindow, ...]
    onset: Onset | None      # null: no sustained blow-up under the rule
    drivers: tuple[Driver, ...]
    divergence: DivergenceLink | None  # null: identical eviction streams

    def to_json(self) -> dict:
        return json_safe(asdict(self))


def regime(control: Recording, test: Recording, *, window_ops: int | None = None,
           factor: float = FACTOR, min_excess: int = MIN_EXCESS, sustain: int = SUSTAIN,
           top: int = TOP_DRIVERS) -> RegimeReport:
    """Compare the regimes of two recordings of one trace (`control` is run a)."""
    if window_ops is not None and window_ops < 1:
        raise ValueError("the window must be at least 1 op")
    if not (factor >= 1.0 and math.isfinite(factor)) or min_excess < 0 or sustain < 1:
        raise ValueError("the onset rule needs factor >= 1, min_excess >= 0 and sustain >= 1")
    same_trace([control, test])
    con, (ida, idb) = open_together([control, test])
    try:
        runs = {"a": _run(con, control, "a", ida), "b": _run(con, test, "b", idb)}
        if window_ops is None:
            longest = max(r.last_op for r in runs.values()) + 1
            window_ops = max(1, math.ceil(longest / DEFAULT_WINDOWS))
        rule = OnsetRule(window_ops, factor, min_excess, sustain)
        windows = tuple(_window(r) for r in fetch_dicts(
            con, "SELECT * FROM eviction_rate(?, ?, ?)", [ida, idb, window_ops]))
        (o,) = fetch_dicts(con, "SELECT * FROM regime_onset(?, ?, ?, ?, ?, ?)",
                           [ida, idb, window_ops, factor, min_excess, sustain])
        slow = o["slow"]
        onset = None if o["onset_window"] is None else Onset(
            first_op=o["onset_first_op"], last_op=o["onset_last_op"],
            slow_evictions=o["slow_evictions"], fast_evictions=o["fast_evictions"],
            op=int(o["onset_op"]), regime_last_op=int(o["regime_last_op"]),
            regime_slow_evictions=int(o["regime_slow_evictions"]),
            regime_fast_evictions=int(o["regime_fast_evictions"]))
        drivers: tuple[Driver, ...] = ()
        if slow is not None:
            ids = {"a": ida, "b": idb}
            fast = "b" if slow == "a" else "a"
            modules = dict(con.execute("SELECT op_id, module FROM ops WHERE run_id = ? AND "
                                       "module IS NOT NULL", [ida]).fetchall())
            drivers = tuple(Driver(
                rank=r["rank"], storage=r["storage_id"], slow_evictions=r["slow_evictions"],
                fast_evictions=r["fast_evictions"], excess=r["excess"],
                first_slow_op=r["first_slow_op"], bytes=r["bytes"], tensor=r["tensor"],
                op_id=r["op_id"], paper_op=r["paper_op"], op_name=r["op_name"],
                module=modules.get(r["op_id"]))
                for r in fetch_dicts(con, "SELECT * FROM regime_drivers(?, ?, ?, ?)",
                                     [ids[slow], ids[fast], onset.op if onset else 0, top]))
        divergence = _divergence(con, ida, idb, onset, {d.storage for d in drivers})
    finally:
        con.close()
    return RegimeReport(a=runs["a"], b=runs["b"], slow=slow, rule=rule, windows=windows,
                        onset=onset, drivers=drivers, divergence=divergence)


def _run(con, rec: Recording, label: str, run_id: str) -> RegimeRun:
    (r,) = fetch_dicts(con, "SELECT max(op_id) AS last_op, "
                            "count(*) FILTER (WHERE kind = 'compute' AND remat AND NOT collateral) "
                            "AS remats FROM events WHERE run_id = ?", [run_id])
    s = rec.summary
    return RegimeRun(**RunIdentity.of(rec, run_id), label=label,
                     overhead=s.get("overhead") if completes(rec.outcome) else None,
                     evictions=s["evictions"], remats=int(r["remats"]),
                     last_op=int(r["last_op"] if r["last_op"] is not None else -1))


def _window(r: dict) -> RegimeWindow:
    return RegimeWindow(
        first_op=r["first_op"], last_op=r["last_op"],
        **{side: WindowRates(evictions=r[f"{side}_evictions"], remats=r[f"{side}_remats"],
                             remat_compute=r[f"{side}_remat_compute"]) for side in ("a", "b")})


def _divergence(con, ida: str, idb: str, onset: Onset | None,
                drivers: set[int]) -> DivergenceLink | None:
    rows = {r["side"]: r for r in fetch_dicts(
        con, "SELECT side, position, storage_id, op_id, leads FROM first_divergence(?, ?)",
        [ida, idb])}
    if rows["a"]["position"] is None:
        return None
    lead = next((r for r in rows.values() if r["leads"]), None) or next(
        r for r in rows.values() if r["op_id"] is not None)
    entries = [rows[s]["storage_id"] for s in ("a", "b") if rows[s]["storage_id"] is not None]
    return DivergenceLink(
        position=int(rows["a"]["position"]), a_storage=rows["a"]["storage_id"],
        b_storage=rows["b"]["storage_id"], op_id=int(lead["op_id"]),
        ops_before_onset=None if onset is None else onset.op - int(lead["op_id"]),
        drivers_among_entries=tuple(s for s in entries if s in drivers))
