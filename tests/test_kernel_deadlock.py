"""Runs end loudly: a deadlock raises DeadlockError naming every blocked actor and what it waits
for; strict=False returns the partial result; deadlines and timeouts keep working."""

from __future__ import annotations

import math
import time

import pytest

from fedsim.kernel import (
    ActorError, AsyncioNetwork, DeadlockError, MessageTooLargeError, RunEnded, SimNetwork, network_record,
)


async def lonely(ctx):
    await ctx.receive("hello")  # nobody ever sends it


async def done(ctx):
    return 1


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
def test_receive_with_no_sender_is_a_deadlock_naming_the_actor(transport):
    net = SimNetwork() if transport == "sim" else AsyncioNetwork()
    net.add_node("waiter", lonely)
    net.add_node("other", done)
    with pytest.raises(DeadlockError) as info:
        net.run()
    err = info.value
    assert err.blocked == {"waiter": "receive 'hello'"}
    assert "waiter waits in receive 'hello'" in str(err)
    assert err.result.results == {"other": 1} and err.result.unfinished == ["waiter"]


def test_non_strict_run_returns_the_partial_result():
    net = SimNetwork()
    net.add_node("waiter", lonely)
    net.add_node("other", done)
    res = net.run(strict=False)
    assert res.unfinished == ["waiter"] and res.results == {"other": 1}
    assert res.blocked == {"waiter": "receive 'hello'"} and not res.complete


def _gather_server(timeout):
    async def server(ctx, clients):
        ctx.begin_round(0)
        await ctx.broadcast(clients, "go", None)
        got = await ctx.gather("reply", senders=clients, timeout=timeout, round=0)
        return [m.sender for m in got], got.missing
    return server


async def replier(ctx):
    await ctx.receive("go")
    await ctx.send("server", "reply", {"x": 1})


def test_gather_without_deadline_on_a_lost_message_is_a_deadlock():
    clients = ["c0", "c1", "c2"]
    net = SimNetwork(seed=0)
    net.add_node("server", _gather_server(None), clients, role="server")
    for c in clients:
        # c1's only message is lost for sure
        net.add_node(c, replier, loss=1.0 if c == "c1" else 0.0)
    with pytest.raises(DeadlockError) as info:
        net.run()
    err = info.value
    assert list(err.blocked) == ["server"]
    assert err.blocked["server"] == "gather 'reply' for 1 of 3 senders: c1"
    assert net.ledger.totals()["lost_messages"] == 1


def test_the_same_gather_with_a_deadline_returns_what_arrived():
    clients = ["c0", "c1", "c2"]
    net = SimNetwork(seed=0)
    net.add_node("server", _gather_server(5.0), clients, role="server")
    for c in clients:
        net.add_node(c, replier, loss=1.0 if c == "c1" else 0.0)
    res = net.run()
    assert res["server"] == (["c0", "c2"], ["c1"]) and res.duration == 5.0


def test_dropout_of_a_peer_that_another_waits_for_names_both():
    clients = ["c0", "c1"]

    async def slow(ctx):
        await ctx.receive("go")
        await ctx.sleep(10.0)  # drops out at t = 2 before answering
        await ctx.send("server", "reply", {"x": 1})

    net = SimNetwork()
    net.add_node("server", _gather_server(None), clients, role="server")
    net.add_node("c0", replier)
    net.add_node("c1", slow, offline_at=2.0)
    with pytest.raises(DeadlockError) as info:
        net.run()
    err = info.value
    assert err.blocked == {"server": "gather 'reply' for 1 of 2 senders: c1 (offline: c1)"}
    # the run ends with its last event that did something, c1 going offline at t = 2 (its
    # wake-up at t = 10 finds it offline and does nothing)
    assert err.offline == ["c1"] and err.time == 2.0
    assert "offline: c1" in str(err)


def test_stopping_at_until_is_not_a_deadlock():
    async def sleeper(ctx):
        await ctx.sleep(5.0)

    net = SimNetwork()
    net.add_node("s", sleeper)
    res = net.run(until=1.0)
    assert res.unfinished == ["s"] and res.blocked == {}


