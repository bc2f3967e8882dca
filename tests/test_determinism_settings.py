""""A seed fixes everything" under settings other than the seed: BLAS thread counts (threadpoolctl
limits in the process, OPENBLAS/OMP/MKL_NUM_THREADS before import), NUMBA_NUM_THREADS, sweeps on
one worker or two, interrupted runs continued, node ids past 9,999 clients, and the transports.
(``PYTHONHASHSEED`` and numba on/off: ``test_determinism_across_processes.py``.)

Each run is digested as ``tests/determinism_probe.py`` does (ledger CSV bytes, parameters' bytes,
metrics, info, run outcome); subprocesses only where an environment variable must be set before
NumPy or numba is imported."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from fedsim.math import ae_train
from fedsim.math import autoencoder as ae
from fedsim.protocols import load_plugins

load_plugins(entry_points=False)


def _two_blas_threads_change_bits() -> bool:
    """Whether this machine's BLAS gives other bits with two threads than with one (it cannot show
    anything with one core and a pool capped at one thread)."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(10, 1682)).astype(np.float32)
    w = rng.normal(size=(256, 1682)).astype(np.float32)
    with threadpool_limits(1):
        one = (w @ a.T).tobytes()
    with threadpool_limits(2):
        two = (w @ a.T).tobytes()
    return one != two


# ------------------------------------------------------------------------------------------- BLAS threads


def test_the_numpy_autoencoder_gives_the_same_bits_whatever_the_blas_thread_count():
    """The NumPy path of the autoencoders (PersonalFR and FedAvg without numba) at ML-100K's
    width: its products were split among BLAS threads (other last bits with two threads than with
    one: another model under OPENBLAS_NUM_THREADS=1 than under the default). Now one thread."""
    if not _two_blas_threads_change_bits():
        pytest.skip("this BLAS gives the same bits with one thread and two: nothing to tell apart here")
    rng = np.random.default_rng(1)
    n_items = 1682
    mask = rng.random((20, n_items)) < 0.06
    x = rng.integers(1, 6, size=mask.shape).astype(np.float32) * mask
    p0 = ae.init_params(n_items, np.random.default_rng(2))
    out = {}
    for threads in (1, 2):
        with threadpool_limits(threads):
            p = ae.copy_params(p0)
            ae_train.local_train(p, None, x, x, mask, epochs=1, batch=10, lr=0.01, rng=np.random.default_rng(3),
                                 dropout=0.0)
            z = ae.predict(p, x[:5])
        out[threads] = [p[k].tobytes() for k in p] + [z.tobytes()]
    assert out[1] == out[2]
