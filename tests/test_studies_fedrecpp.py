"""fedsim.studies.fedrecpp and the FedRec++ scenarios: cost figures read off the ledger."""

import csv
from pathlib import Path

import numpy as np
import pytest

from fedsim.data import generate
from fedsim.experiment import run_scenario
from fedsim.protocols.fedrecpp import FedRecPPConfig
from fedsim.studies.fedrec import make_folds
from fedsim.studies.fedrecpp import left_out as left_out_of, run_pp


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_download_units_are_the_ledgers_vectors(dtype):
    """The model download is m latent vectors per client and iteration: units come from the
    ledger's floats, not from its wire bytes / (4 d) (which counted msgpack and framing bytes,
    61.75 units for 60 items, and doubled in float64)."""
    f = make_folds(generate("tiny", seed=2, n_items=60), 5, seed=0)[0]
    cfg = FedRecPPConfig(d=4, T=3, rho=1.0, eta=1, dtype=dtype)
    o = run_pp((f, cfg, 0, "ideal", True))
    assert o.download_units == f.n_items == 60
    assert o.download_bytes > 60 * 4 * (4 if dtype == "float32" else 8)  # wire bytes carry more than the floats


SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def test_table3_download_row_in_units(tmp_path):
    # by path: this checkout's scenario (an editable install may map fedsim.scenarios elsewhere)
    run_scenario(str(SCENARIOS / "fedrecpp_table3.py"), data="tiny", out=tmp_path / "t3", seed=1, quiet=True,
                 overrides={"folds": 2, "iterations": 2, "draws": 1, "timing_iterations": 1, "etas": ["0"],
                            "workers": 1})
    rows = list(csv.DictReader(open(tmp_path / "t3" / "comm_cost.csv")))
    dl = next(r for r in rows if r["role"].startswith("download_V"))
    n_items = generate("tiny", seed=0).n_items
    assert float(dl["units_per_iteration"]) == n_items
    # a mean over the draws, with the roles' convention for its spread: one draw has none (NaN;
    # the row said 0.0, and kept the last draw's figures)
    ordinary = next(r for r in rows if r["role"] == "ordinary")
    assert ordinary["units_std_over_draws"] == dl["units_std_over_draws"] == ""  # (NaN is written empty)
    # the dataset column names the data the runs used (--data, which ctx.load_data resolves), not
    # the papers' dataset whose shape it has (data_note's match: None for tiny, "ML100K" for the
    # synthetic ml100k-like, whose ratings are not ML-100K's)
    assert {r["dataset"] for r in rows} == {"tiny"}


def test_table3_refuses_zero_iterations(tmp_path):
    """Its figures are per iteration: T = 0 was a ZeroDivisionError in role_costs after the runs."""
    from fedsim.experiment import UsageError

    with pytest.raises(UsageError, match="iterations: must be >= 1"):
        run_scenario(str(SCENARIOS / "fedrecpp_table3.py"), data="tiny", out=tmp_path / "t3", seed=1, quiet=True,
                     overrides={"iterations": 0, "draws": 1, "etas": ["0"], "workers": 1})


def test_hf_setting_gives_the_papers_values_at_the_papers_rhos_only():
    from fedsim.studies.fedrecpp import hf_setting

    assert hf_setting(1) == (10, 10) and hf_setting(2) == (5, 15) and hf_setting(3.0) == (5, 15)
    assert hf_setting(1, dataset="ML1M") == (10, 15) and hf_setting(3, dataset="NF5K5K") == (5, 15)
    # off the paper's rhos: (10, 10), as documented; int() truncation gave rho 2's and 3's
    assert hf_setting(2.5) == (10, 10) and hf_setting(3.7) == (10, 10) and hf_setting(0.5) == (10, 10)
    assert hf_setting(4) == (10, 10)
    assert hf_setting(2.5, tp=15) == (15, 10) and hf_setting(2, tl=5) == (5, 5)


