"""Statistics of an FPL :class:`~fedsim.studies.fpl.study.Study`: figures over seeds, per-user
confidence intervals, paired tests, and a verdict for each ordering the paper reports.

Per-user values: for each method and seed, the chosen configuration's test hit masks give each
user's P@10, R@10, F1@10 and NDCG@10 (:func:`fedsim.math.hitmask.per_user_metrics`); a user's
value for the method is its mean over the seeds. The 95 % confidence interval is the t-interval
of the mean over users; the paired tests (Student's t, as the paper, and Wilcoxon's signed-rank,
which does not assume normal differences: per-user P@10 takes a handful of values, mostly 0) pair
the same users of two methods. Seed figures (mean and standard deviation over seeds) show how
much a method moves with its random initialisation; the user CI shows how much the figure would
move with other users from the same population, which on 100-500 users is the larger spread.

A verdict ("reproduced", "contradicted", "not distinguishable on this data") is stated from the
t-test's p-value after Holm's correction (:func:`fedsim.math.stats.holm`: step-down, monotone,
capped at 1) within its family, at Holm-adjusted p < 0.05: at raw p < 0.05 each true "no
difference" has one chance in twenty of being called significant, and a table of a dozen such
tests about one chance in two of at least one false verdict (Holm keeps it below 0.05). The family of
:func:`verdicts` is every test its table ran (the per-user comparisons and the seed-paired IC/Gini
t-tests together); each row shows the raw and the adjusted p. :func:`holm_family` adjusts any other
family of comparisons (fpl_table2: the significance table's tests together, the Top-Pop note's
together). A per-user comparison of fewer than :data:`MIN_USERS` users is not tested at all (NaN
p-values, never significant, and no member of its family: it does not count in Holm's m): below 6
pairs not even a unanimous sign reaches p < 0.05 with an exact rank test (2 / 2^5 = 0.0625),
while the t-test's p rests on normality alone there (2 users with equal differences gave p = 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ...experiment import format_number
from ...math.hitmask import per_user_metrics
from ...math.stats import TestResult, holm, mean_ci, paired_t_test, wilcoxon_signed_rank
from .study import Study

__all__ = [
    "ALPHA", "MIN_USERS", "Comparison", "compare", "compare_users", "fig2_rows", "holm_family", "seed_stats", "user_values",
    "verdicts",
]

ALPHA = 0.05
#: The fewest users (with held-out items in both methods) a per-user comparison is tested on.
MIN_USERS = 6
METRIC_NAMES = {"p": "P@10", "r": "R@10", "f1": "F1@10", "ndcg": "NDCG@10", "ic": "IC@10", "gini": "G@10"}


def entry_user_values(st: Study, entry: dict, metric: str) -> np.ndarray:
    """Per-user ``metric`` (p, r, f1, ndcg) of one evaluation entry (its ``test_hits``; a diverged
    model, which ranks nothing, has no hits)."""
    if "test_hits" not in entry:
        raise KeyError("the entry holds no per-user hit masks (test_hits)")
    hits = entry["test_hits"]
    masks = np.zeros(st.split.n_users, dtype=np.int64) if hits is None else np.asarray(hits, dtype=np.int64)
    return per_user_metrics(masks, st.split.n_test, st.split.evaluators["test"].n)[metric]


def user_values(st: Study, method: str, metric: str) -> np.ndarray:
    """Each user's ``metric`` for ``method``'s chosen configurations, averaged over the seeds."""
    per = st.chosen[method]
    return np.mean([entry_user_values(st, c.entry, metric) for _, c in sorted(per.items())], axis=0)


def seed_stats(st: Study, method: str, key: str) -> tuple[float, float]:
    """Mean and standard deviation (ddof 1; NaN for one seed) over seeds of the test figure
    ``key`` (p, r, f1, ndcg, ic, gini) of ``method``."""
    # a diverged model (chosen only when every candidate diverged) recommends nothing: 0
    v = np.nan_to_num(np.array([float(c.entry[f"test_{key}"]) for _, c in sorted(st.chosen[method].items())]))
    return float(v.mean()), (float(v.std(ddof=1)) if v.size > 1 else math.nan)


@dataclass
class Comparison:
    """``a`` against ``b`` on a per-user metric: mean difference a - b, its 95 % CI, the paired
    t-test and Wilcoxon results."""

    a: str
    b: str
    metric: str
    diff: float
    low: float
    high: float
    t: TestResult
    w: TestResult

    @property
    def significant(self) -> bool:
        """The t-test's raw p below ALPHA: the verdict of a comparison that is a family of its own
        (one test); within a family of tests, judge by :func:`holm_family`'s adjusted p."""
        return self.t.pvalue < ALPHA  # NaN (no test: too few users) is never significant

    @property
    def n(self) -> int:
        """Users compared (both values defined)."""
        return int(self.t.n)

    def text(self, digits: int = 4) -> str:
        name = METRIC_NAMES.get(self.metric, self.metric)
        spec = f"+.{digits}f"  # (format_number: a difference that rounds to zero is +0.0000, not -0.0000)
        if self.n < MIN_USERS:
            return (f"{self.a} - {self.b} {name} = {format_number(self.diff, spec)} over {self.n} user(s): too few "
                    f"for a test (at least {MIN_USERS})")
        return (f"{self.a} - {self.b} {name} = {format_number(self.diff, spec)} (95 % CI "
                f"{format_number(self.low, spec)} to {format_number(self.high, spec)}; t-test p = "
                f"{fmt_p(self.t.pvalue)}, Wilcoxon p = {fmt_p(self.w.pvalue)}; {self.n} users)")


