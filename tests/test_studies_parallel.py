"""pmap: results in task order whatever the scheduling order."""

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from fedsim.studies.parallel import count_done, pmap


def _square(x):
    return x * x


def _square_after(task):
    """``x * x``, once the file ``after`` exists (None: at once; at most 60 s)."""
    x, after = task
    end = time.monotonic() + 60
    while after is not None and not Path(after).exists() and time.monotonic() < end:
        time.sleep(0.01)
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


def test_count_done_reports_how_many_finished_whatever_their_order(tmp_path):
    """Task 0 waits until task 1 is reported done, task 1 does not: they finish out of order
    (task 1 first). pmap's index says so; count_done turns it into the count a progress display
    wants: 1, then 2. (Task 0 slept 1 s before: a worker started late on a loaded machine, or a
    parent that saw both done in one wait, reported them in index order.)"""
    indices, counts = [], []
    reported = tmp_path / "task 1 reported"

    def both(i, r):
        indices.append(i)
        if i == 1:
            reported.touch()
        on_count(i, r)

    on_count = count_done(counts.append)
    out = pmap(_square_after, [(1.0, str(reported)), (0.0, None)], workers=2, on_done=both)
    assert out == [1.0, 0.0]
    assert indices == [1, 0]  # the index is not a count: it went 2, then 1
    assert counts == [1, 2]
    counts.clear()
    pmap(_square, [1, 2, 3], workers=1, on_done=count_done(counts.append))
    assert counts == [1, 2, 3]


def _fragile(x):
    import os
    import signal
    import sys

    if x == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's out-of-memory killer would
    if x == 3:
        raise ValueError("three")
    if x == 4:
        sys.exit(4)
    if x == 6:
        os._exit(3)  # no exception, no result: the process is gone
    if x == 7:
        import faulthandler

        faulthandler.disable()  # (pytest's, inherited: it printed this process's stacks into the suite's output)
        os.kill(os.getpid(), signal.SIGSEGV)  # as a crash in compiled code
    return x * x


def test_with_on_error_a_failing_or_dying_task_fails_alone():
    from concurrent.futures.process import BrokenProcessPool

    for workers in (1, 2):
        done, errors = {}, {}
        out = pmap(_fragile, [1, 2, 3, 4, 5], workers, on_done=done.__setitem__, on_error=errors.__setitem__)
        assert out == [1, None, None, None, 25] and done == {0: 1, 4: 25}
        assert sorted(errors) == [1, 2, 3]
        assert isinstance(errors[1], BrokenProcessPool)
        assert isinstance(errors[2], ValueError) and str(errors[2]) == "three"
        assert isinstance(errors[3], SystemExit) and errors[3].code == 4


def test_a_dying_task_is_reported_with_its_signal_or_exit_status():
    # the pool's BrokenProcessPool said only "terminated abruptly": which signal killed the
    # task's process (SIGKILL: out of memory; SIGSEGV: a crash) or what status it exited with
    # was lost, and a sweep's failed point could not say it
    from fedsim.studies.parallel import ProcessDied

    for workers in (1, 2):
        errors = {}
        out = pmap(_fragile, [2, 6, 7, 5], workers, on_error=errors.__setitem__)
        assert out == [None, None, None, 25] and sorted(errors) == [0, 1, 2]
        assert all(isinstance(e, ProcessDied) for e in errors.values())
        assert [errors[i].exitcode for i in range(3)] == [-9, 3, -11]
        assert [errors[i].how for i in range(3)] == ["was killed by signal SIGKILL", "exited with status 3",
                                                     "was killed by signal SIGSEGV"]
        assert str(errors[0]) == "the task's process was killed by signal SIGKILL before it returned its result"
    assert ProcessDied(None).how == "died" and ProcessDied(-99).how == "was killed by signal 99"


def test_a_second_sigterm_during_a_tasks_cleanup_does_not_cut_it_short(monkeypatch):
    # a parent killed outright can signal its death twice: the second SIGTERM came while the task
    # was cleaning up after the first (removing its run's .partial folder) and raised again there,
    # leaving the folder behind (1 run in 5 of test_a_killed_sweeps_workers_stop_with_it...)
    from fedsim.studies import parallel

    monkeypatch.setattr(parallel, "_IN_TASK", True)
    monkeypatch.setattr(parallel, "_STOPPING", False)
    with pytest.raises(parallel.Interrupted):
        parallel._on_term(signal.SIGTERM, None)
    assert parallel._STOPPING is True
    parallel._on_term(signal.SIGTERM, None)  # the cleanup goes on: nothing raised


def test_a_parent_that_is_a_zombie_counts_as_gone(monkeypatch):
    # killed, the parent is a zombie until reaped, and this worker still its child for a moment
    # (the signal of its death can come before the hand-over): the worker, seeing its old parent's
    # pid, took it for alive and waited for work for ever
    import subprocess

    from fedsim.studies import parallel

    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc (Linux)")
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.time() + 10
        while time.time() < deadline:  # exited, not reaped: a zombie
            with open(f"/proc/{child.pid}/stat", "rb") as fh:
                if fh.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    break
            time.sleep(0.01)
        monkeypatch.setattr(parallel, "_PARENT", child.pid)
        monkeypatch.setattr(parallel.os, "getppid", lambda: child.pid)  # still its child, as far as it knows
        assert parallel._orphaned() is True
        monkeypatch.setattr(parallel, "_PARENT", os.getpid())
        monkeypatch.setattr(parallel.os, "getppid", os.getpid)  # a parent alive (this process)
        assert parallel._orphaned() is False
    finally:
        monkeypatch.undo()
        child.wait()


