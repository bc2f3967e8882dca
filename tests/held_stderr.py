"""The start of the two test scripts that fork a worker while fedsim's progress display is
writing a line to stderr (tests/test_kernel_tcp.py: a TCP run's worker; tests/test_studies_parallel.py:
a pmap worker). Each script is ``PRELUDE`` followed by its own part, which makes ``display``
(a :class:`Progress` to the pipe) and registers :func:`before_fork` with ``os.register_at_fork``,
giving it the function that starts the reader of the pipe.

The prelude makes stderr a pipe that nobody reads until the worker is forked; ``hold_at_fork``
fills that pipe, gives the display new figures (so its thread writes a line, which blocks on the
full pipe holding stderr's lock) and waits until the thread is inside its write, then records in
``state`` whether it was, and starts the reader. ``said`` collects what was read."""

PRELUDE = r'''
import json, os, sys, threading, time

r, w = os.pipe()  # stderr: a pipe nobody reads until the worker is forked
os.dup2(w, 2)
os.close(w)
sys.stderr = open(2, "w", buffering=1, closefd=False)
said, state = [], {"armed": True}


def writing(tid):
    f = sys._current_frames().get(tid)
    while f is not None and f.f_code.co_name != "_line":
        f = f.f_back
    return f is not None


def hold_at_fork(display, drain):  # in the launching process, just before the worker is forked
    if not state.pop("armed", False):
        return
    os.set_blocking(2, False)
    try:
        while True:
            os.write(2, b"." * 4096)  # fill the pipe (through the descriptor: no lock taken)
    except BlockingIOError:
        pass
    os.set_blocking(2, True)
    display.beat(("worker", 1), {"round": 7, "messages": 1, "sim_time": 1.0})  # new figures: a line
    t0 = time.monotonic()
    while time.monotonic() - t0 < 5 and not writing(display._thread.ident):
        time.sleep(0.01)
    state["display writing at the fork"] = writing(display._thread.ident)
    threading.Thread(target=drain, daemon=True).start()
'''
