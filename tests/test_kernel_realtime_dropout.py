"""Dropout (``offline_at``, ``Faults(dropout=...)``) on the real-time transports means what it
means on SimNetwork: the actor is closed at its offline time (its ``finally`` runs, cannot wait,
and what it sends then has no row), it is listed in ``RunResult.offline``, a message sent to it
afterwards is recorded lost with the note ``receiver offline`` (also when its actor had finished),
one it still sends after its offline time ``sender offline``, a node offline from the start never
runs, and a dropout still to come is not a deadlock. Before, AsyncioNetwork refused every node with
an ``offline_at`` (``NetworkConfigError``), so a run with ``--dropout`` ran or failed depending on
whether the seed made some client drop out."""

from __future__ import annotations

import time

import pytest

from fedsim.kernel import AsyncioNetwork, DeadlockError, SimNetwork

SCALE = 0.01  # real seconds per protocol second: offline at 1.0 is 10 ms into the run


def _rows(net) -> dict:
    return {(r["src"], r["dst"], r["kind"]): r for r in net.ledger.records()}


def _net(transport):
    return SimNetwork(seed=0) if transport == "sim" else AsyncioNetwork(seed=0, time_scale=SCALE)


def _waiter(log):
    async def actor(ctx):
        try:
            await ctx.receive("never")
        finally:
            log.append(("finally", ctx.node_id))
            await ctx.send("S", "bye", {})  # dropped: no row
    return actor


def _late_sender(at, dst):
    async def actor(ctx):
        await ctx.sleep(at)
        await ctx.send(dst, "m", {"x": 1})
        return "sent"
    return actor


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
def test_a_blocked_actor_is_closed_at_its_offline_time_and_later_messages_are_lost(transport):
    log = []
    net = _net(transport)
    net.add_node("A", _waiter(log), offline_at=1.0)
    net.add_node("S", _late_sender(3.0, "A"))
    res = net.run()
    assert res.offline == ["A"] and res.unfinished == [] and res.complete
    assert res["S"] == "sent"
    assert log == [("finally", "A")]
    rows = _rows(net)
    assert set(rows) == {("S", "A", "m")}  # A's send from its finally block left no row
    assert rows[("S", "A", "m")]["status"] == "lost" and rows[("S", "A", "m")]["note"] == "receiver offline"
    assert res.duration >= 3.0


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
def test_a_dropout_still_to_come_is_not_a_deadlock(transport):
    # everyone else has finished and A waits for ever: on SimNetwork A's dropout at 2 s is still
    # to happen, and then A is offline, not blocked; the run is complete
    log = []
    net = _net(transport)
    net.add_node("A", _waiter(log), offline_at=2.0)
    net.add_node("S", _late_sender(0.0, "B"))
    net.add_node("B", _late_sender(0.0, "S"))
    res = net.run()
    assert res.complete and res.offline == ["A"]
    assert res.duration >= 2.0
    assert log == [("finally", "A")]


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
def test_a_blocked_actor_with_no_dropout_to_come_is_still_a_deadlock(transport):
    net = _net(transport)
    net.add_node("A", _waiter([]), offline_at=None)
    net.add_node("D", _waiter([]), offline_at=0.5)  # its dropout comes and goes: A stays blocked
    with pytest.raises(DeadlockError) as info:
        net.run()
    assert list(info.value.blocked) == ["A"] and info.value.offline == ["D"]


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
def test_a_node_offline_from_the_start_never_runs(transport):
    ran = []

    async def actor(ctx):
        ran.append(ctx.node_id)
        await ctx.send("S", "m", {})

    net = _net(transport)
    net.add_node("A", actor, offline_at=0.0)
    net.add_node("S", _late_sender(0.5, "A"))
    res = net.run()
    assert ran == [] and res.offline == ["A"]
    assert [(r["src"], r["status"], r["note"]) for r in net.ledger.records()] == [("S", "lost", "receiver offline")]


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
def test_a_finished_node_whose_link_drops_receives_nothing_afterwards(transport):
    async def early(ctx):
        return "done"

    net = _net(transport)
    net.add_node("S", _late_sender(2.0, "D"))
    net.add_node("D", early, offline_at=1.0)
    res = net.run()
    row = _rows(net)[("S", "D", "m")]
    assert row["status"] == "lost" and row["note"] == "receiver offline"
    assert res["D"] == "done" and res.offline == []


def test_asyncio_a_message_sent_after_the_offline_time_is_lost_sender_offline():
    # A holds the loop (a blocking computation) past its offline time, so its cancellation
    # cannot take effect before it sends: the copy is cut, as a copy SimNetwork had not finished
    # transmitting at offline_at; A is then cancelled at its next await
    log = []

    async def busy(ctx):
        try:
            time.sleep(5 * SCALE)  # 5 protocol seconds, the loop held
            await ctx.send("S", "m", {"x": 1})
            await ctx.sleep(0.0)
            log.append("went on")
        finally:
            log.append("closed")

    async def server(ctx):
        return await ctx.receive("m", timeout=10.0)

    net = AsyncioNetwork(seed=0, time_scale=SCALE)
    net.add_node("A", busy, offline_at=1.0)
    net.add_node("S", server)
    res = net.run()
    assert res.offline == ["A"] and res["S"] is None
    assert log == ["closed"]
    row = _rows(net)[("A", "S", "m")]
    assert row["status"] == "lost" and row["note"] == "sender offline"


def test_asyncio_a_copy_drawn_lost_keeps_link_loss_when_the_sender_is_cut_too():
    async def busy(ctx):
        time.sleep(3 * SCALE)
        await ctx.send("S", "m", {"x": 1})

    async def server(ctx):
        return await ctx.receive("m", timeout=5.0)

    net = AsyncioNetwork(seed=3, time_scale=SCALE)
    net.add_node("A", busy, offline_at=1.0, loss=1.0)
    net.add_node("S", server)
    net.run()
    row = _rows(net)[("A", "S", "m")]
    assert row["status"] == "lost" and row["note"] == "link loss"
