"""fedsim.forks: what a forked child must not take over from its parent's other threads."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

_HELD_TQDM_SCRIPT = r'''
import json, multiprocessing, os, sys, threading, time
from tqdm import tqdm
from fedsim.kernel import TcpNetwork
from fedsim.studies import parallel

mode, patience = sys.argv[1], float(sys.argv[2])
state = {}
held, free = threading.Event(), threading.Event()


def holder():  # as the progress display's thread while it redraws its bar (or tqdm's monitor)
    with tqdm.get_lock():
        held.set()
        free.wait(30)


threading.Thread(target=holder, daemon=True).start()
held.wait(10)
os.register_at_fork(after_in_parent=free.set)  # the parent's thread lets go once the child is forked


def draw(desc="child"):  # a bar of the child's own (a sweep point's scenario, a plug-in's actor)
    bar = tqdm(total=3, file=sys.stderr, mininterval=0, desc=desc)
    for _ in range(3):
        bar.update(1)
    bar.close()
    return 42


def task(x):
    return draw() + x


async def drawer(ctx):
    return draw()


def hung():
    time.sleep(patience)
    os.write(1, json.dumps({**state, "hung": True}).encode())
    for p in multiprocessing.active_children():
        os.kill(p.pid, 9)
    os._exit(1)


threading.Thread(target=hung, daemon=True).start()
try:
    if mode == "pmap":
        state["child"] = parallel.pmap(task, [0], workers=1, on_error=lambda i, exc: state.update(error=repr(exc)))
    else:
        net = TcpNetwork(processes=1)
        net.add_node("a", drawer)
        state["child"] = net.run(timeout=patience / 2).results
except Exception as exc:
    state["error"] = f"{type(exc).__name__}: {exc}"[:300]
parent = threading.Thread(target=lambda: state.update(parent=draw("parent")), daemon=True)
parent.start()  # the parent's own bar afterwards: tqdm's process-shared lock was given back
parent.join(patience / 4)
os.write(1, json.dumps(state).encode())
os._exit(0)
'''


@pytest.mark.parametrize("mode, child", [("pmap", [42]), ("tcp", {"a": 42})])
def test_a_child_forked_while_another_thread_holds_tqdms_lock_draws_its_own_bar(tmp_path, mode, child):
    # A thread of the parent holding tqdm's lock at the fork (the progress display redrawing its
    # bar on a terminal) does not exist in the child: tqdm's thread lock stayed held there for
    # ever, and a bar the child drew (a sweep point's scenario in a pool's worker, an actor in a
    # TCP worker) waited for ever, holding tqdm's process-shared lock, so the parent's own next
    # bar waited for ever too. The script holds the lock in another thread exactly at the fork.
    script = tmp_path / "held_tqdm.py"
    script.write_text(_HELD_TQDM_SCRIPT)
    res = subprocess.run([sys.executable, str(script), mode, "20"], capture_output=True, timeout=120,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    got = json.loads(res.stdout)
    assert got == {"child": child, "parent": 42}, (got, res.stderr[-2000:])
    assert b"child: 100%" in res.stderr and b"parent: 100%" in res.stderr, res.stderr[-2000:]


# Every fork in the process that runs this prelude (and in its forked children, which inherit the
# wrapper) appends a line to $FORKS_LOG: who forked (the calling file), the other threads alive
# (threading.enumerate()) and, on Linux, the process's OS threads just after the fork, as CPython
# 3.12+ counts them (/proc/self/stat) to warn of a fork with another thread alive (a
# DeprecationWarning attributed to the caller: tcp.py, an error under pytest's filterwarnings);
# such a child can inherit a lock that thread held (the progress display writing to stderr) for
# ever. Read on 3.11 too.
_FORK_RECORDER = r'''
import json, os, sys, threading
_fork, _forks_log = os.fork, os.environ["FORKS_LOG"]


def _os_threads():
    try:
        with open("/proc/self/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[17])
    except OSError:  # (not Linux)
        return 1


def _recording_fork():
    me = threading.current_thread()
    seen = {"pid": os.getpid(), "by": os.path.basename(sys._getframe(1).f_code.co_filename),
            "others": sorted(t.name for t in threading.enumerate() if t is not me)}
    pid = _fork()
    if pid:  # (in the parent, where 3.12 counts them)
        seen["os_threads"] = _os_threads()
        fd = os.open(_forks_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, (json.dumps(seen) + "\n").encode())
        os.close(fd)
    return pid


os.fork = _recording_fork
'''

_TCP_UNDER_A_DISPLAY = _FORK_RECORDER + r'''
import io
from fedsim.experiment import Progress
from fedsim.kernel import TcpNetwork


async def sender(ctx):
    await ctx.send("b", "k", 1)


async def receiver(ctx):
    return (await ctx.receive("k")).payload


display = Progress(True, stream=io.StringIO(), tty=sys.argv[1] == "bar")
display.update(0, 1, stage="tcp")  # (its thread starts here, as a scenario's first update starts it)
before = sorted(t.name for t in threading.enumerate() if t is not threading.current_thread())
net = TcpNetwork(processes=2)
net.add_node("a", sender)
net.add_node("b", receiver)
results = net.run(timeout=60).results
after = sorted(t.name for t in threading.enumerate() if t is not threading.current_thread())
display.update(1, 1)
display.close()
print(json.dumps({"before": before, "after": after, "results": results, "rows": len(net.ledger)}))
'''


def _forks(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("mode", ["bar", "lines"])
def test_a_tcp_run_under_a_progress_display_forks_with_no_other_thread_alive(tmp_path, mode):
    # A scenario's progress display (a tqdm bar on a terminal, plain lines elsewhere) runs a
    # thread of its own from its first update on, and a bar has tqdm's monitor thread too: the
    # TcpNetwork the scenario then ran forked its workers with both alive. Now they are stopped
    # while it forks and the display's is started again after (tqdm's monitor is not started).
    script = tmp_path / "tcp_under_a_display.py"
    script.write_text(_TCP_UNDER_A_DISPLAY)
    log = tmp_path / "forks.jsonl"
    res = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), "FORKS_LOG": str(log)})
    assert res.returncode == 0, res.stderr[-3000:]
    got, forks = json.loads(res.stdout), _forks(log)
    assert [(f["by"], f["others"], f["os_threads"]) for f in forks] == [("tcp.py", [], 1)] * 2, forks
    assert got["results"] == {"a": None, "b": 1} and got["rows"] == 1
    # the display's thread was running as the run began (and tqdm's monitor was not), and runs
    # again after: the display goes on
    assert got["before"] == got["after"] == ["fedsim-progress"], got


def _drain_pty(proc, master: int, limit: float = 120.0) -> bytes:
    """Everything written to the terminal ``master`` until every process holding it has closed it."""
    import select
    import time

    out, end = bytearray(), time.monotonic() + limit
    while time.monotonic() < end:
        if select.select([master], [], [], 0.5)[0]:
            try:
                data = os.read(master, 65536)
            except OSError:  # (EIO: the last holder of the terminal has gone)
                break
            if not data:
                break
            out += data
    proc.wait(10)
    return bytes(out)


@pytest.mark.parametrize("how", ["terminal", "quiet"])
def test_fedsim_run_on_tcp_forks_with_no_other_thread_alive(tmp_path, how):
    # `fedsim run demo --transport tcp`: its run's display (a bar on a terminal, with tqdm's monitor
    # thread; with --quiet still the thread that writes run.log) started before the protocol's
    # network was run, and that network forked its 4 workers with those threads alive.
    import fcntl
    import pty
    import struct
    import termios

    log = tmp_path / "forks.jsonl"
    out = tmp_path / "run"
    args = ["run", "demo", "--transport", "tcp", "--set", "rounds=2", "--out", str(out)]
    args += ["--quiet"] if how == "quiet" else []
    code = _FORK_RECORDER + "\nfrom fedsim.__main__ import entry\nsys.exit(entry())\n"
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))  # (0 columns: tqdm drew nothing)
    try:
        proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=slave,
                                cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), "FORKS_LOG": str(log)})
        os.close(slave)
        slave = -1
        shown = _drain_pty(proc, master)
        stdout = proc.stdout.read().decode()
        proc.stdout.close()
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    assert proc.returncode == 0, shown.decode(errors="replace")[-3000:]
    assert "results in" in stdout and (out / "run.log").exists()
    forks = _forks(log)
    assert [f["by"] for f in forks] == ["tcp.py"] * 4  # (demo's server and 3 clients, a process each)
    assert [(f["others"], f["os_threads"]) for f in forks] == [([], 1)] * 4, forks
    if how == "terminal":
        assert b"demo on" in shown  # (the bar was drawn on the terminal)


def test_threads_paused_stops_the_displays_thread_and_starts_it_again_unless_closed_meanwhile():
    import io

    from fedsim.experiment import Progress
    from fedsim.forks import threads_paused

    stream = io.StringIO()
    p = Progress(True, stream=stream, tty=False)
    p.update(0, 2, stage="paused")
    first = p._thread
    with threads_paused():
        assert not first.is_alive() and p._thread is None  # stopped, and waited for
        p.update(1, 2)  # (a step meanwhile is shown, and starts no thread: that is for the end)
        assert p._thread is None
    assert p._thread is not first and p._thread.is_alive() and p._thread.name == "fedsim-progress"
    second = p._thread
    with threads_paused():
        p.close()
    assert p._thread is None and not second.is_alive()  # closed: not started again
    assert [ln.split("] ", 1)[1].split(",")[0] for ln in stream.getvalue().splitlines()] == ["paused 0/2", "paused 1/2"]
    p.finish()


def test_a_sweep_of_tcp_points_forks_its_workers_and_theirs_with_no_other_thread_alive(tmp_path):
    # `fedsim sweep ... --transport tcp`: the sweep's display thread was alive as the pool forked
    # each point's worker, and in the worker the point's run.log thread and the worker's
    # fedsim-beats were alive as the point's TcpNetwork forked its processes.
    log = tmp_path / "forks.jsonl"
    # (without matplotlib: the sweep's plots took longer than the rest)
    code = _FORK_RECORDER + "\nsys.modules['matplotlib'] = None\nfrom fedsim.__main__ import entry\nsys.exit(entry())\n"
    res = subprocess.run([sys.executable, "-c", code, "sweep", "demo", "--transport", "tcp", "--set", "rounds=2",
                          "--grid", "seed=0", "--workers", "1", "--out", str(tmp_path / "sweep")],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(REPO), "FORKS_LOG": str(log)})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "sweep: 1 point, 1 run, 0 already done, 0 failed" in res.stdout, res.stdout
    forks = _forks(log)
    sweep = forks[0]["pid"]
    pools = [f for f in forks if f["pid"] == sweep]
    points = [f for f in forks if f["pid"] != sweep]
    # the point's worker, forked by multiprocessing, and the 4 processes of its TCP run
    assert [f["by"] for f in pools] == ["popen_fork.py"] and [f["by"] for f in points] == ["tcp.py"] * 4
    assert [(f["others"], f["os_threads"]) for f in forks] == [([], 1)] * 5, forks


_PMAP_TCP_AFTER_BEATS = _FORK_RECORDER + r'''
import time
from fedsim.experiment import live
from fedsim.experiment.live import activate
from fedsim.kernel import SimNetwork, TcpNetwork
from fedsim.studies.parallel import pmap

live.BEAT_EVERY = 0.05  # (the workers are forked: they inherit it)


class Display:
    def __init__(self):
        self.beats = []

    def beat(self, source, snap):
        self.beats.append(snap)


async def sender(ctx):
    await ctx.send("b", "k", 1)


async def slow_receiver(ctx):
    got = (await ctx.receive("k")).payload
    time.sleep(0.5)  # (the network stays on its first message: the worker's beats say so meanwhile)
    return got


async def receiver(ctx):
    return (await ctx.receive("k")).payload


def task(x):  # a run whose figures the worker beats, then a TcpNetwork in the same worker
    sim = SimNetwork()
    sim.add_node("a", sender)
    sim.add_node("b", slow_receiver)
    first = sim.run().results["b"]
    net = TcpNetwork(processes=1)
    net.add_node("a", sender)
    net.add_node("b", receiver)
    return [first, net.run(timeout=60).results["b"], x]


display = Display()
activate(display)
out = pmap(task, [0, 1], workers=2)
print(json.dumps({"out": out, "beats": [b["messages"] for b in display.beats if b is not None]}))
'''


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc/self/task (Linux) to see OS threads")
def test_a_paused_displays_thread_has_left_the_os_when_threads_paused_returns():
    # Thread.join returns a moment before the OS thread has exited (CPython 3.11, 3.12): a TCP
    # run's fork in that moment was counted by the fork test above as made with 2 OS threads
    # (in a CI run), and 3.12 warns of it. threads_paused now waits until the thread has left.
    import io

    from fedsim.experiment import Progress
    from fedsim.forks import threads_paused

    p = Progress(True, stream=io.StringIO(), tty=False)
    p.update(0, 1000, stage="paused")
    still_there = []
    for i in range(1000):
        thread = p._thread
        with threads_paused():
            still_there.append(os.path.exists(f"/proc/self/task/{thread.native_id}"))
        p.update(i + 1, 1000)
    p.close()
    p.finish()
    assert still_there == [False] * 1000, f"{sum(still_there)} of 1000 pauses returned with the thread in the OS"


def test_a_display_whose_thread_start_a_ctrl_c_interrupted_still_closes(monkeypatch):
    # A Ctrl-C as a TCP run's fork ended came inside resume_thread's Thread.start (a CI run):
    # close() then joined a thread never started, and its RuntimeError replaced the interrupted line
    import io
    import threading

    from fedsim.experiment import Progress
    from fedsim.forks import threads_paused

    p = Progress(True, stream=io.StringIO(), tty=False)
    p.update(0, 2, stage="s")

    def interrupted_start(self):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with threads_paused():
            monkeypatch.setattr(threading.Thread, "start", interrupted_start)
    monkeypatch.undo()
    p.close()
    assert p._thread is None
    p.finish()


def test_wait_for_os_thread_exit_waits_for_a_joined_thread_and_gives_up_on_a_running_one():
    import threading

    from fedsim.forks import wait_for_os_thread_exit

    stop = threading.Event()
    running = threading.Thread(target=stop.wait, args=(30,))
    running.start()
    try:
        assert wait_for_os_thread_exit(running, timeout=0.05) is (not os.path.isdir("/proc/self/task"))
    finally:
        stop.set()
        running.join()
    assert wait_for_os_thread_exit(running) is True
    assert not os.path.exists(f"/proc/self/task/{running.native_id}")
    assert wait_for_os_thread_exit(threading.Thread(target=print)) is True  # (never started: no native id)


def test_a_pool_worker_that_beat_forks_its_tcp_processes_with_no_other_thread_alive(tmp_path):
    # A pool's worker sent its figures through a multiprocessing.Queue, whose feeder thread
    # runs from the first beat on and cannot be stopped and started again: a task that ran a
    # network (beaten) and then a TcpNetwork forked its processes with that thread alive, and
    # with the worker's fedsim-beats. The beats go through a pipe now, the thread stopped meanwhile.
    script = tmp_path / "pmap_tcp.py"
    script.write_text(_PMAP_TCP_AFTER_BEATS)
    log = tmp_path / "forks.jsonl"
    # (FEDSIM_NO_NUMBA: pmap starts no compiler before it forks, which these tasks do not call)
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(REPO), "FORKS_LOG": str(log), "FEDSIM_NO_NUMBA": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    got, forks = json.loads(res.stdout), _forks(log)
    assert got["out"] == [[1, 1, 0], [1, 1, 1]]
    assert got["beats"] and set(got["beats"]) == {1}  # (the workers' beats came: one message sent)
    assert sorted(f["by"] for f in forks) == ["popen_fork.py"] * 2 + ["tcp.py"] * 2
    assert [(f["others"], f["os_threads"]) for f in forks] == [([], 1)] * 4, forks


def test_the_displays_bar_starts_no_monitor_thread_and_takes_turns_with_the_programs_own_bars():
    # tqdm's monitor thread (started by a bar of the tqdm class, once per process) was alive
    # whenever the display drew a bar, and so as a run forked; the display's bar class has no
    # monitor, and takes tqdm's lock (one it made itself would not be the program's bars' lock).
    code = r'''
import io, json, threading
from tqdm import tqdm
from fedsim.experiment import Progress

p = Progress(True, stream=io.StringIO(), tty=True)
p.update(0, 1, stage="bar")
threads = sorted(t.name for t in threading.enumerate())
own = tqdm(total=2, file=io.StringIO())  # the program's own bar, after the display's
print(json.dumps({"threads": threads, "a tqdm": isinstance(p._bar, tqdm),
                  "shared lock": type(p._bar).get_lock() is tqdm.get_lock() is type(own).get_lock()}))
own.close()
p.close()
'''
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout)
    assert got == {"threads": ["MainThread", "fedsim-progress"], "a tqdm": True, "shared lock": True}


def test_a_displays_thread_that_ended_by_itself_is_not_started_again_by_a_fork():
    # the display's thread stops showing when its stream is closed under it: a fork's pause and
    # resume must not start it again (it would only fail again, at every fork)
    import io

    from fedsim.experiment import Progress
    from fedsim.forks import threads_paused

    class Closing(io.StringIO):
        def write(self, text):
            if self.closed_now:
                raise ValueError("I/O operation on closed file")
            return super().write(text)

    stream = Closing()
    stream.closed_now = False
    p = Progress(True, stream=stream, tty=False, heartbeat=0.0)
    p.TICK = 0.01
    p.update(0, 1, stage="s")
    ended = p._thread
    stream.closed_now = True
    p.beat(("worker", 1), {"round": 1, "messages": 1, "sim_time": 0.5})  # new figures: the thread writes, and ends
    ended.join(30)
    assert not ended.is_alive()
    with threads_paused():
        pass
    assert p._thread is ended  # not started again
    p.close()
    p.finish()
