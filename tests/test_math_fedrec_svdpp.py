"""SVD++(S) kernels against a naive O(N^2) transcription of the authors' per-rating updates."""

import numpy as np
import pytest

from fedsim.math.filling import virtual_ratings_hf_sgd
from fedsim.math.svdpp import (
    server_apply_o_delta,
    svdpp_implicit,
    svdpp_predict,
    svdpp_sgd_client,
    svdpp_sgd_client_step,
)


def naive_client(U, V, O, rated, r, sampled, lr, lam, *, hf=False, T_local=0, implicit=True):
    """One client call written the slow obvious way (every O row updated explicitly).

    Returns (U, grads for rated+sampled, O deltas for rated+sampled)."""
    U = U.copy()
    O0 = O
    O = O.copy()
    N = len(rated)
    grads = []
    for k, i in enumerate(rated):
        Ou = np.zeros_like(U)
        if implicit and N > 1:
            Ou = sum(O[j] for j in rated if j != i) / np.sqrt(N - 1)
        err = r[k] - (U + Ou) @ V[i]
        grads.append(-err * (U + Ou) + lam * V[i])
        U = U - lr * (-err * V[i] + lam * U)
        if implicit and N > 1:
            for j in rated:
                if j != i:
                    O[j] = O[j] - lr * (-err * V[i] / np.sqrt(N - 1) + lam * O[j])
    if len(sampled):
        if hf:
            tU, tO = U.copy(), O.copy()
            for _ in range(T_local):
                for k, i in enumerate(rated):
                    Ou = np.zeros_like(U)
                    if implicit and N > 1:
                        Ou = sum(tO[j] for j in rated if j != i) / np.sqrt(N - 1)
                    err = r[k] - (tU + Ou) @ V[i]
                    tU = tU - lr * (-err * V[i] + lam * tU)
                    if implicit and N > 1:
                        for j in rated:  # the current item included, as in the authors' code
                            tO[j] = tO[j] - lr * (-err * V[i] / np.sqrt(N - 1) + lam * tO[j])
            tOu = sum(tO[j] for j in rated) / np.sqrt(N) if implicit else 0.0
            virt = [(tU + tOu) @ V[s] for s in sampled]
        else:
            virt = [np.mean(r)] * len(sampled)
        for k, s in enumerate(sampled):
            Ou = sum(O[j] for j in rated) / np.sqrt(N) if implicit else np.zeros_like(U)
            err = virt[k] - (U + Ou) @ V[s]
            grads.append(-err * (U + Ou) + lam * V[s])
            U = U - lr * (-err * V[s] + lam * U)
            if implicit:
                for j in rated:
                    O[j] = O[j] - lr * (-err * V[s] / np.sqrt(N) + lam * O[j])
                O[s] = O[s] - lr * (-err * V[s] / np.sqrt(N) + lam * O[s])
    items = list(rated) + list(sampled)
    return U, np.array(grads), (O - O0)[items]


def _problem(seed, N, K, m=40, d=5):
    rng = np.random.default_rng(seed)
    items = rng.permutation(m)
    rated, sampled = items[:N].astype(np.int32), items[N:N + K].astype(np.int32)
    V = rng.normal(size=(m, d)) * 0.5
    O = rng.normal(size=(m, d)) * 0.3
    U = rng.normal(size=d) * 0.5
    r = rng.integers(1, 6, size=N).astype(float)
    return U, V, O, rated, r, sampled


