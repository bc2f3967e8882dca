"""Settings and edge values the protocols used to handle silently: a per-round client count above
the clients there are (capped, and said), an evaluation over no user (NaN with a count of 0, and
said), T = 0, the parameters of FCF and demo, and PersonalFR's client FLOPs under dropout."""

from __future__ import annotations

import csv
import dataclasses
import json

import numpy as np
import pytest

from fedsim.cli import main
from fedsim.data import per_user_random
from fedsim.kernel import Faults, SimNetwork
from fedsim.protocols import REGISTRY


def run(name: str, clients: int = 3, rounds: int = 2, seed: int = 11, test=None, net=None, **over):
    spec = REGISTRY[name]
    data, cfg = spec.tiny(clients, rounds, seed)
    cfg = dataclasses.replace(cfg, **over)
    net = net or SimNetwork(seed=seed, profile="lan")
    job = spec.build(net, data, cfg) if test is None else spec.build(net, data, cfg, test=test)
    return data, job.collect(net.run())


# -- 1. clients per round above the clients there are -------------------------------------------


def test_fpl_clients_per_round_above_the_clients_selects_all_and_says_so():
    _, res = run("fpl", clients=3, rounds=2, clients_per_round=10)
    assert res.info["clients_per_round_used"] == 3
    assert res.info["adjusted"] == [{"setting": "clients_per_round", "asked": 10, "used": 3,
                                     "why": "there are only 3 clients (one per user), every one of them selected "
                                            "in every round"}]
    assert res.info["rounds"].tolist() == [2, 2, 2]  # every client, every round
    # the same run as asking for exactly the 3 clients there are, which is no adjustment
    _, exact = run("fpl", clients=3, rounds=2, clients_per_round=3)
    assert exact.info["clients_per_round_used"] == 3 and exact.info["adjusted"] == []
    np.testing.assert_array_equal(res.params["theta"], exact.params["theta"])
    _, fewer = run("fpl", clients=3, rounds=2, clients_per_round=2)
    assert fewer.info["clients_per_round_used"] == 2 and fewer.info["adjusted"] == []
    assert int(fewer.info["rounds"].sum()) == 4  # 2 clients in each of 2 rounds


def test_fedrecpp_c_above_the_clients_takes_all_and_says_so():
    _, res = run("fedrecpp", clients=4, rounds=2, c=9)
    assert res.info["c_used"] == 4
    assert res.info["adjusted"] == [{"setting": "c", "asked": 9, "used": 4,
                                     "why": "there are only 4 clients, every one of them taking part in every "
                                            "iteration"}]
    _, all_ = run("fedrecpp", clients=4, rounds=2, c=0)  # 0 means all: no adjustment
    assert all_.info["c_used"] == 4 and all_.info["adjusted"] == []
    np.testing.assert_array_equal(res.params["V"], all_.params["V"])
    _, two = run("fedrecpp", clients=4, rounds=2, c=2)
    assert two.info["c_used"] == 2 and two.info["adjusted"] == []


