"""PersonalFR's active parameters (Expression 3) and their per-item merge (Eq. 5).

A client's *active items* ``I_m`` are the items rated by at least one of its users in its training data
(Algorithm 1: the indices the client sends once, before round 1). Its *active decoder* is every hidden
decoder layer plus the output-layer rows and biases of ``I_m`` (Expression 3); the output layer's other rows
get an exactly zero gradient from the masked loss (Eq. 1), so training on the slice computes the same
gradient with fewer operations.

Slices keep the parameter names: an active decoder is a dict with the decoder's keys whose output weight
has ``len(items)`` rows, in the order of ``items``. So a client can train its slice with the plain functions
of ``fedsim.math.autoencoder`` and ``fedsim.math.optim`` (its momentum buffers have the slice's shapes and
stay valid from round to round, since ``I_m`` does not change).

Input side (optional): the user rows are sparse, so the encoder's first layer only needs the columns of
the items with a non-zero input. :func:`slice_items` with ``in_items`` cuts those columns out of
``enc.W1`` (a personal encoder can be held cut for good: the other columns never receive a gradient and
never touch the client's data). The paper's computation ratio keeps the encoder dense.

All functions return fresh arrays (never views of their arguments).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from fedsim.math import active_kernels
from fedsim.math.autoencoder import decoder_of, output_keys

__all__ = [
    "rated_items",
    "slice_items",
    "put_items",
    "restriction",
    "extract_active",
    "apply_active",
    "merge_active",
    "active_count",
    "MERGE_MODES",
]

MERGE_MODES = ("per_item", "algorithm1")
Params = dict[str, np.ndarray]


def rated_items(mask: np.ndarray) -> np.ndarray:
    """Sorted indices of the columns of a ``(users, items)`` mask with at least one rated entry (``I_m``)."""
    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise ValueError("mask must be a (users, items) matrix")
    return np.flatnonzero(mask.any(axis=0)).astype(np.int64)


def _items(items) -> np.ndarray:
    idx = np.asarray(items, dtype=np.int64).ravel()
    if idx.size > 1 and np.any(np.diff(idx) <= 0):
        raise ValueError("items must be strictly increasing (sorted, no duplicates)")
    return idx


def slice_items(
    params: Mapping[str, np.ndarray], out_items=None, in_items=None
) -> Params:
    """A copy of ``params`` with the output layer cut to the rows ``out_items`` and/or the first encoder
    weight cut to the columns ``in_items`` (``None``: that side untouched). Keys absent from ``params``
    (e.g. a decoder-only dict) are skipped."""
    cut: dict[str, Any] = {}
    if out_items is not None:
        rows = _items(out_items)
        for key in output_keys(params):
            cut[key] = rows
    if in_items is not None and "enc.W1" in params:
        cut["enc.W1"] = (slice(None), _items(in_items))
    # (the cut arrays are gathered, which copies them; only the others are copied whole)
    return {k: v[cut[k]] if k in cut else np.array(v, copy=True) for k, v in params.items()}


def put_items(
    params: Mapping[str, np.ndarray], sliced: Mapping[str, np.ndarray], out_items=None, in_items=None
) -> Params:
    """Inverse of :func:`slice_items`: a copy of ``params`` with ``sliced`` written back (every key of
    ``sliced``; the output rows ``out_items`` / input columns ``in_items`` only for the cut arrays)."""
    out: Params = {k: np.array(v, copy=True) for k, v in params.items()}
    cut_out = set(output_keys(params)) if out_items is not None else set()
    rows = None if out_items is None else _items(out_items)
    cols = None if in_items is None else _items(in_items)
    for key, value in sliced.items():
        if key not in out:
            raise KeyError(f"{key!r} is not a parameter of the full model")
        if key in cut_out:
            out[key][rows] = value
        elif key == "enc.W1" and cols is not None:
            out[key][:, cols] = value
        else:
            out[key][...] = value
    return out


def restriction(params: Mapping[str, np.ndarray], out_items=None, in_items=None) -> dict[str, Any]:
    """The ``restrict`` argument of ``sgd_step`` / ``adam_step`` that updates only the active output rows
    (and input columns) of a full model: full training with the inactive rows masked."""
    r: dict[str, Any] = {}
    if out_items is not None:
        rows = _items(out_items)
        for key in output_keys(params):
            r[key] = rows
    if in_items is not None and "enc.W1" in params:
        r["enc.W1"] = (slice(None), _items(in_items))
    return r


def extract_active(params: Mapping[str, np.ndarray], items) -> Params:
    """Expression 3: the active decoder of a client with active items ``items`` (copies).

    ``params`` is a decoder or a whole model (its encoder entries are ignored). The result holds every
    hidden decoder layer whole and the output weight rows / bias entries of ``items``, in that order.
    """
    return slice_items(decoder_of(params), out_items=items)


def apply_active(decoder: Mapping[str, np.ndarray], active: Mapping[str, np.ndarray], items) -> Params:
    """Eq. 5 for one client: a full decoder whose output rows ``items`` come from ``active`` and whose other
    output rows come from ``decoder`` (the previous global decoder); hidden layers from ``active``."""
    return put_items(decoder_of(decoder), active, out_items=items)


def active_count(params: Mapping[str, np.ndarray], n_active: int) -> int:
    """Number of scalars in an active decoder with ``n_active`` active items (Expression 3)."""
    dec = decoder_of(params)
    w_key, b_key = output_keys(dec)
    hidden = sum(v.size for k, v in dec.items() if k not in (w_key, b_key))
    return int(hidden + n_active * (dec[w_key].shape[1] + 1))


def merge_active(
    decoder: Mapping[str, np.ndarray],
    slices: Sequence[Mapping[str, np.ndarray]],
    items: Sequence[Any],
    *,
    weights: Sequence[float] | None = None,
    mode: str = "per_item",
) -> Params:
    """Server aggregation of active decoders (Eq. 5 and Algorithm 1's ServerAggregation); a new decoder.

    ``decoder``: the previous global decoder ``D_g^{t-1}`` (a decoder or whole model; only decoder keys are
    used). ``slices[m]``: client ``m``'s active decoder with output rows ``items[m]``. ``weights``: client
    weights (default equal, as in the paper and the authors' code).

    Hidden decoder layers: weighted mean over all the clients. Output rows and biases, ``mode``:

    ``"per_item"`` (default): row ``i`` is the weighted mean of the rows ``i`` of the clients that have ``i``
    active; a row no client has active keeps its previous value.

    ``"algorithm1"``: Algorithm 1 as printed: each client's full decoder is rebuilt with Eq. 5 (its active
    rows, the previous global rows elsewhere) and the rebuilt decoders are averaged over all clients, so row
    ``i`` is ``(sum of the active rows i + (|S| - k_i) * previous row i) / |S|`` (equal weights) with ``k_i``
    the number of clients having ``i`` active. This equals averaging full decoders trained with the inactive
    rows masked (what the authors' code does, up to weight decay on inactive rows).

    Sums are accumulated in float64 and cast back to the decoder's dtype; output rows that no client has
    active are copied unchanged.
    """
    if mode not in MERGE_MODES:
        raise ValueError(f"mode must be one of {MERGE_MODES}, got {mode!r}")
    if len(slices) != len(items):
        raise ValueError("one item list per slice")
    if not slices:
        raise ValueError("nothing to merge")
    w = np.ones(len(slices)) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (len(slices),) or not np.all((w > 0) & np.isfinite(w)):  # (a NaN weight passed "w <= 0")
        raise ValueError("weights must be one positive finite number per slice")
    prev = decoder_of(decoder)
    w_key, b_key = output_keys(prev)
    kern = active_kernels.compiled()  # None without numba: NumPy's expressions, the same sums
    # a diverging decoder overflows in these sums: silent, as the compiled ones are (the server
    # checks the merged decoder once per round)
    with np.errstate(over="ignore", invalid="ignore"):
        out: Params = {}
        for key, value in prev.items():
            if key in (w_key, b_key):
                continue
            acc = np.zeros(value.shape, dtype=np.float64)
            for wm, sl in zip(w, slices):
                if kern is not None and sl[key].shape == value.shape:
                    kern.add_scaled(acc.reshape(-1), np.ascontiguousarray(sl[key]).reshape(-1), wm)
                else:
                    acc += wm * sl[key]
            out[key] = (acc / w.sum()).astype(value.dtype)
        all_rows = [_items(it) for it in items]
        union = np.unique(np.concatenate(all_rows)) if all_rows else np.zeros(0, np.int64)
        acc_w = np.zeros((union.size, prev[w_key].shape[1]), dtype=np.float64)  # only rows someone has active
        acc_b = np.zeros(union.size, dtype=np.float64)
        weight_i = np.zeros(union.size, dtype=np.float64)
        for wm, sl, rows in zip(w, slices, all_rows):
            if sl[w_key].shape[0] != rows.size or sl[b_key].shape != (rows.size,):
                raise ValueError("a slice's output layer does not match its items")
            pos = np.searchsorted(union, rows)
            if kern is not None:
                kern.add_rows(acc_w, acc_b, weight_i, pos, sl[w_key], sl[b_key], wm)
            else:
                acc_w[pos] += wm * sl[w_key]
                acc_b[pos] += wm * sl[b_key]
                weight_i[pos] += wm
        if mode == "per_item":
            rows_w = acc_w / weight_i[:, None]
            rows_b = acc_b / weight_i
        else:
            rest = w.sum() - weight_i  # weight of the clients that fill row i with the previous value
            rows_w = (acc_w + rest[:, None] * prev[w_key][union]) / w.sum()
            rows_b = (acc_b + rest * prev[b_key][union]) / w.sum()
    new_w = np.array(prev[w_key], copy=True)  # rows nobody has active keep their previous value exactly
    new_b = np.array(prev[b_key], copy=True)
    new_w[union] = rows_w
    new_b[union] = rows_b
    out[w_key] = new_w
    out[b_key] = new_b
    return {k: out[k] for k in prev}