def test_asyncio_duration_is_scaled_real_time_not_zero():
    async def sleeper(ctx):
        await ctx.sleep(2.0)

    net = AsyncioNetwork(time_scale=0.01)  # 2 protocol seconds = 20 ms of real time
    net.add_node("s", sleeper)
    t = time.monotonic()
    res = net.run()
    wall = time.monotonic() - t
    # at least the sleep, at most the real time run() took (divided by the scale): not a fixed
    # bound, which a loaded machine that stalls the loop for 80 ms would pass
    assert 1.9 < res.duration <= wall / 0.01
    assert net.now() == pytest.approx(res.duration, rel=0.5)


# waits no actor can mean: each must fail at the call, naming the argument, on every transport
# (an infinite timeout made SimNetwork end at t = inf and AsyncioNetwork hang; a NaN one broke
# the event queue's order; a negative count reported missing_count < 0)
BAD_WAITS = {
    "receive-timeout-inf": (lambda ctx: ctx.receive("x", timeout=math.inf), "receive: timeout must be a finite"),
    "receive-timeout-nan": (lambda ctx: ctx.receive("x", timeout=math.nan), "receive: timeout must be a finite"),
    "receive-timeout-negative": (lambda ctx: ctx.receive("x", timeout=-1.0), "receive: timeout must be a finite"),
    "receive-timeout-text": (lambda ctx: ctx.receive("x", timeout="soon"), "receive: timeout must be a finite"),
    "receive-deadline-number": (lambda ctx: ctx.receive("x", deadline=3.0), "receive: deadline must be a Deadline"),
    "deadline-inf": (lambda ctx: ctx.receive("x", deadline=ctx.deadline(math.inf)), "deadline needs a finite"),
    "gather-timeout-inf": (lambda ctx: ctx.gather("x", senders=["other"], timeout=math.inf),
                           "gather: timeout must be a finite"),
    "gather-timeout-nan": (lambda ctx: ctx.gather("x", count=1, timeout=math.nan), "gather: timeout must be a finite"),
    "gather-count-negative": (lambda ctx: ctx.gather("x", count=-2), "gather: count must be a non-negative integer"),
    "gather-count-fraction": (lambda ctx: ctx.gather("x", count=1.5), "gather: count must be a non-negative integer"),
    "gather_each-timeout-inf": (lambda ctx: ctx.gather_each("x", senders=["other"], timeout=math.inf),
                                "gather_each: timeout must be a finite"),
}


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
@pytest.mark.parametrize("case", list(BAD_WAITS))
def test_a_timeout_or_count_no_wait_can_mean_is_refused_naming_it(transport, case):
    call, message = BAD_WAITS[case]

    async def waiter(ctx):
        got = call(ctx)
        if hasattr(got, "__aiter__"):  # gather_each: the call itself raises
            return [m async for m in got]
        return await got

    net = SimNetwork() if transport == "sim" else AsyncioNetwork(time_scale=0.01)
    net.add_node("waiter", waiter)
    net.add_node("other", done)
    with pytest.raises(ActorError, match="actor 'waiter'") as info:
        net.run() if transport == "sim" else net.run(timeout=5.0)
    cause = info.value.__cause__
    assert isinstance(cause, TypeError if "deadline-number" in case else ValueError)
    assert message in str(cause)
    assert net.ledger.missing == []


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
def test_zero_timeouts_and_counts_still_return_at_once(transport):
    async def waiter(ctx):
        none = await ctx.receive("x", timeout=0)
        empty = await ctx.gather("x", count=0, timeout=0.0)
        passed = await ctx.receive("x", deadline=ctx.deadline(0))
        return none, len(empty), empty.missing_count, passed

    net = SimNetwork() if transport == "sim" else AsyncioNetwork(time_scale=0.01)
    net.add_node("waiter", waiter)
    res = net.run()
    assert res["waiter"] == (None, 0, 0, None)


async def _sends_when_closed(ctx):
    try:
        await ctx.receive("never")
    finally:  # runs when the kernel closes (or cancels) the actor at the end of the run
        await ctx.send("peer", "bye", 1)
        await ctx.gather("late", senders=["peer"], timeout=0)


