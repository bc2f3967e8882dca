"""Seeded train/test splits used by the papers, and the partition of users into clients.

Every split returns :class:`Ratings` over the *same* index space as its input
(:meth:`Ratings.subset`), so item and user indices mean the same thing in train and test, and an
item that only occurs in a test part still exists (with no training data) in the training part.
Rows keep their input order inside each part.

Randomness comes from ``seed``: an integer >= 0 (or ``None``) seeds ``numpy.random.default_rng``, or
pass a ``numpy.random.Generator`` to draw from it; anything else (a negative number, ``1.5``,
``True``) is a ``ValueError`` naming ``seed``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._build import check_seed
from .ratings import Ratings

__all__ = [
    "kfold_copies",
    "partition_users",
    "per_user_random",
    "random_holdout",
    "temporal_holdout",
    "temporal_holdout_with_validation",
]

Seed = Any  # int | None | numpy.random.Generator


def _rng(seed: Seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator) or seed is None:
        return np.random.default_rng(seed)  # a Generator is returned as it is
    check_seed(seed, what="an integer >= 0, None or a numpy.random.Generator")
    return np.random.default_rng(int(seed))


def _split(r: Ratings, test_mask: np.ndarray, what: str, params: dict[str, Any]) -> tuple[Ratings, Ratings]:
    train = r.subset(~test_mask, info={"split": {"part": "train", "kind": what, **params}})
    test = r.subset(test_mask, info={"split": {"part": "test", "kind": what, **params}})
    return train, test


def kfold_copies(ratings: Ratings, k: int = 5, seed: Seed = 0) -> list[tuple[Ratings, Ratings]]:
    """The FedRec / FedRec++ protocol: shuffle the ratings, cut into ``k`` equal parts, and
    return ``k`` copies ``(train, test)`` where copy ``j`` tests on part ``j`` and trains on the
    others.

    Parts have sizes ``len // k`` or ``len // k + 1`` (the first ``len % k`` parts are one
    larger; for ML-100K and k = 5 every part has 20,000 ratings, so every training fold has
    exactly 80,000).  Every rating is in exactly one test part.
    """
    k = _whole("k", k)
    n = len(ratings)
    if k < 2:
        raise ValueError(f"k must be >= 2, got {k}")
    if n < k:
        raise ValueError(f"cannot cut {n} rating{'' if n == 1 else 's'} into {k} parts")
    perm = _rng(seed).permutation(n)
    parts = np.array_split(perm, k)
    out = []
    for j, part in enumerate(parts):
        mask = np.zeros(n, dtype=bool)
        mask[part] = True
        out.append(_split(ratings, mask, "kfold", {"k": k, "fold": j}))
    return out


def random_holdout(ratings: Ratings, test_frac: float = 0.1, seed: Seed = 0) -> tuple[Ratings, Ratings]:
    """A global random hold-out: ``floor(test_frac * len)`` ratings drawn uniformly as test.

    This is what the published PersonalFR code does (90/10 over all ratings), as opposed to the
    per-user split its paper describes (:func:`per_user_random`).
    """
    _check_frac(test_frac)
    n = len(ratings)
    x = test_frac * n
    # floor with a relative tolerance: 0.29 * 100 is 28.999999999999996 in floating point
    n_test = int(np.floor(x + 1e-9 * max(1.0, x)))
    perm = _rng(seed).permutation(n)
    mask = np.zeros(n, dtype=bool)
    mask[perm[:n_test]] = True
    return _split(ratings, mask, "random_holdout", {"test_frac": test_frac})


def _check_frac(f: float, name: str = "test_frac") -> None:
    if not (0.0 <= f < 1.0):
        raise ValueError(f"{name} must be in [0, 1), got {f}")


def _whole(name: str, v: Any) -> int:
    """``v`` as an int; a value with a fractional part (``k=2.7``) is an error, not truncated."""
    i = int(v)
    if i != v:
        raise ValueError(f"{name} must be a whole number, got {v}")
    return i


def _per_user_test_counts(counts: np.ndarray, test_frac: float) -> np.ndarray:
    # floor with a small tolerance so that e.g. 0.2 * 10 gives 2 despite float error
    return np.floor(test_frac * counts + 1e-9).astype(np.int64)


def temporal_holdout(ratings: Ratings, test_frac: float = 0.2) -> tuple[Ratings, Ratings]:
    """Per-user temporal hold-out (FPL): each user's most recent ``floor(test_frac * n_u)``
    ratings are the test part.

    Ties in time are broken by row order (a later row counts as more recent), so the split is
    deterministic.  Users with fewer than ``1 / test_frac`` ratings have no test ratings.
    """
    _check_frac(test_frac)
    if ratings.timestamps is None:
        raise ValueError(f"temporal_holdout needs timestamps; {ratings.name} has none")
    n = len(ratings)
    # sort by (user, timestamp, row): lexsort keys are given last-key-first
    order = np.lexsort((np.arange(n), ratings.timestamps, ratings.users))
    counts = ratings.user_counts()
    n_test = _per_user_test_counts(counts, test_frac)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    # position of each sorted row within its user's run
    users_sorted = ratings.users[order]
    pos = np.arange(n) - starts[users_sorted]
    is_test_sorted = pos >= (counts - n_test)[users_sorted]
    mask = np.zeros(n, dtype=bool)
    mask[order[is_test_sorted]] = True
    return _split(ratings, mask, "temporal", {"test_frac": test_frac})


def temporal_holdout_with_validation(
    ratings: Ratings, test_frac: float = 0.2, val_frac: float = 0.2
) -> tuple[Ratings, Ratings, Ratings]:
    """FPL's full protocol: temporal hold-out, then the same cut on the training part.

    Returns ``(train, validation, test)``: ``test`` is each user's most recent
    ``floor(test_frac * n_u)``, ``validation`` the most recent ``floor(val_frac * m_u)`` of the
    remaining ``m_u``, ``train`` the rest.  Tune on (train, validation), then retrain on
    train + validation (= the first part of :func:`temporal_holdout`) and report on test.
    """
    _check_frac(test_frac)
    _check_frac(val_frac, "val_frac")
    train_full, test = temporal_holdout(ratings, test_frac)
    train, val = temporal_holdout(train_full, val_frac)
    train = train.with_info(split={"part": "train", "kind": "temporal+validation",
                                   "test_frac": test_frac, "val_frac": val_frac})
    val = val.with_info(split={"part": "validation", "kind": "temporal+validation",
                               "test_frac": test_frac, "val_frac": val_frac})
    return train, val, test


def per_user_random(ratings: Ratings, test_frac: float = 0.2, seed: Seed = 0) -> tuple[Ratings, Ratings]:
    """Per-user random hold-out (PersonalFR's paper): each user's test part is
    ``floor(test_frac * n_u)`` of her ratings drawn uniformly without replacement."""
    _check_frac(test_frac)
    n = len(ratings)
    rng = _rng(seed)
    # a random key per row; within each user the lowest keys go to test
    key = rng.random(n)
    order = np.lexsort((key, ratings.users))
    counts = ratings.user_counts()
    n_test = _per_user_test_counts(counts, test_frac)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    users_sorted = ratings.users[order]
    pos = np.arange(n) - starts[users_sorted]
    mask = np.zeros(n, dtype=bool)
    mask[order[pos < n_test[users_sorted]]] = True
    return _split(ratings, mask, "per_user_random", {"test_frac": test_frac})


def partition_users(n_users: int, M: int, seed: Seed = 0) -> list[np.ndarray]:
    """Partition users ``0..n_users-1`` into ``M`` clients of balanced size (PersonalFR).

    Users are shuffled, then cut into ``M`` contiguous groups whose sizes differ by at most one
    (the first ``n_users % M`` groups are one larger); each group is returned sorted.
    ``M = 1`` is one client holding everyone, ``M = n_users`` one user per client (in
    user order, no shuffle needed).
    """
    n_users, M = _whole("n_users", n_users), _whole("M", M)
    if not (1 <= M <= n_users):
        raise ValueError(f"M must be in [1, n_users = {n_users}], got {M}")
    if M == n_users:
        return [np.array([u], dtype=np.int64) for u in range(n_users)]
    perm = _rng(seed).permutation(n_users)
    return [np.sort(g).astype(np.int64) for g in np.array_split(perm, M)]
