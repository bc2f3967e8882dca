"""Sequential (stochastic) FedRec kernels: one source, run as plain Python or compiled by numba.

Everything here is written in the subset of Python that numba compiles (scalar loops over
NumPy arrays). Imported normally, this module *is* the pure-Python fallback. When numba is
importable, :func:`kernels` loads a second copy of this very file under another module name and
replaces every kernel in that copy by its ``numba.njit`` version; the compiled kernels call each
other, the Python ones call each other. Because both run the same operations in the same order
(no fast-math, hence no re-association and no fused multiply-add), they give bit-identical
results in float64 and float32 (tested in ``tests/test_math_fedrec_numba.py``). :func:`kernels`
hands the Python ones out each wrapped in ``np.errstate`` (overflow and invalid values ignored):
on a diverging model they are as silent as the compiled ones.

dtype discipline: every scalar that enters arithmetic is of the array dtype. Scalars are passed
in a parameter vector ``par`` (see ``P_*``) built by :func:`make_par`, so that float32 runs stay
float32 in both backends (numba would promote ``float32 * int`` or ``float32 * python-float``
to float64, NumPy would not).

Kernels (U_u is a length-d row modified in place; V is the client's copy of the item factors and
is only read: the server applies the uploaded gradients after the client's call):

* ``pmf_pass``            sequential SGD of PMF(S) over a list of (item, rating)
* ``pmf_hf_temp``         T_local SGD passes of a throw-away copy of U_u (HF filling, stochastic)
* ``svdpp_rated_pass``    SVD++(S) over the rated items (implicit factors O of the others)
* ``svdpp_sampled_pass``  SVD++(S) over the sampled items
* ``svdpp_hf_temp``       HF local training of copies of U_u and O rows (SVD++)
* ``sgd_client``          one training call of a client: rated pass, filling, sampled pass
* ``stochastic_epoch``    n client calls in the server's order with the server's updates
"""

from __future__ import annotations

import sys

import numpy as np

# Indices into the parameter vector ``par``.
P_LR = 0  # learning rate of U_u (and of the client's O updates)
P_LAM = 1  # lambda
P_C = 2  # 1 - lr * lambda (shrink factor of an O row per step)
P_ONE = 3
P_ZERO = 4
P_ORDER = 5  # 0: the authors' code's update order; 1: the paper's printed Algorithm 5 (see pmf_pass)
P_SIZE = 6

ORDERS = ("code", "paper")


def order_flag(order):
    """0.0 for ``order="code"``, 1.0 for ``"paper"``; ``ValueError`` otherwise."""
    if order not in ORDERS:
        raise ValueError(f"order must be 'code' or 'paper', got {order!r}")
    return 1.0 if order == "paper" else 0.0


_FMAX: dict = {}  # the largest finite value of each float dtype, as a Python float
#: float32's largest finite value: a rate within +-RATE_MAX fits every dtype the kernels take
#: (float32, float64), tested inline (a chained comparison, about 40 ns) on the paths that cast a
#: rate once per message, where even ``in_range``'s call showed in the instruction counts
RATE_MAX = float(np.finfo(np.float32).max)


def in_range(dt, *values) -> bool:
    """Whether every one of ``values`` (Python or NumPy numbers) is finite and within the float
    dtype ``dt``'s range, so that casting it to ``dt`` cannot overflow. The casts of a rate on a
    path taken once per message test this first and enter ``np.errstate`` (about a microsecond,
    enter and exit) only for a value out of range: a rate beyond float32 (``lr = 1e40``, or a
    ``decay`` above 1) becomes inf there, and the run diverges, as the servers check, without
    NumPy's overflow warning from every client. NaN is out of range."""
    m = _FMAX.get(dt)
    if m is None:
        m = _FMAX[dt] = float(np.finfo(dt).max)
    for v in values:
        if not -m <= v <= m:
            return False
    return True


def _rate_into(par, dt, lr, lam) -> None:
    lr_ = dt.type(lr)
    lam_ = dt.type(lam)
    par[P_LR] = lr_
    par[P_LAM] = lam_
    par[P_C] = dt.type(1) - lr_ * lam_


