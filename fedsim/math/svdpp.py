"""SVD++(S) for FedRec, and the stochastic client call shared with PMF(S).

Model (the authors' code; the paper's Eq. 2 is misprinted):

    r_hat_ui = (U_u + Obar_u) . V_i,   Obar_u = sum_{j in I_u, j != i} O_j / sqrt(|I_u| - 1)

while training on a rated item i, and Obar_u = sum_{j in I_u} O_j / sqrt(|I_u|) for an item the
user has not rated (sampled items, test items). No biases. O (m, d) are the implicit item factors.

Who holds what in federated SVD++(S) (our choice; the paper only says the framework applies):

* the client keeps U_u private and downloads V *and O* (all m rows each, so the download does not
  reveal I_u; 2 x 4 x d x m bytes in float32);
* during its call it runs the authors' sequential SGD on its local copies, exactly as their code
  does in place on the server's O: every step moves the O rows of the user's rated items (the
  current one excluded on a rated step), and each sampled item's step also moves that sampled
  item's own O row;
* it uploads, for the items I_u u I'_u (rated first, then sampled), the V gradients (as PMF) and
  the O *deltas* (new row minus downloaded row). The server applies V_j <- V_j - lr_server g_j and
  O_j <- O_j + dO_j at once (Algorithm 4), so federated == central exactly;
* the server therefore learns, per call, the same item set as for PMF (I_u u I'_u) and, for
  each of those items, how the client moved O_j. Privacy caveat: the O delta of a rated item is
  the sum of |I_u| - 1 + |I'_u| steps, that of a sampled item a single step, so their sizes
  differ systematically; the server can use that to tell rated from sampled items (the V
  gradients alone do not carry that signal so directly). Uploading 2 x 4 x d x |I_u| (1 + rho)
  bytes per call, twice PMF's.
"""

from __future__ import annotations

import numpy as np

from . import _sgd_numba
from .rows import check_rows
from .sgd_client import ClientUpload, sgd_client_call

__all__ = [
    "server_apply_o_delta",
    "svdpp_implicit",
    "svdpp_predict",
    "svdpp_sgd_client",
    "svdpp_sgd_client_step",
]


def svdpp_implicit(O, indptr, indices, backend=None) -> np.ndarray:
    """Obar (n, d): per user the sum of O over its rated items / sqrt(|I_u|) (0 for no items).
    Sums in float64 in CSR order, then rounded to O's dtype."""
    indptr = np.asarray(indptr)
    n = indptr.shape[0] - 1
    counts = np.diff(indptr)
    acc = np.zeros((n, O.shape[1]), dtype=np.float64)
    _sgd_numba.scatter_kernels(backend)[2](O, indptr, np.asarray(indices), acc)
    out = acc.astype(O.dtype)
    _s1, s, _nm1, _nf = _sgd_numba.implicit_norms(counts, O.dtype)
    nz = counts > 0
    out[nz] /= s[nz, None]
    return out


def svdpp_predict(U, V, Obar, users, items) -> np.ndarray:
    """(U_u + Obar_u) . V_i for each pair (unclipped); ``Obar`` from :func:`svdpp_implicit`."""
    return np.einsum("kd,kd->k", U[users] + Obar[users], V[items])


def server_apply_o_delta(O, items, o_deltas, *, ascending: bool = False) -> np.ndarray:
    """O_j <- O_j + dO_j for one client's upload (distinct items). ``ascending=True`` checks that
    the items are strictly increasing in an integer array and the deltas a float array, as
    :func:`fedsim.math.pmf.server_apply_sgd` does. Raises
    ``IndexError``/``ValueError`` as that does, changing nothing. In place; returns O."""
    k = _sgd_numba.compiled()
    if (k is not None and type(o_deltas) is np.ndarray and type(items) is np.ndarray and items.ndim == 1
            and items.dtype.kind in "iu" and o_deltas.dtype == O.dtype and O.ndim == 2
            and o_deltas.shape == (items.shape[0], O.shape[1]) and O.flags.c_contiguous and O.flags.writeable
            and k.add_rows(O, items, o_deltas, ascending)):  # one addition per element, as below: same bits
        return O
    check_rows(items, o_deltas, O.shape[0], O.shape[1], "O deltas", ascending=ascending, upload=ascending)
    with np.errstate(over="ignore"):  # (an O not finite after: the servers check that)
        O[items] += o_deltas
    return O


