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
