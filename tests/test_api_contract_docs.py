"""The public API's docstrings against behaviour, the calls ``tests/test_api_claims.py`` leaves
out: each documented raise triggered (type and a message that names the call, node, key, filter,
column or file), and the raise paths the docstrings omitted or got wrong, now documented or
fixed (``ctx.gather``/``gather_each`` senders, ``Ledger.select``/``group``, ``Network(ledger=)``,
the codec's key path, ``run_scenario``'s seed and ``net``, ``fedsim.experiment``'s exports)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fedsim.kernel import AsyncioNetwork, NetworkConfigError, SimNetwork, StreamingLedger, UnknownNodeError
from fedsim.kernel.ledger import FILTERS
from test_api_claims import call_as_node

TRANSPORTS = ["sim", "asyncio"]


def _net(transport: str, **kw):
    return SimNetwork(seed=3, **kw) if transport == "sim" else AsyncioNetwork(seed=3, **kw)


async def _idle(ctx):
    return None


def _raises(transport, body, exc_type, message, **kw):
    box, rows = call_as_node(transport, body, **kw)
    assert "value" not in box, f"no error, returned {box.get('value')!r}"
    assert type(box["error"]) is exc_type, repr(box["error"])
    assert str(box["error"]) == message
    return rows


async def _drain(it):
    return [m async for m in it]


# -- ctx.gather / gather_each: senders= that are no list of node ids -------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("call", ["gather", "gather_each"])
@pytest.mark.parametrize("senders, given", [(None, "NoneType None"), (5, "int 5"), (2.5, "float 2.5")])
def test_gather_senders_that_are_not_iterable_name_the_call_the_node_and_what_was_given(transport, call, senders,
                                                                                          given):
    # the bare "TypeError: 'NoneType' object is not iterable" (broadcast names the node: the same
    # here); gather's senders=None is "not given" (its ValueError: exactly one of senders=, count=)
    if call == "gather" and senders is None:
        _raises(transport, lambda c: c.gather("up", senders=None, timeout=0.1), ValueError,
                "gather needs exactly one of senders= or count=")
        return

    def body(c):
        if call == "gather":
            return c.gather("up", senders=senders, timeout=0.1)
        return _drain(c.gather_each("up", senders=senders, timeout=0.1))

    _raises(transport, body, TypeError, f"{call} on node 'a' takes senders= as a list of node ids, got {given}")


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("call", ["gather", "gather_each"])
def test_a_sender_that_is_not_hashable_is_named(transport, call):
    # "unhashable type: 'list'" named neither the call, the node nor the sender
    def body(c):
        if call == "gather":
            return c.gather("up", senders=["b", ["c"]], timeout=0.1)
        return _drain(c.gather_each("up", senders=["b", ["c"]], timeout=0.1))

    _raises(transport, body, TypeError, f"{call} on node 'a': a sender is a node id (str), got list ['c']",
            others=("b", "c"))


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("call", ["gather", "gather_each"])
def test_a_sender_that_is_no_str_among_node_ids_is_an_unknown_sender_on_both_calls(transport, call):
    # gather_each sorted the senders first: "'<' not supported between instances of 'str' and
    # 'int'" where gather said "unknown sender 5"
    def body(c):
        if call == "gather":
            return c.gather("up", senders=[5, "b"], timeout=0.1)
        return _drain(c.gather_each("up", senders=[5, "b"], timeout=0.1))

    _raises(transport, body, UnknownNodeError, f"{call}: unknown sender 5")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_gather_each_still_hands_over_in_node_id_order_whatever_order_senders_are_listed_in(transport):
    async def sender(ctx):
        await ctx.send("a", "up", ctx.node_id)

    async def body(c):
        it = c.gather_each("up", senders=("d", "b", "c"), timeout=1.0)
        return [m.payload async for m in it], it.missing

    box, rows = call_as_node(transport, body, others=("b", "c", "d"), senders_of=sender)
    assert box == {"value": (["b", "c", "d"], [])} and rows == 3


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_gather_each_refuses_a_message_that_came_anonymously_in_the_loop(transport):
    # documented ("in the loop, when it comes to it"), never tested: its place in node-id order
    # would reveal its sender
    async def anon(ctx):
        await ctx.send("a", "up", 1, anonymous=True)

    async def body(c):
        it = c.gather_each("up", senders=["b"], timeout=1.0)  # (the call itself raises nothing)
        return [m.payload async for m in it]

    rows = _raises(transport, body, ValueError,
                   "gather_each: a 'up' message came over an anonymous channel; its order would reveal the "
                   "sender: use gather(count=...)", senders_of=anon)
    assert rows == 1

    async def counted(c):
        return [(m.payload, m.sender) for m in await c.gather("up", count=1, timeout=1.0)]

    box, _ = call_as_node(transport, counted, senders_of=anon)
    assert box == {"value": [(1, None)]}


# -- Ledger: select's filters, group's columns ------------------------------------------------

async def _sends_two(ctx):
    ctx.begin_round(1)
    await ctx.send("b", "k", {"v": np.zeros(4)})
    await ctx.send("b", "j", 1)


def _ledger(streaming: bool):
    net = SimNetwork(ledger=StreamingLedger() if streaming else None)
    net.add_node("a", _sends_two, role="server")
    net.add_node("b", _idle)
    net.run(strict=False)
    return net.ledger


_FILTER_LIST = "kind, exclude_kinds, round, src, dst, src_role, dst_role, fate, anonymous, read, min_round"
_COLUMN_LIST = ("seq, round, src, dst, src_role, dst_role, kind, bytes, raw_bytes, floats, units, send_time, "
                "tx_start, tx_end, rx_start, arrival_time, status, read, anonymous, note")


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("where", ["ledger", "view"])
def test_select_names_an_unknown_filter_and_lists_the_filters(streaming, where):
    # "_filter() got an unexpected keyword argument 'knd'" (a private function's name;
    # "_compile_filters()" on a StreamingLedger): the docstring said nothing of it
    led = _ledger(streaming)
    sel = led.select if where == "ledger" else led.view().select
    with pytest.raises(TypeError, match=f"^select: unknown filter 'knd'; filters: {_FILTER_LIST}$"):
        sel(knd="k")
    assert FILTERS == tuple(_FILTER_LIST.split(", "))
    assert len(sel(kind="k")) == 1 and len(sel(kind=("k", "j"), min_round=1)) == 2


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("bad, match", [
    (dict(fate="gone"), re.escape("fate must be one of ('delivered', 'lost', 'in_flight'), got ['gone']")),
    (dict(read="no"), "select: read must be True, False or None, got 'no'"),
    (dict(anonymous=1), "select: anonymous must be True, False or None, got 1"),
    (dict(min_round="1"), "select: min_round must be a round number, got '1'"),
])
def test_select_raises_the_value_errors_its_docstring_now_lists(streaming, bad, match):
    with pytest.raises(ValueError, match=f"^{match}$"):
        _ledger(streaming).select(**bad)


@pytest.mark.parametrize("streaming", [False, True])
def test_group_names_a_key_that_is_no_column(streaming):
    # a bare KeyError: 'nope' (column() listed the columns)
    view = _ledger(streaming).view()
    with pytest.raises(KeyError, match=f"^\"no ledger column 'nope'; columns: {_COLUMN_LIST}\"$"):
        view.group("kind", "nope")
    with pytest.raises(KeyError, match=re.escape("group: 'units' is derived (floats / unit), not a column to group by")):
        view.group("units")
    with pytest.raises(ValueError, match="^group needs at least one column name$"):
        view.group()
    assert {k: t.messages for k, t in view.group("kind").items()} == {"j": 1, "k": 1}


def test_a_network_given_a_ledger_that_is_no_ledger_names_it():
    # "object of type 'int' has no len()"
    with pytest.raises(NetworkConfigError, match=r"^ledger must be a fedsim.kernel.Ledger \(or StreamingLedger\), "
                                                 r"got int 5$"):
        SimNetwork(ledger=5)
    with pytest.raises(NetworkConfigError, match="^ledger must be a fedsim.kernel.Ledger .*got dict {}$"):
        AsyncioNetwork(ledger={})
    with pytest.raises(NetworkConfigError, match="^the ledger given to a network must be empty, it has 2 rows$"):
        SimNetwork(ledger=_ledger(False))


# -- fedsim.experiment: run_scenario's seed and net, the package's exports --------------------

@pytest.mark.parametrize("seed, shown", [(1.5, "1.5"), (True, "True"), ("x", "'x'"), (None, "None"), (2.0, "2.0")])
def test_run_scenario_refuses_a_seed_that_is_no_whole_number_before_anything_is_made(tmp_path, seed, shown):
    # int() ran 1.5 and True as seed 1 (results.json said 1), and "x" / None were a bare
    # ValueError / TypeError naming nothing; the docstring promised UsageError for a bad seed
    from fedsim.experiment import UsageError, run_scenario

    out = tmp_path / "run"
    with pytest.raises(UsageError, match=f"^--seed must be a non-negative integer, got {re.escape(shown)}$"):
        run_scenario("demo", out=str(out), seed=seed, quiet=True)
    with pytest.raises(UsageError, match="^--seed must be non-negative, got -1$"):
        run_scenario("demo", out=str(out), seed=-1, quiet=True)
    assert list(tmp_path.iterdir()) == []


def test_run_scenario_names_an_unknown_profile_given_as_net_with_a_usage_error(tmp_path):
    # "Raises UsageError for an unknown ... profile": profile= did, net="nope" (a profile name,
    # as documented) was the NetworkConfigError itself
    from fedsim.experiment import UsageError, network_spec, run_scenario

    for kw in (dict(profile="nope"), dict(net="nope")):
        with pytest.raises(UsageError, match="^unknown network profile 'nope'; known: ideal, lan, mobile, wan$"):
            run_scenario("demo", out=str(tmp_path / "run"), quiet=True, **kw)
    assert list(tmp_path.iterdir()) == []
    from fedsim.experiment import load_scenario

    assert network_spec(load_scenario("demo"), net="wan").profile == "wan"


def test_run_scenario_runs_with_a_numpy_integer_seed_recorded_as_an_int(tmp_path):
    from fedsim.experiment import run_scenario

    res = run_scenario("demo", out=str(tmp_path / "run"), seed=np.int64(2), quiet=True,
                       overrides={"rounds": 1, "clients": 2})
    assert res["seed"] == 2 and type(res["seed"]) is int


def test_every_name_the_experiment_package_docstring_lists_is_exported():
    # the docstring lists load_config under :mod:`.configfile`, "everything public is importable
    # from here", and `from fedsim.experiment import load_config` was an ImportError
    import fedsim.experiment as experiment

    doc = experiment.__doc__
    listed = doc[doc.index("everything public is importable from here"):]
    names = set()
    for line in re.findall(r"^- :mod:`\.\w+`:.*(?:\n  .*)*", listed, flags=re.M):
        names.update(re.findall(r"``([A-Za-z_]\w*)``", line))
    assert {"load_config", "run_scenario", "RunContext", "UsageError", "keep_freed_memory"} <= names
    assert sorted(names - set(experiment.__all__)) == []
    for name in names:
        assert getattr(experiment, name) is not None
    from fedsim.experiment.configfile import load_config

    assert experiment.load_config is load_config


# -- the codec: CodecError names where the value it refuses is --------------------------------

_OBJ = object()


@pytest.mark.parametrize("payload, where, what", [
    ({"x": _OBJ}, "['x']", f"cannot encode object of type object: {_OBJ!r}"),
    ({"ids": np.arange(3), "model": {"V": np.zeros(2), "mask": np.ma.zeros(2)}}, "['model']['mask']",
     "cannot encode numpy.ma.MaskedArray: an ndarray subclass"),
    ({"a": 1, "b": [1, (2, {3})]}, "['b'][1][1]", "cannot encode object of type set: {3}"),
    ({"w": np.zeros(2, dtype=complex)}, "['w']", "cannot encode array of dtype complex128 (not in the dtype whitelist)"),
    ({"n": 2 ** 70}, "['n']", f"cannot encode object of type int: {2 ** 70}"),
    ({"m": {_OBJ: 1}}, f"['m'] (its key {_OBJ!r})", "cannot encode object of type object"),
    (_OBJ, "", "cannot encode object of type object"),
], ids=["object", "masked-array", "set-in-a-tuple", "complex", "big-int", "object-key", "top-level"])
# (ids of their own: the default ones held the object's address, another in each process, and
# the suite's workers must collect the same tests)
def test_encode_and_encode_message_name_the_key_path_of_what_they_refuse(payload, where, what):
    # "cannot encode object of type object: <object ...>" named no key: in a payload of twenty
    # keys (or a model's map one level down) the sender had to search for it
    from fedsim.kernel import CodecError, decode, decode_message, encode, encode_message

    with pytest.raises(CodecError, match="^" + re.escape(f"the 'up' message's payload{where}: {what}")):
        encode_message("up", payload)
    with pytest.raises(CodecError, match="^" + re.escape(f"value{where}: {what}")):
        encode(payload)
    if type(payload) is dict:
        from fedsim.kernel.codec import draft_message

        with pytest.raises(CodecError, match="^" + re.escape(f"the 'up' draft's template{where}: {what}")):
            draft_message("up", payload)
    # the packer is left ready: the next document encodes, and decodes to itself
    assert decode_message(encode_message("up", {"v": np.arange(3)}).data)[1]["v"].tolist() == [0, 1, 2]
    assert decode(encode([1, {"a": 2}]).data) == [1, {"a": 2}]


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("call", ["send", "broadcast", "draft"])
def test_a_payload_the_codec_refuses_is_a_codec_error_naming_the_kind_and_key_and_nothing_is_sent(transport, call):
    from fedsim.kernel import CodecError

    payload = {"ids": np.arange(2), "extra": {"when": _OBJ}}

    async def body(c):
        if call == "send":
            await c.send("b", "up", payload)
        elif call == "broadcast":
            await c.broadcast(["b"], "up", payload)
        else:
            c.draft("up", payload)

    label = "draft's template" if call == "draft" else "message's payload"
    rows = _raises(transport, body, CodecError,
                   f"the 'up' {label}['extra']['when']: cannot encode object of type object: {_OBJ!r}")
    assert rows == 0


@pytest.mark.parametrize("data, exc_type, match", [
    ("text", TypeError, "a bytes-like object is required, not 'str'"),
    (5, TypeError, "a bytes-like object is required, not 'int'"),
    (b"\x93\xa1k\x80\x01", "CodecError", r"^not a fedsim message: expected a \[kind, payload\] array$"),
])
def test_decode_message_raises_what_its_docstring_says(data, exc_type, match):
    from fedsim.kernel import CodecError, decode, decode_message

    exc_type = CodecError if exc_type == "CodecError" else exc_type
    with pytest.raises(exc_type, match=match):
        decode_message(data)
    if exc_type is TypeError:
        with pytest.raises(TypeError, match=match):
            decode(data)
    else:
        assert decode(data) == ["k", {}, 1]


@pytest.mark.parametrize("seed, shown", [(1.5, "1.5"), (True, "True"), ("3", "'3'")])
def test_run_sweep_refuses_a_seed_that_is_no_whole_number_before_running_anything(tmp_path, seed, shown):
    # int(seed) ran the sweep's points with seed 1 for 1.5 and True, and "3" as seed 3
    from fedsim.experiment import UsageError
    from fedsim.studies.sweep import run_sweep

    out = tmp_path / "sweep"
    with pytest.raises(UsageError, match=f"^--seed must be a non-negative integer, got {re.escape(shown)}$"):
        run_sweep("demo", {"rounds": [1]}, out=str(out), seed=seed, workers=1)
    with pytest.raises(UsageError, match="^--seed must be non-negative, got -2$"):
        run_sweep("demo", {"rounds": [1]}, out=str(out), seed=-2, workers=1)
    assert list(tmp_path.iterdir()) == []


def test_compare_scenario_raises_what_its_docstring_says_for_a_protocol_and_a_transport(tmp_path):
    from fedsim.experiment import UsageError
    from fedsim.experiment.compare import compare_scenario

    with pytest.raises(KeyError, match="unknown protocol 'nope'; known: demo, "):
        compare_scenario("nope")
    with pytest.raises(UsageError, match="^transport 'nowhere': unknown transport; known: asyncio, tcp"):
        compare_scenario("demo", "nowhere")  # (refused as fedsim compare refuses it: before any run)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("own_file", [False, True])
def test_a_closed_streaming_ledger_refuses_queries_naming_its_file(tmp_path, own_file):
    # "the StreamingLedger is closed" named no file
    led = StreamingLedger(tmp_path / "l.bin" if own_file else None, chunk_rows=2)
    net = SimNetwork(ledger=led)
    net.add_node("a", _sends_two, role="server")
    net.add_node("b", _idle)
    net.run(strict=False)
    path = led.path
    assert led.totals()["messages"] == 2
    led.close()
    for query in (led.totals, led.to_csv, lambda: len(led.select(kind="k")), led.flush):
        with pytest.raises(ValueError, match=f"^the StreamingLedger is closed \\(its file was {re.escape(path)}\\)$"):
            query()
    led.close()


# -- Network: documented raises nothing else triggered -----------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
def test_send_to_a_list_names_broadcast_and_sends_nothing(transport):
    # ctx.send's docstring: TypeError for a dst that is not a node id (a list: broadcast sends to several)
    rows = _raises(transport, lambda c: c.send(["b"], "k", 1), TypeError,
                   "a destination is a node id (str), got list ['b']; ctx.broadcast sends to several")
    assert rows == 0
    rows = _raises(transport, lambda c: c.send("zz", "k", 1), UnknownNodeError, "message addressed to unknown node 'zz'")
    assert rows == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_network_node_add_node_and_before_run_raise_as_documented(transport):
    from fedsim.kernel import FedsimError

    net = _net(transport)
    net.add_node("a", _idle)
    for call in (net.node, net.node_spec):
        with pytest.raises(UnknownNodeError, match="^unknown node 'zz'$"):
            call("zz")
    assert net.node("a").id == "a" and net.node_spec("a") is net.node("a").spec
    with pytest.raises(NetworkConfigError, match="^node id 'a b' may only use letters, digits and _ . : / -$"):
        net.add_node("a b", _idle)
    with pytest.raises(TypeError, match="^before_run takes a function of no arguments, got 5$"):
        net.before_run(5)
    net.run()
    with pytest.raises(FedsimError, match="^before_run: the network has run already$"):
        net.before_run(lambda: None)
    assert list(net.nodes) == ["a"]


# -- RunContext: table, plot, caveat, network --------------------------------------------------

def _run_context(tmp_path):
    from fedsim.experiment import RunContext
    from fedsim.kernel import NetSpec

    out = tmp_path / "out"
    out.mkdir()
    return RunContext(name="x", config={}, data="tiny", seed=4, net=NetSpec(), out=out, quiet=True)


@pytest.mark.parametrize("name", ["../escape", "sub/t", "", ".hidden", "a\\b", None])
def test_a_table_or_plot_name_that_is_no_plain_file_name_is_refused_and_nothing_is_written(tmp_path, name):
    # "../escape" wrote escape.csv beside the run's folder, "" the hidden out/.csv, "sub/t" was a
    # FileNotFoundError of out/sub/t.csv
    ctx = _run_context(tmp_path)
    for what, call in (("table", lambda: ctx.table(name, [{"a": 1}])),
                       ("plot", lambda: ctx.plot(name, lambda ax: ax.plot([1, 2])))):
        with pytest.raises(ValueError, match=f"^a {what} name is a plain file name .*got {re.escape(repr(name))}$"):
            call()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["out"] and ctx.tables == [] and ctx.plots == []


def test_table_caveat_and_network_raise_as_their_docstrings_now_say(tmp_path):
    ctx = _run_context(tmp_path)
    ctx.table("ok", [{"a": 1}])
    with pytest.raises(ValueError, match="^table 'ok' was already written in this run; give each table its own name$"):
        ctx.table("ok", [{"a": 2}])
    assert (ctx.out / "ok.csv").read_text() == "a\n1\n"
    for word in ("two words", "", " "):
        with pytest.raises(ValueError, match=f"^a caveat is one word, got {re.escape(repr(word.strip()))}$"):
            ctx.caveat(word, "text")
    ctx.caveat("incomplete", "text")
    assert ctx.caveats == ["incomplete"] and ctx.notes == ["text"]
    # int() made seed 1 of 1.5; the network refuses it, as SimNetwork(seed=1.5) does
    with pytest.raises(NetworkConfigError, match="^seed must be a non-negative integer, got 1.5$"):
        ctx.network(seed=1.5)
    assert ctx.network().seed == 4 and ctx.network(seed=np.int64(7)).seed == 7


def test_parse_sets_refuses_one_str_and_raises_usage_errors_naming_the_key():
    from fedsim.experiment import UsageError, load_scenario, parse_sets

    mod = load_scenario("demo")
    # its characters were taken for the strings: "--set expects key=value, got 'r'"
    with pytest.raises(TypeError, match=re.escape("parse_sets takes a list of key=value strings, got the single "
                                                  "str 'rounds=2'; write ['rounds=2']")):
        parse_sets(mod, "rounds=2")
    with pytest.raises(UsageError, match="^--set expects key=value, got 'rounds'$"):
        parse_sets(mod, ["rounds"])
    with pytest.raises(UsageError, match="^unknown parameter 'round' for scenario demo"):
        parse_sets(mod, ["round=2"])
    with pytest.raises(UsageError, match="^--set rounds: given twice; give each key once$"):
        parse_sets(mod, ["rounds=2", "rounds=3"])
    assert parse_sets(mod, ["rounds=2"]) == {"rounds": 2}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("call", ["receive", "sleep", "compute"])
def test_a_wait_in_a_finally_block_after_the_run_ended_raises_run_ended_naming_the_actor(transport, call):
    # Network.wait/sleep/compute's docstrings: RunEnded once the run has ended (end_run)
    from fedsim.kernel import RunEnded

    seen = []

    async def blocked(ctx):
        try:
            await ctx.receive("never")
        finally:
            try:
                if call == "receive":
                    await ctx.receive("x", timeout=1.0)
                elif call == "sleep":
                    await ctx.sleep(1.0)
                else:
                    await ctx.compute(1e9)
            except RunEnded as exc:
                seen.append(str(exc))

    net = _net(transport)
    net.add_node("a", blocked)
    res = net.run(strict=False)
    assert res.unfinished == ["a"]
    assert seen == ["actor 'a' (role 'client') waited after the run had ended (in a finally block?)"]
