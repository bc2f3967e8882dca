"""Tests written from a hand mutation-testing pass over fedsim/math: each one fails with a
specific mutant of the code applied (named in its docstring) and checks the function against an
independent computation (a plain loop, a hand-computed case, a closed form or SciPy), never
against the function's own output."""

import inspect
import math

import numpy as np
import pytest

from fedsim.math.optim import clip_coef, cosine_lr
from fedsim.math.fedrec_central import train_pmf_batch, train_pmf_sgd, train_svdpp_sgd
from fedsim.math.fpl_central import select_clients
from fedsim.math.knn import exact_neighbours, top_neighbours
from fedsim.math.metrics import hits_at, precision_at
from fedsim.math.active import merge_active
from fedsim.math.ae_train import EMPTY_SUMS, finish_eval, ndcg_test_items
from fedsim.math.bpr import BPRReg, fpl_client_round, make_triple_sampler
from fedsim.math.bpr_central import sample_epoch_triples, train_bpr
from fedsim.math.denoise import denoiser_sums_dense
from fedsim.math.fcf import AdamState, fcf_server_update
from fedsim.math.filling import n_sampled, sample_unrated, users_sampling_all
from fedsim.math.hitmask import hit_masks, popcount
from fedsim.math.pmf import pmf_sgd_client_step, predict
from fedsim.math.rows import check_rows
from fedsim.math.stats import wilcoxon_signed_rank

# ---------------------------------------------------------------------------------------------
# metrics


def test_padding_is_never_a_hit_even_next_to_the_largest_test_item_id():
    """Mutant: ``hits = np.isin(key_rec, key_test)`` without ``& (r >= 0)``. A padded -1 of user
    u has the key ``u * 2**32 - 1``, which is the key of user u-1's item 2**32 - 1 (an id the
    test CSR accepts): without the mask user 1's padding counted as a hit."""
    big = (1 << 32) - 1
    test_csr = (np.array([0, 1, 2]), np.array([big, 3]))  # user 0: item 2**32-1; user 1: item 3
    recs = np.array([[big, 0], [-1, -1]])  # user 1 got no recommendation at all
    assert hits_at(recs, test_csr, 2).tolist() == [1, 0]
    assert precision_at(recs, test_csr, 2, per_user=True).tolist() == [0.5, 0.0]


# ---------------------------------------------------------------------------------------------
# FedRec PMF


def test_pmf_predict_is_the_dot_product_of_the_pair_of_each_entry():
    """Mutant: ``V[users]`` for ``V[items]`` in ``pmf.predict`` (Eq. 1)."""
    rng = np.random.default_rng(3)
    U = rng.normal(size=(3, 4))
    V = rng.normal(size=(5, 4))
    users, items = np.array([0, 2, 2, 1]), np.array([4, 0, 3, 1])
    want = [sum(U[u, f] * V[i, f] for f in range(4)) for u, i in zip(users, items)]
    assert predict(U, V, users, items) == pytest.approx(want, rel=1e-12)


def test_users_sampling_all_leaves_out_a_user_whose_rho_asks_for_exactly_the_unrated_items():
    """Mutant: ``wanted >= m - n`` for ``wanted > m - n``. With m = 6, a user of 2 ratings and
    rho = 2 asks for 4 items and there are exactly 4 unrated ones: the cap does not bite (the
    draw is min(4, 4) either way), so the user is not one whose rho was capped; with m = 5 it is."""
    indptr = np.array([0, 2, 3])  # user 0: 2 ratings, user 1: 1 rating
    assert users_sampling_all(indptr, 6, 2.0) == []  # asks 4 of 4 and 2 of 5
    assert users_sampling_all(indptr, 5, 2.0) == [0]  # asks 4 of 3 (capped) and 2 of 4
    # the definition, user by user: int(rho n) > m - n
    for m in range(3, 9):
        for rho in (0.5, 1.0, 2.0, 3.0):
            want = [u for u, n in enumerate((2, 1)) if int(rho * n) > m - n]
            assert users_sampling_all(indptr, m, rho) == want, (m, rho)
            for u, n in enumerate((2, 1)):
                rng = np.random.default_rng(0)
                got = sample_unrated(rng, np.arange(n), m, rho)
                assert len(got) == n_sampled(n, m, rho) == min(int(rho * n), m - n)


# ---------------------------------------------------------------------------------------------
# statistics


