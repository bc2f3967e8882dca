"""The per-message math of the FedRec actors in its compiled form (one client's batch step, the
servers' row updates) against the NumPy expressions it replaces: the same bits, the same errors."""

import json
import os
import subprocess
import sys
from unittest import mock

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


def _left_to_right(dt, U, Vr, r, lr, lam):
    """The batch step (order="code") written out one element at a time in the array dtype, every
    sum from its first term, left to right: the definition the compiled pass and the NumPy form
    must both meet bit for bit."""
    t = np.dtype(dt).type
    n, d = Vr.shape
    e = np.empty(n, dt)
    for k in range(n):
        acc = Vr[k, 0] * U[0]
        for f in range(1, d):
            acc = t(acc + Vr[k, f] * U[f])
        e[k] = acc - r[k]
    s = np.array([e[0] * Vr[0, f] for f in range(d)], dtype=dt)
    for k in range(1, n):
        for f in range(d):
            s[f] = s[f] + e[k] * Vr[k, f]
    want_u = np.array([U[f] - t(lr) * (s[f] / t(n) + t(lam) * U[f]) for f in range(d)], dtype=dt)
    want_g = np.array([[e[k] * U[f] + t(lam) * Vr[k, f] for f in range(d)] for k in range(n)], dtype=dt).reshape(n, d)
    return want_u, want_g


@settings(max_examples=200, deadline=None)
@given(case, st.booleans())
def test_batch_client_step_sums_left_to_right(c, jit):
    """The compiled pass (and without numba, the NumPy cumulative sums) against the step written
    out element by element: the same bits."""
    jit = jit and K.numba_available()  # without numba both draws check the NumPy form
    dt, m, d, seed = c
    _, V, U, items, r, _, lr, lam = _draw(dt, m, d, seed)
    Vr = V[items]
    with mock.patch.object(K, "compiled", K.compiled if jit else (lambda: None)):
        new_u, grads = pmf_batch_client(U, Vr, r, lr, lam)
        up = batch_client_step(U, V, items, r, t=0, lr=lr, lam=lam)
    if items.shape[0] == 0:
        assert new_u.tobytes() == U.tobytes() and grads.shape == (0, d)
        return
    want_u, want_g = _left_to_right(dt, U, Vr, r, lr, lam)
    assert new_u.dtype == dt and grads.dtype == dt
    assert new_u.tobytes() == want_u.tobytes() and grads.tobytes() == want_g.tobytes()
    assert up.items is items or np.array_equal(up.items, items)
    assert up.U.tobytes() == want_u.tobytes() and up.grads.tobytes() == want_g.tobytes()


@needs_numba
def test_the_pure_python_kernel_is_the_compiled_one():
    rng = np.random.default_rng(3)
    for dt in (np.float32, np.float64):
        V = rng.normal(size=(40, 7)).astype(dt)
        U = rng.normal(size=7).astype(dt)
        items = rng.permutation(40)[:25].astype(np.int32)
        r = rng.integers(1, 6, 25).astype(dt)
        par = np.array((0.7, 0.05, 25), dtype=dt)
        out = []
        for k in (K, K.compiled()):
            new_u, grads = np.empty_like(U), np.empty((25, 7), dt)
            k.batch_client_rows(U, V, items, r, par, new_u, grads)
            out.append(new_u.tobytes() + grads.tobytes())
        assert out[0] == out[1]


