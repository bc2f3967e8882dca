"""Tests written from a hand mutation-testing pass over fedsim/kernel (flows, links, the FIFO link
model, the ledgers, the event queue, the codec's size accounting): each one fails with a specific
mutant of the code applied (named in its docstring) and checks the kernel against an independent
computation (hand-computed link times, a brute-force max-min allocation, sums over the rows in a
plain loop, sizes from the arrays' shapes), never against the function's own output."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsim.kernel import LinkSpec, NetworkConfigError, NodeSpec, SimNetwork, StreamingLedger
from fedsim.kernel import ledger as L
from fedsim.kernel.flows import FairShareLinkModel
from fedsim.kernel.ledger import Ledger
from test_kernel_flows import blob, star  # (its harness: sleeping senders, waiting receivers)


def run_sends(sends, links, *, model="fifo"):
    """``sends``: (src, dst, nbytes, at) by sleeping sender actors; ``links``: node -> LinkSpec.
    Every receiver waits for its messages. Returns the network after the run (test_kernel_flows'
    harness, with the FIFO model by default)."""
    return star(sends, links, model=model)


# ---------------------------------------------------------------------------------------------
# flows: the TCP model's start-up


def test_tcp_start_up_takes_the_receivers_downlink_not_its_uplink():
    """Mutant: ``FairShareLinkModel.transmit`` computing the start-up's path capacity as
    ``min(src.uplink, dst.uplink)``. Hand-computed: one-way latency 0.1 s (rtt 0.2 s), window 1
    segment of 1,000 bytes, no headers, the path's capacity the receiver's downlink D = 1e5 B/s
    (bandwidth-delay product 20,000 bytes). The handshake costs one rtt; the first window (1,000
    bytes) one rtt; the second window (2,000 bytes) holds the rest, which leaves at D: the last
    byte leaves at 0.2 + 0.2 + (size - 1000) / D and arrives 0.1 s later. With the receiver's
    uplink (1e3 B/s, a BDP of 200 bytes, below the first window) there was no slow start at all."""
    D = 1e5
    links = {"A": LinkSpec(latency=0.05), "B": LinkSpec(uplink=1e3, downlink=D, latency=0.05)}
    model = FairShareLinkModel(tcp=True, mss=1000, initial_window=1, header_bytes=0)
    net = run_sends([("A", "B", 2900, 0.0)], links, model=model)
    (r,) = net.ledger.records()
    size = r["bytes"]
    assert 1000 < size <= 3000  # the rest fits in the second window
    assert r["tx_end"] == pytest.approx(0.4 + (size - 1000) / D, rel=1e-12)
    assert r["arrival_time"] == pytest.approx(0.5 + (size - 1000) / D, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# ledger: spans and streamed groups


def _timed_ledger(led):
    """Four delivered and read rows whose send times are not in ledger order, as in a ledger
    TcpNetwork merges from its workers (ordered by sender and message number, not by time):
    (src, send_time, arrival_time, bytes)."""
    rows = [("b", 2.0, 3.0, 110), ("b", 2.5, 4.0, 60), ("a", 0.5, 1.0, 110), ("a", 1.5, 2.0, 50)]
    for src, sent, arrived, nbytes in rows:
        r = led.new_row(0, src, "s", "client", "server", "up" if nbytes < 100 else "model", nbytes, 8, 2, sent, False)
        r[L.TX_START] = r[L.TX_END] = r[L.RX_START] = sent
        r[L.ARRIVAL] = arrived
        r[L.STATUS] = "delivered"
        r[L.READ] = True
    for n in ("a", "b"):
        led.set_role(n, "client")
    led.set_role("s", "server")
    return rows


@pytest.mark.parametrize("streamed", [False, True])
def test_span_runs_from_the_earliest_send_whatever_the_row_order(streamed):
    """Mutants: ``LedgerView.span`` taking the first row's send time (``self.rows[0][SEND_T]``)
    for the earliest; ``StreamView.span`` keeping the last chunk's earliest send instead of the
    minimum over the chunks. By hand: sends at 2.0, 2.5, 0.5, 1.5 s, last arrival 4.0 s: the span
    is 4.0 - 0.5 = 3.5 s (the first row's send gave 2.0 s; the last chunk of two rows' 2.5 s)."""
    led = StreamingLedger(chunk_rows=2) if streamed else Ledger()
    rows = _timed_ledger(led)
    expect = max(a for _, _, a, _ in rows) - min(s for _, s, _, _ in rows)
    assert expect == 3.5
    assert led.view().span() == expect
    # a selection: the rows of sender a only (0.5 .. 2.0 s)
    assert led.select(src="a").span() == 1.5


def test_a_streamed_group_takes_the_framing_off_its_payload_bytes():
    """Mutant: ``StreamView.group`` giving ``payload_bytes = wire_bytes`` (not ``b - m x
    framing``); the streaming equality test runs without framing, where the two agree. By hand,
    framing 10 bytes a message: 'model' 2 rows of 110 wire bytes -> 200 payload bytes; 'up' 2
    rows of 60 + 50 -> 90."""
    for led in (Ledger(framing_bytes=10), StreamingLedger(framing_bytes=10, chunk_rows=2)):
        _timed_ledger(led)
        g = led.view().group("kind")
        assert {k: (t.messages, t.wire_bytes, t.payload_bytes) for k, t in g.items()} == {
            "model": (2, 220, 200), "up": (2, 110, 90)}
        by_src = led.view().group("src", "kind")
        assert by_src[("a", "up")].payload_bytes == 40 and by_src[("b", "model")].payload_bytes == 100


# ---------------------------------------------------------------------------------------------
# flows: a shared port left with one flow


def test_a_port_down_to_one_flow_is_no_longer_shared_when_a_later_pattern_crosses_it():
    """Mutant: ``FairShareLinkModel._complete`` dissolving a hub only when it has no member left
    (``hub.members < 1``, not ``<= 1``): A's egress stayed a hub after A -> S2 ended, with A -> S1
    still counted there after it joined S1's hub, so A -> S3 later shared A's port with a flow
    that was no longer in it, at 1 MB/s / 2. By hand (latencies 0, A up 1 MB/s, S1 down
    0.5 MB/s, the rest unlimited): A -> S1 and A -> S2 from t = 0; A -> S2 (small) ends; B -> S1 at
    0.1 s: S1 gives both its flows 0.25 MB/s; A -> S3 at 0.2 s: A -> S1 is held at 0.25 MB/s by
    S1, so A -> S3 gets the rest of A's uplink, 0.75 MB/s, while the two big flows last."""
    MB = 1e6
    links = {"A": LinkSpec(uplink=MB), "B": LinkSpec(uplink=MB), "S1": LinkSpec(downlink=0.5 * MB),
             "S2": LinkSpec(), "S3": LinkSpec()}
    net = run_sends([("A", "S1", 1_000_000, 0.0), ("A", "S2", 10_000, 0.0), ("B", "S1", 1_000_000, 0.1),
                     ("A", "S3", 30_000, 0.2)], links, model="fair")
    r = {(x["src"], x["dst"]): x for x in net.ledger.records()}
    small = r["A", "S2"]
    assert small["tx_end"] == pytest.approx(small["bytes"] / (0.5 * MB), rel=1e-12)  # half of A's uplink
    late = r["A", "S3"]
    assert late["tx_start"] == 0.2
    assert late["tx_end"] == pytest.approx(0.2 + late["bytes"] / (0.75 * MB), rel=1e-12)
    assert late["tx_end"] < 0.3  # (ended while both big flows were still going)
    assert r["A", "S1"]["tx_end"] > 1.0 and r["B", "S1"]["tx_end"] > 1.0