@pytest.mark.parametrize("N,K", [(1, 0), (1, 3), (2, 2), (7, 0), (9, 12), (25, 5)])
@pytest.mark.parametrize("lam", [0.001, 0.1])
def test_client_matches_naive_ua(N, K, lam):
    U, V, O, rated, r, sampled = _problem(N * 100 + K, N, K)
    exp_u, exp_g, exp_d = naive_client(U, V, O, rated, r, sampled, 0.05, lam)
    up = svdpp_sgd_client_step(U, V, O, rated, r, t=0, lr=0.05, lam=lam, sampled=sampled,
                               backend="python")
    np.testing.assert_allclose(up.U, exp_u, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(up.grads, exp_g, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(up.o_deltas, exp_d, rtol=1e-10, atol=1e-13)
    assert up.items.tolist() == rated.tolist() + sampled.tolist()
    # the generic entry point with explicit virtual ratings gives the same numbers
    u2, items2, g2, d2 = svdpp_sgd_client(U, V, O, rated, r, 0.05, lam, sampled_items=sampled,
                                          virtual_ratings=np.full(K, np.mean(r)),
                                          backend="python")
    np.testing.assert_array_equal(u2, up.U)
    np.testing.assert_array_equal(g2, up.grads)
    np.testing.assert_array_equal(d2, up.o_deltas)


@pytest.mark.parametrize("N,K,T_local", [(1, 2, 3), (2, 3, 1), (8, 6, 5), (20, 10, 15)])
def test_client_matches_naive_hf(N, K, T_local):
    U, V, O, rated, r, sampled = _problem(N + 7 * K, N, K)
    exp_u, exp_g, exp_d = naive_client(U, V, O, rated, r, sampled, 0.03, 0.01, hf=True,
                                       T_local=T_local)
    up = svdpp_sgd_client_step(U, V, O, rated, r, t=20, T_predict=10, T_local=T_local,
                               strategy="hf", lr=0.03, lam=0.01, sampled=sampled,
                               backend="python")
    np.testing.assert_allclose(up.U, exp_u, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(up.grads, exp_g, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(up.o_deltas, exp_d, rtol=1e-9, atol=1e-12)


def test_pmf_client_matches_naive_hf():
    U, V, O, rated, r, sampled = _problem(3, 6, 4)
    exp_u, exp_g, _ = naive_client(U, V, O, rated, r, sampled, 0.05, 0.01, hf=True, T_local=3,
                                   implicit=False)
    from fedsim.math.pmf import pmf_sgd_client_step

    up = pmf_sgd_client_step(U, V, rated, r, t=20, T_predict=10, T_local=3, strategy="hf",
                             lr=0.05, lam=0.01, sampled=sampled, backend="python")
    np.testing.assert_allclose(up.U, exp_u, rtol=1e-12)
    np.testing.assert_allclose(up.grads, exp_g, rtol=1e-12)
    assert up.o_deltas is None


def test_hf_before_switch_uses_user_average():
    U, V, O, rated, r, sampled = _problem(11, 5, 4)
    exp = naive_client(U, V, O, rated, r, sampled, 0.05, 0.01)
    up = svdpp_sgd_client_step(U, V, O, rated, r, t=10, T_predict=10, strategy="hf", lr=0.05,
                               lam=0.01, sampled=sampled, backend="python")
    np.testing.assert_allclose(up.U, exp[0], rtol=1e-12)


def test_standalone_hf_sgd_virtual_ratings_match_naive():
    U, V, O, rated, r, sampled = _problem(5, 6, 3)
    tU, tO = U.copy(), O.copy()
    N = len(rated)
    for _ in range(2):
        for k, i in enumerate(rated):
            Ou = sum(tO[j] for j in rated if j != i) / np.sqrt(N - 1)
            err = r[k] - (tU + Ou) @ V[i]
            tU = tU - 0.05 * (-err * V[i] + 0.01 * tU)
            for j in rated:
                tO[j] = tO[j] - 0.05 * (-err * V[i] / np.sqrt(N - 1) + 0.01 * tO[j])
    exp = [(tU + sum(tO[j] for j in rated) / np.sqrt(N)) @ V[s] for s in sampled]
    got = virtual_ratings_hf_sgd(U, V, rated, r, sampled, 0.05, 0.01, 2, O=O, backend="python")
    np.testing.assert_allclose(got, exp, rtol=1e-12)


def test_client_does_not_modify_downloaded_copies():
    U, V, O, rated, r, sampled = _problem(8, 5, 5)
    V0, O0, U0 = V.copy(), O.copy(), U.copy()
    svdpp_sgd_client_step(U, V, O, rated, r, t=20, T_predict=1, strategy="hf", lr=0.05,
                          lam=0.01, sampled=sampled, backend="python")
    np.testing.assert_array_equal(V, V0)
    np.testing.assert_array_equal(O, O0)
    np.testing.assert_array_equal(U, U0)


def test_implicit_and_prediction_hand_computed():
    O = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0]])
    indptr, indices = np.array([0, 2, 2, 3]), np.array([0, 2, 1])
    Obar = svdpp_implicit(O, indptr, indices, backend="python")
    np.testing.assert_allclose(Obar, [[4 / np.sqrt(2), 3 / np.sqrt(2)], [0, 0], [0, 2]])
    U = np.array([[1.0, 1.0], [0.5, 0.0], [0.0, 0.0]])
    V = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    pred = svdpp_predict(U, V, Obar, np.array([0, 1, 2]), np.array([1, 0, 2]))
    np.testing.assert_allclose(pred, [1 + 3 / np.sqrt(2), 0.5, 2.0])


def test_server_apply_o_delta():
    O = np.zeros((4, 2))
    server_apply_o_delta(O, np.array([3, 1]), np.array([[1.0, 2.0], [3.0, 4.0]]))
    np.testing.assert_array_equal(O, [[0, 0], [3, 4], [0, 0], [1, 2]])