def test_wilcoxon_auto_is_exact_at_50_pairs_and_approximate_at_51_as_scipy():
    """Mutant: ``d.size < 50`` for ``d.size <= 50`` in the choice of ``method="auto"``. SciPy's
    ``auto`` is exact up to and including 50 pairs (without ties or zeros)."""
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(5)
    for n in (50, 51):
        x = rng.permutation(np.arange(1, n + 1)) * np.where(rng.random(n) < 0.4, -1, 1) / 7.0
        got = wilcoxon_signed_rank(x, np.zeros(n))
        want = stats.wilcoxon(x, np.zeros(n), method="exact" if n == 50 else "approx")
        assert got.method == ("wilcoxon exact" if n == 50 else "wilcoxon approx")
        assert got.statistic == want.statistic
        assert got.pvalue == pytest.approx(want.pvalue, rel=1e-9)
    # the two methods differ at this size: a wrong choice is visible in the p-value
    assert stats.wilcoxon(x[:50], np.zeros(50), method="exact").pvalue != pytest.approx(
        stats.wilcoxon(x[:50], np.zeros(50), method="approx").pvalue, rel=1e-3)


def test_wilcoxon_exact_with_a_tie_rounds_the_upper_tail_statistic_down():
    """Mutant: ``sf[ceil(r_plus)]`` for ``sf[floor(r_plus)]``. Differences 1.5, -1.5, 2..8: ranks
    1.5, 1.5, 3..9, R+ = 43.5, R- = 1.5. The conservative exact p is 2 P(R+ >= 43) = 2 P(R+ <= 2)
    under the null of 9 ranks: the subsets of {1..9} summing to at most 2 are {}, {1}, {2}, so
    p = 2 * 3 / 2**9 (SciPy gives the same); rounding up gave 2 * 2 / 2**9."""
    d = np.array([1.5, -1.5, 2, 3, 4, 5, 6, 7, 8])
    got = wilcoxon_signed_rank(d, np.zeros(9), method="exact")
    subsets_at_most_2 = sum(1 for mask in range(1 << 9)
                            if sum(k + 1 for k in range(9) if mask >> k & 1) <= 2)
    assert subsets_at_most_2 == 3
    assert got.statistic == 1.5
    assert got.pvalue == 2 * subsets_at_most_2 / 2**9
    # and the mirror image (R+ = 1.5) takes the lower tail, rounded up: P(R+ <= 2)
    assert wilcoxon_signed_rank(-d, np.zeros(9), method="exact").pvalue == 2 * 3 / 2**9


# ---------------------------------------------------------------------------------------------
# FedRec++ denoising


def test_dense_denoiser_counts_round_a_sum_that_came_back_a_hair_below_the_integer():
    """Mutant: ``astype(int64)`` (truncation) for ``rint(...).astype(int64)``. A count read off a
    sum in floating point (3 - 2**-33, 1 + 2**-40) is the nearest integer, not the floor."""
    noise_sum = np.arange(8, dtype=np.float64).reshape(4, 2)
    noise_counts = np.array([0.0, 3 - 2.0**-33, 0.0, 1 + 2.0**-40])
    own_items, own_grads = np.array([2]), np.array([[0.5, -0.5]])
    items, sums, counts = denoiser_sums_dense(noise_sum, noise_counts, own_items, own_grads, dtype=np.float64)
    assert items.tolist() == [1, 2, 3]
    assert counts.tolist() == [3, -1, 1]  # item 2: no noise, the denoiser's own rating counted out
    assert sums.tolist() == [[2.0, 3.0], [4.0 - 0.5, 5.0 + 0.5], [6.0, 7.0]]


# ---------------------------------------------------------------------------------------------
# FCF server (Adam)


def _adam_reference(Q0, Gs, lr, b1=0.9, b2=0.999, eps=1e-8):
    """Kingma & Ba (2015), Algorithm 1, element by element."""
    Q = [list(row) for row in Q0]
    m = [[0.0] * len(r) for r in Q0]
    v = [[0.0] * len(r) for r in Q0]
    for t, G in enumerate(Gs, start=1):
        for a in range(len(Q)):
            for b in range(len(Q[a])):
                g = G[a][b]
                m[a][b] = b1 * m[a][b] + (1 - b1) * g
                v[a][b] = b2 * v[a][b] + (1 - b2) * g * g
                mhat = m[a][b] / (1 - b1**t)
                vhat = v[a][b] / (1 - b2**t)
                Q[a][b] -= lr * mhat / (math.sqrt(vhat) + eps)
    return Q


