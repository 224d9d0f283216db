"""Where sweep points run: one interface, three backends.

Every backend runs `run_point` (a `replay` on a program loaded once per worker
process) and hands back futures: `submit(point, timeout, lane)`, `wait(futures,
seconds)` (those done), `close(abort)`, and `capacity` (runs at once).

* `inline`  -- in this process, one run at a time (`jobs=1`).
* `process` -- one `concurrent.futures.ProcessPoolExecutor` of one process per
  worker (a point goes to the worker its lane names); each worker loads the
  program and the compiled kernel once, in the pool's initializer.
* `dask`    -- an existing Dask distributed cluster (`scheduler` address); a
  worker plugin ships the compiled program to every worker once.

Which point runs where is the scheduler's business (`sweep/scheduler.py`),
never what a run yields.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import ctypes
import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
from pathlib import Path

from ..engine.prefixes import PrefixCache
from ..engine.replay import prepared, replay
from ..errors import ClusterError, OptionError
from ..trace.program import Program
from .store import Point, row_from_summary

ENGINES = ("process", "dask", "inline")
PR_SET_PDEATHSIG = 1     # linux/prctl.h
PARENT_WATCH_SECONDS = 0.5
# A dead worker's exit code, when the pool's own thread reaps it first: join() then
# returns with no code, which that thread stores a moment later.
REAP_POLLS = 40
REAP_POLL_SECONDS = 0.05
# fork: workers inherit the loaded program and the compiled kernel from this
# process (ready in milliseconds); spawn re-imports and reloads both (~2 s).
DEFAULT_START_METHOD = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
# Confirmation reruns want processes that share nothing with the sweep: spawn.
REPEAT_START_METHOD = "spawn"


# --- worker side ---------------------------------------------------------------------

_PROGRAMS: dict[str, tuple[Program, float]] = {}
_PREFIXES = PrefixCache()


def worker_threads() -> int:
    """Threads of the Dask worker running this task (1 outside one). The caches a
    run leans on (_PREFIXES, the engine's compiled scores) are per process and not
    thread-safe: a worker with more threads refuses to run points. Read from the
    worker at each run: a global the worker plugin set was set in a copy of this
    module's globals (Dask ships the plugin's class by value), and read 1."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return 1
    try:
        return distributed.get_worker().state.nthreads
    except ValueError:          # not in a Dask worker's task
        return 1


def one_thread_each(address: str, nthreads: dict) -> str | None:
    """The error line for a cluster whose workers run more than one thread each
    (`nthreads`: worker -> threads, as Dask reports it), else None."""
    many = sorted({n for n in nthreads.values() if n > 1})
    if not many:
        return None
    return (f"{sum(n > 1 for n in nthreads.values())} of the {len(nthreads)} Dask workers at "
            f"{address} run {'/'.join(map(str, many))} threads each; {ONE_THREAD}: start them "
            f"with `{worker_command(address)}`")


# Why a sweep's Dask workers run one thread each, said wherever one does not.
ONE_THREAD = "a sweep needs one thread per worker process (its runs share per-process caches)"


def worker_command(address: str) -> str:
    """How to start a worker a sweep can use."""
    return f"dask worker {address} --nthreads 1"


def _install(program: Program, thrash_factor: float) -> None:
    """Keep the program in this process and load the compiled kernel now
    (a budget-0 replay stops at the first allocation)."""
    prepared(program)
    replay(program, budget=0)
    _PROGRAMS[program.sha256] = (program, thrash_factor)


