"""The FPL study's baselines: the kNN runs (fedsim.math.knn) and the cornac adapters (the
baselines extra): index mapping, why cornac's kNN is not the paper's, Top-Pop against cornac's
MostPop, BPR and VAE runs."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.data import Ratings, generate
from fedsim.studies.fpl import ImplicitSplit, prepare, run_toppop

cornac = pytest.importorskip("cornac", reason="cornac is the baselines extra")

from fedsim.studies.fpl import baselines as lib  # noqa: E402

# 4 users x 6 items; item 5 has no training interaction (outside the catalogue)
TRAIN = {0: [0, 1, 2], 1: [0, 1], 2: [1, 3], 3: [2, 3, 4]}


def hand_split() -> ImplicitSplit:
    us = [u for u, its in TRAIN.items() for _ in its]
    its = [i for _, items in TRAIN.items() for i in items]
    train = Ratings(us, its, np.ones(len(us)), n_users=4, n_items=6)
    return ImplicitSplit("hand", "validation", 4, 6, train, np.arange(5), {}, None)


def test_dataset_keeps_fedsim_users_and_maps_catalogue_items():
    sp = hand_split()
    ds = lib.cornac_dataset(sp)
    m = ds.matrix.toarray()
    assert m.shape == (4, 5)
    for u, its in TRAIN.items():
        assert sorted(np.flatnonzero(m[u]).tolist()) == its  # catalogue = 0..4: cornac j = item j
    # a catalogue with gaps: cornac item j is catalogue[j]
    train = Ratings([0, 0, 1], [2, 7, 7], [1, 1, 1], n_users=2, n_items=9)
    sp2 = ImplicitSplit("gap", "validation", 2, 9, train, np.array([2, 7]), {}, None)
    m2 = lib.cornac_dataset(sp2).matrix.toarray()
    assert m2.tolist() == [[1, 1], [0, 1]]


def test_cornac_cosine_is_over_co_rated_items_only():
    """Why the study does not use cornac's kNN: its cosine of two 0/1 users is 1 whenever they
    share an item (the norms run over the shared items only), whatever else they visited; the
    paper's cosine vector similarity of users 0 and 2 here is 1 / sqrt(6)."""
    sp = hand_split()
    model = cornac.models.UserKNN(k=3, similarity="cosine", num_threads=1, verbose=False).fit(lib.cornac_dataset(sp))
    sim = model.sim_mat.toarray()
    assert sim[0, 2] == pytest.approx(1.0) and sim[0, 3] == pytest.approx(1.0) and sim[1, 3] == 0.0


def test_knn_runs_evaluate_every_k_from_one_similarity():
    from fedsim.math.knn import knn_scores

    r = generate("ml100k-like", seed=2, n_users=40, n_items=60, n_ratings=1200, min_per_user=25)
    sp = prepare(r, min_interactions=21)
    for kind in ("User-kNN", "Item-kNN"):
        rec = lib.run_knn(sp, kind, [10, 1, 3])
        assert [c["k"] for c in rec.curve] == [1, 3, 10] and [c["epoch"] for c in rec.curve] == [1, 2, 3]
        dense = np.zeros((sp.n_users, sp.catalogue.size))
        col = {int(i): j for j, i in enumerate(sp.catalogue)}
        for u, i in zip(sp.train.users.tolist(), sp.train.items.tolist()):
            dense[u, col[i]] = 1
        (_, s), = list(knn_scores(dense, lib.KNN_KINDS[kind], [3]))
        full = np.zeros((sp.n_users, sp.n_items))
        full[:, sp.catalogue] = s
        assert rec.curve[1]["test_hits"] == sp.evaluate(full)["test"]["hits"]


def test_toppop_equals_cornac_mostpop():
    r = generate("ml100k-like", seed=4, n_users=30, n_items=60, n_ratings=900, min_per_user=25)
    sp = prepare(r, min_interactions=21)
    model = cornac.models.MostPop().fit(lib.cornac_dataset(sp))
    ours = run_toppop(sp).curve[0]
    theirs = sp.evaluate(lib.model_scores(sp, model))
    counts = np.bincount(sp.train.items, minlength=sp.n_items)
    assert np.array_equal(lib.model_scores(sp, model)[0, sp.catalogue], counts[sp.catalogue])
    assert ours["test_p"] == theirs["test"]["p"] and ours["test_hits"] == theirs["test"]["hits"]


def test_cornac_bpr_runs_per_epoch_and_is_seeded():
    r = generate("ml100k-like", seed=5, n_users=30, n_items=60, n_ratings=900, min_per_user=25)
    sp = prepare(r, min_interactions=21)
    a = lib.run_cornac_bpr(sp, 3, d=4, lr=0.05, seed=1)
    b = lib.run_cornac_bpr(sp, 3, d=4, lr=0.05, seed=1)
    assert [c["epoch"] for c in a.curve] == [1, 2, 3]
    assert [c["test_hits"] for c in a.curve] == [c["test_hits"] for c in b.curve]
    assert a.params["reg"] == pytest.approx(0.05 / 20)


def test_vae_budgets_are_checkpoints_of_one_seeded_run():
    pytest.importorskip("torch", reason="the VAE needs PyTorch (baselines extra)")
    r = generate("ml100k-like", seed=6, n_users=30, n_items=60, n_ratings=900, min_per_user=25)
    sp = prepare(r, min_interactions=21)
    a = lib.run_vae(sp, "20-5-20", [2, 1], seed=3)
    b = lib.run_vae(sp, "20-5-20", [1, 2], seed=3)
    assert [c["epoch"] for c in a.curve] == [1, 2] and a.params["budgets"] == [1, 2]
    assert [c["test_hits"] for c in a.curve] == [c["test_hits"] for c in b.curve]
    with pytest.raises(ValueError, match="H-Z-H"):
        lib.parse_topology("600-200-300")
