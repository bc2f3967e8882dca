""""A seed fixes everything" under settings other than the seed: BLAS thread counts (threadpoolctl
limits in the process, OPENBLAS/OMP/MKL_NUM_THREADS before import), NUMBA_NUM_THREADS, sweeps on
one worker or two, interrupted runs continued, node ids past 9,999 clients, and the transports.
(``PYTHONHASHSEED`` and numba on/off: ``test_determinism_across_processes.py``.)

Each run is digested as ``tests/determinism_probe.py`` does (ledger CSV bytes, parameters' bytes,
metrics, info, run outcome); subprocesses only where an environment variable must be set before
NumPy or numba is imported."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from fedsim.kernel import SimNetwork
from fedsim.math import ae_train
from fedsim.math import autoencoder as ae
from fedsim.protocols import REGISTRY, load_plugins

sys.path.insert(0, str(Path(__file__).resolve().parent))
from determinism_probe import digest  # noqa: E402

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


# ------------------------------------------------------------------------------- node order and names


class _Reversed(SimNetwork):
    """A SimNetwork that adds the nodes a protocol's ``build`` places in the reverse order (at
    ``flush``, before the run): the public ``add_node`` in another order."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._held = []

    def add_node(self, *a, **kw):
        self._held.append((a, kw))

    def flush(self):
        held, self._held = self._held[::-1], []
        for a, kw in held:
            SimNetwork.add_node(self, *a, **kw)


def _faulty_run(cls, name):
    from fedsim.kernel import Faults

    spec = REGISTRY[name]
    data, cfg = spec.tiny(8, 3, 3)
    net = cls(seed=3, profile="wan", faults=Faults(loss=0.15, dropout=0.3, window=(0.0, 0.5)))
    job = spec.build(net, data, cfg.replace(deadline=5.0))
    if isinstance(net, _Reversed):
        net.flush()
    return job.collect(net.run()), net


@pytest.mark.parametrize("name", list(REGISTRY))
def test_nodes_added_in_another_order_give_the_same_model_metrics_rows_and_run_lists(name):
    """Aggregation is in node-id order, so the model and the metrics do not depend on the order
    the nodes were added in; the run's lists of dropped-out and unfinished nodes are in node-id
    order too (they were in insertion order). The ledger has the same rows (times, sizes,
    statuses), numbered in the order the actors ran at equal times, which is insertion order
    (docs/concepts.md): only ``seq`` may differ."""
    a, net_a = _faulty_run(SimNetwork, name)
    b, net_b = _faulty_run(_Reversed, name)
    assert list(net_a.nodes) != list(net_b.nodes)
    da, db = digest(a, net_a), digest(b, net_b)
    assert (da["params"], da["metrics"], da["info"], da["missing"]) == (db["params"], db["metrics"], db["info"],
                                                                      db["missing"])
    assert a.run.offline and a.run.offline == sorted(a.run.offline)
    assert (a.run.offline, a.run.unfinished, sorted(a.run.results), a.run.duration) == \
           (b.run.offline, b.run.unfinished, sorted(b.run.results), b.run.duration)
    rows = [sorted(tuple(v for k, v in r.items() if k != "seq") for r in res.ledger.records()) for res in (a, b)]
    assert rows[0] == rows[1] and len(rows[0]) > 0
