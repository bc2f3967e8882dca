"""Synthetic presets with the shapes of the papers' datasets that cannot be downloaded here."""

import numpy as np
import pytest

from fedsim.data import generate
from fedsim.data.synthetic import PRESETS
from fedsim.studies.datasets import PAPER_SHAPES, paper_dataset


@pytest.fixture(scope="module")
def ml1m():
    return generate("ml1m-like"), generate("ml1m-like", item_space="id_range")


def test_ml1m_like_spreads_3706_rated_ids_over_1_to_3952(ml1m):
    obs, full = ml1m
    assert (obs.n_users, obs.n_items, len(obs.users)) == (6040, 3706, 1_000_209)
    assert full.n_items == 3952 and len(full.users) == 1_000_209
    ids = obs.item_ids
    assert len(np.unique(ids)) == 3706 and ids.min() >= 1 and ids.max() <= 3952 and ids.max() > 3706
    # the same ratings in both index spaces: index i of the observed space is id ids[i]
    np.testing.assert_array_equal(full.items, ids[obs.items] - 1)
    np.testing.assert_array_equal(full.values, obs.values)
    assert len(np.unique(full.items)) == 3706  # 246 ids of the range are never rated
    assert paper_dataset(obs) == paper_dataset(full) == "ML1M"
    counts = np.bincount(obs.users, minlength=obs.n_users)
    assert counts.min() >= 20  # ML-1M keeps users with at least 20 ratings


def test_rating_scale_and_shapes_of_the_other_presets():
    a = generate("anime-like", n_users=400, n_items=300, n_ratings=6000)
    v = np.unique(a.values)
    assert v.min() >= 1 and v.max() <= 10 and len(v) > 6
    assert set(np.unique(generate("tiny").values)) <= {1, 2, 3, 4, 5}
    for preset, name in (("nf5k5k-like", "NF5K5K"), ("anime-like", "Anime")):
        p = PRESETS[preset]
        n, m, _, total = PAPER_SHAPES[name]
        assert (p["n_users"], p["n_items"]) == (n, m)
        assert total is None or p["n_ratings"] == total
