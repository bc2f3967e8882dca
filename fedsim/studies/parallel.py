"""A small process-pool map for independent runs (folds, grid points)."""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterable


def default_workers() -> int:
    return max(1, os.cpu_count() or 1)


def pmap(fn: Callable[[Any], Any], tasks: Iterable[Any], workers: int | None = None,
         on_done: Callable[[int, Any], None] | None = None,
         cost: Callable[[Any], float] | None = None) -> list[Any]:
    """``[fn(t) for t in tasks]``, on ``workers`` processes (1: in this process). Results come
    back in task order; ``on_done(i, result)`` is called as each finishes (``i`` the task's
    index). ``fn`` must be a module-level function and tasks picklable. Worker processes use
    one BLAS thread each.

    ``cost(task)``, if given, is a rough relative duration: tasks start longest first (ties in
    task order), so a long task does not start last and leave the other workers idle."""
    tasks = list(tasks)
    if cost is not None and workers != 1 and len(tasks) > 1:
        order = sorted(range(len(tasks)), key=lambda i: -cost(tasks[i]))
        done = (lambda j, r: on_done(order[j], r)) if on_done else None
        permuted = pmap(fn, [tasks[i] for i in order], workers, done)
        results: list[Any] = [None] * len(tasks)
        for j, i in enumerate(order):
            results[i] = permuted[j]
        return results
    workers = default_workers() if workers is None else max(1, int(workers))
    if workers == 1 or len(tasks) <= 1:
        out = []
        for i, t in enumerate(tasks):
            out.append(fn(t))
            if on_done:
                on_done(i, out[-1])
        return out
    results: list[Any] = [None] * len(tasks)
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), initializer=_one_thread) as ex:
        futs = {ex.submit(fn, t): i for i, t in enumerate(tasks)}
        from concurrent.futures import as_completed

        for f in as_completed(futs):
            i = futs[f]
            results[i] = f.result()
            if on_done:
                on_done(i, results[i])
    return results


def _one_thread() -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    try:  # BLAS already loaded by numpy in a forked worker: ask it directly when possible
        import numpy  # noqa: F401
    except ImportError:  # pragma: no cover
        pass
