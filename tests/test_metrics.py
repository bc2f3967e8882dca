"""Metrics against values computed by hand on small examples (ties, users without test items)."""

import math

import numpy as np
import pytest

from fedsim.math.metrics import (
    bias_disparity,
    f1_at,
    gini_at,
    gini_index,
    hits_at,
    item_coverage_at,
    mae,
    md_stdr,
    md_stdr_from_stats,
    ndcg_at,
    precision_at,
    recall_at,
    rmse,
    top_n,
)

# ---------------------------------------------------------------------------------------------
# rating prediction


def test_mae_rmse_with_and_without_clipping():
    pred, true = [1, 2, 6, -1], [1, 3, 5, 1]
    assert mae(pred, true) == pytest.approx(1.0)  # (0 + 1 + 1 + 2) / 4
    assert rmse(pred, true) == pytest.approx(math.sqrt(1.5))  # (0 + 1 + 1 + 4) / 4
    assert mae(pred, true, clip=(1, 5)) == pytest.approx(0.25)  # [1, 2, 5, 1]
    assert rmse(pred, true, clip=(1, 5)) == pytest.approx(0.5)
    assert math.isnan(mae([np.nan, 1], [1, 1]))  # a diverged model is visible
    with pytest.raises(ValueError):
        mae([1, 2], [1])
    with pytest.raises(ValueError):
        rmse([], [])


def test_md_stdr_hand_computed():
    res = md_stdr([0.74, 0.75], [0.73, 0.75])
    # means 0.745 and 0.74; population stds 0.005 and 0.01
    assert res.mean_f == pytest.approx(0.745) and res.std_f == pytest.approx(0.005)
    assert res.std_uf == pytest.approx(0.01)
    assert res.md == pytest.approx(0.005 / 0.74 * 100)  # 0.6757 %
    assert res.stdr == pytest.approx(0.015 / 0.74 * 100)  # 2.0270 %
    # ddof=1 (sample std) is available
    assert md_stdr([0.74, 0.75], [0.73, 0.75], ddof=1).std_f == pytest.approx(0.005 * math.sqrt(2))


def test_md_stdr_fedrec_table2_rows():
    # FedRec Table 2, ML100K PMF(B): MAE 0.7418+-0.0046 (UF) vs 0.7418+-0.0048 (F): MD 0.00 %, STDR 1.26 %
    mae_row = md_stdr_from_stats(0.7418, 0.0048, 0.7418, 0.0046)
    assert mae_row.md == 0.0 and mae_row.stdr == pytest.approx(1.267, abs=0.01)
    # RMSE 0.9424+-0.0059 (UF) vs 0.9424+-0.0064 (F): STDR 1.31 %
    assert md_stdr_from_stats(0.9424, 0.0064, 0.9424, 0.0059).stdr == pytest.approx(1.31, abs=0.005)
    # PMF(S) MAE: 0.7497 (UF) vs 0.7498 (F): MD 0.01 %
    assert md_stdr_from_stats(0.7498, 0.0042, 0.7497, 0.0043).md == pytest.approx(0.0133, abs=1e-3)
    with pytest.raises(ValueError):
        md_stdr_from_stats(1, 0, 0, 0)


# ---------------------------------------------------------------------------------------------
# top-N


def test_top_n_ties_exclusions_padding():
    scores = np.array(
        [
            [0.1, 0.5, 0.5, 0.9, 0.5],
            [1.0, 1.0, 1.0, 1.0, 1.0],
            [3.0, 2.0, 1.0, 0.0, -5.0],
        ]
    )
    exclude = (np.array([0, 1, 4, 4]), np.array([3, 0, 1, 2]))
    assert top_n(scores, exclude, 3).tolist() == [[1, 2, 4], [3, 4, -1], [0, 1, 2]]
    assert top_n(scores, exclude, 2).tolist() == [[1, 2], [3, 4], [0, 1]]
    assert top_n(scores, None, 2).tolist() == [[3, 1], [0, 1], [0, 1]]
    assert top_n(scores, None, 7).tolist()[2] == [0, 1, 2, 3, 4, -1, -1]
    # rows of a subset of users, with the exclusion CSR indexed by user
    assert top_n(scores[[2, 0]], exclude, 3, users=[2, 0]).tolist() == [[0, 1, 2], [1, 2, 4]]


