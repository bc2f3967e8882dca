"""What a process forked from fedsim (a sweep's or ``pmap``'s worker, a TCP run's worker) must
not take over from the threads of its parent.

A forked child has only the thread that forked it, and every lock as it was at the fork: one
that another thread of the parent held then stays held in the child for ever. The parent's other
threads at a fork, and what of theirs a child may use:

- the progress display's thread (``fedsim.experiment.context.Progress``, in every run that logs
  or shows progress: ``fedsim run``, a sweep, a worker's own run) writes lines to ``sys.stderr``
  (and redraws a tqdm bar there): its buffer's lock is held while a write is under way, for as
  long as the write blocks (a pipe nobody reads). A child's first write to the stream (a
  warning, a plug-in's print, the traceback of its error) then waited for ever, as did
  ``multiprocessing``'s flush as a worker leaves: :func:`own_std_streams`, the first thing a
  child does. The display's own lock, its log file and tqdm's lock are held by that thread too,
  but a child never uses the parent's display: a worker's run makes and activates its own, and a
  TCP worker runs actors only.
- ``concurrent.futures``' manager threads and ``multiprocessing.Queue`` feeder threads (this
  pool's, and the one-process pools of the other points running): a child does not use another
  pool's executor (its ``_shutdown_lock`` may be held), a queue's thread locks are made anew in a
  child (``multiprocessing``'s after-fork hooks), a pipe's write lock is a process-shared
  semaphore (released by the parent all the same), and a pool's worker leaves through
  ``os._exit`` (no atexit hook of ``concurrent.futures`` runs there).
- a pool worker's ``fedsim-beats`` thread, when that worker forks (a pool of its own, a TCP
  run): it reads the running network without its lock and puts into its parent's queue, which
  a child of that worker does not use.
- ``logging``'s locks, the import lock and ``concurrent.futures.thread``'s are made anew in a
  child by CPython itself (``os.register_at_fork``); OpenBLAS's threads are stopped around a
  fork by its own ``pthread_atfork`` handlers (and a pool's worker then runs one BLAS thread).
  numba's compiler lock and ``fedsim.math.blas``'s lock are held only by the thread that
  compiles or multiplies: the one that forks, never the display's. A ``NetworkWatch``'s lock is
  taken only as a network is built, by the thread that builds it (the display's only reads).

Not covered: tqdm's class-wide lock, which the display's thread holds while it redraws a bar on
a terminal, stays held in a child forked then; fedsim's children draw no bar (a sweep's points
and a pool's tasks run quiet), but a scenario of a sweep that drew its own tqdm bar could wait
for it.
"""

from __future__ import annotations

import io
import sys

__all__ = ["own_std_streams"]

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
