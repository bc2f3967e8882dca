"""Running FedRec (and its centralized twin) on folds; cost tables from the ledger."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..data import Ratings
from ..kernel import NetSpec, SimNetwork, network_record
from ..math.pmf import DivergenceError
from ..protocols import fedrec
from ..protocols.fedrec import FedRecConfig, paper_lr
from . import faults
from .faults import FAULT_STUDY

__all__ = [
    "Fold", "FoldStats", "RunOutcome", "comm_per_iteration", "evaluate_fold", "fold_stats", "group_runs",
    "make_folds", "paper_lr", "refuse_faults", "run_one",
]


@dataclass(frozen=True)
class Fold:
    """One training/test copy as plain arrays (picklable for worker processes)."""

    index: int
    train: tuple  # users, items, ratings
    test: tuple
    n_users: int
    n_items: int

    def train_ratings(self) -> Ratings:
        """The training part as ``Ratings`` over the fold's index space."""
        return Ratings(*self.train, n_users=self.n_users, n_items=self.n_items)

    def test_ratings(self) -> Ratings:
        return Ratings(*self.test, n_users=self.n_users, n_items=self.n_items)


@dataclass
class RunOutcome:
    """One run's figures. ``mae``/``rmse`` are NaN and ``diverged_at`` set if it diverged."""

    fold: int
    framework: str
    cfg: FedRecConfig
    mae: float
    rmse: float
    diverged_at: int | None
    wall_s: float
    history: list
    ledger: dict | None = None  # per-iteration communication figures (federated only)
    sim_time: float = 0.0
    totals: dict | None = None
    record: dict | None = None  # the network's fedsim.kernel.network_record (federated only)
    initial_mae: float = float("nan")  # the run's initial model on the test part (did it learn?)
    initial_rmse: float = float("nan")
    # what a federated run left out (faults and a deadline): the result's info["missing"] records
    # (per round, the uploads that did not arrive) and info["lost_clients"] (clients that dropped
    # out, their user factors lost with them: their test ratings are not in mae/rmse)
    missing: list = field(default_factory=list)
    lost_clients: list = field(default_factory=list)

    @property
    def incomplete(self) -> bool:
        """Something was left out: a round's upload, or a client that dropped out."""
        return bool(self.missing or self.lost_clients)


