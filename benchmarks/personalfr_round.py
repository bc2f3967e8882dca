"""One communication round of PersonalFR (and of FedAvg) on MovieLens-100K with M = 100: time split
between the math and the simulation.

    OPENBLAS_NUM_THREADS=1 python benchmarks/personalfr_round.py [--data PATH] [--clients 100] [--repeats 5]

The data (``--data``: default the ``ml-100k`` folder, the ``ml100k-like`` synthetic preset when it is absent;
any ``resolve`` spec such as ``ml1m-like``) is
split 80/20 per user and partitioned into M clients; one run = the setup (every client sends its rated-item
indices) and one round (C = 0.1: 10 clients, K = 5 local epochs, batch 10, dropout 0.5, SGD Nesterov,
clipping; the server cuts each client's active decoder out, merges the returned slices with Eq. 5), on the
``ideal`` profile, without evaluation. Timers wrap the functions the actors call:

``math: local training``     ``ae_train.local_train`` (forward, backward, clipping, SGD steps)
``math: encoder init``       a client's first draw of its private encoder
``math: server``             ``extract_active``, ``merge_active``, ``mean_params`` (FedAvg: the model mean)
``math: copies``             ``copy_params`` of the received (read-only) arrays
``codec``                    ``encode_message`` / ``draft_message`` as ``send`` calls them, ``decode_encoded`` as
                             an envelope decodes a message (once per document)
``kernel + actors``          the rest: scheduling, mailboxes, ledger rows, actor code

Medians over ``--repeats`` runs (the first run is a warm-up and not counted). Prints one line per figure,
then one JSON object.

``--clock process`` (default) times with ``time.process_time`` (CPU seconds of this process), ``--clock wall``
with ``time.perf_counter``. With one BLAS thread the two agree on an idle machine; on the shared machine,
where ``nice``d jobs wait for the CPU (and may be paused by other jobs), wall time measured the waiting:
a run on 2026-11-22 gave 29 s of wall time per PersonalFR round for 0.5 s of CPU.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from fedsim.data import partition_users, per_user_random, resolve
from fedsim.kernel import SimNetwork
from fedsim.kernel import context as kctx
from fedsim.kernel import envelope as kenv
from fedsim.math import active as act
from fedsim.math import ae_train
from fedsim.math import autoencoder as ae
from fedsim.protocols import fedavg_ae, personalfr
from fedsim.protocols.personalfr import FedAEConfig

DEFAULT_DATA = "/work/shared/data/ml-100k"


class Timers:
    """Wraps module attributes with accumulating timers; ``restore`` puts the originals back."""

    def __init__(self, clock=time.process_time):
        self.acc: dict[str, float] = {}
        self.clock = clock
        self._saved = []

    def wrap(self, module, name, label):
        orig = getattr(module, name)
        acc, clock = self.acc, self.clock

        def timed(*a, **kw):
            t0 = clock()
            try:
                return orig(*a, **kw)
            finally:
                acc[label] = acc.get(label, 0.0) + clock() - t0

        self._saved.append((module, name, orig))
        setattr(module, name, timed)

    def restore(self):
        for module, name, orig in reversed(self._saved):
            setattr(module, name, orig)
        self._saved.clear()


CLOCKS = {"process": time.process_time, "wall": time.perf_counter}


PROTOCOLS = {"personalfr": personalfr, "fedavg": fedavg_ae}


def one_run(protocol: str, task, groups, cfg, clock=time.process_time) -> dict:
    timers = Timers(clock)
    mod = PROTOCOLS[protocol]
    timers.wrap(ae_train, "local_train", "math: local training")
    timers.wrap(personalfr, "init_encoder", "math: encoder init")
    timers.wrap(act, "extract_active", "math: server")
    timers.wrap(act, "merge_active", "math: server")
    timers.wrap(ae, "mean_params", "math: server")
    timers.wrap(ae, "copy_params", "math: copies")
    timers.wrap(kctx, "encode_message", "codec")
    timers.wrap(kctx, "draft_message", "codec")
    timers.wrap(kenv, "decode_encoded", "codec")
    try:
        net = SimNetwork(seed=0)
        mod.place(net, task, groups, cfg, evaluate=False)
        t0 = clock()
        res = net.run()
        total = clock() - t0
    finally:
        timers.restore()
    assert not res.unfinished
    out = {"total": total, **timers.acc}
    math = sum(v for k, v in timers.acc.items() if k.startswith("math"))
    out["math"] = math
    out["kernel + actors"] = total - math - timers.acc.get("codec", 0.0)
    led = net.ledger.totals()
    out["messages"] = led["messages"]
    out["bytes"] = led["bytes"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--protocols", default="personalfr,fedavg", help="comma-separated, of personalfr and fedavg")
    ap.add_argument("--clock", choices=tuple(CLOCKS), default="process",
                    help="process: CPU time of this process (default); wall: perf_counter")
    args = ap.parse_args(argv)
    protocols = args.protocols.split(",")
    unknown = [p for p in protocols if p not in PROTOCOLS]
    if unknown:  # anything but "personalfr" used to run FedAvg under the name given
        ap.error(f"--protocols: unknown {', '.join(map(repr, unknown))}; known: {', '.join(PROTOCOLS)}")
    # the ml-100k folder when present, else its synthetic look-alike; other values (presets) as given
    spec = "ml100k-like" if args.data == DEFAULT_DATA and not Path(args.data).exists() else args.data
    r = resolve(spec)
    tr, te = per_user_random(r, 0.2, seed=0)
    task = ae_train.prepare((tr.users, tr.items, tr.values), (te.users, te.items, te.values), r.n_users, r.n_items)
    groups = partition_users(r.n_users, args.clients, seed=0)
    cfg = FedAEConfig(rounds=1)
    report = {"data": r.name, "users": r.n_users, "items": r.n_items, "clients": args.clients,
              "selected": personalfr.selection_size(cfg.fraction, args.clients), "python": platform.python_version(),
              "numpy": np.__version__, "clock": args.clock, "results": {}}
    print(f"{r.name}: {r.n_users} users x {r.n_items} items, M = {args.clients}, "
          f"{report['selected']} clients per round, {args.repeats} repeats (+1 warm-up), {args.clock} clock")
    for protocol in protocols:
        runs = [one_run(protocol, task, groups, cfg, CLOCKS[args.clock]) for _ in range(args.repeats + 1)][1:]
        keys = [k for k in runs[0] if k not in ("messages", "bytes")]
        med = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in keys}
        lo = {k: min(r.get(k, 0.0) for r in runs) for k in keys}
        hi = {k: max(r.get(k, 0.0) for r in runs) for k in keys}
        report["results"][protocol] = {"median_s": med, "min_s": lo, "max_s": hi,
                                       "messages": runs[0]["messages"], "bytes": runs[0]["bytes"]}
        print(f"\n{protocol}: {runs[0]['messages']} messages, {runs[0]['bytes']:,} bytes")
        for k in sorted(keys, key=lambda k: (k == "total", k)):
            share = 100 * med[k] / med["total"] if med["total"] else 0
            print(f"  {k:<24} {1e3 * med[k]:9.1f} ms  ({1e3 * lo[k]:.1f}-{1e3 * hi[k]:.1f})  {share:5.1f} %")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
