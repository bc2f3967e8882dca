"""fedsim.signals.sigterm_as_interrupt: the one SIGTERM handling of fedsim's command lines."""

import os
import signal
import threading

import pytest

from fedsim.signals import sigterm_as_interrupt


def _term() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_is_a_keyboard_interrupt_each_time_and_the_handler_is_put_back():
    before = signal.getsignal(signal.SIGTERM)
    with sigterm_as_interrupt() as term:
        with pytest.raises(KeyboardInterrupt):
            _term()
        assert term == [signal.SIGTERM]
        with pytest.raises(KeyboardInterrupt):  # a second one stops the cleanup too
            _term()
        assert term == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is before


def test_with_once_a_second_sigterm_lets_the_cleanup_finish():
    # python -m fedsim.data: the first SIGTERM stops the download, a second one must not stop
    # the removal of what it wrote
    cleaned = []
    with sigterm_as_interrupt(once=True) as term:
        try:
            _term()
        except KeyboardInterrupt:
            _term()  # during the cleanup: ignored
            cleaned.append(True)
    assert term == [signal.SIGTERM] and cleaned == [True]


def test_an_ignored_sigterm_stays_ignored_and_other_threads_are_left_alone():
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with sigterm_as_interrupt() as term:
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
            _term()  # ignored: nothing raised
        assert term == [] and signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)
    seen = []

    def other():
        with sigterm_as_interrupt() as term:
            seen.append((term, signal.getsignal(signal.SIGTERM)))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == [([], signal.getsignal(signal.SIGTERM))]


def test_sigterm_calls_the_sigint_handler_in_place():
    # a TCP run's or a sweep's SIGINT handler stops its own work: SIGTERM goes through it
    calls = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: calls.append(signum))
    try:
        with sigterm_as_interrupt() as term:
            _term()  # the handler records it, raises nothing
        assert calls == [signal.SIGINT] and term == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_sigterm_with_sigint_ignored_is_held_back_by_sigint_deferred_as_a_ctrl_c_is():
    # `fedsim sweep ... &` from a script runs with SIGINT ignored: a SIGTERM (kill PID) then
    # raised KeyboardInterrupt at once, in the middle of the blocks sigint_deferred holds a Ctrl-C
    # back over (a fork, concurrent.futures.wait taking its locks, numba's imports, which lost it)
    import time

    from fedsim.signals import sigint_deferred

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with sigterm_as_interrupt() as term:
            reached = []
            with pytest.raises(KeyboardInterrupt):
                with sigint_deferred():
                    _term()
                    time.sleep(0.05)  # (the handler runs at the next bytecodes: within the block)
                    reached.append(1)
            assert reached == [1] and term == [signal.SIGTERM]
            with pytest.raises(KeyboardInterrupt):
                with sigint_deferred():
                    with sigint_deferred():
                        _term()
                        time.sleep(0.05)
                    reached.append(2)  # the inner block passes it on to the outer one
                reached.append(3)
            assert reached == [1, 2]
            with sigint_deferred():  # nothing received: nothing raised
                reached.append(4)
            assert reached == [1, 2, 4] and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            with pytest.raises(KeyboardInterrupt):  # outside a block: at once, as before
                _term()
                time.sleep(0.05)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_an_interrupt_held_back_while_the_block_fails_is_raised_with_the_failure_as_its_context():
    # held back over a block that then raised (a fork that failed), the Ctrl-C was dropped: the
    # command ended with the block's error, not "interrupted", as it would have without the hold
    import time

    from fedsim.signals import sigint_deferred

    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt) as got:
        with sigint_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # (the recording handler runs by here)
            raise OSError("fork failed")
    assert isinstance(got.value.__context__, OSError) and str(got.value.__context__) == "fork failed"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(OSError):  # no interrupt held: the error as it is
        with sigint_deferred():
            raise OSError("fork failed")
    # SIGINT ignored, a SIGTERM under sigterm_as_interrupt held back, in nested blocks
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with sigterm_as_interrupt() as term:
            with pytest.raises(KeyboardInterrupt) as got:
                with sigint_deferred():
                    with sigint_deferred():
                        _term()
                        time.sleep(0.05)
                        raise OSError("fork failed")
            assert term == [signal.SIGTERM] and isinstance(got.value.__context__, OSError)
    finally:
        signal.signal(signal.SIGINT, previous)
