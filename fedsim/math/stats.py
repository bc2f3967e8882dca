"""Statistics for comparing recommenders on per-user figures: Student's t distribution, paired
t-test, Wilcoxon signed-rank test, confidence intervals of a mean, Holm's correction.

Plain NumPy and the standard library (no SciPy): the FPL scenarios report these on every run and
SciPy is not a dependency of fedsim. ``tests/test_math_stats.py`` checks every function against
SciPy (when it is installed) and against textbook values.

Conventions: tests are two-sided; ``x`` and ``y`` are paired samples (one value per user, the
same user at the same position); the difference is ``x - y``.  A pair of identical samples (every
difference zero) has no evidence of a difference: both tests return ``statistic = 0`` and
``pvalue = 1`` there, where SciPy returns NaN.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "Interval",
    "TestResult",
    "betainc",
    "holm",
    "mean_ci",
    "normal_sf",
    "paired_t_test",
    "t_cdf",
    "t_ppf",
    "t_sf",
    "wilcoxon_signed_rank",
]


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes
    6.4), for x < (a + 1) / (a + b + 2) where it converges fast."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            return h
    raise ArithmeticError(f"incomplete beta: no convergence for a={a}, b={b}, x={x}")  # pragma: no cover


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1
    (relative accuracy about 1e-14). Raises ``ValueError`` outside that domain."""
    if not (a > 0 and b > 0) or not 0.0 <= x <= 1.0:
        raise ValueError(f"betainc needs a, b > 0 and 0 <= x <= 1, got a={a}, b={b}, x={x}")
    if x == 0.0 or x == 1.0:
        return float(x)
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` > 0 degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))  # P(T > |t|)
    return tail if t >= 0 else 1.0 - tail


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    return 1.0 - t_sf(t, df) if t >= 0 else t_sf(-t, df)


def t_ppf(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom (0 < q < 1), by bisection
    on :func:`t_cdf` to 1e-12 relative."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {q}")
    if q == 0.5:
        return 0.0
    if q < 0.5:
        return -t_ppf(1.0 - q, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < q:
        lo, hi = hi, hi * 2.0
        if hi > 1e300:  # pragma: no cover
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def normal_sf(z: float) -> float:
    """P(Z > z) for the standard normal."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


class TestResult(NamedTuple):
    """A paired two-sided test: its statistic, p-value, the number of pairs used and the mean
    difference ``mean(x - y)`` over all pairs; ``method`` names what was computed."""

    statistic: float
    pvalue: float
    n: int
    mean_diff: float
    method: str


def _paired(x: Any, y: Any) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).ravel()
    b = np.asarray(y, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"paired samples must have the same length, got {a.size} and {b.size}")
    if a.size == 0:
        raise ValueError("paired samples are empty")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("paired samples contain NaN or infinite values")
    with np.errstate(over="ignore"):
        d = a - b
    if not np.all(np.isfinite(d)):
        # 1e308 - (-1e308): the t-test failed inside betainc, the Wilcoxon test gave inf's mean
        k = int(np.flatnonzero(~np.isfinite(d))[0])
        raise ValueError(f"the difference of pair {k} overflows: {a[k]!r} - {b[k]!r}")
    return d


def paired_t_test(x: Any, y: Any) -> TestResult:
    """Student's paired t-test of ``mean(x - y) = 0``: t = mean(d) / (sd(d) / sqrt(n)) with the
    sample standard deviation (ddof 1), two-sided p from t with n - 1 degrees of freedom (as
    ``scipy.stats.ttest_rel``). Every difference zero: t = 0, p = 1; all differences equal and
    non-zero: t = +-inf, p = 0. Raises ``ValueError`` for fewer than 2 pairs, unequal lengths,
    non-finite values or a difference that overflows."""
    d = _paired(x, y)
    n = d.size
    if n < 2:
        raise ValueError("a paired t-test needs at least 2 pairs")
    m = float(d.mean())
    sd = float(d.std(ddof=1))
    if sd == 0.0 or sd <= 1e-14 * abs(m):
        if m == 0.0:
            return TestResult(0.0, 1.0, n, 0.0, "paired t")
        return TestResult(math.copysign(math.inf, m), 0.0, n, m, "paired t")
    t = m / (sd / math.sqrt(n))
    p = min(1.0, 2.0 * t_sf(abs(t), n - 1))
    return TestResult(t, p, n, m, "paired t")


def _ranks(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based) of ``a`` and the sizes of its groups of ties."""
    order = np.argsort(a, kind="mergesort")
    s = a[order]
    starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    sizes = np.diff(np.concatenate((starts, [s.size])))
    avg = starts + (sizes + 1) / 2.0
    r = np.empty(a.size)
    r[order] = np.repeat(avg, sizes)
    return r, sizes


def _signed_rank_null(n: int) -> np.ndarray:
    """null[s] = P(R+ = s) under the null: the number of subsets of {1..n} summing to s, over
    2^n. Halved at each step rather than divided by 2^n at the end (the same values, as scaling
    by a power of two is exact, while the counts themselves overflow float64 beyond n ~ 1020)."""
    top = n * (n + 1) // 2
    c = np.zeros(top + 1, dtype=np.float64)
    c[0] = 1.0
    for k in range(1, n + 1):
        c[k:] = c[k:] + c[:-k].copy()
        c *= 0.5
    return c


def wilcoxon_signed_rank(x: Any, y: Any, *, zero_method: str = "wilcox", method: str = "auto") -> TestResult:
    """Wilcoxon's signed-rank test of a symmetric difference ``x - y`` around 0 (two-sided), as
    ``scipy.stats.wilcoxon(x, y)`` with its defaults (no continuity correction).

    ``zero_method``: ``"wilcox"`` drops zero differences (SciPy's default); ``"pratt"`` ranks
    them and drops their ranks. ``method``: ``"exact"`` uses the exact null distribution of the
    rank sum R+ (exact only without ties and zeros; with them the statistic is rounded
    conservatively, as SciPy does; each tail is summed from its own end, so far-tail p-values
    such as 2^-59 for 60 positive differences are exact to rounding, where SciPy 1.17 returns 0
    for the upper tail); ``"approx"`` the normal approximation with the tie
    correction; ``"auto"`` exact when there are at most 50 pairs, no ties and no zeros, else the
    approximation (SciPy's ``auto`` runs a permutation test for <= 13 pairs with ties; here the
    approximation). The statistic is min(R+, R-). Raises ``ValueError`` for an unknown option,
    unequal lengths or non-finite values."""
    if zero_method not in ("wilcox", "pratt"):
        raise ValueError(f"zero_method must be 'wilcox' or 'pratt', got {zero_method!r}")
    if method not in ("auto", "exact", "approx"):
        raise ValueError(f"method must be 'auto', 'exact' or 'approx', got {method!r}")
    d = _paired(x, y)
    m = float(d.mean())
    zeros = d == 0
    n_zero = int(zeros.sum())
    if n_zero == d.size:
        return TestResult(0.0, 1.0, 0, 0.0, "wilcoxon")
    ranked = d[~zeros] if zero_method == "wilcox" else d
    r, ties = _ranks(np.abs(ranked))
    r_plus = float(r[ranked > 0].sum())
    r_minus = float(r[ranked < 0].sum())
    count = ranked.size
    has_ties = bool(np.any(ties > 1))
    if method == "auto":
        method = "exact" if d.size <= 50 and not has_ties and n_zero == 0 else "approx"
    stat = min(r_plus, r_minus)
    if method == "exact":
        null = _signed_rank_null(count)
        cdf = np.cumsum(null)
        # P(R+ >= s) summed from the upper tail itself, not as 1 - cdf: 1 - cdf cancels to 0 or
        # to rounding noise (-8.9e-16 for 60 positive differences, true p = 2^-59) in a far tail
        sf = np.cumsum(null[::-1])[::-1]
        sf_floor = sf[int(math.floor(r_plus))]
        cdf_ceil = cdf[min(int(math.ceil(r_plus)), cdf.size - 1)]
        p = min(1.0, 2.0 * min(sf_floor, cdf_ceil))
        return TestResult(stat, float(p), count, m, "wilcoxon exact")
    mn = count * (count + 1) / 4.0
    var = count * (count + 1) * (2 * count + 1)
    if zero_method == "pratt":
        mn -= n_zero * (n_zero + 1) / 4.0
        var -= n_zero * (n_zero + 1) * (2 * n_zero + 1)
        _, nz_ties = _ranks(np.abs(d[~zeros]))
        tie_term = float(np.sum(nz_ties.astype(float) ** 3 - nz_ties))
    else:
        tie_term = float(np.sum(ties.astype(float) ** 3 - ties))
    se = math.sqrt((var - tie_term / 2.0) / 24.0)
    if se == 0.0:  # pragma: no cover - only zeros left, handled above
        return TestResult(stat, 1.0, count, m, "wilcoxon approx")
    z = (r_plus - mn) / se
    p = min(1.0, 2.0 * normal_sf(abs(z)))
    return TestResult(stat, p, count, m, "wilcoxon approx")


class Interval(NamedTuple):
    """A confidence interval of a mean: the mean, the bounds, the level, the sample size and
    the sample standard deviation (ddof 1)."""

    mean: float
    low: float
    high: float
    level: float
    n: int
    sd: float

    @property
    def half_width(self) -> float:
        return 0.5 * (self.high - self.low)


def mean_ci(x: Any, level: float = 0.95) -> Interval:
    """The t-interval of the mean of ``x``: mean +- t_{(1+level)/2, n-1} sd / sqrt(n). One value:
    an interval of zero width is meaningless, so the bounds are NaN. Raises ``ValueError`` for an
    empty or non-finite sample or a level outside (0, 1)."""
    a = np.asarray(x, dtype=np.float64).ravel()
    if a.size == 0:
        raise ValueError("mean_ci of an empty sample")
    if not np.all(np.isfinite(a)):
        raise ValueError("mean_ci: the sample contains NaN or infinite values")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    m = float(a.mean())
    if a.size < 2:
        return Interval(m, math.nan, math.nan, level, 1, math.nan)
    sd = float(a.std(ddof=1))
    h = t_ppf(0.5 + level / 2.0, a.size - 1) * sd / math.sqrt(a.size)
    return Interval(m, m - h, m + h, level, int(a.size), sd)


def holm(pvalues: Any) -> np.ndarray:
    """Holm's step-down adjustment of a family of p-values (controls the family-wise error
    rate): sorted increasingly, p_(k) * (m - k + 1) made monotone and capped at 1; returned in
    the input order. NaN entries stay NaN and do not count in m. Raises ``ValueError`` for a
    p-value outside [0, 1]."""
    p = np.asarray(pvalues, dtype=np.float64).ravel()
    if np.any((p < 0) | (p > 1)):
        raise ValueError(f"p-values must lie in [0, 1], got {float(p[(p < 0) | (p > 1)][0])}")
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = ok.size
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="mergesort")]
    adj = np.maximum.accumulate(p[order] * (m - np.arange(m)))
    out[order] = np.minimum(adj, 1.0)
    return out
