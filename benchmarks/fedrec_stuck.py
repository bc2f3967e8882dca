"""Why FedRec (FedRec++ with eta = 0) at c = 0.2n, rho = 3 with hybrid filling (T_predict, T_local)
= (5, 15) ends where it started: the evidence behind docs/fedrec.md, "Partial participation".

Every row is one run through the actors (SimNetwork, ideal profile) on the first of 5 random
copies (seed 0), batch PMF, d 20, lr 0.8 (x0.9 per iteration), lambda 0.001, stopped after T
iterations; it prints the test RMSE, the mean |prediction| before clipping, the mean norms of
V's and U's rows, and the RMSE of the run's initial model (every prediction clipped to 1).

    python benchmarks/fedrec_stuck.py --data ../shared/data/ml-100k [--quick]

``--quick`` runs the four rows that tell the story (about 40 s of CPU on ML100K); the full list
about 3 minutes.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fedsim.data import resolve
from fedsim.kernel import SimNetwork
from fedsim.protocols import fedrecpp
from fedsim.protocols.fedrecpp import FedRecPPConfig
from fedsim.studies.fedrec import evaluate_fold, make_folds
from fedsim.studies.learning import initial_metrics

QUICK = [
    dict(c=0.2, rho=3, T_predict=5, T_local=15, T=100),
    dict(c=0.2, rho=3, T_predict=15, T_local=15, T=100),
    dict(c=0.2, rho=3, strategy="ua", T=100),
    dict(c=0.2, rho=3, eta=1, T_predict=5, T_local=15, T=100),
]
FULL = QUICK + [
    dict(c=0.2, rho=3, T_predict=5, T_local=15, T=5),
    dict(c=0.2, rho=3, T_predict=5, T_local=15, T=7),
    dict(c=0.2, rho=3, T_predict=5, T_local=15, T=20),
    dict(c=1.0, rho=3, T_predict=5, T_local=15, T=7),
    dict(c=1.0, rho=3, T_predict=5, T_local=15, T=12),
    dict(c=0.6, rho=3, T_predict=5, T_local=15, T=100),
    dict(c=0.2, rho=3, T_predict=5, T_local=5, T=100),
    dict(c=0.2, rho=3, T_predict=10, T_local=15, T=100),
    dict(c=0.2, rho=2, T_predict=5, T_local=15, T=100),
    dict(c=0.2, rho=1, T_predict=10, T_local=10, T=100),
    dict(c=0.2, rho=0, T=100),
]


def row(fold, n: int, spec: dict, seed: int) -> dict:
    kw = dict(spec)
    frac = kw.pop("c")
    c = max(1, int(round(frac * n)))
    cfg = FedRecPPConfig(d=20, lr=0.8, lam=0.001, eta=kw.pop("eta", 0), c=0 if c >= n else c, **kw)
    t0 = time.perf_counter()
    net = SimNetwork(seed=seed)
    res = fedrecpp.build(net, fold.train_ratings(), cfg).collect(net.run())
    mae, rmse, _ = evaluate_fold(res.model, fold)
    U, V = res.params["U"], res.params["V"]
    pred = (U[fold.test[0]].astype(np.float64) * V[fold.test[1]]).sum(1)
    return {"c": f"{frac:g}n", "rho": cfg.rho, "filling": cfg.strategy, "eta": cfg.eta,
            "T_predict": cfg.T_predict if cfg.strategy == "hf" else "", "T_local": cfg.T_local if cfg.strategy == "hf"
            else "", "T": cfg.T, "rmse": rmse, "initial_rmse": initial_metrics(fold, cfg, seed)[1],
            "mean_abs_pred": float(np.abs(pred).mean()), "mean_V_norm": float(np.linalg.norm(V, axis=1).mean()),
            "mean_U_norm": float(np.linalg.norm(U, axis=1).mean()), "wall_s": time.perf_counter() - t0}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="ml100k-like")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    ratings = resolve(a.data)
    fold = make_folds(ratings, 5, a.seed)[0]
    cols = ["c", "rho", "filling", "eta", "T_predict", "T_local", "T", "rmse", "initial_rmse", "mean_abs_pred",
            "mean_V_norm", "mean_U_norm", "wall_s"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for spec in (QUICK if a.quick else FULL):
        r = row(fold, ratings.n_users, spec, a.seed)
        print("| " + " | ".join(f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in cols) + " |",
              flush=True)


if __name__ == "__main__":
    main()
