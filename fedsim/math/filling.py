"""FedRec's unrated-item sampling and virtual ratings (paper Eq. 5, Eq. 6, Algorithm 3).

A client samples rho |I_u| items it has not rated and gives them virtual ratings, so that the
server cannot tell its rated items from the uploaded gradients.

* sampling: ``n_sampled(|I_u|, m, rho) = min(int(rho |I_u|), m - |I_u|)`` items, drawn uniformly
  without replacement from the *whole* item index space ``0..m-1`` minus I_u (items nobody rated
  in the training data included, as the authors' code does), afresh at every call;
* user averaging (UA, Eq. 5): the virtual rating is the user's mean training rating;
* hybrid filling (HF, Eq. 6 / Algorithm 3): before the switch iteration the UA value; afterwards a
  throw-away copy of U_u is trained T_local times on the rated items only and its (unclipped)
  prediction is the virtual rating. The copy is discarded; U_u itself is not changed by filling.

Pure functions; randomness only from the ``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

import numpy as np

from . import _sgd_numba
from .rows import dots_in_order, weighted_rows_in_order

__all__ = [
    "hf_active",
    "hf_local_user_batch",
    "n_sampled",
    "rated_counts_of_rows",
    "sample_unrated",
    "user_mean",
    "users_sampling_all",
    "virtual_ratings_hf",
    "virtual_ratings_hf_sgd",
    "virtual_ratings_ua",
]


def n_sampled(n_rated: int, m: int, rho: float) -> int:
    """Number of unrated items a user samples: ``min(int(rho * n_rated), m - n_rated)``."""
    if rho < 0:
        raise ValueError(f"rho must be >= 0, got {rho!r}")
    # capped before the truncation: a rho so large that rho * n_rated overflows to inf (rho = 1e308,
    # which the configuration takes: it is finite) was an OverflowError of every client
    return max(0, int(min(float(rho) * int(n_rated), int(m) - int(n_rated))))


def users_sampling_all(indptr, m: int, rho: float) -> list[int]:
    """The users (row indices of a CSR ``indptr``) for whom ``rho * |I_u|`` asks for more unrated
    items than the ``m - |I_u|`` there are, so ``sample_unrated`` draws every unrated item (a
    rho beyond what the data has is capped there, per user). Empty for rho = 0."""
    if rho < 0:
        raise ValueError(f"rho must be >= 0, got {rho!r}")
    n = np.diff(np.asarray(indptr, dtype=np.int64))
    if float(rho) == 0.0 or n.size == 0:
        return []
    # the same float64 product and truncation as n_sampled's int(rho * n), capped at m before the
    # cast: a product beyond int64 (rho = 1e23) cast to garbage, with NumPy's "invalid value" warning
    with np.errstate(over="ignore"):  # (an infinite product is capped like any other)
        wanted = np.minimum(float(rho) * n, float(m)).astype(np.int64)
    return [int(u) for u in np.flatnonzero(wanted > int(m) - n)]


def rated_counts_of_rows(k: int, m: int, rho: float) -> np.ndarray:
    """The rated counts n whose upload has ``k`` rows (``n + n_sampled(n, m, rho)``), ascending
    (int64; empty if none). One n, or none, while ``k < m``; at ``k == m`` the sampling is capped
    by the ``m - n`` unrated items, and every n from the smallest with ``n + int(rho n) >= m`` up
    to m gives m rows: a message's size then says only that n is at least the first of them."""
    if rho < 0:
        raise ValueError(f"rho must be >= 0, got {rho!r}")
    k, m = int(k), int(m)
    if k < 0 or k > m:
        return np.zeros(0, dtype=np.int64)
    n = np.arange(k + 1, dtype=np.int64)
    # the same float64 product and truncation as n_sampled's int(rho * n), capped before the cast
    # (a product beyond int64 cast to garbage)
    with np.errstate(over="ignore"):
        rows = n + np.minimum(float(rho) * n, m - n).astype(np.int64)
    return n[rows == k]


