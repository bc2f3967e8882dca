"""A small process-pool map for independent runs (folds, grid points) that stops promptly.

Ctrl-C reaches the parent only (workers ignore SIGINT): the parent cancels the queued tasks and
sends each worker SIGTERM (each process the pool started, and no other of the parent's children:
a ``multiprocessing.Process`` of the calling program's own, or another pool's, runs on), which raises :class:`Interrupted` in the task it is running (or makes
an idle worker skip whatever it is handed next), sends it again every second to those still
running (one that came just before a task blocked in a call was handled only when the call
returned), waits a bounded time for them to exit, kills any that did not, and re-raises. A
worker that runs a pool of its own passes the stop on the same way. While the parent starts
numba's compiler (half a second on a 2-core machine) and forks workers, a Ctrl-C is held back
and raised after (``fedsim.signals.sigint_deferred``). The workers are forked with no thread of
fedsim's alive (the progress display's is stopped meanwhile: ``fedsim.forks.threads_paused``). A
forked worker writes through ``sys.stdout`` and ``sys.stderr`` objects of its own: the ones it
inherits may hold a lock that another thread of the parent (the program's own, another point's
pool's) held at the fork, for ever (``fedsim.forks.own_std_streams``), and so may tqdm's lock,
replaced there (``fedsim.forks.fresh_tqdm_lock_in_child``). Workers know the parent's plug-ins:
inherited when forked, loaded again (the same files, and the entry points if the parent loaded
them) when started by spawn or forkserver. Workers also send what their running network is doing (its round, messages and
clock, see ``fedsim.experiment.live``) to the parent's active progress display about once a
second, through a pipe, from a thread stopped while the worker forks (a point's ``TcpNetwork``).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import numbers
import os
import pickle
import signal
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Iterable

from ..experiment.errors import UsageError
from ..forks import own_std_streams, pause_around_forks, threads_paused, wait_for_os_thread_exit
from ..signals import sigint_deferred

__all__ = ["Interrupted", "MainNotImportable", "PluginLoadError", "ProcessDied", "check_main_importable",
           "count_done", "default_workers", "pmap"]

STOP_GRACE = 10.0  # seconds workers get to leave after SIGTERM before SIGKILL
STOP_RESEND = 1.0  # seconds between SIGTERMs to a worker that has not left yet (see _stop)


class Interrupted(BaseException):
    """Raised inside a worker's task when the parent stops the pool (Ctrl-C). A BaseException,
    like KeyboardInterrupt, so that code catching ``Exception`` does not take it for a failure."""


class ProcessDied(BrokenProcessPool):
    """``on_error``'s ``exc`` (see :func:`pmap`) when a task's process died before it returned:
    ``exitcode`` is the process's (``-N``: killed by signal N, as ``multiprocessing`` has it; None
    when not known) and ``how`` says it in words (``was killed by signal SIGKILL``, ``exited with
    status 3``, ``died``)."""

    def __init__(self, exitcode: int | None) -> None:
        self.exitcode = exitcode
        if exitcode is None:
            self.how = "died"
        elif exitcode < 0:
            try:
                name = signal.Signals(-exitcode).name
            except ValueError:
                name = f"signal {-exitcode}"
            self.how = f"was killed by {name}" if name.startswith("signal ") else f"was killed by signal {name}"
        else:
            self.how = f"exited with status {exitcode}"
        super().__init__(f"the task's process {self.how} before it returned its result")

    def __reduce__(self):
        return (type(self), (self.exitcode,))


class PluginLoadError(Exception):
    """Raised by each task of a worker (started by spawn or forkserver) in which the parent's
    plug-ins did not load: ``summary`` is the error in one line (what the plug-in raised, with the
    note naming its file, or its module and entry point; and the worker's start method),
    ``details`` its traceback in the worker; ``str()`` is both. Raised in the worker's initializer,
    the error broke the pool: its traceback went to stderr as "Exception in initializer:", and a
    sweep's points failed as "the point's process exited with status 0 before it finished"."""

    def __init__(self, summary: str, details: str = "") -> None:
        self.summary, self.details = summary, details
        super().__init__(summary + (f"\n\n{details}" if details else ""))

    def __reduce__(self):
        return (type(self), (self.summary, self.details))


class MainNotImportable(UsageError):
    """Raised (by :func:`check_main_importable`, before any worker starts) when the workers' start
    method (spawn, forkserver) runs the main module again in each worker from its file, and that
    file does not exist: a program read from standard input (``python -``, whose main module is
    ``'<stdin>'``), or a script removed since it started. Each worker died as it started, so
    every task failed alike (a sweep's every point: "the point's process exited with status 1",
    Python's traceback on stderr once per point). A ``UsageError``: the command line says it in
    one line (status 2)."""


def check_main_importable() -> None:
    """Raise :class:`MainNotImportable` if the worker processes of this process's start method
    could not start because they cannot run its main module again: under spawn and forkserver,
    each worker runs it from its file (as ``multiprocessing`` prepares it:
    ``multiprocessing.spawn.get_preparation_data``) unless it has a module name (``python -m``);
    a main module with no file (``python -c``, an interactive session) is not run. Nothing for fork,
    whose workers inherit it."""
    method = multiprocessing.get_start_method()
    if method == "fork":
        return
    from multiprocessing import spawn

    path = spawn.get_preparation_data("fedsim-check").get("init_main_from_path")
    if path is None or os.path.isfile(path):
        return
    if os.path.splitext(os.path.basename(path))[0] == "ipython":  # (which spawn does not run again)
        return
    given = getattr(sys.modules.get("__main__"), "__file__", path)
    stdin = "; a program read from standard input, as by `python -`" if given == "<stdin>" else ""
    raise MainNotImportable(
        f"the worker processes cannot be started: Python's multiprocessing starts them by {method}, which runs "
        f"the main module again in each, from its file, and this program's main module is {given!r} ({path}: "
        f"no such file{stdin}); run the program from a file, or have the workers forked "
        f"(multiprocessing.set_start_method('fork'), where the platform has it)")


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


def count_done(report: Callable[[int], None]) -> Callable[[int, Any], None]:
    """An ``on_done`` for :func:`pmap` that calls ``report(k)`` with the number of tasks finished
    so far (1, 2, ..., in the order they finish). ``on_done``'s first argument is the task's
    index, not a count: reported as a count, tasks finishing out of order made a progress
    display jump back and forth and restart its time estimate."""
    finished = [0]
    lock = threading.Lock()

    def on_done(i: int, result: Any) -> None:
        with lock:
            finished[0] += 1
            k = finished[0]
        report(k)

    return on_done


def _workers(workers: Any) -> int:
    """``pmap``'s ``workers``: None is one per core; else an integer of at least 1 (``ValueError``
    naming it: ``max(1, int(workers))`` ran 0, -3 and 1.5 as one process and True as one, silently)."""
    if workers is None:
        return default_workers()
    if isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or workers < 1:
        raise ValueError(f"pmap: workers must be an integer of at least 1 (or None: one per core), got {workers!r}")
    return int(workers)


def pmap(fn: Callable[[Any], Any], tasks: Iterable[Any], workers: int | None = None,
         on_done: Callable[[int, Any], None] | None = None,
         cost: Callable[[Any], float] | None = None,
         on_error: Callable[[int, BaseException], None] | None = None) -> list[Any]:
    """``[fn(t) for t in tasks]``, on ``workers`` processes (1: in this process). Results come
    back in task order; ``on_done(i, result)`` is called as each finishes (``i`` the task's
    index). ``fn`` must be a module-level function and tasks picklable. Worker processes use
    one BLAS thread each; forked ones inherit numba's compiler, started here before the pool
    forks them (``fedsim.math.jit.warm_up``: 50-90 MB and a quarter of a second each otherwise).
    Forked workers inherit the plug-ins loaded here (``fedsim.protocols.load_plugins``: ``--plugin``
    files, ``$FEDSIM_PLUGINS``, entry points); under the spawn or forkserver start method each
    worker loads the same ones (``plugin_state()``: the files, the entry points if they were loaded
    here, and what of them was removed here since, forgotten there too) before its first task;
    where they do not load, each task of that worker raises :class:`PluginLoadError` (with
    ``on_error``: that task's failure), one holding the plug-in's objects too (such tasks are sent
    pickled and unpickled after that check: :func:`_submit`).
    Under spawn and forkserver, a main module the workers cannot run again (a program read from
    standard input, ``python -``) raises :class:`MainNotImportable` before any worker starts.

    ``cost(task)``, if given, is a rough relative duration: tasks start longest first (ties in
    task order), so a long task does not start last and leave the other workers idle.

    Raises ``ValueError`` for ``workers`` that is neither None (one per core) nor an integer of at
    least 1, before any task runs.

    Blocks until every task has finished. An exception from a task, or KeyboardInterrupt in
    this process, stops the other workers (see the module docstring) and is raised here; the
    tasks finished before it have had their ``on_done``. Only the processes this call started are
    stopped: the caller's other child processes (a ``multiprocessing.Process``, another pool, a
    server) are left alone.

    With ``on_error``, a task that fails does not stop the others: ``on_error(i, exc)`` is called
    instead of ``on_done`` (its result stays None), ``exc`` being what ``fn`` raised (``SystemExit``
    included) or :class:`ProcessDied` (a ``BrokenProcessPool``) when its process died (killed, out
    of memory, a crash in compiled code, ``os._exit``), with its exit code or signal, or was stopped
    by a SIGTERM from another process than this one (``kill PID``: ``ProcessDied`` of exit code
    ``-15``, its task having left as on Ctrl-C). Each task then runs in a process of its own, also with ``workers=1``, so that
    one process's death cannot take other tasks down with it. KeyboardInterrupt still stops
    everything and is raised here."""
    tasks = list(tasks)
    if on_error is not None:
        return _pmap_isolated(fn, tasks, workers, on_done, on_error, cost)
    if cost is not None and workers != 1 and len(tasks) > 1:
        order = sorted(range(len(tasks)), key=lambda i: -cost(tasks[i]))
        done = (lambda j, r: on_done(order[j], r)) if on_done else None
        permuted = pmap(fn, [tasks[i] for i in order], workers, done)
        results: list[Any] = [None] * len(tasks)
        for j, i in enumerate(order):
            results[i] = permuted[j]
        return results
    workers = _workers(workers)
    if workers == 1 or len(tasks) <= 1:
        out = []
        for i, t in enumerate(tasks):
            out.append(fn(t))
            if on_done:
                on_done(i, out[-1])
        return out
    results = [None] * len(tasks)
    check_main_importable()
    _warm_before_fork()
    beats, beat_out = _beat_pipe()
    seen: set = set()
    ctx, made = _recording_context()  # the pool's processes, the only ones _stop may signal
    ex = ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=ctx, initializer=_init_worker,
                             initargs=(beat_out, os.getpid(), _worker_plugins()))
    try:
        # (the workers are forked here, by the first submit, before the pool starts a thread:
        # with no thread of fedsim's alive either, see _pmap_isolated)
        with threads_paused(), sigint_deferred():
            futs = {_submit(ex, fn, t): i for i, t in enumerate(tasks)}
        pending = set(futs)
        while pending:
            finished, pending = _wait_a_while(pending)
            _forward_beats(beats, seen)
            for f in sorted(finished, key=futs.get):
                i = futs[f]
                results[i] = f.result()
                if on_done:
                    on_done(i, results[i])
    except BaseException:
        _stop([ex], made)
        raise
    else:
        ex.shutdown(wait=True)
    finally:
        _forward_beats(beats, seen, final=True)
        beats.close()
        beat_out.close()
    return results