def make_par(lr, lam, dtype, order="code"):
    """Parameter vector for the kernels, every entry of ``dtype`` (``order``: see
    :func:`pmf_pass`)."""
    dt = np.dtype(dtype)
    par = np.empty(P_SIZE, dtype=dt)
    if in_range(dt, lr, lam, lr * lam):
        _rate_into(par, dt, lr, lam)
    else:  # (a rate beyond the dtype is inf: the parameters diverge)
        with np.errstate(over="ignore", invalid="ignore"):
            _rate_into(par, dt, lr, lam)
    par[P_ONE] = dt.type(1)
    par[P_ZERO] = dt.type(0)
    par[P_ORDER] = dt.type(order_flag(order))
    return par


def implicit_norms(n_rated, dtype):
    """``(sqrt(N - 1), sqrt(N), N - 1, N)`` as ``dtype`` values (arrays or scalars).

    ``sqrt`` is taken in float64 and rounded once to ``dtype`` (as the authors' code does with
    ``(float) Math.sqrt``); the per-client and the central paths both use this function.
    """
    n = np.asarray(n_rated, dtype=np.float64)
    nm1 = np.maximum(n - 1.0, 0.0)
    dt = np.dtype(dtype)
    return (
        np.sqrt(nm1).astype(dt),
        np.sqrt(n).astype(dt),
        nm1.astype(dt),
        n.astype(dt),
    )


# --------------------------------------------------------------------------------------------
# PMF


def pmf_pass(U, V, items, ratings, par, grads, off):
    """Sequential SGD over ``items`` in order. U updated after every rating; the item gradient
    of each rating is taken with U *before* that rating's update (as the authors' code does):

        e = r - U.V_i ;  g_i = -e U + lam V_i ;  U <- U - lr (-e V_i + lam U)

    With ``par[P_ORDER]`` set (the paper's Algorithm 5 as printed: lines 4-6 update U_u, then
    compute the item gradient of Eq. 8) the gradient is taken with the *updated* U and its
    recomputed error: U <- U - lr (-e V_i + lam U); e' = r - U.V_i; g_i = -e' U + lam V_i.
    ``grads[off + k]`` receives the gradient of the k-th item.
    """
    lr = par[P_LR]
    lam = par[P_LAM]
    paper = par[P_ORDER] != par[P_ZERO]
    d = U.shape[0]
    for k in range(items.shape[0]):
        i = items[k]
        pred = U[0] * V[i, 0]
        for f in range(1, d):
            pred += U[f] * V[i, f]
        err = ratings[k] - pred
        if paper:
            for f in range(d):
                uf = U[f]
                U[f] = uf - lr * (lam * uf - err * V[i, f])
            pred = U[0] * V[i, 0]
            for f in range(1, d):
                pred += U[f] * V[i, f]
            err = ratings[k] - pred
            for f in range(d):
                grads[off + k, f] = lam * V[i, f] - err * U[f]
            continue
        for f in range(d):
            uf = U[f]
            vf = V[i, f]
            grads[off + k, f] = lam * vf - err * uf
            U[f] = uf - lr * (lam * uf - err * vf)


def pmf_hf_temp(U, V, items, ratings, par, T_local, tU):
    """HF local training (stochastic style): ``tU`` <- U, then T_local SGD passes of tU over the
    rated items (V fixed, nothing uploaded)."""
    lr = par[P_LR]
    lam = par[P_LAM]
    d = U.shape[0]
    for f in range(d):
        tU[f] = U[f]
    for _ in range(T_local):
        for k in range(items.shape[0]):
            i = items[k]
            pred = tU[0] * V[i, 0]
            for f in range(1, d):
                pred += tU[f] * V[i, f]
            err = ratings[k] - pred
            for f in range(d):
                uf = tU[f]
                tU[f] = uf - lr * (lam * uf - err * V[i, f])


# --------------------------------------------------------------------------------------------
# SVD++ (prediction (U_u + Obar_u) . V_i, Obar_u = sum of O over the user's other rated items
# divided by sqrt of their number).
#
# Per rated item i_k the authors' code shrinks-and-shifts the O row of every *other* rated item:
# O_j <- c O_j + w_k with c = 1 - lr lam and w_k = lr err_k V_{i_k} / sqrt(N - 1). Done naively
# that costs O(N^2 d) per pass. Here the affine maps are composed in closed form, O(N d):
# with A_k = sum_{l<k} c^(k-1-l) w_l, item j's value when its own turn comes is
# x_j = c^j O_j + A_j, and after the pass O_j = c^(N-1-j) (x_j - A_{j+1}) + A_N. The running
# sum S = sum_j O_j gives Obar for item k as (S - x_k) / sqrt(N - 1).


