"""Bad input at the kernel's public entry points (the networks, ledgers, RunResult, registries of
link models and transports, NetSpec and profiles, Context, the codec) is refused with an error
naming the parameter, key, file or peer; nothing is coerced (``int(1.5)``, ``bool("yes")``) or
dropped silently, and no bare built-in error (an ``AttributeError`` from deep inside, a
``KeyError`` of the key alone) is left to the caller to decode. Each test names what the call did
before. (The experiment and studies floor's entry points: test_api_input_edges_experiment.py.)"""

from __future__ import annotations

import re

import pytest


# -- the networks' flags and TcpNetwork's counts ------------------------------------------------

def _transport(name):
    from fedsim.kernel import AsyncioNetwork, SimNetwork, TcpNetwork

    return {"sim": SimNetwork, "asyncio": AsyncioNetwork, "tcp": TcpNetwork}[name]


@pytest.mark.parametrize("transport", ["sim", "asyncio", "tcp"])
@pytest.mark.parametrize("flag, shown", [("yes", "str 'yes'"), ("no", "str 'no'"), (1, "int 1"), (0, "int 0"),
                                         (None, "NoneType None"), ([], "list []")])
def test_a_network_refuses_a_trace_that_is_not_true_or_false(transport, flag, shown):
    # bool() took "yes" and "no" (tracing either way), 1, None and [] for trace, silently
    from fedsim.kernel import NetworkConfigError

    with pytest.raises(NetworkConfigError, match=f"^trace must be True or False, got {re.escape(shown)}$"):
        _transport(transport)(trace=flag)


@pytest.mark.parametrize("transport", ["sim", "asyncio", "tcp"])
def test_a_network_takes_true_false_and_numpy_bools_for_trace(transport):
    import numpy as np

    cls = _transport(transport)
    assert [cls(trace=t).tracing for t in (True, False, np.bool_(True), np.bool_(False))] == [True, False, True,
                                                                                                False]
    assert type(cls(trace=np.bool_(True)).tracing) is bool


async def _waits(ctx):
    await ctx.receive("never")


@pytest.mark.parametrize("transport", ["sim", "asyncio", "tcp"])
@pytest.mark.parametrize("strict", ["no", 0, None])
def test_run_refuses_a_strict_that_is_not_true_or_false_before_anything_runs(transport, strict):
    # strict="no" was strict (a DeadlockError for the blocked actor), 0 and None were not
    from fedsim.kernel import NetworkConfigError

    net = _transport(transport)(seed=1)
    net.add_node("a", _waits)
    with pytest.raises(NetworkConfigError, match=f"^strict must be True or False, got {re.escape(type(strict).__name__)} "
                                                 f"{re.escape(repr(strict))}$"):
        net.run(strict=strict)
    assert len(net.ledger) == 0 and not net.ran


@pytest.mark.parametrize("kw, message", [
    (dict(allow_remote="no"), "allow_remote must be True or False, got str 'no'"),
    (dict(allow_remote=1), "allow_remote must be True or False, got int 1"),
    (dict(processes=1.5), "processes must be an integer of at least 1 (or None: one per node), got 1.5"),
    (dict(processes=True), "processes must be an integer of at least 1 (or None: one per node), got True"),
    (dict(processes="2"), "processes must be an integer of at least 1 (or None: one per node), got '2'"),
    (dict(processes=0), "processes must be an integer of at least 1 (or None: one per node), got 0"),
    (dict(max_frame_bytes=1000.5), "max_frame_bytes must be a whole number, got 1000.5"),
    (dict(max_frame_bytes="1000"), "max_frame_bytes must be a whole number, got '1000'"),
    (dict(poll_interval="0.1"), "poll_interval must be a positive number of seconds, got '0.1'"),
    (dict(stall_timeout=None), "stall_timeout must be a positive number of seconds, got None"),
    (dict(host=5), "host must be a host name or address (str), got int 5"),
])
def test_tcp_network_refuses_what_int_bool_and_str_coerced_naming_the_parameter(kw, message):
    # int() made 1.5 processes one, "2" two and True one; bool("no") allowed remote peers; a str
    # poll_interval was "'>' not supported between instances of 'str' and 'int'"
    from fedsim.kernel import NetworkConfigError, TcpNetwork

    with pytest.raises(NetworkConfigError, match="^" + re.escape(message) + "$"):
        TcpNetwork(**kw)


def test_tcp_network_still_takes_numpy_integers_and_whole_floats():
    import numpy as np

    from fedsim.kernel import TcpNetwork

    net = TcpNetwork(processes=np.int64(2), max_frame_bytes=1e6, allow_remote=np.bool_(False))
    assert (net.processes, net.max_frame_bytes, net.allow_remote) == (2, 1_000_000, False)
    assert type(net.processes) is int and type(net.max_frame_bytes) is int and type(net.allow_remote) is bool


# -- Ledger / StreamingLedger constructors -------------------------------------------------------

def _ledger_class(name):
    from fedsim.kernel import Ledger, StreamingLedger

    return {"Ledger": Ledger, "StreamingLedger": StreamingLedger}[name]


