"""The Joint baseline's sparse step (``ae_train._SparseJoint`` on ``joint_kernels``) against the NumPy
step it replaces (``ae.loss_and_grads`` + ``optim.clip_grad_norm`` + ``optim.adam_step``): each kernel
against its dense NumPy expression, and ``train_joint`` with ``sparse=True`` against ``sparse=False``.
Not bit-identical (the products summed in another order, the clipping norm in float64), so the
comparison is to float rounding: 1e-10 relative in float64; in float32 the sparse path must be no
further from the float64 run than a small multiple of the NumPy float32 run's distance."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.math import ae_train, joint_kernels, optim
from fedsim.math import autoencoder as ae

COMPILED = joint_kernels.compiled()
needs_numba = pytest.mark.skipif(COMPILED is None, reason="numba (the 'fast' extra) is not installed")
KERNELS = [pytest.param(joint_kernels.python(), id="python"),
           pytest.param(COMPILED, id="compiled", marks=needs_numba)]


def _csr(dense, where):
    r, c = np.nonzero(where)
    ptr = np.zeros(dense.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=dense.shape[0]), out=ptr[1:])
    return ptr, c.astype(np.int64), np.ascontiguousarray(dense[r, c])


def _sparse(rng, shape, density=0.2, dtype=np.float64):
    where = rng.random(shape) < density
    where[3] = False  # an empty row
    return np.where(where, rng.standard_normal(shape), 0.0).astype(dtype), where


ROWS = np.array([0, 2, 3, 5, 6, 9], dtype=np.int64)  # a batch: some rows, one of them empty


@pytest.mark.parametrize("K", KERNELS)
def test_sparse_products_equal_the_dense_expressions(K):
    rng = np.random.default_rng(0)
    X, where = _sparse(rng, (10, 30))
    ptr, idx, val = _csr(X, where)
    WT = rng.standard_normal((30, 7))
    out = np.full((len(ROWS), 7), np.nan)
    K.csr_matmul(ptr, idx, val, ROWS, WT, out)
    np.testing.assert_allclose(out, X[ROWS] @ WT, rtol=1e-13, atol=1e-14)
    G = rng.standard_normal((len(ROWS), 7))
    acc0 = rng.standard_normal((30, 7))
    acc = acc0.copy()
    K.csr_t_matmul_add(ptr, idx, val, ROWS, G, acc)
    np.testing.assert_allclose(acc, acc0 + X[ROWS].T @ G, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("K", KERNELS)
def test_masked_output_products_equal_the_dense_expressions(K):
    rng = np.random.default_rng(1)
    _, mask = _sparse(rng, (10, 30))
    ptr, idx, _ = _csr(np.zeros((10, 30)), mask)
    H = rng.standard_normal((len(ROWS), 7))
    W, b = rng.standard_normal((30, 7)), rng.standard_normal(30)
    z = np.full(len(idx), np.nan)
    K.masked_matmul(ptr, idx, ROWS, H, W, b, z, 0.0)
    m = mask[ROWS]
    dense = H @ W.T + b
    in_batch = np.concatenate([np.arange(ptr[r], ptr[r + 1]) for r in ROWS])
    np.testing.assert_allclose(z[in_batch], dense[m], rtol=1e-13, atol=1e-14)
    assert np.isnan(np.delete(z, in_batch)).all()  # entries of rows outside the batch untouched
    # the backward products of a gradient given at the masked entries
    g = rng.standard_normal(len(idx))
    Gd = np.zeros((len(ROWS), 30))
    Gd[m] = g[in_batch]
    dH = np.full((len(ROWS), 7), np.nan)
    dW0, db0 = rng.standard_normal((30, 7)), rng.standard_normal(30)
    dW, db = dW0.copy(), db0.copy()
    K.masked_backward(ptr, idx, ROWS, g, W, H, dH, dW, db)
    np.testing.assert_allclose(dH, Gd @ W, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(dW, dW0 + Gd.T @ H, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(db, db0 + Gd.sum(axis=0), rtol=1e-13, atol=1e-14)
    a = rng.standard_normal(50).astype(np.float32)
    assert K.sumsq(a) == pytest.approx(float(np.sum(a.astype(np.float64) ** 2)), rel=1e-14)


@pytest.mark.parametrize("K", KERNELS)
@pytest.mark.parametrize("bce", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_masked_loss_and_gradient(K, bce, dtype):
    rng = np.random.default_rng(2)
    _, mask = _sparse(rng, (10, 30))
    ptr, idx, _ = _csr(np.zeros((10, 30)), mask)
    z = (rng.standard_normal(len(idx)) * 3).astype(dtype)
    y = (rng.random(len(idx)) < 0.5).astype(dtype) if bce else rng.integers(1, 6, len(idx)).astype(dtype)
    gscale = 0.37
    pt = np.array([1.0, 0.0, gscale], dtype=dtype)
    g = np.full(len(idx), np.nan, dtype=dtype)
    value = K.masked_loss_grad(ptr, y, ROWS, z, g, pt, bce)
    sel = np.concatenate([np.arange(ptr[r], ptr[r + 1]) for r in ROWS])
    zs, ys = z[sel].astype(np.float64), y[sel].astype(np.float64)
    if bce:
        ref = np.sum(np.maximum(zs, 0) - ys * zs + np.log1p(np.exp(-np.abs(zs))))
        ref_g = (1.0 / (1.0 + np.exp(-zs)) - ys) * gscale
    else:
        ref = np.sum((zs - ys) ** 2)
        ref_g = (zs - ys) * gscale
    rtol = 1e-12 if dtype == np.float64 else 3e-6
    assert value == pytest.approx(ref, rel=rtol)
    np.testing.assert_allclose(g[sel], ref_g, rtol=rtol, atol=rtol)
    assert np.isnan(np.delete(g, sel)).all()


@pytest.mark.parametrize("K", KERNELS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("wd,clip", [(5e-4, 1.0), (0.0, 1.0), (5e-4, 1e6)])
def test_adam_update_is_adam_steps_bits(K, dtype, wd, clip):
    """Given the same gradient, adam_update gives optim.clip_grad_norm + optim.adam_step's bits."""
    rng = np.random.default_rng(3)
    p = {"a": rng.standard_normal(40).astype(dtype)}
    ref_p = {"a": p["a"].copy()}
    state = optim.adam_init(ref_p)
    m, v = np.zeros(40, dtype), np.zeros(40, dtype)
    pt = np.zeros(joint_kernels.A_COEF + 1, dtype=dtype)
    for t in range(1, 4):
        g = (rng.standard_normal(40) * 0.5).astype(dtype)
        ref_g = {"a": g.copy()}
        norm, _ = optim.clip_grad_norm(ref_g, clip)
        optim.adam_step(ref_p, ref_g, state, lr=1e-2, weight_decay=wd)
        coef = clip / (norm + 1e-6)  # (the norm as NumPy adds it up: the same coefficient)
        pt[:] = [wd, 0.9, 1 - 0.9, 0.999, 1 - 0.999, np.sqrt(1 - 0.999 ** t), 1e-8, 1e-2 / (1 - 0.9 ** t), coef]
        K.adam_update(p["a"], g, m, v, pt, coef < 1.0, bool(wd))
        assert (clip == 1.0) == (coef < 1.0)
        assert np.array_equal(p["a"], ref_p["a"]) and np.array_equal(m, state["m.a"]) and np.array_equal(v, state["v.a"])
        assert not g.any()  # cleared for the next step's accumulation


