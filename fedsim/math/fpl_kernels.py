"""FPL client and server math as scalar loops: one source, run as plain Python or compiled by numba.

Imported normally this module is the pure-Python fallback; :func:`kernels` returns its numba copy
when numba is available (see :mod:`fedsim.math.jit`). Both run the same IEEE operations in the
same order, and they compute exactly what :func:`fedsim.math.bpr.fpl_client_round` (the NumPy
code the FPL actors run) and the server's ``np.add.at`` compute, bit for bit (tested in
``tests/test_math_fpl_central.py``). That is what lets :mod:`fedsim.math.fpl_central` replay a
whole FPL epoch without messages and arrive at the actors' model exactly.

dtype discipline (it mirrors NumPy 2's promotion rules in the NumPy code): item parameters are
float32 (Theta_S's wire dtype); ``diff = float64(q_i) - float64(q_j)``; ``b_i - b_j`` and
``lam * q`` are float32 operations (a Python float times a float32 array stays float32 in NumPy),
promoted to float64 where they meet a float64; the rows a client sends are rounded to float32;
the server adds ``float32(row * float32(lr))`` in float32. The dot product ``p_u . (q_i - q_j)``
is :func:`exact_dot`: the correctly rounded sum of the float64 products, so its value does not
depend on a BLAS library's summation order.

Kernels:

* ``exact_dot``     correctly rounded ``sum(a[k] * b[k])`` (``math.fsum``'s value)
* ``client_round``  one client's round: T triples, p_u steps, the sorted float32 update rows
* ``apply_rows``    the server's ``theta[item] += float32(row * lr)``, row by row
* ``add_update``    ``apply_rows`` for one whole update off the wire, its item ids checked first
                    (the FPL server's sum of each upload)
* ``rows_finite``   whether theta (or some of its rows) is finite: the server's check
* ``epoch``         ``rounds`` rounds of selected clients, each round's updates applied after
                    every selected client has computed its own from the round's Theta_S, stopping
                    after the round whose Theta_S is not finite (as the server does)
"""

from __future__ import annotations

import math
import sys

import numpy as np

# float64 parameters
F_LR = 0
F_DECAY = 1  # 1 - lr * lam_user
F_PI = 2
F_SIZE = 3
# float32 parameters
S_REG_POS = 0
S_REG_NEG = 1
S_REG_BIAS = 2
S_LR = 3
S_SIZE = 4


def make_params(lr, reg_user, reg_pos, reg_neg, reg_bias, pi):
    """``(par64, par32)``: the float64 and float32 parameter vectors of the kernels, computed
    exactly as the NumPy code computes them (``decay = 1 - lr * reg_user`` in float64; the
    regularisation weights and lr rounded to float32)."""
    lr = float(lr)
    par64 = np.zeros(F_SIZE, dtype=np.float64)
    par64[F_LR] = lr
    par64[F_DECAY] = 1.0 - lr * float(reg_user)
    par64[F_PI] = float(pi)
    par32 = np.zeros(S_SIZE, dtype=np.float32)
    with np.errstate(over="ignore"):  # (beyond float32: inf, and the parameters diverge, as the server checks)
        par32[S_REG_POS] = np.float32(reg_pos)
        par32[S_REG_NEG] = np.float32(reg_neg)
        par32[S_REG_BIAS] = np.float32(reg_bias)
        par32[S_LR] = np.float32(lr)
    return par64, par32


def exact_dot(a, b, prod, part):
    """``sum(a[k] * b[k])`` over the length of ``prod``, correctly rounded (the value of
    ``math.fsum`` of the float64 products). When a product is not finite, or the exact sum
    overflows, the plain left-to-right sum of the products instead (inf or nan, as a dot product
    would give). ``prod``, ``part``: float64 scratch of the same length (``part`` one longer).

    Fast path: the products are summed with error-free transformations (TwoSum; Ogita, Rump and
    Oishi's Sum2), which give ``r = fl(s + c)`` and the exact rounding error ``f`` of that last
    addition, plus a bound ``B >= |S - (r + f)|`` on the remaining error (``(n - 1) u sum|e|``
    with a factor 2 to spare, u = 2^-53). When ``[f - B, f + B]`` lies strictly inside the half-gaps
    to r's two neighbours, the exact sum S rounds to r, which is returned. Otherwise (a near-tie,
    massive cancellation, a result near zero or near overflow) Shewchuk's exact partials decide.
    """
    n = prod.shape[0]
    finite = True
    s = 0.0
    c = 0.0
    err = 0.0
    for k in range(n):
        v = a[k] * b[k]
        prod[k] = v
        if not math.isfinite(v):
            finite = False
        t = s + v
        z = t - s
        e = (s - (t - z)) + (v - z)  # s + v == t + e exactly
        s = t
        c += e
        err += abs(e)
    if finite and math.isfinite(err):
        r = s + c
        z = r - s
        f = (s - (r - z)) + (c - z)  # s + c == r + f exactly
        ar = abs(r)
        if 1e-290 < ar < 1e290:
            mant, ex = math.frexp(ar)
            gap_away = math.ldexp(1.0, ex - 53)  # ulp of r, to the neighbour away from zero
            gap_toward = gap_away * 0.5 if mant == 0.5 else gap_away
            away = f if r > 0.0 else -f
            bound = 2.0 * n * 1.1102230246251565e-16 * err + 2.220446049250313e-16 * abs(f)
            if away + bound < 0.5 * gap_away and away - bound > -0.5 * gap_toward:
                return r
    m = 0
    if finite:
        # Shewchuk's algorithm: the partials are non-overlapping and sum exactly to the input so far
        for k in range(n):
            x = prod[k]
            i = 0
            for j in range(m):
                y = part[j]
                if abs(x) < abs(y):
                    t = x
                    x = y
                    y = t
                hi = x + y
                lo = y - (hi - x)
                if lo != 0.0:
                    part[i] = lo
                    i += 1
                x = hi
            m = i
            if x != 0.0:
                if not math.isfinite(x):
                    finite = False
                    break
                part[m] = x
                m += 1
    if not finite:
        s = 0.0
        for k in range(n):
            s += prod[k]
        return s
    if m == 0:
        return 0.0
    # add the partials from the largest down until the sum is exact, then round half-even
    m -= 1
    hi = part[m]
    lo = 0.0
    while m > 0:
        x = hi
        m -= 1
        y = part[m]
        hi = x + y
        lo = y - (hi - x)
        if lo != 0.0:
            break
    if m > 0 and ((lo < 0.0 and part[m - 1] < 0.0) or (lo > 0.0 and part[m - 1] > 0.0)):
        y = lo * 2.0
        x = hi + y
        if y == x - hi:
            hi = x
    return hi