@pytest.mark.parametrize("cls", ["Ledger", "StreamingLedger"])
@pytest.mark.parametrize("kw, message", [
    (dict(unit=0), "unit must be a positive number of floats (or None), got 0"),
    (dict(unit=-2), "unit must be a positive number of floats (or None), got -2"),
    (dict(unit=1.5), "unit must be a positive number of floats (or None), got 1.5"),
    (dict(unit="3"), "unit must be a positive number of floats (or None), got '3'"),
    (dict(unit=True), "unit must be a positive number of floats (or None), got True"),
    (dict(framing_bytes=1.5), "framing_bytes must be a whole number >= 0, got 1.5"),
    (dict(framing_bytes=-1), "framing_bytes must be a whole number >= 0, got -1"),
    (dict(framing_bytes="x"), "framing_bytes must be a whole number >= 0, got 'x'"),
    (dict(framing_bytes=None), "framing_bytes must be a whole number >= 0, got None"),
])
def test_a_ledger_built_directly_refuses_a_unit_or_framing_a_network_refuses(tmp_path, cls, kw, message):
    # unit=0 was taken (every units column NaN, as if none were declared), 1.5 and "3" too (a
    # fraction of a float per unit; a TypeError at the first query); int() made framing 1.5 one
    from fedsim.kernel import NetworkConfigError, SimNetwork

    path = {"path": tmp_path / "l.bin"} if cls == "StreamingLedger" else {}
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$") as info:
        _ledger_class(cls)(**path, **kw)
    assert type(info.value) is ValueError
    assert list(tmp_path.iterdir()) == []  # (no file made)
    if "unit" in kw or kw["framing_bytes"] is not None:  # what a network says of the same value
        net_message = message.replace(" (or None)", "")
        with pytest.raises(NetworkConfigError, match="^" + re.escape(net_message) + "$"):
            SimNetwork(**kw)


@pytest.mark.parametrize("cls", ["Ledger", "StreamingLedger"])
def test_a_ledger_takes_numpy_integers_and_whole_floats_as_ints(cls):
    import numpy as np

    led = _ledger_class(cls)(unit=np.int64(4), framing_bytes=2.0)
    assert (led.unit, led.framing_bytes) == (4, 2) and type(led.unit) is int and type(led.framing_bytes) is int
    assert led.units_of(8) == 2.0


@pytest.mark.parametrize("path, exc_type, message", [
    (5, TypeError, "path must be a file path (str or os.PathLike) or None, got int 5"),
    (b"l.bin", TypeError, "path must be a file path (str or os.PathLike) or None, got bytes b'l.bin'"),
    ("", ValueError, "path is empty; give a file path, or None for a temporary file"),
])
def test_a_streaming_ledger_names_a_path_that_is_none(tmp_path, monkeypatch, path, exc_type, message):
    # 5 was os.fspath's "expected str, bytes or os.PathLike object, not int"; "" was
    # "[Errno 2] No such file or directory: ''"; b"l.bin" made a file whose path read "b'l.bin'"
    from fedsim.kernel import StreamingLedger

    monkeypatch.chdir(tmp_path)
    with pytest.raises(exc_type, match="^" + re.escape(message) + "$"):
        StreamingLedger(path)
    assert list(tmp_path.iterdir()) == []


# -- RunResult[node] ------------------------------------------------------------------------------

async def _returns_id(ctx):
    return ctx.node_id.upper()


def _result(transport, clients=2):
    net = _transport(transport)(seed=1)
    for i in range(clients):
        net.add_node(f"c{i:02d}", _returns_id)
    net.add_node("b", _waits)
    net.add_node("d", _waits, offline_at=0.0)
    return net.run(strict=False)


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
def test_run_result_names_a_node_without_a_result_and_why(transport):
    # a bare KeyError: 'zz' (the node alone: no word of which nodes have results, or that 'b'
    # ran and did not finish)
    res = _result(transport)
    assert res["c00"] == "C00" and res["c01"] == "C01"
    with pytest.raises(KeyError, match="^\"no node 'zz' in this run; the nodes with results: 'c00', 'c01'\"$"):
        res["zz"]
    with pytest.raises(KeyError, match="^\"node 'b' did not finish \\(it waited for receive 'never'\\): it has no "
                                       "result\"$"):
        res["b"]
    with pytest.raises(KeyError, match="^\"node 'd' dropped out: it has no result\"$"):
        res["d"]
    with pytest.raises(KeyError, match=re.escape("\"a RunResult is indexed by node id (str), got list ['b']\"")):
        res[["b"]]


def test_run_result_lists_the_first_twenty_nodes_with_results_and_how_many():
    res = _result("sim", clients=25)
    shown = ", ".join(f"'c{i:02d}'" for i in range(20))
    with pytest.raises(KeyError, match="^" + re.escape(f"\"no node 'zz' in this run; the nodes with results: {shown}, "
                                                       "... (25 in all)\"") + "$"):
        res["zz"]


# -- Ledger.to_csv: the destination is what an error names ------------------------------------------

def _run_ledger(streaming):
    from fedsim.kernel import SimNetwork, StreamingLedger

    async def sends(ctx):
        await ctx.send("b", "k", 1)

    async def idle(ctx):
        return None

    net = SimNetwork(ledger=StreamingLedger() if streaming else None)
    net.add_node("a", sends)
    net.add_node("b", idle)
    net.run(strict=False)
    return net.ledger


