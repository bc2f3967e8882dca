"""Searches score candidates on a validation split cut from training data and never read the test
split; runs that did not learn are reported with a warning."""

import json
import math

import numpy as np
import pytest

import fedsim.studies.search as search_mod
from fedsim.data import generate
from fedsim.experiment import run_scenario
from fedsim.protocols.fedrec import FedRecConfig
from fedsim.protocols.fedrecpp import FedRecPPConfig
from fedsim.studies.fedrec import Fold, make_folds, run_one
from fedsim.studies.fedrecpp import run_search_task
from fedsim.studies.learning import did_not_learn, initial_metrics
from fedsim.studies.search import choose_hf, run_search, search_fold, validation_fold


class SplitReadError(Exception):
    pass


class Poisoned(tuple):
    """A test part that raises on any read (iteration, indexing, length)."""

    def __iter__(self):
        raise SplitReadError("the test split was read")

    def __getitem__(self, k):
        raise SplitReadError("the test split was read")

    def __len__(self):
        raise SplitReadError("the test split was read")


@pytest.fixture(scope="module")
def folds():
    return make_folds(generate("tiny", seed=2, n_items=60), 5, seed=0)


def poisoned(folds):
    return [Fold(f.index, f.train, Poisoned(), f.n_users, f.n_items) for f in folds]


class FakeCtx:
    def __init__(self):
        self.tables, self.notes = {}, []

    class progress:  # noqa: N801
        @staticmethod
        def update(*a, **k):
            pass

    def table(self, name, rows, **kw):
        self.tables[name] = rows

    def note(self, text):
        self.notes.append(text)


def test_validation_fold_is_cut_from_training_data_only(folds):
    f = folds[0]
    v = validation_fold(poisoned(folds)[0], parts=5, seed=3)  # reads no test rating
    n = len(f.train[0])
    assert len(v.test[0]) == n // 5 and len(v.train[0]) == n - n // 5
    both = np.concatenate([v.train[0] * 10_000 + v.train[1], v.test[0] * 10_000 + v.test[1]])
    np.testing.assert_array_equal(np.sort(both), np.sort(f.train[0] * 10_000 + f.train[1]))
    test_keys = set((f.test[0] * 10_000 + f.test[1]).tolist())
    assert not test_keys & set(both.tolist())
    again = validation_fold(f, parts=5, seed=3)
    np.testing.assert_array_equal(again.test[1], v.test[1])
    assert not np.array_equal(validation_fold(f, parts=5, seed=4).test[1], v.test[1])


def test_the_search_rules(folds):
    assert search_fold(folds, "first_copy") is folds[0]
    assert search_fold(folds, "none") is None
    with pytest.raises(ValueError, match="search rule"):
        search_fold(folds, "test")
    with pytest.raises(SplitReadError):  # the paper's rule does read copy 1's test part
        run_search(search_fold(poisoned(folds), "first_copy"),
                   {"a": [FedRecConfig("PMF(B)", d=4, T=2)]}, seed=0)


def test_lambda_search_never_reads_the_test_split(folds):
    cands = [FedRecConfig("PMF(B)", d=4, T=15, lr=0.8, lam=lam) for lam in (0.1, 0.01, 0.001)]
    best, rows = run_search(search_fold(poisoned(folds), "validation", 5, seed=1), {"PMF(B)": cands}, seed=5)
    assert best["PMF(B)"].lam in (0.1, 0.01, 0.001)
    assert sum(r["chosen"] for r in rows) == 1
    # the chosen candidate is the one with the lowest validation MAE, computed independently
    val = validation_fold(folds[0], 5, seed=1)
    maes = [run_one((val, "unfederated", c, 5, "ideal", False)).mae for c in cands]
    assert best["PMF(B)"].lam == cands[int(np.argmin(maes))].lam
    assert [r["mae"] for r in rows] == pytest.approx(maes, abs=0)


