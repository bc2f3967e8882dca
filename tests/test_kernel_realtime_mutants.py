"""Tests written from a hand mutation-testing pass over the real-time transports
(fedsim/kernel/aio.py, realtime.py, tcp.py, and the parts of node.py, network.py and context.py
they share: ``hand_over``, the gather collectors, deadlines). Each one fails with a specific
mutant of the code applied (named in its docstring) and checks the transport against an
independent computation: frame bytes parsed by hand from the documented wire format, the
simulator's ledger or result for the same actors, or counts made by hand."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from fedsim.kernel import (
    ActorError, AsyncioNetwork, DeadlockError, NetworkConfigError, RunEnded, SimNetwork, TcpNetwork, TransportError,
)
from fedsim.kernel import tcp
from fedsim.kernel.codec import CodecError, decode_message, encode
from fedsim.kernel.tcp import FRAME_OVERHEAD
from test_kernel_tcp import alarm, gather_server, replier  # noqa: F401 (alarm: the autouse 90 s bound per test)

RUN_TIMEOUT = 60.0


def _run(net, **kw):
    return net.run(**kw) if isinstance(net, SimNetwork) else net.run(timeout=RUN_TIMEOUT, **kw)


def _reaped(net: TcpNetwork) -> None:
    assert net.pids and set(net.exit_status) == set(net.pids)


# ---------------------------------------------------------------------------------------------
# the wire format, by hand


class _Captured(TcpNetwork):
    """Writes every data frame it makes (hex, one a line) to ``path``: the workers are forked
    processes, whose lists the test would never see."""

    def __init__(self, path, **kw) -> None:
        super().__init__(**kw)
        self.path = str(path)

    def frame(self, src, dst, number, rnd, anonymous, document):
        data = super().frame(src, dst, number, rnd, anonymous, document)
        with open(self.path, "a") as fh:
            fh.write(f"{src} {dst} {data.hex()}\n")
        return data


async def _framer(ctx):
    ctx.begin_round(-3)  # a negative round label: the header's round is signed
    await ctx.send("b", "m", {"x": np.arange(3.0)})
    ctx.begin_round(7)
    await ctx.send("b", "anon", {"y": 1}, anonymous=True)
    await ctx.broadcast(["b", "c"], "w", {"z": "zz"})


async def _taker(ctx):
    got = []
    for _ in range(3 if ctx.node_id == "b" else 1):
        msg = await ctx.receive()
        got.append([msg.kind, msg.round, msg.sender])
    return got


def test_a_data_frame_is_the_documented_header_big_endian_then_the_document(tmp_path):
    """Mutants: ``_REST``/``_PREFIX`` little-endian (the two ends agree with each other, so every
    run passes), the length prefix counting itself (``FRAME_OVERHEAD + len(document)``), the
    anonymous flag never set, src and dst swapped. Parsed by hand from the module docstring: u32
    length of what follows, u32 src index, u32 dst index (positions in the node table), u64 the
    sender's message number, i32 round, u8 flags (bit 0 anonymous), then the document; every
    frame is as long as its ledger row's bytes, and the numbers are 0, 1, 2, 3 in send order."""
    path = tmp_path / "frames"
    net = _Captured(path, processes=None)
    net.add_node("a", _framer)
    net.add_node("b", _taker)
    net.add_node("c", _taker)
    res = _run(net)
    order = ["a", "b", "c"]
    assert res.results["b"] == [["m", -3, "a"], ["anon", 7, None], ["w", 7, "a"]]
    assert res.results["c"] == [["w", 7, "a"]]
    frames = [line.split() for line in path.read_text().splitlines()]
    assert sorted((s, d) for s, d, _ in frames) == [("a", "b"), ("a", "b"), ("a", "b"), ("a", "c")]
    rows = {(r["dst"], r["kind"]): r for r in res.ledger.records()}
    seen = []
    for src, dst, hexdata in frames:
        data = bytes.fromhex(hexdata)
        assert int.from_bytes(data[0:4], "big") == len(data) - 4
        assert int.from_bytes(data[4:8], "big") == order.index(src)
        assert int.from_bytes(data[8:12], "big") == order.index(dst)
        number = int.from_bytes(data[12:20], "big")
        rnd = int.from_bytes(data[20:24], "big", signed=True)
        flags = data[24]
        doc = data[25:]
        kind = {0: "m", 1: "anon"}.get(number, "w")
        assert decode_message(doc)[0] == kind
        row = rows[(dst, kind)]
        assert len(data) == row["bytes"] == len(doc) + FRAME_OVERHEAD == len(doc) + 25
        assert rnd == row["round"] == (-3 if kind == "m" else 7)
        assert flags == (1 if kind == "anon" else 0)
        seen.append((number, dst))
    assert sorted(seen) == [(0, "b"), (1, "b"), (2, "b"), (3, "c")]
    _reaped(net)


# ---------------------------------------------------------------------------------------------
# the frame's bounds, at both ends


async def _send_blob(ctx, n):
    await ctx.send("b", "blob", {"b": b"\x07" * n})


