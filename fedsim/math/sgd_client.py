"""The stochastic client call PMF(S) and SVD++(S) share (Algorithm 5 with either model), and the
upload every FedRec client step returns."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import _sgd_numba
from .filling import hf_active, sample_unrated, user_mean

__all__ = ["ClientUpload", "sgd_client_call"]


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
    k = _sgd_numba.kernels(backend)
    V = np.ascontiguousarray(V)
    dt = V.dtype
    d = V.shape[1]
    rated = np.ascontiguousarray(rated_items, dtype=np.int32)
    sampled = np.ascontiguousarray(sampled, dtype=np.int32)
    r = np.ascontiguousarray(ratings, dtype=dt)
    N, K = rated.shape[0], sampled.shape[0]
    implicit = O is not None
    Oa = np.ascontiguousarray(O, dtype=dt) if implicit else np.zeros((1, d), dtype=dt)
    par = _sgd_numba.make_par(lr, lam, dt, order)
    s1, s, nm1, nf = (x[()] for x in _sgd_numba.implicit_norms(N, dt))
    U = np.array(U_u, dtype=dt, copy=True)
    grads = np.empty((N + K, d), dtype=dt)
    odelta = np.empty((N + K, d), dtype=dt) if implicit else np.empty((0, d), dtype=dt)
    k.sgd_client(U, V, Oa, rated, r, sampled, dt.type(r_ua), bool(use_hf), int(T_local), par,
                 s1, s, nm1, nf, implicit, grads, odelta)
    items = np.concatenate([rated, sampled])
    return ClientUpload(U, items, grads, odelta if implicit else None, N)


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
