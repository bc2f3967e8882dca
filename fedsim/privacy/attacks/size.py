"""What message sizes alone tell a network observer about |I_u|.

The observer watches the server's link: for every message it sees the sender, the kind and the
size on the wire, never the content. Protocols are public, so it knows each message's layout and
can invert the codec's size law: an upload of k rows ``{items: int32[k], grads: float[k, d]}``
has one size per k (``rows_of_size``). Then, per protocol:

``fedrec``, ``fedrecpp``  k = n + min(int(rho n), m - n) rows: n = |I_u| exactly while k < m (SVD++
                          adds ``o_deltas``); at k = m (the sampling capped by the unrated items)
                          only a lower bound, the smallest n with n + int(rho n) >= m, which is
                          the estimate (``rated_counts_of_rows``).
``personalfr``            ``indices`` lists |I_m| items: read off the size.
``fpl``, ``merge`` none    k = T + (positives sent): a count of positives, Binomial(T, pi) per round
                          whatever |I_u|; the estimate is the mean positives sent per round,
                          mean(k) - T (exact: the true mean over the rounds seen).
``fpl``, ``merge`` sum,    k = the distinct items among the round's T negatives and its sent positives
          last            (one row per item; an item is never both). Negatives are uniform over the
                          m - n catalogue items she has not consumed, each triple's positive uniform
                          over her n = |I_u| items and sent with probability pi, so
                          E[k | n] = n (1 - (1 - pi/n)^T) + (m - n) (1 - (1 - 1/(m - n))^T).
                          The estimate of |I_u| is the n in 1..floor(pi m / (1 + pi)) (the rising
                          side, below) whose E[k | n] is nearest the mean k over her uploads seen
                          (the smallest such n; a method of moments), with m the public
                          ``n_items`` (or ``SizeOnly(catalogue=)``): it assumes the training catalogue negatives are
                          drawn from is every item (a smaller one makes negatives collide more, and
                          the estimate too small). E[k | n] rises with n up to n = pi m / (1 + pi)
                          and falls beyond it: a user with more items than that is read as one
                          with fewer. Informative when T pi is not small against n (collisions).
``fcf``                   every upload is m x d floats: nothing.
secure aggregation        (FedRec, FPL) every upload is one ``masked`` vector over all m items: its
                          size, the estimate (``upload bytes``), is the same for everyone. The
                          observer saw every such upload and reads nothing from it (it used to
                          read the unmasked kinds only, and its rows said it saw no user).

``SizeOnly.run`` returns ``{client: estimate}`` (``about = "sizes"``); the audit scores it against
|I_u| (``score_sizes``): exact recoveries, median relative error, Spearman rank correlation.
``size_estimate(protocol, cfg)`` names what the estimate is (``|I_u|``, ``positives sent per
round`` for unmerged FPL, ``upload bytes`` for FCF and under secure aggregation); the size rows carry it (``size_estimate``),
and only an estimate of |I_u| has its exact share and relative error scored.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ...kernel.codec import encode_message
from ...math.filling import rated_counts_of_rows
from ..metrics import average_ranks
from ..views import View, ViewSpec
from .base import Attack

__all__ = ["SizeOnly", "fpl_expected_rows", "rows_of_size", "score_sizes", "size_estimate", "spearman"]


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


SIZE = "|I_u|"


def size_estimate(protocol: str, cfg) -> str:
    """What ``SizeOnly``'s estimate is for ``protocol`` run with ``cfg`` (module docstring):
    ``"|I_u|"``, ``"positives sent per round"`` (FPL unmerged) or ``"upload bytes"`` (FCF, and
    any run with secure aggregation: masked uploads of one size)."""
    if getattr(cfg, "secure_aggregation", False):
        return "upload bytes"
    if protocol == "fpl" and getattr(cfg, "merge", "none") in ("none", False):
        return "positives sent per round"
    if protocol == "fcf":
        return "upload bytes"
    return SIZE


def fpl_expected_rows(n: np.ndarray, m: int, T: int, pi: float) -> np.ndarray:
    """E[k | n] of a merged FPL upload (module docstring): the expected distinct items among T
    triples' negatives (uniform over m - n items) and sent positives (uniform over n, each sent
    with probability pi), for each n (1 <= n < m)."""
    n = np.asarray(n, dtype=np.float64)
    neg = m - n
    with np.errstate(divide="ignore"):  # log1p(-1) = -inf: every draw hits the one item
        return n * -np.expm1(T * np.log1p(-pi / n)) + neg * -np.expm1(T * np.log1p(-1.0 / neg))


def fpl_merged_count(mean_k: float, m: int, T: int, pi: float) -> float:
    """The |I_u| estimate from the mean row count of merged FPL uploads: the n in 1..top whose
    ``fpl_expected_rows`` is nearest ``mean_k`` (the smallest such n), top the n where E[k | n]
    stops rising (``floor(pi m / (1 + pi))``, at least 1): beyond it a count is read on the
    rising side."""
    top = max(1, min(m - 1, int(np.floor(pi * m / (1.0 + pi)))))
    n = np.arange(1, top + 1, dtype=np.float64)
    e = fpl_expected_rows(n, m, T, pi)
    return float(n[int(np.argmin(np.abs(e - mean_k)))])


def rows_of_size(protocol: str, cfg, kind: str, size: int, framing: int, max_rows: int) -> int | None:
    """The row count k in 0..``max_rows`` whose message of ``kind`` (the protocol's layout) is
    ``size`` bytes on the wire with ``framing`` bytes per message, or None (not a layout with
    rows, or no k fits). The size grows with k (every row adds its bytes, a longer array header
    only adds more): found by bisection, each step encoded with the codec. (It was read off the
    slope between 0 and 64 rows, which includes a header growing by some bytes: FPL's uploads of
    d = 10 from 3,590 rows on were off by more than the 4 rows searched around it, and had no
    size.)"""
    if _layout(protocol, cfg, kind, 0) is None:
        return None

    def doc(k: int) -> int:
        return len(encode_message(kind, _layout(protocol, cfg, kind, k)).data) + framing

    lo, hi = 0, int(max_rows)
    while lo < hi:  # the smallest k whose size is at least ``size``
        mid = (lo + hi) // 2
        if doc(mid) < size:
            lo = mid + 1
        else:
            hi = mid
    return lo if doc(lo) == size else None


class SizeOnly(Attack):
    """The size-only attack (module docstring). ``framing``: the bytes the transport adds per
    message (public: 0 on ``SimNetwork``); ``catalogue``: the number of items FPL's clients draw
    negatives from, m of merged FPL's estimate (None: the public ``n_items``)."""

    name = "size_only"
    about = "sizes"
    protocols = ("fedrec", "fedrecpp", "fpl", "fcf", "personalfr")

    def __init__(self, framing: int = 0, catalogue: int | None = None) -> None:
        self.framing = int(framing)
        self.catalogue = None if catalogue is None else int(catalogue)
        self.view = ViewSpec.network(("server",))

    def run(self, view: View) -> dict[str, float]:
        proto, cfg = view.public.protocol, view.public.config
        m = view.public.n_items
        # the uploads, masked ones (secure aggregation) included
        kinds = {"fedrec": ("gradients", "masked"), "fedrecpp": ("gradients",), "fpl": ("update", "masked"),
                 "fcf": ("gradients",), "personalfr": ("indices",)}.get(proto, ())
        estimate = size_estimate(proto, cfg)
        memo: dict[tuple, int | None] = {}
        counts: dict[int, np.ndarray] = {}

        def counts_of(k: int) -> np.ndarray:
            if k not in counts:
                counts[k] = rated_counts_of_rows(k, m, float(cfg.rho))
            return counts[k]

        per_user: dict[str, list] = defaultdict(list)
        for p in view.messages:
            if p.kind not in kinds or p.sender is None:
                continue
            if estimate == "upload bytes" or _layout(proto, cfg, p.kind, 0) is None:
                # a layout without rows (FCF's dense gradient, a masked vector): the size itself
                per_user[p.sender].append(p.nbytes)
                continue
            if (p.kind, p.nbytes) not in memo:
                memo[(p.kind, p.nbytes)] = rows_of_size(proto, cfg, p.kind, p.nbytes, self.framing, 4 * m + 16)
            per_user[p.sender].append(memo[(p.kind, p.nbytes)])
        out: dict[str, float] = {}
        for user, ks in per_user.items():
            ks = [k for k in ks if k is not None]
            if not ks:
                continue
            if estimate == "upload bytes":
                out[user] = float(np.median(ks))
            elif proto in ("fedrec", "fedrecpp"):
                # the smallest consistent count: exact below the cap, a lower bound at k == m
                est = [int(ns[0]) for ns in (counts_of(k) for k in ks) if ns.size]
                if est:
                    out[user] = float(np.median(est))
            elif proto == "fpl" and size_estimate(proto, cfg) == SIZE:  # merged: distinct items
                out[user] = fpl_merged_count(float(np.mean(ks)), self.catalogue or m, int(cfg.triples),
                                             float(cfg.pi))
            elif proto == "fpl":
                out[user] = float(np.mean(ks)) - float(cfg.triples)  # positives sent per round
            else:
                out[user] = float(np.median(ks))
        return out


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN if either is constant. Raises
    ``ValueError`` for a NaN value (ranked above every number, it gave a figure for pairs that
    have none) or inputs of different lengths."""
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"spearman: {x.size} values against {y.size}")
    if np.isnan(x).any() or np.isnan(y).any():
        raise ValueError("spearman: a value is NaN (leave out what was not estimated)")
    if x.size < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    rx, ry = average_ranks(x), average_ranks(y)
    return float(np.corrcoef(rx, ry)[0, 1])


def score_sizes(estimates: dict[str, float], truth: dict[str, np.ndarray], *, estimate: str = SIZE) -> dict:
    """``{"size_estimate" (what the estimates are: ``size_estimate``), "size_users",
    "size_exact" (share of users whose |I_u| the estimate equals), "size_mre" (median relative
    error), "size_spearman" (rank correlation of estimate and |I_u|)}``. An ``estimate`` other
    than ``"|I_u|"`` (unmerged FPL's positives sent, FCF's bytes): only its rank correlation with
    |I_u| is meaningful (exact and relative error are NaN)."""
    of_size = estimate == SIZE
    users = [u for u in sorted(truth) if len(truth[u]) and u in estimates and np.isfinite(estimates[u])]
    if not users:
        return {"size_estimate": estimate, "size_users": 0.0, "size_exact": float("nan"),
                "size_mre": float("nan"), "size_spearman": float("nan")}
    est = np.array([estimates[u] for u in users])
    true = np.array([len(truth[u]) for u in users], dtype=np.float64)
    nan = float("nan")
    return {"size_estimate": estimate, "size_users": float(len(users)), "size_exact": float(np.mean(est == true)) if of_size else nan,
            "size_mre": float(np.median(np.abs(est - true) / true)) if of_size else nan,
            "size_spearman": spearman(est, true)}