def _pmap_isolated(fn, tasks: list, workers: int | None, on_done, on_error, cost) -> list[Any]:
    """:func:`pmap` with ``on_error``: a one-process pool per task, at most ``workers`` at once."""
    workers = _workers(workers)
    order = list(range(len(tasks)))
    if cost is not None:
        order.sort(key=lambda i: -cost(tasks[i]))
    order.reverse()  # popped from the end
    results: list[Any] = [None] * len(tasks)
    if tasks:
        check_main_importable()
        _warm_before_fork()
    plugins = _worker_plugins()
    beats, beat_out = _beat_pipe()
    seen: set = set()
    running: dict[Any, tuple[int, ProcessPoolExecutor, list]] = {}
    starting: tuple[ProcessPoolExecutor, list] | None = None  # a pool made, its task not yet in running
    try:
        while order or running:
            while order and len(running) < workers:
                i = order.pop()
                ctx, made = _recording_context()
                # A Ctrl-C while the worker is forked is raised once it is recorded in running
                # (so stopped with the others), and one that reaches the new worker before it
                # ignores SIGINT (a terminal's Ctrl-C goes to the whole process group) is
                # recorded there, not raised: raised in the worker's initializer, it printed a
                # traceback and the point was reported failed ("the point's process exited with
                # status 0 before it finished"). No thread of fedsim's is alive as the worker is
                # forked (threads_paused: the progress display's is stopped meanwhile); the other
                # points' pools' threads are (concurrent.futures' and multiprocessing's: a child
                # uses nothing of theirs, fedsim.forks)
                with threads_paused(), sigint_deferred():
                    ex = ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=_init_worker,
                                             initargs=(beat_out, os.getpid(), plugins))
                    starting = (ex, made)
                    running[_submit(ex, fn, tasks[i])] = (i, ex, made)
                    starting = None
            finished, _ = _wait_a_while(running)
            _forward_beats(beats, seen)
            for f in sorted(finished, key=lambda f: running[f][0]):
                i, ex, made = running.pop(f)
                ex.shutdown(wait=True)
                exc = f.exception()
                if isinstance(exc, BrokenProcessPool):  # say how: a signal's name, an exit status
                    codes = [p.exitcode for p in made if p.exitcode is not None]
                    exc = ProcessDied(codes[0] if codes else None)
                if exc is None:
                    results[i] = f.result()
                    if on_done:
                        on_done(i, results[i])
                elif isinstance(exc, KeyboardInterrupt):
                    raise exc
                else:
                    if isinstance(exc, Interrupted):
                        # a SIGTERM from another process (``kill PID``, a system agent): this one
                        # stops its workers only once it has left this loop. Raised here, it ended
                        # a sweep with "Interrupted: stopped by the parent (Ctrl-C)", a traceback
                        # and status 1, its other points stopped; it is that task's failure
                        exc = ProcessDied(-signal.SIGTERM)
                    on_error(i, exc)
    except BaseException:
        pools = [(ex, made) for _, ex, made in running.values()] + ([starting] if starting else [])
        _stop([ex for ex, _ in pools], [p for _, made in pools for p in made])
        raise
    finally:
        _forward_beats(beats, seen, final=True)
        beats.close()
        beat_out.close()
    return results