async def _nbytes_of_one(ctx):
    msg = await ctx.receive("blob")
    return msg.nbytes


def _blob_net(net, n):
    net.add_node("a", _send_blob, n)
    net.add_node("b", _nbytes_of_one)
    return net


def test_a_frame_of_exactly_max_frame_bytes_goes_through_and_one_byte_more_is_refused_at_the_sender():
    """Mutants: the receiver refusing a frame of exactly ``max_frame_bytes`` (``expected >=
    limit``), the sender refusing one (``nbytes >= self.max_frame_bytes``), and the receiver handing
    the actor ``Message.nbytes`` without the 4-byte length prefix (``length`` for ``expected``).
    The frame's size is the simulator's wire bytes for the same message with the same 25-byte
    framing, and what the receiver's ``msg.nbytes`` says there."""
    sim = _run(_blob_net(SimNetwork(framing_bytes=FRAME_OVERHEAD), 5000))
    (srow,) = sim.ledger.records()
    size = srow["bytes"]
    assert size > 5000 + FRAME_OVERHEAD and sim.results["b"] == size
    net = _blob_net(TcpNetwork(processes=None, max_frame_bytes=size), 5000)
    res = _run(net)
    (row,) = res.ledger.records()
    assert row["status"] == "delivered" and row["bytes"] == size
    assert res.results["b"] == size
    _reaped(net)
    over = _blob_net(TcpNetwork(processes=None, max_frame_bytes=size - 1), 5000)
    with pytest.raises(ActorError) as info:
        _run(over)
    assert info.value.node == "a" and type(info.value.__cause__).__name__ == "MessageTooLargeError"
    _reaped(over)


class _Rewritten(TcpNetwork):
    """The frames ``c1`` sends are replaced by ``fault(frame)`` (a class attribute)."""

    fault = None

    def frame(self, src, dst, number, rnd, anonymous, document):
        data = super().frame(src, dst, number, rnd, anonymous, document)
        return type(self).fault(data) if src == "c1" else data


def _u32(data: bytes, at: int, value: int) -> bytes:
    return data[:at] + value.to_bytes(4, "big") + data[at + 4:]


# node table: server 0, c0 1, c1 2, c2 3; processes (default placement): server 0, c0 1, c1 2, c2 3
@pytest.mark.parametrize("fault,what", [
    (lambda f: f[:24] + b"\x02" + f[25:], "flags 2"),  # flags: only bit 0 is defined
    (lambda f: _u32(f, 4, 4), "sender index 4"),  # one past the node table
    (lambda f: _u32(f, 4, 1), "sender index 1"),  # c0: a node the peer (process 2) does not host
    (lambda f: _u32(f, 8, 1), "receiver index 1"),  # c0: a node process 0 does not host
], ids=["flags", "src-past-table", "src-not-the-peers", "dst-not-hosted"])
def test_a_frame_header_not_valid_on_its_connection_ends_the_run_naming_the_peer(fault, what):
    """Mutants: flags up to 2 accepted (``flags > 2``: 2 was taken for "not anonymous"), a sender
    index equal to the table's length let through to ``proc_of[i]`` (``i > len(ids)``: an
    IndexError reported as "reading from a peer failed"), no check that the sender is a node the
    peer hosts, or that the receiver is one this process hosts (the copy was handed to a node that
    does not run there, or taken as c0's: the server's gather then waited for c1 until the run's
    timeout). By hand: c1 (node index 2, process 2) sends one frame to the server (process 0)."""
    cls = type("_Fault", (_Rewritten,), {"fault": staticmethod(fault)})
    net = cls(processes=4)
    clients = ["c0", "c1", "c2"]
    net.add_node("server", gather_server(clients), role="server")
    for c in clients:
        net.add_node(c, replier)
    t = time.monotonic()
    with pytest.raises(TransportError) as info:
        net.run(timeout=RUN_TIMEOUT)
    assert time.monotonic() - t < 20
    err = info.value
    text = str(err)
    assert f"process 0 received a malformed frame header from process 2 (pid {net.pids[2]}; hosting c1): " \
           f"{what} is not valid on this connection; connection closed" in text
    assert err.kind == "frame" and err.node == "c1" and err.nodes == ("c1",) and err.process == 2
    _reaped(net)


@pytest.mark.parametrize("length,what", [
    (21, "received a malformed frame from node 'c1' in process 2 (pid {pid}; hosting c1): its 0-byte document "
         "does not decode"),
    (20, "received a frame of 24 bytes, shorter than the 25-byte frame header from process 2 (pid {pid}; "
         "hosting c1)"),
])
def test_a_frame_of_a_bare_header_is_an_empty_document_and_one_shorter_is_short_of_its_header(length, what):
    """Mutant: the length check refusing a frame of exactly the header as "shorter than the
    header" (``length <= _REST.size``): 25 bytes are the whole header, followed by an empty
    document, which the codec refuses (the error names the sender, read from the header). By
    hand: c1's frame cut to its header, with its length field rewritten to 21 (or 20: then 24
    bytes in all, shorter than the header, and the sender is not named)."""
    cls = type("_Fault", (_Rewritten,), {"fault": staticmethod(lambda f: _u32(f[:25], 0, length))})
    net = cls(processes=4)
    clients = ["c0", "c1", "c2"]
    net.add_node("server", gather_server(clients), role="server")
    for c in clients:
        net.add_node(c, replier)
    with pytest.raises(TransportError) as info:
        net.run(timeout=RUN_TIMEOUT)
    err = info.value
    assert "process 0 " + what.format(pid=net.pids[2]) in str(err) and "connection closed" in str(err)
    assert err.kind == "frame" and err.node == "c1" and err.nodes == ("c1",)
    _reaped(net)


