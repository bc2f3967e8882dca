"""Running FedRec++ (and FedRec as its eta = 0 case) on folds; Table 3 from the ledger."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..kernel import NetSpec, SimNetwork, Totals, network_record
from ..protocols import fedrecpp
from ..protocols.fedrecpp import FedRecPPConfig
from ..experiment import UsageError
from .fedrec import evaluate_fold
from .learning import initial_metrics

# kinds that are set-up, tear-down or the model download: outside the paper's Table 3 counting
# (the model and the spec's setup and control kinds: assign, keys, peers, stop; derived from the
# declared kinds, not a hand list, which had no keys nor peers)
NOT_COUNTED = ("model", *fedrecpp.SPEC.kinds_for("setup", "control"))
# (T_predict, T_local) per rho and the learning rate per dataset (FedRec++ paper, section
# Experiments: "searched according to the MAE performance on the first copy"); alpha = 0.001 on all
HF_SETTINGS = {
    "ML100K": {1: (10, 10), 2: (5, 15), 3: (5, 15)},
    "ML1M": {1: (10, 15), 2: (10, 15), 3: (10, 15)},
    "NF5K5K": {1: (5, 10), 2: (5, 10), 3: (5, 15)},
}
HF_SETTINGS_ML100K = HF_SETTINGS["ML100K"]
PAPER_LR = {"ML100K": 0.8, "ML1M": 0.8, "NF5K5K": 1.0}
LR_GRID = (0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4)


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
    download_units: float | None = None  # latent vectors of the model download per client and iteration
    record: dict | None = None  # the network's fedsim.kernel.network_record
    initial_mae: float = float("nan")  # the run's initial model on the test part (did it learn?)
    initial_rmse: float = float("nan")
    # what the run left out (faults, deadline): the result's info["missing"] records (per round
    # and kind missing: how many did not arrive, and the groups and clients (left_out) that it left
    # out of the update; round -1: clients whose key never arrived)
    # and info["lost_clients"] (clients that dropped out: their user factors are lost, and their
    # test ratings are left out of mae and rmse)
    missing: list = field(default_factory=list)
    lost_clients: list = field(default_factory=list)
    iterations: int | None = None  # iterations the server ran (iterations_run: cfg.T unless it diverged)

    @property
    def incomplete(self) -> bool:
        """Something was left out: a round's group or client, or a client that dropped out."""
        return bool(self.missing or self.lost_clients)


def run_pp(task: tuple) -> PPOutcome:
    """``(fold, cfg, seed, network, with_costs[, ledger_dir])`` -> outcome (costs from the ledger
    if asked; the network's record, its ledger written to ``ledger_dir`` if given)."""
    fold, cfg, seed, profile, with_costs, *rest = task
    t0 = time.perf_counter()
    net = NetSpec.of(profile).build(seed)
    job = fedrecpp.SPEC.build(net, fold.train_ratings(), cfg)
    result = job.collect(net.run())
    model = result.model
    wall = time.perf_counter() - t0
    # a client that dropped out took its user factor with it (zeros in the model): its test
    # ratings are left out, as run_one leaves them out (lost_clients says how many clients)
    mae, rmse, div = evaluate_fold(model, fold, lost=result.info["lost_users"])
    label = f"fold{fold.index + 1}-eta{cfg.eta}-rho{cfg.rho:g}-c{cfg.c}-s{seed}"
    out = PPOutcome(fold.index, cfg, mae, rmse, div, wall, record=network_record(net, rest[0] if rest else None, label),
                    missing=list(result.info["missing"]), lost_clients=list(result.info["lost_clients"]),
                    iterations=iterations_run(net))
    out.initial_mae, out.initial_rmse = initial_metrics(fold, cfg, seed)
    if with_costs:
        out.costs = role_costs(net, cfg)
        out.round_s = mean_round_duration(net)
        out.download_bytes = download_per_client(net, cfg)
        out.download_units = download_units_per_client(net, cfg)
    return out


def left_out(runs: list) -> dict:
    """What ``runs`` (``PPOutcome``) left out, summed: ``incomplete_runs`` (runs with any
    missing record or lost client), ``left_out_rounds`` (rounds that left a group or a client out
    of the update, each once whatever kinds it missed), ``left_out_clients`` (clients left out,
    the records' ``left_out`` summed over those rounds, a client whose key never arrived counted
    once for the whole run) and ``lost_clients`` (clients that dropped out)."""
    return {"incomplete_runs": sum(1 for o in runs if o.incomplete),
            "left_out_rounds": sum(len(_rounds_left_out_of(o)) for o in runs),
            "left_out_clients": sum(int(r.get("left_out", 0)) for o in runs for r in o.missing),
            "lost_clients": sum(len(o.lost_clients) for o in runs)}


