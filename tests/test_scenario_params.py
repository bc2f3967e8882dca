"""Scenario parameters out of range are refused up front with one UsageError naming the
parameter (they were a worker's traceback, or ran silently as something else)."""

from __future__ import annotations

import pytest

from fedsim.experiment import UsageError, run_scenario


@pytest.mark.parametrize("name, over, message", [
    ("fedrecpp_table3", {"draws": -2}, "--set draws: must be >= 1, got -2"),  # ran one draw, reported draws=-2
    ("personalfr_curves", {"joint_batch": -5}, "--set joint_batch: must be >= 1, got -5"),  # ran
    ("personalfr_table3", {"joint_epochs": -1}, "--set joint_epochs: must be >= 0, got -1"),
    ("personalfr_curves", {"eval_every": -1}, "--set eval_every: must be >= 0, got -1"),
])
def test_a_bound_is_checked_before_the_run(name, over, message, tmp_path):
    with pytest.raises(UsageError) as exc:
        run_scenario(name, data="tiny", out=tmp_path / "o", overrides=over, quiet=True)
    assert str(exc.value) == message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["personalfr_table3", "personalfr_curves", "personalfr_compression"])
@pytest.mark.parametrize("clients", [[-3], [4, 31]])
def test_personalfr_clients_outside_the_users_are_refused(name, clients, tmp_path):
    # a worker's 'ValueError: M must be in [1, n_users = 30]' traceback before; tiny has 30 users
    over = {"clients": clients, "workers": 1, "repeats": 1}
    with pytest.raises(UsageError) as exc:
        run_scenario(name, data="tiny", out=tmp_path / "o", overrides=over, quiet=True)
    bad = [M for M in clients if not 0 <= M <= 30]
    assert str(exc.value) == (f"--set clients: {', '.join(map(str, bad))} not in [0, 30] (the data's users; "
                              "0: one user per client)")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("etas", [["abc"], ["1", "n/0"], ["-1"], ["31"]])
def test_fedrecpp_table3_refuses_an_eta_it_cannot_read(etas, tmp_path):
    # int('abc') and n // 0 were tracebacks; -1 ran as FedRec without denoisers
    over = {"etas": etas, "folds": 2, "iterations": 1, "draws": 1, "timing_iterations": 1, "workers": 1}
    with pytest.raises(UsageError) as exc:
        run_scenario("fedrecpp_table3", data="tiny", out=tmp_path / "o", overrides=over, quiet=True)
    n = 30  # tiny's users, all in every fold's training part
    assert str(exc.value) == f"--set etas: {etas[-1]!r} is not a number of denoisers in [0, {n}] nor n/K with K >= 1"
    assert list(tmp_path.iterdir()) == []


def test_fedrecpp_table3_still_reads_its_eta_forms(tmp_path):
    over = {"etas": ["0", "1", "n/4"], "folds": 2, "iterations": 1, "draws": 1, "timing_iterations": 1, "workers": 1}
    run_scenario("fedrecpp_table3", data="tiny", out=tmp_path / "o", overrides=over, quiet=True)
    import csv

    rows = list(csv.DictReader(open(tmp_path / "o" / "round_time.csv")))
    assert [(r["eta"], r["eta_value"]) for r in rows] == [("0", "0"), ("1", "1"), ("n/4", "7")]


@pytest.mark.parametrize("eta", ["abc", "n/0", "-1", "31"])
def test_privacy_audit_refuses_an_eta_that_names_no_number_of_denoisers(eta, tmp_path):
    # its own reader: int('abc') and n // 0 were tracebacks, -1 ran as no denoiser
    over = {"protocols": ["fedrecpp"], "etas": ["1", eta], "workers": 1}
    with pytest.raises(UsageError) as exc:
        run_scenario("privacy_audit", data="tiny", out=tmp_path / "o", overrides=over, quiet=True)
    assert str(exc.value) == f"--set etas: {eta!r} is not a number of denoisers in [0, 30] nor n/K with K >= 1"
    assert list(tmp_path.iterdir()) == []


def test_denoisers_reads_a_count_or_a_fraction_of_n():
    from fedsim.studies.fedrecpp import denoisers

    assert [denoisers(t, 30) for t in ("0", " 3 ", "n/4", "n/40", "30")] == [0, 3, 7, 0, 30]
    assert denoisers("n/40", 30, at_least_one=True) == 1 and denoisers("0", 30, at_least_one=True) == 0


def test_fedrec_table2_says_where_the_paper_scored_its_lambdas(tmp_path):
    # the note named only the validation split it scored on, beside tables titled as the paper's
    over = {"folds": 2, "iterations": 1, "models": ["PMF(B)"], "lambdas": [0.1, 0.01], "paper_order": False,
            "reference": "none", "workers": 1}
    run_scenario("fedrec_table2", data="tiny", out=tmp_path / "v", overrides=over, quiet=True)
    report = (tmp_path / "v" / "report.md").read_text()
    assert ("(scored on a validation split of copy 1's training part; the paper scored the candidates on "
            "copy 1's test part: --set search_on=first_copy).") in report
    run_scenario("fedrec_table2", data="tiny", out=tmp_path / "f", overrides={**over, "search_on": "first_copy"},
                 quiet=True)
    report = (tmp_path / "f" / "report.md").read_text()
    assert "(scored on copy 1's test part (the paper's rule))." in report


