"""The sums of PersonalFR's server aggregation (``fedsim.math.active.merge_active``, Eq. 5) and of
FedAvg's mean (``autoencoder.mean_params``) as compiled loops: one source, run compiled by numba (or as plain Python in tests).

``merge_active`` adds each client's active decoder into float64 accumulators: its hidden layers
whole, its output rows into the rows of its items. In NumPy every client costs a temporary for
``w * slice`` and a gather-add-scatter for the rows (about 100 us a client of one user, a tenth of
a Table IV round). These loops do the same operations on each element, in the same order and
precision (``w * x`` rounded in float64, then the add; no fast-math), so the merged decoder is
bit-identical (``tests/test_math_autoencoder.py``).
"""

from __future__ import annotations

import sys

__all__ = ["add_scaled", "add_rows", "add_each", "compiled", "python"]


def add_scaled(acc, x, w):
    """``acc += w * x`` (1-D; ``acc`` float64)."""
    for i in range(acc.shape[0]):
        acc[i] += w * x[i]


def add_rows(acc_w, acc_b, weight, pos, W, b, w):
    """``acc_w[pos] += w * W``, ``acc_b[pos] += w * b`` and ``weight[pos] += w`` for distinct ``pos``
    (row ``r`` of ``W`` and entry ``r`` of ``b`` go to row ``pos[r]``)."""
    for r in range(pos.shape[0]):
        p = pos[r]
        for j in range(W.shape[1]):
            acc_w[p, j] += w * W[r, j]
        acc_b[p] += w * b[r]
        weight[p] += w


def add_each(acc, a, b, c, d, n):
    """``acc += a``, then ``+= b``, ``+= c``, ``+= d`` (the first ``n`` of them, 1 to 4; 1-D, ``acc``
    float64, each add rounded in float64 as NumPy's ``acc += x`` does): up to four models of a mean
    added in one pass, the running sum of each element kept in a register between them (FedAvg's
    mean reads its 94 updates once, not the accumulator 94 times)."""
    for i in range(acc.shape[0]):
        s = acc[i] + a[i]
        if n > 1:
            s = s + b[i]
        if n > 2:
            s = s + c[i]
        if n > 3:
            s = s + d[i]
        acc[i] = s


_KERNELS = ("add_scaled", "add_rows", "add_each")


def compiled():
    """The numba-compiled kernels, or None when numba cannot be used (``merge_active`` then runs its
    NumPy expressions)."""
    from .jit import compiled_copy

    got = compiled_copy(__name__, __file__, _KERNELS)
    return None if isinstance(got, str) else got


def python():
    """This module: the kernels as plain Python (slow; for tests)."""
    return sys.modules[__name__]