class _CSR:
    def __init__(self, indptr, indices):
        self.indptr, self.indices = np.asarray(indptr), np.asarray(indices)


def test_top_n_matches_stable_sort_reference():
    rng = np.random.default_rng(0)
    n_users, n_items = 50, 30
    scores = rng.integers(0, 4, (n_users, n_items)).astype(float)  # many ties
    rows = [np.sort(rng.choice(n_items, rng.integers(0, 29), replace=False)) for _ in range(n_users)]
    csr = _CSR(np.concatenate([[0], np.cumsum([len(r) for r in rows])]), np.concatenate(rows))
    got = top_n(scores, csr, 5, block_rows=7)
    for u in range(n_users):
        s = scores[u].copy()
        s[rows[u]] = -np.inf
        ref = [i for i in np.argsort(-s, kind="stable") if not np.isinf(s[i])][:5]
        ref += [-1] * (5 - len(ref))
        assert got[u].tolist() == ref


def test_top_n_on_an_empty_catalogue_is_all_padding():
    """No items at all: every row has fewer than n candidates, so all -1 (it raised IndexError)."""
    got = top_n(np.zeros((2, 0)), n=3)
    assert got.shape == (2, 3) and got.dtype == np.int64 and (got == -1).all()
    got = top_n(np.zeros((2, 0)), (np.array([0, 0, 0]), np.array([], dtype=np.int64)), n=1)
    assert (got == -1).all() and got.shape == (2, 1)


def test_top_n_rejects_non_finite():
    with pytest.raises(ValueError, match="row 1"):
        top_n(np.array([[1.0, 2.0], [np.nan, 0.0]]), None, 1)
    with pytest.raises(ValueError):
        top_n(np.zeros(3), None, 1)


# ---------------------------------------------------------------------------------------------
# ranking accuracy

RECS = np.array([[1, 2, 4], [3, 4, -1], [0, 1, 2]])
# user 0: test {2, 5}; user 1: no test items; user 2: test {0, 1, 2, 3}
TEST = (np.array([0, 2, 2, 6]), np.array([2, 5, 0, 1, 2, 3]))


def test_precision_recall_f1_ndcg_at_3():
    # user 0: one hit at rank 2; user 2: hits at ranks 1, 2, 3; user 1 excluded
    assert hits_at(RECS, TEST, 3).tolist() == [1, 0, 3]
    assert precision_at(RECS, TEST, 3) == pytest.approx((1 / 3 + 1) / 2)
    assert recall_at(RECS, TEST, 3) == pytest.approx((1 / 2 + 3 / 4) / 2)
    f1_u0 = 2 * (1 / 3) * (1 / 2) / (1 / 3 + 1 / 2)  # 0.4
    f1_u2 = 2 * 1 * 0.75 / 1.75
    assert f1_at(RECS, TEST, 3) == pytest.approx((f1_u0 + f1_u2) / 2)
    d = 1 / math.log2(3)
    ndcg_u0 = d / (1 + d)  # ideal: 2 test items in the first 2 ranks
    ndcg_u2 = 1.0  # ideal: min(4, 3) = 3 hits
    assert ndcg_at(RECS, TEST, 3) == pytest.approx((ndcg_u0 + ndcg_u2) / 2)


def test_ranking_at_1_and_per_user():
    assert precision_at(RECS, TEST, 1) == pytest.approx(0.5)
    assert recall_at(RECS, TEST, 1) == pytest.approx(0.125)
    assert ndcg_at(RECS, TEST, 1) == pytest.approx(0.5)
    assert f1_at(RECS, TEST, 1) == pytest.approx((0 + 2 * 0.25 / 1.25) / 2)
    pu = precision_at(RECS, TEST, 3, per_user=True)
    assert pu[0] == pytest.approx(1 / 3) and math.isnan(pu[1]) and pu[2] == 1.0
    with pytest.raises(ValueError, match="cutoff"):
        precision_at(RECS, TEST, 4)


