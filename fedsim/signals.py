"""SIGTERM handled as a Ctrl-C, for fedsim's command lines (``fedsim``, ``python -m fedsim``,
``python -m fedsim.data``, scenario scripts).

:func:`sigterm_as_interrupt` is the one place that does it: a process stopped by ``kill PID``,
``timeout`` or a batch system then cleans up as a Ctrl-C does (temporary folders and downloads
removed, worker processes reaped, one ``terminated (SIGTERM)`` line, status 143) instead of ending
at once with nothing said.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Iterator

__all__ = ["sigterm_as_interrupt"]


@contextlib.contextmanager
def sigterm_as_interrupt(*, once: bool = False) -> Iterator[list[int]]:
    """While the block runs, SIGTERM stops it as a Ctrl-C does: the SIGINT handler in place is
    called (``KeyboardInterrupt`` by default; a TCP run's cancels its main task, a sweep's stops
    its workers), or ``KeyboardInterrupt`` is raised when SIGINT is ignored or was set outside
    Python. Yields a list that holds ``signal.SIGTERM`` once one came (the caller then exits with
    143). With ``once``, a SIGTERM after the first is ignored, so that the cleanup the first one
    started runs to its end.

    Does nothing (the yielded list stays empty, SIGTERM keeps its handler) outside the main
    thread, over a SIGTERM set to be ignored (it stays ignored) or a handler set outside Python
    (which could not be put back). SIGTERM's handler is put back as it was when the block ends.
    A process forked inside the block (a worker) that gets SIGTERM before it sets its own
    handler ends as SIGTERM ends it."""
    got: list[int] = []
    previous = signal.getsignal(signal.SIGTERM)
    if (threading.current_thread() is not threading.main_thread()
            or previous is signal.SIG_IGN or previous is None):
        yield got
        return
    owner = os.getpid()

    def on_term(signum, frame):
        if os.getpid() != owner:  # a fork that inherited the handler
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        if got and once:
            return
        if signal.SIGTERM not in got:
            got.append(signal.SIGTERM)
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:  # SIGINT ignored (a background job) or set outside Python: stop all the same
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield got
    finally:
        signal.signal(signal.SIGTERM, previous)
