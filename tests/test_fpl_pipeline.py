"""The FPL study's data pipeline on Foursquare check-ins: user filter (the paper's and the authors'
code's), per-user temporal split with a validation cut from training only, venue categories
carried through to the bias figures, the loader-filter trap, and per-user hit masks."""

from __future__ import annotations

import calendar
import math
import time

import numpy as np
import pytest

from fedsim.data import load_foursquare, temporal_holdout
from fedsim.experiment import run_scenario
from fedsim.math.hitmask import hit_masks, per_user_metrics, popcount
from fedsim.math.metrics import f1_at, ndcg_at, precision_at, recall_at, top_n
from fedsim.studies.fpl import LoaderFilterError, prepare
from fedsim.studies.fpl.scenario import source_bias

HEADER = "user_id\tvenue_id\ttype\tutc\n"
T0 = calendar.timegm((2012, 4, 1, 18, 7, 30))
TYPES = ("Airport", "Caf\x1a\x1a", "Museum", "Bar", "Park", "Office", "Home (private)", "Bookstore", "University")


def utc(t):
    return time.strftime("%a %b %d %H:%M:%S +0000 %Y", time.gmtime(t))


def checkins(tmp_path, counts, seed=0):
    """A FedBPR-like file: user u has counts[u] venues at shuffled times; venue v's type is
    TYPES[v % 9]; venues drawn from a pool of 60 so that users share some."""
    rng = np.random.default_rng(seed)
    lines = [HEADER]
    for u, n in enumerate(counts):
        venues = rng.choice(60, size=n, replace=False)
        times = T0 + rng.permutation(n) * 3600 * 7
        for v, t in zip(venues, times):
            lines.append(f"{1000 + u}\tv{v:02d}\t{TYPES[v % 9]}\t{utc(int(t))}\n")
    f = tmp_path / "City.tsv"
    f.write_text("".join(lines))
    return f


def test_split_keeps_time_order_and_users_and_cuts_validation_from_training(tmp_path):
    counts = [20, 21, 25, 30, 19, 40, 22]
    f = checkins(tmp_path, counts)
    r = load_foursquare(f, None)
    sp = prepare(r, min_interactions=21)
    assert sp.n_users == sum(c >= 21 for c in counts)  # 21, 25, 30, 40, 22: nobody else lost
    t = r.filter_users(21)
    train_full, test = temporal_holdout(t, 0.2)
    val = sp.evaluators["val"].truth
    train = sp.train
    for u in range(sp.n_users):
        n = int((t.users == u).sum())
        tr = np.sort(t.timestamps[(t.users == u)])
        mine_train = train.timestamps[train.users == u]
        mine_val_items = val[1][val[0][u]:val[0][u + 1]]
        mine_test = test.timestamps[test.users == u]
        n_test, n_val = n // 5, (n - n // 5) // 5
        assert mine_test.size == n_test and mine_val_items.size == n_val and mine_train.size == n - n_test - n_val
        # time order: every training check-in precedes every validation one, which precede test
        item_time = dict(zip(t.items[t.users == u].tolist(), t.timestamps[t.users == u].tolist()))
        val_times = np.array([item_time[i] for i in mine_val_items.tolist()])
        assert mine_train.max() <= val_times.min() and val_times.max() <= mine_test.min()
        assert np.array_equal(np.sort(np.concatenate([mine_train, val_times, mine_test])), tr)
    # the validation part is cut from the training 80 % only: train + validation = the 80 %
    tv = set(zip(train.users.tolist(), train.items.tolist()))
    tv |= {(u, int(i)) for u in range(sp.n_users) for i in val[1][val[0][u]:val[0][u + 1]]}
    assert tv == set(zip(train_full.users.tolist(), train_full.items.tolist()))
    assert sp.info["x_plus"] + sp.info["validation"] == len(train_full) and sp.info["test"] == len(test)
    # the authors' code's filter keeps the 20-venue user too
    assert prepare(r, min_interactions=20).n_users == sp.n_users + 1


def test_prepare_refuses_data_a_loader_filtered_more_strictly(tmp_path):
    f = checkins(tmp_path, [20, 21, 25])
    paper = load_foursquare(f)  # the loader's default: more than 20 venues
    assert prepare(paper, min_interactions=21).n_users == 2
    with pytest.raises(LoaderFilterError, match="at least 21 interactions, stricter than the 20"):
        prepare(paper, min_interactions=20)
    assert prepare(load_foursquare(f, None), min_interactions=20).n_users == 3


