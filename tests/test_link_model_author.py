"""A network researcher's link model, written from docs/network-model.md alone: what goes wrong
in it is named (the model, the message or event, what was wrong), and what the docs say it may
rely on holds (``net.seed`` and ``fedsim.seeding.node_rng`` for per-node draws, the times it
writes are the ledger's).

Before: a negative, NaN or infinite delay was the event queue's ``ValueError`` naming the event
but not the model; an exception in ``transmit`` was the sending actor's error naming only the
actor, one in an event the model scheduled (or in ``node_offline``) left ``run`` bare (a
``KeyError: 'k'``); a str or None time was a ``TypeError`` naming nothing; a copy delivered to
another node went into that node's mailbox (then a deadlock); something else than the envelope
given to ``net.deliver`` an ``AttributeError``; a note that is no str went into the ledger; a
registered factory that raised left the command with a traceback naming no link model; and a
registered class without a ``name`` of its own was named by its class in errors, not by the name
the user typed."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest

from fedsim.kernel import ActorError, LinkModel, NetworkConfigError, SimNetwork
from fedsim.kernel.ledger import RX_START, TX_END, TX_START
from fedsim.seeding import node_rng


class Scripted(LinkModel):
    """Fills the row with ``times`` (or ``times(now)``) and then does ``then(net, src, dst, envelope)``."""

    name = "scripted"

    def __init__(self, then, times=None):
        self.then, self.times = then, times

    def transmit(self, net, src, dst, envelope):
        now = net.now()
        times = self.times(now) if callable(self.times) else self.times
        envelope.row[TX_START], envelope.row[TX_END], envelope.row[RX_START] = times or (now, now, now)
        self.then(net, src, dst, envelope)


def _net(model, offline_at=None, **kw):
    async def a(ctx):
        await ctx.send("b", "x", {"v": 1.0})
        return await ctx.receive("y")

    async def b(ctx):
        await ctx.receive("x")
        await ctx.send("a", "y", {"v": 2.0})

    net = SimNetwork(seed=0, link_model=model, **kw)
    net.add_node("a", a, role="server")
    net.add_node("b", b, offline_at=offline_at)
    return net


MSG = "message 'x' from 'a' to 'b' (ledger row 0, "


@pytest.mark.parametrize("delay, why", [(-1.0, "before the current time"), (math.nan, "not finite"),
                                        (math.inf, "not finite")])
def test_a_delay_in_the_past_or_not_finite_names_the_model_and_the_event(delay, why):
    with pytest.raises(ActorError) as info:
        _net(Scripted(lambda n, s, d, e: n.schedule(delay, n.deliver, e, d))).run()
    err = info.value.__cause__
    assert isinstance(err, NetworkConfigError) and isinstance(err, ValueError)
    text = str(err)
    assert text.startswith(f"link model 'scripted' (Scripted) scheduled event SimNetwork.deliver ({MSG}")
    assert f"after {delay!r} s, at t = 0.0 + {delay!r} = {0.0 + delay!r} s, which is {why}" in text


def test_an_exception_in_transmit_names_the_model_the_message_and_the_line():
    def broken(net, src, dst, envelope):
        return {}["rates"][src.id]

    with pytest.raises(ActorError) as info:
        _net(Scripted(broken)).run()
    err = info.value.__cause__
    assert isinstance(err, NetworkConfigError) and isinstance(err.__cause__, KeyError)
    assert str(err).startswith(f"link model 'scripted' (Scripted) raised KeyError: 'rates' in transmit for {MSG}")
    assert str(err).endswith(f"({__file__}, line {broken.__code__.co_firstlineno + 1}, in broken)")


def test_fedsims_own_errors_raised_in_a_model_get_the_models_name_in_front():
    with pytest.raises(ActorError) as info:  # (it was the sender's "unknown node 'core'", naming no model)
        _net(Scripted(lambda n, s, d, e: n.node("core"))).run()
    err = info.value.__cause__
    assert isinstance(err, NetworkConfigError)
    assert str(err) == "link model 'scripted' (Scripted): unknown node 'core'"


class LateFailure(LinkModel):
    """Delivers through a step of its own, which fails."""

    def transmit(self, net, src, dst, envelope):
        envelope.row[TX_START] = envelope.row[TX_END] = envelope.row[RX_START] = net.now()
        net.schedule(0.25, self.arrive, net, envelope, dst)

    def arrive(self, net, envelope, dst):
        raise RuntimeError(f"queue overflow at {dst.id}")


def test_an_exception_in_an_event_the_model_scheduled_names_the_model_and_the_event():
    with pytest.raises(NetworkConfigError) as info:  # (a bare RuntimeError left run)
        _net(LateFailure()).run()
    assert isinstance(info.value.__cause__, RuntimeError)
    assert str(info.value).startswith(
        f"link model LateFailure raised RuntimeError: queue overflow at b in its event for LateFailure.arrive ({MSG}")


class OfflineFailure(LinkModel):
    def transmit(self, net, src, dst, envelope):
        envelope.row[TX_START] = envelope.row[TX_END] = envelope.row[RX_START] = net.now()
        net.schedule(5.0, net.deliver, envelope, dst)

    def node_offline(self, net, node):
        raise AttributeError("no port state")


def test_an_exception_in_node_offline_names_the_model_and_the_node():
    net = _net(OfflineFailure(), offline_at=1.0)
    with pytest.raises(NetworkConfigError) as info:  # (a bare AttributeError left run)
        net.run(strict=False)
    assert str(info.value).startswith("link model OfflineFailure raised AttributeError: no port state in "
                                      "node_offline for node 'b' (role 'client') (")


@pytest.mark.parametrize("bad", ["0", None, True])
def test_a_time_that_is_no_number_is_refused_naming_the_model_and_the_field(bad):
    model = Scripted(lambda n, s, d, e: n.schedule(1.0, n.deliver, e, d), times=(bad, 0.0, 0.0))
    with pytest.raises(NetworkConfigError) as info:  # (a TypeError naming nothing; True taken as 1 s)
        _net(model).run()
    assert str(info.value) == (f"link model 'scripted' (Scripted) called net.deliver for {MSG}15 bytes) with tx_start "
                               f"{type(bad).__name__} {bad!r}: the row's times are numbers of seconds (float; NaN: "
                               "unset)")


def test_numpy_times_are_written_into_the_ledger_as_floats():
    rows = []

    def then(n, s, d, e):
        rows.append(e.row)
        n.schedule(1.0, n.deliver, e, d)

    model = Scripted(then, times=lambda now: (np.float32(now), np.float32(now + 0.5), np.float32(now + 0.75)))
    _net(model).run()  # (the row kept NumPy float32s, whatever the ledger made of them)
    assert [type(rows[0][p]) for p in (TX_START, TX_END, RX_START)] == [float] * 3
    assert (rows[0][TX_START], rows[0][TX_END], rows[0][RX_START]) == (0.0, 0.5, 0.75)


def test_a_copy_delivered_to_another_node_is_refused_not_a_deadlock():
    with pytest.raises(NetworkConfigError) as info:
        _net(Scripted(lambda n, s, d, e: n.schedule(1.0, n.deliver, e, s))).run()
    assert str(info.value) == (f"link model 'scripted' (Scripted) delivered {MSG}15 bytes) to node 'a': "
                               "net.deliver(envelope, dst) takes the dst transmit was given for that envelope")


@pytest.mark.parametrize("call", ["deliver", "lose"])
def test_deliver_or_lose_of_something_else_than_the_envelope_is_refused(call):
    def then(n, s, d, e):
        n.schedule(1.0, n.deliver, "x", d) if call == "deliver" else n.schedule(1.0, n.lose, None, "gone")

    with pytest.raises(NetworkConfigError) as info:
        _net(Scripted(then)).run()
    got = "str 'x'" if call == "deliver" else "NoneType None"
    assert str(info.value) == (f"link model 'scripted' (Scripted) called net.{call} with {got}, not an envelope: "
                               "pass the envelope transmit was given")


@pytest.mark.parametrize("note", [5, "", None])
def test_a_loss_note_that_is_no_text_is_refused(note):
    with pytest.raises(ActorError) as info:
        _net(Scripted(lambda n, s, d, e: n.lose(e, note))).run()
    assert str(info.value.__cause__) == (
        f"link model 'scripted' (Scripted) called net.lose for {MSG}15 bytes) with note {type(note).__name__} "
        f"{note!r}: the note is a non-empty str saying why (e.g. \"link loss\")")


PLUGIN = '''
from functools import partial

from fedsim.kernel import LinkModel, register_link_model
from fedsim.kernel.ledger import RX_START, TX_END, TX_START
from fedsim.seeding import node_rng


class Bottleneck(LinkModel):
    """Per-node links drawn around the profile's from (seed, "bottleneck:" + id), then one shared
    core link of `rate` B/s, FIFO in send order."""

    name = "bottleneck"

    def __init__(self, rate=2e6, sigma=0.5):
        self.rate, self.sigma, self.core_free = rate, sigma, 0.0

    def state(self, net, node):
        if node.link_state is None:
            f = node_rng(net.seed, "bottleneck:" + node.id).lognormal(0.0, self.sigma, size=3)
            link = node.spec.link
            node.link_state = {"up": link.uplink * f[0], "down": link.downlink * f[1],
                               "lat": link.latency * f[2], "egress": 0.0, "ingress": 0.0}
        return node.link_state

    def transmit(self, net, src, dst, envelope):
        now, n = net.now(), envelope.nbytes
        s, d = self.state(net, src), self.state(net, dst)
        start = max(now, s["egress"])
        s["egress"] = tx_end = start + n / s["up"]
        envelope.row[TX_START], envelope.row[TX_END] = start, tx_end
        if src.spec.loss and net.draw_loss(src):
            net.lose(envelope, "link loss")
            return
        self.core_free = core_end = max(tx_end + s["lat"], self.core_free) + n / self.rate
        envelope.row[RX_START] = rx_start = max(core_end + d["lat"], d["ingress"])
        d["ingress"] = arrival = rx_start + n / d["down"]
        net.schedule(arrival - now, net.deliver, envelope, dst)


class Extra(LinkModel):  # no name of its own: errors name it as registered
    def __init__(self, extra):
        self.extra = extra

    def transmit(self, net, src, dst, envelope):
        now = net.now()
        envelope.row[TX_START] = envelope.row[TX_END] = now
        envelope.row[RX_START] = at = now + src.spec.link.latency + dst.spec.link.latency + self.extra
        net.schedule(at - now if self.extra < 1 else -self.extra, net.deliver, envelope, dst)


def needs_a_file():
    raise FileNotFoundError("bottleneck.toml")


register_link_model("bottleneck", partial(Bottleneck, rate=1e4), "per-node links, one shared 10 kB/s core")
register_link_model("extra-latency", partial(Extra, extra=0.05), "latencies plus 50 ms per hop")
register_link_model("way-late", partial(Extra, extra=2.0), "misbehaves: delivers 1 s before the copy's start")
register_link_model("configured", needs_a_file, "its factory raises")
'''

RUN = '''
import json, sys
from fedsim.kernel import LinkSpec, NetworkConfigError, SimNetwork
from fedsim.protocols import load_plugins

load_plugins([sys.argv[1]])


async def server(ctx):
    await ctx.broadcast(["c1", "c2"], "m", {"x": b"a" * 1000})
    await ctx.gather("r", senders=["c1", "c2"])


async def client(ctx):
    await ctx.receive("m")
    await ctx.send("server", "r", {"y": b"b" * 500})


out = {}
for seed in (3, 3, 4):
    net = SimNetwork(seed=seed, link_model="bottleneck")
    net.add_node("server", server, role="server", link=LinkSpec(uplink=1e5, downlink=2e5, latency=0.01))
    net.add_node("c1", client, link=LinkSpec(uplink=1e3, downlink=1e4, latency=0.02))
    net.add_node("c2", client, link=LinkSpec(uplink=2e3, downlink=1e4, latency=0.05))
    net.run()
    v = net.ledger.view()
    out.setdefault(str(seed), []).append([v.column(c).tolist() for c in ("bytes", "tx_start", "tx_end", "rx_start",
                                                                         "arrival_time")])
for name in ("way-late", "configured"):
    try:
        net = SimNetwork(seed=0, link_model=name)
        net.add_node("server", server, role="server")
        net.add_node("c1", client)
        net.add_node("c2", client)
        net.run()
    except Exception as err:
        out[name] = f"{type(err).__name__}: {err}" + (f" <- {type(err.__cause__).__name__}: {err.__cause__}"
                                                      if err.__cause__ is not None else "")
print(json.dumps(out))
'''


def _hand(seed):
    """The plug-in's times for the run of RUN, computed here from its description."""
    f = {n: node_rng(seed, "bottleneck:" + n).lognormal(0.0, 0.5, size=3) for n in ("server", "c1", "c2")}
    links = {"server": (1e5, 2e5, 0.01), "c1": (1e3, 1e4, 0.02), "c2": (2e3, 1e4, 0.05)}
    up = {n: links[n][0] * f[n][0] for n in f}
    down = {n: links[n][1] * f[n][1] for n in f}
    lat = {n: links[n][2] * f[n][2] for n in f}
    egress = {n: 0.0 for n in f}
    ingress = dict(egress)
    core = [0.0]
    rows = []

    def send(t, a, b, n):
        start = max(t, egress[a])
        egress[a] = tx_end = start + n / up[a]
        core[0] = core_end = max(tx_end + lat[a], core[0]) + n / 1e4
        rx = max(core_end + lat[b], ingress[b])
        ingress[b] = arrival = rx + n / down[b]
        rows.append((n, start, tx_end, rx, arrival))
        return arrival

    at = {c: send(0.0, "server", c, 1009) for c in ("c1", "c2")}
    for c in sorted(at, key=at.get):  # the clients answer in the order the model is told, their receive times
        send(at[c], c, "server", 509)
    return [list(col) for col in zip(*rows)]


