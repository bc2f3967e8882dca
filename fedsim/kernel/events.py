"""``EventQueue``: the discrete-event core of ``SimNetwork`` (a clock and a heap of callbacks).

An event is a callback due at an instant: ``schedule(delay, fn, *args)`` queues ``fn(*args)``
for ``now + delay``; ``run`` pops events in order of (time, scheduling order) and calls them,
moving ``now`` to each event's time. Events at equal times run in the order they were scheduled
(a strict FIFO tie-break by a counter), which is what makes a simulation deterministic.

This replaces simpy, which the kernel had come to drive through private attributes
(``env._queue``, ``env._eid``, ``env._now``): the kernel only ever needed "call this at that
time", and simpy's public API for that (an event object per callback) made the kernel 1.36x slower
per message and a 6040-client round 1.29x slower (docs/performance.md, "The scheduler"). Actors
never see the queue.
"""

from __future__ import annotations

import math
from heapq import heappop, heappush
from itertools import count
from typing import Any, Callable

__all__ = ["EventQueue", "describe_event"]

_INF = math.inf


def describe_event(fn: Callable[..., Any], args: tuple) -> str:
    """``fn(*args)`` in words for an error message: the callback's name and, for its object (a
    bound method's) and each argument with a ``describe()`` method (an envelope, an actor's
    process, a link model's flow), what it says."""
    name = getattr(fn, "__qualname__", None) or repr(fn)
    said = [d() for a in (getattr(fn, "__self__", None), *args) if callable(d := getattr(a, "describe", None))]
    return name + (f" ({'; '.join(said)})" if said else "")


def _bad_time(now: float, delay: Any, t: float, fn: Callable[..., Any], args: tuple) -> str:
    why = "is not finite" if t != t or t == _INF or t == -_INF else "is before the current time"
    return (f"event {describe_event(fn, args)} scheduled at t = {now!r} + {delay!r} = {t!r} s, which {why}: "
            "a link rate too small, a latency, duration or size too large for finite times, or a negative delay")


class EventQueue:
    """A clock (``now``, seconds) and the callbacks due at later instants.

    Entries are plain tuples ``(time, seq, fn, args)``; ``seq`` is unique, so ``fn`` is never
    compared. ``now`` is a plain attribute: the kernel's hot paths read it directly.
    """

    __slots__ = ("now", "_heap", "_seq", "_batch")

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple] = []
        self._seq = count()
        self._batch: list | None = None

    def __len__(self) -> int:
        """How many events are waiting (a held-back batch counts as one until released)."""
        return len(self._heap)

    def schedule(self, delay: float, fn: Callable[..., Any], *args: Any) -> None:
        """Call ``fn(*args)`` at ``now + delay``.

        ``delay`` is a number of seconds (a float or an int) and ``fn`` a callable; neither is
        checked here, on the path of every message (a bool would be a delay of 0 or 1 s, a str a
        bare ``TypeError``): ``SimNetwork.schedule`` checks both for a link model of the user's own.
        Raises ``ValueError`` naming the event (``fn``, and what its arguments' ``describe()``
        say: the message, the actor) if that time is not finite or is before ``now`` (a negative
        or NaN ``delay``, or one so large that ``now + delay`` overflows): an event at inf would
        run last and stamp inf on whatever it finishes, one at NaN breaks the heap's order, and
        one in the past moves the clock back. Nothing is queued then."""
        now = self.now
        t = now + delay
        if not now <= t < _INF:  # also NaN (one chained comparison on this hot path)
            raise ValueError(_bad_time(now, delay, t, fn, args))
        entry = (t, next(self._seq), fn, args)
        if self._batch is None:
            heappush(self._heap, entry)
        else:
            self._batch.append(entry)

    def hold(self) -> bool:
        """Start holding back what ``schedule`` queues (until ``release``), so that the many
        copies of one broadcast do not all enter the heap at once. Returns False (and does
        nothing) if a batch is already being held."""
        if self._batch is not None:
            return False
        self._batch = []
        return True

    def release(self) -> None:
        """Put the held-back entries into the queue one at a time, in key order: the first now,
        each next one when its predecessor runs, with the key it was given when scheduled. No
        entry can be due before its predecessor (its key is larger), so events run in exactly the
        order they would if all were queued at once, while the heap stays small (a 6,040-copy
        broadcast does not put 6,040 entries in it, and every push and pop costs log2 of the
        heap's size)."""
        batch, self._batch = self._batch, None
        if not batch:
            return
        if len(batch) == 1:
            heappush(self._heap, batch[0])
            return
        batch.sort()  # keys are unique (seq), so only (time, seq) is compared
        t, seq, _, _ = batch[0]
        heappush(self._heap, (t, seq, self._batch_step, (batch, 0)))

    def _batch_step(self, batch: list, k: int) -> None:
        entry = batch[k]
        batch[k] = None  # let the entry's arguments go once it has run
        if k + 1 < len(batch):
            t, seq, _, _ = batch[k + 1]
            heappush(self._heap, (t, seq, self._batch_step, (batch, k + 1)))
        entry[2](*entry[3])

    def pending(self) -> list[tuple[float, Callable[..., Any], tuple]]:
        """The events still waiting, as ``(time, fn, args)`` in no particular order (a held-back
        batch's entries included)."""
        out = []
        for t, _, fn, args in self._heap:
            if fn == self._batch_step:
                batch, k = args
                out.extend((e[0], e[2], e[3]) for e in batch[k:] if e is not None)
            else:
                out.append((t, fn, args))
        return out

    def run(self, until: float | None = None) -> bool:
        """Run events until none is left, or until the next one is due at or after ``until``
        (then ``now`` becomes ``until``; an event due exactly at ``until`` is not run, as in
        simpy). Returns True if events were left waiting (it stopped because of ``until``),
        False if the queue ran dry (with ``until``, ``now`` still ends at ``until``).

        Exceptions raised by a callback propagate (the event is consumed). Raises ``ValueError``
        if ``until`` is not after ``now``.
        """
        heap = self._heap
        if until is not None:
            until = float(until)
            if not until > self.now or math.isnan(until):
                raise ValueError(f"until ({until}) must be greater than the current simulation time {self.now}")
            while heap:
                if heap[0][0] >= until:
                    self.now = until
                    return True
                t, _, fn, args = heappop(heap)
                self.now = t
                fn(*args)
            self.now = until
            return False
        while heap:
            t, _, fn, args = heappop(heap)
            self.now = t
            fn(*args)
        return False