async def _says_hello_then_sleeps(ctx, fail=False):
    await ctx.send("waiter", "hello", 0)
    await ctx.sleep(0.2)
    if fail:
        raise RuntimeError("boom")


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
@pytest.mark.parametrize("ending", ["deadlock", "error"])
def test_what_actors_closed_at_the_end_send_is_not_recorded(transport, ending):
    # the message sent from a finally block got a row after the result was made (SimNetwork:
    # in flight for ever, sent at a time nothing ran; AsyncioNetwork: delivered to no one)
    net = SimNetwork() if transport == "sim" else AsyncioNetwork(time_scale=0.01)
    net.add_node("waiter", _sends_when_closed)
    net.add_node("peer", _says_hello_then_sleeps, fail=ending == "error")
    if ending == "deadlock":
        res = net.run(strict=False)
        assert res.unfinished == ["waiter"]
    else:
        with pytest.raises(ActorError, match="actor 'peer'"):
            net.run()
    assert [(r["src"], r["kind"]) for r in net.ledger.records()] == [("peer", "hello")]
    assert net.ledger.missing == []
    assert net.ended


def test_asyncio_clock_stops_when_the_run_ends():
    # it went on with real time: sim_time recorded after the run (an evaluation, a report) was
    # the time of recording, not the run's duration
    async def sleeper(ctx):
        await ctx.sleep(0.5)

    net = AsyncioNetwork(time_scale=0.01)
    net.add_node("s", sleeper)
    assert net.now() == 0.0
    t = time.monotonic()
    res = net.run()
    wall = time.monotonic() - t
    time.sleep(0.05)  # 5 protocol seconds
    # (bounded by the real time run() took, not by a fixed 4 protocol seconds = 40 ms: a loaded
    # machine may stall the loop that long)
    assert net.now() == res.duration and 0.4 < res.duration <= wall / 0.01
    assert network_record(net)["sim_time"] == res.duration

    stuck = AsyncioNetwork(time_scale=0.01)
    stuck.add_node("waiter", lonely)
    with pytest.raises(DeadlockError) as info:
        stuck.run()
    time.sleep(0.05)
    assert stuck.now() == info.value.time == info.value.result.duration


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
def test_a_message_above_the_bound_is_refused_at_the_sender(transport):
    import numpy as np

    async def big(ctx):
        await ctx.send("sink", "blob", {"a": np.zeros(1000, np.float64)})

    async def sink(ctx):
        await ctx.receive("blob", timeout=1.0)

    kw = dict(max_message_bytes=4000)
    net = SimNetwork(**kw) if transport == "sim" else AsyncioNetwork(time_scale=0.001, **kw)
    net.add_node("sender", big)
    net.add_node("sink", sink)
    with pytest.raises(Exception) as info:
        net.run()
    cause = info.value.__cause__
    assert isinstance(cause, MessageTooLargeError)
    assert cause.node == "sender" and cause.kind == "blob" and cause.nbytes > 8000 and cause.limit == 4000
    assert len(net.ledger) == 0  # nothing was recorded as sent


def _lossy_pattern(net, clients):
    async def server(ctx):
        for r in range(4):
            ctx.begin_round(r)
            await ctx.broadcast(clients, "w", {"r": r})
            await ctx.gather("u", senders=clients, timeout=50.0, round=r)
        await ctx.broadcast(clients, "stop", None)

    async def client(ctx):
        while True:
            msg = await ctx.receive(("w", "stop"), timeout=200.0)
            if msg is None or msg.kind == "stop":
                return
            for k in range(3):
                await ctx.send("server", "u", {"k": k})

    net.add_node("server", server, role="server", loss=0.2)
    for c in clients:
        net.add_node(c, client, loss=0.2)


@pytest.mark.parametrize("profile", ["ideal", "lan", "wan", "mobile"])
def test_both_transports_lose_exactly_the_same_messages(profile):
    """Loss draws are keyed by (sender, its own message number): uneven links that reorder the
    global send order (wan, mobile) change nothing."""
    clients = [f"c{i}" for i in range(12)]
    lost = []
    for net in (SimNetwork(seed=5, profile=profile), AsyncioNetwork(seed=5, profile=profile, time_scale=0.004)):
        _lossy_pattern(net, clients)
        net.run(strict=False)
        cols = net.ledger.columns()
        per_sender: dict = {}
        fates = []
        for src, dst, kind, status in zip(cols["src"], cols["dst"], cols["kind"], cols["status"]):
            n = per_sender[src] = per_sender.get(src, -1) + 1
            fates.append((src, n, dst, kind, status == "lost"))
        lost.append(sorted(f for f in fates if f[4]))
    assert lost[0] == lost[1] and len(lost[0]) > 10


