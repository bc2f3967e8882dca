"""What is running right now, for progress displays: the networks this process builds and the
figures worker processes send back.

A run's networks are watched through ``fedsim.kernel.network.on_network_built``: the newest one
is read (its ledger's length, its last row's round, its clock) from the display's thread while
the scenario's own thread runs it, so a display moves within a run, per round, without the
scenario or the protocol reporting anything. Reads only: a watched run is byte-identical to an
unwatched one.

Worker processes (``fedsim.studies.parallel.pmap``) send the same snapshot through a queue; the
parent hands it to the display that is active (:func:`active`), keyed by the worker's pid.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

__all__ = ["BEAT_EVERY", "NetworkWatch", "SILENT_BEATS", "Snapshot", "activate", "active", "deactivate",
           "silent_after", "snapshot_text"]

BEAT_EVERY = 1.0  # seconds between a worker's reports of its running network (fedsim.studies.parallel)
SILENT_BEATS = 5  # beats a worker may miss before a display takes it for dead and drops it (silent_after)


def silent_after() -> float:
    """Seconds without a beat after which a display (``fedsim.experiment.context.Progress``) drops a
    worker's figures: ``SILENT_BEATS`` beats of ``BEAT_EVERY`` seconds (5 s), read when called, so
    that the workers' beat and the display's expiry cannot drift apart (a bare 5 s did not follow
    the beat)."""
    return SILENT_BEATS * BEAT_EVERY

Snapshot = dict  # {"round": int | None, "messages": int, "sim_time": float}


class NetworkWatch:
    """Keeps a weak reference to the newest network built in this process since :meth:`start`."""

    def __init__(self) -> None:
        self._net: Callable[[], Any] = lambda: None
        self._remove: Callable[[], None] | None = None
        self._lock = threading.Lock()

    def start(self) -> "NetworkWatch":
        from ..kernel.network import on_network_built

        if self._remove is None:
            self._remove = on_network_built(self._built)
        return self

    def stop(self) -> None:
        if self._remove is not None:
            self._remove()
            self._remove = None
        self._net = lambda: None

    def _built(self, net: Any) -> None:
        with self._lock:
            self._net = weakref.ref(net)

    def snapshot(self) -> Snapshot | None:
        """Round, messages and clock of the newest network, or None if there is none (or it has
        sent nothing yet). Safe to call from another thread: it only reads."""
        net = self._net()
        if net is None:
            return None
        try:
            if getattr(net, "ran", False) and all(getattr(n, "done", False) for n in list(net.nodes.values())):
                return None  # finished: its figures are in the recorded totals now
            ledger = net.ledger
            n = len(ledger)
            if not n:
                return None
            # a StreamingLedger has no row list (its finished rows are on disk): it keeps the round
            rnd = ledger.last_round if hasattr(ledger, "last_round") else ledger.rows[n - 1][1]  # ROW_COLUMNS[1]
            return {"round": int(rnd), "messages": n, "sim_time": float(net.now())}
        except Exception:  # a network still being constructed, or a transport without a clock yet
            return None


_ACTIVE: list[Any] = []


def activate(display: Any) -> None:
    """Make ``display`` (a ``Progress``) the one worker figures go to, until :func:`deactivate`."""
    _ACTIVE.append(display)


def deactivate(display: Any) -> None:
    if display in _ACTIVE:
        _ACTIVE.remove(display)


def active() -> Any | None:
    """The innermost active display, or None."""
    return _ACTIVE[-1] if _ACTIVE else None


def snapshot_text(snaps: list[Snapshot]) -> str:
    """``round 7`` for one running network, ``rounds 7|3`` for several (workers). A negative
    label is a setup round: ``setup`` for -1, ``setup for round N`` for -1 - N (the key exchange of
    an FPL network resumed at round N), as the trace views write them."""
    rounds = [s["round"] for s in snaps if s.get("round") is not None]
    if not rounds:
        return ""
    if len(rounds) == 1:
        return "round " + _label(rounds[0]) if rounds[0] >= 0 else _label(rounds[0])
    return "rounds " + "|".join(_label(r) for r in rounds)


def _label(rnd: int) -> str:
    rnd = int(rnd)
    return str(rnd) if rnd >= 0 else "setup" if rnd == -1 else f"setup for round {-1 - rnd}"