# ---------------------------------------------------------------------------------------------
# links: what a spec refuses


@pytest.mark.parametrize("make, name", [
    (lambda v: LinkSpec(latency=v), "latency"),
    (lambda v: NodeSpec(offline_at=v), "offline_at"),
], ids=["latency", "offline_at"])
def test_an_infinite_latency_or_dropout_time_is_refused_naming_it(make, name):
    """Mutant: ``_check_nonneg`` without its ``isinf`` test: ``LinkSpec(latency=inf)`` was taken
    (every message it carried then failed at the run, naming the message, not the parameter)
    and ``offline_at=inf`` too. docs/network-model.md: latencies and ``offline_at`` finite and
    non-negative, ``NetworkConfigError`` naming the parameter. A finite value is taken as it is."""
    with pytest.raises(NetworkConfigError, match=f"{name} must be a finite non-negative number, got inf"):
        make(math.inf)
    assert getattr(make(2.5), name) == 2.5


# ---------------------------------------------------------------------------------------------
# flows: a dropout's cuts


def test_a_dropout_cuts_its_flows_in_activation_order():
    """Mutant: ``FairShareLinkModel.node_offline`` cutting the flows from and to the node in
    reverse activation order (its docstring: activation order). A traced run records the losses
    in the order they happen (``net.happened``, what ``fedsim trace`` shows): a broadcast to
    three receivers, cut by the sender's dropout mid-transfer, loses its copies in the order of
    their ledger rows (their activation order, the order of the broadcast's list)."""
    dsts = ["r3", "r1", "r2"]

    async def sender(ctx):
        await ctx.broadcast(dsts, "m", blob(1_000_000))

    async def receiver(ctx):
        await ctx.receive("m", timeout=10.0)

    net = SimNetwork(link_model="fair", trace=True)
    net.add_node("s", sender, link=LinkSpec(uplink=1e6), offline_at=0.5)
    for d in dsts:
        net.add_node(d, receiver)
    net.run()
    rows = list(net.ledger.records())
    assert [r["dst"] for r in rows] == dsts and {r["note"] for r in rows} == {"sender offline"}
    assert all(r["tx_end"] == 0.5 for r in rows)
    lost = [seq for what, seq in net.happened if what == "lost"]
    assert lost == sorted(r["seq"] for r in rows)