@pytest.mark.parametrize("scale", [1.0, 1e-8])
def test_fcf_adam_follows_kingma_ba_with_its_default_constants(scale):
    """Mutants: ``beta2 = 0.99`` for Kingma & Ba's 0.999 (the first step is a sign step whatever
    beta2 is; later steps are not), and ``mhat / sqrt(vhat + eps)`` for ``mhat / (sqrt(vhat) +
    eps)`` (visible when the gradients are of the order of eps: scale 1e-8)."""
    rng = np.random.default_rng(11)
    Q0 = rng.normal(size=(3, 2))
    Gs = [rng.normal(size=(3, 2)) * scale for _ in range(4)]
    Q = Q0.copy()
    adam = AdamState.zeros(Q.shape)
    for G in Gs:
        fcf_server_update(Q, G, 0.05, adam=adam)
    want = _adam_reference(Q0.tolist(), [G.tolist() for G in Gs], 0.05)
    assert Q == pytest.approx(np.array(want), rel=1e-12, abs=1e-15)
    assert adam.t == 4


# ---------------------------------------------------------------------------------------------
# FPL client sampling


class _FixedUniforms:
    """A stand-in generator whose ``random(shape)`` returns given uniforms."""

    def __init__(self, u):
        self.u = np.asarray(u, dtype=np.float64)

    def random(self, shape):
        assert tuple(shape) == self.u.shape
        return self.u.copy()


def test_a_positive_update_is_sent_only_when_its_uniform_is_strictly_below_pi():
    """Mutant: ``u <= pi`` for ``u < pi`` (the module docstring: sent iff U[2, t] < pi). With
    pi = 0.5 and the Bernoulli uniforms 0.25, 0.5, 0.75 only the first triple's positive goes."""
    Q = np.array([[0.3, -0.1], [-0.2, 0.4]])
    b = np.array([0.05, -0.05])
    sampler = make_triple_sampler(np.array([0]), n_items=2)  # i = 0, j = 1 for every triple
    rng = _FixedUniforms([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.25, 0.5, 0.75]])
    _, up = fpl_client_round(np.array([0.1, 0.2]), Q, b, sampler, 3, 0.05, 0.5, rng)
    assert up.items.tolist() == [1, 1, 1, 0]  # three negatives, then the one positive sent
    assert up.triple.tolist() == [0, 1, 2, 0]
    # pi = 0: never sent, even for a uniform of exactly 0
    _, up0 = fpl_client_round(np.array([0.1, 0.2]), Q, b, sampler, 1, 0.05, 0.0,
                              _FixedUniforms([[0.1], [0.2], [0.0]]))
    assert up0.n_positive == 0


def test_fpl_positive_bias_delta_carries_the_bias_regulariser():
    """Mutant: ``bd_pos = g[send]`` for ``g - lam_bias b_i`` (the same with the paper's lam_bias
    = 0). Eq. 3-5 by hand for one triple with lam_bias = 0.1."""
    Q = np.array([[0.3, -0.1], [-0.2, 0.4]])
    b = np.array([0.05, -0.05])
    p = np.array([0.1, 0.2])
    reg = BPRReg(user=0.01, pos_item=0.02, neg_item=0.003, bias=0.1)
    sampler = make_triple_sampler(np.array([0]), n_items=2)
    _, up = fpl_client_round(p, Q, b, sampler, 1, 0.05, 1.0, _FixedUniforms([[0.5], [0.5], [0.0]]), reg=reg)
    x = (0.05 + 0.1 * 0.3 + 0.2 * -0.1) - (-0.05 + 0.1 * -0.2 + 0.2 * 0.4)
    g = 1.0 / (1.0 + math.exp(x))
    assert up.items.tolist() == [1, 0]
    assert up.bias_deltas.tolist() == pytest.approx([-g - 0.1 * -0.05, g - 0.1 * 0.05], rel=1e-12)
    assert up.deltas[1].tolist() == pytest.approx([g * 0.1 - 0.02 * 0.3, g * 0.2 - 0.02 * -0.1], rel=1e-12)


# ---------------------------------------------------------------------------------------------
# centralized BPR


