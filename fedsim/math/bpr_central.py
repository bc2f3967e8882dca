"""Centralized BPR-MF with item bias (Rendle et al. 2009; FPL paper Eq. 1-5), uniform triple sampling.

One epoch = X+ sequential SGD steps (X+ = number of training interactions, as Rendle suggests and
the FPL paper adopts in section 5.2). Each step draws a triple (u, i, j):

* (u, i) uniformly among the X+ training interactions (so a user is drawn in proportion to her
  number of interactions, and her positive uniformly among her items), then
* j uniformly from the catalogue minus u's training items,

and applies ``theta += lr * dtheta`` with the deltas of :func:`fedsim.math.bpr.bpr_triple_deltas`
to p_u, q_i, q_j, b_i, b_j simultaneously (all evaluated before the step). Regularisation
defaults to :meth:`BPRReg.paper`. (Sampling (u, i) over interactions rather than u uniformly is
the usual reading of "uniform over D_S" up to the |I| - |I_u| factor of the negatives.)

Random draws: initialisation ``Q = rng.normal(0, std, (n_items, d))``, ``b = rng.normal(0, std,
n_items)``, ``P = rng.normal(0, std, (n_users, d))``; then per epoch ONE call
``U = rng.random((2, X+))``: step s uses the interaction ``min(floor(U[0, s] X+), X+ - 1)`` of the
CSR order and the negative rank ``min(floor(U[1, s] n_neg(u)), n_neg(u) - 1)`` mapped to the
r-th item (ascending id) of catalogue minus u's items.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .bpr import INIT_STD, BPRReg, check_catalogue_ids, init_item_params, uniform_index

__all__ = ["BPRModel", "csr_from_pairs", "sample_epoch_triples", "train_bpr"]


@dataclass(slots=True)
class BPRModel:
    """Parameters of BPR-MF with item bias; scores are ``P @ Q.T + b``."""

    P: np.ndarray
    Q: np.ndarray
    b: np.ndarray
    epochs_done: int = 0
    history: list = field(default_factory=list)  # eval_callback return values, one per call
    # the epoch (counted like epochs_done) after which the parameters were found not finite, training
    # stopping there; None while they are finite
    diverged_at: int | None = None

    def scores(self, users: np.ndarray | None = None) -> np.ndarray:
        P = self.P if users is None else self.P[np.asarray(users)]
        return P @ self.Q.T + self.b


def csr_from_pairs(users: np.ndarray, items: np.ndarray, n_users: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, indices)`` of the user x item training matrix, items ascending within a user
    (the trainer accepts rows in any order too).

    Duplicate (user, item) pairs are kept (they weight positive sampling).
    """
    users = np.asarray(users, dtype=np.int64)
    items = np.asarray(items, dtype=np.int64)
    order = np.lexsort((items, users))
    indptr = np.zeros(int(n_users) + 1, dtype=np.int64)
    np.cumsum(np.bincount(users, minlength=int(n_users)), out=indptr[1:])
    return indptr, items[order]


class _NegTables:
    """Vectorised rank -> negative item for all users at once (catalogue minus the user's items)."""

    def __init__(self, indptr, indices, n_items, catalogue):
        n_users = indptr.shape[0] - 1
        counts = np.diff(indptr)
        users = np.repeat(np.arange(n_users, dtype=np.int64), counts)
        if indices.shape[0] > 1 and np.any((indices[1:] < indices[:-1]) & (users[1:] == users[:-1])):
            # the tables need each row ascending (a CSR need not be); positives keep the CSR order
            indices = indices[np.lexsort((indices, users))]
        if catalogue is None:
            self.catalogue = None
            n_cat = int(n_items)
            places = indices
            if indices.size and (indices.min() < 0 or indices.max() >= n_cat):
                # -1 trained item n_items - 1 (NumPy's negative indexing) without a word
                bad = int(indices.min()) if indices.min() < 0 else int(indices.max())
                raise ValueError(f"training item {bad} is outside [0, {n_cat})")
        else:
            self.catalogue = np.unique(np.asarray(catalogue, dtype=np.int64))
            check_catalogue_ids(self.catalogue)
            n_cat = self.catalogue.shape[0]
            places = np.searchsorted(self.catalogue, indices)
            if np.any(places >= n_cat) or np.any(self.catalogue[np.minimum(places, n_cat - 1)] != indices):
                raise ValueError("every training item must belong to the catalogue")
        # unique positives per user (duplicates count once for the negative pool)
        keep = np.ones(indices.shape[0], dtype=bool)
        if indices.shape[0] > 1:
            keep[1:] = ~((users[1:] == users[:-1]) & (indices[1:] == indices[:-1]))
        u_users, u_places = users[keep], places[keep]
        u_counts = np.bincount(u_users, minlength=n_users)
        u_ptr = np.zeros(n_users + 1, dtype=np.int64)
        np.cumsum(u_counts, out=u_ptr[1:])
        within = np.arange(u_users.shape[0], dtype=np.int64) - u_ptr[u_users]
        self.stride = n_cat + 1
        self.keys = u_users * self.stride + (u_places - within)  # globally non-decreasing
        self.u_ptr = u_ptr
        self.n_neg = n_cat - u_counts
        if np.any(self.n_neg[counts > 0] <= 0):
            raise ValueError("some user's items cover the whole catalogue: no negative to sample")

    def map(self, users: np.ndarray, ranks: np.ndarray) -> np.ndarray:
        q = users * self.stride + ranks
        before = np.searchsorted(self.keys, q, side="right") - self.u_ptr[users]
        pos = ranks + before
        return pos if self.catalogue is None else self.catalogue[pos]


