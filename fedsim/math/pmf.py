"""PMF for FedRec: prediction (Eq. 1), client gradients (Eq. 7, 8), server updates (Eq. 9).

Pure NumPy functions a client or a server calls with *its own* data; no messages, no clock.
Conventions:

* a client holds its factor ``U_u`` (shape (d,)) and a downloaded copy of the item factors ``V``
  (shape (m, d)); its rated items are the CSR row ``indices[indptr[u]:indptr[u+1]]`` in that
  (fixed) order, with ratings ``data[...]``;
* factors start uniform in (-0.005, 0.005) (authors' code); no biases, no global mean;
* learning rates decay as lr_k = lr_0 * decay**k (:func:`decayed_lr`): per iteration for the
  batch client and the server, per training call of that client for a stochastic client;
* the item gradient uploaded for item i is g_i = (U_u.V_i - r_ui) U_u + lam V_i (Eq. 8), lam V_i
  added once per (user, item); the batch server divides the sum over the users who sent a
  gradient for i by their number (Eq. 9); the stochastic server applies each upload at once.
"""

from __future__ import annotations


import numpy as np

from . import _sgd_numba
from .filling import (
    hf_active,
    sample_unrated,
    user_mean,
    virtual_ratings_hf,
)
from .rows import add_rows_at, check_rows, dots_in_order, weighted_rows_in_order
from .sgd_client import ClientUpload, sgd_client_call

_RATE_MAX = _sgd_numba.RATE_MAX  # a rate within it fits float32 and float64: no errstate needed

__all__ = [
    "DEFAULT_INIT_SCALE",
    "BatchClient",
    "ClientUpload",
    "DivergenceError",
    "accumulate_item_grads",
    "apply_mean_step",
    "batch_client_step",
    "check_finite",
    "decayed_lr",
    "draw_user_order",
    "init_item_factors",
    "init_user_factor",
    "pmf_batch_client",
    "pmf_sgd_client",
    "pmf_sgd_client_step",
    "predict",
    "server_apply_mean",
    "server_apply_sgd",
]

DEFAULT_INIT_SCALE = 0.005


class DivergenceError(FloatingPointError):
    """Training produced non-finite parameters or predictions.

    ``iteration`` is the 1-based iteration after which it was detected (0: at initialisation or
    in a standalone check), ``what`` names the offending arrays.
    """

    def __init__(self, iteration: int, what: str, model: str = ""):
        self.iteration = int(iteration)
        self.what = what
        self.model = model
        prefix = f"{model}: " if model else ""
        super().__init__(f"{prefix}diverged at iteration {self.iteration}: non-finite {what}")


def check_finite(iteration: int, model: str = "", **arrays) -> None:
    """Raise :class:`DivergenceError` if any of the named arrays has a NaN or an infinity."""
    bad = [name for name, a in arrays.items() if a is not None and not np.isfinite(a).all()]
    if bad:
        raise DivergenceError(iteration, ", ".join(bad), model)


# --------------------------------------------------------------------------------------------
# Initialisation, schedules, prediction


def init_user_factor(
    rng: np.random.Generator, d: int, *, scale: float = DEFAULT_INIT_SCALE, dtype=np.float32
) -> np.ndarray:
    """U_u uniform in (-scale, scale), one ``rng.uniform`` call of d values (float64, then cast)."""
    return rng.uniform(-scale, scale, size=int(d)).astype(dtype)


def init_item_factors(
    rng: np.random.Generator, m: int, d: int, *, scale: float = DEFAULT_INIT_SCALE, dtype=np.float32
) -> np.ndarray:
    """V (or O) uniform in (-scale, scale), shape (m, d), one ``rng.uniform`` call, row-major."""
    return rng.uniform(-scale, scale, size=(int(m), int(d))).astype(dtype)


def decayed_lr(lr0: float, k: int, decay: float = 0.9) -> float:
    """lr_0 * decay**k (k = iterations done for a server/batch client, calls done for a
    stochastic client). Everyone uses this function so federated and central agree exactly."""
    return float(lr0) * float(decay) ** int(k)


def draw_user_order(server_rng: np.random.Generator, n_users: int, n_draws: int | None = None):
    """Algorithm 4 line 4: the stochastic server's n picks of the iteration, uniformly *with
    replacement* (authors' code), one ``integers`` call per iteration (int64)."""
    n = int(n_users) if n_draws is None else int(n_draws)
    return server_rng.integers(0, int(n_users), size=n)