def test_train_bpr_evaluates_after_the_last_epoch_also_off_the_eval_grid():
    """Mutant: the ``or epoch == epochs`` of the callback condition dropped (the docstring: after
    every ``eval_every`` epochs and after the last)."""
    indptr, indices = np.array([0, 2, 3]), np.array([0, 1, 2])
    seen = []
    model = train_bpr(indptr, indices, 2, 4, 2, 5, 0.05, np.random.default_rng(0),
                      eval_callback=lambda e, m: seen.append(e), eval_every=2)
    assert seen == [2, 4, 5]
    assert model.epochs_done == 5 and len(model.history) == 3


def test_epoch_negatives_of_a_user_exclude_an_item_the_previous_user_ends_with():
    """Mutant: the de-duplication of repeated (user, item) pairs keyed on the item alone, so user
    1's first item, equal to user 0's last, was dropped from user 1's positives: user 1 then drew
    its own item 3 as a negative."""
    indptr = np.array([0, 2, 3, 5])
    indices = np.array([1, 3, 3, 0, 3])  # user 0: {1, 3}, user 1: {3}, user 2: {0, 3}
    pos_sets = [{1, 3}, {3}, {0, 3}]
    users, pos, neg = sample_epoch_triples(indptr, indices, 5, np.random.default_rng(2), n=4000)
    for u in range(3):
        mine = users == u
        assert set(pos[mine].tolist()) == pos_sets[u]
        # every non-positive item is drawn, and no positive
        assert set(neg[mine].tolist()) == set(range(5)) - pos_sets[u]


# ---------------------------------------------------------------------------------------------
# optimisers (PersonalFR)


def test_clip_coef_at_exactly_the_bound_does_not_clip():
    """Mutant: ``coef <= 1`` for ``coef < 1`` (PyTorch's rule, as the docstring says: applied
    when below 1): a coefficient of exactly 1 scales nothing, and is not counted."""
    grads = {"a": np.array([3.0, 0.0]), "b": np.array([[0.0, 4.0]])}  # norm 5
    norm, coef, flops = clip_coef(grads, 5.0 + 1e-6)
    assert norm == 5.0 and (5.0 + 1e-6) / (norm + 1e-6) == 1.0
    assert coef is None and flops == 2 * 4
    norm, coef, flops = clip_coef(grads, 2.5)
    assert coef == pytest.approx(2.5 / (5.0 + 1e-6), rel=1e-15) and flops == 3 * 4


def test_cosine_lr_runs_from_base_to_min_lr():
    """Mutant: ``base_lr * ...`` for ``(base_lr - min_lr) * ...`` (the same with min_lr = 0).
    CosineAnnealingLR's closed form: base at t = 0, the midpoint halfway, min_lr at t_max."""
    assert cosine_lr(0.1, 0, 10, min_lr=0.02) == pytest.approx(0.1, rel=1e-15)
    assert cosine_lr(0.1, 5, 10, min_lr=0.02) == pytest.approx(0.06, rel=1e-12)
    assert cosine_lr(0.1, 10, 10, min_lr=0.02) == pytest.approx(0.02, rel=1e-12)
    assert cosine_lr(0.1, 2, 10, min_lr=0.02) == pytest.approx(0.02 + 0.08 * (1 + math.cos(math.pi / 5)) / 2)


# ---------------------------------------------------------------------------------------------
# FedRec trainers' defaults, kNN neighbours


def test_fedrec_trainers_default_to_the_papers_settings():
    """Mutant: ``lam = 0.01`` for the default 0.001 of ``train_pmf_batch`` (no test ran it with
    the default). The settings of the authors' code and of docs/fedrec.md: lambda 0.001 for every
    model, lr 0.8 for PMF(B) and 0.01 for the stochastic models, decay 0.9, d 20, T 100."""
    want = {train_pmf_batch: 0.8, train_pmf_sgd: 0.01, train_svdpp_sgd: 0.01}
    for fn, lr in want.items():
        p = inspect.signature(fn).parameters
        got = {k: p[k].default for k in ("lr", "lam", "decay", "d", "T")}
        assert got == {"lr": lr, "lam": 0.001, "decay": 0.9, "d": 20, "T": 100}, fn.__name__


