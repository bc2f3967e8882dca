"""The fused one-user step (``ae_kernels.step1``, used by ``ae_train.local_train(lazy=True)`` for
batches of one) against the NumPy step it replaces: ``ae.loss_and_grads`` + ``optim.clip_coef`` +
``optim.sgd_step``. Not bit-identical (other summation order, the clipping norm from the factors),
so the comparison is to float rounding: about 1e-12 relative in float64, 1e-5 in float32."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fedsim.math import ae_kernels, ae_train, optim
from fedsim.math import autoencoder as ae

COMPILED = ae_kernels.compiled()
needs_numba = pytest.mark.skipif(COMPILED is None, reason="numba (the 'fast' extra) is not installed")


class _Draws:
    """A generator stand-in that replays one dropout mask (both paths draw it once per step)."""

    def __init__(self, keep_bits):
        self.bits = keep_bits

    def random(self, shape):
        assert shape == (1, len(self.bits))
        return np.where(self.bits, 0.9, 0.1)[None, :]


def _model(dtype, n=23, hidden=(16, 8), seed=0, fortran=True):
    rng = np.random.default_rng(seed)
    p = ae.init_params(n, rng, hidden, dtype=dtype)
    for k in p:  # non-zero biases, so that their updates are checked too
        if ".b" in k:
            p[k][...] = rng.standard_normal(p[k].shape) * 0.1
    if fortran:  # a cut encoder's layout
        p["enc.W1"] = np.asfortranarray(p["enc.W1"])
    return p


def _row(dtype, n, seed, loss, empty=False):
    rng = np.random.default_rng(seed)
    mask = rng.random(n) < 0.6
    if empty:
        mask[:] = False
    x = np.where(mask, rng.integers(1, 6, n), 0).astype(dtype)
    if loss == "bce":
        x = (x >= 3.5).astype(dtype)
    return x, mask


def _numpy_step(p, st, x, mask, bits, **kw):
    """The NumPy step on one user's row (a batch of one)."""
    return _numpy_batch_step(p, st, x[None], mask[None], bits[None], **kw)


CONFIGS = [dict(loss=l, dropout=d, clip=c, momentum=m, nesterov=nv, wd=w)
           for l, d, c, (m, nv), w in itertools.product(("mse", "bce"), (0.0, 0.5), (None, 1.0, 1e3),
                                                         ((0.9, True), (0.9, False), (0.0, False)), (5e-4, 0.0))]


@needs_numba
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fortran", [True, False])
def test_one_user_step_equals_the_numpy_step(dtype, fortran):
    tol = dict(rtol=1e-11, atol=1e-13) if dtype == np.float64 else dict(rtol=2e-5, atol=2e-6)
    clipped_seen = set()
    for i, cfg in enumerate(CONFIGS):
        p_ref = _model(dtype, fortran=fortran)
        p_new = _model(dtype, fortran=fortran)
        s_ref, s_new = optim.sgd_init(p_ref), optim.sgd_init(p_new)
        step = ae_train._FusedStep.make(p_new, s_new, loss=cfg["loss"], lr=0.2, momentum=cfg["momentum"],
                                          nesterov=cfg["nesterov"], weight_decay=cfg["wd"], clip=cfg["clip"],
                                          dropout=cfg["dropout"])
        assert step is not None and step.flags[0] == fortran
        for t in range(3):  # three steps: the momentum carried from one to the next
            x, mask = _row(dtype, 23, 10 * i + t, cfg["loss"], empty=(t == 2 and i % 5 == 0))
            bits = np.random.default_rng(t).random(8) < 0.5
            v_ref, c_ref = _numpy_step(p_ref, s_ref, x, mask, bits, lr=0.2, **cfg)
            v_new, c_new = step(x, x, mask, _Draws(bits))
            assert c_new == c_ref, (cfg, t)
            clipped_seen.add(c_new)
            assert v_new == pytest.approx(v_ref, rel=1e-12 if dtype == np.float64 else 1e-6, abs=1e-12)
        for k in p_ref:
            np.testing.assert_allclose(p_new[k], p_ref[k], err_msg=f"{k} {cfg}", **tol)
            np.testing.assert_allclose(s_new[f"momentum.{k}"], s_ref[f"momentum.{k}"], err_msg=f"{k} {cfg}", **tol)
        assert not np.array_equal(p_new["dec.W2"], _model(dtype)["dec.W2"])  # it did train
    assert clipped_seen == {True, False}  # both sides of the clipping were exercised


