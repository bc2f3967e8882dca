"""One local step of the two-layer-encoder autoencoder on a single user, fused: forward pass,
masked loss, backward pass, gradient-norm clipping and the SGD update, in one compiled call.

With one user per client (PersonalFR's Table IV: local batch 1) a local step is a handful of
matrix-vector products over a model of about 100,000 parameters, and NumPy spends most of the
step in the overhead of the ~60 array operations that ``ae.loss_and_grads``, ``optim.clip_coef``
and ``optim.sgd_step`` make of it. :func:`step1` does the same arithmetic in loops: the weight
gradients (outer products) are never stored, each weight's gradient, decay, momentum and update
are computed in the one pass that writes it, and the clipping norm of an outer product
``g a^T`` is taken as ``|g|^2 |a|^2`` (exact in real arithmetic).

Same rule as the NumPy path (``tests/test_math_ae_kernels.py`` checks them against each other),
not the same bits: the products are summed in another order (the matrix-vector products are
compiled with re-association allowed so that they vectorise, :data:`FASTMATH`), the clipping
norm is computed in float64 from the factors, and ``exp``/``tanh`` are the compiler's. The
elementwise update is ``optim_kernels.sgd_update``'s, operation for operation.

Batches of users (:func:`stepb`, :func:`stepsb`) compute the output layer only where the loss mask
is set (the loss reads nothing else and the gradient is zero there), and :func:`predict_entries`
gives the model's outputs at chosen entries (each user's test items, for the evaluations).

Layout: ``W1`` (``h1 x n_in``) may be C- or Fortran-ordered (a cut encoder's gathered columns are
Fortran-ordered; ``w1_by_column`` says which loops to use); the other weights are C-ordered.
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["step1", "steps1", "stepb", "stepsb", "predict_entries", "matvec", "FASTMATH", "compiled", "python"]

# kernels compiled with re-association allowed (vectorised sums); the others are compiled without
# fast-math, so that their elementwise arithmetic is rounded exactly as NumPy's
FASTMATH = {k: {"reassoc"} for k in ("matvec", "matmat", "_matmat_masked", "_dot64", "_sq", "_matmat_sparse_input",
                                     "predict_entries")}

# indices into ``par`` (float64)
P_CLIP, P_SCALE, P_DROPOUT = 0, 1, 2
# indices into ``pt`` (an array of the weights' dtype: the values the arithmetic uses, rounded to it)
T_LR, T_MOMENTUM, T_WD, T_ONE, T_ZERO, T_LOSS_SCALE, T_COEF, T_KEEP = 0, 1, 2, 3, 4, 5, 6, 7


def matvec(W, a, b, out, zero):
    """``out = W @ a + b`` for a C-ordered ``W``, each row's sum in any order (``zero``: 0 of the
    arrays' dtype)."""
    for i in range(W.shape[0]):
        s = zero
        for j in range(W.shape[1]):
            s += W[i, j] * a[j]
        out[i] = s + b[i]


def _matvec_by_column(W, a, b, out):
    """``out = W @ a + b`` for a Fortran-ordered ``W``: columns added in order (zero inputs skipped)."""
    for i in range(W.shape[0]):
        out[i] = 0
    for j in range(W.shape[1]):
        aj = a[j]
        if aj != 0:
            for i in range(W.shape[0]):
                out[i] += W[i, j] * aj
    for i in range(W.shape[0]):
        out[i] += b[i]


def _t_matvec(W, g, out):
    """``out = W.T @ g`` for a C-ordered ``W``: rows added in order."""
    for j in range(W.shape[1]):
        out[j] = 0
    for i in range(W.shape[0]):
        gi = g[i]
        for j in range(W.shape[1]):
            out[j] += W[i, j] * gi


def _sgd(p, x, bb, s, wd, mu, lr, scale, decay, momentum, nesterov):
    """``optim_kernels.sgd_update``'s rule for one element: parameter ``p``, gradient ``x``, momentum
    ``bb``; returns the new parameter and momentum."""
    if scale:
        x = x * s
    d = x
    if decay:
        d = p * wd
        d = d + x
    if momentum:
        bb = bb * mu
        bb = bb + d
        if nesterov:
            n = bb * mu
            d = n + d
        else:
            d = bb
    d = d * lr
    return p - d, bb


