"""Link parameters that cannot give finite times are refused, and a time that is not finite never
reaches the event queue: a subnormal rate made one byte take inf seconds, two latencies of 1e308 s
added up to inf, and the queue then ran events at inf (arrival inf, duration inf or NaN, the
message still marked delivered)."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

from fedsim.kernel import ActorError, LinkSpec, NetworkConfigError, NodeSpec, Profile, SimNetwork
from fedsim.kernel.events import EventQueue
from fedsim.kernel.flows import FairShareLinkModel

TINY = sys.float_info.min  # the smallest normal float: the smallest rate accepted
MODELS = ["fifo", "fair", "tcp"]


@pytest.mark.parametrize("field", ["uplink", "downlink"])
@pytest.mark.parametrize("rate", [5e-324, 1e-310, TINY / 2])
def test_a_subnormal_rate_is_refused_naming_it(field, rate):
    with pytest.raises(NetworkConfigError, match=rf"^{field} of {rate!r} bytes/s is too small for finite times"):
        LinkSpec(**{field: rate})
    with pytest.raises(NetworkConfigError, match=rf"^flops of {rate!r} FLOP/s is too small"):
        NodeSpec(flops=rate)
    assert getattr(LinkSpec(**{field: TINY}), field) == TINY  # the smallest normal float is a rate
    assert getattr(LinkSpec(**{field: math.inf}), field) == math.inf


def _two(link_model, a_link, b_link, **kw):
    async def a(ctx):
        await ctx.send("b", "x", {"v": list(range(100))})

    async def b(ctx):
        await ctx.receive("x")

    net = SimNetwork(link_model=link_model, **kw)
    net.add_node("a", a, role="server", link=a_link)
    net.add_node("b", b, link=b_link)
    return net


def _failure(net):
    """The error a run ends with, unwrapped from the ActorError of the actor that sent."""
    with pytest.raises((ActorError, NetworkConfigError)) as info:
        net.run(strict=False)
    err = info.value
    return err.__cause__ if isinstance(err, ActorError) else err


@pytest.mark.parametrize("model", MODELS)
def test_latencies_that_add_up_to_inf_are_refused_naming_the_message(model):
    net = _two(model, LinkSpec(1.0, 1.0, 1e308), LinkSpec(1.0, 1.0, 1e308))
    err = _failure(net)
    assert isinstance(err, NetworkConfigError)
    msg = str(err)
    assert msg.startswith("message 'x' from 'a' to 'b' (ledger row 0, 109 bytes): ")
    assert "at t = inf s, not a finite time" in msg and "latencies 1e+308 s of 'a' and 1e+308 s of 'b'" in msg
    row = next(net.ledger.records())
    assert row["status"] == "in_flight" and math.isnan(row["arrival_time"])  # no inf written anywhere
    assert not any(math.isinf(row[c]) for c in ("tx_start", "tx_end", "rx_start", "arrival_time"))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("side", ["uplink", "downlink"])
def test_a_rate_too_small_for_the_message_is_refused_naming_it(model, side):
    # the smallest normal rate is accepted, but 109 bytes at it take inf seconds
    slow = LinkSpec(uplink=1e-307) if side == "uplink" else LinkSpec(downlink=1e-307)
    a_link, b_link = (slow, LinkSpec(1.0, 1.0)) if side == "uplink" else (LinkSpec(1.0, 1.0), slow)
    net = _two(model, a_link, b_link)
    err = _failure(net)
    assert isinstance(err, NetworkConfigError)
    assert str(err).startswith("message 'x' from 'a' to 'b' (ledger row 0, 109 bytes): its last byte would ")
    rate = 1e-307 * (1448 / 1500 if model == "tcp" else 1.0)  # tcp: the payload rate after headers
    assert "at t = inf s, not a finite time (109" in str(err) and f" {rate!r} bytes/s)" in str(err)
    assert all(not math.isinf(v) for r in net.ledger.records() for v in r.values() if isinstance(v, float))


def test_a_port_whose_headers_leave_a_subnormal_rate_is_refused_naming_the_node():
    # 2.3e-308 bytes/s is a normal float; x 0.965 (TCP's headers) it is not
    net = _two("tcp", LinkSpec(1.0, 1.0), LinkSpec(1.0, 2.3e-308))
    err = _failure(net)
    assert isinstance(err, NetworkConfigError)
    assert str(err).startswith("node 'b': its downlink of 2.3e-308 bytes/s carries 2.22026666666666")


def test_headers_that_leave_no_payload_are_refused():
    with pytest.raises(NetworkConfigError, match=r"^header_bytes 1000000000\d+ leaves no room for payload"):
        FairShareLinkModel(header_bytes=10 ** 400)
    assert FairShareLinkModel(header_bytes=10 ** 6).efficiency == 1448 / (1448 + 10 ** 6)


@pytest.mark.parametrize("delay", [math.inf, math.nan, -1.0, 1e308])
def test_the_event_queue_refuses_a_time_that_is_not_finite_or_in_the_past(delay):
    q = EventQueue()
    q.now = 1e308 if delay == 1e308 else 5.0  # 1e308 + 1e308 overflows

    class Thing:
        def describe(self):
            return "the thing"

    def fn(x):  # pragma: no cover - never run
        raise AssertionError

    with pytest.raises(ValueError, match=r"^event test_the_event_queue_refuses_.*\.fn \(the thing\) scheduled at t = "):
        q.schedule(delay, fn, Thing())
    assert len(q) == 0 and q.pending() == []
    q.schedule(0.0, fn, 1)  # an event now is fine
    assert len(q) == 1


def test_a_compute_that_would_end_at_inf_fails_naming_the_actor_with_no_trace_of_it():
    async def a(ctx):
        await ctx.compute(1e300)

    net = SimNetwork(trace=True)
    net.add_node("a", a, flops=1e-10)
    with pytest.raises(ActorError, match=r"^actor 'a' \(role 'client'\) failed: ValueError: event .*step "
                                         r"\(node 'a' \(role 'client'\)\) scheduled at t = 0.0 \+ inf = inf s"):
        net.run()
    assert net.trace == []


@pytest.mark.parametrize("sigma", [math.nan, -0.5, math.inf, "wide"])
def test_a_profile_refuses_a_sigma_that_is_not_finite_and_non_negative(sigma):
    with pytest.raises(NetworkConfigError, match=r"^profile 'p': sigma must be a finite non-negative number"):
        Profile("p", NodeSpec(), NodeSpec(), sigma=sigma)


def test_a_profile_refuses_what_is_not_a_node_spec():
    with pytest.raises(NetworkConfigError, match=r"^profile 'p': client must be a NodeSpec, got LinkSpec"):
        Profile("p", NodeSpec(), LinkSpec())


def test_a_draw_out_of_range_is_refused_naming_the_profile_and_the_node():
    async def a(ctx):  # pragma: no cover - never run
        pass

    # a median rate near the top of the floats: a factor above 1 overflows it to inf ("no delay")
    huge = Profile("huge", NodeSpec(), NodeSpec(LinkSpec(1e308, 1.0), flops=1.0), sigma=1.0)
    net = SimNetwork(profile=huge, seed=0)
    with pytest.raises(NetworkConfigError, match=r"^node 'c\d+': profile 'huge': a client uplink drawn from the "
                                                 r"median 1e\+308 with spread sigma 1.0 came out as inf"):
        for k in range(20):
            net.add_node(f"c{k}", a)
    # one near the bottom: a factor below 1 takes it under the smallest rate
    tiny = Profile("tiny", NodeSpec(), NodeSpec(LinkSpec(1.0, TINY), flops=1.0), sigma=1.0)
    net = SimNetwork(profile=tiny, seed=0)
    with pytest.raises(NetworkConfigError, match=r"^node 'c\d+': profile 'tiny': a client downlink drawn"):
        for k in range(20):
            net.add_node(f"c{k}", a)


def test_a_bad_spec_given_to_add_node_names_the_node():
    async def a(ctx):  # pragma: no cover - never run
        pass

    net = SimNetwork()
    with pytest.raises(NetworkConfigError, match=r"^node 'c7': flops of 1e-320 FLOP/s is too small"):
        net.add_node("c7", a, flops=1e-320)
    with pytest.raises(NetworkConfigError, match=r"^node 'c8': loss must be a probability in \[0, 1\], got 2"):
        net.add_node("c8", a, loss=2)
    assert net.nodes == {}


def test_profiles_in_range_draw_the_same_specs_as_before():
    # the range checks read the draws, they do not change them: the wan draw of one node, pinned
    from fedsim.kernel import PROFILES
    from fedsim.seeding import node_rng

    prof = PROFILES["wan"]
    spec = prof.draw("client", node_rng(3, "link:c1"))
    z = node_rng(3, "link:c1").normal(0.0, prof.sigma, size=3).tolist()
    assert spec.link.uplink == prof.client.link.uplink * math.exp(z[0])
    assert spec.link.downlink == prof.client.link.downlink * math.exp(z[1])
    assert spec.flops == prof.client.flops * math.exp(z[2])
    assert np.isfinite([spec.link.uplink, spec.link.downlink, spec.flops]).all()


@pytest.mark.parametrize("args, name", [((100, 0.0, 0.1), "capacity"), ((100, math.nan, 0.1), "capacity"),
                                        ((100, -5.0, 0.1), "capacity"), ((100, 1e6, math.nan), "rtt"),
                                        ((100, 1e6, -1.0), "rtt"), ((math.nan, 1e6, 0.1), "size"),
                                        ((math.inf, 1e6, 0.1), "size")])
def test_tcp_startup_delay_refuses_what_gives_no_delay(args, name):
    # a capacity of 0 divided by zero; NaN anywhere came back as a NaN delay; a negative capacity
    # or rtt as 0.1 or 0
    from fedsim.kernel.flows import tcp_startup_delay

    with pytest.raises(NetworkConfigError, match=rf"^tcp_startup_delay: {name} must be "):
        tcp_startup_delay(*args)
    assert tcp_startup_delay(100, 1e6, math.inf) == math.inf  # refused by the model, naming the message
    assert tcp_startup_delay(100, math.inf, 0.1) == 0.1 and tcp_startup_delay(100, 1e6, 0.0) == 0.0


@pytest.mark.parametrize("make, name", [(lambda: LinkSpec(uplink=True), "uplink"),
                                        (lambda: LinkSpec(latency=False), "latency"),
                                        (lambda: NodeSpec(flops=True), "flops"),
                                        (lambda: NodeSpec(loss=True), "loss"),
                                        (lambda: NodeSpec(offline_at=np.bool_(False)), "offline_at")])
def test_a_bool_is_not_a_rate_a_latency_or_a_probability(make, name):
    # True was 1 byte/s or FLOP/s, or a loss of every message; False a latency or dropout at 0
    with pytest.raises(NetworkConfigError, match=rf"^{name} must be .* got (np\.)?(True|False)"):
        make()