def grad_after_step(U, Ou, V, i, y, lam, grads, row):
    """The paper's order in SVD++: item i's gradient with the stepped U and implicit term Ou,
    ``grads[row] = lam V_i - (y - (U + Ou).V_i) (U + Ou)``."""
    d = U.shape[0]
    pred = (U[0] + Ou[0]) * V[i, 0]
    for f in range(1, d):
        pred += (U[f] + Ou[f]) * V[i, f]
    err = y - pred
    for f in range(d):
        grads[row, f] = lam * V[i, f] - err * (U[f] + Ou[f])


def svdpp_rated_pass(U, V, items, ratings, OR, S, par, s1, nm1, grads, off, X, AA, A, Ou):
    """SVD++(S) over the rated items, in order.

    OR: (N, d) the O rows of ``items`` (client's copy); on return they hold the updated rows.
    S: (d,) sum of the OR rows on entry, the (incrementally maintained) sum on return.
    s1 = sqrt(N - 1), nm1 = N - 1 (dtype scalars). X, AA: (N, d) scratch; A, Ou: (d,) scratch.
    With N < 2 there is no implicit term (the authors' code skips it): plain PMF pass.
    ``par[P_ORDER]`` (paper order, by analogy with Algorithm 5, which the paper prints for PMF
    only): the V gradient is taken after the step, with the updated U and Obar.
    """
    N = items.shape[0]
    if N < 2:
        pmf_pass(U, V, items, ratings, par, grads, off)
        return
    lr = par[P_LR]
    lam = par[P_LAM]
    c = par[P_C]
    paper = par[P_ORDER] != par[P_ZERO]
    d = U.shape[0]
    for f in range(d):
        A[f] = par[P_ZERO]
    cp = par[P_ONE]
    for k in range(N):
        i = items[k]
        for f in range(d):
            x = cp * OR[k, f] + A[f]
            X[k, f] = x
            Ou[f] = (S[f] - x) / s1
        pred = (U[0] + Ou[0]) * V[i, 0]
        for f in range(1, d):
            pred += (U[f] + Ou[f]) * V[i, f]
        err = ratings[k] - pred
        for f in range(d):
            uf = U[f]
            vf = V[i, f]
            if not paper:
                grads[off + k, f] = lam * vf - err * (uf + Ou[f])
            U[f] = uf - lr * (lam * uf - err * vf)
            w = lr * err * vf / s1
            x = X[k, f]
            S[f] = c * (S[f] - x) + nm1 * w + x
            A[f] = c * A[f] + w
            AA[k, f] = A[f]
        if paper:
            for f in range(d):
                Ou[f] = (S[f] - X[k, f]) / s1
            grad_after_step(U, Ou, V, i, ratings[k], lam, grads, off + k)
        cp = cp * c
    p = par[P_ONE]
    for k in range(N - 1, -1, -1):
        for f in range(d):
            OR[k, f] = p * (X[k, f] - AA[k, f]) + A[f]
        p = p * c


def svdpp_sampled_pass(U, V, items, ratings, OR, OS, S, par, s, nf, grads, off, B, Ou):
    """SVD++(S) over the sampled items (virtual ratings), in order.

    Obar = S / sqrt(N) (all rated items); each step shrinks-and-shifts every rated O row
    (O_j <- c O_j + w, w = lr err V_i / sqrt(N)) and, as the authors' code does, also the sampled
    item's own row OS[k] (so that the server sees O change for the sampled items too).
    OR: (N, d) rated rows (updated on return), OS: (K, d) sampled rows (updated), S: (d,) sum.
    s = sqrt(N), nf = N (dtype scalars). B, Ou: (d,) scratch.
    """
    N = OR.shape[0]
    if N == 0:
        pmf_pass(U, V, items, ratings, par, grads, off)
        return
    lr = par[P_LR]
    lam = par[P_LAM]
    c = par[P_C]
    paper = par[P_ORDER] != par[P_ZERO]
    d = U.shape[0]
    for f in range(d):
        B[f] = par[P_ZERO]
    a = par[P_ONE]
    for k in range(items.shape[0]):
        i = items[k]
        for f in range(d):
            Ou[f] = S[f] / s
        pred = (U[0] + Ou[0]) * V[i, 0]
        for f in range(1, d):
            pred += (U[f] + Ou[f]) * V[i, f]
        err = ratings[k] - pred
        for f in range(d):
            uf = U[f]
            vf = V[i, f]
            if not paper:
                grads[off + k, f] = lam * vf - err * (uf + Ou[f])
            U[f] = uf - lr * (lam * uf - err * vf)
            w = lr * err * vf / s
            B[f] = c * B[f] + w
            S[f] = c * S[f] + nf * w
            OS[k, f] = c * OS[k, f] + w
        if paper:
            for f in range(d):
                Ou[f] = S[f] / s
            grad_after_step(U, Ou, V, i, ratings[k], lam, grads, off + k)
        a = a * c
    for j in range(N):
        for f in range(d):
            OR[j, f] = a * OR[j, f] + B[f]