def _update(p, buf, g, a, s, wd, mu, lr, scale, decay, momentum, nesterov):
    """The SGD step of the weight ``p`` (C order) whose gradient is the outer product ``g a^T``:
    :func:`_sgd` per element with the gradient computed in place."""
    for i in range(p.shape[0]):
        gi = g[i]
        for j in range(p.shape[1]):
            p[i, j], bb = _sgd(p[i, j], gi * a[j], buf[i, j], s, wd, mu, lr, scale, decay, momentum, nesterov)
            if momentum:
                buf[i, j] = bb


def _update_by_column(p, buf, g, a, s, wd, mu, lr, scale, decay, momentum, nesterov):
    """:func:`_update` for a Fortran-ordered ``p`` (and ``buf``): column by column."""
    for j in range(p.shape[1]):
        aj = a[j]
        for i in range(p.shape[0]):
            p[i, j], bb = _sgd(p[i, j], g[i] * aj, buf[i, j], s, wd, mu, lr, scale, decay, momentum, nesterov)
            if momentum:
                buf[i, j] = bb


def _update_bias(p, buf, g, s, wd, mu, lr, scale, decay, momentum, nesterov):
    """The SGD step of the bias ``p`` whose gradient is ``g``."""
    for i in range(p.shape[0]):
        p[i], bb = _sgd(p[i], g[i], buf[i], s, wd, mu, lr, scale, decay, momentum, nesterov)
        if momentum:
            buf[i] = bb


def _sq(v):
    """Sum of squares of ``v`` in float64."""
    s = 0.0
    for i in range(v.shape[0]):
        s += np.float64(v[i]) * np.float64(v[i])
    return s


def _scalars(pt, par):
    """The step's scalars: learning rate, momentum, weight decay, 1 and 0 and the loss gradient's
    scale (from ``pt``, in the weights' dtype) and the loss scale (from ``par``, float64)."""
    return pt[T_LR], pt[T_MOMENTUM], pt[T_WD], pt[T_ONE], pt[T_ZERO], pt[T_LOSS_SCALE], par[P_SCALE]


def _loss_grad(z, y, mask, g, gscale, bce, one, zero):
    """The masked loss of the output row ``z`` (float64, not yet scaled) and its gradient, times
    ``gscale``, written to ``g`` (which may be ``z`` itself; zero off the mask): cross-entropy on
    logits with ``bce``, else squared error."""
    value = 0.0
    if bce:
        for i in range(z.shape[0]):
            if mask[i] == 0:
                g[i] = zero
                continue
            zi = z[i]
            e = np.exp(-abs(zi))
            sig = one / (one + e) if zi >= zero else e / (one + e)
            value += np.float64(max(zi, zero) - y[i] * zi + np.log1p(e))
            g[i] = (sig - y[i]) * mask[i] * gscale
    else:
        for i in range(z.shape[0]):
            if mask[i] == 0:
                g[i] = zero
                continue
            diff = (z[i] - y[i]) * mask[i]
            value += np.float64(diff * diff)
            g[i] = diff * gscale
    return value


