"""Tests written from a hand mutation-testing pass over the sweep's backends: the local process
pool (``fedsim.studies.parallel``), the Ray backend (``fedsim.studies.raypool``) and the parts of
``fedsim.studies.sweep`` that choose and drive them. Each test fails with a specific mutant of the
code applied (named in its docstring) and checks the code against an independent computation
(hand-computed orders, counts and messages, the processes that exist, a scenario's own record of
when its points ran), never against the function's own output. A fake ``ray`` module stands in for
Ray where only what fedsim asks of it matters; one small test runs on a real local Ray instance
(skipped without Ray)."""

from __future__ import annotations

import importlib.machinery
import json
import multiprocessing
import os
import pickle
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from fedsim.experiment import UsageError
from fedsim.studies import parallel
from fedsim.studies.parallel import ProcessDied, pmap
from fedsim.studies.sweep import run_sweep


def _square(x):
    return x * x


def _interval(task):
    """``(task, start, end)`` of a task that takes ``0.3`` s (seconds since the epoch)."""
    t0 = time.time()
    time.sleep(0.3)
    return task, t0, time.time()


# ---------------------------------------------------------------------------------------------
# the local pool: how a task's death is said


def test_a_task_process_that_exited_with_status_zero_says_so_and_the_error_pickles():
    """Mutants: ``ProcessDied`` taking exit status 0 for a signal (``exitcode <= 0``: "was killed
    by signal 0"; a task that called ``os._exit(0)``, or a plug-in error that made the worker exit
    with status 0, is said in those words, see ``PluginLoadError``); ``ProcessDied`` without its
    ``__reduce__`` (unpickled, the message became its exit code: ``how`` a TypeError)."""
    assert ProcessDied(0).how == "exited with status 0"
    assert str(ProcessDied(0)) == "the task's process exited with status 0 before it returned its result"
    back = pickle.loads(pickle.dumps(ProcessDied(-9)))
    assert (type(back), back.exitcode, back.how) == (ProcessDied, -9, "was killed by signal SIGKILL")


# ---------------------------------------------------------------------------------------------
# the local pool: which tasks run where, and in which order


def test_one_worker_runs_the_tasks_in_this_process():
    """Mutant: ``workers == 1`` no longer meaning "in this process" (the docstring's "1: in this
    process"): a function that is no module-level one, or tasks that do not pickle, then failed,
    and every task paid for a process of its own."""
    seen = []
    out = pmap(lambda t: seen.append(os.getpid()) or t + 1, [1, 2, 3], workers=1)
    assert out == [2, 3, 4] and seen == [os.getpid()] * 3


def test_the_pool_starts_as_many_processes_as_there_are_tasks_at_most_and_leaves_none(tmp_path):
    """Mutants: the pool started with ``workers`` processes whatever the number of tasks (five
    forked for two tasks), or one fewer than ``min(workers, tasks)`` (two tasks ran one after the
    other); ``pmap`` returning before its processes have gone (``shutdown(wait=False)``)."""
    before = set(multiprocessing.active_children())
    counts = []
    out = pmap(_interval, ["a", "b"], workers=5,
               on_done=lambda i, r: counts.append(len(set(multiprocessing.active_children()) - before)))
    assert [r[0] for r in out] == ["a", "b"]
    assert counts == [2, 2]
    (_, s1, e1), (_, s2, e2) = out
    assert s2 < e1 and s1 < e2  # the two ran at the same time
    assert set(multiprocessing.active_children()) - before == set()


def test_tasks_start_longest_first_ties_in_task_order(monkeypatch):
    """Mutant: ``cost`` order reversed (shortest first: the longest task started last and left the
    other worker idle). The pool's workers take tasks in the order they are handed over: that
    order is recorded (with two workers, which two start first is that order's). (Ties taken by
    ``sorted(..., reverse=True)`` is no mutant: Python's sort keeps equal items in order then too.)"""
    handed = []
    submit = parallel._submit
    monkeypatch.setattr(parallel, "_submit", lambda ex, fn, t: handed.append(t) or submit(ex, fn, t))
    tasks = list(enumerate([3, 1, 4, 1, 5, 9, 2, 6, 5]))  # (index, cost)
    out = pmap(_square_pair, tasks, workers=2, cost=lambda t: t[1])
    assert out == [(i, c * c) for i, c in tasks]
    assert handed == [(5, 9), (7, 6), (4, 5), (8, 5), (2, 4), (0, 3), (6, 2), (1, 1), (3, 1)]