def test_no_test_items_at_all_gives_nan():
    empty = (np.zeros(4, dtype=int), np.zeros(0, dtype=int))
    assert math.isnan(precision_at(RECS, empty, 3))
    assert math.isnan(ndcg_at(RECS, empty, 3))


def test_padding_never_hits():
    recs = np.array([[-1, -1]])
    assert precision_at(recs, (np.array([0, 1]), np.array([0])), 2) == 0.0


def test_a_test_item_twice_is_refused_not_counted_twice():
    # user 2's test set {0, 1, 2, 3} with item 1 repeated: |test_u| would be 5 (recall 3/5, not
    # 3/4) and IDCG that of min(5, 3) hits; the error names the user and the item
    test = (np.array([0, 2, 2, 7]), np.array([2, 5, 0, 1, 1, 2, 3]))
    for metric in (recall_at, ndcg_at, precision_at, f1_at, hits_at):
        with pytest.raises(ValueError, match="user 2 has test item 1 twice"):
            metric(RECS, test, 3)


def test_an_item_recommended_twice_is_refused_padding_allowed():
    test = (np.array([0, 1]), np.array([4]))
    with pytest.raises(ValueError, match="user 0 is recommended item 4 twice"):
        precision_at(np.array([[4, 4, 1]]), test, 3)  # would be two hits of one test item
    assert precision_at(np.array([[4, -1, -1]]), test, 3) == pytest.approx(1 / 3)


def test_negative_test_items_are_refused():
    with pytest.raises(ValueError, match="test item -1 of user 1 is out of range"):
        recall_at(np.array([[0], [1]]), (np.array([0, 1, 2]), np.array([0, -1])), 1)


# ---------------------------------------------------------------------------------------------
# beyond accuracy


def test_item_coverage():
    assert item_coverage_at(RECS, 3) == 5  # {0, 1, 2, 3, 4}
    assert item_coverage_at(RECS, 1) == 3  # {1, 3, 0}


def test_gini_hand_computed():
    # counts over 6 items at N=3: item0 1, item1 2, item2 2, item3 1, item4 2, item5 0 (total 8)
    # sorted p = [0, 1, 1, 2, 2, 2] / 8, weights 2j - n - 1 = [-5, -3, -1, 1, 3, 5]
    # G = (-3 - 1 + 2 + 6 + 10) / 8 / 5 = 0.35
    assert gini_index([1, 2, 2, 1, 2, 0]) == pytest.approx(0.35)
    assert gini_index([1, 2, 2, 1, 2], n_items=6) == pytest.approx(0.35)
    assert gini_at(RECS, 3, n_items=6) == pytest.approx(0.65)  # FPL's G = 1 - Gini
    assert gini_index([5, 5, 5, 5]) == pytest.approx(0.0)
    assert gini_index([0, 0, 7]) == pytest.approx(1.0)
    assert gini_at(np.array([[2], [2], [2]]), 1, n_items=10) == pytest.approx(0.0)
    with pytest.raises(ValueError):
        gini_at(RECS, 3, n_items=4)  # item 4 outside the catalogue


def test_gini_over_given_items_hand_computed():
    # the same lists over items 0..4 only (item 5, never recommended, left out): counts [1, 2, 2, 1, 2],
    # sorted p = [1, 1, 2, 2, 2] / 8, weights [-4, -2, 0, 2, 4]: Gini = (-4 - 2 + 0 + 4 + 8) / 8 / 4 = 0.1875
    assert gini_at(RECS, 3, n_items=6, items=[4, 0, 1, 2, 3]) == pytest.approx(1 - 0.1875, abs=1e-12)
    assert gini_at(RECS, 3, n_items=6, items=range(6)) == gini_at(RECS, 3, n_items=6)
    with pytest.raises(ValueError, match="^recommended item 4 is not among the 4 items the Gini is over$"):
        gini_at(RECS, 3, n_items=6, items=[0, 1, 2, 3])
    with pytest.raises(ValueError, match=r"^items holds 6, outside 0..5$"):
        gini_at(RECS, 3, n_items=6, items=[0, 1, 2, 3, 4, 6])


