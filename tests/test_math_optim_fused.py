"""The fused SGD loop (``fedsim.math.optim_kernels``) against ``optim.sgd_step``'s NumPy expressions:
bit for bit, for every switch, both float dtypes, with and without the clipping coefficient folded in."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fedsim.math import ae_train, optim, optim_kernels
from fedsim.math import autoencoder as ae

COMPILED = optim_kernels.compiled()


def _case(dtype, seed=0):
    rng = np.random.default_rng(seed)
    params = {"w": rng.standard_normal((7, 5)).astype(dtype), "b": rng.standard_normal(5).astype(dtype),
              "z": np.zeros(3, dtype=dtype),
              # a cut encoder's layout (W[:, items] is column-major) and a strided view: the 2-D loop
              "f": np.asfortranarray(rng.standard_normal((6, 4)).astype(dtype)),
              "s": rng.standard_normal((5, 8)).astype(dtype)[:, ::2]}
    grads = {k: rng.standard_normal(v.shape).astype(dtype) * 3 for k, v in params.items()}
    grads["z"][:] = [0.0, -0.0, 1e-30]  # signed zeros and a tiny value on zero weights
    return params, grads


def _numpy_reference(params, grads, state, *, coef, **kw):
    """The step as it was before the fused loop: clip_grad_norm's in-place scaling, then NumPy."""
    grads = {k: v.copy() for k, v in grads.items()}
    if coef is not None:
        for g in grads.values():
            g *= coef
    return optim.sgd_step(params, grads, state, kernel="numpy", **kw)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("backend", ["python", "numba"])
def test_fused_step_is_bit_identical_to_numpy(dtype, backend, monkeypatch):
    if backend == "numba" and COMPILED is None:
        pytest.skip("numba (the 'fast' extra) is not installed")
    monkeypatch.setattr(optim, "_fused", (lambda: COMPILED) if backend == "numba" else optim_kernels.python)
    for momentum, nesterov, wd, coef in itertools.product((0.0, 0.9), (False, True), (0.0, 5e-4), (None, 0.37)):
        if nesterov and not momentum:
            continue
        kw = dict(lr=0.1, momentum=momentum, nesterov=nesterov, weight_decay=wd)
        p_ref, g = _case(dtype)
        p_new = {k: v.copy() for k, v in p_ref.items()}
        s_ref, s_new = optim.sgd_init(p_ref), optim.sgd_init(p_new)
        for step in range(3):  # several steps: the momentum buffers are carried
            f_ref = _numpy_reference(p_ref, g, s_ref, coef=coef, **kw)
            g_before = {k: v.copy() for k, v in g.items()}
            f_new = optim.sgd_step(p_new, g, s_new, grad_scale=coef, **kw)
            assert f_new == f_ref
            for k in p_ref:
                assert p_new[k].dtype == dtype
                assert p_new[k].tobytes() == p_ref[k].tobytes(), (k, step, momentum, nesterov, wd, coef)
                assert s_new[f"momentum.{k}"].tobytes() == s_ref[f"momentum.{k}"].tobytes()
                assert g[k].tobytes() == g_before[k].tobytes()  # the gradients are not written to


def test_layouts_choose_the_loop():
    p, g = _case(np.float32)
    st = optim.sgd_init(p)
    assert [optim._fusable(p[k], g[k], st[f"momentum.{k}"]) for k in ("w", "b", "f", "s")] == [1, 1, 2, 2]
    assert not p["f"].flags.c_contiguous and st["momentum.f"].flags.f_contiguous
    assert optim._fusable(p["b"], g["b"].astype(np.float64), st["momentum.b"]) == 0
    ro = p["w"].copy()
    ro.flags.writeable = False
    assert optim._fusable(ro, g["w"], st["momentum.w"]) == 0


def test_numpy_path_gives_the_same_with_grad_scale():
    p_ref, g = _case(np.float32, seed=1)
    p_new = {k: v.copy() for k, v in p_ref.items()}
    s_ref, s_new = optim.sgd_init(p_ref), optim.sgd_init(p_new)
    kw = dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    _numpy_reference(p_ref, g, s_ref, coef=0.25, **kw)
    optim.sgd_step(p_new, g, s_new, grad_scale=0.25, kernel="numpy", **kw)
    for k in p_ref:
        assert p_new[k].tobytes() == p_ref[k].tobytes()


def test_unfusable_arrays_fall_back_to_numpy():
    # a non-contiguous parameter, a float64 gradient on float32 weights and a restricted key
    p = {"w": np.ones((4, 6), dtype=np.float32)[:, ::2], "v": np.ones(3, dtype=np.float32),
         "r": np.arange(8, dtype=np.float32).reshape(4, 2)}
    g = {"w": np.full((4, 3), 0.5, dtype=np.float32), "v": np.full(3, 0.5), "r": np.ones((4, 2), dtype=np.float32)}
    p_ref = {k: v.copy() for k, v in p.items()}
    s, s_ref = optim.sgd_init(p), optim.sgd_init(p_ref)
    kw = dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, restrict={"r": np.array([1, 3])})
    optim.sgd_step(p, g, s, **kw)
    optim.sgd_step(p_ref, g, s_ref, kernel="numpy", **kw)
    for k in p:
        assert p[k].tobytes() == p_ref[k].tobytes()
    assert np.array_equal(p["r"][[0, 2]], np.array([[0, 1], [4, 5]], dtype=np.float32))  # restricted rows kept


def test_kernel_name_is_checked():
    p, g = _case(np.float32)
    with pytest.raises(ValueError, match="kernel"):
        optim.sgd_step(p, g, optim.sgd_init(p), lr=0.1, kernel="fast")


def test_clip_coef_matches_clip_grad_norm():
    _, g = _case(np.float64, seed=2)
    norm, coef, flops = optim.clip_coef(g, 1.0)
    g2 = {k: v.copy() for k, v in g.items()}
    norm2, flops2 = optim.clip_grad_norm(g2, 1.0)
    assert (norm, flops) == (norm2, flops2)
    assert coef == pytest.approx(1.0 / (norm + 1e-6), rel=1e-15)
    for k in g:
        assert np.array_equal(g2[k], g[k] * coef)
    assert optim.clip_coef(g, 1e9)[1] is None


def test_local_train_unchanged_by_the_fused_step(monkeypatch):
    """A client's local training (dropout, clipping, Nesterov, weight decay) gives the same bits with
    the fused step as with clip_grad_norm and NumPy's step."""
    rng = np.random.default_rng(4)
    n_items, users = 30, 12
    x = (rng.random((users, n_items)) < 0.3) * rng.integers(1, 6, (users, n_items))
    x = x.astype(np.float32)
    mask = x > 0
    runs = []
    for fused in (True, False):
        if not fused:
            real = optim.sgd_step

            def numpy_step(params, grads, state, grad_scale=None, **kw):
                if grad_scale is not None:
                    for v in grads.values():
                        v *= grad_scale
                return real(params, grads, state, kernel="numpy", **kw)
            monkeypatch.setattr(optim, "sgd_step", numpy_step)
        params = ae.init_params(n_items, np.random.default_rng(0), (8, 4))
        state = optim.sgd_init(params)
        res = ae_train.local_train(params, state, x, x, mask, epochs=3, batch=5, lr=0.5,
                                   rng=np.random.default_rng(1), clip=0.1, dropout=0.5)
        runs.append((res, {k: v.tobytes() for k, v in params.items()}))
        monkeypatch.undo()
    (r1, p1), (r2, p2) = runs
    assert r1 == r2 and p1 == p2
