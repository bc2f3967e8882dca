"""FPL data: the implicit-feedback pipeline (:func:`prepare`) and top-N evaluation
(:class:`Evaluator`) of the split it makes (:class:`ImplicitSplit`); see :mod:`fedsim.studies.fpl`
for the protocols."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...data import Ratings, temporal_holdout, temporal_holdout_with_validation
from ...math.csr import csr_pairs
from ...math.metrics import bias_disparity, f1_at, gini_at, item_coverage_at, precision_at, recall_at, top_n
from ...seeding import node_rng

__all__ = ["Evaluator", "ImplicitSplit", "prepare"]


@dataclass
class Evaluator:
    """Top-N evaluation of one held-out part: ``truth`` (CSR of the held-out items per user) and
    ``exclude`` (CSR of the items never ranked for a user: her known items plus every item
    outside the catalogue)."""

    name: str
    truth: tuple[np.ndarray, np.ndarray]
    exclude: tuple[np.ndarray, np.ndarray]
    n_items: int
    train_items: np.ndarray  # every training interaction's item (source bias)
    categories: np.ndarray | None
    n: int = 10

    def __call__(self, scores: np.ndarray) -> dict[str, Any]:
        recs = top_n(scores, self.exclude, self.n)
        n = self.n
        out = {
            "p": float(precision_at(recs, self.truth, n)),
            "r": float(recall_at(recs, self.truth, n)),
            "f1": float(f1_at(recs, self.truth, n)),
            "ic": int(item_coverage_at(recs, n)),
            "gini": float(gini_at(recs, n, self.n_items)),
        }
        if self.categories is not None:
            bd = bias_disparity(self.train_items, recs, self.categories, n)
            out["bd"] = [None if not np.isfinite(x) else float(x) for x in bd.disparity]
        return out


@dataclass
class ImplicitSplit:
    """What a run needs: the part to fit (``train``), its catalogue, and the evaluators."""

    name: str
    protocol: str
    n_users: int
    n_items: int
    train: Ratings
    catalogue: np.ndarray
    evaluators: dict[str, Evaluator]
    category_names: tuple[str, ...] | None
    info: dict = field(default_factory=dict)

    @property
    def x_plus(self) -> int:
        return len(self.train)

    @property
    def user_items(self) -> list[np.ndarray]:
        csr = self.train.by_user()
        return [np.asarray(csr.row_indices(u), dtype=np.int64) for u in range(self.n_users)]

    @property
    def fingerprint(self) -> str:
        h = hashlib.sha256()
        h.update(self.train.fingerprint().encode())
        for name in sorted(self.evaluators):
            ev = self.evaluators[name]
            h.update(name.encode())
            for a in (*ev.truth, *ev.exclude):
                h.update(np.ascontiguousarray(a).tobytes())
        h.update(self.protocol.encode())
        return h.hexdigest()[:20]

    def evaluate(self, scores: np.ndarray) -> dict[str, dict]:
        return {name: ev(scores) for name, ev in self.evaluators.items()}


def prepare(ratings: Ratings, *, min_interactions: int = 21, test_frac: float = 0.2, val_frac: float = 0.2,
            protocol: str = "validation", n: int = 10, max_users: int = 0, seed: int = 0) -> ImplicitSplit:
    """The FPL pipeline on ``ratings`` (explicit or implicit, with timestamps): binarize, keep
    users with at least ``min_interactions``, per-user temporal split, evaluators for
    ``protocol`` ("validation" or "test", see the module docstring). ``max_users`` > 0 keeps a
    seeded random subset of that many users first (to make synthetic defaults small)."""
    if protocol not in ("validation", "test"):
        raise ValueError(f"protocol must be 'validation' or 'test', got {protocol!r}")
    r = ratings.binarize()
    if max_users and max_users < r.n_users:
        keep = np.zeros(r.n_users, dtype=bool)
        keep[node_rng(seed, "fpl:users").choice(r.n_users, size=int(max_users), replace=False)] = True
        r = r.reindex(keep, None)
    if min_interactions > 0:
        r = r.filter_users(int(min_interactions))
    if r.n_users == 0:
        raise ValueError(f"no user has {min_interactions} interactions or more")
    nu, ni = r.n_users, r.n_items
    cats = None if r.categories is None else np.asarray(r.categories, dtype=bool)
    train_full, test = temporal_holdout(r, test_frac)
    if protocol == "validation":
        train, val, test = temporal_holdout_with_validation(r, test_frac, val_frac)
    else:
        train, val = train_full, None
    catalogue = np.unique(train.items).astype(np.int64)
    outside = np.setdiff1d(np.arange(ni), catalogue)

    def exclude_for(*parts: Ratings) -> tuple[np.ndarray, np.ndarray]:
        us = [p.users for p in parts] + [np.repeat(np.arange(nu), outside.size)]
        its = [p.items for p in parts] + [np.tile(outside, nu)]
        return csr_pairs(np.concatenate(us), np.concatenate(its), nu)

    ti = np.asarray(train.items, dtype=np.int64)
    evals: dict[str, Evaluator] = {}
    if val is not None:
        evals["val"] = Evaluator("val", csr_pairs(val.users, val.items, nu), exclude_for(train), ni, ti, cats, n)
        evals["test"] = Evaluator("test", csr_pairs(test.users, test.items, nu), exclude_for(train, val), ni, ti,
                                  cats, n)
    else:
        evals["test"] = Evaluator("test", csr_pairs(test.users, test.items, nu), exclude_for(train), ni, ti, cats, n)
    counts = np.bincount(train.users, minlength=nu)
    if counts.min() == 0:
        raise ValueError("a user has no training interaction; raise min_interactions")
    info = {"users": nu, "items": ni, "catalogue": int(catalogue.size), "x_plus": len(train),
            "train_full": len(train_full), "validation": 0 if val is None else len(val), "test": len(test),
            "test_unreachable": int(np.isin(test.items, outside).sum()), "min_interactions": int(min_interactions),
            "max_users": int(max_users)}
    return ImplicitSplit(r.name or "data", protocol, nu, ni, train, catalogue, evals,
                         None if r.category_names is None else tuple(r.category_names), info)