@pytest.mark.parametrize("rho,paper", [(1.0, "170"), (2.0, "")])
def test_table3_prints_the_papers_figures_at_its_rho_only(tmp_path, rho, paper):
    # the paper's Table 3 is at rho = 1; at rho = 2 its units were printed beside ours, with a diff_pct
    run_scenario(str(SCENARIOS / "fedrecpp_table3.py"), data="tiny", out=tmp_path / "t3", seed=1, quiet=True,
                 overrides={"folds": 2, "iterations": 2, "draws": 1, "timing_iterations": 1, "etas": ["0"],
                            "workers": 1, "rho": rho})
    rows = list(csv.DictReader(open(tmp_path / "t3" / "comm_cost.csv")))
    ordinary = next(r for r in rows if r["role"] == "ordinary")
    assert ordinary["paper_units"] == paper
    assert (ordinary["diff_pct"] == "") == (paper == "")
    assert ordinary["units_std_over_draws"] == ""  # NaN (one draw: no spread measured); it said 0.0
    notes = open(tmp_path / "t3" / "report.md").read()
    assert ("the paper's Table 3 is at rho = 1" in notes) == (paper == "")


# --- faults: what a run left out reaches the study's outcome and the scenarios' outputs ---------

def _fold():
    return make_folds(generate("tiny", seed=2, n_items=60), 5, seed=0)[0]


@pytest.mark.parametrize("net", [{"loss": 0.1}, {"dropout": 0.3, "window": (0.0, 0.5)}])
def test_run_pp_carries_what_the_run_left_out(net):
    """run_pp dropped the result's info["missing"] and lost clients: a run on a faulty network
    reported its MAE/RMSE as a complete run's."""
    from fedsim.kernel import NetSpec
    from fedsim.protocols import fedrecpp

    f = _fold()
    cfg = FedRecPPConfig(d=4, T=3, rho=1.0, eta=1, deadline=1.0)
    spec = NetSpec(profile="lan", **net)
    o = run_pp((f, cfg, 3, spec, False))
    ref_net = spec.build(3)
    ref = fedrecpp.SPEC.build(ref_net, f.train_ratings(), cfg).collect(ref_net.run())
    assert o.missing == ref.info["missing"] and o.lost_clients == ref.info["lost_clients"]
    assert o.incomplete
    if "loss" in net:  # one denoiser: every round's single group is broken by some lost message
        # one record per round and kind missing, clients: the server's missed messages of it
        # (ledger.missing); the round's one group (all 30 clients) left out, counted once
        missed: dict = {}
        for m in ref_net.ledger.missing:
            if m.receiver == "server":
                missed[m.round, m.kind] = missed.get((m.round, m.kind), 0) + 1
        assert {(r["round"], r["kind"]): r["clients"] for r in o.missing} == missed
        assert sorted(r["round"] for r in o.missing if r["groups"]) == [0, 1, 2]
        assert all(r["left_out"] == 30 * r["groups"] for r in o.missing) and o.lost_clients == []
        assert left_out_of([o]) == {"incomplete_runs": 1, "left_out_rounds": 3, "left_out_clients": 90, "lost_clients": 0}
    else:
        assert o.missing == [] and o.lost_clients == ["client/0017"]
        # its errors are over the test ratings of the clients present: the lost one's zero user
        # factor (the lowest rating predicted) was scored as if it had trained
        users, items, values, left_out = ref.present(*f.test[:3])
        assert left_out == 1 and (o.mae, o.rmse) == ref.model.evaluate(users, items, values)
        assert o.rmse != ref.model.evaluate(*f.test[:3])[1]
    clean = run_pp((f, cfg, 3, "lan", False))
    assert clean.missing == [] and clean.lost_clients == [] and not clean.incomplete


def _rows(path):
    return list(csv.DictReader(open(path)))