def die_with_parent(parent: int) -> None:
    """Make this worker die when the process `parent` does, even by kill -9:
    Linux's PR_SET_PDEATHSIG, plus a watch thread where that is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl")
    except (OSError, AttributeError):
        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(PARENT_WATCH_SECONDS)
            os._exit(1)
        threading.Thread(target=watch, name="dtrf-parent-watch", daemon=True).start()
    if os.getppid() != parent:     # it died before the request took effect
        os._exit(1)


def _init_process_worker(path: str, sha256: str, thrash_factor: float, parent: int) -> None:
    """ProcessPoolExecutor initializer: die with the sweep, then load the trace
    once per worker (a forked worker already holds it, installed by its parent).
    Ctrl-C is left to the coordinator, which stops submitting and flushes what
    finished."""
    die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sha256 in _PROGRAMS:
        return
    from ..trace.cache import load_program
    program = load_program(path)
    if program.sha256 != sha256:
        raise RuntimeError(f"{path} changed since the sweep started (sha256 {program.sha256})")
    _install(program, thrash_factor)


def _install_from_ipc(sha256: str, payload: bytes, thrash_factor: float) -> None:
    if sha256 in _PROGRAMS:
        return
    import pyarrow as pa

    from ..trace.cache import program_from_table
    table = pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
    _install(program_from_table(table), thrash_factor)


def run_point(sha256: str, point: Point, timeout: float | None) -> dict:
    """Replay one point with the installed program; a runs-table row. Runs in
    one process share prefixes (nearby budgets resume from earlier snapshots),
    except confirmation repeats, which must not lean on other runs."""
    threads = worker_threads()
    if threads > 1:
        raise ClusterError(f"a Dask worker that joined the sweep runs {threads} threads; "
                           f"{ONE_THREAD}: start workers with "
                           f"`{worker_command('ADDRESS')}`")
    program, thrash = _PROGRAMS[sha256]
    cpu = time.process_time()
    result = replay(program, budget=point.budget, policy=point.policy, timeout=timeout,
                    thrash_factor=thrash,
                    prefixes=None if point.stage == "repeat" else _PREFIXES)
    return row_from_summary(point, result.summary, time.process_time() - cpu)


# --- backends -------------------------------------------------------------------------

@contextlib.contextmanager
def heap_frozen():
    """Fork inside this, and the child never collects a reference cycle this
    process left: every object is frozen out of the collector's walks
    (gc.freeze). A cycle's finalizers may need threads the fork did not copy;
    a DuckDB connection collected in a forked child kills it with signal 11.
    Objects the child frees by reference count are not covered. A freeze the
    caller holds is kept (the objects made since stay frozen until its
    unfreeze)."""
    caller_froze = gc.get_freeze_count() > 0
    gc.freeze()
    try:
        yield
    finally:
        if not caller_froze:
            gc.unfreeze()


class InlineBackend:
    """Runs each point at submit time, in this process."""

    def __init__(self, program: Program, thrash_factor: float):
        _install(program, thrash_factor)
        self.sha256 = program.sha256
        self.capacity = 1

    def submit(self, point: Point, timeout: float | None, lane: int = 0) -> cf.Future:
        fut: cf.Future = cf.Future()
        try:
            fut.set_result(run_point(self.sha256, point, timeout))
        except Exception as exc:  # noqa: BLE001 - re-raised by fut.result()
            fut.set_exception(exc)
        return fut

    def wait(self, futures, timeout: float) -> list:
        return [f for f in futures if f.done()]

    def close(self, abort: bool = False) -> None:
        pass


class ProcessBackend:
    """Worker processes that each load the program once (initializer), one pool of
    one process per worker: a point goes to the worker its scheduler names (its
    lane), so runs at neighbouring budgets meet the snapshots they resume from,
    which live in one worker's memory."""

    def __init__(self, program: Program, thrash_factor: float, jobs: int,
                 start_method: str = DEFAULT_START_METHOD):
        if not program.source or not Path(program.source).is_file():
            raise ValueError(f"program {program.name} has no log file to load in workers")
        self.sha256 = program.sha256
        self.capacity = jobs
        context = multiprocessing.get_context(start_method)
        self._forks = context.get_start_method() == "fork"
        self._started: set[int] = set()          # lanes whose pool has forked its worker
        if self._forks:
            _install(program, thrash_factor)     # inherited by every worker
        self._workers: dict[int, list] = {}      # lane -> its pool's processes (to name them)
        self.pools = [cf.ProcessPoolExecutor(
            max_workers=1, mp_context=context, initializer=_init_process_worker,
            initargs=(str(program.source), program.sha256, thrash_factor, os.getpid()))
            for _ in range(jobs)]

    def submit(self, point: Point, timeout: float | None, lane: int = 0) -> cf.Future:
        lane %= len(self.pools)
        pool = self.pools[lane]
        # A fork pool forks all its processes at its first submit, in this thread,
        # and never again (a dead worker breaks the pool; it is not replaced). The
        # worker must never collect a reference cycle of this process (heap_frozen).
        forking = self._forks and lane not in self._started
        with heap_frozen() if forking else contextlib.nullcontext():
            fut = pool.submit(run_point, self.sha256, point, timeout)
        self._started.add(lane)
        self._workers[lane] = list((getattr(pool, "_processes", None) or {}).values()) or \
            self._workers.get(lane, [])
        return fut

    def worker_name(self, lane: int) -> str:
        """'worker 2 of 2 (pid 4242, killed by signal 9)': who ran `lane`'s points."""
        lane %= len(self.pools)
        what = []
        for process in self._workers.get(lane, []):
            process.join(timeout=1)
            for _ in range(REAP_POLLS):
                if process.exitcode is not None:
                    break
                time.sleep(REAP_POLL_SECONDS)
            code = process.exitcode
            end = ("" if code is None else f", killed by signal {-code}" if code < 0
                   else f", exit code {code}")
            what.append(f"pid {process.pid}{end}")
        return f"worker {lane + 1} of {len(self.pools)}" + (f" ({'; '.join(what)})" if what else "")

    def wait(self, futures, timeout: float) -> list:
        done, _ = cf.wait(list(futures), timeout=timeout, return_when=cf.FIRST_COMPLETED)
        return list(done)

    def close(self, abort: bool = False) -> None:
        """Stop the workers; `abort` (an interrupted sweep) does not wait for the
        runs in flight: the workers are terminated, their results dropped."""
        for pool in self.pools:
            if abort:
                terminate_pool(pool)
            else:
                pool.shutdown(wait=True, cancel_futures=True)


