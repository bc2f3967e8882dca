import numpy as np
import pytest

from fedsim.data import CSR, DataFormatError, Ratings


def small():
    # users 0..2, items 0..3 (+ item 4 unused in the index space)
    return Ratings(
        users=[2, 0, 1, 0, 2, 1],
        items=[1, 3, 0, 1, 3, 2],
        values=[5, 4, 3, 2, 1, 4],
        n_items=5,
        timestamps=[10, 20, 30, 40, 50, 60],
        user_ids=[11, 12, 13],
        item_ids=[101, 102, 103, 104, 105],
        categories=[[1, 0], [0, 1], [1, 1], [0, 0], [1, 0]],
        category_names=["a", "b"],
        name="small",
    )


def test_fields_and_dtypes():
    r = small()
    assert len(r) == 6 and r.n_users == 3 and r.n_items == 5
    assert r.users.dtype == np.int32 and r.items.dtype == np.int32
    assert r.values.dtype == np.float32 and r.timestamps.dtype == np.int64
    assert r.categories.shape == (5, 2) and r.category_names == ["a", "b"]
    assert r.n_categories == 2
    assert "small" in repr(r) and "6 ratings" in repr(r)


def test_immutable():
    r = small()
    with pytest.raises(AttributeError):
        r.n_users = 4
    with pytest.raises(ValueError):
        r.values[0] = 1.0  # read-only array
    src = np.array([0, 1])
    r2 = Ratings(src, [0, 0], [1, 1])
    src[0] = 1  # the container copied its input
    assert r2.users[0] == 0


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(users=[0, 1], items=[0], values=[1, 1]), "equal lengths"),
        (dict(users=[0, 3], items=[0, 0], values=[1, 1], n_users=3), r"users must lie in \[0, 3\)"),
        (dict(users=[0, -1], items=[0, 0], values=[1, 1]), "users must lie"),
        (dict(users=[0, 1], items=[0, 5], values=[1, 1], n_items=5), "items must lie"),
        (dict(users=[0, 1], items=[0, 0], values=[1, np.nan]), "finite"),
        (dict(users=[0, 1], items=[0, 0], values=[1, 1], timestamps=[1]), "timestamps"),
        (dict(users=[0, 1], items=[0, 0], values=[1, 1], user_ids=[5]), "user_ids"),
        (dict(users=[0, 1], items=[0, 0], values=[1, 1], categories=[[1], [0]]), "categories"),
        (dict(users=[0, 1], items=[0, 0], values=[1, 1], categories=[[1]], category_names=["x", "y"]), "names"),
        (dict(users=[0.5, 1], items=[0, 0], values=[1, 1]), "integers"),
    ],
)
def test_constructor_validation(kw, msg):
    with pytest.raises(ValueError, match=msg):
        Ratings(**kw)


def test_by_user_csr():
    r = small()
    c = r.by_user()
    assert isinstance(c, CSR) and c.shape == (3, 5) and c.nnz == 6
    assert c is r.by_user()  # cached
    assert c.indptr.tolist() == [0, 2, 4, 6]
    assert r.user_items(0).tolist() == [1, 3]
    assert r.user_ratings(0).tolist() == [2, 4]  # sorted by item: item1 -> 2, item3 -> 4
    assert r.user_timestamps(0).tolist() == [40, 20]
    assert r.user_items(2).tolist() == [1, 3] and r.user_ratings(2).tolist() == [5, 1]
    # order maps back into the rows
    assert np.array_equal(r.users[c.order], c.row_ids())
    assert np.array_equal(r.items[c.order], c.indices)
    assert c.counts().tolist() == [2, 2, 2]


def test_by_item_csr():
    r = small()
    c = r.by_item()
    assert c.shape == (5, 3)
    assert r.item_users(1).tolist() == [0, 2]
    assert r.item_ratings(1).tolist() == [2, 5]
    assert r.item_users(4).tolist() == []  # in the index space, never rated
    assert r.item_counts().tolist() == [1, 2, 1, 2, 0]
    assert r.user_counts().tolist() == [2, 2, 2]


