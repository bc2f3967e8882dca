"""Evaluation metrics of the reproduced papers, as plain NumPy functions on arrays.

Conventions
-----------
- A *CSR* argument is anything with ``indptr`` and ``indices`` attributes (``Ratings.by_user()``,
  a ``scipy.sparse.csr_matrix``) or a ``(indptr, indices)`` pair: row ``u`` lists the items of
  user ``u``.
- A *recommendation matrix* ``recs`` is an int array ``n_users x N`` of item indices, best
  first, padded with ``-1`` when fewer than ``N`` items could be recommended (see
  :func:`top_n`); a float array is accepted only when every entry is a whole number
  (``ValueError`` otherwise).
- Ranking metrics are averaged over the users that have at least one test item; users without
  test items are excluded (not counted as zero).  ``per_user=True`` returns the per-user values
  with ``NaN`` for the excluded users instead.

Ranking metrics: :func:`precision_at`, :func:`recall_at`, :func:`f1_at`, :func:`ndcg_at`.
Beyond accuracy (FPL): :func:`item_coverage_at`, :func:`gini_at`, :func:`bias_disparity`.
Rating prediction (FedRec): :func:`mae`, :func:`rmse`, :func:`md_stdr`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "BiasDisparity",
    "MdStdr",
    "bias_disparity",
    "f1_at",
    "gini_at",
    "gini_index",
    "hits_at",
    "item_coverage_at",
    "mae",
    "md_stdr",
    "md_stdr_from_stats",
    "ndcg_at",
    "precision_at",
    "recall_at",
    "rmse",
    "top_n",
]


# ---------------------------------------------------------------------------------------------
# rating prediction


def _pair(pred: Any, true: Any, clip: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(pred, dtype=np.float64)
    t = np.asarray(true, dtype=np.float64)
    if p.shape != t.shape:
        raise ValueError(f"predictions and targets differ in shape: {p.shape} vs {t.shape}")
    if p.size == 0:
        raise ValueError("no ratings to evaluate")
    if clip is not None:
        lo, hi = clip
        p = np.clip(p, lo, hi)
    return p, t


def mae(pred: Any, true: Any, clip: tuple[float, float] | None = None) -> float:
    """Mean absolute error; ``clip=(lo, hi)`` clips the predictions first (FedRec clips to
    [1, 5]).  A NaN prediction gives NaN (a diverged model is never silently scored)."""
    p, t = _pair(pred, true, clip)
    return float(np.mean(np.abs(p - t)))


def rmse(pred: Any, true: Any, clip: tuple[float, float] | None = None) -> float:
    """Root mean squared error, with optional clipping of the predictions like :func:`mae`."""
    p, t = _pair(pred, true, clip)
    return float(np.sqrt(np.mean((p - t) ** 2)))


class MdStdr(NamedTuple):
    md: float  # percent
    stdr: float  # percent
    mean_f: float
    std_f: float
    mean_uf: float
    std_uf: float


def md_stdr_from_stats(mean_f: float, std_f: float, mean_uf: float, std_uf: float) -> MdStdr:
    """FedRec Eq. 10-11 from means and standard deviations (in percent)."""
    if mean_uf == 0:
        raise ValueError("the unfederated mean is zero: MD and STDR are undefined")
    md = abs((mean_f - mean_uf) / mean_uf) * 100.0
    stdr = abs((std_f + std_uf) / mean_uf) * 100.0
    return MdStdr(float(md), float(stdr), float(mean_f), float(std_f), float(mean_uf), float(std_uf))


def md_stdr(federated: Any, unfederated: Any, ddof: int = 0) -> MdStdr:
    """Mean difference and standard deviation range (FedRec Eq. 10-11), in percent.

    ``federated`` and ``unfederated`` are the metric values (e.g. MAE) of the repeated runs (the
    5 copies of the data)::

        MD   = |(M_F - M_UF) / M_UF| x 100%
        STDR = |(STD_F + STD_UF) / M_UF| x 100%

    where M and STD are the mean and standard deviation over runs.  ``ddof=0`` (population std)
    is what the FedRec code reports as the +-.  MD < STDR is the paper's criterion for a
    lossless conversion.
    """
    f = np.asarray(federated, dtype=np.float64).ravel()
    u = np.asarray(unfederated, dtype=np.float64).ravel()
    if f.size == 0 or u.size == 0:
        raise ValueError("need at least one run on each side")
    return md_stdr_from_stats(f.mean(), f.std(ddof=ddof), u.mean(), u.std(ddof=ddof))


# ---------------------------------------------------------------------------------------------
# top-N


def _csr_parts(csr: Any) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(csr, tuple) and len(csr) == 2:
        indptr, indices = csr
    else:
        indptr, indices = csr.indptr, csr.indices
    return np.asarray(indptr, dtype=np.int64), np.asarray(indices, dtype=np.int64)


def top_n(
    scores: Any,
    exclude_csr: Any = None,
    n: int = 10,
    *,
    users: Any = None,
    block_rows: int = 256,
) -> np.ndarray:
    """The ``n`` best items per row of ``scores`` (``n_rows x n_items``), best first.

    ``exclude_csr`` (row ``u`` = items to leave out, e.g. the user's training items) has one
    row per score row, or per user when ``users`` gives the user index of each score row.
    Ties are broken deterministically by the lower item index.  Scores must be finite (a NaN
    means a diverged model: ``ValueError``); excluded items must lie in ``[0, n_items)`` and
    ``users`` be non-negative (``ValueError``).  Rows with fewer than ``n`` candidate items are
    padded with ``-1``.  Returns int64 ``n_rows x n``.
    """
    s = np.asarray(scores)
    if s.ndim != 2:
        raise ValueError(f"scores must be 2-D (users x items), got shape {s.shape}")
    n_rows, n_items = s.shape
    n = int(n)
    if n < 1:
        raise ValueError("n must be >= 1")
    ex_ptr = ex_idx = None
    if exclude_csr is not None:
        ex_ptr, ex_idx = _csr_parts(exclude_csr)
    rows_user = np.arange(n_rows) if users is None else np.asarray(users, dtype=np.int64)
    if rows_user.shape != (n_rows,):
        raise ValueError("users must give one user index per score row")
    if ex_ptr is not None and n_rows and rows_user.max() >= len(ex_ptr) - 1:
        raise ValueError("exclude_csr has fewer rows than the users being ranked")
    if n_rows and rows_user.min() < 0:
        raise ValueError(f"users holds a negative user index {int(rows_user.min())}")
    out = np.full((n_rows, n), -1, dtype=np.int64)
    k = min(n, n_items)
    if k == 0:  # no items at all: every row is padding (np.partition below needs a k-th item)
        return out
    for b0 in range(0, n_rows, block_rows):
        b1 = min(n_rows, b0 + block_rows)
        blk = np.array(s[b0:b1], dtype=np.float64)
        if not np.all(np.isfinite(blk)):
            bad = b0 + int(np.flatnonzero(~np.isfinite(blk).all(axis=1))[0])
            raise ValueError(f"scores of row {bad} are not finite (diverged model?)")
        avail = np.full(b1 - b0, n_items, dtype=np.int64)
        if ex_ptr is not None:
            us = rows_user[b0:b1]
            starts, ends = ex_ptr[us], ex_ptr[us + 1]
            lens = ends - starts
            r_idx = np.repeat(np.arange(b1 - b0), lens)
            offs = np.cumsum(lens) - lens
            gather = np.arange(int(lens.sum())) - np.repeat(offs, lens) + np.repeat(starts, lens)
            c_idx = ex_idx[gather]
            if c_idx.size and (c_idx.min() < 0 or c_idx.max() >= n_items):
                # a negative id would exclude an item counted from the end, silently
                bad = int(np.flatnonzero((c_idx < 0) | (c_idx >= n_items))[0])
                raise ValueError(f"excluded item {int(c_idx[bad])} of user {int(us[r_idx[bad]])} is outside "
                                 f"[0, {n_items})")
            blk[r_idx, c_idx] = -np.inf
            excluded = np.zeros(blk.shape, dtype=bool)
            excluded[r_idx, c_idx] = True
            avail = n_items - excluded.sum(axis=1)
        # threshold = k-th largest value per row
        kth = -np.partition(-blk, k - 1, axis=1)[:, k - 1]
        above = blk > kth[:, None]
        n_above = above.sum(axis=1)
        ties = blk == kth[:, None]
        tie_rank = np.cumsum(ties, axis=1)  # 1-based rank among ties, by item index
        chosen = above | (ties & (tie_rank <= (k - n_above)[:, None]))
        r, c = np.nonzero(chosen)  # row-major: items ascending within a row
        cand = c.reshape(b1 - b0, k)
        vals = blk[np.arange(b1 - b0)[:, None], cand]
        ordr = np.argsort(-vals, axis=1, kind="stable")  # stable: ties keep lower item first
        ranked = np.take_along_axis(cand, ordr, axis=1)
        # pad rows that have fewer than k available items
        short = avail < k
        if short.any():
            pos = np.arange(k)[None, :]
            ranked = np.where(pos < avail[:, None], ranked, -1)
        out[b0:b1, :k] = ranked
    return out


# ---------------------------------------------------------------------------------------------
# ranking accuracy


def _truth_sets(recs: np.ndarray, test_csr: Any) -> tuple[np.ndarray, np.ndarray]:
    """(hit matrix n_users x N as bool, number of test items per user). Raises ``ValueError`` for
    a test item repeated or out of range, or an item recommended twice to one user (padding,
    ``-1``, may repeat)."""
    indptr, indices = _csr_parts(test_csr)
    n_users = recs.shape[0]
    if len(indptr) - 1 != n_users:
        raise ValueError(f"recs has {n_users} rows but the test CSR has {len(indptr) - 1}")
    n_test = np.diff(indptr)
    if indices.size and (indices.min() < 0 or indices.max() >= 1 << 32):
        bad = int(np.flatnonzero((indices < 0) | (indices >= 1 << 32))[0])
        raise ValueError(f"test item {int(indices[bad])} of user {_row_of(indptr, bad)} is out of range")
    rows = np.repeat(np.arange(n_users, dtype=np.int64), n_test)
    key_test = np.unique(rows * (1 << 32) + indices)
    if key_test.size < indices.size:
        # a test set is a set: a repeated item would count twice in |test_u| (recall's and IDCG's
        # denominators) while it can be hit once
        keys = rows * (1 << 32) + indices
        order = np.argsort(keys, kind="stable")
        dup = order[1:][keys[order[1:]] == keys[order[:-1]]][0]
        raise ValueError(f"user {_row_of(indptr, int(dup))} has test item {int(indices[dup])} twice")
    r = recs.astype(np.int64)
    srt = np.sort(r, axis=1)
    twice = (srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)
    if twice.any():
        u, k = np.argwhere(twice)[0]
        raise ValueError(f"user {int(u)} is recommended item {int(srt[u, k])} twice")
    key_rec = np.arange(n_users, dtype=np.int64)[:, None] * (1 << 32) + r
    hits = np.isin(key_rec, key_test) & (r >= 0)
    return hits, n_test


def _row_of(indptr: np.ndarray, position: int) -> int:
    """The CSR row holding the entry at ``position``."""
    return int(np.searchsorted(indptr, position, side="right") - 1)


def _cut(recs: Any, n: int) -> np.ndarray:
    r = np.asarray(recs)
    if r.ndim != 2:
        raise ValueError(f"recs must be 2-D (users x N), got shape {r.shape}")
    if r.dtype.kind not in "iu":
        # item indices: a float 0.5 was truncated to item 0 (a hit, say) without a word
        if r.dtype.kind != "f" or not np.array_equal(r, np.trunc(r)):
            raise ValueError(f"recs must hold integer item indices, got dtype {r.dtype}")
    if n > r.shape[1]:
        raise ValueError(f"cutoff {n} exceeds the {r.shape[1]} recommendations per user")
    return r[:, :n]


def _average(values: np.ndarray, has_test: np.ndarray, per_user: bool):
    if per_user:
        return np.where(has_test, values, np.nan)
    if not has_test.any():
        return float("nan")
    return float(values[has_test].mean())


def hits_at(recs: Any, test_csr: Any, n: int) -> np.ndarray:
    """Number of test items among each user's first ``n`` recommendations (int64)."""
    hits, _ = _truth_sets(_cut(recs, n), test_csr)
    return hits.sum(axis=1)


def precision_at(recs: Any, test_csr: Any, n: int, *, per_user: bool = False):
    """P@N = |top-N ∩ test_u| / N (denominator N even when fewer items were recommended)."""
    hits, n_test = _truth_sets(_cut(recs, n), test_csr)
    return _average(hits.sum(axis=1) / n, n_test > 0, per_user)


def recall_at(recs: Any, test_csr: Any, n: int, *, per_user: bool = False):
    """R@N = |top-N ∩ test_u| / |test_u|."""
    hits, n_test = _truth_sets(_cut(recs, n), test_csr)
    with np.errstate(invalid="ignore", divide="ignore"):
        v = hits.sum(axis=1) / n_test
    return _average(v, n_test > 0, per_user)


def f1_at(recs: Any, test_csr: Any, n: int, *, per_user: bool = False):
    """Per-user harmonic mean of P@N and R@N (0 when both are 0), then averaged."""
    hits, n_test = _truth_sets(_cut(recs, n), test_csr)
    h = hits.sum(axis=1)
    p = h / n
    with np.errstate(invalid="ignore", divide="ignore"):
        r = h / n_test
        f = np.where(h > 0, 2 * p * r / (p + r), 0.0)
    return _average(f, n_test > 0, per_user)


def ndcg_at(recs: Any, test_csr: Any, n: int, *, per_user: bool = False):
    """NDCG@N with binary relevance: DCG = sum over hits at rank k (1-based) of 1/log2(k+1);
    IDCG = sum_{k=1}^{min(|test_u|, N)} 1/log2(k+1)."""
    hits, n_test = _truth_sets(_cut(recs, n), test_csr)
    disc = 1.0 / np.log2(np.arange(2, n + 2))
    dcg = (hits * disc[None, :]).sum(axis=1)
    ideal = np.concatenate(([0.0], np.cumsum(disc)))[np.minimum(n_test, n)]
    with np.errstate(invalid="ignore", divide="ignore"):
        v = dcg / ideal
    return _average(v, n_test > 0, per_user)


# ---------------------------------------------------------------------------------------------
# beyond accuracy (FPL)


def item_coverage_at(recs: Any, n: int) -> int:
    """IC@N: the number of distinct items appearing in the users' top-N lists (FPL)."""
    r = _cut(recs, n)
    return int(np.unique(r[r >= 0]).size)


def gini_index(counts: Any, n_items: int | None = None) -> float:
    """Gini coefficient of a distribution over ``n_items`` (0 = equal, 1 = one item has all).

    G = 1/(n-1) * sum_{j=1}^{n} (2j - n - 1) p_j with p sorted increasingly and summing to 1
    (Gunawardana & Shani); items missing from ``counts`` (when ``n_items > len(counts)``)
    count as zero. Raises ``ValueError`` for negative or non-finite counts.
    """
    c = np.asarray(counts, dtype=np.float64).ravel()
    n = len(c) if n_items is None else int(n_items)
    if n < len(c):
        raise ValueError("n_items is smaller than the number of counts")
    if n < 2:
        raise ValueError("the Gini index needs at least 2 items")
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        raise ValueError("counts must be finite and non-negative")
    total = c.sum()
    if total <= 0:
        raise ValueError("the counts sum to zero")
    p = np.sort(np.concatenate([np.zeros(n - len(c)), c])) / total
    j = np.arange(1, n + 1)
    return float(((2 * j - n - 1) * p).sum() / (n - 1))


def gini_at(recs: Any, n: int, n_items: int, items: Any = None) -> float:
    """G@N as FPL reports it (the Elliot / RankSys "Gini" diversity): 1 - Gini index of how
    often each item appears in the top-N lists, over all ``n_items`` items (ids 0..n_items-1;
    an item never recommended counts as zero), or over ``items`` when given (the ids the lists
    can hold, e.g. the items with a training interaction: a recommended item outside them is a
    ``ValueError``).

    Higher means recommendations spread over more items ("higher personalization" in FPL):
    1 when every item is recommended equally often, 0 when a single item fills every list.
    """
    r = _cut(recs, n)
    flat = r[r >= 0].astype(np.int64)
    if flat.size == 0:
        raise ValueError("no recommendations")
    if flat.max() >= n_items:
        raise ValueError(f"recommended item {int(flat.max())} is outside the catalogue of {n_items}")
    counts = np.bincount(flat, minlength=n_items)
    if items is None:
        return 1.0 - gini_index(counts, n_items)
    sel = np.unique(np.asarray(items, dtype=np.int64))
    if sel.size and (sel[0] < 0 or sel[-1] >= n_items):
        raise ValueError(f"items holds {int(sel[0] if sel[0] < 0 else sel[-1])}, outside 0..{n_items - 1}")
    outside = np.setdiff1d(np.flatnonzero(counts), sel)
    if outside.size:
        raise ValueError(f"recommended item {int(outside[0])} is not among the {sel.size} items the Gini is over")
    return 1.0 - gini_index(counts[sel], sel.size)


class BiasDisparity(NamedTuple):
    source: np.ndarray  # B_T(C): bias in the training data, per category
    recommended: np.ndarray  # B_R(C): bias in the recommendation lists
    disparity: np.ndarray  # BD(C) = (B_R - B_T) / B_T


def _category_bias(items: np.ndarray, cats: np.ndarray, p_c: np.ndarray) -> np.ndarray:
    labelled = cats[items].any(axis=1)
    denom = labelled.sum()
    if denom == 0:
        return np.full(cats.shape[1], np.nan)
    pr = cats[items[labelled]].sum(axis=0) / denom
    with np.errstate(invalid="ignore", divide="ignore"):
        return pr / p_c


def bias_disparity(train_items: Any, recs: Any, categories: Any, n: int | None = None) -> BiasDisparity:
    """Bias disparity per item category (FPL Eq. 10, Mansoury et al. 2019), whole population.

    - P(C) = |items of C| / |items with a category| over the catalogue (rows of ``categories``);
    - the preference ratio PR(C) = (interactions with an item of C) / (interactions with an item
      that has a category), over the training interactions (``train_items``: the item index of
      every training rating) for the source, over the top-``n`` lists (``recs``, ``-1`` ignored)
      for the recommendations;
    - B(C) = PR(C) / P(C) (1 = no bias; > 1 = over-represented);
    - BD(C) = (B_R(C) - B_T(C)) / B_T(C) (0 = recommendations keep the input bias).

    ``categories`` is a bool ``n_items x n_categories`` matrix; multi-label items count once in
    each of their categories (the denominators count interactions, not labels), which reduces to
    Mansoury et al.'s definition for single-label categories.  Categories without items or
    without training interactions give NaN.
    """
    cats = np.asarray(categories, dtype=bool)
    if cats.ndim != 2:
        raise ValueError("categories must be a bool matrix n_items x n_categories")
    labelled_items = cats.any(axis=1)
    if not labelled_items.any():
        raise ValueError("no item has a category")
    with np.errstate(invalid="ignore", divide="ignore"):
        p_c = cats.sum(axis=0) / labelled_items.sum()
    t = np.asarray(train_items, dtype=np.int64).ravel()
    r = np.asarray(recs)
    if n is not None:
        r = _cut(r, n)
    r = r[r >= 0].astype(np.int64)
    for what, a in (("train_items", t), ("recs", r)):
        if a.size and (a.min() < 0 or a.max() >= cats.shape[0]):
            raise ValueError(f"{what} holds item indices outside [0, {cats.shape[0]})")
    b_t = _category_bias(t, cats, p_c)
    b_r = _category_bias(r, cats, p_c)
    with np.errstate(invalid="ignore", divide="ignore"):
        bd = (b_r - b_t) / b_t
    return BiasDisparity(b_t, b_r, bd)
