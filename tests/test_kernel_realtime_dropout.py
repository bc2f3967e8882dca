"""Dropout (``offline_at``, ``Faults(dropout=...)``) on the real-time transports (AsyncioNetwork,
TcpNetwork) means what it means on SimNetwork: the actor is closed at its offline time (its
``finally`` runs, cannot wait, and what it sends then has no row), it is listed in
``RunResult.offline``, a message sent to it afterwards is recorded lost with the note ``receiver
offline`` (also when its actor had finished), one it still sends after its offline time ``sender
offline``, a node offline from the start never runs, and a dropout still to come is not a deadlock.
Before, AsyncioNetwork refused every node with an ``offline_at`` (``NetworkConfigError``), so a run
with ``--dropout`` ran or failed depending on whether the seed made some client drop out, and
TcpNetwork refused any dropout."""

from __future__ import annotations

import math
import time

import pytest

from fedsim.kernel import AsyncioNetwork, DeadlockError, SimNetwork, TcpNetwork

SCALE = 0.01  # real seconds per protocol second: offline at 1.0 is 10 ms into the run
RUN_TIMEOUT = 60.0
TRANSPORTS = ["sim", "asyncio", "tcp"]


class _Log:
    """What actors did, kept in a file: TcpNetwork's actors run in forked processes, whose lists
    the test would never see."""

    def __init__(self, path) -> None:
        self.path = path
        path.write_text("")

    def append(self, item) -> None:
        with open(self.path, "a") as f:
            f.write(repr(item) + "\n")

    def items(self) -> list:
        import ast

        return [ast.literal_eval(line) for line in self.path.read_text().splitlines()]


def _rows(net) -> dict:
    return {(r["src"], r["dst"], r["kind"]): r for r in net.ledger.records()}


def _net(transport, seed=0):
    if transport == "tcp":  # one process per node: every message crosses processes
        return TcpNetwork(seed=seed, time_scale=SCALE, processes=None)
    return SimNetwork(seed=seed) if transport == "sim" else AsyncioNetwork(seed=seed, time_scale=SCALE)


def _run(net, **kw):
    return net.run(**kw) if isinstance(net, SimNetwork) else net.run(timeout=RUN_TIMEOUT, **kw)


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


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_blocked_actor_is_closed_at_its_offline_time_and_later_messages_are_lost(transport, tmp_path):
    log = _Log(tmp_path / "log")
    net = _net(transport)
    net.add_node("A", _waiter(log), offline_at=1.0)
    net.add_node("S", _late_sender(3.0, "A"))
    res = _run(net)
    assert res.offline == ["A"] and res.unfinished == [] and res.complete
    assert res["S"] == "sent"
    assert log.items() == [("finally", "A")]
    rows = _rows(net)
    assert set(rows) == {("S", "A", "m")}  # A's send from its finally block left no row
    assert rows[("S", "A", "m")]["status"] == "lost" and rows[("S", "A", "m")]["note"] == "receiver offline"
    assert res.duration >= 3.0


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_dropout_still_to_come_is_not_a_deadlock(transport, tmp_path):
    # everyone else has finished and A waits for ever: on SimNetwork A's dropout at 2 s is still
    # to happen, and then A is offline, not blocked; the run is complete
    log = _Log(tmp_path / "log")
    net = _net(transport)
    net.add_node("A", _waiter(log), offline_at=2.0)
    net.add_node("S", _late_sender(0.0, "B"))
    net.add_node("B", _late_sender(0.0, "S"))
    res = _run(net)
    assert res.complete and res.offline == ["A"]
    assert res.duration >= 2.0
    assert log.items() == [("finally", "A")]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_blocked_actor_with_no_dropout_to_come_is_still_a_deadlock(transport, tmp_path):
    net = _net(transport)
    net.add_node("A", _waiter(_Log(tmp_path / "a")), offline_at=None)
    net.add_node("D", _waiter(_Log(tmp_path / "d")), offline_at=0.5)  # its dropout comes and goes: A stays blocked
    with pytest.raises(DeadlockError) as info:
        _run(net)
    assert list(info.value.blocked) == ["A"] and info.value.offline == ["D"]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_node_offline_from_the_start_never_runs(transport, tmp_path):
    ran = _Log(tmp_path / "ran")

    async def actor(ctx):
        ran.append(ctx.node_id)
        await ctx.send("S", "m", {})

    net = _net(transport)
    net.add_node("A", actor, offline_at=0.0)
    net.add_node("S", _late_sender(0.5, "A"))
    res = _run(net)
    assert ran.items() == [] and res.offline == ["A"]
    assert [(r["src"], r["status"], r["note"]) for r in net.ledger.records()] == [("S", "lost", "receiver offline")]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_finished_node_whose_link_drops_receives_nothing_afterwards(transport):
    async def early(ctx):
        return "done"

    net = _net(transport)
    # D must have ended before its dropout: 0.5 s of real time for its first step (at 1.0, 10 ms,
    # a loaded machine that ran D's process late made the dropout come first: offline ['D']). S
    # sends after it whatever the load (the sender reads the clock: now >= 55 > 50), so 55, not 100
    net.add_node("S", _late_sender(55.0, "D"))
    net.add_node("D", early, offline_at=50.0)
    res = _run(net)
    row = _rows(net)[("S", "D", "m")]
    assert row["status"] == "lost" and row["note"] == "receiver offline"
    assert res["D"] == "done" and res.offline == []


