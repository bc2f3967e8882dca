"""fedsim.math.csr: the one CSR builder is lexsort's order, whatever the input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsim.math.csr import csr_order, csr_pairs


def _reference(rows, cols, n_rows):
    order = np.lexsort((cols, rows))
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    return indptr, order


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(-5, 9)), max_size=40))))
def test_csr_order_is_lexsort_with_duplicates_negative_columns_and_empty_rows(case):
    n_rows, pairs = case
    rows = np.array([p[0] for p in pairs], dtype=np.int32)
    cols = np.array([p[1] for p in pairs], dtype=np.int32)
    indptr, order = csr_order(rows, cols, n_rows)
    ref_ptr, ref_order = _reference(rows, cols, n_rows)
    assert indptr.dtype == np.int64 and order.dtype == np.int64
    np.testing.assert_array_equal(indptr, ref_ptr)
    np.testing.assert_array_equal(order, ref_order)


def test_csr_order_falls_back_to_lexsort_when_the_key_would_overflow():
    rows = np.array([1, 0, 1, 0, 1])
    cols = np.array([2**61, 5, 0, 2**61, 0], dtype=np.int64)  # span * 4 rows > 2**62
    indptr, order = csr_order(rows, cols, 4)
    ref_ptr, ref_order = _reference(rows, cols, 4)
    np.testing.assert_array_equal(order, ref_order)
    np.testing.assert_array_equal(indptr, ref_ptr)


def test_csr_pairs_sorts_each_rows_columns():
    indptr, indices = csr_pairs([2, 0, 2, 2], [7, 3, 1, 7], 4)
    assert indptr.tolist() == [0, 1, 1, 4, 4] and indices.tolist() == [3, 1, 7, 7]
    assert indices.dtype == np.int64
    indptr, order = csr_order([], [], 3)
    assert indptr.tolist() == [0, 0, 0, 0] and order.size == 0


@pytest.mark.parametrize("rows", [[0, 3], [-1, 0]])
def test_csr_order_refuses_rows_out_of_range(rows):
    with pytest.raises(ValueError, match="out of range"):
        csr_order(rows, [0, 1], 3)
