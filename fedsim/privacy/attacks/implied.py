"""Implied ratings: the arithmetic behind the FedRec attacks (pure NumPy).

In FedRec's batch PMF an uploaded item gradient is ``g_i = e_i U_u + lam V_i`` (Eq. 8, the
authors' update order) with ``e_i = U_u . V_i - r_i`` and V the model the server sent. The
server removes ``lam V_i`` and is left with rows ``w_i = e_i U_u``, all parallel to U_u. With
``u`` the unit direction of the rows (their top singular vector) and ``s`` the signed length of
U_u along it, ``b_i = w_i . u = s e_i`` and ``U_u . V_i = s a_i`` with ``a_i = V_i . u``, so
every item's *implied rating* is one function of a single unknown scalar::

    r_i(s) = s a_i - b_i / s.

At the true s a rated item's implied rating is its integer rating; a sampled item's is its
virtual rating: the user's mean under user averaging (one common value, equal to the mean of the
rated items' ratings, and not an integer unless all ratings are equal), a prediction
``V_j . tU`` under hybrid filling (linear in V_j with no intercept). ``fit_scale`` finds s by
trying the values that make some item's implied rating an integer level and keeping the one
under which the integer-valued items and the rest are explained best: the rest must be one
common value equal to the integer items' mean (user averaging) or fit ``V_j . x`` exactly
(hybrid filling). The stochastic models reach the same form another way (``attacks.fedrec``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ScaleFit", "fit_scale", "rank_one_projection"]


@dataclass(frozen=True)
class ScaleFit:
    """``s`` (the scale found, NaN if none), ``ratings`` (implied ratings at s), ``dist`` (each
    item's distance to the nearest rating level, in rating units), ``explained`` (the non-integer
    items fit the filling model: ``"ua"``, ``"hf"``, ``"none"`` when there are none, or ``""``)."""

    s: float
    ratings: np.ndarray
    dist: np.ndarray
    explained: str


def rank_one_projection(W: np.ndarray, V_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """``(a, b, residual)`` for rows ``W`` (k x d, all ideally parallel) and the items' factors
    ``V_rows``: the top right singular vector u of W, ``b = W u``, ``a = V_rows u`` and the
    relative Frobenius norm of what u does not explain (0 for exactly parallel rows)."""
    W = np.asarray(W, dtype=np.float64)
    if W.shape[0] == 0:
        return np.empty(0), np.empty(0), 0.0
    # the top eigenvector of the d x d Gram matrix is the top right singular vector of W (much
    # cheaper than an SVD of the k x d matrix; the rows are nearly rank one, so well separated)
    ev, vecs = np.linalg.eigh(W.T @ W)
    u = vecs[:, -1]
    u = u / np.linalg.norm(u)
    b = W @ u
    total = float((W * W).sum())
    resid = float(np.sqrt(max(total - float(b @ b), 0.0) / total)) if total > 0 else 0.0
    return np.asarray(V_rows, dtype=np.float64) @ u, b, resid


def _candidates(a: np.ndarray, b: np.ndarray, levels: np.ndarray, n_items: int) -> np.ndarray:
    """Scales s at which one of ``n_items`` items spread over the range of b has an integer
    level as implied rating: the roots of a s^2 - k s - b = 0 (the stable form, so that a = 0
    gives s = -b / k)."""
    order = np.argsort(b, kind="stable")
    pick = order[np.unique(np.linspace(0, b.size - 1, min(n_items, b.size)).astype(np.int64))]
    A = np.repeat(a[pick][None, :], levels.size, 0).ravel()
    B = np.repeat(b[pick][None, :], levels.size, 0).ravel()
    K = np.repeat(levels[:, None].astype(np.float64), pick.size, 1).ravel()
    disc = K * K + 4.0 * A * B
    ok = disc >= 0
    q = 0.5 * (K[ok] + np.sqrt(disc[ok]))
    with np.errstate(divide="ignore", invalid="ignore"):
        roots = np.concatenate([q / A[ok], -B[ok] / q])
    roots = np.sort(roots[np.isfinite(roots) & (roots != 0)])
    if roots.size < 2:
        return roots
    # the same scale found from several items differs in the last bits: keep one of each
    keep = np.r_[True, np.abs(np.diff(roots)) > 1e-5 * np.abs(roots[1:])]
    return roots[keep]


_EPS = float(np.finfo(np.float64).eps)


def _least_squares(A: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """A least-squares x of ``A x = y`` from the normal equations (a d x d eigendecomposition
    instead of a k x d least squares), the directions whose eigenvalue is at most ``d * eps``
    times the largest left out (the minimum-norm solution): a rank-deficient ``A`` (items none of
    which has some factor) still gets the x that fits, if one does. It was ``np.linalg.solve``,
    which raised for an exactly singular ``A^T A`` (the filling then taken for unexplained) and,
    for a numerically singular one, raised on some CPUs' LAPACK kernels and returned rounding
    noise on others; here fedsim's tolerance decides. None if ``A`` or ``y`` is not finite."""
    G = A.T @ A
    z = A.T @ y
    if not (np.isfinite(G).all() and np.isfinite(z).all()):
        return None
    try:
        w, Q = np.linalg.eigh(G)
    except np.linalg.LinAlgError:  # pragma: no cover - eigh of a finite symmetric matrix converges
        return None
    keep = w > w[-1] * G.shape[0] * _EPS
    Qk = Q[:, keep]
    return Qk @ ((Qk.T @ z) / w[keep])


