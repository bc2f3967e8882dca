""""A seed fixes everything" under settings other than the seed: BLAS thread counts (threadpoolctl
limits in the process, OPENBLAS/OMP/MKL_NUM_THREADS before import), NUMBA_NUM_THREADS, another
CPU's BLAS kernels, nodes added in another order, node ids past 9,999 clients, no unseeded
randomness, sweeps on one worker or two and against ``fedsim run``, and runs continued or resumed
from a checkpoint. (``PYTHONHASHSEED`` and numba on/off: ``test_determinism_across_processes.py``;
the transports, bit for bit: ``test_kernel_tcp.py`` and ``test_compare.py``.)

Each run is digested as ``tests/determinism_probe.py`` does (ledger CSV bytes, parameters' bytes,
metrics, info, run outcome); subprocesses only where an environment variable must be set before
NumPy or numba is imported."""

from __future__ import annotations

import json
import os
import platform
import subprocess
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

REPO = Path(__file__).resolve().parents[1]
PROBE = REPO / "tests" / "determinism_probe.py"

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



def test_one_blas_thread_holds_until_the_last_body_under_it_leaves():
    """Two threads under ``one_blas_thread`` at once (bodies left in another order than entered):
    the first to leave put back the limit it had found (two threads) while the other's products
    still ran, and the last one put back the one thread it had found. Now the limit holds until
    the last body leaves, then the original comes back."""
    from threadpoolctl import threadpool_info

    from fedsim.math.blas import limited_libraries, one_blas_thread

    mine = set(limited_libraries())  # NumPy's BLAS (a library loaded later, SciPy's, is not limited)

    def blas_threads():
        return {i["num_threads"] for i in threadpool_info() if i["filepath"] in mine}

    with threadpool_limits(2):
        if blas_threads() != {2}:
            pytest.skip("no BLAS here that runs two threads")
        a, b = one_blas_thread(), one_blas_thread()
        a.__enter__()
        b.__enter__()
        assert blas_threads() == {1}
        a.__exit__(None, None, None)
        assert blas_threads() == {1}
        b.__exit__(None, None, None)
        assert blas_threads() == {2}

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


def test_client_ids_sort_in_client_order_past_9999_clients():
    """Servers aggregate in node-id (string) order: ``client_names`` pads every id to the width of
    the largest, so 'client/09999' sorts before 'client/10000' and id order is client order."""
    from fedsim.protocols.common import client_name, client_names

    for n in (1, 10, 9_999, 10_000, 10_001, 100_001):
        names = client_names(n)
        assert names == sorted(names) and len(set(names)) == n
        assert names[-1] == client_name(n - 1, n) == f"client/{n - 1:0{max(4, len(str(n - 1)))}d}"
    assert client_names(10_001)[9_999:] == ["client/09999", "client/10000"]


# ----------------------------------------------------------------------- every protocol, thread settings


PROBE_RUNS = ("demo/wan,fedrec/wan,fedrec/pmfs-faults,fedrec/svdpp-tcp,fedrecpp/faults,fpl/faults,fcf/wan,"
              "personalfr/eval-loss,fedavg-ae/eval-loss")


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_protocol_gives_the_same_bytes_under_one_blas_thread_and_two(name):
    from determinism_probe import run_one, variants

    todo = {k: v for k, v in variants().items() if v[0] == name and k.split("/")[1] in ("wan", "faults")}
    assert len(todo) == 2
    for run, spec in todo.items():
        got = {}
        for threads in (1, 2):
            with threadpool_limits(threads):
                got[threads] = run_one(spec)
        assert got[1] == got[2], run


