"""The ground-truth harness's pure-Python parts: patterns, tc commands, result files (no ns-3, no root)."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from fedsim.kernel.links import get_profile  # noqa: E402
from fedsim.seeding import node_rng  # noqa: E402
from validation import patterns as P  # noqa: E402
from validation import real_tcp, results  # noqa: E402


def test_every_pattern_is_valid_and_named_once():
    pats = P.all_patterns()
    names = [p["name"] for p in pats]
    assert len(names) == len(set(names)) == 116
    for p in pats:
        P.validate(p)
    assert sum(1 for n in names if n.startswith("star/") and "/d0ms/" not in n) == 24


@pytest.mark.parametrize("net", ["lan", "wan", "mobile"])
def test_median_rates_are_fedsims_profiles(net):
    prof = get_profile(net)
    p = P.broadcast_gather(net, 3)
    for nid, spec in (("server", prof.server), ("client/2", prof.client)):
        node = p["nodes"][nid]
        assert (node["up"], node["down"], node["latency"]) == pytest.approx(
            (spec.link.uplink, spec.link.downlink, spec.link.latency))
    assert P.NETS[net][2] == prof.sigma


@pytest.mark.parametrize("net", ["wan", "mobile"])
def test_heterogeneous_rates_are_drawn_as_fedsim_draws_them(net):
    p = P.fedrecpp_round(net, 20, het=True, seed=7)
    prof = get_profile(net)
    for i in (0, 5, 19):
        cid = f"client/{i}"
        spec = prof.draw("client", node_rng(7, "link:" + cid))
        assert p["nodes"][cid]["up"] == spec.link.uplink
        assert p["nodes"][cid]["down"] == spec.link.downlink
    assert p["nodes"]["server"]["up"] == prof.server.link.uplink
    # the latency-free twin has the same rates
    q = P.fedrecpp_round(net + "0", 20, het=True, seed=7)
    assert all(q["nodes"][n]["up"] == p["nodes"][n]["up"] and q["nodes"][n]["latency"] == 0 for n in p["nodes"])


def test_fedrecpp_round_structure():
    p = P.fedrecpp_round("wan", 5)
    msgs = {m["id"]: m for m in p["messages"]}
    last = msgs[max(msgs)]
    assert (last["src"], last["dst"], last["bytes"]) == ("client/0", "server", P.DENOISED_BYTES)
    noise = [m for m in p["messages"] if m["dst"] == "client/0" and m["src"] != "server"]
    assert len(noise) == 4 and sorted(last["after"]) == sorted([0] + [m["id"] for m in noise])
    uploads = [m for m in p["messages"] if m["dst"] == "server"]
    assert len(uploads) == 5  # four ordinary clients and the denoiser's sum


def test_validate_refuses_cycles_and_unknown_ids():
    p = P.single("wan", "10KB")
    p["messages"].append({"id": 1, "src": "server", "dst": "client/0", "bytes": 1, "start": 0.0,
                          "after": [2], "delay": 0.0})
    with pytest.raises(ValueError, match="unknown id"):
        P.validate(p)
    p["messages"].append({"id": 2, "src": "server", "dst": "client/0", "bytes": 1, "start": 0.0,
                          "after": [1], "delay": 0.0})
    with pytest.raises(ValueError, match="cycle"):
        P.validate(p)


def test_hash_ignores_message_order_but_not_rates():
    p = P.broadcast_gather("wan", 4)
    q = dict(p, messages=list(reversed(p["messages"])))
    assert P.pattern_hash(p) == P.pattern_hash(q)
    r = P.broadcast_gather("wan", 4, het=True)
    assert P.pattern_hash(p) != P.pattern_hash(r)


def test_tc_batch_one_class_leaf_and_hashed_filter_per_node_and_stage():
    p = P.broadcast_gather("wan0", 300, het=True)
    addrs = real_tcp.node_addresses(list(p["nodes"]))
    assert len(set(addrs.values())) == 301
    cmds = real_tcp.tc_batch(p, addrs, real_tcp.SETTINGS)
    assert set(cmds) == {"lo", "ifb0"}
    for dev, key in (("lo", "src"), ("ifb0", "dst")):
        assert sum(c.startswith(f"class add dev {dev}") for c in cmds[dev]) == 301
        assert sum(f"match ip {key} 127.1." in c and "flowid" in c for c in cmds[dev]) == 301
    # the server's uplink class: its rate in bits, scaled to the Ethernet framing of loopback
    srv = next(c for c in cmds["lo"] if "classid 1:2 " in c)
    assert f"rate {round(125e6 * 8 * 1514 / 1502)}bit" in srv


def test_results_round_trip(tmp_path):
    doc = {"engine": "x", "date": "d", "patterns": [
        {"name": "a", "round": 1.0000000001, "messages": [{"id": 0, "completion": 0.1234567891234},
                                                         {"id": 1, "completion": None}]}]}
    results.dump(doc, tmp_path / "r.json", digits=6)
    back = results.load(tmp_path / "r.json")
    assert back["a"]["messages"] == [{"id": 0, "completion": 0.123457}, {"id": 1, "completion": None}]
    assert back["a"]["round"] == 1.0