# ---------------------------------------------------------------------------------------------
# fifo: the receiver's port


def test_fifo_ingress_serves_copies_in_order_of_arrival_at_the_port_not_of_sending():
    """Mutant: ``FifoLinkModel.transmit`` reserving the receiver's ingress port at send time (in
    order of sending) instead of when the copy reaches the port (``_at_ingress``). By hand
    (latencies 0, S's downlink 1e4 B/s): A (uplink 1e3 B/s) sends a at t = 0, which reaches S's
    port at a / 1e3 (about 1 s); B and C (unlimited uplinks) send b and c at 0.1 s, which reach it
    at 0.1 s: b is served first, [0.1, 0.1 + b / 1e4], c behind it, then a when it gets there.
    Reserved at sending, b and c waited behind a."""
    down = 1e4
    links = {"A": LinkSpec(uplink=1e3), "B": LinkSpec(), "C": LinkSpec(), "S": LinkSpec(downlink=down)}
    net = run_sends([("A", "S", 1000, 0.0), ("B", "S", 1200, 0.1), ("C", "S", 800, 0.1)], links)
    r = {x["src"]: x for x in net.ledger.records()}
    a, b, c = r["A"]["bytes"], r["B"]["bytes"], r["C"]["bytes"]
    want = {  # (tx_start, tx_end, rx_start, arrival_time)
        "A": (0.0, a / 1e3, a / 1e3, a / 1e3 + a / down),
        "B": (0.1, 0.1, 0.1, 0.1 + b / down),
        "C": (0.1, 0.1, 0.1 + b / down, 0.1 + b / down + c / down),
    }
    for src, times in want.items():
        got = tuple(r[src][k] for k in ("tx_start", "tx_end", "rx_start", "arrival_time"))
        assert got == pytest.approx(times, rel=1e-12, abs=1e-15), src
    assert 0.1 + (b + c) / down < a / 1e3  # (b and c were through before a reached the port)