def _reply_frame_bytes() -> int:
    """The wire bytes of a client's reply in the star, from the simulator's ledger with the
    25-byte framing."""
    sim = SimNetwork(framing_bytes=FRAME_OVERHEAD)
    clients = ["c0", "c1", "c2"]
    sim.add_node("server", gather_server(clients), role="server")
    for c in clients:
        sim.add_node(c, replier)
    _run(sim)
    (size,) = {r["bytes"] for r in sim.ledger.records() if r["kind"] == "reply"}
    return size


@pytest.mark.parametrize("src_index,who", [(2, "node 'c1' in process 2"), (1, "process 2")],
                         ids=["its-sender", "another-process-node"])
def test_a_frame_one_byte_over_max_frame_bytes_is_refused_by_the_receiver_naming_only_a_sender_its_peer_hosts(
        src_index, who):
    """Mutants: the receiver's bound loosened by the 4-byte prefix (``expected > limit +
    _PREFIX.size``: a peer could send frames up to 4 bytes longer than ``max_frame_bytes``), and
    the error naming whatever sender index the refused frame's header gave (``proc_of[i] == q``
    dropped: c0, hosted by process 1, was named as the sender of a frame that came from process
    2). By hand: ``max_frame_bytes`` is the reply's frame size (the simulator's wire bytes); c1's
    reply gets one byte more, its length field one more."""
    size = _reply_frame_bytes()

    def fault(f):
        assert len(f) == size
        return _u32(_u32(f + b"\x00", 0, size + 1 - 4), 4, src_index)

    cls = type("_Fault", (_Rewritten,), {"fault": staticmethod(fault)})
    net = cls(processes=4, max_frame_bytes=size)
    clients = ["c0", "c1", "c2"]
    net.add_node("server", gather_server(clients), role="server")
    for c in clients:
        net.add_node(c, replier)
    with pytest.raises(TransportError) as info:
        net.run(timeout=RUN_TIMEOUT)
    err = info.value
    peer = f"process 2 (pid {net.pids[2]}; hosting c1)"
    assert (f"process 0 received a frame of {size + 1:,} bytes, above max_frame_bytes = {size:,} from "
            f"{who.replace('process 2', peer)}; connection closed") in str(err)
    assert err.kind == "frame" and err.node == "c1" and err.nodes == ("c1",)
    _reaped(net)


def test_an_oversized_length_whose_header_never_comes_ends_the_run_within_a_second_or_so():
    """Mutant: the receiver waiting without a bound for the header of a frame whose length is
    already refused (to name its sender): a peer that announces 2 GiB and sends nothing more held
    the connection's reader, and the run ended only at the stall timeout (here 60 s, past the run's
    timeout of 30 s: ``TimeoutError``). A frame from the wire is bounded in time as in memory: the
    header gets 1 s, then the error names the peer process."""
    cls = type("_Fault", (_Rewritten,), {"fault": staticmethod(lambda f: (2**31).to_bytes(4, "big"))})
    net = cls(processes=4, stall_timeout=60.0)
    clients = ["c0", "c1", "c2"]
    net.add_node("server", gather_server(clients), role="server")
    for c in clients:
        net.add_node(c, replier)
    t = time.monotonic()
    with pytest.raises(TransportError) as info:
        net.run(timeout=30.0)
    assert time.monotonic() - t < 15
    err = info.value
    assert (f"process 0 received a frame of {2**31 + 4:,} bytes, above max_frame_bytes = {net.max_frame_bytes:,} "
            f"from process 2 (pid {net.pids[2]}; hosting c1); connection closed") in str(err)
    assert err.kind == "frame" and err.node == "c1" and err.nodes == ("c1",)
    _reaped(net)


# ---------------------------------------------------------------------------------------------
# the merged ledger


async def _three(ctx):
    for k in ("m1", "m2", "m3"):
        await ctx.send("b", k, {"k": k})


async def _role_changer(ctx):
    await ctx.sleep(0.3)  # all three have arrived by now, with b a client
    await ctx.receive("m1")
    ctx.set_role("trainer")
    await ctx.receive("m2")  # m3 is never read
    return ctx.role


