"""Checks against the real datasets in the shared folder (skipped when absent)."""

import os
from pathlib import Path

import numpy as np
import pytest

from fedsim.data import kfold_copies, load_foursquare, load_movielens, resolve, temporal_holdout


def shared_data() -> Path | None:
    env = os.environ.get("FEDSIM_SHARED_DATA")
    candidates = [Path(env)] if env else []
    candidates.append(Path(__file__).resolve().parents[1].parent / "shared" / "data")
    for c in candidates:
        if c.is_dir():
            return c
    return None


SHARED = shared_data()
ML100K = SHARED / "ml-100k" if SHARED else None
FSQ = SHARED / "foursquare-fedbpr-cities" if SHARED else None

needs_ml100k = pytest.mark.skipif(ML100K is None or not (ML100K / "u.data").is_file(), reason="shared ML-100K absent")
needs_fsq = pytest.mark.skipif(FSQ is None or not FSQ.is_dir(), reason="shared Foursquare files absent")


@needs_ml100k
def test_ml100k_real_counts():
    r = load_movielens(ML100K)
    assert len(r) == 100_000
    assert r.n_users == 943 and r.n_items == 1682
    assert r.categories.shape == (1682, 19) and len(r.category_names) == 19
    assert r.category_names[0] == "unknown" and r.category_names[-1] == "Western"
    assert set(np.unique(r.values).tolist()) == {1, 2, 3, 4, 5}
    assert r.user_ids.tolist() == list(range(1, 944)) and r.item_ids.tolist() == list(range(1, 1683))
    assert r.user_counts().min() == 20  # every ML-100K user has at least 20 ratings
    assert r.info["items_without_category"] == 0
    assert load_movielens(ML100K, item_space="id_range").n_items == 1682
    assert resolve(str(ML100K)).fingerprint() == r.fingerprint()


@needs_ml100k
def test_ml100k_fedrec_folds_have_80000_training_ratings():
    r = load_movielens(ML100K)
    folds = kfold_copies(r, 5, seed=0)
    assert [len(tr) for tr, _ in folds] == [80_000] * 5
    assert [len(te) for _, te in folds] == [20_000] * 5


@needs_ml100k
def test_ml100k_temporal_split():
    r = load_movielens(ML100K).binarize()
    train, test = temporal_holdout(r, 0.2)
    counts = r.user_counts()
    assert len(test) == int(np.floor(0.2 * counts + 1e-9).sum())
    assert len(train) + len(test) == 100_000


CHECKINS = {"Bologna": 8093, "Florence": 8292, "Milan": 35398, "Rome": 23214, "Turin": 8616, "Venice": 6003}


@needs_fsq
@pytest.mark.parametrize("city", ["Bologna", "Venice"])
def test_foursquare_real_city(city):
    f = FSQ / f"{city}.tsv"
    if not f.is_file():
        pytest.skip(f"{f} absent")
    r = load_foursquare(f, min_interactions=0)
    assert len(r) == CHECKINS[city]  # one row per (user, venue): no duplicates
    kept = load_foursquare(f)
    assert kept.user_counts().min() >= 20
    assert kept.categories is not None and kept.categories.sum(axis=1).max() == 1