@pytest.mark.parametrize("c", [0, 12])
def test_hf_search_never_reads_the_test_split(folds, c):
    """FedRec++'s searches (central twins at c = n, the actors at c < n) on the validation split."""
    ctx = FakeCtx()

    def make(key, tp, tl):
        return FedRecPPConfig(d=4, T=12, rho=float(key[0]), eta=0, c=c, T_predict=tp, T_local=tl)

    hf = choose_hf(ctx, poisoned(folds), [(1,)], make, rule="validation", workers=1, paper=lambda k: (10, 10),
                   seed=3, runner=run_search_task, key_names=("rho",))
    assert hf[(1,)] in search_mod.TP_TL_GRID
    rows = ctx.tables["hf_search"]
    assert len(rows) == 9 and sum(r["chosen"] for r in rows) == 1 and rows[0]["rho"] == 1
    assert min(rows, key=lambda r: r["mae"])["mae"] == next(r for r in rows if r["chosen"])["mae"]
    # fixed values are not searched
    ctx2 = FakeCtx()
    assert choose_hf(ctx2, poisoned(folds), [(1,)], make, rule="validation", workers=1, paper=lambda k: (10, 10),
                     fixed=(7, 3), runner=run_search_task) == {(1,): (7, 3)}
    assert "hf_search" not in ctx2.tables
    assert choose_hf(ctx2, poisoned(folds), [(1,)], make, rule="none", workers=1,
                     paper=lambda k: (10, 15)) == {(1,): (10, 15)}


def test_search_runner_uses_the_central_twin_only_at_full_participation(folds):
    val = validation_fold(folds[0], 5, seed=1)
    cfg = FedRecPPConfig(d=4, T=6, rho=1.0, eta=0, T_predict=2, T_local=3, dtype="float64")
    a = run_search_task((val, "unfederated", cfg, 4, "ideal", False))
    from fedsim.studies.fedrecpp import run_pp

    b = run_pp((val, cfg, 4, "ideal", False))
    assert a.cfg is cfg
    assert a.rmse == pytest.approx(b.rmse, abs=1e-9) and a.mae == pytest.approx(b.mae, abs=1e-9)


def test_did_not_learn_rule():
    assert did_not_learn(2.775, 2.775) and did_not_learn(2.775, 2.76) and did_not_learn(2.0, 2.5)
    assert not did_not_learn(2.775, 0.95) and not did_not_learn(2.775, math.nan)


def test_initial_metrics_are_the_initial_models(folds):
    """The initial model predicts ~0, i.e. the lowest rating after clipping; a run of 0 iterations
    ends where it starts."""
    f = folds[0]
    cfg = FedRecConfig("PMF(B)", d=4, T=0)
    mae, rmse = initial_metrics(f, cfg, seed=3)
    r = np.asarray(f.test[2], dtype=np.float64)
    assert rmse == pytest.approx(np.sqrt(np.mean((r - 1) ** 2)), abs=1e-12)
    assert mae == pytest.approx(np.mean(r - 1), abs=1e-12)
    out = run_one((f, "federated", cfg, 3, "ideal", False))
    assert (out.mae, out.rmse) == (out.initial_mae, out.initial_rmse)
    for model in ("PMF(S)", "SVD++(S)"):
        c = FedRecConfig(model, d=4, T=0, lr=0.01)
        o = run_one((f, "unfederated", c, 3, "ideal", False))
        assert (o.mae, o.rmse) == pytest.approx(initial_metrics(f, c, seed=3), abs=0)