def _probe(env: dict, runs: str = PROBE_RUNS) -> dict:
    full = {k: v for k, v in os.environ.items()
            if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")}
    full.update(env, PYTHONHASHSEED="0")
    full["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
    res = subprocess.run([sys.executable, str(PROBE), "--only", runs], env=full, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, f"probe with {env} failed:\n{res.stderr[-4000:]}"
    return json.loads(res.stdout)


def test_thread_count_environment_variables_set_before_import_change_no_byte():
    """OPENBLAS/OMP/MKL_NUM_THREADS (read once, when NumPy loads its BLAS) at 1 and 2 and unset,
    and NUMBA_NUM_THREADS=1 (numba's default is one per core), in fresh processes."""
    unset = _probe({})
    assert set(unset) == set(PROBE_RUNS.split(","))
    one = {v: "1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")}
    two = {v: "2" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    assert _probe(one) == unset
    assert _probe(two) == unset


def test_no_numba_kernel_runs_in_parallel():
    """NUMBA_NUM_THREADS can change nothing while no kernel is compiled with parallel=True (a
    prange reduction would add in an order that depends on it)."""
    for path in sorted((REPO / "fedsim").rglob("*.py")):
        text = path.read_text()
        assert "parallel=True" not in text and "numba.prange" not in text and "import prange" not in text, path


# ------------------------------------------------------------------------------ randomness and time


# every use in fedsim/ of a source of randomness other than seeded generators, and why it cannot
# reach a result (a new use must be added here, with its reason, once checked)
UNSEEDED_OK = {
    ("kernel/tcp.py", "os.urandom"): "the connection's authentication token",
    ("experiment/runner.py", "uuid"): "a temporary folder's name",
    ("kernel/ledger.py", "secrets."): "a temporary file's name",
}


def test_no_unseeded_randomness_or_clock_reaches_a_seed():
    import re

    pattern = re.compile(r"default_rng\(\s*\)|np\.random\.(seed|rand|randn|randint|random|choice|shuffle|"
                         r"permutation|normal|uniform)\(|\bimport random\b|os\.urandom|\buuid\b|secrets\.|"
                         r"SeedSequence\(\s*\)|PCG64\(\s*\)|seed\s*=\s*(int\()?time\.|hash\(str")
    found = set()
    for path in sorted((REPO / "fedsim").rglob("*.py")):
        rel = path.relative_to(REPO / "fedsim").as_posix()
        for line in path.read_text().splitlines():
            code = line.split("#", 1)[0]
            for m in pattern.finditer(code):
                tok = m.group(0)
                key = next((k for k in UNSEEDED_OK if k[0] == rel and k[1] in tok), None)
                assert key is not None, f"fedsim/{rel}: {line.strip()}"
                found.add(key)
    assert found == set(UNSEEDED_OK)  # (the allowed uses are still there: the pattern still finds them)


# ------------------------------------------------------------------------------------------------ sweeps


_TIMING = {"wall_time_s", "finished", "measured_time_s"}


def _point_files(folder: Path) -> dict:
    """A run folder's CSV bytes and results.json without its wall-clock fields."""
    out = {p.name: p.read_bytes() for p in sorted(folder.glob("*.csv"))}
    res = json.loads((folder / "results.json").read_text())
    out["results.json"] = {k: v for k, v in res.items() if k not in _TIMING}
    return out


@pytest.mark.parametrize("name", ["fpl", "personalfr"])
def test_a_sweep_gives_the_same_points_on_one_worker_and_two_and_as_fedsim_run(name, tmp_path):
    """Each point of a sweep (run in a worker process with one BLAS thread) gives the same CSV
    bytes, ledger and results.json (but for wall-clock fields) on one worker and on two, and the
    same as ``fedsim run`` of that point in this process."""
    from fedsim.cli import main
    from fedsim.studies.sweep import run_sweep

    fixed = {"rounds": 2, **({"clients": 6} if name == "personalfr" else {})}
    grid = {"seed": [0, 1]}
    for workers in (1, 2):
        s = run_sweep(name, grid, tmp_path / f"w{workers}", data="tiny", fixed=fixed, profile="wan", workers=workers,
                      ledger=True)
        assert len(s["done"]) == 2 and not s["failed"]
    for point in ("seed=0", "seed=1"):
        one, two = _point_files(tmp_path / "w1" / point), _point_files(tmp_path / "w2" / point)
        assert "ledger.csv" in one and one == two, point
    sets = [a for k, v in fixed.items() for a in ("--set", f"{k}={v}")]
    assert main(["run", name, "--data", "tiny", *sets, "--seed", "1", "--profile", "wan", "--ledger", "--quiet",
                 "--out", str(tmp_path / "run")]) == 0
    alone, point = _point_files(tmp_path / "run"), _point_files(tmp_path / "w2" / "seed=1")
    assert alone.keys() == point.keys()
    for f in alone:
        assert alone[f] == point[f], f


# ---------------------------------------------------------------------------------- continued runs


def _pieces(name, changes, seeds):
    """``name``'s tiny run of 4 rounds in one network, and in two of 2 rounds each, the second
    continuing the first (``build(..., resume=first)``) on networks seeded ``seeds``."""
    spec = REGISTRY[name]
    data, cfg = spec.tiny(5, 4, 1)
    cfg = cfg.replace(**changes)
    net = SimNetwork(seed=seeds[0], profile="wan")
    whole = spec.build(net, data, cfg).collect(net.run())
    half = cfg.replace(**{spec.rounds_field: 2})
    net = SimNetwork(seed=seeds[0], profile="wan")
    first = spec.build(net, data, half).collect(net.run())
    net = SimNetwork(seed=seeds[1], profile="wan")
    second = spec.build(net, data, half, resume=first).collect(net.run())
    return whole, first, second


def test_fcf_continued_from_a_result_gives_the_uninterrupted_runs_bits():
    """FCF draws nothing after its initial Q: two pieces of 2 rounds (the second continuing the
    first's Q, Adam state and round numbers) are the run of 4 rounds, to the last bit, whatever the
    second network's seed."""
    for seeds in ((2, 2), (2, 9)):
        whole, _, second = _pieces("fcf", {}, seeds)
        assert whole.params.keys() == second.params.keys()
        for k in whole.params:
            assert np.asarray(whole.params[k]).tobytes() == np.asarray(second.params[k]).tobytes(), k
        assert second.info["rounds_done"] == whole.info["rounds_done"] == 4
        assert second.ledger.rounds() == [2, 3]


def test_fpl_continued_from_a_result_is_reproducible_but_not_the_uninterrupted_run():
    """What docs/fpl.md says of a continued FPL run: its network draws from its own seed from the
    start (the server, handed Theta_S, skips its initial draw; each client, handed p_u, skips
    its own), so the second piece's selections and triples are neither the uninterrupted run's
    nor the first piece's: another model, the same one every time it is run."""
    whole, first, second = _pieces("fpl", {"clients_per_round": 2}, (2, 2))
    _, _, again = _pieces("fpl", {"clients_per_round": 2}, (2, 2))

    def chosen(res, rounds):
        rows = [r for r in res.ledger.records() if r["kind"] == "model"]
        return [sorted(r["dst"] for r in rows if r["round"] == t) for t in rounds]

    assert chosen(whole, (0, 1)) == chosen(first, (0, 1))
    assert chosen(whole, (2, 3)) != chosen(second, (2, 3))
    assert whole.params["theta"].tobytes() != second.params["theta"].tobytes()
    assert digest(second, None) == digest(again, None)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_fpl_study_resumed_from_its_checkpoint_gives_the_uninterrupted_runs_bits(dtype, tmp_path):
    """run_fpl through the run cache: 1 epoch, then asked for 3 (continued from the stored model,
    each epoch on its own seed), against 3 at once: the same curve (but for wall-clock fields) and
    the same stored model, bit for bit."""
    from fedsim.studies.fpl.cache import run_cached
    from fedsim.studies.fpl.runs import run_fpl
    from test_fpl_study import small_split

    sp = small_split()
    params = dict(preset="sFPL", pi=0.5, d=4, lr=0.05, seed=3, dtype=dtype)

    def fn(n, **kw):
        return run_fpl(sp, epochs=n, **params, **kw)

    whole, _ = run_cached(tmp_path / "a", sp, "sFPL", params, fn, 3, resumable=True)
    run_cached(tmp_path / "b", sp, "sFPL", params, fn, 1, resumable=True)
    resumed, cached = run_cached(tmp_path / "b", sp, "sFPL", params, fn, 3, resumable=True)
    assert not cached and len(resumed.curve) == 3

    def timeless(rec):
        return [{k: v for k, v in e.items() if k not in ("train_s", "wall_s")} for e in rec.curve]

    assert timeless(whole) == timeless(resumed)
    a, b = (np.load(next((tmp_path / x).glob("*.npz"))) for x in ("a", "b"))
    assert int(a["epoch"]) == int(b["epoch"]) == 3 and a["theta"].dtype == np.dtype(dtype)
    for k in ("theta", "P"):
        assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes(), k


# ------------------------------------------------------------------------------------- another CPU


ANY_CPU = ("fedrec", "fedrecpp", "fpl")  # their kernels sum in a fixed order, without BLAS (docs/concepts.md)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="OPENBLAS_CORETYPE=Nehalem is x86-64's")
def test_fedrec_fedrecpp_and_fpl_give_the_same_bytes_with_another_cpus_kernels():
    """OpenBLAS picks its kernels by CPU, numba compiles for the CPU it runs on: OPENBLAS_CORETYPE=
    Nehalem (SSE4.2, which every x86-64 CPU of the last fifteen years runs) and NUMBA_CPU_NAME=generic
    stand for an older machine. FedRec, FedRec++ and FPL give the same bytes; the demo, FCF and the
    autoencoders (BLAS products, fast-math kernels) may not (docs/concepts.md)."""
    runs = PROBE_RUNS + ",fedrec/secagg-faults,fedrec/eval-loss,fpl/secagg-faults,fpl/eval-loss,fedrecpp/secure-noise-faults"
    here, other = _probe({}, runs), _probe({"OPENBLAS_CORETYPE": "Nehalem", "NUMBA_CPU_NAME": "generic"}, runs)
    if here["demo/wan"]["params"] == other["demo/wan"]["params"]:
        pytest.skip("this BLAS ignores OPENBLAS_CORETYPE (or its kernels agree): nothing to tell apart")
    same = [r for r in here if r.split("/")[0] in ANY_CPU]
    assert len(same) == 10
    assert {r: here[r] for r in same} == {r: other[r] for r in same}


_FEDREC_EVAL = """if True:
    import json
    import numpy as np
    from fedsim.data import random_holdout
    from fedsim.data.synthetic import generate
    from fedsim.kernel import SimNetwork
    from fedsim.protocols import REGISTRY
    data = generate("tiny", seed=0, n_users=40, n_items=300, n_ratings=6000, min_per_user=60)
    train, test = random_holdout(data, 0.3, seed=1)
    spec = REGISTRY["fedrec"]
    net = SimNetwork(seed=0, profile="wan")
    cfg = spec.Config(d=20, T=20, eval_every=10, init_scale=0.5)
    res = spec.build(net, train, cfg, test=test).collect(net.run())
    V = np.random.default_rng(2).normal(size=(45, 20))
    u = np.random.default_rng(3).normal(size=20)
    params = b"".join(np.asarray(v).tobytes() for v in res.params.values())
    print(json.dumps([[{k: float(v).hex() for k, v in m.items()} for m in res.metrics], (V @ u).tobytes().hex(),
                      params.hex(), res.ledger.to_csv()]))
"""


def _fedrec_eval(core):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS")}
    env.update(PYTHONPATH=str(REPO), PYTHONHASHSEED="0")
    if core:
        env["OPENBLAS_CORETYPE"] = core
    out = subprocess.run([sys.executable, "-c", _FEDREC_EVAL], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="OPENBLAS_CORETYPE=Prescott is x86-64's")
def test_fedrec_client_evaluations_give_the_same_metrics_with_another_cpus_kernels():
    """A FedRec client evaluates its test ratings with V . U_u and the sum of squared errors: both
    summed left to right, not by BLAS, whose gemv and ddot add in an order set by the CPU kernel
    OpenBLAS picks (OPENBLAS_CORETYPE=Prescott against this machine's moved the reported RMSE and
    MAE in their last bits, while the parameters stayed the same). Ratings of 45 test items a user
    and d = 20 after 20 iterations: predictions inside the clipping range, where the bits show."""
    here, other = _fedrec_eval(None), _fedrec_eval("Prescott")
    if here[1] == other[1]:
        pytest.skip("this BLAS gives the same (45, 20) @ (20,) under Prescott's kernel (not OpenBLAS, or it "
                    "ignores OPENBLAS_CORETYPE): nothing to tell apart")
    assert len(here[0]) == 2 and here[0][-1]["n"] == float(1800).hex()
    assert 1.0 < float.fromhex(here[0][-1]["rmse"]) < 2.0  # not every prediction clipped
    assert here[0] == other[0]
    assert here[2:] == other[2:]  # the model and the ledger, as they were already