def svdpp_sgd_client(U_u, V, O, rated_items, ratings, lr, lam, *, sampled_items=None,
                     virtual_ratings=None, backend=None):
    """The SVD++(S) passes of one client with given virtual ratings (UA or precomputed).

    Returns ``(new_U_u, items, v_grads, o_deltas)``, rows: rated items in order, then sampled.
    For HF fillings (which depend on the state after the rated pass) use
    :func:`svdpp_sgd_client_step`.
    """
    sampled = np.empty(0, np.int32) if sampled_items is None else sampled_items
    V = np.ascontiguousarray(V)
    if len(sampled) and virtual_ratings is None:
        raise ValueError("virtual_ratings are needed for sampled items")
    virt = np.asarray(virtual_ratings if virtual_ratings is not None else [], dtype=V.dtype)
    return _passes_with_given_virtuals(U_u, V, O, rated_items, ratings, sampled, virt, lr, lam,
                                       backend)


def _passes_with_given_virtuals(U_u, V, O, rated_items, ratings, sampled, virt, lr, lam, backend):
    k = _sgd_numba.kernels(backend)
    dt = V.dtype
    rated = np.asarray(rated_items, dtype=np.int32)
    sampled = np.asarray(sampled, dtype=np.int32)
    r = np.asarray(ratings, dtype=dt)
    N, K, d = rated.shape[0], sampled.shape[0], V.shape[1]
    par = _sgd_numba.make_par(lr, lam, dt)
    s1, s, nm1, nf = (x[()] for x in _sgd_numba.implicit_norms(N, dt))
    U = np.array(U_u, dtype=dt, copy=True)
    OR = O[rated].astype(dt)
    OS = O[sampled].astype(dt)
    S = np.zeros(d, dtype=dt)
    for j in range(N):
        S = S + OR[j]
    grads = np.empty((N + K, d), dtype=dt)
    sc = [np.empty(d, dtype=dt) for _ in range(3)]
    k.svdpp_rated_pass(U, V, rated, r, OR, S, par, s1, nm1, grads, 0,
                       np.empty((N, d), dt), np.empty((N, d), dt), sc[0], sc[1])
    k.svdpp_sampled_pass(U, V, sampled, virt, OR, OS, S, par, s, nf, grads, N, sc[0], sc[1])
    items = np.concatenate([rated, sampled])
    odelta = np.concatenate([OR - O[rated], OS - O[sampled]])
    return U, items, grads, odelta


def svdpp_sgd_client_step(
    U_u, V, O, rated_items, ratings, *, t: int, lr: float, lam: float, rng=None, rho: float = 0.0,
    strategy: str = "ua", T_predict: int = 10, T_local: int = 10, hf_convention: str = "code",
    sampled=None, r_mean=None, backend=None, order: str = "code",
) -> ClientUpload:
    """One SVD++(S) training call of a client (Algorithm 5 with the SVD++ model; ``order``
    as :func:`fedsim.math.pmf.pmf_sgd_client_step`, the V gradients after the step with
    ``"paper"``).

    ``V``, ``O``: the client's downloaded copies (not modified). ``lr``: this client's current
    learning rate (decayed per call of this client), used for U_u and for the O steps.
    Returns a :class:`~fedsim.math.pmf.ClientUpload` with ``o_deltas`` set; the server applies
    ``server_apply_sgd(V, items, grads, lr_server)`` and ``server_apply_o_delta(O, items,
    o_deltas)``.
    """
    if O is None:
        raise ValueError("SVD++ needs the implicit factors O")
    return sgd_client_call(
        U_u, V, O, rated_items, ratings, t=t, lr=lr, lam=lam, rng=rng, rho=rho, strategy=strategy,
        T_predict=T_predict, T_local=T_local, hf_convention=hf_convention, sampled=sampled,
        r_mean=r_mean, backend=backend, order=order,
    )
