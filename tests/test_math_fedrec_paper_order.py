"""The paper's printed update order for the stochastic models (Algorithm 5: U_u stepped first,
then the item gradient of Eq. 8 with the updated U_u) against a naive transcription, both
kernels, both engines and the actors; the default order stays the authors' code's."""

import numpy as np
import pytest

from fedsim.data import generate
from fedsim.kernel import SimNetwork
from fedsim.math import fedrec_central as fc
from fedsim.math._sgd_numba import numba_available, order_flag
from fedsim.math.pmf import pmf_sgd_client, pmf_sgd_client_step
from fedsim.math.svdpp import svdpp_sgd_client_step
from fedsim.protocols import fedrec
from fedsim.protocols.fedrec import FedRecConfig, central_twin

BACKENDS = ["python"] + (["numba"] if numba_available() else [])


def naive_paper_call(U, V, O, rated, r, sampled, virt, lr, lam, implicit):
    """One client call in the paper's order, every O row moved explicitly. Rated steps: Obar
    over the other rated items / sqrt(N - 1); sampled steps: over all rated / sqrt(N), the
    sampled item's own O row moving too (the authors' SVD++ updates, only the order differs)."""
    U, O0, O = U.copy(), O, O.copy()
    N = len(rated)
    out = []
    steps = [(i, r[k], [j for j in rated if j != i], np.sqrt(N - 1), []) for k, i in enumerate(rated)]
    steps += [(s, virt[k], list(rated), np.sqrt(N), [s]) for k, s in enumerate(sampled)]
    for i, y, others, norm, own in steps:
        use = implicit and len(others) > 0 and norm > 0

        def obar():
            return sum(O[j] for j in others) / norm if use else np.zeros_like(U)

        err = y - (U + obar()) @ V[i]
        U = U - lr * (-err * V[i] + lam * U)
        if use:
            for j in others + own:
                O[j] = O[j] - lr * (-err * V[i] / norm + lam * O[j])
        err2 = y - (U + obar()) @ V[i]  # Eq. 8 with the stepped U (and O)
        out.append(-err2 * (U + obar()) + lam * V[i])
    items = list(rated) + list(sampled)
    return U, np.array(out), (O - O0)[items]


def _problem(seed, N, K, m=30, d=4):
    rng = np.random.default_rng(seed)
    perm = rng.permutation(m)
    rated, sampled = np.sort(perm[:N]).astype(np.int32), perm[N:N + K].astype(np.int32)
    return (rng.normal(size=d) * 0.5, rng.normal(size=(m, d)) * 0.5, rng.normal(size=(m, d)) * 0.3,
            rated, rng.integers(1, 6, size=N).astype(float), sampled)


def test_order_flag():
    assert order_flag("code") == 0.0 and order_flag("paper") == 1.0
    with pytest.raises(ValueError, match="order"):
        order_flag("printed")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("implicit", [False, True])
@pytest.mark.parametrize("N,K", [(1, 2), (2, 0), (6, 5)])
def test_client_call_in_paper_order_equals_the_naive_transcription(backend, implicit, N, K):
    U, V, O, rated, r, sampled = _problem(N * 10 + K, N, K)
    lr, lam = 0.05, 0.02
    if implicit:
        up = svdpp_sgd_client_step(U, V, O, rated, r, t=0, lr=lr, lam=lam, sampled=sampled, backend=backend,
                                   order="paper")
    else:
        up = pmf_sgd_client_step(U, V, rated, r, t=0, lr=lr, lam=lam, sampled=sampled, backend=backend,
                                 order="paper")
    virt = np.full(K, np.mean(r))
    U_ref, g_ref, d_ref = naive_paper_call(U, V, O, rated, r, sampled, virt, lr, lam, implicit)
    np.testing.assert_allclose(up.U, U_ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(up.grads, g_ref, rtol=0, atol=1e-12)
    if implicit:
        np.testing.assert_allclose(up.o_deltas, d_ref, rtol=0, atol=1e-12)
    # and it differs from the code's order, whose U is the same but whose gradients are not
    code = (svdpp_sgd_client_step(U, V, O, rated, r, t=0, lr=lr, lam=lam, sampled=sampled, backend=backend)
            if implicit else pmf_sgd_client_step(U, V, rated, r, t=0, lr=lr, lam=lam, sampled=sampled,
                                                 backend=backend))
    np.testing.assert_array_equal(code.U, up.U)
    assert np.abs(code.grads - up.grads).max() > 1e-6


def test_single_pass_in_paper_order():
    U, V, _, rated, r, _ = _problem(3, 5, 0)
    newU, g = pmf_sgd_client(U, V[rated], r, 0.1, 0.01, order="paper")
    U_ref, g_ref, _ = naive_paper_call(U, V, V, rated, r, [], [], 0.1, 0.01, False)
    np.testing.assert_allclose(newU, U_ref, atol=1e-12, rtol=0)
    np.testing.assert_allclose(g, g_ref, atol=1e-12, rtol=0)


@pytest.mark.skipif(not numba_available(), reason="numba not installed")
@pytest.mark.parametrize("train", [fc.train_pmf_sgd, fc.train_svdpp_sgd])
def test_paper_order_engines_and_backends_agree_bit_for_bit(train):
    r = generate("tiny", seed=5, n_items=50)
    res = []
    for engine, backend in (("central", "numba"), ("central", "python"), ("clients", "numba")):
        gens = [np.random.default_rng([1, k]) for k in range(r.n_users)]
        res.append(train(r.users, r.items, r.values.astype(np.float32), r.n_users, r.n_items, d=4, T=4, lr=0.05,
                         rho=1.0, strategy="hf", T_predict=1, T_local=2, user_rngs=lambda u: gens[u],
                         server_rng=np.random.default_rng([1, 99]), dtype=np.float32, engine=engine,
                         backend=backend, order="paper"))
        assert res[-1].params["order"] == "paper"
    for other in res[1:]:
        np.testing.assert_array_equal(other.U, res[0].U)
        np.testing.assert_array_equal(other.V, res[0].V)


@pytest.mark.parametrize("model", ["PMF(S)", "SVD++(S)"])
def test_actors_in_paper_order_equal_their_central_twin(model):
    r = generate("tiny", seed=6, n_items=50)
    cfg = FedRecConfig(model, d=4, T=3, lr=0.05, rho=1.0, strategy="hf", T_predict=0, T_local=2,
                       order="paper", dtype="float64")
    net = SimNetwork(seed=2)
    fed = fedrec.build(net, r, cfg).collect(net.run()).model
    cen = central_twin(r, cfg, seed=2)
    np.testing.assert_array_equal(fed.U, cen.U)
    np.testing.assert_array_equal(fed.V, cen.V)
    code = central_twin(r, FedRecConfig(**{**cfg.to_dict(), "order": "code"}), seed=2)
    assert np.abs(code.V - cen.V).max() > 1e-8
