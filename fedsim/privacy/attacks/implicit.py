"""Attacks on the implicit-feedback protocols: FPL, FCF and PersonalFR, by the curious server.

FPL (section 4.4 of the paper): for a triple (u, i, j) the client's updates are
``dq_i = g p_u - lam_pos q_i``, ``db_i = g - lam_bias b_i`` and ``dq_j = -g p_u - lam_neg q_j``,
``db_j = -g - lam_bias b_j`` with ``g = sigma(-x_uij) > 0``: "in a round of communication, all
the updates for the consumed items share the same sign, as well as all the updates for the
non-consumed items". Clients send every negative update and each positive one with probability
pi.

``fpl_sign``: split each upload by the sign of its rows' bias deltas (``+g`` for a positive,
    ``-g`` for a negative, after adding back ``lam_bias b``, which the server knows and the paper
    sets to 0); the factor parts, ``+-g p_u - lambda q``, split the same way while g is large,
    whatever the regularisation (``reg_scale``) and the options ``merge``,
    ``local_item_updates`` and ``user_update`` (sums of same-signed g). A row whose bias delta is
    0 (g underflowed) or not finite is of unknown side: in neither group (``fpl_signs``).
    The positive group is a set of consumed items. Across rounds, the claim is every item ever seen in a positive group; the
    score also ranks the other items by how rarely they appeared as this user's negatives.
``fpl_never_negative``: negatives are drawn from the catalogue minus I_u, so the items never
    sent as a user's negative contain I_u; the claim is that set, among the items the server has
    seen as anyone's negative (a consumed item nobody ever drew as a negative is missed). This is
    what is left at pi = 0.

FCF (the FedRec paper's baseline; FCF uploads a gradient for every item "consumed or not"):
``grad_i = c_ui (p_u . q_i - y_ui) p_u``, all rows parallel to p_u. With ``b_i`` the rows'
    component along their direction and ``a_i = q_i . u`` (the server sent Q), a non-consumed
    item lies on the line ``b = s^2 a`` through the origin, a consumed one on
    ``b = (1 + alpha) s^2 a - (1 + alpha) s``. ``fcf_line`` fits the line through the origin on
    all items (most are not consumed) and claims the items far from it.

PersonalFR (by design): with Partial Compression a client announces the items its users rated
    (``indices``) before training; ``personalfr_indices`` reads them. Without compression none is sent,
    and ``personalfr_idle_rows`` (``attacks.personalfr``) reads the set off the updates.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..metrics import Guess
from ..views import View, ViewSpec
from .base import Attack
from .implied import rank_one_projection

__all__ = ["FCFLine", "FPLNeverNegative", "FPLSign", "PersonalFRIndices", "fpl_signs", "fpl_split"]


def fpl_signs(items: np.ndarray, rows: np.ndarray, b_sent: np.ndarray | None, lam_bias: float) -> np.ndarray:
    """The side of each row of one FPL upload: +1 a positive-item update, -1 a negative one, 0
    unknown. A row's bias delta is ``+g`` for a positive and ``-g`` for a negative
    (``g = sigma(-x_uij) > 0``) once ``lam_bias b`` is added back (``b_sent``: the biases the
    server sent; not read when ``lam_bias`` is 0, the paper's setting and the only one
    ``FPLConfig`` makes: its ``reg_scale`` scales a bias term of 0): its sign decides, exactly. A
    bias delta of exactly 0 (g underflowed: x_uij above about 709 in float64, or g below float32's
    smallest number, x_uij above about 103, once sent as float32: a model whose scores ran away)
    or one that is not finite (a diverging round) has no sign, and its factor part says nothing
    either (``0 p_u - lambda q``: no component along p_u): unknown. Those rows used to be split by
    the side of the factor parts' principal direction, which on such a run put negatives in the
    positive group (precision 0.37 in tests/test_privacy_attacks.py)."""
    rows = np.asarray(rows, dtype=np.float64)
    if rows.shape[0] == 0:
        return np.zeros(0, dtype=np.int8)
    g = rows[:, -1]
    if lam_bias:
        g = g + lam_bias * np.asarray(b_sent, dtype=np.float64)[items]
    with np.errstate(invalid="ignore"):
        return np.where(g > 0, 1, np.where(g < 0, -1, 0)).astype(np.int8)  # (NaN: neither)


def fpl_split(items: np.ndarray, rows: np.ndarray, b_sent: np.ndarray | None, lam_bias: float) -> np.ndarray:
    """Which rows of one FPL upload are known positive-item updates (``fpl_signs(...) > 0``): a
    boolean mask; a row of unknown side is not among them."""
    return fpl_signs(items, rows, b_sent, lam_bias) > 0


def _fpl_uploads(view: View, need_bias: bool):
    """``(sender, round, items, rows, b)`` per recorded FPL upload, with the biases b of the
    model the server sent that round (needed only when the bias is regularised, ``need_bias``;
    else b is None and the model need not have been recorded)."""
    theta: dict[int, np.ndarray] = {}
    for m in view.messages:
        if need_bias and m.outgoing and m.kind == "model" and m.payload is not None:
            theta.setdefault(m.round, m.payload["theta"])
        elif not m.outgoing and m.kind == "update" and m.sender is not None and m.payload is not None:
            p = m.payload
            if "items" not in p:
                continue
            b = None
            if need_bias:
                th = theta.get(m.round)
                if th is None:
                    continue
                b = th[:, -1]
            yield m.sender, m.round, np.asarray(p["items"], dtype=np.int64), np.asarray(p["rows"]), b


class FPLSign(Attack):
    """``fpl_sign`` (module docstring)."""

    name = "fpl_sign"
    view = ViewSpec.server()
    protocols = ("fpl",)

    def run(self, view: View) -> dict[str, Guess]:
        lam_bias = float(view.public.config.reg.bias)
        pos: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        neg: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        rounds: dict[str, int] = defaultdict(int)
        anyone = set()
        for user, _, items, rows, b in _fpl_uploads(view, lam_bias != 0):
            side = fpl_signs(items, rows, b, lam_bias)
            rounds[user] += 1
            for i in items[side > 0].tolist():
                pos[user][i] += 1
            for i in items[side < 0].tolist():
                neg[user][i] += 1
            anyone.update(items.tolist())
        pool = np.array(sorted(anyone), dtype=np.int64)
        out = {}
        for user in rounds:
            p = np.array([pos[user].get(i, 0) for i in pool.tolist()], dtype=np.float64)
            n = np.array([neg[user].get(i, 0) for i in pool.tolist()], dtype=np.float64)
            score = np.where(p > 0, 1.0 + p, -n / (1.0 + rounds[user]))
            out[user] = Guess(pool, score, pool[p > 0])
        return out


class FPLNeverNegative(Attack):
    """``fpl_never_negative`` (module docstring)."""

    name = "fpl_never_negative"
    view = ViewSpec.server()
    protocols = ("fpl",)

    def run(self, view: View) -> dict[str, Guess]:
        lam_bias = float(view.public.config.reg.bias)
        neg: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        anyone = set()
        # the users in the order their first upload was observed (as fpl_sign's): a set of node
        # ids iterated below gave the answer in an order that changed with PYTHONHASHSEED
        users: dict[str, None] = {}
        for user, _, items, rows, b in _fpl_uploads(view, lam_bias != 0):
            side = fpl_signs(items, rows, b, lam_bias)
            users[user] = None
            for i in items[side < 0].tolist():
                neg[user][i] += 1
            anyone.update(items[side < 0].tolist())
        pool = np.array(sorted(anyone), dtype=np.int64)
        out = {}
        for user in users:
            n = np.array([neg[user].get(i, 0) for i in pool.tolist()], dtype=np.float64)
            out[user] = Guess(pool, -n, pool[n == 0])
        return out


class FCFLine(Attack):
    """``fcf_line`` (module docstring). ``threshold``: an item is claimed when its distance to the
    line through the origin exceeds this share of the largest distance."""

    name = "fcf_line"
    view = ViewSpec.server()
    protocols = ("fcf",)

    def __init__(self, threshold: float = 0.05) -> None:
        self.threshold = float(threshold)

    def run(self, view: View) -> dict[str, Guess]:
        Q: dict[int, np.ndarray] = {}
        acc: dict[str, list] = defaultdict(list)
        for m in view.messages:
            if m.outgoing and m.kind == "model" and m.payload is not None:
                Q.setdefault(m.round, m.payload["Q"])
            elif not m.outgoing and m.kind == "gradients" and m.sender is not None and m.payload is not None:
                p = m.payload
                if "grad" not in p or m.round not in Q:
                    continue
                a, b, _ = rank_one_projection(np.asarray(p["grad"], dtype=np.float64), Q[m.round])
                # non-consumed items: b = s^2 a; fit the slope robustly (median ratio) and refine
                # it by least squares on the items close to that line
                with np.errstate(divide="ignore", invalid="ignore"):
                    ratio = np.where(np.abs(a) > 0, b / a, np.nan)
                if not np.isfinite(ratio).any():  # a zero projection (a zero gradient): nothing to tell apart
                    acc[m.sender].append(np.zeros(a.shape[0]))
                    continue
                slope = float(np.nanmedian(ratio))
                r = np.abs(b - slope * a)
                close = r <= np.median(r) * 10
                if close.sum() > 1 and float(a[close] @ a[close]) > 0:
                    slope = float(a[close] @ b[close] / (a[close] @ a[close]))
                    r = np.abs(b - slope * a)
                acc[m.sender].append(r / (r.max() or 1.0))
        out = {}
        for user, parts in acc.items():
            s = np.mean(parts, axis=0)
            pool = np.arange(s.size, dtype=np.int64)
            out[user] = Guess(pool, s, pool[s > self.threshold])
        return out


class PersonalFRIndices(Attack):
    """``personalfr_indices`` (module docstring): the items a client announced."""

    name = "personalfr_indices"
    view = ViewSpec.server()
    protocols = ("personalfr",)

    def run(self, view: View) -> dict[str, Guess]:
        out = {}
        for m in view.select("indices", incoming=True):
            if m.sender is not None and m.payload is not None:
                items = np.asarray(m.payload["items"], dtype=np.int64)
                out[m.sender] = Guess.of_set(items)
        return out
