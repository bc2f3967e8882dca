"""PersonalFR in fault_study: its row's figures are the protocol's own final evaluation and the
ledger's counts, as a direct run of the same split, configuration and network gives them."""

from __future__ import annotations

import csv

import numpy as np

from fedsim.experiment import run_scenario


def test_fault_study_personalfr_rows_equal_a_direct_runs_evaluation_and_ledger(tmp_path):
    from fedsim.data import per_user_random, resolve
    from fedsim.kernel import NetSpec
    from fedsim.protocols import REGISTRY

    grid = [(0.0, 0.0), (0.0, 0.5), (0.2, 0.0), (0.2, 0.5)]
    run_scenario("fault_study", data="tiny", out=tmp_path / "o", seed=1, profile="lan", quiet=True,
                 overrides={"protocols": ["personalfr"], "rounds": 2, "losses": [0.0, 0.2], "dropouts": [0.0, 0.5],
                            "window": 0.05, "workers": 1})
    with open(tmp_path / "o" / "faults_personalfr.csv", newline="") as fh:
        rows = {(float(r["loss"]), float(r["dropout"])): r for r in csv.DictReader(fh)}
    assert sorted(rows) == grid

    train, test = per_user_random(resolve("tiny"), 0.2, seed=1)
    spec = REGISTRY["personalfr"]
    cfg = spec.Config(task="explicit", clients=30, rounds=2, deadline=5.0)  # tiny: 30 users, one client each
    seen_lost = seen_missing = 0
    for loss, dropout in grid:
        net = NetSpec(profile="lan", loss=loss, dropout=dropout, window=(0.0, 0.05)).build(1)
        result = spec.build(net, train, cfg, test=test).collect(net.run())
        final = result.metrics[-1]
        row = rows[(loss, dropout)]
        assert row["protocol"] == "personalfr"
        assert float(row["test_rmse"]) == final["rmse"] and np.isfinite(final["rmse"])
        assert int(row["eval_ratings"]) == final["n"]
        assert int(row["eval_missing"]) == final["missing"] and int(row["eval_left_out"]) == final["left_out"]
        assert int(row["eval_clients"]) == 30 - final["missing"] - final["left_out"]
        t = net.ledger.totals()
        assert int(row["lost_messages"]) == t["lost_messages"]
        assert int(row["lost_clients"]) == len(result.info["lost_clients"])
        missing = sum(m["clients"] for m in result.info["missing"])
        n_rounds = len([r for r in net.ledger.rounds() if r >= 0])
        assert int(row["rounds"]) == n_rounds
        assert float(row["missing_uploads_per_round"]) == missing / n_rounds
        seen_lost += t["lost_messages"]
        seen_missing += final["missing"]
    # the grid's faults happened: messages were lost and clients missed the final evaluation
    assert seen_lost > 0 and seen_missing > 0
    fault_free = rows[(0.0, 0.0)]
    assert int(fault_free["eval_clients"]) == 30 and int(fault_free["lost_messages"]) == 0