class DaskBackend:
    """Tasks on a Dask distributed cluster given by its scheduler's address; a
    worker plugin installs the program on every worker, those that join later
    too. A worker lost mid-map costs nothing but time: the scheduler reruns its
    points elsewhere (results are deterministic). The scheduler lost is a
    `ClusterError`; what finished is stored and the sweep resumes."""

    CAPACITY_SECONDS = 2.0      # how often the cluster's thread count is read again
    WORKERS_SECONDS = 600.0     # how long a cluster with no workers is waited for

    def __init__(self, program: Program, thrash_factor: float, scheduler: str,
                 jobs: int | None = None, notice=None):
        try:
            from distributed import Client
        except ImportError:
            raise ImportError("--engine dask needs the 'dask' extra: "
                              "pip install 'dtrforensics[dask]'") from None
        _quiet_dask_client()
        self.sha256, self.address, self.jobs = program.sha256, scheduler, jobs
        try:
            # waits dask's connect timeout (distributed.comm.timeouts.connect, 30 s)
            self.client = Client(scheduler)
        except (OSError, TimeoutError, ValueError) as exc:
            raise ClusterError(f"cannot reach the Dask scheduler at {scheduler} "
                               f"({_first_line(exc)}): is `dask scheduler` running there?"
                               ) from None
        self.client.register_plugin(_program_plugin(program, thrash_factor),
                                    name=f"dtrf-program-{program.sha256[:16]}")
        self._nthreads: dict | None = None      # worker -> its threads, last read
        self._read_at = float("-inf")
        self.notice = notice or (lambda text: None)
        self._alone_since: float | None = None     # when the last worker left
        self._await_workers(self.notice)

    def _await_workers(self, notice) -> None:
        """Wait for a first worker, saying so: a cluster without workers would
        otherwise hold every point in silence. ClusterError when none came in
        `WORKERS_SECONDS`."""
        if self.client.nthreads():
            return self._check_threads()
        command = worker_command(self.address)
        notice(f"the Dask scheduler at {self.address} has no workers yet: waiting for one "
               f"(start them with `{command}`)")
        try:
            self.client.wait_for_workers(1, timeout=self.WORKERS_SECONDS)
        except (TimeoutError, OSError) as exc:
            self.close(abort=True)
            raise ClusterError(f"the Dask scheduler at {self.address} had no workers for "
                               f"{self.WORKERS_SECONDS:.0f} s ({_first_line(exc)}): start "
                               f"some with `{command}`") from None
        self._check_threads()

    def _check_threads(self) -> None:
        """ClusterError when a worker runs more than one thread (one that joins
        later: `_refuse_threads`)."""
        problem = one_thread_each(self.address, self.client.nthreads())
        if problem:
            self.close(abort=True)
            raise ClusterError(problem)

    def _refuse_threads(self) -> None:
        """ClusterError when a worker that joined while the sweep runs has more than
        one thread (the cluster read again at most every CAPACITY_SECONDS). Such a
        worker refuses the points it gets meanwhile (`run_point`): none of its runs
        is kept."""
        self._threads()
        problem = one_thread_each(self.address, self._nthreads or {})
        if problem:
            raise ClusterError(problem)

    @property
    def capacity(self) -> int:
        """Runs at once: `jobs`, else the cluster's worker threads now (workers
        may join or leave while a sweep runs)."""
        if self.jobs:
            return self.jobs
        return max(1, self._threads() or 0)

    def _threads(self) -> int | None:
        """The cluster's worker threads, read again at most every CAPACITY_SECONDS
        (None until a read succeeds)."""
        now = time.monotonic()
        if now - self._read_at >= self.CAPACITY_SECONDS:
            self._read_at = now
            try:
                self._nthreads = dict(self.client.nthreads())
            except Exception:  # noqa: BLE001 - the scheduler's loss shows up in the results
                pass
        return None if self._nthreads is None else sum(self._nthreads.values())

    def submit(self, point: Point, timeout: float | None, lane: int = 0):
        return self.client.submit(run_point, self.sha256, point, timeout, pure=False)

    def wait(self, futures, timeout: float) -> list:
        """Those of `futures` done within `timeout` seconds. The scheduler lost
        (before or during the wait) cancels them all: they are all done, and
        each one's result then says so (`failure`)."""
        from distributed import wait
        futures = list(futures)
        if self.client.status != "running":
            return futures
        self._refuse_threads()
        try:
            wait(futures, timeout=timeout, return_when="FIRST_COMPLETED")
        except (TimeoutError, cf.CancelledError):
            pass
        done = [f for f in futures if f.done()]
        if not done:
            self._check_alone()
        return done

    def _check_alone(self) -> None:
        """While points wait, the cluster's last worker gone is said once, and
        after `WORKERS_SECONDS` without one is a ClusterError (the points would
        wait in silence for ever)."""
        threads = self._threads()
        if threads is None:
            return
        if threads:
            self._alone_since = None
            return
        now = time.monotonic()
        if self._alone_since is None:
            self._alone_since = now
            self.notice(f"the Dask scheduler at {self.address} has no workers left: waiting "
                        f"for one (start them with `{worker_command(self.address)}`)")
        elif now - self._alone_since >= self.WORKERS_SECONDS:
            raise ClusterError(f"the Dask scheduler at {self.address} has had no workers for "
                               f"{self.WORKERS_SECONDS:.0f} s")

    def failure(self, exc: BaseException) -> str | None:
        """What a failed point's exception says about the cluster: 'scheduler'
        (connection lost), 'worker' (its task killed every worker it ran on), or
        None (the run itself failed)."""
        from distributed import KilledWorker
        if isinstance(exc, KilledWorker):
            return "worker"
        if isinstance(exc, cf.CancelledError) or self.client.status not in ("running",):
            return "scheduler"
        return None

    def close(self, abort: bool = False) -> None:
        try:
            self.client.close(timeout=5 if abort else 30)
        except Exception:  # noqa: BLE001 - a lost scheduler: nothing left to close
            pass