@needs_numba
@pytest.mark.parametrize("B", [1, 3])
def test_python_copy_of_the_kernel_agrees_with_the_compiled_one(B):
    """step1 (B = 1) and stepb (B = 3) run as plain Python give what their compiled copies give."""
    for cfg in (CONFIGS[13], CONFIGS[40]):
        runs = []
        for mod in (COMPILED, ae_kernels.python()):
            p = _model(np.float64)
            st = optim.sgd_init(p)
            step = ae_train._FusedStep.make(p, st, loss=cfg["loss"], lr=0.2, momentum=cfg["momentum"],
                                            nesterov=cfg["nesterov"], weight_decay=cfg["wd"], clip=cfg["clip"],
                                            dropout=cfg["dropout"])
            step.kern, step.kern_batch = mod.step1, mod.stepb
            if B == 1:
                x, mask = _row(np.float64, 23, 1, cfg["loss"])
                out = step(x, x, mask, _Draws(np.arange(8) % 3 == 0))
            else:
                x, mask = _batch(np.float64, 23, B, 1, cfg["loss"])
                out = step(x, x, mask, _BatchDraws(np.arange(8 * B).reshape(B, 8) % 3 == 0))
            runs.append((out, p))
        assert runs[0][0][1] == runs[1][0][1]
        assert runs[0][0][0] == pytest.approx(runs[1][0][0], rel=1e-13)
        for k in runs[0][1]:
            np.testing.assert_allclose(runs[0][1][k], runs[1][1][k], rtol=1e-12, atol=1e-14)