def svdpp_hf_temp(U, V, items, ratings, OR, S, par, s1, nf, T_local, tU, tS, B, Ou):
    """HF local training for SVD++(S), on copies: ``tU`` <- U and a virtual copy of the O rows;
    T_local SGD passes over the rated items. As in the authors' code, Obar excludes the current
    item (sqrt(N - 1)) but the local O step moves *every* rated row, the current one included.
    On return ``tS`` holds the sum of the locally trained O rows (the filler uses tS / sqrt(N)).
    """
    N = items.shape[0]
    d = U.shape[0]
    for f in range(d):
        tS[f] = S[f]
    if N < 2:
        pmf_hf_temp(U, V, items, ratings, par, T_local, tU)
        return
    lr = par[P_LR]
    lam = par[P_LAM]
    c = par[P_C]
    for f in range(d):
        tU[f] = U[f]
        B[f] = par[P_ZERO]
    a = par[P_ONE]
    for _ in range(T_local):
        for k in range(N):
            i = items[k]
            for f in range(d):
                Ou[f] = (tS[f] - (a * OR[k, f] + B[f])) / s1
            pred = (tU[0] + Ou[0]) * V[i, 0]
            for f in range(1, d):
                pred += (tU[f] + Ou[f]) * V[i, f]
            err = ratings[k] - pred
            for f in range(d):
                uf = tU[f]
                vf = V[i, f]
                tU[f] = uf - lr * (lam * uf - err * vf)
                w = lr * err * vf / s1
                B[f] = c * B[f] + w
                tS[f] = c * tS[f] + nf * w
            a = a * c


# --------------------------------------------------------------------------------------------
# One client call and one stochastic epoch


def sgd_client(
    U, V, O, rated, ratings, sampled, r_ua, use_hf, T_local, par, s1, s, nm1, nf, implicit,
    grads, odelta,
):
    """One training call of a stochastic client (PMF(S) if not ``implicit``, else SVD++(S)).

    Order, as in the authors' code: SGD over the rated items; then (HF) local training of copies
    starting from the state after that pass; virtual ratings for the sampled items (UA: the
    scalar ``r_ua``; HF: (tU + tS / sqrt(N)) . V_j); SGD over the sampled items.
    U (d,) is updated in place. V, O are read only. Outputs, rows [0, N) rated then [N, N + K)
    sampled: ``grads`` the V gradients, ``odelta`` (SVD++ only) new O row minus downloaded row.

    Returns False, touching nothing, if an item index is outside [-m, m) for the m rows of V
    (and of O), or if V (or O, or an output) is not d = len(U) wide: compiled code reads ``V[i]``
    unchecked (past the end: other memory, silently; a narrower V had its rows read and the
    gradients written past their ends, corrupting the heap) where the Python fallback would
    raise; the caller raises ``IndexError`` or ``ValueError``. The check is
    here, not in a kernel of its own, because this runs once per stochastic exchange and a
    second compiled call would cost as much as the loop.
    """
    N = rated.shape[0]
    K = sampled.shape[0]
    d = U.shape[0]
    m = V.shape[0]
    # item factors narrower than U (or O than V) would be read, and their gradient rows written,
    # past their ends: refused as the indices are (one comparison each, in compiled code)
    if V.shape[1] != d or grads.shape[1] != d or (implicit and (O.shape[1] != d or odelta.shape[1] != d)):
        return False
    if implicit and O.shape[0] < m:
        m = O.shape[0]
    for j in range(N):
        if rated[j] < -m or rated[j] >= m:
            return False
    for j in range(K):
        if sampled[j] < -m or sampled[j] >= m:
            return False
    OR = np.empty((N, d), dtype=V.dtype)
    OS = np.empty((K, d), dtype=V.dtype)
    S = np.empty(d, dtype=V.dtype)
    Ou = np.empty(d, dtype=V.dtype)
    B = np.empty(d, dtype=V.dtype)
    if implicit:
        for j in range(N):
            for f in range(d):
                OR[j, f] = O[rated[j], f]
        for j in range(K):
            for f in range(d):
                OS[j, f] = O[sampled[j], f]
        for f in range(d):
            acc = par[P_ZERO]
            for j in range(N):
                acc += OR[j, f]
            S[f] = acc
        X = np.empty((N, d), dtype=V.dtype)
        AA = np.empty((N, d), dtype=V.dtype)
        svdpp_rated_pass(U, V, rated, ratings, OR, S, par, s1, nm1, grads, 0, X, AA, B, Ou)
    else:
        pmf_pass(U, V, rated, ratings, par, grads, 0)
    if K > 0:
        virt = np.empty(K, dtype=V.dtype)
        if use_hf:
            tU = np.empty(d, dtype=V.dtype)
            if implicit:
                tS = np.empty(d, dtype=V.dtype)
                svdpp_hf_temp(U, V, rated, ratings, OR, S, par, s1, nf, T_local, tU, tS, B, Ou)
                for f in range(d):
                    tU[f] = tU[f] + tS[f] / s
            else:
                pmf_hf_temp(U, V, rated, ratings, par, T_local, tU)
            for k in range(K):
                j = sampled[k]
                acc = tU[0] * V[j, 0]
                for f in range(1, d):
                    acc += tU[f] * V[j, f]
                virt[k] = acc
        else:
            for k in range(K):
                virt[k] = r_ua
        if implicit:
            svdpp_sampled_pass(U, V, sampled, virt, OR, OS, S, par, s, nf, grads, N, B, Ou)
        else:
            pmf_pass(U, V, sampled, virt, par, grads, N)
    if implicit:
        for j in range(N):
            for f in range(d):
                odelta[j, f] = OR[j, f] - O[rated[j], f]
        for j in range(K):
            for f in range(d):
                odelta[N + j, f] = OS[j, f] - O[sampled[j], f]
    return True


