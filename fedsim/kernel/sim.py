"""``SimNetwork``: actors as native coroutines driven by a simpy environment in virtual time.

Each actor coroutine is stepped by ``_ActorProcess``: whatever the coroutine yields must be a
simpy event (the kernel's own awaitables yield exactly that); the process resumes the coroutine
with the event's value when simpy processes it. Anything else an actor awaits (an asyncio
future, ``asyncio.sleep``) is reported as ``ForeignAwaitError`` naming the actor and the object,
instead of simpy's ``AttributeError`` on ``gi_frame`` (which coroutines do not have).

Messages travel through a ``LinkModel``; the default ``FifoLinkModel`` is store-and-forward with
FIFO egress and ingress ports (docs/network-model.md). Everything is deterministic: events at
equal times are processed in scheduling order, and the only randomness (loss draws, per-node
spread) comes from generators derived from the network seed.
"""

from __future__ import annotations

import gc
import math
import traceback
from typing import Any

from collections import deque
from heapq import heappop, heappush

import simpy
from simpy.events import NORMAL, URGENT

from ..seeding import node_rng
from .context import _Envelope, _matches, _Payload
from .errors import ActorError, FedsimError, ForeignAwaitError
from .ledger import ARRIVAL, NOTE, RX_START, STATUS, TX_END, TX_START
from .network import Network, RunResult, _Node

__all__ = ["SimNetwork", "LinkModel", "FifoLinkModel"]

_INF = math.inf
_GC_GEN0 = 100_000


_PARK = object()  # what a parked actor yields: "resume me when the kernel says so"


class _Park:
    """Awaitable that suspends the actor until the kernel resumes it with a value."""

    __slots__ = ()

    def __await__(self):
        return (yield _PARK)


_park = _Park()


class _ActorProcess:
    """Steps one actor coroutine (a minimal, coroutine-aware simpy process).

    The coroutine may only yield ``_PARK`` (through the kernel's awaitables); the kernel later
    calls ``step`` with the value the awaited call returns. Anything else it yields is an
    object this network cannot drive: the actor gets ``ForeignAwaitError`` at its ``await``.
    """

    __slots__ = ("node", "coro")

    def __init__(self, node: _Node, coro) -> None:
        self.node = node
        self.coro = coro

    def step(self, value: Any = None, exc: BaseException | None = None) -> None:
        node = self.node
        if node.done or node.offline:
            return
        coro = self.coro
        while True:
            try:
                target = coro.send(value) if exc is None else coro.throw(exc)
            except StopIteration as stop:
                node.done = True
                node.result = stop.value
                return
            except ForeignAwaitError:
                raise  # already names the actor and what it awaited
            except RuntimeError as err:
                if "no running event loop" in str(err):
                    raise ForeignAwaitError(
                        f"actor {node.id!r} (role {node.role!r}) awaited {_origin(err)}, an asyncio "
                        "primitive, on SimNetwork; use ctx.sleep/ctx.receive instead"
                    ) from err
                raise ActorError(node.id, node.role, err) from err
            except Exception as err:
                raise ActorError(node.id, node.role, err) from err
            if target is _PARK:
                return
            value, exc = None, ForeignAwaitError(
                f"actor {node.id!r} (role {node.role!r}) awaited {target!r:.120}, which SimNetwork "
                "cannot drive; an actor may only await its ctx methods"
            )


def _origin(err: BaseException) -> str:
    """Name of the innermost Python function in ``err``'s traceback (what the actor awaited)."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return "an unknown object"
    f = frames[-1]
    mod = f.filename.replace("\\", "/").rsplit("/", 2)
    where = ".".join(p.removesuffix(".py") for p in mod[-2:])
    return f"{where}.{f.name}()"


class LinkModel:
    """How a message crosses the network. ``transmit`` is called once per (message, receiver)
    at send time; it must eventually call ``net._deliver(env, dst)`` or ``net._lose(env, note)``
    and fill the ledger row's ``tx_start``, ``tx_end``, ``rx_start``, ``arrival_time``."""

    def transmit(self, net: "SimNetwork", src: _Node, dst: _Node, envl: _Envelope) -> None:
        raise NotImplementedError  # pragma: no cover


