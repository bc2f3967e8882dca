"""FedRec++ denoising arithmetic (Liang et al. 2021, Eq. 5 and 9), as pure functions.

A denoiser sums the gradient noise its ordinary clients sent (the gradients of their sampled
items I'_u) and folds in its own rated-item gradients with a minus sign; the server subtracts
those sums from the aggregated uploads, which leaves the gradients of the real raters only
(docs/fedrecpp.md, "Signs of Eq. 5 and Eq. 9" and "Counts").
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .rows import RowSum, check_rows

__all__ = ["check_noise_counts", "denoiser_sums", "denoiser_sums_dense", "remove_noise"]


def denoiser_sums(noise_items: Sequence[np.ndarray], noise_grads: Sequence[np.ndarray],
                  own_items: np.ndarray, own_grads: np.ndarray, *, d: int, dtype,
                  count_own: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eq. 9: per item touched, S(d, i) = sum of the noise gradients - the denoiser's own
    gradient, and the count of noise messages naming the item (minus one for an item the
    denoiser rated itself when ``count_own``, which makes the server's |U_i| exact).

    ``noise_items[k]`` (distinct ids) and ``noise_grads[k]`` (len x d) are the k-th noise
    message, summed in the order given (the actor passes content order, never arrival order).
    Returns ``(items, sums, counts)``: ascending int64 item ids, (len x d) sums in ``dtype``,
    int64 counts.
    """
    all_items = np.concatenate([*noise_items, own_items]).astype(np.int64)
    items = np.unique(all_items)
    sums = np.zeros((items.shape[0], d), dtype=dtype)
    # every noise message's positions in ``items`` found at once, its counts added by one bincount;
    # its rows added message by message (in order: the same additions, bit for bit), whole rows
    # at a time (rows.RowSum: a fancy-index += per message was most of a denoiser's work)
    n_noise = all_items.shape[0] - own_items.shape[0]
    idx = np.searchsorted(items, all_items[:n_noise])
    counts = np.bincount(idx, minlength=items.shape[0]).astype(np.int64, copy=False)
    acc = RowSum(sums)
    lo = 0
    for it, g in zip(noise_items, noise_grads):
        hi = lo + len(it)
        acc.add(idx[lo:hi], g)
        lo = hi
    if own_items.shape[0]:
        idx = np.searchsorted(items, own_items)
        sums[idx] -= own_grads
        if count_own:
            counts[idx] -= 1
    return items, sums, counts


def denoiser_sums_dense(noise_sum: np.ndarray, noise_counts: np.ndarray, own_items: np.ndarray,
                        own_grads: np.ndarray, *, dtype, count_own: bool = True
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eq. 9 from the group's noise already summed (secure aggregation gives the denoiser only
    the sum): ``noise_sum`` (m x d) and ``noise_counts`` (m,) over every item. Returns what
    ``denoiser_sums`` returns: the items some noise or the denoiser's own ratings touched
    (ascending int64), their sums minus the own gradients (``dtype``) and their counts (minus
    one for an own item when ``count_own``)."""
    own_items = np.asarray(own_items, dtype=np.int64)
    items = np.union1d(np.flatnonzero(np.asarray(noise_counts) != 0), own_items)
    sums = np.asarray(noise_sum)[items].astype(dtype)
    counts = np.rint(np.asarray(noise_counts)[items]).astype(np.int64)
    if own_items.shape[0]:
        idx = np.searchsorted(items, own_items)
        sums[idx] -= own_grads
        if count_own:
            counts[idx] -= 1
    return items, sums, counts


def remove_noise(grad_sum: np.ndarray, counts: np.ndarray, items: np.ndarray, sums: np.ndarray,
                 noise_counts: np.ndarray, *, bounds: tuple[int, np.ndarray] | None = None) -> None:
    """Eq. 5 and the count recovery, in place: ``grad_sum[items] -= sums`` and
    ``counts[items] -= noise_counts`` for one denoiser's message (ascending items, as
    :func:`denoiser_sums` gives them). Raises ``IndexError`` for ids outside [0, m),
    ``ValueError`` for ids that are not a NumPy integer array (a list of ids was a bare
    AttributeError of the server), sums that are not a NumPy float array (a list, integer or
    bool sums were subtracted as numbers), arrays of other shapes or ids not strictly increasing
    (``rows.check_rows``; a repeated id would be subtracted once), counts that are not an integer
    array (a float count was truncated) and, with ``bounds``, counts out of range
    (:func:`check_noise_counts`), changing nothing."""
    check_rows(items, sums, grad_sum.shape[0], grad_sum.shape[1], "denoised sums", ascending=True, upload=True)
    if np.shape(noise_counts) != np.shape(items):
        raise ValueError(f"denoised sums: {np.shape(items)[0]} item ids need as many counts, got shape "
                         f"{np.shape(noise_counts)}")
    if not isinstance(noise_counts, np.ndarray) or noise_counts.dtype.kind not in "iu":
        raise ValueError(f"denoised counts must be an integer array, got "
                         f"{getattr(noise_counts, 'dtype', type(noise_counts).__name__)}")
    if bounds is not None:
        check_noise_counts(items, noise_counts, *bounds)
    grad_sum[items] -= sums
    counts[items] -= noise_counts


def check_noise_counts(items: np.ndarray, noise_counts: np.ndarray, low: int, named: np.ndarray) -> None:
    """The range of a denoiser's counts (Eq. 5-9 with the count correction): item i's count is
    |U'_i^d|, the noise messages of the denoiser's group that name i, minus one if the denoiser
    rated i and its own gradients are in the sum (``count_own``). Every noise message names only
    items its sender's upload names too, so the count lies in [``low``, the number of the group's
    uploads that name i]: ``low`` is -1 when the denoiser's own ratings are counted in this sum,
    0 otherwise. ``named``: the item ids of the group's uploads the server holds, concatenated and
    sorted (one entry per upload naming the item). Raises ``ValueError`` naming the first item
    out of range, its count and its bound (a negative recovered count froze the item, an
    inflated one shrank its step, silently). Vectorised: two binary searches per item."""
    items = np.asarray(items, dtype=np.int64)
    high = np.searchsorted(named, items, "right") - np.searchsorted(named, items, "left")
    bad = (noise_counts < low) | (noise_counts > high)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        why = "its group's uploads that name it" + (", -1 for the denoiser's own rating" if low < 0 else "")
        raise ValueError(f"denoised counts: item {int(items[k])} has count {int(noise_counts[k])}, outside "
                         f"[{low}, {int(high[k])}] ({why})")