def _answered_early(timeout_s):
    async def server(ctx):
        await ctx.receive("x", timeout=timeout_s)  # answered at t = 1
        await ctx.gather("y", senders=["c"], timeout=timeout_s / 2)  # at t = 1 too

    async def client(ctx):
        await ctx.sleep(1.0)
        await ctx.send("s", "x", 1)
        await ctx.send("s", "y", 1)

    return server, client


def test_timeouts_answered_early_and_dropouts_after_the_end_do_not_lengthen_the_run():
    server, client = _answered_early(1000.0)
    net = SimNetwork()
    net.add_node("s", server, role="server")
    net.add_node("c", client, offline_at=50.0)  # c has finished by then: its dropout does nothing
    res = net.run()
    assert res.complete and res.duration == 1.0 and net.now() == 1.0  # not 1000, nor 50
    net = SimNetwork()
    net.add_node("s", server, role="server")
    net.add_node("c", client)
    res = net.run(until=100.0)  # stops at the run's end, not at until
    assert res.complete and res.duration == 1.0


def test_a_deadlock_behind_a_stale_timeout_is_found_when_it_begins_and_before_until():
    async def server(ctx):
        await ctx.receive("x", timeout=1000.0)  # answered at t = 1
        await ctx.receive("never")  # blocked from t = 1 on

    async def client(ctx):
        await ctx.sleep(1.0)
        await ctx.send("s", "x", 1)

    for until in (None, 500.0):
        net = SimNetwork()
        net.add_node("s", server, role="server")
        net.add_node("c", client)
        with pytest.raises(DeadlockError) as info:
            net.run(until=until)
        assert info.value.time == 1.0 and info.value.blocked == {"s": "receive 'never'"}


def test_a_flow_end_the_fair_model_has_moved_does_not_lengthen_the_run():
    from test_kernel_network import payload_of_size

    from fedsim.kernel import LinkSpec

    MB = 1_000_000

    def sender(size):
        body = payload_of_size("m", size)

        async def actor(ctx):
            await ctx.send("S", "m", body)
        return actor

    async def server(ctx):
        await ctx.gather("m", senders=["A", "B", "C"])

    net = SimNetwork(link_model="fair")
    net.add_node("S", server, role="server", link=LinkSpec(downlink=3 * MB))
    net.add_node("A", sender(1 * MB), link=LinkSpec(uplink=1 * MB))
    net.add_node("B", sender(10 * MB))
    net.add_node("C", sender(10 * MB))
    res = net.run()
    # by hand: A is capped at 1 MB/s and done at t = 1; B and C share 3 MB/s until then (1 MB/s
    # each, 9 MB left), then 1.5 MB/s each: 1 + 9 / 1.5 = 7 (their first end, 10, was moved)
    arrivals = {r["src"]: r["arrival_time"] for r in net.ledger.records()}
    assert arrivals == pytest.approx({"A": 1.0, "B": 7.0, "C": 7.0}) and res.duration == pytest.approx(7.0)


def _waits_when_closed(how, seen):
    async def actor(ctx):
        try:
            await ctx.receive("never")
        finally:  # the run is over (or the node gone): this wait cannot happen
            try:
                if how == "receive":
                    await ctx.receive("x")
                elif how == "sleep":
                    await ctx.sleep(1.0)
                elif how == "gather":
                    await ctx.gather("x", senders=["peer"], timeout=3.0)
                else:
                    await ctx.compute(1e9)
            except RunEnded as err:
                seen.append(str(err))
                raise
    return actor


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
@pytest.mark.parametrize("how", ["receive", "sleep", "gather", "compute"])
def test_a_finally_block_that_waits_after_the_run_gets_run_ended(transport, how):
    # SimNetwork's closing failed with a bare "coroutine ignored GeneratorExit"; on AsyncioNetwork
    # a receive there hung the run for ever and a sleep really slept
    seen: list = []
    net = SimNetwork() if transport == "sim" else AsyncioNetwork(time_scale=0.01)
    net.add_node("waiter", _waits_when_closed(how, seen), flops=1e9)
    net.add_node("peer", _says_hello_then_sleeps)
    t0 = time.perf_counter()
    res = net.run(strict=False)
    assert time.perf_counter() - t0 < 5.0
    assert res.unfinished == ["waiter"]
    if how == "compute" and transport == "asyncio":
        return  # compute is not a wait there (no simulated speed): nothing to refuse
    assert len(seen) == 1 and "actor 'waiter'" in seen[0] and "after the run had ended" in seen[0]


