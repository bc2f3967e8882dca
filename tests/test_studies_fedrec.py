"""fedsim.studies.fedrec: what a study's run reports (its curve, its figures)."""

import math

import pytest

from fedsim.data import generate
from fedsim.protocols.fedrec import FedRecConfig
from fedsim.studies.fedrec import make_folds, run_one


@pytest.fixture(scope="module")
def fold():
    return make_folds(generate("tiny", seed=2, n_items=60), 5, seed=0)[0]


@pytest.mark.parametrize("model", ["PMF(B)", "PMF(S)", "SVD++(S)"])
def test_federated_curve_has_one_entry_per_iteration(fold, model):
    """The batch protocol evaluates at the start of iterations 1..T-1 and the study adds the final
    model as iteration T; the stochastic ones already evaluate after iteration T, which was then
    added a second time (two `iteration = T` rows in fedrec_convergence's curve and `final` table)."""
    cfg = FedRecConfig(model, d=4, T=3, lr=0.8 if model == "PMF(B)" else 0.01)
    fed = run_one((fold, "federated", cfg, 0, "ideal", True))
    cen = run_one((fold, "unfederated", cfg, 0, "ideal", True))
    assert [h["iteration"] for h in fed.history] == [1, 2, 3]
    assert [h["iteration"] for h in cen.history] == [1, 2, 3]
    assert fed.history[-1]["rmse"] == pytest.approx(fed.rmse, abs=1e-12)


def test_fold_stats_population_std_and_none_for_one_fold():
    from types import SimpleNamespace as NS

    from fedsim.studies.fedrec import fold_stats

    two = fold_stats([NS(fold=0, mae=0.70, rmse=0.90, diverged_at=None), NS(fold=1, mae=0.74, rmse=0.96, diverged_at=None)])
    assert two.mae_mean == pytest.approx(0.72) and two.mae_std == pytest.approx(0.02)  # population: |a - b| / 2
    assert two.rmse_mean == pytest.approx(0.93) and two.rmse_std == pytest.approx(0.03)
    one = fold_stats([NS(fold=0, mae=0.70, rmse=0.90, diverged_at=None)])
    assert one.mae_mean == pytest.approx(0.70) and one.rmse_mean == pytest.approx(0.90)
    assert math.isnan(one.mae_std) and math.isnan(one.rmse_std)  # one fold measures no spread (it said 0.0)
    div = fold_stats([NS(fold=0, mae=0.70, rmse=0.90, diverged_at=None),
                      NS(fold=1, mae=float("nan"), rmse=float("nan"), diverged_at=3)])
    assert div.diverged == [2] and math.isnan(div.mae_mean) and math.isnan(div.rmse_std)


def test_federated_curve_of_T_0_is_empty_not_refused(fold):
    """run_one set eval_every = 1 for a curve, which FedRecConfig refuses with T = 0 (more than T):
    a T = 0 run's curve is the study's evaluation of the initial model, labelled iteration 0."""
    cfg = FedRecConfig("PMF(B)", d=4, T=0)
    fed = run_one((fold, "federated", cfg, 0, "ideal", True))
    cen = run_one((fold, "unfederated", cfg, 0, "ideal", True))
    assert [h["iteration"] for h in fed.history] == [0]
    assert math.isfinite(fed.rmse) and fed.history[0]["rmse"] == pytest.approx(fed.rmse, abs=1e-12)
    assert fed.rmse == pytest.approx(cen.rmse, abs=1e-12)  # the same initial model, federated or not


def test_comm_per_iteration_counts_the_secure_aggregation_upload(fold, tmp_path):
    """With secure aggregation the clients upload ``masked`` (uint64 fixed point) instead of
    ``gradients``: the figures read off ``model`` and ``gradients`` alone had no upload (bytes and
    messages of the download only). By hand from the run's own ledger (its CSV): per iteration,
    the download is the ``model`` rows, the upload the ``masked`` rows, each m (d + 1) x 8 array
    bytes and no float; the key exchange (round -1) and the evaluations are totals of their own."""
    import csv

    d, T = 4, 3
    cfg = FedRecConfig("PMF(B)", d=d, T=T, rho=1.0, secure_aggregation=True, secagg_neighbours=2)
    out = run_one((fold, "federated", cfg, 0, "ideal", True, tmp_path))
    with open(out.record["ledger"], newline="") as fh:
        rows = [{**r, **{k: int(r[k]) for k in ("round", "bytes", "raw_bytes", "floats")}} for r in csv.DictReader(fh)]
    n, m = fold.n_users, fold.n_items
    masked = [r for r in rows if r["kind"] == "masked"]
    model = [r for r in rows if r["kind"] == "model"]
    assert len(masked) == len(model) == n * T and {r["round"] for r in masked} == {0, 1, 2}
    assert all(r["raw_bytes"] == m * (d + 1) * 8 and r["floats"] == 0 for r in masked)
    assert all(r["src_role"] == "client" and r["dst_role"] == "server" for r in masked)
    assert all(r["raw_bytes"] == m * d * 4 and r["floats"] == m * d for r in model)
    up_wire = sum(r["bytes"] for r in masked)
    down_wire = sum(r["bytes"] for r in model)
    setup = [r for r in rows if r["kind"] in ("keys", "peers")]
    evals = [r for r in rows if r["kind"] in ("eval", "evaluate")]
    assert {r["round"] for r in setup} == {-1} and len(setup) == 2 * n and evals
    assert out.ledger == {
        "bytes": (up_wire + down_wire) / T, "raw_bytes": n * (m * (d + 1) * 8 + m * d * 4),
        "floats": n * m * d, "download_floats": n * m * d, "upload_floats": 0.0, "messages": 2.0 * n,
        "iterations": T, "download_bytes": down_wire / T, "upload_bytes": up_wire / T,
        "download_raw_bytes": n * m * d * 4, "upload_raw_bytes": n * m * (d + 1) * 8,
        "setup_bytes": sum(r["bytes"] for r in setup), "setup_messages": 2 * n,
        "eval_bytes": sum(r["bytes"] for r in evals), "eval_messages": len(evals)}