@pytest.mark.parametrize("scenario, overrides, table", [
    ("fedrecpp_table2", {"folds": 2, "iterations": 2, "rhos": [1], "search_on": "none"}, "table2"),
    ("fedrecpp_clients", {"folds": 2, "use_folds": 1, "iterations": 2, "rhos": [1], "fractions": [1.0],
                          "search_on": "none"}, "clients"),
    ("fedrecpp_table3", {"folds": 2, "iterations": 2, "draws": 1, "timing_iterations": 1, "etas": ["1"]},
     "comm_cost"),
])
def test_fedrecpp_scenarios_say_which_runs_were_incomplete(tmp_path, scenario, overrides, table):
    """With faults and a deadline, every run leaves clients out: each table row counts its
    incomplete runs, the table ``incomplete`` lists them and report.md warns. (The scenarios had
    no deadline, and their tables presented such runs as complete ones.)"""
    from fedsim.kernel import NetSpec

    net = NetSpec(profile="lan", loss=0.2)
    run_scenario(str(SCENARIOS / f"{scenario}.py"), data="tiny", out=tmp_path / "o", seed=1, quiet=True, net=net,
                 overrides={**overrides, "deadline": 1.0, "workers": 1})
    rows = _rows(tmp_path / "o" / f"{table}.csv")
    inc = _rows(tmp_path / "o" / "incomplete.csv")
    report = (tmp_path / "o" / "report.md").read_text()
    assert f"WARNING: {len(inc)} run(s) incomplete" in report
    assert all(int(r["left_out_rounds"]) > 0 and int(r["left_out_clients"]) > 0 for r in inc)
    if scenario == "fedrecpp_table3":
        # one cost draw and one timing run per eta; every role row and the download row say so
        assert len(inc) == 2 and {r["run"] for r in inc} == {"eta=1 cost draw 0", "eta=1 wan draw 0"}
        assert [r["incomplete_draws"] for r in rows] == ["1"] * len(rows)
        draws = _rows(tmp_path / "o" / "comm_cost_draws.csv")
        cost = next(r for r in inc if r["run"] == "eta=1 cost draw 0")
        assert {r["left_out_clients"] for r in draws} == {cost["left_out_clients"]}
        assert _rows(tmp_path / "o" / "round_time.csv")[0]["incomplete_runs"] == "1"
    else:
        folds = overrides.get("use_folds", 2)
        assert len(inc) == 2 * folds  # FedRec and FedRec++ at rho = 1, every fold
        assert [int(r["incomplete_runs"]) for r in rows] == [folds, folds]
        for r in rows:
            mine = [i for i in inc if i["run"].startswith(r["algorithm"] + " ")]
            assert int(r["left_out_clients"]) == sum(int(i["left_out_clients"]) for i in mine)
            assert int(r["lost_clients"]) == 0


def test_table2_without_faults_reports_complete_runs(tmp_path):
    run_scenario(str(SCENARIOS / "fedrecpp_table2.py"), data="tiny", out=tmp_path / "o", seed=1, quiet=True,
                 overrides={"folds": 2, "iterations": 2, "rhos": [1], "search_on": "none", "workers": 1})
    rows = _rows(tmp_path / "o" / "table2.csv")
    assert [(r["incomplete_runs"], r["left_out_clients"], r["lost_clients"]) for r in rows] == [("0", "0", "0")] * 2
    assert not (tmp_path / "o" / "incomplete.csv").exists()
    assert "run(s) incomplete" not in (tmp_path / "o" / "report.md").read_text()