def test_a_finally_block_that_waits_when_its_node_drops_out_gets_run_ended():
    # the dropout closed the actor mid-run: the same bare RuntimeError stopped the whole run
    seen: list = []
    net = SimNetwork()
    net.add_node("waiter", _waits_when_closed("sleep", seen), offline_at=0.1)
    net.add_node("peer", _says_hello_then_sleeps)
    res = net.run(strict=False)
    assert res.offline == ["waiter"] and res.unfinished == []
    assert len(seen) == 1 and "after its node dropped out" in seen[0]
    assert res.duration == pytest.approx(0.2)  # the peer's sleep; the refused one adds nothing


def test_what_a_finally_block_raises_at_the_end_names_the_actor():
    async def bad(ctx):
        try:
            await ctx.receive("never")
        finally:
            raise ValueError("cleanup failed")

    net = SimNetwork()
    net.add_node("waiter", bad)
    with pytest.raises(ActorError, match="actor 'waiter'.*cleanup failed"):
        net.run(strict=False)


def test_a_lost_copy_has_no_reception_on_either_transport():
    # AsyncioNetwork dated the start of reception (rx_start) of every copy it lost: a reception
    # that never began (SimNetwork's lost copies have none, nor TcpNetwork's)
    import numpy as np

    clients = [f"c{i}" for i in range(6)]
    for net in (SimNetwork(seed=5, profile="lan"), AsyncioNetwork(seed=5, time_scale=0.004)):
        _lossy_pattern(net, clients)
        net.run(strict=False)
        cols = net.ledger.columns()
        lost = cols["status"] == "lost"
        assert lost.sum() > 3 and (cols["status"][~lost] == "delivered").all()
        assert np.isnan(cols["rx_start"][lost]).all() and np.isnan(cols["arrival_time"][lost]).all()
        assert np.isfinite(cols["rx_start"][~lost]).all() and np.isfinite(cols["arrival_time"][~lost]).all()
        # a lost copy was handed to the network: its transmission is dated, on both
        assert np.isfinite(cols["tx_start"][lost]).all() and np.isfinite(cols["tx_end"][lost]).all()


def test_an_asyncio_run_over_its_timeout_says_which_actors_it_waited_for():
    # the TimeoutError had no message at all (TcpNetwork's names the timeout and the actors' state)
    async def sleeper(ctx):
        await ctx.sleep(5.0)

    net = AsyncioNetwork()
    net.add_node("s", sleeper)
    net.add_node("waiter", lonely)
    net.add_node("other", done)
    t = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        net.run(timeout=0.2)
    wall = time.monotonic() - t
    assert wall < 2.0  # (not the sleeper's 5 s)
    text = str(info.value)
    assert text.startswith("AsyncioNetwork.run: no result within timeout = 0.2 s")
    assert "1 finished, 1 blocked, 1 busy of 3 actors" in text
    assert "waiter waits in receive 'hello'" in text and "s is busy" in text and "other" not in text
    # the clock stopped at the timeout (not before it, not at the time of reading: within the
    # real time run() took; a fixed 0.35 s bound failed when a loaded machine stalled the loop)
    assert net.ended and 0.2 - 0.01 <= net.now() <= wall
    stopped = net.now()
    time.sleep(0.05)
    assert net.now() == stopped


def test_a_message_of_exactly_the_bound_is_sent_and_one_byte_more_refused():
    # the bound is on the encoded document (framing excluded): a document of max_message_bytes
    # bytes goes, the same bound one byte lower refuses it at the sender
    import numpy as np

    from fedsim.kernel.codec import encode_message

    payload = {"a": np.zeros(100, np.float32)}
    n = len(encode_message("blob", payload).data)

    def build(bound):
        async def sender(ctx):
            await ctx.send("sink", "blob", payload)

        async def sink(ctx):
            await ctx.receive("blob")

        net = SimNetwork(max_message_bytes=bound, framing_bytes=40)
        net.add_node("sender", sender)
        net.add_node("sink", sink)
        return net

    net = build(n)
    net.run()
    assert net.ledger.totals()["delivered_bytes"] == n + 40
    with pytest.raises(Exception) as info:
        build(n - 1).run()
    cause = info.value.__cause__
    assert isinstance(cause, MessageTooLargeError) and (cause.nbytes, cause.limit) == (n, n - 1)