def _submit(ex: ProcessPoolExecutor, fn: Callable[[Any], Any], t: Any) -> Any:
    """``ex.submit(_task, fn, t)``; under the spawn or forkserver start method, ``(fn, t)`` are sent
    pickled, as bytes, and unpickled in the task (:func:`_task_packed`) after the worker's plug-in
    check: a task holding a plug-in's objects could not be unpickled in a worker whose plug-in did
    not load, and the executor's unpickling outside any task killed that worker (the task failed
    as a dead process, or broke the pool) instead of failing with the :class:`PluginLoadError` the
    worker kept. Forked workers inherit the plug-ins: their tasks go as before, pickled once. A task
    that does not pickle goes as before too (the executor sets the error on its future)."""
    if multiprocessing.get_start_method() == "fork":
        return ex.submit(_task, fn, t)
    try:
        blob = pickle.dumps((fn, t), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return ex.submit(_task, fn, t)
    return ex.submit(_task_packed, blob)


def _wait_a_while(futures: Iterable[Any]) -> tuple[set, set]:
    """``concurrent.futures.wait(futures, 0.5 s, FIRST_COMPLETED)``, with a Ctrl-C held back until
    it returns (half a second at most). ``wait`` takes each future's lock in turn, in Python, and
    gives them back the same way: a KeyboardInterrupt raised between two left a lock held, which
    the pool's manager thread then waited for as it set that future's result, and the command
    hung as it ended (concurrent.futures joins that thread at exit)."""
    with sigint_deferred():
        done, not_done = wait(list(futures), timeout=0.5, return_when=FIRST_COMPLETED)
    return done, not_done


def _warm_before_fork() -> None:
    """Start numba's compiler here (``fedsim.math.jit.warm_up``) before a pool forks its workers:
    each forked worker that called a compiled kernel started its own otherwise (50-90 MB of its
    own memory and a quarter of a second of CPU per process); forked after, they share this one.
    Only for the fork start method (other start methods begin a fresh interpreter, which inherits
    nothing); a no-op without numba, with ``FEDSIM_NO_NUMBA``, or once done in this process (or
    in the one it was forked from)."""
    if multiprocessing.get_start_method() != "fork":
        return
    from ..math import jit

    # A Ctrl-C is raised after it: numba's first compile imports SciPy and NumPy's random module,
    # whose compiled import code lost a KeyboardInterrupt raised in it (the sweep ran on, its
    # points and all, until a second Ctrl-C); raised in an import elsewhere, the sweep said
    # "interrupted" and then died of SIGINT (status -2, not 130)
    with sigint_deferred():
        jit.warm_up()


def _worker_plugins() -> Any:
    """What a pool's workers load to know this process's plug-ins (protocols, link models,
    transports): ``plugin_state()`` (``fedsim.protocols``: the plug-in files, what of each this
    process still holds, the entry points if loaded), for the spawn and forkserver start methods,
    whose workers begin a fresh interpreter that knows only the built-in ones (a sweep of a plug-in
    protocol failed in every point there, and its tasks, naming the plug-in's module, could not
    even be unpickled). None for fork (a forked worker inherits them) and when this process loaded
    none."""
    if multiprocessing.get_start_method() == "fork":
        return None
    from ..protocols import plugin_state

    state = plugin_state()
    return state if state.files or state.holders or state.entry_points else None


def _recording_context() -> tuple[Any, list]:
    """A multiprocessing context (of the default start method) for a ProcessPoolExecutor that
    records the processes it starts (``made``), so that a pool broken by its worker's death can
    say how that worker ended (its ``exitcode``): the executor's ``BrokenProcessPool`` does not;
    and so that :func:`_stop` signals those processes and no others of this process's children
    (recorded as each is made, whenever the executor makes it: under spawn and forkserver it starts
    them as tasks are submitted, not all at once)."""
    kind = type(multiprocessing.get_context(multiprocessing.get_start_method()))
    ctx = kind()  # a context of its own: the Process set below is this pool's only
    made: list = []

    def process(*args: Any, **kwargs: Any) -> Any:
        p = kind.Process(*args, **kwargs)
        made.append(p)
        return p

    ctx.Process = process
    return ctx, made


def _stop(executors: Iterable[ProcessPoolExecutor], processes: Iterable[Any]) -> None:
    """Cancel the ``executors``' queued tasks, SIGTERM each of ``processes`` still running (again
    every STOP_RESEND s to those that have not left), wait up to STOP_GRACE s, SIGKILL the rest.

    ``processes`` are the ones :func:`pmap` started for those executors (recorded as they were
    made: :func:`_recording_context`), and no others: taken as ``multiprocessing.active_children()``
    ("a pmap parent has no others"), they included every process of the program that called pmap
    (a ``multiprocessing.Process`` of its own, another pool, a server), which a Ctrl-C of pmap's,
    or a task's KeyboardInterrupt, SIGTERMed and then SIGKILLed too.

    Sent once, a SIGTERM that reached a worker just before its task entered a blocking call
    (``time.sleep``, a wait on a lock, a socket, a pipe) was handled only when that call
    returned: Python runs a signal's handler between bytecodes, and the call does not look for
    one that came before it blocks. A task in ``time.sleep(30)`` was killed after the grace, its
    temporary folder left. Sent again, the signal interrupts the call, and the handler runs;
    one that has run ignores the next (:func:`_on_term`)."""
    children = [p for p in processes if p.is_alive()]  # (one that has left: its pid may be another's by now)
    for ex in executors:
        ex.shutdown(wait=False, cancel_futures=True)
    for p in children:
        _term(p)
    deadline = time.monotonic() + STOP_GRACE
    again = time.monotonic() + STOP_RESEND
    while True:
        running = [p for p in children if p.is_alive()]
        now = time.monotonic()
        if not running or now >= deadline:
            break
        if now >= again:
            for p in running:
                _term(p)
            again = now + STOP_RESEND
        multiprocessing.connection.wait([p.sentinel for p in running], min(again, deadline) - now)
    for p in children:
        if p.is_alive():
            p.kill()
            p.join(2.0)


def _term(p: Any) -> None:
    """SIGTERM worker process ``p`` (nothing if it has gone)."""
    try:
        os.kill(p.pid, signal.SIGTERM)
    except (ProcessLookupError, TypeError):
        pass


def _beat_pipe() -> tuple[Any, Any]:
    """``(reader, writer)``: the pipe a pool's workers send their figures to the parent through
    (:class:`_Beats`; each pickled beat under ``PIPE_BUF`` bytes, so one write each, whole, never
    interleaved with another worker's). The write end does not block: a beat that finds the pipe
    full (a parent that has not read for a long while) is dropped, and the thread that sent it
    never waits (it is stopped, waited for, as the worker forks: ``fedsim.forks.threads_paused``).
    A pipe, not a ``multiprocessing.Queue``: a queue sends from a thread of its own (its feeder),
    alive in the worker from its first beat on, which no one can stop and start again, and a
    worker running a ``TcpNetwork`` forked its processes with it alive."""
    reader, writer = multiprocessing.Pipe(duplex=False)
    os.set_blocking(writer.fileno(), False)
    return reader, writer


def _forward_beats(beats: Any, seen: set, final: bool = False) -> None:
    """Hand the workers' figures waiting in pipe ``beats`` to the active display, keyed
    ``("worker", pid)``; ``seen`` collects the pids. ``final`` (the pool is done): every worker in ``seen`` is said to
    have finished (``None``), so the display drops them now: a worker's last figures (or a
    killed worker's) stayed on it until it took the worker for dead (``live.silent_after()``, 5 s)
    after the pool ended."""
    from ..experiment.live import active

    display = active()
    while True:
        try:
            if not beats.poll():
                break
            pid, snap = beats.recv()
        except (EOFError, OSError, ValueError):
            break
        seen.add(pid)
        if display is not None and not final:
            display.beat(("worker", pid), snap)
    if final and display is not None:
        for pid in sorted(seen):
            display.beat(("worker", pid), None)


# -- in the workers ---------------------------------------------------------------------------

_STOPPING = False
_IN_TASK = False
_PLUGIN_ERROR: PluginLoadError | None = None  # the parent's plug-ins did not load here (see _init_worker)
_PARENT: int | None = None  # the parent whose death stops this worker (see _stop_with_parent)
_BEATS: "_Beats | None" = None  # this worker's beats (held here: paused, its thread holds it no more)


def _init_worker(beats: Any, parent: int | None = None, plugins: Any = None) -> None:
    """Set a worker up (before it unpickles its first task). ``plugins``: the parent's
    ``plugin_state()`` (``_worker_plugins``), loaded here for a worker that does not inherit them
    (spawn, forkserver); the worker then knows exactly the parent's (not ``$FEDSIM_PLUGINS`` anew:
    the parent's were among its files; not a registration the parent removed since). One that
    does not load there is not raised here (the pool would break, its traceback on stderr): each
    task of this worker raises it, as a :class:`PluginLoadError`, that task's failure."""
    own_std_streams()  # first: before anything here could write
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")  # libraries loaded from now on (PyTorch) start with one thread
    # A forked worker inherits the BLAS pool NumPy started in the parent (as many threads as
    # cores): N workers x N BLAS threads, spinning against each other, made matrix products 5-10x
    # slower (FCF's rounds on Milan: 44 s instead of 5 s). One thread per worker: the workers are
    # the parallelism.
    from threadpoolctl import threadpool_limits

    from ..experiment.allocator import keep_freed_memory

    threadpool_limits(1)
    keep_freed_memory()  # (inherited from a forked parent that set it; set here for other start methods)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    signal.signal(signal.SIGTERM, _on_term)
    if parent is not None:
        _stop_with_parent(parent)
    if plugins is not None:  # (after the thread limits: a plug-in may import NumPy, PyTorch)
        global _PLUGIN_ERROR
        try:
            _load_plugins(plugins)
        except Exception as exc:
            import traceback

            notes = "".join(f" {n}" for n in getattr(exc, "__notes__", None) or ())
            said = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            _PLUGIN_ERROR = PluginLoadError(
                f"{type(exc).__name__}: {said}{notes} (in the task's worker process, started by "
                f"{multiprocessing.get_start_method()}, which loads the parent's plug-ins anew)",
                "".join(traceback.format_exception(exc)).rstrip("\n"))
    from ..experiment.live import NetworkWatch

    global _BEATS
    _BEATS = _Beats(NetworkWatch().start(), beats).start()


def _load_plugins(state: Any) -> None:
    """In a worker: ``fedsim.protocols.load_plugin_state(state)``, the parent's plug-ins as the
    parent holds them, with ``$FEDSIM_PLUGINS`` set aside meanwhile (the parent's files are the
    ones to load, and the parent's environment may have changed since it loaded them: a plug-in
    file calling ``load_plugins`` itself would read it). An error propagates (with the note naming
    the plug-in)."""
    from ..protocols import load_plugin_state

    env = os.environ.pop("FEDSIM_PLUGINS", None)
    try:
        load_plugin_state(state)
    finally:
        if env is not None:
            os.environ["FEDSIM_PLUGINS"] = env

def _stop_with_parent(parent: int) -> None:
    """(Linux) Have the kernel send this worker SIGTERM, as a stop from the parent, when its parent
    dies. A parent killed outright (SIGKILL: the out-of-memory killer, ``kill -9``) cannot stop
    its workers, which ran their tasks to the end as orphans (a sweep's points, written into
    the folders that the same sweep run again was running too). Only for a worker whose parent
    is ``parent`` (not one a fork server started); one whose parent died before this stops.
    The worker then leaves (:func:`_on_term`, :func:`_task`): nobody is left to hand it work, and
    an idle orphan waited for it forever."""
    if not sys.platform.startswith("linux"):
        return
    if os.getppid() != parent:
        if _gone(parent):
            # it died between starting this worker and now (before the kernel could be told):
            # nobody will hand this worker work, and it waited for some for ever (a Ray worker
            # killed as its point's process started, by Ctrl-C's cancel or a killed sweep)
            os._exit(1)
        return  # started by a fork server: its parent is not the pool's
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, signal.SIGTERM, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
            return
    except (OSError, AttributeError):
        return
    global _PARENT
    _PARENT = parent
    if os.getppid() != parent:  # it died before the kernel was told
        os.kill(os.getpid(), signal.SIGTERM)


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (no such process, or on Linux a zombie not reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's: alive
        return False
    if not sys.platform.startswith("linux"):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def _orphaned() -> bool:
    """Whether the parent that started this worker has died: this process was handed to another
    parent, or (Linux) the parent is a zombie, as it is for a moment after being killed, before
    the hand-over (the signal of its death can come first)."""
    if _PARENT is None:
        return False
    return os.getppid() != _PARENT or _gone(_PARENT)


def _on_term(signum: int, frame: Any) -> None:
    global _STOPPING
    again = _STOPPING
    _STOPPING = True
    if _IN_TASK:
        if again:
            # a second SIGTERM (a parent killed outright can signal its death twice): the task is
            # already leaving. Raised again, it cut the task's cleanup short (its run's .partial
            # folder was left behind, half removed)
            return
        raise Interrupted("stopped by the parent (Ctrl-C)")
    if _orphaned():
        os._exit(1)


def _task(fn: Callable[[Any], Any], t: Any) -> Any:
    global _IN_TASK
    if _STOPPING:
        raise Interrupted("stopped by the parent (Ctrl-C)")
    if _PLUGIN_ERROR is not None:
        raise _PLUGIN_ERROR
    _IN_TASK = True
    try:
        return fn(t)
    finally:
        _IN_TASK = False
        if _STOPPING and _orphaned():  # the task has cleaned up (Interrupted); no one awaits its result
            os._exit(1)


def _task_packed(blob: bytes) -> Any:
    """:func:`_task` of a task sent pickled (:func:`_submit`): the worker's plug-in error, if its
    plug-ins did not load, is raised before the task is unpickled (whose plug-in classes the worker
    then does not know)."""
    if _STOPPING:
        raise Interrupted("stopped by the parent (Ctrl-C)")
    if _PLUGIN_ERROR is not None:
        raise _PLUGIN_ERROR
    fn, t = pickle.loads(blob)
    return _task(fn, t)


class _Beats:
    """A worker's ``fedsim-beats`` thread: every ``fedsim.experiment.live.BEAT_EVERY`` seconds (1),
    the running network's figures (``NetworkWatch.snapshot``), the same ones again if nothing moved
    (the display drops a worker it has not heard from for ``live.silent_after()`` seconds,
    ``SILENT_BEATS`` beats: sent only when they changed, the figures of a worker in a long step, a
    client training for 10 s, went from the display after the first 5), and ``None`` once when the
    network has finished (its last figures stayed on the display until it dropped them), written
    to the parent's pipe (:func:`_beat_pipe`). Stopped while the worker forks and started again
    after (``fedsim.forks.threads_paused``: a point's ``TcpNetwork`` forked its processes with this
    thread alive)."""

    def __init__(self, watch: Any, pipe: Any) -> None:
        self.watch, self.pipe = watch, pipe
        self.pid = os.getpid()
        self.last: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._paused = False

    def start(self) -> "_Beats":
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(self._stop,), name="fedsim-beats", daemon=True)
        pause_around_forks(self)
        self._thread.start()
        return self

    def pause_thread(self) -> bool:
        thread = self._thread
        if thread is None or not thread.is_alive() or thread is threading.current_thread():
            return False
        self._stop.set()
        thread.join()  # (a beat never waits: the pipe does not block)
        wait_for_os_thread_exit(thread)  # (join returns a moment before the OS thread has left)
        self._thread, self._paused = None, True
        return True

    def resume_thread(self) -> None:
        if self._paused:
            self._paused = False
            self.start()

    def _run(self, stop: threading.Event) -> None:
        from ..experiment import live

        while not stop.wait(live.BEAT_EVERY):
            if not self.beat():
                pause_around_forks(self, on=False)
                return

    def beat(self) -> bool:
        """Send the figures if there is something to say; False once the parent has gone."""
        snap = self.watch.snapshot()
        if snap is None and self.last is None:
            return True
        try:
            self.pipe.send((self.pid, snap))
        except BlockingIOError:  # the pipe is full: this beat is dropped, the next one may pass
            return True
        except Exception:  # the parent has gone: nobody to tell
            return False
        self.last = snap
        return True
