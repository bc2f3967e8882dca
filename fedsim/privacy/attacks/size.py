"""What message sizes alone tell a network observer about |I_u|.

The observer watches the server's link: for every message it sees the sender, the kind and the
size on the wire, never the content. Protocols are public, so it knows each message's layout and
can invert the codec's size law: an upload of k rows ``{items: int32[k], grads: float[k, d]}``
has one size per k (``row_count_of_size``). Then, per protocol:

``fedrec``, ``fedrecpp``  k = n + min(int(rho n), m - n) rows: n = |I_u| exactly while k < m (SVD++
                          adds ``o_deltas``); at k = m (the sampling capped by the unrated items)
                          only a lower bound, the smallest n with n + int(rho n) >= m, which is
                          the estimate (``rated_counts_of_rows``).
``personalfr``            ``indices`` lists |I_m| items: read off the size.
``fpl``                   k = T + (positives sent): a count of positives, Binomial(T, pi) per round
                          whatever |I_u|; the estimate is the mean positives sent per round.
``fcf``                   every upload is m x d floats: nothing.

``SizeOnly.run`` returns ``{client: estimate}`` (``about = "sizes"``); the audit scores it against
|I_u| (``score_sizes``): exact recoveries, median relative error, Spearman rank correlation.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ...kernel.codec import encode_message
from ...math.filling import rated_counts_of_rows
from ..metrics import average_ranks
from ..views import View, ViewSpec
from .base import Attack

__all__ = ["SizeOnly", "rows_of_size", "score_sizes", "spearman"]


def _layout(protocol: str, cfg, kind: str, k: int) -> dict | None:
    dt = np.dtype(getattr(cfg, "dtype", "float32"))
    if protocol in ("fedrec", "fedrecpp") and kind == "gradients":
        body = {"items": np.zeros(k, np.int32), "grads": np.zeros((k, cfg.d), dt)}
        if protocol == "fedrec" and cfg.model == "SVD++(S)":
            body["o_deltas"] = np.zeros((k, cfg.d), dt)
        return body
    if protocol == "fpl" and kind == "update":
        return {"items": np.zeros(k, np.int32), "rows": np.zeros((k, cfg.d + 1), dt)}
    if protocol == "personalfr" and kind == "indices":
        return {"items": np.zeros(k, np.int32)}
    return None


def rows_of_size(protocol: str, cfg, kind: str, size: int, framing: int, max_rows: int) -> int | None:
    """The row count k whose message of ``kind`` (the protocol's layout) is ``size`` bytes on
    the wire with ``framing`` bytes per message, or None (not a layout with rows, or no k fits).
    Found from the affine part of the size law and checked exactly with the codec."""
    if _layout(protocol, cfg, kind, 0) is None:
        return None

    def doc(k: int) -> int:
        return len(encode_message(kind, _layout(protocol, cfg, kind, k)).data) + framing

    base, one = doc(0), doc(64)
    per_row = (one - base) / 64.0
    guess = int(round((size - base) / per_row)) if per_row > 0 else 0
    for k in sorted(range(max(0, guess - 4), min(max_rows, guess + 4) + 1), key=lambda k: abs(k - guess)):
        if doc(k) == size:
            return k
    return None


class SizeOnly(Attack):
    """The size-only attack (module docstring). ``framing``: the bytes the transport adds per
    message (public: 0 on ``SimNetwork``)."""

    name = "size_only"
    about = "sizes"
    protocols = ("fedrec", "fedrecpp", "fpl", "fcf", "personalfr")

    def __init__(self, framing: int = 0) -> None:
        self.framing = int(framing)
        self.view = ViewSpec.network(("server",))

    def run(self, view: View) -> dict[str, float]:
        proto, cfg = view.public.protocol, view.public.config
        m = view.public.n_items
        kind = {"fedrec": "gradients", "fedrecpp": "gradients", "fpl": "update", "fcf": "gradients",
                "personalfr": "indices"}.get(proto)
        memo: dict[int, int | None] = {}
        counts: dict[int, np.ndarray] = {}

        def counts_of(k: int) -> np.ndarray:
            if k not in counts:
                counts[k] = rated_counts_of_rows(k, m, float(cfg.rho))
            return counts[k]

        per_user: dict[str, list] = defaultdict(list)
        for p in view.messages:
            if p.kind != kind or p.sender is None:
                continue
            if p.nbytes not in memo:
                memo[p.nbytes] = rows_of_size(proto, cfg, kind, p.nbytes, self.framing, 4 * m + 16)
            # a layout without rows (FCF's dense gradient): the size itself is the only feature
            per_user[p.sender].append(memo[p.nbytes] if _layout(proto, cfg, kind, 0) is not None else p.nbytes)
        out: dict[str, float] = {}
        for user, ks in per_user.items():
            ks = [k for k in ks if k is not None]
            if not ks:
                continue
            if proto in ("fedrec", "fedrecpp"):
                # the smallest consistent count: exact below the cap, a lower bound at k == m
                est = [int(ns[0]) for ns in (counts_of(k) for k in ks) if ns.size]
                if est:
                    out[user] = float(np.median(est))
            elif proto == "fpl":
                out[user] = float(np.mean(ks)) - float(cfg.triples)  # positives sent per round
            else:
                out[user] = float(np.median(ks))
        return out


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN if either is constant."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.size < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    rx, ry = average_ranks(x), average_ranks(y)
    return float(np.corrcoef(rx, ry)[0, 1])


def score_sizes(estimates: dict[str, float], truth: dict[str, np.ndarray], *, of_size: bool = True) -> dict[str, float]:
    """``{"size_users", "size_exact" (share of users whose |I_u| the estimate equals),
    "size_mre" (median relative error), "size_spearman" (rank correlation of estimate and
    |I_u|)}``. ``of_size=False``: the estimate is another quantity (FPL's positives sent), only
    its rank correlation with |I_u| is meaningful (exact and relative error are NaN)."""
    users = [u for u in sorted(truth) if len(truth[u]) and u in estimates and np.isfinite(estimates[u])]
    if not users:
        return {"size_users": 0.0, "size_exact": float("nan"), "size_mre": float("nan"),
                "size_spearman": float("nan")}
    est = np.array([estimates[u] for u in users])
    true = np.array([len(truth[u]) for u in users], dtype=np.float64)
    nan = float("nan")
    return {"size_users": float(len(users)), "size_exact": float(np.mean(est == true)) if of_size else nan,
            "size_mre": float(np.median(np.abs(est - true) / true)) if of_size else nan,
            "size_spearman": spearman(est, true)}