def test_a_run_that_does_not_learn_is_reported(tmp_path):
    # a learning rate far too small for 3 iterations: the factors stay near 0
    res = run_scenario("fedrecpp_table2", data="tiny", out=tmp_path / "stuck", seed=1, quiet=True,
                       overrides={"folds": 2, "iterations": 3, "rhos": [0], "lr": 1e-6, "lam": 0.001, "workers": 1})
    report = (tmp_path / "stuck" / "report.md").read_text()
    assert "not_learned" in res["tables"]
    assert "WARNING: 2 run(s) did not learn" in report
    # a caveat a sweep reads from results.json (its points table): a note alone reached only this report
    assert json.loads((tmp_path / "stuck" / "results.json").read_text())["caveats"] == ["not-learned"]
    # and a run that learns raises no warning
    res = run_scenario("fedrecpp_table2", data="tiny", out=tmp_path / "ok", seed=1, quiet=True,
                       overrides={"folds": 2, "iterations": 40, "rhos": [0], "lr": 0.8, "lam": 0.001, "workers": 1})
    assert "not_learned" not in res["tables"]
    assert "did not learn" not in (tmp_path / "ok" / "report.md").read_text()
    assert json.loads((tmp_path / "ok" / "results.json").read_text())["caveats"] == []


class _Out:
    def __init__(self, cfg, mae, diverged=None):
        self.cfg, self.mae, self.rmse, self.diverged_at = cfg, mae, mae, diverged


def test_a_choice_that_diverges_on_the_whole_training_part_gives_way_to_the_next(folds):
    """A learning rate at the edge of stability can train on the smaller validation split and
    diverge on the whole training part: the next best candidate is then chosen."""
    from fedsim.studies.search import confirm_fold

    conf = confirm_fold(poisoned(folds), "validation", 5, seed=1)
    assert conf.train is folds[0].train
    assert len(conf.test[0]) == len(folds[0].train[0]) // 5  # the validation split, not the test part
    assert confirm_fold(folds, "first_copy") is None and confirm_fold(folds, "none") is None
    cands = [FedRecConfig("PMF(B)", d=4, T=1, lr=lr) for lr in (0.5, 0.9, 1.3)]
    val_mae = {0.5: 0.80, 0.9: 0.75, 1.3: 0.70}
    seen = []

    def runner(task):
        fold, _, cfg, *_ = task
        seen.append((fold is conf, cfg.lr))
        if fold is conf:  # on the whole training part lr 1.3 diverges
            return _Out(cfg, float("nan") if cfg.lr > 1 else 0.1, 4 if cfg.lr > 1 else None)
        return _Out(cfg, val_mae[cfg.lr])

    best, rows = run_search(validation_fold(folds[0], 5, 1), {"g": cands}, seed=0, runner=runner, confirm=conf,
                            confirm_seeds=2)
    assert best["g"].lr == 0.9
    assert [r["diverged_on_whole_training_part"] for r in rows] == ["", False, True]
    assert [r["chosen"] for r in rows] == [False, True, False]
    # tried best first, with every confirmation seed; the scores there are never used
    assert seen[-4:] == [(True, 1.3), (True, 1.3), (True, 0.9), (True, 0.9)]

    # divergence with one seed of several is enough to refuse a candidate
    def runner2(task):
        fold, _, cfg, seed, *_ = task
        if fold is conf:
            return _Out(cfg, 0.1, 3 if (cfg.lr > 1 and seed == 2) else None)
        return _Out(cfg, val_mae[cfg.lr])

    assert run_search(validation_fold(folds[0], 5, 1), {"g": cands}, seed=0, runner=runner2, confirm=conf,
                      confirm_seeds=3)[0]["g"].lr == 0.9
    assert run_search(validation_fold(folds[0], 5, 1), {"g": cands}, seed=0, runner=runner2, confirm=conf,
                      confirm_seeds=2)[0]["g"].lr == 1.3
    with pytest.raises(ValueError, match="every candidate diverged"):
        run_search(validation_fold(folds[0], 5, 1), {"g": cands[2:]}, seed=0, runner=runner, confirm=conf)


