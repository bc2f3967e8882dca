"""FedRec PMF math: hand-computed examples, sampling, filling, server updates, divergence."""

import numpy as np
import pytest

from fedsim.math import fedrec_central as fc
from fedsim.math.filling import (
    hf_active,
    hf_local_user_batch,
    n_sampled,
    rated_counts_of_rows,
    sample_unrated,
    user_mean,
    virtual_ratings_hf,
    virtual_ratings_hf_sgd,
    virtual_ratings_ua,
)
from fedsim.math.pmf import (
    DivergenceError,
    accumulate_item_grads,
    apply_mean_step,
    batch_client_step,
    decayed_lr,
    draw_user_order,
    init_item_factors,
    init_user_factor,
    pmf_batch_client,
    pmf_sgd_client,
    pmf_sgd_client_step,
    server_apply_mean,
    server_apply_sgd,
)

U0 = np.array([1.0, 0.0])
VR = np.array([[1.0, 2.0], [0.0, 1.0]])
R = np.array([3.0, 1.0])


def test_batch_client_code_order_hand_computed():
    # e = V U - r = [-2, -1]; grad_U = (e V)/2 + lam U = [-0.9, -2.5]
    new_u, g = pmf_batch_client(U0, VR, R, 0.5, 0.1, order="code")
    np.testing.assert_allclose(new_u, [1.45, 1.25], atol=1e-15)
    # g_k = e_k U (before the update) + lam V_k
    np.testing.assert_allclose(g, [[-1.9, 0.2], [-1.0, 0.1]], atol=1e-15)


def test_batch_client_paper_order_hand_computed():
    new_u, g = pmf_batch_client(U0, VR, R, 0.5, 0.1, order="paper")
    np.testing.assert_allclose(new_u, [1.45, 1.25], atol=1e-15)
    # e' = V U_new - r = [0.95, 0.25]; g_k = e'_k U_new + lam V_k
    np.testing.assert_allclose(g, [[1.4775, 1.3875], [0.3625, 0.4125]], atol=1e-14)


def test_batch_client_rejects_unknown_order():
    with pytest.raises(ValueError):
        pmf_batch_client(U0, VR, R, 0.5, 0.1, order="other")


@pytest.mark.parametrize("backend", ["python", "auto"])
def test_sgd_client_hand_computed(backend):
    new_u, g = pmf_sgd_client(U0, VR, R, 0.5, 0.1, backend=backend)
    # rating 1: err 2, g = lam V - err U = [-1.9, 0.2], U = [1.95, 2]
    # rating 2: pred 2, err -1, g = [0, .1] + [1.95, 2] = [1.95, 2.1], U = [1.8525, 1.4]
    np.testing.assert_allclose(g, [[-1.9, 0.2], [1.95, 2.1]], atol=1e-14)
    np.testing.assert_allclose(new_u, [1.8525, 1.4], atol=1e-14)


def test_sgd_client_float32_stays_float32():
    new_u, g = pmf_sgd_client(U0.astype(np.float32), VR.astype(np.float32), R, 0.5, 0.1,
                              backend="python")
    assert new_u.dtype == np.float32 and g.dtype == np.float32
    np.testing.assert_allclose(new_u, [1.8525, 1.4], rtol=1e-6)


def test_server_apply_mean_divides_by_senders():
    V = np.zeros((3, 2))
    items = np.array([0, 0, 2])
    grads = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    server_apply_mean(V, items, grads, 0.5)
    np.testing.assert_allclose(V, [[-1.0, -1.5], [0.0, 0.0], [-2.5, -3.0]])
    # incremental form gives the same
    V2 = np.zeros((3, 2))
    gs, cnt = np.zeros((3, 2)), np.zeros(3)
    accumulate_item_grads(gs, cnt, items[:2], grads[:2])
    accumulate_item_grads(gs, cnt, items[2:], grads[2:])
    apply_mean_step(V2, gs, cnt, 0.5)
    np.testing.assert_array_equal(V, V2)


