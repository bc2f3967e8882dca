"""A model that stops being finite (a learning rate too large for the data): every protocol's server
checks its model once per round and stops there with ``info["diverged_at"]`` (the 1-based round it
found it in), sends no client a model that is not finite in a later round (within a round, FedRec's
stochastic models send V to one client after another), and keeps no NaN or inf evaluation as a score."""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest

from fedsim.cli import main
from fedsim.data import per_user_random
from fedsim.kernel import SimNetwork
from fedsim.protocols import REGISTRY
from fedsim.protocols.fedae import unscored


def run(name: str, clients: int, rounds: int, test: bool, **over):
    spec = REGISTRY[name]
    data, cfg = spec.tiny(clients, rounds, 0)
    cfg = dataclasses.replace(cfg, **over)
    held = None
    if test:
        data, held = per_user_random(data, 0.2, seed=1)
    net = SimNetwork(seed=0)
    job = spec.build(net, data, cfg, test=held)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no bare NumPy overflow warning from a diverging run
        return job.collect(net.run())


def rounds_of(res, kind: str) -> list[int]:
    return sorted({r["round"] for r in res.run.ledger.records() if r["kind"] == kind})


@pytest.mark.parametrize("name, kind, shared", [("personalfr", "decoder", "dec."), ("fedavg-ae", "model", "")])
def test_the_autoencoders_stop_when_the_shared_model_is_not_finite(name, kind, shared):
    # they had no check: 4 rounds ran on a NaN model and the evaluation's NaN RMSE was reported as
    # the final score, with diverged_at absent (`fedsim run` said nothing)
    res = run(name, 6, 4, True, lr=1e30, eval_every=1)
    assert res.info["diverged_at"] == 2
    assert rounds_of(res, kind) == [1, 2]  # round 3 was never sent: the server stopped after round 2
    assert [m["round"] for m in res.metrics] == [1]  # the evaluation of round 1 only, a finite one
    assert np.isfinite(res.metrics[0]["rmse"]) and res.metrics[0]["n"] > 0
    assert not all(np.isfinite(v).all() for k, v in res.params.items() if k.startswith(shared) and ":" not in k)
    ok = run(name, 6, 2, True)
    assert ok.info["diverged_at"] is None and len(ok.metrics) == 1 and np.isfinite(ok.metrics[0]["rmse"])


def test_an_evaluation_whose_predictions_are_not_finite_is_no_score():
    assert unscored({"rmse": float("nan"), "n": 5}, "explicit")
    assert unscored({"rmse": float("inf"), "n": 5}, "explicit")
    assert unscored({"ndcg": float("nan"), "n": 3}, "implicit")
    assert not unscored({"rmse": float("nan"), "n": 0}, "explicit")  # over no entry: nobody, not diverged
    assert not unscored({"rmse": 1e22, "n": 5}, "explicit")  # large, but a figure


def test_plain_fpl_stops_when_theta_is_not_finite():
    # the plain server never checked Theta_S: it ran every round on it, sending it to the clients,
    # and collect reported the rounds planned (3) as where it diverged
    res = run("fpl", 6, 3, False, lr=1e30)
    assert res.info["diverged_at"] == 1 == res.info["rounds_done"]
    assert rounds_of(res, "model") == [0]
    assert not np.isfinite(res.params["theta"]).all()


def test_fcf_stops_when_q_does_not_fit_its_wire_dtype():
    # a float64 Q beyond float32's range was sent as inf (with NumPy's cast warnings) and the run went on
    res = run("fcf", 6, 4, False, lr=1e30, optimizer="sgd")
    assert res.info["diverged_at"] == 2 == res.info["rounds_done"]
    assert np.isfinite(res.params["Q"]).all() and np.abs(res.params["Q"]).max() > np.finfo(np.float32).max
    assert rounds_of(res, "model") == [0, 1] and np.isfinite(res.params["Q_sent"]).all()


