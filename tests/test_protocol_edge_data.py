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


@pytest.mark.parametrize("name,label", [("fedrec", "FedRec"), ("fpl", "FPL")])
def test_test_ratings_outside_the_training_space_are_refused_by_build(name, label):
    """A test user 3 and item 4 beyond a 3 x 3 training space: FedRec failed in to_csr ('row index
    out of range'), FPL only after the whole run in its evaluation (a numpy broadcast error)."""
    spec = REGISTRY[name]
    implicit = spec.data == "implicit"
    test = Ratings([0, 3, 2], [2, 1, 4], [3, 5, 2])
    test = test.binarize() if implicit else test
    _, cfg = spec.tiny(3, 2, 1)
    net = SimNetwork(seed=3)
    with pytest.raises(ValueError) as err:
        spec.build(net, _train(implicit), cfg, test=test)
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