def predict(U, V, users, items) -> np.ndarray:
    """Eq. 1: r_hat = U_u . V_i for each (users[k], items[k]) pair (unclipped)."""
    return np.einsum("kd,kd->k", U[users], V[items])


# --------------------------------------------------------------------------------------------
# Batch style (Algorithms 1-2)


def pmf_batch_client(U_u, V_rows, ratings, lr, lam, *, order: str = "code"):
    """One batch gradient step of a client over its rated and sampled items (Eq. 7, 8).

    ``V_rows``: V of the items I_u u I'_u (any order), ``ratings``: their real or virtual
    ratings. Returns ``(new_U_u, item_grads)`` with item_grads[k] the gradient for V_rows[k].

    ``order="code"`` (default, the authors' code; reproduces Table 2): item gradients taken with
    U_u before its update. ``order="paper"`` (Algorithm 2 as printed): U_u updated first, then
    Eq. 8 with the new U_u (errors recomputed).

    The two products (each rating's error ``V_rows[k] . U_u``, the sum ``e . V_rows``) are summed
    left to right, so that the same inputs give the same bits on every machine (a BLAS product
    sums in an order that depends on the CPU kernel the library picks); with numba the step is
    one compiled pass over the rows (``_sgd_numba.batch_client_rows``, the same operations in the
    same order), otherwise cumulative sums in NumPy. Raises ``ValueError`` for ``V_rows`` that
    are not 2-D rows as wide as ``U_u`` (a width of 1 was broadcast).
    """
    U_u = np.asarray(U_u)
    V_rows = np.asarray(V_rows)
    dt = V_rows.dtype.type
    if _sgd_numba.in_range(V_rows.dtype, lr, lam):
        lr, lam = dt(lr), dt(lam)
    else:
        with np.errstate(over="ignore"):  # (a rate beyond the dtype is inf: the parameters diverge, as checked)
            lr, lam = dt(lr), dt(lam)
    n = V_rows.shape[0]
    if n == 0:
        return U_u.copy(), np.empty((0, U_u.shape[0]), dtype=V_rows.dtype)
    if order == "code" and _sgd_numba.compiled() is not None and _one_dtype(U_u, V_rows, ratings):
        return _batch_client_jit(U_u, V_rows, np.arange(n, dtype=np.int32), ratings, lr, lam, n)
    if U_u.ndim != 1 or V_rows.ndim != 2 or V_rows.shape[1] != U_u.shape[0]:
        # (only here, where the compiled pass declined them: rows of width 1 were broadcast
        # against U_u below, and gave gradients of U_u's width, silently)
        raise ValueError(f"item rows of shape {V_rows.shape} for a user factor of shape {U_u.shape}: "
                         f"they must be {U_u.shape[-1] if U_u.ndim else 1} wide")
    if order != "code" and order != "paper":
        raise ValueError(f"order must be 'code' or 'paper', got {order!r}")
    # (a diverging model overflows here: silent, as the compiled pass is; the servers check it)
    with np.errstate(over="ignore", invalid="ignore"):
        e = dots_in_order(V_rows, U_u) - ratings
        grad_u = weighted_rows_in_order(e, V_rows) / dt(n) + lam * U_u
        new_u = U_u - lr * grad_u
        if order == "code":
            grads = e[:, None] * U_u[None, :] + lam * V_rows
        else:
            e2 = dots_in_order(V_rows, new_u) - ratings
            grads = e2[:, None] * new_u[None, :] + lam * V_rows
    return new_u, grads


def _one_dtype(U_u, V_rows, ratings) -> bool:
    """Whether the three arrays share one float dtype and are C-contiguous, i.e. whether the
    NumPy expressions of the batch step would compute in that dtype without promotion."""
    dt = V_rows.dtype
    return (dt.kind == "f" and U_u.dtype == dt and type(ratings) is np.ndarray and ratings.dtype == dt
            and U_u.ndim == 1 and ratings.ndim == 1 and V_rows.ndim == 2 and V_rows.shape[1] == U_u.shape[0]
            and ratings.shape[0] == V_rows.shape[0] and V_rows.flags.c_contiguous
            and U_u.flags.c_contiguous and ratings.flags.c_contiguous)


def _batch_client_jit(U_u, V, items, ratings, lr, lam, n):
    """``pmf_batch_client(order="code")`` on the rows ``V[items]`` (in range) in one compiled
    pass (``lr``, ``lam`` of V's dtype)."""
    dt = V.dtype
    new_u = np.empty_like(U_u)
    grads = np.empty((n, V.shape[1]), dtype=dt)
    _sgd_numba.compiled().batch_client_rows(U_u, V, items, ratings, np.array((lr, lam, n), dtype=dt), new_u, grads)
    return new_u, grads


