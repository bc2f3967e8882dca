"""Sparse products, masked loss and Adam update of the Joint baseline's autoencoder step: one
source, run compiled by numba (or as plain Python in tests).

The Joint baseline (``ae_train.train_joint``) trains one autoencoder on batches of 500 users' rows
with Adam. The input rows are sparse (a user's training ratings: about 5% of the items on
MovieLens-100K) and the loss reads the output only where the loss mask is set (the same rated
entries). The NumPy step nevertheless computes the first and the last layer densely: the input
layer's product and weight gradient over every item, the output layer, the loss and its gradient
at every entry of the batch, and the output layer's backward products over a gradient that is zero
off the mask. These kernels compute only the terms that are not known to be zero:

- :func:`csr_matmul`: ``X[rows] @ WT`` with ``X`` in CSR form (the input layer, ``WT = W1.T``);
- :func:`csr_t_matmul_add`: ``out += X[rows].T @ G`` (the input layer's weight gradient, transposed);
- :func:`masked_matmul`: ``H @ W.T + b`` at the masked entries only (the output layer, a sampled
  product), one value per mask entry;
- :func:`masked_loss_grad`: the masked loss (squared error or cross-entropy on logits) and its
  gradient at those entries, in the arithmetic of ``autoencoder``'s NumPy loss;
- :func:`masked_backward`: ``G @ W``, ``G.T @ H`` and the column sums of ``G`` for a gradient ``G``
  given at the masked entries (the output layer's backward products);
- :func:`sumsq` and :func:`adam_update`: the clipping norm's sum of squares and
  ``optim.adam_step``'s rule, one pass over the flat parameters.

Entries of a CSR matrix are indexed globally: row ``u`` owns ``ptr[u]:ptr[u + 1]``, and values
computed per mask entry (outputs, gradients) live in arrays of the mask's length at the entry's
own index, so a batch (``rows``, any subset of the rows) needs no compaction.

Same rule as the NumPy step, not the same bits: the products are summed in another order (only
their non-zero terms, row by row) and the clipping norm is added up in float64. :func:`masked_matmul`,
:func:`sumsq` are compiled with re-association allowed (:data:`FASTMATH`: vectorised dot products
and sums). :func:`masked_loss_grad` and :func:`adam_update` do NumPy's operations element by element
in its order and precision (``exp``/``log1p`` are the compiler's); :func:`adam_update` given the same
gradient and scalars gives ``optim.adam_step``'s bits. All are compiled with numpy's error model (a
division by zero gives inf or nan, as in NumPy, and the loops vectorise).

Measured on MovieLens-100K (943 x 1682, batch 500, 40 epochs, one BLAS thread, CPU time, median of
3 pairs run side by side): explicit 3.84 -> 1.42 s, implicit 5.68 -> 1.57 s. What is left of a step
(~16 ms) is about a third NumPy's dense middle layers and ``tanh``, the rest these kernels (the
output layer's backward products the largest, ~3.5 ms).
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["csr_matmul", "csr_t_matmul_add", "masked_matmul", "masked_loss_grad", "masked_backward", "sumsq",
           "adam_update", "FASTMATH", "A_WD", "A_B1", "A_1MB1", "A_B2", "A_1MB2", "A_BC2", "A_EPS", "A_STEP",
           "A_COEF", "L_ONE", "L_ZERO", "L_GSCALE", "compiled", "python"]

# kernels compiled with re-association allowed (vectorised sums); the others without fast-math
FASTMATH = {"masked_matmul": {"reassoc"}, "sumsq": {"reassoc"}}

# indices into adam_update's ``pt`` (an array of the parameters' dtype: the scalars as
# optim.adam_step's NumPy expressions round them)
A_WD, A_B1, A_1MB1, A_B2, A_1MB2, A_BC2, A_EPS, A_STEP, A_COEF = range(9)
# indices into masked_loss_grad's ``pt`` (the outputs' dtype)
L_ONE, L_ZERO, L_GSCALE = range(3)


def csr_matmul(ptr, idx, val, rows, WT, out):
    """``out[k] = sum_e val[e] * WT[idx[e]]`` over the entries ``e`` of row ``rows[k]`` (entries
    ``ptr[rows[k]]:ptr[rows[k] + 1]``): ``out = X[rows] @ WT`` for the CSR matrix ``X = (ptr, idx,
    val)``. ``WT`` C-ordered, ``out`` of shape ``(len(rows), WT.shape[1])``; entries added in order."""
    n = WT.shape[1]
    for k in range(rows.shape[0]):
        for j in range(n):
            out[k, j] = 0
        r = rows[k]
        for e in range(ptr[r], ptr[r + 1]):
            a = val[e]
            w = WT[idx[e]]
            for j in range(n):
                out[k, j] += a * w[j]


def csr_t_matmul_add(ptr, idx, val, rows, G, out):
    """``out[idx[e]] += val[e] * G[k]`` over the entries ``e`` of row ``rows[k]``, ``k`` in order:
    ``out += X[rows].T @ G`` for the CSR matrix ``X = (ptr, idx, val)`` (``out`` C-ordered)."""
    n = G.shape[1]
    for k in range(rows.shape[0]):
        r = rows[k]
        g = G[k]
        for e in range(ptr[r], ptr[r + 1]):
            a = val[e]
            o = out[idx[e]]
            for j in range(n):
                o[j] += a * g[j]


def masked_matmul(ptr, idx, rows, H, W, b, z, zero):
    """``z[e] = H[k] . W[idx[e]] + b[idx[e]]`` for the entries ``e`` of mask row ``rows[k]``:
    ``(H @ W.T + b)[k, idx[e]]`` at the masked entries only (``z`` of the mask's length; other
    entries untouched). ``W`` C-ordered; ``zero``: 0 of the arrays' dtype."""
    n = H.shape[1]
    for k in range(rows.shape[0]):
        r = rows[k]
        h = H[k]
        for e in range(ptr[r], ptr[r + 1]):
            i = idx[e]
            w = W[i]
            s = zero
            for j in range(n):
                s += h[j] * w[j]
            z[e] = s + b[i]


