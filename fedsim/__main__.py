"""``python -m fedsim``, and the ``fedsim`` console script (:func:`entry`)."""

import signal
import sys

from .signals import returns_its_status  # (standard library only: nothing to interrupt)


@returns_its_status
def entry() -> int:
    """The command line, with a Ctrl-C or SIGTERM while fedsim is still importing (NumPy, numba,
    the protocols: a second or more after the command is typed) ending as one that comes later
    does: one ``interrupted`` (``terminated (SIGTERM)``) line and status 130 (143), not Python's
    traceback of the import, nor, for SIGTERM, an end without a word (:func:`fedsim.cli.main`
    handles only what comes once it runs). SIGTERM's handler is put back as it was after the
    import; one set to be ignored stays ignored."""
    from .signals import sigterm_as_interrupt

    with sigterm_as_interrupt() as term:
        try:
            from .cli import main
        except KeyboardInterrupt:
            if term:
                print("terminated (SIGTERM): nothing was run or written", file=sys.stderr)
                return 128 + signal.SIGTERM
            print("interrupted: nothing was run or written", file=sys.stderr)
            return 130
    return main()


if __name__ == "__main__":
    raise SystemExit(entry())