def test_fedsim_run_reports_an_adjusted_setting(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", "fpl", "--set", "clients_per_round=1000", "--set", "rounds=1", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert ("note: clients_per_round = 1000 was used as 30: there are only 30 clients (one per user), every one "
            "of them selected in every round") in err
    results = json.loads((out / "results.json").read_text())
    assert results["caveats"] == ["adjusted"]
    with open(out / "adjusted.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["setting"], r["asked"], r["used"]) for r in rows] == [("clients_per_round", "1000", "30")]
    report = (out / "report.md").read_text()
    assert "**Adjusted.** The run is not the configuration as given (table `adjusted`): clients_per_round = 1000 " \
           "was used as 30" in report
    # asking for no more than there are: no table, no caveat, no note
    out2 = tmp_path / "out2"
    assert main(["run", "fpl", "--set", "clients_per_round=30", "--set", "rounds=1", "--out", str(out2)]) == 0
    assert "note:" not in capsys.readouterr().err
    assert json.loads((out2 / "results.json").read_text())["caveats"] == []
    assert not (out2 / "adjusted.csv").exists()


# -- 2. an evaluation over no user --------------------------------------------------------------


def test_fpl_with_every_test_user_dropped_out_evaluates_nobody():
    spec = REGISTRY["fpl"]
    data, cfg = spec.tiny(4, 2, 0)
    train, test = per_user_random(data, 0.3, seed=1)
    net = SimNetwork(seed=1, profile="wan", faults=Faults(dropout=1.0, window=(0.0, 0.01)))
    res = spec.build(net, train, cfg.replace(deadline=1.0), test=test).collect(net.run())
    assert res.info["lost_users"] == [0, 1, 2, 3]
    [row] = res.metrics
    assert row["users"] == 0 and row["lost"] == 4
    assert np.isnan(row["p@10"]) and np.isnan(row["r@10"])


@pytest.mark.parametrize("name, sets", [
    ("fpl", ["--set", "rounds=1"]),
    ("fedrec", ["--set", "T=2", "--set", "eval_every=1"]),
])
def test_fedsim_run_says_that_no_user_was_evaluated(name, sets, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", name, *sets, "--set", "deadline=1", "--dropout", "1", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "note: no user was evaluated in the protocol's evaluation of round" in err
    results = json.loads((out / "results.json").read_text())
    assert set(results["caveats"]) == {"unevaluated", "incomplete"}
    report = (out / "report.md").read_text()
    assert "**Not evaluated.** No user was evaluated in the protocol's evaluation of round" in report
    with open(out / "summary.csv", newline="") as f:
        [summary] = list(csv.DictReader(f))
    assert summary["lost_clients"] == "30"
    if name == "fedrec":
        # its model's test evaluation over the users present: nobody, said instead of NaN scores
        assert summary["test_error"] == "no user evaluated: all 30 users with test ratings dropped out"
        assert "test_rmse" not in summary
        assert "the test evaluation of the final model (`test_error`)" in report
        assert "RuntimeWarning" not in err  # (NumPy's "mean of empty slice" on no rating)
    else:
        assert summary["final_users"] == "0" and summary["final_lost"] == "30"



@pytest.mark.parametrize("protocol, sets", [("fedrec", ["T=2"]), ("fedrec", ["T=2", "eval_every=1"]),
                                            ("fpl", ["rounds=2"])])
def test_fedsim_run_refuses_a_test_split_that_holds_nothing_out(tmp_path, capsys, protocol, sets):
    # test_frac too small for the data: the split held no test rating. A protocol that evaluates
    # refused it with a ValueError traceback; FedRec without evaluations ran and its final model's
    # test_mae/test_rmse were NaN (NumPy's "mean of empty slice" on stderr), unremarked
    out = tmp_path / "out"
    args = ["run", protocol, "--data", "tiny", "--set", "test_frac=0.001", "--out", str(out)]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == ("error: test_frac = 0.001 holds out no rating of --data tiny (360 ratings "
                                            "of 30 users): give a larger test_frac, or 0 for no test split")
    assert "Traceback" not in err and "RuntimeWarning" not in err
    assert not out.exists()


def test_an_evaluation_over_some_users_has_no_such_note(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", "fpl", "--set", "rounds=1", "--out", str(out)]) == 0
    assert "no user was evaluated" not in capsys.readouterr().err
    assert json.loads((out / "results.json").read_text())["caveats"] == []


# -- 3. T = 0: the initial model evaluated, or refused naming the setting ------------------------


def test_zero_rounds_evaluate_the_initial_model_or_are_refused_by_name():
    from fedsim.config import ConfigError
    from fedsim.protocols.fedae import FedAEConfig
    from fedsim.protocols.fedrec import FedRecConfig
    from fedsim.protocols.fpl import top10

    spec = REGISTRY["fpl"]
    data, cfg = spec.tiny(4, 0, 0)
    train, test = per_user_random(data, 0.3, seed=1)
    net = SimNetwork(seed=1)
    res = spec.build(net, train, cfg, test=test).collect(net.run())
    assert res.info["rounds_done"] == 0 and res.info["rounds"].tolist() == [0, 0, 0, 0]
    [row] = res.metrics  # the initial model's, labelled with the round before the first
    assert row == {"round": -1, **top10(res.params["P"], res.params["theta"], cfg.d, train, test)}
    assert row["users"] == 4
    # demo: the initial zero weights' distance to the true ones
    _, demo = run("demo", rounds=0)
    assert demo.metrics == [{"round": 0, "weight_error": float(np.linalg.norm(demo.info["w_true"]))}]
    assert demo.info["diverged_at"] is None
    # FCF: no evaluation, no step: Q is the initial one, no p_u was solved
    _, fcf = run("fcf", rounds=0)
    assert fcf.metrics == [] and not fcf.params["P"].any()
    np.testing.assert_array_equal(fcf.params["Q_sent"], fcf.params["Q"].astype(np.float32))
    # FedRec: its evaluations follow iterations eval_every, 2 eval_every, ...: none with T = 0
    with pytest.raises(ConfigError, match="eval_every = 1 is more than T = 0") as err:
        FedRecConfig(T=0, eval_every=1)
    assert err.value.key == "eval_every"
    # the autoencoders evaluate after the last round (and their studies count per round): none
    with pytest.raises(ConfigError, match="rounds must be >= 1, got 0") as err:
        FedAEConfig(rounds=0)
    assert err.value.key == "rounds"


# -- 4. FCF's and demo's parameters at their edges ---------------------------------------------


def test_fcf_refuses_a_zero_init_std_by_name():
    """Q = 0 is a fixed point: every p_u and every gradient 0, Q never moved (a run that learnt
    nothing, silently); with lam = 0 too, a client's LinAlgError."""
    from fedsim.config import ConfigError
    from fedsim.protocols.fcf import FCFConfig

    with pytest.raises(ConfigError, match=r"FCFConfig.init_std must be > 0, got 0.0") as err:
        FCFConfig(init_std=0.0)
    assert err.value.key == "init_std"
    _, res = run("fcf", init_std=1e-3)  # small, not zero: it moves
    assert np.abs(res.params["Q"]).max() > 1e-2


def test_fcf_refuses_lam_zero_with_more_dimensions_than_items():
    from fedsim.config import ConfigError

    spec = REGISTRY["fcf"]
    data, cfg = spec.tiny(3, 1, 0)
    m = int(data.n_items)
    with pytest.raises(ConfigError, match=rf"FCF: lam = 0 with d = {m + 1} above the {m} items.*lam > 0 or "
                                          r"d <= the number of items") as err:
        spec.build(SimNetwork(seed=1), data, cfg.replace(lam=0.0, d=m + 1))
    assert err.value.key == "lam"
    # d = m with lam = 0, and d > m with lam > 0, are solvable
    for over in (dict(lam=0.0, d=m), dict(lam=0.1, d=m + 1)):
        _, res = run("fcf", clients=3, rounds=1, **over)
        assert np.isfinite(res.params["P"]).all() and res.info["diverged_at"] is None


def test_fcf_and_demo_say_when_the_model_is_not_finite():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the diverging steps are silent (it ignored NumPy's warnings)
        _, fcf = run("fcf", rounds=2, alpha=1e300)
        _, demo = run("demo", rounds=3, lr=1e300)
    # the server found Q not finite after the step of round 1 and stopped there: round 2 never ran,
    # and Q_sent (what the p_u were solved for) is the finite Q of round 1
    assert not np.isfinite(fcf.params["Q"]).all() and fcf.info["diverged_at"] == 1 == fcf.info["rounds_done"]
    assert np.isfinite(fcf.params["Q_sent"]).all()
    assert sorted({r["round"] for r in fcf.run.ledger.records() if r["kind"] == "model"}) == [0]
    # the demo's server checks its weights once per round too: the step of round 2 (label 1) overflowed,
    # and no third round's weights were sent
    assert not np.isfinite(demo.params["w"]).all() and demo.info["diverged_at"] == 2 == demo.info["rounds_done"]
    assert sorted({r["round"] for r in demo.run.ledger.records() if r["kind"] == "weights"}) == [0, 1]
    _, ok = run("fcf", rounds=2)
    assert ok.info["diverged_at"] is None


def test_fedsim_run_reports_a_diverged_demo(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", "demo", "--set", "lr=1e300", "--set", "rounds=3", "--out", str(out)]) == 0
    assert "note: the model diverged" in capsys.readouterr().err
    assert json.loads((out / "results.json").read_text())["caveats"] == ["diverged"]
