"""How much an attack recovered: per-user scores of a guess against the user's true set, and
their summaries with confidence intervals.

An attack's answer for one target (a client) is a ``Guess``: the ``pool`` of items it considered
(the items it saw for that user), a ``score`` per pool item (higher: more likely in the true set)
and the ``predicted`` set it claims. Scores per user (``score_guess``), on the true set ``I``
(the items the user rated / consumed in the data the protocol trained on):

``precision``  |P n I| / |P| (0 for an empty claim: the attack claimed nothing)
``recall``     |P n I| / |I|
``f1``         their harmonic mean (0 if both are 0)
``auc``        the probability that an item of I is scored above an item outside it, over the
               whole catalogue (items outside the pool score lowest, ties count one half)
``exact``      1 if P == I
and the same figures for the *random-guess baseline at the same set size*: |P| items drawn at
random from the pool (its expected precision |I n pool| / |pool|, recall |P| |I n pool| /
(|pool| |I|), F1 of those two; AUC of scoring every pool item alike; the probability that the draw
is exactly I). For FedRec the pool is I_u u I'_u, so the baseline precision is 1 / (1 + rho).

``summarize`` averages per-user rows (pooled over users and seeds) with a normal-approximation
95 % interval (1.96 standard errors) and, over several seeds, the standard deviation of the
per-seed means.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

__all__ = ["Guess", "METRICS", "auc", "average_ranks", "score_guess", "score_inference", "summarize"]

METRICS = ("precision", "recall", "f1", "auc", "exact")


@dataclass(frozen=True)
class Guess:
    """An attack's answer for one target: ``pool`` (candidate item ids it saw), ``scores`` (one
    per pool item, higher = more likely in the true set) and ``predicted`` (item ids it claims;
    a subset of the pool). Arrays are converted to int64 / float64. Raises ``ValueError`` for a
    pool and scores of different sizes, a repeated pool item, a NaN score or a claimed item
    outside the pool."""

    pool: np.ndarray
    scores: np.ndarray
    predicted: np.ndarray

    def __post_init__(self) -> None:
        pool = np.asarray(self.pool, dtype=np.int64).ravel()
        scores = np.asarray(self.scores, dtype=np.float64).ravel()
        pred = np.unique(np.asarray(self.predicted, dtype=np.int64).ravel())
        if pool.shape != scores.shape:
            raise ValueError(f"Guess: {pool.size} pool items but {scores.size} scores")
        if np.unique(pool).size != pool.size:
            raise ValueError("Guess: the pool repeats an item")
        if np.isnan(scores).any():  # auc would rank a NaN above every number
            raise ValueError("Guess: a score is NaN (score every pool item; -inf for the least likely)")
        if not np.isin(pred, pool).all():
            raise ValueError(f"Guess: claims {np.setdiff1d(pred, pool)[:5].tolist()}..., items not in its pool")
        object.__setattr__(self, "pool", pool)
        object.__setattr__(self, "scores", scores)
        object.__setattr__(self, "predicted", pred)

    @classmethod
    def empty(cls) -> "Guess":
        """Nothing seen, nothing claimed."""
        return cls(np.empty(0, np.int64), np.empty(0), np.empty(0, np.int64))

    @classmethod
    def of_set(cls, items: Iterable[int], pool: Iterable[int] | None = None) -> "Guess":
        """Claim ``items``; score 1 for them and 0 for the rest of ``pool`` (default: ``items``)."""
        pred = np.unique(np.asarray(list(items) if not isinstance(items, np.ndarray) else items, dtype=np.int64))
        p = pred if pool is None else np.unique(np.concatenate([np.asarray(list(pool) if not isinstance(
            pool, np.ndarray) else pool, dtype=np.int64), pred]))
        return cls(p, np.isin(p, pred).astype(np.float64), pred)


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of ``x`` with ties given their average rank (as scipy's rankdata)."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    edge = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1], True])
    counts = np.diff(edge)
    avg = edge[:-1] + (counts + 1) / 2.0
    ranks = np.empty(x.shape[0], dtype=np.float64)
    ranks[order] = np.repeat(avg, counts)
    return ranks


def auc(scores: np.ndarray, positive: np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` (one per item; -inf allowed) for the boolean
    ``positive`` mask: P(score of a positive > score of a negative), ties one half. NaN when
    there is no positive or no negative. Raises ``ValueError`` for a NaN score (it would rank
    above every number: a NaN positive gave an AUC of 1) or a mask of another length."""
    pos = np.asarray(positive, dtype=bool).ravel()
    x = np.asarray(scores, dtype=np.float64).ravel()
    if x.shape != pos.shape:
        raise ValueError(f"auc: {x.size} scores but a mask of {pos.size} items")
    if np.isnan(x).any():
        raise ValueError(f"auc: score {int(np.flatnonzero(np.isnan(x))[0])} is NaN (-inf for the least likely)")
    p = int(pos.sum())
    n = pos.shape[0] - p
    if p == 0 or n == 0:
        return math.nan
    r = average_ranks(x)
    return float((r[pos].sum() - p * (p + 1) / 2.0) / (p * n))