def _rounds_left_out_of(o: PPOutcome) -> list[int]:
    """The rounds (>= 0) of ``o``'s missing records, each once (a round can miss several kinds)."""
    return sorted({int(r["round"]) for r in o.missing if r.get("round", 0) >= 0})


def warn_incomplete(ctx, runs: list[tuple[str, "PPOutcome"]]) -> list[dict]:
    """Add a warning to the report for every run ``(label, outcome)`` that left something out
    (messages lost or too late for the deadline, or clients that dropped out: groups left out of a
    round's update, clients whose key never arrived, clients gone), and the table ``incomplete`` (one row per such run);
    returns the rows. Their errors are those of a model trained on less than the data, over the
    test ratings of the clients present (a lost client's user factor left with it)."""
    rows = []
    for label, o in runs:
        if not o.incomplete:
            continue
        rows.append({"run": label, "fold": o.fold + 1, **left_out([o]),
                     "keyless_clients": sum(int(r.get("clients", 0)) for r in o.missing if r.get("kind") == "keys"),
                     "rounds_left_out_of": ",".join(str(t) for t in _rounds_left_out_of(o))})
    if rows:
        ctx.table("incomplete", rows, title="Runs that left groups or clients out (faults, deadline)")
        ctx.caveat("incomplete", f"**WARNING: {len(rows)} run(s) incomplete**: messages did not arrive by the deadline (lost, or "
                 "too late: a deadline shorter than a round's transfers leaves them out with no loss at all) or "
                 "clients dropped out, so groups or clients were left out of some rounds' updates (`left_out_clients`, per round) or dropped out "
                 "(`lost_clients`: their user factors are lost, their test ratings left out of the errors). Their figures are "
                 "not those of a complete run: "
                 + "; ".join(f"{r['run']} fold {r['fold']}: {r['left_out_rounds']} round(s) with "
                             f"{r['left_out_clients']} client(s) left out, {r['lost_clients']} lost"
                             for r in rows[:12])
                 + (" ..." if len(rows) > 12 else "") + ". See table `incomplete`.")
    return rows


def iterations_run(net: SimNetwork) -> int:
    """The iterations the server ran, from the ledger: its rounds >= 0 that have messages (every
    iteration sends the model). ``cfg.T`` unless the run diverged: the server stops after
    iteration ``diverged_at`` (1-based), so a diverged run has ``diverged_at`` of them. What
    per-iteration figures divide by (dividing by T made a diverged run's too low)."""
    return sum(1 for r in net.ledger.rounds() if r >= 0)


def _per_iteration(total: float, iterations: int, k: int = 1) -> float:
    return total / iterations / k if iterations and k else (float("nan") if k else 0.0)


def role_costs(net: SimNetwork, cfg: FedRecPPConfig) -> list[dict]:
    """Table 3 from the ledger: per role, the mean over the iterations run
    (:func:`iterations_run`: fewer than ``cfg.T`` when the run diverged) and over the clients of
    that role of what a client sent plus what it received, excluding the model download (and
    set-up and stop messages). Units are latent vectors (floats / d); a role without clients: 0,
    a run of no iteration: NaN. With ``cfg.secure_noise`` the ``noise`` messages are uint64 fixed
    point, which the ledger counts as no float (docs/concepts.md): the units of a role with a
    client that sent or received one are NaN (they left the noise out), its bytes count it."""
    iters = iterations_run(net)
    counted = net.ledger.select(exclude_kinds=NOT_COUNTED, min_round=0)
    sent = counted.group("src")
    received = counted.select(fate="delivered").group("dst")
    roles = net.ledger.roles
    clients = [n for n, r in roles.items() if r != "server"]
    none = Totals()
    floats = {c: sent.get(c, none).floats + received.get(c, none).floats for c in clients}
    if cfg.secure_noise:
        noise = counted.select(kind="noise")
        fixed = set(noise.group("src")) | set(noise.select(fate="delivered").group("dst"))
        floats.update({c: float("nan") for c in fixed if c in floats})
    nbytes = {c: sent.get(c, none).wire_bytes + received.get(c, none).wire_bytes for c in clients}
    out = []
    groups = {"denoiser": [c for c in clients if roles[c] == "denoiser"],
              "ordinary": [c for c in clients if roles[c] == "ordinary"],
              "client": clients}
    for role, members in groups.items():
        k = len(members)
        out.append({
            "role": role, "nodes": k,
            "units_per_iteration": _per_iteration(sum(floats[c] for c in members) / cfg.d, iters, k),
            "bytes_per_iteration": _per_iteration(sum(nbytes[c] for c in members), iters, k),
        })
    return out


def download_per_client(net: SimNetwork, cfg: FedRecPPConfig) -> float:
    """Mean bytes of the model download per client and iteration run (:func:`iterations_run`),
    from the ledger."""
    n_clients = sum(1 for r in net.ledger.roles.values() if r != "server")
    return _per_iteration(float(net.ledger.select(kind="model").totals().wire_bytes), iterations_run(net), n_clients)