def test_batch_step_bits_do_not_depend_on_the_blas_kernel():
    """A batch step (and batch hybrid filling) run under OpenBLAS's oldest x86-64 kernel
    (Prescott) and under the one it picks on this machine: the same bits, where BLAS's own
    products differ between the two."""
    code = """if True:
        import hashlib, json
        import numpy as np
        from fedsim.math.filling import hf_local_user_batch, virtual_ratings_hf
        from fedsim.math.pmf import BatchClient, pmf_batch_client
        rng = np.random.default_rng(5)
        h, blas = hashlib.sha256(), hashlib.sha256()
        for n in (3, 17, 85, 300):
            V = rng.normal(size=(400, 20)).astype(np.float32)
            U = rng.normal(size=20).astype(np.float32)
            rated = np.sort(rng.permutation(400)[:n]).astype(np.int32)
            r = rng.integers(1, 6, n).astype(np.float32)
            up = BatchClient(rated, r, np.float32, lam=0.01).step(U, V, 0, 0.8)
            u2, g2 = pmf_batch_client(U, V[rated], r, 0.8, 0.01, order="paper")
            vh = virtual_ratings_hf(U, V[rated], r, V[:50], 0.8, 0.01, 5)
            th = hf_local_user_batch(U, V[rated], r, 0.8, 0.01, 5)
            for a in (up.U, up.grads, u2, g2, vh, th):
                h.update(a.tobytes())
            blas.update((V[rated] @ U).tobytes())
        print(json.dumps([h.hexdigest(), blas.hexdigest()]))
    """
    runs = []
    for core in (None, "Prescott"):
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
        if core:
            env["OPENBLAS_CORETYPE"] = core
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout))
    if runs[0][1] == runs[1][1]:
        pytest.skip("this NumPy's BLAS gives the same products under both kernels (not OpenBLAS?): nothing to tell apart")
    assert runs[0][0] == runs[1][0]


def test_mixed_dtypes_keep_numpy_promotion():
    # float64 ratings with float32 factors: NumPy computes in float64; so must the step
    rng = np.random.default_rng(0)
    U = rng.normal(size=5).astype(np.float32)
    Vr = rng.normal(size=(7, 5)).astype(np.float32)
    r = rng.integers(1, 6, 7).astype(np.float64)
    new_u, grads = pmf_batch_client(U, Vr, r, 0.3, 0.01)
    e = np.cumsum(Vr * U, axis=1)[:, -1] - r  # float32 products and sums, then float64
    assert grads.dtype == np.float64 and new_u.dtype == np.float64
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


@pytest.mark.parametrize("bad", [[1, 10], [1, -11], [0, 2**40], [-1, 2]])
def test_out_of_range_rows_raise_index_error_and_change_nothing(bad):
    V = np.arange(30, dtype=np.float32).reshape(10, 3)
    G = np.ones((2, 3), np.float32)
    items = np.array(bad, dtype=np.int64)
    for call in (lambda A: server_apply_sgd(A, items, G, 0.5), lambda A: server_apply_o_delta(A, items, G),
                 lambda A: accumulate_item_grads(A, np.zeros(10, np.int64), items, G, distinct=True)):
        A = V.copy()
        with pytest.raises(IndexError):
            call(A)
        assert np.array_equal(A, V)


def test_negative_ids_are_refused_not_counted_from_the_end():
    # they counted from the end, as NumPy's indexing does: an upload's id -1 changed the last row
    V = np.arange(30, dtype=np.float32).reshape(10, 3)
    G = np.ones((2, 3), np.float32)
    b = V.copy()
    with pytest.raises(IndexError, match="item id -1 outside \\[0, 10\\)"):
        server_apply_sgd(b, np.array([-1, 2]), G, 0.5)
    assert b.tobytes() == V.tobytes()


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
    fixed = dict(rho=rho, strategy=strategy, T_predict=2, T_local=3, hf_convention="code")
    kw = dict(t=t, lr=lr, **fixed)
    sampled = sample_unrated(np.random.default_rng(seed), rated, m, 1.0) if given_sample else None
    for order in ("code", "paper"):
        a = BatchClient(rated, r, dt, lam=lam, order=order, **fixed).step(U, V, t, lr, np.random.default_rng(9), sampled)
        b = batch_client_step(U, V, rated, r, lam=lam, order=order, rng=np.random.default_rng(9), sampled=sampled, **kw)
        _same_upload(a, b)
    for OO in (None, O):
        a = SGDClient(rated, r, dt, lam=lam, **fixed).call(U, V, OO, t, lr, np.random.default_rng(9), sampled)
        b = sgd_client_call(U, V, OO, rated, r, lam=lam, rng=np.random.default_rng(9), sampled=sampled,
                            r_mean=user_mean(r, dt), backend=None, **kw)
        _same_upload(a, b)
    # another dtype than the object's: the general function, on the converted ratings
    other = np.float64 if dt == np.float32 else np.float32
    V2, U2 = V.astype(other), U.astype(other)
    a = SGDClient(rated, r, dt, lam=lam, **fixed).call(U2, V2, None, t, lr, np.random.default_rng(9), sampled)
    b = sgd_client_call(U2, V2, None, rated, r.astype(dt), lam=lam, rng=np.random.default_rng(9), sampled=sampled,
                        r_mean=None, backend=None, **kw)
    _same_upload(a, b)