def test_tcp_records_the_receivers_role_when_it_read_the_message_or_at_arrival_if_never_read():
    """Mutants: the receiver's row not taking its role at the read (``_Received.__setitem__``
    without the ``DST_ROLE`` update), and the merge keeping the sender's view of the receiver's
    role (``DST_ROLE`` not copied from the arrivals). By hand: b reads m1 as a client, becomes a
    trainer, reads m2; m3, never read, keeps b's role at its arrival (client)."""
    net = TcpNetwork(processes=None)
    net.add_node("a", _three)
    net.add_node("b", _role_changer, role="client")
    res = _run(net)
    assert res.results["b"] == "trainer"
    got = {r["kind"]: (r["dst_role"], bool(r["read"]), r["status"]) for r in res.ledger.records()}
    assert got == {"m1": ("client", True, "delivered"), "m2": ("trainer", True, "delivered"),
                   "m3": ("client", False, "delivered")}
    _reaped(net)


async def _labelled(ctx, rnd):
    ctx.begin_round(rnd)
    await ctx.send("b", "m", {"r": rnd})


async def _round_of_one(ctx):
    return (await ctx.receive("m")).round


@pytest.mark.parametrize("rnd", [-(2**31), 2**31 - 1])
def test_a_round_label_at_the_ends_of_the_headers_signed_32_bits_travels(rnd):
    """Mutant: the round check's upper end one too high (``(1 << 31)``): 2**31 passed it and the
    frame could not be packed (the sender's connection "failed": a TransportError for what is the
    actor's mistake). Both ends of the i32 round field go through, as the simulator carries them."""
    net = TcpNetwork(processes=None)
    net.add_node("a", _labelled, rnd)
    net.add_node("b", _round_of_one)
    res = _run(net)
    assert res.results["b"] == rnd and [r["round"] for r in res.ledger.records()] == [rnd]
    _reaped(net)


@pytest.mark.parametrize("rnd", [-(2**31) - 1, 2**31])
def test_a_round_label_past_the_headers_32_bits_is_the_senders_error(rnd):
    """The same mutant, from the other side: a round just past the i32 field is refused at the
    sender, an ``ActorError`` naming it (with the mutant, 2**31 passed the check and the run ended
    with a TransportError about a lost connection)."""
    net = TcpNetwork(processes=None)
    net.add_node("a", _labelled, rnd)
    net.add_node("b", _round_of_one)
    with pytest.raises(ActorError) as info:
        _run(net)
    assert info.value.node == "a" and f"round label {rnd} does not fit the frame header" in str(info.value)
    _reaped(net)


# ---------------------------------------------------------------------------------------------
# placement


@pytest.mark.parametrize("bad", [True, False, 1.0, -1, 2])
def test_a_placement_that_is_not_a_process_index_is_refused_naming_the_node(bad):
    """Mutant: ``isinstance(k, bool)`` dropped from the placement's check: ``True`` was taken as
    process 1 (and ``False`` as 0), where every other non-index is refused."""
    net = TcpNetwork(processes=2, placement={"a": 0, "b": bad})
    net.add_node("a", _round_of_one)
    net.add_node("b", _round_of_one)
    with pytest.raises(NetworkConfigError, match=r"placement of node 'b' must be a process index in range\(2\)"):
        net.count_processes()


# ---------------------------------------------------------------------------------------------
# control frames and what travels back to the launching process


async def _returns(ctx, value):
    return value


def test_a_return_value_of_exactly_max_message_bytes_comes_back_and_one_byte_more_is_an_error():
    """Mutant: the worker refusing a return value whose encoding is exactly ``max_message_bytes``
    (``>=``). The bound is the codec's encoded size of the value (what the simulator's messages
    are held to), computed here from ``encode``."""
    value = {"blob": b"\x05" * 3000, "n": 7}
    size = len(encode(value).data)
    net = TcpNetwork(processes=None, max_message_bytes=size)
    net.add_node("a", _returns, value)
    res = _run(net)
    assert res.results["a"] == value
    _reaped(net)
    over = TcpNetwork(processes=None, max_message_bytes=size - 1)
    over.add_node("a", _returns, value)
    with pytest.raises(ActorError) as info:
        _run(over)
    assert info.value.node == "a"
    assert f"its return value encodes to {size:,} bytes, above max_message_bytes = {size - 1:,}" in str(info.value)
    _reaped(over)


def test_a_control_document_of_exactly_its_bound_is_read_and_one_byte_more_is_refused():
    """Mutant: ``_read_doc`` refusing a document of exactly ``limit`` bytes (``n >= limit``), which
    ``_frames`` makes (it cuts a report into parts of at most ``CONTROL_FRAME_BYTES``): the
    coordinator then took a worker's report for a malformed control frame. The document's length
    is the codec's, the frame is u32 big-endian length + document, built here by hand."""
    import asyncio

    doc = encode({"op": "rows", "items": [b"\x01" * 1000]}).data
    limit = len(doc)

    async def read(limit):
        reader = asyncio.StreamReader()
        reader.feed_data(len(doc).to_bytes(4, "big") + doc)
        reader.feed_eof()
        return await tcp._read_doc(reader, limit)

    assert asyncio.run(read(limit)) == {"op": "rows", "items": [b"\x01" * 1000]}
    with pytest.raises(CodecError, match=f"control frame of {limit} bytes above the bound of {limit - 1}"):
        asyncio.run(read(limit - 1))


