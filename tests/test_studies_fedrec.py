"""fedsim.studies.fedrec: what a study's run reports (its curve, its figures)."""

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
