"""The independent reference (scikit-surprise): built on the same folds, scored the same way."""

import numpy as np
import pytest

from fedsim.data import generate
from fedsim.studies import reference
from fedsim.studies.fedrec import make_folds, run_one
from fedsim.protocols.fedrec import FedRecConfig

pytestmark = pytest.mark.skipif(not reference.available(),
                                reason="scikit-surprise not installed (pip install 'fedsim[reference]')")


@pytest.fixture(scope="module")
def fold():
    return make_folds(generate("ml100k-like", seed=3, n_users=300, n_items=400, n_ratings=20_000), 5, seed=0)[0]


def test_trainset_holds_exactly_the_training_ratings(fold):
    ts = reference._trainset(*fold.train)
    assert ts.n_ratings == len(fold.train[0])
    got = sorted((int(ts.to_raw_uid(u)), int(ts.to_raw_iid(i)), r) for u, i, r in ts.all_ratings())
    want = sorted(zip(fold.train[0].tolist(), fold.train[1].tolist(), np.asarray(fold.train[2], float).tolist()))
    assert got == want


def test_scores_are_clipped_mae_and_rmse(fold, monkeypatch):
    import surprise

    # a constant predictor above the scale: every clipped prediction is 5
    class Const(surprise.AlgoBase):
        def __init__(self, **kw):
            super().__init__()

        def fit(self, trainset):
            return super().fit(trainset) or self

        def estimate(self, u, i):
            return 7.0

    monkeypatch.setattr(surprise, "SVD", lambda **kw: Const())
    mae, rmse = reference.fit_predict("SVD(biased=False)", {}, fold.train, fold.test)
    r = np.asarray(fold.test[2], float)
    assert mae == pytest.approx(np.abs(5 - r).mean()) and rmse == pytest.approx(np.sqrt(((5 - r) ** 2).mean()))
    with pytest.raises(ValueError, match="unknown reference"):
        reference.fit_predict("KNN", {}, fold.train, fold.test)


def test_surprise_pmf_agrees_with_fedsims_central_pmf(fold):
    """Two implementations of the same model on the same fold land close together (and far from
    the initial model's error): the central numbers are the model's, not fedsim's."""
    ours = run_one((fold, "unfederated", FedRecConfig("PMF(B)", d=20, T=100, lr=0.8, lam=0.001), 0, "ideal", False))
    out = reference.run_reference((fold, "SVD(biased=False)", dict(n_epochs=20, lr_all=0.005, reg_all=0.02), 20, 0))
    assert out.rmse < 0.8 * ours.initial_rmse
    assert abs(out.rmse - ours.rmse) < 0.05, (out.rmse, ours.rmse)
