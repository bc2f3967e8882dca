"""Seeded MovieLens-like synthetic ratings: the embedded default dataset.

Model (all draws from one ``numpy.random.Generator(PCG64(seed))`` in a fixed order):

- items get 1 + Poisson(0.7) genres (at most 6) out of ``n_categories`` (default the 19
  MovieLens 100K genre names), drawn with skewed genre frequencies (drama and comedy common);
- item factors q_i = 0.7 x (mean of its genres' embeddings) + 0.7 x noise, user factors p_u
  noise, both of rank ``rank``; user bias b_u ~ N(0, 0.45); item bias b_i ~ N(0, 0.45) plus a
  small bonus for popular items;
- item popularity is Zipf-like, weight (rank + 10)^-``zipf_exponent`` (1.5) over a random
  permutation of the items;
- user activity is ``min_per_user`` + a log-normal excess (sigma ``activity_sigma``), scaled so
  the total is ``n_ratings``, capped at ``max_user_frac`` x n_items;
- each user picks her items without replacement with probability proportional to
  popularity x exp(``selection_strength`` x affinity) (Gumbel top-k): people rate what they
  expect to like, so the data are missing-not-at-random like MovieLens;
- rating = round(``global_mean`` + b_u + b_i + p_u.q_i + N(0, ``noise``^2)) clipped to 1..5;
- timestamps: each user is active over a log-normal span (mean ~ a month) starting uniformly in
  the dataset's period, each rating uniform within it;
- every item is rated at least once (a missing item is given to a random user who lacks it).

Rows are sorted by user, then timestamp.  Users and items get MovieLens-style ids 1..n.
The defaults give a rating histogram close to MovieLens (mean ~3.53, std ~1.09; about 4 / 14 /
30 / 31 / 22 % for 1..5 stars).  Bytes are reproducible for a given NumPy build (the affinity
uses a BLAS matrix product; different BLAS builds could round differently).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .loaders import ML100K_GENRES
from .ratings import Ratings

__all__ = ["PRESETS", "generate"]

_BASE: dict[str, Any] = dict(
    rank=10,
    n_categories=19,
    zipf_exponent=1.5,
    activity_sigma=1.1,
    max_user_frac=0.5,
    selection_strength=1.0,
    global_mean=3.05,
    noise=0.85,
    t_start=875_000_000,  # 1997-09 like ML-100K
    t_end=893_300_000,
)

PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(_BASE, n_users=30, n_items=40, n_ratings=360, min_per_user=5),
    "ml100k-like": dict(_BASE, n_users=943, n_items=1682, n_ratings=100_000, min_per_user=20),
    # ML-1M: 3,706 rated movie ids spread over 1..3952 (item_space="id_range" gives all 3,952)
    "ml1m-like": dict(
        _BASE, n_users=6040, n_items=3706, n_ratings=1_000_209, min_per_user=20,
        t_start=956_700_000, t_end=1_046_500_000,  # 2000-04 .. 2003-02 like ML-1M
        id_range=3952,
    ),
    # FedRec++'s NF5K5K: the 5,000 most active Netflix users on the 5,000 most popular movies,
    # 7,944,473 ratings (32 % dense, about 1,589 per user)
    "nf5k5k-like": dict(
        _BASE, n_users=5000, n_items=5000, n_ratings=7_944_473, min_per_user=300, max_user_frac=0.95,
        activity_sigma=0.6, t_start=946_684_800, t_end=1_135_987_200,  # 2000 .. 2005 like Netflix
    ),
    # PersonalFR's Anime: 69,600 users, 9,927 anime, 6,337,241 explicit ratings on a 1..10 scale
    "anime-like": dict(
        _BASE, n_users=69_600, n_items=9927, n_ratings=6_337_241, min_per_user=1, rating_max=10,
        t_start=1_420_070_400, t_end=1_483_228_800,
    ),
}

_GENRE_WEIGHT = np.array(
    [0.01, 0.15, 0.08, 0.03, 0.04, 0.3, 0.06, 0.03, 0.4, 0.02, 0.01, 0.06, 0.03, 0.03, 0.15, 0.06, 0.15, 0.04, 0.02]
)


def _activity(rng: np.random.Generator, p: dict[str, Any]) -> np.ndarray:
    n_users, n_items, total, lo = p["n_users"], p["n_items"], p["n_ratings"], p["min_per_user"]
    cap = max(lo, int(p["max_user_frac"] * n_items))
    lo = min(lo, n_items)
    if total < n_users * lo:
        raise ValueError(f"n_ratings={total} is below n_users x min_per_user = {n_users * lo}")
    if total > n_users * cap:
        raise ValueError(f"n_ratings={total} exceeds n_users x max per user = {n_users * cap}")
    x = rng.lognormal(0.0, p["activity_sigma"], n_users)
    extra = total - n_users * lo
    # scale s so that sum(min(x * s, cap - lo)) == extra (bisection, deterministic)
    lo_s, hi_s = 0.0, extra / x.sum() * 4 + 1.0
    while np.minimum(x * hi_s, cap - lo).sum() < extra:
        hi_s *= 2
    for _ in range(100):
        mid = 0.5 * (lo_s + hi_s)
        if np.minimum(x * mid, cap - lo).sum() < extra:
            lo_s = mid
        else:
            hi_s = mid
    e = np.minimum(x * hi_s, cap - lo)
    base = np.floor(e).astype(np.int64)
    short = extra - int(base.sum())
    if short > 0:  # hand out the remainder by largest fractional part (ties: lower user)
        frac = np.where(base < cap - lo, e - base, -1.0)
        base[np.argsort(-frac, kind="stable")[:short]] += 1
    return lo + base


def generate(preset: str = "tiny", seed: int = 0, **overrides: Any) -> Ratings:
    """Generate a synthetic dataset from a preset, with optional parameter overrides.

    Presets: ``"tiny"`` (30 users x 40 items, 360 ratings: for tests), ``"ml100k-like"``
    (943 x 1682, 100,000 ratings), ``"ml1m-like"`` (6040 x 3706, 1,000,209 ratings).  Overrides
    are any preset key (``n_users``, ``n_items``, ``n_ratings``, ``min_per_user``, ``rank``,
    ``n_categories``, ``zipf_exponent``, ``activity_sigma``, ``max_user_frac``,
    ``selection_strength``, ``global_mean``, ``noise``, ``t_start``, ``t_end``).  The same
    (preset, seed, overrides) give the same bytes.  ``item_space`` is as the loaders': where a
    preset spreads its rated item ids over a wider range (``id_range``: ``ml1m-like``'s 3,706
    rated ids in 1..3952, as ML-1M's), ``"observed"`` (default) indexes the rated items only and
    ``"id_range"`` every id of the range (unrated ones included); elsewhere every item is rated
    and both coincide. ``nf5k5k-like`` has FedRec++'s NF5K5K shape (5,000 x 5,000, 7,944,473
    ratings) and ``anime-like`` PersonalFR's Anime shape (69,600 x 9,927, 6,337,241 ratings on
    a 1..10 scale, ``rating_max=10``).
    """
    name = preset.removeprefix("synthetic:")
    if name not in PRESETS:
        raise ValueError(f"unknown synthetic preset {preset!r}; expected one of {', '.join(PRESETS)}")
    item_space = overrides.pop("item_space", "observed")
    if item_space not in ("observed", "id_range"):
        raise ValueError(f"item_space must be 'observed' or 'id_range', got {item_space!r}")
    p = dict(PRESETS[name])
    p.setdefault("id_range", None)  # item ids spread over 1..id_range (ML-1M); None: 1..n_items
    p.setdefault("rating_max", 5)  # ratings on 1..rating_max (Anime: 10)
    unknown = sorted(set(overrides) - set(p))
    if unknown:
        raise TypeError(f"generate(): unknown parameter(s) {unknown}; valid: {sorted(p)}")
    p.update(overrides)
    n_users, n_items, d, n_cat = int(p["n_users"]), int(p["n_items"]), int(p["rank"]), int(p["n_categories"])
    if n_users < 1 or n_items < 1:
        raise ValueError("n_users and n_items must be positive")
    rng = np.random.default_rng(np.random.PCG64(seed))

    # item categories (multi-label)
    gw = _GENRE_WEIGHT[:n_cat] if n_cat <= len(_GENRE_WEIGHT) else np.concatenate(
        [_GENRE_WEIGHT, np.full(n_cat - len(_GENRE_WEIGHT), 0.05)])
    gw = gw / gw.sum()
    n_gen = np.minimum(1 + rng.poisson(0.7, n_items), min(6, n_cat))
    gkeys = np.log(gw)[None, :] + rng.gumbel(size=(n_items, n_cat))
    granks = np.argsort(-gkeys, axis=1, kind="stable")
    cats = np.zeros((n_items, n_cat), dtype=bool)
    for j in range(int(n_gen.max())):
        rows = np.flatnonzero(n_gen > j)
        cats[rows, granks[rows, j]] = True
    names = list(ML100K_GENRES[:n_cat]) if n_cat <= len(ML100K_GENRES) else [f"genre{k}" for k in range(n_cat)]

    # latent structure
    s = 0.4
    genre_emb = rng.normal(0.0, s, (n_cat, d))
    gsum = np.zeros((n_items, d))
    for c in range(n_cat):  # elementwise, not BLAS: same bytes on every machine
        gsum += cats[:, c, None] * genre_emb[c][None, :]
    q = 0.7 * gsum / n_gen[:, None] + 0.7 * rng.normal(0.0, s, (n_items, d))
    pu = rng.normal(0.0, s, (n_users, d))
    b_u = rng.normal(0.0, 0.45, n_users)
    pop_rank = rng.permutation(n_items)
    logw = -float(p["zipf_exponent"]) * np.log(pop_rank + 10.0)
    b_i = rng.normal(0.0, 0.45, n_items) + 0.15 * (logw - logw.mean()) / (logw.std() + 1e-12)

    counts = _activity(rng, p)

    # item choice: Gumbel top-k on log popularity + strength x standardised affinity
    beta = float(p["selection_strength"])
    aff_scale = 1.0 / (s * s * np.sqrt(d) + 1e-12)
    sel_users, sel_items = [], []
    block = 512
    for start in range(0, n_users, block):
        stop = min(n_users, start + block)
        aff = pu[start:stop] @ q.T
        u01 = rng.random((stop - start, n_items))
        keys = (logw[None, :] + beta * aff_scale * aff) - np.log(-np.log(u01 + 1e-300))
        for r in range(stop - start):
            k_u = int(counts[start + r])
            if k_u >= n_items:
                chosen = np.arange(n_items)
            else:
                chosen = np.sort(np.argpartition(-keys[r], k_u - 1)[:k_u])
            sel_items.append(chosen)
            sel_users.append(np.full(len(chosen), start + r, dtype=np.int64))
    users = np.concatenate(sel_users)
    items = np.concatenate(sel_items).astype(np.int64)

    # every item rated at least once
    seen = np.bincount(items, minlength=n_items)
    missing = np.flatnonzero(seen == 0)
    if missing.size:
        extra_users = rng.integers(0, n_users, missing.size)
        users = np.concatenate([users, extra_users])
        items = np.concatenate([items, missing])

    # ratings
    inter = (pu[users] * q[items]).sum(axis=1)
    raw = float(p["global_mean"]) + b_u[users] + b_i[items] + inter + rng.normal(0.0, float(p["noise"]), len(users))
    top = int(p["rating_max"])
    if top != 5:  # the 1..5 model stretched linearly onto 1..top
        raw = 1.0 + (raw - 1.0) * (top - 1) / 4.0
    values = np.clip(np.rint(raw), 1, top).astype(np.float32)

    # timestamps
    t0, t1 = int(p["t_start"]), int(p["t_end"])
    span_total = max(t1 - t0, 1)
    start_u = t0 + rng.random(n_users) * span_total
    dur_u = np.minimum(rng.lognormal(np.log(14 * 86400.0), 1.5, n_users), t1 - start_u)
    ts = (start_u[users] + rng.random(len(users)) * dur_u[users]).astype(np.int64)

    order = np.lexsort((items, ts, users))
    info = {"source": f"synthetic:{name}", "preset": name, "seed": int(seed), "params": p,
            "format": "synthetic", "item_space": item_space}
    item_ids = np.arange(1, n_items + 1, dtype=np.int64)
    id_range = p["id_range"]
    if id_range is not None and int(id_range) > n_items:
        # the rated ids: a sorted random n_items of 1..id_range (drawn last: nothing else moves);
        # with item_space="id_range" the index space is every id, the unrated ones included
        item_ids = np.sort(rng.choice(int(id_range), size=n_items, replace=False)) + 1
        if item_space == "id_range":
            items = item_ids[items] - 1
            full = np.zeros((int(id_range), n_cat), dtype=bool)
            full[item_ids - 1] = cats
            cats, n_items, item_ids = full, int(id_range), np.arange(1, int(id_range) + 1, dtype=np.int64)
    return Ratings._trusted(
        users[order], items[order], values[order], ts[order],
        n_users=n_users, n_items=n_items,
        user_ids=np.arange(1, n_users + 1, dtype=np.int64), item_ids=item_ids,
        categories=cats, category_names=names, name=f"synthetic:{name}", info=info,
    )