@pytest.mark.parametrize("streaming", [False, True])
def test_to_csv_into_a_missing_folder_or_onto_a_folder_names_the_destination(tmp_path, streaming):
    # "[Errno 2] No such file or directory: '.../nope/.ledger.csv.4242.1a2b3c4d.tmp'": a file the
    # caller never named; onto a folder the rename named the temporary file first
    led = _run_ledger(streaming)
    dest = tmp_path / "nope" / "ledger.csv"
    with pytest.raises(FileNotFoundError) as info:
        led.to_csv(dest)
    assert str(info.value) == f"[Errno 2] No such file or directory: {str(dest)!r}" and info.value.filename == str(dest)
    (tmp_path / "dir").mkdir()
    with pytest.raises(IsADirectoryError) as info:
        led.to_csv(tmp_path / "dir")
    assert str(info.value) == f"[Errno 21] Is a directory: {str(tmp_path / 'dir')!r}"
    assert info.value.filename2 is None
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["dir"]  # (no temporary file left)
    led.to_csv(tmp_path / "ok.csv")
    assert (tmp_path / "ok.csv").read_text().count("\n") == 2


@pytest.mark.parametrize("streaming", [False, True])
def test_to_csv_refuses_an_empty_destination(tmp_path, monkeypatch, streaming):
    # "" wrote a hidden temporary file into the working folder and failed renaming it to ''
    monkeypatch.chdir(tmp_path)
    led = _run_ledger(streaming)
    with pytest.raises(ValueError, match="^to_csv: dest is empty; give a file path, an open text file, or None "
                                         "for the text$"):
        led.to_csv("")
    assert list(tmp_path.iterdir()) == []


# -- register_transport: link_models is True, False or None ----------------------------------------

def test_register_transport_refuses_a_link_models_that_is_not_true_false_or_none():
    # bool("no") registered a transport that takes a link model
    from fedsim.kernel import SimNetwork, register_transport
    from fedsim.kernel.registry import TRANSPORT_REGISTRY

    with pytest.raises(TypeError, match="^transport 'edges-x': link_models must be True, False or None, got str 'no'$"):
        register_transport("edges-x", SimNetwork, "x", link_models="no")
    assert "edges-x" not in TRANSPORT_REGISTRY


# -- a closed StreamingLedger: closed is closed -------------------------------------------------------

@pytest.mark.parametrize("rows", [0, 2])
def test_flush_on_a_closed_streaming_ledger_names_its_file_even_with_every_row_written(tmp_path, rows):
    # with every row final and written, flush() on a closed ledger did nothing and said nothing
    # (with rows still in motion it raised): now it always raises, as the queries do
    from fedsim.kernel import NetworkConfigError, SimNetwork, StreamingLedger

    async def sends(ctx):
        for _ in range(rows):
            await ctx.send("b", "k", 1)

    async def reads(ctx):
        for _ in range(rows):
            await ctx.receive("k")

    led = StreamingLedger(tmp_path / "l.bin", chunk_rows=1)
    net = SimNetwork(ledger=led)
    net.add_node("a", sends)
    net.add_node("b", reads)
    net.run()
    led.flush()
    assert led.totals()["messages"] == rows
    led.close()
    message = f"^the StreamingLedger is closed \\(its file was {re.escape(str(tmp_path / 'l.bin'))}\\)$"
    with pytest.raises(ValueError, match=message):
        led.flush()
    assert led.closed
    with pytest.raises(ValueError, match=message):
        led.totals()
    # nor does a network record into it (it recorded until a query or flush failed)
    with pytest.raises(NetworkConfigError, match="^the ledger given to a network is a closed StreamingLedger "
                                                 f"\\(its file was {re.escape(str(tmp_path / 'l.bin'))}\\)$"):
        SimNetwork(ledger=led)
    led.close()  # (a second close does nothing)


# -- time_scale, run timeouts, link and fault numbers, NetSpec: numbers only ---------------------------

@pytest.mark.parametrize("transport", ["asyncio", "tcp"])
@pytest.mark.parametrize("scale", ["2", True, b"1"])
def test_time_scale_is_a_number_not_a_str_or_bool(transport, scale):
    # float() took "2" (a scale of 2.0) and True (1.0), silently
    from fedsim.kernel import NetworkConfigError

    with pytest.raises(NetworkConfigError, match="^" + re.escape("time_scale must be a positive finite number of real "
                                                                 f"seconds per protocol second, got {scale!r}") + "$"):
        _transport(transport)(time_scale=scale)


@pytest.mark.parametrize("transport", ["asyncio", "tcp"])
def test_a_run_timeout_of_true_is_refused_before_anything_runs(transport):
    # True was a timeout of one second
    from fedsim.kernel import NetworkConfigError

    net = _transport(transport)()
    net.add_node("a", _waits)
    with pytest.raises(NetworkConfigError, match="^timeout must be positive seconds or None, got True$"):
        net.run(timeout=True, strict=False)
    assert not net.ran