def refuse_faults(profile, what: str, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` if network ``profile`` can lose a message (:func:`fedsim.studies.faults.refuse_faults`):
    ``what`` runs FedRec with no deadline."""
    faults.refuse_faults(profile, f"{what} runs FedRec with no deadline", FAULT_STUDY, error)


def make_folds(ratings, k: int, seed: int) -> list[Fold]:
    from ..data import kfold_copies

    out = []
    for j, (tr, te) in enumerate(kfold_copies(ratings, k=k, seed=seed)):
        out.append(Fold(j, (tr.users, tr.items, tr.values), (te.users, te.items, te.values),
                        ratings.n_users, ratings.n_items))
    return out


def run_one(task: tuple) -> RunOutcome:
    """Run ``(fold, framework, cfg, seed, network, evaluate_curve[, ledger_dir])``; ``framework``
    is ``"federated"`` (actors on the network a ``NetSpec`` or profile name describes) or
    ``"unfederated"`` (the centralized twin). With ``ledger_dir`` the network's ledger is
    written there (see ``RunContext.ledger_dir``). A federated run on a network that can lose a
    message needs ``cfg.deadline`` (else ``ValueError``: :func:`refuse_faults`); its outcome then
    carries what was left out (``missing``, ``lost_clients``), and its errors are over the test
    ratings of the clients still present (one that dropped out took its user factor with it, which
    the collected model holds as zeros: the lowest rating for every item)."""
    fold, framework, cfg, seed, profile, curve, *rest = task
    ledger_dir = rest[0] if rest else None
    record = None
    data = fold.train_ratings()
    t0 = time.perf_counter()
    history: list = []
    ledger = None
    sim_time = 0.0
    totals = None
    missing: list = []
    lost: list = []
    lost_users: list = []
    if framework == "federated":
        if cfg.deadline is None:
            refuse_faults(profile, "run_one")
        if curve and cfg.T:  # (T = 0: no iteration to evaluate; FedRecConfig refuses eval_every > T)
            cfg = replace(cfg, eval_every=1)
        net = NetSpec.of(profile).build(seed)
        job = fedrec.SPEC.build(net, data, cfg, test=fold.test_ratings() if curve else None)
        result = job.collect(net.run())
        model = result.model
        missing, lost = list(result.info["missing"]), list(result.info["lost_clients"])
        lost_users = list(result.info["lost_users"])
        history = model.history
        ledger = comm_per_iteration(net, cfg)
        sim_time = result.duration
        totals = net.ledger.totals()
        record = network_record(net, ledger_dir, f"fold{fold.index + 1}-{cfg.model}-rho{cfg.rho:g}-{cfg.strategy}-s{seed}")
    else:
        model = fedrec.central_twin(data, cfg, seed=seed, test=fold.test if curve else None)
        history = [{"iteration": h["iteration"], "mae": h.get("mae"), "rmse": h.get("rmse")}
                   for h in model.history] if curve else []
    wall = time.perf_counter() - t0
    mae, rmse, diverged = evaluate_fold(model, fold, lost=lost_users)
    if curve and framework == "federated" and diverged is None and (not history or history[-1]["iteration"] != cfg.T):
        # every mode evaluates after iteration T (eval_every = 1); this only fills in a history
        # without it (T = 0)
        history = history + [{"iteration": cfg.T, "mae": mae, "rmse": rmse}]
    from .learning import initial_metrics

    init_mae, init_rmse = initial_metrics(fold, cfg, seed)
    return RunOutcome(fold.index, framework, cfg, mae, rmse, diverged, wall, history, ledger,
                      sim_time, totals, record, init_mae, init_rmse, missing, lost)


def evaluate_fold(model, fold: Fold, lost=()) -> tuple[float, float, int | None]:
    """``(mae, rmse, diverged_at)`` of a trained model on ``fold``'s test part, leaving out the
    test ratings of the users in ``lost`` (clients that dropped out: their user factors are not
    in the model; NaN errors if no rating is left): ``diverged_at`` None, or, when the model
    diverged (``evaluate`` raised ``DivergenceError``), NaN errors and the iteration it diverged at."""
    users, items, values = (np.asarray(a) for a in fold.test[:3])
    if len(lost):
        keep = ~np.isin(users, np.asarray(lost, dtype=np.int64))
        users, items, values = users[keep], items[keep], values[keep]
        if not keep.any() and model.diverged_at is None:
            return float("nan"), float("nan"), None  # every test rating's client dropped out
    try:
        mae, rmse = model.evaluate(users, items, values)
        return mae, rmse, None
    except DivergenceError as exc:
        return float("nan"), float("nan"), model.diverged_at or exc.iteration


def group_runs(outs: list, keys: list) -> dict[Any, list]:
    """``{key: [the outcomes run under it, in run order]}``, keys in order of first appearance;
    ``keys[i]`` is the key of ``outs[i]``."""
    groups: dict[Any, list] = {}
    for o, k in zip(outs, keys):
        groups.setdefault(k, []).append(o)
    return groups


@dataclass(frozen=True)
class FoldStats:
    """One configuration's errors over its folds. ``diverged`` lists the (1-based) folds whose run
    diverged; the means and population standard deviations are NaN when any did (a diverged
    fold is not averaged away). The standard deviations are also NaN for a single run: one
    fold shows no spread, and 0 would say it had none."""

    mae: np.ndarray
    rmse: np.ndarray
    diverged: list[int]
    mae_mean: float
    mae_std: float
    rmse_mean: float
    rmse_std: float


def fold_stats(runs: list) -> FoldStats:
    """:class:`FoldStats` of outcomes with ``fold``, ``mae``, ``rmse`` and ``diverged_at``
    (``RunOutcome``, ``fedrecpp.PPOutcome``)."""
    div = [o.fold + 1 for o in runs if o.diverged_at is not None]
    mae = np.array([o.mae for o in runs])
    rmse = np.array([o.rmse for o in runs])
    if div:
        return FoldStats(mae, rmse, div, math.nan, math.nan, math.nan, math.nan)
    if len(runs) < 2:
        return FoldStats(mae, rmse, div, float(mae.mean()), math.nan, float(rmse.mean()), math.nan)
    return FoldStats(mae, rmse, div, float(mae.mean()), float(mae.std()), float(rmse.mean()), float(rmse.std()))


def comm_per_iteration(net: SimNetwork, cfg: FedRecConfig | None = None) -> dict[str, Any]:
    """Mean per-iteration communication of FedRec's training messages, from the ledger: every
    kind the protocol declares for training (``fedsim.protocols.fedrec.SPEC``: ``model``,
    ``gradients`` and, with secure aggregation, the ``masked`` upload that replaces
    ``gradients``), sent or lost alike, over the rounds that have training traffic (the
    iterations run: fewer than ``cfg.T`` when the run diverged).

    ``bytes`` (on the wire, framing in), ``raw_bytes`` (array payloads), ``floats`` and
    ``messages`` are both directions; ``download_*`` the server's messages to clients,
    ``upload_*`` the clients' to the server (``*_bytes`` on the wire, ``*_raw_bytes`` array
    bytes). ``floats`` count floating-point array elements only (docs/concepts.md): the masked
    upload is ``uint64`` fixed point, so under secure aggregation ``upload_floats`` is 0 and the
    upload is in ``upload_bytes`` / ``upload_raw_bytes`` (m (d + 1) x 8 array bytes per client).

    Kept apart, as totals over the run (not per iteration): ``setup_bytes`` / ``setup_messages``
    (the secure aggregation's key exchange, ``keys`` and ``peers``, once) and ``eval_bytes`` /
    ``eval_messages`` (``evaluate`` and ``eval``). ``stop`` (control) is in neither.
    ``cfg`` is not read (kept for callers that pass it). Raises ``ValueError`` naming the kind
    and nodes of a training message that is neither from nor to the server (its direction
    would be unknown: FedRec sends none)."""
    led = net.ledger
    train = led.select(kind=fedrec.SPEC.kinds_for("training"))
    down = train.select(src_role="server")
    up = train.select(dst_role="server")
    if len(down) + len(up) != len(train):
        odd = next(r for r in train.select(src_role=[x for x in led.role_members if x != "server"]).records()
                   if r["dst_role"] != "server")
        raise ValueError(f"comm_per_iteration: training message {odd['kind']!r} from {odd['src']} to {odd['dst']} "
                         f"(round {odd['round']}) is neither a download nor an upload")
    iters = max(1, len(train.rounds()))
    t, td, tu = train.totals(), down.totals(), up.totals()
    setup = led.select(kind=fedrec.SPEC.kinds_for("setup")).totals()
    ev = led.select(kind=fedrec.SPEC.kinds_for("evaluation")).totals()
    return {
        "bytes": float(t.wire_bytes) / iters,
        "raw_bytes": float(t.raw_bytes) / iters,
        "floats": float(t.floats) / iters,
        "download_floats": float(td.floats) / iters,
        "upload_floats": float(tu.floats) / iters,
        "messages": float(t.messages) / iters,
        "iterations": iters,
        "download_bytes": float(td.wire_bytes) / iters,
        "upload_bytes": float(tu.wire_bytes) / iters,
        "download_raw_bytes": float(td.raw_bytes) / iters,
        "upload_raw_bytes": float(tu.raw_bytes) / iters,
        "setup_bytes": int(setup.wire_bytes),
        "setup_messages": int(setup.messages),
        "eval_bytes": int(ev.wire_bytes),
        "eval_messages": int(ev.messages),
    }
