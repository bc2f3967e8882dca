"""SIGTERM handled as a Ctrl-C, for fedsim's command lines (``fedsim``, ``python -m fedsim``,
``python -m fedsim.data``, scenario scripts).

:func:`sigterm_as_interrupt` is the one place that does it: a process stopped by ``kill PID``,
``timeout`` or a batch system then cleans up as a Ctrl-C does (temporary folders and downloads
removed, worker processes reaped, one ``terminated (SIGTERM)`` line, status 143) instead of ending
at once with nothing said. :func:`sigint_deferred` holds a Ctrl-C (and a SIGTERM handled so, SIGINT
ignored or not) back over a short block that must not be cut in the middle (forking workers,
third-party imports that swallow it). :func:`returns_its_status` makes a command line that
handled a Ctrl-C end with the status it returns (130), not killed by SIGINT.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
from typing import Callable, Iterator, TypeVar

__all__ = ["returns_its_status", "sigint_deferred", "sigterm_as_interrupt"]

_F = TypeVar("_F", bound=Callable[..., int])

# the SIGTERMs sigterm_as_interrupt received, SIGINT not being a Python handler, while a
# sigint_deferred block ran: one list per block, the innermost last (main thread only)
_held: list[list] = []


@contextlib.contextmanager
def sigterm_as_interrupt(*, once: bool = False) -> Iterator[list[int]]:
    """While the block runs, SIGTERM stops it as a Ctrl-C does: the SIGINT handler in place is
    called (``KeyboardInterrupt`` by default; a TCP run's cancels its main task, a sweep's stops
    its workers), or ``KeyboardInterrupt`` is raised when SIGINT is ignored or was set outside
    Python (a run on the asyncio transport hands it to this handler from a callback of its event
    loop, where it cannot cut the loop's own code: ``fedsim.kernel.aio``). Yields a list that
    holds ``signal.SIGTERM`` once one came (the caller then exits with
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
        elif _held:  # SIGINT not a Python handler, inside sigint_deferred: raised when its block ends
            _held[-1].append(frame)
        else:  # SIGINT ignored (a background job) or set outside Python: stop all the same
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield got
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """A SIGINT during the block is raised (as ``KeyboardInterrupt``, by the handler that was in
    place) when the block ends, not in the middle of it; a SIGTERM under
    :func:`sigterm_as_interrupt` is deferred with it (that calls the SIGINT handler in place).
    Only in the main thread. A SIGINT handler that is not a Python one (SIGINT ignored, as in a
    background job, or set outside Python) is left alone, and a SIGTERM under
    :func:`sigterm_as_interrupt` is then held back all the same and raised as
    ``KeyboardInterrupt`` when the block ends. A process forked inside the block inherits the
    recording handler: a SIGINT there raises nothing (until the child sets its own handler).
    When the block raises while an interrupt is held back, the interrupt is raised all the same
    (the block's error as its ``__context__``), as it would have been had it not been held back.

    For short blocks only, since a Ctrl-C waits for the block to end: forking (one raised just
    after a fork loses the child's pid, or runs the parent's code in the child), and code that
    may swallow the interrupt (numba's first compile imports SciPy and NumPy's random module,
    whose compiled import code lost a ``KeyboardInterrupt`` raised in it: a sweep ran on)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):
        # SIGINT left as it is; a SIGTERM under sigterm_as_interrupt, which raised
        # KeyboardInterrupt at once here (`fedsim sweep ... &` from a script, SIGINT ignored,
        # stopped by `kill PID`), is held back as a Ctrl-C is over a Python handler
        held: list = []
        _held.append(held)
        try:
            yield
        finally:
            _held.pop()
            if held:  # (also when the block raised: see below)
                if _held:  # (an enclosing block raises it when it ends)
                    _held[-1].extend(held)
                else:
                    raise KeyboardInterrupt
        return
    got: list = []
    signal.signal(signal.SIGINT, lambda signum, frame: got.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if got:
            # also when the block raised (a fork that failed): the Ctrl-C, raised at once, would
            # have ended the block then, and the error is its KeyboardInterrupt's context; it was
            # dropped, and the command ended with the error, not "interrupted"
            previous(signal.SIGINT, got[0])


def returns_its_status(main: _F) -> _F:
    """``main`` (a command line's function that returns its exit status) with the process then
    ending with that status, also after a Ctrl-C that ``main`` handled (its ``interrupted`` line,
    130), instead of being killed by SIGINT (status -2 to its parent, "130" in a shell). Only
    when ``main`` returns: a ``KeyboardInterrupt`` that escapes it is not handled, and ends the
    process as Python ends it.

    Why: CPython since 3.8 (seen on 3.11.7; read in 3.11's and 3.12's Python/pythonrun.c and
    Modules/main.c) sets an interpreter-wide flag (``_Py_UnhandledKeyboardInterrupt``, in 3.12
    ``_PyRuntime.signals.unhandled_keyboard_interrupt``) in ``run_eval_code_obj`` whenever a
    ``KeyboardInterrupt`` leaves code run from a *string* (``exec``/``eval`` of a str: a Ctrl-C
    that lands while ``collections.namedtuple`` or ``dataclasses`` ``exec`` their generated code,
    as modules import: importlib.metadata in load_plugins, SciPy in numba's warm-up), even when a
    caller catches it later. ``Py_RunMain`` reads the flag after the program ended and, if set,
    kills the process with SIGINT (``exit_sigint``) in place of its exit status. That happens
    under ``python -m fedsim`` (``pymain_run_module`` returns SystemExit's status to
    ``Py_RunMain``) and for a script that ends without ``SystemExit``; a script's ``SystemExit``
    exits in ``Py_Exit`` before the flag is read. The same ``run_eval_code_obj`` sets the flag to
    0 as it *begins* (its comment: so that an earlier embedded run's interrupt does not kill a
    later ``Py_Main``), so one string ``exec`` that ends normally, after the interrupt was
    handled, clears it: that is what this does (the newest CPython source read no longer sets the
    flag there: the ``exec`` is then a no-op). Exiting otherwise (``os._exit``) would skip the
    interpreter's finalisation (atexit, buffered output), and the flag is not reachable from
    Python."""
    @functools.wraps(main)
    def ending_with_its_status(*args, **kwargs):
        status = main(*args, **kwargs)
        exec("", {})  # (a string: see above; a code object would not pass run_eval_code_obj)
        return status
    return ending_with_its_status  # type: ignore[return-value]