def test_time_scale_and_timeout_take_numpy_numbers():
    import numpy as np

    from fedsim.kernel import AsyncioNetwork

    net = AsyncioNetwork(time_scale=np.float32(0.5))
    net.add_node("a", _returns_id)
    assert net.time_scale == 0.5 and net.run(timeout=np.float64(5.0))["a"] == "A"


@pytest.mark.parametrize("make, message", [
    (lambda k: k.LinkSpec("5e6", 1e6, 0.01), "uplink must be a positive number of bytes/s (or inf), got '5e6'"),
    (lambda k: k.LinkSpec(1e6, 1e6, "0.01"), "latency must be a finite non-negative number, got '0.01'"),
    (lambda k: k.Faults(loss="0.1"), "faults: loss must be a probability in [0, 1], got '0.1'"),
    (lambda k: k.Faults(dropout=0.5, window=("1", "2")),
     "faults: window must be (start, end) with 0 <= start <= end < inf seconds, got ('1', '2')"),
    (lambda k: k.Faults(dropout=0.5, window=(True, 2)),
     "faults: window must be (start, end) with 0 <= start <= end < inf seconds, got (True, 2)"),
    (lambda k: k.Faults(loss=0.1, roles=(1,)),
     "faults: roles must name at least one role (a tuple of names, or one name), got (1,)"),
    (lambda k: k.Faults(loss=0.1, roles=["client", None]),
     "faults: roles must name at least one role (a tuple of names, or one name), got ['client', None]"),
    (lambda k: k.SimNetwork().add_node("a", _returns_id, offline_at="1"),
     "node 'a': offline_at must be a finite non-negative number, got '1'"),
    (lambda k: k.NetSpec(loss="0.1"), "faults: loss must be a probability in [0, 1], got '0.1'"),
    (lambda k: k.NetSpec(framing_bytes=1.5), "framing_bytes must be a whole number >= 0, got 1.5"),
    (lambda k: k.NetSpec(framing_bytes="8"), "framing_bytes must be a whole number >= 0, got '8'"),
])
def test_link_fault_and_netspec_numbers_given_as_str_are_refused_naming_the_parameter(make, message):
    # float() took "5e6" and "0.1"; str() made roles '1' and 'None'; True was 1.0 s; a NetSpec
    # kept loss '0.1' as a str (describe() then failed: "Unknown format code 'g' for object of
    # type 'str'") and framing_bytes 1.5 until a network was built from it
    import fedsim.kernel as k

    with pytest.raises(k.NetworkConfigError, match="^" + re.escape(message) + "$"):
        make(k)


def test_netspec_keeps_its_numbers_as_plain_floats_and_ints():
    import numpy as np

    from fedsim.kernel import NetSpec

    spec = NetSpec(loss=np.float64(0.25), dropout=1, window=[1, 2], framing_bytes=8.0)
    assert spec.to_dict() == {"profile": "ideal", "link_model": "fifo", "loss": 0.25, "dropout": 1.0,
                              "window": [1.0, 2.0], "transport": "sim", "framing_bytes": 8, "options": {}}
    assert [type(v) for v in (spec.loss, spec.dropout, spec.framing_bytes)] == [float, float, int]
    assert spec.describe() == NetSpec(loss=0.25, dropout=1.0, window=(1.0, 2.0), framing_bytes=8).describe()



@pytest.mark.parametrize("dropout, window, said", [
    (0.004, (0.0, 1e6), "wan, loss 0.1, 0.4% dropout in [0, 1000000] s"),  # was "0% dropout in [0, 1e+06] s"
    (0.9995, (0.0, 0.05), "wan, loss 0.1, 99.95% dropout in [0, 0.05] s"),  # was "100% dropout"
    (0.29, (1.5, 30.0), "wan, loss 0.1, 29% dropout in [1.5, 30] s"),
    (1.0, (0.05, 0.05), "wan, loss 0.1, 100% dropout in [0.05, 0.05] s"),
])
def test_netspec_describes_a_dropout_rate_without_rounding_it_away_and_its_window_without_an_exponent(
        dropout, window, said, tmp_path):
    from fedsim.kernel import NetSpec

    assert NetSpec(profile="wan", loss=0.1, dropout=dropout, window=window).describe() == said
    if dropout == 0.004:  # where a run says it: report.md's closing note and run.log
        from fedsim.experiment import run_scenario

        run_scenario("fedrec", data="tiny", out=tmp_path / "o", quiet=True, overrides={"T": 1, "deadline": 5.0},
                     net=NetSpec(profile="wan", dropout=dropout, window=window))
        assert "network: wan, 0.4% dropout in [0, 1000000] s. Parameters" in (tmp_path / "o" / "report.md").read_text()
        assert "network wan, 0.4% dropout in [0, 1000000] s, config" in (tmp_path / "o" / "run.log").read_text()

# -- Ledger.by_role: per_round is True or False ----------------------------------------------------

@pytest.mark.parametrize("streaming", [False, True])
def test_by_role_refuses_a_per_round_that_is_not_true_or_false(streaming):
    # per_round="no" gave the rows per round (bool("no") is True)
    led = _run_ledger(streaming)
    with pytest.raises(ValueError, match="^by_role: per_round must be True or False, got 'no'$"):
        led.by_role(per_round="no")
    assert [r["round"] for r in led.by_role(per_round=False)] == [-1, -1]


