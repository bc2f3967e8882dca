"""Where a federated FedRec run spends its time: the math floor against the simulation.

    python benchmarks/fedrec_split.py [--data ../shared/data/ml-100k] [--iterations 10] [--repeats 3]

Runs the actors of PMF(B), PMF(S) and SVD++(S) (rho = 0, d = 20, float32) on fold 1 of 5 on a
`SimNetwork`, with every math-floor function the actors call wrapped in a timer (the client
steps, the server updates, sampling, initialisation, the learning-rate schedule). "math" is the
time inside those functions; "simulation" is the rest of the run: the kernel (scheduling,
ledger, link model), the codec (encoding every upload, decoding each message once), the actors'
own glue (building payloads, sorting uploads by item, the aggregation loop) and evaluation.
For reference it also times the centralized twin (the same arithmetic, vectorised, no
messages). Medians over repeats; prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time

from fedsim.data import resolve
from fedsim.kernel import SimNetwork
from fedsim.protocols import fedrec
from fedsim.protocols.fedrec import FedRecConfig
from fedsim.studies.fedrec import make_folds, paper_lr

# what the actors import from the math floor (fedsim/protocols/fedrec.py)
MATH = ["accumulate_item_grads", "apply_mean_step", "batch_client_step", "decayed_lr", "draw_user_order",
        "init_item_factors", "init_user_factor", "pmf_sgd_client_step", "server_apply_sgd",
        "server_apply_o_delta", "svdpp_sgd_client_step", "sample_unrated"]


class Timers:
    def __init__(self) -> None:
        self.total = 0.0
        self.depth = 0

    def wrap(self, fn):
        @functools.wraps(fn)
        def timed(*a, **k):
            if self.depth:  # a math function calling another: count once
                return fn(*a, **k)
            self.depth += 1
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.total += time.perf_counter() - t
                self.depth -= 1
        return timed


def one(fold, model: str, T: int) -> dict:
    cfg = FedRecConfig(model, d=20, T=T, lr=paper_lr(model), lam=0.001, dtype="float32")
    data = fold.train_ratings()
    timers = Timers()
    saved = {name: getattr(fedrec, name) for name in MATH if hasattr(fedrec, name)}
    for name, fn in saved.items():
        setattr(fedrec, name, timers.wrap(fn))
    try:
        t = time.perf_counter()
        net = SimNetwork(seed=0)
        fedrec.build(net, data, cfg)
        net.run()
        wall = time.perf_counter() - t
    finally:
        for name, fn in saved.items():
            setattr(fedrec, name, fn)
    t = time.perf_counter()
    fedrec.central_twin(data, cfg, seed=0)
    central = time.perf_counter() - t
    return {"wall": wall, "math": timers.total, "sim": wall - timers.total, "central": central,
            "messages": len(net.ledger)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data/ml-100k")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    ratings = resolve(args.data)
    fold = make_folds(ratings, 5, 0)[0]
    out = {}
    for model in ("PMF(B)", "PMF(S)", "SVD++(S)"):  # warm-up: numba compilation, first-touch allocations
        one(fold, model, 1)
    print("| model | federated s/iteration | math | simulation | simulation share | central twin s/iteration |")
    print("|---|---:|---:|---:|---:|---:|")
    for model in ("PMF(B)", "PMF(S)", "SVD++(S)"):
        runs = [one(fold, model, args.iterations) for _ in range(args.repeats)]
        med = {k: statistics.median(r[k] for r in runs) / args.iterations for k in ("wall", "math", "sim", "central")}
        out[model] = med
        print(f"| {model} | {med['wall']:.3f} | {med['math']:.3f} | {med['sim']:.3f} | "
              f"{100 * med['sim'] / med['wall']:.0f} % | {med['central']:.4f} |", flush=True)
    print(json.dumps({"iterations": args.iterations, "repeats": args.repeats, "s_per_iteration": out}))


if __name__ == "__main__":
    main()
