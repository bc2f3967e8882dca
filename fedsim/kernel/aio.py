"""``AsyncioNetwork``: the same actors as asyncio tasks on a real event loop.

Messages are encoded with the same codec and handed through in-process mailboxes, so actors see
exactly the bytes they would see on ``SimNetwork``. Bandwidth and latency are not modelled here
(time is the loop's real clock, divided by ``time_scale``); link loss uses the same seeded
draws, keyed by sender and message number, so both transports lose the same messages.

Dropout (``offline_at``, ``Faults(dropout=...)``) means what it means on ``SimNetwork``: at
``offline_at`` (real seconds times ``time_scale`` after the start; at 0 the actor never starts)
the node's actor is cancelled (its ``finally`` blocks run; a wait there raises ``RunEnded``, a
send there is dropped, with no ledger row) and listed in ``RunResult.offline``. Delivery is
immediate, so no copy is ever part-way: a copy sent to a node whose ``offline_at`` has come
(also one whose actor had finished) is recorded ``lost``, note ``receiver offline``; one a node
sends at or after its ``offline_at`` because its actor had the loop then (a computation that does
not await: the cancellation takes effect at its next await) is recorded ``lost``, note ``sender
offline``; a copy drawn lost keeps ``link loss`` (the loss draw is made for every copy, so the
draws stay keyed by message number). A network that traces (``trace=True``) keeps each lost copy's
time in ``lost_at``, as ``SimNetwork`` does: its send time, when the loss is decided. While a node's dropout is still to
come the run is not over: actors blocked on it are not a deadlock before it happens (as on
``SimNetwork``, where its dropout is a pending event).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from typing import Any, Iterator

from .envelope import Envelope, Payload
from .errors import ActorError, FedsimError, RunEnded
from .ledger import ARRIVAL, NOTE, RX_START, SEQ, STATUS, TX_END, TX_START
from .network import Network, RunResult, check_flag, check_run_timeout, check_time_scale
from .node import Node, cancelled, hand_over, withdraw
from .realtime import ClosedOnDropout
from .registry import register_transport

__all__ = ["AsyncioNetwork"]



class AsyncioNetwork(ClosedOnDropout, Network):
    """Run actors as asyncio tasks. ``time_scale`` is the real seconds per protocol second (a
    positive finite number, else ``NetworkConfigError``): it multiplies ``sleep`` and timeouts and
    divides the clock (``now()``, ``RunResult.duration``); ``compute`` only yields to the loop."""

    def __init__(self, *, time_scale: float = 1.0, **kwargs: Any) -> None:
        scale = check_time_scale(time_scale)
        super().__init__(**kwargs)
        self.time_scale = scale
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clock: asyncio.AbstractEventLoop | None = None  # the loop while the run goes on
        self._t0 = 0.0
        self._stopped_at = 0.0  # what now() says when the clock does not run
        self._blocked = 0
        self._finished = 0
        self._quiet: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._dropouts: list[Node] = []  # nodes with an offline_at (their dropout may be to come)
        self._tasks: dict[str, asyncio.Task] = {}
        self.closed: set[str] = set()  # nodes whose actor got the cancellation of its dropout

    def now(self) -> float:
        """Real seconds since the run started, divided by ``time_scale``: 0 before the run, and
        after it the time at which it ended (``RunResult.duration``), like SimNetwork's clock, so
        that what is read after the run (``network_record``'s ``sim_time``) is the run's time."""
        clock = self._clock
        return (clock.time() - self._t0) / self.time_scale if clock is not None else self._stopped_at

    def end_run(self) -> None:
        """The run has ended: from now on ``now()`` stays where it is, and what the actors being
        cancelled send or miss is not recorded (``Network.end_run``)."""
        if self._clock is not None:
            self._stopped_at = self.now()
            self._clock = None
        super().end_run()

    def post(self, src: Node, dsts: tuple, kind: str, encoded, anonymous: bool) -> None:
        if src.id in self.closed:  # a finally block of an actor closed by its dropout: as on SimNetwork
            return
        targets = self.destinations(dsts)
        payload = Payload(encoded)
        nbytes = len(encoded.data) + self.framing_bytes
        now = self.now()
        src.sent += len(targets)
        tap = self.tap
        off = src.spec.offline_at
        cut = off is not None and now >= off  # its dropout has come; its actor still runs until its next await
        if cut:
            self._go_offline(src)  # (its timer may not have fired: the loop was busy)
        for dst in targets:
            row = self.ledger.new_row(src.round, src.id, dst.id, src.role, dst.role, kind, nbytes,
                                      encoded.array_bytes, encoded.floats, now, anonymous)
            if tap is not None:
                tap.observe(row, payload)
            row[TX_START] = row[TX_END] = now
            note = None
            if src.spec.loss and self.draw_loss(src):
                note = "link loss"  # lost on the way: no reception began
            elif cut:
                note = "sender offline"
            elif dst.offline or ((doff := dst.spec.offline_at) is not None and now >= doff):
                note = "receiver offline"
            if note is not None:
                row[STATUS], row[NOTE] = "lost", note
                if self.tracing:  # decided here, at the send (delivery is immediate), as the step log shows
                    self.lost_at[row[SEQ]] = now
                    self.happened.append(("lost", row[SEQ]))
                continue
            row[RX_START] = row[ARRIVAL] = now
            row[STATUS] = "delivered"
            if self.tracing:
                self.happened.append(("arrive", row[SEQ]))
            envl = Envelope(kind, payload, src.id, anonymous, src.round, row, nbytes)
            if hand_over(dst, envl):
                self._blocked -= 1

    async def wait_for_message(self, node: Node, kind, timeout: float | None):
        fut = self._loop.create_future()
        forever = timeout is None
        node.waiter = (kind, fut, forever)
        if forever:
            self._blocked += 1
            self._check_quiet()
            try:
                return await fut
            except asyncio.CancelledError:
                # a wait the actor itself gave up (or the run's end): no longer blocked here, or
                # the count would reach the number of actors while one still runs (a false deadlock)
                if withdraw(node, fut):
                    self._blocked -= 1
                raise
        return await self.message_within(node, fut, timeout)

    def _check_quiet(self) -> None:
        if self._finished + self._blocked >= len(self.nodes) and self._quiet is not None \
                and not any(not (n.done or n.offline) for n in self._dropouts):
            # (a dropout still to come is something that can happen: not quiet yet)
            self._quiet.set()

    def _go_offline(self, node: Node) -> None:
        """``node``'s ``offline_at`` has come: cancel its actor (unless it has finished or the run
        is over); ``_task_done`` counts it out."""
        if node.done or node.offline or self.ended:
            return
        node.offline = True
        task = self._tasks.get(node.id)
        if task is not None:
            task.cancel()

    def _task_done(self, node: Node, task: asyncio.Task) -> None:
        self._finished += 1
        exc = cancelled(task) if task.cancelled() else task.exception()
        if task.cancelled() and (self.ended or node.offline) or isinstance(exc, RunEnded):
            # cancelled at the run's end or by its dropout (RunEnded: its finally block tried to wait)
            pass
        elif exc is not None:
            # (a task cancelled before the run's end was ended by the actor's own code: the
            # transport cancels only after end_run; taken for one it had closed, it made a deadlock
            # of an actor "waiting in receive (any kind)")
            if self._error is None:
                self._error = exc if isinstance(exc, FedsimError) and not isinstance(exc, ActorError) \
                    and str(exc).startswith("actor") else ActorError(node.id, node.role, exc)
                self._error.__cause__ = exc
            self._quiet.set()
        else:
            node.done = True
            node.result = task.result()
        self._check_quiet()

    async def run_async(self, timeout: float | None = None, *, strict: bool = True) -> RunResult:
        """Run every actor until all have finished or are blocked with nothing in flight (no
        message can be in flight here: delivery is immediate). Blocked actors are cancelled and
        listed in ``unfinished`` (the run is over by then: what their ``finally`` blocks send is
        dropped, with no ledger row, as on ``SimNetwork``); with ``strict`` that is a deadlock (``DeadlockError``, as on
        ``SimNetwork``). A node with ``offline_at`` drops out then (module docstring). Raises ``ActorError`` if an actor raises (also ``CancelledError``, when its own
        code ends it cancelled: not a deadlock), ``FedsimError`` naming the node
        if an actor is not an async function (nothing runs), ``NetworkConfigError`` if the faults
        match no node's role, the ``tap`` has no ``observe`` method, ``timeout`` is not positive seconds or None
        or ``strict`` is not True or False (before anything runs), ``asyncio.TimeoutError`` after
        ``timeout`` real seconds (naming the actors blocked, and on what, and those still busy). Must be awaited inside a running loop; ``run`` starts one."""
        if self.ran:
            raise FedsimError("a network runs once; build a new one for another run")
        timeout = check_run_timeout(timeout)
        strict = check_flag("strict", strict)
        self.check_faults()
        self.check_tap()
        self.call_before_run()
        self.ran = True
        self._loop = self._clock = asyncio.get_running_loop()
        self._t0 = self._loop.time()
        self._quiet = asyncio.Event()
        # every actor is called before any task starts, so that one that is not an async
        # function stops the run with the FedsimError naming it (create_task's TypeError named
        # no node), as on SimNetwork; the coroutines already made are closed unstarted
        coros = []
        try:
            for node in self.nodes.values():
                coros.append(self.actor_coroutine(node))
        except BaseException:
            self.end_run()
            for coro in coros:
                coro.close()
            raise
        tasks = []
        timers = []
        for node, coro in zip(self.nodes.values(), coros):
            off = node.spec.offline_at
            if off is not None:
                self._dropouts.append(node)
                if off <= 0:  # offline from the start: its actor never runs (as on SimNetwork)
                    node.offline = True
                    coro.close()
                    self._finished += 1
                    continue
                timers.append(self._loop.call_at(self._t0 + off * self.time_scale, self._go_offline, node))
            task = self._loop.create_task(coro, name=node.id)
            task.add_done_callback(lambda t, n=node: self._task_done(n, t))
            tasks.append(task)
            self._tasks[node.id] = task
        self._check_quiet()  # (every node offline from the start)
        result = None
        try:
            try:
                await asyncio.wait_for(self._quiet.wait(), timeout)
            except asyncio.TimeoutError:
                raise asyncio.TimeoutError(self._timeout_text(timeout)) from None
            self.end_run()  # the run ends here: its duration is the clock's last reading
            if self._error is None:
                result = self.finish(self.now(), strict=strict)
        finally:
            self.end_run()  # also when it ends by timeout or cancellation
            for h in timers:
                h.cancel()
            for t in tasks:
                if not t.done():
                    t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._error is not None:
            raise self._error
        return result

    def _timeout_text(self, timeout: float) -> str:
        """What a run over its ``timeout`` was still waiting for: the actors blocked (and on
        what) and those still busy (running, sleeping or in a timed wait)."""
        nodes = [n for n in self.nodes.values() if not n.done]
        blocked = [n for n in nodes if n.waiter is not None and n.waiter[2]]
        busy = [n for n in nodes if n not in blocked]
        lines = [f"AsyncioNetwork.run: no result within timeout = {timeout} s: {len(self.nodes) - len(nodes)} "
                 f"finished, {len(blocked)} blocked, {len(busy)} busy of {len(self.nodes)} actors"]
        lines += [f"  {n.id} waits in {self.waits_for(n)}" for n in blocked[:10]]
        lines += [f"  {n.id} is busy (running, sleeping or in a timed wait)" for n in busy[:10]]
        if len(blocked) > 10 or len(busy) > 10:
            lines.append("  ...")
        return "\n".join(lines)

    def run(self, timeout: float | None = None, *, strict: bool = True) -> RunResult:
        """``asyncio.run(self.run_async(timeout, strict=strict))``: the same call shape as
        ``SimNetwork.run``, for callers without a running loop. A SIGTERM handler set in Python
        (``fedsim.signals.sigterm_as_interrupt``: the command line's) is called between the
        loop's callbacks while the loop runs and closes (:func:`_sigterm_between_callbacks`)."""
        loop = asyncio.new_event_loop()
        try:
            with _sigterm_between_callbacks(loop), asyncio.Runner(loop_factory=lambda: loop) as runner:
                return runner.run(self.run_async(timeout, strict=strict))
        finally:
            if not loop.is_closed():  # (the runner closes it, once it ran)
                loop.close()


@contextlib.contextmanager
def _sigterm_between_callbacks(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """While the block runs, a SIGTERM is handed to the SIGTERM handler in place before (a Python
    one) from a callback of ``loop``, not where the main thread happens to be; one that came as
    the loop closed, with no callback left to run, when the block ends.

    Why: the command line's handler (``sigterm_as_interrupt``) raises ``KeyboardInterrupt``
    where it lands when SIGINT is ignored (a background job: ``fedsim run ... &`` from a script,
    ``nohup``), since asyncio.Runner then sets no SIGINT handler to cancel the run as it does for a
    Ctrl-C. Raised inside the loop's own code (in asyncio's debug mode, ``-X dev``, mostly there:
    a callback's traceback being taken as it is scheduled) it lost a callback, and the runner's
    teardown (``_cancel_all_tasks``) waited for it for ever. Raised from a callback of its own,
    it leaves the loop whole, and the teardown cancels the run as after a Ctrl-C. (What
    asyncio.Runner's own SIGINT handler does, ``call_soon_threadsafe`` from the handler, is what
    this one does.) Nothing is changed outside the main thread or when SIGTERM's handler is not
    a Python one (the default: SIGTERM ends the process; ignored: it stays ignored)."""
    previous = signal.getsignal(signal.SIGTERM)
    if not callable(previous) or threading.current_thread() is not threading.main_thread():
        yield
        return
    frames: list = []  # the SIGTERMs not yet handed over, first first

    def hand_over_one() -> None:
        if frames:
            previous(signal.SIGTERM, frames.pop(0))

    def on_term(signum, frame) -> None:
        frames.append(frame)
        with contextlib.suppress(RuntimeError):  # (the loop closed: handed over as the block ends)
            loop.call_soon_threadsafe(hand_over_one)

    signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        while frames:
            previous(signal.SIGTERM, frames.pop(0))


register_transport("asyncio", AsyncioNetwork, "AsyncioNetwork: one process, real event loop, in-process mailboxes")
