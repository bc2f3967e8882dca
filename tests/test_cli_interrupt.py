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
