"""Lazy local training (``ae_train.local_train(lazy=True)``) and its zero-gradient steps
(``optim.sgd_idle_steps``) against the step-by-step path: bit for bit where the summation order is
pinned down (sequential sums, exact norm), to float rounding otherwise, with the same FLOPs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fedsim.math import ae_train, optim, optim_kernels
from fedsim.math import autoencoder as ae

COMPILED = optim_kernels.compiled()
needs_numba_here = pytest.mark.skipif(COMPILED is None, reason="numba (the 'fast' extra) is not installed")


def _arrays(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((7, 5)).astype(dtype), "b": rng.standard_normal(5).astype(dtype),
            "f": np.asfortranarray(rng.standard_normal((6, 4)).astype(dtype)),  # a cut encoder's layout
            "s": rng.standard_normal((5, 8)).astype(dtype)[:, ::2]}  # strided


def _momentum(params, seed=1):
    rng = np.random.default_rng(seed)
    state = optim.sgd_init(params)
    for k, v in params.items():
        state[f"momentum.{k}"][...] = rng.standard_normal(v.shape)  # a buffer carried from earlier steps
    return state


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("backend", ["numpy", "python", "numba"])
def test_idle_steps_equal_steps_with_zero_gradients(dtype, backend, monkeypatch):
    if backend == "numba" and COMPILED is None:
        pytest.skip("numba (the 'fast' extra) is not installed")
    if backend != "numpy":
        monkeypatch.setattr(optim, "_fused", (lambda: COMPILED) if backend == "numba" else optim_kernels.python)
    kernel = "numpy" if backend == "numpy" else "auto"
    for momentum, nesterov, wd, steps in itertools.product((0.0, 0.9), (False, True), (0.0, 5e-4), (1, 5)):
        if nesterov and not momentum:
            continue
        kw = dict(lr=0.3, momentum=momentum, nesterov=nesterov, weight_decay=wd)
        ref = _arrays(dtype)
        new = {k: v.copy(order="K") if k != "s" else _arrays(dtype)["s"] for k, v in ref.items()}
        s_ref, s_new = _momentum(ref), _momentum(new)
        zeros = {k: np.zeros_like(v) for k, v in ref.items()}
        f_ref = sum(optim.sgd_step(ref, zeros, s_ref, kernel="numpy", **kw) for _ in range(steps))
        f_new = optim.sgd_idle_steps(new, s_new, steps, kernel=kernel, **kw)
        assert f_new == (f_ref if (wd or momentum) else 0)
        for k in ref:
            assert new[k].tobytes() == ref[k].tobytes(), (k, momentum, nesterov, wd, steps)
            assert s_new[f"momentum.{k}"].tobytes() == s_ref[f"momentum.{k}"].tobytes()
        if wd or momentum:  # it did move them
            assert not np.array_equal(new["w"], _arrays(dtype)["w"])


@pytest.mark.parametrize("backend", ["numpy", "python", "numba"])
def test_idle_steps_from_a_fresh_momentum_that_is_not_kept(backend, monkeypatch):
    if backend == "numba" and COMPILED is None:
        pytest.skip("numba (the 'fast' extra) is not installed")
    if backend != "numpy":
        monkeypatch.setattr(optim, "_fused", (lambda: COMPILED) if backend == "numba" else optim_kernels.python)
    for nesterov in (False, True):
        kw = dict(lr=0.3, momentum=0.9, nesterov=nesterov, weight_decay=5e-4)
        ref, new = _arrays(np.float32), _arrays(np.float32)
        s_ref = optim.sgd_init(ref)  # zero buffers
        zeros = {k: np.zeros_like(v) for k, v in ref.items()}
        f_ref = sum(optim.sgd_step(ref, zeros, s_ref, kernel="numpy", **kw) for _ in range(4))
        assert optim.sgd_idle_steps(new, None, 4, kernel="numpy" if backend == "numpy" else "auto", **kw) == f_ref
        for k in ref:
            assert new[k].tobytes() == ref[k].tobytes(), (k, nesterov)


def test_idle_map_by_hand():
    lr, mu, wd = 0.3, 0.9, 5e-4
    # no momentum: each step multiplies by (1 - lr wd)
    assert np.allclose(optim.idle_map(7, lr=lr, weight_decay=wd), [(1 - lr * wd) ** 7, 0, 0, 1], rtol=0, atol=1e-15)
    # one Nesterov step: buf' = mu buf + wd p, d = wd p + mu buf', p' = p - lr d
    c, f, e, h = optim.idle_map(1, lr=lr, momentum=mu, nesterov=True, weight_decay=wd)
    assert (c, f, e, h) == pytest.approx((1 - lr * wd * (1 + mu), -lr * mu * mu, wd, mu), rel=1e-15)
    # plain momentum, one step: d = buf'
    c, f, e, h = optim.idle_map(1, lr=lr, momentum=mu, weight_decay=wd)
    assert (c, f, e, h) == pytest.approx((1 - lr * wd, -lr * mu, wd, mu), rel=1e-15)
    # without weight decay a parameter with no momentum never moves
    assert list(optim.idle_map(5, lr=lr, momentum=mu, nesterov=True)[[0, 2]]) == [1.0, 0.0]


@pytest.mark.parametrize("backend", ["numpy", "python", "numba"])
def test_idle_steps_in_closed_form_agree_with_the_steps(backend, monkeypatch):
    """The closed form against the steps: to about 1e-15 in float64, to a few float32 ulps in float32
    (where it is the closer of the two to the float64 result), and the same bits on every backend."""
    if backend == "numba" and COMPILED is None:
        pytest.skip("numba (the 'fast' extra) is not installed")
    if backend != "numpy":
        monkeypatch.setattr(optim, "_fused", (lambda: COMPILED) if backend == "numba" else optim_kernels.python)
    kernel = "numpy" if backend == "numpy" else "auto"
    for (momentum, nesterov, wd, steps), keep in itertools.product(
            ((0.0, False, 5e-4, 5), (0.9, False, 5e-4, 5), (0.9, True, 5e-4, 5), (0.9, True, 0.0, 3),
             (0.9, True, 1e-2, 40)), (True, False)):
        kw = dict(lr=0.3, momentum=momentum, nesterov=nesterov, weight_decay=wd)
        out = {}
        for dtype in (np.float32, np.float64):
            for closed in (False, True):
                # float64 runs start from the float32 values (their result is the reference)
                p = _arrays(np.float32) if dtype == np.float32 else \
                    {k: v.astype(dtype) for k, v in _arrays(np.float32).items()}
                s = None
                if keep:
                    s = {k: v.astype(dtype) for k, v in _momentum(_arrays(np.float32)).items()}
                f = optim.sgd_idle_steps(p, s, steps, kernel=kernel if closed else "numpy", closed_form=closed, **kw)
                assert f == steps * sum(optim.sgd_flops(v.size, momentum=momentum, nesterov=nesterov,
                                                        weight_decay=wd) for v in p.values())
                out[dtype, closed] = (p, s)
        for k in out[np.float32, True][0]:
            p64 = out[np.float64, True][0][k]
            np.testing.assert_allclose(out[np.float64, False][0][k], p64, rtol=1e-14, atol=1e-15)
            ref = p64.astype(np.float32)  # the float64 result, rounded once
            ulp = np.spacing(np.abs(ref))
            closed_err = np.abs(out[np.float32, True][0][k].astype(np.float64) - p64)
            step_err = np.abs(out[np.float32, False][0][k].astype(np.float64) - p64)
            assert np.all(closed_err <= 1.0 * ulp), (k, momentum, nesterov, wd, steps, keep)
            # the steps round at each step, relative to the sizes they go through (cancellation can
            # leave a small result with a large error in its own ulps), and they are the farther
            scale = max(np.abs(_arrays(np.float32)[k]).max(), 1.0)
            assert np.all(step_err <= 4 * steps * np.spacing(np.float32(scale))), (k, momentum, nesterov, wd, steps)
            assert closed_err.mean() <= step_err.mean()
            if keep and momentum:
                b64 = out[np.float64, True][1][f"momentum.{k}"]
                np.testing.assert_allclose(out[np.float64, False][1][f"momentum.{k}"], b64, rtol=1e-13, atol=1e-15)
                b32 = out[np.float32, True][1][f"momentum.{k}"].astype(np.float64)
                assert np.all(np.abs(b32 - b64) <= np.spacing(np.abs(b64.astype(np.float32)))), k
        # it moved them: weight decay, or the momentum carried on
        assert not np.array_equal(out[np.float32, True][0]["w"], _arrays(np.float32)["w"]) or not (wd or keep)
    if backend != "numpy":  # the same bits as the NumPy expressions
        for keep in (True, False):
            a, b = _arrays(np.float32), _arrays(np.float32)
            sa, sb = (_momentum(a), _momentum(b)) if keep else (None, None)
            kw = dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4, closed_form=True)
            optim.sgd_idle_steps(a, sa, 5, kernel="auto", **kw)
            optim.sgd_idle_steps(b, sb, 5, kernel="numpy", **kw)
            for k in a:
                assert a[k].tobytes() == b[k].tobytes(), k
                if keep:
                    assert sa[f"momentum.{k}"].tobytes() == sb[f"momentum.{k}"].tobytes(), k


def test_lazy_training_with_closed_form_idle_steps_agrees_to_rounding():
    """The default lazy path (idle steps in closed form) against the bit-identical one: the untouched
    entries differ by a few float32 ulps, everything else by the rounding it carries on."""
    for reset in (False, True):
        p_ref, s_ref, r_ref = _train(True, True, reset=reset)
        params, x, mask = _client(np.float32, "mse")
        state = None if reset else optim.sgd_init(params)
        for t in range(3):
            r = ae_train.local_train(params, state, x, x, mask, epochs=3, batch=2, lr=0.1 / (t + 1),
                                     rng=np.random.default_rng(t), momentum=0.9, nesterov=True, weight_decay=5e-4,
                                     clip=1.0, dropout=0.5, lazy=True, sequential_sums=True, exact_norm=True)
            assert r == r_ref[t]
        untouched = params["enc.W1"][:, 30:]
        ref = p_ref["enc.W1"][:, 30:]
        assert not np.array_equal(untouched, ref) or reset  # rounded differently somewhere (not guaranteed)
        # 27 steps in 3 calls: the step-by-step rounding of each call's 9 steps, a few ulps
        assert np.all(np.abs(untouched - ref) <= 8 * np.spacing(np.abs(ref)))
        for k in p_ref:
            np.testing.assert_allclose(params[k], p_ref[k], rtol=1e-5, atol=1e-7, err_msg=k)


def test_idle_steps_without_decay_or_momentum_leave_everything():
    p = _arrays(np.float32)
    before = {k: v.copy() for k, v in p.items()}
    assert optim.sgd_idle_steps(p, {}, 5, lr=0.1) == 0
    assert all(np.array_equal(p[k], before[k]) for k in p)


def test_idle_steps_check_their_arguments():
    p = _arrays(np.float32)
    with pytest.raises(ValueError, match="steps"):
        optim.sgd_idle_steps(p, optim.sgd_init(p), -1, lr=0.1, weight_decay=1e-3)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.sgd_idle_steps(p, optim.sgd_init(p), 1, lr=0.1, nesterov=True)
    assert optim.sgd_idle_steps(p, optim.sgd_init(p), 0, lr=0.1, weight_decay=1e-3) == 0


def _client(dtype, loss, seed=3, users=5, n_items=40, empty=False):
    """A small model and a client whose users rate items among the first 30 only (the last 10 input
    columns and output rows are never reached)."""
    rng = np.random.default_rng(seed)
    params = ae.init_params(n_items, rng, (8, 4), dtype=dtype)
    x = np.zeros((users, n_items), dtype)
    mask = np.zeros((users, n_items), bool)
    if not empty:
        for u in range(users):
            items = rng.choice(30, size=6, replace=False)
            x[u, items] = rng.integers(1, 6, size=6)
            mask[u, items] = True
    if loss == "bce":  # 0/1 labels: a rated negative is a zero input but a target row
        x = (x >= 3.5).astype(dtype)
    return params, x, mask


def _train(lazy, exact, *, dtype=np.float32, loss="mse", rounds=3, empty=False, reset=False, **kw):
    params, x, mask = _client(dtype, loss, empty=empty)
    state = None if reset else optim.sgd_init(params)
    out = []
    for t in range(rounds):  # the momentum is carried across calls (or reset), another learning rate each time
        r = ae_train.local_train(params, state, x, x, mask, epochs=3, batch=kw.get("batch", 2), lr=0.1 / (t + 1),
                                 rng=np.random.default_rng(t), loss=loss, momentum=kw.get("momentum", 0.9),
                                 nesterov=kw.get("nesterov", True), weight_decay=kw.get("wd", 5e-4),
                                 clip=kw.get("clip", 1.0), dropout=0.5, lazy=lazy, sequential_sums=exact,
                                 exact_norm=exact, stepwise_idle=exact)
        out.append(r)
    return params, state, out


CASES = [dict(), dict(clip=0.01), dict(clip=None), dict(nesterov=False), dict(momentum=0.0, nesterov=False),
         dict(wd=0.0), dict(dtype=np.float64), dict(loss="bce"), dict(batch=1), dict(batch=7), dict(reset=True),
         dict(reset=True, nesterov=False)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_lazy_training_is_bit_identical_with_pinned_summation(case):
    p_ref, s_ref, r_ref = _train(False, True, **case)
    p_new, s_new, r_new = _train(True, True, **case)
    assert r_new == r_ref  # FLOPs (the step-by-step path's), losses, steps
    for k in p_ref:
        assert np.array_equal(p_new[k], p_ref[k]), k
        if s_ref is not None:
            assert np.array_equal(s_new[f"momentum.{k}"], s_ref[f"momentum.{k}"]), k
    # the unreached input columns and output rows did move (weight decay), as in the step-by-step path
    w0 = _client(case.get("dtype", np.float32), case.get("loss", "mse"))[0]
    if case.get("wd", 5e-4):
        assert not np.array_equal(p_new["enc.W1"][:, 35], w0["enc.W1"][:, 35])
        assert not np.array_equal(p_new["dec.W2"][35], w0["dec.W2"][35])


@pytest.mark.parametrize("case", CASES[:3] + [dict(loss="bce")], ids=str)
def test_lazy_training_agrees_to_rounding_with_blas(case):
    p_ref, s_ref, r_ref = _train(False, False, **case)
    p_new, s_new, r_new = _train(True, False, **case)
    assert [r.flops for r in r_new] == [r.flops for r in r_ref]
    assert [r.steps for r in r_new] == [r.steps for r in r_ref]
    np.testing.assert_allclose([r.loss for r in r_new], [r.loss for r in r_ref], rtol=1e-5)
    for k in p_ref:
        np.testing.assert_allclose(p_new[k], p_ref[k], rtol=1e-4, atol=1e-6, err_msg=k)


def test_lazy_training_of_a_client_without_ratings():
    p_ref, s_ref, r_ref = _train(False, True, empty=True)
    p_new, s_new, r_new = _train(True, True, empty=True)
    assert r_new == r_ref
    for k in p_ref:
        assert np.array_equal(p_new[k], p_ref[k]), k
    assert all(r.loss == 0.0 for r in r_new)


def test_lazy_is_ignored_under_a_restriction():
    # a restriction is "full training with the inactive rows masked": those rows must not decay
    params, x, mask = _client(np.float32, "mse")
    items = np.arange(20)
    from fedsim.math import active as act
    restrict = act.restriction(params, out_items=items)
    runs = []
    for lazy in (False, True):
        p = ae.copy_params(params)
        ae_train.local_train(p, optim.sgd_init(p), x, x, mask, epochs=2, batch=2, lr=0.1,
                             rng=np.random.default_rng(0), restrict=restrict, lazy=lazy)
        runs.append(p)
    for k in params:
        assert runs[0][k].tobytes() == runs[1][k].tobytes()
    assert np.array_equal(runs[1]["dec.W2"][25:], params["dec.W2"][25:])


@pytest.mark.parametrize("task", ["explicit", "implicit"])
def test_eval_sums_computes_only_the_test_outputs_and_agrees_with_the_full_model(task):
    rng = np.random.default_rng(11)
    n_users, n_items = 30, 60
    users, items, values = [], [], []
    for u in range(n_users):
        its = rng.choice(50, size=12, replace=False)  # items 50..59 are never rated
        users += [u] * 12
        items += list(its)
        values += list(rng.integers(1, 6, size=12).astype(float))
    users, items, values = map(np.asarray, (users, items, values))
    test = np.arange(len(users)) % 4 == 0
    data = ae_train.prepare((users[~test], items[~test], values[~test]), (users[test], items[test], values[test]),
                            n_users, n_items, task=task)
    params = ae.init_params(n_items, rng, (8, 4), dtype=np.float64)
    for clip, block in ((None, 512), ((1.0, 5.0), 7)):
        got = ae_train.eval_sums(params, data, k=3, clip=clip, block=block)
        z = ae.predict(params, data.x)  # the whole model, every output
        sse = n = ndcg = 0.0
        for u in range(n_users):
            its = data.test_items[data.test_ptr[u]:data.test_ptr[u + 1]]
            vals = data.test_values[data.test_ptr[u]:data.test_ptr[u + 1]]
            pred = z[u, its] if clip is None or task == "implicit" else np.clip(z[u, its], *clip)
            sse += float(((pred - vals) ** 2).sum())
            n += len(its)
            ndcg += ae_train.ndcg_test_items(z[u, its], vals, 3)
        assert got["n"] == n
        if task == "explicit":
            assert got["sse"] == pytest.approx(sse, rel=1e-12)
        else:
            assert got["ndcg_sum"] == pytest.approx(ndcg, rel=1e-12) and got["ndcg_users"] == n_users
        enc, dec = ae.layer_sizes(params)
        assert got["flops"] == ae.predict_flops(enc, dec, n_users)  # the full passes' FLOPs, as before


@pytest.mark.parametrize("lazy", [False, True])
def test_no_state_is_a_fresh_momentum_each_call(lazy):
    """state=None (a client that resets its momentum) gives what a fresh sgd_init state gives."""
    p_ref, _, r_ref = _train(lazy, False, rounds=1)
    p_new, _, r_new = _train(lazy, False, rounds=1, reset=True)
    assert r_new == r_ref
    for k in p_ref:
        assert p_new[k].tobytes() == p_ref[k].tobytes(), k


def _read_only(params):
    out = {k: v.copy(order="K") for k, v in params.items()}
    for v in out.values():
        v.setflags(write=False)  # as a received model's arrays (views into the message)
    return out


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("closed", [True, False])
@pytest.mark.parametrize("keep", [True, False])
def test_idle_steps_from_a_source_equal_a_copy_then_the_steps(backend, closed, keep, monkeypatch):
    """sgd_idle_steps(source=): the steps of source's values written into freshly allocated arrays,
    bit for bit what copying first and stepping in place gives; the source is only read."""
    if backend == "numba":
        if COMPILED is None:
            pytest.skip("numba (the 'fast' extra) is not installed")
        monkeypatch.setattr(optim, "_fused", lambda: COMPILED)
    kernel = "numpy" if backend == "numpy" else "auto"
    for steps, kw in ((5, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2)),
                      (3, dict(lr=0.2, weight_decay=1e-3)), (0, dict(lr=0.1, weight_decay=1e-3)),
                      (4, dict(lr=0.1))):
        src = _read_only(_arrays(np.float32))
        src_bytes = {k: v.tobytes() for k, v in src.items()}
        ref = {k: v.copy(order="K") for k, v in src.items()}
        new = {k: np.full_like(v, np.nan) for k, v in src.items()}  # whatever was there is overwritten
        s_ref = _momentum(ref) if keep else None
        s_new = _momentum(new) if keep else None
        f_ref = optim.sgd_idle_steps(ref, s_ref, steps, kernel=kernel, closed_form=closed, **kw)
        f_new = optim.sgd_idle_steps(new, s_new, steps, kernel=kernel, closed_form=closed, source=src, **kw)
        assert f_new == f_ref
        for k in ref:
            assert new[k].tobytes() == ref[k].tobytes(), (k, steps, kw)
            if keep:
                assert s_new[f"momentum.{k}"].tobytes() == s_ref[f"momentum.{k}"].tobytes(), k
            assert src[k].tobytes() == src_bytes[k]
    with pytest.raises(ValueError, match=r"source\['w'\]"):
        optim.sgd_idle_steps({"w": np.zeros((7, 5), np.float32)}, None, 2, lr=0.1, weight_decay=1e-3,
                             source={"w": np.zeros((7, 5), np.float64)})


@pytest.mark.parametrize("backend", ["numpy", "python", "numba"])
@pytest.mark.parametrize("closed", [True, False])
@pytest.mark.parametrize("keep", [True, False])
@pytest.mark.parametrize("with_source", [True, False])
def test_idle_steps_with_reached_entries_equal_the_steps_then_the_scatter(backend, closed, keep, with_source,
                                                                          monkeypatch):
    """sgd_idle_steps(reached=): rows or columns the caller trained take its values (and momentum),
    the rest the zero-gradient steps; bit for bit the steps over everything followed by NumPy's
    scatter, whichever path runs it (the fused one-pass kernel, its Python copy, NumPy)."""
    if backend == "numba" and COMPILED is None:
        pytest.skip("numba (the 'fast' extra) is not installed")
    if backend != "numpy":
        monkeypatch.setattr(optim, "_fused", (lambda: COMPILED) if backend == "numba" else optim_kernels.python)
    kernel = "numpy" if backend == "numpy" else "auto"
    rng = np.random.default_rng(7)
    for steps, kw in ((5, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2)),
                      (3, dict(lr=0.2, weight_decay=1e-3)), (0, dict(lr=0.1, weight_decay=1e-3))):
        src = _read_only({"w1": rng.standard_normal((6, 11)).astype(np.float32),  # cut by columns
                          "w2": rng.standard_normal((11, 4)).astype(np.float32),  # cut by rows
                          "b2": rng.standard_normal(11).astype(np.float32),
                          "f": np.asfortranarray(rng.standard_normal((6, 4)).astype(np.float32))})
        cols, rows = np.array([0, 3, 4, 10]), np.array([1, 2, 9])
        cut = {"w1": (cols, 1), "w2": (rows, 0), "b2": (rows, 0), "f": (np.array([2]), 1)}
        # the caller's values: a cut encoder's columns come column-major (NumPy's a[:, idx])
        vals = {k: np.asarray(rng.standard_normal(src[k][:, i].shape if a else src[k][i].shape),
                              dtype=np.float32, order="F" if a else "C") for k, (i, a) in cut.items()}
        moms = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in vals.items()}
        ref = {k: v.copy() for k, v in src.items()}
        new = {k: v.copy() if not with_source else np.full_like(v, np.nan) for k, v in src.items()}
        s_ref = _momentum(ref) if keep else None
        s_new = {k: v.copy() for k, v in s_ref.items()} if keep else None
        f_ref = optim.sgd_idle_steps(ref, s_ref, steps, kernel=kernel, closed_form=closed, **kw)
        for k, (i, a) in cut.items():
            (ref[k].__setitem__((slice(None), i) if a else i, vals[k]))
            if keep and kw.get("momentum"):
                s_ref[f"momentum.{k}"][(slice(None), i) if a else i] = moms[k]
        reached = {k: (i, a, vals[k], moms[k]) for k, (i, a) in cut.items()}
        f_new = optim.sgd_idle_steps(new, s_new, steps, kernel=kernel, closed_form=closed,
                                     source=src if with_source else None, reached=reached, **kw)
        assert f_new == f_ref
        for k in ref:
            assert new[k].tobytes() == ref[k].tobytes(), (k, steps, kw)
            if keep:
                assert s_new[f"momentum.{k}"].tobytes() == s_ref[f"momentum.{k}"].tobytes(), (k, steps, kw)
        assert not np.array_equal(new["w1"][:, 1], src["w1"][:, 1]) or steps == 0  # (the rest did move)


@needs_numba_here
def test_reached_indices_must_be_sorted_and_distinct(monkeypatch):
    monkeypatch.setattr(optim, "_fused", lambda: COMPILED)
    p = {"w": np.zeros((4, 6), np.float32)}
    for idx in (np.array([3, 1]), np.array([2, 2]), np.array([0, 6])):
        with pytest.raises(ValueError, match="sorted, distinct"):
            optim.sgd_idle_steps(p, None, 2, lr=0.1, weight_decay=1e-3, closed_form=True,
                                 reached={"w": (idx, 1, np.zeros((4, len(idx)), np.float32), None)})


@pytest.mark.parametrize("lazy", [True, False])
@pytest.mark.parametrize("reset", [True, False])
@pytest.mark.parametrize("batch", [1, 2])
def test_training_from_a_source_equals_training_a_copy(lazy, reset, batch):
    """local_train(source=): uninitialised arrays filled from a read-only model (a FedAvg client's
    received one) give the same bits as training a copy of it, and the source is left as it was."""
    params0, x, mask = _client(np.float32, "mse")
    runs = []
    for from_source in (False, True):
        src = _read_only(params0)
        before = {k: v.tobytes() for k, v in src.items()}
        state = None if reset else optim.sgd_init(params0)
        out = []
        for t in range(2):
            params = ({k: np.full_like(v, np.nan) for k, v in src.items()} if from_source
                      else ae.copy_params(src))
            r = ae_train.local_train(params, state, x, x, mask, epochs=2, batch=batch, lr=0.1,
                                     rng=np.random.default_rng(t), loss="mse", momentum=0.9, nesterov=True,
                                     weight_decay=5e-4, clip=1.0, dropout=0.5, lazy=lazy,
                                     source=src if from_source else None)
            out.append((r, {k: v.tobytes() for k, v in params.items()}))
            assert {k: v.tobytes() for k, v in src.items()} == before
        runs.append((out, None if state is None else {k: v.tobytes() for k, v in state.items()}))
    assert runs[0] == runs[1]
    assert runs[0][0][0][1] != {k: v.tobytes() for k, v in params0.items()}  # it did train


@pytest.mark.parametrize("loss", ["mse", "bce"])
@pytest.mark.parametrize("reset", [True, False])
@pytest.mark.parametrize("batch", [1, 4])
def test_data_reaching_every_column_and_row_is_trained_in_place(loss, reset, batch, monkeypatch):
    """A client holding only its active items (PersonalFR's cut encoder and active decoder) leaves nothing
    idle and nothing to cut: the model is trained in place, with the same bits as the cut path, which one
    extra input column and output row that the data never reaches make it take."""
    rng = np.random.default_rng(5)
    n, users = 12, 5
    x = np.zeros((users, n), np.float32)
    for i in range(n):  # every item rated by two users, one rating high (a positive for bce)
        u = rng.choice(users, 2, replace=False)
        x[u, i] = (5.0, 2.0)
    mask = x != 0
    if loss == "bce":
        x = (x >= 3.5).astype(np.float32)
    base = ae.init_params(n, rng, (8, 4), dtype=np.float32)
    base["enc.W1"] = np.asfortranarray(base["enc.W1"])  # a cut encoder's layout
    wide = dict(base)  # the same model with one more input column and output row
    wide["enc.W1"] = np.asfortranarray(np.concatenate([base["enc.W1"], rng.standard_normal((8, 1), np.float32)], 1))
    wide["dec.W2"] = np.concatenate([base["dec.W2"], rng.standard_normal((1, 8), np.float32)])
    wide["dec.b2"] = np.concatenate([base["dec.b2"], [0.5]]).astype(np.float32)
    idle_calls = []
    real = optim.sgd_idle_steps
    monkeypatch.setattr(optim, "sgd_idle_steps", lambda *a, **k: idle_calls.append(1) or real(*a, **k))
    runs = []
    for params, width in ((ae.copy_params(base), n), (ae.copy_params(wide), n + 1)):
        params["enc.W1"] = np.asfortranarray(params["enc.W1"])
        state = None if reset else optim.sgd_init(params)
        xs, ms = np.zeros((users, width), np.float32), np.zeros((users, width), bool)
        xs[:, :n], ms[:, :n] = x, mask
        losses = []
        for t in range(2):
            r = ae_train.local_train(params, state, xs, xs, ms, epochs=3, batch=batch, lr=0.1,
                                     rng=np.random.default_rng(t), loss=loss, momentum=0.9, nesterov=True,
                                     weight_decay=5e-4, clip=1.0, dropout=0.5, lazy=True)
            losses.append((r.loss, r.steps))
        calls = len(idle_calls)
        idle_calls.clear()
        cut = {"enc.W1": (slice(None), slice(0, n)), "dec.W2": slice(0, n), "dec.b2": slice(0, n)}
        runs.append((losses, {k: v[cut.get(k, ...)].tobytes() for k, v in params.items()},
                     None if state is None else {k: v[cut.get(k[9:], ...)].tobytes() for k, v in state.items()
                                                 if k.startswith("momentum.")}, calls))
    (l0, p0, s0, c0), (l1, p1, s1, c1) = runs
    assert (c0, c1) == (0, 2)  # in place: no idle pass; the wide model took the cut path
    assert l0 == l1 and p0 == p1 and s0 == s1
    assert p0 != {k: v.tobytes() for k, v in base.items()}  # it did train


@pytest.mark.parametrize("lazy", [False, True])
def test_a_diverging_local_training_prints_no_numpy_warning(lazy):
    # lr = 1e23 (`fedsim run personalfr --set lr=1e23`): every client printed NumPy's overflow and
    # invalid-value warnings; the parameters are left as they came out, for the server's check
    import warnings

    params, x, mask = _client(np.float32, "mse")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = ae_train.local_train(params, optim.sgd_init(params), x, x, mask, epochs=3, batch=2, lr=1e23,
                                 rng=np.random.default_rng(0), clip=None, dropout=0.5, lazy=lazy)
    assert r.steps == 9
    assert not all(np.isfinite(v).all() for v in params.values())
    assert np.seterr()["over"] == "warn"  # (the caller's error state is left as it was)