def test_categories_reach_the_bias_figures(tmp_path):
    f = checkins(tmp_path, [30, 30, 30, 30], seed=3)
    r = load_foursquare(f, None)
    assert r.info["categories"]["unmapped"]["n_types"] == 0
    sp = prepare(r, min_interactions=21)
    assert sp.category_names[0] == "Arts & Entertainment" and len(sp.category_names) == 9
    cats = sp.evaluators["test"].categories
    expected = {"Airport": "Travel & Transport", "Caf\x1a\x1a": "Food", "Museum": "Arts & Entertainment",
                "Bar": "Nightlife Spot", "Park": "Outdoors & Recreation", "Office": "Professional & Other Places",
                "Home (private)": "Residence", "Bookstore": "Shop & Service", "University": "College & University"}
    for j, vid in enumerate(r.item_ids):
        assert cats[j].sum() == 1
        assert sp.category_names[int(np.argmax(cats[j]))] == expected[TYPES[int(vid[1:]) % 9]]
    # source bias by hand: PR(C) / P(C) over the training check-ins and the catalogue
    b = source_bias(sp)
    assert list(b) == ["A&E", "C&U", "Food", "NS", "O&R", "P&OP", "Res.", "S&S", "T&T"]
    ti = sp.train.items
    for c, lab in enumerate(b):
        pr = cats[ti, c].mean()
        pc = cats[:, c].mean()
        assert b[lab] == pytest.approx(pr / pc)


def test_bologna_counts_as_the_issue_and_both_filters(fsq_dir):
    r = load_foursquare(fsq_dir / "Bologna.tsv", None)
    assert r.info["categories"]["unmapped"]["n_types"] == 0
    sp = prepare(r, min_interactions=21)
    i = sp.info
    assert (i["users"], i["items"], i["x_plus"], i["validation"], i["test"]) == (107, 2561, 3353, 785, 986)
    assert prepare(r, min_interactions=20).n_users == 109
    assert sp.category_names and sp.evaluators["test"].categories.any(axis=1).all()


def test_scenario_honours_the_code_filter_despite_the_loader_default(fsq_dir, tmp_path):
    """--data on a Foursquare file loads with the paper's filter by default; user_filter=code must
    still get the >= 20 users (109 on Bologna), not silently the > 20 ones."""
    out = tmp_path / "o"
    run_scenario("fpl_tcc", data=str(fsq_dir / "Bologna.tsv"), out=out, quiet=True,
                 overrides={"user_filter": "code", "presets": ["pFPL"], "pis": [1.0], "epochs": [1], "seeds": 1,
                            "workers": 1})
    report = (out / "report.md").read_text()
    assert "109 users (at least 20, the authors' code's filter)" in report
    assert "users with at least 20 interactions (paper: more than 20)" in report


def test_hit_masks_give_the_metrics_module_figures():
    rng = np.random.default_rng(5)
    nu, ni, n = 40, 70, 10
    scores = rng.normal(size=(nu, ni))
    users = np.repeat(np.arange(nu), rng.integers(0, 8, nu))
    items = rng.integers(0, ni, users.size)
    key = np.unique(users * ni + items)
    users, items = key // ni, key % ni
    indptr = np.concatenate(([0], np.cumsum(np.bincount(users, minlength=nu))))
    truth = (indptr, items)
    recs = top_n(scores, None, n)
    recs[3, 7:] = -1  # padding never hits
    m = hit_masks(recs, truth, n)
    per = per_user_metrics(m, np.diff(indptr), n)
    for name, fn in (("p", precision_at), ("r", recall_at), ("f1", f1_at), ("ndcg", ndcg_at)):
        ref = fn(recs, truth, n, per_user=True)
        assert np.allclose(per[name], ref, equal_nan=True), name
    # bit k is rank k + 1
    u = int(np.flatnonzero(popcount(m) > 0)[0])
    ranks = [k for k in range(n) if (m[u] >> k) & 1]
    assert all(recs[u, k] in set(items[indptr[u]:indptr[u + 1]].tolist()) for k in ranks)
    with pytest.raises(ValueError):
        hit_masks(recs, truth, 63)


def test_privacy_audit_split_keeps_users_the_loader_default_would_drop(tmp_path):
    """The audit's FPL data (``SplitData``) keeps users with at least ``min_interactions`` even
    though the Foursquare loader's default keeps more than 20: a user with exactly 20 venues is
    in (the audit failed with LoaderFilterError on the city files before)."""
    from fedsim.studies.privacy import SplitData

    counts = [20, 21, 25, 19, 30]
    f = checkins(tmp_path, counts)
    kw = (("min_interactions", 20), ("protocol", "test"), ("max_users", 0), ("seed", 0))
    sp, _ = SplitData(str(f), kw).load()
    assert sp.n_users == sum(c >= 20 for c in counts) == 4
    sp21, _ = SplitData(str(f), (("min_interactions", 21),) + kw[1:]).load()
    assert sp21.n_users == 3