def stochastic_epoch(
    U, V, O, indptr, indices, data, order, pars, lr_server, s_indptr, s_items, r_ua, use_hf,
    T_local, s1_u, s_u, nm1_u, nf_u, implicit, grads, odelta,
):
    """One iteration of Algorithm 4: for each drawn user (``order``), one client call, then the
    server applies that client's upload at once: V_j <- V_j - lr_server g_j, O_j <- O_j + dO_j.

    pars[t] is the parameter vector of the t-th call (its client's learning rate);
    sampled items of the t-th call are s_items[s_indptr[t]:s_indptr[t + 1]].
    grads, odelta: scratch of at least max(N_u + K_u) rows.
    """
    d = V.shape[1]
    for t in range(order.shape[0]):
        u = order[t]
        lo = indptr[u]
        hi = indptr[u + 1]
        rated = indices[lo:hi]
        sampled = s_items[s_indptr[t] : s_indptr[t + 1]]
        sgd_client(
            U[u], V, O, rated, data[lo:hi], sampled, r_ua[u], use_hf, T_local, pars[t],
            s1_u[u], s_u[u], nm1_u[u], nf_u[u], implicit, grads, odelta,
        )
        N = rated.shape[0]
        for k in range(N + sampled.shape[0]):
            if k < N:
                j = rated[k]
            else:
                j = sampled[k - N]
            for f in range(d):
                V[j, f] = V[j, f] - lr_server * grads[k, f]
            if implicit:
                for f in range(d):
                    O[j, f] = O[j, f] + odelta[k, f]


# --------------------------------------------------------------------------------------------
# One client's or one upload's rows (the per-message math of the federated actors).


def batch_client_rows(U, V, items, r, par, new_u, grads):
    """One batch client step (``pmf.pmf_batch_client`` with ``order="code"``) over the rows
    ``V[items]`` (gathered here, not copied first; ``items`` must be in range):

        e = V[items] . U - r       s = e . V[items]       new_u = U - lr * (s / n + lam * U)
        grads = e[:, None] * U[None, :] + lam * V[items]

    with both products summed left to right (``e[k]`` over f = 0..d-1, ``s[f]`` over k = 0..n-1,
    each from its first term), the order ``pmf.pmf_batch_client``'s NumPy form also follows
    (cumulative sums). BLAS, which the step used before, sums in an order of its own that depends
    on the CPU kernel OpenBLAS picks at run time, so that the same run gave other bits on another
    machine. ``par`` is (lr, lam, n) in the array dtype; ``items`` has at least one entry."""
    lr = par[0]
    lam = par[1]
    nf = par[2]
    d = U.shape[0]
    s = np.empty_like(U)
    for k in range(items.shape[0]):
        j = items[k]
        ek = row_dot(V, j, U) - r[k]
        add_scaled_row(s, ek, V, j, k == 0)
        for f in range(d):
            grads[k, f] = ek * U[f] + lam * V[j, f]
    for f in range(d):
        new_u[f] = U[f] - lr * (s[f] / nf + lam * U[f])


