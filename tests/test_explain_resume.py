"""`explain` resumes its runs with a change from the failing run's snapshots
(analyses/explain_snapshots.py): every run, and the whole search, are what
they are from op 0."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from logs import MIXED_BUDGET, mixed_log, random_logs
from oracle import POLICIES
from public import program_or_skip
from test_prefixes import everything

from dtrforensics.analyses import explain as explain_module
from dtrforensics.analyses import explain_snapshots
from dtrforensics.analyses.explain import explain
from dtrforensics.analyses.explain_snapshots import ResumePoints, resume_limit
from dtrforensics.engine import layout as L
from dtrforensics.engine.baseline import baseline
from dtrforensics.engine.replay import Interventions, replay
from dtrforensics.trace import load_trace

HOLE_INSIDE = 25_177_836  # the embedded trace fails here (test_explain.py)


def comparable(result) -> tuple:
    """A search's JSON and every attempt's whole summary, but wall times."""
    out = json.loads(json.dumps(result.to_json()))
    out["baseline"].pop("wall_seconds")
    summaries = [{k: v for k, v in a.summary.items() if k != "wall_seconds"}
                 for a in result.attempts]
    return out, summaries


def both(program, **kwargs) -> tuple:
    kwargs = dict(record_root=None, jobs=1, **kwargs)
    return (comparable(explain(program, share=False, **kwargs)),
            comparable(explain(program, share=True, **kwargs)))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(program=random_logs(), fraction=st.floats(0.05, 0.9), policy=st.sampled_from(POLICIES))
def test_a_resumed_search_equals_the_search_from_op_0(program, fraction, policy):
    budget = max(1, int(fraction * baseline(program).peak))
    failing = replay(program, budget=budget, policy=policy)
    assume(failing.summary.outcome == "oom" and len(failing.victims) > 0)  # something to try
    scratch, resumed = both(program, budget=budget, policy=policy, max_attempts=8,
                            last_decisions=4)
    event(f"outcome {scratch[0]['baseline']['outcome']}, {len(scratch[1])} attempts")
    assert resumed == scratch


def _changes(program, failing, data) -> list[Interventions]:
    """A forced victim at every decision (and one past the last), retentions
    of storages made early and late, a pair, a forbid and the control."""
    storages = program.storage_ids().tolist()
    decisions = len(failing.victims)
    pick = st.sampled_from(storages)
    out = [Interventions(force=((data.draw(pick), k),)) for k in range(decisions + 1)]
    out += [Interventions(retain=(data.draw(pick),)) for _ in range(4)]
    out += [Interventions(retain=tuple(sorted({data.draw(pick), data.draw(pick)}))),
            Interventions(forbid=((data.draw(pick), data.draw(st.integers(0, decisions))),)),
            Interventions(control=True)]
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=random_logs(), fraction=st.floats(0.05, 0.9), policy=st.sampled_from(POLICIES),
       data=st.data())
def test_a_change_resumed_just_before_it_is_read_runs_as_from_op_0(program, fraction, policy,
                                                                   data):
    """A snapshot after every step: each run resumes from the last one its
    change allows, the hardest case for the rule."""
    budget = max(1, int(fraction * baseline(program).peak))
    cache = ResumePoints(even_spacing=1, max_points=1 << 20)
    failing = replay(program, budget=budget, policy=policy, prefixes=cache)
    assert everything(failing) == everything(replay(program, budget=budget, policy=policy))
    for change in _changes(program, failing, data):
        cache.expect(change)
        got = replay(program, budget=budget, policy=policy, interventions=change,
                     prefixes=cache)
        assert everything(got) == everything(
            replay(program, budget=budget, policy=policy, interventions=change))
    event(f"resumed {cache.resumed}")


def test_the_resume_limit_of_each_change():
    assert resume_limit(Interventions(force=((7, 12), (3, 5)))) == (L.S_EVICTIONS, 5)
    assert resume_limit(Interventions(retain=(40, 9))) == (L.S_CREATED, 9)
    assert resume_limit(Interventions(control=True)) == (L.S_EVICTIONS, 0)
    assert resume_limit(Interventions(forbid=((4, 30),))) == (L.S_EVICTIONS, 0)
    both_kinds = Interventions(retain=(9,), force=((7, 12),))
    assert resume_limit(both_kinds) == (L.S_EVICTIONS, explain_snapshots.NEVER)


def _caches(monkeypatch) -> list[ResumePoints]:
    made: list[ResumePoints] = []
    real = explain_snapshots.ResumePoints

    class Kept(real):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(explain_snapshots, "ResumePoints", Kept)
    return made


def test_the_embedded_hole_resumes_its_attempts_and_finds_the_same_fixes(monkeypatch):
    made = _caches(monkeypatch)
    p = load_trace("hole")
    scratch, resumed = both(p, budget=HOLE_INSIDE)
    assert resumed == scratch and scratch[0]["fixes"]
    (cache,) = made
    assert cache.resumed >= len(scratch[1]) // 2 and cache.stats.steps_skipped > 0


def test_worker_processes_resume_from_the_parents_snapshots():
    """The attempts run in worker processes resume (the same result as from
    op 0, sooner): the parent's snapshots reach them."""
    p = load_trace("hole")
    shared = explain(p, budget=HOLE_INSIDE, record_root=None, jobs=2, share=True)
    unshared = explain(p, budget=HOLE_INSIDE, record_root=None, jobs=1, share=False)
    assert comparable(shared) == comparable(unshared)
    assert len(shared.attempts) > 1 and not any(a.resumed for a in unshared.attempts)
    assert sum(a.resumed for a in shared.attempts) >= len(shared.attempts) // 2
    assert not multiprocessing.active_children()   # its workers end with it


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_a_stopped_search_runs_no_more_of_its_queued_attempts(monkeypatch, tmp_path, stop):
    """Ctrl-C (or an error) while workers run attempts stops them: the
    attempts still queued are dropped, not run before the error surfaces."""
    import slow_attempts
    monkeypatch.setattr(explain_module, "_attempt_in_worker", slow_attempts.slow_attempt)

    def interrupt(attempt, done, planned):
        raise stop("stopped")
    log = tmp_path / "mixed.log"
    log.write_text(mixed_log().text())
    program, records = load_trace(str(log)), tmp_path / "records"
    with pytest.raises(stop):
        explain(program, budget=MIXED_BUDGET, record_root=records, jobs=2,
                max_attempts=20, on_attempt=interrupt)
    whole = explain(program, budget=MIXED_BUDGET, record_root=None, jobs=1, max_attempts=20)
    assert len(whole.attempts) == 20
    recorded = [d for d in records.iterdir() if d.is_dir()]
    assert 1 <= len(recorded) <= 1 + 2 * 2   # the control, the attempts in flight


