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

import math
import traceback
from typing import Any

import simpy
from simpy.events import Event, Timeout

from ..seeding import node_rng
from .context import _Envelope, _matches, _Payload
from .errors import ActorError, FedsimError, ForeignAwaitError
from .ledger import ARRIVAL, NOTE, RX_START, STATUS, TX_END, TX_START
from .network import Network, RunResult, _Node

__all__ = ["SimNetwork", "LinkModel", "FifoLinkModel"]

_INF = math.inf


class _Wait:
    """Awaitable of one simpy event: ``__await__`` yields the event, returns its value."""

    __slots__ = ("event",)

    def __init__(self, event: Event) -> None:
        self.event = event

    def __await__(self):
        return (yield self.event)


class _ActorProcess:
    """Steps one actor coroutine through simpy events (a minimal, coroutine-aware Process)."""

    __slots__ = ("net", "node", "coro")

    def __init__(self, net: "SimNetwork", node: _Node, coro) -> None:
        self.net = net
        self.node = node
        self.coro = coro
        start = Event(net.env)
        start.callbacks.append(self._resume)
        start.succeed()

    def _resume(self, event: Event) -> None:
        if self.node.offline:
            return
        if event._ok:
            self._step(event._value, None)
        else:
            event._defused = True
            self._step(None, event._value)

    def _step(self, value: Any, exc: BaseException | None) -> None:
        coro = self.coro
        node = self.node
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
            if not isinstance(target, Event):
                value, exc = None, ForeignAwaitError(
                    f"actor {node.id!r} (role {node.role!r}) awaited {target!r:.120}, which SimNetwork "
                    "cannot drive; an actor may only await its ctx methods"
                )
                continue
            if target.callbacks is not None:
                target.callbacks.append(self._resume)
                return
            # already processed: continue synchronously
            if target._ok:
                value, exc = target._value, None
            else:
                target._defused = True
                value, exc = None, target._value


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


class _Call(Event):
    """A scheduled kernel callback (cheaper than a process)."""

    __slots__ = ()

    def __init__(self, env: simpy.Environment, delay: float, fn, *args) -> None:
        self.env = env
        self.callbacks = [lambda _ev: fn(*args)]
        self._value = None
        self._ok = True
        env.schedule(self, simpy.events.NORMAL, delay)


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

    # -- primitives ---------------------------------------------------------------------------
    def _now(self) -> float:
        return self.env._now

    def _schedule(self, delay: float, fn, *args) -> None:
        _Call(self.env, delay, fn, *args)

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
        for dst in targets:
            row = new_row(rnd, sid, dst.id, srole, dst.role, kind, nbytes, raw, floats, now, anonymous)
            transmit(self, src, dst, _Envelope(kind, payload, sid, anonymous, rnd, row, nbytes))

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
        if w is not None and _matches(w[0], envl.kind):
            dst.waiter = None
            w[1].succeed(envl)
            return
        if dst.mailbox is None:
            dst.mailbox = []
        dst.mailbox.append(envl)

    def _lose(self, envl: _Envelope, note: str) -> None:
        envl.row[STATUS] = "lost"
        envl.row[NOTE] = note

    async def _receive(self, node: _Node, kind, timeout: float | None):
        box = node.mailbox
        if box:
            for i, envl in enumerate(box):
                if kind is None or _matches(kind, envl.kind):
                    del box[i]
                    return envl
        if timeout is not None and timeout <= 0:
            return None
        ev = Event(self.env)
        node.waiter = (kind, ev)
        if timeout is not None:
            self._schedule(timeout, self._expire, node, ev)
        return await _Wait(ev)

    @staticmethod
    def _expire(node: _Node, ev: Event) -> None:
        if node.waiter is not None and node.waiter[1] is ev:
            node.waiter = None
            ev.succeed(None)

    async def _sleep(self, node: _Node, seconds: float) -> None:
        if self.tracing and seconds > 0:
            self.trace.append((node.id, self.env._now, self.env._now + seconds, "sleep"))
        await _Wait(Timeout(self.env, seconds))

    async def _compute(self, node: _Node, flops: float, label: str) -> None:
        speed = node.spec.flops
        if speed == _INF or flops == 0:
            return
        seconds = flops / speed
        if self.tracing:
            self.trace.append((node.id, self.env._now, self.env._now + seconds, label))
        await _Wait(Timeout(self.env, seconds))

    def _go_offline(self, node: _Node) -> None:
        if node.done:
            return
        node.offline = True
        node.waiter = None
        if node.coro is not None:
            node.coro.close()

    # -- running ------------------------------------------------------------------------------
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
            node.coro = node.actor(node.ctx, *node.args, **node.kwargs)
            if not hasattr(node.coro, "send"):
                raise FedsimError(f"actor of node {node.id!r} is not an async function "
                                  f"(it returned {type(node.coro).__name__})")
            if node.spec.offline_at is not None:
                self._schedule(node.spec.offline_at, self._go_offline, node)
            _ActorProcess(self, node, node.coro)
        try:
            self.env.run(until=until)
        finally:
            for node in self.nodes.values():
                if not node.done and node.coro is not None:
                    node.coro.close()
        return self._result(self.env.now)