def _square_pair(t):
    return t[0], t[1] * t[1]


def test_with_on_error_tasks_start_longest_first_and_at_most_workers_at_once():
    """Mutants of ``pmap`` with ``on_error`` (a process per task): tasks taken shortest first
    (``cost`` order reversed) or last to first (``order.reverse()`` left out); ``workers + 1``
    tasks at once (``len(running) <= workers``). With one worker the tasks run one after another,
    in the order they were started: longest first, ties in task order."""
    costs = {"a": 1, "b": 3, "c": 2, "d": 3}
    done = []
    out = pmap(_interval, list(costs), workers=1, on_done=lambda i, r: done.append(i),
               on_error=lambda i, e: pytest.fail(f"task {i}: {e!r}"), cost=costs.get)
    assert done == [1, 3, 2, 0]  # b (3), d (3), c (2), a (1)
    runs = sorted(out, key=lambda r: r[1])
    assert [r[0] for r in runs] == ["b", "d", "c", "a"]
    assert all(later[1] >= earlier[2] for earlier, later in zip(runs, runs[1:]))  # one at a time
    done.clear()
    out = pmap(_interval, ["a", "b", "c"], workers=1, on_done=lambda i, r: done.append(i),
               on_error=lambda i, e: pytest.fail(f"task {i}: {e!r}"))
    assert done == [0, 1, 2]  # without cost: task order


def _raise_keyboard_interrupt(x):
    if x == 1:
        raise KeyboardInterrupt
    time.sleep(30)
    return x


def test_a_keyboard_interrupt_from_a_task_stops_the_others_even_with_on_error():
    """Mutant: ``pmap`` with ``on_error`` handing a task's KeyboardInterrupt to ``on_error`` (the
    docstring: KeyboardInterrupt still stops everything and is raised here): the other task went
    on for its 30 s."""
    errors = []
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        pmap(_raise_keyboard_interrupt, [0, 1], workers=2, on_error=lambda i, e: errors.append(i))
    assert time.monotonic() - t0 < 15 and errors == []
    assert multiprocessing.active_children() == []


def _fail_or_sleep(x):
    if x == 0:
        time.sleep(0.3)  # (the other task is running by then)
        raise ValueError("zero")
    time.sleep(30)
    return x


def test_a_failing_task_stops_the_other_workers_and_is_raised():
    """Mutant: ``pmap`` (without ``on_error``) raising a task's error without stopping the pool
    (``_stop`` left out; its docstring: an exception from a task stops the other workers): the
    other task's process ran on for its 30 s."""
    before = set(multiprocessing.active_children())
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="^zero$"):
        pmap(_fail_or_sleep, [0, 1], workers=2)
    assert time.monotonic() - t0 < 15
    assert set(multiprocessing.active_children()) - before == set()


def test_a_second_sigterm_to_an_orphaned_worker_in_its_tasks_cleanup_lets_the_cleanup_finish(tmp_path):
    """Mutant: ``_on_term`` handling a second SIGTERM in a task like one outside any task (``if
    _IN_TASK and not again``): a worker whose parent was killed (its death can be signalled
    twice) left at once (``os._exit``) in the middle of its task's cleanup after the first, its
    run's temporary folder left behind."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    code = ("from fedsim.studies import parallel as p\n"
            f"p._IN_TASK, p._STOPPING, p._PARENT = True, True, {gone.pid}\n"
            "p._on_term(15, None)\n"
            "print('the cleanup goes on')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert (res.returncode, res.stdout) == (0, "the cleanup goes on\n"), res.stderr


_SIGINT_IN_TASK = """\
import multiprocessing, os, signal, sys, time
def task(x):
    os.kill(os.getpid(), signal.SIGINT)  # a terminal's Ctrl-C reaches every process of its group
    time.sleep(0.2)  # (a handler would run here)
    return x * x