def _hf_left_to_right(dt, U, Vr, r, Vs, lr, lam, T_local):
    """Batch hybrid filling written out one element at a time, every sum left to right."""
    t = np.dtype(dt).type
    n, d = Vr.shape
    tU = U.copy()
    for _ in range(T_local):
        e = [t(0)] * n
        for k in range(n):
            acc = Vr[k, 0] * tU[0]
            for f in range(1, d):
                acc = t(acc + Vr[k, f] * tU[f])
            e[k] = t(acc - r[k])
        s = [e[0] * Vr[0, f] for f in range(d)]
        for k in range(1, n):
            for f in range(d):
                s[f] = t(s[f] + e[k] * Vr[k, f])
        tU = np.array([tU[f] - t(lr) * (s[f] / t(n) + t(lam) * tU[f]) for f in range(d)], dtype=dt)
    out = []
    for k in range(Vs.shape[0]):
        acc = Vs[k, 0] * tU[0]
        for f in range(1, d):
            acc = t(acc + Vs[k, f] * tU[f])
        out.append(acc)
    return np.array(out, dtype=dt), tU


@settings(max_examples=120, deadline=None)
@given(case, st.booleans(), st.integers(0, 4))
def test_batch_hybrid_filling_sums_left_to_right(c, jit, T_local):
    """virtual_ratings_hf compiled (and in NumPy) against the element-by-element definition; the
    NumPy form's local training (hf_local_user_batch) too."""
    from fedsim.math.filling import hf_local_user_batch, virtual_ratings_hf

    jit = jit and K.numba_available()  # without numba both draws check the NumPy form
    dt, m, d, seed = c
    _, V, U, items, r, _, lr, lam = _draw(dt, m, d, seed)
    if items.shape[0] == 0:
        return
    Vr = V[items]
    Vs = np.ascontiguousarray(V[::-1][: max(1, m // 2)])
    want, want_tU = _hf_left_to_right(dt, U, Vr, r, Vs, lr, lam, T_local)
    with mock.patch.object(K, "compiled", K.compiled if jit else (lambda: None)):
        got = virtual_ratings_hf(U, Vr, r, Vs, lr, lam, T_local)
    assert got.dtype == dt and got.tobytes() == want.tobytes()
    assert hf_local_user_batch(U, Vr, r, lr, lam, T_local).tobytes() == want_tU.tobytes()


@pytest.mark.parametrize("items, rows, error, match", [
    ([-1], (1, 2), IndexError, "item id -1 outside \\[0, 5\\)"),  # NumPy took it as the last row
    ([5], (1, 2), IndexError, "item id 5 outside \\[0, 5\\)"),
    ([0, 1], (1, 2), ValueError, "2 item ids need rows of shape \\(2, 2\\), got \\(1, 2\\)"),  # broadcast
    ([0], (1, 3), ValueError, "1 item ids need rows of shape \\(1, 2\\), got \\(1, 3\\)"),
])
def test_server_row_updates_refuse_uploads_they_would_misapply(items, rows, error, match):
    from fedsim.math.denoise import remove_noise
    from fedsim.math.pmf import accumulate_item_grads, server_apply_sgd
    from fedsim.math.svdpp import server_apply_o_delta

    ids = np.array(items, np.int32)
    block = np.ones(rows, np.float32)
    for call in (lambda V, C: accumulate_item_grads(V, C, ids, block, distinct=True),
                 lambda V, C: accumulate_item_grads(V, C, ids, block),
                 lambda V, C: server_apply_sgd(V, ids, block, 0.1),
                 lambda V, C: server_apply_o_delta(V, ids, block),
                 lambda V, C: remove_noise(V, C, ids, block, np.ones(len(ids), np.int64))):
        V, C = np.zeros((5, 2), np.float32), np.zeros(5, np.int64)
        with pytest.raises(error, match=match):
            call(V, C)
        assert not V.any() and not C.any()  # nothing changed


def _server_updates(ids, block):
    """The servers' row updates with ``ascending=True``, each on a fresh zero model and counts."""
    from fedsim.math.denoise import remove_noise

    return [lambda V, C: accumulate_item_grads(V, C, ids, block, ascending=True),
            lambda V, C: accumulate_item_grads(V, C, ids, block, distinct=True, ascending=True),
            lambda V, C: server_apply_sgd(V, ids, block, 0.1, ascending=True),
            lambda V, C: server_apply_o_delta(V, ids, block, ascending=True),
            lambda V, C: remove_noise(V, C, ids, block, np.ones(len(ids), np.int64))]


@pytest.mark.parametrize("jit", [pytest.param(True, marks=needs_numba), False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("items, match", [
    ([1, 1], "id 1 at position 1 repeats"),  # compiled, both rows were added; NumPy kept the last one
    ([0, 3, 2], "id 2 at position 2 follows 3"),
    ([4, 0], "id 0 at position 1 follows 4"),
])
def test_ascending_updates_refuse_items_out_of_order_and_change_nothing(jit, items, match):
    ids = np.array(items, np.int32)
    block = np.arange(1, 2 * len(items) + 1, dtype=np.float32).reshape(len(items), 2)
    with mock.patch.object(K, "compiled", K.compiled if jit else (lambda: None)):
        for call in _server_updates(ids, block):
            V, C = np.zeros((5, 2), np.float32), np.zeros(5, np.int64)
            with pytest.raises(ValueError, match=f"item ids must be strictly increasing; {match}"):
                call(V, C)
            assert not V.any() and not C.any()


@pytest.mark.parametrize("jit", [pytest.param(True, marks=needs_numba), False], ids=["compiled", "numpy"])
def test_ascending_updates_of_sorted_items_equal_fancy_indexing(jit):
    rng = np.random.default_rng(7)
    V0 = rng.normal(size=(40, 6)).astype(np.float32)
    ids = np.sort(rng.permutation(40)[:17]).astype(np.int32)
    G = rng.normal(size=(17, 6)).astype(np.float32)
    with mock.patch.object(K, "compiled", K.compiled if jit else (lambda: None)):
        a, b = V0.copy(), V0.copy()
        a[ids] -= np.float32(0.3) * G
        assert server_apply_sgd(b, ids, G, 0.3, ascending=True).tobytes() == a.tobytes()
        a, b = V0.copy(), V0.copy()
        a[ids] += G
        assert server_apply_o_delta(b, ids, G, ascending=True).tobytes() == a.tobytes()
        b, cb = V0.copy(), np.zeros(40, np.int64)
        accumulate_item_grads(b, cb, ids, G, ascending=True)
        assert b.tobytes() == a.tobytes() and np.array_equal(cb, np.isin(np.arange(40), ids).astype(np.int64))
        # without the promise, items in any order are taken as before
        a, b = V0.copy(), V0.copy()
        a[ids[::-1]] -= np.float32(0.3) * G
        assert server_apply_sgd(b, ids[::-1].copy(), G, 0.3).tobytes() == a.tobytes()