def test_a_worker_whose_parent_died_before_it_could_ask_to_be_stopped_with_it_leaves(tmp_path):
    # a worker starting while its parent was killed (a Ray worker force-cancelled, or killed with
    # its sweep, as the point's process starts) found another parent, took it for a fork
    # server's, and waited for work for ever; a worker of a fork server (its pool's owner alive
    # but not its parent) stays
    import subprocess

    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG and /proc (Linux)")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        code = "import sys\nfrom fedsim.studies import parallel\nparallel._stop_with_parent(int(sys.argv[1]))\nprint('stayed')\n"
        for parent, expected in ((dead.pid, (1, "")), (alive.pid, (0, "stayed\n"))):
            res = subprocess.run([sys.executable, "-c", code, str(parent)], capture_output=True, text=True, timeout=60)
            assert (res.returncode, res.stdout) == expected, res.stderr
    finally:
        alive.kill()
        alive.wait()


def _jit_warm(_):
    from fedsim.math import jit

    return jit._warm, os.getpid()


def test_a_pool_of_forked_workers_starts_numbas_compiler_in_the_parent_first(monkeypatch):
    # each forked worker that called a compiled kernel started numba's compiler of its own
    # (50-90 MB and a quarter of a second each): pmap now calls jit.warm_up before it forks, so
    # the workers inherit it started (jit._warm, as warm_up leaves it, seen in each worker)
    import multiprocessing

    from fedsim.math import jit

    assert multiprocessing.get_start_method() == "fork"
    calls = []

    def warm_up():
        calls.append(os.getpid())
        jit._warm = True
        return True

    monkeypatch.setattr(jit, "_warm", False)
    monkeypatch.setattr(jit, "warm_up", warm_up)
    out = pmap(_jit_warm, [0, 1, 2], workers=1)  # no pool: nothing to warm for
    assert calls == [] and out == [(False, os.getpid())] * 3
    out = pmap(_jit_warm, [0], workers=2)  # one task: no pool either
    assert calls == [] and out == [(False, os.getpid())]
    out = pmap(_jit_warm, [0, 1, 2, 3], workers=2)
    assert calls == [os.getpid()]  # once, in this (the parent) process
    assert [w for w, _ in out] == [True] * 4 and os.getpid() not in {pid for _, pid in out}
    monkeypatch.setattr(jit, "_warm", False)
    calls.clear()
    out = pmap(_jit_warm, [0, 1], workers=1, on_error=lambda i, e: None)  # a pool per task, even with 1 worker
    assert calls == [os.getpid()]
    assert [w for w, _ in out] == [True] * 2 and os.getpid() not in {pid for _, pid in out}


def test_a_ctrl_c_while_the_parent_warms_numba_is_raised_after_it_even_where_it_landed_in_code_that_lost_it(
        monkeypatch):
    # A Ctrl-C 0.5-0.65 s into `fedsim sweep` (numba's first compile, which imports SciPy and
    # NumPy's random module) was lost in NumPy's compiled import code: the sweep ran on, its
    # points and all. The warm-up here loses it the same way; pmap must raise it once done.
    import multiprocessing

    from fedsim.math import jit

    assert multiprocessing.get_start_method() == "fork"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    calls = []

    def losing_warm_up():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # (the handler runs by here)
        except KeyboardInterrupt:
            pass  # lost, as in the import
        calls.append(1)
        return True

    monkeypatch.setattr(jit, "_warm", False)
    monkeypatch.setattr(jit, "warm_up", losing_warm_up)
    for kw in ({}, {"on_error": lambda i, e: None}):  # one pool, and a pool per task
        done = []
        with pytest.raises(KeyboardInterrupt):
            pmap(_square, [1, 2, 3], workers=2, on_done=lambda i, r: done.append(i), **kw)
        assert done == [] and len(calls) == 1  # raised before any task ran
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        calls.clear()


def _ctrl_c_at_start(init):
    """A worker initializer that first gets the Ctrl-C a terminal sends the whole process group,
    before the real initializer ignores it (its handler runs in the sleep)."""
    def first_a_ctrl_c(*args):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)
        return init(*args)
    return first_a_ctrl_c


def test_a_ctrl_c_that_reaches_a_worker_before_it_ignores_sigint_does_not_fail_its_task(monkeypatch):
    # A worker forked with the parent's SIGINT handler raised KeyboardInterrupt in its
    # initializer, with a traceback on stderr: its task was reported failed ("the task's process
    # exited with status 0 before it returned its result"), or with one pool the whole map
    # failed (BrokenProcessPool). Forked while the parent holds SIGINT back, it inherits a
    # handler that only records it.
    from fedsim.studies import parallel

    monkeypatch.setattr(parallel, "_init_worker", _ctrl_c_at_start(parallel._init_worker))
    errors = []
    assert pmap(_square, [1, 2, 3], workers=2, on_error=lambda i, e: errors.append((i, e))) == [1, 4, 9]
    assert errors == []
    assert pmap(_square, [1, 2, 3, 4], workers=2) == [1, 4, 9, 16]