def masked_loss_grad(ptr, y, rows, z, g, pt, bce):
    """The masked loss of the outputs ``z[e]`` against targets ``y[e]`` over the entries of the mask
    rows ``rows`` (its sum in float64, not scaled) and its gradient ``g[e]`` (times ``pt[L_GSCALE]``):
    with ``bce`` cross-entropy on logits, ``max(z, 0) - y z + log1p(exp(-|z|))`` and gradient
    ``(sigmoid(z) - y) * 1 * gscale``; else squared error ``(z - y)^2`` and gradient
    ``((z - y) * 1) * gscale`` (``gscale`` = 2 / count in the caller). The operations of
    ``autoencoder``'s NumPy loss at a masked entry (mask value 1), in its order and dtype; each
    term is summed in float64 as NumPy sums the masked terms."""
    one = pt[L_ONE]
    zero = pt[L_ZERO]
    gscale = pt[L_GSCALE]
    value = 0.0
    for k in range(rows.shape[0]):
        r = rows[k]
        for e in range(ptr[r], ptr[r + 1]):
            zi = z[e]
            yi = y[e]
            if bce:
                ea = np.exp(-abs(zi))
                sig = one / (one + ea) if zi >= zero else ea / (one + ea)
                value += np.float64(max(zi, zero) - yi * zi + np.log1p(ea))
                g[e] = (sig - yi) * one * gscale
            else:
                diff = (zi - yi) * one
                value += np.float64(diff * diff)
                g[e] = diff * gscale
    return value


def masked_backward(ptr, idx, rows, g, W, H, dH, dW, db):
    """The output layer's backward products for a gradient given at the masked entries (``g[e]``,
    zero elsewhere), ``G`` the dense ``(len(rows), W.shape[0])`` matrix it stands for:
    ``dH = G @ W`` (written), ``dW += G.T @ H`` and ``db += G.sum(axis=0)`` (accumulated; rows
    ``k`` added in order). ``W``, ``dW`` C-ordered."""
    n = W.shape[1]
    for k in range(rows.shape[0]):
        r = rows[k]
        h = H[k]
        d = dH[k]
        for j in range(n):
            d[j] = 0
        for e in range(ptr[r], ptr[r + 1]):
            i = idx[e]
            gi = g[e]
            w = W[i]
            o = dW[i]
            for j in range(n):
                d[j] += gi * w[j]
                o[j] += gi * h[j]
            db[i] += gi


def sumsq(a):
    """The sum of the squares of the flat array ``a``, in float64."""
    s = 0.0
    for i in range(a.shape[0]):
        v = np.float64(a[i])
        s += v * v
    return s


def adam_update(p, g, m, v, pt, scaled, decay):
    """``optim.adam_step``'s update of the flat parameters ``p`` (and moments ``m``, ``v``, all of one
    dtype) for the gradient ``g``, element by element, which then sets ``g`` to zero (ready for the
    next step's accumulation). With ``scaled`` the gradient is first multiplied by ``pt[A_COEF]``
    (clipping, as ``optim.clip_grad_norm``'s ``g *= coef``); with ``decay`` ``g = p * wd + g``; then
    ``m = m * b1 + g * (1 - b1)``, ``v = v * b2 + (g * g) * (1 - b2)`` and
    ``p = p - (m / (sqrt(v) / bc2 + eps)) * step``, every operation rounded to the dtype in that
    order, with the scalars of ``pt`` (``A_*``: already rounded to the dtype, as NumPy rounds a
    Python float against an array)."""
    wd = pt[A_WD]
    b1 = pt[A_B1]
    c1 = pt[A_1MB1]
    b2 = pt[A_B2]
    c2 = pt[A_1MB2]
    bc2 = pt[A_BC2]
    eps = pt[A_EPS]
    step = pt[A_STEP]
    coef = pt[A_COEF]
    for i in range(p.shape[0]):
        gi = g[i]
        g[i] = 0
        if scaled:
            gi = gi * coef
        pi = p[i]
        if decay:
            gi = pi * wd + gi
        mi = m[i] * b1 + gi * c1
        vi = v[i] * b2 + (gi * gi) * c2
        m[i] = mi
        v[i] = vi
        d = np.sqrt(vi) / bc2 + eps
        p[i] = pi - (mi / d) * step


_KERNELS = ("csr_matmul", "csr_t_matmul_add", "masked_matmul", "masked_loss_grad", "masked_backward", "sumsq",
            "adam_update")


def compiled():
    """The numba-compiled kernels, or None when numba cannot be used."""
    from .jit import compiled_copy

    # (numpy's error model: a division by zero gives inf or nan, as in NumPy, instead of a check that
    # stops the loops from vectorising: adam_update is 8x faster)
    options = {k: {"error_model": "numpy", **({"fastmath": FASTMATH[k]} if k in FASTMATH else {})} for k in _KERNELS}
    got = compiled_copy(__name__, __file__, _KERNELS, options=options)
    return None if isinstance(got, str) else got


def python():
    """This module: the kernels as plain Python (slow; for tests)."""
    return sys.modules[__name__]
