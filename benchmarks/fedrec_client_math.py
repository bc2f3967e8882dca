"""The per-client math of FedRec's batch clients, called the way the actors call it: one client's
batch step (``pmf.BatchClient.step``) and batch hybrid filling (``filling.virtual_ratings_hf``),
in a loop over every user of ML-100K fold 1 (d = 20, float32, lr 0.8, lambda 0.001; HF: rho 1,
T_local 10), V uniform in +-0.005.

    python benchmarks/fedrec_client_math.py [--data ../shared/data/ml-100k] [--repeats 5] [--tree DIR]

``--tree`` imports fedsim from another checkout (its root), so that two trees can be timed in
alternation, in the same minutes (the older ``BatchClient.step`` took keyword arguments: both
call forms are tried). Prints microseconds per client, medians over the repeats, and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data/ml-100k")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tree", help="root of the fedsim checkout to import (default: the installed one)")
    args = ap.parse_args()
    if args.tree:
        sys.path.insert(0, args.tree)
    import numpy as np

    import fedsim
    from fedsim.data import resolve
    from fedsim.math.filling import sample_unrated, virtual_ratings_hf
    from fedsim.math.pmf import BatchClient
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

    out = {}
    for name, fn in (("batch step", step), ("batch hybrid filling", hf)):
        fn(0)  # numba's first call
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            for k in range(n):
                fn(k)
            times.append((time.perf_counter() - t) / n * 1e6)
        out[name] = statistics.median(times)
        print(f"{name}: {out[name]:.1f} us per client (median of {args.repeats}, {n} clients)")
    print(json.dumps({"tree": fedsim.__file__, "us_per_client": out}))


if __name__ == "__main__":
    main()
