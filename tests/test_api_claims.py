"""The public API's documented promises, one test each, on SimNetwork and AsyncioNetwork: what
each ``ctx`` call, ``Network`` method, ``ProtocolSpec``/``Kind``/registry call and ``Config``
raises, and when it blocks (the docstrings of fedsim.kernel.context, fedsim.kernel.network,
fedsim.protocols.contract/registry and fedsim.config)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import pytest

from fedsim.config import Config, ConfigError, param
from fedsim.kernel import (
    ActorError, AsyncioNetwork, FedsimError, NetworkConfigError, SimNetwork, UnknownNodeError,
)
from fedsim.protocols.contract import Kind, ProtocolSpec
from fedsim.protocols.registry import REGISTRY, Registry, load_plugins, register
from fedsim.seeding import node_rng

TRANSPORTS = ["sim", "asyncio"]


def _net(transport: str, **kw):
    return SimNetwork(seed=3, **kw) if transport == "sim" else AsyncioNetwork(seed=3, **kw)


async def _idle(ctx):
    return None


def call_as_node(transport: str, body, *, others=("b",), senders_of=None):
    """Run ``body(ctx)`` as the actor of node "a" (role server) beside nodes ``others`` (idle, or
    ``senders_of``'s actor); return what it returned or raised, and the run's ledger rows."""
    box: dict = {}

    async def actor(ctx):
        try:
            box["value"] = await body(ctx)
        except Exception as exc:  # noqa: BLE001 - what the call raised is the result
            box["error"] = exc

    net = _net(transport)
    net.add_node("a", actor, role="server")
    for n in others:
        net.add_node(n, senders_of or _idle)
    res = net.run(strict=False)
    return box, len(res.ledger)


def _raised(transport, body, exc_type, match, **kw):
    box, rows = call_as_node(transport, body, **kw)
    assert "error" in box, f"no error, returned {box.get('value')!r}"
    assert type(box["error"]) is exc_type or isinstance(box["error"], exc_type), repr(box["error"])
    assert pytest.raises(exc_type, _reraise, box["error"]).match(match)
    return rows


def _reraise(exc):
    raise exc


# -- Context: raises as documented, nothing sent ---------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("body, exc_type, match", [
    (lambda c: c.send("nobody", "k", 1), UnknownNodeError, "unknown node 'nobody'"),
    (lambda c: c.broadcast(["b", "nobody"], "k", 1), UnknownNodeError, "unknown node 'nobody'"),
    (lambda c: c.gather("k", senders=["b", "nobody"], timeout=1), UnknownNodeError,
     "gather: unknown sender 'nobody'"),
    (lambda c: c.gather("k"), ValueError, "exactly one of senders= or count="),
    (lambda c: c.gather("k", senders=["b"], count=1), ValueError, "exactly one of senders= or count="),
    (lambda c: c.sleep(-1), ValueError, "sleep needs a finite non-negative duration, got -1"),
    (lambda c: c.sleep(math.inf), ValueError, "sleep needs a finite non-negative duration, got inf"),
    (lambda c: c.compute(-1.0), ValueError, r"compute needs a finite non-negative flop count, got -1\.0"),
    (lambda c: c.compute(math.nan), ValueError, "compute needs a finite non-negative flop count, got nan"),
])
def test_a_call_raises_what_its_docstring_says_and_sends_nothing(transport, body, exc_type, match):
    assert _raised(transport, body, exc_type, match) == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_send_returns_without_waiting_for_the_transmission(transport):
    # "Returns as soon as it is queued on this node's egress port": a 1 MB message over a 1 MB/s
    # link takes a second on SimNetwork, and the sender's clock has not moved when send returns
    async def body(ctx):
        t0 = ctx._net.now()
        await ctx.send("b", "k", {"x": np.zeros(125_000)})
        return ctx._net.now() - t0

    box, rows = call_as_node(transport, body)
    assert rows == 1
    assert box["value"] == 0.0 if transport == "sim" else box["value"] < 0.5


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_receive_with_a_timeout_returns_none_at_the_timeout(transport):
    async def body(ctx):
        net = ctx._net
        t0 = net.now()
        got = await ctx.receive("never", timeout=0.05)
        return got, net.now() - t0

    box, _ = call_as_node(transport, body)
    got, waited = box["value"]
    assert got is None
    if transport == "sim":
        assert waited == pytest.approx(0.05, abs=1e-12)
    else:
        assert 0.04 <= waited < 1.0


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_ctx_rng_is_the_generator_of_seed_and_node_id_on_both_transports(transport):
    async def body(ctx):
        return ctx.rng.random(4), ctx.rng is ctx.rng

    box, _ = call_as_node(transport, body)
    draws, same = box["value"]
    assert same
    assert draws.tolist() == node_rng(3, "a").random(4).tolist()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_compute_advances_simulated_time_and_only_yields_on_a_real_loop(transport):
    async def body(ctx):
        net = ctx._net
        t0 = net.now()
        await ctx.compute(4e9, "train")
        return net.now() - t0

    box: dict = {}

    async def actor(ctx):
        box["dt"] = await body(ctx)

    net = _net(transport)
    net.add_node("a", actor, flops=2e9)
    res = net.run()
    assert res.flops == {"a": {"train": 4e9}}
    if transport == "sim":
        assert box["dt"] == pytest.approx(2.0)
    else:
        assert box["dt"] < 0.5


# -- Network: add_node, set_unit, run -----------------------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
def test_add_node_refuses_an_actor_that_is_not_callable_and_nodes_after_the_run(transport):
    net = _net(transport)
    with pytest.raises(NetworkConfigError, match="actor of node 'a' is not callable: 5"):
        net.add_node("a", 5)
    net.add_node("a", _idle)
    with pytest.raises(NetworkConfigError, match="duplicate node id 'a'"):
        net.add_node("a", _idle)
    net.run()
    with pytest.raises(NetworkConfigError, match="cannot add nodes after the network has run"):
        net.add_node("b", _idle)
    with pytest.raises(FedsimError, match="a network runs once"):
        net.run()
    assert list(net.nodes) == ["a"]


async def _takes_x(ctx, x):
    return x


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("args, kwargs, why", [
    ((), {}, "missing 1 required positional argument: 'x'"),
    ((1, 2), {}, "takes 2 positional arguments but 3 were given"),
    ((), {"y": 1}, "got an unexpected keyword argument 'y'"),
])
def test_an_actor_called_with_arguments_that_do_not_fit_is_named(transport, args, kwargs, why):
    # a bare TypeError naming no node on SimNetwork and AsyncioNetwork; TcpNetwork named it
    net = _net(transport)
    net.add_node("ok", _idle)
    net.add_node("bad", _takes_x, *args, role="server", **kwargs)
    with pytest.raises(ActorError, match=f"actor 'bad' \\(role 'server'\\) failed: TypeError: .*{why}") as info:
        net.run()
    assert info.value.node == "bad" and type(info.value.__cause__) is TypeError
    assert len(net.ledger) == 0


@pytest.mark.parametrize("value", [0, -2, 2.5, "x", None, True])
def test_set_unit_refuses_what_is_not_a_positive_whole_number(value):
    net = SimNetwork()
    with pytest.raises(NetworkConfigError, match=f"unit must be a positive number of floats, got {value!r}"):
        net.set_unit(value)
    net.set_unit(4.0)
    assert net.ledger.unit == 4 and type(net.ledger.unit) is int


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_network_result_is_none_before_the_run_and_the_run_result_after(transport):
    net = _net(transport)
    net.add_node("a", _idle)
    assert net.result is None
    res = net.run()
    assert net.result is res and res.results == {"a": None}


# -- contract, registry ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Cfg(Config):
    rounds: int = param(2, "rounds", min=1)


def _spec(**kw):
    base = dict(name="claims-proto", summary="s", Config=_Cfg, kinds=(Kind("k", "server", "client"),),
                build=lambda net, data, cfg, **_: None, tiny=lambda c, r, s: (None, _Cfg()))
    base.update(kw)
    return ProtocolSpec(**base)


def test_spec_kind_names_the_protocol_and_the_missing_kind():
    with pytest.raises(KeyError, match="protocol 'claims-proto' declares no message kind 'zz'"):
        _spec().kind("zz")
    assert _spec().kind("k").src == ("server",)


@pytest.mark.parametrize("kw, exc_type, match", [
    (dict(name=""), ValueError, "protocol name ''"),
    (dict(kinds=(Kind("k", "a", "b"), Kind("k", "a", "c"))), ValueError, "declares a message kind twice"),
    (dict(build=None), TypeError, "build must be a function, got None"),
    (dict(tiny=3), TypeError, "tiny must be a function, got 3"),
])
def test_protocol_spec_refuses_a_malformed_declaration_naming_it(kw, exc_type, match):
    with pytest.raises(exc_type, match=match):
        _spec(**kw)


@pytest.mark.parametrize("kw, match", [
    (dict(name=""), "the name must be a non-empty string"),
    (dict(src=()), "src must be a role name or a tuple of role names"),
    (dict(dst=("server", "")), "dst must be a role name or a tuple of role names"),
    (dict(purpose="fun"), "purpose must be one of"),
])
def test_kind_refuses_a_malformed_declaration_naming_it(kw, match):
    args = dict(name="k", src="server", dst="client")
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        Kind(**args)


def test_register_refuses_what_is_not_a_spec_and_a_second_protocol_of_a_name():
    with pytest.raises(TypeError, match="register\\(\\) takes a ProtocolSpec, got int"):
        register(5)
    reg = Registry()
    reg.add(_spec())
    with pytest.raises(ValueError, match="a protocol named 'claims-proto' is already registered"):
        reg.add(_spec(summary="another"))
    assert reg.add(_spec(summary="another"), replace=True).summary == "another"
    with pytest.raises(KeyError, match="unknown protocol 'nope'; known: "):
        REGISTRY["nope"]


def test_load_plugins_names_a_missing_file(tmp_path):
    missing = tmp_path / "absent.py"
    with pytest.raises(FileNotFoundError, match=f"no plug-in file at {missing}"):
        load_plugins([missing], entry_points=False)
    with pytest.raises(FileNotFoundError, match="no plug-in file at"):
        load_plugins([tmp_path], entry_points=False)  # a folder is no file


def test_config_refuses_bad_values_and_unknown_keys_naming_them():
    with pytest.raises(ConfigError, match=r"_Cfg.rounds must be >= 1, got 0") as info:
        _Cfg(rounds=0)
    assert info.value.key == "rounds"
    with pytest.raises(ConfigError, match="unknown parameter 'round' for _Cfg; did you mean 'rounds'") as info:
        _Cfg().replace(round=3)
    assert info.value.key == "round"
    with pytest.raises(ConfigError, match="unknown parameter 'round'"):
        _Cfg.from_strings(["round=3"])


# -- Context: round labels, sleep and compute name what is wrong -------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("body, match", [
    (lambda c: c.sleep("soon"), "sleep needs a finite non-negative duration, got 'soon'"),
    (lambda c: c.sleep(None), "sleep needs a finite non-negative duration, got None"),
    (lambda c: c.compute("lots"), "compute needs a finite non-negative flop count, got 'lots'"),
    (lambda c: c.compute(None), "compute needs a finite non-negative flop count, got None"),
])
def test_sleep_and_compute_name_an_argument_that_is_no_number(transport, body, match):
    # a bare "could not convert string to float" / "float() argument must be ..." before
    _raised(transport, body, ValueError, match)


async def _begin(ctx, rnd):
    ctx.begin_round(rnd)
    return ctx.round


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("rnd", [1.7, "x", None, True, math.nan])
def test_begin_round_refuses_what_is_not_a_whole_number_naming_the_node(transport, rnd):
    # int() made round 1 of 1.7, silently, and a bare int() error of the others
    _raised(transport, lambda c: _begin(c, rnd), ValueError,
            f"begin_round on node 'a': a round is a whole number, got {rnd!r}")


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("rnd, label", [(np.int64(3), 3), (2.0, 2), (7, 7)])
def test_begin_round_takes_whole_numbers_of_any_type_as_an_int(transport, rnd, label):
    box, _ = call_as_node(transport, lambda c: _begin(c, rnd))
    assert box["value"] == label and type(box["value"]) is int


async def _send_round_1(ctx):
    ctx.begin_round(1)
    await ctx.send("a", "up", 5)


async def _gather_round(ctx, rnd, each):
    if each:
        return [m.payload async for m in ctx.gather_each("up", senders=["b"], timeout=1.0, round=rnd)]
    return [m.payload for m in await ctx.gather("up", senders=["b"], timeout=1.0, round=rnd)]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("each", [False, True])
def test_a_gather_for_a_round_that_is_not_a_whole_number_is_refused(transport, each):
    # round=1.5 discarded round 1's message as stale (1 < 1.5) and reported b missing
    call = "gather_each" if each else "gather"
    for rnd in (1.5, "1"):
        box: dict = {}

        async def actor(ctx, rnd=rnd):
            try:
                box["value"] = await _gather_round(ctx, rnd, each)
            except ValueError as exc:
                box["error"] = str(exc)

        net = _net(transport)
        net.add_node("a", actor, role="server")
        net.add_node("b", _send_round_1)
        net.run(strict=False)
        assert box == {"error": f"{call}: a round is a whole number, got {rnd!r}"}
    box = {}

    async def taker(ctx):
        box["value"] = await _gather_round(ctx, np.int64(1), each)

    net = _net(transport)
    net.add_node("a", taker, role="server")
    net.add_node("b", _send_round_1)
    net.run()
    assert box == {"value": [5]}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("call", ["gather", "gather_each"])
def test_senders_given_as_one_str_are_named_as_such(transport, call):
    # senders="server" was taken for the senders s, e, r, v: "gather: unknown sender 'e'"
    async def body(ctx):
        if call == "gather":
            return await ctx.gather("up", senders="server", timeout=1.0)
        return [m async for m in ctx.gather_each("up", senders="server", timeout=1.0)]

    _raised(transport, body, TypeError,
            f"^{call} takes senders= as a list of node ids, got the str 'server'; write senders=\\['server'\\]$",
            others=("server", "b"))
    _raised(transport, lambda c: c.gather("up", senders=["nobody"], timeout=1.0) if call == "gather"
            else _drain(c.gather_each("up", senders=["nobody"])), UnknownNodeError,
            f"^{call}: unknown sender 'nobody'$")


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("call", ["gather", "gather_each"])
@pytest.mark.parametrize("senders", ["b", "bc"])
def test_senders_given_as_one_str_of_node_ids_are_refused_as_broadcast_refuses_one_str(transport, call, senders):
    # senders="b" worked by accident (its one letter a node id) and senders="bc" gathered from b
    # and c; a str of letters that are not all nodes was refused: any str is now, as broadcast does
    got = []

    async def body(ctx):
        if call == "gather":
            g = await ctx.gather("up", senders=senders, timeout=1.0)
            got.append(sorted(m.sender for m in g.messages))
            return g
        async for m in ctx.gather_each("up", senders=senders, timeout=1.0):
            got.append(m.sender)
        return got

    async def sender(ctx):
        await ctx.send("a", "up", 1)

    box: dict = {}

    async def actor(ctx):
        try:
            box["value"] = await body(ctx)
        except Exception as exc:  # noqa: BLE001 - what the call raised is the result
            box["error"] = exc

    net = _net(transport)
    net.add_node("a", actor, role="server")
    net.add_node("b", sender)
    net.add_node("c", sender)
    net.run(strict=False)
    assert got == [] and "value" not in box
    assert type(box["error"]) is TypeError
    assert str(box["error"]) == (f"{call} takes senders= as a list of node ids, got the str {senders!r}; "
                                 f"write senders=[{senders!r}]")


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("dsts, given", [(None, "NoneType None"), (5, "int 5"), (3.5, "float 3.5")])
def test_broadcast_to_what_is_no_collection_names_the_node_and_what_was_given(transport, dsts, given):
    # it was the bare "TypeError: 'NoneType' object is not iterable" of tuple(dsts)
    assert _raised(transport, lambda c: c.broadcast(dsts, "k", 1), TypeError,
                   f"^broadcast on node 'a' takes a list of node ids, got {given}$") == 0
    # a TypeError of an iterable's contents is the destinations' own, as before
    assert _raised(transport, lambda c: c.broadcast(["b", ["c"]], "k", 1), TypeError,
                   r"^a destination is a node id \(str\), got list \['c'\]; ctx.broadcast sends to several$") == 0


async def _drain(it):
    return [m async for m in it]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_send_of_a_draft_of_another_kind_or_sent_twice_raises_as_documented(transport):
    from fedsim.kernel import CodecError

    async def other_kind(ctx):
        await ctx.send("b", "other", ctx.draft("k", {"x": np.zeros(2)}))

    async def twice(ctx):
        d = ctx.draft("k", {"x": np.zeros(2)})
        await ctx.send("b", "k", d)
        await ctx.send("b", "k", d)

    assert _raised(transport, other_kind, ValueError, "a 'k' draft sent as a 'other' message") == 0
    assert _raised(transport, twice, CodecError, "the 'k' draft was already sent") == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("tap", [object(), 5])
def test_a_tap_without_observe_is_refused_before_anything_runs(transport, tap):
    # it was an AttributeError at the first send, blamed on the sender as its ActorError
    started = []

    async def sender(ctx):
        started.append(ctx.node_id)
        await ctx.send("b", "k", 1)

    net = _net(transport)
    net.add_node("a", sender)
    net.add_node("b", _idle)
    net.tap = tap
    with pytest.raises(NetworkConfigError, match=f"the network's tap must have an observe\\(row, payload\\) method, got {tap!r}"):
        net.run()
    assert started == [] and len(net.ledger) == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_tap_observes_every_copy_at_its_send_with_its_row(transport):
    seen = []

    class Tap:
        def observe(self, row, payload):
            seen.append((row[3], payload.value()))

    async def sender(ctx):
        await ctx.broadcast(["b", "c"], "k", {"v": 1})
        await ctx.send("b", "j", 2)

    net = _net(transport)
    net.add_node("a", sender)
    net.add_node("b", _idle)
    net.add_node("c", _idle)
    net.tap = Tap()
    net.run()
    assert seen == [("b", {"v": 1}), ("c", {"v": 1}), ("b", 2)]


@pytest.mark.parametrize("kw, match", [
    (dict(src=None), r"src must be a role name or a tuple of role names .*got \(None,\)"),
    (dict(dst=5), r"dst must be a role name or a tuple of role names .*got \(5,\)"),
    (dict(anonymous="no"), "anonymous must be True or False, got 'no'"),
    (dict(anonymous=1), "anonymous must be True or False, got 1"),
])
def test_kind_names_roles_that_are_not_iterable_and_an_anonymous_that_is_no_bool(kw, match):
    # tuple(None) was "'NoneType' object is not iterable", naming no Kind; anonymous="no" was true
    args = dict(name="k", src="server", dst="client")
    args.update(kw)
    with pytest.raises(ValueError, match=f"^Kind 'k': {match}"):
        Kind(**args)
    anon = Kind("k", "server", "client", anonymous=np.bool_(True)).anonymous
    assert anon is True


@pytest.mark.parametrize("kw, exc_type, match", [
    (dict(kinds=None), TypeError, "protocol 'claims-proto': kinds must be a tuple of Kind\\(...\\), got None"),
    (dict(kinds=5), TypeError, "protocol 'claims-proto': kinds must be a tuple of Kind\\(...\\), got 5"),
    (dict(data="ratings"), ValueError, "protocol 'claims-proto': data must be explicit, implicit or none, got 'ratings'"),
])
def test_protocol_spec_names_kinds_that_are_not_iterable_and_the_data_it_got(kw, exc_type, match):
    with pytest.raises(exc_type, match=f"^{match}$"):
        _spec(**kw)


def test_load_plugins_refuses_one_path_given_as_a_str(tmp_path):
    # its characters were taken for paths: "no protocol plug-in file at /"
    path = tmp_path / "proto.py"
    path.write_text("X = 1\n")
    for given in (str(path), path):
        with pytest.raises(TypeError, match=re.escape(f"load_plugins takes a list of paths, got the single path {given!r}")):
            load_plugins(given, entry_points=False)
    assert load_plugins([path], entry_points=False) == []


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("node_id", [5, None, b"a"])
def test_add_node_refuses_an_id_that_is_not_a_str(transport, node_id):
    # 5 became node '5', which ctx.send(5) did not find ("unknown node 5")
    net = _net(transport)
    with pytest.raises(NetworkConfigError, match=f"^a node id is a str, got {type(node_id).__name__} {re.escape(repr(node_id))}$"):
        net.add_node(node_id, _idle)
    assert net.nodes == {}
    net.add_node(np.str_("c1"), _idle)
    assert list(net.nodes) == ["c1"] and type(next(iter(net.nodes))) is str


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("role", [None, "", 5])
def test_a_role_that_is_not_a_non_empty_str_is_refused_naming_the_node(transport, role):
    # None became the role 'None', '' a role no Kind can declare
    net = _net(transport)
    with pytest.raises(NetworkConfigError, match=f"^node 'a': role must be a non-empty str, got {role!r}$"):
        net.add_node("a", _idle, role=role)
    assert net.nodes == {}

    async def body(ctx):
        ctx.set_role(role)

    _raised(transport, body, ValueError, f"^set_role on node 'a': role must be a non-empty str, got {role!r}$")

    async def denoiser(ctx):
        ctx.set_role("denoiser")
        await ctx.send("b", "k", 1)
        return ctx.role

    box, _ = call_as_node(transport, denoiser)
    assert box == {"value": "denoiser"}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_receive_takes_the_oldest_of_its_kind_and_leaves_the_others_in_the_mailbox(transport):
    async def a(ctx):
        ctx.begin_round(4)
        for kind, v in (("x", 1), ("y", 2), ("x", 3), ("w", 4)):
            await ctx.send("b", kind, v)

    async def b(ctx):
        await ctx.sleep(0.01)  # all four are in the mailbox
        y = await ctx.receive("y")
        x = await ctx.receive(("w", "x"))
        rest = [(await ctx.receive()).payload for _ in range(2)]
        return y.payload, y.round, x.payload, rest, ctx.round

    net = _net(transport)
    net.add_node("a", a, role="server")
    net.add_node("b", b)
    res = net.run()
    # the receiver adopts the larger round label of what it read
    assert res["b"] == (2, 4, 1, [3, 4], 4)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_receive_with_a_timeout_and_a_deadline_returns_at_the_earlier(transport):
    async def body(ctx):
        net = ctx._net
        t0 = net.now()
        first = await ctx.receive("never", timeout=5.0, deadline=ctx.deadline(0.05))
        t1 = net.now()
        second = await ctx.receive("never", timeout=0.05, deadline=ctx.deadline(5.0))
        return first, t1 - t0, second, net.now() - t1

    box, _ = call_as_node(transport, body)
    first, d1, second, d2 = box["value"]
    assert first is None and second is None
    if transport == "sim":
        assert (d1, d2) == (pytest.approx(0.05, abs=1e-12), pytest.approx(0.05, abs=1e-12))
    else:
        assert 0.04 <= d1 < 1.0 and 0.04 <= d2 < 1.0


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_broadcast_sends_a_copy_per_listed_node_and_nothing_for_an_empty_list(transport):
    async def body(ctx):
        await ctx.broadcast([], "k", 1)
        await ctx.broadcast(["b", "c", "b"], "k", 2)

    net = _net(transport)
    box: dict = {}

    async def actor(ctx):
        box["value"] = await body(ctx)

    async def count(ctx):
        got = await ctx.gather("k", count=2 if ctx.node_id == "b" else 1, timeout=1.0)
        return [m.payload for m in got]

    net.add_node("a", actor, role="server")
    net.add_node("b", count)
    net.add_node("c", count)
    res = net.run()
    assert [r["dst"] for r in net.ledger.records()] == ["b", "c", "b"]
    assert res["b"] == [2, 2] and res["c"] == [2]
    _raised(transport, lambda c: c.broadcast(None, "k", 1), TypeError,
            "^broadcast on node .a. takes a list of node ids, got NoneType None$")


def test_config_construction_refuses_unknown_keywords_with_a_type_error_naming_key_and_class():
    with pytest.raises(TypeError, match="_Cfg.__init__\\(\\) got an unexpected keyword argument 'round'"):
        _Cfg(round=3)
    with pytest.raises(TypeError, match="use a tuple for a sequence default"):
        param([1], "ids")
    with pytest.raises(ConfigError, match="_Cfg.rounds must not be None, got None"):
        _Cfg(rounds=None)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_network_result_stays_none_after_a_run_stopped_by_an_actor_error(transport):
    async def fails(ctx):
        raise RuntimeError("boom")

    net = _net(transport)
    net.add_node("a", fails)
    with pytest.raises(ActorError, match="actor 'a' \\(role 'client'\\) failed: RuntimeError: boom"):
        net.run()
    assert net.result is None


def test_set_unit_after_the_run_changes_how_the_ledger_counts():
    async def sender(ctx):
        await ctx.send("b", "k", {"v": np.zeros(8)})

    net = SimNetwork()
    net.add_node("a", sender)
    net.add_node("b", _idle)
    net.run()
    assert math.isnan(list(net.ledger.records())[0]["units"])
    net.set_unit(4)
    assert list(net.ledger.records())[0]["units"] == 2.0


# -- TcpNetwork: the same Context, the same errors (one worker process per run) --------------

async def _tcp_case(ctx, case):
    if case == "begin_round":
        ctx.begin_round(1.7)
    elif case == "sleep":
        await ctx.sleep("soon")
    elif case == "senders":
        await ctx.gather("up", senders="server", timeout=0.1)
    elif case == "broadcast_none":
        await ctx.broadcast(None, "k", 1)
    elif case == "senders_a_node":  # (it gathered from node a, itself, until the timeout)
        await ctx.gather("up", senders="a", timeout=0.1)
    elif case == "set_role":
        ctx.set_role(None)


@pytest.mark.parametrize("case, cause, match", [
    ("begin_round", "ValueError", "begin_round on node 'a': a round is a whole number, got 1.7"),
    ("sleep", "ValueError", "sleep needs a finite non-negative duration, got 'soon'"),
    ("senders", "TypeError", "gather takes senders= as a list of node ids, got the str 'server'"),
    ("broadcast_none", "TypeError", "broadcast on node 'a' takes a list of node ids, got NoneType None"),
    ("senders_a_node", "TypeError", "gather takes senders= as a list of node ids, got the str 'a'; "
                                    "write senders=\\['a'\\]"),
    ("set_role", "ValueError", "set_role on node 'a': role must be a non-empty str, got None"),
    ("signature", "TypeError", "_tcp_case\\(\\) missing 1 required positional argument: 'case'"),
])
def test_tcp_network_raises_the_same_errors_naming_the_node(case, cause, match):
    from fedsim.kernel import TcpNetwork

    net = TcpNetwork(seed=3)
    if case == "signature":
        net.add_node("a", _tcp_case)
    else:
        net.add_node("a", _tcp_case, case)
    with pytest.raises(ActorError, match=f"actor 'a' \\(role 'client'\\) failed: {cause}: {match}"):
        net.run(timeout=60)


def test_tcp_network_refuses_any_tap_and_bad_node_ids_before_it_forks():
    from fedsim.kernel import TcpNetwork

    class Tap:
        def observe(self, row, payload):
            pass

    net = TcpNetwork(seed=3)
    with pytest.raises(NetworkConfigError, match="^a node id is a str, got int 5$"):
        net.add_node(5, _idle)
    net.add_node("a", _idle)
    net.tap = Tap()
    with pytest.raises(NetworkConfigError, match="TcpNetwork does not support a tap"):
        net.run(timeout=60)
    assert not net.ran and len(net.ledger) == 0
    net.tap = None
    with pytest.raises(NetworkConfigError, match="^timeout must be positive seconds or None, got 0$"):
        net.run(timeout=0)
    assert not net.ran


async def _sleeps_a_second(ctx):
    await ctx.sleep(1.0)
    return 1


@pytest.mark.parametrize("until", [-1, 0, math.nan, "x", True, [2.0]])
def test_simnetwork_run_refuses_an_until_that_is_no_positive_time_before_anything_runs(until):
    # 0, -1 and NaN were refused by the event queue after the actors had started (the network
    # then counted as run and could not run again), "x" with a bare float() error, True ran 1 s
    net = SimNetwork()
    net.add_node("a", _sleeps_a_second)
    with pytest.raises(NetworkConfigError, match=re.escape(
            f"SimNetwork.run: until must be a positive number of simulated seconds or None, got {until!r}")):
        net.run(until=until)
    assert not net.ran
    res = net.run(until=math.inf)
    assert res.results == {"a": 1} and res.duration == 1.0