def sample_epoch_triples(indptr, indices, n_items, rng, *, catalogue=None, n=None, _tables=None):
    """Draw one epoch of triples ``(users, pos_items, neg_items)`` (n = X+ by default), one call
    ``rng.random((2, n))`` as documented in the module docstring."""
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices, dtype=np.int64)
    tables = _tables if _tables is not None else _NegTables(indptr, indices, n_items, catalogue)
    x_plus = int(indptr[-1])
    n = x_plus if n is None else int(n)
    U = rng.random((2, n))
    k = uniform_index(U[0], x_plus)
    users = np.searchsorted(indptr, k, side="right") - 1
    pos = indices[k]
    n_neg = tables.n_neg[users]
    ranks = np.minimum((U[1] * n_neg).astype(np.int64), n_neg - 1)
    neg = tables.map(users, ranks)
    return users, pos, neg


def train_bpr(
    indptr: np.ndarray,
    indices: np.ndarray,
    n_users: int,
    n_items: int,
    d: int,
    epochs: int,
    lr: float,
    rng: np.random.Generator,
    *,
    reg: BPRReg | None = None,
    init_std: float = INIT_STD,
    catalogue: np.ndarray | None = None,
    model: BPRModel | None = None,
    eval_callback: Callable[[int, BPRModel], object] | None = None,
    eval_every: int = 1,
) -> BPRModel:
    """Train BPR-MF by sequential SGD on uniformly sampled triples, X+ steps per epoch.

    ``indptr, indices``: CSR of the training matrix (users x items; see :func:`csr_from_pairs`).
    ``catalogue``: item ids negatives are drawn from (default all of ``range(n_items)``; then a
    training item outside it is a ``ValueError``).
    ``model``: continue training it (no initialisation draws) instead of a fresh one.
    ``eval_callback(epoch, model)`` runs after every ``eval_every`` epochs (epoch counted from 1,
    and after the last epoch); its return value is appended to ``model.history``; if it returns
    ``True`` exactly, training stops there.

    The parameters are checked after every epoch: if one is not finite (a learning rate too
    large for the data), training stops after that epoch with ``model.diverged_at`` set to it
    (``epochs_done``), before its ``eval_callback``; NumPy's overflow warnings on the way there
    are not printed. A ``model`` given with ``diverged_at`` set is returned untrained.
    """
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices, dtype=np.int64)
    if indptr.shape[0] != int(n_users) + 1:
        raise ValueError("indptr must have n_users + 1 entries")
    reg = BPRReg.paper(lr) if reg is None else reg
    if model is None:
        Q, b = init_item_params(n_items, d, rng, init_std)
        P = rng.normal(0.0, init_std, size=(int(n_users), int(d)))
        model = BPRModel(P=P, Q=Q, b=b)
    tables = _NegTables(indptr, indices, n_items, catalogue)
    lr = float(lr)
    for epoch in range(1, int(epochs) + 1):
        if model.diverged_at is not None:
            break
        users, pos, neg = sample_epoch_triples(indptr, indices, n_items, rng, _tables=tables)
        with np.errstate(over="ignore", invalid="ignore"):  # divergence is checked below, once per epoch
            _sgd_epoch(model.P, model.Q, model.b, users, pos, neg, lr, reg)
        model.epochs_done += 1
        if not (np.isfinite(model.P).all() and np.isfinite(model.Q).all() and np.isfinite(model.b).all()):
            model.diverged_at = model.epochs_done
            break
        if eval_callback is not None and (epoch % int(eval_every) == 0 or epoch == int(epochs)):
            out = eval_callback(model.epochs_done, model)
            model.history.append(out)
            if out is True:
                break
    return model


def _sgd_epoch(P, Q, b, users, pos, neg, lr, reg):
    """Sequential BPR steps, in place. Inlined Eq. 3-5 (same numbers as bpr_triple_deltas)."""
    ru = 1.0 - lr * reg.user
    rp = 1.0 - lr * reg.pos_item
    rn = 1.0 - lr * reg.neg_item
    rb = 1.0 - lr * reg.bias
    exp = math.exp
    dot = np.dot
    bl = b.tolist()  # biases as Python floats during the epoch, written back at the end
    for u, i, j in zip(users.tolist(), pos.tolist(), neg.tolist()):
        pu = P[u]
        qi = Q[i]
        qj = Q[j]
        diff = qi - qj  # pre-step values
        x = (bl[i] - bl[j]) + float(dot(pu, diff))
        if x > 0.0:
            e = exp(-x)
            g = e / (1.0 + e)
        else:
            g = 1.0 / (1.0 + exp(x))
        lg = lr * g
        step = lg * pu  # lr g p_u with the pre-step p_u
        # p_u += lr (g (q_i - q_j) - lam_u p_u)
        pu *= ru
        diff *= lg
        pu += diff
        # q_i += lr (g p_u - lam_pos q_i) ; q_j += lr (-g p_u - lam_neg q_j)
        qi *= rp
        qi += step
        qj *= rn
        qj -= step
        bl[i] = rb * bl[i] + lg
        bl[j] = rb * bl[j] - lg
    b[:] = bl
