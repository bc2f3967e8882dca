"""BPR-MF math and the FPL client/server round (fedsim.math.bpr)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsim.math.bpr import (
    BPRReg,
    FPLUpdate,
    _loop_reference,
    bpr_scores,
    bpr_triple_deltas,
    bpr_user_scores,
    concat_updates,
    fpl_client_round,
    init_item_params,
    init_user_factor,
    make_triple_sampler,
    merge_update,
    sample_triples,
    server_apply_sum,
    sigmoid_neg,
)

LR = 0.1


def small_model(n_items=12, d=3, seed=0):
    rng = np.random.default_rng(seed)
    Q, b = init_item_params(n_items, d, rng)
    p = init_user_factor(d, rng)
    return Q, b, p


# ------------------------------------------------------------------ constants and one triple


def test_paper_regularisation_constants():
    reg = BPRReg.paper(0.05)
    assert reg.user == pytest.approx(0.05 / 20)
    assert reg.pos_item == pytest.approx(0.0025)
    assert reg.neg_item == pytest.approx(0.05 / 200)
    assert reg.neg_item == pytest.approx(0.00025)
    assert reg.bias == 0.0


def test_single_triple_by_hand():
    # p = (0.1, 0.2), q_i = (0.3, -0.1), q_j = (-0.2, 0.4), b_i = 0.05, b_j = -0.05, lr = 0.1
    # x_ui = 0.05 + 0.03 - 0.02 = 0.06 ; x_uj = -0.05 - 0.02 + 0.08 = 0.01 ; x_uij = 0.05
    # g = 1 / (1 + e^0.05) = 0.48750260351578967
    # lam_user = lam_pos = 0.005, lam_neg = 0.0005, lam_bias = 0
    p = np.array([0.1, 0.2])
    qi = np.array([0.3, -0.1])
    qj = np.array([-0.2, 0.4])
    g = 0.48750260351578967
    assert sigmoid_neg(0.05) == pytest.approx(g, abs=1e-15)
    dp, dqi, dqj, dbi, dbj = bpr_triple_deltas(p, qi, qj, 0.05, -0.05, BPRReg.paper(LR))
    # dp = g (q_i - q_j) - 0.005 p = g (0.5, -0.5) - (0.0005, 0.001)
    np.testing.assert_allclose(dp, [0.24325130175789484, -0.24475130175789484], atol=1e-15)
    # dq_i = g p - 0.005 q_i = (0.048750260 - 0.0015, 0.097500521 + 0.0005)
    np.testing.assert_allclose(dqi, [0.047250260351578967, 0.09800052070315793], atol=1e-15)
    # dq_j = -g p - 0.0005 q_j = (-0.048750260 + 0.0001, -0.097500521 - 0.0002)
    np.testing.assert_allclose(dqj, [-0.048650260351578967, -0.09770052070315793], atol=1e-15)
    assert dbi == pytest.approx(g, abs=1e-15)
    assert dbj == pytest.approx(-g, abs=1e-15)


def test_single_triple_round_matches_hand_numbers():
    """T = 1 through the client round: new p_u = p + lr dp, message = (dq_j, db_j) [+ (dq_i, db_i)]."""
    Q = np.array([[0.3, -0.1], [-0.2, 0.4]])
    b = np.array([0.05, -0.05])
    p = np.array([0.1, 0.2])
    sampler = make_triple_sampler(np.array([0]), n_items=2)  # i = 0 and j = 1 necessarily
    new_p, up = fpl_client_round(p, Q, b, sampler, 1, LR, 1.0, np.random.default_rng(3))
    np.testing.assert_allclose(new_p, p + LR * np.array([0.24325130175789484, -0.24475130175789484]))
    np.testing.assert_array_equal(p, [0.1, 0.2])  # untouched
    assert up.items.tolist() == [1, 0]
    assert up.is_positive.tolist() == [False, True]
    np.testing.assert_allclose(up.deltas[0], [-0.048650260351578967, -0.09770052070315793], atol=1e-15)
    np.testing.assert_allclose(up.deltas[1], [0.047250260351578967, 0.09800052070315793], atol=1e-15)
    np.testing.assert_allclose(up.bias_deltas, [-0.48750260351578967, 0.48750260351578967])
    # server, Eq. 7: Q += lr * delta
    Q2, b2 = Q.copy(), b.copy()
    server_apply_sum(Q2, b2, up.items, up.deltas, up.bias_deltas, LR)
    np.testing.assert_allclose(Q2[0], Q[0] + LR * up.deltas[1])
    np.testing.assert_allclose(b2[1], b[1] - LR * 0.48750260351578967)


def test_scores():
    Q, b, p = small_model()
    P = np.stack([p, 2 * p])
    S = bpr_scores(P, Q, b)
    assert S.shape == (2, Q.shape[0])
    np.testing.assert_allclose(S[1], bpr_user_scores(2 * p, Q, b))
    assert S[0, 4] == pytest.approx(b[4] + p @ Q[4])


def test_sigmoid_extremes():
    assert sigmoid_neg(1e4) == 0.0
    assert sigmoid_neg(-1e4) == 1.0
    assert sigmoid_neg(0.0) == 0.5


# ------------------------------------------------------------------ sampling


def test_negative_rank_mapping_and_catalogue():
    s = make_triple_sampler(np.array([3, 1, 3]), n_items=6)
    assert s.n_negatives == 4
    assert s.negatives_from_ranks(np.arange(4)).tolist() == [0, 2, 4, 5]
    cat = np.array([10, 2, 7, 5, 20])
    s = make_triple_sampler(np.array([7, 20]), n_items=0, catalogue=cat)
    assert s.n_negatives == 3
    assert s.negatives_from_ranks(np.arange(3)).tolist() == [2, 5, 10]
    with pytest.raises(ValueError):
        make_triple_sampler(np.array([3]), n_items=0, catalogue=cat)
    with pytest.raises(ValueError):
        make_triple_sampler(np.array([], dtype=int), n_items=5)
    full = make_triple_sampler(np.arange(4), n_items=4)
    with pytest.raises(ValueError):
        sample_triples(full, 1, np.random.default_rng(0))


def test_draw_order_replay():
    """One call rng.random((3, T)): row 0 positives, row 1 negatives, row 2 Bernoulli."""
    positives = np.array([5, 2, 9, 2])
    n_items, T, pi = 12, 7, 0.4
    Q, b, p = small_model(n_items)
    _, up = fpl_client_round(p, Q, b, make_triple_sampler(positives, n_items), T, LR, pi,
                             np.random.default_rng(42))
    U = np.random.default_rng(42).random((3, T))
    pos = positives[np.minimum((U[0] * 4).astype(int), 3)]
    pool = np.setdiff1d(np.arange(n_items), positives)
    neg = pool[np.minimum((U[1] * pool.size).astype(int), pool.size - 1)]
    send = U[2] < pi
    assert up.items[:T].tolist() == neg.tolist()
    assert up.items[T:].tolist() == pos[send].tolist()
    assert up.triple[T:].tolist() == np.flatnonzero(send).tolist()
    assert up.n_vectors == T + int(send.sum())


def test_negative_sampling_is_uniform_over_catalogue_minus_positives():
    positives = np.array([0, 3, 4, 8])
    s = make_triple_sampler(positives, n_items=10)
    pos, neg, _ = sample_triples(s, 60_000, np.random.default_rng(7))
    assert not np.isin(neg, positives).any()
    counts = np.bincount(neg, minlength=10)[[1, 2, 5, 6, 7, 9]]
    expected = 60_000 / 6
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 25  # 5 dof, p ~ 1e-4
    pc = np.bincount(pos, minlength=10)[positives]
    assert ((pc - 15_000) ** 2 / 15_000).sum() < 20


# ------------------------------------------------------------------ pi and the message


@pytest.mark.parametrize("pi", [0.0, 1.0])
def test_pi_zero_never_sends_a_positive_pi_one_always(pi):
    n_items = 30
    positives = np.array([1, 4, 7, 11, 20])
    Q, b, p = small_model(n_items, d=4)
    s = make_triple_sampler(positives, n_items)
    rng = np.random.default_rng(11)
    for _ in range(50):
        p, up = fpl_client_round(p, Q, b, s, 9, LR, pi, rng)
        sent_items = set(up.items.tolist())
        assert up.n_triples == 9
        if pi == 0.0:
            assert up.n_vectors == 9
            assert not up.is_positive.any()
            assert not sent_items & set(positives.tolist())
        else:
            assert up.n_vectors == 18
            assert up.is_positive.sum() == 9
            assert set(up.items[up.is_positive].tolist()) <= set(positives.tolist())
        assert not set(up.items[~up.is_positive].tolist()) & set(positives.tolist())


def test_positive_send_rate_matches_pi():
    Q, b, p = small_model(50, d=2)
    s = make_triple_sampler(np.arange(10), 50)
    _, up = fpl_client_round(p, Q, b, s, 20_000, 0.01, 0.3, np.random.default_rng(5))
    assert up.n_positive / 20_000 == pytest.approx(0.3, abs=0.015)


def test_triples_do_not_depend_on_pi():
    Q, b, p = small_model(40)
    s = make_triple_sampler(np.array([1, 2, 3]), 40)
    p0, u0 = fpl_client_round(p, Q, b, s, 15, LR, 0.0, np.random.default_rng(9))
    p1, u1 = fpl_client_round(p, Q, b, s, 15, LR, 1.0, np.random.default_rng(9))
    np.testing.assert_array_equal(p0, p1)  # pi only filters the message
    np.testing.assert_array_equal(u0.items, u1.items[:15])
    np.testing.assert_array_equal(u0.deltas, u1.deltas[:15])


def test_fast_loop_equals_reference_loop():
    n_items, T = 25, 40
    Q, b, p = small_model(n_items, d=5, seed=3)
    positives = np.array([2, 5, 6, 9, 17])
    s = make_triple_sampler(positives, n_items)
    reg = BPRReg.paper(LR)
    for user_update in ("per_triple", "end_of_round"):
        new_p, up = fpl_client_round(p, Q, b, s, T, LR, 1.0, np.random.default_rng(1),
                                     user_update=user_update)
        pos, neg, _ = sample_triples(s, T, np.random.default_rng(1))
        ref_p, d_pos, d_neg, bd_pos, bd_neg = _loop_reference(
            p, Q, b, pos, neg, LR, reg, False, user_update == "per_triple")
        np.testing.assert_allclose(new_p, ref_p, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(up.deltas[:T], d_neg, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(up.deltas[T:], d_pos, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(up.bias_deltas[:T], bd_neg, rtol=1e-12)
        np.testing.assert_allclose(up.bias_deltas[T:], bd_pos, rtol=1e-12)


def test_per_triple_user_update_sequence_by_hand():
    """p_u moves after every triple; item parameters stay those received."""
    n_items, T = 8, 5
    Q, b, p = small_model(n_items, d=3, seed=4)
    s = make_triple_sampler(np.array([0, 1]), n_items)
    reg = BPRReg.paper(LR)
    new_p, up = fpl_client_round(p, Q, b, s, T, LR, 1.0, np.random.default_rng(2))
    pos, neg, _ = sample_triples(s, T, np.random.default_rng(2))
    q = p.copy()
    for t in range(T):
        dp, dqi, dqj, dbi, dbj = bpr_triple_deltas(q, Q[pos[t]], Q[neg[t]], b[pos[t]], b[neg[t]], reg)
        np.testing.assert_allclose(up.deltas[t], dqj, atol=1e-15)
        np.testing.assert_allclose(up.deltas[T + t], dqi, atol=1e-15)
        q = q + LR * dp
    np.testing.assert_allclose(new_p, q, atol=1e-15)


def test_local_item_updates_option():
    n_items = 6
    Q, b, p = small_model(n_items, d=3, seed=8)
    s = make_triple_sampler(np.array([0]), n_items)  # the positive repeats every triple
    # T = 1: identical to the default
    a = fpl_client_round(p, Q, b, s, 1, LR, 1.0, np.random.default_rng(0))
    c = fpl_client_round(p, Q, b, s, 1, LR, 1.0, np.random.default_rng(0), local_item_updates=True)
    np.testing.assert_allclose(a[0], c[0])
    np.testing.assert_allclose(a[1].deltas, c[1].deltas)
    # T = 2: the second triple sees the locally stepped q_0
    _, up = fpl_client_round(p, Q, b, s, 2, LR, 1.0, np.random.default_rng(0), local_item_updates=True)
    pos, neg, _ = sample_triples(s, 2, np.random.default_rng(0))
    reg = BPRReg.paper(LR)
    dp, dqi, dqj, dbi, dbj = bpr_triple_deltas(p, Q[0], Q[neg[0]], b[0], b[neg[0]], reg)
    Ql, bl = Q.copy(), b.copy()
    Ql[0] += LR * dqi
    Ql[neg[0]] += LR * dqj
    bl[0] += LR * dbi
    bl[neg[0]] += LR * dbj
    _, dqi2, dqj2, _, _ = bpr_triple_deltas(p + LR * dp, Ql[0], Ql[neg[1]], bl[0], bl[neg[1]], reg)
    np.testing.assert_allclose(up.deltas[3], dqi2, atol=1e-15)
    np.testing.assert_allclose(up.deltas[1], dqj2, atol=1e-15)
    np.testing.assert_array_equal(Q, small_model(n_items, d=3, seed=8)[0])  # Q untouched


# ------------------------------------------------------------------ merge and server


def _toy_update():
    return FPLUpdate(
        items=np.array([4, 2, 4, 7, 7, 4], dtype=np.int32),
        deltas=np.arange(12, dtype=float).reshape(6, 2),
        bias_deltas=np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        is_positive=np.array([False, False, False, True, True, False]),
        n_triples=4,
        triple=np.array([0, 1, 2, 0, 2, 3], dtype=np.int32),
    )


def test_merge_sum_and_last():
    up = _toy_update()
    m = merge_update(up, "sum")
    assert m.items.tolist() == [2, 4, 7]
    np.testing.assert_allclose(m.deltas, [[2, 3], [0 + 4 + 10, 1 + 5 + 11], [6 + 8, 7 + 9]])
    np.testing.assert_allclose(m.bias_deltas, [2.0, 1 + 3 + 6, 4 + 5])
    assert m.is_positive.tolist() == [False, False, True]
    assert m.n_triples == 4 and (m.triple == -1).all()
    last = merge_update(up, "last")
    assert last.items.tolist() == [2, 4, 7]
    np.testing.assert_allclose(last.deltas, [[2, 3], [10, 11], [8, 9]])
    np.testing.assert_allclose(last.bias_deltas, [2.0, 6.0, 5.0])
    assert merge_update(up, "none") is up


def test_merge_sum_leaves_server_result_unchanged():
    n_items = 15
    Q, b, p = small_model(n_items, d=4, seed=5)
    s = make_triple_sampler(np.array([1, 3]), n_items)
    _, raw = fpl_client_round(p, Q, b, s, 30, LR, 0.7, np.random.default_rng(4))
    _, merged = fpl_client_round(p, Q, b, s, 30, LR, 0.7, np.random.default_rng(4), merge=True)
    assert merged.n_vectors == len(set(raw.items.tolist())) < raw.n_vectors
    np.testing.assert_allclose(merged.deltas, merge_update(raw, "sum").deltas)
    Qa, ba, Qb, bb = Q.copy(), b.copy(), Q.copy(), b.copy()
    server_apply_sum(Qa, ba, raw.items, raw.deltas, raw.bias_deltas, LR)
    server_apply_sum(Qb, bb, merged.items, merged.deltas, merged.bias_deltas, LR)
    np.testing.assert_allclose(Qa, Qb, atol=1e-15)
    np.testing.assert_allclose(ba, bb, atol=1e-15)


def test_server_sums_duplicates_and_clients():
    Q = np.zeros((5, 2))
    b = np.zeros(5)
    u1 = FPLUpdate(np.array([1, 1], np.int32), np.ones((2, 2)), np.ones(2), np.zeros(2, bool), 2,
                   np.arange(2, dtype=np.int32))
    u2 = FPLUpdate(np.array([1, 3], np.int32), 2 * np.ones((2, 2)), np.array([2.0, 5.0]),
                   np.zeros(2, bool), 2, np.arange(2, dtype=np.int32))
    server_apply_sum(Q, b, *concat_updates([u1, u2]), lr=0.5)
    np.testing.assert_allclose(Q[1], [0.5 * 4, 0.5 * 4])  # 1 + 1 + 2, summed, never averaged
    np.testing.assert_allclose(Q[3], [1.0, 1.0])
    np.testing.assert_allclose(b, [0, 2.0, 0, 2.5, 0])
    server_apply_sum(Q, b, np.empty(0, np.int32), np.empty((0, 2)), np.empty(0), 0.5)


def test_float32_model_gives_float32_message():
    Q, b, p = small_model(10)
    _, up = fpl_client_round(p, Q.astype(np.float32), b.astype(np.float32),
                             make_triple_sampler(np.array([2]), 10), 3, LR, 1.0,
                             np.random.default_rng(0))
    assert up.deltas.dtype == np.float32 and up.bias_deltas.dtype == np.float32
    assert up.items.dtype == np.int32


def test_learning_signal_on_a_toy_federation():
    """Many FPL rounds on a two-cluster toy set rank a user's held-out cluster item above others."""
    rng = np.random.default_rng(0)
    n_items, d = 20, 4
    Q, b = init_item_params(n_items, d, rng)
    users = [np.arange(0, 10)[rng.permutation(10)[:6]] for _ in range(15)]
    users += [np.arange(10, 20)[rng.permutation(10)[:6]] for _ in range(15)]
    P = [init_user_factor(d, rng) for _ in users]
    samplers = [make_triple_sampler(u, n_items) for u in users]
    for _ in range(150):
        ups = []
        for k in range(len(users)):
            P[k], up = fpl_client_round(P[k], Q, b, samplers[k], 5, 0.1, 1.0, rng)
            ups.append(up)
        server_apply_sum(Q, b, *concat_updates(ups), lr=0.1)
    hits = 0
    for k, pos in enumerate(users):
        scores = bpr_user_scores(P[k], Q, b)
        scores[pos] = -math.inf
        top = int(np.argmax(scores))
        hits += (top < 10) == (k < 15)
    assert hits >= 27


