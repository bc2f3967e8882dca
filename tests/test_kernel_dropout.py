"""Dropout cuts the link at ``offline_at``: what a node was still sending or receiving then is lost
and stops holding the ports it used, on every link model, whether or not the node's actor had
finished. Hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.kernel import LinkSpec, SimNetwork

MB = 1_000_000


def blob(nbytes: int) -> dict:
    return {"b": np.zeros(nbytes, np.uint8)}


def _rows(net) -> dict:
    return {(r["src"], r["dst"]): r for r in net.ledger.records()}


def _sender(plan):
    """An actor sending ``plan``'s (at, dst, nbytes) in time order, then returning."""
    async def actor(ctx):
        now = 0.0
        for at, dst, n in plan:
            if at > now:
                await ctx.sleep(at - now)
                now = at
            await ctx.send(dst, "m", blob(n))
    return actor


def _receiver(k, timeout=None):
    async def actor(ctx):
        for _ in range(k):
            await ctx.receive("m", timeout=timeout)
    return actor


def test_fifo_a_sender_cut_mid_message_does_not_hold_the_receivers_port():
    # A's 10 MB leave at 1 MB/s (planned end 10 s) but A drops out at 1 s; B's 1 MB leaves at
    # 10.5 s and reaches C's 1 MB/s port at 11.5 s. Before: A's lost copy still held that port
    # from 10 to 20 s, and B's arrived at 21.5 s.
    net = SimNetwork(seed=0)
    net.add_node("A", _sender([(0.0, "C", 10 * MB)]), link=LinkSpec(uplink=MB), offline_at=1.0)
    net.add_node("B", _sender([(10.5, "C", MB)]), link=LinkSpec(uplink=MB))
    net.add_node("C", _receiver(1), link=LinkSpec(downlink=MB))
    res = net.run()
    rows = _rows(net)
    a, b = rows[("A", "C")], rows[("B", "C")]
    assert a["status"] == "lost" and a["note"] == "sender offline"
    assert a["tx_start"] == 0.0 and a["tx_end"] == 1.0  # sending stopped at the dropout
    size = b["bytes"]
    assert b["rx_start"] == pytest.approx(10.5 + size / MB)
    assert b["arrival_time"] == pytest.approx(10.5 + 2 * size / MB)
    assert res.duration == pytest.approx(b["arrival_time"])


def test_fifo_a_finished_sender_loses_its_copy_when_its_link_drops():
    # A returns right after handing its 10 MB to the network; its link drops at 1 s. The copy
    # is lost then (not at the 20 s it would have reached C), and the run ends there.
    net = SimNetwork(seed=0)
    net.add_node("A", _sender([(0.0, "C", 10 * MB)]), link=LinkSpec(uplink=MB), offline_at=1.0)
    net.add_node("C", _receiver(1, timeout=0.5), link=LinkSpec(downlink=MB))
    res = net.run()
    a = _rows(net)[("A", "C")]
    assert a["status"] == "lost" and a["note"] == "sender offline"
    assert res.duration == pytest.approx(1.0)
    assert res.offline == []  # A had finished its part: it did not drop out of the protocol


def test_fifo_copies_queued_behind_the_cut_never_start():
    net = SimNetwork(seed=0)
    net.add_node("A", _sender([(0.0, "C", 2 * MB), (0.0, "D", MB)]), link=LinkSpec(uplink=MB),
                 offline_at=1.5)
    net.add_node("C", _receiver(1, timeout=5.0))
    net.add_node("D", _receiver(1, timeout=5.0))
    net.run()
    rows = _rows(net)
    c, d = rows[("A", "C")], rows[("A", "D")]
    assert c["status"] == d["status"] == "lost"
    assert c["tx_end"] == 1.5
    assert np.isnan(d["tx_start"]) and np.isnan(d["tx_end"])  # it never left
    t = net.ledger.totals()
    assert t["bytes"] == t["delivered_bytes"] + t["lost_bytes"] + t["in_flight_bytes"]


def test_a_finished_node_whose_link_drops_receives_nothing_afterwards():
    # D finishes at once; its link drops at 1 s. A message arriving at 2 s is lost like one
    # for a node that dropped out while running (before: delivered to the finished node).
    async def early(ctx):
        return "done"

    net = SimNetwork(seed=0)
    net.add_node("S", _sender([(2.0, "D", 10)]))
    net.add_node("D", early, offline_at=1.0)
    res = net.run()
    row = _rows(net)[("S", "D")]
    assert row["status"] == "lost" and row["note"] == "receiver offline"
    assert res["D"] == "done" and res.offline == []


@pytest.mark.parametrize("model", ["fifo", "fair"])
def test_a_finished_node_whose_link_drops_later_changes_nothing(model):
    # the dropout of a finished node after its traffic is over moves no time and loses nothing
    async def early(ctx):
        await ctx.send("C", "m", blob(1000))

    net = SimNetwork(seed=0, link_model=model)
    net.add_node("A", early, link=LinkSpec(uplink=MB), offline_at=100.0)
    net.add_node("C", _receiver(1))
    res = net.run()
    row = _rows(net)[("A", "C")]
    assert row["status"] == "delivered"
    assert res.duration == pytest.approx(row["arrival_time"]) and res.duration < 1.0


