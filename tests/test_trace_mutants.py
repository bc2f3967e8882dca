"""Tests written from a hand mutation-testing pass over ``fedsim trace`` (fedsim/studies/trace.py:
the cuts of long traces to whole rounds and what each view says of them, the order of notes
among messages, the counts of waits given up, Mermaid's escaping and limit, the SVG's bounds,
round labels, atomic writing, ``--eval``): each one fails with a specific mutant of the code
applied (named in its docstring) and checks the views against an independent computation (the
run's ledger, hand-computed expectations), never against trace.py's own output."""

from __future__ import annotations

import json
import re

import pytest

from fedsim.kernel import LinkSpec
from fedsim.studies.trace import TracingNetwork


def _page_data(html: str) -> dict:
    m = re.search(r'<script id="trace-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(m.group(1))


def _rounds_net(counts, offline_at=None, link=None, kind="m"):
    """A traced run in which the server sends ``counts[r]`` messages ``kind`` to client c in
    round r, one a millisecond (it sleeps 1 ms after each: message i is sent at i ms and arrives
    1 ms later); a node d (whose actor returns at once) goes offline at ``offline_at``."""
    total = sum(counts)

    async def server(ctx):
        for r, n in enumerate(counts):
            ctx.begin_round(r)
            for j in range(n):
                await ctx.send("c", kind, {"j": j})
                await ctx.sleep(0.001)

    async def c(ctx):
        for _ in range(total):
            await ctx.receive(kind)

    async def d(ctx):
        return

    net = TracingNetwork(seed=0)
    net.add_node("server", server, role="server", link=link or LinkSpec(latency=0.0005))
    net.add_node("c", c, role="client", link=link or LinkSpec(latency=0.0005))
    if offline_at is not None:
        net.add_node("d", d, role="client", offline_at=offline_at)
    net.run()
    rows = list(net.ledger.records())
    assert [r["round"] for r in rows] == [r for r, n in enumerate(counts) for _ in range(n)]
    assert [r["send_time"] for r in rows] == pytest.approx([i / 1000 for i in range(total)])
    return net


# ---------------------------------------------------------------------------------------------
# the cut of a long trace to whole rounds


def test_first_rounds_keeps_whole_rounds_up_to_the_limit():
    """Mutants: ``first_rounds`` cutting a trace of exactly ``limit`` messages (``n < limit``);
    not counting a round that starts at message ``limit`` (``range(limit - 1, ...)``: a round
    less); giving ``limit - 1`` messages when the first round alone is longer; taking a limit of 0."""
    from fedsim.studies.trace import first_rounds

    rounds = [0, 0, 0, 1, 1, 2, 2, 2]  # rounds start at messages 3 and 5
    # by hand: the last start of a round at or below the limit, all when they fit, the first round cut at the limit
    assert [first_rounds(rounds, k) for k in range(1, 11)] == [1, 2, 3, 3, 5, 5, 5, 8, 8, 8]
    with pytest.raises(ValueError, match=r"^a view shows at least one message, got limit 0$"):
        first_rounds(rounds, 0)


def test_a_page_cut_between_rounds_shows_and_says_exactly_the_first_whole_rounds():
    """Mutants: ``page_cut`` cutting a run of exactly ``limit`` messages; keeping the sequence's
    row of the first message left out; keeping a computation that starts at the cut's send time,
    or a node going offline after it (drawn on the timeline); drawing the timeline to the run's end;
    naming the first message left out's round as the last shown's; ``the other N`` and ``the first
    N`` off by one; the header's counts and bytes of the page, not the run's."""
    from fedsim.studies.trace import trace_html

    net = _rounds_net([3, 2, 3], offline_at=0.0065)
    rows = list(net.ledger.records())
    whole = trace_html(net, limit=8)
    assert _page_data(whole)["cut"] is None and 'id="cut"' not in whole
    assert whole.count('class="span offline"') == 1  # (d goes offline at 6.5 ms)

    page = trace_html(net, limit=6)  # rounds 0 and 1 (5 messages) fit, round 2 does not
    data = _page_data(page)
    assert [(m["src"], m["dst"], m["round"]) for m in data["messages"]] == [(r["src"], r["dst"], r["round"]) for r in rows[:5]]
    assert data["sequence"] == [["msg", i] for i in range(5)]  # (d's note, at 6.5 ms, comes after message 5)
    assert data["cut"] == {"shown": 5, "total": 8, "at": rows[5]["send_time"], "last_shown": "round 1",
                           "first_cut": "round 2", "whole": True, "limit": 6}
    # the server sleeps after each of its 5 messages shown; the sleep after message 5 starts at its send
    assert len(data["compute"]) == 5 and page.count('class="span sleeping"') == 5
    assert page.count('class="span offline"') == 0 and page.count('class="msg') == 5
    assert data["end"] == rows[5]["send_time"] and ">simulated time, 0 to 5.000 ms</text>" in page
    assert ("<b>Cut:</b> this page shows the first 5 of the run's 8 messages (to round 1, sent before 5.000 ms); "
            "the other 3 (round 2 and every round after it) are left out to keep the page usable (at most 6 "
            "messages).") in page
    # the header: the run's 8 messages of 7 B, not the page's 5, and d going offline after the cut
    assert " · 8 messages, 56 B on the wire; 1 node offline. " in page
    assert sum(r["bytes"] for r in rows) == 56


def _js_len(s: str) -> int:  # (Mermaid's maxTextSize counts JavaScript's UTF-16 units)
    return len(s.encode("utf-16-le")) // 2


def _mermaid_cut_note(shown: str, rest: str, limit: int) -> str:
    """The note a cut sequence.mmd ends with, as the docstring of ``mermaid_view`` has it, in
    Mermaid's entity codes (``#58;`` for ``:``, ``#59;`` for ``;``)."""
    return (f"    Note over N0: cut#58; this diagram shows {shown}#59; {rest} and every round after it are left out "
            f"(with their notes) to stay within Mermaid's {limit}-character limit#59; steps.log has every message")


def _limit_for(prefix: list[str], shown: str, rest: str) -> int:
    """The least limit of a sequence.mmd that holds the lines ``prefix`` and the cut note after them."""
    for digits in (3, 4, 5):
        limit = _js_len("\n".join(prefix) + "\n") + _js_len(_mermaid_cut_note(shown, rest, 10 ** (digits - 1))) + 1
        if len(str(limit)) == digits:
            return limit
    raise AssertionError(prefix)


def test_sequence_mmd_keeps_the_whole_rounds_that_fit_with_its_note_in_utf16_units():
    """Mutants: a diagram of exactly ``limit`` characters cut (``< limit``); lengths counted in code
    points, not UTF-16 units (a kind with an emoji: Mermaid's limit passed); the cut ignoring
    its note's length, or its newline (the file one character over the limit); the cut not at the
    last whole round that fits (a message of round 2 kept)."""
    from fedsim.studies.trace import mermaid

    net = _rounds_net([3, 2, 6], kind="m\N{GRINNING FACE}")  # rounds 1 and 2 start at messages 3 and 5
    full = mermaid(net, limit=10**6)
    assert "\N{GRINNING FACE}" in full and _js_len(full) > len(full)
    assert mermaid(net, limit=_js_len(full)) == full
    lines = full.splitlines()
    assert lines[-1].startswith("    N0->>N1: ")  # (no cut note)

    def cut_at(round_note: str) -> list[str]:  # the lines before the note opening that round
        return lines[:lines.index(f"    Note over N0: {round_note}")]

    two = cut_at("round 2")
    shown2, rest2 = "the first 5 of the run's 11 messages (to round 1)", "round 2"
    at2 = _limit_for(two, shown2, rest2)
    assert at2 < _js_len(full)
    assert mermaid(net, limit=at2) == "\n".join(two + [_mermaid_cut_note(shown2, rest2, at2)]) + "\n"
    one = cut_at("round 1")
    shown1, rest1 = "the first 3 of the run's 11 messages (to round 0)", "round 1"
    for limit in (at2 - 1, _limit_for(one, shown1, rest1)):
        text = mermaid(net, limit=limit)
        assert text == "\n".join(one + [_mermaid_cut_note(shown1, rest1, limit)]) + "\n"
        assert _js_len(text) <= limit
    # room for the first 6 messages (one of round 2) but not for all of round 2: still the first 5
    six = lines[:len(two) + 2]
    assert six[-1].startswith("    N0->>N1: ") and six[-2] == "    Note over N0: round 2"
    roomy = _limit_for(six, shown2, rest2)
    assert mermaid(net, limit=roomy) == "\n".join(two + [_mermaid_cut_note(shown2, rest2, roomy)]) + "\n"
    for limit in range(_limit_for(one, shown1, rest1) - 3, _js_len(full) + 1, 7):
        assert _js_len(mermaid(net, limit=limit)) <= limit


def test_sequence_mmd_of_one_long_round_keeps_its_first_messages_and_says_the_rest_is_left_out():
    """Mutants: the cut never keeping all but the last message (``range(1, n - 1)``); ``the rest
    of`` said of a cut between rounds and not of one inside a round; ``(to round N)`` naming the
    first message left out's round. (A kind of 400 characters: a message's line longer than the note.)"""
    from fedsim.studies.trace import mermaid

    net = _rounds_net([4], kind="k" * 400)
    lines = mermaid(net, limit=10**6).splitlines()
    assert lines[3] == "    Note over N0: round 0" and len(lines) == 8
    shown, rest = "the first 3 of the run's 4 messages (to round 0)", "the rest of round 0"
    limit = _limit_for(lines[:7], shown, rest)
    assert mermaid(net, limit=limit) == "\n".join(lines[:7] + [_mermaid_cut_note(shown, rest, limit)]) + "\n"


def test_sequence_mmd_writes_ampersands_brackets_and_mermaids_placeholders_as_entity_codes():
    """Mutants: ``&`` left as it is (Mermaid reads ``&lt;`` in a label as HTML: a kind ``a&lt;b``
    was drawn ``a<b``); Mermaid's own placeholder characters left as they are (it turns
    ``ﬂ°°`` back into ``&`` and ``¶ß`` into ``;`` after parsing: a kind holding them was drawn
    with other characters). Codes by hand: ``&`` 38, ``<`` 60, ``>`` 62, ``ﬂ`` 64258, ``°`` 176,
    ``¶`` 182, ``ß`` 223."""
    from fedsim.studies.trace import mermaid

    async def sender(ctx):
        await ctx.send("s", "a&lt;b>\ufb02\xb0\xb0\xb6\xdf", {"n": 1})

    async def receiver(ctx):
        await ctx.receive()

    net = TracingNetwork(seed=0)
    net.add_node("c", sender, role="cl&lt;nt")
    net.add_node("s", receiver, role="server")
    net.run()
    (row,) = net.ledger.records()
    lines = mermaid(net).splitlines()
    assert lines[2] == "    participant N1 as c (cl#38;lt#59;nt)"
    assert lines[4] == (f"    N1->>N0: a#38;lt#59;b#62;#64258;#176;#176;#182;#223; {row['bytes']} B, "
                        f"sent {row['send_time'] * 1000:.3f} ms, arrived {row['arrival_time'] * 1000:.3f} ms")


def test_a_lost_message_is_an_arrow_ending_in_a_cross_in_sequence_mmd():
    """Mutant: a lost message drawn as an arrow that arrives (``->>``), not one ending in a cross
    (``-x``), its label saying LOST and why, as the ledger has it."""
    from fedsim.studies.trace import mermaid

    async def sender(ctx):
        await ctx.send("s", "up", {"n": 1})

    async def receiver(ctx):
        await ctx.gather("up", senders=["c"], timeout=0.01)

    net = TracingNetwork(seed=0)
    net.add_node("c", sender, role="client", loss=1.0)
    net.add_node("s", receiver, role="server")
    net.run()
    (row,) = net.ledger.records()
    assert row["status"] == "lost" and row["note"]
    arrows = [line for line in mermaid(net).splitlines() if line.startswith("    N1")]
    assert arrows == [f"    N1-xN0: up {row['bytes']} B, sent 0.000 ms, LOST {row['note']}"]


# ---------------------------------------------------------------------------------------------
# the timelines


def _svg_rects(svg: str) -> list[tuple[float, float, str]]:
    """(x, width, title) of each span of a timeline.svg (the legend's rects have no title)."""
    return [(float(x), float(w), t) for x, w, t in
            re.findall(r'<rect x="([\d.]+)" y="[\d.]+" width="([\d.]+)" height="18" fill="[^"]*" '
                       r'opacity="0.85"><title>([^<]*)</title></rect>', svg)]


def test_timeline_svg_cut_draws_only_the_first_whole_rounds_up_to_the_first_send_left_out():
    """Mutants: the timelines cut at ``limit + 1`` (round 1 drawn); a computation starting at the
    first send left out drawn; a node going offline after it drawn; a node offline before it drawn
    to the run's end, not to the cut; the cut line saying ``the rest of`` a round it leaves out
    whole (or not of one it cuts), or naming the first round left out as the last shown."""
    from fedsim.studies.trace import timeline_svg

    for offline_at, drawn in ((0.0025, ["offline 2.500-3.000 ms"]), (0.0065, [])):
        net = _rounds_net([3, 2, 3], offline_at=offline_at)
        svg = timeline_svg(net, limit=4)  # round 0's 3 messages, cut at the send of message 3 (3 ms)
        titles = [t for _, _, t in _svg_rects(svg)]
        assert sorted(t for t in titles if t.startswith("sending")) == [f"sending {i}.000-{i}.000 ms" for i in range(3)]
        assert sorted(t for t in titles if t.startswith("receiving")) == \
            [f"receiving {i}.000-{i}.000 ms" for i in range(1, 4)]
        assert sorted(t for t in titles if t.startswith("sleep")) == [f"sleep {i}.000-{i + 1}.000 ms" for i in range(3)]
        assert [t for t in titles if t.startswith("offline")] == drawn
        assert len(titles) == 9 + len(drawn)
        assert svg.count('stroke="#8C8C8C" stroke-width="0.8"') == 3  # the arrows of the messages drawn
        assert ">simulated time, 0 to 3.000 ms</text>" in svg
        assert ('>Cut: the first 3 of the run\'s 8 messages (to round 0, sent before 3.000 ms); round 1 and every '
                'round after it left out: steps.log has every message</text>') in svg
    svg = timeline_svg(net, limit=2)  # inside round 0
    assert len([t for _, _, t in _svg_rects(svg) if t.startswith("sending")]) == 2
    assert ('>Cut: the first 2 of the run\'s 8 messages (to round 0, sent before 2.000 ms); the rest of round 0 and '
            'every round after it left out: steps.log has every message</text>') in svg


def test_timeline_svg_spans_stay_within_the_drawing():
    """Mutant: the time axis ending at the last span's start, not its end (the last reception
    drawn past the right edge). Each message takes 0.5 ms on each link (7 B at 14 kB/s)."""
    from fedsim.studies.trace import timeline_svg

    net = _rounds_net([3, 2, 3], link=LinkSpec(uplink=14_000, downlink=14_000, latency=0.0005))
    rows = list(net.ledger.records())
    assert {r["bytes"] for r in rows} == {7} and all(r["arrival_time"] - r["rx_start"] > 0 for r in rows)
    end = max([r["arrival_time"] for r in rows] + [e for _, _, e, _ in net.trace])
    svg = timeline_svg(net)
    assert f">simulated time, 0 to {end * 1000:.3f} ms</text>" in svg
    rects = _svg_rects(svg)
    assert len(rects) == 3 * len(rows)  # (sending, receiving, a sleep per message)
    for x, w, title in rects:
        assert 170 <= x and x + w <= 900 - 20 + 0.01, title


# ---------------------------------------------------------------------------------------------
# --eval


def _eval_trace(name, out, **kwargs):
    """``trace`` of ``name`` (3 clients, 1 round, steps.log only) with ``test_frac`` 0.2 unless given."""
    from fedsim.studies.trace import trace

    return trace(name, out, clients=3, rounds=1, test_frac=kwargs.pop("test_frac", 0.2), formats=("log",), **kwargs)


def test_an_evaluated_trace_holds_out_the_ratings_of_its_own_seed(tmp_path):
    """Mutant: the held-out split drawn with seed 0 whatever the trace's seed (the run traced
    with ``--seed 1`` was not the one ``fedsim run --seed 1`` makes). PersonalFR: its messages'
    sizes follow the split."""
    from fedsim.data import per_user_random
    from fedsim.protocols import REGISTRY
    from fedsim.protocols.contract import check_tiny
    from fedsim.seeding import node_rng

    spec = REGISTRY["personalfr"]
    net, _ = _eval_trace("personalfr", tmp_path, seed=1)
    data, cfg = check_tiny(spec, spec.tiny(3, 1, 1))

    def by_hand(split_seed: int) -> list[tuple]:  # fedsim run's split (per user, random: explicit ratings)
        train, test = per_user_random(data, 0.2, seed=node_rng(split_seed, "split"))
        ref = TracingNetwork(seed=1, profile="lan")
        spec.build(ref, train, cfg.replace(eval_every=1), test=test)
        ref.run()
        return [(r["src"], r["dst"], r["kind"], r["round"], r["bytes"]) for r in ref.ledger.records()]

    rows = [(r["src"], r["dst"], r["kind"], r["round"], r["bytes"]) for r in net.ledger.records()]
    assert rows == by_hand(1) != by_hand(0)


def test_a_test_frac_of_0_9_is_taken_as_fedsim_run_takes_it(tmp_path):
    """Mutant: ``test_frac`` 0.9 refused (``< 0.9``): fedsim run's bounds are 0 to 0.9."""
    net, _ = _eval_trace("fedrec", tmp_path, test_frac=0.9)
    assert any(r["kind"] in ("evaluate", "eval") for r in net.ledger.records())


# ---------------------------------------------------------------------------------------------
# waits given up (ledger.missing)


def test_a_wait_given_up_has_its_counts_only_when_its_records_agree_and_add_up():
    """Mutants: ``missing_events`` trusting the counts of a group whose records disagree (the first
    record's), or whose counts do not add up to the records (``expected - arrived`` not the number
    missing); groups of one time sorted by receiver, not in the order of the records; the named
    and anonymous parts of a wait joined with a comma (``nothing from c, 1 more``: read as two
    senders). Records made by hand, with their counts and wait numbers."""
    from fedsim.kernel.ledger import Missing
    from fedsim.studies.trace import event_step, missing_events, step_log

    net = TracingNetwork(seed=0)
    net.ledger.missing[:] = [
        Missing(0, "z", "x", "up", 0.01, 3, 1, 1), Missing(0, "z", "b", "up", 0.01, 2, 1, 1),  # disagree
        Missing(0, "a", "c", "up", 0.01, 5, 1, 1), Missing(0, "a", "d", "up", 0.01, 5, 1, 1),  # 4 missing, not 2
        Missing(0, "m", "c", "up", 0.01, 3, 1, 1), Missing(0, "m", None, "up", 0.01, 3, 1, 1)]  # 2 of 3
    groups = missing_events(net)
    assert [(g["receiver"], g["senders"], g["anonymous"], g["expected"], g["arrived"]) for g in groups] == [
        ("z", ["x", "b"], 0, None, None), ("a", ["c", "d"], 0, None, None), ("m", ["c"], 1, 3, 1)]
    assert [line.split(" ms  ")[1] for line in step_log(net).splitlines()] == [
        "z stops waiting for up (round 0): nothing from x, b",
        "a stops waiting for up (round 0): nothing from c, d",
        "m stops waiting for up (round 0): 2 of 3 missing (nothing from c and 1 more (any sender))"]
    assert [event_step("missing", g)["text"].split(" ms: ")[1] for g in groups] == [
        "2 messages missing (nothing from x, b)", "2 messages missing (nothing from c, d)",
        "2 of 3 messages missing (nothing from c and 1 more from any sender)"]


# ---------------------------------------------------------------------------------------------
# trace(): what it says it cut, its bounds, its files


def test_trace_reports_the_cut_of_a_round_starting_at_the_page_limit_and_no_cut_of_a_short_run(tmp_path):
    """Mutants: ``trace`` reporting a cut (``cuts``, which fedsim trace prints) of a run it does
    not cut (``shown <= len(rows)``); computing it at ``MAX_PAGE_MESSAGES - 1`` (a round less than
    the files show). FedRec with 25 clients: 50 messages a round, so its round 40 starts at message
    2000, the page's limit: the first 40 rounds (of 41) are shown whole."""
    from fedsim.studies.trace import MAX_PAGE_MESSAGES, trace

    net, _ = trace("fedrec", tmp_path / "short", clients=3, rounds=1, formats=("html", "svg", "log"))
    assert net.cuts == {}
    net, paths = trace("fedrec", tmp_path / "long", clients=25, rounds=41, formats=("svg",))
    rounds = [r["round"] for r in net.ledger.records()]
    assert MAX_PAGE_MESSAGES == 2000 and len(rounds) > 2000 and rounds[2000] != rounds[1999]
    assert net.cuts == {"svg": {"shown": 2000, "total": len(rounds)}}
    assert f">Cut: the first 2000 of the run's {len(rounds)} messages " in paths["svg"].read_text()


def test_trace_takes_up_to_max_trace_rounds(monkeypatch, tmp_path):
    """Mutant: ``rounds >= MAX_TRACE_ROUNDS`` refused (1000 rounds, the documented most, refused)."""
    import fedsim.studies.trace as tr
    from fedsim.experiment import UsageError

    monkeypatch.setattr(tr, "MAX_TRACE_ROUNDS", 2)
    net, _ = tr.trace("demo", tmp_path, clients=2, rounds=2, formats=("log",))
    assert max(r["round"] for r in net.ledger.records()) >= 1
    with pytest.raises(UsageError, match=r"^cannot trace demo with 3 rounds: traces have 1 to 2 rounds, got 3$"):
        tr.trace("demo", tmp_path, clients=2, rounds=3, formats=("log",))


def test_a_writer_that_writes_nothing_leaves_no_partial_file(tmp_path):
    """Mutant: ``_write_whole`` leaving the file begun beside ``path`` when its writer returns None
    (timeline.png without matplotlib)."""
    from fedsim.studies.trace import _write_whole

    def begun(tmp):
        tmp.write_text("half")
        return None

    assert _write_whole(tmp_path / "timeline.png", begun) is None
    assert list(tmp_path.iterdir()) == []


def test_a_node_going_offline_at_the_runs_last_instant_is_shown():
    """Mutant: ``offline_events`` leaving out a node whose offline time is the run's end
    (``off < end``): d's link goes down as the last message arrives, at 1 ms."""
    from fedsim.studies.trace import offline_events, step_log

    net = _rounds_net([1], offline_at=0.001)
    assert net.now() == 0.001 == list(net.ledger.records())[0]["arrival_time"]
    assert offline_events(net) == [{"node": "d", "time": 0.001, "dropped": False}]
    assert "       1.000 ms  d goes offline (its actor had finished; messages to it are lost)\n" in step_log(net)


def test_an_untraced_step_log_puts_that_instants_sends_after_a_wait_given_up():
    """Mutant: the step log of a network that did not trace not putting an instant's sends last
    (the server's send at 10 ms before the wait it gave up at 10 ms, which came first)."""
    from fedsim.kernel import SimNetwork
    from fedsim.studies.trace import step_log

    async def server(ctx):
        await ctx.gather("up", senders=["c"], timeout=0.01)
        await ctx.send("c", "go", {"x": 1})

    async def c(ctx):
        await ctx.receive("go")

    net = SimNetwork(seed=0)
    net.add_node("server", server, role="server", link=LinkSpec(latency=0.001))
    net.add_node("c", c, role="client", link=LinkSpec(latency=0.001))
    net.run()
    assert not getattr(net, "happened", None)  # (what the test is about: no record of the order)
    assert step_log(net).splitlines() == [
        "      10.000 ms  server stops waiting for up (round 0): 1 of 1 missing (nothing from c)",
        "      10.000 ms  server sends go (round 0, 8 B) to c",
        "      12.000 ms  c receives go (round 0) from server"]


def test_payload_fields_give_array_bytes_and_keep_a_60_character_value_whole():
    """Mutants: an array's bytes its element count; a value of exactly 60 characters shortened."""
    from fedsim.kernel.codec import encode_message
    from fedsim.studies.trace import payload_fields

    import numpy as np

    data = encode_message("m", {"w": np.zeros((3, 2), dtype=np.float64), "s": "x" * 58, "t": "y" * 59}).data
    assert payload_fields(data) == [
        {"name": "w", "dtype": "float64", "shape": [3, 2], "bytes": 48},
        {"name": "s", "value": "'" + "x" * 58 + "'"},  # (60 characters with its quotes)
        {"name": "t", "value": "'" + "y" * 56 + "..."}]


def test_a_message_still_in_flight_is_drawn_sending_only():
    """Mutant: the timelines drawing a reception and an arrow for a message still in flight when
    the run ended (``status != "lost"``): at a reception time the ledger does not have (nan)."""
    from fedsim.studies.trace import timeline_svg
    from test_trace_html import in_flight_net

    net = in_flight_net()
    (row,) = net.ledger.records()
    assert row["status"] == "in_flight"
    svg = timeline_svg(net)
    assert [t for _, _, t in _svg_rects(svg)] == ["sending 0.000-0.000 ms"]
    assert 'stroke="#8C8C8C" stroke-width="0.8"' not in svg and "nan" not in svg


def test_a_wait_given_up_in_a_setup_round_is_labelled_as_its_round():
    """Mutant: the step of a wait given up labelled ``round -6`` (the page's round of the step),
    not ``setup for round 5``, as its messages are."""
    from fedsim.studies.trace import trace_data

    async def server(ctx):
        ctx.begin_round(-6)  # (FPL's key_setup_round(5))
        await ctx.gather("keys", senders=["c"], timeout=0.01)
        ctx.begin_round(-1)
        await ctx.gather("keys", senders=["c"], timeout=0.01)

    async def c(ctx):
        return

    net = TracingNetwork(seed=0)
    net.add_node("server", server, role="server")
    net.add_node("c", c, role="client")
    net.run()
    assert [(m.round, m.sender) for m in net.ledger.missing] == [(-6, "c"), (-1, "c")]
    steps = trace_data(net)["steps"]["missing"]
    assert [s["round_label"] for s in steps] == ["setup for round 5", "setup"]
    assert [s["text"] for s in steps] == [
        "server gives up waiting for keys (setup for round 5) at 10.000 ms: 1 of 1 message missing (nothing from c)",
        "server gives up waiting for keys (setup) at 20.000 ms: 1 of 1 message missing (nothing from c)"]


def test_the_actors_still_waiting_at_a_deadlock_are_in_node_order():
    """Mutant: ``blocked_events`` in the order of ``RunResult.blocked`` (the roles with the fewest
    blocked first: the server before its clients a and b), not in node order as documented."""
    from fedsim.studies.trace import blocked_events, step_log

    async def wait(ctx):
        await ctx.receive("never")

    net = TracingNetwork(seed=0)
    for n, role in (("s", "server"), ("a", "client"), ("b", "client")):
        net.add_node(n, wait, role=role)
    net.run(strict=False)
    assert list(net.result.blocked) == ["s", "a", "b"]  # (what the test is about: not node order)
    assert [e["node"] for e in blocked_events(net)] == ["a", "b", "s"]
    assert [line.split(" ms  ")[1].split(" ")[0] for line in step_log(net).splitlines()] == ["a", "b", "s"]
