"""Attacks on the implicit-feedback protocols: FPL, FCF and PersonalFR, by the curious server.

FPL (section 4.4 of the paper): for a triple (u, i, j) the client's updates are
``dq_i = g p_u - lam_pos q_i``, ``db_i = g - lam_bias b_i`` and ``dq_j = -g p_u - lam_neg q_j``,
``db_j = -g - lam_bias b_j`` with ``g = sigma(-x_uij) > 0``: "in a round of communication, all
the updates for the consumed items share the same sign, as well as all the updates for the
non-consumed items". Clients send every negative update and each positive one with probability
pi.

``fpl_sign``: split each upload by the sign of its rows along their common direction (the
    factor part, ``+-g p_u``), and name the two groups by their bias deltas (positive: ``+g``,
    after adding back ``lam_bias b``, which the server knows). The positive group is a set of
    consumed items. Across rounds, the claim is every item ever seen in a positive group; the
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

PersonalFR (by design): a client announces the items its users rated (``indices``) before
    training; ``personalfr_indices`` reads them.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..metrics import Guess
from ..views import View, ViewSpec
from .base import Attack
from .implied import rank_one_projection

__all__ = ["FCFLine", "FPLNeverNegative", "FPLSign", "PersonalFRIndices", "fpl_split"]


def fpl_split(items: np.ndarray, rows: np.ndarray, b_sent: np.ndarray, lam_bias: float) -> np.ndarray:
    """Which rows of one FPL upload are positive-item updates: the rows are split by the sign of
    their factor part along its principal direction, and the group whose bias deltas (plus
    ``lam_bias b``; ``b_sent`` is not read when ``lam_bias`` is 0, the paper's setting) are
    positive is the positive one. Returns a boolean mask."""
    rows = np.asarray(rows, dtype=np.float64)
    if rows.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    F = rows[:, :-1]
    g = rows[:, -1]
    if lam_bias:
        g = g + lam_bias * np.asarray(b_sent, dtype=np.float64)[items]
    if not np.any(F):
        return g > 0
    ev, vecs = np.linalg.eigh(F.T @ F)
    side = (F @ vecs[:, -1]) >= 0
    # name the sides by the bias deltas: +g for positive updates, -g for negative ones
    pos_side = np.sum(g[side]) - np.sum(g[~side]) >= 0
    return side if pos_side else ~side


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
            mask = fpl_split(items, rows, b, lam_bias)
            rounds[user] += 1
            for i in items[mask].tolist():
                pos[user][i] += 1
            for i in items[~mask].tolist():
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
        users = set()
        for user, _, items, rows, b in _fpl_uploads(view, lam_bias != 0):
            mask = fpl_split(items, rows, b, lam_bias)
            users.add(user)
            for i in items[~mask].tolist():
                neg[user][i] += 1
            anyone.update(items[~mask].tolist())
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
