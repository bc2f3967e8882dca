"""StreamingLedger against the in-memory Ledger: the same runs recorded both ways give the same
CSV, byte for byte, and the same answer to every query; rows are written out as they become final
and memory holds only the rows still in motion."""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import pytest

from fedsim.kernel import AsyncioNetwork, Faults, NetworkConfigError, SimNetwork, StreamingLedger, TcpNetwork
from fedsim.kernel import ledger as L
from fedsim.kernel.ledger import COLUMNS, Ledger
from fedsim.protocols import REGISTRY

SEED = 5


def _same(a, b) -> bool:
    """Equal values, NaN equal to NaN (times of rows that never got there)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and all(_same(x, y) for x, y in zip(a.tolist(), b.tolist()))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b)
    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and _same(dataclasses.asdict(a), dataclasses.asdict(b))
    return type(a) is type(b) and a == b


def _queries(led):
    """Every query the cost tables use, and then some."""
    v = led.view()
    out = {
        "len": len(led), "totals": led.totals(), "span": v.span(),
        "span_rounds": {r: led.select(round=r).span() for r in led.rounds()}, "by_role": led.by_role(), "by_role_all": led.by_role(per_round=False),
        "by_role_kinds": led.by_role(kinds=["model", "gradients", "upload", "update"], exclude_kinds=["stop"]),
        "by_kind": led.by_kind(), "by_node": led.by_node(), "by_node_ex": led.by_node(exclude_kinds=["stop"]),
        "rounds": led.rounds(), "records": list(led.records()), "summary": led.summary(),
        "columns": led.columns(), "missing": led.missing,
        "csv": led.to_csv(),
    }
    for cols in (("kind",), ("round", "src_role"), ("kind", "status"), ("src", "dst"), ("read",), ("anonymous", "kind"),
                 ("seq",), ("note",), ("dst_role", "round", "read"), ("arrival_time",), ("kind", "tx_end"),
                 ("send_time", "status", "rx_start")):
        out[f"group{cols}"] = v.group(*cols)
    filters = [dict(kind="model"), dict(kind=("model", "gradients"), round=[0, 1]), dict(fate="delivered"),
               dict(fate=("lost", "in_flight")), dict(read=False), dict(read=True, fate="delivered"),
               dict(anonymous=True), dict(min_round=1), dict(exclude_kinds=["stop", "eval"]), dict(src="server"),
               dict(dst_role="client", round=1), dict(src_role=["client", "denoiser"]), dict(round=[2.0]),
               dict(kind="no such kind"), dict(src=("server", "nobody"))]
    for f in filters:
        sel = led.select(**f)
        out[f"select{sorted(f.items())}"] = (len(sel), sel.totals(), sel.rounds(), list(sel.records()),
                                             sel.column("bytes"), sel.column("units"), sel.column("status"),
                                             sel.column("seq"), sel.column("arrival_time"), sel.group("kind"),
                                             sel.span())
        out[f"select2{sorted(f.items())}"] = sel.select(fate="delivered").totals()
    return out


def _run(name, net, clients=4, rounds=3, deadline=2.0):
    spec = REGISTRY[name]
    data, cfg = spec.tiny(clients, rounds, SEED)
    if any(f.name == "deadline" for f in dataclasses.fields(cfg)):
        cfg = dataclasses.replace(cfg, deadline=deadline)
    spec.build(net, data, cfg)  # the job is not collected: only the ledgers are compared
    if isinstance(net, SimNetwork):
        return net.run(strict=False)
    return net.run(timeout=120, strict=False)


@pytest.mark.parametrize("name", list(REGISTRY))
@pytest.mark.parametrize("faults", [None, Faults(loss=0.15, dropout=0.2, window=(0.0, 3.0))])
def test_streaming_ledger_equals_the_in_memory_one(name, faults, tmp_path):
    mem = SimNetwork(seed=SEED, profile="wan", faults=faults)
    _run(name, mem)
    # a tiny chunk: many writes out of order (final rows are written while earlier ones are in motion)
    led = StreamingLedger(tmp_path / "ledger.bin", chunk_rows=3)
    stream = SimNetwork(seed=SEED, profile="wan", faults=faults, ledger=led)
    assert stream.ledger is led
    _run(name, stream)
    a, b = _queries(mem.ledger), _queries(led)
    assert a["csv"] == b["csv"]
    for key in a:
        assert _same(a[key], b[key]), (name, key)
    assert os.path.getsize(tmp_path / "ledger.bin") == len(led) * L._RECORD.itemsize


def test_streaming_ledger_on_asyncio_and_an_unfinished_run(tmp_path):
    # a deadline of 500 s, 0.5 s of real time at time_scale 0.001 (the gathers end when the last
    # gradient comes: nothing is lost): at 2 s (2 ms) a loaded machine made a gradient miss it
    # in one run and not the other, read in one ledger and unread in the other
    mem = AsyncioNetwork(seed=1, time_scale=0.001)
    _run("fedrec", mem, deadline=500.0)
    stream = AsyncioNetwork(seed=1, time_scale=0.001, ledger=StreamingLedger(chunk_rows=2))
    _run("fedrec", stream, deadline=500.0)

    def untimed(led):  # real time: the times differ from run to run, nothing else does
        return [{k: v for k, v in r.items() if k not in L._TIME_COLUMNS} for r in led.records()]

    assert untimed(mem.ledger) == untimed(stream.ledger) and len(mem.ledger) > 0
    assert mem.ledger.totals() == stream.ledger.totals()
    # stopped half way: rows in flight and unread are written with their state at the query
    mem, stream = SimNetwork(seed=2, profile="mobile"), SimNetwork(seed=2, profile="mobile", ledger=StreamingLedger())
    for net in (mem, stream):
        spec = REGISTRY["fedrec"]
        data, cfg = spec.tiny(5, 4, 2)
        spec.build(net, data, cfg)
        net.run(until=0.5)
    t = mem.ledger.totals()
    assert t["in_flight_messages"] > 0 or t["unread_messages"] > 0
    assert _same(_queries(mem.ledger), _queries(stream.ledger))


def _hand_ledger(led):
    rows = [(0, "s", "c1", "server", "client", "model", 110, 64, 16, "delivered", True),
            (0, "s", "c2", "server", "client", "model", 110, 64, 16, "lost", False),
            (0, "c1", "s", "client", "server", "grad", 60, 32, 8, "delivered", False),
            (1, "s", "c1", "server", "client", "model", 110, 64, 16, "delivered", True),
            (1, "c1", "s", "client", "server", "grad", 50, 16, 4, "in_flight", False)]
    made = []
    for rnd, src, dst, sr, dr, kind, b, raw, fl, status, read in rows:
        r = led.new_row(rnd, src, dst, sr, dr, kind, b, raw, fl, 0.5, False)
        made.append((r, status, read))
    for r, status, read in made:  # rows change after creation, as transports change them
        r[L.STATUS] = status
        r[L.READ] = read
        if status == "lost":
            r[L.NOTE] = "link loss"
    for n, role in [("s", "server"), ("c1", "client"), ("c2", "client")]:
        led.set_role(n, role)
    return made


def test_rows_are_written_when_final_and_memory_holds_the_rest(tmp_path):
    led = StreamingLedger(tmp_path / "l.bin", unit=4, framing_bytes=10, chunk_rows=1)
    made = _hand_ledger(led)
    led._write_final()
    # lost, and delivered-and-read rows are final; the unread and the in-flight one stay in memory
    assert [r[L.SEQ] for r in led._pending] == [2, 4]
    made[2][0][L.READ] = True  # read later: written at the next flush, in its place
    mem = Ledger(unit=4, framing_bytes=10)
    for r, status, read in _hand_ledger(mem):
        pass
    mem.rows[2][L.READ] = True
    assert led.to_csv() == mem.to_csv()
    assert led.select(kind="model").totals() == mem.select(kind="model").totals()
    assert led.totals() == mem.totals()
    with pytest.raises(ValueError, match="fate"):
        led.select(fate="gone")
    with pytest.raises(KeyError, match="no ledger column"):
        led.view().column("size")
    # a time column groups as in memory (it was refused: "groups by integer, text and boolean")
    assert _same(led.view().group("send_time"), mem.view().group("send_time"))
    assert _same(led.view().group("arrival_time", "kind"), mem.view().group("arrival_time", "kind"))
    with pytest.raises(AttributeError, match="no list of rows"):
        led.rows


def test_memory_is_bounded_by_the_rows_in_motion():
    led = StreamingLedger(chunk_rows=100)
    peak = 0
    for k in range(10_000):
        r = led.new_row(0, "a", "b", "x", "y", "k", 10, 0, 0, float(k), False)
        r[L.STATUS] = "delivered"
        r[L.READ] = True
        peak = max(peak, len(led._pending))
    assert peak <= 100 and len(led) == 10_000
    assert led.totals()["bytes"] == 100_000
    path = led.path
    led.close()
    assert not os.path.exists(path)  # a temporary file goes with its ledger


def test_networks_check_the_ledger_they_are_given(tmp_path):
    led = StreamingLedger(tmp_path / "x.bin")
    led.new_row(0, "a", "b", "x", "y", "k", 1, 0, 0, 0.0, False)
    with pytest.raises(NetworkConfigError, match="must be empty"):
        SimNetwork(ledger=led)
    with pytest.raises(NetworkConfigError, match="StreamingLedger"):
        TcpNetwork(processes=1, ledger=StreamingLedger())
    net = SimNetwork(framing_bytes=7, unit=3, ledger=StreamingLedger())
    assert net.ledger.framing_bytes == 7 and net.ledger.unit == 3
    assert COLUMNS == tuple(net.ledger.to_csv().strip().split(","))


def _five_messages(ledger=None):
    async def a(ctx):
        for i in range(5):
            await ctx.send("b", "m", i)

    async def b(ctx):
        for _ in range(5):
            await ctx.receive("m")

    net = SimNetwork(ledger=ledger)
    net.add_node("a", a)
    net.add_node("b", b)
    net.run()
    return net


def test_a_csv_export_that_fails_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    # written in place, a failure part way left a header-only or truncated file that read as a
    # valid ledger with fewer messages
    good = _five_messages()
    dest = tmp_path / "ledger.csv"
    good.ledger.to_csv(dest)  # a Path, as well as a str
    before = dest.read_bytes()
    assert before == good.ledger.to_csv().encode() and before.count(b"\n") == 6

    led = StreamingLedger(chunk_rows=2)
    closed = _five_messages(led)
    led.close()  # any failure while reading the rows back
    with pytest.raises(ValueError, match="closed"):
        led.to_csv(str(dest))
    assert dest.read_bytes() == before

    def two_rows_then_fail(self):
        yield from self.rows[:2]
        raise OSError("disk gone")

    other = _five_messages()
    monkeypatch.setattr(Ledger, "_iter_rows", two_rows_then_fail)
    with pytest.raises(OSError, match="disk gone"):
        other.ledger.to_csv(dest)
    monkeypatch.undo()
    assert dest.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ledger.csv"]  # no temporary file left

    # network_record claims <label>.csv, then the whole CSV replaces the claim; a failed export
    # leaves no file under the name
    from fedsim.kernel import network_record

    records = tmp_path / "records"
    with pytest.raises(ValueError, match="closed"):
        network_record(closed, records, "run")
    assert list(records.iterdir()) == []
    first, second = network_record(good, records, "run"), network_record(good, records, "run")
    assert [os.path.basename(r["ledger"]) for r in (first, second)] == ["run.csv", "run~2.csv"]
    assert (records / "run.csv").read_bytes() == (records / "run~2.csv").read_bytes() == before
    assert sorted(p.name for p in records.iterdir()) == ["run.csv", "run~2.csv"]


@pytest.mark.parametrize("own_file", [False, True])
def test_every_query_of_a_closed_ledger_says_it_is_closed(tmp_path, own_file):
    # with every row final (nothing left to write), a closed ledger on a temporary file failed
    # with FileNotFoundError naming /tmp/fedsim-ledger-*.bin, and one on a given file went on
    # answering from the file, against close()'s "queries fail afterwards"
    led = StreamingLedger(tmp_path / "l.bin" if own_file else None, chunk_rows=2)
    _five_messages(led)
    assert led.totals()["messages"] == 5 and not led._pending
    led.close()
    assert len(led) == 5
    for query in (led.to_csv, led.totals, led.by_kind, lambda: len(led.select(kind="m")), lambda: list(led.records())):
        with pytest.raises(ValueError, match="the StreamingLedger is closed"):
            query()
    led.close()  # twice: nothing more


# What each public method of a view and of a ledger is called with in the parity test below; a
# method added to one of the classes without an entry here fails the test (so the streamed
# ledger cannot fall behind again, as it did without ``span``).
_VIEW_CALLS = {
    "select": [dict(kind="model"), dict(fate="delivered", read=False), dict(min_round=1, anonymous=False)],
    "totals": [{}], "rounds": [{}], "span": [{}], "records": [{}], "__len__": [{}],
    "group": [("kind",), ("round", "dst_role"), ("arrival_time",), ("status", "tx_start")],
    "column": [(c,) for c in COLUMNS],
    "iter_columns": [tuple(COLUMNS), ("status", "round", "src")],
}
_LEDGER_CALLS = {
    "select": [dict(kind="model"), dict(src_role="client", fate=("lost", "in_flight"))], "view": [{}],
    "totals": [{}], "rounds": [{}], "records": [{}], "columns": [{}], "summary": [{}], "to_csv": [{}],
    "by_kind": [{}], "by_node": [{}, dict(exclude_kinds="stop")], "by_role": [{}, dict(per_round=False)],
    "__len__": [{}], "units_of": [(12,)],
}
# not queries: recording (transports), the row formatter, and the streamed ledger's file handling
_NOT_QUERIES = {"new_row", "set_role", "discarded", "as_dict", "flush", "close"}


def _public(cls) -> set[str]:
    names = {n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))}
    return names | {"__len__"}


def _answer(obj, name, arg):
    out = getattr(obj, name)(*arg) if isinstance(arg, tuple) else getattr(obj, name)(**arg)
    if name in ("select", "view"):  # a view: compare what it selects
        return (len(out), out.totals(), list(out.records()), out.span())
    if name == "iter_columns":  # pieces of other sizes (chunks streamed): compare what they hold
        pieces = list(out)
        return {n: np.concatenate([p[n] for p in pieces]).tolist() if pieces else [] for n in arg}
    return list(out) if name == "records" else out


@pytest.mark.parametrize("model", ["fifo", "tcp"])
def test_every_public_query_gives_the_same_answer_in_memory_and_streamed(model, tmp_path):
    from fedsim.kernel.ledger import LedgerView, StreamView

    assert _public(LedgerView) == _public(StreamView) == set(_VIEW_CALLS)  # span was missing
    assert _public(Ledger) == _public(StreamingLedger) - {"flush", "close"} == set(_LEDGER_CALLS) | (
        _NOT_QUERIES - {"flush", "close"})
    faults = Faults(loss=0.2, dropout=0.3, window=(0.0, 2.0))
    mem = SimNetwork(seed=SEED, profile="mobile", link_model=model, faults=faults)
    _run("fedrec", mem, clients=5)
    led = StreamingLedger(tmp_path / "l.bin", chunk_rows=4)
    stream = SimNetwork(seed=SEED, profile="mobile", link_model=model, faults=faults, ledger=led)
    _run("fedrec", stream, clients=5)
    assert {r["status"] for r in mem.ledger.records()} >= {"delivered", "lost"}  # NaN arrivals to group
    for a, b in ((mem.ledger.view(), led.view()), (mem.ledger.select(round=1), led.select(round=1)),
                 (mem.ledger.select(kind="no such kind"), led.select(kind="no such kind"))):
        for name, args in _VIEW_CALLS.items():
            for arg in args:
                assert _same(_answer(a, name, arg), _answer(b, name, arg)), (name, arg)
    for name, args in _LEDGER_CALLS.items():
        for arg in args:
            assert _same(_answer(mem.ledger, name, arg), _answer(led, name, arg)), (name, arg)
    assert not math.isnan(led.view().span()) and led.view().span() == mem.ledger.view().span() > 0
    assert math.isnan(led.select(kind="no such kind").span())
    with pytest.raises(AttributeError, match="a StreamView keeps no list of rows"):
        led.view().rows


@pytest.mark.parametrize("bad", [dict(read="no"), dict(anonymous=1), dict(min_round="1"), dict(min_round=math.nan),
                                 dict(min_round=True)])
def test_a_filter_of_the_wrong_type_is_refused_alike_in_memory_and_streamed(bad):
    # read="no" selected nothing in silence; min_round="1" failed inside the comparison, with
    # TypeError in memory and NumPy's UFuncTypeError streamed
    name = next(iter(bad))
    for led in (_five_messages().ledger, _five_messages(StreamingLedger()).ledger):
        with pytest.raises(ValueError, match=rf"^select: {name} must be "):
            led.select(**bad)
        with pytest.raises(ValueError, match=rf"^select: {name} must be "):
            led.view().select(**bad)
    assert len(_five_messages().ledger.select(read=np.bool_(True), min_round=np.int64(0))) == 5


def test_a_time_column_groups_every_nan_as_one_key_sorted_last():
    # rows merged from TcpNetwork's workers hold a NaN object each: a dict took each for a key of
    # its own, and sorted() left them where they were inserted
    led = Ledger()
    for t, arrival in ((0.0, float("nan")), (1.0, 3.0), (2.0, float("nan")), (3.0, 1.0)):
        r = led.new_row(0, "a", "b", "x", "y", "k", 10, 0, 0, t, False)
        r[L.ARRIVAL] = arrival
    g = led.view().group("arrival_time")
    assert list(g)[:2] == [1.0, 3.0] and math.isnan(list(g)[2]) and len(g) == 3
    assert [t.messages for t in g.values()] == [1, 1, 2]
    g2 = led.view().group("kind", "arrival_time")
    assert [k[1] for k in g2][:2] == [1.0, 3.0] and [t.messages for t in g2.values()] == [1, 1, 2]
    # a ledger whose NaN rows share one object groups as before
    assert list(led.view().group("send_time")) == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("chunk", [2.5, 0, None, "8", True])
def test_chunk_rows_must_be_a_positive_whole_number(chunk):
    # int() truncated 2.5 to 2, and failed on None without naming the parameter
    with pytest.raises(ValueError, match=r"^chunk_rows must be a positive whole number, got "):
        StreamingLedger(chunk_rows=chunk)
    assert StreamingLedger(chunk_rows=np.int64(3)).chunk_rows == 3


def _one_send(anonymous, ledger=None):
    async def a(ctx):
        await ctx.send("b", "m", 1, anonymous=anonymous)

    async def b(ctx):
        await ctx.receive("m")

    net = SimNetwork(ledger=ledger)
    net.add_node("a", a)
    net.add_node("b", b)
    net.run()
    return net.ledger


@pytest.mark.parametrize("flag", [np.True_, np.False_])
def test_a_numpy_bool_anonymous_is_recorded_as_a_bool_in_memory_and_streamed(flag):
    # the in-memory ledger stored np.True_ as given: its CSV said "True" where the streamed
    # ledger's (and the documented format's) said "1", and records() gave np.True_
    mem, stream = _one_send(flag), _one_send(flag, StreamingLedger())
    line = f"0,0,a,b,client,client,m,4,0,0,,0.0,0.0,0.0,0.0,0.0,delivered,1,{int(flag)},\n"
    assert mem.to_csv() == stream.to_csv() == ",".join(COLUMNS) + "\n" + line
    for led in (mem, stream):
        (rec,) = led.records()
        assert type(rec["anonymous"]) is bool and rec["anonymous"] is bool(flag)
        assert list(led.view().group("anonymous")) == [bool(flag)]


@pytest.mark.parametrize("flag", [1, "no", None])
def test_an_anonymous_that_is_not_a_bool_is_refused_and_nothing_sent(flag):
    # 1 went into the in-memory ledger as 1 and into the streamed one as True; "no" made the
    # message anonymous and its in-memory CSV field "no"
    from fedsim.kernel import ActorError

    for led in (Ledger(), StreamingLedger()):
        with pytest.raises(ActorError, match=rf"send: anonymous must be True or False, got {type(flag).__name__} {flag!r}$") as err:
            _one_send(flag, led)
        assert isinstance(err.value.__cause__, TypeError)
        assert len(led) == 0 and led.totals()["messages"] == 0


_FIRST_QUERIES = {
    "select kind": lambda led: (len(led.select(kind="model")), led.select(kind=("model", "gradients")).totals()),
    "exclude kinds": lambda led: led.select(exclude_kinds="model").totals(),
    "view select": lambda led: list(led.view().select(kind="gradients", src_role="client").records()),
    "by_role kinds": lambda led: led.by_role(kinds=["model"]),
    "by_node exclude": lambda led: led.by_node(exclude_kinds=["model"]),
}


@pytest.mark.parametrize("first", list(_FIRST_QUERIES))
def test_a_kind_filter_finds_rows_not_yet_written_to_the_file(first):
    # a view looked up each kind's code in the ledger's string table when it was made, and a
    # kind gets its code when a row of it is first written: on a run whose rows were all still in
    # memory (every run below chunk_rows), the first select(kind="model") selected nothing
    mem = SimNetwork(seed=SEED, profile="wan")
    _run("fedrec", mem)
    led = StreamingLedger()
    stream = SimNetwork(seed=SEED, profile="wan", ledger=led)
    _run("fedrec", stream)
    assert len(led._pending) == len(led) == len(mem.ledger) > 0  # nothing written yet
    answer = _FIRST_QUERIES[first](led)
    assert _same(answer, _FIRST_QUERIES[first](mem.ledger))
    assert mem.ledger.select(kind="model").totals().messages > 0  # the answers are not empty ones


def test_a_view_made_before_the_rows_are_written_selects_them_when_queried():
    led = StreamingLedger()
    stream = SimNetwork(seed=SEED, profile="wan", ledger=led)
    _run("fedrec", stream)
    views = [led.select(kind="model"), led.select(exclude_kinds=["model", "gradients"]),
             led.view().select(dst_role="server", kind="gradients")]
    mem = SimNetwork(seed=SEED, profile="wan")
    _run("fedrec", mem)
    expected = [mem.ledger.select(kind="model"), mem.ledger.select(exclude_kinds=["model", "gradients"]),
                mem.ledger.view().select(dst_role="server", kind="gradients")]
    for v, e in zip(views, expected):
        assert len(e) > 0 and v.totals() == e.totals() and _same(list(v.records()), list(e.records()))


@pytest.mark.parametrize("chunk_rows", [1, 3, 10_000])
def test_iter_columns_gives_each_view_s_columns_in_one_pass_as_column_does(chunk_rows):
    led, stream = Ledger(unit=4), StreamingLedger(unit=4, chunk_rows=chunk_rows)
    for i in range(11):
        fields = (i // 4, f"c{i % 3}", "server", "client", "server", ("model", "grad")[i % 2], 100 + i, 8 * i,
                  2 * i, float(i), i % 5 == 0)
        for one in (led, stream):
            row = one.new_row(*fields)
            row[15] = ("delivered", "lost", "in_flight")[i % 3]
            row[16] = row[15] == "delivered"
            row[14] = i + 0.25 if row[15] == "delivered" else math.nan
    names = ("seq", "round", "src", "kind", "bytes", "units", "arrival_time", "status", "read", "anonymous")
    passes = []
    chunks = stream._chunks

    def counted():
        passes.append(1)
        return chunks()

    stream._chunks = counted
    for filters in ({}, {"kind": "grad"}, {"fate": "delivered", "round": [1, 2]}, {"kind": "no such kind"}):
        for one in (led, stream):
            v = one.select(**filters)
            before = len(passes)
            pieces = list(v.iter_columns(*names))
            if one is stream:
                assert len(passes) == before + 1  # one pass for all the names
            assert all(len(p["seq"]) for p in pieces)  # no empty piece
            want = {n: v.column(n) for n in names}
            got = {n: np.concatenate([p[n] for p in pieces]) if pieces else np.empty(0, want[n].dtype)
                   for n in names}
            assert _same(got, want), (filters, one)
    assert len(list(stream.view().iter_columns("seq"))) == -(-11 // chunk_rows)  # a piece a chunk
    for one in (led, stream):
        with pytest.raises(KeyError, match="'size'"):
            next(one.view().iter_columns("round", "size"))
        with pytest.raises(ValueError, match="at least one column"):
            next(one.view().iter_columns())
    stream.close()