def test_fifo_a_copy_reaching_an_offline_receiver_is_lost_there_without_holding_its_port():
    """Mutant: ``FifoLinkModel._at_ingress`` without its receiver-offline test: the copy took the
    port of a node that had dropped out (getting an ``rx_start``) and was lost only when its last
    byte would have arrived, which also lengthened the run. By hand: S sends at 0 with latency
    0.1 s (unlimited uplink), R (downlink 1e3 B/s) drops out at 0.05 s: the copy reaches R's port
    at 0.1 s and is lost there, with no ``rx_start``, and the run lasts 0.1 s (not 0.1 + size /
    1e3, about 1.1 s)."""
    async def sender(ctx):
        await ctx.send("R", "m", blob(1000))

    async def receiver(ctx):
        await ctx.receive("m")

    net = SimNetwork(trace=True)
    net.add_node("S", sender, link=LinkSpec(latency=0.1))
    net.add_node("R", receiver, link=LinkSpec(downlink=1e3), offline_at=0.05)
    res = net.run()
    (row,) = net.ledger.records()
    assert (row["status"], row["note"]) == ("lost", "receiver offline")
    assert (row["tx_start"], row["tx_end"]) == (0.0, 0.0)
    assert math.isnan(row["rx_start"]) and math.isnan(row["arrival_time"])
    assert net.lost_at[row["seq"]] == pytest.approx(0.1, rel=1e-15)
    assert res.duration == pytest.approx(0.1, rel=1e-15)


# ---------------------------------------------------------------------------------------------
# sizes: what a row of a send and of a broadcast is charged


@pytest.mark.parametrize("framing", [0, 16])
def test_every_copy_of_a_broadcast_and_a_send_is_charged_the_payloads_array_bytes_and_floats(framing):
    """Mutant: ``SimNetwork.post``'s broadcast loop writing ``floats`` into ``raw_bytes`` and the
    array bytes into ``floats`` (its single-send path is written apart). By hand from the arrays'
    shapes: 30 float32 values and 7 int64 ids are 30 x 4 + 7 x 8 = 176 array bytes and 30 floats
    (the ids are not floats), 4 float64 values 32 bytes and 4 floats; every copy carries them, and
    its wire bytes are the document's length plus the framing."""
    from fedsim.kernel.codec import encode_message

    payload = {"v": np.ones(30, np.float32), "ids": np.arange(7, dtype=np.int64)}
    small = {"w": np.zeros(4, np.float64)}

    async def server(ctx):
        await ctx.broadcast(["c1", "c2", "c3"], "model", payload)
        await ctx.send("c1", "extra", small)

    async def client(ctx):
        await ctx.receive("model")
        if ctx.node_id == "c1":
            await ctx.receive("extra")

    net = SimNetwork(framing_bytes=framing)
    net.add_node("s", server, role="server")
    for c in ("c1", "c2", "c3"):
        net.add_node(c, client)
    net.run()
    rows = list(net.ledger.records())
    doc = {"model": len(encode_message("model", payload).data), "extra": len(encode_message("extra", small).data)}
    want = {"model": (30 * 4 + 7 * 8, 30), "extra": (4 * 8, 4)}
    assert [r["kind"] for r in rows] == ["model"] * 3 + ["extra"]
    for r in rows:
        assert (r["raw_bytes"], r["floats"]) == want[r["kind"]]
        assert r["bytes"] == doc[r["kind"]] + framing


# ---------------------------------------------------------------------------------------------
# events: what is still pending