def test_distinct_fast_path_equals_the_general_accumulation():
    rng = np.random.default_rng(3)
    general = (np.zeros((50, 4), np.float32), np.zeros(50, np.int64))
    fast = (np.zeros((50, 4), np.float32), np.zeros(50, np.int64))
    for _ in range(20):
        items = rng.choice(50, size=rng.integers(1, 30), replace=False)
        grads = rng.normal(size=(items.shape[0], 4)).astype(np.float32)
        accumulate_item_grads(*general, items, grads)
        accumulate_item_grads(*fast, items, grads, distinct=True)
    np.testing.assert_array_equal(general[0], fast[0])
    np.testing.assert_array_equal(general[1], fast[1])


def test_server_apply_sgd():
    V = np.ones((3, 2))
    server_apply_sgd(V, np.array([2, 0]), np.array([[1.0, 2.0], [4.0, 0.0]]), 0.25)
    np.testing.assert_allclose(V, [[0.0, 1.0], [1.0, 1.0], [0.75, 0.5]])


def test_decayed_lr_and_user_order():
    assert decayed_lr(0.8, 0) == 0.8
    assert decayed_lr(0.8, 3) == pytest.approx(0.8 * 0.729, abs=1e-15)
    order = draw_user_order(np.random.default_rng(1), 5)
    assert order.shape == (5,) and order.min() >= 0 and order.max() < 5
    np.testing.assert_array_equal(order, np.random.default_rng(1).integers(0, 5, size=5))


def test_init_is_uniform_small_and_reproducible():
    u = init_user_factor(np.random.default_rng(3), 20, dtype=np.float64)
    V = init_item_factors(np.random.default_rng(3), 1000, 20)
    assert V.dtype == np.float32 and V.shape == (1000, 20)
    assert np.abs(V).max() < 0.005 and np.abs(V).max() > 0.0049
    np.testing.assert_array_equal(u, np.random.default_rng(3).uniform(-0.005, 0.005, 20))


# ----------------------------------------------------------------------------- sampling


@pytest.mark.parametrize(
    "n_rated,m,rho,expected",
    [(10, 100, 3, 30), (10, 15, 3, 5), (7, 100, 0.5, 3), (7, 100, 0, 0), (0, 10, 2, 0),
     (10, 10, 1, 0)],
)
def test_n_sampled(n_rated, m, rho, expected):
    assert n_sampled(n_rated, m, rho) == expected


@pytest.mark.parametrize("m,rho", [(90, 2.0), (90, 3.0), (40, 0.7), (17, 0.0), (25, 1.0 / 3)])
def test_rated_counts_of_rows_inverts_the_upload_size(m, rho):
    # brute force through n_sampled, the function the clients sample by
    by_k: dict[int, list[int]] = {}
    for n in range(m + 1):
        by_k.setdefault(n + n_sampled(n, m, rho), []).append(n)
    for k in range(-1, m + 2):
        got = rated_counts_of_rows(k, m, rho)
        assert got.tolist() == by_k.get(k, []), k
        if 0 <= k < m:
            assert got.size <= 1  # below the cap, a size names one count
    capped = rated_counts_of_rows(m, m, rho)
    n_min = next(n for n in range(m + 1) if n + int(rho * n) >= m)
    assert capped.tolist() == list(range(n_min, m + 1))  # at the cap: at least n_min
    with pytest.raises(ValueError, match="rho"):
        rated_counts_of_rows(3, 10, -1.0)


@pytest.mark.parametrize("rho", [1e23, 1e308])
def test_a_rho_beyond_every_count_samples_every_unrated_item(rho):
    # rho = 1e308 (finite: the configuration takes it) made rho * n infinite, an OverflowError of
    # n_sampled in every client; rho = 1e23 cast rho * n past int64 to garbage in
    # users_sampling_all and rated_counts_of_rows (NumPy's "invalid value" warning; no user listed)
    import warnings

    from fedsim.math.filling import users_sampling_all

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [n_sampled(n, 12, rho) for n in (0, 1, 5, 12)] == [0, 11, 7, 0]
        # n = 0, 1, 5, 12: all but the user with no ratings (as for rho = 1)
        assert users_sampling_all(np.array([0, 0, 1, 6, 18]), 12, rho) == [1, 2, 3]
        assert users_sampling_all(np.array([0, 0, 1, 6, 18]), 12, 1.0) == [3]
        assert rated_counts_of_rows(12, 12, rho).tolist() == list(range(1, 13))
        assert rated_counts_of_rows(5, 12, rho).tolist() == []
        assert rated_counts_of_rows(0, 12, rho).tolist() == [0]
    s = sample_unrated(np.random.default_rng(0), np.array([0, 3], np.int32), 12, rho)
    assert sorted(s.tolist()) == [1, 2, 4, 5, 6, 7, 8, 9, 10, 11]


