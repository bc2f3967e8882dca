"""Link specs, profiles and seeded faults (fedsim.kernel.links) against the numbers docs/network-model.md
gives and against the draws recomputed from the same seeded generators."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsim.kernel import Faults, LinkSpec, NetworkConfigError, NodeSpec, SimNetwork, get_profile
from fedsim.seeding import node_rng

MBIT = 1e6 / 8  # bytes/s


@pytest.mark.parametrize("field", ["uplink", "downlink"])
def test_a_rate_of_zero_is_refused(field):
    with pytest.raises(NetworkConfigError, match=f"{field} must be a positive number of bytes/s"):
        LinkSpec(**{field: 0.0})
    with pytest.raises(NetworkConfigError, match="flops must be a positive number of FLOP/s"):
        NodeSpec(flops=0)


# the profile table of docs/network-model.md: (server up, down, latency, flops), (client ...), sigma
@pytest.mark.parametrize("name, server, client, sigma", [
    ("ideal", (math.inf, math.inf, 0.0, math.inf), (math.inf, math.inf, 0.0, math.inf), 0.0),
    ("lan", (1000 * MBIT, 1000 * MBIT, 0.0005, 1e11), (1000 * MBIT, 1000 * MBIT, 0.0005, 2e10), 0.0),
    ("wan", (1000 * MBIT, 1000 * MBIT, 0.005, 1e11), (10 * MBIT, 50 * MBIT, 0.025, 1e10), 0.5),
    ("mobile", (1000 * MBIT, 1000 * MBIT, 0.005, 1e11), (2 * MBIT, 10 * MBIT, 0.06, 2e9), 0.8),
])
def test_profiles_hold_the_documented_medians(name, server, client, sigma):
    p = get_profile(name)
    for spec, (up, down, lat, flops) in ((p.server, server), (p.client, client)):
        assert (spec.link.uplink, spec.link.downlink, spec.link.latency, spec.flops) == (up, down, lat, flops)
    assert p.sigma == sigma
    assert get_profile("wan").client.link.uplink == 1_250_000.0  # 10 Mbit/s in bytes/s, by hand


def test_spread_multiplies_client_rates_by_the_documented_draws_and_spares_the_server():
    # a client's uplink, downlink and speed: the median times exp of three N(0, sigma) draws from
    # the generator of (seed, "link:" + id); a server keeps the median (and its latency stays)
    net = SimNetwork(seed=7, profile="wan")
    for n, role in (("srv", "server"), ("c1", "client"), ("c2", "client")):
        net.add_node(n, lambda ctx: None, role=role)
    assert net.node_spec("srv") == get_profile("wan").server
    for n in ("c1", "c2"):
        z = node_rng(7, f"link:{n}").normal(0.0, 0.5, size=3)
        spec = net.node_spec(n)
        assert spec.link.uplink == pytest.approx(10 * MBIT * math.exp(z[0]), rel=1e-12)
        assert spec.link.downlink == pytest.approx(50 * MBIT * math.exp(z[1]), rel=1e-12)
        assert spec.flops == pytest.approx(1e10 * math.exp(z[2]), rel=1e-12)
        assert spec.link.latency == 0.025
    p = get_profile("mobile")
    assert p.draw("server", np.random.default_rng(0)) is p.server


def test_fault_dropout_times_are_the_documented_draws():
    # two draws u, v: the node drops out iff u < dropout, at window[0] + (window[1] - window[0]) * v
    f = Faults(dropout=0.5, window=(10.0, 30.0))
    fates = []
    for seed in range(40):
        u, v = np.random.default_rng(seed).random(2)
        want = None if u >= 0.5 else 10.0 + 20.0 * v
        got = f.offline_at(np.random.default_rng(seed))
        assert got == pytest.approx(want, rel=1e-15) if want is not None else got is None, seed
        fates.append(got is None)
    assert 0 < sum(fates) < 40  # both fates occur among these seeds
    assert Faults(dropout=1.0, window=(5.0, 5.0)).offline_at(np.random.default_rng(3)) == 5.0
    assert Faults(dropout=0.0).offline_at(np.random.default_rng(3)) is None


@pytest.mark.parametrize("window", [(5.0, 4.5), (-0.5, 1.0), (0.0, math.inf), (1.0,), (math.nan, 1.0)])
def test_a_fault_window_out_of_order_or_range_is_refused(window):
    with pytest.raises(NetworkConfigError, match="window must be"):
        Faults(dropout=0.5, window=window)