# -- Context's flags: draft's zero, send's anonymous -------------------------------------------------

@pytest.mark.parametrize("zero", ["no", "", 1, 0, None, [], 0.0])
def test_draft_refuses_a_zero_that_is_not_true_or_false(zero):
    # truthiness decided: zero="no" was zeroed, zero="" (or 0, None, []) left the array's elements
    # as whatever the memory held, silently
    import numpy as np

    from fedsim.kernel import ActorError, SimNetwork
    from fedsim.kernel.codec import draft_message

    message = f"draft: zero must be True or False, got {type(zero).__name__} {zero!r}"
    with pytest.raises(TypeError, match="^" + re.escape(message) + "$"):
        draft_message("m", {"x": np.ones(3)}, zero=zero)

    async def drafts(ctx):
        ctx.draft("m", {"x": np.ones(3)}, zero=zero)

    net = SimNetwork()
    net.add_node("a", drafts)
    with pytest.raises(ActorError, match=re.escape(message) + "$") as info:
        net.run()
    assert type(info.value.__cause__) is TypeError and len(net.ledger) == 0


def test_draft_takes_numpy_bools_for_zero():
    import numpy as np

    from fedsim.kernel.codec import draft_message

    zeroed = draft_message("m", {"x": np.ones(1000)}, zero=np.True_)
    assert zeroed.payload["x"].tolist() == [0.0] * 1000
    raw = draft_message("m", {"x": np.ones(4)}, zero=np.False_)
    raw.payload["x"][:] = [1, 2, 3, 4]
    assert raw.payload["x"].tolist() == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
@pytest.mark.parametrize("flag", [0, "", None, "no", 1.0])
def test_send_refuses_an_anonymous_that_is_not_true_or_false_falsy_ones_too(transport, flag):
    # (refused since 7cedec6; the message now says the type, as a network's flags do: 0 and 0.0
    # and False read alike without it)
    from fedsim.kernel import ActorError

    async def sends(ctx):
        await ctx.send("b", "m", 1, anonymous=flag)

    net = _transport(transport)()
    net.add_node("a", sends)
    net.add_node("b", _waits)
    message = f"send: anonymous must be True or False, got {type(flag).__name__} {flag!r}"
    with pytest.raises(ActorError, match=re.escape(message) + "$") as info:
        net.run(strict=False)
    assert type(info.value.__cause__) is TypeError and len(net.ledger) == 0


# -- NetSpec options: names the transport takes, values it takes -------------------------------------

_TCP_OPTIONS = ("allow_remote, host, ledger, max_frame_bytes, max_message_bytes, placement, poll_interval, processes, "
                "stall_timeout, start_timeout, time_scale, trace, unit")


@pytest.mark.parametrize("transport, options, message", [
    ("tcp", {"procesess": 2},
     f"options: transport 'tcp' takes no option 'procesess' (its options: {_TCP_OPTIONS}); did you mean 'processes'?"),
    ("sim", {"time_scale": 2},
     "options: transport 'sim' takes no option 'time_scale' (its options: ledger, max_message_bytes, queue, trace, "
     "unit)"),
    ("asyncio", {"untis": 4},
     "options: transport 'asyncio' takes no option 'untis' (its options: ledger, max_message_bytes, time_scale, trace, "
     "unit); did you mean 'unit'?"),
])
def test_netspec_refuses_an_option_its_transport_does_not_take(transport, options, message):
    # kept until build: "Network.__init__() got an unexpected keyword argument 'procesess'" (a
    # TypeError, naming neither the option nor the transport), in every run of a sweep
    from fedsim.kernel import NetSpec, NetworkConfigError

    with pytest.raises(NetworkConfigError, match="^" + re.escape(message) + "$"):
        NetSpec(transport=transport, options=options)


@pytest.mark.parametrize("transport", ["sim", "asyncio", "tcp"])
@pytest.mark.parametrize("key, message", [
    ("seed", "options: seed is build(seed)'s argument, not an option"),
    ("profile", "options: profile is the NetSpec's own field (NetSpec(profile=...)), not an option"),
    ("faults", "options: faults are the NetSpec's own loss, dropout and window, not an option"),
    ("link_model", "options: link_model is the NetSpec's own field (NetSpec(link_model=...)), not an option"),
    ("framing_bytes", "options: framing_bytes is the NetSpec's own field (NetSpec(framing_bytes=...)), not an option"),
])
def test_netspec_refuses_an_option_that_is_one_of_its_own_fields(transport, key, message):
    # seed and profile were "dict() got multiple values for keyword argument" at build; on sim
    # link_model="fair" and framing_bytes=8 were overwritten by the spec's fields: a fifo network
    # without framing was built, silently
    from fedsim.kernel import NetSpec, NetworkConfigError

    value = {"seed": 3, "profile": "wan", "faults": None, "link_model": "fair", "framing_bytes": 8}[key]
    with pytest.raises(NetworkConfigError, match="^" + re.escape(message) + "$"):
        NetSpec(transport=transport, options={key: value})