if __name__ == "__main__":
    multiprocessing.set_start_method(sys.argv[1])
    from fedsim.studies.parallel import pmap
    print(pmap(task, [3], workers=1, on_error=lambda i, e: print("failed:", i, repr(e))))
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_worker_started_afresh_leaves_a_ctrl_c_to_the_parent(tmp_path, method):
    """Mutant P41: ``_init_worker`` without ``signal.signal(SIGINT, SIG_IGN)`` (the module
    docstring: Ctrl-C reaches the parent only; it decides, and stops the workers by SIGTERM). A
    worker started by spawn or forkserver begins with Python's default SIGINT handler: the SIGINT
    a terminal sends the whole process group raised KeyboardInterrupt in its task, out of pmap
    (and out of a sweep's point, before the parent's own stop). Here the SIGINT reaches the worker
    alone: ignored, its task returns. (Under fork, the default start method on Linux before Python
    3.14, the mutant is equivalent: the workers are forked inside ``sigint_deferred``, whose
    handler they inherit only records a SIGINT, and nothing reads it there.)"""
    script = tmp_path / "ctrl_c_in_task.py"
    script.write_text(_SIGINT_IN_TASK)
    res = subprocess.run([sys.executable, str(script), method], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert (res.returncode, res.stdout, res.stderr) == (0, "[9]\n", "")


# ---------------------------------------------------------------------------------------------
# the local pool: inside a worker


def _blas_threads(_):
    from threadpoolctl import threadpool_info

    return os.environ.get("OMP_NUM_THREADS"), sorted({i["num_threads"] for i in threadpool_info()})


def test_a_worker_runs_one_blas_thread_and_tells_libraries_loaded_later_the_same(monkeypatch):
    """Mutants: a worker without ``threadpool_limits(1)`` (two workers, each with as many BLAS
    threads as cores, spinning against each other), or without ``OMP_NUM_THREADS`` &c. set to 1 for
    the libraries it loads later (PyTorch)."""
    from threadpoolctl import threadpool_info

    if not threadpool_info():
        pytest.skip("NumPy here has no BLAS that threadpoolctl knows")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(var, raising=False)
    assert pmap(_blas_threads, [0, 1], workers=2) == [("1", [1]), ("1", [1])]


def test_a_worker_that_was_told_to_stop_runs_no_further_task(monkeypatch):
    """Mutants: ``_task`` running a task handed to a worker after its stop (SIGTERM) came (a queued
    point started after Ctrl-C); ``_task`` leaving ``_IN_TASK`` set after its task (an idle worker's
    next SIGTERM raised ``Interrupted`` outside any task, in the pool's own code)."""
    ran = []
    monkeypatch.setattr(parallel, "_STOPPING", False)
    monkeypatch.setattr(parallel, "_IN_TASK", False)
    assert parallel._task(ran.append, 1) is None and ran == [1]
    assert parallel._IN_TASK is False
    parallel._on_term(15, None)  # idle, not orphaned: nothing raised
    assert parallel._STOPPING is True
    with pytest.raises(parallel.Interrupted):
        parallel._task(ran.append, 2)
    assert ran == [1]


# ---------------------------------------------------------------------------------------------
# Ray: addresses and the wait for CPUs (no Ray needed)

FORMS = ("expected HOST:PORT (a cluster's head node, port 6379 unless it was started with another), "
         "ray://HOST:PORT (Ray Client, port 10001 by default) or auto")


@pytest.mark.parametrize("address, expected", [
    ("h:65535", None),
    ("h:65536", "--address h:65536: the port '65536' is not a number from 1 to 65535; " + FORMS),
    ("HTTPS://h:8265", "--address HTTPS://h:8265: HTTPS:// is not a Ray address (a web address: the Ray dashboard's, "
                       "port 8265, is not where tasks are sent); " + FORMS),
    ("h ead:6379", "--address h ead:6379: not a host and port; " + FORMS),
    ("[::1]6379", "--address [::1]6379: not a host and port; " + FORMS),
    ("ray://[::1]", None),
    ("  ", "--address is empty: " + FORMS + " (or no --address for a local Ray instance)"),
])
def test_more_ray_addresses_checked_as_documented(address, expected):
    """Mutants of ``address_problem``/``address_error``: the port bound ``<= 65536``; the web
    address hint only for a lower-case scheme; a space inside the host let through; text after
    ``[IPv6]`` that is no ``:PORT`` let through; ``ray://HOST`` without a port refused; an address
    of spaces shown as given instead of "is empty"."""
    from fedsim.studies.raypool import address_error

    error = address_error(address)
    assert (str(error) if error else None) == expected


def test_a_ray_session_takes_the_address_without_its_spaces():
    """Mutant: ``RaySession`` keeping the address as given (checked stripped, then handed to Ray
    with its spaces, and shown so in sweep.json)."""
    from fedsim.studies.raypool import RaySession

    assert RaySession(" head:6379\n").address == "head:6379"


@pytest.mark.parametrize("text, expected", [("", 300.0), (" 0 ", 0.0), ("2.5", 2.5), ("inf", None), ("-1", None),
                                            ("soon", None), ("nan", None)])
def test_the_cpu_wait_from_the_environment(monkeypatch, text, expected):
    """Mutants of ``cpu_wait_from_env``: 0 refused (``value > 0``: its docstring: 0 refuses a
    cluster without CPUs at once); ``inf`` accepted (a wait for ever); text that is no number taken
    as the default, silently."""
    from fedsim.studies.raypool import CPU_WAIT_VAR, cpu_wait_from_env

    monkeypatch.setenv(CPU_WAIT_VAR, text)
    if expected is None:
        with pytest.raises(UsageError, match=rf"^\$FEDSIM_RAY_CPU_WAIT={text}: expected the seconds a Ray cluster "
                                             "without CPUs gets for a node with CPUs to join"):
            cpu_wait_from_env()
    else:
        assert cpu_wait_from_env() == expected


def test_the_wait_for_cpus_ends_when_one_cpu_has_come(monkeypatch):
    """Mutant: the wait ending only with more than one CPU (``cpus > 1``): a cluster that got a node
    of one CPU waited the whole ``FEDSIM_RAY_CPU_WAIT`` (300 s by default), then went on."""
    from fedsim.studies import raypool

    sdk = types.ModuleType("ray.autoscaler.sdk")
    asked = []
    sdk.request_resources = lambda bundles=None: asked.append(bundles)
    monkeypatch.setitem(sys.modules, "ray.autoscaler.sdk", sdk)
    monkeypatch.setattr(raypool, "POLL", 0.01)
    looks = iter([0.0, 1.0])
    fake = types.SimpleNamespace(cluster_resources=lambda: {"CPU": next(looks, 1.0)})
    t0 = time.monotonic()
    assert raypool._wait_for_cpus(fake, 30, None, "HEAD:6379") == 1.0
    assert time.monotonic() - t0 < 5 and asked == [[{"CPU": 1}], []]


# ---------------------------------------------------------------------------------------------
# Ray: the session, with a fake ray module (what fedsim asks of Ray, and what it leaves)


class FakeRay(types.ModuleType):
    """A ``ray`` module that records ``init`` and ``shutdown`` and has ``cpus`` CPUs."""

    def __init__(self, cpus: float = 2.0, up: bool = False, fails: BaseException | None = None) -> None:
        super().__init__("ray")
        self.__spec__ = importlib.machinery.ModuleSpec("ray", None)
        self.cpus, self.up, self.fails, self.calls = cpus, up, fails, []

    def is_initialized(self):
        return self.up

    def init(self, **kw):
        self.calls.append(("init", kw))
        if self.fails is not None:
            raise self.fails
        self.up = True

    def shutdown(self):
        self.calls.append(("shutdown",))
        self.up = False

    def cluster_resources(self):
        return {"CPU": self.cpus, "memory": 1e9}


@pytest.fixture
def fake_ray(monkeypatch):
    def make(**kw) -> FakeRay:
        fake = FakeRay(**kw)
        monkeypatch.setitem(sys.modules, "ray", fake)
        return fake

    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    return make


def test_a_local_ray_session_starts_the_cpus_asked_and_stops_what_it_started(fake_ray):
    """Mutants: the local instance started with one CPU per core whatever ``cpus`` (a sweep's
    ``--workers 1`` ran two points at once on two cores); ``describe`` calling a session that
    started Ray "an already initialised Ray", or showing ``1.0 CPUs``."""
    from fedsim.studies.raypool import RaySession

    ray = fake_ray(cpus=1.0)
    with RaySession(cpus=1) as session:
        assert [c[0] for c in ray.calls] == ["init"]
        kw = ray.calls[0][1]
        assert (kw["address"], kw["num_cpus"], kw["include_dashboard"]) == ("local", 1, False)
        assert session.owned and session.cluster_cpus == 1.0
        assert session.describe() == f"Ray local instance, 1 CPUs, up in {session.startup_s:.1f} s"
    assert ray.calls[1:] == [("shutdown",)]


def test_a_ray_initialised_already_is_used_as_it_is_and_left_running(fake_ray):
    """Mutants: leaving a session shutting down a Ray it did not start (``if True`` for ``if
    self.owned``: the caller's Ray gone under it); ``describe`` not saying it is the caller's."""
    from fedsim.studies.raypool import RaySession

    ray = fake_ray(cpus=4.0, up=True)
    with RaySession(cpus=1) as session:
        assert session.describe() == f"Ray an already initialised Ray, 4 CPUs, up in {session.startup_s:.1f} s"
    assert ray.calls == [] and ray.up


def test_a_second_ctrl_c_while_the_ray_tasks_are_cancelled_still_cancels_every_one(monkeypatch):
    """A second Ctrl-C (or SIGTERM) as ``_cancel`` told the tasks to stop, one ``ray.cancel`` each:
    raised in the middle, it left the tasks after that one uncancelled, and on a cluster they ran
    on until Ray killed them as the driver went (their temporary folders left on the nodes; see
    test_ctrl_c_of_a_sweep_on_a_cluster_cancels_its_tasks_there_leaving_nothing_of_them). Every task
    is now told first; the second Ctrl-C is raised then, and cuts the wait for them short."""
    import signal

    from fedsim.studies import raypool

    told = []

    def cancel(ref, force=False):
        told.append((ref, force))
        if len(told) == 1:
            os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, as the first task is told

    waited = []
    fake = types.SimpleNamespace(cancel=cancel, wait=lambda refs, num_returns, timeout: waited.append(refs) or ([], refs))
    monkeypatch.setitem(sys.modules, "ray", fake)
    raised = None
    try:
        raypool._cancel(["a", "b", "c"])
    except KeyboardInterrupt as exc:  # (not pytest.raises: a plain one would end the test session)
        raised = exc
    assert type(raised) is KeyboardInterrupt
    assert (told, waited) == ([("a", False), ("b", False), ("c", False)], [])


def test_a_ray_that_does_not_start_or_has_no_cpu_is_refused_and_stopped(fake_ray):
    """Mutants: an error from ``ray.init`` raised as ``UsageError`` without ``ray.shutdown`` first
    (what Ray had started of the instance was left running); a local instance of no CPU refused
    without being shut down (its processes outlived the sweep's error)."""
    from fedsim.studies.raypool import RaySession

    ray = fake_ray(fails=RuntimeError("no room"))
    with pytest.raises(UsageError, match=r"^a local Ray instance: Ray did not start \(RuntimeError: no room\)$"):
        RaySession(cpus=2).__enter__()
    assert [c[0] for c in ray.calls] == ["init", "shutdown"]
    ray = fake_ray(cpus=0.0)
    with pytest.raises(UsageError, match=r"^the local Ray instance has 0 CPUs \(Ray's cluster_resources\(\)\), and "
                                         r"each point runs as a Ray task of one CPU: none could start"):
        RaySession(cpus=2).__enter__()
    assert [c[0] for c in ray.calls] == ["init", "shutdown"] and not ray.up


# ---------------------------------------------------------------------------------------------
# the sweep driving the local pool


def _script(tmp_path: Path, body: str, name: str = "scn.py") -> Path:
    script = tmp_path / name
    script.write_text("import os, time\nfrom pathlib import Path\nfrom fedsim.experiment import Param\n"
                      "PARAMS = {'x': Param(0, 'x')}\n" + body)
    return script


def test_a_local_sweep_runs_one_point_per_core_at_once_by_default(tmp_path, monkeypatch):
    """Mutant: the local pool run with one process when ``workers`` is not given (``workers or
    1``; run_sweep's docstring: default one per core). Each point waits for the other to start: one
    at a time, the first waited 20 s and failed."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    marks = tmp_path / "marks"
    marks.mkdir()
    script = _script(tmp_path, "def run(ctx):\n"
                               f"    marks = Path({str(marks)!r})\n"
                               "    (marks / str(ctx['x'])).touch()\n"
                               "    end = time.monotonic() + 20\n"
                               "    while len(list(marks.iterdir())) < 2:\n"
                               "        if time.monotonic() > end:\n"
                               "            raise RuntimeError('alone')\n"
                               "        time.sleep(0.01)\n"
                               "    ctx.table('t', [{'m': ctx['x']}])\n")
    s = run_sweep(str(script), {"x": [1, 2]}, tmp_path / "sw", quiet=True)
    assert sorted(p["x"] for p in s["done"]) == [1, 2] and s["failed"] == []  # (in the order they finished)
    assert json.loads((tmp_path / "sw" / "sweep.json").read_text())["workers"] == 2


def test_a_resumed_sweeps_progress_counts_only_the_points_it_runs(tmp_path):
    """Mutants: the progress display's total the grid's points, not those left to run
    (``len(points)``: a sweep resumed with one point of three done said 2/3 when it had finished,
    and its ETA counted the point done before); the progress callback's first argument the
    point's index among those to run instead of how many have finished less one (as the Ray
    backend's test has it: 0, 1, ... whatever order the points finish in). Here x=2 finishes
    after x=3."""
    mark = tmp_path / "x=3 ran"
    script = _script(tmp_path, "def run(ctx):\n"
                               "    if ctx['x'] == 2:\n"
                               "        end = time.monotonic() + 20\n"
                               f"        while not Path({str(mark)!r}).exists() and time.monotonic() < end:\n"
                               "            time.sleep(0.01)\n"
                               "        time.sleep(1.0)\n"
                               "    if ctx['x'] == 3:\n"
                               f"        Path({str(mark)!r}).touch()\n"
                               "    ctx.table('t', [{'m': ctx['x']}])\n")
    out = tmp_path / "sw"
    run_sweep(str(script), {"x": [1]}, out, workers=1)
    told = []
    run_sweep(str(script), {"x": [1, 2, 3]}, out, workers=2, progress=lambda i, n, r: told.append((i, n, r["point"])))
    assert told == [(0, 2, {"x": 3}), (1, 2, {"x": 2})]
    lines = [ln.split("] ", 1)[1] for ln in (out / "sweep.log").read_text().splitlines()]
    steps = [ln.split(",")[0] for ln in lines if ln.startswith("sweep scn ") and "/" in ln.split(",")[0]]
    assert steps[-3:] == ["sweep scn 0/2", "sweep scn 1/2", "sweep scn 2/2"], lines


def test_the_temporary_folders_of_dead_ray_tasks_are_removed_and_live_ones_kept(tmp_path, monkeypatch):
    """Mutant: ``_remove_stale_temp`` removing every task's temporary folder (``if m:``): a Ray
    worker starting a point removed the folder of a point running beside it on the same machine."""
    import tempfile

    from fedsim.studies import sweep

    monkeypatch.setattr(tempfile, "gettempdir", lambda: str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    live = tmp_path / f"fedsim-point-{os.getpid()}-abc"
    dead = tmp_path / f"fedsim-point-{gone.pid}-def"
    other = tmp_path / "fedsim-point-x-1"
    for d in (live, dead, other):
        (d / "point").mkdir(parents=True)
    sweep._remove_stale_temp()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def test_a_ray_task_starting_removes_what_killed_tasks_left_on_its_machine(tmp_path, monkeypatch):
    """Mutant: ``_run_point_remote`` without its ``_remove_stale_temp()`` (its docstring: the
    temporary point folders of tasks whose worker was killed are removed). On a cluster nothing else
    removes them: a task killed there (cancelled by force after its grace, or by Ray as the
    driver went) left its folder, with the point's half-written run, in the node's temporary
    directory for good. Run here as a Ray worker runs it, without Ray: the folder of a process that
    has ended goes, a living worker's stays, and the task's own folder is gone after it."""
    import tempfile

    from fedsim.kernel import NetSpec
    from fedsim.studies.sweep import SweepPoint, _run_point_remote

    node_tmp = tmp_path / "node-tmp"
    node_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(node_tmp))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    killed = node_tmp / f"fedsim-point-{gone.pid}-k1"  # as a killed task left it
    (killed / ".point.partial-1-a").mkdir(parents=True)
    (killed / ".point.partial-1-a" / "run.log").write_text("half a run\n")
    living = node_tmp / f"fedsim-point-{os.getppid()}-l1"  # a task running beside this one
    (living / "point").mkdir(parents=True)
    script = _script(tmp_path, "def run(ctx):\n    ctx.table('t', [{'m': ctx['x']}])\n")
    p = SweepPoint(str(script), {"x": 2}, str(tmp_path / "sw" / "x=2"), "tiny", 0, NetSpec(), {"x": 2},
                   {"scenario": "scn", "config": {"x": 2}})
    res = _run_point_remote((p, None))
    assert res["status"] == "done" and res["files"]["t.csv"].decode().splitlines() == ["m", "2"]
    assert [d.name for d in node_tmp.iterdir()] == [living.name]


# ---------------------------------------------------------------------------------------------
# the sweep driving Ray (a real local Ray instance of two CPUs, initialised here)


# (the Ray backend's mutant test that starts a real Ray is in tests/test_sweep_ray.py, beside the
# others that do: the suite's workers run that file on one of them, one test after another)
