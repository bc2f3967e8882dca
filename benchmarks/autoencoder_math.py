"""PersonalFR math benchmark: one local epoch of a client holding 10 MovieLens-100K users, full vs active.

    OPENBLAS_NUM_THREADS=1 python benchmarks/autoencoder_math.py [--data PATH] [--repeats N] [--quick]

The client's users are drawn at random (``--seed``) from ``u.data`` (``--data``: the ``ml-100k`` folder or the
file; a synthetic ML100K-shaped client when it is absent), split 80/20 per user at random; the training rows
are the input and the observed entries the target (AutoRec style). One local epoch = every batch of
``--batch`` users once (10 users, batch 10: one step): forward, backward, gradient clipping at 1 and one SGD
step (lr 0.1, momentum 0.9 Nesterov, weight decay 5e-4), dropout 0.5 on the code, float32. Variants:

``full``          the whole model, n = 1682 output rows (FedAvg's client);
``active``        the client's active decoder (Expression 3: hidden layers + the rows of its rated items),
                  dense encoder input (PersonalFR with Partial Compression, as the paper counts it);
``active_sparse`` as ``active`` with the encoder's first layer cut to the columns of rated items too.

Also timed: cutting the active decoder out of the global one (server side, ``extract_active``) and merging 10
such slices with Eq. 5 (``merge_active``). Prints one line per figure, then one JSON object. Figures are
medians over repeats (variants interleaved).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from fedsim.math import active as act
from fedsim.math import autoencoder as ae
from fedsim.math import optim

N_ITEMS_ML100K = 1682
DEFAULT_DATA = "/work/shared/data/ml-100k"


def load_client(data: str | None, n_users: int, seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Training rows (n_users, 1682) float32 and their mask, for ``n_users`` random users (80/20 split)."""
    rng = np.random.default_rng(seed)
    path = Path(data) if data else None
    if path is not None and path.is_dir():
        path = path / "u.data"
    if path is not None and path.is_file():
        raw = np.loadtxt(path, dtype=np.int64, usecols=(0, 1, 2))
        users = rng.choice(np.unique(raw[:, 0]), size=n_users, replace=False)
        x = np.zeros((n_users, N_ITEMS_ML100K), dtype=np.float32)
        for row, u in enumerate(users):
            mine = raw[raw[:, 0] == u]
            keep = rng.permutation(len(mine))[: int(round(0.8 * len(mine)))]
            x[row, mine[keep, 1] - 1] = mine[keep, 2]
        return x, x != 0, f"ml-100k ({path})"
    # synthetic: ML100K has 106 ratings per user on average (min 20), popularity skewed
    pop = rng.zipf(1.3, size=N_ITEMS_ML100K).astype(float)
    pop /= pop.sum()
    x = np.zeros((n_users, N_ITEMS_ML100K), dtype=np.float32)
    for row in range(n_users):
        k = int(round(0.8 * max(20, rng.geometric(1 / 106))))
        items = rng.choice(N_ITEMS_ML100K, size=min(k, N_ITEMS_ML100K), replace=False, p=pop)
        x[row, items] = rng.integers(1, 6, size=len(items))
    return x, x != 0, "synthetic ML100K-shaped client"


def local_epoch(params, state, x, y, m, batch, rng, in_cols=None):
    """One epoch of the client's local SGD; returns the FLOPs executed."""
    flops = 0
    for start in range(0, x.shape[0], batch):
        sl = slice(start, start + batch)
        xb = x[sl] if in_cols is None else x[sl][:, in_cols]
        res = ae.loss_and_grads(params, xb, y[sl], m[sl], dropout=0.5, rng=rng)
        _, f_clip = optim.clip_grad_norm(res.grads, 1.0)
        f_step = optim.sgd_step(params, res.grads, state, lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4)
        flops += res.flops + f_clip + f_step
    return flops


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=DEFAULT_DATA, help="ml-100k folder or u.data (synthetic if absent)")
    ap.add_argument("--users", type=int, default=10)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="20 repeats")
    args = ap.parse_args(argv)
    repeats = 20 if args.quick else args.repeats

    x, m, source = load_client(args.data, args.users, args.seed)
    items = act.rated_items(m)
    init = ae.init_params(N_ITEMS_ML100K, np.random.default_rng(args.seed))
    rng = np.random.default_rng(args.seed + 1)

    variants = {}
    # full model
    p_full = ae.copy_params(init)
    s_full = optim.sgd_init(p_full)
    variants["full"] = (lambda: local_epoch(p_full, s_full, x, x, m, args.batch, rng), p_full)
    # active decoder, dense input
    p_act = act.slice_items(init, out_items=items)
    s_act = optim.sgd_init(p_act)
    xa, ma = x, m
    variants["active"] = (
        lambda: local_epoch(p_act, s_act, xa, xa[:, items], ma[:, items], args.batch, rng), p_act)
    # active decoder, encoder cut to the rated columns
    p_sp = act.slice_items(init, out_items=items, in_items=items)
    s_sp = optim.sgd_init(p_sp)
    variants["active_sparse"] = (
        lambda: local_epoch(p_sp, s_sp, x, x[:, items], m[:, items], args.batch, rng, in_cols=items), p_sp)

    result: dict = {
        "benchmark": "autoencoder_math",
        "data": source,
        "users": args.users,
        "batch": args.batch,
        "items": N_ITEMS_ML100K,
        "active_items": int(len(items)),
        "ratings": int(m.sum()),
        "repeats": repeats,
        "dtype": "float32",
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for name, (fn, params) in variants.items():
        result[f"{name}_flops_per_epoch"] = int(fn())  # also the warm-up
        result[f"{name}_params"] = ae.param_count(params)
    for _ in range(repeats):  # round robin, so that load from other processes hits every variant alike
        for name, (fn, _params) in variants.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    for name in variants:
        result[f"{name}_ms_per_epoch"] = round(statistics.median(times[name]) * 1e3, 4)
    for name in ("active", "active_sparse"):
        result[f"speedup_{name}"] = round(result["full_ms_per_epoch"] / result[f"{name}_ms_per_epoch"], 2)
        result[f"flop_ratio_{name}"] = round(result["full_flops_per_epoch"] / result[f"{name}_flops_per_epoch"], 2)
    dec = ae.decoder_of(init)
    result["decoder_params"] = ae.param_count(dec)
    result["active_decoder_params"] = act.active_count(dec, len(items))
    result["decoder_ratio"] = round(result["decoder_params"] / result["active_decoder_params"], 2)
    slices = [act.extract_active(dec, items) for _ in range(10)]
    result["extract_active_ms"] = round(median_time(lambda: act.extract_active(dec, items), repeats) * 1e3, 4)
    result["merge_10_slices_ms"] = round(
        median_time(lambda: act.merge_active(dec, slices, [items] * 10), max(5, repeats // 10)) * 1e3, 4)
    result["numpy"] = np.__version__
    result["python"] = platform.python_version()
    result["blas_threads_env"] = os.environ.get("OPENBLAS_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "unset"))

    for key, value in result.items():
        print(f"{key}: {value}", file=sys.stderr)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
