"""Did a run learn? The metric of a run's *initial* model beside its final one, and a warning in
the report when training left the metric where it started.

FedRec and FedRec++ start every factor uniform in (-0.005, 0.005), so their initial predictions
are about 0 and, clipped to [1, 5], the initial model predicts 1 for every rating (RMSE 2.775 on
MovieLens 100K). A run whose final RMSE is still there did not learn, whatever its table row
looks like; the scenarios say so in their reports.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from ..math.fedrec_central import TrainResult, to_csr
from ..math.pmf import init_item_factors, init_user_factor
from ..protocols.common import SERVER, client_names
from ..seeding import node_rng

__all__ = ["DEFAULT_REL_TOL", "did_not_learn", "initial_model", "initial_metrics", "warn_not_learned"]

# a run "did not learn" when its final error is within this fraction of its initial error
DEFAULT_REL_TOL = 0.01


def initial_model(train: tuple, n_users: int, n_items: int, *, d: int, seed: int, implicit: bool = False,
                  init_scale: float = 0.005, dtype: str = "float32", model: str = "initial") -> TrainResult:
    """The model a FedRec or FedRec++ run with ``seed`` starts from: V (then O for SVD++) drawn
    first by the server's generator, U_u drawn first by client u's, exactly as the actors and
    the central twins draw them. ``train``: (users, items, ratings) of the training part (SVD++'s
    implicit term needs each user's rated items)."""
    dt = np.dtype(dtype)
    srv = node_rng(seed, SERVER)
    V = init_item_factors(srv, n_items, d, scale=init_scale, dtype=dt)
    O = init_item_factors(srv, n_items, d, scale=init_scale, dtype=dt) if implicit else None
    U = np.stack([init_user_factor(node_rng(seed, name), d, scale=init_scale, dtype=dt)
                  for name in client_names(n_users)]) if n_users else np.empty((0, d), dt)
    indptr, indices, _ = to_csr(*train[:3], n_users, dt)
    return TrainResult(model, U, V, O, indptr, indices)


def initial_metrics(fold, cfg: Any, seed: int) -> tuple[float, float]:
    """``(mae, rmse)`` on ``fold``'s test part of the initial model of a run of ``cfg`` (a
    ``FedRecConfig`` or ``FedRecPPConfig``) with ``seed``."""
    implicit = bool(getattr(cfg, "implicit", False))
    m = initial_model(fold.train, fold.n_users, fold.n_items, d=cfg.d, seed=seed, implicit=implicit,
                      init_scale=cfg.init_scale, dtype=cfg.dtype)
    return m.evaluate(*fold.test)


def did_not_learn(initial: float, final: float, rel_tol: float = DEFAULT_REL_TOL) -> bool:
    """True when an error metric ended within ``rel_tol`` of (or above) where it started: the
    run did not learn. NaN (a diverged run, reported apart) is not judged here."""
    if math.isnan(initial) or math.isnan(final):
        return False
    return final >= initial * (1.0 - rel_tol)


def warn_not_learned(ctx, runs: Iterable[tuple[str, Any]], metric: str = "rmse",
                     rel_tol: float = DEFAULT_REL_TOL) -> list[dict]:
    """Add a warning to the report for every run ``(label, outcome)`` whose final ``metric`` is
    within ``rel_tol`` of its initial one (outcomes carry ``metric`` and ``initial_<metric>``);
    returns their rows (label, fold, initial, final), also written as the table
    ``not_learned`` when there are any."""
    rows = []
    for label, o in runs:
        init = getattr(o, f"initial_{metric}", None)
        final = getattr(o, metric)
        if init is None or not did_not_learn(init, final, rel_tol):
            continue
        rows.append({"run": label, "fold": o.fold + 1, f"initial_{metric}": init, f"final_{metric}": final})
    if rows:
        ctx.table("not_learned", rows, title="Runs that did not learn (final error within "
                  f"{100 * rel_tol:g} % of the initial model's)")
        ctx.caveat("not-learned", f"**WARNING: {len(rows)} run(s) did not learn**: their final {metric.upper()} is within "
                 f"{100 * rel_tol:g} % of their initial model's (every factor near 0, every prediction clipped "
                 f"to the lowest rating). Their rows in the tables above are not results of training: "
                 + "; ".join(f"{r['run']} fold {r['fold']}: {r[f'initial_{metric}']:.4f} -> "
                             f"{r[f'final_{metric}']:.4f}" for r in rows[:12])
                 + (" ..." if len(rows) > 12 else "") + ". See table `not_learned`.")
    return rows
