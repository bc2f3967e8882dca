"""Centralized reproduction of FedRec (Lin et al. 2020) on MovieLens 100K, and math timings.

Runs the math-floor trainers of ``fedsim.math.fedrec_central`` (no actors, no messages):

* ``lambda``: lambda in {0.1, 0.01, 0.001} chosen per model on fold 1 by MAE (paper 4.2);
* ``table2``: PMF(B), PMF(S), SVD++(S), 5 folds, "unfederated" = central engine, "federated
  (per-client functions)" = the same model run user by user through the client and server
  functions at rho = 0, MAE/RMSE mean +- population std, MD and STDR (paper Eq. 10, 11);
* ``ua``: user averaging, rho in {1, 2, 3}; ``hf``: hybrid filling with the authors' (T_predict,
  T_local) per rho (FedRec++ Table 2 / the authors' scripts);
* ``timing``: wall time of one iteration on fold 1, numba vs NumPy / pure-Python fallback.

Usage::

    python benchmarks/fedrec_math.py --data ../shared/data/ml-100k/u.data --parts lambda table2
    python benchmarks/fedrec_math.py --parts ua --out runs/fedrec_math

Each part prints a Markdown table and, with ``--out``, writes ``<part>.json`` there.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from fedsim.math import _sgd_numba
from fedsim.math import fedrec_central as fc
from fedsim.seeding import node_rng

MODELS = {
    "PMF(B)": (fc.train_pmf_batch, 0.8),
    "PMF(S)": (fc.train_pmf_sgd, 0.01),
    "SVD++(S)": (fc.train_svdpp_sgd, 0.01),
}
PAPER_T2 = {  # federated MAE, RMSE (ML100K, Table 2)
    "PMF(B)": (0.7418, 0.9424),
    "PMF(S)": (0.7498, 0.9553),
    "SVD++(S)": (0.7221, 0.9233),
}
PAPER_UA_RMSE = {  # authors' logs, rho = 1, 2, 3
    "PMF(B)": (0.9710, 0.9843, 0.9920),
    "PMF(S)": (0.9709, 0.9839, 0.9915),
    "SVD++(S)": (0.9423, 0.9558, 0.9649),
}
HF_CONFIGS = {  # (T_predict, T_local) for rho = 1, 2, 3 (authors' scripts)
    "PMF(B)": ((10, 10), (5, 15), (5, 15)),
    "PMF(S)": ((5, 15), (5, 5), (5, 10)),
    "SVD++(S)": ((15, 15), (5, 15), (10, 15)),
}
PAPER_HF_RMSE = {
    "PMF(B)": (0.9432, 0.9431, 0.9431),
    "PMF(S)": (0.9425, 0.9427, 0.9428),
    "SVD++(S)": (0.9185, 0.9194, 0.9201),
}
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ml-100k" / "u.data"


def load_ml100k(path):
    p = Path(path)
    if p.is_dir():
        p = p / "u.data"
    a = np.loadtxt(p, dtype=np.int64, delimiter="\t")
    users, items = a[:, 0] - 1, a[:, 1] - 1
    return users, items, a[:, 2].astype(np.float64), int(users.max()) + 1, int(items.max()) + 1


def folds(n_ratings, k, seed):
    perm = node_rng(seed, "fedrec/folds").permutation(n_ratings)
    return np.array_split(perm, k)


class Bench:
    def __init__(self, args):
        self.args = args
        self.u, self.i, self.r, self.n, self.m = load_ml100k(args.data)
        self.parts = folds(len(self.u), 5, args.seed)
        self.lams = dict(args.lam) if args.lam else {}
        self.models = args.models or list(MODELS)  # every part runs only these

    def split(self, k):
        te = self.parts[k]
        tr = np.concatenate([p for j, p in enumerate(self.parts) if j != k])
        return tr, te

    def run(self, model, fold, *, lam, engine="central", T=None, **kw):
        train, lr = MODELS[model]
        tr, te = self.split(fold)
        seed = self.args.seed * 1000 + fold
        extra = {}
        if self.args.backend:
            extra["backend"] = self.args.backend
        t0 = time.perf_counter()
        res = train(
            self.u[tr], self.i[tr], self.r[tr], self.n, self.m, d=self.args.d,
            T=self.args.iterations if T is None else T, lr=lr, lam=lam,
            user_rngs=lambda k: node_rng(seed, f"fedrec/user/{k}"),
            server_rng=node_rng(seed, "fedrec/server"), dtype=self.args.dtype,
            test=(self.u[te], self.i[te], self.r[te]), on_divergence="stop", engine=engine,
            **kw, **extra,
        )
        wall = time.perf_counter() - t0
        if res.diverged_at is not None:
            return {"diverged_at": res.diverged_at, "wall": wall}
        mae, rmse = res.history[-1]["mae"], res.history[-1]["rmse"]
        return {"mae": mae, "rmse": rmse, "wall": wall,
                "curve": [round(h["rmse"], 5) for h in res.history]}

    def lam_of(self, model):
        return self.lams.get(model, 0.001)


def stats(rows, key):
    v = np.array([x[key] for x in rows if key in x])
    if len(v) < len(rows):
        return float("nan"), float("nan"), len(rows) - len(v)
    return float(v.mean()), float(v.std(ddof=0)), 0


def part_lambda(b: Bench, out):
    print("\n## lambda on fold 1 (MAE)\n\n| model | 0.1 | 0.01 | 0.001 | chosen |\n|---|---|---|---|---|")
    res = {}
    for model in b.models:
        row = {lam: b.run(model, 0, lam=lam, T=b.args.iterations) for lam in (0.1, 0.01, 0.001)}
        ok = {lam: x["mae"] for lam, x in row.items() if "mae" in x}
        best = min(ok, key=ok.get)
        b.lams[model] = best
        res[model] = {"maes": {str(k): v.get("mae") for k, v in row.items()}, "chosen": best,
                      "diverged": {str(k): v.get("diverged_at") for k, v in row.items()}}
        cells = [f"{row[lam]['mae']:.4f}" if "mae" in row[lam] else f"NaN@{row[lam]['diverged_at']}"
                 for lam in (0.1, 0.01, 0.001)]
        print(f"| {model} | " + " | ".join(cells) + f" | {best} |")
    return res


def part_table2(b: Bench, out):
    print("\n## Table 2 (ML100K, rho = 0)\n")
    print("| model | framework | MAE | RMSE | MD mae | STDR mae | MD rmse | STDR rmse | paper MAE / RMSE | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    res = {}
    t_all = time.perf_counter()
    for model in b.models:
        lam = b.lam_of(model)
        rows = {fw: [b.run(model, k, lam=lam, engine=eng) for k in range(b.args.folds)]
                for fw, eng in (("unfederated", "central"), ("federated", "clients"))}
        s = {fw: {key: stats(rows[fw], key) for key in ("mae", "rmse")} for fw in rows}
        md = {key: abs(s["federated"][key][0] - s["unfederated"][key][0]) / s["unfederated"][key][0]
              * 100 for key in ("mae", "rmse")}
        stdr = {key: (s["federated"][key][1] + s["unfederated"][key][1]) / s["unfederated"][key][0]
                * 100 for key in ("mae", "rmse")}
        for fw in ("unfederated", "federated"):
            wall = sum(x["wall"] for x in rows[fw])
            div = [x.get("diverged_at") for x in rows[fw] if "diverged_at" in x]
            pm, pr = PAPER_T2[model]
            extra = f" diverged {div}" if div else ""
            print(f"| {model} | {fw} | {s[fw]['mae'][0]:.4f} ± {s[fw]['mae'][1]:.4f} | "
                  f"{s[fw]['rmse'][0]:.4f} ± {s[fw]['rmse'][1]:.4f} | {md['mae']:.4f}% | "
                  f"{stdr['mae']:.2f}% | {md['rmse']:.4f}% | {stdr['rmse']:.2f}% | {pm} / {pr} | "
                  f"{wall:.1f}{extra} |")
        res[model] = {"lam": lam, "rows": rows, "md": md, "stdr": stdr,
                      "max_abs_metric_diff_fed_vs_unfed": max(
                          abs(a.get(key, np.nan) - c.get(key, np.nan))
                          for a, c in zip(rows["federated"], rows["unfederated"])
                          for key in ("mae", "rmse"))}
    res["wall_total"] = time.perf_counter() - t_all
    print(f"\ntable2 wall time: {res['wall_total']:.1f} s")
    return res


def _rho_part(b: Bench, strategy):
    title = "user averaging" if strategy == "ua" else "hybrid filling"
    print(f"\n## {title}, federated (central engine), RMSE (MAE)\n")
    print("| model | rho=0 | rho=1 | rho=2 | rho=3 | paper rho=1..3 (RMSE) | wall s |")
    print("|---|---|---|---|---|---|---|")
    paper = PAPER_UA_RMSE if strategy == "ua" else PAPER_HF_RMSE
    res = {}
    models = b.models
    for model in models:
        lam = b.lam_of(model)
        t0 = time.perf_counter()
        per_rho = {}
        for rho in (0, 1, 2, 3):
            kw = {"rho": rho, "strategy": strategy}
            if strategy == "hf" and rho > 0:
                kw["T_predict"], kw["T_local"] = HF_CONFIGS[model][rho - 1]
            rows = [b.run(model, k, lam=lam, **kw) for k in range(b.args.folds)]
            per_rho[rho] = {"rows": rows, "mae": stats(rows, "mae"), "rmse": stats(rows, "rmse")}
        wall = time.perf_counter() - t0
        cells = [f"{per_rho[r]['rmse'][0]:.4f} ({per_rho[r]['mae'][0]:.4f})" for r in (0, 1, 2, 3)]
        print(f"| {model} | " + " | ".join(cells) + f" | {', '.join(map(str, paper[model]))} | {wall:.0f} |")
        res[model] = per_rho
    return res


def part_ua(b, out):
    return _rho_part(b, "ua")


def part_hf(b, out):
    return _rho_part(b, "hf")


def part_timing(b: Bench, out):
    print("\n## one iteration on ML100K fold 1 (d = 20), seconds\n")
    print("| model | rho | numba | NumPy / pure-Python fallback |\n|---|---|---|---|")
    res = {}
    have_numba = _sgd_numba.numba_available()
    for model in b.models:
        for rho in (0, 3):
            row = {}
            for be in ("numba", "python"):
                if be == "numba" and not have_numba:
                    row[be] = None
                    continue
                b.args.backend = be
                b.run(model, 0, lam=0.001, T=1, rho=rho)  # warm-up (compilation, caches)
                t1 = b.run(model, 0, lam=0.001, T=1, rho=rho)["wall"]
                t3 = b.run(model, 0, lam=0.001, T=3, rho=rho)["wall"]
                row[be] = (t3 - t1) / 2
            b.args.backend = None
            res[f"{model} rho={rho}"] = row
            fmt = [f"{row[be]:.3f}" if row[be] is not None else "n/a" for be in ("numba", "python")]
            print(f"| {model} | {rho} | {fmt[0]} | {fmt[1]} |")
    return res


PARTS = {"lambda": part_lambda, "table2": part_table2, "ua": part_ua, "hf": part_hf,
         "timing": part_timing}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--parts", nargs="+", default=["lambda", "table2"], choices=list(PARTS))
    ap.add_argument("--models", nargs="+", choices=list(MODELS), help="run only these (every part; default: all)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--d", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    ap.add_argument("--backend", choices=["numba", "python"])
    ap.add_argument("--lam", nargs=2, action="append", metavar=("MODEL", "LAMBDA"),
                    type=str, help="fix lambda for a model instead of selecting it")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    if args.lam:
        for mname, _ in args.lam:
            if mname not in MODELS:  # it would be ignored: the model's lambda would be selected or 0.001
                ap.error(f"--lam {mname!r}: not a model; models: {', '.join(MODELS)}")
        args.lam = [(mname, float(v)) for mname, v in args.lam]
    b = Bench(args)
    print(f"# FedRec math reproduction: {args.data}, seed {args.seed}, {args.dtype}, "
          f"backend {_sgd_numba.backend_name(args.backend)}, T = {args.iterations}")
    results = {}
    for part in args.parts:
        t0 = time.perf_counter()
        results[part] = PARTS[part](b, args.out)
        results[part + "_wall"] = time.perf_counter() - t0
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(Path(args.out) / f"{part}.json", "w") as fh:
                json.dump({"args": {k: v for k, v in vars(args).items()}, "lams": b.lams,
                           "result": results[part], "wall": results[part + "_wall"]}, fh,
                          indent=1, default=str)
        sys.stdout.flush()
    return results


if __name__ == "__main__":
    main()