def test_hit_mask_ndcg_is_the_metrics_module_value_to_the_last_bit():
    # 8 held-out items, hits at ranks 1, 2, 5, 6 of 10: ndcg_at sums the discounts of a row with
    # NumPy's (pairwise, 8-way unrolled) sum; per_user_metrics summed them one rank at a time and
    # gave 0.6004833831800817 against ndcg_at's 0.6004833831800815 (n = 8)
    disc = [1.0 / math.log2(k + 1) for k in range(1, 11)]
    exact = math.fsum(disc[k] for k in (0, 1, 4, 5)) / math.fsum(disc[:8])
    recs = np.array([[0, 1, 20, 21, 2, 3, 22, 23, 24, 25]])
    truth = (np.array([0, 8]), np.arange(8))
    want = ndcg_at(recs, truth, 10, per_user=True)[0]
    assert abs(want - exact) < 1e-15
    m = hit_masks(recs, truth, 10)
    assert m.tolist() == [0b110011]
    assert per_user_metrics(m, np.array([8]), 10)["ndcg"][0] == want
    rng = np.random.default_rng(3)
    for n in (8, 10, 20, 62):
        recs = np.stack([rng.permutation(90)[:n] for _ in range(50)])
        sizes = rng.integers(0, 30, 50)
        truth = (np.concatenate(([0], np.cumsum(sizes))),
                 np.concatenate([rng.choice(90, s, replace=False) for s in sizes]))
        per = per_user_metrics(hit_masks(recs, truth, n), sizes, n)
        for name, fn in (("p", precision_at), ("r", recall_at), ("f1", f1_at), ("ndcg", ndcg_at)):
            assert np.array_equal(per[name], fn(recs, truth, n, per_user=True), equal_nan=True), (name, n)


def test_hit_masks_refuse_fractional_item_ids_as_the_metrics_do():
    """A float 0.5 in recs was cast to item 0 and set a hit bit; precision_at refuses it."""
    truth = (np.array([0, 1]), np.array([0]))
    assert hit_masks(np.array([[1.0, 0.0]]), truth, 2).tolist() == [2]
    for bad in ([[0.5, 1.0]], [[np.nan, 1.0]]):
        with pytest.raises(ValueError, match="integer item indices"):
            hit_masks(np.array(bad), truth, 2)
        with pytest.raises(ValueError, match="integer item indices"):
            precision_at(np.array(bad), truth, 2)


def test_gini_is_over_every_item_of_the_data_or_with_gini_items_catalogue_over_the_training_items():
    # item 5 is every user's test item and nobody's training item: no list can hold it. G@N counted
    # it as an item never recommended (the default, unchanged); gini_items="catalogue" leaves it out
    from fedsim.data import Ratings

    train = {0: [0, 1, 2, 3], 1: [0, 1, 2, 4], 2: [1, 2, 3, 4]}
    users = np.repeat([0, 1, 2], 5)
    items = np.concatenate([train[u] + [5] for u in range(3)])  # item 5 last in time: the test part
    r = Ratings(users=users, items=items, values=np.full(15, 4.0), n_users=3, n_items=6,
                timestamps=np.tile(np.arange(1, 6), 3))
    scores = np.ones((3, 6))
    scores[:, 5] = 10.0  # ranked first if it could be
    splits = {g: prepare(r, min_interactions=5, protocol="test", n=1, gini_items=g) for g in ("data", "catalogue")}
    for g, sp in splits.items():
        assert sp.catalogue.tolist() == [0, 1, 2, 3, 4] and sp.n_items == 6 and sp.info["gini_items"] == g
        assert top_n(scores, sp.evaluators["test"].exclude, 1)[:, 0].tolist() == [4, 3, 0]
    data, cat = (splits[g].evaluate(scores)["test"] for g in ("data", "catalogue"))
    # counts over items 0..5: [1, 0, 0, 1, 1, 0]; sorted shares 0, 0, 0, 1/3, 1/3, 1/3:
    # Gini = (1 + 3 + 5) / 3 / (6 - 1) = 0.6, G = 0.4. Over items 0..4: (0 + 2 + 4) / 3 / (5 - 1) = 0.5, G = 0.5
    assert data["gini"] == pytest.approx(0.4, abs=1e-12) and cat["gini"] == pytest.approx(0.5, abs=1e-12)
    assert data["ic"] == cat["ic"] == 3 and data["p"] == cat["p"] == 0.0
    assert splits["data"].fingerprint != splits["catalogue"].fingerprint
    assert prepare(r, min_interactions=5, protocol="test", n=1).fingerprint == splits["data"].fingerprint
    with pytest.raises(ValueError, match="gini_items must be 'data' or 'catalogue', got 'train'"):
        prepare(r, min_interactions=5, protocol="test", gini_items="train")


def test_the_scenarios_pass_gini_items_to_prepare_and_say_so(tmp_path):
    f = checkins(tmp_path, [25, 30, 22, 28, 40, 21])
    i = prepare(load_foursquare(f, None), min_interactions=21, gini_items="catalogue").info
    assert i["catalogue"] < i["items"]  # test-only venues: the two item sets differ
    note = (f"G@10 is over the {i['catalogue']} catalogue items (`gini_items=catalogue`), not the data's "
            f"{i['items']}.")
    for g in ("catalogue", "data"):
        out = tmp_path / g
        run_scenario("fpl_tcc", data=str(f), out=out, quiet=True,
                     overrides={"gini_items": g, "presets": ["pFPL"], "pis": [1.0], "epochs": [1], "seeds": 1,
                                "workers": 1})
        assert (note in (out / "report.md").read_text()) == (g == "catalogue")