def compare_users(a_name: str, b_name: str, metric: str, a: np.ndarray, b: np.ndarray) -> Comparison:
    """Paired comparison of two per-user vectors (users without held-out items dropped). With
    fewer than :data:`MIN_USERS` users left, no test is run: the p-values are NaN (never
    significant) and the CI bounds NaN; ``n`` says how many users there were."""
    ok = ~(np.isnan(a) | np.isnan(b))
    a, b = a[ok], b[ok]
    n = int(a.size)
    if n < MIN_USERS:
        diff = float((a - b).mean()) if n else math.nan
        nan = math.nan
        return Comparison(a_name, b_name, metric, diff, nan, nan, TestResult(nan, nan, n, diff, "paired t (no test)"),
                          TestResult(nan, nan, n, diff, "wilcoxon (no test)"))
    ci = mean_ci(a - b)
    return Comparison(a_name, b_name, metric, ci.mean, ci.low, ci.high, paired_t_test(a, b),
                      wilcoxon_signed_rank(a, b))


def compare(st: Study, a: str, b: str, metric: str = "p") -> Comparison:
    """``a`` against ``b`` (methods of the study) on per-user ``metric``."""
    return compare_users(a, b, metric, user_values(st, a, metric), user_values(st, b, metric))


def fmt_p(p: float) -> str:
    if math.isnan(p):
        return "nan"
    return f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


def holm_family(comparisons: Sequence[Comparison]) -> list[float]:
    """The t-test p-values of a family of comparisons after Holm's correction over that family,
    in its order. A comparison that ran no test (fewer than :data:`MIN_USERS` users: NaN p) is no
    member of the family: its adjusted p is NaN and it does not count in Holm's m."""
    return [float(x) for x in holm([c.t.pvalue for c in comparisons])] if comparisons else []


def holm_count(pvalues: list[float]) -> tuple[int, int]:
    """(significant unadjusted, significant after Holm) at ALPHA."""
    p = np.asarray([x for x in pvalues if not math.isnan(x)])
    if p.size == 0:
        return 0, 0
    return int((p < ALPHA).sum()), int((holm(p) < ALPHA).sum())


def fig2_rows(st: Study) -> list[dict]:
    """One row per (preset, pi): test F1@10, P@10, R@10, IC@10, Gini at the epoch chosen on
    validation, mean and sd over seeds."""
    rows = []
    fr = st.fpl_runs()
    presets = sorted({k[0] for k in fr}, key=lambda p: ("sFPL", "sFPL+", "pFPL", "pFPL+").index(p))
    pis = sorted({k[1] for k in fr})
    for preset in presets:
        for pi in pis:
            es = [st.fpl_choice(preset, pi, s) for s in st.seeds if (preset, pi, s) in fr]
            if not es:
                continue
            row: dict[str, Any] = {"preset": preset, "pi": pi}
            for key in ("f1", "p", "r", "ndcg", "ic", "gini"):
                v = np.array([float(e[f"test_{key}"]) for e in es])
                row[key] = float(v.mean())
                row[f"{key}_sd"] = float(v.std(ddof=1)) if v.size > 1 else math.nan
            row["epochs"] = ",".join(str(e["epoch"]) for e in es)
            rows.append(row)
    return rows


def _fpl_user_values(st: Study, preset: str, pi: float, metric: str) -> np.ndarray:
    return np.mean([entry_user_values(st, st.fpl_choice(preset, pi, s), metric) for s in st.seeds], axis=0)


def _word(diff: float, significant: bool, expected_sign: int) -> str:
    if not significant:
        return "not distinguishable on this data"
    return "reproduced" if np.sign(diff) == expected_sign else "contradicted"