def test_fedsim_run_says_a_personalfr_run_diverged(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", "personalfr", "--set", "lr=1e30", "--set", "clients=5", "--set", "rounds=4",
                 "--set", "hidden=8,4", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "note: the model diverged: its parameters, or the scores they give, were found not finite at round 1 " \
           "of 4, where the run stopped" in err
    assert json.loads((out / "results.json").read_text())["caveats"] == ["diverged"]
    assert not (out / "metrics.csv").exists()  # no NaN row printed as a score
    assert "RuntimeWarning" not in err


@pytest.mark.parametrize("protocol, config, at", [
    ("fedrec", {"model": "PMF(B)", "T": 4, "lr": 1e6}, 3),
    ("personalfr", {"task": "explicit", "clients": 5, "rounds": 3, "lr": 1e30, "hidden": (8, 4)}, 1),
])
def test_a_fault_study_run_that_diverged_says_so(protocol, config, at):
    # FedRec's evaluate raised DivergenceError (the whole grid failed); PersonalFR's run now stops
    # before its last evaluation, and was refused as "no final explicit evaluation (config task ...)"
    from fedsim.kernel import NetSpec
    from fedsim.studies.faults import FaultTask, run_fault_task

    data, _ = REGISTRY[protocol].tiny(6, 2, 0)
    train, test = per_user_random(data, 0.2, seed=1)
    tup = lambda r: (r.users, r.items, r.values, r.n_users, r.n_items, r.timestamps)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a diverging run is silent (it ignored NumPy's warnings)
        out = run_fault_task(FaultTask(protocol, tup(train), tup(test), config, NetSpec(profile="lan"), 0))
    assert out["diverged_at"] == at and np.isnan(out["test_rmse"])


@pytest.mark.parametrize("method", ["personalfr", "fedavg"])
def test_a_personalfr_study_run_that_diverged_has_no_final_figure(method):
    # the run stops at its diverging round, its NaN evaluation not kept: the study took the last row
    # (round 3's) as the final figure, a finite number averaged into the table and never in nan_runs
    from fedsim.protocols.fedae import FedAEConfig
    from fedsim.studies.personalfr.runs import RunSpec, run_spec

    cfg = FedAEConfig(rounds=4, eval_every=1, lr=1e8, hidden=(8, 4), fraction=1.0, batch=10, local_epochs=1,
                      clip=0.0, schedule="constant")
    out = run_spec(RunSpec(method, "tiny", 0, "explicit", 3.5, 0.2, M=5, cfg=cfg))
    assert out["diverged_at"] == 4 and np.isnan(out["final"])
    assert [h["round"] for h in out["history"]] == [1, 2, 3] and out["best_round"] == 1


def demo_first_nonfinite_round(cfg, seed: int) -> int | None:
    """The 1-based round whose step first makes the demo's weights not finite, computed here
    without the network: each client's gradient, summed weighted in client order, one step."""
    from fedsim.protocols.demo import make_data

    _, parts = make_data(cfg.clients, cfg.dim, seed)
    w = np.zeros(cfg.dim)
    with np.errstate(over="ignore", invalid="ignore"):
        for r in range(cfg.rounds):
            grad, total = np.zeros(cfg.dim), 0
            for X, y in parts:
                grad += len(y) * (2.0 * X.T @ (X @ w - y) / len(y))
                total += len(y)
            w = w - cfg.lr * grad / total
            if not np.isfinite(w).all():
                return r + 1
    return None


def test_the_demo_server_stops_in_the_round_its_weights_are_not_finite():
    # the demo checked only at the end: it sent NaN weights to its clients for every remaining round,
    # NumPy's overflow warnings escaped, and diverged_at was the rounds planned (100)
    cfg = dataclasses.replace(REGISTRY["demo"].tiny()[1], clients=8, dim=5, rounds=100, lr=1e6)
    at = demo_first_nonfinite_round(cfg, 0)
    assert at is not None and 1 < at < 100
    res = run("demo", 8, 100, False, lr=1e6, dim=5)
    assert res.info["diverged_at"] == at == res.info["rounds_done"]
    assert rounds_of(res, "weights") == list(range(at))  # the non-finite weights were sent to nobody
    assert rounds_of(res, "stop") == [at - 1]
    assert res.run.ledger.select(kind="weights").totals().messages == 8 * at
    assert res.metrics == [{"round": at, "weight_error": res.metrics[0]["weight_error"]}]
    assert not np.isfinite(res.params["w"]).all() and not np.isfinite(res.metrics[0]["weight_error"])
    assert res.run.results["client/000"] == at
    ok = run("demo", 8, 5, False, lr=0.1, dim=5)
    assert ok.info["diverged_at"] is None and ok.info["rounds_done"] == 5 and ok.metrics[0]["round"] == 5
    assert np.isfinite(ok.params["w"]).all()


def test_fedsim_run_says_which_round_a_demo_run_diverged_in(tmp_path, capsys):
    out = tmp_path / "out"
    cfg = dataclasses.replace(REGISTRY["demo"].tiny()[1], clients=8, dim=5, rounds=100, lr=1e6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["run", "demo", "--set", "lr=1e6", "--set", "rounds=100", "--seed", "3",
                     "--out", str(out)]) == 0
    at = demo_first_nonfinite_round(cfg, 3)
    assert at is not None and 1 < at < 100
    err = capsys.readouterr().err
    assert f"note: the model diverged: its parameters, or the scores they give, were found not finite at round {at} " \
           "of 100, where the run stopped" in err
    assert "RuntimeWarning" not in err
    assert json.loads((out / "results.json").read_text())["caveats"] == ["diverged"]
    assert f"found not finite at round {at} of 100" in (out / "report.md").read_text()


def test_a_personalfr_study_joint_run_that_diverged_has_no_final_figure(monkeypatch):
    # the Joint baseline's run_spec ignored divergence: its last (NaN) evaluation was the final figure
    # and diverged_at was absent, unlike the federated runs beside it
    import functools

    from fedsim.math import ae_train
    from fedsim.protocols.fedae import FedAEConfig
    from fedsim.studies.personalfr.runs import RunSpec, run_spec

    cfg = FedAEConfig(rounds=4, eval_every=1, hidden=(8, 4))
    spec = RunSpec("joint", "tiny", 0, "explicit", 3.5, 0.2, cfg=cfg, joint_epochs=4, joint_batch=10)
    ok = run_spec(spec)
    assert ok["diverged_at"] is None and np.isfinite(ok["final"]) and len(ok["history"]) == 4
    # run_spec takes the trainer's default learning rate: a huge one, through the trainer
    monkeypatch.setattr(ae_train, "train_joint", functools.partial(ae_train.train_joint, lr=1e30))
    out = run_spec(spec)
    assert out["diverged_at"] == 1 and np.isnan(out["final"]) and np.isnan(out["best"])
    assert out["history"] == [] and out["best_round"] is None


@pytest.mark.parametrize("method", ["personalfr", "fedavg"])
def test_a_personalfr_study_run_that_diverged_gives_figures_per_round_it_ran(method):
    # planned 8 rounds, stopped at round 4: bytes and FLOPs per round were divided by the 8 planned,
    # half what the 4 rounds it ran cost (the run planned for 4, which stops at the same round, is
    # the independent figure: the same traffic and work)
    from fedsim.protocols.fedae import FedAEConfig
    from fedsim.studies.personalfr.runs import RunSpec, run_spec

    def run(rounds):
        cfg = FedAEConfig(rounds=rounds, eval_every=1, lr=1e8, hidden=(8, 4), fraction=1.0, batch=10, local_epochs=1,
                          clip=0.0, schedule="constant")
        return run_spec(RunSpec(method, "tiny", 0, "explicit", 3.5, 0.2, M=5, cfg=cfg))

    long, short = run(8), run(4)
    assert long["diverged_at"] == short["diverged_at"] == 4 and long["rounds_run"] == short["rounds_run"] == 4
    assert long["comm"]["total_bytes"] == short["comm"]["total_bytes"]
    assert long["comm"]["bytes_per_round"] == short["comm"]["bytes_per_round"] > 0
    assert long["client_flops"] == short["client_flops"] > 0


HF_NOW = {"rho": 1.0, "strategy": "hf", "T_predict": 0, "hf_convention": "paper"}  # predictions from t = 0
#: runs that diverge: (protocol, clients, rounds, held-out test, config changes)
DIVERGING = [
    ("fedrec", 4, 2, False, {"lr": 1e40}), ("fedrec", 4, 2, False, {"model": "PMF(S)", "decay": 1e23}),
    ("fedrec", 4, 2, False, {"model": "PMF(S)", "lr": 1e40}), ("fedrec", 4, 2, False, {"model": "SVD++(S)", "decay": 1e23}),
    ("fedrec", 4, 2, False, {"model": "SVD++(S)", "client_lr": 1e40}), ("fedrecpp", 4, 2, False, {"lr": 1e40}),
    ("fpl", 4, 2, False, {"lr": 1e40}), ("fpl", 4, 2, False, {"reg_scale": 1e300}),
    ("fedrec", 4, 3, False, {"decay": 1e23}), ("fedrec", 4, 2, False, {"lr": 1e40, **HF_NOW}),
    ("fedrec", 4, 2, False, {"lr": 1e40, "order": "paper", **HF_NOW}), ("fedrecpp", 4, 2, False, {"lr": 1e40, **HF_NOW}),
    ("fedrecpp", 4, 3, False, {"decay": 1e23}), ("fedrecpp", 4, 3, False, {"decay": 1e23, "secure_noise": True}),
    ("fpl", 6, 3, False, {"lr": 1e30}),
    ("fpl", 6, 3, False, {"lr": 1e30, "merge": "sum", "local_item_updates": True}),
    ("personalfr", 6, 4, True, {"lr": 1e30, "eval_every": 1}), ("fedavg-ae", 6, 4, True, {"lr": 1e30, "eval_every": 1}),
]


@pytest.mark.parametrize("case", DIVERGING, ids=lambda c: c[0] + ":" + ",".join(f"{k}={x}" for k, x in c[4].items()))
def test_a_rate_beyond_float32_diverges_without_numpy_warnings(case):
    # a learning rate (or lr * decay^t, FPL's lr/20 * reg_scale) finite in float64 but beyond float32,
    # the run's dtype: casting it printed NumPy's "overflow encountered in cast" from every client
    # (and the server) before the server's check stopped the run as diverged; with numba too, batch
    # hybrid filling still did (its rate cast), FedRec++'s denoisers (their sums) and FPL's NumPy
    # client round (merge, local item updates: its products)
    name, clients, rounds, test, over = case
    res = run(name, clients, rounds, test, **over)
    assert res.info["diverged_at"] is not None


def test_without_numba_the_diverging_runs_are_as_quiet_and_stop_at_the_same_round():
    # the NumPy fallback (FEDSIM_NO_NUMBA=1) printed NumPy's overflow and invalid-value warnings
    # where the compiled kernels are silent: FedRec's stochastic kernels and batch step, hybrid
    # filling, the autoencoders' merges (12 of the 18 runs above failed on them, and the
    # autoencoders' divergence test)
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).resolve().parent
    script = ("import json, sys; sys.path.insert(0, sys.argv[1]); import test_protocol_divergence as t\n"
              "from fedsim.math import _sgd_numba, fpl_kernels, active_kernels\n"
              "assert not _sgd_numba.numba_available() and fpl_kernels.compiled() is None "
              "and active_kernels.compiled() is None\n"
              "print(json.dumps([t.run(n, c, r, h, **o).info['diverged_at'] for n, c, r, h, o in t.DIVERGING]))\n")
    env = {**os.environ, "FEDSIM_NO_NUMBA": "1",
           "PYTHONPATH": os.pathsep.join([str(here.parent), *filter(None, [os.environ.get("PYTHONPATH")])])}
    got = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", script, str(here)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-3000:]
    assert got.stderr == ""
    here_at = [run(n, c, r, h, **o).info["diverged_at"] for n, c, r, h, o in DIVERGING]  # numba, if installed
    assert None not in here_at and json.loads(got.stdout) == here_at


@pytest.mark.parametrize("model", ["PMF(S)", "SVD++(S)"])
def test_a_stochastic_fedrec_server_neither_sends_nor_scores_a_diverged_model_for_evaluation(model):
    # the stochastic server evaluated before its check: the round V stopped being finite in, it sent
    # every client an `evaluate` carrying that V and kept the inf MAE/RMSE they answered as a score
    # (`fedsim run fedrec --set model=PMF(S) --set eval_every=1` printed final_mae inf); PMF(B) did not
    res = run("fedrec", 3, 3, True, model=model, eval_every=1)  # the tiny preset's lr 0.8 is PMF(B)'s
    assert res.info["diverged_at"] == 2
    assert rounds_of(res, "evaluate") == [0]  # round 1's model was not finite: no evaluation of it
    assert [m["iteration"] for m in res.metrics] == [1] and np.isfinite(res.metrics[0]["rmse"])
    assert not np.isfinite(res.params["V"]).all()