def test_a_researchers_plug_in_link_model_gives_the_hand_computed_times_seeded_by_the_run(tmp_path):
    """The walkthrough of a link model of one's own (docs/network-model.md, "Writing a link model"),
    loaded as a plug-in in a fresh process: per-node links drawn from ``node_rng(net.seed, ...)``
    give the times computed by hand, the same seed the same ledger, another seed another one; a
    model that delivers before its copy's start, and a registered factory that raises, are named
    as registered."""
    plugin = tmp_path / "wires.py"
    plugin.write_text(PLUGIN)
    res = subprocess.run([sys.executable, "-c", RUN, str(plugin)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    first, again = out["3"]
    assert first == again and out["4"][0] != first
    for seed in (3, 4):
        assert np.allclose(np.array(out[str(seed)][0]), np.array(_hand(seed)), rtol=1e-12, atol=0.0)
    assert out["way-late"].startswith(
        "ActorError: actor 'server' (role 'server') failed: NetworkConfigError: link model 'way-late' (Extra) "
        "scheduled event SimNetwork.deliver (message 'm' from 'server' to 'c1' (ledger row 0, 1009 bytes); node "
        "'c1' (role 'client')) after -2.0 s, at t = 0.0 + -2.0 = -2.0 s, which is before the current time")
    line = PLUGIN.splitlines().index('    raise FileNotFoundError("bottleneck.toml")') + 1
    assert out["configured"] == (
        "NetworkConfigError: link model 'configured': its registered factory needs_a_file raised FileNotFoundError: "
        f"bottleneck.toml ({plugin}, line {line}, in needs_a_file) <- FileNotFoundError: bottleneck.toml")


DIGEST = '''
import json, sys
from fedsim.kernel import NetSpec
from fedsim.protocols import load_plugins

load_plugins(sys.argv[1:])
got = [NetSpec(link_model="extra-latency").to_dict(), NetSpec(link_model="tcp").to_dict()]
with open(sys.argv[1], "a") as f:  # (edited after it was loaded: not the code this process runs)
    f.write("# edited\\n")
got.append(NetSpec(link_model="extra-latency").to_dict())
print(json.dumps(got))
'''


def _to_dict(path):
    res = subprocess.run([sys.executable, "-c", DIGEST, str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_a_plug_in_link_models_code_is_part_of_the_network_a_run_records(tmp_path):
    """results.json's ``network`` (and a sweep point's key) said only ``link_model: NAME``: a sweep
    re-run after the plug-in changed took its points for done. Now a digest of the plug-in's code
    goes beside the name, read when the plug-in was loaded: the same for the same bytes at another
    path (a spawned worker's, a Ray task's copy); none for fedsim's own models. (Other code, another
    digest: the sweep test below.)"""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "wires.py").write_text(PLUGIN)
    (tmp_path / "b" / "wires.py").write_text(PLUGIN)
    first, builtin, edited = _to_dict(tmp_path / "a" / "wires.py")
    assert edited == first
    digest = first.pop("link_model_source")
    assert re.fullmatch(r"sha256:[0-9a-f]{16}", digest)
    assert first == builtin | {"link_model": "extra-latency"} and "link_model_source" not in builtin
    assert _to_dict(tmp_path / "b" / "wires.py")[0]["link_model_source"] == digest


def test_a_sweep_refuses_the_points_of_a_plug_in_link_model_that_has_changed_since(tmp_path):
    plugin = tmp_path / "wires.py"
    plugin.write_text(PLUGIN)
    cmd = [sys.executable, "-m", "fedsim", "--plugin", str(plugin), "sweep", "fedrec", "--set", "T=1",
           "--grid", "link_model=extra-latency", "--out", str(tmp_path / "sw"), "--quiet", "--workers", "1"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 0 and "1 run, 0 already done" in res.stderr + res.stdout, res.stderr
    plugin.write_text(PLUGIN.replace("extra=0.05", "extra=0.5"))  # (before: "0 run, 1 already done")
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 2
    assert re.search(r"error: \S+ holds 1 point\(s\) run with another configuration \(link_model=extra-latency: "
                     r"link_model_source=sha256:[0-9a-f]{16}, now sha256:[0-9a-f]{16}\); use --force", res.stderr)
