"""Protocols on edge-case data (fedsim.data.Ratings built by hand): each run completes with
figures checked by hand, or build refuses the data at once with an error naming what is wrong."""

from __future__ import annotations

import pytest

from fedsim.data import Ratings
from fedsim.kernel import SimNetwork
from fedsim.protocols import REGISTRY


def _train(implicit: bool) -> Ratings:
    r = Ratings([0, 0, 1, 1, 2, 2], [0, 1, 1, 2, 0, 2], [4, 3, 5, 2, 1, 4], n_users=3, n_items=3)
    return r.binarize() if implicit else r


LABELS = {"fedrec": "FedRec", "fedrecpp": "FedRec++", "fpl": "FPL", "fcf": "FCF", "personalfr": "PersonalFR",
          "fedavg-ae": "FedAvg-AE"}
# the protocols that evaluate test ratings (FedRec with eval_every)
EVALUATING = ["fedrec", "fpl", "personalfr", "fedavg-ae"]


def _cfg(name):
    spec = REGISTRY[name]
    _, cfg = spec.tiny(3, 2, 1)
    return cfg.replace(eval_every=1) if name == "fedrec" else cfg


@pytest.mark.parametrize("name", EVALUATING)
def test_test_ratings_outside_the_training_space_are_refused_by_build(name):
    """A test user 3 and item 4 beyond a 3 x 3 training space: FedRec failed in to_csr ('row index
    out of range'), FPL only after the whole run in its evaluation (a numpy broadcast error), the
    autoencoders in ae_train.prepare without naming the user or item."""
    label = LABELS[name]
    spec = REGISTRY[name]
    implicit = spec.data == "implicit"
    test = Ratings([0, 3, 2], [2, 1, 4], [3, 5, 2])
    test = test.binarize() if implicit else test
    net = SimNetwork(seed=3)
    with pytest.raises(ValueError) as err:
        spec.build(net, _train(implicit), _cfg(name), test=test)
    assert str(err.value) == (
        f"{label}: the test ratings hold 1 user(s) from 3 on and 1 item(s) from 4 on, outside the training "
        "data's index space (3 users x 3 items): the model has nothing to predict them with; build test and "
        "training data over one index space (fedsim.data's splits do)")
    assert net.nodes == {} or len(net.nodes) == 0


def test_fpl_evaluates_a_test_set_over_a_smaller_index_space():
    """Test ratings over 2 users x 4 items (the training data: 3 x 4, item 3 rated by no one): a
    broadcast error in FPL's evaluation before. By hand: the catalogue is the training items
    {0, 1, 2}; user 0 has one candidate (item 2, her test item: recall 1, precision 1/10), user 1
    one (item 0; her test item 3 is not in the catalogue: 0); user 2 has no test item and is
    skipped: p@10 = 0.05, r@10 = 0.5 over 2 users."""
    spec = REGISTRY["fpl"]
    _, cfg = spec.tiny(3, 2, 1)
    train = Ratings([0, 0, 1, 1, 2, 2], [0, 1, 1, 2, 0, 2], [1] * 6, n_users=3, n_items=4)
    test = Ratings([0, 1], [2, 3], [1, 1])
    assert (test.n_users, test.n_items) == (2, 4)
    net = SimNetwork(seed=3)
    res = spec.build(net, train, cfg, test=test).collect(net.run())
    assert res.metrics == [{"round": 1, "p@10": pytest.approx(0.05), "r@10": 0.5, "users": 2, "lost": 0}]


@pytest.mark.parametrize("name", EVALUATING)
def test_empty_test_ratings_are_refused_when_evaluated(name):
    """Empty test ratings gave metrics of NaN (n = 0, users = 0) that looked like a result."""
    spec = REGISTRY[name]
    implicit = spec.data == "implicit"
    net = SimNetwork(seed=3)
    with pytest.raises(ValueError) as err:
        spec.build(net, _train(implicit), _cfg(name), test=Ratings([], [], [], n_users=3, n_items=3))
    assert str(err.value) == (f"{LABELS[name]}: the test ratings are empty: every evaluation would be over no "
                              "rating (NaN metrics); give test ratings or none")


def test_fedrec_without_eval_every_does_not_evaluate_an_empty_test_set():
    """The empty-test refusal is about evaluations: FedRec without eval_every ignores test."""
    spec = REGISTRY["fedrec"]
    _, cfg = spec.tiny(3, 2, 1)
    net = SimNetwork(seed=3)
    res = spec.build(net, _train(False), cfg, test=Ratings([], [], [], n_users=3, n_items=3)).collect(net.run())
    assert res.metrics == [] and res.params["U"].shape == (3, 8)


@pytest.mark.parametrize("name", list(LABELS))
def test_data_without_users_is_refused_by_build(name):
    """n_users = 0: FPL and FCF ran with no client at all, the autoencoders failed in
    partition_users ('M must be in [1, n_users = 0]'), FedRec++ spoke of denoisers."""
    spec = REGISTRY[name]
    data = Ratings([], [], [], n_users=0, n_items=3)
    data = data.binarize() if spec.data == "implicit" else data
    _, cfg = spec.tiny(3, 2, 1)
    net = SimNetwork(seed=3)
    with pytest.raises(ValueError) as err:
        spec.build(net, data, cfg)
    assert str(err.value) == f"{LABELS[name]}: the training data has no user (n_users = 0): there is no client to place"
