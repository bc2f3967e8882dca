"""fedsim.forks: what a forked child must not take over from its parent's other threads."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
