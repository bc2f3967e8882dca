"""FCF math (fedsim.math.fcf): closed form, Eq. 3 gradient, server step."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.math.fcf import (
    AdamState,
    fcf_client,
    fcf_item_gradient,
    fcf_server_update,
    fcf_user_factor,
    fcf_user_loss,
)

ALPHA, LAM = 4.0, 0.3


def setup(m=30, d=4, seed=0):
    rng = np.random.default_rng(seed)
    Q = rng.normal(0, 0.5, (m, d))
    items = np.array([1, 5, 7, 7, 22])  # duplicate: y is binary
    return Q, items


def test_closed_form_equals_weighted_ridge_lstsq():
    Q, items = setup()
    p = fcf_user_factor(Q, items, ALPHA, LAM)
    y = np.zeros(Q.shape[0])
    y[np.unique(items)] = 1.0
    w = np.sqrt(1.0 + ALPHA * y)
    A = np.vstack([w[:, None] * Q, np.sqrt(LAM) * np.eye(Q.shape[1])])
    rhs = np.concatenate([w * y, np.zeros(Q.shape[1])])
    ref = np.linalg.lstsq(A, rhs, rcond=None)[0]
    np.testing.assert_allclose(p, ref, rtol=1e-10, atol=1e-12)
    # and with the shared Q^T Q
    np.testing.assert_allclose(fcf_user_factor(Q, items, ALPHA, LAM, QtQ=Q.T @ Q), p, rtol=1e-12)


def test_closed_form_is_a_minimum():
    Q, items = setup(seed=1)
    p = fcf_user_factor(Q, items, ALPHA, LAM)
    f0 = fcf_user_loss(Q, p, items, ALPHA, LAM)
    rng = np.random.default_rng(2)
    for _ in range(20):
        assert fcf_user_loss(Q, p + 1e-3 * rng.normal(size=p.shape), items, ALPHA, LAM) > f0


def test_gradient_matches_eq3_and_finite_differences():
    Q, items = setup(seed=3)
    p, grad = fcf_client(Q, items, ALPHA, LAM)
    assert grad.shape == Q.shape  # all m items
    y = np.zeros(Q.shape[0])
    y[np.unique(items)] = 1.0
    for i in (0, 1, 7, 29):  # Eq. 3 literally
        np.testing.assert_allclose(grad[i], (1 + ALPHA * y[i]) * (p @ Q[i] - y[i]) * p, rtol=1e-12)
    h = 1e-6
    for i, f in [(1, 0), (7, 3), (12, 2), (29, 1)]:
        Qp, Qm = Q.copy(), Q.copy()
        Qp[i, f] += h
        Qm[i, f] -= h
        # partial derivative of J_u at fixed p_u
        fd = (fcf_user_loss(Qp, p, items, ALPHA, LAM) - fcf_user_loss(Qm, p, items, ALPHA, LAM)) / (2 * h)
        assert grad[i, f] == pytest.approx(fd, rel=1e-6, abs=1e-9)
        # envelope theorem: also the derivative of min_p J_u(p, Q), p re-solved
        env = (fcf_user_loss(Qp, fcf_user_factor(Qp, items, ALPHA, LAM), items, ALPHA, LAM)
               - fcf_user_loss(Qm, fcf_user_factor(Qm, items, ALPHA, LAM), items, ALPHA, LAM)) / (2 * h)
        assert grad[i, f] == pytest.approx(env, rel=1e-5, abs=1e-8)


def test_server_update_sgd_average_and_reg():
    Q = np.ones((3, 2))
    G = np.arange(6, dtype=float).reshape(3, 2)
    out = fcf_server_update(Q, G, lr=0.1, lam=0.5)
    assert out is Q
    np.testing.assert_allclose(Q, 1 - 0.1 * (np.arange(6).reshape(3, 2) + 0.5))
    Q = np.ones((3, 2))
    fcf_server_update(Q, G, lr=0.1, n_clients=2, average=True)
    np.testing.assert_allclose(Q, 1 - 0.05 * np.arange(6).reshape(3, 2))
    with pytest.raises(ValueError):
        fcf_server_update(Q, G, 0.1, average=True)


def test_server_update_adam_first_step_is_sign():
    Q = np.zeros((2, 2))
    st = AdamState.zeros(Q.shape)
    fcf_server_update(Q, np.array([[2.0, -3.0], [0.5, 0.0]]), lr=0.01, adam=st)
    np.testing.assert_allclose(Q, [[-0.01, 0.01], [-0.01, 0.0]], rtol=1e-6)
    assert st.t == 1


def test_federated_rounds_decrease_the_total_loss():
    rng = np.random.default_rng(4)
    m, d = 25, 3
    Q = rng.normal(0, 0.1, (m, d))
    users = [rng.choice(m, 5, replace=False) for _ in range(12)]

    def total(Q):
        return sum(fcf_user_loss(Q, fcf_user_factor(Q, u, ALPHA, LAM), u, ALPHA, LAM) for u in users)

    before = total(Q)
    for _ in range(30):
        QtQ = Q.T @ Q
        G = sum(fcf_client(Q, u, ALPHA, LAM, QtQ=QtQ)[1] for u in users)
        fcf_server_update(Q, G, lr=0.02, lam=LAM)
    assert total(Q) < 0.8 * before


def test_fcf_refuses_positive_items_outside_the_catalogue():
    """A positive item -1 used row m - 1 of Q (NumPy's negative indexing) in the closed-form p_u
    and the gradient, silently; m raised a bare IndexError. Both name the item now."""
    Q = np.random.default_rng(0).standard_normal((5, 2))
    p = np.array([0.5, -0.25])
    for bad in (-1, 5):
        for call in (lambda: fcf_user_factor(Q, [0, bad], 1.0, 0.1), lambda: fcf_item_gradient(Q, p, [bad], 1.0),
                     lambda: fcf_user_loss(Q, p, [bad], 1.0, 0.1)):
            with pytest.raises(ValueError, match=f"positive item {bad} is outside"):
                call()
    assert fcf_item_gradient(Q, p, [4], 1.0).shape == (5, 2)


def test_a_system_singular_in_floating_point_gives_a_nan_user_factor():
    # alpha = 1e20 (finite: the configuration takes it) loses Q^T Q and lam beside alpha Q_+^T Q_+
    # (rank 2 < d): np.linalg.solve raised LinAlgError, a traceback of the FCF client; NaN is what
    # a diverged model has, which the server's check reports
    from fedsim.math.fcf import fcf_user_factor

    Q = np.random.default_rng(0).normal(0.0, 0.1, (40, 10))
    p = fcf_user_factor(Q, np.array([0, 1]), 1e20, 0.1)
    assert p.shape == (10,) and np.isnan(p).all()
    p_ok = fcf_user_factor(Q, np.array([0, 1]), 1.0, 0.1)  # well posed: solved as before
    A = Q.T @ Q + Q[:2].T @ Q[:2] + 0.1 * np.eye(10)
    np.testing.assert_allclose(p_ok, np.linalg.solve(A, 2.0 * Q[:2].sum(axis=0)), rtol=1e-12)


def test_singularity_is_decided_by_the_eigenvalues_not_by_whether_lapack_raises():
    """The NaN above came from LAPACK raising, which one CPU's kernels did and another's did not
    (finite garbage, 241.38...: the test failed there). With lam = 0 the common path's margin does
    not hold, so the eigenvalues decide: a Q with one column the sum of two others (rank d - 1 in
    floating point, no exact zero pivot) is singular whatever the host; a full-rank Q is solved
    and equals the least-squares solution of the same system."""
    rng = np.random.default_rng(4)
    Q = rng.normal(0.0, 0.1, (40, 6))
    Q[:, 5] = Q[:, 0] + Q[:, 1] * (1.0 / 3.0)
    assert np.isnan(fcf_user_factor(Q, np.array([2, 7]), 0.5, 0.0)).all()
    Q[:, 5] = rng.normal(0.0, 0.1, 40)
    p = fcf_user_factor(Q, np.array([2, 7]), 0.5, 0.0)
    A = Q.T @ Q + 0.5 * Q[[2, 7]].T @ Q[[2, 7]]
    b = 1.5 * Q[[2, 7]].sum(axis=0)
    np.testing.assert_allclose(p, np.linalg.lstsq(A, b, rcond=None)[0], rtol=1e-9)
    # with a precomputed QtQ as the server passes it, and with a non-finite one
    np.testing.assert_array_equal(fcf_user_factor(Q, np.array([2, 7]), 0.5, 0.0, QtQ=Q.T @ Q), p)
    bad = Q.T @ Q
    bad[0, 0] = np.inf
    assert np.isnan(fcf_user_factor(Q, np.array([2, 7]), 0.5, 0.1, QtQ=bad)).all()


def test_fcf_client_converts_q_once_and_equals_its_two_steps():
    # a client round converted the received (float32) Q to float64 twice, once per step
    Q64, items = setup(m=40, d=5, seed=3)
    Q32 = Q64.astype(np.float32)

    class Counted:  # an array-like that counts its conversions
        shape = Q32.shape
        calls = 0

        def __array__(self, dtype=None, copy=None):
            Counted.calls += 1
            return Q32.astype(dtype or Q32.dtype)

    p, g = fcf_client(Counted(), items, ALPHA, LAM)
    assert Counted.calls == 1
    p_want = fcf_user_factor(Q32, items, ALPHA, LAM)
    g_want = fcf_item_gradient(Q32, p_want, items, ALPHA)
    assert p.tobytes() == p_want.tobytes() and g.tobytes() == g_want.tobytes()
    assert g.dtype == np.float64 and g.shape == (40, 5)
