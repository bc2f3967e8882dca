"""FPL data: the implicit-feedback pipeline (:func:`prepare`) and top-N evaluation
(:class:`Evaluator`) of the split it makes (:class:`ImplicitSplit`); see :mod:`fedsim.studies.fpl`
for the protocols."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ...data import Ratings, temporal_holdout, temporal_holdout_with_validation
from ...math.csr import csr_pairs
from ...math.hitmask import hit_masks
from ...math.metrics import (
    bias_disparity, f1_at, gini_at, item_coverage_at, ndcg_at, precision_at, recall_at, top_n,
)
from ...seeding import node_rng

__all__ = ["EVAL_VERSION", "Evaluator", "ImplicitSplit", "LoaderFilterError", "NoUserLeftError", "loader_min_interactions",
           "prepare"]

#: What an evaluation holds; part of every cache key, so that runs stored before a change are run
#: again (2: NDCG and the per-user hit masks added).
EVAL_VERSION = 2


class LoaderFilterError(ValueError):
    """The data were filtered by their loader more strictly than :func:`prepare` was asked to."""


class NoUserLeftError(ValueError):
    """:func:`prepare`'s user filter keeps no user of the data (the message says the most
    interactions any user has): the data are too small for the ``min_interactions`` asked."""


@dataclass
class Evaluator:
    """Top-N evaluation of one held-out part: ``truth`` (CSR of the held-out items per user) and
    ``exclude`` (CSR of the items never ranked for a user: her known items plus every item
    outside the catalogue). With ``per_user`` an evaluation also holds ``hits``: each user's hit
    mask (:func:`fedsim.math.hitmask.hit_masks`; every per-user P, R, F1 and NDCG follows from
    it and ``n_test``). Scores that are not all finite (a diverged model) give NaN figures and
    ``diverged: True`` instead of a ranking.

    IC@N counts the distinct items of the lists (no item total in it). G@N is over every item of
    the data, ``n_items`` (an item that can never be ranked, having no training interaction,
    counts as never recommended), or over ``gini_items`` when given (``prepare``'s
    ``gini_items="catalogue"``: the items the lists can hold)."""

    name: str
    truth: tuple[np.ndarray, np.ndarray]
    exclude: tuple[np.ndarray, np.ndarray]
    n_items: int
    train_items: np.ndarray  # every training interaction's item (source bias)
    categories: np.ndarray | None
    n: int = 10
    per_user: bool = False
    gini_items: np.ndarray | None = None

    @property
    def n_test(self) -> np.ndarray:
        """Held-out items per user."""
        return np.diff(self.truth[0])

    def __call__(self, scores: np.ndarray) -> dict[str, Any]:
        if not np.all(np.isfinite(scores)):  # a diverged model: no ranking, NaN figures, never chosen
            out: dict[str, Any] = {k: float("nan") for k in ("p", "r", "f1", "ndcg", "gini")}
            out.update({"ic": 0, "diverged": True})
            if self.per_user:
                out["hits"] = None
            return out
        recs = top_n(scores, self.exclude, self.n)
        n = self.n
        out = {
            "p": float(precision_at(recs, self.truth, n)),
            "r": float(recall_at(recs, self.truth, n)),
            "f1": float(f1_at(recs, self.truth, n)),
            "ndcg": float(ndcg_at(recs, self.truth, n)),
            "ic": int(item_coverage_at(recs, n)),
            "gini": float(gini_at(recs, n, self.n_items, self.gini_items)),
        }
        if self.per_user:
            out["hits"] = [int(x) for x in hit_masks(recs, self.truth, n)]
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
            if ev.n != 10:  # the cut-off N of every figure (10, the paper's, keeps the keys stored before)
                h.update(f"n{ev.n}".encode())
            if ev.gini_items is not None:  # G@N over these items (none: over every item, the keys stored before)
                h.update(b"gini_items")
                h.update(np.ascontiguousarray(ev.gini_items, dtype=np.int64).tobytes())
        h.update(self.protocol.encode())
        h.update(f"eval{EVAL_VERSION}".encode())
        return h.hexdigest()[:20]

    @property
    def n_test(self) -> np.ndarray:
        """Test items per user (the test evaluator's)."""
        return self.evaluators["test"].n_test

    def __getstate__(self) -> dict:
        # Ratings do not pickle (read-only info): send the training part as its arrays, so a
        # split can go to worker processes; the rebuilt part has the same fingerprint
        state = dict(self.__dict__)
        t = self.train
        state["train"] = {"users": np.asarray(t.users), "items": np.asarray(t.items), "values": np.asarray(t.values),
                          "n_users": t.n_users, "n_items": t.n_items, "timestamps": t.timestamps,
                          "user_ids": np.asarray(t.user_ids), "item_ids": np.asarray(t.item_ids),
                          "categories": t.categories, "category_names": t.category_names, "name": t.name,
                          "info": _plain(t.info)}
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        state["train"] = Ratings(**state["train"])
        self.__dict__.update(state)

    def evaluate(self, scores: np.ndarray) -> dict[str, dict]:
        return {name: ev(scores) for name, ev in self.evaluators.items()}


def loader_min_interactions(ratings: Ratings) -> int:
    """The user filter the loader already applied to ``ratings`` (``info["user_filter"]
    ["min_venues"]`` of :func:`fedsim.data.load_foursquare`; 0 when none is recorded)."""
    uf = (ratings.info or {}).get("user_filter") or {}
    return int(uf.get("min_venues", 0) or 0)


def prepare(ratings: Ratings, *, min_interactions: int = 21, test_frac: float = 0.2, val_frac: float = 0.2,
            protocol: str = "validation", n: int = 10, max_users: int = 0, seed: int = 0,
            gini_items: str = "data") -> ImplicitSplit:
    """The FPL pipeline on ``ratings`` (explicit or implicit, with timestamps): binarize, keep
    users with at least ``min_interactions``, per-user temporal split, evaluators for
    ``protocol`` ("validation" or "test", see the module docstring). ``max_users`` > 0 keeps a
    seeded random subset of that many users first (to make synthetic defaults small).

    Every ranking is over the catalogue (the items of the part fitted) minus the user's known
    items. ``gini_items``: the items G@N is computed over, ``"data"`` (default: every item of the
    filtered data, test-only items included, which no list can hold) or ``"catalogue"`` (the
    catalogue: the items a list can hold). IC@N is a count of items, the same either way.

    Raises :class:`LoaderFilterError` when the loader already dropped users that this filter
    would keep (``load_foursquare``'s default ``user_filter="paper"`` keeps > 20 venues: asking
    for >= 20 here would silently get > 20); load with ``user_filter=None`` and filter here.
    Raises :class:`NoUserLeftError` (a ``ValueError``) when no user is left, ``ValueError`` for
    an unknown protocol."""
    if protocol not in ("validation", "test"):
        raise ValueError(f"protocol must be 'validation' or 'test', got {protocol!r}")
    if gini_items not in ("data", "catalogue"):
        raise ValueError(f"gini_items must be 'data' or 'catalogue', got {gini_items!r}")
    applied = loader_min_interactions(ratings)
    if applied > max(int(min_interactions), 1):
        raise LoaderFilterError(
            f"{ratings.name}: the loader kept only users with at least {applied} interactions, stricter than the "
            f"{min_interactions} asked for; load it with user_filter=None (fedsim.data.load_foursquare) and let "
            "prepare filter")
    r = ratings.binarize()
    users_loaded = r.n_users
    if max_users and max_users < r.n_users:
        keep = np.zeros(r.n_users, dtype=bool)
        keep[node_rng(seed, "fpl:users").choice(r.n_users, size=int(max_users), replace=False)] = True
        r = r.reindex(keep, None)
    considered, most = r.n_users, (int(r.user_counts().max()) if r.n_users else 0)
    if min_interactions > 0:
        r = r.filter_users(int(min_interactions))
    if r.n_users == 0:
        raise NoUserLeftError(f"no user has {min_interactions} interactions or more (the most any of the "
                              f"{considered} users has: {most})")
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
    over = catalogue if gini_items == "catalogue" else None
    evals: dict[str, Evaluator] = {}
    if val is not None:
        evals["val"] = Evaluator("val", csr_pairs(val.users, val.items, nu), exclude_for(train), ni, ti, cats, n,
                                 gini_items=over)
        evals["test"] = Evaluator("test", csr_pairs(test.users, test.items, nu), exclude_for(train, val), ni, ti,
                                  cats, n, per_user=True, gini_items=over)
    else:
        evals["test"] = Evaluator("test", csr_pairs(test.users, test.items, nu), exclude_for(train), ni, ti, cats, n,
                                  per_user=True, gini_items=over)
    counts = np.bincount(train.users, minlength=nu)
    if counts.min() == 0:
        raise ValueError("a user has no training interaction; raise min_interactions")
    info = {"users": nu, "items": ni, "catalogue": int(catalogue.size), "x_plus": len(train),
            "train_full": len(train_full), "validation": 0 if val is None else len(val), "test": len(test),
            "test_unreachable": int(np.isin(test.items, outside).sum()), "min_interactions": int(min_interactions),
            "max_users": int(max_users), "users_loaded": int(users_loaded), "loader_filter": applied,
            "gini_items": gini_items}
    cat_info = (ratings.info or {}).get("categories")
    if cats is not None:
        info["items_without_category"] = int((~cats.any(axis=1)).sum())
        if isinstance(cat_info, dict) and "unmapped" in cat_info:
            info["unmapped_types"] = int(cat_info["unmapped"].get("n_types", 0))
    return ImplicitSplit(r.name or "data", protocol, nu, ni, train, catalogue, evals,
                         None if r.category_names is None else tuple(r.category_names), info)


def _plain(x: Any) -> Any:
    """Mappings (read-only ones included) as plain dicts, recursively, for pickling."""
    if isinstance(x, Mapping):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v) for v in x)
    return x