def _explains(r_rest: np.ndarray, r_int: np.ndarray, V_rest: np.ndarray | None, tol: float,
              modes: tuple[str, ...]) -> str:
    """Which filling model explains the non-integer implied ratings ``r_rest``: ``"ua"`` (one
    common value equal to the mean of ``r_int``), ``"hf"`` (exactly V_rest x for some x; needs
    more items than dimensions), ``"none"`` if there are none, else ``""``."""
    if r_rest.size == 0:
        return "none"
    if "ua" in modes and r_int.size:
        v = float(np.median(r_rest))
        if np.abs(r_rest - v).max() < tol and abs(v - float(r_int.mean())) < tol:
            return "ua"
    if "hf" in modes and V_rest is not None and r_rest.size > V_rest.shape[1] + 4:
        x = _least_squares(V_rest, r_rest)
        if x is None:
            return ""
        res = V_rest @ x - r_rest
        if np.abs(res).max() < tol:
            return "hf"
    return ""


def fit_scale(a: np.ndarray, b: np.ndarray, *, levels=(1, 2, 3, 4, 5), tol: float = 1e-4,
              V_rows: np.ndarray | None = None, modes: tuple[str, ...] = ("ua", "hf"),
              n_items: int = 24, n_check: int = 16, absolute: bool = False) -> ScaleFit:
    """The scale s under which ``r_i(s) = s a_i - b_i / s`` explains the items best (module
    docstring): among the candidate scales, the ``n_check`` with most items within ``tol`` of a
    level are checked against the filling ``modes`` (``V_rows``: the items' factors, for the
    ``hf`` check); the first (most integer items) whose rest is explained wins, else the one with
    most integer items and, on ties, most distinct levels used. ``absolute``: the implied
    ratings are ``|r_i(s)|`` (the stochastic chains know each item's sign only relative to its
    chain fragment's). Returns ``ScaleFit``."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    lv = np.asarray(levels, dtype=np.float64)
    if a.size == 0:
        return ScaleFit(np.nan, np.empty(0), np.empty(0), "")
    cands = _candidates(a, b, lv, n_items)
    if cands.size == 0:
        return ScaleFit(np.nan, np.full(a.size, np.nan), np.full(a.size, np.inf), "")
    lo, hi = lv.min(), lv.max()
    R = cands[:, None] * a[None, :] - b[None, :] / cands[:, None]
    if absolute:
        R = np.abs(R)
    near = np.clip(np.rint(R), lo, hi)
    D = np.abs(R - near)
    good = D < tol
    count = good.sum(1)
    levels_used = ((near[:, :, None] == lv[None, None, :]) & good[:, :, None]).any(axis=1).sum(axis=1)
    order = np.lexsort((-levels_used, -count))  # most integer items first, then most levels
    V = None if V_rows is None else np.asarray(V_rows, dtype=np.float64)
    seen = 0
    for k in order:
        if seen >= n_check:
            break
        seen += 1
        g = good[k]
        how = _explains(R[k][~g], R[k][g], None if V is None else V[~g], tol, modes)
        if how:
            return ScaleFit(float(cands[k]), R[k], D[k], how)
    k = order[0]
    return ScaleFit(float(cands[k]), R[k], D[k], "")
