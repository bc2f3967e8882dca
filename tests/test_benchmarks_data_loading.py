"""benchmarks/data_loading.py's generators on small sizes (the smoke runs its options allow): a file
of the requested number of rows that the loader reads, instead of a crash in the generator."""

import importlib.util
from pathlib import Path

import pytest

from fedsim.data import load_movielens

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("data_loading", REPO / "benchmarks" / "data_loading.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("rows", [5, 1000, 130_000])
def test_small_ml1m_file_has_the_rows_asked_for(bench, tmp_path, rows):
    d = bench.make_ml1m(tmp_path, rows)
    assert len(load_movielens(d)) == rows


@pytest.mark.parametrize("rows", [5, 3000])
def test_small_ml20m_file_has_the_rows_asked_for(bench, tmp_path, rows):
    d = bench.make_ml20m(tmp_path, rows)
    assert len(load_movielens(d)) == rows