class FifoLinkModel(LinkModel):
    """Store-and-forward: the message holds the sender's egress port for ``size/uplink``
    (FIFO behind earlier messages), propagates ``src.latency + dst.latency``, then holds the
    receiver's ingress port for ``size/downlink`` (FIFO in order of arrival at the port)."""

    def transmit(self, net: "SimNetwork", src: _Node, dst: _Node, envl: _Envelope) -> None:
        env = net.env
        now = env._now
        row = envl.row
        size = envl.nbytes
        up = src.spec.link.uplink
        start = src.egress_free if src.egress_free > now else now
        end = start if up == _INF else start + size / up
        src.egress_free = end
        row[TX_START] = start
        row[TX_END] = end
        if src.spec.loss and net._loss_rng.random() < src.spec.loss:
            net._lose(envl, "link loss")
            return
        at_port = end + src.spec.link.latency + dst.spec.link.latency
        down = dst.spec.link.downlink
        if down == _INF:
            row[RX_START] = at_port
            net._schedule(at_port - now, net._deliver, envl, dst)
        else:
            net._schedule(at_port - now, self._at_ingress, net, envl, dst)

    @staticmethod
    def _at_ingress(net: "SimNetwork", envl: _Envelope, dst: _Node) -> None:
        now = net.env._now
        start = dst.ingress_free if dst.ingress_free > now else now
        end = start + envl.nbytes / dst.spec.link.downlink
        dst.ingress_free = end
        envl.row[RX_START] = start
        net._schedule(end - now, net._deliver, envl, dst)


