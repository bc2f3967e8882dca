"""numba-compiled kernels and their fallbacks give bit-identical numbers (float32 and float64)."""

import numpy as np
import pytest

from fedsim.math import _sgd_numba as K
from fedsim.math import fedrec_central as fc
from fedsim.math.pmf import pmf_sgd_client
from fedsim.math.svdpp import svdpp_implicit, svdpp_sgd_client_step

needs_numba = pytest.mark.skipif(not K.numba_available(), reason="numba not installed")
DTYPES = [np.float32, np.float64]


def _rows(dt, seed=0, n=13, m=17, k=120, d=5):
    rng = np.random.default_rng(seed)
    U = rng.normal(size=(n, d)).astype(dt)
    V = rng.normal(size=(m, d)).astype(dt)
    au = rng.integers(0, n, k)
    ai = rng.integers(0, m, k)
    ar = rng.integers(1, 6, k).astype(dt)
    return U, V, au, ai, ar


@pytest.mark.parametrize("dt", DTYPES)
def test_batch_scatter_loops_equal_vectorised_numpy(dt):
    """The Python loop versions (what numba compiles) and the NumPy fallback agree bit for bit."""
    U, V, au, ai, ar = _rows(dt)
    a, b = np.zeros((13, 5)), np.zeros((13, 5))
    K.batch_user_sums(U, V, au, ai, ar, a)
    K.batch_user_sums_np(U, V, au, ai, ar, b)
    np.testing.assert_array_equal(a, b)
    a, b = np.zeros((17, 5)), np.zeros((17, 5))
    K.batch_item_sums(U, V, au, ai, ar, dt(0.01), a)
    K.batch_item_sums_np(U, V, au, ai, ar, dt(0.01), b)
    np.testing.assert_array_equal(a, b)
    indptr = np.array([0, 3, 3, 7, 10])
    indices = np.array([1, 4, 2, 0, 5, 6, 16, 3, 3, 9])
    a, b = np.zeros((4, 5)), np.zeros((4, 5))
    K.implicit_sums(V, indptr, indices, a)
    K.implicit_sums_np(V, indptr, indices, b)
    np.testing.assert_array_equal(a, b)
    # and they are the plain sums
    np.testing.assert_allclose(a[2], V[[0, 5, 6, 16]].astype(np.float64).sum(0), rtol=1e-12)


@needs_numba
@pytest.mark.parametrize("dt", DTYPES)
def test_compiled_scatter_equals_numpy(dt):
    U, V, au, ai, ar = _rows(dt, 1)
    ju, ji, jo = K.scatter_kernels("numba")
    a, b = np.zeros((13, 5)), np.zeros((13, 5))
    ju(U, V, au, ai, ar, a)
    K.batch_user_sums_np(U, V, au, ai, ar, b)
    np.testing.assert_array_equal(a, b)
    a, b = np.zeros((17, 5)), np.zeros((17, 5))
    ji(U, V, au, ai, ar, dt(0.1), a)
    K.batch_item_sums_np(U, V, au, ai, ar, dt(0.1), b)
    np.testing.assert_array_equal(a, b)
    indptr, indices = np.array([0, 2, 6]), np.array([3, 1, 0, 2, 16, 5])
    np.testing.assert_array_equal(svdpp_implicit(V, indptr, indices, backend="numba"),
                                  svdpp_implicit(V, indptr, indices, backend="python"))


@needs_numba
@pytest.mark.parametrize("dt", DTYPES)
def test_compiled_client_kernels_equal_python(dt):
    rng = np.random.default_rng(2)
    V = (rng.normal(size=(30, 6)) * 0.4).astype(dt)
    O = (rng.normal(size=(30, 6)) * 0.2).astype(dt)
    U = (rng.normal(size=6) * 0.3).astype(dt)
    rated = np.array([3, 7, 1, 22, 9, 14, 5], dtype=np.int32)
    r = rng.integers(1, 6, 7).astype(dt)
    sampled = np.array([0, 29, 11, 12], dtype=np.int32)
    a = pmf_sgd_client(U, V[rated], r, 0.03, 0.01, backend="numba")
    b = pmf_sgd_client(U, V[rated], r, 0.03, 0.01, backend="python")
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    for strategy in ("ua", "hf"):
        ups = [
            svdpp_sgd_client_step(U, V, O, rated, r, t=9, T_predict=3, T_local=4,
                                  strategy=strategy, lr=0.03, lam=0.01, sampled=sampled,
                                  backend=be)
            for be in ("numba", "python")
        ]
        for x, y in zip(ups[0][:4], ups[1][:4]):
            np.testing.assert_array_equal(x, y)


@needs_numba
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("train", [fc.train_pmf_batch, fc.train_pmf_sgd, fc.train_svdpp_sgd])
def test_compiled_trainers_equal_python(dt, train):
    rng = np.random.default_rng(3)
    n, m = 15, 20
    mask = rng.random((n, m)) < 0.35
    u, i = np.nonzero(mask)
    r = rng.integers(1, 6, len(u)).astype(float)
    lr = 0.8 if train is fc.train_pmf_batch else 0.05
    out = []
    for be in ("numba", "python"):
        users = [np.random.default_rng([7, k]) for k in range(n)]
        res = train(u, i, r, n, m, d=4, T=6, lr=lr, lam=0.01, rho=2, strategy="hf", T_predict=1,
                    T_local=3, user_rngs=users, server_rng=np.random.default_rng(8), dtype=dt,
                    backend=be)
        assert res.params["backend"] == be
        out.append(res)
    np.testing.assert_array_equal(out[0].U, out[1].U)
    np.testing.assert_array_equal(out[0].V, out[1].V)
    if out[0].O is not None:
        np.testing.assert_array_equal(out[0].O, out[1].O)