def test_sample_unrated_properties():
    rng = np.random.default_rng(5)
    rated = np.array([0, 3, 4, 9], dtype=np.int32)
    seen = set()
    for _ in range(200):
        s = sample_unrated(rng, rated, 12, 1.5)
        assert s.dtype == np.int32 and s.shape == (6,)
        assert len(set(s.tolist())) == 6
        assert not set(s.tolist()) & set(rated.tolist())
        assert s.min() >= 0 and s.max() < 12
        seen |= set(s.tolist())
    # the whole index space minus I_u (items nobody rated included), drawn afresh each time
    assert seen == set(range(12)) - set(rated.tolist())


def test_sample_unrated_rho_zero_leaves_rng_untouched():
    rng = np.random.default_rng(7)
    state = rng.bit_generator.state
    assert sample_unrated(rng, np.array([1, 2]), 10, 0).shape == (0,)
    assert rng.bit_generator.state == state


def test_sample_unrated_takes_all_when_few_left():
    s = sample_unrated(np.random.default_rng(0), np.array([0, 1, 2]), 5, 3)
    assert sorted(s.tolist()) == [3, 4]


# ----------------------------------------------------------------------------- filling


def test_user_average():
    assert user_mean(np.array([5.0, 4.0, 2.0])) == pytest.approx(11 / 3)
    v = virtual_ratings_ua(np.array([5, 4, 2], dtype=np.float32), 4)
    assert v.dtype == np.float32 and v.shape == (4,)
    np.testing.assert_allclose(v, 11 / 3, rtol=1e-7)


def test_hf_switch_conventions():
    # code: predictions when 0-based t > T_predict; paper: 1-based t >= T_predict
    assert [hf_active(t, 5, "code") for t in (4, 5, 6)] == [False, False, True]
    assert [hf_active(t, 5, "paper") for t in (2, 3, 4)] == [False, False, True]
    with pytest.raises(ValueError):
        hf_active(1, 5, "x")


def test_hf_batch_hand_computed():
    U, Vr, r = np.array([1.0, 0.0]), np.array([[1.0, 2.0]]), np.array([3.0])
    np.testing.assert_allclose(hf_local_user_batch(U, Vr, r, 0.5, 0.0, 1), [2.0, 2.0])
    # second step: e = [2,2].[1,2] - 3 = 3 -> tU = [2,2] - 0.5*3*[1,2] = [0.5, -1]
    np.testing.assert_allclose(hf_local_user_batch(U, Vr, r, 0.5, 0.0, 2), [0.5, -1.0])
    np.testing.assert_allclose(
        virtual_ratings_hf(U, Vr, r, np.array([[1.0, 1.0], [2.0, 0.0]]), 0.5, 0.0, 2), [-0.5, 1.0]
    )
    # with lambda: tU = U - lr (e V + lam U) = [1,0] - 0.5([-2,-4] + [0.2, 0]) = [1.9, 2]
    np.testing.assert_allclose(hf_local_user_batch(U, Vr, r, 0.5, 0.2, 1), [1.9, 2.0])


def test_hf_batch_converges_to_least_squares_fit():
    rng = np.random.default_rng(0)
    V = rng.normal(size=(30, 3))
    u_true = np.array([0.5, -1.0, 2.0])
    r = V @ u_true
    tU = hf_local_user_batch(np.zeros(3), V, r, 0.3, 0.0, 2000)
    np.testing.assert_allclose(tU, u_true, atol=1e-8)


def test_hf_sgd_pmf_hand_computed():
    # copy of U trained by SGD on the rated items, then its predictions for the sampled ones
    V = np.array([[1.0, 2.0], [0.0, 1.0], [1.0, 1.0]])
    out = virtual_ratings_hf_sgd(U0, V, [0, 1], R, [2], 0.5, 0.1, 1, backend="python")
    np.testing.assert_allclose(out, [1.8525 + 1.4], atol=1e-14)


