"""``RunResult.flops``: the kernel counts, per node and label, the FLOPs of every ``ctx.compute``
call that returned, whatever became of the node afterwards. Before, nothing in the kernel counted
them: a protocol added up its clients' return values, and a client that dropped out (or was closed
at the run's end) never returned, so its work vanished from the figures (PersonalFR's and FedAvg's
``client_flops``)."""

from __future__ import annotations

import pytest

from fedsim.kernel import AsyncioNetwork, DeadlockError, SimNetwork, TcpNetwork

SCALE = 0.01  # real seconds per protocol second (the real-time transports)
RUN_TIMEOUT = 60.0
TRANSPORTS = ["sim", "asyncio", "tcp"]


def _net(transport, seed=0):
    if transport == "tcp":  # one process per node: every count crosses a process boundary
        return TcpNetwork(seed=seed, time_scale=SCALE, processes=None)
    return SimNetwork(seed=seed) if transport == "sim" else AsyncioNetwork(seed=seed, time_scale=SCALE)


def _run(net, **kw):
    return net.run(**kw) if isinstance(net, SimNetwork) else net.run(timeout=RUN_TIMEOUT, **kw)


async def _server(ctx, clients):
    got = await ctx.gather("up", senders=clients)
    await ctx.compute(2.5 * len(got), "aggregate")
    await ctx.broadcast(clients, "stop", {})
    return len(got)


async def _client(ctx, steps, each):
    for _ in range(steps):
        await ctx.compute(each, "train")
    await ctx.compute(7, "eval")
    await ctx.send("s", "up", {"x": 1})
    await ctx.receive("stop")
    return steps


async def _idle(ctx):
    return "idle"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_every_transport_counts_the_same_flops_per_node_and_label(transport):
    net = _net(transport)
    net.add_node("s", _server, ["a", "b"], role="server")
    net.add_node("a", _client, 3, 1000.0)
    net.add_node("b", _client, 2, 0.5)
    net.add_node("i", _idle)
    res = _run(net)
    assert res.results == {"s": 2, "a": 3, "b": 2, "i": "idle"}
    assert res.flops == {"s": {"aggregate": 5.0}, "a": {"train": 3000.0, "eval": 7.0},
                         "b": {"train": 1.0, "eval": 7.0}}  # "i" computed nothing: no entry
    assert res.total_flops() == 3000.0 + 7.0 + 1.0 + 7.0 + 5.0
    assert res.total_flops(["a", "b"], "train") == 3001.0
    assert res.total_flops(["a", "i"], ["train", "eval"]) == 3007.0
    assert res.total_flops("s") == 5.0


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_flops_of_a_node_that_dropped_out_still_count(transport):
    async def worker(ctx):
        await ctx.compute(11, "train")
        await ctx.compute(4, "train")
        await ctx.receive("never")  # closed here by its dropout at t = 50

    net = _net(transport)
    # (at 50: 0.5 s of real time to compute first; at 1, 10 ms, a TCP worker run late by a loaded
    # machine was closed after the first compute)
    net.add_node("w", worker, offline_at=50.0)
    res = _run(net)
    assert res.offline == ["w"] and res.results == {}
    assert res.flops == {"w": {"train": 15.0}}


def test_a_compute_cut_by_the_dropout_does_not_count_the_ones_before_do():
    # 1000 FLOP/s: each compute of 1000 takes one simulated second; the dropout at 2.5 s cuts the
    # third, which never returned
    async def worker(ctx):
        for _ in range(5):
            await ctx.compute(1000, "train")

    net = SimNetwork(seed=0)
    net.add_node("w", worker, flops=1000.0, offline_at=2.5)
    res = net.run()
    assert res.offline == ["w"]
    assert res.flops == {"w": {"train": 2000.0}}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_flops_of_an_actor_closed_at_a_deadlock_count(transport):
    async def stuck(ctx):
        await ctx.compute(3, "setup")
        await ctx.compute(2, "setup")
        await ctx.compute(1, 42)  # a label that is not a str counts under its str
        await ctx.receive("never")

    net = _net(transport)
    net.add_node("x", stuck)
    with pytest.raises(DeadlockError) as err:
        _run(net)
    assert err.value.result.flops == {"x": {"setup": 5.0, "42": 1.0}}
    assert err.value.result.unfinished == ["x"]