def _right_rank(keys, r):
    # np.searchsorted(keys, r, side="right")
    lo = 0
    hi = keys.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] <= r:
            lo = mid + 1
        else:
            hi = mid
    return lo


def client_round(p, theta, d, positives, keys, catalogue, n_neg, U, T, par64, par32,
                 out_items, out_rows, ph, diff, gs, rows64, items64, prod, part):
    """One FPL client round, as :func:`fedsim.math.bpr.fpl_client_round` with its defaults
    (per-triple p_u steps, item parameters frozen, no merging). ``p``: the client's p_u (float64,
    stepped in place); ``theta``: the received [Q | b] (float32, read only); ``positives``,
    ``keys``, ``catalogue`` (empty: ``range``), ``n_neg``: its sampling tables; ``U``: its (3, T)
    uniforms. Writes the rows it sends, sorted by item id (stable), to ``out_items[:k]`` and
    ``out_rows[:k]`` (float32) and returns ``(k, positives sent)``. The rest are scratch."""
    npos = positives.shape[0]
    lr = par64[F_LR]
    decay = par64[F_DECAY]
    pi = par64[F_PI]
    reg_pos = par32[S_REG_POS]
    reg_neg = par32[S_REG_NEG]
    reg_b = par32[S_REG_BIAS]
    has_cat = catalogue.shape[0] > 0
    sent = 0
    for t in range(T):
        a = int(U[0, t] * npos)
        if a > npos - 1:
            a = npos - 1
        i = positives[a]
        r = int(U[1, t] * n_neg)
        if r > n_neg - 1:
            r = n_neg - 1
        j = r + _right_rank(keys, r)
        if has_cat:
            j = catalogue[j]
        for k in range(d):
            ph[t, k] = p[k]
            diff[k] = np.float64(theta[i, k]) - np.float64(theta[j, k])
        bdiff = theta[i, d] - theta[j, d]
        x = np.float64(bdiff) + exact_dot(p, diff, prod, part)
        if x > 0.0:
            e = math.exp(-x)
            g = e / (1.0 + e)
        else:
            g = 1.0 / (1.0 + math.exp(x))
        gs[t] = g
        c = lr * g
        for k in range(d):
            p[k] = p[k] * decay
        for k in range(d):
            p[k] = p[k] + diff[k] * c
        # the negative item's row (slot t), then the positive item's if its Bernoulli draw sends it
        items64[t] = j
        for k in range(d):
            rows64[t, k] = -(g * ph[t, k]) - np.float64(reg_neg * theta[j, k])
        rows64[t, d] = -g - np.float64(reg_b * theta[j, d])
        if U[2, t] < pi:
            s = T + sent
            items64[s] = i
            for k in range(d):
                rows64[s, k] = g * ph[t, k] - np.float64(reg_pos * theta[i, k])
            rows64[s, d] = g - np.float64(reg_b * theta[i, d])
            sent += 1
    n = T + sent
    order = np.argsort(items64[:n], kind="mergesort")  # stable, as the actor's argsort
    for m in range(n):
        src = order[m]
        out_items[m] = items64[src]
        for k in range(d + 1):
            out_rows[m, k] = np.float32(rows64[src, k])
    return n, sent


def apply_rows(theta, items, rows, n, lr32):
    """The server's Eq. 7 for one update: ``theta[items[m]] += float32(rows[m] * lr32)`` for m
    in order (``np.add.at(theta, items, rows * lr32)``)."""
    w = theta.shape[1]
    for m in range(n):
        it = items[m]
        for k in range(w):
            theta[it, k] = theta[it, k] + rows[m, k] * lr32


