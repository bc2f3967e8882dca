"""``python -m fedsim``, and the ``fedsim`` console script (:func:`entry`)."""

import sys


def entry() -> int:
    """The command line, with a Ctrl-C while fedsim is still importing (NumPy, numba, the
    protocols: a second or more after the command is typed) ending as one that comes later
    does: one ``interrupted`` line and status 130, not Python's traceback of the import
    (:func:`fedsim.cli.main` catches only what comes once it runs)."""
    try:
        from .cli import main
    except KeyboardInterrupt:
        print("interrupted: nothing was run or written", file=sys.stderr)
        return 130
    return main()


if __name__ == "__main__":
    raise SystemExit(entry())