def row_dot(V, j, u):
    """V[j] . u summed left to right from its first term."""
    acc = V[j, 0] * u[0]
    for f in range(1, u.shape[0]):
        acc = acc + V[j, f] * u[f]
    return acc


def add_scaled_row(s, e, V, j, first):
    """s = e * V[j] if ``first``, else s += e * V[j] (elementwise, in the array dtype)."""
    if first:
        for f in range(s.shape[0]):
            s[f] = e * V[j, f]
    else:
        for f in range(s.shape[0]):
            s[f] = s[f] + e * V[j, f]


def hf_batch_virtual(U, V_rated, r, V_sampled, par, T_local, out):
    """Hybrid filling, batch style (``filling.virtual_ratings_hf``): a copy tU of U takes
    ``T_local`` full-batch steps on the rated rows,

        e = V_rated . tU - r       tU <- tU - lr * ((e . V_rated) / n + lam * tU)

    then ``out[k] = V_sampled[k] . tU``; every product summed left to right from its first term
    (see ``batch_client_rows``). ``par`` is (lr, lam, n) in the array dtype; ``V_rated`` has at
    least one row."""
    lr = par[0]
    lam = par[1]
    nf = par[2]
    d = U.shape[0]
    tU = U.copy()
    s = np.empty_like(U)
    for _ in range(T_local):
        for k in range(V_rated.shape[0]):
            add_scaled_row(s, row_dot(V_rated, k, tU) - r[k], V_rated, k, k == 0)
        for f in range(d):
            tU[f] = tU[f] - lr * (s[f] / nf + lam * tU[f])
    for k in range(V_sampled.shape[0]):
        out[k] = row_dot(V_sampled, k, tU)


def rows_in_range(items, m):
    """Whether every entry of ``items`` is in [0, m) (the row updates below do not check bounds:
    their callers fall back to NumPy's indexing, and its errors, otherwise)."""
    for k in range(items.shape[0]):
        j = items[k]
        if j < 0 or j >= m:
            return False
    return True


def rows_ascending_in_range(items, m):
    """Whether ``items`` is strictly increasing within [0, m): a FedRec upload's ids (sorted, so
    that their order does not tell which items are rated), which rules out a repeated id, whose
    rows the updates below would otherwise add in a way NumPy's ``V[items] -= ...`` does not (it
    keeps the last one)."""
    n = items.shape[0]
    if n == 0:
        return True
    if items[0] < 0 or items[n - 1] >= m:
        return False
    for k in range(1, n):
        if items[k] <= items[k - 1]:
            return False
    return True


def indices_valid(items, m):
    """Whether every entry of ``items`` is a valid NumPy index of an axis of length ``m`` (in
    [-m, m), negative ones counting from the end as NumPy's and numba's indexing do). The client
    kernels read ``V[i]`` and ``O[i]`` unchecked: compiled, an index past the end reads whatever
    memory follows, where the Python fallback raises ``IndexError``; callers check first."""
    for k in range(items.shape[0]):
        j = items[k]
        if j < -m or j >= m:
            return False
    return True


def add_rows_count(acc, counts, items, rows, ascending):
    """acc[items] += rows and counts[items] += 1 for distinct ``items`` (each element of a listed
    row receives exactly one addition, as with ``acc[items] += rows``). Returns False, changing
    nothing, if an item is outside [0, len(acc)) or, with ``ascending``, the items are not
    strictly increasing."""
    if not (rows_ascending_in_range(items, acc.shape[0]) if ascending else rows_in_range(items, acc.shape[0])):
        return False
    d = acc.shape[1]
    for k in range(items.shape[0]):
        j = items[k]
        counts[j] += 1
        for f in range(d):
            acc[j, f] = acc[j, f] + rows[k, f]
    return True


