"""Compressed sparse rows from coordinate lists: the one place fedsim orders (row, column)
entries into rows and builds ``indptr`` (``Ratings.by_user``/``by_item``, the FedRec CSR, the FPL
evaluators' held-out and excluded items)."""

from __future__ import annotations

import numpy as np

__all__ = ["csr_order", "csr_pairs"]

# a combined key rows * span + col must stay inside int64
_KEY_LIMIT = 2**62


def csr_order(rows, cols, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, order)`` of the CSR with ``n_rows`` rows holding entry ``k`` at
    ``(rows[k], cols[k])`` (non-negative integer rows, integer columns).

    ``order`` (int64) lists the entries by row, within a row by column, and equal (row, column)
    pairs in their input order (duplicates are kept): exactly ``np.lexsort((cols, rows))``. So
    ``cols[order]`` are the CSR's indices and ``values[order]`` its data. ``indptr`` (int64,
    ``n_rows + 1``): row ``r`` is ``order[indptr[r]:indptr[r + 1]]``. Raises ``ValueError`` when
    ``rows`` and ``cols`` differ in length or a row index is negative or not below ``n_rows``."""
    rows = np.asarray(rows)
    cols = np.asarray(cols)
    n_rows = int(n_rows)
    if rows.shape != cols.shape or rows.ndim != 1:
        raise ValueError(f"rows and cols must be 1-D of one length, got shapes {rows.shape} and {cols.shape}")
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    if rows.size == 0:
        return indptr, np.zeros(0, dtype=np.int64)
    lo, hi = int(rows.min()), int(rows.max())
    if lo < 0 or hi >= n_rows:
        raise ValueError(f"row index out of range: {lo if lo < 0 else hi} for {n_rows} rows")
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    c_lo, c_hi = int(cols.min()), int(cols.max())
    span = c_hi - c_lo + 1
    if n_rows * span >= _KEY_LIMIT:
        return indptr, np.lexsort((cols, rows)).astype(np.int64, copy=False)
    # one stable sort of a single key gives lexsort's order in about half its time
    key = rows.astype(np.int64) * span + (cols.astype(np.int64) - c_lo)
    return indptr, np.argsort(key, kind="stable").astype(np.int64, copy=False)


def csr_pairs(rows, cols, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, indices)`` (both int64) of the CSR of :func:`csr_order`: each row's columns
    ascending, duplicates kept. Raises as :func:`csr_order` does."""
    cols = np.asarray(cols, dtype=np.int64)
    indptr, order = csr_order(rows, cols, n_rows)
    return indptr, cols[order]