def test_fedrecpp_clients_prints_the_table_2_of_the_datasets_shape(tmp_path, monkeypatch):
    # it printed ML100K's Table 2 beside runs on data of ML1M's shape (fedrecpp_table2 picks by shape)
    import csv

    from fedsim.experiment import load_scenario
    from fedsim.studies.paper_values import FEDRECPP_TABLE2

    mod = load_scenario("fedrecpp_clients")
    monkeypatch.setattr(mod, "paper_dataset", lambda ratings: "ML1M")  # tiny data standing in for ML1M's shape
    over = {"folds": 2, "iterations": 1, "rhos": [0, 1], "fractions": [1.0], "workers": 1}
    run_scenario(mod, data="tiny", out=tmp_path / "o", overrides=over, quiet=True)
    rows = list(csv.DictReader(open(tmp_path / "o" / "clients.csv")))
    got = {(r["algorithm"], int(r["rho"])): float(r["paper_rmse_c_n"]) for r in rows}
    want = {k: FEDRECPP_TABLE2["ML1M"][k][1] for k in got}
    assert got == want and want != {k: FEDRECPP_TABLE2["ML100K"][k][1] for k in got}
    assert "The paper values printed beside ours are ML1M's" in (tmp_path / "o" / "report.md").read_text()


@pytest.mark.parametrize("name", ["fpl_pi", "fpl_fig3", "fpl_tcc", "fpl_table2"])
@pytest.mark.parametrize("over, rule", [
    ({}, ", the threshold of user_filter 'paper'"),  # the quick settings' filter: more than 20 interactions
    ({"min_interactions": 30}, ""),
])
def test_fpl_scenarios_refuse_a_user_filter_that_keeps_no_user(name, over, rule, tmp_path):
    # tiny's users have at most 20 interactions: prepare's 'ValueError: no user has 21 interactions or
    # more' was a traceback (exit 1) on the first data a user tries
    threshold = over.get("min_interactions", 21)
    with pytest.raises(UsageError) as exc:
        run_scenario(name, data="tiny", out=tmp_path / "o", overrides={"seeds": 1, "workers": 1, **over},
                     quiet=True)
    assert str(exc.value) == (f"--set min_interactions: --data tiny: no user has {threshold} interactions or more "
                              f"(the most any of the 30 users has: 20){rule}; set a lower min_interactions")
    assert list(tmp_path.iterdir()) == []


def test_privacy_audit_refuses_an_fpl_filter_that_keeps_no_user(tmp_path):
    over = {"protocols": ["fpl"], "fpl_min_interactions": 50, "fpl_epochs": 1, "workers": 1}
    with pytest.raises(UsageError) as exc:
        run_scenario("privacy_audit", data="tiny", out=tmp_path / "o", overrides=over, quiet=True)
    assert str(exc.value) == ("--set fpl_min_interactions: --data tiny: no user has 50 interactions or more (the "
                              "most any of the 30 users has: 20); set a lower fpl_min_interactions")
    assert list(tmp_path.iterdir()) == []


def test_fedrecpp_clients_cites_no_paper_statement_for_a_fraction_the_paper_did_not_run(tmp_path):
    # c = 0.01n was labelled "Table 2 (c = n)"
    import csv

    over = {"folds": 2, "use_folds": 1, "iterations": 1, "rhos": [1], "fractions": [0.01, 0.2, 1.0], "workers": 1}
    run_scenario("fedrecpp_clients", data="tiny", out=tmp_path / "o", overrides=over, quiet=True)
    rows = list(csv.DictReader(open(tmp_path / "o" / "clients.csv")))
    says = {(float(r["c_fraction"]), r["algorithm"]): r["paper_says"] for r in rows}
    assert says[(0.01, "FedRec")] == says[(0.01, "FedRec++")] == ""
    assert says[(1.0, "FedRec")] == "Table 2 (c = n)"
    assert says[(0.2, "FedRec")].startswith("FedRec degrades fast as rho grows")


def test_fedrecpp_clients_says_it_ran_fewer_copies_than_use_folds_asked(tmp_path):
    # use_folds above folds ran the folds there are while the configuration line said use_folds = 3
    import csv

    over = {"folds": 2, "use_folds": 3, "iterations": 1, "rhos": [1], "fractions": [1.0], "workers": 1}
    run_scenario("fedrecpp_clients", data="tiny", out=tmp_path / "o", overrides=over, quiet=True)
    rows = list(csv.DictReader(open(tmp_path / "o" / "clients.csv")))
    assert {r["folds"] for r in rows} == {"2"}
    assert "use_folds = 3 with folds = 2: every setting ran on the 2 copies there are." in (
        tmp_path / "o" / "report.md").read_text()
