"""The per-client math of FedRec's clients, called the way the actors call it, in a loop over every
user of ML-100K fold 1 (d = 20, float32, lambda 0.001, V uniform in +-0.005): one client's batch
step (``pmf.BatchClient.step``, lr 0.8) and batch hybrid filling (``filling.virtual_ratings_hf``,
rho 1, T_local 10); and the math of one stochastic exchange without the network (PMF(S) and
SVD++(S), lr 0.01): the client's call (``SGDClient.call`` on a read-only view of V, as a received
model is) then the server's update of V (and O) with its upload (``pmf.server_apply_sgd``,
``svdpp.server_apply_o_delta``), users in a random order as a stochastic iteration visits them. The
last two are what a stochastic iteration's math costs when nothing else runs between the calls:
compare them with ``benchmarks/fedrec_split.py``'s "math" column (the same calls inside a
simulation) and its central twin per iteration. ``--touch KIB,...`` times the PMF(S) exchange
again with KIB KiB (1,024 bytes) of other memory read between two exchanges (the clock stopped meanwhile),
to show what a cold cache does to the same calls.

    python benchmarks/fedrec_client_math.py [--data ../shared/data/ml-100k] [--repeats 5] [--tree DIR]
                                            [--touch 256,1024,4096]

``--tree`` imports fedsim from another checkout (its root), so that two trees can be timed in
alternation, in the same minutes (refused without a fedsim package there; the older ``BatchClient.step`` took keyword arguments: both
call forms are tried). Prints microseconds per client, medians over the repeats, and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data/ml-100k")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tree", help="root of the fedsim checkout to import (default: the installed one)")
    ap.add_argument("--touch", default="", help="comma-separated KiB of memory to read between two PMF(S) "
                    "exchanges (timed apart), e.g. 256,1024,4096")
    args = ap.parse_args()
    touch = [int(x) for x in args.touch.split(",") if x.strip()]
    if args.tree:
        if not os.path.isfile(os.path.join(args.tree, "fedsim", "__init__.py")):
            raise SystemExit(f"--tree {args.tree}: no fedsim package there; give the root of a fedsim checkout")
        sys.path.insert(0, args.tree)
    import numpy as np

    import fedsim
    if args.tree and not os.path.samefile(os.path.dirname(os.path.abspath(fedsim.__file__)),
                                          os.path.join(args.tree, "fedsim")):
        raise SystemExit(f"--tree {args.tree}: fedsim was imported from {fedsim.__file__} instead")
    from fedsim.data import resolve
    from fedsim.math.filling import sample_unrated, virtual_ratings_hf
    from fedsim.math.pmf import BatchClient, server_apply_sgd
    from fedsim.math.sgd_client import SGDClient
    from fedsim.math.svdpp import server_apply_o_delta
    from fedsim.studies.fedrec import make_folds

    data = make_folds(resolve(args.data), 5, 0)[0].train_ratings()
    order = np.lexsort((data.items, data.users))
    u, i, r = data.users[order], data.items[order], data.values[order].astype(np.float32)
    n, m = data.n_users, data.n_items
    ptr = np.searchsorted(u, np.arange(n + 1))
    rng = np.random.default_rng(0)
    V = ((rng.random((m, 20), dtype=np.float32) - 0.5) * 0.01).astype(np.float32)
    U = [((rng.random(20, dtype=np.float32) - 0.5) * 0.01).astype(np.float32) for _ in range(n)]
    clients = [BatchClient(i[ptr[k]:ptr[k + 1]], r[ptr[k]:ptr[k + 1]], np.float32, lam=0.001) for k in range(n)]
    try:
        clients[0].step(U[0], V, 0, 0.8)

        def step(k):
            return clients[k].step(U[k], V, 0, 0.8)
    except TypeError:  # a tree whose step takes keyword arguments
        def step(k):
            return clients[k].step(U[k], V, t=0, lr=0.8)
    hf_rows = []
    for k in range(n):
        rated = i[ptr[k]:ptr[k + 1]].astype(np.int32)
        hf_rows.append((V[rated], r[ptr[k]:ptr[k + 1]], V[sample_unrated(rng, rated, m, 1.0)]))

    def hf(k):
        Vr, rr, Vs = hf_rows[k]
        return virtual_ratings_hf(U[k], Vr, rr, Vs, 0.8, 0.001, 10)

    O = ((rng.random((m, 20), dtype=np.float32) - 0.5) * 0.01).astype(np.float32)
    users = rng.permutation(n).tolist()
    try:
        sgd = [SGDClient(i[ptr[k]:ptr[k + 1]], r[ptr[k]:ptr[k + 1]], np.float32, "code", lam=0.001)
               for k in range(n)]
    except TypeError:  # an older tree's SGDClient
        sgd = None

    def received(a):  # a model as a client receives it: a read-only view
        a = a.view()
        a.flags.writeable = False
        return a

    def exchange_pmf(k):
        u = users[k]
        up = sgd[u].call(U[u], received(V), None, 0, 0.01)
        server_apply_sgd(V, up.items, up.grads, 0.01)

    def exchange_svdpp(k):
        u = users[k]
        up = sgd[u].call(U[u], received(V), received(O), 0, 0.01)
        server_apply_sgd(V, up.items, up.grads, 0.01)
        server_apply_o_delta(O, up.items, up.o_deltas)

    cases = [("batch step", step), ("batch hybrid filling", hf)]
    if sgd is not None:
        cases += [("PMF(S) exchange, math only", exchange_pmf), ("SVD++(S) exchange, math only", exchange_svdpp)]
    out = {}
    for name, fn in cases:
        fn(0)  # numba's first call
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            for k in range(n):
                fn(k)
            times.append((time.perf_counter() - t) / n * 1e6)
        out[name] = statistics.median(times)
        print(f"{name}: {out[name]:.1f} us per client (median of {args.repeats}, {n} clients)")
    if touch and sgd is not None:
        other = np.ones(max(touch) << 10, dtype=np.uint8)
        for kb in touch:
            times = []
            for _ in range(args.repeats):
                spent = 0.0
                for k in range(n):
                    other[:kb << 10].sum()  # read kb KiB that the exchange does not use
                    t = time.perf_counter()
                    exchange_pmf(k)
                    spent += time.perf_counter() - t
                times.append(spent / n * 1e6)
            name = f"PMF(S) exchange, math only, after reading {kb} KiB"
            out[name] = statistics.median(times)
            print(f"{name}: {out[name]:.1f} us per client (median of {args.repeats})")
    print(json.dumps({"tree": fedsim.__file__, "us_per_client": out}))


if __name__ == "__main__":
    main()