def test_a_deadlocked_count_gather_says_how_many_messages_it_still_lacks():
    # gather(count=3) got one message and waits for ever: "2 more of 3 messages (any sender)"
    async def server(ctx):
        await ctx.gather("u", count=3)

    async def client(ctx):
        await ctx.send("server", "u", {"x": 1})

    net = SimNetwork()
    net.add_node("server", server, role="server")
    net.add_node("c1", client)
    with pytest.raises(DeadlockError, match=r"2 more of 3 messages \(any sender\)"):
        net.run()


@pytest.mark.parametrize("n, listed", [
    (5, "5 of 5 senders: c1, c2, c3, c4, c5"),
    (6, "6 of 6 senders: c1, c2, c3, c4, c5, ... (1 more)"),
    (8, "8 of 8 senders: c1, c2, c3, c4, c5, ... (3 more)"),
])
def test_a_deadlocked_gather_lists_five_missing_senders_and_counts_the_rest(n, listed):
    async def server(ctx):
        await ctx.gather("u", senders=[f"c{k}" for k in range(1, n + 1)])

    async def silent(ctx):
        return None

    net = SimNetwork()
    net.add_node("server", server, role="server")
    for k in range(1, n + 1):
        net.add_node(f"c{k}", silent)
    with pytest.raises(DeadlockError) as info:
        net.run()
    assert listed in str(info.value)
    if n == 5:
        assert "more)" not in str(info.value)


async def _stopper(ctx, clients):
    for c in clients:
        await ctx.send(c, "stop", None)
    return "stopped"


async def _until_stop(ctx):
    await ctx.receive(("weights", "stop"))


@pytest.mark.parametrize("transport", ["sim", "asyncio", "tcp"])
def test_a_lost_stop_is_a_deadlock_naming_the_blocked_clients_and_the_message_they_lost(transport):
    # faults that cover the server's role can lose its `stop`: the client waited for ever and the
    # DeadlockError named it and what it waited for, not that what it waited for had been lost
    from fedsim.kernel import TcpNetwork

    net = {"sim": SimNetwork, "asyncio": AsyncioNetwork, "tcp": TcpNetwork}[transport](seed=1)
    net.add_node("server", _stopper, ["c0", "c1"], role="server", loss=1.0)
    net.add_node("c0", _until_stop)
    net.add_node("c1", _until_stop)
    with pytest.raises(DeadlockError) as info:
        net.run(**({"timeout": 60} if transport == "tcp" else {}))
    err = info.value
    assert err.result.results == {"server": "stopped"}
    assert err.blocked == {"c0": "receive ('weights', 'stop')", "c1": "receive ('weights', 'stop')"}
    rows = {r["dst"]: r for r in net.ledger.records()}
    assert [r["status"] for r in rows.values()] == ["lost", "lost"]
    from fedsim.kernel.errors import clock_text  # (.6g without an exponent: 0.000070983, not 7.0983e-05)

    assert err.lost == {c: f"1 message to it lost, the last 'stop' from 'server' sent at t = "
                           f"{clock_text(rows[c]['send_time'])} s (link loss)" for c in ("c0", "c1")}
    lines = str(err).splitlines()
    assert lines[1:] == [f"  {c} waits in receive ('weights', 'stop'); {err.lost[c]}" for c in ("c0", "c1")] + \
        ["  (run(strict=False) returns the partial result instead)"]


