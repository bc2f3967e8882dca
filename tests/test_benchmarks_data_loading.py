"""benchmarks/data_loading.py's generators on small sizes (the smoke runs its options allow): a file
of the requested number of rows that the loader reads, instead of a crash in the generator."""

import pytest
from conftest import load_benchmark

from fedsim.data import load_movielens


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("data_loading")


@pytest.mark.parametrize("rows", [5, 1000, 130_000])
def test_small_ml1m_file_has_the_rows_asked_for(bench, tmp_path, rows):
    d = bench.make_ml1m(tmp_path, rows)
    assert len(load_movielens(d)) == rows


@pytest.mark.parametrize("rows", [5, 3000])
def test_small_ml20m_file_has_the_rows_asked_for(bench, tmp_path, rows):
    d = bench.make_ml20m(tmp_path, rows)
    assert len(load_movielens(d)) == rows
