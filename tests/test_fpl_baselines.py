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


def test_one_bpr_step_equals_cornacs_up_to_the_documented_regularisers():
    """fedsim's BPR-MF step (fedsim.math.bpr_central) against cornac's Cython BPR on one triple:
    one user, her item 0, item 1 the only possible negative, the same float64 starting point. With
    cornac's single lambda on every parameter (biases too) the two steps agree to rounding; with
    the paper's regularisers (fedsim's default: negative item lr/200, bias 0) only p_u and q_i do.
    cornac draws the negative from every item and skips a draw that hits a positive (here item 0,
    so some seeds make no step at all): those seeds are passed over."""
    from collections import OrderedDict

    from fedsim.math.bpr import BPRReg
    from fedsim.math.bpr_central import BPRModel, train_bpr

    lr, lam, d = 0.05, 0.01, 3
    rng = np.random.default_rng(0)
    P0, Q0, b0 = rng.normal(0, 0.1, (1, d)), rng.normal(0, 0.1, (2, d)), rng.normal(0, 0.1, 2)
    ds = cornac.data.Dataset.build([("u", "i0", 1.0)], fmt="UIR", global_uid_map=OrderedDict([("u", 0)]),
                                   global_iid_map=OrderedDict([("i0", 0), ("i1", 1)]), seed=0)
    stepped = 0
    for seed in range(12):
        m = cornac.models.BPR(k=d, max_iter=1, learning_rate=lr, lambda_reg=lam, use_bias=True, seed=seed,
                              init_params={"U": P0.copy(), "V": Q0.copy(), "Bi": b0.copy()})
        m.fit(ds)
        if np.array_equal(m.u_factors, P0):  # cornac drew item 0 as the negative and skipped the step
            continue
        stepped += 1
        for reg, same_neg in ((BPRReg(user=lam, pos_item=lam, neg_item=lam, bias=lam), True),
                              (BPRReg.paper(lr), False)):
            ours = train_bpr(np.array([0, 1]), np.array([0]), 1, 2, d, 1, lr, np.random.default_rng(seed),
                             reg=reg, catalogue=np.array([0, 1]),
                             model=BPRModel(P=P0.copy(), Q=Q0.copy(), b=b0.copy()))
            if same_neg:
                assert np.allclose(ours.P, m.u_factors, rtol=0, atol=1e-15)
                assert np.allclose(ours.Q, m.i_factors, rtol=0, atol=1e-15)
                assert np.allclose(ours.b, m.i_biases, rtol=0, atol=1e-15)
            else:  # lr/20 = 0.0025 on p_u and q_i (cornac's lambda is 0.01 here: rerun it with lr/20)
                m2 = cornac.models.BPR(k=d, max_iter=1, learning_rate=lr, lambda_reg=lr / 20, use_bias=True,
                                       seed=seed, init_params={"U": P0.copy(), "V": Q0.copy(), "Bi": b0.copy()})
                m2.fit(ds)
                assert np.allclose(ours.P, m2.u_factors, rtol=0, atol=1e-15)
                assert np.allclose(ours.Q[0], m2.i_factors[0], rtol=0, atol=1e-15)
                # q_j: cornac decays it by lr * lr/20, fedsim by lr * lr/200; b: cornac by lr * lr/20, fedsim not
                assert np.allclose(ours.Q[1] - m2.i_factors[1], lr * (lr / 20 - lr / 200) * Q0[1], rtol=1e-9, atol=0)
                assert np.allclose(ours.b - m2.i_biases, lr * (lr / 20) * b0, rtol=1e-9, atol=0)
    assert stepped >= 3


def test_cornac_methods_hand_the_splits_evaluators_full_score_matrices(monkeypatch):
    """The VAE and cornac's BPR are ranked by the split's own evaluators (the same users,
    candidates, N and tie rule as every fedsim method: tests/test_fpl_study.py checks those
    against the protocol computed independently), on users x items scores."""
    from fedsim.studies.fpl import data as fpl_data

    r = generate("ml100k-like", seed=8, n_users=30, n_items=60, n_ratings=900, min_per_user=25)
    sp = prepare(r, min_interactions=21)
    seen = []
    orig = fpl_data.Evaluator.__call__
    monkeypatch.setattr(fpl_data.Evaluator, "__call__",
                        lambda self, scores: seen.append((self, np.shape(scores))) or orig(self, scores))
    runs = {"BPR-MF (cornac)": lambda: lib.run_cornac_bpr(sp, 1, d=4)}
    if lib.torch_available():
        runs["VAE"] = lambda: lib.run_vae(sp, "20-5-20", [1])
    for method, fn in runs.items():
        seen.clear()
        fn()
        assert [(ev.name, shape) for ev, shape in seen] == [("val", (sp.n_users, sp.n_items)),
                                                               ("test", (sp.n_users, sp.n_items))]
        assert all(ev is sp.evaluators[ev.name] for ev, _ in seen), method


def test_cornac_warnings_reach_the_user_but_its_refit_notice(monkeypatch):
    """The adapters hide only cornac's "Model is already fitted" (each fit continues the last one,
    on purpose); every other warning of cornac or PyTorch reaches the caller. They ignored every
    warning: a DeprecationWarning of a new cornac and its notice that it dropped duplicated
    (user, item) pairs of the training part were lost."""
    import warnings

    r = generate("ml100k-like", seed=5, n_users=30, n_items=60, n_ratings=900, min_per_user=25)
    sp = prepare(r, min_interactions=21)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        lib.run_cornac_bpr(sp, 2, d=4, lr=0.05, seed=1)  # fits twice: the refit notice, hidden
        if lib.torch_available():
            lib.run_vae(sp, "20-5-20", [1, 2], seed=3)
    assert [str(w.message) for w in seen] == []

    fit = cornac.models.BPR.fit

    def deprecated_fit(self, *a, **k):
        warnings.warn("BPR.fit's next signature", DeprecationWarning, stacklevel=2)
        return fit(self, *a, **k)

    monkeypatch.setattr(cornac.models.BPR, "fit", deprecated_fit)
    with pytest.warns(DeprecationWarning, match="BPR.fit's next signature"):
        lib.run_cornac_bpr(sp, 1, d=4, lr=0.05, seed=1)

    train = Ratings([0, 0, 1], [0, 0, 1], [1, 1, 1], n_users=2, n_items=2)  # (0, 0) twice
    dup = ImplicitSplit("dup", "validation", 2, 2, train, np.arange(2), {}, None)
    with pytest.warns(UserWarning, match="1 duplicated observations are removed"):
        ds = lib.cornac_dataset(dup)
    assert ds.matrix.toarray().tolist() == [[1, 0], [0, 1]]