def test_every_group_first_choice_is_confirmed_in_one_batch_and_the_choices_stay_the_same(folds, monkeypatch):
    """The confirmation runs of every group's first choice go to the pool together (one group
    after the other kept a core idle); a group whose first choice diverges then tries its next
    best, as before, and the chosen candidates are those of confirming one at a time."""
    import fedsim.studies.search as search
    from fedsim.studies.search import confirm_fold

    conf = confirm_fold(poisoned(folds), "validation", 5, seed=1)
    lrs = (0.5, 0.9, 1.3)
    groups = {g: [FedRecConfig("PMF(B)", d=4, T=1, lr=lr, lam=lam) for lr in lrs]
              for g, lam in (("a", 0.01), ("b", 0.02), ("c", 0.03))}
    val_mae = {0.5: 0.80, 0.9: 0.75, 1.3: 0.70}
    seen = []

    def runner(task):
        fold, _, cfg, seed, *_ = task
        if fold is conf:
            seen.append((cfg.lam, cfg.lr, seed))
            # group a: 1.3 diverges on the whole part with seed 1 only; group c: 1.3 and 0.9 diverge
            bad = (cfg.lam == 0.01 and cfg.lr == 1.3 and seed == 1) or (cfg.lam == 0.03 and cfg.lr > 0.6)
            return _Out(cfg, 0.1, 2 if bad else None)
        return _Out(cfg, val_mae[cfg.lr])

    batches = []
    real_pmap = search.pmap

    def counting_pmap(fn, tasks, *a, **k):
        tasks = list(tasks)
        batches.append(sum(t[0] is conf for t in tasks))
        return real_pmap(fn, tasks, *a, **k)

    monkeypatch.setattr(search, "pmap", counting_pmap)
    best, rows = run_search(validation_fold(folds[0], 5, 1), groups, seed=0, runner=runner, confirm=conf,
                            confirm_seeds=2)
    assert {g: c.lr for g, c in best.items()} == {"a": 0.9, "b": 1.3, "c": 0.5}
    # the grid, then the three first choices with both seeds at once, then a's and c's next ones
    assert batches == [0, 6, 2, 2, 2]
    assert seen[:6] == [(lam, 1.3, s) for lam in (0.01, 0.02, 0.03) for s in (0, 1)]
    assert seen[6:] == [(0.01, 0.9, 0), (0.01, 0.9, 1), (0.03, 0.9, 0), (0.03, 0.9, 1), (0.03, 0.5, 0),
                        (0.03, 0.5, 1)]
    assert [r["diverged_on_whole_training_part"] for r in rows] == ["", False, True, "", "", False,
                                                                    False, True, True]
    assert [r["chosen"] for r in rows] == [False, True, False, False, False, True, True, False, False]

    # confirming one candidate at a time (the rule written out) chooses the same
    def one_at_a_time(g):
        for cfg in sorted(groups[g], key=lambda c: val_mae[c.lr]):
            if all(runner((conf, "unfederated", cfg, s)).diverged_at is None for s in (0, 1)):
                return cfg.lr
    assert {g: one_at_a_time(g) for g in groups} == {g: c.lr for g, c in best.items()}


def test_a_candidate_next_to_divergence_is_not_chosen(folds):
    from dataclasses import replace

    cands = [FedRecConfig("PMF(B)", d=4, T=1, lr=lr) for lr in (0.5, 0.9, 1.3)]
    val = {0.5: (0.80, None), 0.9: (0.70, None), 1.3: (float("nan"), 2)}

    def runner(task):
        cfg = task[2]
        return _Out(cfg, *val[cfg.lr])

    def up(c):
        bigger = [x for x in (0.5, 0.9, 1.3) if x > c.lr]
        return [replace(c, lr=bigger[0])] if bigger else []

    best, rows = run_search(validation_fold(folds[0], 5, 1), {"g": cands}, seed=0, runner=runner, neighbours=up)
    assert best["g"].lr == 0.5
    assert [r["next_to_divergence"] for r in rows] == [False, True, False]
    assert run_search(validation_fold(folds[0], 5, 1), {"g": cands}, seed=0, runner=runner)[0]["g"].lr == 0.9
