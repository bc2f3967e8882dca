"""The command line under Ctrl-C: one "interrupted" line and status 130, whenever it comes (a
run on the tcp transport, fedsim still importing), no worker process left, no output folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as fh:
                out |= {int(x) for x in fh.read().split()}
        except OSError:
            pass
    return out


def _forks(pid: int) -> set[int]:
    """The children of ``pid`` that are forks of it (its command line): its worker processes, not
    a short-lived program a library runs while importing (ldconfig, a shell)."""
    def cmdline(p: int) -> bytes | None:
        try:
            with open(f"/proc/{p}/cmdline", "rb") as fh:
                return fh.read()
        except OSError:
            return None

    own = cmdline(pid)
    return {k for k in _children(pid) if own is not None and cmdline(k) == own}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads worker pids from /proc (Linux)")
@pytest.mark.parametrize("after", [0.0, 0.0, 0.0, 0.0, 0.5])
def test_ctrl_c_during_a_tcp_run_prints_one_line_and_leaves_no_worker_and_no_folder(tmp_path, after):
    # A Ctrl-C (the terminal signals the whole process group) as the worker processes start, or
    # while they run: the "interrupted" line came with "Task was destroyed but it is pending!"
    # (a control connection's handler task started after the loop's teardown had listed its
    # tasks), "Exception in callback ..." (such a task cancelled before it ran), or a traceback
    # from a worker interrupted before it ignored SIGINT, or a lost worker pid.
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedsim", "run", "fedrec", "--transport", "tcp", "--set", "T=1000000", "--out",
         str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        kids: set[int] = set()
        end = time.monotonic() + 60
        while len(kids) < 4 and time.monotonic() < end and proc.poll() is None:  # fedrec's 4 worker processes
            kids |= _forks(proc.pid)
            time.sleep(0.002)
        assert len(kids) == 4, "the run did not start its worker processes"
        time.sleep(after)
        kids |= _forks(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    lines = [ln for ln in stderr.splitlines() if not ln.startswith("[")]  # (the progress lines)
    assert (proc.returncode, lines) == (130, ["interrupted: the run's output folder was not written"]), stderr
    assert stdout == ""
    assert not [k for k in kids if _alive(k)]  # (the launching process reaped them before it exited)
    assert list(tmp_path.iterdir()) == []  # no folder, no .run.partial-... left


class _InterruptedImport:
    """A meta path finder: importing ``name`` raises KeyboardInterrupt (a Ctrl-C during it)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.name:
            raise KeyboardInterrupt
        return None


def test_ctrl_c_while_fedsim_imports_is_one_line_and_status_130(monkeypatch, capsys):
    # the console script imported fedsim.cli (NumPy, the experiment package...) before main()
    # and its try: a Ctrl-C right after typing the command was Python's traceback of the import
    import tomllib

    import fedsim.__main__ as entry_point

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts["fedsim"] == "fedsim.__main__:entry"
    monkeypatch.delitem(sys.modules, "fedsim.cli", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_InterruptedImport("fedsim.cli"), *sys.meta_path])
    assert entry_point.entry() == 130
    assert capsys.readouterr() == ("", "interrupted: nothing was run or written\n")


# as `kill PID` right after the command was typed: SIGTERM while fedsim.cli is being imported
TERMINATED_IMPORT = (
    "import os, signal, sys, time\n"
    "class Finder:\n"
    "    def find_spec(self, fullname, path=None, target=None):\n"
    "        if fullname == 'fedsim.cli':\n"
    "            os.kill(os.getpid(), signal.SIGTERM)\n"
    "            time.sleep(5)  # (the handler runs here)\n"
    "        return None\n"
    "sys.meta_path.insert(0, Finder())\n"
    "import fedsim.__main__ as entry_point\n"
    "before = signal.getsignal(signal.SIGTERM)\n"
    "status = entry_point.entry()\n"
    "assert signal.getsignal(signal.SIGTERM) is before, 'the handler was not put back'\n"
    "sys.exit(status)\n"
)