def _alive(pid: int) -> bool:
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_search_killed_leaves_no_worker_behind(tmp_path):
    """kill -9 of the searching process ends its workers (a fork server's
    children keep the server alive, and waited for attempts for ever)."""
    log, pids = tmp_path / "mixed.log", tmp_path / "pids"
    log.write_text(mixed_log().text())
    pids.mkdir()
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "import slow_attempts\n"
            "from dtrforensics.analyses import explain as m\n"
            "from dtrforensics.trace import load_trace\n"
            "m._attempt_in_worker = slow_attempts.slow_attempt\n"
            f"m.explain(load_trace({str(log)!r}), budget={MIXED_BUDGET}, record_root=None,"
            " jobs=2, max_attempts=20)\n")
    search = subprocess.Popen([sys.executable, "-c", code],
                              env={**os.environ, "SLOW_ATTEMPT_PIDS": str(pids)})
    try:
        for _ in range(600):
            if len(list(pids.iterdir())) >= 2 or search.poll() is not None:
                break
            time.sleep(0.1)
        assert search.poll() is None, "the search ended before its workers started"
    finally:
        search.kill()
        search.wait()
    workers = [int(p.name) for p in pids.iterdir()]
    for _ in range(300):
        if not any(map(_alive, workers)):
            break
        time.sleep(0.1)
    assert workers and not any(map(_alive, workers))


def test_worker_processes_start_the_same_way_on_every_platform(monkeypatch):
    """Never this platform's default (fork on Linux): a clean process, which
    gets the search's state only through the pool's initializer."""
    made = []
    real = explain_module.ProcessPoolExecutor

    def kept(*args, mp_context=None, **kwargs):
        made.append(mp_context.get_start_method())
        return real(*args, mp_context=mp_context, **kwargs)
    monkeypatch.setattr(explain_module, "ProcessPoolExecutor", kept)
    explain(load_trace("hole"), budget=HOLE_INSIDE, record_root=None, jobs=2, share=True)
    assert made == [explain_module.START_METHOD]
    assert explain_module.START_METHOD in ("forkserver", "spawn")