def test_pending_lists_every_entry_of_a_released_batch_still_to_run():
    """Mutant: ``EventQueue.pending`` listing a released batch from the entry after the one the
    heap holds (``batch[k + 1:]``): the batch's next event was missing, and a run stopped at
    ``until`` with only that live event left could be taken for drained. By hand: three events
    held back and released (t = 1, 2, 3 s), then ``run(until=1.5)`` runs the first: the events
    at 2 and 3 s are pending, and before any ran all three were."""
    from fedsim.kernel.events import EventQueue

    q = EventQueue()
    ran = []
    assert q.hold()
    for t in (3.0, 1.0, 2.0):
        q.schedule(t, ran.append, t)
    q.release()
    assert sorted((t, args) for t, _, args in q.pending()) == [(1.0, (1.0,)), (2.0, (2.0,)), (3.0, (3.0,))]
    assert q.run(until=1.5) is True
    assert ran == [1.0]
    assert sorted((t, args) for t, _, args in q.pending()) == [(2.0, (2.0,)), (3.0, (3.0,))]
    assert q.run() is False and ran == [1.0, 2.0, 3.0] and q.pending() == []


# ---------------------------------------------------------------------------------------------
# flows: leaving the general allocation; TCP start-up cut by a dropout


def test_flows_back_from_the_general_allocation_are_still_held_by_their_other_port():
    """Mutant: ``FairShareLinkModel._reallocate`` rejoining the hubs, once no flow crosses two
    shared ports any more, with each flow's cap the hub's own capacity (``self._caps[p]``), not
    its other port's: a flow was then given more than its sender's uplink. By hand (latencies
    0; A up 0.2 MB/s, B up 1 MB/s, S down 1 MB/s, T unlimited): A -> T (x bytes), A -> S (a) and
    B -> S (b) from t = 0. A -> S crosses two shared ports: progressive filling fixes A's two
    flows at 0.1 MB/s and B -> S at the 0.9 MB/s S has left. A -> T ends at t1 = x / 0.1 MB/s
    (A -> S has sent x bytes by then); S's port is then shared by A -> S, held at A's 0.2 MB/s, and
    B -> S, which gets 0.8 MB/s: A -> S ends at t1 + (a - x) / 0.2 MB/s, and B -> S, alone from
    then at 1 MB/s, ends when its last bytes are through."""
    MB = 1e6
    links = {"A": LinkSpec(uplink=0.2 * MB), "B": LinkSpec(uplink=MB), "S": LinkSpec(downlink=MB), "T": LinkSpec()}
    net = run_sends([("A", "T", 10_000, 0.0), ("A", "S", 100_000, 0.0), ("B", "S", 1_000_000, 0.0)], links,
                    model="fair")
    r = {(x["src"], x["dst"]): x for x in net.ledger.records()}
    x, a, b = r["A", "T"]["bytes"], r["A", "S"]["bytes"], r["B", "S"]["bytes"]
    t1 = x / (0.1 * MB)
    ta = t1 + (a - x) / (0.2 * MB)
    tb = ta + (b - 0.9 * MB * t1 - 0.8 * MB * (ta - t1)) / MB
    assert r["A", "T"]["tx_end"] == pytest.approx(t1, rel=1e-12)
    assert r["A", "S"]["tx_end"] == pytest.approx(ta, rel=1e-12)
    assert r["B", "S"]["tx_end"] == pytest.approx(tb, rel=1e-12)
    assert t1 < ta < tb