# ----------------------------------------------------------------------------- client steps


def test_batch_client_step_uploads_rated_then_sampled():
    rng = np.random.default_rng(0)
    V = rng.normal(size=(10, 3))
    rated = np.array([1, 4, 6])
    r = np.array([5.0, 3.0, 4.0])
    up = batch_client_step(np.ones(3), V, rated, r, t=0, lr=0.1, lam=0.01,
                           rng=np.random.default_rng(9), rho=2)
    assert up.items[:3].tolist() == [1, 4, 6] and up.items.shape == (9,)
    assert up.n_rated == 3
    sampled = sample_unrated(np.random.default_rng(9), rated, 10, 2)
    np.testing.assert_array_equal(up.items[3:], sampled)
    exp_u, exp_g = pmf_batch_client(
        np.ones(3), V[up.items], np.concatenate([r, np.full(6, 4.0)]), 0.1, 0.01
    )
    np.testing.assert_array_equal(up.U, exp_u)
    np.testing.assert_array_equal(up.grads, exp_g)


def test_sgd_client_step_ua_equals_two_passes():
    rng = np.random.default_rng(1)
    V = rng.normal(size=(10, 3)) * 0.3
    rated = np.array([2, 5])
    r = np.array([4.0, 2.0])
    up = pmf_sgd_client_step(np.ones(3) * 0.1, V, rated, r, t=0, lr=0.05, lam=0.01,
                             sampled=np.array([7, 0]), backend="python")
    u1, g1 = pmf_sgd_client(np.ones(3) * 0.1, V[rated], r, 0.05, 0.01, backend="python")
    u2, g2 = pmf_sgd_client(u1, V[[7, 0]], np.full(2, 3.0), 0.05, 0.01, backend="python")
    np.testing.assert_array_equal(up.U, u2)
    np.testing.assert_array_equal(up.grads, np.concatenate([g1, g2]))
    assert up.items.tolist() == [2, 5, 7, 0]


def test_sgd_client_step_hf_uses_state_after_rated_pass():
    rng = np.random.default_rng(2)
    V = rng.normal(size=(10, 3)) * 0.3
    rated, r, sampled = np.array([2, 5, 8]), np.array([4.0, 2.0, 5.0]), np.array([1, 3])
    up = pmf_sgd_client_step(np.ones(3) * 0.1, V, rated, r, t=9, T_predict=5, T_local=4,
                             strategy="hf", lr=0.05, lam=0.01, sampled=sampled, backend="python")
    u1, g1 = pmf_sgd_client(np.ones(3) * 0.1, V[rated], r, 0.05, 0.01, backend="python")
    virt = virtual_ratings_hf_sgd(u1, V, rated, r, sampled, 0.05, 0.01, 4, backend="python")
    u2, g2 = pmf_sgd_client(u1, V[sampled], virt, 0.05, 0.01, backend="python")
    np.testing.assert_allclose(up.U, u2, rtol=1e-13)
    np.testing.assert_allclose(up.grads, np.concatenate([g1, g2]), rtol=1e-13)


# ----------------------------------------------------------------------------- trainers


def _toy(seed=0, n=25, m=30, density=0.3):
    rng = np.random.default_rng(seed)
    P, Q = rng.normal(size=(n, 2)), rng.normal(size=(m, 2))
    mask = rng.random((n, m)) < density
    u, i = np.nonzero(mask)
    r = np.clip(np.rint(3 + (P[u] * Q[i]).sum(1)), 1, 5)
    return u, i, r, n, m


def _rngs(seed, n):
    return [np.random.default_rng([seed, k]) for k in range(n)], np.random.default_rng([seed, 999])


