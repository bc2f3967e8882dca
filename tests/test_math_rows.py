"""fedsim.math.rows: `acc[ids] += rows` through whole-row take/put, against the fancy-index form."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedsim.math.rows import RowSum, add_rows_at


def _reference(acc, ids, rows):
    out = acc.copy()
    out[ids] += rows
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64, np.uint16])
def test_equals_fancy_index_add_bit_for_bit(dtype, id_dtype):
    rng = np.random.default_rng(0)
    acc = (rng.normal(size=(40, 7)) * 100).astype(dtype)
    for _ in range(10):
        ids = rng.choice(40, size=int(rng.integers(0, 40)), replace=False).astype(id_dtype)
        rows = (rng.normal(size=(ids.shape[0], 7)) * 100).astype(dtype)
        ref = _reference(acc, ids, rows)
        add_rows_at(acc, ids, rows)
        assert acc.tobytes() == ref.tobytes()


def test_hand_computed_example():
    acc = np.arange(12, dtype=np.float32).reshape(4, 3)
    add_rows_at(acc, np.array([3, 1], np.int32), np.array([[1, 1, 1], [10, 20, 30]], np.float32))
    np.testing.assert_array_equal(acc, [[0, 1, 2], [13, 24, 35], [6, 7, 8], [10, 11, 12]])


def test_python_lists_negative_ids_and_casting_follow_numpy():
    acc = np.zeros((5, 2), np.float32)
    add_rows_at(acc, [-1, 0], [[0.5, 1.5], [2.0, 3.0]])  # float64 rows into float32, like `+=`
    ref = np.zeros((5, 2), np.float32)
    ref[[-1, 0]] += np.array([[0.5, 1.5], [2.0, 3.0]])
    assert acc.tobytes() == ref.tobytes()


@pytest.mark.parametrize("make", [
    lambda a: np.asfortranarray(a),           # not C-contiguous
    lambda a: np.zeros((a.shape[0], 2 * a.shape[1]), a.dtype)[:, ::2],  # strided view
])
def test_other_layouts_fall_back_and_agree(make):
    rng = np.random.default_rng(1)
    acc = make(rng.normal(size=(9, 3)).astype(np.float32))
    ids = np.array([4, 0, 8])
    rows = rng.normal(size=(3, 3)).astype(np.float32)
    ref = _reference(np.ascontiguousarray(acc), ids, rows)
    add_rows_at(acc, ids, rows)
    np.testing.assert_array_equal(acc, ref)


def test_errors_are_numpys():
    acc = np.zeros((4, 2), np.float32)
    with pytest.raises(IndexError):
        add_rows_at(acc, [4], [[1.0, 1.0]])
    with pytest.raises(ValueError):
        add_rows_at(acc, [0, 1], [[1.0, 1.0]] * 3)
    with pytest.raises(ValueError):
        add_rows_at(acc, [0], [[1.0, 1.0, 1.0]])
    frozen = np.zeros((4, 2), np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError):
        add_rows_at(frozen, [0], [[1.0, 1.0]])
    assert not acc.any()  # failed calls changed nothing


def test_rowsum_accumulates_in_node_order_like_the_reference():
    rng = np.random.default_rng(2)
    blocks = [(rng.choice(30, 12, replace=False).astype(np.int32),
               rng.normal(size=(12, 5)).astype(np.float32)) for _ in range(25)]
    s = RowSum(30, 5)
    ref = np.zeros((30, 5), np.float32)
    for ids, rows in blocks:
        s.add(ids, rows)
        ref[ids] += rows
    assert s.total.dtype == np.float32 and s.total.tobytes() == ref.tobytes()
    base = np.ones((30, 5))
    inplace = RowSum(base)
    inplace.add(blocks[0][0], blocks[0][1])
    assert inplace.total is base and base[blocks[0][0]][0, 0] == 1 + np.float64(blocks[0][1][0, 0])
    with pytest.raises(ValueError):
        RowSum(np.zeros(3))
    with pytest.raises(TypeError):
        RowSum(3)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30), st.integers(1, 9), st.data())
def test_random_blocks_match_reference(m, d, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    k = data.draw(st.integers(0, m))
    ids = rng.choice(m, size=k, replace=False)
    acc = rng.normal(size=(m, d)).astype(np.float32)
    rows = rng.normal(size=(k, d)).astype(np.float32)
    ref = _reference(acc, ids, rows)
    add_rows_at(acc, ids, rows)
    assert acc.tobytes() == ref.tobytes()