@pytest.mark.parametrize("transport, options, message", [
    ("tcp", {"processes": "2"}, "processes must be an integer of at least 1 (or None: one per node), got '2'"),
    ("tcp", {"stall_timeout": -1}, "stall_timeout must be a positive number of seconds, got -1"),
    ("tcp", {"poll_interval": float("nan")}, "poll_interval must be a positive number of seconds, got nan"),
    ("tcp", {"allow_remote": "no"}, "allow_remote must be True or False, got str 'no'"),
    ("asyncio", {"time_scale": -1},
     "time_scale must be a positive finite number of real seconds per protocol second, got -1"),
    ("sim", {"unit": 0}, "unit must be a positive number of floats, got 0"),
    ("sim", {"max_message_bytes": "1000"}, "max_message_bytes must be a positive whole number, got '1000'"),
    ("sim", {"trace": "yes"}, "trace must be True or False, got str 'yes'"),
])
def test_netspec_refuses_an_option_value_its_transport_refuses_when_made(transport, options, message):
    # kept until build: every run of a sweep failed then, each with the constructor's message alone
    from fedsim.kernel import NetSpec, NetworkConfigError

    with pytest.raises(NetworkConfigError, match="^" + re.escape(f"options for transport {transport!r}: {message}") + "$"):
        NetSpec(transport=transport, options=options)


def test_netspec_options_a_transport_takes_reach_the_network_built():
    from fedsim.kernel import NetSpec

    tcp = NetSpec(transport="tcp", options={"processes": 2, "stall_timeout": 5, "unit": 4}).build(1)
    assert (tcp.processes, tcp.stall_timeout, tcp.ledger.unit) == (2, 5.0, 4)
    aio = NetSpec(transport="asyncio", options=[("time_scale", 0.5), ("trace", True)]).build(1)
    assert (aio.time_scale, aio.tracing) == (0.5, True)
    sim = NetSpec(link_model="fair", framing_bytes=8, options={"max_message_bytes": 1000}).build(1)
    assert (type(sim.link_model).__name__, sim.framing_bytes, sim.max_message_bytes) == ("FairShareLinkModel", 8, 1000)


@pytest.mark.parametrize("kw, message", [
    (dict(trace=True), "build: trace is given both here and as one of the NetSpec's options (trace=False)"),
    (dict(profile="wan"), "build: profile is the NetSpec's own field; spec.replace(profile=...) describes another"),
])
def test_build_refuses_a_keyword_the_spec_already_gives(kw, message):
    # "dict() got multiple values for keyword argument 'trace'" (a TypeError naming neither)
    from fedsim.kernel import NetSpec, NetworkConfigError

    spec = NetSpec(options={"trace": False})
    with pytest.raises(NetworkConfigError, match="^" + re.escape(message) + "$"):
        spec.build(1, **kw)
    assert NetSpec().build(1, trace=True).tracing is True


def test_a_plugin_transports_option_names_are_checked_without_calling_its_factory():
    # a plug-in subclass's misspelt option failed at build ("Network.__init__() got an unexpected
    # keyword argument 'untis'"); its factory is still called only by build
    from fedsim.kernel import NetSpec, NetworkConfigError, SimNetwork, register_transport
    from fedsim.kernel.registry import TRANSPORT_REGISTRY

    made = []

    class Counted(SimNetwork):
        def __init__(self, *, label: str = "", **kwargs):
            made.append(label)
            super().__init__(**kwargs)

    def any_keywords(**kwargs):
        made.append(kwargs.get("label"))
        return SimNetwork(**{k: v for k, v in kwargs.items() if k != "label"})

    snapshot = TRANSPORT_REGISTRY.snapshot()
    register_transport("edges-counted", Counted, "sim, counted")
    register_transport("edges-any", any_keywords, "sim through a function taking any keyword")
    try:
        with pytest.raises(NetworkConfigError, match="^" + re.escape(
                "options: transport 'edges-counted' takes no option 'untis' (its options: label, ledger, "
                "max_message_bytes, queue, trace, unit); did you mean 'unit'?") + "$"):
            NetSpec(transport="edges-counted", options={"untis": 4})
        spec = NetSpec(transport="edges-counted", options={"label": "x", "unit": 4})
        anyway = NetSpec(transport="edges-any", options={"label": "y", "untis": 4})  # (any name: checked at build)
        assert made == []
        assert spec.build(1).ledger.unit == 4 and made == ["x"]
        with pytest.raises(TypeError, match="untis"):
            anyway.build(1)
        assert made == ["x", "y"]
    finally:
        TRANSPORT_REGISTRY.restore(snapshot)


# -- Profile: its name and description --------------------------------------------------------------

@pytest.mark.parametrize("kw, message", [
    (dict(name=5), "a profile's name is a non-empty str, got int 5"),
    (dict(name=""), "a profile's name is a non-empty str, got str ''"),
    (dict(name=None), "a profile's name is a non-empty str, got NoneType None"),
    (dict(description=5), "profile 'mine': description must be a str, got int 5"),
    (dict(description=None), "profile 'mine': description must be a str, got NoneType None"),
])
def test_a_profile_refuses_a_name_or_description_that_is_no_str(kw, message):
    # Profile(name=5) and Profile(name="") were made (their errors said "profile 5", "profile ''");
    # description=None and 5 were kept as given
    from fedsim.kernel import NetworkConfigError, NodeSpec, Profile

    args = {"name": "mine", "server": NodeSpec(), "client": NodeSpec(), **kw}
    with pytest.raises(NetworkConfigError, match="^" + re.escape(message) + "$"):
        Profile(**args)
    assert Profile("mine", NodeSpec(), NodeSpec(), description="mine, ideal").name == "mine"