def test_backend_selection():
    assert K.backend_name("python") == "python"
    with pytest.raises(ValueError):
        K.kernels("fortran")
    if not K.numba_available():
        with pytest.raises(RuntimeError):
            K.kernels("numba")


@needs_numba
@pytest.mark.parametrize("backend", ["numba", "python"])
def test_client_call_rejects_item_past_the_end(backend):
    """The compiled client kernels read V[i] and O[i] without bounds checks: an item index past
    the end used to read other memory silently (numba) where the fallback raised IndexError.
    Both now raise; a negative index keeps NumPy's meaning (from the end) in both."""
    from fedsim.math.filling import virtual_ratings_hf_sgd
    from fedsim.math.pmf import pmf_sgd_client_step
    from fedsim.math.sgd_client import SGDClient

    rng = np.random.default_rng(0)
    V = rng.normal(size=(5, 3)).astype(np.float32)
    O = rng.normal(size=(5, 3)).astype(np.float32)
    U = rng.normal(size=3).astype(np.float32)
    r = np.array([3.0, 4.0], dtype=np.float32)
    kw = dict(t=0, lr=0.1, lam=0.01, backend=backend)
    for bad in ([1, 5], [1, 7]):
        with pytest.raises(IndexError):
            pmf_sgd_client_step(U, V, np.array(bad), r, **kw)
        with pytest.raises(IndexError):
            svdpp_sgd_client_step(U, V, O, np.array(bad), r, **kw)
        with pytest.raises(IndexError):
            SGDClient(np.array(bad), r, np.float32, backend=backend).call(U, V, None, 0, 0.1)
        with pytest.raises(IndexError):
            pmf_sgd_client_step(U, V, np.array([1, 2]), r, sampled=np.array(bad[1:]), **kw)
        with pytest.raises(IndexError):
            virtual_ratings_hf_sgd(U, V, np.array(bad), r, np.array([0]), 0.1, 0.01, 2, backend=backend)
    a = pmf_sgd_client_step(U, V, np.array([1, -1]), r, **kw)
    b = pmf_sgd_client_step(U, V, np.array([1, 4]), r, **kw)
    np.testing.assert_array_equal(a.U, b.U)
    np.testing.assert_array_equal(a.grads, b.grads)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("lr", [1e40, 1e300, 1e6])
def test_python_kernels_diverge_as_quietly_as_compiled(dt, lr, monkeypatch):
    """A diverging call (a rate beyond the dtype, or parameters that overflow): the compiled
    kernels are silent; the Python ones printed NumPy's overflow and invalid-value warnings
    (every client of a run, before the server stopped it as diverged). Now both are silent and
    give the same bits, NaN and inf included."""
    import warnings

    from fedsim.math.filling import virtual_ratings_hf
    from fedsim.math.pmf import pmf_batch_client, pmf_sgd_client_step

    rng = np.random.default_rng(4)
    big = 1e18 if dt == np.float32 else 1e150  # (lr 1e6: a finite rate, products beyond the dtype)
    V = (rng.normal(size=(30, 6)) * big).astype(dt)
    O = (rng.normal(size=(30, 6)) * big).astype(dt)
    U = (rng.normal(size=6) * big).astype(dt)
    rated = np.array([3, 7, 1, 22, 9, 14, 5], dtype=np.int32)
    r = rng.integers(1, 6, 7).astype(dt)
    sampled = np.array([0, 29, 11, 12], dtype=np.int32)

    def calls(backend):
        out = []
        for strategy in ("ua", "hf"):
            kw = dict(t=9, T_predict=3, T_local=4, strategy=strategy, lr=lr, lam=0.01, sampled=sampled, backend=backend)
            for up in (pmf_sgd_client_step(U, V, rated, r, **kw), svdpp_sgd_client_step(U, V, O, rated, r, **kw)):
                out += [a for a in up[:4] if a is not None]
        return out

    def batch():
        return [*pmf_batch_client(U, V[rated], r, lr, 0.01), *pmf_batch_client(U, V[rated], r, lr, 0.01, order="paper"),
                virtual_ratings_hf(U, V[rated], r, V[sampled], lr, 0.01, 4)]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        python = calls("python")
        with monkeypatch.context() as m:
            m.setattr(K, "compiled", lambda: None)  # the NumPy batch step and hybrid filling
            numpy_batch = batch()
        compiled_batch = batch()  # (compiled with numba: the rate cast was not quiet)
        compiled = calls("numba") if K.numba_available() else python
    assert not all(np.isfinite(a).all() for a in python)
    assert not np.isfinite(numpy_batch[0]).all() and not np.isfinite(numpy_batch[-1]).all()
    for x, y in zip(python, compiled, strict=True):
        np.testing.assert_array_equal(x, y)
    for x, y in zip(numpy_batch, compiled_batch, strict=True):
        np.testing.assert_array_equal(x, y)
