"""fedsim.math.stats against textbook values, hand computations and (when installed) SciPy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsim.math.stats import (
    betainc, holm, mean_ci, normal_sf, paired_t_test, t_cdf, t_ppf, t_sf, wilcoxon_signed_rank,
)


def test_t_distribution_textbook_quantiles():
    # two-sided 5 % critical values of Student's t (any table): df 1, 5, 10, 30
    for df, crit in ((1, 12.706204736), (5, 2.570581836), (10, 2.228138852), (30, 2.042272456)):
        assert t_ppf(0.975, df) == pytest.approx(crit, rel=1e-8)
        assert 2 * t_sf(crit, df) == pytest.approx(0.05, rel=1e-8)
    # df = 1 is the Cauchy distribution: P(T <= t) = 1/2 + atan(t)/pi
    for t in (-3.0, -0.5, 0.0, 0.7, 4.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-13)
    # df = 2 has a closed form: P(T <= t) = 1/2 + t / (2 sqrt(2 + t^2))
    for t in (-2.0, 0.3, 5.0):
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-13)
    assert t_sf(math.inf, 3) == 0.0 and t_ppf(0.5, 7) == 0.0 and t_ppf(0.025, 10) == pytest.approx(-2.228138852)


def test_betainc_closed_forms_and_domain():
    # I_x(1, 1) = x; I_x(a, 1) = x^a; I_x(1, b) = 1 - (1 - x)^b
    for x in (0.0, 0.1, 0.5, 0.93, 1.0):
        assert betainc(1, 1, x) == pytest.approx(x, abs=1e-14)
        assert betainc(3.5, 1, x) == pytest.approx(x**3.5, abs=1e-14)
        assert betainc(1, 2.5, x) == pytest.approx(1 - (1 - x) ** 2.5, abs=1e-14)
    with pytest.raises(ValueError):
        betainc(0, 1, 0.5)
    with pytest.raises(ValueError):
        betainc(1, 1, 1.5)
    assert normal_sf(1.959963984540054) == pytest.approx(0.025, rel=1e-12, abs=0)


def test_paired_t_test_hand_computed_case():
    # differences 1, 2, 3, 4, 5: mean 3, sd sqrt(2.5), t = 3 / (sqrt(2.5) / sqrt 5) = 3 sqrt 2
    x = np.array([3.0, 5.0, 7.0, 9.0, 11.0])
    y = np.array([2.0, 3.0, 4.0, 5.0, 6.0])
    r = paired_t_test(x, y)
    assert r.statistic == pytest.approx(3 * math.sqrt(2), rel=1e-12, abs=0)
    assert r.n == 5 and r.mean_diff == 3.0
    # t = 4.2426 with 4 df: two-sided p = 2 * (1 - F(4.2426)); F from the closed form for even df:
    # for df = 4, P(T <= t) = 1/2 + (3/4) u (1 - u^2/3) with u = t / sqrt(t^2 + 4)
    t = 3 * math.sqrt(2)
    u = t / math.sqrt(t * t + 4)
    cdf = 0.5 + 0.75 * u * (1 - u * u / 3)
    assert r.pvalue == pytest.approx(2 * (1 - cdf), rel=1e-10)
    assert r.pvalue == pytest.approx(0.013236, abs=1e-6)
    # swapping the samples flips the sign, keeps p
    s = paired_t_test(y, x)
    assert s.statistic == pytest.approx(-r.statistic) and s.pvalue == pytest.approx(r.pvalue)


def test_paired_t_test_degenerate_and_bad_input():
    assert paired_t_test([1, 2, 3], [1, 2, 3])[:2] == (0.0, 1.0)
    r = paired_t_test([2, 3, 4], [1, 2, 3])
    assert r.statistic == math.inf and r.pvalue == 0.0
    with pytest.raises(ValueError):
        paired_t_test([1, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        paired_t_test([1.0], [2.0])
    with pytest.raises(ValueError):
        paired_t_test([1.0, math.nan], [2.0, 1.0])


def test_wilcoxon_exact_hand_computed():
    # five positive differences with distinct sizes: R+ = 15 is the largest of 2^5 equally likely
    # sign patterns, so the two-sided exact p = 2 / 32
    r = wilcoxon_signed_rank([1.1, 2.2, 3.3, 4.4, 5.5], [0, 0, 0, 0, 0])
    assert r.method == "wilcoxon exact" and r.statistic == 0.0 and r.pvalue == pytest.approx(0.0625)
    # differences 1, -2, 3, 4 (no ties): R+ = 1 + 3 + 4 = 8, R- = 2. Of the 16 subsets of the ranks
    # {1, 2, 3, 4}, three sum to 8 or more ({1,3,4}, {2,3,4}, {1,2,3,4}): two-sided p = 2 * 3 / 16
    r = wilcoxon_signed_rank([1, -2, 3, 4], [0, 0, 0, 0])
    assert r.statistic == 2.0 and r.pvalue == pytest.approx(6 / 16)


def test_wilcoxon_approx_hand_computed_with_ties_and_zeros():
    # d = 0, 1, 1, -1, 2, 2, 2: zeros dropped (n = 6); |d| ranks: the three 1s share 2, the three 2s 5
    # R+ = 2 + 2 + 5 + 5 + 5 = 19, R- = 2; mean 6*7/4 = 10.5; var = (6*7*13 - (3^3-3 + 3^3-3)/2) / 24
    d = np.array([0, 1, 1, -1, 2, 2, 2], dtype=float)
    r = wilcoxon_signed_rank(d, np.zeros(7))
    se = math.sqrt((6 * 7 * 13 - (24 + 24) / 2) / 24)
    z = (19 - 10.5) / se
    assert r.method == "wilcoxon approx" and r.statistic == 2.0 and r.n == 6
    assert r.pvalue == pytest.approx(math.erfc(abs(z) / math.sqrt(2)), rel=1e-12, abs=0)
    assert wilcoxon_signed_rank([1, 2], [1, 2])[:2] == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilcoxon_signed_rank([1, 2], [0, 0], method="permutation")


def test_mean_ci_and_holm_by_hand():
    ci = mean_ci([1.0, 2.0, 3.0, 4.0, 5.0])
    h = 2.776445105 * math.sqrt(2.5) / math.sqrt(5)  # t_{0.975, 4}
    assert ci.mean == 3.0 and ci.low == pytest.approx(3 - h, rel=1e-9) and ci.high == pytest.approx(3 + h, rel=1e-9)
    assert math.isnan(mean_ci([2.0]).low)
    # Holm: sorted 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> monotone 0.06
    assert np.allclose(holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    out = holm([0.2, math.nan, 0.9])
    assert out[0] == pytest.approx(0.4) and math.isnan(out[1]) and out[2] == pytest.approx(0.9)


try:
    import scipy.stats as scipy_stats
except ImportError:  # pragma: no cover - SciPy is the baselines extra
    scipy_stats = None
needs_scipy = pytest.mark.skipif(scipy_stats is None, reason="SciPy (the baselines extra) is the reference here")


@needs_scipy
@pytest.mark.parametrize("seed", range(6))
def test_against_scipy_on_random_samples(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 120))
    x = rng.normal(0.05, 1.0, n)
    y = x - rng.normal(0.2 * (seed % 3), 1.0, n)
    r, ref = paired_t_test(x, y), scipy_stats.ttest_rel(x, y)
    assert r.statistic == pytest.approx(ref.statistic, rel=1e-10)
    assert r.pvalue == pytest.approx(ref.pvalue, rel=1e-8, abs=1e-300)
    df = float(rng.uniform(0.5, 60))
    for t in rng.normal(0, 3, 5):
        assert t_cdf(float(t), df) == pytest.approx(scipy_stats.t.cdf(t, df), rel=1e-10, abs=1e-14)
    for q in (0.6, 0.9, 0.975, 0.999):
        assert t_ppf(q, df) == pytest.approx(scipy_stats.t.ppf(q, df), rel=1e-9)
    ci = mean_ci(x, 0.9)
    lo, hi = scipy_stats.t.interval(0.9, n - 1, loc=x.mean(), scale=scipy_stats.sem(x))
    assert (ci.low, ci.high) == (pytest.approx(lo, rel=1e-9), pytest.approx(hi, rel=1e-9))


@needs_scipy
@pytest.mark.parametrize("seed", range(8))
def test_wilcoxon_against_scipy(seed):
    rng = np.random.default_rng(100 + seed)
    # per-user P@10-like data: few distinct values, many ties and zeros (approximation), and
    # continuous small samples (exact)
    n = int(rng.integers(20, 200))
    x = rng.integers(0, 4, n) / 10
    y = rng.integers(0, 3, n) / 10
    r, ref = wilcoxon_signed_rank(x, y), scipy_stats.wilcoxon(x, y)
    assert r.statistic == pytest.approx(ref.statistic) and r.pvalue == pytest.approx(ref.pvalue, rel=1e-9)
    r = wilcoxon_signed_rank(x, y, zero_method="pratt", method="approx")
    ref = scipy_stats.wilcoxon(x, y, zero_method="pratt", method="asymptotic")
    assert r.pvalue == pytest.approx(ref.pvalue, rel=1e-9)
    m = int(rng.integers(5, 50))
    a, b = rng.normal(0.3, 1, m), rng.normal(0, 1, m)
    r, ref = wilcoxon_signed_rank(a, b), scipy_stats.wilcoxon(a, b)
    assert r.method == "wilcoxon exact"
    assert r.statistic == pytest.approx(ref.statistic) and r.pvalue == pytest.approx(ref.pvalue, rel=1e-9)
    r, ref = wilcoxon_signed_rank(a, b, method="approx"), scipy_stats.wilcoxon(a, b, method="asymptotic")
    assert r.pvalue == pytest.approx(ref.pvalue, rel=1e-9)


def test_exact_wilcoxon_beyond_a_thousand_pairs():
    """The exact null was built as counts of subsets, which overflow float64 past ~1020 pairs:
    method="exact" raised OverflowError there. Built as probabilities (halved at each step: the
    same bits below that) it runs, and agrees with the normal approximation at that size."""
    n = 1030
    d = np.arange(1, n + 1, dtype=float) * np.where(np.arange(n) % 3 == 0, -1.0, 1.0)
    ex = wilcoxon_signed_rank(d, np.zeros(n), method="exact")
    ap = wilcoxon_signed_rank(d, np.zeros(n), method="approx")
    assert ex.method == "wilcoxon exact" and ex.n == n and ex.statistic == ap.statistic
    assert 0.0 < ex.pvalue < 1e-6 and ex.pvalue == pytest.approx(ap.pvalue, rel=0.05)


def test_holm_refuses_p_values_outside_the_unit_interval():
    """A negative p-value came back negative (and "significant"), an infinite one as 1."""
    for bad in ([-0.1, 0.5], [0.01, 1.5], [0.01, math.inf]):
        with pytest.raises(ValueError, match=r"p-values must lie in \[0, 1\]"):
            holm(bad)
    assert holm([0.0, 1.0]).tolist() == [0.0, 1.0]


def test_paired_tests_refuse_differences_that_overflow():
    """1e308 - (-1e308) is inf: the t-test failed inside betainc with a message about its
    arguments, the Wilcoxon test returned a mean difference of inf; both name the pair now."""
    for test in (paired_t_test, wilcoxon_signed_rank):
        with pytest.raises(ValueError, match="difference of pair 0 overflows"):
            test([1e308, 1.0, 2.0], [-1e308, 0.0, 0.5])


def _signed_rank_tail_by_counting(n: int, r_plus: int) -> float:
    """P(R+ >= r_plus) for n untied non-zero differences, counted in exact integers: the number
    of subsets of {1..n} with sum >= r_plus, over 2^n (independent of fedsim's float null)."""
    top = n * (n + 1) // 2
    counts = [1] + [0] * top
    for k in range(1, n + 1):
        for s in range(top, k - 1, -1):
            counts[s] += counts[s - k]
    return sum(counts[r_plus:]) / 2**n


def test_exact_wilcoxon_far_upper_tail_is_summed_not_one_minus_cdf():
    """The upper tail was 1 - cdf, which cancels below ~1e-16: 60 positive differences gave
    p = -8.9e-16 (true 2^-59 = 1.7e-18). Every sign pattern is equally likely under the null and
    only the all-positive one reaches R+ = 60*61/2: one-sided 2^-60, two-sided 2^-59."""
    n = 60
    d = np.arange(1, n + 1, dtype=float) * 0.37
    r = wilcoxon_signed_rank(d, np.zeros(n), method="exact")
    assert r.method == "wilcoxon exact" and r.statistic == 0.0 and r.n == n
    assert r.pvalue == 2.0**-59
    # the mirrored sample (every difference negative) is the lower tail, which was right already
    assert wilcoxon_signed_rank(-d, np.zeros(n), method="exact").pvalue == 2.0**-59
    # two differences negative (ranks 1 and 3): R+ = top - 4, R- = 4. Subsets of {1..60} with
    # sum <= 4: {}, {1}, {2}, {3}, {4}, {1,2}, {1,3}: 7, so p = 2 * 7 / 2^60
    e = d.copy()
    e[[0, 2]] *= -1
    r = wilcoxon_signed_rank(e, np.zeros(n), method="exact")
    assert r.statistic == 4.0 and r.pvalue == pytest.approx(14 / 2**60, rel=1e-12, abs=0)
    assert r.pvalue == pytest.approx(2 * _signed_rank_tail_by_counting(n, n * (n + 1) // 2 - 4), rel=1e-12, abs=0)
    # a tail near 1e-13, where 1 - cdf kept only two or three digits
    f = d.copy()
    f[[0, 4, 9, 11, 19]] *= -1  # R- = 1 + 5 + 10 + 12 + 20 = 48
    r = wilcoxon_signed_rank(f, np.zeros(n), method="exact")
    want = 2 * _signed_rank_tail_by_counting(n, n * (n + 1) // 2 - 48)
    assert r.statistic == 48.0 and 1e-16 < want < 1e-11 and r.pvalue == pytest.approx(want, rel=1e-12, abs=0)


@needs_scipy
def test_exact_wilcoxon_far_tail_against_scipy():
    """SciPy's exact two-sided p computed from its lower tail is the reference: for the sample
    whose R+ is small. SciPy itself returns 0.0 for the mirrored sample (its upper tail is
    1 - cdf as well), so fedsim is checked on both signs against SciPy's value for the one
    with R+ small; the two-sided p does not depend on the sign of every difference."""
    rng = np.random.default_rng(7)
    for n, small in ((60, []), (60, [1, 2, 5]), (55, [2, 3, 7, 9]), (70, [1, 4, 6, 10, 13])):
        ranks = np.arange(1, n + 1)
        low = -ranks * 0.25
        low[np.isin(ranks, small)] *= -1  # R+ = sum(small)
        low = rng.permutation(low)
        d = -low  # R+ = top - sum(small)
        ref = scipy_stats.wilcoxon(low, method="exact")
        assert 0.0 < ref.pvalue < 1e-13
        for sample in (low, d):
            r = wilcoxon_signed_rank(sample, np.zeros(n), method="exact")
            assert r.statistic == ref.statistic and r.pvalue == pytest.approx(ref.pvalue, rel=1e-12, abs=0)


def _holm_rejects(p: list[float], alpha: float) -> set[int]:
    """Holm's procedure as the textbook states it (no adjusted p-values): sort increasingly and
    reject H_(1), H_(2), ... while p_(k) <= alpha / (m - k + 1); stop at the first that is not."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    out = set()
    for k, i in enumerate(order):
        if p[i] > alpha / (len(p) - k):
            break
        out.add(i)
    return out


def test_holm_adjusted_p_values_reject_what_holms_procedure_rejects():
    # the adjusted p_i is the smallest family-wise level at which Holm's step-down procedure
    # rejects H_i: at every alpha, {i: adjusted p_i <= alpha} is the procedure's rejection set
    rng = np.random.default_rng(3)
    for trial in range(200):
        m = int(rng.integers(1, 16))
        p = (rng.uniform(0, 0.1, m) if trial % 2 else rng.uniform(0, 1, m)).tolist()
        if trial % 5 == 0 and m > 1:
            p[1] = p[0]  # ties
        adj = holm(p)
        assert np.all((adj >= np.asarray(p)) & (adj <= 1.0))
        order = np.argsort(p, kind="mergesort")
        assert np.all(np.diff(adj[order]) >= 0)  # monotone in the raw order
        # just above and just below each adjusted value (at it, p x k <= alpha and p <= alpha / k may
        # round apart), below 1 (the cap: an adjusted 1 is no rejection at any level below 1)
        for alpha in sorted({x for x in adj.tolist() if x < 1} | {0.01, 0.05, 0.1}):
            for a in (alpha * (1 + 1e-9), alpha * (1 - 1e-9)):
                assert {i for i in range(m) if adj[i] <= a} == _holm_rejects(p, a), (p, a)


def test_holm_capped_at_one_by_hand():
    # 0.3 x 3 = 0.9, 0.4 x 2 = 0.8 -> 0.9 (monotone), 0.6 x 1 = 0.6 -> 0.9; 0.5 x 3 = 1.5 -> 1
    assert np.allclose(holm([0.6, 0.3, 0.4]), [0.9, 0.9, 0.9])
    assert holm([0.5, 0.7, 0.9]).tolist() == [1.0, 1.0, 1.0]
    assert holm([0.01, 0.01]).tolist() == [0.02, 0.02]  # tied: both 0.01 x 2
    assert holm([]).size == 0


def test_holm_agrees_with_statsmodels():
    multitest = pytest.importorskip("statsmodels.stats.multitest",
                                    reason="statsmodels is not installed (not a dependency of fedsim)")
    rng = np.random.default_rng(4)
    for m in (1, 2, 5, 12, 40):
        p = rng.uniform(0, 0.2, m)
        assert np.allclose(holm(p), multitest.multipletests(p, method="holm")[1], rtol=1e-12, atol=0)
