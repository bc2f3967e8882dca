"""PersonalFR math floor: autoencoder forward/backward, optimisers, active parameters, Eq. 5 merge."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsim.math import active as act
from fedsim.math import autoencoder as ae
from fedsim.math import optim

N_ITEMS = 7
HIDDEN = (5, 3)


def _batch(rng, n_users, n_items, density=0.5, loss="mse"):
    """Ratings 1..5 on a random subset; input = training row, target = observed entries (AutoRec)."""
    mask = rng.random((n_users, n_items)) < density
    mask[:, 0] = True  # at least one rating per user
    ratings = rng.integers(1, 6, size=(n_users, n_items)).astype(np.float64) * mask
    target = ratings if loss == "mse" else (ratings >= 3.5).astype(np.float64)
    return ratings, target, mask


# ------------------------------------------------------------------------------------------ parameters


def test_init_shapes_naming_xavier_and_zero_biases():
    p = ae.init_params(1682, np.random.default_rng(0))
    assert list(p) == ["enc.W1", "enc.b1", "enc.W2", "enc.b2", "dec.W1", "dec.b1", "dec.W2", "dec.b2"]
    shapes = {k: v.shape for k, v in p.items()}
    assert shapes == {
        "enc.W1": (256, 1682), "enc.b1": (256,), "enc.W2": (128, 256), "enc.b2": (128,),
        "dec.W1": (256, 128), "dec.b1": (256,), "dec.W2": (1682, 256), "dec.b2": (1682,),
    }
    assert all(v.dtype == np.float32 for v in p.values())
    for k, v in p.items():
        if ".b" in k:
            assert not v.any()
        else:
            bound = math.sqrt(6.0 / sum(v.shape))
            assert np.abs(v).max() <= bound and np.abs(v).max() > 0.9 * bound
            assert abs(float(v.std()) - bound / math.sqrt(3)) < 0.02 * bound
    assert ae.output_keys(p) == ("dec.W2", "dec.b2")
    assert ae.layer_sizes(p) == ([1682, 256, 128], [128, 256, 1682])
    again = ae.init_params(1682, np.random.default_rng(0))
    assert all(np.array_equal(p[k], again[k]) for k in p)
    enc, dec = ae.encoder_of(p), ae.decoder_of(p)
    assert set(enc) == {"enc.W1", "enc.b1", "enc.W2", "enc.b2"} and set(dec).isdisjoint(enc)
    assert ae.join(enc, dec).keys() == p.keys()
    with pytest.raises(ValueError):
        ae.join(enc, enc)


def test_float64_selectable_and_float32_default_close():
    rng = np.random.default_rng(1)
    p64 = ae.init_params(N_ITEMS, np.random.default_rng(2), HIDDEN, dtype=np.float64)
    p32 = {k: v.astype(np.float32) for k, v in p64.items()}
    x, y, m = _batch(rng, 4, N_ITEMS)
    r64 = ae.loss_and_grads(p64, x, y, m)
    r32 = ae.loss_and_grads(p32, x, y, m)
    assert all(g.dtype == np.float64 for g in r64.grads.values())
    assert all(g.dtype == np.float32 for g in r32.grads.values())
    assert r32.loss == pytest.approx(r64.loss, rel=1e-5)
    for k in p64:
        np.testing.assert_allclose(r32.grads[k], r64.grads[k], rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------------------- grad check


def _numeric_grads(params, f, h=1e-6):
    num = {}
    for k, v in params.items():
        g = np.zeros_like(v)
        for idx in np.ndindex(v.shape):
            old = v[idx]
            v[idx] = old + h
            plus = f()
            v[idx] = old - h
            minus = f()
            v[idx] = old
            g[idx] = (plus - minus) / (2 * h)
        num[k] = g
    return num


def _rel_err(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(a) + np.linalg.norm(b), 1e-12))


@pytest.mark.parametrize("loss", ["mse", "bce"])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"dropout": 0.5},
        {"reduction": "sum"},
        {"out_rows": "rated", "in_cols": "nonzero", "dropout": 0.3},
    ],
    ids=["plain", "dropout", "sum", "sparse"],
)
def test_gradient_check_float64(loss, options):
    rng = np.random.default_rng(3)
    params = ae.init_params(N_ITEMS, rng, HIDDEN, dtype=np.float64)
    # a decoder deeper than the default too: hidden layers [5, 4, 3] / [3, 4, 5]
    x, y, m = _batch(rng, 4, N_ITEMS, loss=loss)
    m[:, N_ITEMS - 1] = False  # an item nobody rated (out_rows="rated" leaves it out)
    x[:, N_ITEMS - 1] = 0.0
    seed = 11

    def run():
        return ae.loss_and_grads(params, x, y, m, loss=loss, rng=np.random.default_rng(seed), **options)

    res = run()
    num = _numeric_grads(params, lambda: run().loss)
    for k in params:
        assert res.grads[k].shape == params[k].shape
        assert _rel_err(num[k], res.grads[k]) <= 1e-4, k
    flat = lambda d: np.concatenate([d[k].ravel() for k in params])  # noqa: E731
    assert _rel_err(flat(num), flat(res.grads)) <= 1e-6


@pytest.mark.parametrize("loss", ["mse", "bce"])
def test_gradient_check_deeper_model(loss):
    rng = np.random.default_rng(4)
    params = ae.init_params(6, rng, (5, 4, 3), dtype=np.float64)
    assert ae.layer_sizes(params) == ([6, 5, 4, 3], [3, 4, 5, 6])
    x, y, m = _batch(rng, 3, 6, loss=loss)
    res = ae.loss_and_grads(params, x, y, m, loss=loss)
    num = _numeric_grads(params, lambda: ae.loss_and_grads(params, x, y, m, loss=loss).loss)
    for k in params:
        assert _rel_err(num[k], res.grads[k]) <= 1e-4, k


def test_loss_values_and_masking():
    rng = np.random.default_rng(5)
    params = ae.init_params(N_ITEMS, rng, HIDDEN, dtype=np.float64)
    x, y, m = _batch(rng, 4, N_ITEMS)
    z = ae.predict(params, x)
    res = ae.loss_and_grads(params, x, y, m)
    assert res.n_rated == m.sum()
    assert res.loss == pytest.approx(float(np.mean((z - y)[m] ** 2)))
    assert ae.masked_loss(params, x, y, m) == pytest.approx(res.loss)
    yb = (y >= 3.5).astype(float)
    bce = ae.loss_and_grads(params, x, yb, m, loss="bce")
    p = 1 / (1 + np.exp(-z))
    expected = -np.mean((yb * np.log(p) + (1 - yb) * np.log(1 - p))[m])
    assert bce.loss == pytest.approx(expected)
    # unrated targets are ignored entirely
    y2 = y + 100.0 * ~m
    res2 = ae.loss_and_grads(params, x, y2, m)
    assert res2.loss == res.loss
    assert all(np.array_equal(res.grads[k], res2.grads[k]) for k in params)
    # output rows nobody rated get exactly zero gradient
    unrated = ~m.any(axis=0)
    assert unrated.any()
    assert not res.grads["dec.W2"][unrated].any() and not res.grads["dec.b2"][unrated].any()
    # predict on a subset of rows = those columns of the full prediction
    rows = np.array([1, 4])
    np.testing.assert_allclose(ae.predict(params, x, out_rows=rows), z[:, rows], rtol=1e-12)
    # empty batch: zero loss, zero gradients
    empty = ae.loss_and_grads(params, x, y, np.zeros_like(m))
    assert empty.loss == 0.0 and not any(g.any() for g in empty.grads.values())


def test_out_rows_must_cover_the_rated_entries():
    rng = np.random.default_rng(6)
    params = ae.init_params(N_ITEMS, rng, HIDDEN)
    x, y, m = _batch(rng, 2, N_ITEMS)
    with pytest.raises(ValueError):
        ae.loss_and_grads(params, x, y, m, out_rows=[1])
    with pytest.raises(ValueError):
        ae.loss_and_grads(params, x, y, m, dropout=0.5)  # no rng
    with pytest.raises(ValueError):
        ae.loss_and_grads(params, x, y, m, out_rows=[0, 0, 1, 2, 3, 4, 5, 6])  # duplicates
    with pytest.raises(ValueError):
        ae.loss_and_grads(params, x, y, m, out_rows="nonzero")
    with pytest.raises(ValueError):
        ae.predict(params, x, out_rows="rated")


def test_flops_counted_as_executed():
    rng = np.random.default_rng(7)
    n, hid = 50, (8, 4)
    params = ae.init_params(n, rng, hid)
    x, y, m = _batch(rng, 3, n, density=0.1)
    full = ae.loss_and_grads(params, x, y, m)
    sparse = ae.loss_and_grads(params, x, y, m, out_rows="rated", in_cols="nonzero")
    r_out = int(m.any(axis=0).sum())
    r_in = int((x != 0).any(axis=0).sum())
    B = 3
    matmul_full = 2 * B * (n * 8 + 8 * 4 + 4 * 8 + 8 * n) * 2 + 2 * B * (8 * 4 + 4 * 8 + 8 * n)
    assert full.flops == ae.train_flops([n, 8, 4], [4, 8, n], B)
    assert sparse.flops == ae.train_flops([r_in, 8, 4], [4, 8, r_out], B)
    assert matmul_full < full.flops < 1.2 * matmul_full
    assert sparse.flops < full.flops
    assert ae.predict_flops([n, 8, 4], [4, 8, n], B) < full.flops / 2


# ------------------------------------------------------------------------------------------ optimisers


def test_sgd_nesterov_weight_decay_matches_hand_computation():
    p = {"w": np.array([1.0, -2.0])}
    g = {"w": np.array([0.5, 0.25])}
    st = optim.sgd_init(p)
    lr, mu, wd = 0.1, 0.9, 0.01
    flops = optim.sgd_step(p, g, st, lr=lr, momentum=mu, nesterov=True, weight_decay=wd)
    d1 = np.array([0.5 + 0.01, 0.25 - 0.02])
    buf1 = d1
    p1 = np.array([1.0, -2.0]) - lr * (d1 + mu * buf1)
    np.testing.assert_allclose(p["w"], p1, rtol=1e-15)
    optim.sgd_step(p, g, st, lr=lr, momentum=mu, nesterov=True, weight_decay=wd)
    d2 = np.array([0.5, 0.25]) + wd * p1
    buf2 = mu * buf1 + d2
    np.testing.assert_allclose(p["w"], p1 - lr * (d2 + mu * buf2), rtol=1e-15)
    np.testing.assert_allclose(st["momentum.w"], buf2, rtol=1e-15)
    assert flops == 2 * (2 + 4 + 2)


def test_adam_matches_hand_computation():
    p = {"w": np.array([1.0, -1.0])}
    g = {"w": np.array([0.3, -0.1])}
    st = optim.adam_init(p)
    w = p["w"].copy()
    m = np.zeros(2)
    v = np.zeros(2)
    for t in (1, 2, 3):
        optim.adam_step(p, g, st, lr=0.01, weight_decay=0.1)
        gt = g["w"] + 0.1 * w
        m = 0.9 * m + 0.1 * gt
        v = 0.999 * v + 0.001 * gt * gt
        w = w - 0.01 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
        np.testing.assert_allclose(p["w"], w, rtol=1e-12)
    assert int(st["step"]) == 3


def test_clip_and_cosine():
    g = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]])}
    norm, _ = optim.clip_grad_norm(g, 1.0)
    assert norm == pytest.approx(5.0)
    assert optim.grad_norm(g) == pytest.approx(1.0, rel=1e-6)
    small = {"a": np.array([0.3])}
    optim.clip_grad_norm(small, 1.0)
    assert small["a"][0] == 0.3
    assert optim.grad_norm(g, exact=True) == pytest.approx(optim.grad_norm(g), rel=1e-15)
    assert optim.cosine_lr(0.1, 0, 10) == 0.1
    assert optim.cosine_lr(0.1, 5, 10) == pytest.approx(0.05)
    assert optim.cosine_lr(0.1, 10, 10, min_lr=0.001) == pytest.approx(0.001)


def test_grad_norm_does_not_overflow_on_finite_float32_gradients():
    """float32 elements near 1e20: their squares overflow float32, so np.dot gave inf and the norm was
    inf (the clipping factor then 0: a no-op step). Now finite, equal to float64 numpy.linalg.norm."""
    rng = np.random.default_rng(11)
    g = {"w": (rng.standard_normal((6, 5)) * 1e20).astype(np.float32),
         "b": (rng.standard_normal(5) * 3e19).astype(np.float32)}
    assert np.isfinite(g["w"]).all() and np.isfinite(g["b"]).all()
    ref = float(np.linalg.norm(np.concatenate([v.astype(np.float64).ravel() for v in g.values()])))
    assert 1e20 < ref < 1e22
    assert optim.grad_norm(g) == pytest.approx(ref, rel=1e-14, abs=0)
    assert optim.grad_norm(g, exact=True) == pytest.approx(ref, rel=1e-15, abs=0)
    # float64 squares overflow past ~1.3e154: the same recovery
    big = {"w": np.array([3e200, -4e200]), "b": np.array([[0.0]])}
    assert optim.grad_norm(big) == pytest.approx(5e200, rel=1e-15, abs=0)
    assert optim.grad_norm(big, exact=True) == pytest.approx(5e200, rel=1e-15, abs=0)
    # clipping scales to max_norm (it scaled by 0 = clip / inf)
    norm, _ = optim.clip_grad_norm(g, 1.0)
    assert norm == pytest.approx(ref, rel=1e-14, abs=0)
    assert optim.grad_norm(g) == pytest.approx(1.0, rel=1e-5, abs=0)
    # non-finite elements still give inf / NaN
    for bad, want in ((np.inf, math.inf), (np.nan, math.nan)):
        h = {"w": np.array([1e20, bad], dtype=np.float32), "b": np.array([1e20], dtype=np.float32)}
        got = optim.grad_norm(h)
        assert got == want or (math.isnan(want) and math.isnan(got))
    # ordinary gradients: the same bits as the float32 dot products added up as before
    o = {"w": rng.standard_normal((9, 4)).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32)}
    before = math.sqrt(sum(float(np.dot(v.ravel(), v.ravel())) for v in o.values()))
    assert optim.grad_norm(o) == before


def test_restrict_leaves_other_rows_and_state_untouched():
    p = {"w": np.arange(12.0).reshape(4, 3)}
    g = {"w": np.ones((4, 3))}
    for init, step, kw in (
        (optim.sgd_init, optim.sgd_step, {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.5}),
        (optim.adam_init, optim.adam_step, {"lr": 0.1, "weight_decay": 0.5}),
    ):
        q = {"w": p["w"].copy()}
        st = init(q)
        before = {k: v.copy() for k, v in st.items()}
        step(q, g, st, restrict={"w": np.array([1, 3])}, **kw)
        assert np.array_equal(q["w"][[0, 2]], p["w"][[0, 2]])
        assert not np.allclose(q["w"][[1, 3]], p["w"][[1, 3]])
        for k, v in st.items():
            if k != "step":
                assert np.array_equal(v[[0, 2]], before[k][[0, 2]])
        cols = {"w": p["w"].copy()}
        st = init(cols)
        step(cols, g, st, restrict={"w": (slice(None), np.array([2]))}, **kw)
        assert np.array_equal(cols["w"][:, :2], p["w"][:, :2]) and not np.allclose(cols["w"][:, 2], p["w"][:, 2])


# ------------------------------------------------------------------- active rows == masked full training


def _client(rng, n_users=6, n_items=12, density=0.45):
    """A client whose users rate only some items: items 3, 8, 11 (at least) unrated by anyone."""
    x, y, m = _batch(rng, n_users, n_items, density=density)
    dead = [3, 8, 11]
    x[:, dead] = 0.0
    y[:, dead] = 0.0
    m[:, dead] = False
    return x, y, m


def _train(params, x, y, m, *, scheme, optimiser, items, in_items=None, epochs=2, batch=3, dropout=0.5,
           sequential=True, loss="mse", seed=21):
    """Train one client; scheme "full" (full arrays, inactive rows masked) or "active" (its slice)."""
    rng = np.random.default_rng(seed)
    if scheme == "active":
        work = act.slice_items(params, out_items=items, in_items=in_items)
        restrict = None
    else:
        work = ae.copy_params(params)
        restrict = act.restriction(params, out_items=items, in_items=in_items)
    if optimiser == "sgd":
        state = optim.sgd_init(work)
        step = lambda p, g, s, lr: optim.sgd_step(  # noqa: E731
            p, g, s, lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4, restrict=restrict)
    else:
        state = optim.adam_init(work)
        step = lambda p, g, s, lr: optim.adam_step(  # noqa: E731
            p, g, s, lr=lr * 0.1, weight_decay=5e-4, restrict=restrict)
    for epoch in range(epochs):
        lr = optim.cosine_lr(0.1, epoch, epochs)
        for start in range(0, x.shape[0], batch):
            xb, yb, mb = (a[start : start + batch] for a in (x, y, m))
            if scheme == "active":
                xin = xb if in_items is None else xb[:, in_items]
                res = ae.loss_and_grads(work, xin, yb[:, items], mb[:, items], loss=loss, dropout=dropout,
                                        rng=rng, out_rows="rated", sequential_sums=sequential)
            else:
                res = ae.loss_and_grads(work, xb, yb, mb, loss=loss, dropout=dropout, rng=rng,
                                        sequential_sums=sequential)
            optim.clip_grad_norm(res.grads, 1.0, exact=sequential)
            step(work, res.grads, state, lr)
    if scheme == "active":
        return act.put_items(params, work, out_items=items, in_items=in_items)
    return work


@pytest.mark.parametrize("optimiser", ["sgd", "adam"])
@pytest.mark.parametrize("loss", ["mse", "bce"])
@pytest.mark.parametrize("input_side", [False, True], ids=["dense-input", "sparse-input"])
def test_active_rows_training_is_bit_identical_to_masked_full_training(optimiser, loss, input_side):
    # big enough that BLAS would sum the active and full products in different orders on this machine
    rng = np.random.default_rng(8)
    n = 100
    params = ae.init_params(n, rng, (32, 16), dtype=np.float64)
    x, y, m = _client(rng, n_items=n, density=0.2)
    if loss == "bce":
        y = (x >= 3.5).astype(np.float64)
    items = act.rated_items(m)
    assert {3, 8, 11} <= set(np.setdiff1d(np.arange(n), items)) and len(items) < n - 10
    in_items = act.rated_items(x != 0) if input_side else None
    full = _train(params, x, y, m, scheme="full", optimiser=optimiser, items=items, in_items=in_items, loss=loss)
    active = _train(params, x, y, m, scheme="active", optimiser=optimiser, items=items, in_items=in_items,
                    loss=loss)
    for k in params:
        assert np.array_equal(full[k], active[k]), k
        assert not np.array_equal(full[k], params[k]), k  # it did train
    # inactive output rows (and inactive input columns) are exactly their initial values in both
    for trained in (full, active):
        assert np.array_equal(trained["dec.W2"][[3, 8, 11]], params["dec.W2"][[3, 8, 11]])
        assert np.array_equal(trained["dec.b2"][[3, 8, 11]], params["dec.b2"][[3, 8, 11]])
        if input_side:
            assert np.array_equal(trained["enc.W1"][:, [3, 8, 11]], params["enc.W1"][:, [3, 8, 11]])


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-10), (np.float32, 2e-4)])
def test_active_rows_training_with_blas_sums_agrees_to_rounding(dtype, rtol):
    rng = np.random.default_rng(9)
    params = ae.init_params(12, rng, (6, 4), dtype=dtype)
    x, y, m = _client(rng)
    items = act.rated_items(m)
    kw = dict(optimiser="sgd", items=items, sequential=False)
    full = _train(params, x, y, m, scheme="full", **kw)
    active = _train(params, x, y, m, scheme="active", **kw)
    for k in params:
        np.testing.assert_allclose(active[k], full[k], rtol=rtol, atol=rtol * 1e-2)
    for trained in (full, active):  # inactive rows: bit-identical to the start whatever the summation order
        assert np.array_equal(trained["dec.W2"][[3, 8, 11]], params["dec.W2"][[3, 8, 11]])


def test_unmasked_weight_decay_moves_inactive_rows():
    """Why 'masked' restricts the optimiser: plain full training decays rows nobody rated."""
    rng = np.random.default_rng(10)
    params = ae.init_params(12, rng, (6, 4), dtype=np.float64)
    x, y, m = _client(rng)
    work = ae.copy_params(params)
    st = optim.sgd_init(work)
    res = ae.loss_and_grads(work, x, y, m)
    assert not res.grads["dec.W2"][[3, 8, 11]].any()
    optim.sgd_step(work, res.grads, st, lr=0.1, momentum=0.9, weight_decay=5e-4)
    np.testing.assert_allclose(work["dec.W2"][[3, 8, 11]], params["dec.W2"][[3, 8, 11]] * (1 - 0.1 * 5e-4))


# --------------------------------------------------------------------------------- Expression 3 and Eq. 5


def test_extract_apply_and_count_active_decoder():
    rng = np.random.default_rng(11)
    params = ae.init_params(10, rng, (6, 4))
    items = np.array([1, 4, 5])
    sl = act.extract_active(params, items)
    assert set(sl) == {"dec.W1", "dec.b1", "dec.W2", "dec.b2"}
    assert sl["dec.W2"].shape == (3, 6) and sl["dec.b2"].shape == (3,)
    assert np.array_equal(sl["dec.W2"], params["dec.W2"][items])
    assert np.array_equal(sl["dec.W1"], params["dec.W1"]) and sl["dec.W1"] is not params["dec.W1"]
    assert act.active_count(params, 3) == ae.param_count(sl) == 6 * 4 + 6 + 3 * (6 + 1)
    assert act.active_count(params, 10) == ae.param_count(ae.decoder_of(params))
    sl["dec.W2"] += 1.0
    back = act.apply_active(params, sl, items)
    assert np.array_equal(back["dec.W2"][items], params["dec.W2"][items] + 1.0)
    rest = np.setdiff1d(np.arange(10), items)
    assert np.array_equal(back["dec.W2"][rest], params["dec.W2"][rest])
    with pytest.raises(ValueError):
        act.extract_active(params, [4, 1])


def _hand_decoder():
    return {
        "dec.W1": np.array([[1.0], [2.0]]),
        "dec.b1": np.array([0.0, 0.0]),
        "dec.W2": np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]]),
        "dec.b2": np.array([10.0, 20.0, 30.0, 40.0]),
    }


def test_merge_eq5_per_item_hand_computed():
    prev = _hand_decoder()
    a = {"dec.W1": np.array([[3.0], [4.0]]), "dec.b1": np.array([1.0, 1.0]),
         "dec.W2": np.array([[5.0, 6.0], [7.0, 8.0]]), "dec.b2": np.array([11.0, 33.0])}  # items 0, 2
    b = {"dec.W1": np.array([[5.0], [0.0]]), "dec.b1": np.array([3.0, -1.0]),
         "dec.W2": np.array([[9.0, 10.0], [0.0, 2.0]]), "dec.b2": np.array([35.0, 44.0])}  # items 2, 3
    new = act.merge_active(prev, [a, b], [[0, 2], [2, 3]])
    assert list(new) == list(prev)
    np.testing.assert_array_equal(new["dec.W1"], [[4.0], [2.0]])
    np.testing.assert_array_equal(new["dec.b1"], [2.0, 0.0])
    # item 0: only a; item 1: nobody (previous value); item 2: mean of a and b; item 3: only b
    np.testing.assert_array_equal(new["dec.W2"], [[5.0, 6.0], [2.0, 2.0], [8.0, 9.0], [0.0, 2.0]])
    np.testing.assert_array_equal(new["dec.b2"], [11.0, 20.0, 34.0, 44.0])
    # weighted (client b counts three times)
    w = act.merge_active(prev, [a, b], [[0, 2], [2, 3]], weights=[1, 3])
    np.testing.assert_array_equal(w["dec.W1"], [[4.5], [1.0]])
    np.testing.assert_array_equal(w["dec.W2"], [[5.0, 6.0], [2.0, 2.0], [8.5, 9.5], [0.0, 2.0]])
    np.testing.assert_array_equal(w["dec.b2"], [11.0, 20.0, 34.5, 44.0])
    # Algorithm 1 as printed: Eq. 5 fill with the previous rows, then 1/|S| over all clients
    alg = act.merge_active(prev, [a, b], [[0, 2], [2, 3]], mode="algorithm1")
    np.testing.assert_array_equal(alg["dec.W1"], [[4.0], [2.0]])
    np.testing.assert_array_equal(alg["dec.W2"], [[3.0, 3.5], [2.0, 2.0], [8.0, 9.0], [2.0, 3.0]])
    np.testing.assert_array_equal(alg["dec.b2"], [10.5, 20.0, 34.0, 42.0])
    # the inputs are untouched
    assert np.array_equal(prev["dec.W2"], _hand_decoder()["dec.W2"])


def test_merge_algorithm1_equals_averaging_masked_full_decoders():
    rng = np.random.default_rng(12)
    params = ae.init_params(12, rng, (6, 4), dtype=np.float64)
    slices, items, fulls = [], [], []
    for c in range(3):
        x, y, m = _client(np.random.default_rng(100 + c))
        m[:, c] = False  # different clients, different active sets
        x[:, c] = 0.0
        it = act.rated_items(m)
        trained = _train(params, x, y, m, scheme="active", optimiser="sgd", items=it, epochs=1,
                         sequential=False)
        fulls.append(ae.decoder_of(trained))
        slices.append(act.extract_active(trained, it))
        items.append(it)
    merged = act.merge_active(params, slices, items, mode="algorithm1")
    for k in merged:
        np.testing.assert_allclose(merged[k], np.mean([f[k] for f in fulls], axis=0), rtol=1e-12)
    per_item = act.merge_active(params, slices, items)
    one = act.merge_active(params, slices[:1], items[:1])
    assert np.array_equal(one["dec.W2"], fulls[0]["dec.W2"])
    assert not np.allclose(per_item["dec.W2"], merged["dec.W2"])


@pytest.mark.parametrize("kernels", ["compiled", "python"])
@pytest.mark.parametrize("mode", act.MERGE_MODES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_merge_through_the_kernels_is_bit_identical_to_numpy(kernels, mode, dtype, monkeypatch):
    from fedsim.math import active_kernels

    got = active_kernels.compiled() if kernels == "compiled" else active_kernels.python()
    if got is None:
        pytest.skip("numba (the 'fast' extra) is not installed")
    rng = np.random.default_rng(21)
    prev = ae.decoder_of(ae.init_params(30, rng, (8, 5), dtype=dtype))
    items = [np.sort(rng.choice(30, k, replace=False)) for k in (4, 11, 1, 7)]
    slices = [{k: (rng.standard_normal(v.shape) if k not in ("dec.W2", "dec.b2")
                   else rng.standard_normal((len(it),) + v.shape[1:])).astype(dtype) for k, v in prev.items()}
              for it in items]
    weights = [1.0, 3.0, 0.5, 2.0]
    monkeypatch.setattr(active_kernels, "compiled", lambda: got)
    new = act.merge_active(prev, slices, items, weights=weights, mode=mode)
    monkeypatch.setattr(active_kernels, "compiled", lambda: None)
    ref = act.merge_active(prev, slices, items, weights=weights, mode=mode)
    assert list(new) == list(ref)
    for k in ref:
        assert new[k].dtype == ref[k].dtype and new[k].tobytes() == ref[k].tobytes(), k
    assert not np.array_equal(ref["dec.W2"], prev["dec.W2"])


@pytest.mark.parametrize("kernels", ["compiled", "python"])
@pytest.mark.parametrize("n_models", [1, 3, 4, 5, 9])
def test_mean_through_the_kernel_is_bit_identical_to_numpy(kernels, n_models, monkeypatch):
    """mean_params adding up to four models per pass (active_kernels.add_each) gives NumPy's
    model-by-model float64 sums bit for bit: every group size, the remainder, mixed dtypes, read-only
    inputs (decoded messages), a non-contiguous array (NumPy's path for that key)."""
    from fedsim.math import active_kernels

    got = active_kernels.compiled() if kernels == "compiled" else active_kernels.python()
    if got is None:
        pytest.skip("numba (the 'fast' extra) is not installed")
    rng = np.random.default_rng(22)
    like = {"w": np.zeros((7, 5), np.float32), "b": np.zeros(5, np.float32), "s": np.zeros((4, 3), np.float32)}
    models = []
    for i in range(n_models):
        m = {k: (rng.standard_normal(v.shape) * 10.0 ** rng.integers(-6, 6, v.shape)).astype(
             np.float64 if (k == "b" and i % 2) else np.float32) for k, v in like.items()}
        m["s"] = np.asfortranarray(m["s"])  # not C-ordered: NumPy's path
        for v in m.values():
            v.setflags(write=False)
        models.append(m)
    monkeypatch.setattr(active_kernels, "compiled", lambda: got)
    new = ae.mean_params(models, like)
    monkeypatch.setattr(active_kernels, "compiled", lambda: None)
    ref = ae.mean_params(models, like)
    want = {k: (np.sum([np.asarray(m[k], np.float64) for m in models], axis=0) / n_models) for k in like}
    for k in like:
        assert new[k].dtype == np.float32 and new[k].tobytes() == ref[k].tobytes(), k
        np.testing.assert_allclose(new[k], want[k], rtol=1e-6)  # (an independent sum, to rounding)


def test_mean_params_refuses_no_model_and_misshapen_arrays():
    """No model gave a NaN mean (0 / 0) and a (5,) array was broadcast into a (2, 5) sum, both
    without a word; each is a ValueError now."""
    like = {"w": np.zeros((2, 5), np.float32)}
    with pytest.raises(ValueError, match="no model"):
        ae.mean_params([], like)
    with pytest.raises(ValueError, match=r"model 1's 'w' has shape \(5,\)"):
        ae.mean_params([{"w": np.ones((2, 5), np.float32)}, {"w": np.ones(5, np.float32)}], like)
    got = ae.mean_params([{"w": np.ones((2, 5), np.float32)}, {"w": np.full((2, 5), 2.0, np.float32)}], like)
    assert got["w"].dtype == np.float32 and (got["w"] == 1.5).all()


def test_merge_active_refuses_non_finite_weights():
    """A NaN weight passed the ``w <= 0`` check and made the merged decoder NaN."""
    prev = _hand_decoder()
    a = {"dec.W1": np.array([[3.0], [4.0]]), "dec.b1": np.array([1.0, 1.0]),
         "dec.W2": np.array([[5.0, 6.0], [7.0, 8.0]]), "dec.b2": np.array([11.0, 33.0])}
    for bad in (np.nan, np.inf, 0.0):
        with pytest.raises(ValueError, match="positive finite number per slice"):
            act.merge_active(prev, [a, a], [[0, 2], [2, 3]], weights=[1.0, bad])
    ok = act.merge_active(prev, [a, a], [[0, 2], [2, 3]], weights=[1.0, 3.0])
    np.testing.assert_array_equal(ok["dec.W1"], [[3.0], [4.0]])