# ------------------------------------------------------------------------------------ whole runs


def _task(task, dtype, seed=4, nu=40, ni=60, junk=False):
    """A small AETask; ``junk``: huge input values at entries the mask leaves out, and masked entries
    whose value is 0 (a loss that read the output off the mask, or took the inputs' non-zeros for the
    mask, would differ)."""
    rng = np.random.default_rng(seed)
    mask = rng.random((nu, ni)) < 0.12
    mask[7] = False  # a user without training entries
    vals = rng.integers(1, 6, (nu, ni)).astype(np.float64)
    u, i = np.nonzero(mask)
    te = rng.random(len(u)) < 0.2
    train = (u[~te], i[~te], vals[u[~te], i[~te]])
    test = (u[te], i[te], vals[u[te], i[te]])
    t = ae_train.prepare(train, test, nu, ni, task=task, dtype=dtype)
    if junk:
        off = (~t.mask) & (rng.random((nu, ni)) < 0.03)
        t.x[off] = 1e4
        t.x[t.mask & (rng.random((nu, ni)) < 0.2)] = 0.0
    return t


def _run(t, dtype, sparse, epochs=4, hidden=(16, 8), **kw):
    return ae_train.train_joint(t, epochs=epochs, rng=np.random.default_rng(5), batch=16, hidden=hidden,
                                dtype=dtype, eval_every=2, lr=3e-3, sparse=sparse, **kw)


def _rel(a, b):
    return max(float(np.max(np.abs(a[k].astype(np.float64) - b[k]))) / float(np.max(np.abs(b[k])) or 1.0) for k in b)


def _assert_history_close(h1, h2, rtol):
    assert [h["epoch"] for h in h1] == [h["epoch"] for h in h2]
    for a, b in zip(h1, h2):
        assert a["n"] == b["n"]
        for key in ("loss", "rmse", "ndcg"):
            if key in a:
                assert a[key] == pytest.approx(b[key], rel=rtol)


@needs_numba
@pytest.mark.parametrize("task", ["explicit", "implicit"])
@pytest.mark.parametrize("junk", [False, True])
def test_sparse_train_joint_equals_numpy_float64(task, junk):
    t = _task(task, np.float64, junk=junk)
    ref, new = _run(t, np.float64, False), _run(t, np.float64, True)
    assert new.flops == ref.flops and new.epochs == ref.epochs
    assert _rel(new.params, ref.params) < 1e-10
    assert all(new.params[k].flags.c_contiguous and new.params[k].shape == ref.params[k].shape for k in ref.params)
    _assert_history_close(new.history, ref.history, 1e-10)
    if junk:  # the huge inputs are in the data, but no loss term reads them
        assert all(h["loss"] < 100 for h in new.history)


