"""Memory that must not grow with the number of rounds: what an actor or the kernel keeps from one
round to the next is bounded by the clients, not by the rounds (the in-memory ledger's rows, and a
tracing network's lists, grow by design; a StreamingLedger's stay bounded)."""

import gc
import inspect
import tracemalloc

import numpy as np
import pytest

from fedsim.data import generate
from fedsim.kernel import SimNetwork, StreamingLedger, codec
from fedsim.kernel.ledger import ROUND
from fedsim.protocols import fedae, fedavg_ae, fpl, personalfr
from fedsim.protocols.fedae import selection_size
from fedsim.protocols.fpl import FPLConfig
from fedsim.protocols.registry import REGISTRY


class RoundProbe:
    """A tap that, at the first message of each round in ``at``, collects garbage and notes the
    memory tracemalloc sees allocated then."""

    def __init__(self, at):
        self.at, self.last, self.traced = set(at), None, {}

    def observe(self, row, payload):
        r = row[ROUND]
        if r != self.last:
            self.last = r
            if r in self.at and r not in self.traced:
                gc.collect()
                self.traced[r] = tracemalloc.get_traced_memory()[0]


def traced_run(net, job, probe):
    net.tap = probe
    tracemalloc.start()
    try:
        return job.collect(net.run())
    finally:
        tracemalloc.stop()


def test_fpl_clients_let_go_of_the_model_between_rounds():
    # one client a round out of 30: before, each client kept the last model message it was sent
    # (a zero-copy view keeps the whole broadcast document alive) until it was chosen again, so
    # the documents of up to 30 rounds were alive at once, one more every round
    data = generate("tiny", seed=2).binarize()
    cfg = FPLConfig(clients_per_round=1, triples=3, rounds=45, d=400, pi=0.5)
    doc = data.n_items * (cfg.d + 1) * 4  # one model document's elements
    warm = SimNetwork(seed=3)  # compiles the client's round outside tracemalloc (slow under it)
    fpl.build(warm, data, FPLConfig(clients_per_round=1, triples=3, rounds=1, d=400, pi=0.5)).collect(warm.run())
    net = SimNetwork(seed=3)
    job = fpl.build(net, data, cfg)
    probe = RoundProbe(at=(10, 40))
    res = traced_run(net, job, probe)
    assert np.count_nonzero(res.info["rounds"]) > 20  # (most clients took part, at different rounds)
    grown = probe.traced[40] - probe.traced[10]
    assert doc > 50_000
    assert grown < 2 * doc, f"{grown} bytes more at round 40 than at round 10 ({grown / doc:.1f} model documents)"


async def _pinger(ctx, rounds, pause, each):
    """Each round: a ping to the client, then its pong, waited for 1 s (a late one is discarded
    unread by the next round's gather: at once, or from the mailbox after ``pause``)."""
    for r in range(rounds):
        ctx.begin_round(r)
        await ctx.send("client", "ping", None)  # (a payload of its own each round would fill
        # the codec's caches of plans and layouts, which are bounded)
        if each:
            async for _ in ctx.gather_each("pong", senders=["client"], timeout=1.0, round=r):
                pass
        else:
            await ctx.gather("pong", senders=["client"], timeout=1.0, round=r)
        if pause:
            await ctx.sleep(pause)
    await ctx.send("client", "stop", None)


async def _ponger(ctx):
    """Answers every ping, those of odd rounds 1.5 s late (after the server's deadline)."""
    while True:
        msg = await ctx.receive(("ping", "stop"))
        if msg.kind == "stop":
            return
        ctx.begin_round(msg.round)
        if msg.round % 2:
            await ctx.sleep(1.5)
        await ctx.send("server", "pong", None)


@pytest.mark.parametrize("pause", [0.0, 1.0], ids=["discarded on arrival", "discarded from the mailbox"])
@pytest.mark.parametrize("each", [False, True], ids=["gather", "gather_each"])
def test_a_streaming_ledger_lets_go_of_the_rows_of_late_messages_a_gather_discards(pause, each):
    # before, a late pong's row stayed in memory to the end: delivered and never read, it was
    # taken for a row still in motion; one more every other round (134 kB from round 100 to 700)
    led = StreamingLedger(chunk_rows=4)
    net = SimNetwork(seed=0, ledger=led)
    net.add_node("server", _pinger, 800, pause, each, role="server")
    net.add_node("client", _ponger)
    probe = RoundProbe(at=(100, 700))
    net.tap = probe
    tracemalloc.start()
    try:
        net.run()
    finally:
        tracemalloc.stop()
    late = led.select(kind="pong", fate="delivered", read=False).totals().messages
    assert late == 400  # every odd round's pong arrived and was discarded unread
    assert led.select(kind="pong", read=True).totals().messages == 400
    grown = probe.traced[700] - probe.traced[100]
    # (the ledger keeps one Missing record per odd round, by design: some 130 bytes each; a row
    # held takes some 400)
    assert grown < 300 * 200, f"{grown} bytes more at round 700 than at round 100"
    # the rows it let go of are in its file as they were: the same ledger as one kept in memory
    mem = SimNetwork(seed=0)
    mem.add_node("server", _pinger, 800, pause, each, role="server")
    mem.add_node("client", _ponger)
    mem.run()
    assert led.to_csv() == mem.ledger.to_csv()


