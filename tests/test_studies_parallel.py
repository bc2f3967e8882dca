"""pmap: results in task order whatever the scheduling order."""

import os
import pickle
import re
import signal
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fedsim.studies.parallel import count_done, pmap
from held_stderr import PRELUDE


def _square(x):
    return x * x


def _slow_square(x):
    time.sleep(x)
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


def _losing_warm_up(sig: int, calls: list):
    """A stand-in for numba's warm-up that gets signal ``sig`` and loses the KeyboardInterrupt
    its handler raises, as NumPy's compiled import code did; appends to ``calls`` when it ends."""
    def warm_up():
        try:
            os.kill(os.getpid(), sig)
            time.sleep(0.2)  # (the handler runs by here)
        except KeyboardInterrupt:
            pass  # lost, as in the import
        calls.append(1)
        return True
    return warm_up


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

    monkeypatch.setattr(jit, "_warm", False)
    monkeypatch.setattr(jit, "warm_up", _losing_warm_up(signal.SIGINT, calls))
    for kw in ({}, {"on_error": lambda i, e: None}):  # one pool, and a pool per task
        done = []
        with pytest.raises(KeyboardInterrupt):
            pmap(_square, [1, 2, 3], workers=2, on_done=lambda i, r: done.append(i), **kw)
        assert done == [] and len(calls) == 1  # raised before any task ran
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        calls.clear()


def test_a_sigterm_with_sigint_ignored_while_the_parent_warms_numba_is_raised_after_it(monkeypatch):
    # a sweep run as a background job from a script (SIGINT ignored) and stopped by `kill PID`:
    # sigterm_as_interrupt raised KeyboardInterrupt at once, not held back with SIGINT ignored,
    # and numba's imports lost it as they lose a Ctrl-C: the sweep ran on, its points and all
    import multiprocessing

    from fedsim.math import jit
    from fedsim.signals import sigterm_as_interrupt

    assert multiprocessing.get_start_method() == "fork"
    calls = []

    monkeypatch.setattr(jit, "_warm", False)
    monkeypatch.setattr(jit, "warm_up", _losing_warm_up(signal.SIGTERM, calls))
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with sigterm_as_interrupt() as term:
            for kw in ({}, {"on_error": lambda i, e: None}):  # one pool, and a pool per task
                done = []
                with pytest.raises(KeyboardInterrupt):
                    pmap(_square, [1, 2, 3], workers=2, on_done=lambda i, r: done.append(i), **kw)
                assert done == [] and len(calls) == 1 and term == [signal.SIGTERM]  # raised before any task ran
                calls.clear()
    finally:
        signal.signal(signal.SIGINT, previous)


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



_PP_PLUGIN = '''
import os
from dataclasses import replace

from fedsim.kernel import AsyncioNetwork, FifoLinkModel, register_link_model, register_transport
from fedsim.protocols import register
from fedsim.protocols.demo import SPEC

with open(os.path.join(os.path.dirname(__file__), "loads.txt"), "a") as log:  # who loaded it
    log.write(f"{os.getpid()}\\n")

register(replace(SPEC, name="pp-demo"))


@register_link_model("pp-slow", description="fifo under another name")
class Slow(FifoLinkModel):
    pass


register_transport("pp-framed", AsyncioNetwork, "asyncio under another name")
'''

_PP_PROBE = '''
import os


def known(task):
    """What this worker knows: the task's name (a class of the plug-in: unpickled only where the
    plug-in is loaded), the plug-ins' components, the files loaded, $FEDSIM_PLUGINS."""
    from fedsim.kernel import LINK_MODELS, TRANSPORTS
    from fedsim.protocols import REGISTRY, plugin_files

    return (task.__name__, "pp-demo" in REGISTRY, "pp-slow" in LINK_MODELS, "pp-framed" in TRANSPORTS,
            "pp-ep-demo" in REGISTRY, tuple(os.path.basename(f) for f in plugin_files()),
            os.environ.get("FEDSIM_PLUGINS"), os.getpid())
'''

