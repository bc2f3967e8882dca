"""benchmarks/fedrec_floor.py checks that the null network and SimNetwork did the same work: it
compared only its 2-iteration warm-up runs, with ``np.array_equal`` (for which -0.0 is 0.0 and a
NaN differs from itself), and never the runs it timed. Each timed pair is now compared bit for bit."""

import sys

import numpy as np
import pytest
from conftest import REPO, load_benchmark


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # it imports benchmarks/fedrec_split.py
    mod = load_benchmark("fedrec_floor")
    yield mod
    sys.modules.pop("fedrec_split", None)


def test_same_bits_is_bit_identity(bench):
    a = np.array([0.0, 1.5, np.nan], dtype=np.float32)
    assert bench.same_bits(a, a.copy()) and bench.same_bits(None, None)
    assert not bench.same_bits(a, np.array([-0.0, 1.5, np.nan], dtype=np.float32))
    assert not bench.same_bits(a, a.astype(np.float64))
    assert not bench.same_bits(a, None)


def test_a_timed_run_that_differs_is_caught(bench, monkeypatch):
    run_null = bench.run_null

    def drifting(data, model, T):  # right at the warm-up's 2 iterations, off in the timed runs
        out = run_null(data, model, T)
        if T != 2:
            out = dict(out, V=np.nextafter(out["V"], np.inf))
        return out

    monkeypatch.setattr(bench, "run_null", drifting)
    with pytest.raises(SystemExit, match=r"PMF\(B\), 3 iterations: the null network's V differs"):
        bench.main(["--data", "tiny", "--iterations", "3", "--repeats", "1"])


def test_a_small_run_passes_its_checks(bench, capsys):
    import json

    bench.main(["--data", "tiny", "--iterations", "2", "--repeats", "1"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert sorted(out["s_per_iteration"]) == ["PMF(B)", "PMF(S)", "SVD++(S)"]