def test_a_protocol_whose_faults_cover_the_server_says_which_clients_lost_its_stop():
    # the demo with a deadline, loss on every role: the server ends; two clients' stop is lost
    from fedsim.kernel.errors import clock_text
    from fedsim.kernel.links import Faults
    from fedsim.protocols import REGISTRY

    spec = REGISTRY["demo"]
    net = SimNetwork(seed=0, faults=Faults(loss=0.3, roles=("server", "client")))
    data, cfg = spec.tiny(3, 2, 0)
    spec.build(net, data, cfg.replace(deadline=0.5))
    with pytest.raises(DeadlockError) as info:
        net.run()
    err = info.value
    assert "server" in err.result.results and sorted(err.blocked) == sorted(err.lost) != []
    for node in err.blocked:
        lost = [r for r in net.ledger.records() if r["dst"] == node and r["status"] == "lost"]
        last = lost[-1]
        assert last["kind"] == "stop" and last["src"] == "server"
        assert err.lost[node] == (f"{len(lost)} message{'s' if len(lost) != 1 else ''} to it lost, the last 'stop' "
                                  f"from 'server' sent at t = {clock_text(last['send_time'])} s ({last['note']})")
        assert f"  {node} waits in {err.blocked[node]}; {err.lost[node]}" in str(err).splitlines()


async def _setup_server(ctx, clients):
    ctx.begin_round(-1)  # a setup exchange before round 0
    await ctx.broadcast(clients, "hello", None)
    await ctx.gather("stats", senders=clients, round=-1)


async def _setup_client(ctx):
    await ctx.receive("hello")  # labelled -1, but the node stays at round 0: it adopts larger labels only
    await ctx.send("server", "stats", {"n": 1})


@pytest.mark.parametrize("transport", ["sim", "asyncio", "tcp"])
def test_a_gather_whose_replies_wait_in_the_mailbox_under_a_later_round_says_so(transport):
    # a reply to a setup message of round -1 is labelled round 0 (a node starts at round 0 and
    # takes a received label only if larger): gather(round=-1) waited for ever, and the deadlock
    # said "waits in gather 'stats' for 2 of 2 senders" with both replies in its mailbox
    from fedsim.kernel import TcpNetwork

    net = {"sim": SimNetwork, "asyncio": AsyncioNetwork, "tcp": TcpNetwork}[transport](seed=0)
    net.add_node("server", _setup_server, ["c0", "c1"], role="server")
    net.add_node("c0", _setup_client)
    net.add_node("c1", _setup_client)
    with pytest.raises(DeadlockError) as info:
        net.run(**({"timeout": 60} if transport == "tcp" else {}))
    err = info.value
    assert err.result.results == {"c0": None, "c1": None}
    assert err.blocked == {"server": (
        "gather 'stats' for 2 of 2 senders: c0, c1; their 2 'stats' messages wait in its mailbox labelled "
        "round 0, not -1: c0, c1 (a node labels what it sends with the largest round it began or received, "
        "0 at the start: the senders answer a message of round -1 after ctx.begin_round(msg.round))")}


async def _slow_hello(ctx):
    await ctx.send("server", "hello", {"x": 1})
    await ctx.receive("stop")


async def _answers_then_loses_its_stop(ctx):
    await ctx.receive("hello")
    await ctx.send("c0", "stop", None)
    return "stopped"


def test_a_deadlock_late_on_a_slow_link_gives_its_times_without_an_exponent():
    # a client on a link of 1e-5 bytes/s: its 11-byte hello arrives after 1.1e6 s, the server's
    # stop is lost, and the message read "deadlock at t = 1.23457e+06 s" and "sent at t = 1.23457e+06 s"
    from fedsim.kernel import LinkSpec

    net = SimNetwork(seed=0)
    net.add_node("server", _answers_then_loses_its_stop, role="server", loss=1.0)
    net.add_node("c0", _slow_hello, link=LinkSpec(uplink=1e-5))
    with pytest.raises(DeadlockError) as info:
        net.run()
    err = info.value
    (stop,) = [r for r in net.ledger.records() if r["kind"] == "stop"]
    assert 1e6 < err.time == stop["send_time"] < 1e9 and f"{err.time:.6g}".count("e+") == 1
    assert str(err).startswith(f"deadlock at t = {err.time:.0f} s: 1 actor(s) still waiting")
    assert err.lost == {"c0": f"1 message to it lost, the last 'stop' from 'server' sent at t = {err.time:.0f} s "
                              "(link loss)"}
    from fedsim.kernel.errors import clock_text

    assert [clock_text(t) for t in (0.0, 0.5, 102534.67, 2.5e-05, 0.0123456789)] == [
        "0", "0.5", "102535", "0.000025", "0.0123457"]