def _prf(hit: float, claimed: float, true: float) -> tuple[float, float, float]:
    p = hit / claimed if claimed else 0.0
    r = hit / true if true else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return p, r, f


def score_guess(guess: Guess, truth: np.ndarray, n_items: int) -> dict[str, float]:
    """The per-user figures (module docstring) of ``guess`` against the true item set ``truth``
    over a catalogue of ``n_items``. Raises ``ValueError`` for an empty ``truth`` or ids out of
    range."""
    t = np.unique(np.asarray(truth, dtype=np.int64))
    if t.size == 0:
        raise ValueError("score_guess needs a non-empty true set")
    for name, a in (("truth", t), ("pool", guess.pool), ("predicted", guess.predicted)):
        if a.size and (a.min() < 0 or a.max() >= n_items):
            raise ValueError(f"score_guess: {name} has item ids outside 0..{n_items - 1}")
    pred = guess.predicted
    hit = np.intersect1d(pred, t, assume_unique=True).size
    p, r, f = _prf(hit, pred.size, t.size)
    full = np.full(n_items, -np.inf)
    full[guess.pool] = guess.scores
    positive = np.zeros(n_items, dtype=bool)
    positive[t] = True
    in_pool = np.zeros(n_items, dtype=bool)
    in_pool[guess.pool] = True
    pool_hit = int((in_pool & positive).sum())
    k = min(pred.size, guess.pool.size)
    prec_b = pool_hit / guess.pool.size if guess.pool.size else 0.0
    hit_b = k * prec_b
    pb, rb, fb = _prf(hit_b, k, t.size)
    if k == t.size and pool_hit == t.size and guess.pool.size:
        n = guess.pool.size
        exact_b = math.exp(-(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)))
    else:
        exact_b = 0.0
    return {
        "precision": p, "recall": r, "f1": f, "auc": auc(full, positive),
        "exact": float(pred.size == t.size and hit == t.size),
        "precision_rand": pb, "recall_rand": rb, "f1_rand": fb, "auc_rand": auc(in_pool.astype(float), positive),
        "exact_rand": exact_b,
        "claimed": float(pred.size), "true": float(t.size), "pool": float(guess.pool.size),
    }


def score_inference(inference: Mapping[str, Guess], truth: Mapping[str, np.ndarray], n_items: int,
                    targets: Iterable[str] | None = None) -> list[dict]:
    """One ``score_guess`` row (plus ``target``) per target with a non-empty true set; a target
    the attack gave no guess for is scored as ``Guess.empty()`` (it claimed nothing). ``targets``
    defaults to every key of ``truth``; a target that is not one raises ``ValueError``."""
    rows = []
    for t in (sorted(truth) if targets is None else targets):
        if t not in truth:
            raise ValueError(f"score_inference: target {t!r} has no true item set (not a client of the run?)")
        items = truth[t]
        if len(items) == 0:
            continue
        g = inference.get(t) or Guess.empty()
        rows.append({"target": t, **score_guess(g, items, n_items)})
    return rows


def summarize(rows: list[dict], keys: Iterable[str] = None, seed_key: str = "seed") -> dict[str, float]:
    """Mean of each of ``keys`` (default: the ``METRICS`` and their ``_rand`` baselines) over
    ``rows``, with ``{key}_ci`` the half-width of a normal 95 % interval (1.96 sd / sqrt(n),
    pooled over users and seeds), ``{key}_seed_sd`` the standard deviation of the per-seed means
    when rows carry several values of ``seed_key``, and ``users`` the number of rows. NaN values
    (an AUC without negatives) are left out of their key's figures."""
    keys = list(keys) if keys is not None else [*METRICS, *(f"{m}_rand" for m in METRICS)]
    out: dict[str, float] = {"users": float(len(rows))}
    seeds = sorted({r.get(seed_key, 0) for r in rows})
    for k in keys:
        v = np.array([r[k] for r in rows if k in r], dtype=np.float64)
        v = v[~np.isnan(v)]
        out[k] = float(v.mean()) if v.size else math.nan
        out[f"{k}_ci"] = float(1.96 * _sd(v) / math.sqrt(v.size)) if v.size > 1 else math.nan
        if len(seeds) > 1:
            means = []
            for s in seeds:
                vs = np.array([r[k] for r in rows if r.get(seed_key, 0) == s and k in r], dtype=np.float64)
                vs = vs[~np.isnan(vs)]
                if vs.size:
                    means.append(vs.mean())
            out[f"{k}_seed_sd"] = _sd(np.array(means)) if len(means) > 1 else math.nan
    return out


def _sd(v: np.ndarray) -> float:
    """The sample standard deviation (ddof 1) of ``v``, exactly 0 when its values are all equal:
    NumPy's is the rounding error of their mean (30 users at F1 2/3 had an interval of
    +- 8.08e-17, a table cell in exponent notation for what is no spread)."""
    return 0.0 if v.max() == v.min() else float(v.std(ddof=1))
