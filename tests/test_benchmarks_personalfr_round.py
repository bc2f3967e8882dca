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


def test_an_unknown_protocol_is_refused(bench, capsys):
    # anything but "personalfr" used to run FedAvg under the name given ("fedavgx: 12 messages ...")
    with pytest.raises(SystemExit) as exc:
        bench.main(["--data", "tiny", "--clients", "10", "--repeats", "1", "--protocols", "personalfr,fedavgx"])
    assert exc.value.code == 2
    err = capsys.readouterr()
    assert "--protocols: unknown 'fedavgx'; known: personalfr, fedavg" in err.err
    assert "personalfr:" not in err.out


def test_the_named_protocols_are_the_ones_run(bench, capsys):
    import json

    assert bench.main(["--data", "tiny", "--clients", "10", "--repeats", "1", "--protocols", "fedavg"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert list(report["results"]) == ["fedavg"]
    assert report["results"]["fedavg"]["messages"] == 12  # 1 model, 1 update, 10 stops: FedAvg's round
