"""``fedsim trace NAME --html``: one self-contained page, checked as data and in a real headless
browser (Debian's chromium and chromium-driver with selenium: the ``browser`` extra; .ci/run
installs them). The browser test loads the file, steps through the messages and reads what the
page shows against the ledger."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import numpy as np
import pytest

from fedsim.studies.trace import trace

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
DRIVER = shutil.which("chromedriver")


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs, self.tags = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href", "xlink:href", "action") and v and not v.startswith(("#", "url(#")):
                self.refs.append((tag, k, v))


def page_data(html: str) -> dict:
    m = re.search(r'<script id="trace-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


@pytest.fixture(scope="module")
def fedrecpp_trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("trace")
    net, paths = trace("fedrecpp", out, clients=3, rounds=1, formats=("html",))
    assert list(paths) == ["html"] and sorted(p.name for p in out.iterdir()) == ["trace.html"]
    return net, paths["html"]


def test_the_page_is_self_contained(fedrecpp_trace):
    _, path = fedrecpp_trace
    html = path.read_text()
    refs = _Refs()
    refs.feed(html)
    assert refs.refs == [], "the page must not load anything (no CDN, no files beside it)"
    assert "link" not in refs.tags and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in html


def test_the_page_carries_every_ledger_message_and_its_payload_shapes(fedrecpp_trace):
    net, path = fedrecpp_trace
    data = page_data(path.read_text())
    rows = list(net.ledger.records())
    assert [(m["src"], m["dst"], m["kind"], m["bytes"], m["anonymous"]) for m in data["messages"]] == \
        [(r["src"], r["dst"], r["kind"], r["bytes"], r["anonymous"]) for r in rows]
    # payload fields: decoded from what was sent, checked against the raw byte count of the ledger
    for m, r in zip(data["messages"], rows):
        arrays = [f for f in m["payload"] if "shape" in f]
        assert sum(f["bytes"] for f in arrays) == r["raw_bytes"], m["kind"]
        for f in arrays:
            assert f["bytes"] == int(np.prod(f["shape"])) * np.dtype(f["dtype"]).itemsize
    model = next(m for m in data["messages"] if m["kind"] == "model")
    V = next(f for f in model["payload"] if f["name"] == "V")
    assert len(V["shape"]) == 2 and V["dtype"].startswith("float")
    # the timeline has a span per transmission, the sequence an arrow group per message
    html = path.read_text()
    assert html.count('class="msg') == len(rows)
    assert html.count('class="span sending"') == sum(1 for r in rows if r["tx_end"] == r["tx_end"])


def test_cli_trace_html_writes_one_page(tmp_path):
    res = subprocess.run([sys.executable, "-m", "fedsim", "trace", "fedrec", "--html", "--out", "t"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["trace.html"]
    assert "file://" in res.stdout and "works offline" in res.stdout


def _driver(tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install "
                                    "'fedsim-rec[browser]')")
    if not CHROMIUM or not DRIVER:
        pytest.skip("chromium and chromedriver are not installed (Debian: apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,1400"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)


def test_stepping_through_the_round_in_a_headless_browser(fedrecpp_trace, tmp_path):
    net, path = fedrecpp_trace
    driver = _driver(tmp_path)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    rows = list(net.ledger.records())
    data = page_data(path.read_text())
    try:
        driver.get(path.resolve().as_uri())
        step = driver.find_element(By.ID, "step")
        assert step.text == f"before the first message ({len(rows)} messages)"
        nxt, prev = driver.find_element(By.ID, "next"), driver.find_element(By.ID, "prev")
        seen_anonymous = False
        for i, r in enumerate(rows):
            nxt.click()
            assert step.text == f"message {i + 1} of {len(rows)}"
            assert driver.find_element(By.ID, "kind").text == r["kind"]
            assert driver.find_element(By.ID, "receiver").text.startswith(r["dst"])
            current = driver.find_elements(By.CSS_SELECTOR, ".msg.current")
            assert [g.get_attribute("id") for g in current] == [f"m{i}"]
            sender = driver.find_element(By.ID, "sender").text
            if r["anonymous"]:  # what the receiver learns: not who sent it
                seen_anonymous = True
                assert r["src"] not in sender and "hidden" in sender
                # nor does the timeline point at the sender's transmission
                assert driver.find_elements(By.CSS_SELECTOR, f'.span.hl[data-msg="{i}"][data-side="src"]') == []
            else:
                assert sender.startswith(r["src"])
            # the payload table: one row per field, arrays as dtype[shape]
            cells = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                     for tr in driver.find_elements(By.CSS_SELECTOR, "#payload tr")[1:]]
            fields = data["messages"][i]["payload"]
            assert [c[0] for c in cells] == [f["name"] for f in fields]
            for c, f in zip(cells, fields):
                if "shape" in f:
                    assert c[1] == f"{f['dtype']}[{' × '.join(map(str, f['shape']))}]"
            # the transmission of this message is highlighted on the timeline
            hl = driver.find_elements(By.CSS_SELECTOR, f'.span.hl[data-msg="{i}"]')
            assert len(hl) >= (1 if r["status"] == "delivered" else 0)
        assert seen_anonymous, "fedrecpp sends noise anonymously"
        nxt.click()  # past the end: stays on the last
        assert step.text == f"message {len(rows)} of {len(rows)}"
        prev.click()
        assert step.text == f"message {len(rows) - 1} of {len(rows)}"
        driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ARROW_LEFT)
        assert step.text == f"message {len(rows) - 2} of {len(rows)}"
        # jump to an anonymous message by clicking its arrow, then reveal the simulator's view
        k = next(i for i, r in enumerate(rows) if r["anonymous"])
        driver.execute_script("document.getElementById(arguments[0]).dispatchEvent(new MouseEvent('click', "
                              "{bubbles: true}))", f"m{k}")
        assert step.text == f"message {k + 1} of {len(rows)}"
        assert rows[k]["src"] not in driver.find_element(By.ID, "sender").text
        driver.find_element(By.ID, "reveal").click()
        assert driver.find_element(By.ID, "sender").text.startswith(rows[k]["src"])
        errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        assert errors == []
        driver.save_screenshot(str(tmp_path / "trace.png"))
        assert (tmp_path / "trace.png").stat().st_size > 10_000
    finally:
        driver.quit()


def test_a_hidden_sender_s_times_are_hidden_too_and_the_cursor_marks_the_reception(fedrecpp_trace, tmp_path):
    # the panel of an anonymous message said "sent 1.021 ms, transmitted 1.021 ms to 1.049 ms" and
    # the timeline's cursor stood at the send: both point at the one lane sending then, the sender
    # the page says the receiver does not learn
    net, path = fedrecpp_trace
    driver = _driver(tmp_path)
    from selenium.webdriver.common.by import By

    rows = list(net.ledger.records())
    anonymous = [i for i, r in enumerate(rows) if r["anonymous"]]
    assert len(anonymous) == 2
    ms = lambda t: f"{t * 1000:.3f} ms"  # noqa: E731
    try:
        driver.get(path.resolve().as_uri())
        tl = driver.find_element(By.ID, "timeline")
        t0, scale = float(tl.get_attribute("data-t0")), float(tl.get_attribute("data-scale"))
        cursor = driver.find_element(By.ID, "cursor")
        for reveal in (False, True):
            for i, r in enumerate(rows):
                driver.execute_script("document.getElementById(arguments[0]).dispatchEvent(new MouseEvent('click', "
                                      "{bubbles: true}))", f"m{i}")
                times = driver.find_element(By.ID, "times").text
                sender_times = [ms(r[k]) for k in ("send_time", "tx_start", "tx_end")]
                head, fate = times.split(", arrived ")  # (all delivered: fedrecpp on lan)
                assert fate.startswith(ms(r["arrival_time"]))
                hidden = r["anonymous"] and not reveal
                if hidden:
                    assert head == "sent and transmitted at times hidden with the sender"
                else:
                    assert head == f"sent {sender_times[0]}, transmitted {sender_times[1]} to {sender_times[2]}"
                at = r["rx_start"] if hidden else r["send_time"]
                assert float(cursor.get_attribute("x1")) == pytest.approx(t0 + at * scale, abs=1e-6)
                assert cursor.get_attribute("visibility") == "visible"
                # the timeline highlights the receiver's side only (the propagation began at the
                # sender's tx_end: its span, on the receiver's lane, was highlighted too)
                hl = sorted(e.get_attribute("class").split()[1] for e in
                            driver.find_elements(By.CSS_SELECTOR, f'.span.hl[data-msg="{i}"]'))
                shown = ["queueing"] * (r["tx_start"] > r["send_time"]) + ["sending"] + \
                    ["propagating"] * (r["rx_start"] > r["tx_end"]) + ["receiving"]
                assert hl == (["receiving"] if hidden else sorted(shown))
            if not reveal:
                driver.find_element(By.ID, "reveal").click()
        assert [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"] == []
    finally:
        driver.quit()


def in_flight_net():
    """A run stopped at until=1 s with its one message (a -> b, 5 s of latency) still on its way
    (also used by test_trace_mutants)."""
    from fedsim.kernel import LinkSpec, SimNetwork

    async def sender(ctx):
        await ctx.send("b", "slow", 1)

    async def receiver(ctx):
        await ctx.receive("slow")

    net = SimNetwork(seed=0)
    net.add_node("a", sender, link=LinkSpec(latency=5.0))
    net.add_node("b", receiver)
    net.run(until=1.0)
    return net


def test_a_message_still_in_flight_is_not_called_lost_or_arrived():
    # a run stopped at until=... with a message on its way: the step log called it lost, the
    # sequence diagram printed "arrived nan ms", the page "arrived -"
    from fedsim.studies.trace import mermaid, step_log, trace_html

    net = in_flight_net()
    (row,) = net.ledger.records()
    assert row["status"] == "in_flight"
    log = step_log(net)
    assert "still in flight when the run ends" in log and "lost" not in log
    diagram = mermaid(net)
    assert "still in flight when the run ended" in diagram and "nan" not in diagram and "LOST" not in diagram
    page = trace_html(net)
    assert "in flight at the end" in page and "LOST" not in page.split("<script")[0]
    assert " · 1 message (1 in flight at the end), 7 B on the wire. " in page  # one message (of 7 B): not "1 messages"
    assert '(msgs.length === 1 ? " message" : " messages")' in page  # (in the browser: test_a_trace_of_one_message_steps_to_it_and_stays_there_in_a_headless_browser)


def test_names_with_html_and_template_text_stay_text(tmp_path):
    # a kind "k<!--<script>" in the JSON data block made the HTML parser run that block on into
    # the page's own script, which never ran (the page showed nothing, the buttons did nothing);
    # a kind "__DATA__" was replaced by the whole JSON blob in the sequence diagram
    from fedsim.kernel import LinkSpec
    from fedsim.studies.trace import TracingNetwork, trace_html

    async def sender(ctx):
        await ctx.send("b-1", "k<!--<script>", {"text": "</script><b>x</b>", "n": 1})
        await ctx.send("b-1", "__DATA__", {"n": 2})

    async def receiver(ctx):
        await ctx.receive("k<!--<script>")
        await ctx.receive("__DATA__")

    net = TracingNetwork(seed=0)
    net.add_node("a:0", sender, role='cli<ent&"', link=LinkSpec(latency=0.001))
    net.add_node("b-1", receiver, role="server")
    net.run()
    rows = list(net.ledger.records())
    assert [r["kind"] for r in rows] == ["k<!--<script>", "__DATA__"]
    html = trace_html(net, title="t<i>", summary="s&")
    block = re.search(r'<script id="trace-data" type="application/json">(.*?)</script>', html, re.S).group(1)
    assert "<" not in block and ">" not in block
    data = page_data(html)
    assert [m["kind"] for m in data["messages"]] == ["k<!--<script>", "__DATA__"]
    assert data["nodes"] == [{"id": "b-1", "role": "server"}, {"id": "a:0", "role": 'cli<ent&"'}]
    assert {"name": "text", "value": repr("</script><b>x</b>")} in data["messages"][0]["payload"]
    # the sequence diagram's labels: the kinds as text, sizes from the ledger
    labels = re.findall(r'fill="#222">([^<]*)</text>', html)
    assert labels == [f"k&lt;!--&lt;script&gt; · {rows[0]['bytes']} B", f"__DATA__ · {rows[1]['bytes']} B"]
    assert html.count("<title>fedsim trace: t&lt;i&gt;</title>") == 1 and "s&amp; · 2 messages" in html
    (tmp_path / "odd.html").write_text(html, encoding="utf-8")
    driver = _driver(tmp_path)
    from selenium.webdriver.common.by import By

    try:
        driver.get((tmp_path / "odd.html").resolve().as_uri())
        step = driver.find_element(By.ID, "step")
        assert step.text == "before the first message (2 messages)"
        driver.find_element(By.ID, "next").click()
        assert step.text == "message 1 of 2"
        assert driver.find_element(By.ID, "kind").text == "k<!--<script>"
        assert driver.find_element(By.ID, "sender").text == 'a:0 (cli<ent&")'
        cells = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                 for tr in driver.find_elements(By.CSS_SELECTOR, "#payload tr")[1:]]
        assert cells == [["text", "", repr("</script><b>x</b>")], ["n", "", "1"]]
        driver.find_element(By.ID, "next").click()
        assert driver.find_element(By.ID, "kind").text == "__DATA__"
        assert [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"] == []
    finally:
        driver.quit()


def _one_message(src: str, role: str, dst: str, kind: str):
    """A traced run of one message of ``kind`` {n: 1} from ``src`` (of ``role``) to ``dst`` (server)."""
    from fedsim.studies.trace import TracingNetwork

    async def sender(ctx):
        await ctx.send(dst, kind, {"n": 1})

    async def receiver(ctx):
        await ctx.receive(kind)

    net = TracingNetwork(seed=0)
    net.add_node(src, sender, role=role)
    net.add_node(dst, receiver, role="server")
    net.run()
    return net


def test_timeline_svg_is_well_formed_with_any_role():
    # the lane labels of timeline.svg were written unescaped: a role 'cli<ent&' made the file
    # invalid XML (no viewer shows it)
    from xml.etree import ElementTree

    from fedsim.studies.trace import timeline_svg

    net = _one_message("a:0", "cli<ent&", "b-1", "m")
    svg = ElementTree.fromstring(timeline_svg(net))
    texts = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert texts[1:3] == ["b-1 (server)", "a:0 (cli<ent&)"]
    (row,) = net.ledger.records()
    assert texts[0] == f"simulated time, 0 to {row['arrival_time'] * 1000:.3f} ms"


def test_mermaid_has_one_statement_per_line_with_any_role_or_kind():
    # a role 'x;y' ended the participant statement at ';' (Mermaid's separator) and a kind with a
    # line break split the arrow's statement over two lines, the second no statement at all
    from fedsim.studies.trace import mermaid

    net = _one_message("a", "x;y#1", "b", "two\nlines")
    (row,) = net.ledger.records()
    lines = mermaid(net).splitlines()
    assert lines == ["sequenceDiagram", "    participant N0 as b (server)", "    participant N1 as a (x#59;y#35;1)",
                     "    Note over N0: round 0",
                     f"    N1->>N0: two\\nlines {row['bytes']} B, sent {row['send_time'] * 1000:.3f} ms, arrived "
                     f"{row['arrival_time'] * 1000:.3f} ms"]


def test_mermaid_shows_names_and_kinds_as_they_are_in_entity_codes():
    # a ';' in a role or kind was written as ',', a '#' as 'no.', a ':' in a kind as ' ', and a
    # node id 'wrap:c' lost its 'wrap:' (Mermaid's wrap directive at a label's start): the diagram
    # showed other names than the run's. Each is now a Mermaid entity code, which Mermaid draws
    # as the character.
    from fedsim.studies.trace import TracingNetwork, mermaid

    async def sender(ctx):
        await ctx.send("srv:1", "up:d;a#t", {"n": 1})
        await ctx.send("srv:1", "wrap:%%{x}", {"n": 2}, anonymous=True)

    async def receiver(ctx):
        await ctx.receive("up:d;a#t")
        await ctx.receive("wrap:%%{x}")

    net = TracingNetwork(seed=0)
    net.add_node("wrap:c", sender, role="cli#ent")
    net.add_node("srv:1", receiver, role="ser;ver")
    net.run()
    up, anon = net.ledger.records()
    ms = lambda t: f"{t * 1000:.3f} ms"  # noqa: E731
    assert mermaid(net).splitlines() == [
        "sequenceDiagram",
        "    participant N0 as srv#58;1 (ser#59;ver)",
        "    participant N1 as wrap#58;c (cli#35;ent)",
        "    Note over N0: round 0",
        f"    N1->>N0: up#58;d#59;a#35;t {up['bytes']} B, sent {ms(up['send_time'])}, arrived {ms(up['arrival_time'])}",
        f"    N1-->>N0: wrap#58;#37;#37;{{x}} (anonymous) {anon['bytes']} B, sent {ms(anon['send_time'])}, "
        f"arrived {ms(anon['arrival_time'])}",
        "    Note right of N0: sender hidden from srv#58;1"]


def test_a_message_never_read_says_so_in_every_output():
    # a gradient that arrives after the server's deadline (fcf --set deadline=...): the step log
    # and the page's panel said "never read", the Mermaid arrow and the page's arrow label only
    # "arrived", as if the server had used it
    from fedsim.kernel import LinkSpec
    from fedsim.studies.trace import TracingNetwork, mermaid, step_log, trace_html

    async def server(ctx):
        await ctx.send("c", "model", {"n": 1})
        await ctx.gather("up", senders=["c"], timeout=0.001)

    async def client(ctx):
        await ctx.receive("model")
        await ctx.send("server", "up", {"n": 2})

    net = TracingNetwork(seed=0)
    net.add_node("server", server, role="server", link=LinkSpec(latency=0.001))
    net.add_node("c", client, role="client", link=LinkSpec(latency=0.001))
    net.run()
    model, up = net.ledger.records()
    assert (model["read"], up["read"], up["status"]) == (True, False, "delivered")
    arrows = [line for line in mermaid(net).splitlines() if "->>" in line]
    assert arrows == [
        f"    N0->>N1: model {model['bytes']} B, sent 0.000 ms, arrived {model['arrival_time'] * 1000:.3f} ms",
        f"    N1->>N0: up {up['bytes']} B, sent {up['send_time'] * 1000:.3f} ms, arrived "
        f"{up['arrival_time'] * 1000:.3f} ms, never read"]
    assert f"{up['arrival_time'] * 1000:12.3f} ms  server receives up (round 0) from c (never read)\n" in step_log(net)
    labels = re.findall(r'fill="#222">([^<]*)</text>', trace_html(net))
    assert labels == [f"model · {model['bytes']} B", f"up · {up['bytes']} B · never read"]


def test_step_log_keeps_one_event_a_line_with_any_kind():
    # a kind "two\nlines" split its send and receive events over two lines each, the second
    # without a time (steps.log is one event a line, in time order)
    from fedsim.studies.trace import step_log

    net = _one_message("a", "client", "b", "two\nlines\t!")
    (row,) = net.ledger.records()
    assert step_log(net).splitlines() == [
        f"{row['send_time'] * 1000:12.3f} ms  a sends two\\nlines\\t! (round 0, {row['bytes']} B) to b",
        f"{row['arrival_time'] * 1000:12.3f} ms  b receives two\\nlines\\t! (round 0) from a"]


@pytest.mark.parametrize("model, lost_ms", [("fifo", (14.0, 21.0)), ("fair", (28.0, 28.0))])
def test_step_log_shows_a_lost_message_when_and_why_it_was_lost(model, lost_ms):
    # a lost message's line stood at its send time (0 ms), although under fair it is lost when
    # its last byte leaves (28 ms: four 7-byte copies share a 1000 B/s uplink) and under fifo it
    # holds the sender's port until its tx_end (14 and 21 ms: the second and third in the queue)
    from fedsim.kernel import LinkSpec
    from fedsim.studies.trace import TracingNetwork, step_log

    async def sender(ctx):
        for i in range(4):
            await ctx.send("b", "m", {"i": i})

    async def receiver(ctx):
        while await ctx.receive("m", timeout=1.0) is not None:
            pass

    net = TracingNetwork(seed=0, link_model=model)
    net.add_node("a", sender, link=LinkSpec(uplink=1000.0, latency=0.01), loss=0.5)
    net.add_node("b", receiver, role="server")
    net.run()
    rows = list(net.ledger.records())
    assert [r["status"] for r in rows] == ["delivered", "lost", "lost", "delivered"]
    assert [r["note"] for r in rows] == ["", "link loss", "link loss", ""]
    assert [r["tx_end"] * 1000 for r in rows[1:3]] == pytest.approx(lost_ms)
    lost = [line for line in step_log(net).splitlines() if "lost" in line]
    assert lost == [f"{t:12.3f} ms  m (round 0) from a to b (sent at 0.000 ms) is lost (link loss)" for t in lost_ms]
    # in time order among the other events: after the sends, between the arrivals
    times = [float(line.split(" ms")[0]) for line in step_log(net).splitlines()]
    assert times == sorted(times)


def test_step_log_of_a_message_lost_to_an_offline_receiver_is_at_its_arrival():
    # the copy reaches the receiver's port at 7 + 20 ms, after the receiver dropped out (at
    # 5 ms): lost then, not at its send time
    from fedsim.kernel import LinkSpec, SimNetwork
    from fedsim.studies.trace import step_log

    async def sender(ctx):
        await ctx.send("b", "m", {"i": 0})

    async def receiver(ctx):
        await ctx.receive("m")

    net = SimNetwork(seed=0, trace=True)
    net.add_node("a", sender, link=LinkSpec(uplink=1000.0, downlink=1000.0, latency=0.01))
    net.add_node("b", receiver, role="server", link=LinkSpec(latency=0.01), offline_at=0.005)
    net.run()
    (row,) = net.ledger.records()
    assert (row["status"], row["note"]) == ("lost", "receiver offline")
    assert net.lost_at == {0: pytest.approx(0.027)}
    assert step_log(net).splitlines()[-1] == "      27.000 ms  m (round 0) from a to b (sent at 0.000 ms) is lost (receiver offline)"
    untraced = SimNetwork(seed=0)
    untraced.add_node("a", sender, link=LinkSpec(uplink=1000.0, downlink=1000.0, latency=0.01))
    untraced.add_node("b", receiver, role="server", link=LinkSpec(latency=0.01), offline_at=0.005)
    untraced.run()
    assert untraced.lost_at == {}
    assert step_log(untraced).splitlines()[1:] == [
        "       0.000 ms  m (round 0) from a to b (sent at 0.000 ms) is lost (receiver offline; when not recorded: the network "
        "did not trace)",
        "       5.000 ms  b drops out (offline from here on: its actor stops, messages to or from it are lost)"]


def test_long_node_ids_and_roles_are_elided_to_their_box_and_whole_in_the_tooltip():
    # a 60-character id ran over the neighbouring lanes' headers in the page's sequence diagram
    # and over the spans in both timelines (the ids of such nodes differ at their end)
    from xml.etree import ElementTree

    from fedsim.studies.trace import timeline_svg, trace_html

    long = "client-" + "x" * 50 + "-0001"
    net = _one_message(long, "r" * 30, "b", "m")
    html = trace_html(net)
    seq = ElementTree.fromstring(re.search(r'<svg id="sequence".*?</svg>', html, re.S).group(0))
    svg = "{http://www.w3.org/2000/svg}"
    lanes = [(g.find(svg + "title").text, [t.text for t in g.findall(svg + "text")])
             for g in seq.iter(svg + "g") if g.get("class") == "lane"]
    assert lanes == [("b (server)", ["b", "server"]),
                     (f"{long} ({'r' * 30})", ["client-x…xxxx-0001", "r" * 9 + "…" + "r" * 10])]
    tl = ElementTree.fromstring(re.search(r'<svg id="timeline".*?</svg>', html, re.S).group(0))
    labels = [(g.find(svg + "title").text, g.find(svg + "text").text) for g in tl.iter(svg + "g")]
    assert labels == [("b", "b"), (long, "client-xxx…xxxxxx-0001")]
    standalone = ElementTree.fromstring(timeline_svg(net))
    labels = [(g.find(svg + "title").text, g.find(svg + "text").text) for g in standalone.iter(svg + "g")]
    assert labels == [("b (server)", "b (server)"), (f"{long} ({'r' * 30})", "client-xxxxx…rrrrrrrrrrrr)")]


def test_a_sleep_is_drawn_as_sleeping_not_computing():
    # ctx.sleep's span (the network traces it with the label "sleep") was drawn as computing in
    # the page's timeline and in timeline.svg: a node waiting out an interval seemed to train
    from xml.etree import ElementTree

    from fedsim.studies.trace import TracingNetwork, timeline_svg, trace_html

    async def a(ctx):
        await ctx.sleep(0.25)
        await ctx.compute(2e9, "train")

    net = TracingNetwork(seed=0)
    net.add_node("a", a, role="client", flops=1e10)
    net.run()
    assert net.trace == [("a", 0.0, 0.25, "sleep"), ("a", 0.25, 0.45, "train")]
    spans = re.findall(r'<rect class="span (\w+)"[^>]*><title>([^<]*)</title>', trace_html(net))
    assert spans == [("sleeping", "a: sleeping 0.000 ms to 250.000 ms"),
                     ("computing", "a: computing 250.000 ms to 450.000 ms")]
    svg = "{http://www.w3.org/2000/svg}"
    titles = [r.find(svg + "title").text for r in ElementTree.fromstring(timeline_svg(net)).iter(svg + "rect")
              if r.find(svg + "title") is not None]
    assert titles == ["sleep 0.000-250.000 ms", "compute 250.000-450.000 ms"]


def test_asyncio_network_that_traces_keeps_when_each_lost_message_was_lost():
    # AsyncioNetwork(trace=True) kept no lost_at (only SimNetwork had one): the step log put its
    # lost messages at their send time saying "when not recorded: the network did not trace",
    # of a network that did. Its losses are decided at the send (delivery is immediate): lost_at
    # has that time, on its own clock, for each lost copy, as SimNetwork's has net.lose's
    from fedsim.kernel import AsyncioNetwork
    from fedsim.studies.trace import step_log

    async def sender(ctx):
        for i in range(6):
            await ctx.send("b", "m", {"i": i})

    async def receiver(ctx):
        while await ctx.receive("m", timeout=0.05) is not None:
            pass

    def run(trace):
        net = AsyncioNetwork(seed=0, trace=trace)
        net.add_node("a", sender, loss=0.5)
        net.add_node("b", receiver, role="server")
        net.run()
        return net

    net = run(True)
    rows = list(net.ledger.records())
    # (the seeded draws: the same copies as on SimNetwork)
    assert [r["status"] for r in rows] == ["delivered", "lost", "lost", "delivered", "delivered", "lost"]
    assert net.lost_at == {r["seq"]: r["send_time"] for r in rows if r["status"] == "lost"}
    assert sorted(net.lost_at) == [1, 2, 5]
    lost = [line for line in step_log(net).splitlines() if "lost" in line]
    assert lost == [f"{r['send_time'] * 1000:12.3f} ms  m (round 0) from a to b (sent at {r['send_time'] * 1000:.3f} ms) "
                    "is lost (link loss)" for r in rows if r["status"] == "lost"]
    assert run(False).lost_at == {}


def test_step_log_shows_what_happened_at_one_instant_in_the_order_it_happened():
    # at equal times the step log put computations and log lines before sends (a fixed rank per
    # kind of event): "a works" stood before the send that a made first, "a: sent first" before
    # that send. The network's record of the order (net.happened) now decides
    from fedsim.kernel import LinkSpec, SimNetwork
    from fedsim.studies.trace import step_log

    async def a(ctx):
        await ctx.send("b", "first", {"i": 0})
        ctx.log("sent first")
        await ctx.compute(1e6, "work")
        ctx.log("worked")
        await ctx.send("b", "second", {"i": 1})

    async def b(ctx):
        await ctx.receive("first")
        await ctx.receive("second")

    net = SimNetwork(seed=0, trace=True)
    net.add_node("a", a, link=LinkSpec(latency=0.01), flops=1e9)
    net.add_node("b", b, role="server", link=LinkSpec(latency=0.01))
    net.run()
    assert net.happened == [("send", 0), ("log", 0), ("span", 0), ("log", 1), ("send", 1),
                            ("arrive", 0), ("read", 0), ("arrive", 1), ("read", 1)]
    assert step_log(net).splitlines() == [
        "       0.000 ms  a sends first (round 0, 11 B) to b",
        "       0.000 ms  a: sent first",
        "       0.000 ms  a works for 1 ms",
        "       1.000 ms  a: worked",
        "       1.000 ms  a sends second (round 0, 12 B) to b",
        "      20.000 ms  b receives first (round 0) from a",
        "      21.000 ms  b receives second (round 0) from a"]
    untraced = SimNetwork(seed=0)
    untraced.add_node("a", a, link=LinkSpec(latency=0.01), flops=1e9)
    untraced.add_node("b", b, role="server", link=LinkSpec(latency=0.01))
    untraced.run()
    assert untraced.happened == []



def test_a_traced_asyncio_run_records_each_send_before_its_arrival_or_loss():
    # AsyncioNetwork delivers (or loses) a copy inside post, which recorded ("arrive", seq) or
    # ("lost", seq) in net.happened before ctx.send added the copy's ("send", seq): the step log
    # said "b receives m" (and "m ... is lost") before "a sends m", at one instant
    from fedsim.kernel import AsyncioNetwork
    from fedsim.studies.trace import step_log

    async def a(ctx):
        for i in range(4):
            await ctx.send("b", "m", {"i": i})
        await ctx.broadcast(["b", "c"], "n", {"i": 9})

    async def b(ctx):
        while await ctx.receive(("m", "n"), timeout=0.05) is not None:
            pass

    async def c(ctx):
        await ctx.receive("n", timeout=0.05)

    net = AsyncioNetwork(seed=0, trace=True)
    net.add_node("a", a, loss=0.5)
    net.add_node("b", b, role="server")
    net.add_node("c", c, role="server")
    net.run()
    rows = list(net.ledger.records())
    assert {r["status"] for r in rows} == {"delivered", "lost"}
    position = {what: i for i, what in enumerate(net.happened)}
    for r in rows:
        fate = ("arrive" if r["status"] == "delivered" else "lost", r["seq"])
        assert position[("send", r["seq"])] < position[fate], r
    lines = step_log(net).splitlines()
    # each copy's send line stands before its arrival or loss line (sends and fates in ledger order)
    sends = [i for i, line in enumerate(lines) if " a sends " in line]
    fates = [i for i, line in enumerate(lines) if " receives " in line or " is lost " in line]
    assert len(sends) == len(fates) == len(rows)
    assert all(s < f for s, f in zip(sends, fates))


def _setup_labels():
    """A traced run with the round labels -1 (a key exchange from round 0), -6 (that of a network
    resumed at round 5: FPL's key_setup_round(5)) and 5: the server sends one message under each
    and gives up on c's keys (10 ms) under -6."""
    from fedsim.kernel import LinkSpec
    from fedsim.protocols.fpl import key_setup_round
    from fedsim.studies.trace import TracingNetwork

    async def server(ctx):
        ctx.begin_round(-1)
        await ctx.send("c", "hello", {"n": 0})
        ctx.begin_round(key_setup_round(5))
        await ctx.send("c", "peers", {"n": 1})
        await ctx.gather("keys", senders=["c"], timeout=0.01)
        ctx.begin_round(5)
        await ctx.send("c", "go", {"n": 2})

    async def c(ctx):
        for kind in ("hello", "peers", "go"):
            await ctx.receive(kind)

    net = TracingNetwork(seed=0)
    net.add_node("server", server, role="server", link=LinkSpec(latency=0.001))
    net.add_node("c", c, role="client", link=LinkSpec(latency=0.001))
    net.run()
    assert [r["round"] for r in net.ledger.records()] == [-1, -6, 5]
    return net


def test_a_setup_round_below_minus_one_says_which_round_it_precedes():
    # every label below 0 was printed "setup": FPL resumed over several networks labels each
    # one's key exchange -1 - (its first round), -6 for a network resumed at round 5
    from fedsim.studies.trace import mermaid, step_log, trace_html

    net = _setup_labels()
    assert step_log(net).splitlines() == [
        "       0.000 ms  server sends hello (setup, 11 B) to c",
        "       0.000 ms  server sends peers (setup for round 5, 11 B) to c",
        "       2.000 ms  c receives hello (setup) from server",
        "       2.000 ms  c receives peers (setup for round 5) from server",
        "      10.000 ms  server stops waiting for keys (setup for round 5): 1 of 1 missing (nothing from c)",
        "      10.000 ms  server sends go (round 5, 8 B) to c",
        "      12.000 ms  c receives go (round 5) from server"]
    assert mermaid(net).splitlines()[3:] == [
        "    Note over N0: setup",
        "    N0->>N1: hello 11 B, sent 0.000 ms, arrived 2.000 ms",
        "    Note over N0: setup for round 5",
        "    N0->>N1: peers 11 B, sent 0.000 ms, arrived 2.000 ms",
        "    Note over N0: stops waiting for keys (setup for round 5)#58; 1 of 1 missing (nothing from c), at 10.000 ms",
        "    Note over N0: round 5",
        "    N0->>N1: go 8 B, sent 10.000 ms, arrived 12.000 ms"]
    page = trace_html(net)
    data = page_data(page)
    assert [(m["round"], m["round_label"]) for m in data["messages"]] == [
        (-1, "setup"), (-6, "setup for round 5"), (5, "round 5")]
    assert re.findall(r'<g class="round">.*?fill="#777">([^<]*)</text></g>', page) == [
        "setup", "setup for round 5", "round 5"]
    assert "(m.round < 0" not in page and "esc(m.round_label)" in page  # the panel writes the label


def test_the_step_panel_says_setup_for_round_5_in_a_headless_browser(tmp_path):
    from fedsim.studies.trace import trace_html

    path = tmp_path / "trace.html"
    path.write_text(trace_html(_setup_labels()), encoding="utf-8")
    driver = _driver(tmp_path)
    from selenium.webdriver.common.by import By

    try:
        driver.get(path.resolve().as_uri())
        nxt = driver.find_element(By.ID, "next")
        heads = []
        for _ in range(4):
            nxt.click()
            heads.append(driver.find_element(By.CSS_SELECTOR, "#panel > div").text)
        # (the wait given up is a step of its own, with its round, among the messages)
        assert heads == ["hello · setup", "peers · setup for round 5", "wait given up · setup for round 5",
                         "go · round 5"]
    finally:
        driver.quit()


def test_timeline_png_draws_every_span_and_arrow_of_the_ledger_one_collection_per_lane_and_kind(tmp_path, monkeypatch):
    # an artist per span and per arrow: 20 s of the 24 s a trace of 150 rounds took (matplotlib
    # autoscaling after each); now one bar collection per lane and kind, one line collection per style
    pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex
    from matplotlib.figure import Figure

    from fedsim.kernel import NetSpec

    figs = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (figs.append(fig), save(fig, *a, **k))[1])
    net, paths = trace("fedrecpp", tmp_path, clients=4, rounds=2, net=NetSpec(profile="wan", dropout=0.5,
                                                                              window=(0.0, 0.3)),
                       sets=["deadline=2"], formats=("png",))
    assert paths["png"].stat().st_size > 10_000 and len(figs) == 1
    ax = figs[0].axes[0]
    lanes = [t.get_text().split(" (")[0] for t in ax.get_yticklabels()]
    colors = {"sending": "#4c72b0", "receiving": "#55a868", "compute": "#c44e52", "sleep": "#e0d080",
              "offline": "#d8d8d8"}
    # what the ledger and the network's trace say, in ms: (lane, kind, start, width)
    rows = list(net.ledger.records())
    want = [(r["src"], "sending", r["tx_start"], r["tx_end"]) for r in rows if r["tx_end"] == r["tx_end"]]
    want += [(r["dst"], "receiving", r["rx_start"], r["arrival_time"]) for r in rows if r["status"] == "delivered"]
    want += [(n, "sleep" if lab == "sleep" else "compute", s, e) for n, s, e, lab in net.trace]
    end = max([w[3] for w in want] + [net.now()])
    offline = [(n.id, n.spec.offline_at) for n in net.nodes.values()
               if n.spec.offline_at is not None and n.spec.offline_at <= net.now()]
    assert offline  # (the dropouts of this seed)
    want += [(node, "offline", t, max(end, t)) for node, t in offline]
    want = sorted((lane, colors[k], round(s * 1000, 6), round(max((e - s) * 1000, 1e-6), 6)) for lane, k, s, e in want)
    got, groups = [], []
    for c in ax.collections:
        if type(c).__name__ == "LineCollection":
            continue
        color = to_hex(c.get_facecolor()[0])
        groups.append(color)
        for path in c.get_paths():
            (x0, y0), (x1, y1) = path.vertices.min(axis=0), path.vertices.max(axis=0)
            got.append((lanes[round((y0 + y1) / 2)], color, round(x0, 6), round(x1 - x0, 6)))
    assert sorted(got) == want
    assert len(groups) == len({(w[0], w[1]) for w in want})  # one collection per lane and kind
    # one arrow per delivered message, from its sender's lane at tx_end to its receiver's at rx_start
    # (dashed, as anonymous ones are: a dash pattern; solid: none)
    segs = sorted((lanes[round(a[1])], lanes[round(b[1])], round(a[0], 6), round(b[0], 6),
                   c.get_linestyle()[0][1] is not None)
                  for c in ax.collections if type(c).__name__ == "LineCollection" for a, b in c.get_segments())
    assert segs == sorted((r["src"], r["dst"], round(r["tx_end"] * 1000, 6), round(r["rx_start"] * 1000, 6),
                           bool(r["anonymous"])) for r in rows if r["status"] == "delivered")
    assert len(ax.lines) == 0