def test_sigterm_while_fedsim_imports_is_one_line_and_status_143(tmp_path):
    # SIGTERM before fedsim.cli's handler was installed ended the process at once: status -15,
    # nothing said (nothing was written either). (In a process of its own: that SIGTERM would end
    # the test runner.)
    res = subprocess.run([sys.executable, "-c", TERMINATED_IMPORT], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (res.returncode, res.stdout, res.stderr) == (143, "", "terminated (SIGTERM): nothing was run or written\n")


def test_ctrl_c_before_the_command_runs_is_one_line_and_status_130(monkeypatch, capsys):
    # main()'s handler began inside _main, after parsing (and the scenario --help imports)
    from fedsim import cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["list"]) == 130
    assert capsys.readouterr() == ("", "interrupted: nothing was run or written\n")


def test_python_m_fedsim_still_runs_the_command_line():
    res = subprocess.run([sys.executable, "-m", "fedsim", "--version"], capture_output=True, text=True, timeout=60,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (res.returncode, res.stdout, res.stderr) == (0, "fedsim 0.1.0\n", "")


# a plug-in whose import runs code from a string (as collections.namedtuple and dataclasses do as
# a module imports) during which a Ctrl-C lands: the KeyboardInterrupt leaves that exec
INTERRUPTED_EXEC = (
    "exec('import os, signal, time\\nos.kill(os.getpid(), signal.SIGINT)\\ntime.sleep(30)')\n"
    "raise AssertionError('the SIGINT did not interrupt the exec')\n"
)


@pytest.mark.parametrize("command, said", [
    (["run", "demo"], "interrupted: the run's output folder was not written"),
    (["sweep", "demo", "--grid", "seed=0,1"], "interrupted: the sweep ran no point and wrote nothing"),
])
def test_ctrl_c_handled_inside_a_string_exec_ends_with_status_130_not_killed_by_sigint(tmp_path, command, said):
    # CPython (3.8 to 3.12 at least) marks a KeyboardInterrupt that leaves a string exec/eval as
    # unhandled, even once caught, and `python -m` then killed the process with SIGINT at its end:
    # status -2 after the "interrupted" line (a shell shows 130 for both)
    (tmp_path / "interrupting.py").write_text(INTERRUPTED_EXEC)
    res = subprocess.run([sys.executable, "-m", "fedsim", "--plugin", "interrupting.py", *command, "--out", "out"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (res.returncode, res.stdout, res.stderr) == (130, "", said + "\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["interrupting.py"]


# a run that is under way once it has written 'started' beside its output folder: its imports and
# data are behind it, it sleeps. (A signal that comes while a module is being imported can be lost:
# an exception raised then inside numpy.random's compiled initialisation is swallowed by it, and
# the run goes on; so can one raised inside numba's compiler callbacks.)
SLEEPER = (
    "import time\n"
    "from fedsim.experiment import Param, scenario_main\n"
    "PARAMS = {'wait': Param(60.0, 'seconds')}\n"
    "def run(ctx):\n"
    "    import numpy as np\n"
    "    ctx.table('t', [{'a': int(np.random.default_rng(0).integers(3))}])\n"
    "    open(ctx.out.parent / 'started', 'w').close()\n"
    "    time.sleep(ctx['wait'])\n"
    "if __name__ == '__main__':\n"
    "    raise SystemExit(scenario_main(globals()))\n"
)


@pytest.mark.parametrize("how", ["fedsim run", "scenario script"])
def test_sigterm_during_a_run_ends_it_as_ctrl_c_does_leaving_no_folder(tmp_path, how):
    # SIGTERM (kill PID, timeout, a batch system's stop) ended the process at once: status -15,
    # nothing on stderr, and the hidden .out.partial-PID-X folder left beside --out
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    command = ["-m", "fedsim", "run", str(script)] if how == "fedsim run" else [str(script)]
    proc = subprocess.Popen([sys.executable, *command, "--quiet", "--out", str(tmp_path / "out")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and proc.poll() is None and not (tmp_path / "started").exists():
            time.sleep(0.005)
        assert (tmp_path / "started").exists() and len(list(tmp_path.glob(".out.partial-*"))) == 1
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    written = "the run's output folder was not written" if how == "fedsim run" else "nothing was written"
    assert (proc.returncode, stdout, stderr) == (143, "", f"terminated (SIGTERM): {written}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sleeper.py", "started"]


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads worker pids from /proc (Linux)")
def test_sigterm_during_a_tcp_run_stops_its_workers_and_leaves_no_folder(tmp_path):
    # the launching process alone gets it (kill PID): it stops the run as a Ctrl-C does
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedsim", "run", "fedrec", "--transport", "tcp", "--set", "T=1000000", "--quiet",
         "--out", str(tmp_path / "run")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        kids: set[int] = set()
        end = time.monotonic() + 60
        while len(kids) < 4 and time.monotonic() < end and proc.poll() is None:
            kids |= _forks(proc.pid)
            time.sleep(0.002)
        assert len(kids) == 4, "the run did not start its worker processes"
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert (proc.returncode, stdout, stderr) == (143, "", "terminated (SIGTERM): the run's output folder was not written\n")
    assert not [k for k in kids if _alive(k)]
    assert list(tmp_path.iterdir()) == []


def test_sigterm_handler_leaves_a_forked_worker_to_die_of_sigterm():
    # a worker forked while the command line runs inherits its handler: SIGTERM must still end
    # it (the parent's stop), not raise KeyboardInterrupt in it or be passed to its SIGINT handler
    from fedsim.experiment.runner import sigterm_as_interrupt

    # (the handler in place before: SIG_DFL, or one an earlier test's library left, e.g. Ray's
    # after test_sweep_ray, which made a check for SIG_DFL fail when the files ran in that order)
    before = signal.getsignal(signal.SIGTERM)
    with sigterm_as_interrupt() as term:
        pid = os.fork()
        if pid == 0:  # the child: ignores SIGINT, as workers do
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            finally:
                os._exit(0)
        _, status = os.waitpid(pid, 0)
    assert (os.WIFSIGNALED(status), os.WTERMSIG(status) if os.WIFSIGNALED(status) else None) == (True, signal.SIGTERM)
    assert term == [] and signal.getsignal(signal.SIGTERM) is before  # put back as it was


# `fedsim run fedrec --transport asyncio` with a file written as the asyncio run starts (the run's
# AsyncioNetwork.run_async, wrapped: the CLI itself is unchanged), for the test to wait on
ASYNCIO_STARTED = (
    "import sys\n"
    "STARTED = sys.argv.pop(1)\n"
    "from fedsim.kernel.aio import AsyncioNetwork\n"
    "run_async = AsyncioNetwork.run_async\n"
    "async def started(self, *args, **kwargs):\n"
    "    open(STARTED, 'w').close()\n"
    "    return await run_async(self, *args, **kwargs)\n"
    "AsyncioNetwork.run_async = started\n"
    "from fedsim.__main__ import entry\n"
    "raise SystemExit(entry())\n"
)
PYTHON313 = Path("/tmp/venv313/bin/python")  # a local Python 3.13 (where the hang was seen), if there is one


@pytest.mark.parametrize("sigint", ["default", "ignored"])
@pytest.mark.parametrize("python", [
    pytest.param(sys.executable, id="this-python"),
    pytest.param(str(PYTHON313), id="python3.13", marks=pytest.mark.skipif(
        not PYTHON313.exists(), reason=f"no Python 3.13 at {PYTHON313} (a local venv, not in CI)")),
])
def test_sigterm_during_an_asyncio_run_in_debug_mode_ends_it_as_ctrl_c_does(tmp_path, python, sigint):
    # with SIGINT ignored (a background job: `fedsim run ... &` from a script, nohup), SIGTERM
    # raised KeyboardInterrupt wherever the main thread was; under -X dev (asyncio's debug mode)
    # that was mostly inside the event loop's own code (a Handle being made), a callback was
    # lost, and asyncio.run's teardown (_cancel_all_tasks) waited for it forever: a hang. With
    # SIGINT at its default, asyncio.Runner's SIGINT handler cancelled the run (no hang).
    started = tmp_path / "started"
    proc = subprocess.Popen(
        [python, "-X", "dev", "-c", ASYNCIO_STARTED, str(started), "run", "fedrec", "--transport", "asyncio",
         "--set", "T=1000000", "--out", str(tmp_path / "run")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint == "ignored" else None)
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and proc.poll() is None and not started.exists():
            time.sleep(0.005)
        assert started.exists(), "the asyncio run did not start"
        time.sleep(0.5)  # (into the run: its actors exchanging messages)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    # (beside the progress lines, asyncio's debug mode may say a step was slow: "Executing <Task ...> took")
    lines = [ln for ln in stderr.splitlines() if not ln.startswith(("[", "Executing <"))]
    assert (proc.returncode, stdout, lines) == (143, "", ["terminated (SIGTERM): the run's output folder was not written"])
    assert "Traceback" not in stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["started"]
