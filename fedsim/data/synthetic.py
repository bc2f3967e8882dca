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

The internet-scale presets (``ml20m-like``, ``netflix-like``) use a second, memory-conscious
algorithm (``method="blocks"``, see ``_generate_blocks``): the Gumbel top-k over every item for
every user costs O(n_users x n_items) (3.7e9 keys for ML-20M), so there the items are drawn per
block of users by rejection from the popularity law (proposals O(n_ratings)), the rows of each
block are written straight into preallocated output arrays, and only ``n_rated_items`` of the
``n_items`` ids are ever rated (ML-20M: 26,744 rated ids up to 131,262).
The defaults give a rating histogram close to MovieLens (mean ~3.53, std ~1.09; about 4 / 14 /
30 / 31 / 22 % for 1..5 stars).  Bytes are reproducible for a given NumPy build (the affinity
uses a BLAS matrix product; different BLAS builds could round differently).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._build import check_seed
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

# Parameters only the "blocks" method reads (internet-scale presets); see _generate_blocks.
_BLOCKS: dict[str, Any] = dict(
    method="blocks",
    n_rated_items=None,  # ids that get ratings (None: all n_items); the rest of the id range stays unrated
    zipf_offset=10.0,  # popularity weight (rank + offset)^-zipf_exponent
    affinity_cap=1.5,  # selection tilt exp(strength x min(affinity, cap)): bounds the rejection rate
    rating_step=1.0,  # 0.5: half stars from 0.5 (MovieLens 10M and later)
    block_ratings=1_000_000,  # ratings generated per block of users (memory: ~150 bytes each)
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
    # MovieLens 20M: 138,493 users (>= 20 ratings each, mean 144, median ~70, max 9,254), 26,744
    # rated movies with ids up to 131,262, 20,000,263 half-star ratings (0.5..5), 1995-01 .. 2015-03.
    # Popularity (rank + 55)^-1.5 puts the top movie near ML-20M's 67k ratings before saturation.
    "ml20m-like": _BASE | _BLOCKS | dict(
        n_users=138_493, n_items=131_262, n_rated_items=26_744, n_ratings=20_000_263,
        min_per_user=20, activity_sigma=1.3, max_user_frac=0.35, zipf_offset=55.0, rating_step=0.5,
        t_start=789_652_009, t_end=1_427_784_002,
    ),
    # Netflix Prize: 480,189 users (from 1 rating, mean 209, median ~96, max 17,653), 17,770 movies,
    # 100,480,507 ratings 1..5, 1998-11 .. 2005-12. Arrays: 2 GB (users, items, values, timestamps).
    "netflix-like": _BASE | _BLOCKS | dict(
        n_users=480_189, n_items=17_770, n_ratings=100_480_507, min_per_user=1,
        activity_sigma=1.25, max_user_frac=0.99, zipf_offset=165.0,
        t_start=910_000_000, t_end=1_135_900_000,
    ),
}

_GENRE_WEIGHT = np.array(
    [0.01, 0.15, 0.08, 0.03, 0.04, 0.3, 0.06, 0.03, 0.4, 0.02, 0.01, 0.06, 0.03, 0.03, 0.15, 0.06, 0.15, 0.04, 0.02]
)


def _activity(rng: np.random.Generator, p: dict[str, Any], n_items: int | None = None) -> np.ndarray:
    """Ratings per user (``n_items``: the items a user can rate, default ``p["n_items"]``)."""
    n_users, total, lo = p["n_users"], p["n_ratings"], p["min_per_user"]
    n_items = p["n_items"] if n_items is None else n_items
    # nobody rates more than the whole catalogue, whatever min_per_user or max_user_frac say
    cap = min(n_items, max(lo, int(p["max_user_frac"] * n_items)))
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


_S = 0.4  # scale of the latent factors


