"""fault_study with every client dropping out: no user is left to score, and the run says so
instead of printing NumPy's "Mean of empty slice" and "invalid value encountered in scalar
divide" to the user's terminal (FedRec's RMSE was a mean over no rating)."""

from __future__ import annotations

import csv
import json
import math
import warnings

from fedsim.experiment import run_scenario


def test_all_clients_dropped_gives_no_score_no_numpy_warning_and_a_caveat(tmp_path):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        run_scenario("fault_study", data="tiny", out=tmp_path / "o", seed=1, profile="lan", quiet=True,
                     overrides={"protocols": ["fedrec", "fpl"], "rounds": 2, "losses": [0.0],
                                "dropouts": [0.0, 1.0], "window": 0.05, "workers": 1})
    assert [f"{w.category.__name__}: {w.message}" for w in seen] == []
    for proto, metric in (("fedrec", "test_rmse"), ("fpl", "p_at_10")):
        with open(tmp_path / "o" / f"faults_{proto}.csv", newline="") as fh:
            got = {float(r["dropout"]): r for r in csv.DictReader(fh)}
        assert sorted(got) == [0.0, 1.0]
        assert math.isfinite(float(got[0.0][metric]))
        assert got[1.0][metric] == ""  # NaN: no figure
        assert int(got[1.0]["lost_clients"]) == 30  # tiny: 30 users, one client each
        assert "unevaluated" not in got[1.0] and "diverged_at" not in got[1.0]
    assert json.loads((tmp_path / "o" / "results.json").read_text())["caveats"] == ["unevaluated"]
    report = (tmp_path / "o" / "report.md").read_text()
    assert ("**Not evaluated.** 2 run(s) had no user left to score (fedrec loss 0 dropout 1: all 30 users with "
            "test ratings dropped out; fpl loss 0 dropout 1: all 30 users with test items dropped out): their NaN "
            "figure is no score.") in report, report


def test_a_personalfr_run_whose_final_evaluation_scored_nobody_is_in_the_note(tmp_path):
    # every client gone: PersonalFR's own final evaluation got no answer, its RMSE is NaN over 0
    # ratings, and the Not evaluated note named only the FedRec and FPL runs
    run_scenario("fault_study", data="tiny", out=tmp_path / "o", seed=1, profile="wan", quiet=True,
                 overrides={"protocols": ["personalfr"], "rounds": 2, "losses": [0.0], "dropouts": [0.0, 1.0],
                            "window": 0.05, "workers": 1})
    with open(tmp_path / "o" / "faults_personalfr.csv", newline="") as fh:
        got = {float(r["dropout"]): r for r in csv.DictReader(fh)}
    assert math.isfinite(float(got[0.0]["test_rmse"])) and got[1.0]["test_rmse"] == ""
    gone = got[1.0]
    assert (gone["eval_clients"], gone["eval_ratings"], gone["lost_clients"]) == ("0", "0", "30")
    assert "unevaluated" not in gone
    assert json.loads((tmp_path / "o" / "results.json").read_text())["caveats"] == ["unevaluated"]
    report = (tmp_path / "o" / "report.md").read_text()
    assert ("**Not evaluated.** 1 run(s) had no user left to score (personalfr loss 0 dropout 1: no test rating "
            f"evaluated: 0 of 30 clients answered the final evaluation ({gone['eval_missing']} did not, "
            f"{gone['eval_left_out']} were not asked)): their NaN figure is no score.") in report, report