def test_subset_keeps_index_space():
    r = small()
    s = r.subset(np.array([True, False, False, False, False, False]))
    assert len(s) == 1 and s.n_users == 3 and s.n_items == 5
    assert s.item_ids is r.item_ids and s.categories is r.categories
    assert s.user_items(2).tolist() == [1]
    assert s.user_items(0).tolist() == []
    t = r.subset([5, 0])  # index array, order kept
    assert t.values.tolist() == [4, 5] and t.timestamps.tolist() == [60, 10]
    with pytest.raises(ValueError):
        r.subset(np.ones(3, dtype=bool))
    with pytest.raises(ValueError):
        r.subset([6])


def test_binarize():
    r = small()
    b = r.binarize()
    assert len(b) == 6 and np.all(b.values == 1.0)
    b4 = r.binarize(4)
    assert len(b4) == 3 and np.all(b4.values == 1.0)
    assert sorted(zip(b4.users.tolist(), b4.items.tolist())) == [(0, 3), (1, 2), (2, 1)]
    assert b4.info["binarize"] == {"threshold": 4, "kept": 3, "dropped": 3}
    assert b4.n_items == 5  # explicit drop, same space


def test_filter_users_reindexes():
    r = Ratings([0, 0, 0, 1, 2, 2], [0, 1, 2, 3, 1, 2], [1] * 6, user_ids=[7, 8, 9], item_ids=[1, 2, 3, 4])
    f = r.filter_users(2)
    assert f.n_users == 2 and f.user_ids.tolist() == [7, 9]
    assert f.n_items == 3 and f.item_ids.tolist() == [1, 2, 3]  # item 4 only rated by the removed user
    assert len(f) == 5
    assert f.info["filter_users"] == {
        "min_count": 2, "users_kept": 2, "users_removed": 1, "ratings_removed": 1, "items_removed": 1,
    }
    g = r.filter_users(2, reindex_items=False)
    assert g.n_items == 4


def test_to_dense_and_fingerprint():
    r = small()
    m = r.to_dense()
    assert m.shape == (3, 5) and m[2, 1] == 5 and m[0, 0] == 0
    assert r.fingerprint() == small().fingerprint()
    assert r.fingerprint() != r.binarize().fingerprint()


def test_data_format_error_message():
    e = DataFormatError("/x/u.data", 7, "bad")
    assert isinstance(e, ValueError)
    assert str(e) == "/x/u.data, line 7: bad" and e.line == 7 and e.path == "/x/u.data"
    assert str(DataFormatError("f", None, "oops")) == "f: oops"


def test_binarize_threshold_is_compared_exactly_and_must_be_a_number():
    r = Ratings([0, 0, 1, 1], [0, 1, 0, 1], [4.0, 5.0, 3.5, 4.0])
    # a NaN threshold kept nothing without a word (every comparison with NaN is False)
    with pytest.raises(ValueError, match=r"binarize: threshold must be a finite number, got nan"):
        r.binarize(float("nan"))
    with pytest.raises(ValueError, match=r"binarize: threshold must be a finite number, got inf"):
        r.binarize(float("inf"))
    # 4.00000001 rounded to float32 is 4.0, so the 4-star ratings (4.0 < 4.00000001) were kept
    b = r.binarize(4.00000001)
    assert b.users.tolist() == [0] and b.items.tolist() == [1]
    assert b.info["binarize"] == {"threshold": 4.00000001, "kept": 1, "dropped": 3}
    assert r.binarize(3.5).info["binarize"]["kept"] == 4 and len(r.binarize(4)) == 3


def test_timestamps_must_be_whole_seconds():
    # 1.7 and 1.2 were truncated to 1 and 1 without a word (a tie the temporal split then breaks
    # by row order); NaN or 1e30 failed inside NumPy without naming the field
    for bad in ([1.7, 2.2], [1.0, float("nan")], [1.0, 1e30], ["a", "b"]):
        with pytest.raises(ValueError, match=r"^Ratings: timestamps must hold integer seconds"):
            Ratings([0, 1], [0, 1], [1, 2], timestamps=bad)
    r = Ratings([0, 1], [0, 1], [1, 2], timestamps=[1.0, 2e9])  # whole-valued floats are fine
    assert r.timestamps.dtype == np.int64 and r.timestamps.tolist() == [1, 2_000_000_000]
    big = np.array([0, 2**62], dtype=np.uint64)
    assert Ratings([0, 1], [0, 1], [1, 2], timestamps=big).timestamps.tolist() == [0, 2**62]