@pytest.fixture(scope="module")
def late_and_lost_trace(tmp_path_factory):
    """FedAvg-AE on a mobile network with loss and a deadline: messages lost, messages that
    arrived after their receiver stopped waiting (never read), uploads over 1 kB."""
    from fedsim.kernel import NetSpec

    out = tmp_path_factory.mktemp("late")
    net, paths = trace("fedavg-ae", out, clients=4, rounds=2, net=NetSpec(profile="mobile", loss=0.2),
                       sets=["deadline=0.05"], formats=("html", "log"))
    return net, paths


def _panel_expected(r: dict) -> dict:
    """What the step panel says of ledger row ``r`` (a run without anonymous messages), computed
    from the row alone."""
    from fedsim.experiment import human_bytes

    ms = lambda t: f"{t * 1000:.3f} ms"  # noqa: E731
    exact = lambda n: f"{n} B" if n < 1000 else f"{human_bytes(n)} ({n} B)"  # noqa: E731
    rnd = f"round {r['round']}" if r["round"] >= 0 else "setup"
    if r["status"] == "lost":
        fate = f"lost ({r['note']})"
    else:
        fate = f"arrived {ms(r['arrival_time'])}" + ("" if r["read"] else ", never read")
    return {"head": f"{r['kind']} · {rnd}",
            "who": f"from {r['src']} ({r['src_role']}) to {r['dst']} ({r['dst_role']})",
            "sizes": f"{exact(r['bytes'])} on the wire, {exact(r['raw_bytes'])} of array payload",
            "times": f"sent {ms(r['send_time'])}, transmitted {ms(r['tx_start'])} to {ms(r['tx_end'])}, {fate}"}