def accumulate_item_grads(grad_sum, counts, items, grads, *, distinct: bool = False,
                          ascending: bool = False) -> None:
    """Server side of Eq. 9, incremental: add one client's upload into ``grad_sum`` (m, d) and
    ``counts`` (m,) in place. ``distinct=True`` promises that no item repeats within ``items``
    (true of every FedRec upload) and adds whole rows (:func:`fedsim.math.rows.add_rows_at`),
    many times faster than ``np.add.at`` and the same bits (each element receives exactly one
    addition); with a repeated item it would silently count it once, so the default is the
    general form. ``ascending=True`` (implies ``distinct``) checks what a FedRec upload
    promises, items strictly increasing in an integer array and gradients a float array, and raises
    ``ValueError`` otherwise (at no cost: the compiled update's bounds check becomes an order check,
    and it takes only float arrays of ``grad_sum``'s dtype). Raises ``IndexError`` for an item
    outside [0, m) and ``ValueError`` for arrays of other shapes (:func:`fedsim.math.rows.check_rows`),
    adding nothing."""
    if distinct or ascending:
        k = _sgd_numba.compiled()
        if (k is not None and type(grads) is np.ndarray and grads.dtype == grad_sum.dtype
                and grads.ndim == 2 and grad_sum.ndim == 2 and grads.shape[1] == grad_sum.shape[1]
                and grads.shape[0] == len(items) and grad_sum.flags.c_contiguous
                and counts.dtype == np.int64 and _int_vector(items)
                and k.add_rows_count(grad_sum, counts, items, grads, ascending)):  # one addition per element: same bits
            return
        check_rows(items, grads, grad_sum.shape[0], grad_sum.shape[1], "gradients", ascending=ascending,
                   upload=ascending)
        add_rows_at(grad_sum, items, grads)
        counts[items] += 1
    else:
        check_rows(items, grads, grad_sum.shape[0], grad_sum.shape[1], "gradients")
        np.add.at(grad_sum, items, grads)
        np.add.at(counts, items, 1)


def apply_mean_step(V, grad_sum, counts, lr) -> np.ndarray:
    """Eq. 9 and Algorithm 1 line 8: V_i <- V_i - lr * grad_sum_i / counts_i for items with at
    least one gradient (others unchanged). In place; returns V."""
    dt = V.dtype.type
    has = counts > 0
    V[has] -= dt(lr) * (grad_sum[has] / counts[has, None].astype(V.dtype))
    return V


def server_apply_mean(V, items, grads, lr, counts=None) -> np.ndarray:
    """Batch server update from all uploads of an iteration, concatenated: ``items`` (K,) and
    ``grads`` (K, d). ``counts`` (m,) defaults to the number of uploads per item (|U_i u U'_i|).
    In place; returns V."""
    items = np.asarray(items)
    m, d = V.shape
    grad_sum = np.zeros((m, d), dtype=V.dtype)
    for f in range(d):
        grad_sum[:, f] = np.bincount(items, weights=grads[:, f], minlength=m)
    if counts is None:
        counts = np.bincount(items, minlength=m)
    return apply_mean_step(V, grad_sum, counts, lr)


def server_apply_sgd(V, items, grads, lr, *, ascending: bool = False) -> np.ndarray:
    """Algorithm 4 lines 6-8: V_i <- V_i - lr g_i for one client's upload (distinct items).
    ``ascending=True`` checks what a FedRec upload promises, items strictly increasing in an integer
    array and gradients a float array (no cost compiled). Raises ``IndexError`` for an item outside [0, m), ``ValueError`` for arrays of other
    shapes or, with ``ascending``, items out of order, changing nothing. In place; returns V."""
    k = _sgd_numba.compiled()
    # a rate beyond V's dtype (lr = 1e40 in float32) is inf there, and V not finite after: the
    # servers check that (NumPy's overflow and invalid-value warnings said it first). errstate
    # only for such a rate: entering it costs a microsecond, and this runs once per message
    if (k is not None and type(grads) is np.ndarray and grads.dtype == V.dtype and V.ndim == 2
            and grads.ndim == 2 and grads.shape == (len(items), V.shape[1]) and V.flags.c_contiguous
            and V.flags.writeable and _int_vector(items)):
        if -_RATE_MAX <= lr <= _RATE_MAX:  # (inline: once per message)
            rate = np.array((lr,), dtype=V.dtype)
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                rate = np.array((lr,), dtype=V.dtype)
        # lr * g rounded to V's dtype, then subtracted: the operations of the expression below
        if k.sub_scaled_rows(V, items, grads, rate, ascending):
            return V
    check_rows(items, grads, V.shape[0], V.shape[1], "gradients", ascending=ascending, upload=ascending)
    with np.errstate(over="ignore", invalid="ignore"):  # (the NumPy path: no compiled kernel)
        V[items] -= V.dtype.type(lr) * grads
    return V


