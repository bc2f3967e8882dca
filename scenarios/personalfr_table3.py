"""PersonalFR Table III: Joint, FedAvg and PersonalFR for M in {100, 300} clients, explicit RMSE and implicit NDCG@10.

Users are split 80/20 per user at random, partitioned into M clients of balanced size; every client trains
on its users, the server picks a fraction C of the clients per round. Metrics are federated evaluations
(the server sends the model to every client, clients return sums over their private test entries) every
``eval_every`` rounds; ``best`` is the best of them (the paper's reporting: best epoch on the test set),
``final`` the last. Communication per round is read from the ledger. The paper's figures (ML1M) are
shown beside ours.

This module also holds the helpers the other PersonalFR scenarios import (``run_spec``, ``make_specs``,
``comm_from_ledger``, ``PAPER``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedsim.experiment import Param, RunContext, ScenarioError, scenario_main
from fedsim.kernel import SimNetwork
from fedsim.math import ae_train
from fedsim.protocols import fedavg_ae, personalfr
from fedsim.protocols.personalfr import EVAL_KINDS, FedAEConfig
from fedsim.seeding import node_rng

DEFAULT_DATA = "ml100k-like"

# Le et al. 2022, Tables III and IV (ML1M; mean over 4 seeds): RMSE (explicit), NDCG@10 (implicit)
PAPER = {
    ("explicit", "joint", None): 0.8591, ("implicit", "joint", None): 0.8466,
    ("explicit", "fedavg", 100): 0.8629, ("implicit", "fedavg", 100): 0.8514,
    ("explicit", "personalfr", 100): 0.8613, ("implicit", "personalfr", 100): 0.8538,
    ("explicit", "fedavg", 300): 0.8731, ("implicit", "fedavg", 300): 0.8486,
    ("explicit", "personalfr", 300): 0.8602, ("implicit", "personalfr", 300): 0.8529,
    ("explicit", "fedavg", "all"): 0.9508, ("implicit", "fedavg", "all"): 0.8321,
    ("explicit", "personalfr", "all"): 0.8983, ("implicit", "personalfr", "all"): 0.8379,
}
METRIC = {"explicit": "rmse", "implicit": "ndcg"}
PROTOCOLS = {"fedavg": fedavg_ae, "personalfr": personalfr}

COMMON_PARAMS = {
    "tasks": Param(["explicit", "implicit"], "tasks: explicit (RMSE) and/or implicit (NDCG@10)", kind="strs",
                   choices=("explicit", "implicit")),
    "methods": Param(["joint", "fedavg", "personalfr"], "methods to run", kind="strs",
                     choices=("joint", "fedavg", "personalfr")),
    "rounds": Param(200, "communication rounds T (the paper: 800)"),
    "eval_every": Param(10, "federated evaluation every this many rounds (and after the last)"),
    "fraction": Param(0.1, "fraction C of clients per round"),
    "local_epochs": Param(5, "local epochs K"),
    "batch": Param(10, "local batch size B (users)"),
    "lr": Param(0.1, "client SGD learning rate (cosine-annealed per round)"),
    "merge": Param("per_item", "Eq. 5 merge: per_item or algorithm1", choices=("per_item", "algorithm1")),
    "compression": Param(True, "Partial Compression (exchange only the active decoder)"),
    "encoder_input": Param("cut", "PersonalFR encoder width: cut (own items; same model, less memory) or dense",
                           choices=("cut", "dense")),
    "client_momentum": Param("keep", "clients keep their momentum between rounds (keep) or not (reset)",
                             choices=("keep", "reset")),
    "joint_epochs": Param(0, "Joint epochs (0: as many as rounds)"),
    "joint_batch": Param(500, "Joint batch size (Adam lr 1e-3)"),
    "threshold": Param(3.5, "implicit task: ratings >= threshold are positive"),
    "test_frac": Param(0.2, "per-user test fraction"),
    "repeats": Param(1, "repetitions with seeds seed, seed+1, ... (the paper: 4)"),
    "workers": Param(0, "worker processes (0: one per core)"),
}
PARAMS = {"clients": Param([100, 300], "numbers of clients M (0: one user per client)"), **COMMON_PARAMS}


# --------------------------------------------------------------------------------------- the runs

@dataclass(frozen=True)
class RunSpec:
    """One training run (picklable for worker processes)."""

    method: str  # joint, fedavg, personalfr
    data: str
    seed: int
    task: str
    threshold: float
    test_frac: float
    M: int = 0  # 0: one user per client
    cfg: FedAEConfig | None = None
    profile: str = "ideal"
    evaluate: bool = True
    joint_epochs: int = 0
    joint_batch: int = 500


_TASKS: dict = {}


def load_task(data: str, seed: int, task: str, threshold: float, test_frac: float):
    """(AETask, ratings): the dataset (synthetic presets generated with seed 0), split 80/20 per user with
    ``seed``; cached per process."""
    key = (data, seed, task, threshold, test_frac)
    if key not in _TASKS:
        from fedsim.data import per_user_random, resolve

        ratings = resolve(data)
        tr, te = per_user_random(ratings, test_frac, seed=seed)
        t = ae_train.prepare((tr.users, tr.items, tr.values), (te.users, te.items, te.values), ratings.n_users,
                             ratings.n_items, task=task, threshold=threshold)
        t.info["name"] = ratings.name
        _TASKS.clear()  # one dataset at a time per process (ML1M-sized rows are ~110 MB)
        _TASKS[key] = t
    return _TASKS[key]


def comm_from_ledger(net, rounds: int) -> dict:
    """Communication figures of one run, read from the ledger (evaluation kinds left out)."""
    cols = net.ledger.columns()
    if not len(cols["kind"]):
        return {}
    kind = cols["kind"]
    nbytes = cols["bytes"].astype(np.int64)
    floats = cols["floats"].astype(np.int64)
    train = ~np.isin(kind, EVAL_KINDS)
    down = np.isin(kind, ("decoder", "model"))
    up = kind == "update"
    n_up = int(up.sum())
    return {
        "total_bytes": int(nbytes[train].sum()),
        "setup_bytes": int(nbytes[kind == "indices"].sum()),
        "bytes_per_round": float(nbytes[down | up].sum() / rounds),
        "down_bytes_per_client": float(nbytes[down].sum() / max(int(down.sum()), 1)),
        "up_bytes_per_client": float(nbytes[up].sum() / max(n_up, 1)),
        "up_floats_per_client": float(floats[up].sum() / max(n_up, 1)),
        "client_rounds": n_up,
        "eval_bytes": int(nbytes[~train].sum()),
        "messages": int(train.sum()),
    }


def run_spec(spec: RunSpec) -> dict:
    """Run one spec; returns its history, best/final metric, FLOPs and ledger figures (module-level, so it
    can run in a worker process)."""
    task = load_task(spec.data, spec.seed, spec.task, spec.threshold, spec.test_frac)
    key = METRIC[spec.task]
    t0 = time.perf_counter()
    out: dict[str, Any] = {"method": spec.method, "task": spec.task, "seed": spec.seed, "M": spec.M,
                           "n_users": task.n_users, "n_items": task.n_items}
    if spec.method == "joint":
        epochs = spec.joint_epochs or (spec.cfg.rounds if spec.cfg else 200)
        every = spec.cfg.eval_every if spec.cfg and spec.cfg.eval_every else max(epochs // 10, 1)
        res = ae_train.train_joint(task, epochs=epochs, rng=node_rng(spec.seed, "joint"), batch=spec.joint_batch,
                                   eval_every=every, k=spec.cfg.eval_k if spec.cfg else 10)
        hist = [dict(h, round=h["epoch"]) for h in res.history]
        out.update(rounds=epochs, client_flops=res.flops, comm={}, sim_time=0.0, totals={})
    else:
        from fedsim.data import partition_users

        M = spec.M or task.n_users
        groups = partition_users(task.n_users, M, seed=spec.seed)
        net = SimNetwork(seed=spec.seed, profile=spec.profile)
        job = PROTOCOLS[spec.method].build(net, task, groups, spec.cfg, evaluate=spec.evaluate)
        result = net.run()
        if result.unfinished:
            raise ScenarioError(f"{spec.method} M={M}: actors left blocked: {result.unfinished[:3]}")
        col = job.collect(result)
        hist = col["history"]
        out.update(M=M, rounds=spec.cfg.rounds, client_flops=col["client_flops"], server_flops=col["server_flops"],
                   comm=comm_from_ledger(net, spec.cfg.rounds), sim_time=float(result.duration),
                   totals=net.ledger.totals(), clients_per_round=len(col["selected"][0]))
    vals = [h[key] for h in hist]
    finite = [v for v in vals if not math.isnan(v)]
    best_i = (int(np.nanargmin(vals)) if key == "rmse" else int(np.nanargmax(vals))) if finite else None
    out.update(history=[{"round": h["round"], key: h[key]} for h in hist],
               final=vals[-1] if vals else float("nan"),
               best=vals[best_i] if best_i is not None else float("nan"),
               best_round=hist[best_i]["round"] if best_i is not None else None,
               wall_s=time.perf_counter() - t0)
    return out


def config_from(ctx: RunContext, **over) -> FedAEConfig:
    kw = dict(rounds=ctx["rounds"], fraction=ctx["fraction"], local_epochs=ctx["local_epochs"], batch=ctx["batch"],
              lr=ctx["lr"], merge=ctx["merge"], compression=ctx["compression"],
              encoder_input=ctx["encoder_input"], client_momentum=ctx["client_momentum"],
              eval_every=ctx["eval_every"])
    kw.update(over)
    return FedAEConfig(**kw)


def make_specs(ctx: RunContext, clients: list[int], **cfg_over) -> list[RunSpec]:
    specs = []
    for rep in range(ctx["repeats"]):
        seed = ctx.seed + rep
        for task in ctx["tasks"]:
            cfg = config_from(ctx, task=task, **cfg_over)
            common = dict(data=ctx.data, seed=seed, task=task, threshold=ctx["threshold"],
                          test_frac=ctx["test_frac"], profile=ctx.profile)
            if "joint" in ctx["methods"]:
                specs.append(RunSpec("joint", cfg=cfg, joint_epochs=ctx["joint_epochs"],
                                     joint_batch=ctx["joint_batch"], **common))
            for M in clients:
                for method in ("fedavg", "personalfr"):
                    if method in ctx["methods"]:
                        specs.append(RunSpec(method, M=M, cfg=cfg, **common))
    return specs


def execute(ctx: RunContext, specs: list[RunSpec], stage: str) -> list[dict]:
    from fedsim.studies.parallel import default_workers, pmap

    workers = ctx["workers"] or default_workers()
    ctx.progress.update(0, len(specs), stage=stage)
    outs = pmap(run_spec, specs, workers,
                on_done=lambda i, _: ctx.progress.update(i + 1, len(specs), stage=stage))
    for o in outs:  # what ctx.record_network does, for runs made in worker processes
        ctx.sim_time += o.get("sim_time", 0.0)
        for k, v in (o.get("totals") or {}).items():
            if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
                ctx.ledger_totals[k] = ctx.ledger_totals.get(k, 0) + v
    return outs


def _mean_std(xs):
    xs = [x for x in xs if not math.isnan(x)]
    if not xs:
        return float("nan"), float("nan")
    return float(np.mean(xs)), float(np.std(xs))  # population std, as the paper


def label_M(M: int, n_users: int) -> str:
    return "all" if M in (0, n_users) else str(M)


def result_tables(ctx: RunContext, outs: list[dict], *, title: str, name: str = "results") -> list[dict]:
    """The accuracy table (mean and population std over repeats, best and final), the communication table
    and the learning-curve CSV; returns the accuracy rows."""
    groups: dict = {}
    for o in outs:
        groups.setdefault((o["task"], o["method"], o["M"] if o["method"] != "joint" else None), []).append(o)
    rows = []
    order = {"joint": 0, "fedavg": 1, "personalfr": 2}
    for (task, method, M), runs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][2] or 0, order[kv[0][1]])):
        n_users = runs[0]["n_users"]
        mlab = "" if M is None else label_M(M, n_users)
        best, best_sd = _mean_std([r["best"] for r in runs])
        fin, fin_sd = _mean_std([r["final"] for r in runs])
        paper = PAPER.get((task, method, None if M is None else (mlab if mlab == "all" else int(mlab))), "")
        rows.append({"task": task, "metric": METRIC[task] if task == "explicit" else "ndcg@10",
                     "clients": mlab or "1 (central)", "method": method, "best": best, "best_std": best_sd,
                     "final": fin, "final_std": fin_sd, "best_round": runs[0]["best_round"],
                     "rounds": runs[0]["rounds"], "repeats": len(runs), "paper_ml1m": paper,
                     "wall_s": float(np.mean([r["wall_s"] for r in runs]))})
    ctx.table(name, rows, title=title)
    comm = []
    for (task, method, M), runs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][2] or 0, order[kv[0][1]])):
        if method == "joint":
            continue
        c = runs[0]["comm"]
        comm.append({"task": task, "clients": label_M(M, runs[0]["n_users"]), "method": method,
                     "clients_per_round": runs[0]["clients_per_round"],
                     "bytes_per_round": c["bytes_per_round"], "down_bytes_per_client": c["down_bytes_per_client"],
                     "up_bytes_per_client": c["up_bytes_per_client"], "setup_bytes": c["setup_bytes"],
                     "client_gflop_per_round": runs[0]["client_flops"] / runs[0]["rounds"] / 1e9})
    if comm:
        ctx.table(f"{name}_comm", comm, title="Communication per round (ledger, evaluation messages left out) "
                  "and client computation per round (FLOPs charged)", floatfmt=".1f")
    curves = []
    for o in outs:
        key = METRIC[o["task"]]
        for h in o["history"]:
            curves.append({"task": o["task"], "method": o["method"],
                           "clients": "" if o["method"] == "joint" else label_M(o["M"], o["n_users"]),
                           "seed": o["seed"], "round": h["round"], key: h[key]})
    write_csv(ctx.out / f"{name}_curves.csv", curves, ["task", "method", "clients", "seed", "round", "rmse", "ndcg"])
    return rows


def write_csv(path, rows: list[dict], cols: list[str]) -> None:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(cols)
        for r in rows:
            w.writerow([repr(v) if isinstance(v, float) else v for v in (r.get(c, "") for c in cols)])


def verdicts(ctx: RunContext, rows: list[dict]) -> None:
    """Notes: does PersonalFR beat FedAvg at each M, is Joint at least as good as both (best-epoch figures)."""
    lines = []
    for task in sorted({r["task"] for r in rows}):
        better = (lambda a, b: a < b) if task == "explicit" else (lambda a, b: a > b)
        mine = {(r["method"], r["clients"]): r["best"] for r in rows if r["task"] == task}
        joint = mine.get(("joint", "1 (central)"))
        for M in sorted({c for (_, c) in mine if c != "1 (central)"}, key=lambda s: (s == "all", s)):
            fa, pf = mine.get(("fedavg", M)), mine.get(("personalfr", M))
            if fa is None or pf is None:
                continue
            txt = f"{task}, M = {M}: PersonalFR {pf:.4f} vs FedAvg {fa:.4f}: " + (
                "PersonalFR better" if better(pf, fa) else "FedAvg better")
            if joint is not None:
                ok = not better(pf, joint) and not better(fa, joint)
                txt += f"; Joint {joint:.4f} " + ("at least as good as both" if ok else "NOT at least as good as both")
            lines.append("- " + txt)
    if lines:
        ctx.note("Checks (best evaluation of each run):\n\n" + "\n".join(lines))


def plot_curves(ctx: RunContext, outs: list[dict], name: str) -> None:
    for task in sorted({o["task"] for o in outs}):
        key = METRIC[task]

        def draw(ax, task=task, key=key):
            for o in outs:
                if o["task"] != task or o["seed"] != ctx.seed:
                    continue
                xs = [h["round"] for h in o["history"]]
                ys = [h[key] for h in o["history"]]
                lab = "Joint (epochs)" if o["method"] == "joint" else f"{o['method']} M={label_M(o['M'], o['n_users'])}"
                ax.plot(xs, ys, marker=".", label=lab, linestyle="--" if o["method"] == "joint" else "-")
            ax.set_xlabel("communication round (Joint: epoch)")
            ax.set_ylabel("RMSE" if key == "rmse" else "NDCG@10")
            ax.set_title(f"{task} feedback")
            ax.legend(fontsize=8)
            if key == "rmse":
                finite = [h[key] for o in outs if o["task"] == task for h in o["history"] if h[key] == h[key]]
                if finite:
                    ax.set_ylim(min(finite) - 0.02, min(max(finite), min(finite) + 0.35))

        ctx.plot(f"{name}_{task}", draw)


def run(ctx: RunContext) -> None:
    specs = make_specs(ctx, list(ctx["clients"]))
    outs = execute(ctx, specs, "table III runs")
    rows = result_tables(ctx, outs, title="Table III: Joint, FedAvg and PersonalFR (best / final evaluation)")
    verdicts(ctx, rows)
    plot_curves(ctx, outs, "curves")
    ctx.note(f"Data `{ctx.data}` ({outs[0]['n_users']} users x {outs[0]['n_items']} items), 80/20 per-user split. "
             "`paper_ml1m` is the paper's figure on MovieLens-1M (800 rounds, best of 4 seeds' curves averaged); "
             "learning curves are in `results_curves.csv`.")


if __name__ == "__main__":
    raise SystemExit(scenario_main(globals()))
