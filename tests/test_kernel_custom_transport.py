"""A transport written from docs/network-model.md ("Writing a transport") with the public
building blocks only: ``Network`` with the ``ClosedOnDropout`` mixin, ``ledger.new_row``,
``Envelope``, ``Payload``, ``node.hand_over`` / ``withdraw``. It delivers each copy one loop pass
after its send (``call_soon``), unlike ``AsyncioNetwork``, and runs the same actors to the same
parameters as ``SimNetwork``."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from fedsim.kernel import ActorError, Envelope, Faults, Network, Payload, SimNetwork
from fedsim.kernel.ledger import ARRIVAL, NOTE, RX_START, STATUS, TX_END, TX_START
from fedsim.kernel.node import hand_over, withdraw
from fedsim.kernel.realtime import ClosedOnDropout
from fedsim.protocols import REGISTRY


class SoonNetwork(ClosedOnDropout, Network):
    """Actors as asyncio tasks; a copy arrives one loop pass after it is sent. No dropout.
    (It makes neither ``closed`` nor ``time_scale``: the mixin provides them.)"""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.loop, self.t0, self.end_t = None, 0.0, 0.0
        self.blocked = self.inflight = self.finished = 0
        self.quiet, self.error = None, None

    def now(self):
        return self.loop.time() - self.t0 if self.loop is not None and not self.ended else self.end_t

    def post(self, src, dsts, kind, encoded, anonymous):
        targets = self.destinations(dsts)
        payload, nbytes, now = Payload(encoded), len(encoded.data) + self.framing_bytes, self.now()
        src.sent += len(targets)
        for dst in targets:
            row = self.ledger.new_row(src.round, src.id, dst.id, src.role, dst.role, kind, nbytes,
                                      encoded.array_bytes, encoded.floats, now, anonymous)
            row[TX_START] = row[TX_END] = now
            if src.spec.loss and self.draw_loss(src):
                row[STATUS], row[NOTE] = "lost", "link loss"
                continue
            self.inflight += 1
            self.loop.call_soon(self.arrive, dst, Envelope(kind, payload, src.id, anonymous, src.round, row, nbytes))

    def arrive(self, dst, envl):
        self.inflight -= 1
        if self.ended:
            return
        envl.row[RX_START] = envl.row[ARRIVAL] = self.now()
        envl.row[STATUS] = "delivered"
        if hand_over(dst, envl):
            self.blocked -= 1
        self.check_quiet()

    async def wait_for_message(self, node, kind, timeout):
        fut = self.loop.create_future()
        node.waiter = (kind, fut, timeout is None)
        if timeout is None:
            self.blocked += 1
            self.check_quiet()
            try:
                return await fut
            except asyncio.CancelledError:
                if withdraw(node, fut):
                    self.blocked -= 1
                raise
        return await self.message_within(node, fut, timeout)

    def check_quiet(self):
        if self.quiet is not None and self.inflight == 0 and self.finished + self.blocked >= len(self.nodes):
            self.quiet.set()

    def task_done(self, node, task):
        self.finished += 1
        if not task.cancelled():
            if task.exception() is not None:
                self.error = self.error or ActorError(node.id, node.role, task.exception())
                self.quiet.set()
            else:
                node.done, node.result = True, task.result()
        self.check_quiet()

    async def run_async(self, strict):
        self.check_faults()
        self.check_tap()
        self.call_before_run()
        self.ran = True
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()
        self.quiet = asyncio.Event()
        coros = [self.actor_coroutine(n) for n in self.nodes.values()]
        tasks = []
        for node, coro in zip(self.nodes.values(), coros):
            task = self.loop.create_task(coro)
            task.add_done_callback(lambda t, n=node: self.task_done(n, t))
            tasks.append(task)
        result = None
        try:
            await self.quiet.wait()
            self.end_t = self.now()
            self.end_run()
            if self.error is None:
                result = self.finish(self.end_t, strict=strict)
        finally:
            self.end_run()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self.error is not None:
            raise self.error
        return result

    def run(self, *, strict=True):
        return asyncio.run(self.run_async(strict))


@pytest.mark.parametrize("name", ["fedrec", "fedrecpp", "fpl"])
def test_a_transport_of_ones_own_runs_the_protocols_to_the_simulators_parameters(name):
    spec = REGISTRY[name]
    data, cfg = spec.tiny(4, 2, 0)
    results = []
    for net in (SimNetwork(seed=0, profile="wan"), SoonNetwork(seed=0)):
        results.append(spec.build(net, data, cfg).collect(net.run()))
    sim, soon = results
    assert sim.params.keys() == soon.params.keys()
    for key in sim.params:
        assert np.asarray(sim.params[key]).tobytes() == np.asarray(soon.params[key]).tobytes(), key
    assert soon.ledger.totals()["messages"] == sim.ledger.totals()["messages"]
    assert soon.ledger.totals()["bytes"] == sim.ledger.totals()["bytes"]


def test_a_transport_of_ones_own_loses_the_messages_the_simulator_loses_and_sleeps_in_real_time():
    async def sender(ctx):
        await ctx.sleep(0.01)  # time_scale 1.0 from the mixin: 10 ms of real time
        for i in range(20):
            await ctx.send("b", "m", {"i": i})

    async def sink(ctx):
        # the first message is waited for as long as it takes: with a 0.2 s wait, a process held
        # back 0.2 s (a loaded machine) while the sender slept and the sink waited gave up first,
        # and the sink received nothing; 0.2 s after the last one, it stops
        got = []
        msg = await ctx.receive("m", timeout=30.0)
        while msg is not None:
            got.append(msg.payload["i"])
            msg = await ctx.receive("m", timeout=0.2)
        return got

    lost = []
    for net in (SimNetwork(seed=3, faults=Faults(loss=0.3, roles="s")), SoonNetwork(seed=3, faults=Faults(loss=0.3, roles="s"))):
        net.add_node("a", sender, role="s")
        net.add_node("b", sink, role="r")
        res = net.run()
        lost.append([r["seq"] for r in net.ledger.records() if r["status"] == "lost"])
        assert len(res.results["b"]) == 20 - len(lost[-1])
    assert lost[0] == lost[1] and 0 < len(lost[0]) < 20
    assert res.duration >= 0.01 + 0.2


# -- a transport with no asyncio at all: the public pieces with futures of its own ---------------
# (docs/network-model.md, "What a transport must keep": hand_over and the base class's collect take
# any future with done() and set_result(); dropout, deadlock detection and shutdown by hand)

import heapq  # noqa: E402
import selectors  # noqa: E402
import time  # noqa: E402

from fedsim.kernel import DeadlockError, FedsimError, RunEnded  # noqa: E402
from fedsim.kernel.node import offline_wait  # noqa: E402


class Future:
    """What a parked actor yields; ``hand_over`` resolves it (done(), set_result())."""

    __slots__ = ("net", "node", "value", "_done")

    def __init__(self, net, node):
        self.net, self.node, self.value, self._done = net, node, None, False

    def done(self):
        return self._done

    def set_result(self, value):
        if self._done:
            return
        self._done, self.value = True, value
        self.net.ready.append((self.node, value))

    def __await__(self):
        return (yield self)


class StepperNetwork(Network):
    def __init__(self, *, time_scale: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        if not time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale!r}")
        self.time_scale = float(time_scale)
        self.t0 = None
        self.stopped = 0.0
        self.last = 0.0  # the time of the last thing that happened (the run's duration)
        self.ready = []  # (node, value) to step
        self.timers = []  # heap of (when, seq, fn, args)
        self.tseq = 0
        self.closed = set()

    # -- clock and timers ----------------------------------------------------------------
    def now(self):
        if self.t0 is None:
            return self.stopped
        return (time.monotonic() - self.t0) / self.time_scale

    def call_later(self, seconds, fn, *args):
        self.tseq += 1
        heapq.heappush(self.timers, (self.now() + seconds, self.tseq, fn, args))

    # -- the transport interface ---------------------------------------------------------
    def post(self, src, dsts, kind, encoded, anonymous):
        if src.id in self.closed:
            return
        targets = self.destinations(dsts)
        payload, nbytes, now = Payload(encoded), len(encoded.data) + self.framing_bytes, self.now()
        self.last = now
        src.sent += len(targets)
        off = src.spec.offline_at
        cut = off is not None and now >= off
        for dst in targets:
            row = self.ledger.new_row(src.round, src.id, dst.id, src.role, dst.role, kind, nbytes,
                                      encoded.array_bytes, encoded.floats, now, anonymous)
            if self.tap is not None:
                self.tap.observe(row, payload)
            row[TX_START] = row[TX_END] = now
            note = None
            if src.spec.loss and self.draw_loss(src):
                note = "link loss"
            elif cut:
                note = "sender offline"
            elif dst.offline or ((doff := dst.spec.offline_at) is not None and now >= doff):
                note = "receiver offline"
            if note is not None:
                row[STATUS], row[NOTE] = "lost", note
                continue
            row[RX_START] = row[ARRIVAL] = now
            row[STATUS] = "delivered"
            hand_over(dst, Envelope(kind, payload, src.id, anonymous, src.round, row, nbytes))

    async def wait(self, node, kind, timeout):
        if node.id in self.closed:
            raise offline_wait(node)
        fut = Future(self, node)
        node.waiter = (kind, fut, timeout is None)
        if timeout is not None:
            self.call_later(timeout, self.expire, node, fut)
        return await fut

    def expire(self, node, fut):
        if not fut.done():
            if node.waiter is not None and node.waiter[1] is fut:
                node.waiter = None
            fut.set_result(None)

    async def sleep(self, node, seconds):
        if node.id in self.closed:
            raise offline_wait(node)
        fut = Future(self, node)
        self.call_later(seconds, fut.set_result, None)
        await fut

    async def compute(self, node, flops, label):
        if node.id in self.closed:
            raise offline_wait(node)
        fut = Future(self, node)
        fut.set_result(None)  # one pass of the loop
        await fut

    # -- running ---------------------------------------------------------------------------
    def step(self, node, value):
        if node.done or node.offline:
            return
        self.last = self.now()
        try:
            got = node.coro.send(value)
        except StopIteration as stop:
            node.done, node.result = True, stop.value
            return
        except Exception as err:
            raise ActorError(node.id, node.role, err) from err
        if not isinstance(got, Future):
            raise ActorError(node.id, node.role, TypeError(f"awaited {got!r}, which stepper cannot drive"))

    def go_offline(self, node):
        if node.done or node.offline:
            return
        self.last = self.now()
        node.offline = True
        node.waiter = None
        self.closed.add(node.id)
        self.close(node)

    @staticmethod
    def close(node):
        try:
            node.coro.close()
        except RunEnded:
            pass
        except Exception as err:
            raise ActorError(node.id, node.role, err) from err

    def run(self, *, strict=True):
        if self.ran:
            raise FedsimError("a network runs once")
        self.check_faults()
        self.check_tap()
        self.call_before_run()
        self.ran = True
        for node in self.nodes.values():
            node.coro = self.actor_coroutine(node)
        self.t0 = time.monotonic()
        for node in self.nodes.values():
            off = node.spec.offline_at
            if off is not None and off <= 0:
                node.offline = True  # never starts
                self.closed.add(node.id)
                node.coro.close()
                continue
            if off is not None:
                self.call_later(off, self.go_offline, node)
            self.ready.append((node, None))
        sel = selectors.DefaultSelector()
        try:
            while True:
                while self.ready:
                    node, value = self.ready.pop(0)
                    self.step(node, value)
                # drop timers that can do nothing any more
                while self.timers and self.stale(self.timers[0]):
                    heapq.heappop(self.timers)
                if not self.timers:
                    break
                when, _, fn, args = self.timers[0]
                delay = when - self.now()
                if delay > 0:
                    sel.select(delay * self.time_scale)
                    continue
                heapq.heappop(self.timers)
                fn(*args)
            self.stopped, self.t0 = self.last, None
            return self.finish(self.last, strict=strict)
        finally:
            if self.t0 is not None:
                self.stopped, self.t0 = self.now(), None
            sel.close()
            self.end_run()
            for node in self.nodes.values():
                if not node.done and not node.offline and node.coro is not None:
                    self.close(node)

    def stale(self, timer):
        _, _, fn, args = timer
        if fn == self.go_offline:
            return args[0].done or args[0].offline
        if fn == self.expire:
            return args[1].done()
        return False


def _fates(ledger):
    keep = ("round", "src", "dst", "kind", "bytes", "status", "read", "note")
    return sorted(tuple(r[k] for k in keep) for r in ledger.records())


@pytest.mark.parametrize("name", ["fedrec", "fedrecpp"])
def test_a_transport_without_asyncio_runs_the_protocols_with_loss_deadlines_and_dropout_to_the_simulators_bits(name):
    import dataclasses

    spec = REGISTRY[name]
    data, cfg = spec.tiny(6, 2, 0)
    cfg = dataclasses.replace(cfg, deadline=0.05)
    faults = Faults(loss=0.2, dropout=0.3, window=(0.0, 0.0))
    out = []
    for net in (SimNetwork(seed=1, faults=faults), StepperNetwork(seed=1, faults=faults)):
        res = spec.build(net, data, cfg).collect(net.run())
        out.append((res, net))
    (sim, sim_net), (mine, my_net) = out
    for key in sim.params:
        assert np.asarray(sim.params[key]).tobytes() == np.asarray(mine.params[key]).tobytes(), key
    assert my_net.result.offline == sim_net.result.offline and sim_net.result.offline
    fates = _fates(sim_net.ledger)
    assert fates == _fates(my_net.ledger)
    assert {f[-1] for f in fates if f[5] == "lost"} == {"link loss", "receiver offline"}


def test_a_transport_without_asyncio_names_the_blocked_actors_of_a_deadlock():
    async def server(ctx):
        await ctx.gather("up", senders=["a", "b"])

    async def client(ctx):
        await ctx.send("server", "up", {"x": 1})

    net = StepperNetwork(seed=0)
    net.add_node("server", server, role="server")
    net.add_node("a", client)
    net.add_node("b", client, offline_at=0.0)
    with pytest.raises(DeadlockError) as err:
        net.run()
    text = str(err.value)
    assert "server waits in gather 'up' for 1 of 2 senders: b (offline: b)" in text, text
    assert net.result.offline == ["b"] and net.result.unfinished == ["server"]
