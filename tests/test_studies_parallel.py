"""pmap: results in task order whatever the scheduling order."""

from fedsim.studies.parallel import pmap


def _square(x):
    return x * x


def test_results_come_back_in_task_order_with_longest_first_scheduling():
    tasks = [3, 1, 4, 1, 5, 9, 2, 6]
    seen = []
    out = pmap(_square, tasks, workers=2, on_done=lambda i, r: seen.append((i, r)), cost=lambda t: t)
    assert out == [t * t for t in tasks]
    assert sorted(seen) == [(i, t * t) for i, t in enumerate(tasks)]  # every original index, once


def test_in_process_map_ignores_cost():
    seen = []
    out = pmap(_square, [2, 3], workers=1, on_done=lambda i, r: seen.append(i), cost=lambda t: t)
    assert out == [4, 9] and seen == [0, 1]
