"""Per-user top-N hits as one integer a user: bit ``k`` is set when the item at rank ``k + 1`` of
the user's list is one of her held-out items.

From the masks and the number of held-out items per user every per-user ranking figure of
:mod:`fedsim.math.metrics` follows exactly (P@N, R@N, F1@N, NDCG@N with binary relevance), so a
run can keep one small integer per user and evaluation instead of the lists, and paired tests
can be computed later for any of these metrics. ``N`` is at most 62 (the masks are int64).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["hit_masks", "per_user_metrics", "popcount"]

MAX_N = 62


def _csr(test_csr: Any) -> tuple[np.ndarray, np.ndarray]:
    if hasattr(test_csr, "indptr"):
        return np.asarray(test_csr.indptr), np.asarray(test_csr.indices)
    indptr, indices = test_csr
    return np.asarray(indptr), np.asarray(indices)


def hit_masks(recs: Any, test_csr: Any, n: int) -> np.ndarray:
    """The hit mask of each user's first ``n`` recommendations (``recs``: int ``n_users x >= n``,
    ``-1`` padding never hits; ``test_csr``: held-out items per user, anything with ``indptr``
    and ``indices`` or such a pair). Returns int64 ``n_users``. Raises ``ValueError`` for
    ``n`` outside 1..62, row counts that differ or fractional item ids in ``recs``."""
    n = int(n)
    if not 1 <= n <= MAX_N:
        raise ValueError(f"n must be in 1..{MAX_N}, got {n}")
    r = np.asarray(recs)
    if r.ndim != 2 or r.shape[1] < n:
        raise ValueError(f"recs must be users x at least {n}, got shape {r.shape}")
    r = r[:, :n]
    if r.dtype.kind not in "iu" and (r.dtype.kind != "f" or not np.array_equal(r, np.trunc(r))):
        # as metrics refuses them: a float 0.5 was cast to item 0
        raise ValueError(f"recs must hold integer item indices, got dtype {r.dtype}")
    r = r.astype(np.int64)
    indptr, indices = _csr(test_csr)
    nu = r.shape[0]
    if len(indptr) - 1 != nu:
        raise ValueError(f"recs has {nu} rows but the held-out CSR has {len(indptr) - 1}")
    rows = np.repeat(np.arange(nu, dtype=np.int64), np.diff(indptr))
    truth = np.unique(rows * (1 << 32) + np.asarray(indices, dtype=np.int64))
    hit = np.isin(np.arange(nu, dtype=np.int64)[:, None] * (1 << 32) + r, truth) & (r >= 0)
    weights = np.left_shift(np.int64(1), np.arange(n, dtype=np.int64))
    return (hit.astype(np.int64) * weights[None, :]).sum(axis=1)


def popcount(masks: Any) -> np.ndarray:
    """Number of set bits of each mask (the hits)."""
    m = np.asarray(masks, dtype=np.int64)
    out = np.zeros(m.shape, dtype=np.int64)
    for k in range(MAX_N + 1):
        out += (m >> k) & 1
    return out


def per_user_metrics(masks: Any, n_test: Any, n: int) -> dict[str, np.ndarray]:
    """Per-user ``p``, ``r``, ``f1`` and ``ndcg`` at ``n`` from hit masks and the number of
    held-out items per user, as :func:`fedsim.math.metrics.precision_at` and friends compute
    them with ``per_user=True`` (NaN for users without held-out items)."""
    m = np.asarray(masks, dtype=np.int64)
    nt = np.asarray(n_test, dtype=np.float64)
    if m.shape != nt.shape:
        raise ValueError(f"masks and n_test differ in length: {m.shape} and {nt.shape}")
    n = int(n)
    h = popcount(m).astype(np.float64)
    has = nt > 0
    disc = 1.0 / np.log2(np.arange(2, n + 2))
    # one row of bits per user, summed as ndcg_at sums its hit rows (NumPy's pairwise sum along
    # the row), so the value is the metrics module's to the last bit, not only to rounding
    bits = (m[..., None] >> np.arange(n, dtype=np.int64)) & 1
    dcg = (bits * disc).sum(axis=-1)
    ideal = np.concatenate(([0.0], np.cumsum(disc)))[np.minimum(nt, n).astype(np.int64)]
    with np.errstate(invalid="ignore", divide="ignore"):
        p = h / n
        r = h / nt
        f1 = np.where(h > 0, 2 * p * r / (p + r), 0.0)
        nd = dcg / ideal
    nan = np.nan
    return {"p": np.where(has, p, nan), "r": np.where(has, r, nan), "f1": np.where(has, f1, nan),
            "ndcg": np.where(has, nd, nan)}