def download_units_per_client(net: SimNetwork, cfg: FedRecPPConfig) -> float:
    """Mean latent vectors (payload floats / d, from the ledger) of the model download per client
    and iteration run (:func:`iterations_run`): what Table 3's units are, without the encoding's
    and the network's framing bytes that ``download_per_client`` counts (and for any dtype)."""
    n_clients = sum(1 for r in net.ledger.roles.values() if r != "server")
    return _per_iteration(float(net.ledger.select(kind="model").totals().floats) / cfg.d, iterations_run(net),
                          n_clients)


# what an iteration's end is read from: its training messages after the model download
_ROUND_END_KINDS = tuple(k for k in fedrecpp.SPEC.kinds_for("training") if k != "model")


def mean_round_duration(net: SimNetwork) -> float:
    """Mean simulated duration of an iteration: from the first model message the server sends
    in round t to the arrival of the last message of round t."""
    durs = []
    for t in net.ledger.rounds():
        if t < 0:
            continue
        this = net.ledger.select(round=t)
        start = this.select(kind="model").column("send_time")
        end = this.select(kind=_ROUND_END_KINDS).column("arrival_time")
        if start.size and end.size:
            durs.append(float(np.nanmax(end) - start.min()))
    return float(np.mean(durs)) if durs else float("nan")


def hf_setting(rho: float, tp: int = -1, tl: int = -1, dataset: str | None = "ML100K") -> tuple[int, int]:
    """The paper's (T_predict, T_local) for ``rho`` on ``dataset`` (ML100K's for another or
    unknown dataset, and (10, 10) off the paper's rhos); non-negative ``tp``/``tl`` override."""
    table = HF_SETTINGS.get(dataset or "ML100K", HF_SETTINGS_ML100K)
    # int(rho) took rho = 2.5 for the paper's rho = 2 (and 3.7 for 3): only the paper's rhos are in the table
    dtp, dtl = table.get(int(rho), (10, 10)) if float(rho) == int(rho) else (10, 10)
    return (dtp if tp < 0 else tp), (dtl if tl < 0 else tl)


def as_fedrec(cfg: FedRecPPConfig):
    """The FedRec config (batch PMF) whose central twin computes what ``cfg`` does with every
    client taking part (c = n): with eta = 0 FedRec with ``cfg``'s filling, with eta >= 1 FedRec
    at rho = 0 (FedRec++ is lossless). Raises ``ValueError`` for c > 0 (no central twin)."""
    from ..protocols.fedrec import FedRecConfig

    if cfg.c:
        raise ValueError("partial participation (c > 0) has no central twin")
    return FedRecConfig("PMF(B)", d=cfg.d, T=cfg.T, lr=cfg.lr, lam=cfg.lam, rho=cfg.rho if cfg.eta == 0 else 0.0,
                        strategy=cfg.strategy, T_predict=cfg.T_predict, T_local=cfg.T_local,
                        hf_convention=cfg.hf_convention, order=cfg.order, decay=cfg.decay,
                        init_scale=cfg.init_scale, dtype=cfg.dtype)


def run_search_task(task: tuple):
    """A search candidate ``(fold, framework, cfg, seed, network, curve)`` for
    :func:`fedsim.studies.search.run_search`: a ``FedRecPPConfig`` with c = 0 runs as its FedRec
    central twin (:func:`as_fedrec`, the same model), one with c > 0 through the actors on the
    ideal network; a ``FedRecConfig`` as :func:`fedsim.studies.fedrec.run_one` runs it. The
    outcome keeps the candidate's own config."""
    from .fedrec import run_one

    fold, _framework, cfg, seed, _net, _curve = task
    if isinstance(cfg, FedRecPPConfig):
        if cfg.c:
            return run_pp((fold, cfg, seed, "ideal", False))
        out = run_one((fold, "unfederated", as_fedrec(cfg), seed, "ideal", False))
        out.cfg = cfg
        return out
    return run_one(task)


def denoisers(label: str, n: int, *, at_least_one: bool = False) -> int:
    """The number of denoisers ``label`` ('3', 'n/4') names among ``n`` clients (with
    ``at_least_one``, 'n/K' is at least 1); raises ``UsageError`` naming ``--set etas`` for
    anything else ('abc', 'n/0', '-1', more than n): int() and the division raised a traceback,
    and a negative eta ran as none."""
    text = str(label).strip()
    k = None
    try:
        k = int(text[2:]) if text.startswith("n/") else None
        eta = n // k if k is not None and k > 0 else int(text)
    except ValueError:
        eta = -1
    if text.startswith("n/") and (k is None or k <= 0) or not 0 <= eta <= n:
        raise UsageError(f"--set etas: {label!r} is not a number of denoisers in [0, {n}] nor n/K with K >= 1")
    return max(1, eta) if at_least_one and text.startswith("n/") else eta
