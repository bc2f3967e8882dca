"""The paper's equivalence claim made exact: independent user-by-user references (written here
from the equations and the authors' update order) against the vectorised / compiled central
trainers and against their per-client engine, float64, max abs difference <= 1e-9."""

import numpy as np
import pytest
from test_math_fedrec_svdpp import naive_client

from fedsim.math import fedrec_central as fc
from fedsim.math.filling import sample_unrated

TOL = 1e-9


def _data(seed=0, n=18, m=24, density=0.3):
    rng = np.random.default_rng(seed)
    P, Q = rng.normal(size=(n, 2)), rng.normal(size=(m, 2))
    mask = rng.random((n, m)) < density
    mask[0, :] = False  # a user without training ratings
    mask[1, :] = False
    mask[1, 3] = True  # a user with one rating
    u, i = np.nonzero(mask)
    r = np.clip(np.rint(3 + (P[u] * Q[i]).sum(1)), 1, 5)
    perm = rng.permutation(len(u))  # input order must not matter
    return u[perm], i[perm], r[perm], n, m


def _streams(seed, n):
    return [np.random.default_rng([seed, k]) for k in range(n)], np.random.default_rng([seed, 10**6])


def _by_user(u, i, r, n):
    out = []
    for k in range(n):
        sel = np.flatnonzero(u == k)
        o = np.argsort(i[sel])
        out.append((i[sel][o].astype(np.int32), r[sel][o]))
    return out


def ref_batch(u, i, r, n, m, d, T, lr, lam, rho=0.0, strategy="ua", T_predict=10, T_local=10,
              order="code", seed=0):
    gens, server = _streams(seed, n)
    U = np.array([g.uniform(-0.005, 0.005, d) for g in gens])
    V = server.uniform(-0.005, 0.005, (m, d))
    data = _by_user(u, i, r, n)
    for t in range(T):
        g = lr * 0.9**t
        sums, counts = {}, {}
        newU = U.copy()
        for k in range(n):
            items, rr = data[k]
            s = sample_unrated(gens[k], items, m, rho) if rho > 0 else np.empty(0, int)
            if len(s):
                if strategy == "hf" and t > T_predict:
                    tU = U[k].copy()
                    for _ in range(T_local):
                        grad = sum((tU @ V[j] - x) * V[j] for j, x in zip(items, rr))
                        tU = tU - g * (grad / len(items) + lam * tU)
                    virt = [tU @ V[j] for j in s]
                else:
                    virt = [np.mean(rr)] * len(s)
                items = np.concatenate([items, s])
                rr = np.concatenate([rr, virt])
            if len(items) == 0:
                continue
            e = np.array([U[k] @ V[j] - x for j, x in zip(items, rr)])
            grad_u = sum(ek * V[j] for ek, j in zip(e, items)) / len(items) + lam * U[k]
            newU[k] = U[k] - g * grad_u
            if order == "paper":
                e = np.array([newU[k] @ V[j] - x for j, x in zip(items, rr)])
                Ug = newU[k]
            else:
                Ug = U[k]
            for ek, j in zip(e, items):
                sums[j] = sums.get(j, 0) + ek * Ug + lam * V[j]
                counts[j] = counts.get(j, 0) + 1
        U = newU
        Vn = V.copy()
        for j in sums:
            Vn[j] = V[j] - g * sums[j] / counts[j]
        V = Vn
    return U, V


def ref_sgd(u, i, r, n, m, d, T, lr, lam, rho=0.0, strategy="ua", T_predict=10, T_local=10,
            implicit=False, client_lr=None, seed=0):
    gens, server = _streams(seed, n)
    U = np.array([gg.uniform(-0.005, 0.005, d) for gg in gens])
    V = server.uniform(-0.005, 0.005, (m, d))
    O = server.uniform(-0.005, 0.005, (m, d)) if implicit else np.zeros((m, d))
    data = _by_user(u, i, r, n)
    calls = [0] * n
    client_lr = lr if client_lr is None else client_lr
    for t in range(T):
        g_server = lr * 0.9**t
        for k in server.integers(0, n, size=n):
            items, rr = data[k]
            g_client = client_lr * 0.9 ** calls[k]
            calls[k] += 1
            s = sample_unrated(gens[k], items, m, rho) if rho > 0 else np.empty(0, int)
            Uk, grads, deltas = naive_client(U[k], V, O, items, rr, s, g_client, lam,
                                             hf=(strategy == "hf" and t > T_predict),
                                             T_local=T_local, implicit=implicit)
            U[k] = Uk
            allitems = list(items) + list(s)
            for row, j in enumerate(allitems):
                V[j] = V[j] - g_server * grads[row]
                if implicit:
                    O[j] = O[j] + deltas[row]
    return U, V, O