def test_bias_disparity_hand_computed():
    # items 0..4; categories A: {0, 1, 3}, B: {2, 3}; item 4 has none
    cats = np.array([[1, 0], [1, 0], [0, 1], [1, 1], [0, 0]], dtype=bool)
    train_items = [0, 0, 1, 2, 3, 4]
    recs = np.array([[2, 3], [2, -1]])
    bd = bias_disparity(train_items, recs, cats)
    # P(A) = 3/4, P(B) = 2/4 over the 4 labelled items
    # training: 5 labelled interactions; A: 4 -> PR 0.8; B: 2 -> PR 0.4
    assert bd.source.tolist() == pytest.approx([0.8 / 0.75, 0.4 / 0.5])
    # recommendations: items 2, 3, 2; A: 1/3; B: 3/3
    assert bd.recommended.tolist() == pytest.approx([(1 / 3) / 0.75, 1 / 0.5])
    assert bd.disparity.tolist() == pytest.approx([((1 / 3) / 0.75 - 0.8 / 0.75) / (0.8 / 0.75), (2 - 0.8) / 0.8])
    # cutoff n=1 uses only the first column: items 2, 2
    assert bias_disparity(train_items, recs, cats, n=1).recommended.tolist() == pytest.approx([0.0, 2.0])


def test_bias_disparity_empty_category_is_nan():
    cats = np.array([[1, 0, 0], [0, 1, 0]], dtype=bool)
    bd = bias_disparity([0, 1], np.array([[0]]), cats)
    assert math.isnan(bd.source[2]) and math.isnan(bd.disparity[2])
    assert bd.source[:2].tolist() == pytest.approx([1.0, 1.0])
    assert bd.disparity[:2].tolist() == pytest.approx([1.0, -1.0])
    with pytest.raises(ValueError):
        bias_disparity([5], np.array([[0]]), cats)


def test_top_n_refuses_excluded_items_and_users_out_of_range():
    """An excluded item id of -1 excluded the last item (NumPy's negative indexing) and a negative
    user index read another row of the exclusions, both silently; they raise now, naming the
    user."""
    s = np.arange(12, dtype=float).reshape(3, 4)
    assert top_n(s, (np.array([0, 1, 1, 1]), np.array([3])), 2).tolist() == [[2, 1], [3, 2], [3, 2]]
    with pytest.raises(ValueError, match="excluded item -1 of user 0"):
        top_n(s, (np.array([0, 1, 1, 1]), np.array([-1])), 2)
    with pytest.raises(ValueError, match="excluded item 4 of user 2"):
        top_n(s, (np.array([0, 0, 0, 1]), np.array([4])), 2)
    with pytest.raises(ValueError, match="negative user index -1"):
        top_n(s, (np.array([0, 1, 2, 3]), np.array([3, 3, 3])), 2, users=[-1, 0, 1])


def test_ranking_metrics_refuse_fractional_item_ids():
    """A float recommendation 0.5 was cast to item 0 and counted as a hit."""
    test = (np.array([0, 1]), np.array([0]))
    assert precision_at(np.array([[0.0, 1.0]]), test, 2) == 0.5  # whole numbers in a float array: fine
    with pytest.raises(ValueError, match="integer item indices"):
        precision_at(np.array([[0.5, 1.0]]), test, 2)
    with pytest.raises(ValueError, match="integer item indices"):
        ndcg_at(np.array([[np.nan, 1.0]]), test, 2)


def test_gini_index_refuses_negative_or_non_finite_counts():
    """Negative counts gave a "Gini" of 1.0 and a NaN count a NaN, without a word."""
    assert gini_index([1.0, 1.0]) == 0.0
    for bad in ([3, -1, 2], [1, np.nan, 2], [1, np.inf]):
        with pytest.raises(ValueError, match="finite and non-negative"):
            gini_index(bad)