_PP_MAIN = '''
import json
import multiprocessing
import os
import sys

if __name__ == "__main__":
    multiprocessing.set_start_method(sys.argv[1])
    from fedsim.kernel import LINK_MODELS
    from fedsim.protocols import load_plugins
    from fedsim.studies.parallel import pmap

    import pp_probe

    workers = set()

    def both(task):  # one pool, and a pool per task (on_error)
        got = pmap(pp_probe.known, [task, task], workers=2)
        got += pmap(pp_probe.known, [task], workers=1, on_error=lambda i, e: print("failed:", repr(e)))
        workers.update(g[-1] for g in got)
        return sorted({g[:-1] for g in got})

    load_plugins([sys.argv[2]], entry_points=False)
    # set after the load: a worker must load the parent's plug-ins, not this (it raises if loaded)
    os.environ["FEDSIM_PLUGINS"] = sys.argv[3]
    slow = LINK_MODELS.entry("pp-slow").factory
    print(both(slow))
    bad = os.environ.pop("FEDSIM_PLUGINS")
    load_plugins([], entry_points=True)
    os.environ["FEDSIM_PLUGINS"] = bad
    print(both(slow))
    print(json.dumps([os.getpid(), sorted(workers)]))
'''


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_workers_started_by_spawn_or_forkserver_load_the_parents_plugins(tmp_path, method):
    """Forked workers inherit the plug-ins the parent loaded (--plugin, $FEDSIM_PLUGINS, entry
    points); spawned or forkserver ones began without them, so a sweep of a plug-in protocol, link
    model or transport failed in its workers (its tasks, naming the plug-in's classes, did not
    even unpickle there). They now load the parent's plug-in files, and the entry points if the
    parent loaded them: exactly the parent's, not $FEDSIM_PLUGINS anew; forked ones load nothing."""
    import json
    import subprocess
    from pathlib import Path

    (tmp_path / "pp_plugin.py").write_text(_PP_PLUGIN)
    (tmp_path / "pp_probe.py").write_text(_PP_PROBE)
    (tmp_path / "pp_main.py").write_text(_PP_MAIN)
    env_plugin = tmp_path / "env_plugin.py"
    env_plugin.write_text("raise RuntimeError('a plug-in loaded after the first pools')\n")
    pkg = tmp_path / "pp_ep"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "proto.py").write_text("from dataclasses import replace\nfrom fedsim.protocols import register\n"
                                  "from fedsim.protocols.demo import SPEC\nregister(replace(SPEC, name='pp-ep-demo'))\n")
    dist = tmp_path / "pp_ep-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pp-ep\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[fedsim.protocols]\npp = pp_ep.proto\n")
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(repo)])}
    env.pop("FEDSIM_PLUGINS", None)
    res = subprocess.run([sys.executable, str(tmp_path / "pp_main.py"), method, str(tmp_path / "pp_plugin.py"),
                          str(env_plugin)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    *lines, pids = res.stdout.splitlines()
    assert lines == [
        str([("Slow", True, True, True, False, ("pp_plugin.py",), str(env_plugin))]),
        str([("Slow", True, True, True, True, ("pp_plugin.py",), str(env_plugin))]),
    ]
    parent, workers = json.loads(pids)
    assert workers and parent not in workers
    loads = [int(x) for x in (tmp_path / "loads.txt").read_text().split()]
    # the plug-in file ran in the parent, and, when they do not inherit it, once in each worker
    # (every one the pools started: those that ran a task, and any that did not get one)
    assert loads[0] == parent and len(set(loads)) == len(loads)
    if method == "fork":
        assert loads == [parent]
    else:
        assert set(workers) <= set(loads[1:])

_PL_PLUGIN = """\
import os
# loads in the parent; in the first worker that loads it (after the parent) it raises: that point fails,
# the other runs
if os.getpid() != int(os.environ["PL_PARENT"]):
    try:
        os.close(os.open(os.environ["PL_MARK"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        pass
    else:
        import fedsim_no_such_module_in_this_worker
"""

_PL_SCENARIO = """\
from fedsim.experiment import Param
PARAMS = {"x": Param(0, "x")}
def run(ctx):
    ctx.table("t", [{"x": ctx["x"], "y": 10 * ctx["x"]}])
"""

_PL_MAIN = """\
import multiprocessing, os, sys
if __name__ == "__main__":
    multiprocessing.set_start_method(sys.argv[1])
    os.environ["PL_PARENT"] = str(os.getpid())
    from fedsim.cli import main
    sys.exit(main(["--plugin", "pl_plugin.py", "sweep", "pl_scenario.py", "--grid", "x=1,2", "--workers", "1",
                   "--quiet", "--out", "sw"]))
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_plugin_that_fails_to_load_in_a_spawned_worker_fails_its_point_alone_with_a_clear_error(tmp_path, method):
    """A plug-in that loaded in the parent but raised in a worker started by spawn or forkserver
    (a module that worker cannot import) raised in the pool's initializer: Python's "Exception in
    initializer:" traceback on stderr, and the point failed as "the point's process exited with
    status 0 before it finished", naming neither the plug-in nor what it raised. Now the point
    fails with what the plug-in raised, the note naming its file and the worker's start method
    (its traceback in error.txt), nothing on stderr but the failure line, and the other point runs."""
    import json
    import subprocess
    from pathlib import Path

    (tmp_path / "pl_plugin.py").write_text(_PL_PLUGIN)
    (tmp_path / "pl_scenario.py").write_text(_PL_SCENARIO)
    (tmp_path / "pl_main.py").write_text(_PL_MAIN)
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo), "PL_MARK": str(tmp_path / "failed once")}
    env.pop("FEDSIM_PLUGINS", None)
    res = subprocess.run([sys.executable, "pl_main.py", method], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    plugin = tmp_path / "pl_plugin.py"
    error = (f"ModuleNotFoundError: No module named 'fedsim_no_such_module_in_this_worker' (while loading the "
             f"plug-in file {plugin}, line 10: nothing of it was kept) (in the task's worker process, started by "
             f"{method}, which loads the parent's plug-ins anew)")
    # workers=1: the points run one after the other, x=1 in the first worker
    assert res.returncode == 1, res.stderr
    assert res.stderr.splitlines() == [f"failed x=1: {error} (traceback in sw/x=1/error.txt)"], res.stderr
    assert res.stdout.splitlines()[-1].startswith("sweep: 2 points, 1 run, 0 already done, 1 failed (above;")
    text = (tmp_path / "sw" / "x=1" / "error.txt").read_text()
    assert text.startswith(error + "\n\nTraceback (most recent call last):\n")
    assert 'pl_plugin.py", line 10, in <module>' in text and text.endswith(
        f"(while loading the plug-in file {plugin}, line 10: nothing of it was kept)\n")
    assert (tmp_path / "sw" / "x=2" / "t.csv").read_text().splitlines() == ["x,y", "2,20"]
    sweep = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert [(p["point"], p["status"]) for p in sweep["points"]] == [({"x": 1}, "failed"), ({"x": 2}, "done")]
    assert sweep["points"][0]["error"] == error


_PT_PLUGIN = """\
import os
class Thing:
    def __init__(self, x):
        self.x = x
if os.getpid() != int(os.environ["PT_PARENT"]):  # loads in the parent only
    import fedsim_no_such_module_in_this_worker
"""

_PT_PROBE = """\
def double(thing):
    return 2 * thing.x
"""

_PT_MAIN = """\
import multiprocessing, os, sys
if __name__ == "__main__":
    multiprocessing.set_start_method(sys.argv[1])
    os.environ["PT_PARENT"] = str(os.getpid())
    from fedsim.protocols import load_plugins
    from fedsim.studies.parallel import pmap
    import pt_probe
    load_plugins(["pt_plugin.py"])
    Thing = next(m for name, m in sys.modules.items() if "pt_plugin" in name).Thing
    errors = []
    pmap(pt_probe.double, [Thing(1), Thing(2)], workers=2,
         on_error=lambda i, e: errors.append((i, type(e).__name__, e.summary)))
    print(sorted(errors))
    try:
        pmap(pt_probe.double, [Thing(1), Thing(2)], workers=2)
    except Exception as e:
        print((type(e).__name__, e.summary))
"""


@pytest.mark.parametrize("method", ["spawn"])
def test_a_task_of_plugin_objects_fails_with_the_plugin_error_in_a_worker_whose_plugin_did_not_load(tmp_path, method):
    """A task holding a plug-in's objects (a class of a plug-in file) could not be unpickled in a
    worker started by spawn where that plug-in failed to load: the executor unpickled it outside
    any task, and the worker died (ProcessDied with on_error, a BrokenProcessPool without, a
    traceback on stderr). The task now fails with the PluginLoadError the worker kept."""
    import subprocess
    from pathlib import Path

    (tmp_path / "pt_plugin.py").write_text(_PT_PLUGIN)
    (tmp_path / "pt_probe.py").write_text(_PT_PROBE)
    (tmp_path / "pt_main.py").write_text(_PT_MAIN)
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(repo)])}
    env.pop("FEDSIM_PLUGINS", None)
    res = subprocess.run([sys.executable, "pt_main.py", method], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    error = (f"ModuleNotFoundError: No module named 'fedsim_no_such_module_in_this_worker' (while loading the "
             f"plug-in file {tmp_path / 'pt_plugin.py'}, line 6: nothing of it was kept) (in the task's worker "
             f"process, started by {method}, which loads the parent's plug-ins anew)")
    assert res.stdout.splitlines() == [str([(0, "PluginLoadError", error), (1, "PluginLoadError", error)]),
                                       str(("PluginLoadError", error))]
    assert res.stderr == ""


def test_forked_workers_get_their_tasks_as_before(monkeypatch):
    # (the fork path: the task and function handed to the executor as they are, pickled once by it)
    from fedsim.studies import parallel

    class Executor:
        def submit(self, *args):
            return args

    monkeypatch.setattr(parallel.multiprocessing, "get_start_method", lambda: "fork")
    assert parallel._submit(Executor(), len, [1, 2]) == (parallel._task, len, [1, 2])
    monkeypatch.setattr(parallel.multiprocessing, "get_start_method", lambda: "spawn")
    kind, blob = parallel._submit(Executor(), len, [1, 2])
    assert kind is parallel._task_packed and pickle.loads(blob) == (len, [1, 2])


class _SecondsOnceStopped:
    """30 (s), for time.sleep (which reads an int through ``__index__``), given once this worker's SIGTERM has come: its C-level handler has
    run (it writes a byte to the wakeup file), the Python one (Interrupted) not yet. It waits in
    C, between no two bytecodes (``in`` over a map of C calls), so no handler runs before the
    sleep: what a SIGTERM that lands between the last look for one and the sleep's system call
    does (9 tries in 20000 of a fork signalled as it enters time.sleep, on an idle machine)."""

    def __init__(self, folder):
        self.folder = folder

    def __index__(self):
        import itertools

        woken = os.path.join(self.folder, "woken")
        signal.set_wakeup_fd(os.open(woken, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o644))
        look = os.open(woken, os.O_RDONLY)
        os.close(os.open(os.path.join(self.folder, "entered"), os.O_WRONLY | os.O_CREAT, 0o644))
        True in map(bool, map(os.lseek, itertools.repeat(look), itertools.repeat(0), itertools.repeat(os.SEEK_END)))
        return 30


def _sleep_entered_after_the_stop(folder):
    try:
        time.sleep(_SecondsOnceStopped(folder))
    finally:
        with open(os.path.join(folder, "cleaned"), "w") as fh:
            fh.write("cleaned")


def test_a_sigterm_that_comes_just_before_a_task_blocks_still_stops_it_within_the_grace(tmp_path, monkeypatch):
    # A SIGTERM that reached a worker after its last look for a signal and before time.sleep's
    # system call was handled only when the sleep returned: the stop's one SIGTERM left the task
    # sleeping its 30 s, and it was killed after the grace, its run's .partial folder left (as the
    # full suite once ended test_ctrl_c_stops_every_worker... in test_sweep_keyed). The
    # parent now sends SIGTERM again to a worker that has not left.
    import threading

    from fedsim.studies import parallel

    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    monkeypatch.setattr(parallel, "STOP_GRACE", 5.0)
    # the second SIGTERM after 0.1 s, not 1 s: the test's time (without it, killed after the 5 s)
    monkeypatch.setattr(parallel, "STOP_RESEND", 0.1)

    def ctrl_c_once_the_task_sleeps():
        deadline = time.time() + 60
        while time.time() < deadline and not (tmp_path / "entered").exists():
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c_once_the_task_sleeps, daemon=True).start()
    errors = []
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        pmap(_sleep_entered_after_the_stop, [str(tmp_path)], workers=1, on_error=lambda i, e: errors.append(e))
    took = time.monotonic() - t0
    assert (tmp_path / "woken").stat().st_size >= 1  # the SIGTERM came before the task slept
    cleaned = tmp_path / "cleaned"
    assert errors == [] and cleaned.exists() and cleaned.read_text() == "cleaned", f"took {took:.1f} s"  # not killed
    assert took < 5.0


_HELD_STDERR_SCRIPT = PRELUDE + r'''
import multiprocessing, signal
from fedsim.experiment.context import Progress
from fedsim.experiment.live import activate
from fedsim.studies import parallel

display = Progress(True, tty=False, heartbeat=0.0)  # as a sweep's, to a pipe
display.update(0, 1, stage="sweep")
activate(display)
forked = threading.Event()  # set in the parent once the worker is forked


def drain():
    forked.wait(30)  # (read nothing before the fork: the display's write stays blocked until then)
    while True:
        data = os.read(r, 65536)
        if not data:
            return
        said.append(data)


os.register_at_fork(before=lambda: hold_at_fork(drain), after_in_parent=forked.set)


def task(x):
    print("the worker's line", file=sys.stderr, flush=True)
    return x * 2


def hung():
    time.sleep(float(sys.argv[1]))
    os.write(1, json.dumps({**state, "returned": None}).encode())
    for p in multiprocessing.active_children():  # stuck: it would keep this script's stdout open
        os.kill(p.pid, signal.SIGKILL)
    os._exit(1)


threading.Thread(target=hung, daemon=True).start()
out = parallel.pmap(task, [21], workers=1, on_error=lambda i, exc: state.update(error=repr(exc)))
t0 = time.monotonic()  # the worker wrote its line before its result: wait for drain to read it (at most 10 s)
while time.monotonic() - t0 < 10 and b"the worker's line" not in b"".join(said):
    time.sleep(0.01)
os.write(1, json.dumps({**state, "returned": out, "worker said": b"the worker's line" in b"".join(said)}).encode())
os._exit(0)
'''


def test_a_worker_forked_while_another_thread_writes_to_stderr_writes_and_leaves(tmp_path):
    # A forked worker inherited sys.stderr with its lock as it was at the fork: the sweep's
    # progress thread, writing a line then (here blocked on a full pipe), held it for ever in the
    # worker, whose own line (a warning, say) then waited for ever, where SIGTERM cannot reach
    # it (a point killed after the stop's grace, its .partial folder left), as did
    # multiprocessing's flush of stderr as a finished worker leaves (the pool waited on it for
    # ever). A thread of the program's own can still be writing at the fork: the script makes
    # one write at the fork (os.register_at_fork), deterministically.
    import json
    import subprocess

    script = tmp_path / "held_stderr.py"
    script.write_text(_HELD_STDERR_SCRIPT)
    res = subprocess.run([sys.executable, str(script), "20"], capture_output=True, timeout=120, cwd=tmp_path)
    got = json.loads(res.stdout)
    assert got["own thread writing at the fork"] is True  # the case arranged: the lock held by that thread
    assert got["fedsim threads at the fork"] == []  # (the display's is stopped while the pool forks)
    assert (got["returned"], got.get("error"), got.get("worker said")) == ([42], None, True), got


def test_a_ctrl_c_while_pmap_takes_the_futures_locks_leaves_none_held(monkeypatch):
    # concurrent.futures.wait takes each future's lock in turn, in Python: a KeyboardInterrupt
    # raised between two left the first held, and the pool's manager thread waited for it for
    # ever as it set that future's result (the command hung as it ended). Here the Ctrl-C comes
    # right after the first lock is taken.
    import threading
    from concurrent.futures import _base

    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    real_enter = _base._AcquireFutures.__enter__
    seen: list = []

    def enter(self):
        if seen:
            return real_enter(self)
        seen.extend(self.futures)
        self.futures[0]._condition.acquire()
        os.kill(os.getpid(), signal.SIGINT)  # (its handler runs at the next bytecodes)
        for f in self.futures[1:]:
            f._condition.acquire()

    monkeypatch.setattr(_base._AcquireFutures, "__enter__", enter)
    for kw in ({}, {"on_error": lambda i, e: None}):
        seen.clear()
        with pytest.raises(KeyboardInterrupt):
            pmap(_slow_square, [1, 2, 3], workers=2, **kw)
        assert seen
        free = []

        def take_all():
            for f in seen:
                if not f._condition.acquire(timeout=2):
                    return
                f._condition.release()
            free.append(True)

        t = threading.Thread(target=take_all)
        t.start()
        t.join(10)
        assert free == [True], "a future's lock stayed held after the Ctrl-C"


@pytest.mark.parametrize("workers", [0, -3, 1.5, 2.0, True, "2"])
@pytest.mark.parametrize("isolated", [False, True])
def test_pmap_refuses_workers_that_are_not_an_integer_of_at_least_one(workers, isolated):
    # max(1, int(workers)) ran 0, -3, 1.5 and True as one process, 2.0 and "2" as two, silently
    ran = []
    kw = {"on_error": lambda i, e: ran.append(e)} if isolated else {}
    with pytest.raises(ValueError, match=rf"^pmap: workers must be an integer of at least 1 \(or None: one per "
                                         rf"core\), got {re.escape(repr(workers))}$"):
        pmap(abs, [-1, -2], workers, on_done=lambda i, r: ran.append(r), **kw)
    assert ran == []
    assert pmap(abs, [-1, -2], np.int64(1)) == [1, 2]  # (a NumPy integer is one)


_STDIN_MAIN = """\
import multiprocessing, os, sys
multiprocessing.set_start_method(sys.argv[1])
from fedsim.studies.parallel import pmap
try:
    print("pmap:", pmap(abs, [-1, -2], workers=2))
except Exception as exc:
    print("pmap:", type(exc).__name__, exc)
try:
    print("pmap on_error:", pmap(abs, [-1], workers=1, on_error=lambda i, e: print("failed:", e)))
except Exception as exc:
    print("pmap on_error:", type(exc).__name__, exc)
from fedsim.cli import main
print("status", main(["sweep", "sc.py", "--grid", "x=1,2", "--workers", "1", "--quiet", "--out", "sw"]))
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_workers_that_cannot_import_a_main_read_from_stdin_are_refused_before_any_starts(tmp_path, method):
    """A program read from standard input (``python -``) whose workers are started by spawn or
    forkserver: each worker runs the main module again from its file, ``<stdin>``, which does not
    exist. Every point of a sweep failed alike ("the point's process exited with status 1", with
    Python's traceback on stderr and a failure line claiming a traceback in error.txt, which held
    none). Now pmap and the sweep refuse at once, saying why and what to do, and nothing is
    written or started; with fork (whose workers inherit the main module) all runs."""
    import subprocess

    (tmp_path / "sc.py").write_text(_PL_SCENARIO)
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    env.pop("FEDSIM_PLUGINS", None)
    res = subprocess.run([sys.executable, "-", method], input=_STDIN_MAIN, cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    if method == "fork":
        assert lines[:2] == ["pmap: [1, 2]", "pmap on_error: [1]"]
        assert lines[-1] == "status 0" and res.stderr == ""
        assert (tmp_path / "sw" / "x=2" / "t.csv").read_text().splitlines() == ["x,y", "2,20"]
        return
    error = (f"the worker processes cannot be started: Python's multiprocessing starts them by {method}, "
             f"which runs the main module again in each, from its file, and this program's main module is "
             f"'<stdin>' ({tmp_path / '<stdin>'}: no such file; a program read from standard input, as by "
             f"`python -`); run the program from a file, or have the workers forked "
             f"(multiprocessing.set_start_method('fork'), where the platform has it)")
    assert lines == [f"pmap: MainNotImportable {error}", f"pmap on_error: MainNotImportable {error}", "status 2"]
    assert res.stderr == f"error: {error}\n"
    assert not (tmp_path / "sw").exists()


def _sigterm_self(x):
    if x == 1:
        os.kill(os.getpid(), signal.SIGTERM)  # as `kill PID` from another process would
        time.sleep(30)
    return x * x


def test_a_task_stopped_by_another_processs_sigterm_fails_alone_as_killed_by_it():
    # with on_error, a task's process that got SIGTERM from anyone but the pool (`kill PID`, a
    # system agent) raised Interrupted("stopped by the parent (Ctrl-C)") out of pmap: a sweep ended
    # with that traceback and status 1, its other points stopped, and the point "not run"
    from fedsim.studies.parallel import ProcessDied

    for workers in (1, 2):
        errors = {}
        out = pmap(_sigterm_self, [0, 1, 2], workers, on_error=errors.__setitem__)
        assert out == [0, None, 4] and list(errors) == [1]
        assert isinstance(errors[1], ProcessDied)
        assert (errors[1].exitcode, errors[1].how) == (-signal.SIGTERM, "was killed by signal SIGTERM")


def _own_sleeper(folder):
    """The test's own child process: sleeps 60 s; a SIGTERM (or its normal end) is written down."""

    def on_term(signum, frame):
        Path(folder, "own_terminated").write_text("terminated")
        os._exit(3)

    signal.signal(signal.SIGTERM, on_term)
    Path(folder, "own_started").write_text(str(os.getpid()))
    time.sleep(60)
    Path(folder, "own_ended").write_text("ended")


def _interrupt_or_sleep(task):
    """Task 1 raises KeyboardInterrupt once task 0 runs (its file ``running`` written); task 0 sleeps 30 s."""
    x, folder = task
    if x == 0:
        Path(folder, "running").write_text(str(os.getpid()))
        time.sleep(30)
        return x
    end = time.monotonic() + 30
    while not Path(folder, "running").exists() and time.monotonic() < end:
        time.sleep(0.01)
    raise KeyboardInterrupt


@pytest.mark.parametrize("isolated", [False, True])
def test_a_stopped_pmap_stops_only_its_own_workers_not_the_callers_other_processes(tmp_path, isolated):
    # _stop took multiprocessing.active_children() for the pool's workers and SIGTERMed (then
    # SIGKILLed) every one: a program that called pmap while it had processes of its own (a
    # multiprocessing.Process, another pool, a server) had them killed by a Ctrl-C of pmap's
    import multiprocessing

    own = multiprocessing.Process(target=_own_sleeper, args=(str(tmp_path),), daemon=True)
    own.start()
    try:
        end = time.monotonic() + 30
        while not (tmp_path / "own_started").exists() and time.monotonic() < end:
            time.sleep(0.01)
        assert (tmp_path / "own_started").read_text() == str(own.pid)
        kw = {"on_error": lambda i, e: pytest.fail(f"task {i}: {e!r}")} if isolated else {}
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            pmap(_interrupt_or_sleep, [(0, str(tmp_path)), (1, str(tmp_path))], workers=2, **kw)
        assert time.monotonic() - t0 < 15  # the sleeping task was stopped, not waited for
        worker = int((tmp_path / "running").read_text())
        assert worker not in (os.getpid(), own.pid)
        assert multiprocessing.active_children() == [own]  # pmap's workers have gone, and only they
        assert own.is_alive() and own.exitcode is None
        assert sorted(p.name for p in tmp_path.iterdir()) == ["own_started", "running"]  # no SIGTERM reached it
    finally:
        own.kill()
        own.join(10)
    assert own.exitcode == -signal.SIGKILL
