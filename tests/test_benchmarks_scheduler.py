"""benchmarks/scheduler.py runs both of its schedulers, and they do the same work: simpy through its
public API (``SimpyQueue``) gives the same ledger, byte for byte, and the same run duration as
``EventQueue`` (SimNetwork sets ``queue.now`` to a drained run's duration, which SimpyQueue refused
with an AttributeError: the benchmark crashed on its first simpy run)."""

import pytest
from conftest import REPO, load_benchmark

pytest.importorskip("simpy")


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("scheduler")


def test_ping_pong_runs_on_both_queues(bench):
    from fedsim.kernel.events import EventQueue

    for factory in (EventQueue, bench.SimpyQueue):
        assert bench.ping_pong(factory, 50) > 0


def test_round_on_simpy_is_the_same_run_as_on_the_event_queue(bench, monkeypatch):
    from fedsim.kernel.events import EventQueue

    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # round_time imports benchmarks/kernel.py
    nets = []
    for factory in (EventQueue, bench.SimpyQueue):
        assert bench.round_time(factory, 12, m=40, d=4, rows=5, rounds=2, keep=nets) > 0
    ours, simpy_run = nets
    assert len(ours.ledger) == 12 * 2 * 2 + 12  # V and g per client and round, and the stop
    assert simpy_run.now() == ours.now() > 0
    assert simpy_run.ledger.to_csv() == ours.ledger.to_csv()