def step1(W1, b1, W2, b2, W3, b3, W4, b4, M1, m1, M2, m2, M3, m3, M4, m4, x, y, mask, keep, par, pt,
          w1_by_column, bce, dropout, clip, decay, momentum, nesterov):
    """One SGD step on one user: ``x`` (input row), ``y`` (target row) and ``mask`` (1.0 where the
    target is observed, else 0.0) over the model ``W1, b1 .. W4, b4`` (encoder ``tanh(W2 tanh(W1 x
    + b1) + b2)``, dropout ``keep`` on that code when ``dropout``, decoder ``W4 tanh(W3 c + b3) +
    b4``), updated in place with the momentum buffers ``M1, m1 .. M4, m4`` (ignored without
    ``momentum``). ``par`` (float64): the clipping norm (used when ``clip``) and the loss scale
    (1 / number of observed entries; 0 when there are none). ``pt`` (the weights' dtype, as
    ``optim.sgd_step`` rounds its scalars): learning rate, momentum, weight decay, 1, 0, the loss
    gradient's scale (2 x loss scale for squared error, the loss scale for cross-entropy), a slot
    the clipping coefficient is rounded in, and the dropout's keep scale (``steps1``). Loss: squared
    error, or cross-entropy on logits with ``bce``. Returns the loss (float64, already scaled, as ``ae.loss_and_grads`` returns it)
    and whether the gradient was clipped."""
    lr, mu, wd, one, zero, gscale, scale = _scalars(pt, par)
    h1 = np.empty(W1.shape[0], dtype=W2.dtype)
    h2 = np.empty(W2.shape[0], dtype=W2.dtype)
    h3 = np.empty(W3.shape[0], dtype=W2.dtype)
    z = np.empty(W4.shape[0], dtype=W2.dtype)
    # forward
    if w1_by_column:
        _matvec_by_column(W1, x, b1, h1)
    else:
        matvec(W1, x, b1, h1, zero)
    for i in range(h1.shape[0]):
        h1[i] = np.tanh(h1[i])
    matvec(W2, h1, b2, h2, zero)
    for i in range(h2.shape[0]):
        h2[i] = np.tanh(h2[i])
    code = h2
    if dropout:
        code = np.empty_like(h2)
        for i in range(h2.shape[0]):
            code[i] = h2[i] * keep[i]
    matvec(W3, code, b3, h3, zero)
    for i in range(h3.shape[0]):
        h3[i] = np.tanh(h3[i])
    matvec(W4, h3, b4, z, zero)
    # loss and its gradient with respect to the output (zero off the mask)
    g4 = np.empty_like(z)
    value = _loss_grad(z, y, mask, g4, gscale, bce, one, zero) * scale
    # backward: the gradient at each layer's pre-activation
    g3 = np.empty_like(h3)
    _t_matvec(W4, g4, g3)
    for i in range(g3.shape[0]):
        g3[i] = g3[i] * (one - h3[i] * h3[i])
    g2 = np.empty_like(h2)
    _t_matvec(W3, g3, g2)
    if dropout:
        for i in range(g2.shape[0]):
            g2[i] = g2[i] * keep[i]
    for i in range(g2.shape[0]):
        g2[i] = g2[i] * (one - h2[i] * h2[i])
    g1 = np.empty_like(h1)
    _t_matvec(W2, g2, g1)
    for i in range(g1.shape[0]):
        g1[i] = g1[i] * (one - h1[i] * h1[i])
    # clipping: |g a^T|^2 = |g|^2 |a|^2 for each weight, plus the biases
    coef = one
    use_scale = False
    if clip:
        s4, s3, s2_, s1 = _sq(g4), _sq(g3), _sq(g2), _sq(g1)
        total = s4 * (_sq(h3) + 1.0) + s3 * (_sq(code) + 1.0) + s2_ * (_sq(h1) + 1.0) + s1 * (_sq(x) + 1.0)
        c = par[P_CLIP] / (np.sqrt(total) + 1e-6)
        if c < 1.0:
            pt[T_COEF] = c  # rounded to the weights' dtype, as sgd_step's grad_scale is
            coef = pt[T_COEF]
            use_scale = True
    # the updates (each weight's gradient read off its factors while it is written)
    if w1_by_column:
        _update_by_column(W1, M1, g1, x, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    else:
        _update(W1, M1, g1, x, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    _update_bias(b1, m1, g1, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    _update(W2, M2, g2, h1, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    _update_bias(b2, m2, g2, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    _update(W3, M3, g3, code, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    _update_bias(b3, m3, g3, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    _update(W4, M4, g4, h3, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    _update_bias(b4, m4, g4, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    return value, use_scale


def steps1(W1, b1, W2, b2, W3, b3, W4, b4, M1, m1, M2, m2, M3, m3, M4, m4, X, Y, masks, scales, rows, draws,
           par, pt, w1_by_column, bce, dropout, clip, decay, momentum, nesterov, losses, clipped):
    """:func:`step1` on the rows ``rows[s]`` of ``X``, ``Y`` and ``masks`` for s = 0, 1, ... in turn
    (one call for a client's whole local training when every batch is one user). ``scales[r]``:
    row ``r``'s loss scale; ``draws[s]``: step ``s``'s uniform draws for the dropout mask (a unit is
    kept, scaled by ``pt[T_KEEP]``, where the draw is at least ``par[P_DROPOUT]``: what ``ae`` does
    with the same draws). Writes each step's loss and whether it was clipped into ``losses`` and
    ``clipped``."""
    keep = np.empty(W2.shape[0], dtype=W2.dtype)
    for s in range(rows.shape[0]):
        r = rows[s]
        par[P_SCALE] = scales[r]
        pt[T_LOSS_SCALE] = scales[r] if bce else 2.0 * scales[r]
        if dropout:
            for i in range(keep.shape[0]):
                keep[i] = pt[T_KEEP] if draws[s, i] >= par[P_DROPOUT] else pt[T_ZERO]
        v, c = step1(W1, b1, W2, b2, W3, b3, W4, b4, M1, m1, M2, m2, M3, m3, M4, m4, X[r], Y[r], masks[r], keep,
                     par, pt, w1_by_column, bce, dropout, clip, decay, momentum, nesterov)
        losses[s] = v
        clipped[s] = c



# ---------------------------------------------------------------------------------------------
# A batch of users (local batch B > 1: PersonalFR's Table III). The same step on the rows of a
# batch: each weight is read once per pass for all the rows, the gradient of a weight is the sum
# over the rows of their outer products (rows added in order), computed in the pass that writes
# it, and the clipping norm of that sum is taken from the rows' Gram matrices.


def matmat(W, A, b, out, zero):
    """``out[r] = W @ A[r] + b`` for every row ``r`` of ``A`` (``W`` C-ordered): each row of ``W``
    read once for all the rows of ``A``, each sum in any order (``zero``: 0 of the arrays' dtype)."""
    for i in range(W.shape[0]):
        for r in range(A.shape[0]):
            s = zero
            for j in range(W.shape[1]):
                s += W[i, j] * A[r, j]
            out[r, i] = s + b[i]


def _matmat_masked(W, A, b, out, zero, masks, rows):
    """:func:`matmat` computing only the entries the loss reads: ``out[r, i]`` where
    ``masks[rows[r], i]`` is not zero, the others set to zero (each computed sum is
    :func:`matmat`'s, the same loop)."""
    for i in range(W.shape[0]):
        for r in range(A.shape[0]):
            if masks[rows[r], i] != 0:
                s = zero
                for j in range(W.shape[1]):
                    s += W[i, j] * A[r, j]
                out[r, i] = s + b[i]
            else:
                out[r, i] = zero


def _matmat_by_column(W, A, b, out):
    """:func:`matmat` for a Fortran-ordered ``W``: columns added in order (zero inputs skipped)."""
    for r in range(A.shape[0]):
        for i in range(W.shape[0]):
            out[r, i] = 0
    for j in range(W.shape[1]):
        for r in range(A.shape[0]):
            a = A[r, j]
            if a != 0:
                for i in range(W.shape[0]):
                    out[r, i] += W[i, j] * a
    for r in range(A.shape[0]):
        for i in range(W.shape[0]):
            out[r, i] += b[i]


def _t_matmat(W, G, out):
    """``out[r] = W.T @ G[r]`` for every row ``r`` of ``G`` (``W`` C-ordered): rows of ``W`` added
    in order."""
    for r in range(G.shape[0]):
        for j in range(W.shape[1]):
            out[r, j] = 0
    for i in range(W.shape[0]):
        for r in range(G.shape[0]):
            gi = G[r, i]
            if gi != 0:  # (the output layer's gradient is zero off the loss mask)
                for j in range(W.shape[1]):
                    out[r, j] += W[i, j] * gi


def _update_rows(p, buf, G, A, tmp, s, wd, mu, lr, scale, decay, momentum, nesterov):
    """The SGD step of the weight ``p`` (C order) whose gradient is ``sum_r G[r] A[r]^T`` (rows added
    in order into ``tmp``, one row of ``p`` at a time): :func:`_sgd` per element."""
    for i in range(p.shape[0]):
        g0 = G[0, i]
        for j in range(p.shape[1]):
            tmp[j] = g0 * A[0, j]
        for r in range(1, G.shape[0]):
            gi = G[r, i]
            if gi != 0:
                for j in range(p.shape[1]):
                    tmp[j] += gi * A[r, j]
        for j in range(p.shape[1]):
            p[i, j], bb = _sgd(p[i, j], tmp[j], buf[i, j], s, wd, mu, lr, scale, decay, momentum, nesterov)
            if momentum:
                buf[i, j] = bb


def _update_rows_by_column(p, buf, G, A, tmp, s, wd, mu, lr, scale, decay, momentum, nesterov):
    """:func:`_update_rows` for a Fortran-ordered ``p`` (and ``buf``): column by column (rows whose
    input is zero in that column skipped after the first)."""
    for j in range(p.shape[1]):
        a0 = A[0, j]
        for i in range(p.shape[0]):
            tmp[i] = G[0, i] * a0
        for r in range(1, G.shape[0]):
            a = A[r, j]
            if a != 0:
                for i in range(p.shape[0]):
                    tmp[i] += G[r, i] * a
        for i in range(p.shape[0]):
            p[i, j], bb = _sgd(p[i, j], tmp[i], buf[i, j], s, wd, mu, lr, scale, decay, momentum, nesterov)
            if momentum:
                buf[i, j] = bb


def _update_bias_rows(p, buf, G, s, wd, mu, lr, scale, decay, momentum, nesterov):
    """The SGD step of the bias ``p`` whose gradient is ``sum_r G[r]`` (rows added in order)."""
    for i in range(p.shape[0]):
        x = G[0, i]
        for r in range(1, G.shape[0]):
            x += G[r, i]
        p[i], bb = _sgd(p[i], x, buf[i], s, wd, mu, lr, scale, decay, momentum, nesterov)
        if momentum:
            buf[i] = bb


def _tanh_rows(H):
    """``H = tanh(H)`` in place (a layer's activations, row by row)."""
    for k in range(H.shape[0]):
        for i in range(H.shape[1]):
            H[k, i] = np.tanh(H[k, i])


def _dot64(u, v):
    """``u . v`` in float64."""
    s = 0.0
    for i in range(u.shape[0]):
        s += np.float64(u[i]) * np.float64(v[i])
    return s


def _gram_sq(G, A):
    """``|sum_r G[r] A[r]^T|^2 + |sum_r G[r]|^2`` (a weight's and its bias's gradient, squared norm)
    from the rows: ``sum_{r, q} (G[r] . G[q]) (A[r] . A[q] + 1)``, in float64."""
    total = 0.0
    for r in range(G.shape[0]):
        for q in range(r, G.shape[0]):
            t = _dot64(G[r], G[q]) * (_dot64(A[r], A[q]) + 1.0)
            total += t if q == r else 2.0 * t
    return total


def stepb(W1, b1, W2, b2, W3, b3, W4, b4, M1, m1, M2, m2, M3, m3, M4, m4, X, Y, masks, rows, keep, par, pt,
          w1_by_column, bce, dropout, clip, decay, momentum, nesterov):
    """One SGD step on the batch of users ``rows`` (row indices into ``X``, ``Y``, ``masks``, in the
    order ``ae.loss_and_grads`` sees them): :func:`step1`'s arithmetic for a batch. ``keep[k]``: row
    ``k``'s dropout mask (scaled); ``par[P_SCALE]``: the batch's loss scale (1 / observed entries
    in the batch). Returns the batch's loss and whether the gradient was clipped. On a batch of one
    it computes what :func:`step1` computes."""
    lr, mu, wd, one, zero, gscale, scale = _scalars(pt, par)
    dt = W2.dtype
    B = rows.shape[0]
    XB = np.empty((B, X.shape[1]), dtype=dt)
    for k in range(B):
        XB[k] = X[rows[k]]
    H1 = np.empty((B, W1.shape[0]), dtype=dt)
    H2 = np.empty((B, W2.shape[0]), dtype=dt)
    H3 = np.empty((B, W3.shape[0]), dtype=dt)
    G4 = np.empty((B, W4.shape[0]), dtype=dt)  # the output first, then its gradient in place
    # forward
    if w1_by_column:
        _matmat_by_column(W1, XB, b1, H1)
    else:
        matmat(W1, XB, b1, H1, zero)
    _tanh_rows(H1)
    matmat(W2, H1, b2, H2, zero)
    _tanh_rows(H2)
    code = H2
    if dropout:
        code = np.empty_like(H2)
        for k in range(B):
            for i in range(H2.shape[1]):
                code[k, i] = H2[k, i] * keep[k, i]
    matmat(W3, code, b3, H3, zero)
    _tanh_rows(H3)
    _matmat_masked(W4, H3, b4, G4, zero, masks, rows)  # (off the mask the loss reads no output)
    # loss and its gradient with respect to the output (zero off the mask), row by row in place
    value = 0.0
    for k in range(B):
        value += _loss_grad(G4[k], Y[rows[k]], masks[rows[k]], G4[k], gscale, bce, one, zero)
    value *= scale
    # backward: the gradient at each layer's pre-activation
    G3 = np.empty_like(H3)
    _t_matmat(W4, G4, G3)
    for k in range(B):
        for i in range(G3.shape[1]):
            G3[k, i] = G3[k, i] * (one - H3[k, i] * H3[k, i])
    G2 = np.empty_like(H2)
    _t_matmat(W3, G3, G2)
    if dropout:
        for k in range(B):
            for i in range(G2.shape[1]):
                G2[k, i] = G2[k, i] * keep[k, i]
    for k in range(B):
        for i in range(G2.shape[1]):
            G2[k, i] = G2[k, i] * (one - H2[k, i] * H2[k, i])
    G1 = np.empty_like(H1)
    _t_matmat(W2, G2, G1)
    for k in range(B):
        for i in range(G1.shape[1]):
            G1[k, i] = G1[k, i] * (one - H1[k, i] * H1[k, i])
    # clipping: each weight's gradient norm from the rows' Gram matrices
    coef = one
    use_scale = False
    if clip:
        total = _gram_sq(G4, H3) + _gram_sq(G3, code) + _gram_sq(G2, H1) + _gram_sq(G1, XB)
        c = par[P_CLIP] / (np.sqrt(total) + 1e-6)
        if c < 1.0:
            pt[T_COEF] = c  # rounded to the weights' dtype, as sgd_step's grad_scale is
            coef = pt[T_COEF]
            use_scale = True
    # the updates (each weight's gradient summed over the rows while it is written)
    tmp = np.empty(max(W1.shape[0], W1.shape[1], W2.shape[1], W3.shape[1], W4.shape[1]), dtype=dt)
    if w1_by_column:
        _update_rows_by_column(W1, M1, G1, XB, tmp, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    else:
        _update_rows(W1, M1, G1, XB, tmp, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    _update_bias_rows(b1, m1, G1, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    _update_rows(W2, M2, G2, H1, tmp, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    _update_bias_rows(b2, m2, G2, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    _update_rows(W3, M3, G3, code, tmp, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    _update_bias_rows(b3, m3, G3, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    _update_rows(W4, M4, G4, H3, tmp, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    _update_bias_rows(b4, m4, G4, coef, wd, mu, lr, use_scale, decay, momentum, nesterov)
    return value, use_scale


def stepsb(W1, b1, W2, b2, W3, b3, W4, b4, M1, m1, M2, m2, M3, m3, M4, m4, X, Y, masks, starts, rows, scales,
           draws, par, pt, w1_by_column, bce, dropout, clip, decay, momentum, nesterov, losses, clipped):
    """:func:`stepb` on the batches ``rows[starts[s]:starts[s + 1]]`` for s = 0, 1, ... in turn (a
    client's whole local training in one call). ``scales[s]``: batch ``s``'s loss scale;
    ``draws[starts[s] + k]``: the uniform draws of the dropout mask of that batch's row ``k`` (kept,
    scaled by ``pt[T_KEEP]``, where the draw is at least ``par[P_DROPOUT]``: what ``ae`` does with the
    same draws). Writes each step's loss and whether it was clipped into ``losses`` and ``clipped``."""
    widest = 1
    for s in range(starts.shape[0] - 1):
        widest = max(widest, starts[s + 1] - starts[s])
    keep = np.empty((widest, W2.shape[0]), dtype=W2.dtype)
    for s in range(starts.shape[0] - 1):
        lo = starts[s]
        hi = starts[s + 1]
        par[P_SCALE] = scales[s]
        pt[T_LOSS_SCALE] = scales[s] if bce else 2.0 * scales[s]
        if dropout:
            for k in range(hi - lo):
                for i in range(keep.shape[1]):
                    keep[k, i] = pt[T_KEEP] if draws[lo + k, i] >= par[P_DROPOUT] else pt[T_ZERO]
        v, c = stepb(W1, b1, W2, b2, W3, b3, W4, b4, M1, m1, M2, m2, M3, m3, M4, m4, X, Y, masks, rows[lo:hi],
                     keep[:hi - lo], par, pt, w1_by_column, bce, dropout, clip, decay, momentum, nesterov)
        losses[s] = v
        clipped[s] = c


# ---------------------------------------------------------------------------------------------
# Prediction of chosen entries (the federated evaluations: each user's test items only).


def _matmat_sparse_input(W, nz_ptr, nz_idx, nz_val, b, out):
    """``out[r] = W @ x_r + b`` for a C-ordered ``W`` and rows ``x_r`` given by their non-zeros
    (columns ``nz_idx[nz_ptr[r]:nz_ptr[r + 1]]``, values ``nz_val[...]``): four rows of ``W`` at a
    time (four independent sums sharing each non-zero's loads), each sum in the non-zeros' order."""
    h = W.shape[0]
    zero = W[0, 0] * 0
    for i0 in range(0, h - h % 4, 4):
        for r in range(out.shape[0]):
            s0 = s1 = s2 = s3 = zero
            for t in range(nz_ptr[r], nz_ptr[r + 1]):
                j = nz_idx[t]
                v = nz_val[t]
                s0 += W[i0, j] * v
                s1 += W[i0 + 1, j] * v
                s2 += W[i0 + 2, j] * v
                s3 += W[i0 + 3, j] * v
            out[r, i0] = s0 + b[i0]
            out[r, i0 + 1] = s1 + b[i0 + 1]
            out[r, i0 + 2] = s2 + b[i0 + 2]
            out[r, i0 + 3] = s3 + b[i0 + 3]
    for i in range(h - h % 4, h):
        for r in range(out.shape[0]):
            s = zero
            for t in range(nz_ptr[r], nz_ptr[r + 1]):
                s += W[i, nz_idx[t]] * nz_val[t]
            out[r, i] = s + b[i]


def predict_entries(W1, b1, W2, b2, W3, b3, W4, b4, X, nz_ptr, nz_idx, nz_val, w1_by_column, ent_ptr, ent_idx,
                    out):
    """The model's outputs (no dropout) at the entries ``ent_idx[ent_ptr[r]:ent_ptr[r + 1]]`` (output
    rows) of each input row ``X[r]``, written to ``out`` in that order. ``nz_ptr``, ``nz_idx``,
    ``nz_val``: each row's non-zero input columns and values (read when ``W1`` is C-ordered; a
    Fortran-ordered ``W1``, ``w1_by_column``, is read column by column, zero inputs skipped)."""
    dt = W2.dtype
    zero = W2[0, 0] * 0
    B = X.shape[0]
    H1 = np.empty((B, W1.shape[0]), dtype=dt)
    H2 = np.empty((B, W2.shape[0]), dtype=dt)
    H3 = np.empty((B, W3.shape[0]), dtype=dt)
    if w1_by_column:
        _matmat_by_column(W1, X, b1, H1)
    else:
        _matmat_sparse_input(W1, nz_ptr, nz_idx, nz_val, b1, H1)
    _tanh_rows(H1)
    matmat(W2, H1, b2, H2, zero)
    _tanh_rows(H2)
    matmat(W3, H2, b3, H3, zero)
    _tanh_rows(H3)
    for r in range(B):
        for t in range(ent_ptr[r], ent_ptr[r + 1]):
            i = ent_idx[t]
            s = zero
            for j in range(W4.shape[1]):
                s += W4[i, j] * H3[r, j]
            out[t] = s + b4[i]


_KERNELS = ("matvec", "_matvec_by_column", "_t_matvec", "_sgd", "_update", "_update_by_column", "_update_bias",
            "_sq", "_scalars", "_loss_grad", "step1", "steps1", "matmat", "_matmat_masked", "_matmat_by_column",
            "_t_matmat", "_update_rows", "_update_rows_by_column", "_update_bias_rows", "_tanh_rows", "_dot64",
            "_gram_sq", "stepb", "stepsb", "_matmat_sparse_input", "predict_entries")


def compiled():
    """The numba-compiled kernels, or None when numba cannot be used."""
    from .jit import compiled_copy

    got = compiled_copy(__name__, __file__, _KERNELS, options={k: {"fastmath": v} for k, v in FASTMATH.items()})
    return None if isinstance(got, str) else got


def python():
    """This module: the kernels as plain Python (slow; for tests)."""
    return sys.modules[__name__]
