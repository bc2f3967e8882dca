"""Sanity check of the FPL math floor on MovieLens 100K (not a test).

Implicit feedback (every rating is a positive), users with > 20 interactions, per-user temporal
80/20 split (the most recent floor(0.2 n_u) interactions are the test set). Every method ranks all
items of the training catalogue that are not in the user's training set; P@10 and R@10 are
averaged over users (computed inline here; the project's evaluator lives in fedsim.math.metrics).

Compares centralized BPR-MF with Top-Pop and Random, optionally FCF (all clients every round) and
FPL presets driven by a plain synchronous loop over the math functions (no actors, no ledger):
each round the selected clients all start from the same (Q, b), run ``fpl_client_round`` and the
server sums their messages (Eq. 7).

    python benchmarks/bpr_sanity.py                         # defaults recorded in docs/fpl.md
    python benchmarks/bpr_sanity.py --d 10 20 --lr 0.05 0.1 --epochs 40 --fcf
    python benchmarks/bpr_sanity.py --epochs 0 --fpl sFPL pFPL --pi 1.0 --fpl-epochs 20
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from fedsim.math.bpr import (
    bpr_scores,
    concat_updates,
    fpl_client_round,
    init_item_params,
    init_user_factor,
    make_triple_sampler,
    server_apply_sum,
)
from fedsim.math.bpr_central import csr_from_pairs, train_bpr
from fedsim.math.fpl_presets import fpl_preset
from fedsim.seeding import node_rng
from fedsim.math.fcf import AdamState, fcf_client, fcf_server_update
from fedsim.math.popularity import random_scores, toppop_item_scores

DEFAULT_DATA = Path("/work/shared/data/ml-100k/u.data")


def load_split(path: Path, min_interactions: int = 21, test_frac: float = 0.2):
    raw = np.loadtxt(path, dtype=np.int64)
    users, items, ts = raw[:, 0], raw[:, 1] - 1, raw[:, 3]
    n_items = int(items.max()) + 1
    counts = np.bincount(users)
    keep = counts[users] >= min_interactions
    users, items, ts = users[keep], items[keep], ts[keep]
    _, uid = np.unique(users, return_inverse=True)
    n_users = int(uid.max()) + 1
    order = np.lexsort((np.arange(uid.shape[0]), ts, uid))  # by user, time, then file order
    uid, items = uid[order], items[order]
    n_u = np.bincount(uid, minlength=n_users)
    start = np.concatenate([[0], np.cumsum(n_u)[:-1]])
    rank = np.arange(uid.shape[0]) - start[uid]
    n_test = np.floor(test_frac * n_u).astype(np.int64)
    is_test = rank >= (n_u - n_test)[uid]
    train = (uid[~is_test], items[~is_test])
    test = (uid[is_test], items[is_test])
    return n_users, n_items, train, test


def evaluate(scores: np.ndarray, train_mask: np.ndarray, cat_mask: np.ndarray, test_sets, k: int = 10):
    S = np.array(scores, dtype=np.float64, copy=True)
    S[train_mask] = -np.inf
    S[:, ~cat_mask] = -np.inf
    top = np.argpartition(-S, k, axis=1)[:, :k]
    hits = np.array([len(test_sets[u].intersection(top[u].tolist())) for u in range(S.shape[0])])
    sizes = np.array([len(t) for t in test_sets])
    return float(np.mean(hits / k)), float(np.mean(hits / np.maximum(sizes, 1)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--d", type=int, nargs="+", default=[10])
    ap.add_argument("--lr", type=float, nargs="+", default=[0.05])
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fcf", action="store_true", help="also run FCF (all clients every round)")
    ap.add_argument("--fcf-rounds", type=int, default=40)
    ap.add_argument("--fcf-alpha", type=float, default=1.0)
    ap.add_argument("--fcf-lam", type=float, default=0.1)
    ap.add_argument("--fcf-lr", type=float, default=0.05, help="Adam learning rate of the FCF server")
    ap.add_argument("--fpl", nargs="*", default=[], help="FPL presets to run (sFPL sFPL+ pFPL pFPL+)")
    ap.add_argument("--pi", type=float, nargs="+", default=[1.0])
    ap.add_argument("--fpl-epochs", type=int, default=10)
    ap.add_argument("--fpl-d", type=int, default=None, help="default: the first --d")
    ap.add_argument("--fpl-lr", type=float, default=None, help="default: the first --lr")
    args = ap.parse_args(argv)

    n_users, n_items, (tu, ti), (su, si) = load_split(args.data)
    indptr, indices = csr_from_pairs(tu, ti, n_users)
    x_plus = int(indptr[-1])
    catalogue = np.unique(indices)
    cat_mask = np.zeros(n_items, dtype=bool)
    cat_mask[catalogue] = True
    train_mask = np.zeros((n_users, n_items), dtype=bool)
    train_mask[tu, ti] = True
    test_sets = [set() for _ in range(n_users)]
    for u, i in zip(su.tolist(), si.tolist()):
        test_sets[u].add(i)
    print("# ML100K implicit, users > 20 interactions, temporal 80/20 per user")
    print(f"|U| = {n_users}, |I| = {n_items} (training catalogue {catalogue.size}), X+ = {x_plus}, "
          f"test = {su.size} (unreachable: {int((~cat_mask[si]).sum())})\n")

    rows = []
    p, r = evaluate(random_scores(n_users, n_items, np.random.default_rng(args.seed)), train_mask, cat_mask, test_sets)
    rows.append(("Random", "-", p, r, "-", "-"))
    pop = toppop_item_scores(indptr, indices, n_items)
    p, r = evaluate(np.broadcast_to(pop, (n_users, n_items)), train_mask, cat_mask, test_sets)
    rows.append(("Top-Pop", "-", p, r, "-", "-"))
    print(f"Random  P@10 {rows[0][2]:.4f}  R@10 {rows[0][3]:.4f}")
    print(f"Top-Pop P@10 {rows[1][2]:.4f}  R@10 {rows[1][3]:.4f}\n")

    for d in args.d if args.epochs > 0 else []:
        for lr in args.lr:
            curve = []
            t_train = [0.0]
            t_last = [time.perf_counter()]

            def cb(epoch, model):
                t_train[0] += time.perf_counter() - t_last[0]
                pr = evaluate(model.scores(), train_mask, cat_mask, test_sets)
                curve.append(pr)
                t_last[0] = time.perf_counter()
                return None

            t_last[0] = time.perf_counter()
            train_bpr(indptr, indices, n_users, n_items, d, args.epochs, lr,
                      np.random.default_rng(args.seed), catalogue=catalogue, eval_callback=cb)
            per_epoch = t_train[0] / args.epochs
            best = int(np.argmax([c[0] for c in curve]))
            print(f"BPR-MF d={d} lr={lr}: {per_epoch:.2f} s/epoch; P@10 by epoch: "
                  + " ".join(f"{c[0]:.3f}" for c in curve))
            rows.append((f"BPR-MF d={d} lr={lr}", f"best {best + 1}/{args.epochs}", curve[best][0],
                         curve[best][1], f"{curve[-1][0]:.4f}", f"{per_epoch:.2f}"))

    if args.fcf:
        for d in args.d:
            rng = np.random.default_rng(args.seed)
            Q = rng.normal(0.0, 0.1, (n_items, d))
            adam = AdamState.zeros(Q.shape)
            user_items = [indices[indptr[u]:indptr[u + 1]] for u in range(n_users)]
            curve = []
            t0 = time.perf_counter()
            t_eval = 0.0
            for rnd in range(args.fcf_rounds):
                QtQ = Q.T @ Q
                G = np.zeros_like(Q)
                P = np.empty((n_users, d))
                for u in range(n_users):
                    P[u], g = fcf_client(Q, user_items[u], args.fcf_alpha, args.fcf_lam, QtQ=QtQ)
                    G += g
                te = time.perf_counter()
                curve.append(evaluate(P @ Q.T, train_mask, cat_mask, test_sets))  # p_u of this round
                t_eval += time.perf_counter() - te
                fcf_server_update(Q, G, args.fcf_lr, args.fcf_lam, adam=adam)
            per_round = (time.perf_counter() - t0 - t_eval) / args.fcf_rounds
            best = int(np.argmax([c[0] for c in curve]))
            print(f"FCF d={d} alpha={args.fcf_alpha} lam={args.fcf_lam} Adam lr={args.fcf_lr}: "
                  f"{per_round:.2f} s/round; P@10 by round: " + " ".join(f"{c[0]:.3f}" for c in curve[::2]))
            rows.append((f"FCF d={d}", f"best {best + 1}/{args.fcf_rounds}", curve[best][0], curve[best][1],
                         f"{curve[-1][0]:.4f}", f"{per_round:.2f}"))

    for name in args.fpl:
        for pi in args.pi:
            rows.append(run_fpl(name, pi, args, n_users, n_items, indptr, indices, catalogue,
                                train_mask, cat_mask, test_sets))

    print("\n| method | selection | P@10 | R@10 | P@10 last | s/epoch |")
    print("|---|---|---|---|---|---|")
    for name, sel, p, r, last, t in rows:
        print(f"| {name} | {sel} | {p:.4f} | {r:.4f} | {last} | {t} |")


def run_fpl(name, pi, args, n_users, n_items, indptr, indices, catalogue, train_mask, cat_mask, test_sets):
    d = args.fpl_d or args.d[0]
    lr = args.fpl_lr or args.lr[0]
    x_plus = int(indptr[-1])
    sched = fpl_preset(name, n_users, x_plus).schedule()
    server_rng = node_rng(args.seed, "server")
    Q, b = init_item_params(n_items, d, server_rng)
    rngs = [node_rng(args.seed, f"client/{u}") for u in range(n_users)]
    P = np.stack([init_user_factor(d, rngs[u]) for u in range(n_users)])
    samplers = [make_triple_sampler(indices[indptr[u]:indptr[u + 1]], n_items, catalogue)
                for u in range(n_users)]
    curve, t_train, sent = [], 0.0, 0
    for epoch in range(args.fpl_epochs):
        t0 = time.perf_counter()
        for _ in range(sched.rounds_per_epoch):
            if sched.clients_per_round == n_users:
                chosen = range(n_users)
            else:
                chosen = server_rng.choice(n_users, sched.clients_per_round, replace=False).tolist()
            ups = []
            for u in chosen:
                P[u], up = fpl_client_round(P[u], Q, b, samplers[u], sched.triples_per_client, lr, pi, rngs[u])
                ups.append(up)
                sent += up.n_vectors
            server_apply_sum(Q, b, *concat_updates(ups), lr)
        t_train += time.perf_counter() - t0
        curve.append(evaluate(bpr_scores(P, Q, b), train_mask, cat_mask, test_sets))
        print(f"  {name} pi={pi} epoch {epoch + 1}: P@10 {curve[-1][0]:.4f} ({time.perf_counter() - t0:.1f} s)",
              flush=True)
    per_epoch = t_train / max(1, args.fpl_epochs)
    best = int(np.argmax([c[0] for c in curve]))
    print(f"{name} pi={pi} d={d} lr={lr} {sched}: {per_epoch:.1f} s/epoch; "
          f"update vectors sent per epoch {sent / args.fpl_epochs:.0f}")
    return (f"{name} pi={pi} d={d} lr={lr}", f"best {best + 1}/{args.fpl_epochs}", curve[best][0],
            curve[best][1], f"{curve[-1][0]:.4f}", f"{per_epoch:.1f}")


if __name__ == "__main__":
    main()