class SimNetwork(Network):
    """A deterministic discrete-event network in virtual time (simpy).

    ``SimNetwork(seed=0, profile="ideal", framing_bytes=0, unit=None, trace=False,
    link_model=FifoLinkModel())``; then ``add_node`` and ``run``.
    """

    def __init__(self, *, link_model: LinkModel | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.env = simpy.Environment()
        self.link_model = link_model or FifoLinkModel()
        self._loss_rng = node_rng(self.seed, "kernel:loss")
        self._batch: list | None = None  # entries _schedule holds back while a broadcast is posted

    # -- primitives ---------------------------------------------------------------------------
    def _now(self) -> float:
        return self.env._now

    def _schedule(self, delay: float, fn, *args) -> None:
        """Call ``fn(*args)`` after ``delay`` simulated seconds (FIFO among equal times).

        The kernel's own entries in simpy's queue are ``(time, NORMAL, eid, fn, args)``: no event
        object at all (one allocation less per event). Only ``_loop`` knows them, which is why
        a SimNetwork's environment must be run by ``SimNetwork.run``, not ``env.run``/``env.step``.
        The shared eid counter keeps them in order with simpy's own events at equal times."""
        env = self.env
        entry = (env._now + delay, NORMAL, next(env._eid), fn, args)
        if self._batch is None:
            heappush(env._queue, entry)
        else:
            self._batch.append(entry)

    def _push_batch(self, batch: list) -> None:
        """Put a broadcast's scheduled entries into the queue one at a time, in key order: the
        first now, each next one when its predecessor is processed, with the key (time, eid) it
        was given when scheduled. No entry can be due before its predecessor (its key is larger),
        so events run in exactly the order they would if all were queued at once, while the heap
        stays small (a 6040-copy broadcast no longer puts 6040 entries in it, and every push and
        pop of the round costs log2 of the heap's size in tuple comparisons)."""
        if len(batch) > 1:
            batch.sort()  # keys are unique (eid), so only (time, priority, eid) is compared
            t, prio, eid, _, _ = batch[0]
            heappush(self.env._queue, (t, prio, eid, self._batch_step, (batch, 0)))
        elif batch:
            heappush(self.env._queue, batch[0])

    def _batch_step(self, batch: list, k: int) -> None:
        entry = batch[k]
        batch[k] = None  # let the envelope go once it is processed
        if k + 1 < len(batch):
            t, prio, eid, _, _ = batch[k + 1]
            heappush(self.env._queue, (t, prio, eid, self._batch_step, (batch, k + 1)))
        entry[3](*entry[4])

    def _post(self, src: _Node, dsts: tuple, kind: str, encoded, anonymous: bool) -> None:
        if src.offline:
            return
        targets = self._destinations(dsts)
        payload = _Payload(encoded)
        nbytes = len(encoded.data) + self.framing_bytes
        raw, floats = encoded.array_bytes, encoded.floats
        now = self.env._now
        new_row = self.ledger.new_row
        transmit = self.link_model.transmit
        rnd, sid, srole = src.round, src.id, src.role
        batch = None
        if len(targets) > 1 and self._batch is None:
            batch = self._batch = []  # _schedule holds the copies' entries back (see _push_batch)
        try:
            for dst in targets:
                row = new_row(rnd, sid, dst.id, srole, dst.role, kind, nbytes, raw, floats, now, anonymous)
                transmit(self, src, dst, _Envelope(kind, payload, sid, anonymous, rnd, row, nbytes))
        finally:
            if batch is not None:
                self._batch = None
                self._push_batch(batch)

    def _deliver(self, envl: _Envelope, dst: _Node) -> None:
        row = envl.row
        src = self.nodes[envl.src]
        off = src.spec.offline_at
        if off is not None and row[TX_END] > off:
            self._lose(envl, "sender offline")
            return
        if dst.offline:
            self._lose(envl, "receiver offline")
            return
        row[ARRIVAL] = self.env._now
        row[STATUS] = "delivered"
        w = dst.waiter
        if w is not None and (w[0] is None or _matches(w[0], envl.kind)):
            col = w[2]
            if col is None:  # a receive: resume the actor with this message
                dst.waiter = None
                dst.proc.step(envl)
            elif col.offer(envl):  # a gather, now complete: resume the actor once
                dst.waiter = None
                dst.proc.step(None)
            return
        box = dst.mailbox
        if box is None:
            box = dst.mailbox = deque()
        box.append(envl)

    def _lose(self, envl: _Envelope, note: str) -> None:
        envl.row[STATUS] = "lost"
        envl.row[NOTE] = note

    def _wait(self, node: _Node, kind, timeout: float | None, col=None):
        """Park ``node`` until a message of ``kind`` arrives (resumed with it) or ``timeout``
        (resumed with None). With a collector ``col``, arrivals are offered to it in _deliver and
        the actor resumes once, when ``col`` is complete, instead of once per message."""
        if timeout is not None:
            w = node.waiter = (kind, object(), col)
            self._schedule(timeout, self._expire, node, w)
        else:
            node.waiter = (kind, None, col)
        return _park

    async def _collect(self, node: _Node, kind, col, timeout: float | None) -> None:
        await self._wait(node, kind, timeout, col)

    @staticmethod
    def _expire(node: _Node, w: tuple) -> None:
        if node.waiter is w:
            node.waiter = None
            node.proc.step(None)

    async def _sleep(self, node: _Node, seconds: float) -> None:
        if self.tracing and seconds > 0:
            self.trace.append((node.id, self.env._now, self.env._now + seconds, "sleep"))
        self._schedule(seconds, node.proc.step)
        await _park

    async def _compute(self, node: _Node, flops: float, label: str) -> None:
        speed = node.spec.flops
        if speed == _INF or flops == 0:
            return
        seconds = flops / speed
        if self.tracing:
            self.trace.append((node.id, self.env._now, self.env._now + seconds, label))
        self._schedule(seconds, node.proc.step)
        await _park

    def _go_offline(self, node: _Node) -> None:
        if node.done:
            return
        node.offline = True
        node.waiter = None
        if node.coro is not None:
            node.coro.close()

    # -- running ------------------------------------------------------------------------------
    def _loop(self, until: float | None) -> None:
        """``simpy.Environment.run(until)`` with the same semantics, minus its per-event cost.

        The kernel's own queue entries are plain callbacks, called directly; any other simpy
        event someone put on ``self.env`` (a custom link model, say) is processed exactly as
        ``Environment.step`` would. With ``until``, events before that time are processed and the
        clock ends at ``until``, as in simpy (an urgent stop marker orders it before normal events
        at the same instant).
        """
        env = self.env
        queue = env._queue
        if until is not None:
            at = float(until)
            if not at > env._now:
                raise ValueError(f"until ({at}) must be greater than the current simulation time")
            heappush(queue, (at, URGENT, next(env._eid), None, ()))  # the stop marker
        while queue:
            item = heappop(queue)
            env._now = item[0]
            if len(item) == 5:  # a kernel callback (see _schedule)
                fn = item[3]
                if fn is None:
                    return
                fn(*item[4])
                continue
            event = item[3]
            callbacks, event.callbacks = event.callbacks, None
            for callback in callbacks:
                callback(event)
            if not event._ok and not hasattr(event, "_defused"):
                exc = type(event._value)(*event._value.args)
                exc.__cause__ = event._value
                raise exc

    def run(self, until: float | None = None) -> RunResult:
        """Run every actor until all have finished or are blocked with nothing left to happen
        (or until simulated time ``until``). Blocked actors are then closed (their ``finally``
        blocks run) and listed in ``RunResult.unfinished``.

        Raises ``ActorError`` (with the original exception as ``__cause__``) if an actor
        raises, and ``ForeignAwaitError`` if an actor awaits something this network cannot drive.
        A network runs once.
        """
        if self._ran:
            raise FedsimError("a network runs once; build a new one for another run")
        self._ran = True
        for node in self.nodes.values():
            node.ctx = self.context_class(self, node)
            node.coro = node.actor(node.ctx, *node.args, **(node.kwargs or {}))
            if not hasattr(node.coro, "send"):
                raise FedsimError(f"actor of node {node.id!r} is not an async function "
                                  f"(it returned {type(node.coro).__name__})")
            if node.spec.offline_at is not None:
                self._schedule(node.spec.offline_at, self._go_offline, node)
            node.proc = _ActorProcess(node, node.coro)
            self._schedule(0.0, node.proc.step)
        # A run allocates millions of small tracked objects (ledger rows, envelopes, decoded
        # payloads) that mostly live until the end; CPython's default gen-0 threshold (700 in 3.11)
        # would scan them over and over. Collect less often during the run and restore after.
        threshold = gc.get_threshold()
        gc.set_threshold(max(threshold[0], _GC_GEN0), *threshold[1:])
        try:
            self._loop(until)
        finally:
            gc.set_threshold(*threshold)
            for node in self.nodes.values():
                if not node.done and node.coro is not None:
                    node.coro.close()
        return self._result(self.env.now)