def test_an_exception_text_of_exactly_the_cap_is_kept_whole_and_one_longer_is_cut_in_the_middle():
    """Mutant: ``_capped`` cutting a text of exactly ``_TEXT_CAP`` characters (``<``), which then
    read "... (0 characters cut) ..." with nothing cut. By hand: a text one character longer than
    twice the half is cut by one character, its first and last halves kept."""
    cap = tcp._TEXT_CAP
    exact = "".join(chr(97 + i % 26) for i in range(cap))
    assert tcp._capped(exact) == exact
    longer = exact + "Z"
    half = cap // 2
    assert tcp._capped(longer) == f"{longer[:half]}\n... (1 characters cut) ...\n{longer[-half:]}"


# ---------------------------------------------------------------------------------------------
# AsyncioNetwork: errors, timeouts, the trace


async def _raise_now(ctx):
    raise ValueError("first")


async def _raise_too(ctx):
    raise KeyError("second")


async def _raise_later(ctx):
    await ctx.sleep(0.2)
    raise KeyError("second")


@pytest.mark.parametrize("transport", ["sim", "asyncio", "tcp"])
def test_the_first_actor_to_raise_is_the_runs_error_not_a_later_one(transport):
    """Mutant: ``AsyncioNetwork._task_done`` keeping the last actor error instead of the first
    (``if self._error is None`` dropped): two actors that raise in the same pass of the loop
    reported the second. By hand: a (added first, so started first) raises at once, and so does b
    (0.2 s later over TCP, where the processes' order is the machine's); the simulator stops at
    a's error."""
    net = {"sim": lambda: SimNetwork(), "asyncio": lambda: AsyncioNetwork(),
           "tcp": lambda: TcpNetwork(processes=None)}[transport]()
    net.add_node("a", _raise_now)
    net.add_node("b", _raise_later if transport == "tcp" else _raise_too)
    with pytest.raises(ActorError) as info:
        _run(net)
    assert info.value.node == "a" and type(info.value.__cause__) is ValueError
    assert str(info.value.__cause__) == "first"


async def _blocked_forever(ctx):
    await ctx.receive("never")


async def _timed_wait(ctx):
    await ctx.receive("never", timeout=1000.0)


def test_asyncio_a_timeout_lists_a_timed_wait_as_busy_and_a_wait_without_limit_as_blocked():
    """Mutant: ``_timeout_text`` counting every actor with a waiter as blocked (a timed wait's
    third field, ``forever``, ignored). By hand: a waits without limit (blocked), b in a receive
    with a 1,000 s timeout (busy), c has finished."""
    net = AsyncioNetwork()
    net.add_node("a", _blocked_forever)
    net.add_node("b", _timed_wait)
    net.add_node("c", _returns, 1)
    with pytest.raises(TimeoutError) as info:
        net.run(timeout=0.3)
    lines = str(info.value).splitlines()
    assert lines[0] == ("AsyncioNetwork.run: no result within timeout = 0.3 s: 1 finished, 1 blocked, 1 busy of "
                        "3 actors")
    assert lines[1:] == ["  a waits in receive 'never'", "  b is busy (running, sleeping or in a timed wait)"]


async def _short_wait(ctx):
    return await ctx.receive("m", timeout=0.2)


async def _lossy_sender(ctx):
    await ctx.sleep(0.01)
    await ctx.send("b", "m", {"x": 1})
    return "sent"


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
def test_a_traced_run_keeps_a_lost_copys_time_its_send_time(transport):
    """Mutant: ``AsyncioNetwork.post`` not keeping a lost copy's time in ``lost_at`` when it
    traces. The simulator keeps it (its send time: the loss is decided there); the asyncio run's
    is its own row's send time."""
    net = SimNetwork(trace=True) if transport == "sim" else AsyncioNetwork(trace=True)
    net.add_node("a", _lossy_sender, loss=1.0)
    net.add_node("b", _short_wait)
    res = _run(net)
    (row,) = res.ledger.records()
    assert row["status"] == "lost" and row["note"] == "link loss"
    assert net.lost_at == {row["seq"]: row["send_time"]}
    assert ("lost", row["seq"]) in net.happened


# ---------------------------------------------------------------------------------------------
# deadlines (Context, shared by every transport)


async def _timeout_within_a_later_deadline(ctx):
    return await ctx.receive("never", timeout=0.05, deadline=ctx.deadline(100.0))


async def _deadline_within_a_later_timeout(ctx):
    return await ctx.receive("never", timeout=100.0, deadline=ctx.deadline(0.05))


@pytest.mark.parametrize("transport", ["sim", "asyncio", "tcp"])
@pytest.mark.parametrize("actor", [_timeout_within_a_later_deadline, _deadline_within_a_later_timeout])
def test_a_receive_with_a_timeout_and_a_deadline_ends_at_the_earlier(transport, actor):
    """Mutant: ``Context._timeout_of`` taking the later of the two (``max``). By hand: 0.05 s
    against 100 s; the simulator's run ends at exactly 0.05 s, the real-time ones well before
    100 s (a run timeout of 60 s would end them otherwise)."""
    net = {"sim": lambda: SimNetwork(), "asyncio": lambda: AsyncioNetwork(),
           "tcp": lambda: TcpNetwork(processes=None)}[transport]()
    net.add_node("a", actor)
    res = _run(net)
    assert res.results == {"a": None}
    if transport == "sim":
        assert res.duration == 0.05
    else:
        assert 0.05 <= res.duration < 5.0


