"""A step that outgrows the neighbourhood arena (STATUS_ARENA_FULL) starts the
run again with a larger arena: the result is the normal run's, observers see
every event once, and a run sharing prefixes resumes exactly too."""

from __future__ import annotations

import numpy as np
from test_prefixes import everything, synthetic_resnet

from dtrforensics.engine.baseline import baseline
from dtrforensics.engine.hooks import Observer
from dtrforensics.engine.prefixes import PrefixCache
from dtrforensics.engine.replay import replay

TINY_ARENA = 16


class Collect(Observer):
    """Every event and candidate, in the order handed over."""

    wants_candidates = True

    def __init__(self):
        self.events, self.first_seqs, self.cands, self.starts, self.finishes = [], [], [], 0, 0

    def on_start(self, run) -> None:
        self.starts += 1

    def on_events(self, batch) -> None:
        self.first_seqs.append(batch.first_seq)
        self.events.append(batch.ints.copy())

    def on_candidates(self, batch) -> None:
        self.cands.append(batch.ints.copy())

    def on_finish(self, summary) -> None:
        self.finishes += 1


def test_a_step_outgrowing_a_tiny_arena_reruns_to_the_same_result():
    program = synthetic_resnet()
    peak = baseline(program).peak
    reran = 0
    for ratio in (0.3, 0.5, 0.8):
        budget = int(ratio * peak)
        plain = replay(program, budget=budget)
        tiny = replay(program, budget=budget, arena_size=TINY_ARENA)
        assert plain.arena_reruns == 0
        reran += tiny.arena_reruns
        assert everything(tiny) == everything(plain)
    assert reran > 0


def test_observers_see_each_event_once_across_reruns():
    program = synthetic_resnet()
    budget = int(0.4 * baseline(program).peak)
    plain, tiny = Collect(), Collect()
    replay(program, budget=budget, observers=[plain])
    result = replay(program, budget=budget, observers=[tiny], arena_size=TINY_ARENA)
    assert result.arena_reruns > 0
    assert (tiny.starts, tiny.finishes) == (1, 1)
    assert np.array_equal(np.concatenate(tiny.events), np.concatenate(plain.events))
    assert np.array_equal(np.concatenate(tiny.cands), np.concatenate(plain.cands))
    sizes = np.cumsum([0] + [len(e) for e in tiny.events])[:-1]
    assert tiny.first_seqs == sizes.tolist()


def test_runs_sharing_prefixes_with_a_tiny_arena_change_nothing():
    program = synthetic_resnet()
    peak = baseline(program).peak
    cache = PrefixCache(first_spacing=4)
    reran = 0
    for ratio in (0.3, 0.31, 0.32, 0.5):
        budget = int(ratio * peak)
        got = replay(program, budget=budget, prefixes=cache, arena_size=TINY_ARENA)
        reran += got.arena_reruns
        assert everything(got) == everything(replay(program, budget=budget))
    assert reran > 0 and cache.stats.resumed > 0


def test_a_run_thrashing_in_the_step_that_fills_the_arena_reruns_too():
    """A run that thrashes (any rematerialization does, at factor 1) with a
    tiny arena reruns and ends as the normal run does."""
    program = synthetic_resnet()
    peak = baseline(program).peak
    reran = 0
    for ratio in (0.3, 0.4, 0.5):
        budget = int(ratio * peak)
        plain = replay(program, budget=budget, thrash_factor=1.0)
        tiny = replay(program, budget=budget, thrash_factor=1.0, arena_size=TINY_ARENA)
        reran += tiny.arena_reruns
        assert everything(tiny) == everything(plain)
    assert reran > 0