def _structure(rng: np.random.Generator, p: dict[str, Any], n_items: int) -> tuple:
    """Genres, latent factors, biases and popularity of ``n_items`` items and ``p["n_users"]``
    users, drawn from ``rng`` in this fixed order: genre counts, genre keys, genre embeddings,
    item noise, user factors, user biases, popularity ranks, item biases. Returns
    ``(cats, names, q, pu, b_u, logw, b_i)``."""
    n_users, d, n_cat = int(p["n_users"]), int(p["rank"]), int(p["n_categories"])
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
    s = _S
    genre_emb = rng.normal(0.0, s, (n_cat, d))
    gsum = np.zeros((n_items, d))
    for c in range(n_cat):  # elementwise, not BLAS: same bytes on every machine
        gsum += cats[:, c, None] * genre_emb[c][None, :]
    q = 0.7 * gsum / n_gen[:, None] + 0.7 * rng.normal(0.0, s, (n_items, d))
    pu = rng.normal(0.0, s, (n_users, d))
    b_u = rng.normal(0.0, 0.45, n_users)
    pop_rank = rng.permutation(n_items)
    logw = -float(p["zipf_exponent"]) * np.log(pop_rank + float(p.get("zipf_offset", 10.0)))
    b_i = rng.normal(0.0, 0.45, n_items) + 0.15 * (logw - logw.mean()) / (logw.std() + 1e-12)
    return cats, names, q, pu, b_u, logw, b_i


def generate(preset: str = "tiny", seed: int = 0, **overrides: Any) -> Ratings:
    """Generate a synthetic dataset from a preset, with optional parameter overrides.

    Presets: ``"tiny"`` (30 users x 40 items, 360 ratings: for tests), ``"ml100k-like"``
    (943 x 1682, 100,000 ratings), ``"ml1m-like"`` (6040 users, 3,706 rated ids in 1..3952,
    1,000,209 ratings), ``"nf5k5k-like"`` (FedRec++'s NF5K5K shape: 5,000 x 5,000, 7,944,473
    ratings), ``"anime-like"`` (PersonalFR's Anime shape: 69,600 x 9,927, 6,337,241 ratings on a
    1..10 scale, ``rating_max=10``),
    ``"ml20m-like"`` (138,493 users, 26,744 rated ids up to 131,262, 20,000,263 half-star
    ratings; about 0.5 GB of arrays) and ``"netflix-like"`` (480,189 x 17,770, 100,480,507
    ratings; about 2 GB of arrays, 3 GB peak while generating).  Overrides are any preset key
    (``n_users``, ``n_items``, ``n_ratings``, ``min_per_user``, ``rank``, ``n_categories``,
    ``zipf_exponent``, ``activity_sigma``, ``max_user_frac``, ``selection_strength``,
    ``global_mean``, ``noise``, ``t_start``, ``t_end``, ``id_range``, ``rating_max``; for the
    last two presets also
    ``n_rated_items``, ``zipf_offset``, ``affinity_cap``, ``rating_step``, ``block_ratings``).
    The same (preset, seed, overrides) give the same bytes.  ``seed`` is an integer >= 0 (else
    ``ValueError`` naming it).

    ``item_space``: ``"observed"`` (default) indexes the rated items only, in id order;
    ``"id_range"`` keeps the whole id range (index = id - 1), as the loaders do for MovieLens, so
    that ``ml1m-like`` has 3,952 items of which 3,706 are rated (its ``id_range``) and
    ``ml20m-like`` 131,262 of which 26,744 are rated. For the other presets every item is rated
    and both spaces coincide.
    """
    check_seed(seed)
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
    n_users, n_items = int(p["n_users"]), int(p["n_items"])
    if n_users < 1 or n_items < 1:
        raise ValueError("n_users and n_items must be positive")
    rng = np.random.default_rng(np.random.PCG64(int(seed)))
    if p.get("method") == "blocks":
        if p["id_range"] is not None or int(p["rating_max"]) != 5:
            raise ValueError(f"preset {name!r} sets its id range with n_items/n_rated_items and its scale with "
                             f"rating_step; id_range and rating_max apply to the other presets")
        return _generate_blocks(rng, p, name, int(seed), item_space)

    cats, names, q, pu, b_u, logw, b_i = _structure(rng, p, n_items)
    s, d = _S, int(p["rank"])

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
            full = np.zeros((int(id_range), cats.shape[1]), dtype=bool)
            full[item_ids - 1] = cats
            cats, n_items, item_ids = full, int(id_range), np.arange(1, int(id_range) + 1, dtype=np.int64)
    return Ratings._trusted(
        users[order], items[order], values[order], ts[order],
        n_users=n_users, n_items=n_items,
        user_ids=np.arange(1, n_users + 1, dtype=np.int64), item_ids=item_ids,
        categories=cats, category_names=names, name=f"synthetic:{name}", info=info,
    )


