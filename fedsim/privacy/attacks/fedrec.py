"""Attacks on FedRec's (and FedRec++'s) uploads by the honest-but-curious server.

FedRec hides a user's rated items I_u among rho |I_u| sampled unrated items I'_u with virtual
ratings. The server sees, per upload, the item ids of I_u u I'_u and their gradients, and it
knows the model V it sent. Four attacks:

``implied_ratings`` (batch PMF; FedRec++'s uploads too): every uploaded row minus ``lam V_i``
    is ``e_i U_u``, so the server recovers each item's implied rating up to one scale
    (``fedsim.privacy.attacks.implied``) and keeps the items whose implied rating is an integer
    rating level: user averaging gives the sampled items the user's mean (not an integer unless
    all her ratings are equal), hybrid filling a prediction ``V_j . tU``.
``sgd_chain`` (PMF(S)): a stochastic client steps U_u after every item, so the rows are not
    parallel; but consecutive rows are linked, ``w_{k+1} in span(w_k, V_{i_k})`` with
    ``w_k = g_k - lam V_{i_k} = -err_k U^(k)``. The server finds each row's successor, hence the
    order the client trained in: its rated items first, in ascending id order (the client's
    CSR order), then the sampled ones in random order. The ascending prefix of the chain is the
    claim; its tail is trimmed with the implied ratings, which the two coefficients of each link
    give (``lr err_k^2``, then ``|z a_k - b_k / z|`` with one unknown z = 1 / sqrt(lr) and the
    integer test; float32 makes them less exact than the batch ones once the errors are small).
``svdpp_odelta`` (SVD++(S)): the O delta of a sampled item is one step,
    ``-lr lam O_j + (lr err_j / sqrt|I_u|) V_j``: it lies in the plane of O_j and V_j (to
    float32 rounding; the test needs no learning rate); a rated item's delta sums
    |I_u| - 1 + |I'_u| steps along other items' V and does not.
``intersection`` (any model, several rounds): with re-sampling (``resample=True``, the paper) the
    sampled items change at every call while I_u does not; the items present in every upload of
    a user are I_u (plus those sampled every time by chance).

Each returns one ``Guess`` per user it observed (pool: the items it saw for her; score: higher
for items it believes rated; predicted: the items it claims), combining several uploads of a user
by averaging the per-upload scores and claiming the items claimed in a majority of their
appearances.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..metrics import Guess
from ..views import View, ViewSpec
from .base import Attack
from .implied import fit_scale, rank_one_projection

__all__ = ["ImpliedRatings", "Intersection", "SgdChain", "SvdppODelta", "chain_fragments", "chain_implied", "fedrec_attacks"]

_EPS32 = float(np.finfo(np.float32).eps)


class _Votes:
    """Per user and item: the sum of scores, the number of appearances and of claims."""

    def __init__(self) -> None:
        self.score: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        self.seen: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        self.claim: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))

    def add(self, user: str, items: np.ndarray, scores: np.ndarray, claimed: np.ndarray) -> None:
        sc, se, cl = self.score[user], self.seen[user], self.claim[user]
        for i, s, c in zip(items.tolist(), scores.tolist(), claimed.tolist()):
            sc[i] += s
            se[i] += 1
            cl[i] += int(c)

    def guesses(self) -> dict[str, Guess]:
        out = {}
        for user, seen in self.seen.items():
            items = np.fromiter(seen.keys(), dtype=np.int64, count=len(seen))
            n = np.fromiter(seen.values(), dtype=np.float64, count=len(seen))
            s = np.fromiter((self.score[user][i] for i in seen), dtype=np.float64, count=len(seen)) / n
            c = np.fromiter((self.claim[user][i] for i in seen), dtype=np.float64, count=len(seen))
            out[user] = Guess(items, s, items[c * 2 > n])
        return out


def _calls(view: View, kind: str = "gradients"):
    """Yield ``(sender, model payload, upload payload, call index)`` for every incoming upload
    of ``kind`` whose payload was recorded, with the last model of the same round the server
    sent that sender before it (in the server's own order of events) and how many models the
    server had sent it before that one (its training call count, which sets a stochastic
    client's learning rate)."""
    last: dict[str, object] = {}
    sent: dict[str, int] = defaultdict(int)
    for m in view.messages:
        if m.outgoing and m.kind == "model":
            sent[m.receiver] += 1
            last[m.receiver] = m
        elif not m.outgoing and m.kind == kind and m.sender is not None:
            up = m.payload
            model = last.get(m.sender)
            if model is not None and model.round != m.round:
                continue
            if up is None or model is None or model.payload is None:
                continue
            if "items" not in up or "grads" not in up:
                continue  # a masked or otherwise opaque upload: nothing to read
            yield m.sender, model.payload, up, sent[m.sender] - 1


class ImpliedRatings(Attack):
    """The batch attack (module docstring). ``levels``: the rating scale; ``tol``: how close to a
    level an implied rating must be to count as rated (rating units)."""

    name = "implied_ratings"
    view = ViewSpec.server()
    protocols = ("fedrec", "fedrecpp")

    def __init__(self, levels=(1, 2, 3, 4, 5), tol: float = 1e-4) -> None:
        self.levels = tuple(levels)
        self.tol = float(tol)

    def run(self, view: View) -> dict[str, Guess]:
        cfg = view.public.config
        if view.public.protocol == "fedrec" and getattr(cfg, "style", "batch") != "batch":
            return {}
        lam = np.float32(cfg.lam) if cfg.dtype == "float32" else np.float64(cfg.lam)
        votes = _Votes()
        for user, model, up, _ in _calls(view):
            V = model["V"]
            items = np.asarray(up["items"], dtype=np.int64)
            if items.size == 0:
                continue
            Vr = V[items]
            # the client added lam V_i in its own dtype: subtract exactly that product
            W = np.asarray(up["grads"], dtype=np.float64) - (lam * Vr).astype(np.float64)
            a, b, _ = rank_one_projection(W, Vr)
            fit = fit_scale(a, b, levels=self.levels, tol=self.tol, V_rows=Vr)
            votes.add(user, items, -np.minimum(fit.dist, 1.0), fit.dist < self.tol)
        return votes.guesses()


def _plane_basis(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row by row, an orthonormal basis (e1, e2) of the plane spanned by ``A[k]`` and ``B[k]``
    (Gram-Schmidt; a zero vector gives a zero basis vector)."""
    na = np.linalg.norm(A, axis=1)
    na[na == 0] = 1.0
    e1 = A / na[:, None]
    e2 = B - (B * e1).sum(1)[:, None] * e1
    n2 = np.linalg.norm(e2, axis=1)
    n2[n2 == 0] = 1.0
    e2 /= n2[:, None]
    return e1, e2


def _chain_links(W: np.ndarray, Vr: np.ndarray, ratio: float = 1e3):
    """For rows ``W`` (k x d, w_k = -err_k U^(k)) and the items' factors: each row's successor in
    the client's training order (or -1 at a chain end) and the coefficients (alpha, beta) of
    ``w_succ = alpha w_k + beta V_k``. A successor is accepted when its distance to the plane
    spanned by (w_k, V_k) is below ``ratio`` times the median of the accepted ones."""
    k = W.shape[0]
    e1, e2 = _plane_basis(W, Vr)
    # [j, k]: the squared length of row j's projection on the plane of row k (1: in the plane);
    # 1 - that loses everything below 1e-16 to cancellation, so it only shortlists candidates
    Q = e1 @ e1.T
    Q *= Q
    P2 = e1 @ e2.T
    P2 *= P2
    Q += P2
    del P2
    np.fill_diagonal(Q, -np.inf)
    m = min(8, k - 1)
    short = np.argpartition(-Q, m - 1, axis=0)[:m] if m > 0 else np.zeros((0, k), dtype=np.int64)
    del Q
    # the exact distance of each shortlisted row to the plane: the norm of its residual vector
    cand = e1[short]  # (m, k, d)
    res = cand - (cand * e1[None]).sum(-1, keepdims=True) * e1[None] - (cand * e2[None]).sum(-1, keepdims=True) * e2[None]
    dist = (res * res).sum(-1)  # (m, k)
    pick = np.argmin(dist, axis=0)
    succ = short[pick, np.arange(k)]
    best = dist[pick, np.arange(k)]
    scale = np.median(best) if k > 2 else 0.0
    # float32 rows leave true links ~1e-14 off the plane and spurious ones beyond 1e-11; float64
    # ones ~1e-30: accept ratio times the typical link, within [1e-28, 1e-11]
    ok = best <= min(max(scale * ratio, 1e-28), 1e-11)
    # two rows cannot have the same successor: keep the better link
    owner: dict[int, int] = {}
    for i in np.argsort(best, kind="stable"):
        if not ok[i]:
            continue
        j = int(succ[i])
        if j in owner:
            ok[i] = False
        else:
            owner[j] = int(i)
    succ = np.where(ok, succ, -1)
    # least squares of w_succ on (w_k, V_k), every link at once through its 2 x 2 normal equations
    alpha = np.zeros(k)
    beta = np.zeros(k)
    i = np.flatnonzero(ok)
    if i.size:
        w, v, y = W[i], Vr[i], W[succ[i]]
        g11, g12, g22 = (w * w).sum(1), (w * v).sum(1), (v * v).sum(1)
        r1, r2 = (w * y).sum(1), (v * y).sum(1)
        det = g11 * g22 - g12 * g12
        det[det == 0] = np.inf
        alpha[i] = (g22 * r1 - g12 * r2) / det
        beta[i] = (g11 * r2 - g12 * r1) / det
    return succ, alpha, beta


def _implied_from_links(W, Vr, succ, alpha, beta, c: float = 1.0):
    k = W.shape[0]
    X = np.full(k, np.nan)  # lr err_k^2
    has = succ >= 0
    with np.errstate(divide="ignore", invalid="ignore"):
        X[has] = -beta[has] * c / alpha[has]
    sign = np.ones(k)
    for chain in chain_fragments(succ):  # signs are relative to each fragment's first row
        s = 1.0
        for pos, i in enumerate(chain):
            sign[i] = s
            if pos + 1 < len(chain):
                nxt = chain[pos + 1]
                s *= np.sign(alpha[i]) if alpha[i] != 0 else 1.0
                if not np.isfinite(X[nxt]) and np.isfinite(X[i]):
                    # a chain end: its error from the last link's ratio err_next / err_k = alpha / c
                    X[nxt] = X[i] * (alpha[i] / c) ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        sq = np.sqrt(np.where(X > 0, X, np.nan))
        wv = (W * Vr).sum(1)
        return sign * sq, sign * wv / sq


def chain_implied(W: np.ndarray, Vr: np.ndarray, c: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """``(a, b)`` such that the implied rating of row k is ``|z a_k - b_k / z|`` with
    z = 1 / sqrt(lr) (``sgd_chain`` in the module docstring); ``c`` = 1 - lr lam (1 is close
    enough for the paper's lr and lam). Rows whose error cannot be recovered get NaN."""
    succ, alpha, beta = _chain_links(W, Vr)
    return _implied_from_links(W, Vr, succ, alpha, beta, c)


def chain_fragments(succ: np.ndarray) -> list[list[int]]:
    """The chains of a successor array (``-1``: end), each from a row nobody links to, longest
    first (rows on a cycle, which float noise could produce, are left out)."""
    k = succ.shape[0]
    has_pred = np.zeros(k, dtype=bool)
    has_pred[succ[succ >= 0]] = True
    out = []
    for start in np.flatnonzero(~has_pred):
        chain, i = [], int(start)
        while i >= 0 and len(chain) <= k:
            chain.append(i)
            i = int(succ[i])
        out.append(chain)
    out.sort(key=len, reverse=True)
    return out


class SgdChain(Attack):
    """The PMF(S) attack (module docstring): successor links give the training order; the claim
    is the longest ascending run of item ids at the start of a chain, its tail trimmed while the
    last item's implied rating is farther than ``trim`` from a level. Scores: 2 for the run, plus
    one minus the distance of the implied rating to a level (clipped to [0, 1])."""

    name = "sgd_chain"
    view = ViewSpec.server()
    protocols = ("fedrec",)

    def __init__(self, levels=(1, 2, 3, 4, 5), tol: float = 2e-3, trim: float = 0.02) -> None:
        self.levels = tuple(levels)
        self.tol = float(tol)
        self.trim = float(trim)

    def run(self, view: View) -> dict[str, Guess]:
        cfg = view.public.config
        if view.public.protocol != "fedrec" or cfg.model != "PMF(S)":
            return {}
        lam = np.float32(cfg.lam) if cfg.dtype == "float32" else np.float64(cfg.lam)
        votes = _Votes()
        for user, model, up, _ in _calls(view):
            V = model["V"]
            items = np.asarray(up["items"], dtype=np.int64)
            if items.size < 3:
                continue
            Vr = np.asarray(V[items], dtype=np.float64)
            W = np.asarray(up["grads"], dtype=np.float64) - (lam * V[items]).astype(np.float64)
            succ, alpha, beta = _chain_links(W, Vr)
            a, b = _implied_from_links(W, Vr, succ, alpha, beta)
            good = np.isfinite(a) & np.isfinite(b)
            dist = np.ones(items.size)
            if good.sum() >= 3:
                fit = fit_scale(a[good], b[good], levels=self.levels, tol=self.tol, V_rows=Vr[good], absolute=True)
                dist[good] = np.minimum(fit.dist, 1.0)
            run: list[int] = []
            for chain in chain_fragments(succ):
                ids = items[chain]
                n = 1
                while n < len(chain) and ids[n] > ids[n - 1]:
                    n += 1
                if n > len(run):
                    run = chain[:n]
            while len(run) > 1 and dist[run[-1]] > self.trim:
                run = run[:-1]
            claimed = np.zeros(items.size, dtype=bool)
            claimed[run] = True
            votes.add(user, items, 2.0 * claimed + (1.0 - dist), claimed)
        return votes.guesses()


class SvdppODelta(Attack):
    """The SVD++(S) attack (module docstring): an item is claimed rated when its O delta is not
    in the plane of O_j and V_j beyond ``threshold`` times the float32 rounding of the delta.
    (The plane, not the line of V_j after adding back ``lr lam O_j``: the client's learning
    rate decays with its calls since the start of the run, which a view of later rounds does
    not show.)"""

    name = "svdpp_odelta"
    view = ViewSpec.server()
    protocols = ("fedrec",)

    def __init__(self, threshold: float = 100.0) -> None:
        self.threshold = float(threshold)

    def run(self, view: View) -> dict[str, Guess]:
        cfg = view.public.config
        if view.public.protocol != "fedrec" or cfg.model != "SVD++(S)":
            return {}
        votes = _Votes()
        for user, model, up, _ in _calls(view):
            if "o_deltas" not in up or "O" not in model:
                continue
            items = np.asarray(up["items"], dtype=np.int64)
            Vr = np.asarray(model["V"][items], dtype=np.float64)
            Or = np.asarray(model["O"][items], dtype=np.float64)
            od = np.asarray(up["o_deltas"], dtype=np.float64)
            e1, e2 = _plane_basis(Vr, Or)  # each item's plane span(V_j, O_j)
            perp = od - (od * e1).sum(1)[:, None] * e1 - (od * e2).sum(1)[:, None] * e2
            scale = _EPS32 * (np.linalg.norm(Or, axis=1) + np.linalg.norm(od, axis=1))
            scale[scale == 0] = _EPS32
            r = np.linalg.norm(perp, axis=1) / scale
            votes.add(user, items, np.log10(r + 1.0), r > self.threshold)
        return votes.guesses()


class Intersection(Attack):
    """Items present in every upload of a user (score: the share of her uploads that carry the
    item). Needs several uploads to beat the random guess; one upload claims all its items."""

    name = "intersection"
    view = ViewSpec.server()
    protocols = ("fedrec", "fedrecpp")

    def run(self, view: View) -> dict[str, Guess]:
        counts: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        uploads: dict[str, int] = defaultdict(int)
        for m in view.select("gradients", incoming=True):
            p = m.payload
            if m.sender is None or p is None or "items" not in p:
                continue
            uploads[m.sender] += 1
            c = counts[m.sender]
            for i in np.asarray(p["items"]).tolist():
                c[i] += 1
        out = {}
        for user, c in counts.items():
            items = np.fromiter(c.keys(), dtype=np.int64, count=len(c))
            share = np.fromiter(c.values(), dtype=np.float64, count=len(c)) / uploads[user]
            out[user] = Guess(items, share, items[share >= 1.0])
        return out


def fedrec_attacks(protocol: str, cfg) -> list[Attack]:
    """The attacks of this module that apply to a run of ``protocol`` with ``cfg``."""
    if protocol == "fedrecpp":
        return [ImpliedRatings(), Intersection()]
    model = getattr(cfg, "model", "PMF(B)")
    first = {"PMF(B)": ImpliedRatings, "PMF(S)": SgdChain, "SVD++(S)": SvdppODelta}[model]()
    return [first, Intersection()]
