"""What a process forked from fedsim (a sweep's or ``pmap``'s worker, a TCP run's worker) must
not take over from the threads of its parent, and fedsim's own threads stopped around its forks.

A fork with another thread alive is what CPython 3.12+ warns of ("This process is
multi-threaded, use of fork() may lead to deadlocks in the child", a ``DeprecationWarning``
attributed to the caller): a lock that thread held at the fork stays held in the child for
ever. ``TcpNetwork.run`` forks its workers, and ``fedsim.studies.parallel.pmap`` its pool's,
inside :func:`threads_paused`, which stops the threads fedsim started in this process (the
progress display's ``fedsim-progress``, a pool worker's ``fedsim-beats``: each registered with
:func:`pause_around_forks`) and starts them again once the children are forked; the display's
tqdm bar starts no monitor thread, and a pool worker sends its beats through a pipe, with no
queue's feeder thread. What follows is for the threads still alive at a fork (a program's own,
tqdm's monitor of a bar of its own, the other pools' of a sweep, fedsim's at a fork made
elsewhere): what a child must not use of theirs.

A forked child has only the thread that forked it, and every lock as it was at the fork: one
that another thread of the parent held then stays held in the child for ever. The parent's other
threads at a fork, and what of theirs a child may use:

- the progress display's thread (``fedsim.experiment.context.Progress``, in every run that logs
  or shows progress: ``fedsim run``, a sweep, a worker's own run; stopped while fedsim forks)
  writes lines to ``sys.stderr`` (and redraws a tqdm bar there): its buffer's lock is held while
  a write is under way, for as long as the write blocks (a pipe nobody reads). A child's first
  write to the stream (a warning, a plug-in's print, the traceback of its error) then waited for
  ever, as did ``multiprocessing``'s flush as a worker leaves: :func:`own_std_streams`, the
  first thing a child does. The display's own lock and its log file are held by that thread too,
  but a child never uses the parent's display: a worker's run makes and activates its own, and a
  TCP worker runs actors only (tqdm's lock, class-wide, is another matter: see the last item).
- ``concurrent.futures``' manager threads and ``multiprocessing.Queue`` feeder threads (the
  one-process pools of a sweep's other points running; a pool forks all its workers before it starts
  a thread): a child does not use another pool's executor (its ``_shutdown_lock`` may be held),
  a queue's thread locks are made anew in a child (``multiprocessing``'s after-fork hooks), a
  pipe's write lock is a process-shared semaphore (released by the parent all the same), and a
  pool's worker leaves through ``os._exit`` (no atexit hook of ``concurrent.futures`` runs
  there).
- a pool worker's ``fedsim-beats`` thread (stopped while fedsim forks): it reads the running
  network without its lock and writes to its parent's pipe, which a child of that worker does
  not use.
- ``logging``'s locks, the import lock and ``concurrent.futures.thread``'s are made anew in a
  child by CPython itself (``os.register_at_fork``); OpenBLAS's threads are stopped around a
  fork by its own ``pthread_atfork`` handlers (and a pool's worker then runs one BLAS thread).
  numba's compiler lock and ``fedsim.math.blas``'s lock are held only by the thread that
  compiles or multiplies: the one that forks, never the display's. A ``NetworkWatch``'s lock is
  taken only as a network is built, by the thread that builds it (the display's only reads).
- tqdm's lock (``tqdm.tqdm.get_lock()``, a ``TqdmDefaultWriteLock``), held by the display's
  thread while it redraws a bar on a terminal, and by tqdm's monitor thread (started by a bar
  of the program's own; the display's bar starts none): its thread part (the
  class-wide ``TqdmDefaultWriteLock.th_lock``) stayed held for ever in a child forked then, and a
  child that drew a bar of its own (a sweep point's scenario, a plug-in's actor in a TCP worker)
  waited for ever, holding tqdm's process-shared part, so that the parent's next redraw waited
  for ever too. :func:`fresh_tqdm_lock_in_child`, run in every child forked from a process that
  imported this module (``os.register_at_fork``), gives tqdm a new thread part and keeps its
  multiprocessing part (the same semaphore: bars of parent and children still take turns).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
import time
import weakref
from typing import Any, Iterator

__all__ = ["fresh_tqdm_lock_in_child", "own_std_streams", "pause_around_forks", "threads_paused",
           "wait_for_os_thread_exit"]

# the objects whose thread threads_paused stops and starts again (see pause_around_forks)
_PAUSABLE: "weakref.WeakSet[Any]" = weakref.WeakSet()


def pause_around_forks(owner: Any, on: bool = True) -> None:
    """Have :func:`threads_paused` stop ``owner``'s thread before a fork and start it again after
    (``on``; ``on=False``: no longer). ``owner`` has ``pause_thread()``, which stops its thread and
    waits for it to end (True if one was running: :func:`wait_for_os_thread_exit` too), and
    ``resume_thread()``, which starts it again; it is held by a weak reference (one that is
    collected is forgotten)."""
    if on:
        _PAUSABLE.add(owner)
    else:
        _PAUSABLE.discard(owner)


@contextlib.contextmanager
def threads_paused() -> Iterator[None]:
    """Inside: none of the threads fedsim started in this process is alive (each registered
    owner's ``pause_thread()``, which also waits until the thread has left the OS:
    :func:`wait_for_os_thread_exit`), so that a fork here copies this thread alone; after, the ones
    that were running are started again (also when the block raised). For the forking itself
    only (a display paused longer would stand still): the forked children then inherit no lock
    held by another thread of fedsim's. Threads that are not fedsim's are left as they are."""
    paused = []
    try:
        for owner in list(_PAUSABLE):
            if owner.pause_thread():
                paused.append(owner)
        yield
    finally:
        for owner in paused:
            owner.resume_thread()


def wait_for_os_thread_exit(thread: threading.Thread, timeout: float = 2.0) -> bool:
    """Wait until ``thread``, already joined, has left the operating system too; True once it has
    (or where that cannot be told: no ``/proc/self/task``, no ``native_id``), False if it is still
    there after ``timeout`` seconds. Never raises.

    ``Thread.join`` returns once the thread's Python state is released, a moment before its OS
    thread has exited (CPython 3.11 and 3.12; 3.13 joins the OS thread itself). Measured on an
    idle 2-core host: 1,751 of 2,000 threads were still listed right after ``join``, gone
    0.1 ms later on average (1.5 ms at most; 4.7 ms with every core busy). A fork in that moment
    is one that 3.12 counts as made with another thread alive (it reads the process's thread
    count from ``/proc/self/stat``) and warns of; what :func:`threads_paused` promises is a
    fork with no thread of fedsim's alive, so it waits for this."""
    tid = getattr(thread, "native_id", None)
    if tid is None or not os.path.isdir("/proc/self/task"):
        return True
    task, end, spins = f"/proc/self/task/{tid}", time.monotonic() + timeout, 0
    while os.path.exists(task):
        if time.monotonic() >= end:
            return False
        time.sleep(0 if spins < 10 else 0.0001)  # (a yield first: it is usually a few µs away)
        spins += 1
    return True