@needs_numba
@pytest.mark.parametrize("loss", ["mse", "bce"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("users", [7, 1])
def test_all_steps_in_one_call_equal_one_call_a_step(loss, batch, users, monkeypatch):
    """local_train's lazy path with every step in one call (steps1 at batch 1, stepsb otherwise: the
    draws made first) against the per-batch loop's one call a step (step1, stepb: the same kernel
    arithmetic): bit for bit, so the draws are the same ones in the same order (permutation per
    epoch, then each batch's dropout masks) and the short last batch (7 users in batches of 3) is
    handled alike (with one user, all the dropout masks are drawn at once)."""
    x, mask = _users(users, 50, 7, 8, loss, np.float32)
    params0 = ae.init_params(50, np.random.default_rng(8), (16, 8), dtype=np.float32)
    runs = []
    for whole in (True, False):
        if not whole:  # then every batch goes through the per-batch loop
            monkeypatch.setattr(ae_train._FusedStep, "train", None)
            monkeypatch.setattr(ae_train, "_all_steps_at_once", lambda one, batch: False)
        p = ae.copy_params(params0)
        st = optim.sgd_init(p)
        res = [ae_train.local_train(p, st, x, x, mask, epochs=3, batch=batch, lr=0.1,
                                    rng=np.random.default_rng(t), loss=loss, momentum=0.9, nesterov=True,
                                    weight_decay=5e-4, clip=0.5, dropout=0.5, lazy=True) for t in range(2)]
        runs.append((p, st, res))
    (p1, s1, r1), (p0, s0, r0) = runs
    assert r1 == r0  # FLOPs (clipping included), last-epoch loss, steps
    for k in p0:
        assert p1[k].tobytes() == p0[k].tobytes(), k
        assert s1[f"momentum.{k}"].tobytes() == s0[f"momentum.{k}"].tobytes(), k


def test_the_kernel_declines_what_it_does_not_compute():
    p = ae.init_params(10, np.random.default_rng(0), (8,), dtype=np.float32)  # one encoder layer
    assert ae_train._FusedStep.make(p, optim.sgd_init(p), loss="mse", lr=0.1, momentum=0.9, nesterov=True,
                                      weight_decay=0.0, clip=1.0, dropout=0.0) is None
    p = _model(np.float32)
    p["dec.W1"] = p["dec.W1"][:, ::2].copy()[:, :4]  # a strided, or mis-shaped, layout is never taken
    p["enc.W2"] = np.asfortranarray(p["enc.W2"])
    assert ae_train._FusedStep.make(p, optim.sgd_init(p), loss="mse", lr=0.1, momentum=0.9, nesterov=True,
                                      weight_decay=0.0, clip=1.0, dropout=0.0) is None


# ------------------------------------------------------------------------------------------------
# batches of several users (ae_kernels.stepb / stepsb: PersonalFR Table III's local batch 10)


class _BatchDraws:
    """A generator stand-in that replays one dropout mask per row of a batch."""

    def __init__(self, keep_bits):
        self.bits = keep_bits

    def random(self, shape):
        assert shape == self.bits.shape
        return np.where(self.bits, 0.9, 0.1)


def _batch(dtype, n, B, seed, loss, empty_row=None):
    rows = [_row(dtype, n, seed * 31 + k, loss, empty=(k == empty_row)) for k in range(B)]
    return np.stack([x for x, _ in rows]), np.stack([m for _, m in rows])


def _numpy_batch_step(p, st, x, mask, bits, *, loss, lr, momentum, nesterov, wd, clip, dropout):
    r = ae.loss_and_grads(p, x, x, mask, loss=loss, dropout=dropout, rng=_BatchDraws(bits) if dropout else None)
    coef = None
    if clip:
        _, coef, _ = optim.clip_coef(r.grads, clip)
    optim.sgd_step(p, r.grads, st, lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=wd,
                   grad_scale=coef, kernel="numpy")
    return r.loss, coef is not None


@needs_numba
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fortran", [True, False])
@pytest.mark.parametrize("B", [2, 5])
def test_batch_step_equals_the_numpy_step(dtype, fortran, B):
    """stepb against ae.loss_and_grads + clip_coef + sgd_step on the same batch: the gradient of
    each weight summed over the rows, the clipping norm from the rows' Gram matrices. In float64 the
    two agree to 1e-11; in float32 their roundings differ by as much as each differs from the exact
    step (tanh, the products' summation order), so there the kernel is compared with the float64
    NumPy step: every array within 128 unit roundoffs (2^-24) of its largest magnitude. Not with
    NumPy's own float32 error: that is BLAS's, and depends on the kernel OpenBLAS picks for the CPU
    (the worst array here: 91 units with Haswell's kernels, 44 with Nehalem's and Sandybridge's, 22
    with OPENBLAS_CORETYPE=Prescott's, against which the old bound, 3x NumPy's error plus 1e-6,
    failed); the compiled kernel's own worst is 107 units whatever OpenBLAS picks."""
    clipped_seen = set()
    for i, cfg in enumerate(CONFIGS):
        dtypes = {"kernel": dtype, "numpy": dtype, "exact": np.float64}
        p = {tag: _model(dt, fortran=fortran) for tag, dt in dtypes.items()}
        st = {tag: optim.sgd_init(q) for tag, q in p.items()}
        step = ae_train._FusedStep.make(p["kernel"], st["kernel"], loss=cfg["loss"], lr=0.2, momentum=cfg["momentum"],
                                        nesterov=cfg["nesterov"], weight_decay=cfg["wd"], clip=cfg["clip"],
                                        dropout=cfg["dropout"])
        assert step is not None and step.flags[0] == fortran
        for t in range(3):  # three steps: the momentum carried from one to the next
            bits = np.random.default_rng(t).random((B, 8)) < 0.5
            got = {}
            for tag, dt in dtypes.items():
                x, mask = _batch(dt, 23, B, 10 * i + t, cfg["loss"], empty_row=(t % B if i % 4 == 0 else None))
                if tag == "kernel":
                    got[tag] = step(x, x, mask, _BatchDraws(bits))
                else:
                    got[tag] = _numpy_batch_step(p[tag], st[tag], x, mask, bits, lr=0.2, **cfg)
            assert got["kernel"][1] == got["numpy"][1], (cfg, t)
            clipped_seen.add(got["kernel"][1])
            assert got["kernel"][0] == pytest.approx(got["numpy"][0], rel=1e-12 if dtype == np.float64 else 1e-6,
                                                     abs=1e-12)
        for k in p["numpy"]:
            for part in ("", "momentum."):
                new, ref, exact = (st[tag][part + k] if part else p[tag][k] for tag in ("kernel", "numpy", "exact"))
                if dtype == np.float64:
                    np.testing.assert_allclose(new, ref, rtol=1e-11, atol=1e-13, err_msg=f"{part}{k} {cfg}")
                else:
                    err_new = float(np.abs(new.astype(np.float64) - exact).max())
                    assert err_new <= 128 * 2.0 ** -24 * float(np.abs(exact).max()), (f"{part}{k}", cfg, err_new)
        assert not np.array_equal(p["kernel"]["dec.W2"], _model(dtype)["dec.W2"])  # it did train
    assert clipped_seen == {True, False}  # both sides of the clipping were exercised


@needs_numba
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fortran", [True, False])
def test_batch_step_on_one_row_is_the_one_user_step(dtype, fortran):
    """stepb on a batch of one row computes what step1 computes, bit for bit (same sums in the
    same order; the Gram norm of one row is |g|^2 |a|^2)."""
    for cfg in (CONFIGS[5], CONFIGS[29], CONFIGS[47]):
        runs = []
        for kernel in ("step1", "stepb"):
            p = _model(dtype, fortran=fortran)
            st = optim.sgd_init(p)
            step = ae_train._FusedStep.make(p, st, loss=cfg["loss"], lr=0.2, momentum=cfg["momentum"],
                                            nesterov=cfg["nesterov"], weight_decay=cfg["wd"], clip=cfg["clip"],
                                            dropout=cfg["dropout"])
            K = ae_kernels
            out = []
            for t in range(3):
                x, mask = _row(dtype, 23, t, cfg["loss"])
                keep = (np.random.default_rng(t).random((1, 8)) >= 0.5).astype(dtype) * 2
                scale = 1.0 / mask.sum()
                step.par[K.P_SCALE] = scale
                step.pt[K.T_LOSS_SCALE] = scale if cfg["loss"] == "bce" else 2 * scale
                m = mask.astype(dtype)
                if kernel == "step1":
                    out.append(COMPILED.step1(*step.args, x, x, m, keep[0], step.par, step.pt, *step.flags))
                else:
                    out.append(COMPILED.stepb(*step.args, x[None], x[None], m[None], np.zeros(1, np.int64), keep,
                                              step.par, step.pt, *step.flags))
            runs.append((out, [a.tobytes() for a in step.args]))
        assert runs[0] == runs[1], cfg


def _users(n_users, n_items, rated, seed, loss, dtype):
    rng = np.random.default_rng(seed)
    x = np.zeros((n_users, n_items), dtype)
    for u in range(n_users):
        its = rng.choice(n_items - 10, rated, replace=False)  # the last 10 items: never rated (cut away)
        x[u, its] = rng.integers(1, 6, rated)
    mask = x != 0
    if loss == "bce":
        x = (x >= 3.5).astype(dtype)
    return x, mask


@needs_numba
@pytest.mark.parametrize("loss", ["mse", "bce"])
@pytest.mark.parametrize("batch", [1, 3, 10])
def test_lazy_training_uses_the_kernel_and_agrees_with_numpy(loss, batch, monkeypatch):
    """local_train(lazy=True) through the fused steps (steps1 at batch 1, stepsb for batches of
    several users; 7 users, so the last batch of each epoch is shorter) against the same training
    with the kernel switched off (the NumPy steps): same FLOPs, steps and last-epoch loss to
    rounding, models equal to rounding."""
    x, mask = _users(7, 60, 9, 5, loss, np.float64)
    params0 = ae.init_params(60, np.random.default_rng(5), (16, 8), dtype=np.float64)
    calls = []
    real_make = ae_train._FusedStep.make

    def counting_make(*a, **kw):
        got = real_make(*a, **kw)
        if got is not None:  # count the steps each whole-training call makes
            if batch == 1:
                kern = got.kern_steps
                got.kern_steps = lambda *args: calls.append(len(args[20])) or kern(*args)  # args[20]: rows
            else:
                kern = got.kern_batches
                got.kern_batches = lambda *args: calls.append(len(args[19]) - 1) or kern(*args)  # args[19]: starts
        return got

    runs = {}
    for fused in (True, False):
        monkeypatch.setattr(ae_train._FusedStep, "make", counting_make if fused else (lambda *a, **kw: None))
        p = ae.copy_params(params0)
        st = optim.sgd_init(p)
        res = [ae_train.local_train(p, st, x, x, mask, epochs=2, batch=batch, lr=0.1,
                                    rng=np.random.default_rng(t), loss=loss, momentum=0.9, nesterov=True,
                                    weight_decay=5e-4, clip=1.0, dropout=0.5, lazy=True) for t in range(2)]
        runs[fused] = (p, st, res)
    per_epoch = -(-7 // batch)
    assert calls == [2 * per_epoch] * 2  # every step of both calls went through the kernel
    (p1, s1, r1), (p0, s0, r0) = runs[True], runs[False]
    assert [(r.flops, r.steps) for r in r1] == [(r.flops, r.steps) for r in r0]
    assert r1[0].steps == 2 * per_epoch
    np.testing.assert_allclose([r.loss for r in r1], [r.loss for r in r0], rtol=1e-10)
    for k in p0:
        np.testing.assert_allclose(p1[k], p0[k], rtol=1e-10, atol=1e-12, err_msg=k)
        np.testing.assert_allclose(s1[f"momentum.{k}"], s0[f"momentum.{k}"], rtol=1e-10, atol=1e-12, err_msg=k)

# --------------------------------------------------------------------------- predicting chosen entries


def _entries_case(dtype, fortran, seed=3, users=6, n=23):
    rng = np.random.default_rng(seed)
    p = _model(dtype, n=n, hidden=(18, 8), seed=seed, fortran=fortran)  # 18: four rows at a time, and two
    x = np.where(rng.random((users, n)) < 0.3, rng.integers(1, 6, (users, n)), 0).astype(dtype)
    x[2] = 0  # a user with no input at all: the biases alone
    counts = rng.integers(0, 5, users)
    items = np.concatenate([np.sort(rng.choice(n, c, replace=False)) for c in counts]).astype(np.int64)
    return p, x, counts, items


@needs_numba
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("fortran", [True, False])
@pytest.mark.parametrize("kernels", ["compiled", "python"])
def test_predicting_chosen_entries_equals_the_full_prediction(dtype, fortran, kernels):
    p, x, counts, items = _entries_case(dtype, fortran)
    full = ae.predict(p, x)  # every output, dense NumPy
    want = np.concatenate([full[r, items[c0:c0 + c]] for r, (c0, c) in
                           enumerate(zip(np.concatenate([[0], np.cumsum(counts)[:-1]]), counts))])
    pred = ae_train._PredictEntries.make(p)
    assert pred is not None and pred.by_column == fortran
    if kernels == "python":  # the kernel's own Python copy: the loops, not the compiler
        pred.kern = ae_kernels.python().predict_entries
    got = pred(x, items, counts)
    assert got.dtype == dtype and got.shape == want.shape
    tol = 1e-12 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    assert np.abs(want).max() > 0.1  # not a vacuous comparison


@needs_numba
@pytest.mark.parametrize("task", ["explicit", "implicit"])
@pytest.mark.parametrize("fortran", [True, False])
def test_eval_sums_through_the_kernel_agree_with_numpy(task, fortran, monkeypatch):
    rng = np.random.default_rng(4)
    n_users, n_items = 30, 40
    users = np.repeat(np.arange(n_users), 8)
    items = np.concatenate([rng.choice(n_items, 8, replace=False) for _ in range(n_users)])
    values = rng.integers(1, 6, len(users)).astype(float)
    test = rng.random(len(users)) < 0.25
    t = ae_train.prepare((users[~test], items[~test], values[~test]), (users[test], items[test], values[test]),
                         n_users, n_items, task=task, dtype=np.float64)
    p = _model(np.float64, n=n_items, fortran=fortran)
    got = ae_train.eval_sums(p, t, k=5, clip=(1.0, 5.0), block=7)  # blocks of 7 users: the kernel's
    monkeypatch.setattr(ae_train._PredictEntries, "make", classmethod(lambda cls, params: None))
    want = ae_train.eval_sums(p, t, k=5, clip=(1.0, 5.0), block=7)
    assert got["n"] == want["n"] == int(test.sum()) and got["flops"] == want["flops"]
    key = "sse" if task == "explicit" else "ndcg_sum"
    assert want[key] > 0
    np.testing.assert_allclose(got[key], want[key], rtol=1e-12)


@needs_numba
def test_eval_sums_plan_is_built_once_per_task_and_dtype_and_changes_nothing():
    """The blocks eval_sums derives from a task (rows' non-zeros, test-entry offsets) are built at the
    first evaluation and reused: later evaluations, of other models too, give what a fresh task gives."""
    rng = np.random.default_rng(9)
    n_users, n_items = 12, 40
    users = np.repeat(np.arange(n_users), 9)
    items = np.concatenate([rng.choice(n_items, 9, replace=False) for _ in range(n_users)])
    values = rng.integers(1, 6, len(users)).astype(float)
    test = rng.random(len(users)) < 0.3
    args = ((users[~test], items[~test], values[~test]), (users[test], items[test], values[test]), n_users,
            n_items)
    t = ae_train.prepare(*args, task="explicit", dtype=np.float64)
    models = [_model(np.float64, n=n_items, seed=s) for s in (1, 2)]
    first = [ae_train.eval_sums(p, t, block=5) for p in models]
    plans = dict(t._eval_plans)
    assert len(plans) == 1
    again = [ae_train.eval_sums(p, t, block=5) for p in models]
    assert t._eval_plans == plans and all(t._eval_plans[k] is plans[k] for k in plans)  # reused, not rebuilt
    fresh = [ae_train.eval_sums(p, ae_train.prepare(*args, task="explicit", dtype=np.float64), block=5)
             for p in models]
    assert first == again == fresh and first[0]["sse"] != first[1]["sse"]
    ae_train.eval_sums(_model(np.float32, n=n_items), t, block=5)  # another dtype: its own plan
    ae_train.eval_sums(models[0], t, block=3)  # another block size: its own plan
    assert len(t._eval_plans) == 3


def test_prepare_refuses_repeated_user_item_pairs():
    """A (user, item) pair given twice in the training entries kept its last value silently (x[u, i]
    = 2.0 below, the 5.0 lost); twice in the test entries it was counted twice. Refused, naming the
    first repeated pair and its two positions."""
    train = (np.array([0, 1, 0, 1, 1, 0]), np.array([2, 1, 3, 4, 1, 2]), np.array([5.0, 3.0, 4.0, 1.0, 3.0, 2.0]))
    test = (np.array([0, 1]), np.array([4, 3]), np.array([4.0, 2.0]))
    # (1, 1) repeats at position 4, before (0, 2) repeats at 5
    with pytest.raises(ValueError, match=r"^train entries repeat \(user, item\) = \(1, 1\) at positions 1 and 4 "
                                         r"\(the first repeated pair; 2 repeated entries in total\)"):
        ae_train.prepare(train, test, 2, 5)
    dup_test = (np.array([1, 0, 1, 1]), np.array([3, 4, 0, 3]), np.array([2.0, 4.0, 1.0, 5.0]))
    ok = tuple(a[:4] for a in train)
    with pytest.raises(ValueError, match=r"^test entries repeat \(user, item\) = \(1, 3\) at positions 0 and 3 "
                                         r"\(the first repeated pair; 1 repeated entries in total\)"):
        ae_train.prepare(ok, dup_test, 2, 5, task="implicit")
    # distinct pairs are accepted as before; the same item for two users, or two items of a user, is no repeat
    t = ae_train.prepare(ok, test, 2, 5)
    assert t.x[0].tolist() == [0.0, 0.0, 5.0, 4.0, 0.0] and t.x[1].tolist() == [0.0, 3.0, 0.0, 0.0, 1.0]
    assert t.info == {"train_entries": 4, "test_entries": 2}
    assert t.test_ptr.tolist() == [0, 1, 2] and t.test_items.tolist() == [4, 3]


@needs_numba
def test_indices_out_of_range_are_refused_not_read_out_of_bounds(monkeypatch):
    """A test item past the end used to be accepted by ``prepare`` and then read out of bounds by the
    compiled evaluation (a finite sse from whatever memory follows the output layer) where NumPy's
    path raised; a negative test user was silently dropped. Both are refused."""
    train = (np.array([0, 0, 1]), np.array([0, 2, 1]), np.array([4.0, 3.0, 5.0]))
    for test in ((np.array([0, 1]), np.array([5, 3]), np.array([4.0, 2.0])),   # item 5 of 5
                 (np.array([-1, 1]), np.array([1, 3]), np.array([4.0, 2.0])),  # user -1
                 (np.array([0, 2]), np.array([1, 3]), np.array([4.0, 2.0]))):  # user 2 of 2
        with pytest.raises(ValueError):
            ae_train.prepare(train, test, 2, 5)
    with pytest.raises(ValueError):
        ae_train.prepare((np.array([0]), np.array([-1]), np.array([4.0])), train, 2, 5)
    # an AETask built by hand with such an item: the compiled evaluation refuses it as NumPy's does
    t = ae_train.prepare(train, (np.array([0, 1]), np.array([4, 3]), np.array([4.0, 2.0])), 2, 5)
    t = ae_train.AETask(t.task, t.x, t.mask, t.test_ptr, np.array([5, 3]), t.test_values)
    p = _model(np.float32, n=5, hidden=(4, 3))
    with pytest.raises(ValueError):
        ae_train.eval_sums(p, t)
    monkeypatch.setattr(ae_train._PredictEntries, "make", classmethod(lambda cls, params: None))
    with pytest.raises(ValueError):
        ae_train.eval_sums(p, t)
