"""BPR-MF with item bias, and the client/server math of FPL (federated pair-wise learning).

Model (FPL paper, Eq. 1): ``x_ui = b_i + p_u . q_i``. For a triple (u, i, j) with i consumed and
j not, Eq. 3-5 give the ascent directions

    x_uij = x_ui - x_uj
    g     = sigma(-x_uij) = 1 / (1 + exp(x_uij))
    dp_u  =  g (q_i - q_j) - lam_user * p_u
    dq_i  =  g p_u         - lam_pos  * q_i
    dq_j  = -g p_u         - lam_neg  * q_j
    db_i  =  g             - lam_bias * b_i
    db_j  = -g             - lam_bias * b_j

all evaluated at the parameters *before* the step, and a step is ``theta += lr * dtheta``
(Eq. 6 on the client for p_u, Eq. 7 on the server for q and b). The regularisation the paper
uses (section 5.3, and the authors' code) is ``lam_user = lam_pos = lr/20``,
``lam_neg = lr/200``, ``lam_bias = 0``: see :meth:`BPRReg.paper`.

Pure NumPy. No global state; every random draw comes from a ``numpy.random.Generator`` argument.

Random draws of one FPL client round (:func:`sample_triples`, used by :func:`fpl_client_round`):
exactly ONE call, ``U = rng.random((3, T))``, whatever ``pi`` and the options are, and then

    row 0, positives : i_t = positives[min(floor(U[0, t] * n_pos), n_pos - 1)]
    row 1, negatives : j_t = the r-th item (ascending id) of catalogue \\ set(positives),
                       r = min(floor(U[1, t] * n_neg), n_neg - 1)
    row 2, Bernoulli : the positive update of triple t is sent iff U[2, t] < pi

so the T positives come first, then the T negatives, then the T Bernoulli uniforms (C order of a
(3, T) array). ``positives`` is the array the client was built with (duplicates count as weight;
its order matters for a replay), ``n_neg = |catalogue| - |unique(positives)|``. The uniforms
are drawn even when pi is 0 or 1, so the triples of a round do not depend on pi (common random
numbers across a pi sweep). One call instead of ``integers`` per row: ``Generator.integers``
costs several microseconds per call, which dominated a T = 1 round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Literal

import numpy as np

__all__ = [
    "BPRReg",
    "FPLUpdate",
    "TripleSampler",
    "bpr_scores",
    "bpr_triple_deltas",
    "bpr_user_scores",
    "check_catalogue_ids",
    "concat_updates",
    "exact_dot",
    "fpl_client_round",
    "init_item_params",
    "init_user_factor",
    "make_triple_sampler",
    "merge_update",
    "sample_triples",
    "server_apply_sum",
    "sigmoid_neg",
    "uniform_index",
]

INIT_STD = 0.1
"""Standard deviation of the N(0, 0.1^2) initialisation of q_i, b_i and p_u (authors' code)."""


# --------------------------------------------------------------------------------------------
# parameters, scores, one triple
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BPRReg:
    """Regularisation constants (the lambda of Eq. 3) per parameter kind."""

    user: float
    pos_item: float
    neg_item: float
    bias: float = 0.0

    @classmethod
    def paper(cls, lr: float) -> "BPRReg":
        """The FPL paper's constants: user and positive item lr/20, negative item lr/200, bias 0."""
        lr = float(lr)
        return cls(user=lr / 20.0, pos_item=lr / 20.0, neg_item=lr / 200.0, bias=0.0)


def init_item_params(
    n_items: int, d: int, rng: np.random.Generator, std: float = INIT_STD
) -> tuple[np.ndarray, np.ndarray]:
    """Server-side ``(Q, b)``: ``Q ~ N(0, std^2)`` of shape (n_items, d), then ``b ~ N(0, std^2)``.

    Draw order: ``rng.normal(0, std, (n_items, d))`` then ``rng.normal(0, std, n_items)``.
    """
    Q = rng.normal(0.0, std, size=(int(n_items), int(d)))
    b = rng.normal(0.0, std, size=int(n_items))
    return Q, b


def init_user_factor(d: int, rng: np.random.Generator, std: float = INIT_STD) -> np.ndarray:
    """Client-side ``p_u ~ N(0, std^2)``, one call ``rng.normal(0, std, d)``."""
    return rng.normal(0.0, std, size=int(d))


def bpr_scores(P: np.ndarray, Q: np.ndarray, b: np.ndarray) -> np.ndarray:
    """All scores ``x_ui = b_i + p_u . q_i`` as an (n_users, n_items) array (Eq. 1)."""
    return P @ Q.T + b


def bpr_user_scores(p_u: np.ndarray, Q: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One user's scores over all items, shape (n_items,)."""
    return Q @ p_u + b


def exact_dot(a: np.ndarray, b: np.ndarray) -> float:
    """``a . b`` for float64 vectors, summed exactly: ``math.fsum`` of the products, i.e. the
    correctly rounded sum, whatever the order. When a product is not finite, or the sum overflows,
    the plain left-to-right sum of the products (inf or nan). A BLAS dot product's rounding
    depends on the library and the CPU (its blocking, fused multiply-adds); this does not, which
    is what lets a compiled replay of FPL (:mod:`fedsim.math.fpl_kernels`) equal the actors bit
    for bit."""
    prods = np.multiply(a, b, dtype=np.float64).tolist()
    try:
        return math.fsum(prods)
    except (OverflowError, ValueError):
        s = 0.0
        for v in prods:
            s += v
        return s


def sigmoid_neg(x: float) -> float:
    """``sigma(-x) = 1 / (1 + exp(x))`` for a scalar, without overflow."""
    if x > 0.0:
        e = math.exp(-x)
        return e / (1.0 + e)
    return 1.0 / (1.0 + math.exp(x))


def bpr_triple_deltas(
    p_u: np.ndarray,
    q_i: np.ndarray,
    q_j: np.ndarray,
    b_i: float,
    b_j: float,
    reg: BPRReg,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float]:
    """Eq. 3-5 for one triple: ``(dp_u, dq_i, dq_j, db_i, db_j)`` (ascent directions, no lr).

    This is the readable reference; :func:`fpl_client_round` and the centralized trainer compute
    the same numbers in vectorised or inlined form.
    """
    x = (float(b_i) + float(p_u @ q_i)) - (float(b_j) + float(p_u @ q_j))
    g = sigmoid_neg(x)
    dp = g * (q_i - q_j) - reg.user * p_u
    dqi = g * p_u - reg.pos_item * q_i
    dqj = -g * p_u - reg.neg_item * q_j
    dbi = g - reg.bias * float(b_i)
    dbj = -g - reg.bias * float(b_j)
    return dp, dqi, dqj, dbi, dbj


# --------------------------------------------------------------------------------------------
# triple sampling
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TripleSampler:
    """A client's sampling tables, built once from its training items (see :func:`make_triple_sampler`).

    Negatives are drawn as a uniform rank ``r`` in ``[0, n_negatives)`` and mapped to the r-th
    item (ascending id) of ``catalogue \\ positives`` in O(log n_pos), without materialising the
    negative pool.
    """

    positives: np.ndarray  # int64, as given (positive draws index into it)
    n_catalogue: int
    n_negatives: int
    catalogue: np.ndarray | None  # sorted unique int64 item ids, or None for range(n_catalogue)
    _keys: np.ndarray  # sorted catalogue positions of unique positives minus arange

    @property
    def n_positives(self) -> int:
        return int(self.positives.shape[0])

    @property
    def rank_keys(self) -> np.ndarray:
        """The table :meth:`negatives_from_ranks` searches: a negative of rank r is catalogue
        position ``r + searchsorted(rank_keys, r, side="right")``."""
        return self._keys

    def negatives_from_ranks(self, ranks: np.ndarray) -> np.ndarray:
        """Map ranks in ``[0, n_negatives)`` to item ids of ``catalogue \\ positives``."""
        ranks = np.asarray(ranks, dtype=np.int64)
        pos = ranks + np.searchsorted(self._keys, ranks, side="right")
        if self.catalogue is None:
            return pos
        return self.catalogue[pos]


def make_triple_sampler(
    positives: np.ndarray, n_items: int, catalogue: np.ndarray | None = None, *, catalogue_unique: bool = False
) -> TripleSampler:
    """Build a client's :class:`TripleSampler`.

    ``positives``: the client's training item ids (positive draws are uniform over this array,
    with replacement). ``catalogue``: the training catalogue negatives are drawn from, as item
    ids; ``None`` means all of ``range(n_items)``. Every positive must be in the catalogue.
    ``catalogue_unique``: the caller promises the catalogue is already int64, ascending and
    without repeats (``np.unique``'s output), so it is used as it is: building every client's
    sampler then costs O(|I_u| log |catalogue|) instead of a sort of the whole catalogue each
    (1.4 ms per client for a 26,744-item catalogue, 3 minutes for 138,493 clients).
    """
    positives = np.asarray(positives, dtype=np.int64).reshape(-1)
    if positives.size == 0:
        raise ValueError("a client needs at least one positive item to sample BPR triples")
    upos = np.unique(positives)
    if catalogue is None:
        n_cat = int(n_items)
        if upos[0] < 0 or upos[-1] >= n_cat:
            raise ValueError("positive item id outside [0, n_items)")
        places = upos
        cat = None
    else:
        cat = catalogue if catalogue_unique else np.unique(np.asarray(catalogue, dtype=np.int64))
        n_cat = int(cat.shape[0])
        check_catalogue_ids(cat)
        places = np.searchsorted(cat, upos)
        if np.any(places >= n_cat) or np.any(cat[np.minimum(places, n_cat - 1)] != upos):
            raise ValueError("every positive item must belong to the catalogue")
    keys = places - np.arange(upos.shape[0], dtype=np.int64)
    return TripleSampler(
        positives=positives,
        n_catalogue=n_cat,
        n_negatives=n_cat - int(upos.shape[0]),
        catalogue=cat,
        _keys=keys,
    )


def check_catalogue_ids(catalogue: np.ndarray) -> None:
    """Raise ``ValueError`` naming the smallest id of the ascending ``catalogue`` when it is
    negative: NumPy would read and step row ``n_items + id`` of Q and b for it, an item that is
    not in the catalogue. (Ids past the end of Q fail with ``IndexError`` where they are used.)"""
    if catalogue.shape[0] and catalogue[0] < 0:
        raise ValueError(f"catalogue item id {int(catalogue[0])} is negative: item ids start at 0")


def uniform_index(u: np.ndarray, n: int) -> np.ndarray:
    """``min(floor(u * n), n - 1)`` as int64: uniform integers in ``[0, n)`` from uniforms in [0, 1)."""
    idx = (u * n).astype(np.int64)
    np.minimum(idx, n - 1, out=idx)
    return idx


def sample_triples(
    sampler: TripleSampler, T: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw T triples: ``(pos_items, neg_items, u)`` from one call ``rng.random((3, T))``.

    ``u`` are the Bernoulli uniforms (row 2): the positive update of triple t is sent iff
    ``u[t] < pi``. See the module docstring for the exact mapping.
    """
    T = int(T)
    if sampler.n_negatives <= 0:
        raise ValueError("the client's positives cover the whole catalogue: no negative to sample")
    U = rng.random((3, T))
    pos = sampler.positives[uniform_index(U[0], sampler.n_positives)]
    neg = sampler.negatives_from_ranks(uniform_index(U[1], sampler.n_negatives))
    return pos, neg, U[2]


# --------------------------------------------------------------------------------------------
# client round
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FPLUpdate:
    """What one client sends to the server after a round (section 4.2 step 3).

    Rows are item updates ``(Delta q_k, Delta b_k)`` *without* the learning rate (the server
    multiplies by lr, Eq. 7). Unmerged (the default): first the T negative-item rows in triple
    order (row t is triple t's j), then the positive-item rows of the triples whose Bernoulli(pi)
    draw sent them, in triple order; ``triple[k]`` is the triple a row came from. Merged: one row
    per item, ascending item id, ``triple`` = -1.
    """

    items: np.ndarray  # int32[k]
    deltas: np.ndarray  # float[k, d]
    bias_deltas: np.ndarray  # float[k]
    is_positive: np.ndarray  # bool[k]
    n_triples: int
    triple: np.ndarray  # int32[k], source triple of each row (-1 once merged)

    @property
    def n_vectors(self) -> int:
        """Number of item-update vectors in the message (k)."""
        return int(self.items.shape[0])

    @property
    def n_positive(self) -> int:
        return int(np.count_nonzero(self.is_positive))


MergeMode = Literal["none", "sum", "last"]


def _merge_mode(merge: bool | str) -> str:
    if merge is False or merge is None:
        return "none"
    if merge is True:
        return "sum"
    if merge in ("none", "sum", "last"):
        return str(merge)
    raise ValueError(f"merge must be False/True or one of 'none', 'sum', 'last'; got {merge!r}")


def merge_update(update: FPLUpdate, how: str = "sum") -> FPLUpdate:
    """Merge the rows of ``update`` that share an item; rows come out in ascending item id.

    ``how="sum"``: the item's deltas are summed (the server's Eq. 7 result is unchanged up to
    rounding). ``how="last"``: the item keeps the delta of its last row only, which is what the
    authors' code does (a dict keyed by item, overwritten per triple).
    An item is never both positive and negative for one client, so ``is_positive`` carries over.
    """
    how = _merge_mode(how)
    if how == "none" or update.n_vectors == 0:
        return update
    items = update.items
    if how == "sum":
        uniq, inv = np.unique(items, return_inverse=True)
        deltas = np.zeros((uniq.shape[0], update.deltas.shape[1]), dtype=update.deltas.dtype)
        np.add.at(deltas, inv, update.deltas)
        bias = np.bincount(inv, weights=update.bias_deltas, minlength=uniq.shape[0]).astype(
            update.bias_deltas.dtype, copy=False
        )
        isp = np.zeros(uniq.shape[0], dtype=bool)
        isp[inv] = update.is_positive
    else:  # last
        rev = items[::-1]
        uniq, first_in_rev = np.unique(rev, return_index=True)
        last = items.shape[0] - 1 - first_in_rev
        deltas = update.deltas[last]
        bias = update.bias_deltas[last]
        isp = update.is_positive[last]
    return FPLUpdate(
        items=uniq.astype(np.int32, copy=False),
        deltas=deltas,
        bias_deltas=bias,
        is_positive=isp,
        n_triples=update.n_triples,
        triple=np.full(uniq.shape[0], -1, dtype=np.int32),
    )


def _assemble(
    neg: np.ndarray,
    pos: np.ndarray,
    send: np.ndarray,
    d_neg: np.ndarray,
    d_pos: np.ndarray,
    bd_neg: np.ndarray,
    bd_pos: np.ndarray,
    dtype: np.dtype,
) -> FPLUpdate:
    """Blocked layout: T negative rows, then the sent positive rows (``d_pos`` etc. already cut)."""
    T = neg.shape[0]
    sent = np.flatnonzero(send)
    k = T + sent.shape[0]
    items = np.empty(k, dtype=np.int32)
    items[:T] = neg
    items[T:] = pos[sent]
    deltas = np.concatenate((d_neg, d_pos)).astype(dtype, copy=False)
    bias = np.concatenate((bd_neg, bd_pos)).astype(dtype, copy=False)
    is_pos = np.zeros(k, dtype=bool)
    is_pos[T:] = True
    triple = np.empty(k, dtype=np.int32)
    triple[:T] = np.arange(T)
    triple[T:] = sent
    return FPLUpdate(
        items=items,
        deltas=deltas,
        bias_deltas=bias,
        is_positive=is_pos,
        n_triples=T,
        triple=triple,
    )


def _loop_fixed_items(
    p: np.ndarray, diff: np.ndarray, bdiff: list, lr: float, reg_user: float
) -> tuple[np.ndarray, np.ndarray]:
    """Sequential p_u updates over T triples with item parameters frozen. Mutates ``p``.

    Returns ``(P_hist, g)``: the p_u each triple saw, and its sigma(-x_uij).
    """
    T, d = diff.shape
    P_hist = np.empty((T, d))
    g = np.empty(T)
    decay = 1.0 - lr * reg_user
    tmp = np.empty(d)
    mul = np.multiply
    exp = math.exp
    for t in range(T):
        P_hist[t] = p
        dt = diff[t]
        x = bdiff[t] + exact_dot(p, dt)
        if x > 0.0:
            e = exp(-x)
            gt = e / (1.0 + e)
        else:
            gt = 1.0 / (1.0 + exp(x))
        g[t] = gt
        p *= decay
        mul(dt, lr * gt, out=tmp)
        p += tmp
    return P_hist, g


def _loop_reference(
    p: np.ndarray,
    Q: np.ndarray,
    b: np.ndarray,
    pos: np.ndarray,
    neg: np.ndarray,
    lr: float,
    reg: BPRReg,
    local_item_updates: bool,
    per_triple: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Plain per-triple loop over local copies of the touched rows (all option combinations).

    Returns ``(new_p, d_pos, d_neg, bd_pos, bd_neg)``; mutates nothing it was given.
    """
    T = pos.shape[0]
    d = Q.shape[1]
    touched, inv = np.unique(np.concatenate([pos, neg]), return_inverse=True)
    Qloc = np.array(Q[touched], dtype=np.float64)
    bloc = np.array(b[touched], dtype=np.float64)
    li, lj = inv[:T], inv[T:]
    d_pos = np.empty((T, d))
    d_neg = np.empty((T, d))
    bd_pos = np.empty(T)
    bd_neg = np.empty(T)
    p = np.array(p, dtype=np.float64)
    p_acc = np.zeros(d)
    for t in range(T):
        a, c = li[t], lj[t]
        qi, qj = Qloc[a].copy(), Qloc[c].copy()
        bi, bj = float(bloc[a]), float(bloc[c])
        dp, dqi, dqj, dbi, dbj = bpr_triple_deltas(p, qi, qj, bi, bj, reg)
        d_pos[t], d_neg[t], bd_pos[t], bd_neg[t] = dqi, dqj, dbi, dbj
        if local_item_updates:
            Qloc[a] += lr * dqi
            Qloc[c] += lr * dqj
            bloc[a] += lr * dbi
            bloc[c] += lr * dbj
        if per_triple:
            p += lr * dp
        else:
            p_acc += dp
    if not per_triple:
        p += lr * p_acc
    return p, d_pos, d_neg, bd_pos, bd_neg


def fpl_client_round(
    p_u: np.ndarray,
    Q: np.ndarray,
    b: np.ndarray,
    sampler: TripleSampler | np.ndarray,
    T: int,
    lr: float,
    pi: float,
    rng: np.random.Generator,
    *,
    reg: BPRReg | None = None,
    merge: bool | MergeMode = False,
    local_item_updates: bool = False,
    user_update: Literal["per_triple", "end_of_round"] = "per_triple",
) -> tuple[np.ndarray, FPLUpdate]:
    """One FPL client round (section 4.2 steps 2-3): T triples, local p_u steps, the update message.

    Parameters
    ----------
    p_u : the client's user factor (not modified; the new one is returned).
    Q, b : the item factors and biases received from the server (not modified).
    sampler : the client's :class:`TripleSampler`, or its positive item ids (then the catalogue is
        ``range(Q.shape[0])`` and the tables are rebuilt on every call; prefer a sampler).
    T : triples this round. lr : learning rate alpha. pi : probability of sending each positive
        update (one Bernoulli draw per triple).
    rng : the client's generator; draws exactly as documented in the module docstring.
    reg : regularisation, default :meth:`BPRReg.paper` (lr).
    merge : ``False``/"none" (default, the paper's count: T negative rows + the sent positives),
        ``True``/"sum" (one row per item, deltas summed), "last" (one row per item, last delta:
        the authors' code).
    local_item_updates : ``False`` (default, the reference notes and the paper: every triple sees
        the received Theta_S^{t-1}); ``True``: the client also steps its local copy of q_i, q_j,
        b_i, b_j after every triple and later triples see it (what the authors' sequential client
        code does). The message always carries the per-triple deltas, never the local copy.
    user_update : "per_triple" (default, authors' code: p_u += lr dp_u after every triple) or
        "end_of_round" (Eq. 3-6 read literally: all triples use p_u^{t-1}, then one step with the
        summed dp_u).

    Returns
    -------
    ``(new_p_u, update)``: the new user factor (float64, a new array) and an :class:`FPLUpdate`
    (deltas without lr, dtype of ``Q``).
    """
    if reg is None:
        reg = BPRReg.paper(lr)
    if not isinstance(sampler, TripleSampler):
        sampler = make_triple_sampler(sampler, Q.shape[0])
    if user_update != "per_triple" and user_update != "end_of_round":
        raise ValueError(f"user_update must be 'per_triple' or 'end_of_round', got {user_update!r}")
    how = _merge_mode(merge)
    lr = float(lr)
    T = int(T)
    out_dtype = Q.dtype if Q.dtype.kind == "f" else np.dtype(np.float64)

    pos, neg, u = sample_triples(sampler, T, rng)
    send = u < float(pi)
    p = np.array(p_u, dtype=np.float64)  # a copy: p_u is never modified
    # a diverging model (a rate or Theta beyond float32) overflows here: silent, as the compiled
    # round is; the server checks Theta once per round
    with np.errstate(over="ignore", invalid="ignore"):
        if local_item_updates:
            p, d_pos, d_neg, bd_pos, bd_neg = _loop_reference(
                p, Q, b, pos, neg, lr, reg, True, user_update == "per_triple"
            )
            d_pos, bd_pos = d_pos[send], bd_pos[send]
        else:
            Qi = Q[pos]
            Qj = Q[neg]
            bi = b[pos]
            bj = b[neg]
            diff = np.subtract(Qi, Qj, dtype=np.float64)
            if user_update == "per_triple":
                P_hist, g = _loop_fixed_items(p, diff, (bi - bj).tolist(), lr, reg.user)
            else:
                x = (bi - bj) + diff @ p
                g = 1.0 / (1.0 + np.exp(np.clip(x, -700.0, 700.0)))
                P_hist = np.broadcast_to(p.copy(), diff.shape)
                p += lr * (g @ diff - T * reg.user * p)
            gP = g[:, None] * P_hist
            d_neg = -gP - reg.neg_item * Qj
            bd_neg = -g - reg.bias * bj
            gP = gP[send]
            gs = g[send]
            d_pos = gP - reg.pos_item * Qi[send]
            bd_pos = gs - reg.bias * bi[send]

        update = _assemble(neg, pos, send, d_neg, d_pos, bd_neg, bd_pos, out_dtype)
        if how != "none":
            update = merge_update(update, how)
    return p, update


# --------------------------------------------------------------------------------------------
# server
# --------------------------------------------------------------------------------------------


def concat_updates(updates: Iterable[FPLUpdate]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Concatenate several clients' updates into ``(items, deltas, bias_deltas)``."""
    ups = list(updates)
    if not ups:
        return np.empty(0, np.int32), np.empty((0, 0)), np.empty(0)
    return (
        np.concatenate([u.items for u in ups]),
        np.concatenate([u.deltas for u in ups]),
        np.concatenate([u.bias_deltas for u in ups]),
    )


def server_apply_sum(
    Q: np.ndarray,
    b: np.ndarray,
    items: np.ndarray,
    deltas: np.ndarray,
    bias_deltas: np.ndarray,
    lr: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 7, in place: ``Q[k] += lr * sum of deltas for k``, ``b[k] += lr * sum of bias deltas``.

    Sums (never averages) over every row received, duplicates included; rows of several clients
    may be concatenated in any order. Returns ``(Q, b)`` (the same arrays).
    """
    items = np.asarray(items, dtype=np.intp)
    if items.size == 0:
        return Q, b
    lr = float(lr)
    np.add.at(Q, items, lr * np.asarray(deltas))
    np.add.at(b, items, lr * np.asarray(bias_deltas))
    return Q, b