def _int_vector(items) -> bool:
    """Whether ``items`` is a 1-D integer array (what the compiled row updates take; they check
    the range themselves and decline, changing nothing, so that NumPy's indexing raises)."""
    return type(items) is np.ndarray and items.ndim == 1 and items.dtype.kind in "iu"


def batch_client_step(
    U_u, V, rated_items, ratings, *, t: int, lr: float, lam: float, rng=None, rho: float = 0.0,
    strategy: str = "ua", T_predict: int = 10, T_local: int = 10, hf_convention: str = "code",
    order: str = "code", sampled=None,
) -> ClientUpload:
    """Algorithm 2 (+3) for one client at 0-based iteration ``t`` with the iteration's ``lr``.

    Samples I'_u with ``rng`` (unless ``sampled`` is given, e.g. for sample-once), fills virtual
    ratings (UA, or HF when :func:`hf_active`; HF trains a copy of U_u from its value *before*
    this step), then :func:`pmf_batch_client` on I_u (in order) followed by I'_u.
    """
    V = np.asarray(V)
    dt = V.dtype
    rated = np.asarray(rated_items, dtype=np.int32)
    r = np.asarray(ratings, dtype=dt)
    if sampled is None:
        sampled = sample_unrated(rng, rated, V.shape[0], rho) if rho > 0 else np.empty(0, np.int32)
    sampled = np.asarray(sampled, dtype=np.int32)
    if sampled.shape[0]:
        if strategy == "hf" and hf_active(t, T_predict, hf_convention):
            virt = virtual_ratings_hf(U_u, V[rated], r, V[sampled], lr, lam, T_local).astype(dt)
        elif strategy in ("ua", "hf"):
            virt = np.full(sampled.shape[0], user_mean(r, dt), dtype=dt)
        else:
            raise ValueError(f"strategy must be 'ua' or 'hf', got {strategy!r}")
        items = np.concatenate([rated, sampled])
        rr = np.concatenate([r, virt])
    else:
        items, rr = rated, r
    # take: the same rows as V[items], gathered in about a third of the time
    new_u, grads = pmf_batch_client(np.asarray(U_u, dtype=dt), V.take(items, axis=0), rr, lr, lam, order=order)
    return ClientUpload(new_u, items, grads, None, rated.shape[0])


