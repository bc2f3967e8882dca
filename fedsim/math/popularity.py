"""Non-personalised floor baselines: Top-Pop and Random (FPL paper, Table 2).

Scores only; masking the user's training items and ranking are the evaluator's job
(``fedsim.math.metrics``). Higher score = recommended first.
"""

from __future__ import annotations

import numpy as np

__all__ = ["random_scores", "random_user_scores", "toppop_item_scores", "toppop_scores"]


def toppop_item_scores(indptr_or_items: np.ndarray, indices: np.ndarray | None = None,
                       n_items: int | None = None, *, tie_break: bool = True) -> np.ndarray:
    """Item popularity: the number of training interactions of each item, shape (n_items,).

    Call as ``toppop_item_scores(indptr, indices, n_items)`` with a CSR training matrix, or
    ``toppop_item_scores(items, n_items=n_items)`` with the item id of every interaction.
    ``tie_break=True`` subtracts ``id / (n_items + 1)`` (< 1) so equally popular items rank by
    ascending id deterministically; the integer part stays the count.
    """
    items = np.asarray(indptr_or_items if indices is None else indices, dtype=np.int64)
    if n_items is None:
        n_items = int(items.max()) + 1 if items.size else 0
    if items.size and (items.min() < 0 or items.max() >= int(n_items)):
        bad = int(items.min()) if items.min() < 0 else int(items.max())
        raise ValueError(f"item id {bad} outside [0, {int(n_items)})")
    counts = np.bincount(items, minlength=int(n_items)).astype(np.float64)
    if tie_break:
        counts -= np.arange(int(n_items)) / (int(n_items) + 1.0)
    return counts


def toppop_scores(item_scores: np.ndarray, n_users: int) -> np.ndarray:
    """The same popularity row for every user: a read-only (n_users, n_items) broadcast view."""
    item_scores = np.asarray(item_scores, dtype=np.float64)
    return np.broadcast_to(item_scores, (int(n_users), item_scores.shape[0]))


def random_scores(n_users: int, n_items: int, rng: np.random.Generator) -> np.ndarray:
    """Uniform random scores, one call ``rng.random((n_users, n_items))``."""
    return rng.random((int(n_users), int(n_items)))


def random_user_scores(n_items: int, rng: np.random.Generator) -> np.ndarray:
    """One user's random scores, one call ``rng.random(n_items)``."""
    return rng.random(int(n_items))
