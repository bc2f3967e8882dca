"""benchmarks/personalfr_round.py runs against the current protocols: every timer it installs wraps a
function the actors really call (a renamed function made it crash before timing anything)."""

import pytest
from conftest import load_benchmark

from fedsim.data import partition_users, per_user_random, resolve
from fedsim.math import ae_train
from fedsim.protocols.personalfr import FedAEConfig


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("personalfr_round")


@pytest.mark.parametrize("protocol", ["personalfr", "fedavg"])
def test_one_round_is_timed_with_its_math_and_codec(bench, protocol):
    r = resolve("tiny")
    tr, te = per_user_random(r, 0.2, seed=0)
    task = ae_train.prepare((tr.users, tr.items, tr.values), (te.users, te.items, te.values), r.n_users, r.n_items)
    groups = partition_users(r.n_users, 10, seed=0)
    out = bench.one_run(protocol, task, groups, FedAEConfig(rounds=1))
    assert out["messages"] > 0 and out["total"] > 0
    # the server's math and both directions of the codec were seen by the timers
    assert out["math: server"] > 0 and out["codec"] > 0 and out["math: local training"] > 0
    assert out["kernel + actors"] == pytest.approx(out["total"] - out["math"] - out["codec"])
