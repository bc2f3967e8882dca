"""The prose notes the scenarios write into report.md state what the run computed: a sentence that
states a finding ("bounded by", "removes that cost", "the lowest") holds for the run's own figures,
or says what it compared; each test builds a tiny run where the old fixed sentence was false."""

from __future__ import annotations

import csv

from fedsim.experiment import run_scenario


def _run(tmp_path, name, overrides, *, profile="lan", data="tiny"):
    out = tmp_path / name
    run_scenario(name, data=data, out=out, overrides=overrides, seed=1, profile=profile, quiet=True)
    return out, (out / "report.md").read_text()


def _csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_fault_study_does_not_claim_the_deadline_bounds_the_round(tmp_path):
    # a 10 ms deadline on wan: the round also carries the model's transfer and the evaluation's wait,
    # so it lasts longer than the deadline; the note said "the round time is bounded by it"
    out, report = _run(tmp_path, "fault_study", {"rounds": 2, "losses": [0.0], "dropouts": [0.0], "window": 0.05,
                                                 "workers": 1, "deadline": 0.01, "protocols": ["fedrec"]},
                       profile="wan")
    rows = _csv(out / "faults_fedrec.csv")
    assert len(rows) == 1 and float(rows[0]["round_s"]) > 0.01
    assert "bounded by it" not in report
    longest = max(float(r["round_s"]) for r in rows)
    assert (f"round_s exceeds the deadline in 1 of the 1 run(s) here (longest mean round {longest:.3g} s, "
            "deadline 0.01 s)") in report


def test_fault_study_says_fpl_leaves_out_the_clients_gone(tmp_path):
    # FPL's evaluation leaves out a client that dropped out (its p_u left with it); the note said it
    # ranked every user, "zeros for the clients gone"
    out, report = _run(tmp_path, "fault_study", {"rounds": 2, "losses": [0.0], "dropouts": [0.5], "window": 0.05,
                                                 "workers": 1, "protocols": ["fpl"]})
    assert int(_csv(out / "faults_fpl.csv")[0]["lost_clients"]) > 0
    assert "zeros for the clients gone" not in report and "ranks every user" not in report
    assert "Both accuracies are over the clients present at the end" in report