@pytest.mark.parametrize("model", ["fair", "tcp"])
def test_fair_a_sender_cut_gives_its_share_back_at_once(model):
    # A and B each send 10 MB to C (downlink 2 MB/s): 1 MB/s each. A drops out at 2 s, having
    # sent 2 MB (less under tcp's start-up); B then has the port alone.
    lat = 0.0
    net = SimNetwork(seed=0, link_model=model)
    net.add_node("A", _sender([(0.0, "C", 10 * MB)]), offline_at=2.0, link=LinkSpec(latency=lat))
    net.add_node("B", _sender([(0.0, "C", 10 * MB)]), link=LinkSpec(latency=lat))
    net.add_node("C", _receiver(1), link=LinkSpec(downlink=2 * MB))
    net.run()
    rows = _rows(net)
    a, b = rows[("A", "C")], rows[("B", "C")]
    assert a["status"] == "lost" and a["note"] == "sender offline"
    assert a["tx_end"] == 2.0
    if model == "fair":
        size = b["bytes"]
        # 2 s at 1 MB/s, the rest alone at 2 MB/s (before: both at 1 MB/s to the end, 10 s)
        assert b["tx_end"] == pytest.approx(2.0 + (size - 2 * MB) / (2 * MB), rel=1e-9)
    else:
        # the same start-up for both; once A is cut B's rate doubles
        start = b["tx_start"]
        eff = 1448 / (1448 + 52)
        sent = (2.0 - start) * MB * eff
        assert b["tx_end"] == pytest.approx(2.0 + (b["bytes"] - sent) / (2 * MB * eff), rel=1e-9)


def test_fair_flows_to_a_receiver_that_drops_out_are_cut_and_free_the_sender():
    # A sends 10 MB each to C and D at 2 MB/s up (1 MB/s each); D drops out at 2 s: A's copy
    # to D is lost then, and the copy to C takes the whole uplink.
    net = SimNetwork(seed=0, link_model="fair")
    net.add_node("A", _sender([(0.0, "C", 10 * MB), (0.0, "D", 10 * MB)]), link=LinkSpec(uplink=2 * MB))
    net.add_node("C", _receiver(1))
    net.add_node("D", _receiver(1), offline_at=2.0)
    res = net.run()
    rows = _rows(net)
    c, d = rows[("A", "C")], rows[("A", "D")]
    assert d["status"] == "lost" and d["note"] == "receiver offline" and d["tx_end"] == 2.0
    assert c["tx_end"] == pytest.approx(2.0 + (c["bytes"] - 2 * MB) / (2 * MB), rel=1e-9)
    assert res.offline == ["D"]


def test_fair_cut_inside_a_hub_of_many_flows_matches_a_run_without_the_cut_copy():
    # five clients upload to S (downlink 5 MB/s); c2 drops out at 1 s. The others' end times
    # are those of a run in which c2's flow really stops at 1 s: a hand count of the water
    # level (1 MB/s each for 1 s, then 5/4 MB/s each).
    net = SimNetwork(seed=0, link_model="fair")
    for i in range(5):
        net.add_node(f"c{i}", _sender([(0.0, "S", 4 * MB)]), offline_at=1.0 if i == 2 else None)
    net.add_node("S", _receiver(4, timeout=60.0), link=LinkSpec(downlink=5 * MB))
    net.run()
    rows = _rows(net)
    size = rows[("c0", "S")]["bytes"]
    for i in (0, 1, 3, 4):
        assert rows[(f"c{i}", "S")]["tx_end"] == pytest.approx(1.0 + (size - MB) / (1.25 * MB), rel=1e-9)
    assert rows[("c2", "S")]["note"] == "sender offline"
    t = net.ledger.totals()
    assert t["bytes"] == t["delivered_bytes"] + t["lost_bytes"]


def test_tcp_a_copy_whose_sender_drops_during_the_start_up_moves_no_byte():
    # 200 ms round trip: the handshake alone outlasts A's link (down at 0.1 s)
    net = SimNetwork(seed=0, link_model="tcp")
    net.add_node("A", _sender([(0.0, "C", MB)]), link=LinkSpec(latency=0.1), offline_at=0.1)
    net.add_node("C", _receiver(1, timeout=5.0))
    net.run()
    a = _rows(net)[("A", "C")]
    assert a["status"] == "lost" and a["note"] == "sender offline"
    assert np.isnan(a["tx_start"])


@pytest.mark.parametrize("model", ["fifo", "fair"])
def test_link_loss_keeps_its_note_when_the_sender_is_cut_too(model):
    net = SimNetwork(seed=3, link_model=model)
    net.add_node("A", _sender([(0.0, "C", 10 * MB)]), link=LinkSpec(uplink=MB), offline_at=1.0, loss=1.0)
    net.add_node("C", _receiver(1, timeout=5.0))
    net.run()
    a = _rows(net)[("A", "C")]
    assert a["status"] == "lost" and a["note"] == "link loss"


