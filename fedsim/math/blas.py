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
back on exit; it costs about 20 us per use (a ``threadpoolctl`` controller made once, at first
use, after NumPy has loaded its BLAS).
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

__all__ = ["one_blas_thread", "with_one_blas_thread"]

F = TypeVar("F", bound=Callable)

_controller = None


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the body with every loaded BLAS library limited to one thread (restored after)."""
    global _controller
    if _controller is None:
        import numpy  # noqa: F401  (its BLAS must be loaded before the controller looks for libraries)
        from threadpoolctl import ThreadpoolController

        _controller = ThreadpoolController()
    with _controller.limit(limits=1, user_api="blas"):
        yield


def with_one_blas_thread(fn: F) -> F:
    """``fn`` run under :func:`one_blas_thread` (a decorator)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with one_blas_thread():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
