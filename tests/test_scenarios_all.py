"""Every scenario runs end to end with small settings and records every network it builds: ledger
totals and simulated time in results.json, --ledger honoured with one ledger.csv row per message
(a scenario added to scenarios/ must add its small settings here, or this test fails)."""

from __future__ import annotations

import csv
import json

import pytest

from fedsim.experiment import list_scenarios, run_scenario

SMALL = {
    "fault_study": {"rounds": 2, "losses": [0.0, 0.2], "dropouts": [0.0, 0.5], "window": 0.05, "workers": 1},
    "quickstart": {"iterations": 2},
    "fedrec_table2": {"folds": 2, "iterations": 2, "models": ["PMF(B)", "PMF(S)"], "lam": 0.01, "workers": 1},
    "fedrec_convergence": {"folds": 2, "iterations": 2, "models": ["PMF(B)"], "rhos": [1], "workers": 1},
    "fedrec_rho": {"folds": 2, "iterations": 2, "rhos": [0, 1], "workers": 1},
    "fedrecpp_clients": {"folds": 2, "iterations": 2, "rhos": [0, 1], "fractions": [0.5, 1.0], "workers": 1},
    "fedrecpp_table2": {"folds": 2, "iterations": 2, "rhos": [0, 1], "workers": 1},
    "fedrecpp_table3": {"folds": 2, "iterations": 2, "draws": 1, "timing_iterations": 1, "etas": ["0", "1"],
                        "workers": 1},
    "fpl_fig3": {"epochs": [1], "pis": [0.5, 1.0], "presets": ["sFPL", "pFPL+"], "max_users": 30,
                 "min_interactions": 8, "seeds": 2, "workers": 1},
    "fpl_pi": {"epochs": [1], "pis": [0.5], "presets": ["sFPL", "pFPL"], "max_users": 30, "min_interactions": 8,
               "seeds": 1, "workers": 1},
    "fpl_table2": {"epochs": [1], "pis": [1.0], "bpr_epochs": 2, "fcf_rounds": 2, "max_users": 30,
                   "min_interactions": 8, "seeds": 2, "workers": 2, "knn_ks": [2, 5], "vae_epochs": [2]},
    "fpl_tcc": {"epochs": [1], "pis": [1.0], "presets": ["pFPL"], "max_users": 30, "min_interactions": 8, "seeds": 1,
                "workers": 1},
    "personalfr_compression": {"clients": [2, 4], "repeats": 2, "workers": 1},
    "personalfr_curves": {"clients": [4], "rounds": 2, "eval_every": 1, "tasks": ["explicit"], "repeats": 2,
                          "workers": 1},
    "personalfr_table3": {"clients": [4], "rounds": 2, "eval_every": 1, "tasks": ["explicit"], "repeats": 2,
                          "workers": 1},
    "personalfr_table4": {"rounds": 2, "eval_every": 2, "tasks": ["explicit"], "repeats": 2, "workers": 1},
    "privacy_audit": {"models": ["PMF(B)", "PMF(S)"], "strategies": ["ua"], "rhos": [1], "iterations": 3,
                      "sgd_targets": 5, "etas": ["1"], "link_profiles": ["wan"], "presets": ["pFPL"], "pis": [0.5],
                      "fpl_epochs": 2, "fpl_max_users": 30, "fpl_min_interactions": 8, "noise_sigmas": [0.01],
                      "imia_users": 5, "personalfr_clients": 4, "fcf_rounds": 2, "workers": 1},
}
NAMES = [name for name, _ in list_scenarios()]


def test_every_scenario_has_small_settings_here():
    assert sorted(SMALL) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_scenario_runs_and_records_its_networks(name, tmp_path):
    out = tmp_path / name
    res = run_scenario(name, data="tiny", out=out, overrides=SMALL[name], seed=1, profile="lan", quiet=True,
                       ledger=True)
    saved = json.loads((out / "results.json").read_text())
    assert saved["scenario"] == name and saved["tables"] == res["tables"] and res["tables"]
    totals = saved["ledger_totals"]
    assert totals["messages"] > 0 and totals["bytes"] > 0, "every scenario builds at least one network"
    assert saved["simulated_time_s"] > 0  # the lan profile has latency and bandwidth
    assert saved["network"]["profile"] == "lan"
    with open(out / "ledger.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    # every network's rows, labelled with the run they belong to (runs in worker processes included)
    assert len(rows) == totals["messages"]
    assert all(r["run"] for r in rows)
    for t in saved["tables"]:
        assert (out / f"{t}.csv").is_file()
    assert (out / "report.md").read_text().startswith(f"# {name}")
    if name == "fedrec_table2":  # the formula is exact for PMF(B), at the run's float width
        with open(out / "communication.csv", newline="") as fh:
            comm = {r["model"]: r for r in csv.DictReader(fh)}
        pmfb = comm["PMF(B)"]
        assert float(pmfb["ledger_float_bytes"]) == float(pmfb["formula_float_bytes"]) > 0
    if name == "fpl_table2":  # FPL searched on the twin: each chosen configuration re-ran as actors, with its ledger
        with open(out / "table4.csv", newline="") as fh:
            t4 = list(csv.DictReader(fh))
        assert len(t4) == 2 * 4  # 2 seeds x 4 presets
        assert all(r["ledger_equals_exact"] == "True" and float(r["tcc_ledger"]) > 0 for r in t4), t4
        assert "reproduced the twin's figures to the last bit" in (out / "report.md").read_text()