def test_the_step_panel_says_what_the_ledger_has_of_each_lost_late_and_large_message(late_and_lost_trace, tmp_path):
    # the panel gave the wire size rounded alone (3.22 kB): the ledger's count (3224 B) was
    # nowhere on the page but in its embedded data
    net, paths = late_and_lost_trace
    rows = list(net.ledger.records())
    fates = {(r["status"], r["read"]) for r in rows}
    assert fates == {("delivered", True), ("delivered", False), ("lost", False)}
    assert any(r["bytes"] >= 1000 for r in rows) and not any(r["anonymous"] for r in rows)
    driver = _driver(tmp_path)
    from selenium.webdriver.common.by import By

    try:
        driver.get(paths["html"].resolve().as_uri())
        nxt = driver.find_element(By.ID, "next")
        events = 0
        for i, r in enumerate(rows):
            nxt.click()
            while driver.find_elements(By.ID, "event"):  # (a wait given up: a step between messages)
                assert driver.find_element(By.ID, "event").text == "wait given up"
                events += 1
                nxt.click()
            assert driver.find_element(By.ID, "step").text == f"message {i + 1} of {len(rows)}"
            lines = driver.find_element(By.ID, "panel").text.splitlines()
            want = _panel_expected(r)
            assert lines[:4] == [want["head"], want["who"], want["sizes"], want["times"]], i
        nxt.click()
        events += len(driver.find_elements(By.ID, "event"))
        assert events == len({(m.time, m.receiver, m.kind, m.round) for m in net.ledger.missing}) > 0
        assert [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"] == []
    finally:
        driver.quit()


def test_jumping_to_a_round_and_to_either_end_in_a_headless_browser(late_and_lost_trace, tmp_path):
    # the page had only next and previous (and a click on an arrow): a round was reached by
    # stepping through every message before it, the end by stepping through all of them
    net, paths = late_and_lost_trace
    rows = list(net.ledger.records())
    firsts = {}
    for i, r in enumerate(rows):
        firsts.setdefault(r["round"], i)
    assert len(firsts) == 2
    driver = _driver(tmp_path)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    try:
        driver.get(paths["html"].resolve().as_uri())
        step = driver.find_element(By.ID, "step")
        menu = Select(driver.find_element(By.ID, "round"))
        assert [o.text for o in menu.options][1:] == [f"round {k}" for k in firsts]
        for rnd, first in reversed(list(firsts.items())):
            menu.select_by_visible_text(f"round {rnd}")
            assert step.text == f"message {first + 1} of {len(rows)}"
            assert driver.find_element(By.ID, "kind").text == rows[first]["kind"]
            assert [g.get_attribute("id") for g in driver.find_elements(By.CSS_SELECTOR, ".msg.current")] == [f"m{first}"]
        # the menu follows the steps: the message before a round's first is the round before's
        last_round, before = list(firsts)[-1], list(firsts)[-2]
        menu.select_by_visible_text(f"round {last_round}")
        driver.find_element(By.ID, "prev").click()
        assert menu.first_selected_option.text == f"round {before}"
        # the last step: the last message (a late upload, sent after the last wait was given up)
        waits = sorted({(m.time, m.receiver, m.kind, m.round) for m in net.ledger.missing})
        assert waits[-1][0] < rows[-1]["send_time"]
        last = f"message {len(rows)} of {len(rows)}"
        driver.find_element(By.ID, "last").click()
        assert step.text == last
        assert menu.first_selected_option.text == f"round {rows[-1]['round']}"
        driver.find_element(By.ID, "first").click()
        assert step.text == f"message 1 of {len(rows)}"
        body = driver.find_element(By.TAG_NAME, "body")
        body.send_keys(Keys.END)
        assert step.text == last
        body.send_keys(Keys.HOME)
        assert step.text == f"message 1 of {len(rows)}"
        # only the current message's spans are highlighted, every other message's dimmed
        hl = {e.get_attribute("data-msg") for e in driver.find_elements(By.CSS_SELECTOR, ".span.hl")}
        assert hl == {"0"}
        dimmed = driver.execute_script(
            "return Array.from(document.querySelectorAll('.span')).filter(function (r) {"
            " return getComputedStyle(r).opacity < 1; }).map(function (r) { return r.getAttribute('data-msg'); })")
        assert sorted(set(dimmed)) == sorted({str(i) for i in range(1, len(rows))} & set(
            e.get_attribute("data-msg") for e in driver.find_elements(By.CSS_SELECTOR, ".span")))
        assert [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"] == []
    finally:
        driver.quit()


def test_a_trace_of_one_message_steps_to_it_and_stays_there_in_a_headless_browser(tmp_path):
    from fedsim.studies.trace import trace_html

    net = _one_message("a", "client", "b", "hello")
    (row,) = net.ledger.records()
    path = tmp_path / "one.html"
    path.write_text(trace_html(net, title="one"), encoding="utf-8")
    driver = _driver(tmp_path)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    try:
        driver.get(path.resolve().as_uri())
        step = driver.find_element(By.ID, "step")
        assert step.text == "before the first message (1 message)"
        menu = Select(driver.find_element(By.ID, "round"))
        assert [o.text for o in menu.options] == ["(jump to a round)", "round 0"]
        for button in ("next", "next", "last", "prev", "first", "next"):
            driver.find_element(By.ID, button).click()
            assert step.text == ("before the first message (1 message)" if button == "prev" else "message 1 of 1")
        lines = driver.find_element(By.ID, "panel").text.splitlines()
        assert lines[:2] == ["hello · round 0", "from a (client) to b (server)"]
        assert lines[2] == f"{row['bytes']} B on the wire, 0 B of array payload"
        assert [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"] == []
    finally:
        driver.quit()


def _first_whole_rounds(rows: list[dict], limit: int) -> int:
    """How many of ``rows`` a page of at most ``limit`` messages shows: up to the last start of a
    round within the limit, or ``limit`` when the first round alone is longer."""
    starts = [j for j in range(1, min(limit, len(rows) - 1) + 1) if rows[j]["round"] != rows[j - 1]["round"]]
    return len(rows) if len(rows) <= limit else (starts[-1] if starts else limit)


@pytest.fixture(scope="module")
def long_trace(tmp_path_factory):
    out = tmp_path_factory.mktemp("long")
    net, paths = trace("fedrec", out, clients=30, rounds=40, formats=("html",))
    return net, paths["html"]


def test_a_trace_of_thousands_of_messages_draws_its_first_whole_rounds_and_says_what_it_cuts(long_trace):
    # a page of 6030 messages was 10 MB and a step took 0.3 s; one of 1000 rounds over 100 MB
    from fedsim.studies.trace import MAX_PAGE_MESSAGES

    net, path = long_trace
    html = path.read_text()
    rows = list(net.ledger.records())
    n = len(rows)
    assert n > MAX_PAGE_MESSAGES
    k = _first_whole_rounds(rows, MAX_PAGE_MESSAGES)
    assert 0 < k <= MAX_PAGE_MESSAGES and rows[k]["round"] != rows[k - 1]["round"]
    data = page_data(html)
    assert [(m["src"], m["dst"], m["kind"], m["round"], m["bytes"]) for m in data["messages"]] == \
        [(r["src"], r["dst"], r["kind"], r["round"], r["bytes"]) for r in rows[:k]]
    assert html.count('class="msg') == k and html.count('class="span sending"') == k
    assert data["cut"]["shown"] == k and data["cut"]["total"] == n
    total = net.ledger.totals()
    from fedsim.experiment import human_bytes

    assert f" · {n} messages, {human_bytes(total['bytes'])} on the wire. " in html  # the run's, whole
    assert (f"this page shows the first {k} of the run's {n} messages (to round {rows[k - 1]['round']}, sent "
            f"before {rows[k]['send_time'] * 1000:.3f} ms); the other {n - k} (round {rows[k]['round']} and every "
            f"round after it) are left out") in html
    assert len(html) < 2_000 * MAX_PAGE_MESSAGES  # (some 1.75 kB a message)


def test_a_page_cut_inside_its_first_round_says_so(tmp_path):
    from fedsim.studies.trace import trace_html

    net = _one_message("a", "client", "b", "m")
    page = trace_html(net)
    assert page_data(page)["cut"] is None and 'id="cut"' not in page
    net, _ = trace("fedrec", tmp_path, clients=3, rounds=2, formats=("log",))
    rows = list(net.ledger.records())
    first = sum(r["round"] == rows[0]["round"] for r in rows)
    page = trace_html(net, limit=first - 1)
    data = page_data(page)
    assert len(data["messages"]) == first - 1 == _first_whole_rounds(rows, first - 1)
    assert (f"the other {len(rows) - first + 1} (the rest of round {rows[0]['round']} and every round after it)"
            in page)
    assert len(page_data(trace_html(net, limit=1))["messages"]) == 1
    with pytest.raises(ValueError, match="a page shows at least one message, got limit 0"):
        trace_html(net, limit=0)


def test_stepping_through_a_cut_page_in_a_headless_browser(long_trace, tmp_path):
    net, path = long_trace
    rows = list(net.ledger.records())
    n = len(rows)
    k = page_data(path.read_text())["cut"]["shown"]
    driver = _driver(tmp_path)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    try:
        driver.get(path.resolve().as_uri())
        step = driver.find_element(By.ID, "step")
        assert step.text == f"before the first message ({k} messages shown of the run's {n})"
        assert driver.find_element(By.ID, "cut").text.startswith(f"Cut: this page shows the first {k} of")
        driver.find_element(By.ID, "next").click()
        assert step.text == f"message 1 of {k} shown (the run has {n})"
        driver.find_element(By.ID, "last").click()
        assert step.text == f"message {k} of {k} shown (the run has {n})"
        assert driver.find_element(By.ID, "kind").text == rows[k - 1]["kind"]
        menu = Select(driver.find_element(By.ID, "round"))
        assert [o.text for o in menu.options][-1] == f"round {rows[k - 1]['round']}"
        assert [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"] == []
    finally:
        driver.quit()


def test_cli_trace_says_its_page_is_cut(tmp_path, capsys):
    from fedsim.cli import main
    from fedsim.studies.trace import MAX_PAGE_MESSAGES

    assert main(["trace", "fedrec", "--clients", "30", "--rounds", "34", "--html", "--out", str(tmp_path / "t")]) == 0
    out = capsys.readouterr().out
    n = int(re.search(r"traced (\d+) messages", out).group(1))
    assert n > MAX_PAGE_MESSAGES
    assert (f"trace.html draws the first whole rounds of at most {MAX_PAGE_MESSAGES} of the {n} messages and "
            "says which\n") in out
    assert page_data((tmp_path / "t" / "trace.html").read_text())["cut"]["total"] == n


def test_the_notes_of_a_faulty_trace_fit_in_the_sequence_diagram_in_a_headless_browser(tmp_path):
    # a note starts at its node's lifeline: "client/0002 drops out (offline from here on: ...)" over
    # the fourth of five lanes ran past the diagram's right edge and was cut off mid-sentence
    from fedsim.kernel import NetSpec

    net, paths = trace("fcf", tmp_path / "t", clients=4, rounds=2, sets=["deadline=1"], formats=("html",),
                       net=NetSpec(profile="lan", loss=0.3, dropout=0.3, window=(0.0, 0.01)))
    data = page_data(paths["html"].read_text())
    assert data["offline"] and data["missing"]
    driver = _driver(tmp_path)
    from selenium.webdriver.common.by import By

    try:
        driver.get(paths["html"].resolve().as_uri())
        width = float(driver.find_element(By.ID, "sequence").get_attribute("width"))
        notes = driver.execute_script(
            "return Array.from(document.querySelectorAll('#sequence .note text')).map(function (t) {"
            " var b = t.getBBox(); return [t.textContent, b.x, b.x + b.width]; })")
        assert len(notes) == len(data["offline"]) + len(data["missing"])
        assert any(" drops out " in text for text, _, _ in notes)
        for text, left, right in notes:
            assert 0 <= left and right <= width, text
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def faulty_trace(tmp_path_factory):
    """FCF on a LAN with loss, dropouts early in the run and a deadline: waits given up, clients
    dropping out, messages lost."""
    from fedsim.kernel import NetSpec

    out = tmp_path_factory.mktemp("faulty")
    net, paths = trace("fcf", out, clients=4, rounds=2, sets=["deadline=1"], formats=("html",),
                       net=NetSpec(profile="lan", loss=0.3, dropout=0.3, window=(0.0, 0.01)))
    return net, paths["html"]


def _expected_events(net) -> list[tuple[float, str, str]]:
    """(time, head, sentence) of each wait given up, dropout and deadlock, from the ledger's
    missing records and the nodes' offline times (not from the page's data)."""
    groups: dict = {}
    for m in net.ledger.missing:
        groups.setdefault((float(m.time), m.receiver, m.kind, int(m.round), m.expected), []).append(m.sender)
    out = []
    for (t, recv, kind, rnd, expected), senders in groups.items():
        named = [s for s in senders if s is not None]
        parts = ([f"nothing from {', '.join(named)}"] if named else []) + \
            (["from any sender"] if not named else [])
        n = len(senders)
        out.append((t, "wait given up", f"{recv} gives up waiting for {kind} (round {rnd}) at {t * 1000:.3f} ms: "
                    f"{n} of {expected} message{'s' if expected != 1 else ''} missing ({' and '.join(parts)})"))
    for node in net.nodes.values():
        off = node.spec.offline_at
        if off is not None and off <= net.now() and node.offline:
            out.append((float(off), "dropout", f"{node.id} drops out at {off * 1000:.3f} ms: offline from here on, "
                        "its actor stops, messages to or from it are lost"))
    return sorted(out)


def test_waits_given_up_and_dropouts_are_steps_in_time_order_in_a_headless_browser(faulty_trace, tmp_path):
    # stepping covered the messages alone: a wait given up at its deadline or a client dropping
    # out was a note in the diagram, never in the step panel
    net, path = faulty_trace
    rows = list(net.ledger.records())
    events = _expected_events(net)
    assert {h for _, h, _ in events} == {"wait given up", "dropout"}
    driver = _driver(tmp_path)
    from selenium.webdriver.common.by import By

    try:
        driver.get(path.resolve().as_uri())
        step = driver.find_element(By.ID, "step")
        assert step.text == f"before the first message ({len(rows)} messages, {len(events)} events)"
        nxt = driver.find_element(By.ID, "next")
        seen_msgs, seen_events, times = 0, [], []
        for _ in range(len(rows) + len(events)):
            nxt.click()
            if driver.find_elements(By.ID, "event"):
                head = driver.find_element(By.ID, "event").text
                text = driver.find_element(By.ID, "what").text
                seen_events.append((head, text))
                where = f"after message {seen_msgs}" if seen_msgs else "before message 1"
                assert step.text == f"{head}, {where} of {len(rows)}"
                t = float(re.search(r" at ([0-9.]+) ms", text).group(1))
                current = driver.find_elements(By.CSS_SELECTOR, ".note.current")
                assert len(current) == 1 and current[0].text.startswith(f"{t:.3f} ms: ")
                # the timeline's cursor stands at the event's time
                tl = driver.find_element(By.ID, "timeline")
                x = float(driver.find_element(By.ID, "cursor").get_attribute("x1"))
                assert x == pytest.approx(float(tl.get_attribute("data-t0")) + t / 1000 *
                                          float(tl.get_attribute("data-scale")), abs=1e-3)
            else:
                r = rows[seen_msgs]
                seen_msgs += 1
                assert step.text == f"message {seen_msgs} of {len(rows)}"
                assert driver.find_element(By.ID, "kind").text == r["kind"]
                t = r["send_time"] * 1000
            times.append(t)
        assert seen_msgs == len(rows)
        assert sorted(seen_events) == sorted((h, text) for _, h, text in events)
        assert times == sorted(times), "the steps are in time order"
        nxt.click()  # the last step stays
        assert driver.find_elements(By.ID, "event") or step.text == f"message {len(rows)} of {len(rows)}"
        # a click on a note steps to it
        note = driver.find_elements(By.CSS_SELECTOR, "#sequence .note")[0]
        driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", note)
        assert driver.find_element(By.ID, "what").text in [text for _, _, text in events]
        assert note.get_attribute("class") == "note current"
        assert [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"] == []
    finally:
        driver.quit()


def test_the_lane_headers_stay_in_view_down_a_long_diagram_in_a_headless_browser(long_trace, tmp_path):
    # the lane headers were drawn at the diagram's top alone: some rows down, no lane was named
    net, path = long_trace
    data = page_data(path.read_text())
    k = data["cut"]["shown"]
    driver = _driver(tmp_path)
    from selenium.webdriver.common.by import By

    def lanes_in_view():
        """Each lane header's text, whether it lies in the window below the controls, and the
        headers' bottom."""
        return driver.execute_script(
            "var top = document.getElementById('controls').getBoundingClientRect().bottom, out = [];"
            "document.querySelectorAll('#sequence .lane').forEach(function (g) {"
            " if (getComputedStyle(g).display === 'none') return;"
            " var b = g.querySelector('rect').getBoundingClientRect();"  # (the lane's box)
            " out.push([g.querySelector('text').textContent, b.top >= top - 0.5 && b.bottom <= innerHeight, b.bottom]);"
            "}); return out;")

    try:
        driver.get(path.resolve().as_uri())
        names = [n["id"] for n in data["nodes"]]
        lanes = lanes_in_view()
        assert [name for name, _, _ in lanes] == names and all(seen for _, seen, _ in lanes), lanes
        driver.find_element(By.ID, "last").click()
        assert driver.find_element(By.ID, "step").text == f"message {k} of {k} shown (the run has {len(net.ledger)})"
        # the diagram is scrolled far down; every lane is still named, above the current arrow
        assert driver.execute_script("return window.scrollY") > 10_000
        lanes = lanes_in_view()
        assert [name for name, _, _ in lanes] == names and all(seen for _, seen, _ in lanes), lanes
        arrow = driver.find_element(By.CSS_SELECTOR, ".msg.current").rect["y"] - driver.execute_script(
            "return window.scrollY")
        assert arrow >= max(bottom for _, _, bottom in lanes) - 0.5
        # and anywhere between: scrolled by hand to the middle of the diagram
        driver.execute_script("window.scrollTo(0, document.getElementById('sequence').getBoundingClientRect().top"
                              " + window.scrollY + 20000)")
        driver.execute_script("return new Promise(function (r) { requestAnimationFrame(function () { r(); }); })")
        lanes = lanes_in_view()
        assert all(seen for _, seen, _ in lanes), lanes
        assert [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"] == []
    finally:
        driver.quit()


def test_the_timeline_zooms_to_the_step_and_to_the_round_in_a_headless_browser(faulty_trace, tmp_path):
    # with a deadline of 1 s the timeline spanned seconds while a message took microseconds: every
    # transmission was drawn 0.8 px wide at the left edge, whatever the step
    net, path = faulty_trace
    rows = list(net.ledger.records())
    driver = _driver(tmp_path)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    def at_message(i):
        driver.find_element(By.ID, "first").click()
        while driver.find_element(By.ID, "step").text != f"message {i + 1} of {len(rows)}":
            driver.find_element(By.ID, "next").click()

    def sending_span(i):
        r = driver.find_element(By.CSS_SELECTOR, f'.span.sending[data-msg="{i}"]')
        return float(r.get_attribute("x")), float(r.get_attribute("width"))

    try:
        driver.get(path.resolve().as_uri())
        tl = driver.find_element(By.ID, "timeline")
        left, right = float(tl.get_attribute("data-left")), float(tl.get_attribute("data-right"))
        end = float(tl.get_attribute("data-end"))
        i = next(k for k, r in enumerate(rows) if r["status"] == "delivered" and not r["anonymous"])
        r = rows[i]
        at_message(i)
        assert driver.find_element(By.ID, "tl-range").text == f"simulated time, 0 to {end * 1000:.3f} ms"
        assert end > 0.9 and sending_span(i)[1] < 1  # the whole run: the transmission is a sliver
        Select(driver.find_element(By.ID, "zoom")).select_by_visible_text("zoomed to the step")
        d = r["arrival_time"] - r["send_time"]
        lo, hi = max(0.0, r["send_time"] - d / 10), r["arrival_time"] + d / 10
        assert float(tl.get_attribute("data-from")) == pytest.approx(lo, rel=1e-12, abs=1e-15)
        assert float(tl.get_attribute("data-to")) == pytest.approx(hi, rel=1e-12)
        assert driver.find_element(By.ID, "tl-range").text == (
            f"simulated time, {'0' if lo == 0 else f'{lo * 1000:.3f} ms'} to {hi * 1000:.3f} ms "
            f"(zoomed to message {i + 1} of 0 to {end * 1000:.3f} ms)")
        sx = (right - left) / (hi - lo)
        x, w = sending_span(i)
        assert x == pytest.approx(left + (r["tx_start"] - lo) * sx, abs=0.01)
        assert w == pytest.approx(max((r["tx_end"] - r["tx_start"]) * sx, 0.8), abs=0.01)
        rx = driver.find_element(By.CSS_SELECTOR, f'.span.receiving[data-msg="{i}"]')
        assert float(rx.get_attribute("x")) + float(rx.get_attribute("width")) == pytest.approx(
            left + (r["arrival_time"] - lo) * sx, abs=0.01)
        # the message, send to arrival, spans at least 10/12 of the lanes' width (a tenth either side)
        assert (r["arrival_time"] - r["send_time"]) * sx >= (right - left) * 10 / 12 - 1e-9
        cursor = driver.find_element(By.ID, "cursor")
        assert float(cursor.get_attribute("x1")) == pytest.approx(left + (r["send_time"] - lo) * sx, abs=0.01)
        # spans outside the window are not drawn; those inside stay within the lanes' area
        fields = {"queueing": ("send_time", "tx_start"), "sending": ("tx_start", "tx_end"),
                  "propagating": ("tx_end", "rx_start"), "receiving": ("rx_start", "arrival_time")}
        for s in driver.find_elements(By.CSS_SELECTOR, ".span"):
            k, kind = int(s.get_attribute("data-msg")), s.get_attribute("class").split()[1]
            if k >= 0:  # a message's span: its times are the ledger's
                start, stop = (rows[k][f] for f in fields[kind])
            else:  # a computation, a node offline
                start, stop = float(s.get_attribute("data-s")), float(s.get_attribute("data-e"))
            inside = stop >= lo and start <= hi
            assert s.get_attribute("visibility") == ("visible" if inside else "hidden")
            if inside:
                assert left - 0.01 <= float(s.get_attribute("x")) and \
                    float(s.get_attribute("x")) + float(s.get_attribute("width")) <= right + 0.8
        # the round: from its first event to its last, those of its messages (sent, last byte
        # out, arrived, read), its waits given up and the dropouts among its messages (a note
        # belongs to the round of the message sent before it: the first message's if none was),
        # from the ledger, the network's reads and the nodes' offline times (not the page's data)
        Select(driver.find_element(By.ID, "zoom")).select_by_visible_text("zoomed to the round")
        rnd = [q for q in rows if q["round"] == r["round"]]
        times = [q[f] for q in rnd for f in ("send_time", "tx_end", "arrival_time") if q[f] == q[f]]
        times += [net.read_at[q["seq"]] for q in rnd if q["seq"] in net.read_at]
        rounds_sent = {q["round"] for q in rows}
        assert {m.round for m in net.ledger.missing} <= rounds_sent  # (each wait given up is its own round's)
        times += [float(m.time) for m in net.ledger.missing if m.round == r["round"]]
        # (steps in time order: the messages by send, the waits given up with their own rounds)
        steps = sorted([(q["send_time"], q["round"]) for q in rows] +
                       [(float(m.time), m.round) for m in net.ledger.missing], key=lambda e: e[0])
        dropouts = [t for t, head, _ in _expected_events(net) if head == "dropout"]
        assert dropouts and not {t for t, _ in steps} & set(dropouts)  # (no tie to order)
        for t in dropouts:
            before = [q for u, q in steps if u < t]
            if (before[-1] if before else rows[0]["round"]) == r["round"]:
                times.append(t)
        lo, hi = min(times), max(times)
        assert hi > max(q["arrival_time"] for q in rnd if q["status"] == "delivered")  # (a wait given up last)
        assert (float(tl.get_attribute("data-from")), float(tl.get_attribute("data-to"))) == (lo, hi)
        assert driver.find_element(By.ID, "tl-range").text == (
            f"simulated time, {'0' if lo == 0 else f'{lo * 1000:.3f} ms'} to {hi * 1000:.3f} ms "
            f"(zoomed to round {r['round']} of 0 to {end * 1000:.3f} ms)")
        Select(driver.find_element(By.ID, "zoom")).select_by_visible_text("whole run")
        assert driver.find_element(By.ID, "tl-range").text == f"simulated time, 0 to {end * 1000:.3f} ms"
        assert sending_span(i)[1] < 1
        assert [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"] == []
    finally:
        driver.quit()



def test_the_round_view_ends_at_the_rounds_last_event_not_at_its_deadline_in_a_headless_browser(tmp_path):
    # "zoomed to the round" spans the round's events: from its first send to its last arrival,
    # read or note. A round that ends in a wait given up ends at that give-up, which on the
    # simulator is the deadline (the gather's timer) or, for a gather begun after its deadline
    # had passed, later; a round whose messages all came in time ends at its last arrival,
    # however far its deadline
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from fedsim.kernel import LinkSpec
    from fedsim.studies.trace import TracingNetwork, trace_html

    deadlines = (0.05, 1.0)

    async def server(ctx):
        for r in range(2):
            ctx.begin_round(r)
            await ctx.broadcast(["a", "b", "c"], "go", {"r": r})
            dl = ctx.deadline(deadlines[r])
            await ctx.gather("up", senders=["a", "b"] + (["c"] if r == 0 else []), round=r, deadline=dl)
            if r == 0:
                await ctx.sleep(0.005)
                await ctx.gather("late", senders=["c"], round=r, deadline=dl)  # passed: given up at once

    async def client(ctx):
        for r in range(2):
            ctx.begin_round(r)
            await ctx.receive("go")
            if ctx.node_id != "c":
                await ctx.send("server", "up", {"x": 1})

    net = TracingNetwork(seed=0)
    net.add_node("server", server, role="server", link=LinkSpec(latency=0.001))
    for n in "abc":
        net.add_node(n, client, role="client", link=LinkSpec(latency=0.001))
    net.run()
    rows = list(net.ledger.records())
    gave_up = [(m.round, m.kind, float(m.time)) for m in net.ledger.missing]
    assert gave_up == [(0, "up", deadlines[0]), (0, "late", pytest.approx(deadlines[0] + 0.005))]
    path = tmp_path / "trace.html"
    path.write_text(trace_html(net))
    expected = {0: (min(r["send_time"] for r in rows if r["round"] == 0), gave_up[1][2]),
                1: (min(r["send_time"] for r in rows if r["round"] == 1),
                    max(r["arrival_time"] for r in rows if r["round"] == 1))}
    assert expected[0][1] > deadlines[0] and expected[1][1] < deadlines[1] / 10
    driver = _driver(tmp_path)
    try:
        driver.get(path.resolve().as_uri())
        tl = driver.find_element(By.ID, "timeline")
        end = float(tl.get_attribute("data-end"))
        Select(driver.find_element(By.ID, "zoom")).select_by_visible_text("zoomed to the round")
        for rnd in (0, 1):
            Select(driver.find_element(By.ID, "round")).select_by_visible_text(f"round {rnd}")
            lo, hi = expected[rnd]
            assert (float(tl.get_attribute("data-from")), float(tl.get_attribute("data-to"))) == \
                (pytest.approx(lo, abs=1e-12), pytest.approx(hi, abs=1e-12))
            assert driver.find_element(By.ID, "tl-range").text == (
                f"simulated time, {'0' if lo == 0 else f'{lo * 1000:.3f} ms'} to {hi * 1000:.3f} ms "
                f"(zoomed to round {rnd} of 0 to {end * 1000:.3f} ms)")
        assert [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"] == []
    finally:
        driver.quit()

def test_the_views_of_a_long_trace_are_bounded_and_say_what_they_leave_out(long_trace, tmp_path, monkeypatch):
    # sequence.mmd, timeline.svg and timeline.png drew every message: for 1000 rounds of demo with
    # 30 clients a 4.4 MB Mermaid file (Mermaid draws none over 50000 characters), a 25 MB SVG and
    # a PNG of slivers that took matplotlib 6 s; steps.log stays whole
    from fedsim.studies.trace import MAX_MERMAID_CHARS, MAX_PAGE_MESSAGES, mermaid, step_log, timeline_png, timeline_svg

    net, _ = long_trace
    rows = list(net.ledger.records())
    n = len(rows)
    # sequence.mmd: a prefix of the whole diagram, its first whole rounds within Mermaid's limit
    whole = mermaid(net, limit=10**9).splitlines()
    text = mermaid(net)
    lines = text.splitlines()
    assert len(text.encode("utf-16-le")) // 2 <= MAX_MERMAID_CHARS < len("\n".join(whole))
    assert lines[:-1] == whole[:len(lines) - 1]
    arrows = [line for line in lines if "->>" in line or "-x" in line]
    k = len(arrows)
    assert 0 < k < n and rows[k]["round"] != rows[k - 1]["round"]
    assert arrows == [line for line in whole if "->>" in line or "-x" in line][:k]
    # the next round would not have fitted
    nxt = next(j for j in range(k + 1, n + 1) if j == n or rows[j]["round"] != rows[j - 1]["round"])
    upto = [i for i, line in enumerate(whole) if "->>" in line or "-x" in line][nxt - 1]
    assert len("\n".join(whole[:upto + 1])) > MAX_MERMAID_CHARS
    assert lines[-1] == (f"    Note over N0: cut#58; this diagram shows the first {k} of the run's {n} messages "
                         f"(to round {rows[k - 1]['round']})#59; round {rows[k]['round']} and every round after it are "
                         f"left out (with their notes) to stay within Mermaid's {MAX_MERMAID_CHARS}-character limit#59; "
                         "steps.log has every message")
    # timeline.svg and timeline.png: the page's first whole rounds
    shown = _first_whole_rounds(rows, MAX_PAGE_MESSAGES)
    at = rows[shown]["send_time"]
    cut = (f"Cut: the first {shown} of the run's {n} messages (to round {rows[shown - 1]['round']}, sent before "
           f"{at * 1000:.3f} ms); round {rows[shown]['round']} and every round after it left out: steps.log has "
           "every message")
    svg = timeline_svg(net)
    assert svg.count("<title>sending ") == sum(r["tx_end"] == r["tx_end"] for r in rows[:shown])
    assert svg.count("<title>compute ") == sum(s < at for _, s, _, _ in net.trace)
    assert f'<text id="cut" x="5" y="32" fill="#A0522D">{cut}</text>' in svg
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    figs = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **kw: (figs.append(fig), save(fig, *a, **kw))[1])
    timeline_png(net, tmp_path / "t.png")
    ax = figs[0].axes[0]
    assert ax.get_title(loc="left").replace("\n", " ") == cut
    bars = sum(len(c.get_paths()) for c in ax.collections if type(c).__name__ != "LineCollection")
    assert bars == sum(r["tx_end"] == r["tx_end"] for r in rows[:shown]) + \
        sum(r["status"] == "delivered" for r in rows[:shown]) + sum(s < at for _, s, _, _ in net.trace)
    # steps.log: every message
    log = step_log(net)
    assert log.count(" sends ") == n


def test_cli_trace_says_which_of_its_files_are_cut(tmp_path, capsys):
    from fedsim.cli import main
    from fedsim.studies.trace import MAX_MERMAID_CHARS, MAX_PAGE_MESSAGES

    out = tmp_path / "t"
    assert main(["trace", "fedrec", "--clients", "30", "--rounds", "34", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    n = int(re.search(r"traced (\d+) messages", said).group(1))
    log = (out / "steps.log").read_text()
    assert log.count(" sends ") == n > MAX_PAGE_MESSAGES  # the whole record
    shown = page_data((out / "trace.html").read_text())["cut"]["shown"]
    mmd = (out / "sequence.mmd").read_text()
    k = sum("->>" in line or "-x" in line for line in mmd.splitlines())
    assert len(mmd) <= MAX_MERMAID_CHARS and f"shows the first {k} of the run's {n} messages" in mmd
    assert (f"trace.html draws the first whole rounds of at most {MAX_PAGE_MESSAGES} of the {n} messages and says "
            f"which (every message is in steps.log)\n") in said
    png = (out / "timeline.png").exists()
    assert (f"timeline.svg{' and timeline.png' if png else ''} draw{'' if png else 's'} the same {shown} messages "
            f"and say{'' if png else 's'} so\n") in said
    assert (f"sequence.mmd holds the first {k} messages (whole rounds within Mermaid's {MAX_MERMAID_CHARS}-character "
            "limit) and says so\n") in said
    assert f"Cut: the first {shown} of the run's {n} messages" in (out / "timeline.svg").read_text()


def test_a_deadlock_is_a_step_after_the_last_message_in_a_headless_browser(tmp_path):
    from fedsim.kernel import LinkSpec
    from fedsim.kernel.errors import DeadlockError
    from fedsim.studies.trace import TracingNetwork, trace_html

    async def server(ctx):
        await ctx.send("a", "go", {"n": 0})
        await ctx.gather("up", senders=["a"])

    async def a(ctx):
        await ctx.receive("go")
        await ctx.receive("never")

    net = TracingNetwork(seed=0)
    net.add_node("server", server, role="server", link=LinkSpec(latency=0.001))
    net.add_node("a", a, role="client", link=LinkSpec(latency=0.001))
    with pytest.raises(DeadlockError):
        net.run()
    blocked = sorted(net.result.blocked.items())
    assert [n for n, _ in blocked] == ["a", "server"]
    path = tmp_path / "trace.html"
    path.write_text(trace_html(net), encoding="utf-8")
    driver = _driver(tmp_path)
    from selenium.webdriver.common.by import By

    try:
        driver.get(path.resolve().as_uri())
        step = driver.find_element(By.ID, "step")
        assert step.text == "before the first message (1 message, 2 events)"
        driver.find_element(By.ID, "next").click()
        assert step.text == "message 1 of 1"
        end = net.result.duration * 1000
        for node, waits in blocked:
            driver.find_element(By.ID, "next").click()
            assert step.text == "deadlock, after message 1 of 1"
            assert driver.find_element(By.ID, "what").text == (
                f"{node} is still waiting when the run ends at {end:.3f} ms, with nothing left that could wake it: "
                f"{waits}")
        driver.find_element(By.ID, "first").click()
        driver.find_element(By.ID, "last").click()
        assert driver.find_element(By.ID, "what").text.startswith("server is still waiting")
        assert [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"] == []
    finally:
        driver.quit()


def test_step_log_gives_a_span_too_short_for_its_clock_in_its_own_unit(tmp_path):
    # the demo's nodes compute a few hundred flops at lan's 2e10 flop/s (clients) and 1e11 (the
    # server): nanoseconds, which read "computes for 0.000 ms"
    from fedsim.studies.trace import trace

    trace("demo", tmp_path, clients=2, rounds=1, formats=("log",))
    lines = (tmp_path / "steps.log").read_text().splitlines()
    assert [ln.strip() for ln in lines if " for " in ln] == [
        "1.001 ms  client/000 computes for 8.8 ns", "1.001 ms  client/001 computes for 26.4 ns",
        "2.002 ms  server computes for 0.16 ns"]