def _dot_rows(a: np.ndarray, b: np.ndarray, ia: np.ndarray, ib: np.ndarray) -> np.ndarray:
    """sum_f a[ia, f] * b[ib, f] for column-major ``a``, ``b`` ((d, n) arrays): one gathered
    vector per factor instead of two (k, d) matrices (a block's proposals would need 0.6 GB)."""
    out = a[0][ia] * b[0][ib]
    for f in range(1, a.shape[0]):
        out += a[f][ia] * b[f][ib]
    return out


def _alias_table(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Walker's alias table (Vose's construction) for sampling index k with probability
    proportional to ``w[k]`` in O(1): draw a slot j uniformly and keep it with probability
    ``prob[j]``, else take ``alias[j]`` (a searchsorted on the cumulative weights costs about
    fifteen cache-missing steps per draw, most of the generation's time)."""
    n = w.shape[0]
    scaled = w * (n / w.sum())
    prob = np.ones(n)
    alias = np.arange(n)
    small = [int(k) for k in np.flatnonzero(scaled < 1.0)]
    large = [int(k) for k in np.flatnonzero(scaled >= 1.0)]
    scaled = scaled.tolist()
    while small and large:
        s_, l_ = small.pop(), large.pop()
        prob[s_] = scaled[s_]
        alias[s_] = l_
        scaled[l_] = (scaled[l_] + scaled[s_]) - 1.0
        (small if scaled[l_] < 1.0 else large).append(l_)
    return prob, alias  # leftovers (rounding) keep probability 1


def _first_per_user(keys: np.ndarray, n_rated: int, want: np.ndarray) -> np.ndarray:
    """``keys`` (local user x n_rated + item, in draw order) reduced to the first occurrence of
    each pair and to the first ``want[user]`` pairs of each user, still in draw order."""
    _, first = np.unique(keys, return_index=True)
    first.sort()
    keys = keys[first]
    users = keys // n_rated
    order = np.argsort(users, kind="stable")
    us = users[order]
    rank = np.arange(us.shape[0]) - np.searchsorted(us, us, side="left")
    keep = np.zeros(keys.shape[0], dtype=bool)
    keep[order[rank < want[us]]] = True
    return keys[keep]


def _choose_block(rng, ulo: int, counts: np.ndarray, alias: tuple, logw: np.ndarray,
                  puT: np.ndarray, qT: np.ndarray, aff_scale: float, beta: float, cap: float,
                  dense_at: int) -> tuple[np.ndarray, np.ndarray]:
    """Items of users ``ulo .. ulo + len(counts)``: ``counts[r]`` distinct items each, drawn
    without replacement with probability proportional to popularity x exp(beta x min(affinity,
    cap)). Light users: successive sampling by rejection (proposals from the popularity law,
    accepted with probability exp(beta x (min(affinity, cap) - cap)), duplicates dropped, first
    ``counts`` kept: the law of sampling without replacement); users above ``dense_at`` items:
    the equivalent Gumbel top-k over every item (rejection would need too many proposals to
    reach the rare items). Returns (users, items) with each user's rows together."""
    n_rated = qT.shape[1]
    heavy = np.flatnonzero(counts > dense_at)
    light = np.flatnonzero(counts <= dense_at)
    want = counts[light]
    kept = np.empty(0, dtype=np.int64)  # keys (light index x n_rated + item) of unfinished users
    done = []  # keys of users that have all their items
    need = want.copy()
    factor = 4.0
    while need.any():
        act = np.flatnonzero(need > 0)
        m = np.ceil(need[act] * factor).astype(np.int64) + 4
        lu = np.repeat(act, m)
        slot = rng.integers(0, n_rated, lu.shape[0])
        ii = np.where(rng.random(lu.shape[0]) < alias[0][slot], slot, alias[1][slot])
        a = _dot_rows(puT, qT, ulo + light[lu], ii) * aff_scale
        acc = rng.random(lu.shape[0]) < np.exp(beta * (np.minimum(a, cap) - cap))
        rate = max(float(acc.mean()), 0.05)
        kept = _first_per_user(np.concatenate([kept, lu[acc].astype(np.int64) * n_rated + ii[acc]]), n_rated, want)
        owner = kept // n_rated
        short = want - np.bincount(owner, minlength=want.shape[0])
        finished = short[owner] == 0
        done.append(kept[finished])
        kept = kept[~finished]
        need[act] = short[act]  # the finished ones (and those done before) need nothing more
        factor = min(1.3 / rate, 50.0)
    kept = np.concatenate(done) if done else kept
    kept = kept[np.argsort(kept // n_rated, kind="stable")]
    users = [ulo + light[kept // n_rated]]
    items = [kept % n_rated]
    for c in range(0, heavy.shape[0], 256):  # few users: a Gumbel top-k over all rated items each
        rows = heavy[c:c + 256]
        aff = aff_scale * (puT[:, ulo + rows].T @ qT)
        keys = logw[None, :] + beta * np.minimum(aff, cap) + rng.gumbel(size=aff.shape)
        for k, r in enumerate(rows):
            users.append(np.full(int(counts[r]), ulo + r, dtype=np.int64))
            items.append(np.argpartition(-keys[k], int(counts[r]) - 1)[: int(counts[r])].astype(np.int64))
    return np.concatenate(users), np.concatenate(items)


def _generate_blocks(rng: np.random.Generator, p: dict[str, Any], name: str, seed: int,
                     item_space: str) -> Ratings:
    """The internet-scale generator (presets with ``method="blocks"``): the model of the module
    docstring, with these differences. Only ``n_rated_items`` ids are rated (the largest id and a
    uniform sample of the others); the selection tilt is exp(strength x min(affinity,
    ``affinity_cap``)) so that rejection sampling stays cheap (about 3 proposals per rating);
    popularity is (rank + ``zipf_offset``)^-``zipf_exponent``; ``rating_step`` 0.5 gives half
    stars from 0.5 to 5. Users are generated in blocks of about ``block_ratings`` ratings whose
    rows go straight into the output arrays (users int32, items int32, values float32,
    timestamps int64: 20 bytes a rating), already in (user, timestamp, item) order. The total is
    exactly ``n_ratings``: an item of the rated set that nobody drew replaces a random rating of
    an item rated at least twice (a few hundred of 20M for ml20m-like)."""
    n_users, n_ids, d = int(p["n_users"]), int(p["n_items"]), int(p["rank"])
    n_rated = n_ids if p["n_rated_items"] is None else int(p["n_rated_items"])
    if not 1 <= n_rated <= n_ids:
        raise ValueError(f"n_rated_items must be between 1 and n_items = {n_ids}, got {n_rated}")
    step = float(p["rating_step"])
    if step not in (0.5, 1.0):
        raise ValueError(f"rating_step must be 0.5 or 1, got {step}")
    if n_rated < n_ids:  # the id range ends at a rated id, as a dataset's does
        rated_ids = np.sort(np.append(rng.choice(n_ids - 1, n_rated - 1, replace=False), n_ids - 1))
    else:
        rated_ids = np.arange(n_ids)
    cats_r, names, q, pu, b_u, logw, b_i = _structure(rng, p, n_rated)
    counts = _activity(rng, p, n_rated)
    t0, t1 = int(p["t_start"]), int(p["t_end"])
    start_u = t0 + rng.random(n_users) * max(t1 - t0, 1)
    dur_u = np.minimum(rng.lognormal(np.log(14 * 86400.0), 1.5, n_users), t1 - start_u)

    total = int(counts.sum())
    indptr = np.zeros(n_users + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    users_out = np.empty(total, dtype=np.int32)
    items_out = np.empty(total, dtype=np.int32)
    values_out = np.empty(total, dtype=np.float32)
    ts_out = np.empty(total, dtype=np.int64)
    alias = _alias_table(np.exp(logw - logw.max()))
    puT, qT = np.ascontiguousarray(pu.T), np.ascontiguousarray(q.T)
    # the selection's affinities in float32 (half the memory traffic of the proposals' gathers)
    puT32, qT32 = puT.astype(np.float32), qT.astype(np.float32)
    aff_scale = 1.0 / (_S * _S * np.sqrt(d) + 1e-12)
    beta, cap = float(p["selection_strength"]), float(p["affinity_cap"])
    gm, noise = float(p["global_mean"]), float(p["noise"])
    block = max(1, int(p["block_ratings"]))
    lo_rating = step if step < 1 else 1.0

    def rate(u: np.ndarray, i: np.ndarray) -> np.ndarray:
        raw = gm + b_u[u] + b_i[i] + _dot_rows(puT, qT, u, i) + rng.normal(0.0, noise, u.shape[0])
        return np.clip(np.rint(raw / step) * step, lo_rating, 5).astype(np.float32)

    ulo = 0
    while ulo < n_users:
        uhi = int(np.searchsorted(indptr, indptr[ulo] + block, side="right")) - 1
        uhi = min(max(uhi, ulo + 1), n_users)
        u, i = _choose_block(rng, ulo, counts[ulo:uhi], alias, logw, puT32, qT32, aff_scale, beta, cap,
                             max(1, n_rated // 24))
        v = rate(u, i)
        ts = (start_u[u] + rng.random(u.shape[0]) * dur_u[u]).astype(np.int64)
        order = np.lexsort((i, ts, u))
        sl = slice(int(indptr[ulo]), int(indptr[uhi]))
        users_out[sl], items_out[sl], values_out[sl], ts_out[sl] = u[order], i[order], v[order], ts[order]
        ulo = uhi
    del u, i, v, ts, order

    # every rated id rated at least once, the total unchanged
    seen = np.bincount(items_out, minlength=n_rated)
    for j in np.flatnonzero(seen == 0):
        while True:
            r = int(rng.integers(0, total))
            if seen[items_out[r]] >= 2:
                break
        seen[items_out[r]] -= 1
        seen[j] += 1
        u = users_out[r]
        items_out[r] = j
        values_out[r] = rate(np.array([u]), np.array([j]))[0]
        lo, hi = int(indptr[u]), int(indptr[u + 1])
        o = np.lexsort((items_out[lo:hi], ts_out[lo:hi]))
        items_out[lo:hi], values_out[lo:hi], ts_out[lo:hi] = items_out[lo:hi][o], values_out[lo:hi][o], ts_out[lo:hi][o]

    if item_space == "id_range":
        items_out = rated_ids.astype(np.int32)[items_out]  # ascending map: row order unchanged
        n_items, item_ids = n_ids, np.arange(1, n_ids + 1, dtype=np.int64)
        cats = np.zeros((n_ids, cats_r.shape[1]), dtype=bool)
        cats[rated_ids] = cats_r
    else:
        n_items, item_ids, cats = n_rated, rated_ids.astype(np.int64) + 1, cats_r
    info = {"source": f"synthetic:{name}", "preset": name, "seed": seed, "params": p,
            "format": "synthetic", "item_space": item_space, "rated_items": n_rated}
    return Ratings._trusted(
        users_out, items_out, values_out, ts_out, n_users=n_users, n_items=n_items,
        user_ids=np.arange(1, n_users + 1, dtype=np.int64), item_ids=item_ids,
        categories=cats, category_names=names, name=f"synthetic:{name}", info=info,
    )