def add_update(theta, items, rows, lr):
    """The FPL server's Eq. 7 for one received update: ``apply_rows`` over all its rows, if
    every item id is in ``[0, len(theta))``; else returns False, changing nothing (the caller
    then raises, naming the id). ``lr`` has theta's dtype. The same additions in the same order
    as ``np.add.at(theta, items, rows * lr)`` (a repeated id is added once per row)."""
    m = theta.shape[0]
    n = items.shape[0]
    for k in range(n):
        if items[k] < 0 or items[k] >= m:
            return False
    apply_rows(theta, items, rows, n, lr)
    return True


def rows_finite(theta, items, n, whole):
    """Whether every value of ``theta`` is finite (``whole``), or of its rows ``items[:n]``."""
    w = theta.shape[1]
    if whole:
        for i in range(theta.shape[0]):
            for k in range(w):
                if not math.isfinite(theta[i, k]):
                    return False
        return True
    for m in range(n):
        it = items[m]
        for k in range(w):
            if not math.isfinite(theta[it, k]):
                return False
    return True


def epoch(theta, P, sel_ptr, sel, draw_at, U_all, pos_ptr, pos_all, key_ptr, key_all, catalogue, n_negs, T,
          par64, par32, visits, pos_sent, neg_sent):
    """``len(sel_ptr) - 1`` rounds: round r's clients are ``sel[sel_ptr[r]:sel_ptr[r + 1]]`` (in
    the order the server sums them). Client c's m-th visit of the epoch uses ``U_all[draw_at[c] +
    m]``, its sampling tables are its slices of ``pos_all`` and ``key_all``. Every client of a
    round computes from the round's Theta_S; the server then applies their rows in order. Steps
    ``theta`` and the rows of ``P`` in place and counts per client ``visits``, ``pos_sent``,
    ``neg_sent``. Returns the rounds run: all of them, or, as the FPL server stops in the round
    after whose updates Theta_S is not finite, that round (1-based), the later ones not run (after
    the first round, whose check reads all of theta, only the rows a round changed can have
    stopped being finite: those are read)."""
    d = P.shape[1]
    n_rounds = sel_ptr.shape[0] - 1
    most = 0
    for r in range(n_rounds):
        c = sel_ptr[r + 1] - sel_ptr[r]
        if c > most:
            most = c
    cap = 2 * T
    buf_items = np.empty(most * cap, dtype=np.int64)
    buf_rows = np.empty((most * cap, d + 1), dtype=np.float32)
    counts = np.empty(most, dtype=np.int64)
    ph = np.empty((T, d), dtype=np.float64)
    diff = np.empty(d, dtype=np.float64)
    gs = np.empty(T, dtype=np.float64)
    rows64 = np.empty((cap, d + 1), dtype=np.float64)
    items64 = np.empty(cap, dtype=np.int64)
    prod = np.empty(d, dtype=np.float64)
    part = np.empty(d + 1, dtype=np.float64)
    p = np.empty(d, dtype=np.float64)
    lr32 = par32[S_LR]
    for r in range(n_rounds):
        off = 0
        for q in range(sel_ptr[r], sel_ptr[r + 1]):
            c = sel[q]
            for k in range(d):
                p[k] = P[c, k]
            n, s = client_round(p, theta, d, pos_all[pos_ptr[c]:pos_ptr[c + 1]], key_all[key_ptr[c]:key_ptr[c + 1]],
                                catalogue, n_negs[c], U_all[draw_at[c] + visits[c]], T, par64, par32,
                                buf_items[off:], buf_rows[off:], ph, diff, gs, rows64, items64, prod, part)
            for k in range(d):
                P[c, k] = p[k]
            counts[q - sel_ptr[r]] = n
            off += n
            visits[c] += 1
            pos_sent[c] += s
            neg_sent[c] += n - s
        apply_rows(theta, buf_items, buf_rows, off, lr32)
        if not rows_finite(theta, buf_items, off, r == 0):
            return r + 1
    return n_rounds


_KERNELS = ("exact_dot", "_right_rank", "client_round", "apply_rows", "add_update", "rows_finite", "epoch")


def compiled():
    """The numba-compiled kernels, or None when numba cannot be used."""
    k = kernels()
    return None if k is sys.modules[__name__] else k


def kernels(backend=None):
    """The kernel namespace: ``"numba"``, ``"python"`` or ``None``/``"auto"`` (numba when it can
    be used). Raises ``RuntimeError`` for ``"numba"`` when it cannot, ``ValueError`` for another
    name."""
    from .jit import compiled_copy

    this = sys.modules[__name__]
    if backend == "python":
        return this
    if backend not in (None, "auto", "numba"):
        raise ValueError(f"backend must be 'auto', 'numba' or 'python', got {backend!r}")
    got = compiled_copy(__name__, __file__, _KERNELS)
    if isinstance(got, str):
        if backend == "numba":
            raise RuntimeError(f"numba backend unavailable: {got}")
        return this
    return got