class BatchClient:
    """One client's rated items, ratings and training settings, fixed once, for its batch steps
    (PMF(B)).

    ``BatchClient(rated_items, ratings, dtype, lam=, order="code", rho=0.0, strategy="ua",
    T_predict=10, T_local=10, hf_convention="code")`` converts the ratings to ``dtype`` once;
    ``step(U_u, V, t, lr, rng=None, sampled=None)`` returns, bit for bit, what
    ``batch_client_step`` returns for the same arguments, these ratings and settings: a batch
    client is called once per round, so the conversions, checks and keyword arguments of the
    general function are a per-message cost. With nothing to sample, ``order="code"``, ``U_u``,
    ``V`` C-contiguous arrays of ``dtype`` and every rated item a row of ``V`` it is one compiled
    pass over the rated rows of ``V`` (``_sgd_numba.batch_client_rows``); otherwise it calls
    ``batch_client_step``.
    """

    __slots__ = ("rated", "ratings", "dtype", "lam", "order", "settings", "_rows_needed", "_lam", "_direct", "_pass")

    def __init__(self, rated_items, ratings, dtype, *, lam: float, order: str = "code", rho: float = 0.0,
                 strategy: str = "ua", T_predict: int = 10, T_local: int = 10, hf_convention: str = "code") -> None:
        self.dtype = np.dtype(dtype)
        self.rated = np.ascontiguousarray(rated_items, dtype=np.int32)
        self.ratings = np.ascontiguousarray(ratings, dtype=self.dtype)
        self.lam = lam
        self.order = order
        self.settings = dict(lam=lam, rho=rho, strategy=strategy, T_predict=T_predict, T_local=T_local,
                             hf_convention=hf_convention, order=order)
        self._lam = self.dtype.type(lam)
        # the compiled pass reads V[rated] unchecked: V needs this many rows (a negative id, which
        # NumPy's indexing would count from the end, is left to batch_client_step)
        n = self.rated.shape[0]
        self._rows_needed = 0 if n == 0 else (int(self.rated.max()) + 1 if self.rated.min() >= 0 else None)
        # whether a step without a given sample may take the compiled pass (V permitting)
        self._direct = rho <= 0 and order == "code" and n > 0 and self._rows_needed is not None
        k = _sgd_numba.compiled()
        self._pass = None if k is None else k.batch_client_rows

    def step(self, U_u, V, t: int, lr: float, rng=None, sampled=None) -> ClientUpload:
        dt = self.dtype
        if (self._direct and sampled is None and self._pass is not None and type(V) is np.ndarray
                and type(U_u) is np.ndarray and V.dtype == dt and U_u.dtype == dt and V.ndim == 2
                and V.shape[0] >= self._rows_needed and U_u.shape == (V.shape[1],) and V.flags.c_contiguous
                and U_u.flags.c_contiguous):
            n = self.rated.shape[0]
            new_u = np.empty(U_u.shape[0], dtype=dt)
            grads = np.empty((n, U_u.shape[0]), dtype=dt)
            if -_RATE_MAX <= lr <= _RATE_MAX:
                par = np.array((lr, self._lam, n), dtype=dt)
            else:
                with np.errstate(over="ignore"):  # (a rate beyond the dtype: inf, as batch_client_step's)
                    par = np.array((lr, self._lam, n), dtype=dt)
            self._pass(U_u, V, self.rated, self.ratings, par, new_u, grads)
            return ClientUpload(new_u, self.rated, grads, None, n)
        return batch_client_step(U_u, V, self.rated, self.ratings, t=t, lr=lr, rng=rng, sampled=sampled,
                                 **self.settings)


# --------------------------------------------------------------------------------------------
# Stochastic style (Algorithms 4-5)


def pmf_sgd_client(U_u, V_rows, ratings, lr, lam, *, backend=None, order: str = "code"):
    """Sequential SGD of one client over ``V_rows`` (items in the order given) with fixed V:
    U_u updated after every rating, each item gradient taken with the current U_u before that
    rating's update (``order="code"``, the authors' code) or with the updated U_u and its
    recomputed error (``order="paper"``, Algorithm 5 as printed). Returns ``(new_U_u,
    item_grads)``. numba-compiled when available (``backend``: None/"auto", "numba", "python";
    identical numbers)."""
    V_rows = np.ascontiguousarray(V_rows)
    dt = V_rows.dtype
    k = _sgd_numba.kernels(backend)
    U = np.array(U_u, dtype=dt, copy=True)
    n = V_rows.shape[0]
    grads = np.empty((n, V_rows.shape[1]), dtype=dt)
    items = np.arange(n, dtype=np.int32)
    k.pmf_pass(U, V_rows, items, np.asarray(ratings, dtype=dt), _sgd_numba.make_par(lr, lam, dt, order), grads, 0)
    return U, grads


def pmf_sgd_client_step(
    U_u, V, rated_items, ratings, *, t: int, lr: float, lam: float, rng=None, rho: float = 0.0,
    strategy: str = "ua", T_predict: int = 10, T_local: int = 10, hf_convention: str = "code",
    sampled=None, r_mean=None, backend=None, order: str = "code",
) -> ClientUpload:
    """Algorithm 5 (+3) for one client: one training call at the server's 0-based iteration
    ``t`` with the client's own current learning rate ``lr`` (decayed per call of this client).

    SGD over the rated items, then (HF, when active) T_local SGD passes of a copy of U_u from
    the state after that pass, virtual ratings, then SGD over the sampled items (authors' order).
    ``r_mean``: the user's mean rating (computed with :func:`user_mean` if not given).
    ``order``: each item gradient with U_u before its step ("code") or after it ("paper", see
    :func:`pmf_sgd_client`).
    """
    return sgd_client_call(
        U_u, V, None, rated_items, ratings, t=t, lr=lr, lam=lam, rng=rng, rho=rho,
        strategy=strategy, T_predict=T_predict, T_local=T_local, hf_convention=hf_convention,
        sampled=sampled, r_mean=r_mean, backend=backend, order=order,
    )
