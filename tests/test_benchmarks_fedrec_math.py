"""benchmarks/fedrec_math.py's --models: the lambda, table2 and timing parts ran all three models
whatever --models said (only ua and hf read it), and --lam with a name that is no model was
ignored without a word."""

import numpy as np
import pytest
from conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("fedrec_math")


@pytest.fixture
def small_udata(tmp_path):
    rng = np.random.default_rng(0)
    pairs = {(int(u), int(i)) for u, i in zip(rng.integers(1, 21, 400), rng.integers(1, 16, 400))}
    lines = [f"{u}\t{i}\t{int(rng.integers(1, 6))}\t0" for u, i in sorted(pairs)]
    (tmp_path / "u.data").write_text("\n".join(lines) + "\n")
    return str(tmp_path / "u.data")


@pytest.mark.parametrize("part", ["lambda", "table2"])
def test_parts_run_only_the_models_asked_for(bench, small_udata, part):
    res = bench.main(["--data", small_udata, "--parts", part, "--models", "PMF(B)", "--folds", "1",
                      "--iterations", "1", "--lam", "PMF(B)", "0.01"])
    assert sorted(k for k in res[part] if k != "wall_total") == ["PMF(B)"]


def test_lam_of_an_unknown_model_is_refused(bench, small_udata, capsys):
    with pytest.raises(SystemExit) as exc:
        bench.main(["--data", small_udata, "--parts", "table2", "--lam", "PMF(X)", "0.01"])
    assert exc.value.code == 2
    assert "--lam 'PMF(X)': not a model; models: PMF(B), PMF(S), SVD++(S)" in capsys.readouterr().err
