"""Centralized ("unfederated") FedRec trainers: PMF(B), PMF(S), SVD++(S).

Each trainer has two engines that must agree (tests: max abs difference <= 1e-9 in float64):

* ``engine="central"`` (default): batch PMF vectorised over all ratings (bincount scatter), the
  stochastic models one compiled kernel call per iteration (numba when available);
* ``engine="clients"``: user by user through the per-client functions
  (:func:`~fedsim.math.pmf.batch_client_step`, :func:`~fedsim.math.pmf.pmf_sgd_client_step`,
  :func:`~fedsim.math.svdpp.svdpp_sgd_client_step`) and the server functions, i.e. exactly what
  federated actors do, minus the messages.

Random streams (the federated actors must use the same, in the same order): client u owns
``user_rngs(u)``; it draws its U_u at creation (``init_user_factor``) and then one
``sample_unrated`` per training call (nothing when rho = 0). The server owns ``server_rng``: it
draws V (``init_item_factors``), then for SVD++ O (same call), then each stochastic iteration the
user order (``draw_user_order``). Rated items of a client are visited in ascending item index
(the CSR built by :func:`to_csr`). Iterations are 0-based inside (``t``), 1-based in the history.

With rho = 0 no sampling happens and a federated run equals the unfederated one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from . import _sgd_numba
from .csr import csr_order
from .filling import hf_active, sample_unrated, user_mean
from .pmf import (
    DivergenceError,
    apply_mean_step,
    batch_client_step,
    check_finite,
    decayed_lr,
    draw_user_order,
    init_item_factors,
    init_user_factor,
    pmf_sgd_client_step,
    server_apply_mean,
    server_apply_sgd,
)
from .svdpp import server_apply_o_delta, svdpp_implicit, svdpp_sgd_client_step

__all__ = [
    "DivergenceError",
    "TrainResult",
    "evaluate",
    "predict_ratings",
    "rowdot",
    "to_csr",
    "train_pmf_batch",
    "train_pmf_sgd",
    "train_svdpp_sgd",
]


@dataclass
class TrainResult:
    """Outcome of a trainer. ``history``: one dict per iteration (``iteration`` 1-based, ``lr``,
    and ``mae``/``rmse`` on the test set if one was given). ``diverged_at``: 1-based iteration
    at which non-finite values appeared (only with ``on_divergence="stop"``; else it raises).
    ``iterations``: the iterations whose result the parameters are (0: an initial model), the
    iteration :meth:`evaluate` names when the parameters are finite but their predictions are not."""

    model: str
    U: np.ndarray
    V: np.ndarray
    O: np.ndarray | None = None
    indptr: np.ndarray | None = None
    indices: np.ndarray | None = None
    history: list[dict] = field(default_factory=list)
    diverged_at: int | None = None
    params: dict = field(default_factory=dict)
    iterations: int = 0

    def predict(self, users, items) -> np.ndarray:
        """Unclipped predictions (SVD++ with Obar over all the user's training items)."""
        return predict_ratings(self.U, self.V, users, items, self.O, self.indptr, self.indices)

    def evaluate(self, users, items, ratings, clip=(1.0, 5.0)) -> tuple[float, float]:
        """(MAE, RMSE) with predictions clipped to ``clip``; raises DivergenceError if
        the run diverged (at ``diverged_at``) or predictions are not finite (at ``iterations``,
        the iteration after which the model giving them was found, as the trainers number it)."""
        if self.diverged_at is not None:
            raise DivergenceError(self.diverged_at, "parameters", self.model)
        try:
            return evaluate(self.predict(users, items), ratings, clip=clip, model=self.model)
        except DivergenceError as exc:
            raise DivergenceError(self.iterations, exc.what, self.model) from None


# --------------------------------------------------------------------------------------------
# Helpers


def to_csr(users, items, ratings, n_users: int, dtype=np.float64):
    """Per-user CSR ``(indptr int64, indices int32, data dtype)``, items ascending in a row
    (:func:`fedsim.math.csr.csr_order`). Raises ``ValueError`` for a user index outside
    ``[0, n_users)``."""
    items = np.asarray(items)
    indptr, order = csr_order(users, items, n_users)
    return indptr, items[order].astype(np.int32), np.asarray(ratings)[order].astype(dtype)


def rowdot(A, B) -> np.ndarray:
    """Row-wise dot products of two (k, d) arrays."""
    return np.einsum("kd,kd->k", A, B)


def predict_ratings(U, V, users, items, O=None, indptr=None, indices=None) -> np.ndarray:
    """PMF U_u.V_i, or SVD++ (U_u + Obar_u).V_i when O (and the training CSR) is given."""
    users = np.asarray(users)
    items = np.asarray(items)
    if O is None:
        return rowdot(U[users], V[items])
    Obar = svdpp_implicit(O, indptr, indices)
    return rowdot(U[users] + Obar[users], V[items])


def evaluate(pred, ratings, clip=(1.0, 5.0), model: str = "") -> tuple[float, float]:
    """(MAE, RMSE) of predictions clipped to ``clip`` (None: no clipping), in float64.
    Non-finite predictions raise :class:`DivergenceError` instead of giving NaN metrics."""
    p = np.asarray(pred, dtype=np.float64)
    if not np.isfinite(p).all():
        raise DivergenceError(0, "predictions", model)
    if clip is not None:
        p = np.clip(p, clip[0], clip[1])
    err = p - np.asarray(ratings, dtype=np.float64)
    return float(np.mean(np.abs(err))), float(np.sqrt(np.mean(err * err)))


def _quiet_overflow(fn):
    """Divergence is detected and reported explicitly (DivergenceError / diverged_at), so the
    overflow warnings NumPy would print on the way there are silenced inside the trainers."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with np.errstate(over="ignore", invalid="ignore"):
            return fn(*args, **kwargs)

    return wrapper


@dataclass
class _Setup:
    model: str
    dt: np.dtype
    n: int
    m: int
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    gens: list
    U: np.ndarray
    V: np.ndarray
    O: np.ndarray | None
    means: np.ndarray
    test: tuple | None


def _setup(model, users, items, ratings, n_users, n_items, d, user_rngs, server_rng, dtype,
           init_scale, implicit, test, strategy, engine, on_divergence) -> _Setup:
    if on_divergence not in ("raise", "stop"):
        raise ValueError(f"on_divergence must be 'raise' or 'stop', got {on_divergence!r}")
    if strategy not in ("ua", "hf"):
        raise ValueError(f"strategy must be 'ua' or 'hf', got {strategy!r}")
    if engine not in ("central", "clients"):
        raise ValueError(f"engine must be 'central' or 'clients', got {engine!r}")
    dt = np.dtype(dtype)
    n, m = int(n_users), int(n_items)
    items = np.asarray(items)
    if items.size and (items.min() < 0 or items.max() >= m):
        raise ValueError("item index out of range")
    ratings = np.asarray(ratings)
    # a NaN rating was reported as the model's divergence some iterations later (or never: a
    # ratings array longer than the items was cut without a word)
    _check_ratings("training", items, ratings)
    indptr, indices, data = to_csr(users, items, ratings, n, dt)
    if callable(user_rngs):
        gens = [user_rngs(u) for u in range(n)]
    else:
        gens = list(user_rngs)
        if len(gens) != n:
            raise ValueError(f"need {n} user generators, got {len(gens)}")
    U = np.empty((n, int(d)), dtype=dt)
    for u in range(n):
        U[u] = init_user_factor(gens[u], d, scale=init_scale, dtype=dt)
    V = init_item_factors(server_rng, m, d, scale=init_scale, dtype=dt)
    O = init_item_factors(server_rng, m, d, scale=init_scale, dtype=dt) if implicit else None
    means = np.array([user_mean(data[indptr[u]:indptr[u + 1]], dt) for u in range(n)], dtype=dt)
    if test is not None:
        test = tuple(np.asarray(a) for a in test)
        _check_ratings("test", test[1], test[2])
    return _Setup(model, dt, n, m, indptr, indices, data, gens, U, V, O, means, test)


def _check_ratings(what: str, items: np.ndarray, ratings: np.ndarray) -> None:
    """Raise ``ValueError`` for ratings that are not one finite number per item index."""
    if ratings.shape != items.shape:
        raise ValueError(f"{what} ratings have shape {ratings.shape}, the item indices {items.shape}")
    if ratings.size and not np.all(np.isfinite(ratings)):
        k = int(np.flatnonzero(~np.isfinite(ratings))[0])
        raise ValueError(f"{what} rating {k} is not finite: {ratings[k]!r}")


def _after_iteration(st: _Setup, t, lr_t, history, callback, on_divergence):
    """Divergence check, history, callback. Returns the 1-based iteration if diverged."""
    try:
        check_finite(t + 1, st.model, U=st.U, V=st.V, O=st.O)
        rec = {"iteration": t + 1, "lr": lr_t}
        if st.test is not None:
            pred = predict_ratings(st.U, st.V, st.test[0], st.test[1], st.O, st.indptr, st.indices)
            try:
                rec["mae"], rec["rmse"] = evaluate(pred, st.test[2], model=st.model)
            except DivergenceError as exc:
                raise DivergenceError(t + 1, exc.what, st.model) from None
    except DivergenceError:
        if on_divergence == "raise":
            raise
        return t + 1
    history.append(rec)
    if callback is not None:
        callback(t + 1, {"U": st.U, "V": st.V, "O": st.O, "lr": lr_t})
    return None


def _result(st: _Setup, history, diverged_at, params) -> TrainResult:
    # a diverged run's evaluate names diverged_at; else the parameters are those after every iteration
    return TrainResult(st.model, st.U, st.V, st.O, st.indptr, st.indices, history, diverged_at,
                       params, iterations=int(params["T"]) if diverged_at is None else diverged_at)


def _sample(st: _Setup, u: int, rho: float, resample: bool, cache: dict):
    if rho <= 0:
        return np.empty(0, np.int32)
    if not resample and u in cache:
        return cache[u]
    s = sample_unrated(st.gens[u], st.indices[st.indptr[u]:st.indptr[u + 1]], st.m, rho)
    cache[u] = s
    return s


# --------------------------------------------------------------------------------------------
# PMF(B)


@_quiet_overflow
def train_pmf_batch(
    users, items, ratings, n_users: int, n_items: int, *, d: int = 20, T: int = 100,
    lr: float = 0.8, lam: float = 0.001, rho: float = 0.0, strategy: str = "ua",
    T_predict: int = 10, T_local: int = 10, hf_convention: str = "code",
    user_rngs: Callable[[int], np.random.Generator] | Sequence[np.random.Generator],
    server_rng: np.random.Generator, dtype=np.float64, order: str = "code", decay: float = 0.9,
    init_scale: float = 0.005, resample: bool = True, test=None, callback=None,
    on_divergence: str = "raise", engine: str = "central", backend: str | None = None,
) -> TrainResult:
    """Batch PMF (Algorithms 1-3): every iteration every client computes Eq. 7/8 on its rated and
    sampled items with the same V; the server averages item gradients over the users who sent
    one (Eq. 9). One learning rate for U and V, lr * decay**t at 0-based iteration t.

    ``test``: optional ``(users, items, ratings)`` evaluated (clipped MAE/RMSE) each iteration.
    ``callback(iteration, state)`` after each iteration. ``on_divergence``: ``"raise"``
    (:class:`DivergenceError`) or ``"stop"`` (return with ``diverged_at`` set). Raises
    ``ValueError`` for an index out of range or ratings (training or test) that are not one
    finite number per item index.
    """
    st = _setup("PMF(B)", users, items, ratings, n_users, n_items, d, user_rngs, server_rng, dtype,
                init_scale, False, test, strategy, engine, on_divergence)
    params = dict(d=d, T=T, lr=lr, lam=lam, rho=rho, strategy=strategy, T_predict=T_predict,
                  T_local=T_local, hf_convention=hf_convention, order=order, decay=decay,
                  resample=resample, dtype=str(st.dt), engine=engine,
                  backend=_sgd_numba.backend_name(backend))
    if order not in ("code", "paper"):
        raise ValueError(f"order must be 'code' or 'paper', got {order!r}")
    dt = st.dt.type
    n = st.n
    counts_u = np.diff(st.indptr)
    cu = np.repeat(np.arange(n), counts_u)
    ci, cr = st.indices.astype(np.int64), st.data
    cache: dict = {}
    history: list = []
    diverged = None
    for t in range(int(T)):
        lr_t = decayed_lr(lr, t, decay)
        if engine == "clients":
            ups = []
            for u in range(n):
                lo, hi = st.indptr[u], st.indptr[u + 1]
                up = batch_client_step(
                    st.U[u], st.V, st.indices[lo:hi], st.data[lo:hi], t=t, lr=lr_t, lam=lam,
                    strategy=strategy, T_predict=T_predict, T_local=T_local,
                    hf_convention=hf_convention, order=order,
                    sampled=_sample(st, u, rho, resample, cache),
                )
                ups.append(up)
            for u, up in enumerate(ups):
                st.U[u] = up.U
            if ups:
                server_apply_mean(st.V, np.concatenate([up.items for up in ups]),
                                  np.concatenate([up.grads for up in ups]), lr_t)
        else:
            _batch_iteration(st, t, lr_t, lam, rho, strategy, T_predict, T_local, hf_convention,
                             order, resample, cache, cu, ci, cr, counts_u, dt, backend)
        diverged = _after_iteration(st, t, lr_t, history, callback, on_divergence)
        if diverged is not None:
            break
    return _result(st, history, diverged, params)


def _batch_iteration(st, t, lr_t, lam, rho, strategy, T_predict, T_local, hf_convention, order,
                     resample, cache, cu, ci, cr, counts_u, dt, backend):
    n, m, d = st.n, st.m, st.V.shape[1]
    U, V = st.U, st.V
    user_sums, item_sums, _ = _sgd_numba.scatter_kernels(backend)
    lr_ = dt(lr_t)
    lam_ = dt(lam)
    if rho > 0:
        samples = [_sample(st, u, rho, resample, cache) for u in range(n)]
        ks = np.array([s.shape[0] for s in samples], dtype=np.int64)
    else:
        ks = np.zeros(n, dtype=np.int64)
    if ks.sum() > 0:
        su = np.repeat(np.arange(n), ks)
        si = np.concatenate(samples).astype(np.int64)
        if strategy == "hf" and hf_active(t, T_predict, hf_convention):
            # HF: copies of every U_u take T_local full-batch steps on the rated items only
            tU = U.copy()
            has = counts_u > 0
            nu = counts_u[has].astype(st.dt)[:, None]
            for _ in range(int(T_local)):
                g = np.zeros((n, d), dtype=np.float64)
                user_sums(tU, V, cu, ci, cr, g)
                tU[has] = tU[has] - lr_ * (g[has].astype(st.dt) / nu + lam_ * tU[has])
            virt = rowdot(tU[su], V[si])
        else:
            virt = st.means[su]
        au = np.concatenate([cu, su])
        ai = np.concatenate([ci, si])
        ar = np.concatenate([cr, virt])
    else:
        au, ai, ar = cu, ci, cr
    k_u = np.bincount(au, minlength=n)
    active = k_u > 0
    gU = np.zeros((n, d), dtype=np.float64)
    user_sums(U, V, au, ai, ar, gU)
    newU = U.copy()
    newU[active] = U[active] - lr_ * (
        gU[active].astype(st.dt) / k_u[active, None].astype(st.dt) + lam_ * U[active]
    )
    gV = np.zeros((m, d), dtype=np.float64)
    item_sums(U if order == "code" else newU, V, au, ai, ar, lam_, gV)
    U[:] = newU
    apply_mean_step(V, gV.astype(st.dt), np.bincount(ai, minlength=m), lr_t)


# --------------------------------------------------------------------------------------------
# PMF(S) and SVD++(S)


@_quiet_overflow
def _train_sgd(model, implicit, users, items, ratings, n_users, n_items, *, d, T, lr, client_lr,
               lam, rho, strategy, T_predict, T_local, hf_convention, user_rngs, server_rng, dtype,
               decay, init_scale, resample, test, callback, on_divergence, engine, backend,
               update_order="code"):
    flag = _sgd_numba.order_flag(update_order)
    st = _setup(model, users, items, ratings, n_users, n_items, d, user_rngs, server_rng, dtype,
                init_scale, implicit, test, strategy, engine, on_divergence)
    client_lr = lr if client_lr is None else client_lr
    params = dict(d=d, T=T, lr=lr, client_lr=client_lr, lam=lam, rho=rho, strategy=strategy,
                  T_predict=T_predict, T_local=T_local, hf_convention=hf_convention, decay=decay,
                  resample=resample, dtype=str(st.dt), engine=engine,
                  backend=_sgd_numba.backend_name(backend))
    if update_order != "code":
        params["order"] = update_order
    dt = st.dt
    n = st.n
    calls = np.zeros(n, dtype=np.int64)
    cache: dict = {}
    history: list = []
    diverged = None
    lr_table: list[float] = []
    k = _sgd_numba.kernels(backend)
    counts_u = np.diff(st.indptr)
    s1_u, s_u, nm1_u, nf_u = _sgd_numba.implicit_norms(counts_u, dt)
    O_arr = st.O if implicit else np.zeros((1, st.V.shape[1]), dtype=dt)
    for t in range(int(T)):
        lr_t = decayed_lr(lr, t, decay)
        order = draw_user_order(server_rng, n)
        need = int(calls.max()) + int(np.bincount(order, minlength=n).max()) + 1 if n else 0
        while len(lr_table) < need:
            lr_table.append(decayed_lr(client_lr, len(lr_table), decay))
        if engine == "clients":
            step = svdpp_sgd_client_step if implicit else pmf_sgd_client_step
            for u in order:
                lo, hi = st.indptr[u], st.indptr[u + 1]
                extra = (st.O,) if implicit else ()
                up = step(st.U[u], st.V, *extra, st.indices[lo:hi], st.data[lo:hi], t=t,
                          lr=lr_table[calls[u]], lam=lam, strategy=strategy, T_predict=T_predict,
                          T_local=T_local, hf_convention=hf_convention,
                          sampled=_sample(st, u, rho, resample, cache), r_mean=st.means[u],
                          backend=backend, order=update_order)
                calls[u] += 1
                st.U[u] = up.U
                server_apply_sgd(st.V, up.items, up.grads, lr_t)
                if implicit:
                    server_apply_o_delta(st.O, up.items, up.o_deltas)
        else:
            lrs = np.empty(n, dtype=np.float64)
            for j, u in enumerate(order):
                lrs[j] = lr_table[calls[u]]
                calls[u] += 1
            pars = np.empty((n, _sgd_numba.P_SIZE), dtype=dt)
            lr_d = lrs.astype(dt)
            lam_d = dt.type(lam)
            pars[:, _sgd_numba.P_LR] = lr_d
            pars[:, _sgd_numba.P_LAM] = lam_d
            pars[:, _sgd_numba.P_C] = dt.type(1) - lr_d * lam_d
            pars[:, _sgd_numba.P_ONE] = dt.type(1)
            pars[:, _sgd_numba.P_ZERO] = dt.type(0)
            pars[:, _sgd_numba.P_ORDER] = dt.type(flag)
            samples = [_sample(st, int(u), rho, resample, cache) for u in order]
            ks = np.array([s.shape[0] for s in samples], dtype=np.int64)
            s_indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(ks, out=s_indptr[1:])
            s_items = np.concatenate(samples) if n else np.empty(0, np.int32)
            width = int((counts_u[order] + ks).max()) if n else 0
            grads = np.empty((width, st.V.shape[1]), dtype=dt)
            odelta = np.empty((width if implicit else 0, st.V.shape[1]), dtype=dt)
            use_hf = strategy == "hf" and hf_active(t, T_predict, hf_convention)
            k.stochastic_epoch(st.U, st.V, O_arr, st.indptr, st.indices, st.data, order, pars,
                               dt.type(lr_t), s_indptr, s_items.astype(np.int32), st.means,
                               bool(use_hf), int(T_local), s1_u, s_u, nm1_u, nf_u, bool(implicit),
                               grads, odelta)
        diverged = _after_iteration(st, t, lr_t, history, callback, on_divergence)
        if diverged is not None:
            break
    return _result(st, history, diverged, params)


def train_pmf_sgd(
    users, items, ratings, n_users: int, n_items: int, *, d: int = 20, T: int = 100,
    lr: float = 0.01, client_lr: float | None = None, lam: float = 0.001, rho: float = 0.0,
    strategy: str = "ua", T_predict: int = 10, T_local: int = 10, hf_convention: str = "code",
    user_rngs, server_rng: np.random.Generator, dtype=np.float64, decay: float = 0.9,
    init_scale: float = 0.005, resample: bool = True, test=None, callback=None,
    on_divergence: str = "raise", engine: str = "central", backend: str | None = None,
    order: str = "code",
) -> TrainResult:
    """Stochastic PMF (Algorithms 4-5, authors' code): each iteration the server draws n users
    with replacement; each drawn client runs sequential SGD over its rated items (ascending item
    order) then its sampled items, and the server applies its V gradients at once.

    ``lr``: the server's learning rate for V, lr * decay**t at iteration t. ``client_lr``
    (default ``lr``): each client's rate for U_u, client_lr * decay**k at its k-th call.
    Other parameters as :func:`train_pmf_batch`; ``backend`` selects numba/python kernels;
    ``order``: "code" (the authors' update order) or "paper" (Algorithm 5 as printed: each item
    gradient after U_u's step, see ``_sgd_numba.pmf_pass``).
    """
    return _train_sgd("PMF(S)", False, users, items, ratings, n_users, n_items, d=d, T=T, lr=lr,
                      client_lr=client_lr, lam=lam, rho=rho, strategy=strategy,
                      T_predict=T_predict, T_local=T_local, hf_convention=hf_convention,
                      user_rngs=user_rngs, server_rng=server_rng, dtype=dtype, decay=decay,
                      init_scale=init_scale, resample=resample, test=test, callback=callback,
                      on_divergence=on_divergence, engine=engine, backend=backend, update_order=order)


def train_svdpp_sgd(
    users, items, ratings, n_users: int, n_items: int, *, d: int = 20, T: int = 100,
    lr: float = 0.01, client_lr: float | None = None, lam: float = 0.001, rho: float = 0.0,
    strategy: str = "ua", T_predict: int = 10, T_local: int = 10, hf_convention: str = "code",
    user_rngs, server_rng: np.random.Generator, dtype=np.float64, decay: float = 0.9,
    init_scale: float = 0.005, resample: bool = True, test=None, callback=None,
    on_divergence: str = "raise", engine: str = "central", backend: str | None = None,
    order: str = "code",
) -> TrainResult:
    """Stochastic SVD++ (authors' code): as :func:`train_pmf_sgd` with prediction
    (U_u + Obar_u).V_i; O is initialised by the server right after V and moved by the clients
    with their own learning rate (uploaded as deltas, see :mod:`fedsim.math.svdpp`). The result
    carries O and the training CSR so that ``result.predict`` uses Obar over all rated items."""
    return _train_sgd("SVD++(S)", True, users, items, ratings, n_users, n_items, d=d, T=T, lr=lr,
                      client_lr=client_lr, lam=lam, rho=rho, strategy=strategy,
                      T_predict=T_predict, T_local=T_local, hf_convention=hf_convention,
                      user_rngs=user_rngs, server_rng=server_rng, dtype=dtype, decay=decay,
                      init_scale=init_scale, resample=resample, test=test, callback=callback,
                      on_divergence=on_divergence, engine=engine, backend=backend, update_order=order)