def test_batch_trainer_learns_and_records_history():
    u, i, r, n, m = _toy()
    users, server = _rngs(0, n)
    seen = []
    res = fc.train_pmf_batch(u, i, r, n, m, d=4, T=60, lr=0.8, lam=0.001, user_rngs=users,
                             server_rng=server, test=(u, i, r), init_scale=0.1,
                             callback=lambda it, s: seen.append(it))
    assert seen == list(range(1, 61))
    assert [h["iteration"] for h in res.history] == seen
    assert res.history[0]["lr"] == 0.8 and res.history[1]["lr"] == pytest.approx(0.72)
    first, last = res.history[0]["rmse"], res.history[-1]["rmse"]
    assert last < 0.6 * first and last < 0.7
    assert res.evaluate(u, i, r) == (res.history[-1]["mae"], res.history[-1]["rmse"])


def test_divergence_is_raised_with_iteration():
    u, i, r, n, m = _toy()
    users, server = _rngs(1, n)
    with pytest.raises(DivergenceError) as exc:
        fc.train_pmf_batch(u, i, r, n, m, d=4, T=50, lr=60.0, user_rngs=users, server_rng=server,
                           init_scale=0.5)
    assert 1 <= exc.value.iteration <= 50 and "PMF(B)" in str(exc.value)


def test_divergence_stop_mode_flags_and_never_reports_nan():
    u, i, r, n, m = _toy()
    users, server = _rngs(1, n)
    res = fc.train_pmf_batch(u, i, r, n, m, d=4, T=50, lr=60.0, user_rngs=users,
                             server_rng=server, init_scale=0.5, test=(u, i, r),
                             on_divergence="stop")
    assert res.diverged_at is not None and len(res.history) == res.diverged_at - 1
    assert all(np.isfinite(h["rmse"]) for h in res.history)
    with pytest.raises(DivergenceError):
        res.evaluate(u, i, r)


def test_a_final_model_with_non_finite_predictions_names_the_iteration_the_trainer_names():
    # decay = 1e23 in float32: after iteration 2 the parameters are finite, their predictions are
    # not. evaluate said "diverged at iteration 0" (0: an initial model), where the trainer, which
    # evaluates after every iteration when given test ratings, says 2
    u, i, r, n, m = _toy()
    kw = dict(d=4, T=2, decay=1e23, init_scale=0.1, dtype="float32")
    users, server = _rngs(0, n)
    res = fc.train_pmf_batch(u, i, r, n, m, user_rngs=users, server_rng=server, **kw)
    assert res.diverged_at is None and res.iterations == 2
    assert np.isfinite(res.U).all() and np.isfinite(res.V).all()
    with pytest.raises(DivergenceError) as final:
        res.evaluate(u, i, r)
    users, server = _rngs(0, n)
    with pytest.raises(DivergenceError) as during:
        fc.train_pmf_batch(u, i, r, n, m, user_rngs=users, server_rng=server, test=(u, i, r), **kw)
    assert final.value.iteration == during.value.iteration == 2
    assert str(final.value) == str(during.value) == "PMF(B): diverged at iteration 2: non-finite predictions"


def test_sgd_divergence_detected():
    u, i, r, n, m = _toy()
    users, server = _rngs(2, n)
    with pytest.raises(DivergenceError):
        fc.train_pmf_sgd(u, i, r, n, m, d=4, T=30, lr=5.0, user_rngs=users, server_rng=server,
                         init_scale=0.5, backend="python")


def test_evaluate_clips_and_rejects_nan():
    mae, rmse = fc.evaluate(np.array([0.0, 6.0, 3.5]), np.array([1.0, 5.0, 3.0]))
    assert mae == pytest.approx(0.5 / 3) and rmse == pytest.approx(np.sqrt(0.25 / 3))
    with pytest.raises(DivergenceError):
        fc.evaluate(np.array([np.nan, 1.0]), np.array([1.0, 1.0]))


def test_to_csr_sorts_items_within_users():
    indptr, indices, data = fc.to_csr(np.array([1, 0, 1, 1]), np.array([5, 2, 0, 3]),
                                      np.array([1.0, 2.0, 3.0, 4.0]), 3)
    assert indptr.tolist() == [0, 1, 4, 4]
    assert indices.tolist() == [2, 0, 3, 5] and data.tolist() == [2.0, 3.0, 4.0, 1.0]