def test_sampler_from_a_presorted_catalogue_is_the_same_sampler():
    rng = np.random.default_rng(4)
    catalogue = rng.choice(500, 120, replace=False)
    pos = rng.choice(catalogue, 9)
    a = make_triple_sampler(pos, 500, catalogue)
    b = make_triple_sampler(pos, 500, np.unique(catalogue.astype(np.int64)), catalogue_unique=True)
    assert a.n_catalogue == b.n_catalogue and a.n_negatives == b.n_negatives
    assert np.array_equal(a.catalogue, b.catalogue) and np.array_equal(a._keys, b._keys)
    r1, r2 = np.random.default_rng(1), np.random.default_rng(1)
    assert all(np.array_equal(x, y) for x, y in zip(sample_triples(a, 50, r1), sample_triples(b, 50, r2)))


def test_negative_catalogue_ids_are_refused():
    # a catalogue id of -1 used to be drawn as a negative and, through NumPy's negative indexing,
    # train the LAST item (and the server stepped it), which is not in the catalogue at all
    for unique in (False, True):
        with pytest.raises(ValueError, match=r"catalogue item id -1 is negative"):
            make_triple_sampler(np.array([0]), 3, np.array([-1, 0], dtype=np.int64), catalogue_unique=unique)
    # the valid extremes are accepted: ids 0 and n_items - 1
    s = make_triple_sampler(np.array([0]), 3, np.array([0, 2], dtype=np.int64))
    assert s.negatives_from_ranks(np.array([0])).tolist() == [2]