def _quiet_dask_client() -> None:
    """The client's own log lines (reconnect attempts, the traceback of a lost
    connection) would bury the one line a sweep says about it."""
    import logging
    for name in ("distributed.client", "distributed.utils", "distributed.core",
                 "distributed.comm", "distributed.batched"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _program_plugin(program: Program, thrash_factor: float):
    """A WorkerPlugin carrying the compiled program (Arrow IPC bytes): each
    worker deserializes it and loads the kernel once, at setup."""
    import pyarrow as pa
    from distributed.diagnostics.plugin import WorkerPlugin

    from ..trace.cache import program_to_table

    sink = pa.BufferOutputStream()
    table = program_to_table(program)
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    payload = sink.getvalue().to_pybytes()

    class ProgramPlugin(WorkerPlugin):
        idempotent = True

        def __init__(self, sha256, payload, thrash_factor):
            self.sha256, self.payload, self.thrash_factor = sha256, payload, thrash_factor

        def setup(self, worker):
            _install_from_ipc(self.sha256, self.payload, self.thrash_factor)

    return ProgramPlugin(program.sha256, payload, thrash_factor)


def check_engine(engine: str, scheduler: str | None) -> None:
    """OptionError unless `engine` is known and has the scheduler address it needs
    (checked before a sweep makes anything)."""
    if engine not in ENGINES:
        raise OptionError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    if engine == "dask" and not (scheduler or "").strip():
        raise OptionError("--engine dask needs --scheduler ADDRESS, a Dask scheduler's "
                          "address such as tcp://host:8786")


def make_backend(engine: str, program: Program, thrash_factor: float, *, jobs: int,
                 scheduler: str | None = None, start_method: str = DEFAULT_START_METHOD,
                 notice=None):
    """The backend `engine` names; `notice(text)` hears what it waits for."""
    check_engine(engine, scheduler)
    if engine == "inline":
        return InlineBackend(program, thrash_factor)
    if engine == "process":
        return ProcessBackend(program, thrash_factor, jobs, start_method)
    return DaskBackend(program, thrash_factor, scheduler.strip(), notice=notice)


def terminate_pool(pool) -> None:
    """Stop a process pool now: its workers terminated, its queued work dropped
    (a pool shut down the usual way first runs everything still queued). The
    executor keeps its processes private; only its own are stopped."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


def default_jobs() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