def sample_unrated(rng: np.random.Generator, rated_items, m: int, rho: float) -> np.ndarray:
    """Sample ``n_sampled(len(rated_items), m, rho)`` distinct items of ``0..m-1`` not in
    ``rated_items``, in random order (int32).

    Consumes exactly one ``rng.choice`` call when at least one item is sampled and nothing
    otherwise (rho = 0 leaves the client's generator untouched). Raises ``ValueError`` for a
    rated item outside ``[0, m)``.
    """
    rated = np.asarray(rated_items)
    if rated.size and (rated.min() < 0 or rated.max() >= int(m)):
        # a negative id marked item m - 1 (counted from the end) as rated, silently
        raise ValueError(f"rated item {int(rated.min() if rated.min() < 0 else rated.max())} is outside [0, {int(m)})")
    k = n_sampled(rated.shape[0], m, rho)
    if k == 0:
        return np.empty(0, dtype=np.int32)
    # rng.choice(pool, k, replace=False) draws positions in the pool of the m - n unrated items
    # (its draws depend only on the pool's size) and returns pool[positions]: the same positions,
    # mapped to items without building the pool, an m-long mask and index array per client and
    # call (26,744 items at the ML-20M shape, for a few dozen drawn): position j is item j plus
    # the rated items at or below it, the ids r_i - i (non-decreasing) counted up to j
    r = rated if rated.shape[0] < 2 or bool((rated[1:] > rated[:-1]).all()) else np.unique(rated)
    pos = rng.choice(int(m) - r.shape[0], size=k, replace=False)
    if r.shape[0]:
        pos = pos + np.searchsorted(r - np.arange(r.shape[0]), pos, side="right")
    return pos.astype(np.int32)


def user_mean(ratings, dtype=None):
    """Eq. 5: the mean of a user's training ratings (summed in float64), as a ``dtype`` scalar.

    An empty rating list gives 0 (such a user samples nothing, so the value is never used).
    """
    r = np.asarray(ratings)
    dt = np.dtype(dtype if dtype is not None else (r.dtype if r.dtype.kind == "f" else np.float64))
    if r.shape[0] == 0:
        return dt.type(0)
    return dt.type(np.sum(r, dtype=np.float64) / r.shape[0])


def virtual_ratings_ua(ratings, n: int, dtype=None) -> np.ndarray:
    """UA (Eq. 5): ``n`` copies of the user's mean rating."""
    mu = user_mean(ratings, dtype)
    return np.full(int(n), mu, dtype=mu.dtype)


def hf_active(t: int, T_predict: int, convention: str = "code") -> bool:
    """Whether HF uses predictions (Eq. 6) at the 0-based iteration ``t``.

    ``"paper"``: Algorithm 3 with 1-based iterations, predictions when t + 1 >= T_predict.
    ``"code"`` (default; the authors' code, which produced their figures): predictions when
    t > T_predict, i.e. two iterations later than the paper says.
    """
    if convention == "code":
        return t > T_predict
    if convention == "paper":
        return t + 1 >= T_predict
    raise ValueError(f"convention must be 'code' or 'paper', got {convention!r}")


def hf_local_user_batch(U_u, V_rated, r_rated, lr, lam, T_local: int) -> np.ndarray:
    """HF local training, batch style: a copy of U_u takes T_local full-batch gradient steps on
    the rated items only, tU <- tU - lr (sum_i (tU.V_i - r_i) V_i / |I_u| + lam tU), both
    products summed left to right (``rows.dots_in_order``: the same bits on every machine)."""
    tU = np.array(U_u, copy=True)
    V_rated = np.asarray(V_rated)
    n = V_rated.shape[0]
    if n == 0:
        return tU
    dt = tU.dtype.type
    # a rate beyond the dtype (lr = 1e40 in float32) is inf, and a diverging model overflows in
    # these steps: silent, as the compiled pass is (the servers check the model)
    with np.errstate(over="ignore", invalid="ignore"):
        lr = dt(lr)
        lam = dt(lam)
        for _ in range(int(T_local)):
            e = dots_in_order(V_rated, tU) - r_rated
            tU = tU - lr * (weighted_rows_in_order(e, V_rated) / dt(n) + lam * tU)
    return tU