def sub_scaled_rows(V, items, rows, lr, ascending):
    """V[items] -= lr * rows for distinct ``items`` (``lr`` a 1-element array of V's dtype):
    lr * row rounded to the dtype, then subtracted, as NumPy's ``V[items] -= lr * rows``.
    Returns False, changing nothing, if an item is outside [0, len(V)) or, with ``ascending``,
    the items are not strictly increasing."""
    if not (rows_ascending_in_range(items, V.shape[0]) if ascending else rows_in_range(items, V.shape[0])):
        return False
    a = lr[0]
    d = V.shape[1]
    for k in range(items.shape[0]):
        j = items[k]
        for f in range(d):
            V[j, f] = V[j, f] - a * rows[k, f]
    return True


def add_rows(V, items, rows, ascending):
    """V[items] += rows for distinct ``items``. Returns False, changing nothing, if an item is
    outside [0, len(V)) or, with ``ascending``, the items are not strictly increasing."""
    if not (rows_ascending_in_range(items, V.shape[0]) if ascending else rows_in_range(items, V.shape[0])):
        return False
    d = V.shape[1]
    for k in range(items.shape[0]):
        j = items[k]
        for f in range(d):
            V[j, f] = V[j, f] + rows[k, f]
    return True


# --------------------------------------------------------------------------------------------
# Batch PMF scatter sums (central trainer). Loop versions (compiled by numba) and vectorised
# NumPy versions below perform the same operations in the same order, so they agree bit for
# bit: the error of row k is e_k = sum_f U[u_k, f] V[i_k, f] (sequential over f) - r_k in the
# array dtype; per-row terms are formed in the array dtype and summed per bin in float64 in row
# order (what ``np.bincount`` does).


def batch_user_sums(U, V, au, ai, ar, out):
    """out[u] += e_k V[i_k] over rows k (out: float64 (n, d), zeroed by the caller)."""
    d = V.shape[1]
    for k in range(au.shape[0]):
        u = au[k]
        i = ai[k]
        e = U[u, 0] * V[i, 0]
        for f in range(1, d):
            e += U[u, f] * V[i, f]
        e = e - ar[k]
        for f in range(d):
            out[u, f] += e * V[i, f]


def batch_item_sums(U, V, au, ai, ar, lam, out):
    """out[i] += e_k U[u_k] + lam V[i] over rows k (Eq. 8 summed; out float64 (m, d))."""
    d = V.shape[1]
    for k in range(au.shape[0]):
        u = au[k]
        i = ai[k]
        e = U[u, 0] * V[i, 0]
        for f in range(1, d):
            e += U[u, f] * V[i, f]
        e = e - ar[k]
        for f in range(d):
            out[i, f] += e * U[u, f] + lam * V[i, f]


def implicit_sums(O, indptr, indices, out):
    """out[u] = sum of O over the CSR row u, in row order (float64 accumulator, zeroed)."""
    d = O.shape[1]
    for u in range(indptr.shape[0] - 1):
        for p in range(indptr[u], indptr[u + 1]):
            j = indices[p]
            for f in range(d):
                out[u, f] += O[j, f]


def _rows_error_np(UT, VT, au, ai, ar):
    UrT = UT[:, au]
    VrT = VT[:, ai]
    acc = UrT[0] * VrT[0]
    for f in range(1, UT.shape[0]):
        acc += UrT[f] * VrT[f]
    return acc - ar, UrT, VrT


def batch_user_sums_np(U, V, au, ai, ar, out):
    """Vectorised :func:`batch_user_sums` (same numbers)."""
    UT = np.ascontiguousarray(U.T)
    VT = np.ascontiguousarray(V.T)
    e, _UrT, VrT = _rows_error_np(UT, VT, au, ai, ar)
    n = out.shape[0]
    for f in range(VT.shape[0]):
        out[:, f] += np.bincount(au, weights=e * VrT[f], minlength=n)


def batch_item_sums_np(U, V, au, ai, ar, lam, out):
    """Vectorised :func:`batch_item_sums` (same numbers)."""
    UT = np.ascontiguousarray(U.T)
    VT = np.ascontiguousarray(V.T)
    e, UrT, VrT = _rows_error_np(UT, VT, au, ai, ar)
    m = out.shape[0]
    for f in range(VT.shape[0]):
        out[:, f] += np.bincount(ai, weights=e * UrT[f] + lam * VrT[f], minlength=m)


