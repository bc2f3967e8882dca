"""Running FedRec++ (and FedRec as its eta = 0 case) on folds; Table 3 from the ledger."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..kernel import NetSpec, SimNetwork, Totals, network_record
from ..protocols import fedrecpp
from ..protocols.fedrecpp import FedRecPPConfig
from .fedrec import evaluate_fold

# kinds that are set-up, tear-down or the model download: outside the paper's Table 3 counting
NOT_COUNTED = ("model", "assign", "stop")
# (T_predict, T_local) per rho on ML100K (FedRec++ paper, section Experiments)
HF_SETTINGS_ML100K = {1: (10, 10), 2: (5, 15), 3: (5, 15)}


@dataclass
class PPOutcome:
    fold: int
    cfg: FedRecPPConfig
    mae: float
    rmse: float
    diverged_at: int | None
    wall_s: float
    costs: list | None = None
    round_s: float | None = None
    download_bytes: float | None = None
    record: dict | None = None  # the network's fedsim.kernel.network_record


def run_pp(task: tuple) -> PPOutcome:
    """``(fold, cfg, seed, network, with_costs[, ledger_dir])`` -> outcome (costs from the ledger
    if asked; the network's record, its ledger written to ``ledger_dir`` if given)."""
    fold, cfg, seed, profile, with_costs, *rest = task
    t0 = time.perf_counter()
    net = NetSpec.of(profile).build(seed)
    job = fedrecpp.SPEC.build(net, fold.train_ratings(), cfg)
    model = job.collect(net.run()).model
    wall = time.perf_counter() - t0
    mae, rmse, div = evaluate_fold(model, fold)
    label = f"fold{fold.index + 1}-eta{cfg.eta}-rho{cfg.rho:g}-c{cfg.c}-s{seed}"
    out = PPOutcome(fold.index, cfg, mae, rmse, div, wall, record=network_record(net, rest[0] if rest else None, label))
    if with_costs:
        out.costs = role_costs(net, cfg)
        out.round_s = mean_round_duration(net)
        out.download_bytes = download_per_client(net, cfg)
    return out


def role_costs(net: SimNetwork, cfg: FedRecPPConfig) -> list[dict]:
    """Table 3 from the ledger: per role, the mean over iterations and over the clients of that
    role of what a client sent plus what it received, excluding the model download (and set-up
    and stop messages). Units are latent vectors (floats / d)."""
    T = cfg.T
    counted = net.ledger.select(exclude_kinds=NOT_COUNTED, min_round=0)
    sent = counted.group("src")
    received = counted.select(fate="delivered").group("dst")
    roles = net.ledger.roles
    clients = [n for n, r in roles.items() if r != "server"]
    none = Totals()
    floats = {c: sent.get(c, none).floats + received.get(c, none).floats for c in clients}
    nbytes = {c: sent.get(c, none).wire_bytes + received.get(c, none).wire_bytes for c in clients}
    out = []
    groups = {"denoiser": [c for c in clients if roles[c] == "denoiser"],
              "ordinary": [c for c in clients if roles[c] == "ordinary"],
              "client": clients}
    for role, members in groups.items():
        k = len(members)
        out.append({
            "role": role, "nodes": k,
            "units_per_iteration": sum(floats[c] for c in members) / cfg.d / T / k if k else 0.0,
            "bytes_per_iteration": sum(nbytes[c] for c in members) / T / k if k else 0.0,
        })
    return out


def download_per_client(net: SimNetwork, cfg: FedRecPPConfig) -> float:
    """Mean bytes of the model download per client and iteration, from the ledger."""
    n_clients = sum(1 for r in net.ledger.roles.values() if r != "server")
    return float(net.ledger.select(kind="model").totals().wire_bytes) / cfg.T / n_clients


def mean_round_duration(net: SimNetwork) -> float:
    """Mean simulated duration of an iteration: from the first model message the server sends
    in round t to the arrival of the last message of round t."""
    durs = []
    for t in net.ledger.rounds():
        if t < 0:
            continue
        this = net.ledger.select(round=t)
        start = this.select(kind="model").column("send_time")
        end = this.select(kind=("gradients", "noise", "denoised", "collect")).column("arrival_time")
        if start.size and end.size:
            durs.append(float(np.nanmax(end) - start.min()))
    return float(np.mean(durs)) if durs else float("nan")


def hf_setting(rho: float, tp: int = -1, tl: int = -1) -> tuple[int, int]:
    dtp, dtl = HF_SETTINGS_ML100K.get(int(rho), (10, 10))
    return (dtp if tp < 0 else tp), (dtl if tl < 0 else tl)


