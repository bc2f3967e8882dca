"""Centralized BPR-MF (fedsim.math.bpr_central) and the Top-Pop / Random scorers."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.math.bpr import BPRReg, bpr_triple_deltas
from fedsim.math.bpr_central import _sgd_epoch, csr_from_pairs, sample_epoch_triples, train_bpr
from fedsim.math.popularity import (
    random_scores,
    random_user_scores,
    toppop_item_scores,
    toppop_scores,
)


def toy_csr():
    users = np.array([0, 0, 1, 2, 2, 2, 1])
    items = np.array([3, 1, 0, 4, 2, 1, 5])
    return csr_from_pairs(users, items, 4)  # user 3 has no interaction


def test_csr_from_pairs():
    indptr, indices = toy_csr()
    assert indptr.tolist() == [0, 2, 4, 7, 7]
    assert indices.tolist() == [1, 3, 0, 5, 1, 2, 4]


def test_epoch_sampling_excludes_positives_and_covers_x_plus():
    indptr, indices = toy_csr()
    users, pos, neg = sample_epoch_triples(indptr, indices, 7, np.random.default_rng(0), n=5000)
    assert users.shape == (5000,)
    sets = [set(indices[indptr[u]:indptr[u + 1]].tolist()) for u in range(4)]
    assert all(p in sets[u] for u, p in zip(users.tolist(), pos.tolist()))
    assert all(n not in sets[u] and 0 <= n < 7 for u, n in zip(users.tolist(), neg.tolist()))
    # users in proportion to their interactions: 2/7, 2/7, 3/7
    np.testing.assert_allclose(np.bincount(users, minlength=4) / 5000, [2 / 7, 2 / 7, 3 / 7, 0], atol=0.03)
    # negatives of user 2 uniform over {0, 3, 5, 6}
    c = np.bincount(neg[users == 2], minlength=7)
    assert c[[1, 2, 4]].sum() == 0 and c[[0, 3, 5, 6]].min() > 0.2 * c.sum()
    users, _, _ = sample_epoch_triples(indptr, indices, 7, np.random.default_rng(0))
    assert users.shape == (7,)  # X+ by default
    # a catalogue restricts the negatives
    _, _, neg = sample_epoch_triples(indptr, indices, 7, np.random.default_rng(1), n=500,
                                     catalogue=np.arange(6))
    assert neg.max() <= 5


def test_sgd_epoch_matches_triple_deltas():
    rng = np.random.default_rng(3)
    P, Q, b = rng.normal(size=(2, 3)), rng.normal(size=(4, 3)), rng.normal(size=4)
    users, pos, neg = np.array([0, 1, 0]), np.array([1, 2, 1]), np.array([3, 1, 0])
    lr = 0.05
    reg = BPRReg(user=0.01, pos_item=0.02, neg_item=0.003, bias=0.004)
    P1, Q1, b1 = P.copy(), Q.copy(), b.copy()
    _sgd_epoch(P1, Q1, b1, users, pos, neg, lr, reg)
    for u, i, j in zip(users, pos, neg):
        dp, dqi, dqj, dbi, dbj = bpr_triple_deltas(P[u], Q[i], Q[j], b[i], b[j], reg)
        P[u] += lr * dp
        Q[i] += lr * dqi
        Q[j] += lr * dqj
        b[i] += lr * dbi
        b[j] += lr * dbj
    np.testing.assert_allclose(P1, P, atol=1e-14)
    np.testing.assert_allclose(Q1, Q, atol=1e-14)
    np.testing.assert_allclose(b1, b, atol=1e-14)


def test_train_bpr_learns_clusters_and_callback():
    rng = np.random.default_rng(0)
    users, items = [], []
    for u in range(40):
        block = np.arange(0, 15) if u < 20 else np.arange(15, 30)
        for i in rng.choice(block, 8, replace=False):
            users.append(u)
            items.append(i)
    indptr, indices = csr_from_pairs(np.array(users), np.array(items), 40)
    seen = []

    def cb(epoch, model):
        seen.append(epoch)
        return epoch >= 30 or None

    m = train_bpr(indptr, indices, 40, 30, 4, 100, 0.1, np.random.default_rng(1), eval_callback=cb,
                  eval_every=5)
    assert seen == [5, 10, 15, 20, 25, 30] and m.epochs_done == 30
    assert m.history[-1] is True
    S = m.scores()
    S[np.repeat(np.arange(40), np.diff(indptr)), indices] = -np.inf
    top = S.argmax(axis=1)
    ok = np.where(np.arange(40) < 20, top < 15, top >= 15)
    assert ok.mean() >= 0.9


def test_train_bpr_is_reproducible():
    indptr, indices = toy_csr()
    a = train_bpr(indptr, indices, 4, 7, 2, 3, 0.05, np.random.default_rng(5))
    c = train_bpr(indptr, indices, 4, 7, 2, 3, 0.05, np.random.default_rng(5))
    np.testing.assert_array_equal(a.P, c.P)
    np.testing.assert_array_equal(a.b, c.b)
    with pytest.raises(ValueError):
        train_bpr(indptr, indices, 5, 7, 2, 1, 0.05, np.random.default_rng(5))


def test_toppop_and_random():
    indptr, indices = toy_csr()
    s = toppop_item_scores(indptr, indices, 7)
    assert np.ceil(s - 1e-9).astype(int).tolist() == [1, 2, 1, 1, 1, 1, 0]
    assert np.argsort(-s, kind="stable").tolist()[:3] == [1, 0, 2]  # ties by ascending id
    assert toppop_item_scores(indices, n_items=7, tie_break=False).tolist() == [1, 2, 1, 1, 1, 1, 0]
    S = toppop_scores(s, 4)
    assert S.shape == (4, 7) and not S.flags.writeable
    R = random_scores(3, 5, np.random.default_rng(0))
    np.testing.assert_array_equal(R, np.random.default_rng(0).random((3, 5)))
    assert random_user_scores(5, np.random.default_rng(0)).shape == (5,)


def test_negative_catalogue_ids_are_refused():
    # catalogue [-1, 0] used to give the negative -1 (the last item's row) in every triple
    indptr, indices = np.array([0, 1]), np.array([0])
    with pytest.raises(ValueError, match=r"catalogue item id -1 is negative"):
        sample_epoch_triples(indptr, indices, 3, np.random.default_rng(0), catalogue=np.array([-1, 0]), n=3)
    with pytest.raises(ValueError, match=r"catalogue item id -1 is negative"):
        train_bpr(indptr, indices, 1, 3, 2, 1, 0.1, np.random.default_rng(0), catalogue=np.array([-1, 0]))


def test_negatives_exclude_positives_when_the_csr_rows_are_not_sorted():
    # a CSR whose rows are not sorted is still the training matrix; the negative tables assumed
    # sorted rows: indices [4, 1, 2] gave the negatives {3, 4, 5} (4 is a positive, 0 never
    # drawn), and [1, 2, 1] gave {0, 4, 5} (3 never drawn)
    indptr = np.array([0, 3, 5])
    for row0, want0 in (([4, 1, 2], {0, 3, 5}), ([1, 2, 1], {0, 3, 4, 5})):
        indices = np.array(row0 + [5, 0])
        users, pos, neg = sample_epoch_triples(indptr, indices, 6, np.random.default_rng(0), n=3000)
        assert set(neg[users == 0].tolist()) == want0
        assert set(neg[users == 1].tolist()) == {1, 2, 3, 4}
        # positives are still drawn from the interactions in the CSR order given
        assert set(pos[users == 0].tolist()) == set(row0)
        srt = np.concatenate([np.sort(indices[:3]), np.sort(indices[3:])])
        u2, p2, n2 = sample_epoch_triples(indptr, srt, 6, np.random.default_rng(0), n=3000)
        assert np.array_equal(u2, users) and np.array_equal(n2, neg)  # the same tables


def test_toppop_refuses_item_ids_outside_n_items():
    # item 5 of n_items = 3 used to give a length-6 score row without tie-breaking (one score per
    # item the caller does not have) and a bare broadcasting error with it
    for tie in (False, True):
        with pytest.raises(ValueError, match=r"item id 5 outside \[0, 3\)"):
            toppop_item_scores(np.array([0, 5, 5]), n_items=3, tie_break=tie)
        with pytest.raises(ValueError, match=r"item id -1 outside \[0, 3\)"):
            toppop_item_scores(np.array([0, -1]), n_items=3, tie_break=tie)
    # ids 0 and n_items - 1 are fine
    assert toppop_item_scores(np.array([0, 2, 2]), n_items=3, tie_break=False).tolist() == [1, 0, 2]


def test_train_bpr_refuses_training_items_outside_the_catalogue():
    """Without a catalogue, a training item -1 trained item n_items - 1 (NumPy's negative
    indexing) silently and n_items failed with a bare IndexError; both are a ValueError naming
    the item now, before any draw."""
    for bad in (-1, 5):
        rng = np.random.default_rng(0)
        with pytest.raises(ValueError, match=f"training item {bad} is outside"):
            train_bpr(np.array([0, 2, 3]), np.array([0, bad, 1]), 2, 5, 2, 1, 0.1, rng, init_std=0.1)
    m = train_bpr(np.array([0, 2, 3]), np.array([0, 4, 1]), 2, 5, 2, 1, 0.1, np.random.default_rng(0))
    assert m.epochs_done == 1 and np.isfinite(m.Q).all()


def test_train_bpr_stops_after_the_epoch_its_parameters_are_not_finite():
    # it ran every epoch on NaN parameters (NumPy's overflow warnings printed) and said nothing:
    # a caller saw only NaN scores
    import warnings

    from fedsim.math.bpr import BPRReg

    rng = np.random.default_rng(0)
    indptr, indices = csr_from_pairs(np.repeat(np.arange(6), 3), rng.integers(0, 8, 18), 6)
    # epoch by epoch on one generator: the first epoch after which a parameter is not finite
    step = None
    with np.errstate(over="ignore", invalid="ignore"):
        gen = np.random.default_rng(1)
        m1 = train_bpr(indptr, indices, 6, 8, 3, 0, 1e3, gen)
        for e in range(1, 21):
            u, p, n = sample_epoch_triples(indptr, indices, 8, gen)
            _sgd_epoch(m1.P, m1.Q, m1.b, u, p, n, 1e3, BPRReg.paper(1e3))
            if not (np.isfinite(m1.P).all() and np.isfinite(m1.Q).all() and np.isfinite(m1.b).all()):
                step = e
                break
    assert step == 10
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no bare overflow warning
        m = train_bpr(indptr, indices, 6, 8, 3, 20, 1e3, np.random.default_rng(1),
                      eval_callback=lambda e, _: seen.append(e), eval_every=3)
    assert m.diverged_at == 10 == m.epochs_done and seen == [3, 6, 9]  # no evaluation of the NaN model
    assert not np.isfinite(m.P).all() or not np.isfinite(m.Q).all() or not np.isfinite(m.b).all()
    again = train_bpr(indptr, indices, 6, 8, 3, 5, 1e3, np.random.default_rng(1), model=m)
    assert again is m and m.epochs_done == 10  # a diverged model is not trained further
    ok = train_bpr(indptr, indices, 6, 8, 3, 9, 1e3, np.random.default_rng(1))
    assert ok.diverged_at is None and ok.epochs_done == 9 and np.isfinite(ok.Q).all()
