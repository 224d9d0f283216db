"""The sweep tests' synthetic logs and readers (test_sweep.py and the modules
beside it: extend, rounds, lock, honest, estimate, edges, plot, cluster, tui).

`hole_log(pad)` is a 14-op log found by searching random small logs with the
engine; under DTR its budget axis is (bytes, pad = 0):

    0..391 OOM | 392..423 ok | 424..439 OOM (the hole) | 440.. ok      peak 536

A constant of `pad` bytes that no op reads is resident all along: it shifts
every budget above by `pad` and changes nothing else. `chain_log` is a longer
random chain (a few ms per replay), for runs worth interrupting.
"""

from __future__ import annotations

from logdsl import Log

from dtrforensics.engine.replay import replay
from dtrforensics.sweep import runner
from dtrforensics.sweep.store import SweepStore

VOLATILE = ("wall_seconds", "cpu_seconds", "worker", "finished_at")


def hole_log(pad: int = 0) -> Log:
    log = Log().const("w", 8)
    if pad:
        log.const("pad", pad)
    return (log.call("t0", "op0", ["w"], 28, 96).call("t1", "op1", ["w"], 50, 64)
            .call("t2", "op2", ["t1"], 44, 96).call("t3", "op3", ["t2", "w", "t0"], 46, 32)
            .call("t4", "op4", ["t0"], 10, 32).release("t3")
            .call("t5", "op5", ["t1", "t0"], 53, 96).release("t2")
            .call("t6", "op6", ["t5", "w", "t1"], 3, 128).release("t4")
            .call("t7", "op7", ["t5", "t6"], 55, 128).release("t5")
            .call("t8", "op8", ["t7"], 25, 64)
            .call("t9", "op9", ["w"], 7, 16).release("t8")
            .call("t10", "op10", ["w", "t9", "t6"], 14, 48)
            .call("t11", "op11", ["t10"], 35, 48).release("t0")
            .call("t12", "op12", ["t10", "t7"], 38, 16).release("t1")
            .call("t13", "op13", ["t6", "w", "t12"], 44, 48).release("t11"))


def chain_log(n: int = 200, seed: int = 1) -> Log:
    """A longer random chain (a few ms per replay): for runs worth interrupting."""
    import random
    rng = random.Random(seed)
    log = Log().const("w", 64)
    live, prev = ["w"], "w"
    for i in range(n):
        args = [prev] + ([rng.choice(live)] if rng.random() < 0.5 else [])
        log.call(f"t{i}", "f", args, rng.randint(1, 100), rng.choice([64, 128, 256, 512]))
        live.append(f"t{i}")
        prev = f"t{i}"
        if len(live) > 40:
            log.release(live.pop(rng.randrange(1, len(live) - 5)))
    return log


def write_logs(root, padded: bool = False) -> dict[str, str]:
    """The sweep tests' logs written into `root`: name -> path."""
    logs = [("hole", hole_log()), ("chain", chain_log())]
    if padded:
        logs.insert(1, ("padded", hole_log(6665)))
    out = {}
    for name, log in logs:
        path = root / f"{name}.log"
        path.write_text(log.text())
        out[name] = str(path)
    return out


def table(path) -> list[dict]:
    rows = SweepStore(path).read_runs().to_pylist()
    return sorted(({k: v for k, v in r.items() if k not in VOLATILE} for r in rows),
                  key=lambda r: (r["policy"], r["budget"], r["rep"]))


def keys(path) -> list[tuple]:
    return [(r["policy"], r["budget"], r["rep"]) for r in SweepStore(path).read_runs().to_pylist()]


def walk(program, lo=0):
    """(lo, hi, outcome) of every execution from budget `lo` up, by the engine."""
    out, b = [], lo
    while True:
        s = replay(program, budget=b).summary
        out.append((*s.budget_interval, s.outcome))
        if s.budget_interval[1] is None:
            return out
        b = s.budget_interval[1] + 1


class FakeAxis:
    """Budgets 0..999 in intervals of width 7 (the last one unbounded above)."""

    def run(self, b):
        lo = b - b % 7
        return lo, (None if lo >= 994 else lo + 6)


class Crash(Exception):
    pass


class CrashAfter(runner.SweepObserver):
    def __init__(self, n):
        self.n = n

    def finished(self, row):
        self.n -= 1
        if self.n == 0:
            raise Crash