def _close(a, b):
    assert np.abs(a - b).max() <= TOL, np.abs(a - b).max()


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(order="paper"),
        dict(rho=2, strategy="ua"),
        dict(rho=1, strategy="hf", T_predict=2, T_local=4),
        dict(rho=3, strategy="hf", T_predict=1, T_local=2, order="paper"),
    ],
)
def test_batch_central_equals_per_client_reference(kw):
    u, i, r, n, m = _data()
    d, T, lr, lam = 3, 12, 0.8, 0.01
    U_ref, V_ref = ref_batch(u, i, r, n, m, d, T, lr, lam, **kw)
    for engine in ("central", "clients"):
        users, server = _streams(0, n)
        res = fc.train_pmf_batch(u, i, r, n, m, d=d, T=T, lr=lr, lam=lam, user_rngs=users,
                                 server_rng=server, engine=engine, **kw)
        _close(res.U, U_ref)
        _close(res.V, V_ref)


@pytest.mark.parametrize("implicit", [False, True])
@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(rho=2, strategy="ua", client_lr=0.05),
        dict(rho=1.5, strategy="hf", T_predict=1, T_local=3),
    ],
)
def test_sgd_central_equals_per_client_reference(implicit, kw):
    u, i, r, n, m = _data(1)
    d, T, lr, lam = 3, 6, 0.1, 0.01
    U_ref, V_ref, O_ref = ref_sgd(u, i, r, n, m, d, T, lr, lam, implicit=implicit, **kw)
    train = fc.train_svdpp_sgd if implicit else fc.train_pmf_sgd
    results = []
    for engine in ("central", "clients"):
        users, server = _streams(0, n)
        res = train(u, i, r, n, m, d=d, T=T, lr=lr, lam=lam, user_rngs=users, server_rng=server,
                    engine=engine, backend="python", **kw)
        _close(res.U, U_ref)
        _close(res.V, V_ref)
        if implicit:
            _close(res.O, O_ref)
        results.append(res)
    # the central kernel and the per-client functions run the same operations: bit-identical
    np.testing.assert_array_equal(results[0].U, results[1].U)
    np.testing.assert_array_equal(results[0].V, results[1].V)


@pytest.mark.parametrize("train", [fc.train_pmf_batch, fc.train_pmf_sgd, fc.train_svdpp_sgd])
def test_rho_zero_federated_equals_unfederated(train):
    """With rho = 0 the filling strategy is irrelevant and clients draw nothing after init."""
    u, i, r, n, m = _data(2)
    out = []
    for strategy in ("ua", "hf"):
        users, server = _streams(3, n)
        kw = dict(backend="python") if train is not fc.train_pmf_batch else {}
        res = train(u, i, r, n, m, d=3, T=5, lr=0.05, rho=0, strategy=strategy, T_predict=0,
                    user_rngs=users, server_rng=server, **kw)
        out.append(res)
        fresh = [np.random.default_rng([3, k]) for k in range(n)]
        for g, f in zip(users, fresh):
            f.uniform(size=3)
            assert g.bit_generator.state == f.bit_generator.state
    np.testing.assert_array_equal(out[0].U, out[1].U)
    np.testing.assert_array_equal(out[0].V, out[1].V)


def test_sample_once_draws_once_per_client():
    u, i, r, n, m = _data(4)
    users, server = _streams(5, n)
    fc.train_pmf_batch(u, i, r, n, m, d=3, T=4, rho=1, resample=False, user_rngs=users,
                       server_rng=server)
    for k, g in enumerate(users):
        f = np.random.default_rng([5, k])
        f.uniform(size=3)
        items = np.sort(i[u == k])
        sample_unrated(f, items, m, 1)
        assert g.bit_generator.state == f.bit_generator.state


def test_svdpp_prediction_uses_all_training_items():
    u, i, r, n, m = _data(6)
    users, server = _streams(6, n)
    res = fc.train_svdpp_sgd(u, i, r, n, m, d=3, T=2, lr=0.05, user_rngs=users,
                             server_rng=server, backend="python")
    k = 5
    items = i[u == k]
    obar = res.O[items].sum(0) / np.sqrt(len(items))
    np.testing.assert_allclose(res.predict([k], [7]), [(res.U[k] + obar) @ res.V[7]],
                               rtol=1e-12)