def test_per_iteration_costs_of_a_diverged_run_divide_by_the_iterations_it_ran():
    """A run that diverges stops after iteration diverged_at (1-based): role_costs and the model
    download per client divided by cfg.T, so its per-iteration figures came out T / diverged_at
    times too low. Checked against a hand count of the ledger's rows."""
    from fedsim.kernel import NetSpec
    from fedsim.protocols import fedrecpp
    from fedsim.studies.fedrecpp import (NOT_COUNTED, download_per_client, download_units_per_client,
                                         iterations_run, role_costs)

    f = _fold()
    cfg = FedRecPPConfig(d=4, T=8, rho=1.0, eta=2, lr=1e6)  # diverges on tiny data
    net = NetSpec().build(0)  # run_pp's network for ("ideal", seed 0)
    with np.errstate(all="ignore"):
        res = fedrecpp.SPEC.build(net, f.train_ratings(), cfg).collect(net.run())
    div = res.info["diverged_at"]
    assert div == 3 < cfg.T
    cols = net.ledger.columns()
    rounds = sorted({int(r) for r in cols["round"] if r >= 0})
    assert rounds == [0, 1, 2] and iterations_run(net) == div
    # hand count: per client, the floats it sent plus those delivered to it, model/assign/stop left out
    roles = net.ledger.roles
    floats = {name: 0.0 for name, role in roles.items() if role != "server"}
    model_floats = model_bytes = 0.0
    for i in range(len(cols["seq"])):
        kind, src, dst = cols["kind"][i], cols["src"][i], cols["dst"][i]
        if kind == "model":
            model_floats += float(cols["floats"][i])
            model_bytes += float(cols["bytes"][i])
        if cols["round"][i] < 0 or kind in NOT_COUNTED:
            continue
        if src in floats:
            floats[src] += float(cols["floats"][i])
        if dst in floats and cols["status"][i] == "delivered":
            floats[dst] += float(cols["floats"][i])
    members = {"denoiser": [c for c in floats if roles[c] == "denoiser"],
               "ordinary": [c for c in floats if roles[c] == "ordinary"], "client": list(floats)}
    costs = role_costs(net, cfg)
    for row in costs:
        mine = members[row["role"]]
        assert row["nodes"] == len(mine)
        assert row["units_per_iteration"] == pytest.approx(sum(floats[c] for c in mine) / cfg.d / div / len(mine),
                                                           rel=1e-12)
    # every client got V (m x d floats) in each of the 3 iterations run: m units per iteration
    assert download_units_per_client(net, cfg) == model_floats / cfg.d / div / 30 == f.n_items == 60
    assert download_per_client(net, cfg) == pytest.approx(model_bytes / div / 30, rel=1e-12)
    with np.errstate(all="ignore"):
        o = run_pp((f, cfg, 0, "ideal", True))
    assert o.iterations == div and o.diverged_at == div
    assert o.costs == costs and o.download_units == 60


def test_table3_says_which_draws_diverged(tmp_path):
    with np.errstate(all="ignore"):
        run_scenario(str(SCENARIOS / "fedrecpp_table3.py"), data="tiny", out=tmp_path / "t3", seed=1, quiet=True,
                     overrides={"folds": 2, "iterations": 6, "draws": 1, "timing_iterations": 1, "etas": ["1"],
                                "workers": 1, "lr": 1e6})
    draws = _rows(tmp_path / "t3" / "comm_cost_draws.csv")
    its = {r["iterations"] for r in draws}
    assert len(its) == 1 and int(its.pop()) < 6 and {r["diverged_at"] for r in draws} != {""}
    rows = _rows(tmp_path / "t3" / "comm_cost.csv")
    assert [r["diverged_draws"] for r in rows] == ["1"] * len(rows)
    dl = next(r for r in rows if r["role"].startswith("download_V"))
    assert float(dl["units_per_iteration"]) == generate("tiny", seed=0).n_items  # per iteration run, not per T
    report = (tmp_path / "t3" / "report.md").read_text()
    assert "run(s) diverged**" in report and "eta=1 cost draw 0 at iteration" in report