@pytest.mark.parametrize("transport", ["asyncio", "tcp"])
def test_a_message_sent_after_the_offline_time_is_lost_sender_offline(transport, tmp_path):
    # A holds the loop (a blocking computation) past its offline time, so its cancellation
    # cannot take effect before it sends: the copy is cut, as a copy SimNetwork had not finished
    # transmitting at offline_at; A is then cancelled at its next await
    log = _Log(tmp_path / "log")

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

    net = _net(transport)
    net.add_node("A", busy, offline_at=1.0)
    net.add_node("S", server)
    res = _run(net)
    assert res.offline == ["A"] and res["S"] is None
    assert log.items() == ["closed"]
    row = _rows(net)[("A", "S", "m")]
    assert row["status"] == "lost" and row["note"] == "sender offline"


@pytest.mark.parametrize("transport", ["asyncio", "tcp"])
def test_a_copy_drawn_lost_keeps_link_loss_when_the_sender_is_cut_too(transport):
    async def busy(ctx):
        time.sleep(3 * SCALE)
        await ctx.send("S", "m", {"x": 1})

    async def server(ctx):
        return await ctx.receive("m", timeout=5.0)

    net = _net(transport, seed=3)
    net.add_node("A", busy, offline_at=1.0, loss=1.0)
    net.add_node("S", server)
    _run(net)
    row = _rows(net)[("A", "S", "m")]
    assert row["status"] == "lost" and row["note"] == "link loss"


def test_tcp_a_frame_that_arrives_after_its_receivers_dropout_is_lost_there(tmp_path):
    # S sends to R before R's offline time; R's process is held (B blocks the loop) until after
    # it, so the frame is read late: the receiver records it lost (its bytes came in, rx_start is
    # set; no arrival), where the sender could not know. Half a second of real time between the
    # steps (B holds R's process from its start, S sends, R's dropout, B lets go): with 5 ms
    # (S at 0.1, R at 1.0) a loaded machine ran S's process late, past R's dropout. B lets go at
    # 22, not 30: the frame is read after it, so after R's dropout at 20, however late, as the
    # receiving process judges it by the clock
    scale = 0.05
    hold = 22.0

    async def hog(ctx):
        time.sleep(hold * scale)  # R's process can read nothing until `hold` protocol seconds
        return "held"

    async def sender(ctx):
        await ctx.sleep(10.0)
        await ctx.send("R", "m", {"x": 1})
        return "sent"

    log = _Log(tmp_path / "log")
    net = TcpNetwork(seed=0, time_scale=scale, processes=2, placement={"S": 0, "R": 1, "B": 1})
    net.add_node("S", sender)
    net.add_node("R", _waiter(log), offline_at=20.0)
    net.add_node("B", hog)
    res = _run(net)
    assert res.offline == ["R"] and res["S"] == "sent" and res["B"] == "held" and res.complete
    assert log.items() == [("finally", "R")]
    [row] = net.ledger.records()
    assert (row["src"], row["dst"], row["status"], row["note"]) == ("S", "R", "lost", "receiver offline")
    assert row["send_time"] < 20.0 <= row["rx_start"] and math.isnan(row["arrival_time"])
    assert row["tx_end"] < 20.0  # it was on the wire before R dropped out
    assert res.duration >= hold


def test_tcp_a_dropout_still_to_come_keeps_the_run_going_across_processes(tmp_path):
    # every process idle (A blocked, the others finished) but A's dropout still to come: the
    # coordinator's polls must not take that for the end (a deadlock naming A)
    log = _Log(tmp_path / "log")
    net = TcpNetwork(seed=0, time_scale=SCALE, processes=2, placement={"A": 1, "S": 0})
    # 1 s: many polls (at 0.3 s, a loaded machine made S's message come after A's dropout)
    net.add_node("A", _waiter(log), offline_at=100.0)
    net.add_node("S", _late_sender(0.0, "A"))
    res = _run(net)
    assert res.complete and res.offline == ["A"] and res.duration >= 100.0
    row = _rows(net)[("S", "A", "m")]
    assert row["status"] == "delivered" and row["read"] is False
    assert log.items() == [("finally", "A")]


async def _idle(ctx):
    return None


@pytest.mark.parametrize("transport", ["asyncio", "tcp"])
def test_a_dropout_cancelling_a_timed_receive_as_its_message_arrives_is_not_lost(transport):
    # Python 3.11's asyncio.wait_for, cancelled in the loop pass in which the awaited future got
    # its result, returns the result and loses the cancellation: a timed receive cancelled by its
    # node's dropout (or by the run's end) just as a message came went on as if nothing happened
    # (the actor ran on after its dropout, and at the run's end the worker waited for it).
    # Forced here: the message and the cancellation land in the same pass, before the actor's task runs.
    import asyncio
    from types import SimpleNamespace

    from fedsim.kernel.node import hand_over

    net = _net(transport)
    net.add_node("a", _idle)
    node = net.nodes["a"]
    waited = []

    async def main():
        loop = asyncio.get_running_loop()
        if transport == "tcp":  # (what wait_for_message uses of the worker process's state)
            net._worker = SimpleNamespace(loop=loop, touch=lambda now: None, blocked=0)
        else:
            net._loop = loop
        task = loop.create_task(net.wait(node, "x", 5.0))
        await asyncio.sleep(0)
        waited.append(node.waiter is not None)
        node.offline = True  # its dropout (go_offline): offline, then its task cancelled
        assert hand_over(node, SimpleNamespace(kind="x", round=0)) is False  # the message, into its future
        task.cancel()
        try:
            return "returned", await task
        except asyncio.CancelledError:
            return "cancelled", None

    assert asyncio.run(main()) == ("cancelled", None)
    assert waited == [True]
    assert net.closed == {"a"}  # closed: a wait in its finally block raises RunEnded, what it sends is dropped