# ---------------------------------------------------------------------------------------------
# TcpNetwork: dropout decided at the receiver


def test_tcp_a_frame_read_after_the_dropout_of_a_receiver_that_had_finished_is_lost_there():
    """Mutant: ``_Worker._deliver`` judging the receiver by ``dst.offline`` alone (not by the
    clock against its ``offline_at``): a node whose actor had finished is never marked offline
    (its dropout cancels nothing), so a frame read after its dropout was delivered to it. As on
    SimNetwork, a copy reaching a node past its offline time is lost there, also when its actor
    had finished (module docstring). By hand, on a clock of 0.05 real seconds per protocol second:
    R finishes at once (offline at 20); S sends at 10; R's process is held by B until 22, so the
    frame is read after 20: lost, note "receiver offline", its bytes in (rx_start), no arrival."""
    scale = 0.05
    hold = 22.0

    async def hog(ctx):
        time.sleep(hold * scale)  # R's process reads nothing until `hold` protocol seconds
        return "held"

    async def sender(ctx):
        await ctx.sleep(10.0)
        await ctx.send("R", "m", {"x": 1})
        return "sent"

    net = TcpNetwork(seed=0, time_scale=scale, processes=2, placement={"S": 0, "R": 1, "B": 1})
    net.add_node("S", sender)
    net.add_node("R", _returns, "done", offline_at=20.0)
    net.add_node("B", hog)
    res = _run(net)
    assert res.results == {"S": "sent", "R": "done", "B": "held"}
    (row,) = net.ledger.records()
    assert (row["src"], row["dst"], row["status"], row["note"]) == ("S", "R", "lost", "receiver offline")
    assert row["send_time"] < 20.0 <= row["rx_start"] and np.isnan(row["arrival_time"])
    _reaped(net)


# ---------------------------------------------------------------------------------------------
# a long frame cut in the middle

PARENT = os.getpid()