# -- network_record: where the ledger goes, and under what name -------------------------------------

@pytest.mark.parametrize("kw, exc_type, message", [
    (dict(ledger_dir=""), ValueError, "network_record: ledger_dir is empty; give a folder, or None to write no ledger"),
    (dict(ledger_dir=5), TypeError, "network_record: ledger_dir must be a folder path (str or os.PathLike) or None, "
                                    "got int 5"),
    (dict(ledger_dir=b"out"), TypeError, "network_record: ledger_dir must be a folder path (str or os.PathLike) or "
                                         "None, got bytes b'out'"),
    (dict(label=5), TypeError, "network_record: label must be a str, got int 5"),
    (dict(label=None), TypeError, "network_record: label must be a str, got NoneType None"),
])
def test_network_record_refuses_a_ledger_dir_or_label_of_the_wrong_kind(tmp_path, monkeypatch, kw, exc_type, message):
    # ledger_dir="" wrote the ledger into the working folder (Path("") is "."); 5 was
    # "expected str, bytes or os.PathLike object, not int"; label=5 was re.sub's "expected string
    # or bytes-like object" once a folder was given, and taken without one
    from fedsim.kernel import network_record

    monkeypatch.chdir(tmp_path)
    net = run_ledger_net()
    with pytest.raises(exc_type, match="^" + re.escape(message) + "$"):
        network_record(net, **kw)
    assert list(tmp_path.iterdir()) == []
    rec = network_record(net, tmp_path / "led", "r")
    assert rec["ledger"] == str(tmp_path / "led" / "r.csv") and rec["totals"]["messages"] == 1


def run_ledger_net():
    """A finished two-node SimNetwork whose ledger holds one message a -> b (also used by
    test_api_input_edges_experiment)."""
    from fedsim.kernel import SimNetwork

    async def sends(ctx):
        await ctx.send("b", "k", 1)

    async def idle(ctx):
        return None

    net = SimNetwork()
    net.add_node("a", sends)
    net.add_node("b", idle)
    net.run(strict=False)
    return net


# -- decode / decode_message: the limits ----------------------------------------------------------

@pytest.mark.parametrize("call", ["decode", "decode_message"])
@pytest.mark.parametrize("kw, shown", [
    (dict(max_bytes="1000"), "max_bytes must be an integer, got str '1000'"),
    (dict(max_bytes=None), "max_bytes must be an integer, got NoneType None"),
    (dict(max_bytes=True), "max_bytes must be an integer, got bool True"),
    (dict(max_bytes=1000.0), "max_bytes must be an integer, got float 1000.0"),
    (dict(max_depth="32"), "max_depth must be an integer, got str '32'"),
    (dict(max_depth=None), "max_depth must be an integer, got NoneType None"),
    (dict(max_depth=True), "max_depth must be an integer, got bool True"),
])
def test_decode_refuses_limits_that_are_no_integer(call, kw, shown):
    # "'>' not supported between instances of 'int' and 'str'" (naming no parameter); decode took
    # max_depth="32" or None for a document without containers; True was a limit of one
    import fedsim.kernel as k

    data = k.encode_message("m", 5).data if call == "decode_message" else k.encode(5).data
    with pytest.raises(TypeError, match="^" + re.escape(f"{call}: {shown}") + "$"):
        getattr(k, call)(bytes(data), **kw)
    with pytest.raises(TypeError, match="^" + re.escape(f"{call}: {shown}") + "$"):
        getattr(k, call)(bytearray(data), **kw)


def test_decode_takes_numpy_integers_as_limits():
    import numpy as np

    import fedsim.kernel as k

    assert k.decode(k.encode({"a": [1]}).data, max_bytes=np.int64(100), max_depth=np.int32(3)) == {"a": [1]}
    assert k.decode_message(k.encode_message("m", {"a": 1}).data, max_bytes=np.int64(100),
                            max_depth=np.int64(3)) == ("m", {"a": 1})



@pytest.mark.parametrize("call", ["decode", "decode_message"])
@pytest.mark.parametrize("kw, shown", [
    (dict(max_bytes=0), "max_bytes must be at least 1 (bytes), got 0"),
    (dict(max_bytes=-1), "max_bytes must be at least 1 (bytes), got -1"),
    (dict(max_depth=-1), "max_depth must be at least {depth}, got -1"),
])
def test_decode_refuses_limits_below_their_least_naming_the_parameter(call, kw, shown):
    # "CodecError: message of 1 bytes exceeds the limit of -1" (a bad document, not a bad
    # argument); decode took max_depth=-1 as 0 for a document without containers
    import numpy as np

    import fedsim.kernel as k

    data = k.encode_message("m", 5).data if call == "decode_message" else k.encode(5).data
    shown = shown.format(depth="1 (a message is a [kind, payload] array)" if call == "decode_message"
                         else "0 (0: a document without containers)")
    for given in (bytes(data), bytearray(data), memoryview(data), b""):  # (b"": refused as the limit, not as empty)
        for limits in (kw, {name: np.int64(v) for name, v in kw.items()}):
            with pytest.raises(ValueError, match="^" + re.escape(f"{call}: {shown}") + "$") as info:
                getattr(k, call)(given, **limits)
            assert type(info.value) is ValueError  # (not the CodecError of a bad document)


