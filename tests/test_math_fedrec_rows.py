"""The per-message math of the FedRec actors in its compiled form (one client's batch step, the
servers' row updates) against the NumPy expressions it replaces: the same bits, the same errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsim.math import _sgd_numba as K
from fedsim.math.pmf import accumulate_item_grads, batch_client_step, pmf_batch_client, server_apply_sgd
from fedsim.math.svdpp import server_apply_o_delta

needs_numba = pytest.mark.skipif(not K.numba_available(), reason="numba not installed")

case = st.tuples(st.sampled_from([np.float32, np.float64]), st.integers(1, 60), st.integers(1, 24),
                 st.integers(0, 2**32 - 1))


def _draw(dt, m, d, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, m + 1))
    V = rng.normal(size=(m, d)).astype(dt)
    U = rng.normal(size=d).astype(dt)
    items = rng.permutation(m)[:n].astype(np.int32)  # distinct, any order
    r = rng.integers(1, 6, n).astype(dt)
    G = (rng.normal(size=(n, d)) * 10 ** rng.uniform(-3, 3)).astype(dt)
    return rng, V, U, items, r, G, float(rng.uniform(0, 2)), float(rng.uniform(0, 0.2))


@needs_numba
@settings(max_examples=200, deadline=None)
@given(case)
def test_batch_client_step_equals_the_numpy_expressions(c):
    dt, m, d, seed = c
    _, V, U, items, r, _, lr, lam = _draw(dt, m, d, seed)
    Vr = V[items]
    t = np.dtype(dt).type
    new_u, grads = pmf_batch_client(U, Vr, r, lr, lam)
    if items.shape[0] == 0:
        assert new_u.tobytes() == U.tobytes() and grads.shape == (0, d)
        return
    e = Vr @ U - r  # the expressions of pmf_batch_client (order="code"), written out
    want_u = U - t(lr) * ((e @ Vr) / t(items.shape[0]) + t(lam) * U)
    want_g = e[:, None] * U[None, :] + t(lam) * Vr
    assert new_u.dtype == dt and grads.dtype == dt
    assert new_u.tobytes() == want_u.tobytes() and grads.tobytes() == want_g.tobytes()
    up = batch_client_step(U, V, items, r, t=0, lr=lr, lam=lam)
    assert up.items is items or np.array_equal(up.items, items)
    assert up.U.tobytes() == want_u.tobytes() and up.grads.tobytes() == want_g.tobytes()


def test_mixed_dtypes_keep_numpy_promotion():
    # float64 ratings with float32 factors: NumPy computes in float64; so must the step
    rng = np.random.default_rng(0)
    U = rng.normal(size=5).astype(np.float32)
    Vr = rng.normal(size=(7, 5)).astype(np.float32)
    r = rng.integers(1, 6, 7).astype(np.float64)
    new_u, grads = pmf_batch_client(U, Vr, r, 0.3, 0.01)
    e = Vr @ U - r
    assert grads.dtype == np.float64
    assert grads.tobytes() == (e[:, None] * U[None, :] + np.float32(0.01) * Vr).tobytes()


@needs_numba
@settings(max_examples=200, deadline=None)
@given(case)
def test_server_row_updates_equal_fancy_indexing(c):
    dt, m, d, seed = c
    _, V, _, items, _, G, lr, _ = _draw(dt, m, d, seed)
    a, b = V.copy(), V.copy()
    a[items] -= np.dtype(dt).type(lr) * G
    assert server_apply_sgd(b, items, G, lr) is b and a.tobytes() == b.tobytes()
    a, b = V.copy(), V.copy()
    a[items] += G
    assert server_apply_o_delta(b, items, G) is b and a.tobytes() == b.tobytes()
    a, b = V.copy(), V.copy()
    ca, cb = np.zeros(m, np.int64), np.zeros(m, np.int64)
    a[items] += G
    ca[items] += 1
    accumulate_item_grads(b, cb, items, G, distinct=True)
    assert a.tobytes() == b.tobytes() and np.array_equal(ca, cb)


@pytest.mark.parametrize("bad", [[1, 10], [1, -11], [0, 2**40]])
def test_out_of_range_rows_raise_as_numpy_does_and_change_nothing(bad):
    V = np.arange(30, dtype=np.float32).reshape(10, 3)
    G = np.ones((2, 3), np.float32)
    items = np.array(bad, dtype=np.int64)
    for call in (lambda A: server_apply_sgd(A, items, G, 0.5), lambda A: server_apply_o_delta(A, items, G),
                 lambda A: accumulate_item_grads(A, np.zeros(10, np.int64), items, G, distinct=True)):
        A = V.copy()
        with pytest.raises(IndexError):
            call(A)
        assert np.array_equal(A, V)


def test_negative_ids_count_from_the_end_as_in_numpy():
    V = np.arange(30, dtype=np.float32).reshape(10, 3)
    G = np.ones((2, 3), np.float32)
    items = np.array([-1, 2])
    a, b = V.copy(), V.copy()
    a[items] -= np.float32(0.5) * G
    server_apply_sgd(b, items, G, 0.5)
    assert a.tobytes() == b.tobytes()


def _same_upload(a, b):
    assert a.n_rated == b.n_rated
    for x, y in ((a.U, b.U), (a.items, b.items), (a.grads, b.grads), (a.o_deltas, b.o_deltas)):
        assert (x is None) == (y is None)
        if x is not None:
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes()


@settings(max_examples=120, deadline=None)
@given(case, st.sampled_from([0.0, 1.0]), st.sampled_from(["ua", "hf"]), st.booleans(), st.sampled_from([0, 5]))
def test_per_client_objects_equal_the_per_call_functions(c, rho, strategy, given_sample, t):
    """BatchClient.step and SGDClient.call (what FedRec's actors call) against batch_client_step and
    sgd_client_call with the same arguments and generator states: the same uploads, bit for bit."""
    from fedsim.math.filling import sample_unrated, user_mean
    from fedsim.math.pmf import BatchClient
    from fedsim.math.sgd_client import SGDClient, sgd_client_call

    dt, m, d, seed = c
    _, V, U, items, r, _, lr, lam = _draw(dt, m, d, seed)
    rated = np.sort(items)
    O = np.random.default_rng(seed + 1).normal(size=V.shape).astype(dt) * 0.1
    kw = dict(t=t, lr=lr, rho=rho, strategy=strategy, T_predict=2, T_local=3, hf_convention="code")
    sampled = sample_unrated(np.random.default_rng(seed), rated, m, 1.0) if given_sample else None
    for order in ("code", "paper"):
        a = BatchClient(rated, r, dt, lam=lam, order=order).step(U, V, rng=np.random.default_rng(9), sampled=sampled, **kw)
        b = batch_client_step(U, V, rated, r, lam=lam, order=order, rng=np.random.default_rng(9), sampled=sampled, **kw)
        _same_upload(a, b)
    for OO in (None, O):
        a = SGDClient(rated, r, dt).call(U, V, OO, lam=lam, rng=np.random.default_rng(9), sampled=sampled, **kw)
        b = sgd_client_call(U, V, OO, rated, r, lam=lam, rng=np.random.default_rng(9), sampled=sampled,
                            r_mean=user_mean(r, dt), backend=None, **kw)
        _same_upload(a, b)
    # another dtype than the object's: the general function, on the converted ratings
    other = np.float64 if dt == np.float32 else np.float32
    V2, U2 = V.astype(other), U.astype(other)
    a = SGDClient(rated, r, dt).call(U2, V2, None, lam=lam, rng=np.random.default_rng(9), sampled=sampled, **kw)
    b = sgd_client_call(U2, V2, None, rated, r.astype(dt), lam=lam, rng=np.random.default_rng(9), sampled=sampled,
                        r_mean=None, backend=None, **kw)
    _same_upload(a, b)