def _exact_end_run(model, case, offline_at=None):
    """``case``: the copy A -> C alone (its rate fixed), in a hub sharing C's port equally with
    B's copy (level), or in a hub held below the level by A's own uplink (capped)."""
    net = SimNetwork(seed=0, link_model=model)
    a_up = {"alone": 2 * MB, "level": 4 * MB, "capped": MB}[case]
    net.add_node("A", _sender([(0.0, "C", MB)]), link=LinkSpec(uplink=a_up, latency=0.01), offline_at=offline_at)
    k = 1
    if case != "alone":
        # capped: B's 20 MB at 9 MB/s outlast A's 1 MB at 1 MB/s, so A's copy ends still capped
        net.add_node("B", _sender([(0.0, "C", 20 * MB if case == "capped" else MB)]), link=LinkSpec(latency=0.01))
        k = 2
    net.add_node("C", _receiver(k, timeout=60.0), link=LinkSpec(downlink=(10 if case == "capped" else 2) * MB))
    net.run()
    return net


@pytest.mark.parametrize("case", ["alone", "level", "capped"])
@pytest.mark.parametrize("model", ["fifo", "fair", "tcp"])
def test_a_copy_whose_last_byte_leaves_at_the_senders_dropout_instant_is_delivered(model, case):
    # LinkModel's contract and fifo: a copy is cut only if its sender had not finished it by
    # offline_at (tx_end > offline_at). Under fair and tcp, the dropout event ran before the
    # flow's own end event at that instant and cut it ("sender offline", arrival NaN).
    clean = _rows(_exact_end_run(model, case))
    a = clean[("A", "C")]
    assert a["status"] == "delivered"
    if model == "fifo" or case == "alone":  # one port's rate (tcp: less its headers)
        rate = {"alone": 2 * MB, "level": 4 * MB, "capped": MB}[case] * (1448 / 1500 if model == "tcp" else 1)
        assert a["tx_end"] - a["tx_start"] == pytest.approx(a["bytes"] / rate, rel=1e-12)
    cut = _rows(_exact_end_run(model, case, offline_at=a["tx_end"]))
    got = cut[("A", "C")]
    assert (got["status"], got["note"]) == ("delivered", "")
    assert (got["tx_start"], got["tx_end"], got["arrival_time"]) == (a["tx_start"], a["tx_end"], a["arrival_time"])
    if case != "alone":
        assert cut[("B", "C")]["arrival_time"] == clean[("B", "C")]["arrival_time"]
    # one ulp earlier, the last byte has not left: cut there, on every model
    early = _rows(_exact_end_run(model, case, offline_at=float(np.nextafter(a["tx_end"], 0.0))))[("A", "C")]
    assert (early["status"], early["note"]) == ("lost", "sender offline")
    assert early["tx_end"] == np.nextafter(a["tx_end"], 0.0)


def test_a_copy_queued_until_the_instant_its_sender_drops_out_never_starts():
    # uplink U: the first copy (S bytes) holds the port from 0 to S/U, when the sender drops out:
    # it has left whole and arrives; the second, queued behind it, would start at S/U = offline_at
    # and so never starts (no transmission times), lost "sender offline"
    U = 1000.0

    def build(offline_at):
        net = SimNetwork()
        net.add_node("s", _sender([(0.0, "a", 300), (0.0, "b", 300)]), link=LinkSpec(U, np.inf, 0.0),
                     offline_at=offline_at)
        net.add_node("a", _receiver(1))
        net.add_node("b", _receiver(1, timeout=10.0))
        net.run(strict=False)
        return net

    S = _rows(build(None))[("s", "a")]["bytes"]
    rows = _rows(build(S / U))
    a, b = rows[("s", "a")], rows[("s", "b")]
    assert (a["status"], a["tx_start"], a["tx_end"], a["arrival_time"]) == ("delivered", 0.0, S / U, S / U)
    assert (b["status"], b["note"]) == ("lost", "sender offline")
    assert np.isnan(b["tx_start"]) and np.isnan(b["tx_end"]) and np.isnan(b["rx_start"])


def test_a_copy_arriving_at_the_instant_a_finished_receiver_drops_out_is_lost():
    # the receiver's actor has finished at once; its link goes down at t = 1, the instant the copy
    # (latencies 0.5 + 0.5, no transmission time) would arrive: "its offline_at has come", lost
    async def idle(ctx):
        return None

    net = SimNetwork()
    net.add_node("s", _sender([(0.0, "r", 10)]), link=LinkSpec(np.inf, np.inf, 0.5))
    net.add_node("r", idle, link=LinkSpec(np.inf, np.inf, 0.5), offline_at=1.0)
    net.run()
    row = _rows(net)[("s", "r")]
    assert (row["status"], row["note"], row["rx_start"]) == ("lost", "receiver offline", 1.0)
    assert np.isnan(row["arrival_time"])