def test_decode_message_refuses_a_max_depth_of_zero_which_no_message_can_meet():
    # "document nesting deeper than 0": a message is a [kind, payload] array, one deep
    import fedsim.kernel as k

    with pytest.raises(ValueError, match=re.escape("decode_message: max_depth must be at least 1 (a message is a "
                                                   "[kind, payload] array), got 0") + "$"):
        k.decode_message(k.encode_message("m", 5).data, max_depth=0)
    with pytest.raises(ValueError) as info:
        k.decode_message(k.encode_message("m", 5).data, max_depth=0)
    assert type(info.value) is ValueError


@pytest.mark.parametrize("call", ["decode", "decode_message"])
def test_a_max_depth_below_its_least_is_refused_before_a_message_too_long(call):
    # the message's size was checked first: "message of 4 bytes exceeds the limit of 2"
    import fedsim.kernel as k

    data = k.encode_message("m", 5).data if call == "decode_message" else k.encode([1, 2, 3]).data
    least = "1 (a message is a [kind, payload] array)" if call == "decode_message" else "0 (0: a document without " \
                                                                                        "containers)"
    for given in (bytes(data), bytearray(data)):
        with pytest.raises(ValueError, match="^" + re.escape(f"{call}: max_depth must be at least {least}, got -1")
                           + "$"):
            getattr(k, call)(given, max_bytes=2, max_depth=-1)
        # (with its unit: it read "exceeds the limit of 2", a bare number)
        with pytest.raises(k.CodecError, match=f"^message of {len(data)} bytes exceeds the limit of 2 bytes$"):
            getattr(k, call)(given, max_bytes=2)


def test_decode_takes_the_least_limits():
    # max_bytes=1 for a one-byte document; decode's max_depth=0 is a document without containers
    import fedsim.kernel as k

    assert k.decode(k.encode(5).data, max_bytes=1, max_depth=0) == 5
    with pytest.raises(k.CodecError, match="^document nesting deeper than 0$"):
        k.decode(k.encode([5]).data, max_depth=0)
    assert k.decode_message(k.encode_message("m", 5).data, max_depth=1) == ("m", 5)
    assert k.decode_message(k.encode_message("m", {"a": 1}).data, max_depth=2) == ("m", {"a": 1})
    with pytest.raises(k.CodecError, match="^document nesting deeper than 1$"):
        k.decode_message(k.encode_message("m", {"a": 1}).data, max_depth=1)

# -- Context's numbers: seconds and flops are numbers, not bools or numeric str ------------------------

_NUMBER_CALLS = {
    "sleep": (lambda ctx, v: ctx.sleep(v), "sleep needs a finite non-negative duration, got {v!r}"),
    "compute": (lambda ctx, v: ctx.compute(v), "compute needs a finite non-negative flop count, got {v!r}"),
    "deadline": (lambda ctx, v: _ready(ctx.deadline(v)),
                 "deadline needs a finite non-negative number of seconds, got {v!r}"),
    "receive": (lambda ctx, v: ctx.receive("x", timeout=v),
                "receive: timeout must be a finite non-negative number of seconds (or None), got {v!r}"),
    "gather": (lambda ctx, v: ctx.gather("x", count=1, timeout=v),
               "gather: timeout must be a finite non-negative number of seconds (or None), got {v!r}"),
}


async def _ready(value):
    return value


@pytest.mark.parametrize("call", list(_NUMBER_CALLS))
@pytest.mark.parametrize("value", [True, False, "2", "1e9", b"1"])
def test_context_refuses_bools_and_str_where_a_number_of_seconds_or_flops_belongs(call, value):
    # float() took True for 1 (a sleep of one second, a compute of one flop, a timeout of 1 s),
    # False for 0, and "2" for two seconds, silently
    from fedsim.kernel import ActorError, SimNetwork

    make, message = _NUMBER_CALLS[call]

    async def actor(ctx):
        await make(ctx, value)

    net = SimNetwork()
    net.add_node("a", actor)
    with pytest.raises(ActorError, match=re.escape(message.format(v=value)) + "$") as info:
        net.run()
    assert type(info.value.__cause__) is ValueError and net.now() == 0.0


def test_context_takes_numpy_numbers_as_seconds_and_flops():
    import numpy as np

    from fedsim.kernel import NodeSpec, SimNetwork

    async def actor(ctx):
        await ctx.sleep(np.float32(0.5))
        await ctx.compute(np.int64(4))
        await ctx.receive("x", timeout=np.int64(1))
        return ctx.deadline(np.float64(2.0)) is not None

    net = SimNetwork()
    net.add_node("a", actor, flops=NodeSpec(flops=2.0).flops)
    res = net.run()
    assert res["a"] is True and net.now() == 0.5 + 2.0 + 1.0 and res.flops == {"a": {"compute": 4.0}}