def test_user_without_ratings_is_untouched():
    u, i, r, n, m = _toy()
    keep = u != 3
    users, server = _rngs(4, n)
    u0 = np.random.default_rng([4, 3]).uniform(-0.005, 0.005, 4)
    res = fc.train_pmf_batch(u[keep], i[keep], r[keep], n, m, d=4, T=5, rho=2, user_rngs=users,
                             server_rng=server)
    np.testing.assert_array_equal(res.U[3], u0)


def test_sample_unrated_refuses_rated_items_outside_the_catalogue():
    """A rated id of -1 marked item m - 1 as rated (NumPy's negative indexing), silently; one of
    m raised a bare IndexError. Both are a ValueError naming the id now, before any draw."""
    rng = np.random.default_rng(0)
    for bad in (-1, 5):
        with pytest.raises(ValueError, match=f"rated item {bad} is outside"):
            sample_unrated(rng, [0, bad], 5, 1.0)
    assert rng.bit_generator.state == np.random.default_rng(0).bit_generator.state
    got = sample_unrated(rng, [0, 4], 5, 1.0)
    assert sorted(got.tolist()) == sorted(set(got.tolist())) and set(got.tolist()) <= {1, 2, 3} and got.size == 2


@pytest.mark.parametrize("train", ["train_pmf_batch", "train_pmf_sgd", "train_svdpp_sgd"])
def test_trainers_refuse_non_finite_or_misaligned_ratings(train):
    """A NaN rating came out as the model's DivergenceError some iterations later (SVD++: after
    two clean iterations with T=2, not at all), a NaN test rating likewise, and a ratings array
    longer than the items was cut silently; each is a ValueError naming the rating now."""
    f = getattr(fc, train)
    u, i = np.array([0, 0, 1, 2]), np.array([0, 1, 1, 2])
    kw = dict(d=1, T=2, user_rngs=lambda k: np.random.default_rng(100 + k), server_rng=np.random.default_rng(0))
    good = np.array([4.0, 3.0, 5.0, 1.0])
    assert f(u, i, good, 3, 3, **kw).diverged_at is None
    with pytest.raises(ValueError, match="training rating 1 is not finite"):
        f(u, i, np.array([4.0, np.nan, 5.0, 1.0]), 3, 3, **kw)
    with pytest.raises(ValueError, match="training ratings have shape"):
        f(u, i, np.append(good, 2.0), 3, 3, **kw)
    with pytest.raises(ValueError, match="test rating 0 is not finite"):
        f(u, i, good, 3, 3, test=(u[:1], i[:1], np.array([np.inf])), **kw)


def test_sample_unrated_draws_what_choice_over_the_pool_of_unrated_items_draws():
    # the pool of unrated items built in full (an m-long mask and index array, what sample_unrated
    # built for every client and call) against the positions mapped to items: the same items in
    # the same order, the generator left in the same state; rated lists sorted, unsorted and with a
    # repeat, catalogues small and of the ML-20M and Netflix shapes, sampling capped or not
    from fedsim.math.filling import n_sampled

    def by_pool(rng, rated, m, rho):
        k = n_sampled(rated.shape[0], m, rho)
        if k == 0:
            return np.empty(0, np.int32)
        mask = np.ones(m, dtype=bool)
        mask[rated] = False
        return rng.choice(np.flatnonzero(mask), size=k, replace=False).astype(np.int32)

    g = np.random.default_rng(3)
    for trial in range(600):
        m = [1, 2, 12, 1682, 17770, 26744][trial % 6]
        n = int(g.integers(0, m + 1)) if trial % 4 else int(g.integers(0, min(m, 60) + 1))
        rated = np.sort(g.choice(m, n, replace=False)).astype(np.int32)
        if trial % 7 == 0 and n > 1:
            rated = g.permutation(rated)
        if trial % 11 == 0 and n > 1:
            rated = np.concatenate([rated, rated[-1:]])
        rho = [0.3, 1.0, 2.0, 3.0, 40.0][trial % 5]
        seed = int(g.integers(1 << 31))
        a, b = np.random.default_rng(seed), np.random.default_rng(seed)
        want = by_pool(a, rated, m, rho)
        got = sample_unrated(b, rated, m, rho)
        assert got.dtype == np.int32 and np.array_equal(got, want), (trial, m, n, rho)
        assert a.bit_generator.state == b.bit_generator.state
