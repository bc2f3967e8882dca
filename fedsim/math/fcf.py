"""FCF: federated collaborative filtering for implicit feedback (Ammad-ud-din et al. 2019), as
summarised by the FedRec paper, section 2.2, Eq. 3.

Model: ``x_ui = p_u . q_i`` (no bias), preference ``y_ui = 1`` for the user's training items and
``0`` for every other item, confidence ``c_ui = 1 + alpha y_ui``. Per-user objective (the 1/2
makes the gradient exactly FedRec's Eq. 3)::

    J_u(p_u, Q) = 1/2 sum_{i=1..m} c_ui (y_ui - p_u . q_i)^2 + lam/2 ||p_u||^2

Client, given the item factors Q received from the server:

1. user factor in closed form (Hu et al. 2008, the ALS step):
   ``p_u = (Q^T C_u Q + lam I)^-1 Q^T C_u y_u``, computed as
   ``(Q^T Q + alpha Q_+^T Q_+ + lam I) p_u = (1 + alpha) sum_{i in I_u} q_i``
   (``Q_+`` = rows of the user's items; ``Q^T Q`` can be computed once per round and shared);
2. item gradients for ALL m items (Eq. 3):
   ``grad_i = c_ui (p_u . q_i - y_ui) p_u  =  dJ_u/dq_i`` at the new p_u,
   an (m, d) matrix: every client uploads m x d numbers whatever its data (the FedRec paper's
   complexity paragraph: 4 m d bytes down + 4 m d bytes up per client per round in float32).

Server: ``Q <- Q - lr (G + lam_item Q)`` with ``G = sum_u grad_u`` (or the mean over the clients
of the round with ``average=True``); ``lam_item Q`` is the item regulariser, added once per round
(FCF: dJ/dq_i = -2 sum_u c_ui (y_ui - p_u.q_i) p_u + 2 lam q_i, i.e. the same up to the factor 2
absorbed in lr). The FCF paper stabilises the server step with Adam; pass an :class:`AdamState`
to use it. No randomness here: FCF is deterministic given Q (initialise Q with
:func:`fedsim.math.bpr.init_item_params`' generator, or any other).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "AdamState",
    "fcf_client",
    "fcf_item_gradient",
    "fcf_server_update",
    "fcf_user_factor",
    "fcf_user_loss",
]


def _items(items_pos: np.ndarray, m: int) -> np.ndarray:
    """The distinct positive items, ascending; ``ValueError`` for one outside ``[0, m)`` (a -1
    read and wrote row m - 1 of Q, NumPy's negative indexing, without a word)."""
    items = np.unique(np.asarray(items_pos, dtype=np.int64))
    if items.size and (items[0] < 0 or items[-1] >= m):
        bad = int(items[0]) if items[0] < 0 else int(items[-1])
        raise ValueError(f"positive item {bad} is outside [0, {int(m)})")
    return items


def fcf_user_factor(
    Q: np.ndarray,
    items_pos: np.ndarray,
    alpha: float,
    lam: float,
    *,
    QtQ: np.ndarray | None = None,
) -> np.ndarray:
    """Closed-form ``p_u = argmin_p J_u(p, Q)`` (see the module docstring). O(m d^2) without
    ``QtQ``, O(|I_u| d^2 + d^3) with a precomputed ``QtQ = Q.T @ Q``. A system singular in
    floating point (an ``alpha`` so large, 1e20, that ``Q^T Q`` and ``lam`` are lost beside
    ``alpha Q_+^T Q_+``, of rank |I_u| < d) gives a p_u of NaN, as a diverged model has: the FCF
    server finds the gradients not finite and stops, saying so. Singular means the smallest
    eigenvalue is at most ``d * eps`` times the largest (``np.linalg.matrix_rank``'s tolerance),
    decided here and not by LAPACK, whose solve raises on some CPUs and not on others."""
    Q = np.asarray(Q, dtype=np.float64)
    return _user_factor(Q, _items(items_pos, Q.shape[0]), alpha, lam, QtQ)


_EPS = float(np.finfo(np.float64).eps)


def _user_factor(Q: np.ndarray, items: np.ndarray, alpha: float, lam: float, QtQ) -> np.ndarray:
    """``fcf_user_factor`` for a float64 ``Q`` and ``items`` already through ``_items``."""
    d = Q.shape[1]
    Qp = Q[items]
    A = (Q.T @ Q if QtQ is None else np.array(QtQ, dtype=np.float64)) + float(alpha) * (Qp.T @ Qp)
    A[np.diag_indices(d)] += float(lam)
    rhs = (1.0 + float(alpha)) * Qp.sum(axis=0)
    # Whether LAPACK's solve raises on a numerically singular A depends on the CPU's kernels (one
    # host raised LinAlgError, another returned finite garbage), so the singularity is decided
    # here. A is symmetric positive semi-definite with eigenvalues >= lam in exact arithmetic and
    # at most trace(A); forming it rounds by about eps * trace(A) per entry. While lam clears that
    # by a wide margin the system is well conditioned and the common path pays one trace; else the
    # eigenvalues decide, with np.linalg.matrix_rank's tolerance (largest * size * eps).
    scale = float(np.trace(A))
    eps = _EPS
    if not (scale < np.inf and float(lam) > 64.0 * d * eps * scale):
        w = np.linalg.eigvalsh(A) if np.isfinite(A).all() else None
        if w is None or not w[0] > w[-1] * d * eps:
            return np.full(d, np.nan)
    try:
        return np.linalg.solve(A, rhs)
    except np.linalg.LinAlgError:
        return np.full(d, np.nan)


def fcf_item_gradient(Q: np.ndarray, p_u: np.ndarray, items_pos: np.ndarray, alpha: float) -> np.ndarray:
    """Eq. 3 for all m items: ``grad_i = (1 + alpha y_ui)(p_u . q_i - y_ui) p_u``, shape (m, d)."""
    return _item_gradient(np.asarray(Q, dtype=np.float64), p_u, _items(items_pos, Q.shape[0]), alpha)


def _item_gradient(Q: np.ndarray, p_u: np.ndarray, items: np.ndarray, alpha: float) -> np.ndarray:
    """``fcf_item_gradient`` for a float64 ``Q`` and ``items`` already through ``_items``."""
    r = Q @ p_u  # p_u . q_i for every item
    r[items] = (1.0 + float(alpha)) * (r[items] - 1.0)
    return np.multiply.outer(r, p_u)


def fcf_client(
    Q: np.ndarray,
    items_pos: np.ndarray,
    alpha: float,
    lam: float,
    *,
    QtQ: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One FCF client round: ``(p_u, grad)`` with the closed-form p_u and the (m, d) gradient.
    ``Q`` (the wire's float32, say) is converted to float64 and the positive items sorted and
    checked once for both steps (``fcf_user_factor`` then ``fcf_item_gradient`` did each twice)."""
    Q = np.asarray(Q, dtype=np.float64)
    items = _items(items_pos, Q.shape[0])
    p = _user_factor(Q, items, alpha, lam, QtQ)
    return p, _item_gradient(Q, p, items, alpha)


def fcf_user_loss(Q: np.ndarray, p_u: np.ndarray, items_pos: np.ndarray, alpha: float, lam: float) -> float:
    """``J_u(p_u, Q)`` (for tests and diagnostics)."""
    items = _items(items_pos, Q.shape[0])
    y = np.zeros(Q.shape[0])
    y[items] = 1.0
    c = 1.0 + float(alpha) * y
    e = y - np.asarray(Q, dtype=np.float64) @ p_u
    return 0.5 * float(c @ (e * e)) + 0.5 * float(lam) * float(p_u @ p_u)


@dataclass(slots=True)
class AdamState:
    """Explicit Adam state for the FCF server (Kingma & Ba 2015 defaults)."""

    m: np.ndarray
    v: np.ndarray
    t: int = 0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    @classmethod
    def zeros(cls, shape: tuple[int, ...], **kw) -> "AdamState":
        return cls(m=np.zeros(shape), v=np.zeros(shape), **kw)

    def direction(self, G: np.ndarray) -> np.ndarray:
        """Advance the state with gradient G and return the bias-corrected step direction."""
        self.t += 1
        self.m *= self.beta1
        self.m += (1.0 - self.beta1) * G
        self.v *= self.beta2
        self.v += (1.0 - self.beta2) * (G * G)
        mhat = self.m / (1.0 - self.beta1**self.t)
        vhat = self.v / (1.0 - self.beta2**self.t)
        return mhat / (np.sqrt(vhat) + self.eps)


def fcf_server_update(
    Q: np.ndarray,
    grad_sum: np.ndarray,
    lr: float,
    lam: float = 0.0,
    *,
    n_clients: int | None = None,
    average: bool = False,
    adam: AdamState | None = None,
) -> np.ndarray:
    """In place: ``Q -= lr * step(G + lam Q)``, ``G = grad_sum`` (``/ n_clients`` if ``average``).

    ``step`` is the identity (plain gradient descent, default) or Adam with ``adam``'s state.
    Returns ``Q``.
    """
    G = np.asarray(grad_sum, dtype=np.float64)
    if average:
        if not n_clients:
            raise ValueError("average=True needs n_clients > 0")
        G = G / float(n_clients)
    if lam:
        G = G + float(lam) * Q
    step = G if adam is None else adam.direction(G)
    Q -= float(lr) * step
    return Q
