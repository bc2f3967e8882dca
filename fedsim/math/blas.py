"""One BLAS thread for the matrix products whose last bits depend on the BLAS thread count.

OpenBLAS (NumPy's BLAS) splits some products differently with more threads and then adds their
terms in another order: a float32 ``(10, 1682) @ (1682, 256)`` (an autoencoder's input layer on a
batch of ten users) gives other last bits with two threads than with one. So the NumPy path of the
autoencoders (``autoencoder.loss_and_grads`` and ``predict``, used when numba is not) and
``ae_train``'s joint step gave other parameters under ``OPENBLAS_NUM_THREADS=1`` than under the
default (one thread per core), and ``fedsim run`` in the main process (one thread per core) other
results than the same point of a sweep (whose workers run one BLAS thread:
``studies.parallel``). :func:`one_blas_thread` runs such code with one BLAS thread, whatever the
environment or ``threadpoolctl`` limits say: the results are those of one thread everywhere.

The limit is process-wide while it holds (BLAS libraries have no per-thread setting) and is put
back when the last body under it leaves; it costs about 20 us per use (a ``threadpoolctl`` controller made once, at first
use, after NumPy has loaded its BLAS).
"""

from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

__all__ = ["limited_libraries", "one_blas_thread", "with_one_blas_thread"]

F = TypeVar("F", bound=Callable)

_controller = None
_lock = threading.Lock()
_depth = 0  # bodies under the limit now (nested calls, or several threads of this process)
_limiter = None


def _controller_now():
    global _controller
    if _controller is None:
        import numpy  # noqa: F401  (its BLAS must be loaded before the controller looks for libraries)
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()
    return _controller


def limited_libraries() -> list[str]:
    """The files of the BLAS libraries :func:`one_blas_thread` limits (those loaded when it was
    first used, NumPy's among them; a library loaded later is not limited)."""
    return [lib.filepath for lib in _controller_now().lib_controllers if lib.user_api == "blas"]


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the body with every loaded BLAS library limited to one thread. The limit is set when
    the first body enters and put back when the last one leaves (counted across threads: one
    thread leaving does not lift it under another's body still running)."""
    global _depth, _limiter
    with _lock:
        if _depth == 0:
            _limiter = _controller_now().limit(limits=1, user_api="blas")
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _limiter.restore_original_limits()
                _limiter = None


def with_one_blas_thread(fn: F) -> F:
    """``fn`` run under :func:`one_blas_thread` (a decorator)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with one_blas_thread():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