def test_unasked_short_attempts_run_here_long_ones_in_workers(monkeypatch):
    """Without `jobs`, a search whose attempts take less than starting workers
    runs them in this process."""
    made = []
    monkeypatch.setattr(explain_module, "ProcessPoolExecutor",
                        lambda *args, **kwargs: made.append(1) or pytest.fail("no pool"))
    result = explain(load_trace("hole"), budget=HOLE_INSIDE, record_root=None)
    assert len(result.attempts) > 1 and not made
    assert explain_module._workers(None, 4, 0.001) == 1
    assert explain_module._workers(None, 4, explain_module.WORKER_START_SECONDS) == \
        (os.cpu_count() or 1)
    assert explain_module._workers(3, 4, 0.001) == 3


def test_recorded_attempts_replay_from_op_0_and_agree(tmp_path):
    p = load_trace("hole")
    recorded = comparable(explain(p, budget=HOLE_INSIDE, record_root=tmp_path, jobs=1))
    scratch = comparable(explain(p, budget=HOLE_INSIDE, record_root=None, jobs=1,
                                 share=False))
    for a in recorded[0]["attempts"]:
        assert a.pop("recording").startswith(str(tmp_path))
    for a in scratch[0]["attempts"]:
        a.pop("recording")
    assert recorded[0]["attempts"] == scratch[0]["attempts"]


@pytest.mark.public
def test_resnet32_at_0_104_resumed_equals_from_op_0():
    p = program_or_skip("resnet32")
    scratch, resumed = both(p, ratio=0.104)
    assert resumed == scratch
    assert len(scratch[1]) == 32 and scratch[0]["fixes"]


@pytest.mark.parametrize("share, controls", [(True, 1), (False, 2)])
def test_an_unrecorded_control_is_made_once(monkeypatch, share, controls):
    made = []
    real = explain_module.run_once

    def counted(program, *, interventions, **kwargs):
        made.append(interventions.control)
        return real(program, interventions=interventions, **kwargs)
    monkeypatch.setattr(explain_module, "run_once", counted)
    result = explain(load_trace("hole"), budget=HOLE_INSIDE, record_root=None, jobs=1,
                     share=share)
    assert made.count(True) == controls and result.control_matches
    assert made.count(False) == len(result.attempts)


@pytest.mark.parametrize("first", [True, False])
def test_a_search_keeps_nothing_for_the_next(monkeypatch, first):
    """Each search makes its own controls, the unshared one from op 0, in
    either order: nothing a share=True search made leaks into the next."""
    runs: list[tuple[bool, bool]] = []
    real = explain_module.run_once

    def counted(program, *, interventions, prefixes=None, **kwargs):
        runs.append((interventions.control, prefixes is None))
        return real(program, interventions=interventions, prefixes=prefixes, **kwargs)
    monkeypatch.setattr(explain_module, "run_once", counted)
    p = load_trace("hole")
    for share in (first, not first):
        runs.clear()
        result = explain(p, budget=HOLE_INSIDE, record_root=None, jobs=1, share=share)
        controls = [from_op_0 for control, from_op_0 in runs if control]
        assert len(controls) == (1 if share else 2) and result.control_matches
        if not share:
            assert all(from_op_0 for _, from_op_0 in runs)


@pytest.mark.parametrize("loaded", [False, True])
def test_unasked_a_search_shares_once_the_digests_are_loaded(monkeypatch, loaded):
    import importlib
    import sys
    made = _caches(monkeypatch)
    if loaded:
        monkeypatch.setitem(sys.modules, explain_module.DIGESTS,
                            importlib.import_module(explain_module.DIGESTS))
    else:
        monkeypatch.delitem(sys.modules, explain_module.DIGESTS, raising=False)
    p = load_trace("hole")
    result = comparable(explain(p, budget=HOLE_INSIDE, record_root=None, jobs=1))
    assert bool(made) == loaded
    assert result == comparable(explain(p, budget=HOLE_INSIDE, record_root=None, jobs=1,
                                        share=False))


def test_a_change_not_announced_runs_from_op_0():
    p = load_trace("hole")
    cache = ResumePoints(even_spacing=1)
    failing = replay(p, budget=HOLE_INSIDE, prefixes=cache)
    victim = int(failing.victims[-1, 0])
    cache.expect(Interventions(force=((victim, len(failing.victims)),)))
    other = Interventions(retain=(victim,))
    got = replay(p, budget=HOLE_INSIDE, interventions=other, prefixes=cache)
    assert cache.resumed == 0
    assert everything(got) == everything(replay(p, budget=HOLE_INSIDE, interventions=other))