_INHERITED_STREAMS: list = []  # the std streams a forked child replaced (see own_std_streams)


def own_std_streams() -> None:
    """Give this (forked) process ``sys.stdout`` and ``sys.stderr`` of its own, writing to the
    same file descriptors as the ones it had.

    A forked process inherits the parent's stream objects with their locks as they were at the
    fork, and only the thread that forked it: a lock that another thread of the parent held then
    (the progress display writing a line to stderr, a tqdm bar being redrawn, a write blocked on
    a pipe nobody read for a while) stays held in the child for ever. Its first write to that
    stream waited for ever, and so did multiprocessing's flush of both streams as a pool's worker
    leaves: a sweep's point that had finished never left its process, and the pool waited on it
    for ever; one that wrote a warning hung in its task, where SIGTERM cannot reach it (a wait for
    a lock in C), and was killed after the stop's grace with its temporary folder left; a TCP
    run's worker that wrote hung, and the run with it. Only a text stream over a buffered file is
    replaced (another kind has no such lock); the inherited one is kept referenced, never closed
    or collected (that would wait for its lock too). A process not forked (another start method)
    gets a fresh one all the same, to no effect."""
    for name in ("stdout", "stderr"):
        old = getattr(sys, name)
        if not (isinstance(old, io.TextIOWrapper) and isinstance(old.buffer, io.BufferedWriter)):
            continue
        try:
            fd = old.fileno()
        except (OSError, ValueError):
            continue
        new = io.TextIOWrapper(io.BufferedWriter(io.FileIO(fd, "w", closefd=False)), encoding=old.encoding,
                               errors=old.errors, line_buffering=old.line_buffering,
                               write_through=old.write_through)
        _INHERITED_STREAMS.append(old)
        setattr(sys, name, new)


def fresh_tqdm_lock_in_child() -> None:
    """In a process just forked: give tqdm (if it was imported) a lock of its own where another
    thread of the parent held tqdm's lock at the fork; run by ``os.register_at_fork`` in every
    child forked from a process that imported this module (tqdm is never imported for it).

    tqdm's lock (``TqdmDefaultWriteLock``, set with ``tqdm.set_lock``) takes a process-shared
    ``multiprocessing`` RLock (``mp_lock``, one semaphore for the parent and its forked children)
    and then a class-wide thread RLock (``th_lock``). A thread of the parent that held them at
    the fork (the progress display redrawing its bar, tqdm's monitor) does not exist here:
    ``th_lock`` would stay held for ever, so it is replaced, and a new ``TqdmDefaultWriteLock``
    is set on each tqdm class that had one (a lock of the user's own is left alone). ``mp_lock``
    is kept (the parent releases its semaphore as its thread finishes), but its record of the
    owning thread, copied by the fork, is reset, as ``multiprocessing`` does in every child it
    starts: otherwise this process's first acquire counted itself a second hold, its release
    kept the semaphore, and every later redraw of the parent's waited for ever. Nothing is
    changed where the forking thread held the lock itself (it goes on to release it here)."""
    std = sys.modules.get("tqdm.std")
    if std is None:
        return
    wl = getattr(std, "TqdmDefaultWriteLock", None)
    th = getattr(wl, "th_lock", None)
    if th is None:
        return
    if th.acquire(blocking=False):  # free, or held by the thread that forked (still here)
        th.release()
        held = False
    else:
        held = True
    mp = getattr(wl, "mp_lock", None)
    sem = getattr(mp, "_semlock", None)
    if sem is not None and sem._count() > 0 and not sem._is_mine():
        sem._after_fork()  # held by a thread not here: forget its hold (the parent releases it)
        held = True
    if not held:
        return
    wl.th_lock = threading.RLock()
    classes = [std.tqdm]
    while classes:
        cls = classes.pop()
        classes.extend(cls.__subclasses__())
        if isinstance(cls.__dict__.get("_lock"), wl):
            cls.set_lock(wl())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=fresh_tqdm_lock_in_child)