class _Halved(TcpNetwork):
    """Every data frame is cut to its first half (and the rest never comes)."""

    def frame(self, src, dst, number, rnd, anonymous, document):
        data = super().frame(src, dst, number, rnd, anonymous, document)
        return data[: len(data) // 2]


async def _big_half_then_exit(ctx):
    await ctx.send("b", "big", {"x": np.zeros(300_000)})  # 2.4 MB: read in 1 MiB pieces
    await ctx.sleep(0.3)
    if os.getpid() != PARENT:
        os._exit(0)  # the worker leaves with half a frame on the wire


async def _big_sender(ctx):
    await ctx.send("b", "big", {"x": np.zeros(300_000)})


def test_a_long_frame_cut_in_the_middle_reports_every_byte_that_came():
    """Mutant: the pieces of a long document (over 1 MiB, read in pieces) not counted in what
    the "closed in the middle of a frame" error says came (``got``): it said 1,048,576 bytes
    fewer. By hand: the frame's size is the simulator's wire bytes for the same message (25-byte
    framing); half of it (rounded down) came."""
    sim = SimNetwork(framing_bytes=FRAME_OVERHEAD)
    sim.add_node("a", _big_sender)
    sim.add_node("b", _blocked_forever)
    with pytest.raises(DeadlockError):
        _run(sim)  # (b waits for ever; the row is what counts)
    (row,) = sim.ledger.records()
    size = row["bytes"]
    assert size > 2 * 2**20 + FRAME_OVERHEAD
    net = _Halved(processes=None)
    net.add_node("a", _big_half_then_exit)
    net.add_node("b", _blocked_forever)
    with pytest.raises(TransportError) as info:
        net.run(timeout=RUN_TIMEOUT)
    assert (f"the connection from node 'a' in process 0 (pid {net.pids[0]}; hosting a) to process 1 closed in "
            f"the middle of a frame ({size // 2:,} of {size:,} bytes)") in str(info.value)
    _reaped(net)


# ---------------------------------------------------------------------------------------------
# the merged missing-message records and step log, across processes


def _gatherer(wait):
    async def actor(ctx):
        await ctx.sleep(wait)
        ctx.log(f"gather after {wait}")
        got = await ctx.gather("x", senders=["c"], timeout=0.05)
        return got.missing
    return actor


def test_tcp_merges_the_missing_records_and_the_step_log_of_its_processes_in_time_order():
    """Mutants: ``_merge`` ordering the missing-message records by receiver before time, and
    concatenating the step logs in process order (no sort). By hand: a (process 0) logs and
    misses c's message at about 0.5 s, b (process 1) at about 0.1 s: b's come first in both."""
    net = TcpNetwork(processes=None, trace=True)
    net.add_node("a", _gatherer(0.5))
    net.add_node("b", _gatherer(0.1))
    net.add_node("c", _returns, None)
    res = _run(net)
    assert res.results == {"a": ["c"], "b": ["c"], "c": None}
    missing = res.ledger.missing
    assert [(m.receiver, m.sender, m.kind) for m in missing] == [("b", "c", "x"), ("a", "c", "x")]
    assert missing[0].time < missing[1].time
    assert [(s[1], s[2]) for s in net.steps] == [("b", "gather after 0.1"), ("a", "gather after 0.5")]
    assert net.steps[0][0] < net.steps[1][0]
    _reaped(net)


class _SlowFrame(TcpNetwork):
    """The sending process holds its loop ``delay`` real seconds before it writes a frame."""

    delay = 0.0

    def frame(self, src, dst, number, rnd, anonymous, document):
        time.sleep(self.delay)
        return super().frame(src, dst, number, rnd, anonymous, document)


def test_tcp_a_run_lasts_until_its_last_frame_is_lost_at_its_receiver():
    """Mutant: ``_Worker._deliver`` not dating its process's last activity (``touch``) when it
    records a frame lost at its receiver: when that was the run's last event, the run's duration
    ended before the ledger's last reception. By hand, on a clock of 0.05 real seconds per
    protocol second: S sends at 10 and returns; its frame is written 10 protocol seconds later
    (its process held 0.5 real s); R drops out at 15; the frame comes in at 20 or later, after
    anything else happened: the run lasts at least until then."""
    scale = 0.05

    async def sender(ctx):
        await ctx.sleep(10.0)
        await ctx.send("R", "m", {"x": 1})
        return "sent"

    net = type("_Slow", (_SlowFrame,), {"delay": 10.0 * scale})(seed=0, time_scale=scale, processes=None)
    net.add_node("S", sender)
    net.add_node("R", _blocked_forever, offline_at=15.0)
    res = _run(net)
    assert res.results == {"S": "sent"} and res.offline == ["R"]
    (row,) = net.ledger.records()
    assert (row["status"], row["note"]) == ("lost", "receiver offline")
    assert row["send_time"] < 15.0 and row["tx_start"] >= 20.0 and row["rx_start"] >= 20.0
    assert res.duration >= row["rx_start"]
    _reaped(net)


def test_tcp_a_copy_to_a_node_past_its_offline_time_is_lost_at_the_sender_never_framed():
    """Mutant: ``TcpNetwork.post`` judging the receiver by ``dst.offline`` alone, which the
    sending process never sets for a node another process hosts: the copy was framed and sent,
    and lost at the receiver (its bytes came in, ``tx_start`` and ``rx_start`` set). The module
    docstring: every process has every node's spec and one clock, so the sender decides, and the
    copy is never framed. By hand (0.01 real s per protocol second): A drops out at 1, S sends to
    it at 3."""
    scale = 0.01
    net = TcpNetwork(seed=0, time_scale=scale, processes=None)
    net.add_node("A", _blocked_forever, offline_at=1.0)

    async def sender(ctx):
        await ctx.sleep(3.0)
        await ctx.send("A", "m", {"x": 1})
        return "sent"

    net.add_node("S", sender)
    res = _run(net)
    assert res.results == {"S": "sent"} and res.offline == ["A"]
    (row,) = net.ledger.records()
    assert (row["status"], row["note"]) == ("lost", "receiver offline") and row["send_time"] >= 3.0
    for col in ("tx_start", "tx_end", "rx_start", "arrival_time"):
        assert np.isnan(row[col]), col
    _reaped(net)


async def _computes(ctx):
    await ctx.compute(1.5e6, "train")
    await ctx.compute(2.5e6, "train")
    await ctx.compute(7.0, "eval")
    return "ok"


@pytest.mark.parametrize("transport", ["asyncio", "tcp"])
def test_the_flops_each_node_computed_in_a_worker_are_the_simulators(transport):
    """Mutant: ``TcpNetwork._merge`` not copying the FLOPs its workers report (``node.flops``
    left empty: ``RunResult.flops`` said nothing was computed). The simulator's ``RunResult.flops``
    for the same actors, and the sums by hand (4e6 of train, 7 of eval)."""
    sim = _run(_flops_net(SimNetwork()))
    assert sim.flops == {"a": {"train": 4.0e6, "eval": 7.0}}
    net = _flops_net(AsyncioNetwork() if transport == "asyncio" else TcpNetwork(processes=None))
    res = _run(net)
    assert res.results == {"a": "ok", "b": "ok"} and res.flops == sim.flops == {"a": {"train": 4.0e6, "eval": 7.0}}


def _flops_net(net):
    net.add_node("a", _computes)
    net.add_node("b", _returns, "ok")
    return net


@pytest.mark.parametrize("processes,groups", [
    (3, [["server", "agg"], ["c0", "c1", "c2"], ["c3", "c4"]]),
    (1, [["c0", "server", "agg", "c1", "c2", "c3", "c4"]]),
])
def test_the_default_placement_puts_every_node_not_a_client_in_process_0_and_deals_the_clients(processes, groups):
    """Mutants: the default placement taking only the ``server`` role for process 0 (a node of
    another role that is not a client, here ``agg``, was placed nowhere), and splitting nodes by
    role with a single process too (``count >= 1``: two processes where one was asked for). By
    hand, from the docstring: the nodes not clients share process 0, the five clients are cut into
    contiguous balanced groups (3 and 2) over the others; with one process every node is in it, in
    the order they were added."""
    net = TcpNetwork(processes=processes)
    roles = {"c0": "client", "server": "server", "agg": "aggregator", "c1": "client", "c2": "client",
             "c3": "client", "c4": "client"}
    for nid, role in roles.items():
        net.add_node(nid, _returns, nid, role=role)
    assert net.count_processes() == len(groups)
    res = _run(net)
    assert net.groups == groups and res.results == {nid: nid for nid in roles}
    _reaped(net)


def test_a_frame_that_stops_halfway_ends_the_run_after_the_stall_timeout_not_long_after():
    """Mutant: the coordinator waiting three stall timeouts without progress before it gives up
    (``now - still_since > 3 * stall_timeout``): the error said "no progress for 3.0 s" after 9.
    By hand: every frame cut to its first half (the rest never comes), ``stall_timeout`` 3 s: the
    run ends 3 s after the last progress, well before 2 x 3 s (what the start-up and the polls add
    is far below 3 s)."""
    net = _Halved(processes=None, stall_timeout=3.0)
    net.add_node("a", _big_sender)
    net.add_node("b", _blocked_forever)
    t = time.monotonic()
    with pytest.raises(TransportError) as info:
        net.run(timeout=RUN_TIMEOUT)
    took = time.monotonic() - t
    assert 3.0 <= took < 6.0
    err = info.value
    assert err.kind == "stall" and "no progress for 3.0 s with frames outstanding" in str(err)
    _reaped(net)


async def _one_message(ctx):
    await ctx.sleep(0.05)
    await ctx.send("b", "m", {"x": 1})


async def _reads_one(ctx):
    return (await ctx.receive("m")).payload["x"]


def test_asyncio_a_delivered_copy_arrives_when_it_is_sent():
    """Mutant: ``AsyncioNetwork.post`` not dating a delivered copy's arrival (``arrival_time``
    left NaN, with status delivered). Delivery is immediate (module docstring): its send time,
    transmission and reception are one instant; the simulator's ledger for the same run has the
    same row otherwise, and a finite arrival."""
    sim = _run(_pair(SimNetwork()))
    net = _pair(AsyncioNetwork())
    res = _run(net)
    assert res.results == sim.results == {"a": None, "b": 1}
    (srow,) = sim.ledger.records()
    (row,) = res.ledger.records()
    assert np.isfinite(srow["arrival_time"])
    assert (row["src"], row["dst"], row["kind"], row["bytes"], row["status"], bool(row["read"])) == \
        (srow["src"], srow["dst"], srow["kind"], srow["bytes"], srow["status"], bool(srow["read"])) == \
        ("a", "b", "m", srow["bytes"], "delivered", True)
    t = row["send_time"]
    assert t >= 0.05 and row["tx_start"] == row["tx_end"] == row["rx_start"] == row["arrival_time"] == t


def _pair(net):
    net.add_node("a", _one_message)
    net.add_node("b", _reads_one)
    return net


# ---------------------------------------------------------------------------------------------
# a closed actor's finally block (realtime.ClosedOnDropout)


def _waits_in_finally(log, how):
    async def actor(ctx):
        try:
            await ctx.receive("never")
        finally:
            log.append(("finally", ctx.node_id))
            try:
                if how == "receive":
                    await ctx.receive("never", timeout=100.0)
                else:
                    await ctx.compute(1e6, "late")
                log.append(("went on", ctx.node_id))
            except RunEnded:
                log.append(("RunEnded", ctx.node_id))
    return actor


@pytest.mark.parametrize("how", ["receive", "compute"])
@pytest.mark.parametrize("transport", ["sim", "asyncio", "tcp"])
def test_a_timed_receive_or_a_compute_in_the_finally_block_of_a_dropped_out_actor_raises_run_ended(
        transport, how, tmp_path):
    """Mutants: ``ClosedOnDropout.wait`` and ``.compute`` without their check of ``closed``: a
    timed receive in the finally block of an actor closed by its dropout waited its 100 s (the
    run lasted that long, and the block went on), a compute returned. As on SimNetwork, both raise
    ``RunEnded`` there. By hand (0.01 real s per protocol second): A drops out at 1."""
    from test_kernel_realtime_dropout import _Log

    log = _Log(tmp_path / "log")
    scale = 0.01
    net = {"sim": lambda: SimNetwork(), "asyncio": lambda: AsyncioNetwork(time_scale=scale),
           "tcp": lambda: TcpNetwork(time_scale=scale, processes=None)}[transport]()
    net.add_node("A", _waits_in_finally(log, how), offline_at=1.0)
    net.add_node("S", _returns, "done")
    res = _run(net)
    assert res.offline == ["A"] and res.results == {"S": "done"}
    assert log.items() == [("finally", "A"), ("RunEnded", "A")]
    assert res.duration < 50.0
