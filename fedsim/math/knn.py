"""User-kNN and Item-kNN with cosine vector similarity for implicit feedback, as the FPL paper's
framework defines them (Elliot, after Dacrema et al. 2019: "Are we really making much
progress?"), in plain NumPy.

- Similarity: the cosine of the full 0/1 vectors, ``cos(a, b) = a.b / (|a| |b|)`` (0 when a vector
  is empty); a row is never its own neighbour.
- User-kNN: each user's ``k`` most similar users are her neighbours;
  ``score(u, i) = sum over neighbours v of cos(u, v) r_vi``.
- Item-kNN: each item's ``k`` most similar items are its neighbours;
  ``score(u, i) = sum over neighbours j of i of cos(i, j) r_uj``.

Ties among equally similar candidates go to the lower index. Elliot's own code differs in two
details (docs/fpl.md, "Baselines: which library and why"): it counts the row itself among the k
and its User-kNN sums over the users that have u among their k. Why not a library: cornac's kNN
computes the cosine over co-rated items only, which on 0/1 data is 1 for every pair that shares
an item (so its "cosine" ranks by overlap counts), and LensKit's picks the k neighbours per
target item among the user's items or the item's raters; neither is the paper's definition
(docs/fpl.md, "Baselines").

The k grid of the paper costs one similarity computation: the neighbours are sorted once and the
scores for a larger k add the next neighbours' terms (:func:`knn_scores` yields them in turn).
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

__all__ = ["cosine_similarity", "exact_neighbours", "knn_scores", "top_neighbours"]


def cosine_similarity(x: Any, block: int = 2048) -> np.ndarray:
    """Cosine similarity of the rows of ``x`` (dense, ``n x m``) as a float32 ``n x n`` matrix;
    rows of zeros have similarity 0 with everything. Computed in blocks of ``block`` rows."""
    a = np.asarray(x, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"expected a 2-D matrix, got shape {a.shape}")
    norm = np.sqrt((a.astype(np.float64) ** 2).sum(axis=1))
    inv = np.where(norm > 0, 1.0 / np.where(norm > 0, norm, 1.0), 0.0).astype(np.float32)
    an = a * inv[:, None]
    n = a.shape[0]
    out = np.empty((n, n), dtype=np.float32)
    for b0 in range(0, n, block):
        b1 = min(n, b0 + block)
        out[b0:b1] = an[b0:b1] @ an.T
    return out


def top_neighbours(sim: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's ``k`` most similar other rows (the diagonal excluded), most similar first,
    ties by lower index: ``(indices int64 n x k', similarities float32 n x k')`` with
    ``k' = min(k, n - 1)``."""
    s = np.array(sim, dtype=np.float32)
    n = s.shape[0]
    if s.shape != (n, n):
        raise ValueError(f"expected a square similarity matrix, got shape {s.shape}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    k = min(int(k), n - 1)
    np.fill_diagonal(s, -np.inf)
    # a stable sort of -s ranks equal similarities by ascending index
    order = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return order.astype(np.int64), np.take_along_axis(s, order, axis=1)


def exact_neighbours(x: Any, k: int, block: int = 2048) -> tuple[np.ndarray, np.ndarray]:
    """:func:`top_neighbours` of :func:`cosine_similarity` of the rows of ``x``, except that the
    neighbours are ranked by the exact cosine, not by its float32 rounding: equal cosines of
    different pairs (4 / sqrt(4 x 7) and 6 / sqrt(7 x 9), say) often round to different float32
    values, which gave the tie to the higher index, and distinct cosines closer than float32's
    resolution could swap. The key is ``cos^2 = (a.b)^2 / (|a|^2 |b|^2)`` (signed) in float64:
    for integer-valued rows (0/1 data) with ``|a|^2 |b|^2`` and ``(a.b)^2`` below 2^53 that is one
    rounding of the exact rational (the dot products are float32 sums of integers, exact below
    2^24), so equal cosines get equal keys and ties go to the lower index. The similarities returned are :func:`cosine_similarity`'s float32 values of the chosen
    pairs. Memory: two ``block x n`` blocks, never the ``n x n`` matrix."""
    a = np.asarray(x, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"expected a 2-D matrix, got shape {a.shape}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    n = a.shape[0]
    k = min(int(k), n - 1)
    sq = np.empty(n, dtype=np.float64)  # |a|^2, exact for integer rows (blocks: no float64 copy of x)
    for b0 in range(0, n, block):
        sq[b0:b0 + block] = (a[b0:b0 + block].astype(np.float64) ** 2).sum(axis=1)
    norm = np.sqrt(sq)
    inv = np.where(norm > 0, 1.0 / np.where(norm > 0, norm, 1.0), 0.0).astype(np.float32)
    an = a * inv[:, None]  # as cosine_similarity
    idx = np.empty((n, max(k, 0)), dtype=np.int64)
    val = np.empty((n, max(k, 0)), dtype=np.float32)
    for b0 in range(0, n, block):
        b1 = min(n, b0 + block)
        # float32 products and sums of integers below 2^24 are exact: the co-occurrence counts
        dots = (a[b0:b1] @ a.T).astype(np.float64)
        den = sq[b0:b1, None] * sq[None, :]
        with np.errstate(invalid="ignore", divide="ignore"):
            key = np.where(den > 0, np.sign(dots) * (dots * dots) / np.where(den > 0, den, 1.0), 0.0)
        key[np.arange(b1 - b0), np.arange(b0, b1)] = -np.inf  # a row is never its own neighbour
        order = np.argsort(-key, axis=1, kind="stable")[:, :k]
        idx[b0:b1] = order
        sim = an[b0:b1] @ an.T  # cosine_similarity's block (same rows, same product)
        val[b0:b1] = np.take_along_axis(sim, order, axis=1)
    return idx, val


def knn_scores(r: Any, kind: str, ks: list[int] | tuple[int, ...]) -> Iterator[tuple[int, np.ndarray]]:
    """``(k, scores n_users x n_items)`` for every ``k`` of ``ks`` in increasing order, for the
    0/1 (or weighted) interaction matrix ``r`` (dense ``n_users x n_items``); ``kind`` is
    ``"user"`` or ``"item"`` (see the module docstring). Scores are float64; the array yielded
    is reused for the next k (copy it to keep it). Raises ``ValueError`` for an unknown kind or
    a k below 1."""
    if kind not in ("user", "item"):
        raise ValueError(f"kind must be 'user' or 'item', got {kind!r}")
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ValueError(f"ks must be positive, got {ks}")
    x = np.asarray(r, dtype=np.float32)
    rows = x if kind == "user" else x.T
    idx, val = exact_neighbours(rows, ks[-1])
    scores = np.zeros(x.shape, dtype=np.float64)
    slot = 0
    for k in ks:
        while slot < min(k, idx.shape[1]):
            nb, w = idx[:, slot], val[:, slot].astype(np.float64)
            if kind == "user":  # score(u, .) += cos(u, v) r_v.
                scores += w[:, None] * x[nb, :]
            else:  # score(., i) += cos(i, j) r_.j
                scores += x[:, nb] * w[None, :]
            slot += 1
        yield k, scores