@needs_numba
@pytest.mark.parametrize("task", ["explicit", "implicit"])
def test_sparse_train_joint_float32_as_close_to_float64_as_numpy(monkeypatch, task):
    """The float32 runs' parameters after training against the float64 NumPy run's, as a fraction of
    how far training moved them: the sparse path's distance at most 3x the NumPy path's (measured:
    about 1x, both ~8e-7 after 6 epochs, dominated by the rounding of the parameters Adam writes,
    which is the same in both; a wrong term in a product shows as 1e-3 or more). The float64 runs
    start from the float32 initial values, so that only the training's arithmetic differs."""
    init = ae.init_params
    monkeypatch.setattr(ae, "init_params", lambda *a, dtype, **kw: {
        k: v.astype(dtype) for k, v in init(*a, dtype=np.float32, **kw).items()})
    t64, t32 = _task(task, np.float64), _task(task, np.float32)
    ref64, start = _run(t64, np.float64, False, epochs=6), _run(t64, np.float64, False, epochs=0)
    ref32, new32 = _run(t32, np.float32, False, epochs=6), _run(t32, np.float32, True, epochs=6)

    def dist(a):
        num = sum(float(np.sum((a[k].astype(np.float64) - ref64.params[k]) ** 2)) for k in a)
        return np.sqrt(num / sum(float(np.sum((ref64.params[k] - start.params[k]) ** 2)) for k in a))

    d_ref, d_new = dist(ref32.params), dist(new32.params)
    assert 0 < d_ref < 1e-5
    assert d_new <= 3 * d_ref
    assert new32.flops == ref32.flops
    _assert_history_close(new32.history, ref64.history, 1e-5)


def test_without_numba_train_joint_is_the_numpy_path(monkeypatch):
    t = _task("implicit", np.float64)
    ref = _run(t, np.float64, False, epochs=2)
    monkeypatch.setattr(joint_kernels, "compiled", lambda: None)
    new = _run(t, np.float64, True, epochs=2)
    assert all(np.array_equal(new.params[k], ref.params[k]) for k in ref.params)
    assert new.history == ref.history and new.flops == ref.flops


def test_other_model_shapes_train_on_the_numpy_path():
    t = _task("explicit", np.float64)
    ref, new = (_run(t, np.float64, s, epochs=2, hidden=(16,)) for s in (False, True))
    assert all(np.array_equal(new.params[k], ref.params[k]) for k in ref.params) and new.history == ref.history


@pytest.mark.parametrize("task", ["explicit", "implicit"])
def test_python_kernels_train_as_the_numpy_path(monkeypatch, task):
    """The sparse step on the kernels' plain-Python copy (what the compiled one is compiled from)."""
    t = _task(task, np.float64, nu=20, ni=25)
    ref = _run(t, np.float64, False, epochs=2)
    monkeypatch.setattr(joint_kernels, "compiled", joint_kernels.python)
    new = _run(t, np.float64, True, epochs=2)
    assert _rel(new.params, ref.params) < 1e-10
    _assert_history_close(new.history, ref.history, 1e-10)


def test_adam_flops_is_what_adam_step_counts():
    from fedsim.math import optim

    params = {"w": np.zeros((3, 4)), "b": np.zeros(5)}
    grads = {k: np.ones_like(v) for k, v in params.items()}
    for wd in (0.0, 1e-3):
        counted = optim.adam_step(params, grads, optim.adam_init(params), weight_decay=wd)
        assert counted == optim.adam_flops(17, weight_decay=wd) == (14 if wd else 12) * 17


@pytest.mark.parametrize("sparse", [pytest.param(True, marks=needs_numba), False])
def test_train_joint_stops_after_the_epoch_its_parameters_are_not_finite(sparse):
    # it trained every epoch on NaN parameters, with NumPy's overflow warnings, and its history was
    # NaN RMSEs with nothing saying the model diverged
    import warnings

    t = _task("explicit", np.float32)
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = ae_train.train_joint(t, epochs=5, rng=np.random.default_rng(5), batch=16, hidden=(16, 8),
                                   dtype=np.float32, eval_every=1, lr=1e30, sparse=sparse,
                                   callback=lambda e, ev: seen.append((e, ev)))
    assert res.diverged_at == 1 == res.epochs and res.history == [] and seen == [(1, None)]
    assert not all(np.isfinite(v).all() for v in res.params.values())
    ok = ae_train.train_joint(t, epochs=3, rng=np.random.default_rng(5), batch=16, hidden=(16, 8), dtype=np.float32,
                              eval_every=1, lr=1e15, sparse=sparse)  # blown up, but finite: figures, not divergence
    assert ok.diverged_at is None and ok.epochs == 3 and [h["epoch"] for h in ok.history] == [1, 2, 3]
    assert all(np.isfinite(h["rmse"]) and h["rmse"] > 1e13 for h in ok.history)
