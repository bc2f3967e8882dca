import hashlib

import numpy as np
import pytest

from fedsim.data import Ratings, resolve
from fedsim.data.synthetic import PRESETS, generate


def digest(r: Ratings) -> str:
    h = hashlib.sha256()
    for a in (r.users, r.items, r.values, r.timestamps, r.categories):
        h.update(a.tobytes())
    return h.hexdigest()


def test_tiny_shape_and_invariants():
    r = generate("tiny")
    assert r.name == "synthetic:tiny"
    assert r.n_users == 30 and r.n_items == 40
    assert 200 <= len(r) <= 500
    assert set(np.unique(r.values).tolist()) <= {1.0, 2.0, 3.0, 4.0, 5.0}
    assert r.user_counts().min() >= PRESETS["tiny"]["min_per_user"]
    assert r.item_counts().min() >= 1  # every item rated
    assert r.categories.shape == (40, 19) and r.categories.any(axis=1).all()
    assert r.timestamps is not None and np.all(np.diff(r.users) >= 0)
    # no duplicated (user, item) pair
    key = r.users.astype(np.int64) * r.n_items + r.items
    assert len(np.unique(key)) == len(r)


def test_same_seed_same_bytes_and_seed_matters():
    a, b = generate("ml100k-like", seed=7), generate("ml100k-like", seed=7)
    assert digest(a) == digest(b)
    assert digest(generate("ml100k-like", seed=8)) != digest(a)
    assert digest(generate("tiny", seed=1)) == digest(generate("tiny", seed=1))


def test_ml100k_like_statistics():
    r = generate("ml100k-like")
    assert (r.n_users, r.n_items) == (943, 1682)
    assert abs(len(r) - 100_000) <= 100
    assert r.user_counts().min() >= 20
    mean, std = float(r.values.mean()), float(r.values.std())
    assert 3.3 < mean < 3.8 and 0.9 < std < 1.3  # MovieLens: 3.53 +- 1.13
    ic = np.sort(r.item_counts())[::-1]
    assert ic[:17].sum() > 0.1 * len(r)  # popularity is skewed (top 1% of items >10% of ratings)
    # multi-label genres
    assert r.categories.sum(axis=1).max() > 1


def test_ml1m_like_is_fast_and_sized():
    import time

    t = time.perf_counter()
    r = generate("ml1m-like")
    dt = time.perf_counter() - t
    assert (r.n_users, r.n_items) == (6040, 3706)
    assert abs(len(r) - 1_000_209) <= 1000
    assert dt < 15  # a few seconds on this machine (typically ~3 s)


def test_overrides_and_errors():
    r = generate("tiny", n_users=10, n_items=20, n_ratings=80, min_per_user=3)
    assert r.n_users == 10 and r.n_items == 20 and len(r) >= 80
    with pytest.raises(ValueError, match="exceeds"):
        generate("tiny", n_users=10, n_items=12, n_ratings=80)
    with pytest.raises(TypeError, match="unknown parameter"):
        generate("tiny", n_user=3)
    with pytest.raises(ValueError, match="unknown synthetic preset"):
        generate("huge")
    with pytest.raises(ValueError, match="below n_users"):
        generate("tiny", n_ratings=10)
    assert generate("synthetic:tiny").fingerprint() == resolve("tiny").fingerprint()
    assert resolve("tiny", seed=3).fingerprint() == generate("tiny", seed=3).fingerprint()
