"""The ledger's columns (named in one place) and its query API, against hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsim.kernel import SimNetwork
from fedsim.kernel import ledger as L
from fedsim.kernel.ledger import COLUMNS, ROW_COLUMNS, Ledger, Totals


def test_position_constants_name_their_columns():
    for name, pos in [("seq", L.SEQ), ("round", L.ROUND), ("src", L.SRC), ("dst", L.DST),
                      ("src_role", L.SRC_ROLE), ("dst_role", L.DST_ROLE), ("kind", L.KIND),
                      ("bytes", L.BYTES), ("raw_bytes", L.RAW), ("floats", L.FLOATS),
                      ("send_time", L.SEND_T), ("tx_start", L.TX_START), ("tx_end", L.TX_END),
                      ("rx_start", L.RX_START), ("arrival_time", L.ARRIVAL), ("status", L.STATUS),
                      ("read", L.READ), ("anonymous", L.ANON), ("note", L.NOTE)]:
        assert ROW_COLUMNS[pos] == name
    assert COLUMNS == ROW_COLUMNS[:10] + ("units",) + ROW_COLUMNS[10:]
    row = Ledger().new_row(3, "a", "b", "x", "y", "k", 100, 40, 10, 1.5, True)
    assert len(row) == len(ROW_COLUMNS) and row[L.ROUND] == 3 and row[L.ANON] is True


def _ledger() -> Ledger:
    led = Ledger(unit=4, framing_bytes=10)
    # (round, src, dst, src_role, dst_role, kind, bytes, raw, floats, status)
    rows = [(0, "s", "c1", "server", "client", "model", 110, 64, 16, "delivered"),
            (0, "s", "c2", "server", "client", "model", 110, 64, 16, "lost"),
            (0, "c1", "s", "client", "server", "grad", 60, 32, 8, "delivered"),
            (1, "s", "c1", "server", "client", "model", 110, 64, 16, "delivered"),
            (1, "c1", "s", "client", "server", "grad", 50, 16, 4, "in_flight")]
    for rnd, src, dst, sr, dr, kind, b, raw, fl, status in rows:
        r = led.new_row(rnd, src, dst, sr, dr, kind, b, raw, fl, 0.0, False)
        r[L.STATUS] = status
    for n, role in [("s", "server"), ("c1", "client"), ("c2", "client")]:
        led.set_role(n, role)
    return led


def test_select_and_totals_by_hand():
    led = _ledger()
    t = led.select(kind="model").totals()
    assert t == Totals(messages=3, wire_bytes=330, payload_bytes=300, raw_bytes=192, floats=48, units=12.0)
    assert led.select(kind="model", fate="delivered").totals().messages == 2
    assert led.select(round=1, src_role="client").totals().wire_bytes == 50
    assert led.select(kind=("model", "grad"), round=[0]).totals().messages == 3
    assert led.select(exclude_kinds=["model"]).totals().floats == 12
    assert len(led.select(src="c1").select(fate="delivered")) == 1
    assert led.select(min_round=1).totals().messages == 2
    with pytest.raises(ValueError, match="fate"):
        led.select(fate="gone")


def test_group_and_columns():
    led = _ledger()
    g = led.view().group("kind", "status")
    assert g[("model", "delivered")].messages == 2 and g[("grad", "in_flight")].wire_bytes == 50
    assert list(led.view().group("round")) == [0, 1]
    np.testing.assert_array_equal(led.select(kind="grad").column("units"), [2.0, 1.0])
    assert led.view().column("status").dtype == object
    with pytest.raises(KeyError, match="no ledger column"):
        led.view().column("size")


def test_totals_and_by_role_agree_with_a_hand_count():
    led = _ledger()
    t = led.totals()
    assert t["messages"] == 5 and t["bytes"] == 440
    assert t["bytes"] == t["delivered_bytes"] + t["lost_bytes"] + t["in_flight_bytes"]
    assert (t["delivered_bytes"], t["lost_bytes"], t["in_flight_bytes"]) == (280, 110, 50)
    assert t["unread_messages"] == 3 and t["units"] == 15.0
    rows = {(r["round"], r["role"], r["direction"]): r for r in led.by_role()}
    assert rows[(0, "server", "sent")]["messages"] == 2
    assert rows[(0, "client", "received")]["messages"] == 1  # the lost copy is not received
    assert (1, "server", "received") not in rows  # in flight
    assert rows[(0, "client", "sent")]["bytes_per_node"] == 30.0  # 2 clients


def test_a_real_run_queries_the_same_as_columns():
    async def server(ctx):
        for r in range(3):
            ctx.begin_round(r)
            await ctx.broadcast(["a", "b"], "m", {"x": np.zeros(r + 1, np.float32)})
            await ctx.gather("u", senders=["a", "b"], round=r)
        await ctx.broadcast(["a", "b"], "stop", None)

    async def client(ctx):
        while (await ctx.receive(("m", "stop"))).kind == "m":
            await ctx.send("server", "u", {"y": np.ones(2, np.float64)})

    net = SimNetwork(framing_bytes=40)
    net.add_node("server", server, role="server")
    net.add_node("a", client)
    net.add_node("b", client)
    net.run()
    cols = net.ledger.columns()
    sel = cols["kind"] == "m"
    t = net.ledger.select(kind="m").totals()
    assert t.messages == sel.sum() == 6
    assert t.wire_bytes == cols["bytes"][sel].sum()
    assert t.payload_bytes == t.wire_bytes - 40 * 6
    assert math.isnan(t.units)


def _odd_text_ledger(led: Ledger) -> Ledger:
    """Rows whose free text (kinds, roles: any str an actor chooses) needs CSV quoting."""
    kinds = ["a,b", 'say "hi"', "x\ny", "r\rs", "crlf\r\n", " lead", ""]
    for i, k in enumerate(kinds):
        r = led.new_row(i, "s", "c1", "server", "cli,ent\r", k, 100 + i, 8, 2, 0.5 * i, i % 2 == 0)
        r[L.STATUS], r[L.READ] = "delivered", True
    return led


def test_csv_quotes_every_odd_text_and_reads_back_as_written():
    # Python 3.11's csv writer, told lineterminator="\n", left a "\r" unquoted ('r\rs' went out
    # bare): a reader split that row in two, a 7-row ledger read back as 8 rows, one of 1 field
    import csv
    import io

    for led in (_odd_text_ledger(Ledger(unit=2)), _odd_text_ledger(L.StreamingLedger(unit=2, chunk_rows=1))):
        text = led.to_csv()
        rows = list(csv.reader(io.StringIO(text, newline="")))
        assert rows[0] == list(COLUMNS)
        assert len(rows) == 1 + len(led)
        want = [[L._fmt(d[c]) for c in COLUMNS] for d in led.records()]
        assert rows[1:] == want
        assert [r[COLUMNS.index("kind")] for r in rows[1:]] == ["a,b", 'say "hi"', "x\ny", "r\rs", "crlf\r\n", " lead", ""]
        assert {r[COLUMNS.index("dst_role")] for r in rows[1:]} == {"cli,ent\r"}
        # rows end in "\n" alone, and a plain row is written as before (no quotes, no "\r")
        assert text.endswith(",delivered,1,1,\n") and "\n0,0,s,c1,server," in text.replace("\r", "")
    plain = Ledger()
    plain.new_row(0, "s", "c", "server", "client", "model", 10, 0, 0, 0.0, False)
    assert plain.to_csv().splitlines()[1] == "0,0,s,c,server,client,model,10,0,0,,0.0,,,,,in_flight,0,0,"


def test_exclude_kinds_takes_one_kind_as_kind_does():
    # a str was taken as the collection of its characters: exclude_kinds="model" excluded the
    # kinds "m", "o", "d", "e", "l" and kept all 3 model rows (330 bytes) in the totals
    for led in (_ledger(), L.StreamingLedger(chunk_rows=1)):
        if isinstance(led, L.StreamingLedger):
            src = _ledger()
            led.unit, led.framing_bytes = src.unit, src.framing_bytes
            for d in src.records():
                r = led.new_row(d["round"], d["src"], d["dst"], d["src_role"], d["dst_role"], d["kind"], d["bytes"],
                                d["raw_bytes"], d["floats"], 0.0, False)
                r[L.STATUS] = d["status"]
            for n, role in src.roles.items():
                led.set_role(n, role)
        t = led.select(exclude_kinds="model").totals()
        assert (t.messages, t.wire_bytes, t.floats) == (2, 110, 12)
        assert led.select(exclude_kinds="model").totals() == led.select(exclude_kinds=["model"]).totals()
        sent = {(r["role"], r["direction"]): r["messages"] for r in led.by_role(per_round=False, exclude_kinds="grad")}
        assert sent == {("server", "sent"): 3, ("client", "received"): 2}
        assert led.by_node(exclude_kinds="grad")["c1"]["sent_messages"] == 0


@pytest.mark.parametrize("streaming", [False, True])
def test_units_and_by_node_by_hand_with_a_lost_copy_and_a_fractional_unit(tmp_path, streaming):
    # units are floats / unit, a true division (3 floats of a unit of 2 are 1.5 units, not 1); a
    # node's received counts hold only what was delivered to it (a lost copy was sent, not received)
    led = L.StreamingLedger(tmp_path / "l.bin", unit=2, framing_bytes=5) if streaming else Ledger(unit=2, framing_bytes=5)
    for n, role in [("s", "server"), ("a", "client"), ("b", "client")]:
        led.set_role(n, role)
    # (src, dst, bytes, floats, status)
    for src, dst, b, fl, status in [("s", "a", 20, 3, "delivered"), ("s", "b", 20, 3, "lost"),
                                    ("a", "s", 12, 1, "delivered"), ("b", "s", 9, 0, "in_flight")]:
        r = led.new_row(0, src, dst, "?", "?", "k", b, 4 * fl, fl, 0.0, False)
        r[L.STATUS], r[L.READ] = status, status == "delivered"
    assert led.units_of(3) == 1.5
    assert led.totals()["units"] == (3 + 3 + 1 + 0) / 2 == 3.5
    assert led.select(src="s").totals() == Totals(2, 40, 30, 24, 6, 3.0)
    np.testing.assert_array_equal(led.view().column("units"), [1.5, 1.5, 0.5, 0.0])
    node = led.by_node()
    assert node["s"] == {"sent_messages": 2, "sent_bytes": 40, "sent_floats": 6,
                         "received_messages": 1, "received_bytes": 12, "received_floats": 1}
    assert node["a"] == {"sent_messages": 1, "sent_bytes": 12, "sent_floats": 1,
                         "received_messages": 1, "received_bytes": 20, "received_floats": 3}
    # b sent one copy still in flight, and the copy sent to it was lost: nothing received
    assert node["b"] == {"sent_messages": 1, "sent_bytes": 9, "sent_floats": 0,
                         "received_messages": 0, "received_bytes": 0, "received_floats": 0}