def implicit_sums_np(O, indptr, indices, out):
    """Vectorised :func:`implicit_sums` (same numbers)."""
    n = out.shape[0]
    users = np.repeat(np.arange(n), np.diff(indptr))
    OT = np.ascontiguousarray(O.T)[:, indices]
    for f in range(O.shape[1]):
        out[:, f] += np.bincount(users, weights=OT[f], minlength=n)


_KERNELS = (
    "grad_after_step",
    "pmf_pass",
    "pmf_hf_temp",
    "svdpp_rated_pass",
    "svdpp_sampled_pass",
    "svdpp_hf_temp",
    "sgd_client",
    "stochastic_epoch",
    "batch_user_sums",
    "batch_item_sums",
    "implicit_sums",
    "row_dot",
    "add_scaled_row",
    "batch_client_rows",
    "hf_batch_virtual",
    "rows_in_range",
    "rows_ascending_in_range",
    "indices_valid",
    "add_rows_count",
    "sub_scaled_rows",
    "add_rows",
)

# --------------------------------------------------------------------------------------------
# Backend selection

_jit_module = None
_jit_error: str | None = None


def numba_available() -> bool:
    """True if the numba backend can be used (numba importable, not disabled by FEDSIM_NO_NUMBA)."""
    return _load_jit() is not None


def _load_jit():
    global _jit_module, _jit_error
    if _jit_module is not None or _jit_error is not None:
        return _jit_module
    from .jit import compiled_copy

    got = compiled_copy(__name__, __file__, _KERNELS)
    if isinstance(got, str):
        _jit_error = got
        return None
    _jit_module = got
    return got


class _QuietKernels:
    """The Python kernels as :func:`kernels` hands them out: each called under
    ``np.errstate(over="ignore", invalid="ignore")``. Their compiled copies are silent when a
    diverging model (a rate beyond the dtype, ``lr = 1e40`` in float32) overflows; the Python
    ones printed NumPy's scalar overflow and invalid-value warnings from every client, before
    the server's check stopped the run as diverged. Same operations, same bits; errstate costs
    about a microsecond per call, on the fallback only (the compiled namespace is the module)."""

    def __init__(self, mod, names) -> None:
        self._mod = mod
        for name in names:
            setattr(self, name, _quiet(getattr(mod, name)))

    def __getattr__(self, name):  # (constants and helpers: the module's own)
        return getattr(self._mod, name)


def _quiet(fn):
    import functools

    @functools.wraps(fn)
    def call(*args, **kw):
        with np.errstate(over="ignore", invalid="ignore"):
            return fn(*args, **kw)

    return call


_python_kernels: _QuietKernels | None = None


def _python():
    global _python_kernels
    if _python_kernels is None:
        _python_kernels = _QuietKernels(sys.modules[__name__], _KERNELS)
    return _python_kernels


def kernels(backend: str | None = None):
    """The kernel namespace: ``"numba"``, ``"python"`` or ``None``/``"auto"`` (numba if available).
    The Python kernels come wrapped, each call under ``np.errstate`` (overflow and invalid
    values ignored), silent as the compiled ones are on a diverging model.

    Raises ``RuntimeError`` for ``"numba"`` when numba cannot be used.
    """
    if backend in (None, "auto"):
        mod = _load_jit()
        return mod if mod is not None else _python()
    if backend == "python":
        return _python()
    if backend == "numba":
        mod = _load_jit()
        if mod is None:
            raise RuntimeError(f"numba backend unavailable: {_jit_error}")
        return mod
    raise ValueError(f"backend must be 'auto', 'numba' or 'python', got {backend!r}")


def compiled():
    """The numba-compiled kernels, or None when numba cannot be used (callers then run their
    NumPy expressions as written)."""
    return _load_jit()


def scatter_kernels(backend: str | None = None):
    """``(batch_user_sums, batch_item_sums, implicit_sums)``: compiled loops with numba, the
    vectorised NumPy versions otherwise (identical numbers either way)."""
    mod = kernels(backend)
    if mod is _jit_module and _jit_module is not None:
        return mod.batch_user_sums, mod.batch_item_sums, mod.implicit_sums
    return batch_user_sums_np, batch_item_sums_np, implicit_sums_np


def backend_name(backend: str | None = None) -> str:
    """Name of the backend that ``kernels(backend)`` resolves to."""
    return "numba" if kernels(backend) is _jit_module and _jit_module is not None else "python"

