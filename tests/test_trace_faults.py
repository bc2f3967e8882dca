"""``fedsim trace``'s views of runs that do not go as planned: a later round's message left in
the mailbox and read a round later, an earlier round's discarded unread, a wait given up at its
deadline (``ledger.missing``), a client that drops out, the secure aggregation's setup round.
Each view (steps.log, sequence.mmd, trace.html, timeline.svg) must say what the ledger says."""

from __future__ import annotations

import json
import os
from collections import Counter
import re

import pytest
from html.parser import HTMLParser

from fedsim.kernel import Faults, LinkSpec
from fedsim.studies.trace import TracingNetwork, mermaid, step_log, timeline_svg, trace, trace_html


def _page_data(html: str) -> dict:
    m = re.search(r'<script id="trace-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


def _two_rounds(ledger=None):
    """Client a sends its round-0 and round-1 uploads at once; b's round-0 upload comes after the
    server's round-0 deadline (50 ms), with its round-1 one. The server gathers each round with
    ``round=r``: a's round-1 upload waits in the mailbox (read in round 1), b's round-0 one is
    discarded unread by the round-1 gather, and the round-0 gather gives up on b."""

    async def server(ctx):
        for r in range(2):
            ctx.begin_round(r)
            await ctx.broadcast(["a", "b"], "go", {"r": r})
            await ctx.gather("up", senders=["a", "b"], round=r, timeout=0.05)

    async def a(ctx):
        await ctx.receive("go")
        await ctx.send("server", "up", {"x": 0})
        ctx.begin_round(1)
        await ctx.send("server", "up", {"x": 1})
        await ctx.receive("go")

    async def b(ctx):
        for r in range(2):
            await ctx.receive("go")
            if r == 0:
                await ctx.sleep(0.06)
            await ctx.send("server", "up", {"x": r})

    net = TracingNetwork(seed=0, ledger=ledger)
    net.add_node("server", server, role="server", link=LinkSpec(latency=0.001))
    net.add_node("a", a, role="client", link=LinkSpec(latency=0.001))
    net.add_node("b", b, role="client", link=LinkSpec(latency=0.001))
    net.run()
    return net


def test_a_message_read_a_round_later_is_read_then_in_every_view():
    # the ledger says only whether a message was read: every view drew a's round-1 upload (in the
    # mailbox from 4 ms, read when the round-1 gather returned at 64 ms) as read on arrival, the
    # step log's lines of a's two uploads were the same line twice (no round), and the wait the
    # round-0 gather gave up on b (ledger.missing) appeared nowhere
    net = _two_rounds()
    rows = list(net.ledger.records())
    assert [(r["round"], r["src"], r["kind"], r["read"]) for r in rows] == [
        (0, "server", "go", True), (0, "server", "go", True), (0, "a", "up", True), (1, "a", "up", True),
        (1, "server", "go", True), (1, "server", "go", True), (0, "b", "up", False), (1, "b", "up", True)]
    assert net.read_at == {0: 0.002, 1: 0.002, 2: 0.05, 3: pytest.approx(0.064), 4: pytest.approx(0.052),
                           5: pytest.approx(0.062), 7: pytest.approx(0.064)}
    log = step_log(net).splitlines()
    assert log == [
        "       0.000 ms  server sends go (round 0, 8 B) to a",
        "       0.000 ms  server sends go (round 0, 8 B) to b",
        # at one instant, in the order it happened (net.happened): a takes its go and sends both
        # uploads before b's go arrives (b's sleep stood before a's sends, its arrival before a's
        # sends, b's read at 62 ms before its round-0 upload)
        "       2.000 ms  a receives go (round 0) from server",
        "       2.000 ms  a sends up (round 0, 8 B) to server",
        "       2.000 ms  a sends up (round 1, 8 B) to server",
        "       2.000 ms  b receives go (round 0) from server",
        "       2.000 ms  b sleeps for 60 ms",
        "       4.000 ms  server receives up (round 0) from a",
        "       4.000 ms  server receives up (round 1) from a",
        "      50.000 ms  server reads up (round 0) from a (arrived at 4.000 ms)",
        "      50.000 ms  server stops waiting for up (round 0): 1 of 2 missing (nothing from b)",
        "      50.000 ms  server sends go (round 1, 8 B) to a",
        "      50.000 ms  server sends go (round 1, 8 B) to b",
        "      52.000 ms  a receives go (round 1) from server",
        "      52.000 ms  b receives go (round 1) from server",
        "      62.000 ms  b sends up (round 0, 8 B) to server",
        "      62.000 ms  b reads go (round 1) from server (arrived at 52.000 ms)",
        "      62.000 ms  b sends up (round 1, 8 B) to server",
        "      64.000 ms  server receives up (round 0) from b (never read)",
        "      64.000 ms  server receives up (round 1) from b",
        "      64.000 ms  server reads up (round 1) from a (arrived at 4.000 ms)"]
    arrows = [line for line in mermaid(net).splitlines() if line.startswith("    N") or "Note" in line]
    assert arrows == [
        "    Note over N0: round 0",
        "    N0->>N1: go 8 B, sent 0.000 ms, arrived 2.000 ms",
        "    N0->>N2: go 8 B, sent 0.000 ms, arrived 2.000 ms",
        "    N1->>N0: up 8 B, sent 2.000 ms, arrived 4.000 ms, read 50.000 ms",
        "    Note over N0: round 1",
        "    N1->>N0: up 8 B, sent 2.000 ms, arrived 4.000 ms, read 64.000 ms",
        "    Note over N0: stops waiting for up (round 0)#58; 1 of 2 missing (nothing from b), at 50.000 ms",
        "    N0->>N1: go 8 B, sent 50.000 ms, arrived 52.000 ms",
        "    N0->>N2: go 8 B, sent 50.000 ms, arrived 52.000 ms, read 62.000 ms",
        "    Note over N0: round 0",
        "    N2->>N0: up 8 B, sent 62.000 ms, arrived 64.000 ms, never read",
        "    Note over N0: round 1",
        "    N2->>N0: up 8 B, sent 62.000 ms, arrived 64.000 ms"]
    page = trace_html(net)
    data = _page_data(page)
    assert [m["read_at"] for m in data["messages"]] == [None, None, 0.05, pytest.approx(0.064), None,
                                                        pytest.approx(0.062), None, None]
    assert data["missing"] == [{"time": 0.05, "receiver": "server", "kind": "up", "round": 0, "wait": 1,
                                "senders": ["b"], "anonymous": 0, "expected": 2, "arrived": 1}]
    labels = re.findall(r'fill="#222">([^<]*)</text>', page)
    assert labels == ["go · 8 B", "go · 8 B", "up · 8 B · read 50.000 ms", "up · 8 B · read 64.000 ms", "go · 8 B",
                      "go · 8 B · read 62.000 ms", "up · 8 B · never read", "up · 8 B"]
    notes = re.findall(r'<g class="note"[^>]*>(?:<rect[^>]*/>)?<text[^>]*>([^<]*)</text>', page)
    assert notes == ["50.000 ms: server stops waiting for up (round 0): 1 of 2 missing (nothing from b)"]
    assert '", read " + ms(m.read_at)' in page  # the step panel says it too


def test_a_count_gather_given_up_says_how_many_and_a_dropout_is_shown():
    # a client dropping out (its actor stopped at 5 ms, the server's message to it lost) and a
    # count= gather that ends at its deadline one message short: neither appeared in any view
    # but as the lost message's note
    async def server(ctx):
        await ctx.broadcast(["a", "b"], "go", {"n": 1})
        await ctx.gather("up", count=2, timeout=0.05)

    async def client(ctx):
        await ctx.receive("go")
        await ctx.send("server", "up", {"n": 2}, anonymous=True)

    net = TracingNetwork(seed=0)
    net.add_node("server", server, role="server", link=LinkSpec(latency=0.01))
    net.add_node("a", client, role="client", link=LinkSpec(latency=0.01))
    net.add_node("b", client, role="client", link=LinkSpec(latency=0.01), offline_at=0.005)
    res = net.run()
    assert res.offline == ["b"] and len(net.ledger.missing) == 1 and net.ledger.missing[0].sender is None
    log = step_log(net).splitlines()
    assert log == [
        "       0.000 ms  server sends go (round 0, 8 B) to a",
        "       0.000 ms  server sends go (round 0, 8 B) to b",
        "       5.000 ms  b drops out (offline from here on: its actor stops, messages to or from it are lost)",
        # (a's go arrives first, and a sends before b's copy is lost: net.happened's order)
        "      20.000 ms  a receives go (round 0) from server",
        "      20.000 ms  a sends up (round 0, 8 B) anonymously to server",
        "      20.000 ms  go (round 0) from server to b (sent at 0.000 ms) is lost (receiver offline)",
        "      40.000 ms  server receives up (round 0) from (anonymous)",
        "      50.000 ms  server reads up (round 0) from (anonymous) (arrived at 40.000 ms)",
        "      50.000 ms  server stops waiting for up (round 0): 1 of 2 missing (any sender)"]
    notes = [line for line in mermaid(net).splitlines() if "Note over N" in line and "round 0" not in line[-8:]]
    assert notes == ["    Note over N2: drops out at 5.000 ms",
                     "    Note over N0: stops waiting for up (round 0)#58; 1 of 2 missing (any sender), at 50.000 ms"]
    page = trace_html(net)
    data = _page_data(page)
    assert data["offline"] == [{"node": "b", "time": 0.005, "dropped": True}]
    assert re.findall(r'<g class="note"[^>]*>(?:<rect[^>]*/>)?<text[^>]*>([^<]*)</text>', page) == [
        "5.000 ms: b drops out (offline from here on: its actor stops, messages to or from it are lost)",
        "50.000 ms: server stops waiting for up (round 0): 1 of 2 missing (any sender)"]
    assert " · 3 messages (1 lost), 24 B on the wire; 1 message missing at a deadline; 1 node offline. " in page
    # the page's timeline and timeline.svg grey the lane from the dropout to the end (50 ms)
    assert re.findall(r'<rect class="span offline"[^>]*><title>([^<]*)</title>', page) == [
        "b: offline 5.000 ms to 50.000 ms"]
    assert "<title>offline 5.000-50.000 ms</title>" in timeline_svg(net)


def test_a_node_that_finished_before_its_offline_time_goes_offline_all_the_same():
    async def server(ctx):
        await ctx.receive("hi")
        await ctx.sleep(0.02)
        await ctx.send("a", "bye", {"n": 1})

    async def a(ctx):
        await ctx.send("server", "hi", {"n": 1})

    net = TracingNetwork(seed=0)
    net.add_node("server", server, role="server", link=LinkSpec(latency=0.001))
    net.add_node("a", a, role="client", link=LinkSpec(latency=0.001), offline_at=0.01)
    net.run()
    assert [r["note"] for r in net.ledger.records()] == ["", "receiver offline"]
    assert "      10.000 ms  a goes offline (its actor had finished; messages to it are lost)" in step_log(net)
    assert "    Note over N1: goes offline (had finished) at 10.000 ms" in mermaid(net).splitlines()


def test_a_faulty_fedrec_trace_with_secure_aggregation_matches_its_ledger(tmp_path):
    # every message once, with its fate, its round (the key exchange as setup), in every view;
    # the page's totals are the ledger's
    net, paths = trace("fedrec", tmp_path, clients=3, rounds=2,
                       sets=["secure_aggregation=true", "deadline=0.05"], formats=("html", "mermaid", "log"))
    # (the same run on a faulty network, built by hand)
    from fedsim.protocols import REGISTRY
    from fedsim.protocols.contract import check_tiny

    spec = REGISTRY["fedrec"]
    data, cfg = check_tiny(spec, spec.tiny(3, 2, 0))
    cfg = cfg.replace(secure_aggregation=True, deadline=0.05)
    net = TracingNetwork(seed=0, profile="lan", faults=Faults(loss=0.3, dropout=0.3, window=(0.0, 0.05)))
    spec.build(net, data, cfg)
    res = net.run()
    rows = list(net.ledger.records())
    totals = net.ledger.totals()
    assert res.offline == ["client/0002"] and totals["lost_messages"] == 4 and totals["missing"] == 3
    setup = [r for r in rows if r["round"] < 0]
    assert {r["round"] for r in setup} == {-1} and {r["kind"] for r in setup} == {"keys", "peers"}
    log = step_log(net)
    sends = [line for line in log.splitlines() if " sends " in line]
    assert len(sends) == totals["messages"]
    assert sum("(setup, " in line for line in sends) == len(setup)
    assert sum(" is lost (" in line for line in log.splitlines()) == totals["lost_messages"]
    assert sum(" receives " in line for line in log.splitlines()) == totals["delivered_messages"]
    assert "client/0002 drops out" in log
    assert log.count("server stops waiting for masked") == 2
    diagram = mermaid(net)
    assert diagram.count(": setup") == 1 and "round -1" not in diagram
    assert len(re.findall(r"^    N\d+-?-[x>]>?N\d+: ", diagram, re.M)) == totals["messages"]
    assert diagram.count(", LOST ") == totals["lost_messages"]
    page = trace_html(net)
    data = _page_data(page)
    assert len(data["messages"]) == totals["messages"]
    assert sum(m["bytes"] for m in data["messages"]) == totals["bytes"]
    assert (f' · {totals["messages"]} messages ({totals["lost_messages"]} lost), 22.7 kB on the wire; '
            f'{totals["missing"]} messages missing at a deadline; 1 node offline. ') in page
    assert totals["bytes"] == 22708
    assert "round -1" not in page.split("<script")[0]
    assert sum(len(g["senders"]) + g["anonymous"] for g in data["missing"]) == totals["missing"]


def _every_client_offline(monkeypatch):
    """``fedsim trace demo`` on a network where every client drops out at once: the server's
    gather (demo has no deadline by default) waits for ever, a deadlock."""
    import fedsim.studies.trace as trace_mod

    class Dropping(TracingNetwork):
        def __init__(self, **kwargs):
            super().__init__(**{**kwargs, "faults": Faults(dropout=1.0)})

    monkeypatch.setattr(trace_mod, "TracingNetwork", Dropping)


def test_a_deadlocked_trace_is_written_and_shows_who_waits(monkeypatch, tmp_path):
    # a run ending in a deadlock wrote no file (trace raised before writing), and the views of such
    # a run did not say which actors were left waiting
    from fedsim.kernel import DeadlockError

    _every_client_offline(monkeypatch)
    with pytest.raises(DeadlockError) as info:
        trace("demo", tmp_path, clients=2, rounds=1, formats=("html", "mermaid", "log"))
    assert sorted(p.name for p in info.value.paths.values()) == ["sequence.mmd", "steps.log", "trace.html"]
    assert list(info.value.blocked) == ["server"]
    waits = info.value.blocked["server"]
    log = (tmp_path / "steps.log").read_text().splitlines()
    assert log[-1] == (f"       1.001 ms  server is still waiting when the run ends, with nothing left that could "
                       f"wake it (deadlock): {waits}")
    assert sum("drops out" in line for line in log) == 2
    assert (tmp_path / "sequence.mmd").read_text().splitlines()[-1] == (
        f"    Note over N0: deadlock#58; still waiting at the end (1.001 ms) in {waits.replace(':', '#58;')}")
    page = (tmp_path / "trace.html").read_text()
    assert " · 2 messages (2 lost), 112 B on the wire; 2 nodes offline; deadlock: 1 actor still waiting at the end." \
        in page


def test_cli_trace_of_a_deadlocked_run_keeps_its_files(monkeypatch, tmp_path, capsys):
    from fedsim.cli import main

    _every_client_offline(monkeypatch)
    out = tmp_path / "t"
    assert main(["trace", "demo", "--clients", "2", "--out", str(out)]) == 1
    err = capsys.readouterr()
    assert f"wrote {out}/: trace.html, sequence.mmd, timeline.svg, steps.log" in err.out
    assert "error: " in err.err and "server" in err.err
    # the folder it wrote is named, not denied; no fault option given: the general advice
    assert err.err.startswith(f"error: the run did not finish, {out}/ holds the run up to its deadlock: ")
    assert err.err.splitlines()[-1] == ("  a lost message (--loss) or a dropped-out client (--dropout) is waited for "
                                        "for ever unless the protocol has a deadline (--set deadline=SECONDS)")
    assert "deadlock" in (out / "steps.log").read_text()


def _traced_networks(monkeypatch) -> list:
    """The TracingNetworks ``fedsim trace`` builds (to compare its files with their ledgers)."""
    import fedsim.studies.trace as trace_mod

    made = []

    class Kept(TracingNetwork):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            made.append(self)

    monkeypatch.setattr(trace_mod, "TracingNetwork", Kept)
    return made


def _lost_lines(net) -> list[str]:
    return [f"{r['kind']} ({'round ' + str(r['round'])}) from {r['src']} to {r['dst']} (sent at "
            f"{r['send_time'] * 1000:.3f} ms) is lost ({r['note']})" for r in net.ledger.records() if r["status"] == "lost"]


def test_cli_trace_with_loss_and_a_deadline_shows_the_losses_and_the_waits_given_up(monkeypatch, tmp_path, capsys):
    # fedsim trace had no fault option: a lossy run could only be traced from Python
    from fedsim.cli import main

    made = _traced_networks(monkeypatch)
    out = tmp_path / "t"
    assert main(["trace", "fedrec", "--clients", "4", "--rounds", "2", "--loss", "0.2", "--set", "deadline=2",
                 "--out", str(out)]) == 0
    assert "traced 20 messages" in capsys.readouterr().out
    (net,) = made
    assert net.faults.loss == 0.2 and net.faults.dropout == 0.0
    totals = net.ledger.totals()
    assert (totals["messages"], totals["lost_messages"], totals["missing"]) == (20, 3, 3)
    log = (out / "steps.log").read_text().splitlines()
    lost = [line.strip().split(" ms  ", 1)[1] for line in log if " is lost (" in line]
    assert lost == _lost_lines(net) and all(line.endswith("is lost (link loss)") for line in lost)
    waits = [line.strip() for line in log if " stops waiting " in line]
    assert waits == ["2002.076 ms  server stops waiting for gradients (round 1): 3 of 4 missing (nothing from "
                     "client/0001, client/0002, client/0003)"]
    assert sum(len(line.split("nothing from ")[1].split(", ")) for line in waits) == totals["missing"]
    page = (out / "trace.html").read_text()
    assert "fedrec: 4 clients, 2 rounds, profile lan, loss 0.2, seed 0" in page
    assert " · 20 messages (3 lost), " in page and "; 3 messages missing at a deadline. " in page
    # the same run as the API's trace on that NetSpec, line for line
    from fedsim.kernel import NetSpec

    trace("fedrec", tmp_path / "api", clients=4, rounds=2, net=NetSpec(profile="lan", loss=0.2),
          sets=["deadline=2"], formats=("log",))
    assert (tmp_path / "api" / "steps.log").read_text().splitlines() == log


def test_cli_trace_with_dropout_shows_who_drops_out(monkeypatch, tmp_path, capsys):
    from fedsim.cli import main

    made = _traced_networks(monkeypatch)
    out = tmp_path / "t"
    assert main(["trace", "fedrec", "--clients", "4", "--rounds", "2", "--dropout", "0.5", "--dropout-window",
                 "0,0.002", "--set", "deadline=1", "--out", str(out)]) == 0
    (net,) = made
    assert net.faults.window == (0.0, 0.002) and net.result.offline == ["client/0002", "client/0003"]
    log = (out / "steps.log").read_text().splitlines()
    drops = [line.strip().split(" (")[0] for line in log if " drops out " in line]
    assert drops == ["0.121 ms  client/0003 drops out", "1.928 ms  client/0002 drops out"]
    lost = [line.strip().split(" ms  ", 1)[1] for line in log if " is lost (" in line]
    assert lost == _lost_lines(net) and len(lost) == net.ledger.totals()["lost_messages"] == 5
    assert all(line.endswith("is lost (receiver offline)") for line in lost)
    assert sum(" stops waiting " in line for line in log) == 2
    assert "; 3 messages missing at a deadline; 2 nodes offline. " in (out / "trace.html").read_text()


def test_cli_trace_deadlocked_by_loss_without_a_deadline_says_to_set_one(tmp_path, capsys):
    # the error said "no output folder was written" under the line naming the folder it wrote
    from fedsim.cli import main

    out = tmp_path / "t"
    assert main(["trace", "fedrec", "--clients", "4", "--rounds", "2", "--loss", "0.2", "--out", str(out)]) == 1
    cap = capsys.readouterr()
    assert f"wrote {out}/: trace.html, " in cap.out
    lines = cap.err.splitlines()
    assert lines[0].startswith(f"error: the run did not finish, {out}/ holds the run up to its deadlock: deadlock at")
    assert lines[-1] == ("  fedrec waits for ever for a message lost or never sent (--loss 0.2) without a deadline: "
                         "give it one, --set deadline=SECONDS")
    assert "no output folder" not in cap.err
    assert "deadlock" in (out / "steps.log").read_text()


@pytest.mark.parametrize("argv, message", [
    (["--loss", "1.5"], "loss must be a probability in [0, 1], got 1.5"),
    (["--dropout-window", "0"], "--dropout-window expects START,END in seconds, got '0'"),
    (["--loss", "0.1", "--loss", "0.2"], "argument --loss: given twice"),
])
def test_cli_trace_refuses_bad_fault_options_and_writes_nothing(argv, message, tmp_path, capsys):
    from fedsim.cli import main

    out = tmp_path / "t"
    with pytest.raises(SystemExit) if "twice" in message else _no_raise():
        assert main(["trace", "demo", "--out", str(out)] + argv) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


class _no_raise:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_trace_refuses_a_transport_it_cannot_trace_and_a_profile_with_a_netspec(tmp_path):
    from fedsim.experiment import UsageError
    from fedsim.kernel import NetSpec

    with pytest.raises(UsageError, match="a trace runs on the simulated network .transport 'sim'., not on "
                                         "transport 'tcp'"):
        trace("demo", tmp_path / "a", net=NetSpec(transport="tcp", loss=0.1, dropout=0.1))
    with pytest.raises(UsageError, match="not both"):
        trace("demo", tmp_path / "b", profile="wan", net=NetSpec(loss=0.1))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_notes_at_one_instant_stand_where_they_happened_among_the_arrows():
    # at 10 ms: c sends up, then the server's wait for it gives up (ledger.missing), then the
    # server sends next; d's link goes down then too. The sequence diagrams placed the wait's
    # note by time only, before every message sent at its time: before c's upload, as if the
    # server had given up before c sent. Now as in the step log (net.happened): offline first,
    # the wait between the two sends
    from xml.etree import ElementTree

    from fedsim.kernel import SimNetwork

    async def c(ctx):
        await ctx.sleep(0.01)
        await ctx.send("server", "up", {"x": 1})
        await ctx.receive("next")

    async def server(ctx):
        await ctx.gather("up", senders=["c"], timeout=0.01)
        await ctx.send("c", "next", {"x": 2})

    async def d(ctx):
        return None

    def run(net):
        net.add_node("c", c, role="client", link=LinkSpec(latency=0.001))
        net.add_node("server", server, role="server", link=LinkSpec(latency=0.001))
        net.add_node("d", d, role="client", offline_at=0.01)
        net.run()
        return net

    net = run(TracingNetwork(seed=0))
    assert net.happened == [("span", 0), ("send", 0), ("missing", 0), ("send", 1), ("arrive", 0), ("arrive", 1),
                            ("read", 1)]
    assert step_log(net).splitlines() == [
        "       0.000 ms  c sleeps for 10 ms",
        "      10.000 ms  d goes offline (its actor had finished; messages to it are lost)",
        "      10.000 ms  c sends up (round 0, 8 B) to server",
        "      10.000 ms  server stops waiting for up (round 0): 1 of 1 missing (nothing from c)",
        "      10.000 ms  server sends next (round 0, 10 B) to c",
        "      12.000 ms  server receives up (round 0) from c (never read)",
        "      12.000 ms  c receives next (round 0) from server"]
    notes_and_arrows = [
        "    Note over N2: goes offline (had finished) at 10.000 ms",
        "    Note over N0: round 0",
        "    N1->>N0: up 8 B, sent 10.000 ms, arrived 12.000 ms, never read",
        "    Note over N0: stops waiting for up (round 0)#58; 1 of 1 missing (nothing from c), at 10.000 ms",
        "    N0->>N1: next 10 B, sent 10.000 ms, arrived 12.000 ms"]
    assert mermaid(net).splitlines()[4:] == notes_and_arrows
    page = trace_html(net)
    assert _page_data(page)["sequence"] == [["offline", 0], ["msg", 0], ["missing", 0], ["msg", 1]]
    seq = ElementTree.fromstring(re.search(r'<svg id="sequence".*?</svg>', page, re.S).group(0))
    svg = "{http://www.w3.org/2000/svg}"
    rows = [(g.get("class"), next(g.iter(svg + "text")).text) for g in seq.findall(svg + "g")
            if g.get("class") in ("note", "round", "msg")]
    assert rows == [
        ("note", "10.000 ms: d goes offline (its actor had finished; messages to it are lost)"),
        ("round", "round 0"),
        ("msg", "up · 8 B · never read"),
        ("note", "10.000 ms: server stops waiting for up (round 0): 1 of 1 missing (nothing from c)"),
        ("msg", "next · 10 B")]
    # a network that did not trace keeps the order by time: its notes before the sends of their time
    untraced = run(SimNetwork(seed=0))
    assert untraced.happened == []
    assert mermaid(untraced).splitlines()[4:] == [notes_and_arrows[i] for i in (0, 3, 1, 2, 4)]
    assert _page_data(trace_html(untraced))["sequence"] == [["offline", 0], ["missing", 0], ["msg", 0], ["msg", 1]]


def _faulty_fedrec(ledger=None):
    from fedsim.protocols import REGISTRY

    spec = REGISTRY["fedrec"]
    data, cfg = spec.tiny(6, 2, 3)
    net = TracingNetwork(seed=3, profile="wan", ledger=ledger, faults=Faults(loss=0.2, dropout=0.3, window=(0.0, 0.5)))
    spec.build(net, data, cfg.replace(deadline=2.0))
    net.run()
    return net


@pytest.mark.parametrize("make", [_two_rounds, _faulty_fedrec])
def test_a_traced_run_on_a_streaming_ledger_gives_the_same_views(make):
    # TracingNetwork counted its rows with len(ledger.rows), which a StreamingLedger does not have:
    # every send of a traced run on one failed (ActorError: AttributeError)
    from fedsim.kernel import StreamingLedger

    mem, stream = make(), make(StreamingLedger(chunk_rows=1))
    t = mem.ledger.totals()
    assert len(mem.payloads) == t["messages"] == len(stream.ledger) > 0
    if make is _faulty_fedrec:  # the faults and the deadline must bite for the test to mean anything
        assert t["lost_messages"] > 0 and t["missing"] > 0
    else:  # one read a round later (row 3), one discarded unread (row 6)
        assert mem.read_at[3] > mem.read_at[2] and t["unread_messages"] == 1
    assert stream.payloads == mem.payloads
    assert stream.ledger.to_csv() == mem.ledger.to_csv()
    assert stream.ledger.totals() == mem.ledger.totals()
    assert (stream.read_at, stream.lost_at, stream.happened) == (mem.read_at, mem.lost_at, mem.happened)
    for view in (step_log, mermaid, timeline_svg, trace_html):
        assert view(stream) == view(mem), view.__name__


def test_an_untraced_network_that_deadlocked_shows_its_deadlock_after_the_last_send():
    # only a TracingNetwork kept its RunResult: the views of a SimNetwork that did not trace and
    # deadlocked said nothing of the deadlock (blocked_events was empty), and _sequence ranked a
    # deadlock note of such a network before the messages sent at its time, while the step log
    # put it after them. Every network keeps its result now; the deadlock comes last, traced or not
    from fedsim.kernel import DeadlockError, SimNetwork

    async def server(ctx):
        await ctx.sleep(0.01)
        await ctx.send("c", "x", {"v": 1})  # sent (and arrived: ideal link) at the deadlock's time
        await ctx.receive("y")

    async def c(ctx):
        await ctx.receive("z")

    def run(net):
        net.add_node("server", server, role="server")
        net.add_node("c", c, role="client")
        with pytest.raises(DeadlockError) as info:
            net.run()
        assert net.result is info.value.result
        return net, info.value

    untraced, exc = run(SimNetwork(seed=0))
    assert untraced.happened == [] and exc.time == 0.01
    assert exc.blocked == {"server": "receive 'y'", "c": "receive 'z'"}
    waits = ["deadlock#58; still waiting at the end (10.000 ms) in receive 'z'",
             "deadlock#58; still waiting at the end (10.000 ms) in receive 'y'"]
    arrow = "    N0->>N1: x 7 B, sent 10.000 ms, arrived 10.000 ms, never read"
    assert mermaid(untraced).splitlines()[3:] == ["    Note over N0: round 0", arrow,
                                                  f"    Note over N1: {waits[0]}", f"    Note over N0: {waits[1]}"]
    data = _page_data(trace_html(untraced))
    assert data["sequence"] == [["msg", 0], ["blocked", 0], ["blocked", 1]]
    assert [(b["node"], b["time"], b["waits"]) for b in data["blocked"]] == [
        ("c", 0.01, "receive 'z'"), ("server", 0.01, "receive 'y'")]
    deadlock = "is still waiting when the run ends, with nothing left that could wake it (deadlock)"
    assert step_log(untraced).splitlines() == [
        "      10.000 ms  server sends x (round 0, 7 B) to c",
        "      10.000 ms  c receives x (round 0) from server (never read)",
        f"      10.000 ms  c {deadlock}: receive 'z'",
        f"      10.000 ms  server {deadlock}: receive 'y'"]
    traced, _ = run(TracingNetwork(seed=0))
    assert mermaid(traced) == mermaid(untraced)
    assert _page_data(trace_html(traced))["sequence"] == data["sequence"]
    assert step_log(traced).splitlines()[1:] == step_log(untraced).splitlines()


def test_a_wait_given_up_is_one_group_and_one_note_whatever_number_types_its_records_hold():
    # missing_events grouped ledger.missing by (m.time, ..., m.round) as they were, _missing_positions
    # by (float(m.time), ..., int(m.round)), and the views looked the groups up by the latter: two
    # spellings of one key. A numpy time or round hashes and compares as its Python value, so they
    # agreed, but nothing kept them so: one helper (_missing_key) now makes both keys. Records of
    # one wait whose times are a float and a numpy float64 (a transport's clock), rounds an int and
    # a numpy int64, are one wait in every view, placed as the traced run placed it
    import dataclasses

    import numpy as np

    from fedsim.studies.trace import missing_events

    async def server(ctx):
        await ctx.send("c", "go", {"x": 0})
        await ctx.gather("up", senders=["c", "d"], timeout=0.01)
        await ctx.send("c", "done", {"x": 1})

    async def idle(ctx):
        await ctx.receive("done")

    net = TracingNetwork(seed=0)
    net.add_node("server", server, role="server")
    net.add_node("c", idle, role="client")
    net.add_node("d", idle, role="client", offline_at=0.02)
    net.run(strict=False)
    assert [(m.sender, m.time) for m in net.ledger.missing] == [("c", 0.01), ("d", 0.01)]
    views = [view(net) for view in (step_log, mermaid, trace_html)]
    assert "      10.000 ms  server stops waiting for up (round 0): 2 of 2 missing (nothing from c, d)" in views[0].splitlines()
    m0, m1 = net.ledger.missing
    net.ledger.missing[:] = [dataclasses.replace(m0, time=np.float64(m0.time), round=np.int64(m0.round),
                                                 wait=np.int64(m0.wait)), m1]
    groups = missing_events(net)
    assert groups == [{"time": 0.01, "receiver": "server", "kind": "up", "round": 0, "wait": 1, "senders": ["c", "d"],
                       "anonymous": 0, "expected": 2, "arrived": 0}]
    assert type(groups[0]["time"]) is float and type(groups[0]["round"]) is int and type(groups[0]["wait"]) is int
    assert [view(net) for view in (step_log, mermaid, trace_html)] == views


def test_cli_trace_stopped_by_a_real_file_size_limit_names_the_file_it_was_writing(tmp_path):
    # a disk that really fills up (or RLIMIT_FSIZE, here 20000 bytes: less than trace.html's 35 kB)
    # fails in write() or close(), whose OSError names no file: the line said "File too large; its
    # output folder t was not written", not which file (tests/test_disk_full_real.py: a real tmpfs)
    import resource
    import subprocess
    import sys

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))  # (Python ignores SIGXFSZ: EFBIG)

    r = subprocess.run([sys.executable, "-m", "fedsim", "trace", "demo", "--out", "t"], capture_output=True, text=True,
                       cwd=tmp_path, timeout=180, preexec_fn=limit)
    (partial,) = re.findall(r"writing (\.t\.partial-\d+-[0-9a-f]+)/", r.stderr)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", (
        f"error: the trace stopped: File too large writing {partial}/trace.html; its output folder t was not written "
        "(a file grew larger than the file system or the file size limit (ulimit -f) allows; raise the limit, or "
        "choose an --out on another file system)\n"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("errno_name, advice", [
    ("ENOSPC", "free some space, or choose another --out"),
    ("EFBIG", "a file grew larger than the file system or the file size limit (ulimit -f) allows; raise the "
              "limit, or choose an --out on another file system"),
])
def test_cli_trace_on_a_full_disk_is_one_error_line_and_no_folder(errno_name, advice, monkeypatch, tmp_path, capsys):
    # trace.html written, then the disk full while steps.log was: Python's traceback, where
    # fedsim run says it in one line
    import errno
    import pathlib

    from fedsim.cli import main

    real = pathlib.Path.write_text
    code = getattr(errno, errno_name)

    def write_text(self, *args, **kwargs):
        if self.name == "steps.log" or self.name.startswith(".steps.partial-"):  # (written beside, renamed in)
            raise OSError(code, os.strerror(code), str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "write_text", write_text)
    monkeypatch.chdir(tmp_path)
    assert main(["trace", "demo", "--out", "t"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    (partial,) = re.findall(r"writing (\.t\.partial-[^/ ]+/steps\.log);", err)
    assert err == (f"error: the trace stopped: {os.strerror(code)} writing {partial}; its output folder t was not "
                   f"written ({advice})\n")
    assert list(tmp_path.iterdir()) == []


class _Arrows(HTMLParser):
    """The sequence diagram's message groups (``<g class="msg" data-i=...>``) in document order,
    with the texts of each."""

    def __init__(self):
        super().__init__()
        self.order, self.text, self._depth, self._cur = [], {}, 0, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if self._cur is not None and tag == "g":
            self._depth += 1
        elif tag == "g" and "msg" in (a.get("class") or "").split():
            self._cur, self._depth = int(a["data-i"]), 0
            self.order.append(self._cur)
            self.text[self._cur] = []

    def handle_endtag(self, tag):
        if self._cur is not None and tag == "g":
            if self._depth == 0:
                self._cur = None
            else:
                self._depth -= 1

    def handle_data(self, data):
        if self._cur is not None and data.strip():
            self.text[self._cur].append(data.strip())


def _round_text(rnd: int) -> str:
    return f"round {rnd}" if rnd >= 0 else "setup" if rnd == -1 else f"setup for round {-1 - rnd}"


def assert_page_holds_the_ledger(html: str, net) -> dict:
    """The page's data holds each ledger message once, in ledger order, with its fields and times
    as the ledger has them, and its sequence diagram one arrow per message labelled with its kind,
    size and fate (as the network read it); returns the page's data."""
    from fedsim.experiment import human_bytes

    rows = list(net.ledger.records())
    data = _page_data(html)
    nan = lambda v: None if v != v else v  # noqa: E731
    assert [(m["i"], m["src"], m["dst"], m["kind"], m["round"], m["round_label"], m["bytes"], m["raw_bytes"],
             m["status"], m["read"], m["note"], m["send"], m["tx_start"], m["tx_end"], m["rx_start"], m["arrival"])
            for m in data["messages"]] == \
        [(i, r["src"], r["dst"], r["kind"], r["round"], _round_text(r["round"]), r["bytes"], r["raw_bytes"],
          r["status"], r["read"], r["note"], nan(r["send_time"]), nan(r["tx_start"]), nan(r["tx_end"]),
          nan(r["rx_start"]), nan(r["arrival_time"])) for i, r in enumerate(rows)]
    assert sum(m["bytes"] for m in data["messages"]) == net.ledger.totals()["bytes"]
    # one arrow per message, in ledger order, labelled with its kind, size and fate
    arrows = _Arrows()
    arrows.feed(html)
    assert arrows.order == list(range(len(rows)))
    for i, r in enumerate(rows):
        read = net.read_at.get(r["seq"])
        later = read is not None and read > r["arrival_time"]  # taken from the mailbox, or a gather's end
        fate = " · LOST" if r["status"] == "lost" else " · never read" if not r["read"] else \
            f" · read {read * 1000:.3f} ms" if later else ""
        # (an anonymous message's arrow twice: from its sender and, as the receiver sees it, from the
        # anonymous lane; a lost one ends in a cross)
        one = (["✕"] if r["status"] == "lost" else []) + [f"{r['kind']} · {human_bytes(r['bytes'])}{fate}"]
        assert arrows.text[i] == one * (2 if r["anonymous"] else 1), i
    return data


@pytest.mark.parametrize("name", ["demo", "fcf", "fedavg-ae", "fedrecpp", "fpl", "personalfr"])
def test_a_faulty_trace_of_every_protocol_shows_each_ledger_message_once_in_time_order_with_its_fate(name, tmp_path):
    # (fedrec's faulty trace: test_a_faulty_fedrec_trace_with_secure_aggregation_matches_its_ledger)
    from fedsim.experiment import human_bytes
    from fedsim.kernel import NetSpec

    net, paths = trace(name, tmp_path, clients=4, rounds=2, sets=["deadline=1"], formats=("html", "log"),
                       net=NetSpec(profile="lan", loss=0.3, dropout=0.3, window=(0.0, 0.01)))
    rows = list(net.ledger.records())
    totals = net.ledger.totals()
    assert totals["lost_messages"] > 0 and totals["missing"] > 0 and net.result.offline
    sends = [r["send_time"] for r in rows]
    assert sends == sorted(sends)  # the ledger's order, the page's, is the order of sending
    html = paths["html"].read_text()
    assert_page_holds_the_ledger(html, net)
    assert (f" · {len(rows)} messages ({totals['lost_messages']} lost), {human_bytes(totals['bytes'])} on the wire; "
            f"{totals['missing']} message{'s' if totals['missing'] != 1 else ''} missing at a deadline; "
            f"{len(net.result.offline)} node{'s' if len(net.result.offline) != 1 else ''} offline. ") in html
    # the step log: in time order, each message's send once, and its arrival or loss, never both
    log = paths["log"].read_text().splitlines()
    times = [float(line.split(" ms  ")[0]) for line in log]
    assert times == sorted(times)
    body = [line.split(" ms  ", 1)[1] for line in log]
    stamps = [line.split(" ms  ", 1)[0].strip() for line in log]
    ms = lambda t: f"{t * 1000:.3f}"  # noqa: E731
    sent, received, lost = Counter(), Counter(), Counter()
    for r in rows:
        rnd = _round_text(r["round"])
        anon = " anonymously" if r["anonymous"] else ""
        sent[ms(r["send_time"]), f"{r['src']} sends {r['kind']} ({rnd}, {r['bytes']} B){anon} to {r['dst']}"] += 1
        if r["status"] == "delivered":
            received[ms(r["arrival_time"]), f"{r['dst']} receives {r['kind']} ({rnd}) from "
                                            f"{'(anonymous)' if anon else r['src']}{'' if r['read'] else ' (never read)'}"] += 1
        else:
            assert r["status"] == "lost"
            lost[f"{r['kind']} ({rnd}) from {r['src']} to {r['dst']} (sent at {ms(r['send_time'])} ms) is lost "
                 f"({r['note']})"] += 1
    lines = list(zip(stamps, body))
    assert Counter(line for line in lines if " sends " in line[1]) == sent
    assert Counter(line for line in lines if " receives " in line[1]) == received
    assert Counter(b for b in body if " is lost (" in b) == lost
    assert sum(received.values()) == totals["delivered_messages"] and sum(lost.values()) == totals["lost_messages"]
    assert sorted(b.split(" drops out")[0] for b in body if " drops out " in b) == sorted(net.result.offline)
    missing = [b for b in body if " stops waiting for " in b]
    # each wait: "n of m missing (nothing from a, b)" (n names) or "n of m missing (any sender)"
    count = 0
    for b in missing:
        n, m, what = re.fullmatch(r".* stops waiting for .*?: (\d+) of (\d+) missing \((.*)\)", b).groups()
        assert int(n) <= int(m)
        assert what == "any sender" or (what.startswith("nothing from ") and len(what.split(", ")) == int(n))
        count += int(n)
    assert count == totals["missing"]


def test_cli_trace_refuses_an_out_it_cannot_use_in_one_line_and_leaves_it_as_it_was(monkeypatch, tmp_path, capsys):
    import pathlib

    from fedsim.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    (tmp_path / "afile").write_text("x")

    def refused(argv):
        assert main(["trace", "demo"] + argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("error: ") and err.count("\n") == 1
        return err

    assert refused(["--out", "used"]) == ("error: --out used already holds files; use --force to replace it, or "
                                          "choose another --out\n")
    assert refused(["--out", "afile"]) == "error: --out afile is a file, not a folder\n"
    # a file where a folder of the path should be: mkdir's "File exists" named no file
    assert refused(["--out", "afile/sub/t"]) == "error: --out afile/sub/t: cannot write there (afile is a file, not a folder)\n"
    real = pathlib.Path.mkdir

    def mkdir(self, *args, **kwargs):
        if self.name.startswith(".t.partial-"):
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", mkdir)
    assert refused(["--out", "ro/t"]) == "error: --out ro/t: cannot write there (Permission denied)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "used"]
    assert [p.name for p in (tmp_path / "used").iterdir()] == ["notes.txt"]
    assert (tmp_path / "used" / "notes.txt").read_text() == "mine" and (tmp_path / "afile").read_text() == "x"


def test_trace_writes_each_file_whole_or_not_at_all(tmp_path):
    # a file size limit (or a full disk) reached while trace.html was written left a truncated
    # page in place of the one the folder held: each file is written beside and renamed in
    import resource
    import subprocess
    import sys

    out = tmp_path / "t"
    out.mkdir()
    (out / "trace.html").write_text("the previous page")
    limit = 16_000  # (the demo's page is some 25 kB, its step log 2 kB)

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    code = ("import sys; from fedsim.studies.trace import trace\n"
            "try:\n    trace('demo', sys.argv[1], formats=('log', 'html'))\n"
            "except OSError as exc:\n    print(exc.errno, type(exc).__name__); sys.exit(3)\n")
    res = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=120,
                         preexec_fn=small_files, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    import errno

    assert (res.returncode, res.stdout) == (3, f"{errno.EFBIG} OSError\n"), res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["steps.log", "trace.html"]
    assert (out / "trace.html").read_text() == "the previous page"
    log = (out / "steps.log").read_text()
    assert log.endswith("\n") and log.count(" sends ") == log.count(" receives ") > 0


def test_a_wait_given_up_says_how_many_of_how_many_only_when_its_records_say_so():
    # the step panel said "2 messages missing" and never "of 5": the records did not keep the
    # wait's size (Missing.expected/arrived now do). Two waits of one receiver, kind and round
    # that give up at one instant are two notes, each with its count (Missing.wait: see
    # test_two_waits_given_up_at_one_instant_keep_their_own_counts); records made by hand without
    # the wait's number fall into one group, whose counts do not add up to one wait's: it says none
    import dataclasses

    from fedsim.studies.trace import event_step, missing_events

    async def server(ctx):
        dl = ctx.deadline(0.01)
        await ctx.gather("up", senders=["a", "c"], deadline=dl)
        await ctx.gather("up", senders=["d"], deadline=dl)  # the same instant: nothing left to wait
        await ctx.gather("any", count=3, timeout=0.01)

    async def a(ctx):
        await ctx.send("server", "up", {"x": 1})
        await ctx.send("server", "any", {"x": 1}, anonymous=True)

    async def idle(ctx):
        return None

    net = TracingNetwork(seed=0)
    net.add_node("server", server, role="server", link=LinkSpec(latency=0.001))
    for n in ("a", "c", "d"):
        net.add_node(n, a if n == "a" else idle, role="client", link=LinkSpec(latency=0.001))
    net.run()
    assert [(m.sender, m.kind, m.expected, m.arrived, m.wait) for m in net.ledger.missing] == [
        ("c", "up", 2, 1, 1), ("d", "up", 1, 0, 2), (None, "any", 3, 1, 3), (None, "any", 3, 1, 3)]
    groups = missing_events(net)
    assert [(g["senders"], g["anonymous"], g["expected"], g["arrived"]) for g in groups] == [
        (["c"], 0, 2, 1), (["d"], 0, 1, 0), ([], 2, 3, 1)]
    assert [line.split(" ms  ")[1] for line in step_log(net).splitlines() if " stops waiting " in line] == [
        "server stops waiting for up (round 0): 1 of 2 missing (nothing from c)",
        "server stops waiting for up (round 0): 1 of 1 missing (nothing from d)",
        "server stops waiting for any (round 0): 2 of 3 missing (any sender)"]
    assert [event_step("missing", g)["text"] for g in groups] == [
        "server gives up waiting for up (round 0) at 10.000 ms: 1 of 2 messages missing (nothing from c)",
        "server gives up waiting for up (round 0) at 10.000 ms: 1 of 1 message missing (nothing from d)",
        "server gives up waiting for any (round 0) at 20.000 ms: 2 of 3 messages missing (from any sender)"]
    # records made by hand without the waits' numbers: the two waits of up are one group
    net.ledger.missing[:] = [dataclasses.replace(m, wait=None) for m in net.ledger.missing]
    groups = missing_events(net)
    assert [(g["senders"], g["anonymous"], g["expected"], g["arrived"], g["wait"]) for g in groups] == [
        (["c", "d"], 0, None, None, None), ([], 2, 3, 1, None)]
    assert [line.split(" ms  ")[1] for line in step_log(net).splitlines() if " stops waiting " in line] == [
        "server stops waiting for up (round 0): nothing from c, d",
        "server stops waiting for any (round 0): 2 of 3 missing (any sender)"]
    assert event_step("missing", groups[0])["text"] == (
        "server gives up waiting for up (round 0) at 10.000 ms: 2 messages missing (nothing from c, d)")
    # records made without the counts: the views as before
    net.ledger.missing[:] = [dataclasses.replace(m, expected=None, arrived=None) for m in net.ledger.missing]
    assert [(g["expected"], g["arrived"]) for g in missing_events(net)] == [(None, None), (None, None)]
    assert [event_step("missing", g)["text"] for g in missing_events(net)][1] == (
        "server gives up waiting for any (round 0) at 20.000 ms: 2 messages missing (2 more from any sender)")


async def _two_waits_per_instant(ctx):
    """Two gathers of "up" in round 0 with one deadline (the second finds it passed: it takes
    what is in the mailbox, nothing, and gives up at the same instant), then two of "any" alike."""
    dl = ctx.deadline(0.01)
    await ctx.gather("up", senders=["a", "c"], deadline=dl)  # a's arrives, c's never: 1 of 2
    await ctx.gather("up", senders=["d", "e"], deadline=dl)  # 2 of 2
    dl = ctx.deadline(0.01)
    await ctx.gather("any", count=2, deadline=dl)  # a's anonymous one: 1 of 2
    await ctx.gather("any", count=3, deadline=dl)  # 3 of 3


async def _sends_up_and_any(ctx):
    await ctx.send("server", "up", {"x": 1})
    await ctx.send("server", "any", {"x": 1}, anonymous=True)


async def _idle(ctx):
    return None


def _two_waits_net(net):
    for n, actor in (("server", _two_waits_per_instant), ("a", _sends_up_and_any), ("c", _idle), ("d", _idle),
                     ("e", _idle)):
        net.add_node(n, actor, role="server" if n == "server" else "client", link=LinkSpec(latency=0.001))
    return net


@pytest.mark.parametrize("transport", ["sim", "asyncio"])
def test_two_waits_given_up_at_one_instant_keep_their_own_counts(transport):
    # two waits of one receiver, kind and round that gave up at one instant were one note of
    # the views, "nothing from c, d, e" with no count (their records' 1 of 2 and 2 of 2 did not
    # add up to one wait's): nothing told the waits apart. Each record now names its wait (the
    # receiver's gathers numbered in the order its actor began them, Missing.wait), the same on
    # every transport, and each wait is a note of its own with its count
    from fedsim.kernel import AsyncioNetwork
    from fedsim.studies.trace import event_step, missing_events

    net = _two_waits_net(TracingNetwork(seed=0) if transport == "sim" else AsyncioNetwork(seed=0, time_scale=1.0))
    net.run() if transport == "sim" else net.run(timeout=20)
    assert [(m.sender, m.kind, m.expected, m.arrived, m.wait) for m in net.ledger.missing] == [
        ("c", "up", 2, 1, 1), ("d", "up", 2, 0, 2), ("e", "up", 2, 0, 2),
        (None, "any", 2, 1, 3), (None, "any", 3, 0, 4), (None, "any", 3, 0, 4), (None, "any", 3, 0, 4)]
    groups = missing_events(net)
    assert [(g["senders"], g["anonymous"], g["expected"], g["arrived"], g["wait"]) for g in groups] == [
        (["c"], 0, 2, 1, 1), (["d", "e"], 0, 2, 0, 2), ([], 1, 2, 1, 3), ([], 3, 3, 0, 4)]
    texts = [event_step("missing", g)["text"].split(" ms: ")[1] for g in groups]
    assert texts == ["1 of 2 messages missing (nothing from c)", "2 of 2 messages missing (nothing from d, e)",
                     "1 of 2 messages missing (from any sender)", "3 of 3 messages missing (from any sender)"]
    if transport != "sim":
        return
    # on the simulator both pairs gave up at one instant: 10 and 20 ms
    assert [g["time"] for g in groups] == [0.01, 0.01, 0.02, 0.02]
    assert [line for line in step_log(net).splitlines() if " stops waiting " in line] == [
        "      10.000 ms  server stops waiting for up (round 0): 1 of 2 missing (nothing from c)",
        "      10.000 ms  server stops waiting for up (round 0): 2 of 2 missing (nothing from d, e)",
        "      20.000 ms  server stops waiting for any (round 0): 1 of 2 missing (any sender)",
        "      20.000 ms  server stops waiting for any (round 0): 3 of 3 missing (any sender)"]
    assert [line.split(": ", 1)[1] for line in mermaid(net).splitlines() if "stops waiting" in line] == [
        "stops waiting for up (round 0)#58; 1 of 2 missing (nothing from c), at 10.000 ms",
        "stops waiting for up (round 0)#58; 2 of 2 missing (nothing from d, e), at 10.000 ms",
        "stops waiting for any (round 0)#58; 1 of 2 missing (any sender), at 20.000 ms",
        "stops waiting for any (round 0)#58; 3 of 3 missing (any sender), at 20.000 ms"]
    data = _page_data(trace_html(net))
    assert [s for s in data["sequence"] if s[0] == "missing"] == [["missing", i] for i in range(4)]
    assert [s["text"].split(" ms: ")[1] for s in data["steps"]["missing"]] == texts
