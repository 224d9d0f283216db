import gc
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402
from hang_guard import pytest_configure as guard_configure  # noqa: E402
from hang_guard import (  # noqa: E402,F401 - hooks: no test hangs the suite or outlives it
    pytest_timeout_set_timer,
    pytest_unconfigure,
)
from logs import chain_log, fan_log, shift_log, tiny_program  # noqa: E402
from public import traces_dir  # noqa: E402

from dtrforensics.engine.replay import Interventions  # noqa: E402
from dtrforensics.recorder.record import record_run  # noqa: E402

# A replay that breaks an invariant (docs/semantics.md §13) raises in tests,
# here and in the CLI subprocesses the tests start.
os.environ.setdefault("DTRF_STRICT_INVARIANTS", "1")

# Commands run by the tests (CLI in subprocesses) find the public traces too.
if "DTRF_TRACES" not in os.environ and traces_dir() is not None:
    os.environ["DTRF_TRACES"] = str(traces_dir())


# Parallel workers (pytest-xdist, `make test`): each worker process runs the
# tests as the serial run does. The worker starts with COLUMNS and LINES set
# (80x24) where the run itself had none, and a command's messages would wrap
# at 80 columns there and nowhere else (render/lines.py `width_of`).
TERMINAL_ENV = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist, in the run starting a worker: what the worker's environment must be."""
    node.workerinput["dtrf_terminal_env"] = {k: os.environ.get(k) for k in TERMINAL_ENV}


def pytest_configure(config):
    for key, value in getattr(config, "workerinput", {}).get("dtrf_terminal_env", {}).items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    guard_configure(config)


# A module's tests run on one worker, in their order (`make test`: `--dist
# loadscope`, with this scope): some build on the ones before them (the
# README's commands), and a module's fixtures are made once. The modules named
# here hold a third of the suite in tests that stand alone, and are shared out
# test by test.
SHARED_OUT = {"test_hostile.py"}

# The modules that keep a worker longest (each 25 to 75 s of a 2-core
# machine's worker, measured), longest first: they are handed out first, so
# that none starts when the other worker is nearly done. The rest follow in
# their order, and the tests shared out one by one come last, to fill the gaps.
LONGEST_FIRST = ("test_engine_regions.py", "test_verdict.py", "test_torch_backend.py",
                 "test_cluster.py", "test_wrapping.py", "test_torch_plan.py",
                 "test_torch_runtime.py", "test_readme.py", "test_torch_steps.py")


def pytest_collection_modifyitems(config, items):
    """Order the modules as LONGEST_FIRST says (a module's own tests keep their order)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def place(item) -> int:
        name = item.path.name
        return -1 if name in SHARED_OUT else rank.get(name, len(rank))

    items.sort(key=lambda item: (place(item) < 0, max(place(item), 0)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist: the scheduler of `--dist loadscope`, scoped as above, handing out
    modules in the order of collection (LONGEST_FIRST), not by their count of tests."""
    if config.getvalue("dist") != "loadscope":
        return None
    config.option.loadscopereorder = False
    from xdist.scheduler import LoadScopeScheduling

    class ModulesTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return nodeid if Path(module).name in SHARED_OUT else module

    return ModulesTogether(config, log)


@pytest.fixture(scope="session")
def forensic_recs(tmp_path_factory):
    """Folder -> recordings: shift125/130, chain55/100, fan50, fan50_forced,
    fan50_victims (no candidates), tiny120, tiny105."""
    root = tmp_path_factory.mktemp("forensic")
    shift, chain, fan = (shift_log().program("shift"), chain_log().program("chain"),
                         fan_log().program("fan"))
    tiny = tiny_program()
    for name, program, kw in (
        ("shift125", shift, {"budget": 125}), ("shift130", shift, {"budget": 130}),
        ("chain55", chain, {"budget": 55}), ("chain100", chain, {"budget": 100}),
        ("fan50", fan, {"budget": 50}),
        ("fan50_forced", fan, {"budget": 50, "interventions": Interventions(force=((3, 2),))}),
        ("tiny120", tiny, {"budget": 120}), ("tiny105", tiny, {"budget": 105}),
    ):
        record_run(program, out_dir=root / name, scores="all", **kw)
    record_run(fan, budget=50, out_dir=root / "fan50_victims", scores="victims")
    return root


@pytest.fixture(autouse=True, scope="module")
def young_heap(request):
    """In the PyTorch tests, the suite's own objects are frozen out of the garbage
    collector (`gc.freeze`): a recording collects at the end of the step, and a
    full collection over everything the suite has loaded by then costs a second
    or more each time, against a fraction of that in a `dtrf torch record`
    process. Objects made by the module's tests are collected as they are there."""
    if not request.module.__name__.startswith("test_torch_"):
        yield
        return
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


@pytest.fixture
def one_thread():
    """PyTorch on one intra-op thread: more threads may sum in a different order
    from run to run, one does not (the torch tests compare values bitwise)."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
