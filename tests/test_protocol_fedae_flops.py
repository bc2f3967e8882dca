"""PersonalFR's and FedAvg-AE's ``client_flops`` count the training FLOPs every client charged,
including a client that dropped out. They were the sum of the finished clients' return values, so
a client that dropped out took the training it had done with it (and the study's
``client_gflop_per_round`` came out too low under faults); they are now read from the kernel's
``RunResult.flops``."""

from __future__ import annotations

import pytest

from fedsim.data import per_user_random
from fedsim.kernel import AsyncioNetwork, SimNetwork, TcpNetwork
from fedsim.protocols import REGISTRY

NAMES = ["personalfr", "fedavg-ae"]
DROPPED = "client/0001"


def _setup(name, rounds, deadline=1.0):
    data, cfg = REGISTRY[name].tiny(4, rounds, 0)
    # a constant learning rate: a client's first rounds are then the same whatever the number of rounds
    return data, cfg.replace(schedule="constant", deadline=deadline)


def _run(name, net, rounds, deadline=1.0):
    data, cfg = _setup(name, rounds, deadline)
    train, test = per_user_random(data, 0.2, seed=0)  # a test split: the clients evaluate after the last round
    res = REGISTRY[name].build(net, train, cfg, test=test).collect(
        net.run() if isinstance(net, SimNetwork) else net.run(timeout=120))
    return res, net


class _DropOne(SimNetwork):
    """A SimNetwork on which node ``who`` drops out at ``at``."""

    def __init__(self, who, at, **kw):
        super().__init__(**kw)
        self.who, self.at = who, at

    def add_node(self, node_id, actor, *args, **kw):
        if node_id == self.who:
            kw["offline_at"] = self.at
        super().add_node(node_id, actor, *args, **kw)


@pytest.mark.parametrize("name", NAMES)
def test_without_faults_client_flops_are_the_sum_the_return_values_gave(name):
    res, _ = _run(name, SimNetwork(seed=0, profile="lan"), 3)
    clients = res.info["clients"]
    assert sorted(clients) == [f"client/000{i}" for i in range(4)] and res.info["lost_clients"] == []
    old = int(sum(r["flops"] for r in clients.values()))
    assert old > 0 and res.info["client_flops"] == old
    for c, r in clients.items():  # per client, per label: training and evaluation, each exact
        assert res.run.flops[c] == {"train": float(r["flops"]), "eval": float(r["eval_flops"])}
        assert r["eval_flops"] > 0


@pytest.mark.parametrize("name", NAMES)
def test_a_client_that_dropped_out_keeps_the_training_it_did_in_client_flops(name):
    # where the dropped client is at rest: after its round-2 update reached the server, before the
    # server's next message reaches it (it computes nothing in between)
    _, free = _run(name, SimNetwork(seed=0, profile="lan"), 4)
    rows = list(free.ledger.records())
    ups = [r for r in rows if r["src"] == DROPPED and r["kind"] == "update"]
    assert len(ups) == 4
    nxt = min(r["arrival_time"] for r in rows if r["dst"] == DROPPED and r["send_time"] > ups[1]["send_time"])
    at = (ups[1]["arrival_time"] + nxt) / 2
    res, net = _run(name, _DropOne(DROPPED, at, seed=0, profile="lan"), 4)
    assert res.run.offline == [DROPPED] and res.info["lost_clients"] == [DROPPED]
    assert [r["round"] for r in net.ledger.records() if r["src"] == DROPPED and r["kind"] == "update"] == [1, 2]
    # what it computed in its two rounds: the same client's training in a run of two rounds
    two, _ = _run(name, SimNetwork(seed=0, profile="lan"), 2)
    declared = two.info["clients"][DROPPED]["flops"]
    assert two.info["clients"][DROPPED]["rounds"] == [1, 2] and declared > 0
    old = int(sum(r["flops"] for r in res.info["clients"].values()))  # the figure before: finished clients
    assert res.info["client_flops"] == old + declared
    assert res.run.flops[DROPPED] == {"train": float(declared)}  # (no evaluation before round 4)


@pytest.mark.parametrize("name", NAMES)
def test_the_three_transports_count_the_same_flops(name):
    got = []
    for net in (SimNetwork(seed=0), AsyncioNetwork(seed=0, time_scale=0.02),
                TcpNetwork(seed=0, time_scale=0.02, processes=3)):
        # a deadline of 100 s of the transport's time (2 s of real time at time_scale 0.02): on a
        # loaded machine 1 s (20 ms) let an update miss the real transports' deadline, and the
        # server's aggregation counted one model fewer than the simulator's
        res, _ = _run(name, net, 2, deadline=100.0)
        assert res.info["lost_clients"] == [] and res.info["missing"] == []
        got.append((res.info["client_flops"], res.info["server_flops"], res.run.flops))
    assert got[0][0] > 0 and got[0][2]["server"]["aggregate"] == got[0][1]
    assert got[1] == got[0] and got[2] == got[0]
