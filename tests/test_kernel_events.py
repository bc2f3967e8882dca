"""EventQueue: the clock and heap under SimNetwork."""

from __future__ import annotations

import pytest

from fedsim.kernel import EventQueue


def test_events_run_in_time_order_and_fifo_at_equal_times():
    q = EventQueue()
    seen = []
    for name, delay in [("a", 2.0), ("b", 1.0), ("c", 2.0), ("d", 0.0), ("e", 1.0)]:
        q.schedule(delay, lambda n=name: seen.append((q.now, n)))
    assert q.run() is False
    assert seen == [(0.0, "d"), (1.0, "b"), (1.0, "e"), (2.0, "a"), (2.0, "c")]


def test_until_stops_before_events_due_at_that_instant():
    q = EventQueue()
    seen = []
    for t in (1.0, 2.0, 3.0):
        q.schedule(t, seen.append, t)
    assert q.run(until=2.0) is True  # events were left
    assert seen == [1.0] and q.now == 2.0
    assert q.run(until=10.0) is False  # ran dry before 10
    assert seen == [1.0, 2.0, 3.0] and q.now == 10.0
    with pytest.raises(ValueError, match="greater than the current"):
        q.run(until=5.0)


def test_callbacks_can_schedule_more_work():
    q = EventQueue()
    seen = []

    def tick(k):
        seen.append(q.now)
        if k:
            q.schedule(0.5, tick, k - 1)

    q.schedule(0.0, tick, 3)
    q.run()
    assert seen == [0.0, 0.5, 1.0, 1.5]


def test_a_held_batch_runs_exactly_as_if_queued_at_once():
    def trace(hold):
        q = EventQueue()
        seen = []
        q.schedule(0.25, seen.append, "x")
        if hold:
            assert q.hold() and not q.hold()  # nested holds are refused
        for k, d in enumerate([0.5, 0.1, 0.5, 0.3, 0.1]):
            q.schedule(d, seen.append, k)
        if hold:
            q.release()
            assert len(q) == 2  # x and the first of the batch only
        q.schedule(0.3, seen.append, "y")  # scheduled after the batch: runs after k=3 at t=0.3
        q.run()
        return seen

    assert trace(True) == trace(False) == [1, 4, "x", 3, "y", 0, 2]