def test_role_costs_with_secure_noise_do_not_count_the_fixed_point_noise_as_no_vector(tmp_path):
    """With ``secure_noise`` an ordinary client's ``noise`` is one uint64 fixed-point vector of
    m (d + 1) entries, which the ledger counts as no float: the ordinary clients' and denoisers'
    units left it out (18.4 against the plain run's 27.6 per ordinary client, while their bytes
    grew 4x). Now NaN; the bytes per role, by hand from the run's ledger (its CSV): every message
    a client sent plus every one delivered to it, in rounds >= 0, but the model, assign and stop."""
    f = make_folds(generate("tiny", seed=2, n_items=60), 5, seed=0)[0]
    cfg = FedRecPPConfig(d=4, T=2, rho=1.0, eta=2, secure_noise=True, secagg_neighbours=2)
    o = run_pp((f, cfg, 0, "ideal", True, tmp_path))
    with open(o.record["ledger"], newline="") as fh:
        rows = list(csv.DictReader(fh))
    noise = [r for r in rows if r["kind"] == "noise"]
    assert noise and all(int(r["floats"]) == 0 and int(r["raw_bytes"]) == f.n_items * (4 + 1) * 8 for r in noise)
    role = {}
    for r in rows:
        if int(r["round"]) >= 0:
            role[r["src"]], role[r["dst"]] = r["src_role"], r["dst_role"]
    counted = [r for r in rows if int(r["round"]) >= 0 and r["kind"] not in ("model", "assign", "stop")]
    per_node = {}
    for r in counted:
        per_node[r["src"]] = per_node.get(r["src"], 0) + int(r["bytes"])
        if r["status"] == "delivered":
            per_node[r["dst"]] = per_node.get(r["dst"], 0) + int(r["bytes"])
    got = {c["role"]: c for c in o.costs}
    assert o.iterations == 2
    for name in ("denoiser", "ordinary", "client"):
        members = [n for n, r in role.items() if r != "server" and (name == "client" or r == name)]
        assert got[name]["nodes"] == len(members) == {"denoiser": 2, "ordinary": f.n_users - 2, "client": f.n_users}[name]
        assert np.isnan(got[name]["units_per_iteration"])
        assert got[name]["bytes_per_iteration"] == pytest.approx(sum(per_node.get(n, 0) for n in members) / 2 / len(members),
                                                               rel=1e-12)
    plain = run_pp((f, cfg.replace(secure_noise=False), 0, "ideal", True))
    assert all(np.isfinite(c["units_per_iteration"]) for c in plain.costs)  # no fixed point: units as before


def test_table3_leaves_out_every_setup_and_control_kind_the_spec_declares():
    # NOT_COUNTED was a hand list (model, assign, stop) without secure noise's key exchange (keys,
    # peers): only their round label (-1) kept them out of role_costs. It is now the model and
    # every kind the spec declares for setup or control; the iteration's end, every training
    # kind after the model
    from fedsim.protocols import fedrecpp
    from fedsim.studies.fedrecpp import NOT_COUNTED, _ROUND_END_KINDS

    declared = {k.name: k.purpose for k in fedrecpp.SPEC.kinds}
    assert sorted(NOT_COUNTED) == sorted(["model"] + [k for k, p in declared.items() if p in ("setup", "control")])
    assert {"keys", "peers", "assign", "stop"} <= set(NOT_COUNTED)
    assert sorted(_ROUND_END_KINDS) == sorted(k for k, p in declared.items() if p == "training" and k != "model")


@pytest.mark.parametrize("scenario, overrides, table", [
    ("fedrecpp_table2", {"folds": 2, "iterations": 3, "rhos": [0], "search_on": "none", "lam": 0.001}, "table2"),
    ("fedrecpp_clients", {"folds": 2, "use_folds": 1, "iterations": 3, "rhos": [0], "fractions": [1.0],
                          "search_on": "none"}, "clients"),
    ("fedrecpp_table3", {"folds": 2, "iterations": 3, "draws": 1, "timing_iterations": 1, "etas": ["1"]},
     "comm_cost"),
])
def test_fedrecpp_scenarios_record_a_divergence_as_a_caveat(tmp_path, scenario, overrides, table):
    """A run that diverged is a caveat of the run (results.json's ``caveats``, which a sweep's
    points table reads), not a note alone: fedrecpp_table2 and fedrecpp_table3 said it in a
    note and fedrecpp_clients nowhere but its table's ``diverged_runs`` column."""
    import json

    out = tmp_path / "o"
    with np.errstate(all="ignore"):
        run_scenario(str(SCENARIOS / f"{scenario}.py"), data="tiny", out=out, seed=1, quiet=True,
                     overrides={**overrides, "lr": 1e6, "workers": 1})
    rows = _rows(out / f"{table}.csv")
    col = "diverged_draws" if scenario == "fedrecpp_table3" else "diverged_runs"
    diverged = sum(int(r[col]) for r in rows if not r.get("role", "").startswith("download_V"))
    assert diverged > 0  # the runs did diverge (lr = 1e6)
    report = (out / "report.md").read_text()
    assert "diverged" in json.loads((out / "results.json").read_text())["caveats"]
    if scenario != "fedrecpp_table3":
        for r in rows:
            if int(r[col]):
                name = r["algorithm"] + (f" c={float(r['c_fraction']):g}n" if scenario == "fedrecpp_clients" else "")
                assert f"**{name} rho={r['rho']} diverged on fold(s) [" in report
                assert r["rmse_mean"] == ""  # not averaged: NaN, an empty cell


