"""Memory that must not grow with the number of rounds: what an actor or the kernel keeps from one
round to the next is bounded by the clients, not by the rounds (the in-memory ledger's rows, and a
tracing network's lists, grow by design; a StreamingLedger's stay bounded)."""

import gc
import tracemalloc

import numpy as np

from fedsim.data import generate
from fedsim.kernel import SimNetwork
from fedsim.kernel.ledger import ROUND
from fedsim.protocols import fpl
from fedsim.protocols.fpl import FPLConfig


class RoundProbe:
    """A tap that, at the first message of each round in ``at``, collects garbage and notes the
    memory tracemalloc sees allocated then (and the network's state from ``also``)."""

    def __init__(self, at, also=None):
        self.at, self.also, self.last = set(at), also, None
        self.traced, self.seen = {}, {}

    def observe(self, row, payload):
        r = row[ROUND]
        if r != self.last:
            self.last = r
            if r in self.at and r not in self.traced:
                gc.collect()
                self.traced[r] = tracemalloc.get_traced_memory()[0]
                if self.also is not None:
                    self.seen[r] = self.also()


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