#: The columns of a verdict row that give the p-value it rests on, raw and after Holm's correction
#: over the verdicts table's family (empty when no test ran).
P_RAW, P_HOLM = "p (t-test)", "p (Holm)"


def verdicts(st: Study, keep: Callable[[str], bool] | None = None) -> list[dict]:
    """For each ordering the paper reports: ``claim``, ``verdict`` (reproduced, contradicted, not
    distinguishable on this data, or not run), the p-value of the test it rests on, raw
    (:data:`P_RAW`) and Holm-adjusted (:data:`P_HOLM`; both empty when no test ran), and the
    ``evidence`` (numbers and tests).

    The family of Holm's correction is every test this table runs (one per claim at most: the
    per-user paired t-tests on P@10 and F1@10 and the seed-paired t-tests on IC@10 and G@10); a
    verdict says significant when its adjusted p is below :data:`ALPHA`. A claim that was not run
    or tested (too few users or seeds, a diverged model, no spread) is no member of the family.
    ``keep``: only the claims it returns true for, and the family is then their tests alone (a
    table that shows some of the claims corrects over the tests it shows)."""
    out: list[dict] = []
    have = set(st.chosen)
    # rows whose verdict waits for the family's adjusted p: (row, raw p, verdict given significance)
    pending: list[tuple[dict, float, Callable[[bool], str]]] = []

    def add(claim: str, verdict: str, evidence: str) -> dict:
        row = {"claim": claim, "verdict": verdict, P_RAW: "", P_HOLM: "", "evidence": evidence}
        out.append(row)
        return row

    def tested(claim: str, p: float, decide: Callable[[bool], str], evidence: str) -> None:
        """A row decided by ``decide(significant)`` once the family is adjusted; NaN ``p`` (no test
        ran) is never significant and stays out of the family."""
        pending.append((add(claim, "", evidence), p, decide))

    def word(diff: float, expected_sign: int) -> Callable[[bool], str]:
        return lambda sig: _word(diff, sig, expected_sign)

    def either(yes: str) -> Callable[[bool], str]:
        return lambda sig: yes if sig else "not distinguishable on this data"

    # 1. User-kNN strongest among the non-VAE baselines
    claim = "User-kNN is the strongest baseline apart from the VAE (P@10)"
    pool = [m for m in ("Random", "Top-Pop", "User-kNN", "Item-kNN", "BPR-MF", "FCF") if m in have]
    if "User-kNN" in pool and len(pool) > 1:
        means = {m: seed_stats(st, m, "p")[0] for m in pool}
        # User-kNN first among equal means: a baseline level with it was named "the highest" for its
        # place in the pool's order (Top-Pop before User-kNN) and set against User-kNN as above it
        order = sorted(pool, key=lambda m: (-means[m], m != "User-kNN"))
        top = order[0]
        if top == "User-kNN":
            c = compare(st, "User-kNN", order[1])
            level = [m for m in order[1:] if means[m] == means["User-kNN"]]
            head = (f"User-kNN ties for the highest P@10 ({means['User-kNN']:.4f}) with {', '.join(level)}; against "
                    f"{order[1]}" if level else
                    f"User-kNN has the highest P@10 ({means['User-kNN']:.4f}); against the next")
            tested(claim, c.t.pvalue, either("reproduced"), f"{head}, {c.text()}")
        else:
            c = compare(st, top, "User-kNN")
            tested(claim, c.t.pvalue, either("contradicted"),
                   f"{top} has the highest P@10 ({means[top]:.4f}, User-kNN {means['User-kNN']:.4f}); {c.text()}")
    else:
        add(claim, "not run", "User-kNN needs the baselines extra (cornac)")

    # 2. the "+" presets above their plain twins
    for plus, plain in (("sFPL+", "sFPL"), ("pFPL+", "pFPL")):
        claim = f"{plus} is more accurate than {plain} (P@10)"
        if plus in have and plain in have:
            c = compare(st, plus, plain)
            tested(claim, c.t.pvalue, word(c.diff, +1), c.text())
        else:
            add(claim, "not run", "")

    # 3. FPL against BPR-MF: the plain presets "comparable", the "+" presets significantly better
    for preset in ("sFPL", "sFPL+", "pFPL", "pFPL+"):
        plus = preset.endswith("+")
        claim = (f"{preset} is more accurate than BPR-MF (P@10; the paper: significantly)" if plus
                 else f"{preset} is comparable to BPR-MF (P@10)")
        if preset in have and "BPR-MF" in have:
            c = compare(st, preset, "BPR-MF")
            if plus:
                decide = word(c.diff, +1)
            else:
                def decide(sig: bool, diff: float = c.diff) -> str:
                    return (f"contradicted (significantly {'higher' if diff > 0 else 'lower'})" if sig else
                            "not distinguishable on this data (what 'comparable' predicts)")
            tested(claim, c.t.pvalue, decide, c.text())
        else:
            add(claim, "not run", "")

    # 4. IC and Gini grow with local computation (seed-level: these are figures of the whole list set)
    for plus, plain in (("sFPL+", "sFPL"), ("pFPL+", "pFPL")):
        for key in ("ic", "gini"):
            claim = f"{METRIC_NAMES[key]} of {plus} above {plain} (more local computation)"
            if plus in have and plain in have:
                a = np.array([float(st.chosen[plus][s].entry[f"test_{key}"]) for s in st.seeds])
                b = np.array([float(st.chosen[plain][s].entry[f"test_{key}"]) for s in st.seeds])
                ev = f"{plus} {a.mean():.4g} vs {plain} {b.mean():.4g} (mean over {a.size} seed(s))"
                ev += f"; higher in {int((a > b).sum())} of {a.size} seed(s)"
                bad = int((~np.isfinite(a)).sum() + (~np.isfinite(b)).sum())
                if bad:
                    # a chosen model that diverged (every candidate did) has no list set to measure:
                    # the t-test refused its NaN and stopped the whole analysis
                    add(claim, "not compared (a chosen model diverged)",
                        ev + f"; {bad} of the {2 * a.size} chosen models diverged (no {METRIC_NAMES[key]})")
                elif a.size >= 3 and np.ptp(a - b) == 0:
                    # the same difference in every seed (IC@10 counts items: whole numbers that can
                    # move alike): no spread to test against, and the t-test's p was 0, a verdict
                    add(claim, "not distinguishable on this data (the same difference in every seed: no spread "
                               "for a t-test)", ev)
                elif a.size >= 3:
                    t = paired_t_test(a, b)
                    ev += f", seed-paired t-test p = {fmt_p(t.pvalue)}"
                    tested(claim, t.pvalue, word(t.mean_diff, +1), ev)
                else:
                    add(claim, "not distinguishable on this data (fewer than 3 seeds: no test)", ev)
            else:
                add(claim, "not run", "")

    # 5. F1 peaks at an interior pi
    fr = st.fpl_runs()
    pis = sorted({k[1] for k in fr})
    for preset in ("sFPL", "sFPL+", "pFPL", "pFPL+"):
        claim = f"{preset}: F1@10 peaks at an interior pi, not at pi = {pis[-1]:g}" if pis else f"{preset}: F1 peak"
        mine = [pi for pi in pis if (preset, pi, st.seeds[0]) in fr]
        if len(mine) < 3:
            add(claim, "not run", f"needs at least 3 values of pi (ran {len(mine)})")
            continue
        f1 = {pi: float(np.nanmean(_fpl_user_values(st, preset, pi, "f1"))) for pi in mine}
        peak = max(mine, key=lambda pi: f1[pi])
        interior = [pi for pi in mine if pi not in (mine[0], mine[-1])]
        if peak in interior:
            c = compare_users(f"pi={peak:g}", f"pi={mine[-1]:g}", "f1", _fpl_user_values(st, preset, peak, "f1"),
                              _fpl_user_values(st, preset, mine[-1], "f1"))
            decide = either("reproduced") if c.diff > 0 else (lambda sig: "not distinguishable on this data")
        else:
            best_in = max(interior, key=lambda pi: f1[pi])
            c = compare_users(f"pi={peak:g}", f"pi={best_in:g}", "f1", _fpl_user_values(st, preset, peak, "f1"),
                              _fpl_user_values(st, preset, best_in, "f1"))
            decide = either("contradicted")
        curve = ", ".join(f"{pi:g}: {f1[pi]:.4f}" for pi in mine)
        tested(claim, c.t.pvalue, decide, f"peak at pi = {peak:g}; {c.text()}; F1@10 by pi: {curve} (the peak of "
                                          f"{len(mine)} noisy values is biased upwards, so a peak alone is no evidence)")

    if keep is not None:
        out = [r for r in out if keep(r["claim"])]
        pending = [x for x in pending if keep(x[0]["claim"])]
    # Holm's correction over the family: every test above that ran (NaN p: none ran, not a member)
    for (row, p, decide), q in zip(pending, holm([p for _, p, _ in pending])):
        row["verdict"] = decide(bool(q < ALPHA))
        if not math.isnan(p):
            row[P_RAW], row[P_HOLM] = fmt_p(p), fmt_p(float(q))
    return out