def test_a_tcp_copy_whose_receiver_dropped_out_during_its_start_up_moves_no_byte():
    """Mutant: ``FairShareLinkModel._activate`` checking only the sender for a dropout during the
    TCP start-up: a copy to a receiver gone during the handshake became a flow, took half the
    sender's uplink and was lost only on delivery, with transmission times. By hand (a window
    above the bandwidth-delay product, so the start-up is the handshake alone: rtt = 2 x (0.05 +
    0.05) = 0.2 s; no headers): S broadcasts s bytes to R (offline at 0.1 s) and R2; at 0.2 s R's
    copy is lost with no byte sent and R2's has S's whole uplink (1e5 B/s): it leaves at 0.2 +
    s / 1e5 and arrives 0.1 s later."""
    up = 1e5

    async def sender(ctx):
        await ctx.broadcast(["R", "R2"], "m", blob(10_000))

    async def receiver(ctx):
        await ctx.receive("m")

    model = FairShareLinkModel(tcp=True, initial_window=100, header_bytes=0)
    net = SimNetwork(link_model=model)
    net.add_node("S", sender, link=LinkSpec(uplink=up, latency=0.05))
    net.add_node("R", receiver, link=LinkSpec(latency=0.05), offline_at=0.1)
    net.add_node("R2", receiver, link=LinkSpec(latency=0.05))
    net.run()
    r = {x["dst"]: x for x in net.ledger.records()}
    assert (r["R"]["status"], r["R"]["note"]) == ("lost", "receiver offline")
    assert math.isnan(r["R"]["tx_start"]) and math.isnan(r["R"]["tx_end"])
    s = r["R2"]["bytes"]
    assert r["R2"]["status"] == "delivered"
    assert r["R2"]["tx_start"] == pytest.approx(0.2, rel=1e-15)
    assert r["R2"]["tx_end"] == pytest.approx(0.2 + s / up, rel=1e-12)
    assert r["R2"]["arrival_time"] == pytest.approx(0.3 + s / up, rel=1e-12)


# ---------------------------------------------------------------------------------------------
# a lost copy was transmitted: it holds its ports


def test_fifo_a_lost_copy_still_holds_its_senders_egress_port():
    """Mutant: ``FifoLinkModel.transmit`` giving the egress port back (``egress_free = start``)
    when the copy is drawn lost. docs/network-model.md: a lost message still occupies the egress
    port (it was transmitted). By hand: A (uplink 1e3 B/s, loss 1) sends two copies at t = 0,
    both lost: the first leaves over [0, s1 / 1e3], the second over [s1 / 1e3, (s1 + s2) / 1e3]."""
    async def sender(ctx):
        await ctx.send("B", "m", blob(500))
        await ctx.send("B", "m", blob(700))

    async def idle(ctx):
        return None

    net = SimNetwork()
    net.add_node("A", sender, link=LinkSpec(uplink=1e3), loss=1.0)
    net.add_node("B", idle)
    net.run()
    first, second = net.ledger.records()
    s1, s2 = first["bytes"], second["bytes"]
    assert [(r["status"], r["note"]) for r in (first, second)] == [("lost", "link loss")] * 2
    assert (first["tx_start"], first["tx_end"]) == pytest.approx((0.0, s1 / 1e3), rel=1e-12)
    assert (second["tx_start"], second["tx_end"]) == pytest.approx((s1 / 1e3, (s1 + s2) / 1e3), rel=1e-12)


def test_fair_a_lost_copy_still_takes_its_share_of_the_ports_it_crosses():
    """Mutant: ``FairShareLinkModel._activate`` ending a copy drawn lost at once instead of
    letting its flow use its share. docs/network-model.md: loss is drawn when the message is sent
    and the flow still uses its share (the bytes were transmitted). By hand (latencies 0, S down
    1e4 B/s, senders unlimited): A (loss 1) and B send s bytes each to S at t = 0: both flows get
    5e3 B/s and end at 2 s / 1e4, A's lost, B's delivered; without A's flow B's ended at s / 1e4."""
    async def sender(ctx):
        await ctx.send("S", "m", blob(2000))

    async def server(ctx):
        await ctx.receive("m")

    net = SimNetwork(link_model="fair")
    net.add_node("S", server, link=LinkSpec(downlink=1e4))
    net.add_node("A", sender, loss=1.0)
    net.add_node("B", sender)
    net.run()
    r = {x["src"]: x for x in net.ledger.records()}
    s = r["B"]["bytes"]
    assert r["A"]["bytes"] == s
    assert (r["A"]["status"], r["A"]["note"], r["B"]["status"]) == ("lost", "link loss", "delivered")
    for src in "AB":
        assert r[src]["tx_end"] == pytest.approx(2 * s / 1e4, rel=1e-12)
    assert r["B"]["arrival_time"] == pytest.approx(2 * s / 1e4, rel=1e-12)