def virtual_ratings_hf(U_u, V_rated, r_rated, V_sampled, lr, lam, T_local: int) -> np.ndarray:
    """HF (Eq. 6), batch style: predictions of the locally trained copy of U_u
    (:func:`hf_local_user_batch`) for the sampled items, unclipped, each a dot product summed left
    to right. Call only when :func:`hf_active`; otherwise use :func:`virtual_ratings_ua`. One
    compiled pass with numba when the arrays share one float dtype (the same bits)."""
    U_u = np.asarray(U_u)
    V_rated = np.asarray(V_rated)
    V_sampled = np.asarray(V_sampled)
    k = _sgd_numba.compiled()
    dt = U_u.dtype
    if (k is not None and dt.kind == "f" and V_rated.dtype == dt and V_sampled.dtype == dt
            and type(r_rated) is np.ndarray and r_rated.dtype == dt and U_u.ndim == 1 and r_rated.ndim == 1
            and V_rated.ndim == 2 and V_sampled.ndim == 2 and V_rated.shape[0] > 0 and U_u.shape[0] > 0
            and V_rated.shape[1] == U_u.shape[0] == V_sampled.shape[1] and r_rated.shape[0] == V_rated.shape[0]):
        out = np.empty(V_sampled.shape[0], dtype=dt)
        if _sgd_numba.in_range(dt, lr, lam):
            par = np.array((lr, lam, V_rated.shape[0]), dtype=dt)
        else:  # (a rate beyond the dtype is inf there: the parameters diverge, as the servers check)
            with np.errstate(over="ignore"):
                par = np.array((lr, lam, V_rated.shape[0]), dtype=dt)
        k.hf_batch_virtual(np.ascontiguousarray(U_u), np.ascontiguousarray(V_rated), np.ascontiguousarray(r_rated),
                           np.ascontiguousarray(V_sampled), par, int(T_local), out)
        return out
    tU = hf_local_user_batch(U_u, V_rated, r_rated, lr, lam, T_local)
    with np.errstate(over="ignore", invalid="ignore"):
        return dots_in_order(V_sampled, tU)


def virtual_ratings_hf_sgd(
    U_u, V, rated_items, r_rated, sampled_items, lr, lam, T_local: int, O=None, backend=None
) -> np.ndarray:
    """HF (Eq. 6), stochastic style: a copy of U_u (and, for SVD++, copies of the rated items' O
    rows) takes T_local sequential SGD passes over the rated items; the virtual rating of a
    sampled item j is (tU + tObar) . V_j with tObar = sum of the trained O rows / sqrt(|I_u|)
    (PMF: tU . V_j).

    Inside a client call (``svdpp.sgd_client_step`` / ``pmf.pmf_sgd_client_step``) this happens
    *after* the pass over the rated items, from the state that pass left; this standalone
    function starts from the state given to it.
    """
    V = np.asarray(V)
    dt = V.dtype
    k = _sgd_numba.kernels(backend)
    par = _sgd_numba.make_par(lr, lam, dt)
    rated = np.asarray(rated_items, dtype=np.int32)
    r = np.asarray(r_rated, dtype=dt)
    sampled = np.asarray(sampled_items, dtype=np.int32)
    d = V.shape[1]
    # the kernels read V[rated] unchecked (compiled: past the end silently); NumPy's IndexError instead
    if not k.indices_valid(rated, V.shape[0]):
        raise IndexError(f"a rated item index is out of bounds for the {V.shape[0]} rows of V")
    U = np.array(U_u, dtype=dt, copy=True)
    tU = np.empty(d, dtype=dt)
    if O is None:
        k.pmf_hf_temp(U, V, rated, r, par, int(T_local), tU)
    else:
        s1, s, _nm1, nf = _sgd_numba.implicit_norms(rated.shape[0], dt)
        OR = np.asarray(O)[rated].astype(dt)
        S = np.zeros(d, dtype=dt)
        for j in range(OR.shape[0]):  # sequential sum, as the kernels do
            S = S + OR[j]
        tS = np.empty(d, dtype=dt)
        k.svdpp_hf_temp(
            U, V, rated, r, OR, S, par, s1[()], nf[()], int(T_local), tU, tS,
            np.empty(d, dtype=dt), np.empty(d, dtype=dt),
        )
        tU = tU + tS / s[()]
    return V[sampled] @ tU
