"""The start of the two test scripts that fork a worker while a thread of the launching program's
own is writing a line to stderr (tests/test_kernel_tcp.py: a TCP run's worker;
tests/test_studies_parallel.py: a pmap worker). Each script is ``PRELUDE`` followed by its own
part, which makes ``display`` (a :class:`Progress` to the pipe, its thread running) and registers
:func:`hold_at_fork` with ``os.register_at_fork``, giving it the function that starts the reader
of the pipe.

The prelude makes stderr a pipe that nobody reads until the worker is forked; ``hold_at_fork``
fills that pipe, starts a thread of the program's own that writes a line (which blocks on the
full pipe holding stderr's lock) and waits until the thread is inside its write, then records in
``state`` whether it was, and which of fedsim's threads are alive (the display's is stopped
while fedsim forks: it used to be the writer here), and starts the reader. ``said`` collects
what was read."""

PRELUDE = r'''
import json, os, sys, threading, time

r, w = os.pipe()  # stderr: a pipe nobody reads until the worker is forked
os.dup2(w, 2)
os.close(w)
sys.stderr = open(2, "w", buffering=1, closefd=False)
said, state = [], {"armed": True}


def writing(tid):
    f = sys._current_frames().get(tid)
    while f is not None and f.f_code.co_name != "own_line":
        f = f.f_back
    return f is not None


def own_line():  # a thread of the program's own: its write blocks on the full pipe, holding stderr's lock
    print("the program's own line", file=sys.stderr, flush=True)


def hold_at_fork(drain):  # in the launching process, just before the worker is forked
    if not state.pop("armed", False):
        return
    os.set_blocking(2, False)
    try:
        while True:
            os.write(2, b"." * 4096)  # fill the pipe (through the descriptor: no lock taken)
    except BlockingIOError:
        pass
    os.set_blocking(2, True)
    writer = threading.Thread(target=own_line, name="own-writer", daemon=True)
    writer.start()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 5 and not writing(writer.ident):
        time.sleep(0.01)
    state["own thread writing at the fork"] = writing(writer.ident)
    state["fedsim threads at the fork"] = sorted(t.name for t in threading.enumerate() if t.name.startswith("fedsim-"))
    threading.Thread(target=drain, daemon=True).start()
'''
