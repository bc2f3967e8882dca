"""The stochastic client call PMF(S) and SVD++(S) share (Algorithm 5 with either model), and the
upload every FedRec client step returns."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import _sgd_numba
from .filling import hf_active, sample_unrated, user_mean

__all__ = ["ClientUpload", "SGDClient", "sgd_client_call"]


class ClientUpload(NamedTuple):
    """What a client's training call produces. ``U`` stays on the client; ``items`` and
    ``grads`` (rated items first, in their fixed order, then the sampled ones) are uploaded;
    ``o_deltas`` (SVD++ only) is uploaded with them; ``n_rated`` is private (tests only)."""

    U: np.ndarray
    items: np.ndarray
    grads: np.ndarray
    o_deltas: np.ndarray | None = None
    n_rated: int = 0



def _run_client(U_u, V, O, rated_items, ratings, sampled, r_ua, use_hf, T_local, lr, lam, backend, order="code"):
    V = np.ascontiguousarray(V)
    dt = V.dtype
    rated = np.ascontiguousarray(rated_items, dtype=np.int32)
    Oa = None if O is None else np.ascontiguousarray(O, dtype=dt)
    return _call(_sgd_numba.kernels(backend), U_u, V, Oa, rated, np.ascontiguousarray(ratings, dtype=dt),
                 np.ascontiguousarray(sampled, dtype=np.int32), dt.type(r_ua), use_hf, T_local, lr, lam,
                 _norms(rated.shape[0], dt), _sgd_numba.order_flag(order))


_RATE_MAX = _sgd_numba.RATE_MAX


def _call(k, U_u, V, O, rated, r, sampled, r_ua, use_hf, T_local, lr, lam, norms, order_flag=0.0,
          par=None) -> ClientUpload:
    # Called once per stochastic exchange with arrays already contiguous and of V's dtype: every
    # NumPy call here is a per-message cost, so the constants of a client (its norms) and of a
    # shape (the unused SVD++ arrays of PMF) come cached, and the rated items are uploaded as they
    # are when nothing was sampled.
    dt = V.dtype
    _, d = V.shape  # (a V that is not 2-D: ValueError here, not a compile error of the kernel)
    N, K = rated.shape[0], sampled.shape[0]
    implicit = O is not None
    if implicit:
        _, d_o = O.shape  # (O's width: a narrower O is refused by the kernel, not read past its rows)
        Oa, odelta = O, np.empty((N + K, d_o), dtype=dt)
    else:
        Oa, odelta = _unused(d, dt)
    if -_RATE_MAX <= lr <= _RATE_MAX and -_RATE_MAX <= lr * lam <= _RATE_MAX:  # (else errstate: see below)
        par = _rate_par(dt, lr, lam, order_flag, par)
    else:
        # a rate beyond the dtype (lr = 1e40 in float32, or decay = 1e23) is inf there: the
        # parameters diverge, as the server's check finds (NumPy's overflow warning said it
        # first, from every client); errstate only here: it costs a microsecond per message
        with np.errstate(over="ignore", invalid="ignore"):
            par = _rate_par(dt, lr, lam, order_flag, par)
    s1, s, nm1, nf = norms
    U = np.array(U_u, dtype=dt, copy=True)
    grads = np.empty((N + K, d), dtype=dt)
    # the kernel refuses an item past the end of V (or O), and a V (or O) narrower than U, which
    # compiled code would read unchecked (other memory, silently) where the Python fallback
    # raises: IndexError (ValueError for the width) for both
    if not k.sgd_client(U, V, Oa, rated, r, sampled, r_ua, bool(use_hf), int(T_local), par,
                        s1, s, nm1, nf, implicit, grads, odelta):
        if V.shape[1] != U.shape[0] or (implicit and O.shape[1] != U.shape[0]):
            raise ValueError(f"item factors of shape {V.shape}" + (f" (O {O.shape})" if implicit else "")
                             + f" for a user factor of {U.shape[0]}: they must be {U.shape[0]} wide")
        rows = V.shape[0] if not implicit else min(V.shape[0], O.shape[0])
        raise IndexError(f"an item index is out of bounds for the {rows} rows of the item factors")
    items = np.concatenate([rated, sampled]) if K else rated
    return ClientUpload(U, items, grads, odelta if implicit else None, N)


_EMPTY = np.empty(0, dtype=np.int32)  # nothing sampled (writeable: numba compiles read-only arrays apart)


class SGDClient:
    """One client's rated items, ratings and training settings, fixed once, for its stochastic
    training calls.

    ``SGDClient(rated_items, ratings, dtype, order="code", lam=0.0, rho=0.0, strategy="ua",
    T_predict=10, T_local=10, hf_convention="code", backend=None)`` converts the ratings to
    ``dtype`` once (``order`` and the rest: as ``sgd_client_call``'s); ``call(U_u, V, O, t, lr,
    rng=None, sampled=None)`` (``O=None``: PMF(S), else SVD++(S)) returns, bit for bit, what
    ``sgd_client_call`` returns for these converted ratings (their mean computed once) and
    settings: it is that call without the per-call conversions and keyword arguments (a
    stochastic client is called once per exchange, so they are a per-message cost). ``V`` (or
    ``O``) that is not a C-contiguous array of ``dtype`` goes through ``sgd_client_call`` itself.
    Raises ``ValueError`` for an unknown ``order`` or ``strategy``. With ``strict=True`` (a client
    given ``V`` off the wire), ``call`` raises ``ValueError`` for a ``V`` (or ``O``) that is not a
    NumPy array of ``dtype`` instead of computing in its dtype (a float16 ``V`` was a bare
    ``NotImplementedError``, an integer one gave integer gradients, another float dtype was taken
    silently); the check is made only where the fast path already declined the arrays.
    """

    __slots__ = ("rated", "ratings", "r_mean", "dtype", "order", "lam", "rho", "strategy", "T_predict",
                 "T_local", "hf_convention", "backend", "strict", "_norms", "_order_flag", "_kernels", "_par")

    def __init__(self, rated_items, ratings, dtype, order="code", *, lam: float = 0.0, rho: float = 0.0,
                 strategy: str = "ua", T_predict: int = 10, T_local: int = 10, hf_convention: str = "code",
                 backend=None, strict: bool = False) -> None:
        self._order_flag = _sgd_numba.order_flag(order)  # raises ValueError for an unknown order
        if strategy not in ("ua", "hf"):
            raise ValueError(f"strategy must be 'ua' or 'hf', got {strategy!r}")
        self.order = order
        self.dtype = np.dtype(dtype)
        self.rated = np.ascontiguousarray(rated_items, dtype=np.int32)
        self.ratings = np.ascontiguousarray(ratings, dtype=self.dtype)
        self.r_mean = user_mean(self.ratings, self.dtype)
        self._norms = _norms(self.rated.shape[0], self.dtype)
        self.lam, self.rho, self.strategy = lam, rho, strategy
        self.T_predict, self.T_local, self.hf_convention = T_predict, T_local, hf_convention
        self.backend = backend
        self.strict = bool(strict)
        self._kernels = _sgd_numba.kernels(backend)  # raises for an unknown or unavailable backend
        # the kernels' parameter vector, owned by this client: each call sets only its rate
        self._par = _sgd_numba.make_par(0.0, lam, self.dtype, order)

    def call(self, U_u, V, O, t, lr, rng=None, sampled=None) -> ClientUpload:
        dt = self.dtype
        if (type(V) is not np.ndarray or V.dtype != dt or not V.flags.c_contiguous
                or (O is not None and (type(O) is not np.ndarray or O.dtype != dt or not O.flags.c_contiguous))):
            if self.strict:
                for name, a in (("V", V), ("O", O)):
                    if a is not None and (type(a) is not np.ndarray or a.dtype != dt):
                        got = a.dtype if isinstance(a, np.ndarray) else type(a).__name__
                        raise ValueError(f"{name} must be a {dt} array (the run's dtype), got {got}")
            return sgd_client_call(U_u, V, O, self.rated, self.ratings, t=t, lr=lr, lam=self.lam, rng=rng,
                                   rho=self.rho, strategy=self.strategy, T_predict=self.T_predict,
                                   T_local=self.T_local, hf_convention=self.hf_convention, sampled=sampled,
                                   r_mean=None, backend=self.backend, order=self.order)
        rated = self.rated
        if sampled is None:
            sampled = sample_unrated(rng, rated, V.shape[0], self.rho) if self.rho > 0 else _EMPTY
        else:
            sampled = np.ascontiguousarray(sampled, dtype=np.int32)
        use_hf = self.strategy == "hf" and hf_active(t, self.T_predict, self.hf_convention)
        return _call(self._kernels, U_u, V, O, rated, self.ratings, sampled, self.r_mean, use_hf,
                     self.T_local, lr, self.lam, self._norms, self._order_flag, self._par)


def _rate_par(dt, lr, lam, order_flag, par):
    lr_ = dt.type(lr)
    if par is None:
        lam_ = dt.type(lam)
        # make_par's vector (P_LR, P_LAM, P_C, P_ONE, P_ZERO, P_ORDER), built in one call
        return np.array((lr_, lam_, dt.type(1) - lr_ * lam_, 1, 0, order_flag), dtype=dt)
    # a client's own vector (dtype dt, P_LAM and the constants set): only the rate changes
    par[_sgd_numba.P_LR] = lr_
    par[_sgd_numba.P_C] = par[_sgd_numba.P_ONE] - lr_ * par[_sgd_numba.P_LAM]
    return par


_NORMS: dict[tuple[int, np.dtype], tuple] = {}
_UNUSED: dict[tuple[int, np.dtype], tuple] = {}


def _norms(n: int, dt: np.dtype) -> tuple:
    """``implicit_norms(n, dt)`` as dtype scalars, cached per (n, dtype)."""
    key = (n, dt)
    got = _NORMS.get(key)
    if got is None:
        if len(_NORMS) > 65536:
            _NORMS.clear()
        got = _NORMS[key] = tuple(x[()] for x in _sgd_numba.implicit_norms(n, dt))
    return got


def _unused(d: int, dt: np.dtype) -> tuple:
    """The O and O-delta arrays a PMF call passes (placeholders the kernel never touches; left
    writeable, since numba compiles a separate, and here uncompilable, body for read-only ones)."""
    key = (d, dt)
    got = _UNUSED.get(key)
    if got is None:
        got = _UNUSED[key] = (np.zeros((1, d), dtype=dt), np.empty((0, d), dtype=dt))
    return got


def sgd_client_call(U_u, V, O, rated_items, ratings, *, t, lr, lam, rng, rho, strategy,
                    T_predict, T_local, hf_convention, sampled, r_mean, backend, order="code") -> ClientUpload:
    """One stochastic training call of a client (PMF(S) with ``O=None``, SVD++(S) with ``O``):
    draw the sampled items (unless given), decide whether hybrid filling is active at iteration
    ``t``, run the compiled (or fallback) SGD passes (``order``: "code", the authors' update
    order, or "paper", Algorithm 5 as printed; see ``_sgd_numba.pmf_pass``). See ``pmf_sgd_client_step`` and
    ``svdpp_sgd_client_step`` for the arguments."""
    V = np.asarray(V)
    dt = V.dtype
    rated = np.asarray(rated_items, dtype=np.int32)
    if strategy not in ("ua", "hf"):
        raise ValueError(f"strategy must be 'ua' or 'hf', got {strategy!r}")
    if sampled is None:
        sampled = sample_unrated(rng, rated, V.shape[0], rho) if rho > 0 else np.empty(0, np.int32)
    use_hf = strategy == "hf" and hf_active(t, T_predict, hf_convention)
    mu = user_mean(ratings, dt) if r_mean is None else dt.type(r_mean)
    return _run_client(U_u, V, O, rated, ratings, sampled, mu, use_hf, T_local, lr, lam, backend, order)