def test_exact_neighbours_rank_a_negative_cosine_below_a_zero_one():
    """Mutant: the sign of ``a.b`` dropped from the ranking key ``sign(a.b) (a.b)^2 / (|a|^2 |b|^2)``,
    which ranked a cosine of -0.9 above one of 0.5. Reference: the cosines in plain Python."""
    x = np.array([[1.0, 0.0, 0.0],
                  [-1.0, 0.2, 0.0],   # cos with row 0: about -0.98
                  [1.0, 1.0, 1.0],    # 0.577
                  [0.0, 0.0, 1.0]])   # 0
    def cos(a, b):
        num = sum(p * q for p, q in zip(a, b))
        return num / math.sqrt(sum(p * p for p in a) * sum(q * q for q in b))
    rows = x.tolist()
    for u in range(4):
        others = sorted((v for v in range(4) if v != u), key=lambda v: (-cos(rows[u], rows[v]), v))
        idx, val = exact_neighbours(x, 3)
        assert idx[u].tolist() == others, u
        assert val[u].tolist() == pytest.approx([cos(rows[u], rows[v]) for v in others], abs=1e-6)


def test_top_neighbours_with_k_beyond_the_others_lists_only_the_others():
    """Mutant: ``k = min(k, n)`` for ``min(k, n - 1)``: the row itself (its similarity set to
    -inf) came back as its own last neighbour."""
    sim = np.array([[1.0, 0.2, 0.7], [0.2, 1.0, 0.1], [0.7, 0.1, 1.0]], dtype=np.float32)
    idx, val = top_neighbours(sim, 10)
    assert idx.tolist() == [[2, 1], [0, 2], [0, 1]]
    np.testing.assert_allclose(val, [[0.7, 0.2], [0.2, 0.1], [0.7, 0.1]], rtol=1e-6)
    assert np.isfinite(val).all()


def test_an_fpl_round_of_every_client_draws_nothing_from_the_server_generator():
    """Mutant: ``k > n`` for ``k >= n``: with k == n the clients are all of them either way, but
    the mutant drew them with ``rng.choice`` and moved the server's generator (every later round's
    selection then differed from the documented draw sequence: nothing drawn when k >= n)."""
    for k in (5, 6):
        rng = np.random.default_rng(7)
        assert list(select_clients(rng, 5, k)) == [0, 1, 2, 3, 4]
        assert rng.random() == np.random.default_rng(7).random()
    rng = np.random.default_rng(7)
    got = select_clients(rng, 5, 3)
    assert got == sorted(np.random.default_rng(7).choice(5, size=3, replace=False).tolist())


# ---------------------------------------------------------------------------------------------
# PersonalFR evaluation


def test_ndcg_over_test_items_breaks_score_ties_by_item_order():
    """Mutant: descending order taken as ``argsort(s)[::-1]``, which puts the *later* of two
    equal scores first (the docstring: ties keep item order)."""
    assert ndcg_test_items(np.array([1.0, 1.0, 0.0]), np.array([0.0, 1.0, 0.0]), k=1) == 0.0
    assert ndcg_test_items(np.array([1.0, 1.0, 0.0]), np.array([1.0, 0.0, 0.0]), k=1) == 1.0
    # k = 2: the positive item 1 at rank 2 of 2: (1 / log2(3)) / 1
    assert ndcg_test_items(np.array([1.0, 1.0, 0.0]), np.array([0.0, 1.0, 0.0]), k=2) == pytest.approx(
        1.0 / math.log2(3.0), rel=1e-15)


def test_finish_eval_averages_ndcg_over_the_users_not_the_test_entries():
    """Mutant: ``ndcg_sum / n`` (test entries) for ``ndcg_sum / ndcg_users``."""
    sums = dict(EMPTY_SUMS, ndcg_sum=1.5, ndcg_users=2, n=5)
    assert finish_eval(sums, "implicit") == {"ndcg": 0.75, "n": 5}
    assert finish_eval(dict(EMPTY_SUMS, sse=8.0, n=2), "explicit") == {"rmse": 2.0, "n": 2}


# ---------------------------------------------------------------------------------------------
# FedRec stochastic client: a given user mean


def _sgd_reference(U, V, items, ratings, lr, lam):
    """The authors' order in plain Python: e = r - U.V_i; g_i = lam V_i - e U; U -= lr (lam U - e V_i)."""
    U = list(U)
    grads = []
    for i, r in zip(items, ratings):
        e = r - sum(u * v for u, v in zip(U, V[i]))
        grads.append([lam * v - e * u for u, v in zip(U, V[i])])
        U = [u - lr * (lam * u - e * v) for u, v in zip(U, V[i])]
    return U, grads