def _call_line(fn, text):
    """The line number of ``text`` in function ``fn``'s source (where it sends its model)."""
    lines, first = inspect.getsourcelines(fn)
    at = [first + i for i, line in enumerate(lines) if text in line]
    assert len(at) == 1, f"{text!r} found {len(at)} times in {fn.__qualname__}"
    return at[0]


class DocumentProbe:
    """A tap that, at the first message of each round in ``at`` (the server's model, just encoded),
    collects garbage and notes the blocks of at least ``size`` bytes the codec allocated for one of
    ``sites`` (``(filename, line)``: where the server sends the model documents) still allocated."""

    def __init__(self, at, sites, size):
        self.at, self.sites, self.size, self.last, self.alive = set(at), set(sites), size, None, {}

    def observe(self, row, payload):
        r = row[ROUND]
        if r != self.last:
            self.last = r
            if r in self.at and r not in self.alive:
                gc.collect()
                snap = tracemalloc.take_snapshot()
                self.alive[r] = sorted(
                    t.size for t in snap.traces if t.size >= self.size
                    and any((f.filename, f.lineno) in self.sites for f in t.traceback)
                    and any(f.filename == codec.__file__ for f in t.traceback))


@pytest.mark.parametrize("protocol, changes", [
    ("fedavg-ae", {}),
    ("personalfr", {"compression": False}),
    ("personalfr", {"compression": True}),
    ("personalfr", {"compression": True, "client_momentum": "reset"}),
], ids=["fedavg-ae", "personalfr uncompressed", "personalfr compressed", "personalfr reset"])
def test_idle_autoencoder_clients_let_go_of_the_model_documents_they_were_sent(protocol, changes):
    # client_momentum="keep" (the default): before, an idle client kept the last model message it was
    # sent (its arrays are zero-copy views of the whole document) until its next message: the document
    # of every round whose clients had not all been chosen again stayed allocated, one more per round
    # (one client a round of 15 here) until every client had been chosen (about 97 kB a round on
    # ml100k-like); the evaluation's broadcast likewise until each client's next message. A
    # PersonalFR client in "reset" mode dropped the message but kept its checked decoder (views)
    spec = REGISTRY[protocol]
    mod = fedavg_ae if protocol == "fedavg-ae" else personalfr
    data, cfg = spec.tiny(15, 26, 0)
    cfg = cfg.replace(fraction=1 / 15, hidden=(64, 32), eval_every=4, **changes)
    assert cfg.client_momentum == changes.get("client_momentum", "keep") and selection_size(cfg.fraction, 15) == 1
    # every document the server sends holds the decoder's hidden layer whole (64 x 32 float32)
    size = 4 * cfg.hidden[0] * cfg.hidden[1]
    send = 'await ctx.broadcast(chosen, "model"' if protocol == "fedavg-ae" else \
        ('await ctx.send(name, "decoder"' if cfg.compression else 'await ctx.broadcast(chosen, "decoder"')
    sites = {(mod.__file__, _call_line(mod.server, send)),
             (fedae.__file__, _call_line(fedae.evaluate_clients, 'await ctx.broadcast(clients, "evaluate"'))}
    warm = SimNetwork(seed=3)
    spec.build(warm, data, cfg.replace(rounds=1)).collect(warm.run())
    net = SimNetwork(seed=3)
    job = spec.build(net, data, cfg, test=data)
    probe = DocumentProbe(at=(6, 14, 22, 26), sites=sites, size=size)
    net.tap = probe
    tracemalloc.start(12)
    try:
        res = job.collect(net.run())
    finally:
        tracemalloc.stop()
    assert len({c for sel in res.info["selected"][:21] for c in sel}) > 8  # (many clients by round 22)
    assert [h["round"] for h in res.metrics] == [4, 8, 12, 16, 20, 24, 26]
    # at the start of each round only the document just sent is left of those the server sent
    for r, blocks in probe.alive.items():
        assert len(blocks) == 1, f"round {r}: {len(blocks)} model documents alive ({sum(blocks)} bytes)"