def test_fedrecpp_table2_without_a_divergence_records_no_divergence_caveat(tmp_path):
    import json

    out = tmp_path / "o"
    run_scenario(str(SCENARIOS / "fedrecpp_table2.py"), data="tiny", out=out, seed=1, quiet=True,
                 overrides={"folds": 2, "iterations": 2, "rhos": [0], "search_on": "none", "workers": 1})
    assert [r["diverged_runs"] for r in _rows(out / "table2.csv")] == ["0"]
    assert "diverged" not in json.loads((out / "results.json").read_text())["caveats"]
    assert "diverged on fold" not in (out / "report.md").read_text()


def test_incomplete_warning_does_not_say_the_network_lost_messages_when_none_was_lost(tmp_path):
    """A deadline shorter than the wan profile's transfers, no loss and no dropout: every round
    leaves the late uploads out, and the warning said "the network lost messages or clients"."""
    import json

    out = tmp_path / "o"
    run_scenario(str(SCENARIOS / "fedrecpp_table2.py"), data="tiny", out=out, seed=1, quiet=True, profile="wan",
                 overrides={"folds": 2, "iterations": 2, "rhos": [1], "search_on": "none", "deadline": 0.001,
                            "workers": 1})
    saved = json.loads((out / "results.json").read_text())
    assert saved["network"]["loss"] == 0 and "incomplete" in saved["caveats"]
    inc = _rows(out / "incomplete.csv")
    assert len(inc) == 4 and all(int(r["left_out_clients"]) > 0 and r["lost_clients"] == "0" for r in inc)
    report = (out / "report.md").read_text()
    assert "the network lost" not in report
    assert ("**WARNING: 4 run(s) incomplete**: messages did not arrive by the deadline (lost, or too late: a deadline "
            "shorter than a round's transfers leaves them out with no loss at all) or clients dropped out") in report


@pytest.mark.parametrize("overrides", [{"iterations": 2}, {"iterations": 10, "lrs": [0.1, 0.8], "lams": [0.001]}])
def test_table2_lr_lambda_note_says_when_the_choice_is_a_tie(tmp_path, overrides):
    """At 2 iterations on tiny data every (lr, lambda) gives the same MAE: the note named the first
    candidate "Chosen" beside the paper's (0.8, 0.001) with no word of the tie. At 10 iterations
    lr = 0.8 scores better than 0.1: a choice, and no tie is said."""
    out = tmp_path / "o"
    run_scenario(str(SCENARIOS / "fedrecpp_table2.py"), data="tiny", out=out, seed=1, quiet=True,
                 overrides={"folds": 2, "rhos": [0], "workers": 1, **overrides})
    rows = _rows(out / "lr_lambda_search.csv")
    (chosen,) = [r for r in rows if r["chosen"] == "True"]
    others = [r for r in rows if r is not chosen and r["diverged_at"] == "" and float(r["mae"]) == float(chosen["mae"])]
    report = (out / "report.md").read_text()
    head = f"Chosen (lr, lambda) = ({float(chosen['lr']):g}, {float(chosen['lambda']):g}) on the validation split"
    if overrides["iterations"] == 2:
        assert len(others) == len(rows) - 1 > 0  # every candidate ties
        paper_in = any((float(r["lr"]), float(r["lambda"])) == (0.8, 0.001) for r in others)
        assert paper_in
        assert (head + f" ({len(others)} other candidate(s) tie with it on MAE, the authors' (0.8, 0.001) among them: "
                "taken for its place in the listing, not its score); the paper's: (0.8, 0.001).") in report
    else:
        assert others == [] and (float(chosen["lr"]), float(chosen["lambda"])) == (0.8, 0.001)
        assert head + "; the paper's: (0.8, 0.001)." in report and "tie with it" not in report