def test_a_given_user_mean_is_the_virtual_rating_of_the_sampled_items():
    """Mutant: ``r_mean`` ignored (the mean recomputed from the ratings). The caller's mean (say
    the mean of the user's whole training set when it trains on a part) is the UA rating."""
    rng = np.random.default_rng(4)
    V = rng.normal(scale=0.3, size=(6, 3))
    U0 = np.array([0.1, -0.2, 0.3])
    rated, r = np.array([1, 4]), np.array([2.0, 3.0])
    sampled = np.array([0, 5])
    up = pmf_sgd_client_step(U0, V, rated, r, t=0, lr=0.05, lam=0.01, rho=1.0, sampled=sampled,
                             r_mean=4.5, backend="python")
    U_ref, g_ref = _sgd_reference(U0.tolist(), V.tolist(), [1, 4, 0, 5], [2.0, 3.0, 4.5, 4.5], 0.05, 0.01)
    assert up.items.tolist() == [1, 4, 0, 5]
    np.testing.assert_allclose(up.U, U_ref, rtol=1e-12)
    np.testing.assert_allclose(up.grads, g_ref, rtol=1e-12, atol=1e-15)


# ---------------------------------------------------------------------------------------------
# row updates, hit masks


def test_check_rows_refuses_a_repeated_id_when_ascending_and_the_id_m():
    """Mutants: ``ids[1:] < ids[:-1]`` for ``<=`` (a repeated id passed as ascending, then updated
    once) and ``max >= m`` relaxed to ``> m`` (id m, one past the end, passed)."""
    rows = np.zeros((2, 3))
    check_rows(np.array([0, 2]), rows, 3, 3, ascending=True)  # fine
    with pytest.raises(ValueError, match="repeats"):
        check_rows(np.array([1, 1]), rows, 3, 3, ascending=True)
    with pytest.raises(IndexError):
        check_rows(np.array([0, 3]), rows, 3, 3)
    with pytest.raises(IndexError):
        check_rows(np.array([-1, 2]), rows, 3, 3)


def test_hit_masks_never_count_padding_and_popcount_counts_bit_62():
    """Mutants: the ``r >= 0`` mask of ``hit_masks`` dropped (padding -1 of user 1 has the key of
    user 0's item 2**32 - 1) and ``popcount`` looking at bits 0..61 only."""
    big = (1 << 32) - 1
    masks = hit_masks(np.array([[big, 0], [-1, -1]]), (np.array([0, 1, 2]), np.array([big, 3])), 2)
    assert masks.tolist() == [0b01, 0]
    assert popcount(np.array([1 << 62, (1 << 62) | 5, 0])).tolist() == [1, 3, 0]


def test_algorithm1_merge_fills_inactive_rows_with_the_previous_row_by_client_weight():
    """Mutant: ``rest = len(slices) - weight_i`` for ``sum(w) - weight_i`` (the same with equal
    weights). Algorithm 1 with client weights 2 and 1: each client's rebuilt decoder has its own
    rows where active and the previous global rows elsewhere; the merge is their weighted mean."""
    prev = {"dec.W1": np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]), "dec.b1": np.array([1.0, 2.0, 3.0])}
    a = {"dec.W1": np.array([[10.0, 10.0], [20.0, 20.0]]), "dec.b1": np.array([10.0, 20.0])}  # items 0, 1
    b = {"dec.W1": np.array([[40.0, 40.0]]), "dec.b1": np.array([40.0])}  # item 1
    out = merge_active(prev, [a, b], [[0, 1], [1]], weights=[2.0, 1.0], mode="algorithm1")
    # row 0: (2 * 10 + 1 * prev 1) / 3; row 1: (2 * 20 + 1 * 40) / 3; row 2: nobody, kept
    np.testing.assert_allclose(out["dec.W1"], [[7.0, 7.0], [80 / 3, 80 / 3], [3.0, 3.0]], rtol=1e-15)
    np.testing.assert_allclose(out["dec.b1"], [7.0, 80 / 3, 3.0], rtol=1e-15)
    per_item = merge_active(prev, [a, b], [[0, 1], [1]], weights=[2.0, 1.0])
    np.testing.assert_allclose(per_item["dec.b1"], [10.0, 80 / 3, 3.0], rtol=1e-15)
