import re

import numpy as np
import pytest

from fedsim.data import (
    Ratings,
    kfold_copies,
    partition_users,
    per_user_random,
    random_holdout,
    temporal_holdout,
    temporal_holdout_with_validation,
)
from fedsim.data.synthetic import generate


def keys(r: Ratings) -> set:
    return set(zip(r.users.tolist(), r.items.tolist()))


def test_kfold_partitions_exactly():
    r = generate("tiny")  # 360 ratings
    folds = kfold_copies(r, 5, seed=1)
    assert len(folds) == 5
    tests = [keys(te) for _, te in folds]
    assert all(len(t) == 72 for t in tests)
    assert set().union(*tests) == keys(r)
    for j, (tr, te) in enumerate(folds):
        assert len(tr) == 288 and keys(tr) | keys(te) == keys(r) and not keys(tr) & keys(te)
        assert tr.n_items == r.n_items and tr.n_users == r.n_users  # same index space
        assert te.info["split"] == {"part": "test", "kind": "kfold", "k": 5, "fold": j}
    # deterministic, seed-dependent
    again = kfold_copies(r, 5, seed=1)
    assert all(np.array_equal(a[1].items, b[1].items) and np.array_equal(a[1].users, b[1].users)
               for a, b in zip(folds, again))
    other = kfold_copies(r, 5, seed=2)
    assert keys(other[0][1]) != keys(folds[0][1])
    # a Generator works too
    g = kfold_copies(r, 5, seed=np.random.default_rng(1))
    assert keys(g[0][1]) == keys(folds[0][1])


def test_kfold_uneven_and_errors():
    r = Ratings(np.arange(7) % 3, np.arange(7), np.ones(7))
    sizes = [len(te) for _, te in kfold_copies(r, 3, seed=0)]
    assert sizes == [3, 2, 2]
    with pytest.raises(ValueError):
        kfold_copies(r, 1)
    with pytest.raises(ValueError):
        kfold_copies(r, 8)


def test_temporal_holdout_most_recent_per_user():
    # user 0: 10 ratings at t=0..9 -> test = the 2 latest; user 1: 4 ratings -> floor(0.8)=0 test
    # user 2: 5 ratings with a tie at the boundary -> later row wins
    u = [0] * 10 + [1] * 4 + [2] * 5
    i = list(range(10)) + list(range(4)) + [0, 1, 2, 3, 4]
    t = list(range(9, -1, -1)) + [5, 6, 7, 8] + [1, 2, 3, 3, 0]
    r = Ratings(u, i, np.ones(19), timestamps=t)
    train, test = temporal_holdout(r, 0.2)
    assert sorted(keys(test)) == [(0, 0), (0, 1), (2, 3)]
    assert len(train) == 16 and train.n_items == r.n_items
    with pytest.raises(ValueError, match="timestamps"):
        temporal_holdout(Ratings([0], [0], [1]))


def test_temporal_holdout_with_validation():
    u = [0] * 10
    r = Ratings(u, list(range(10)), np.ones(10), timestamps=list(range(10)))
    train, val, test = temporal_holdout_with_validation(r, 0.2, 0.2)
    assert sorted(test.items.tolist()) == [8, 9]
    assert sorted(val.items.tolist()) == [7]  # floor(0.2 * 8) = 1
    assert sorted(train.items.tolist()) == list(range(7))
    assert val.info["split"]["part"] == "validation"


def test_per_user_random_counts_and_determinism():
    r = generate("tiny", seed=3)
    train, test = per_user_random(r, 0.2, seed=5)
    per_user = np.bincount(test.users, minlength=r.n_users)
    assert np.array_equal(per_user, np.floor(0.2 * r.user_counts() + 1e-9).astype(int))
    assert keys(train) | keys(test) == keys(r) and not keys(train) & keys(test)
    t2 = per_user_random(r, 0.2, seed=5)[1]
    assert keys(t2) == keys(test)
    assert keys(per_user_random(r, 0.2, seed=6)[1]) != keys(test)


def test_random_holdout():
    r = generate("tiny")
    tr, te = random_holdout(r, 0.1, seed=0)
    assert len(te) == 36 and len(tr) == 324


def test_partition_users_balanced():
    parts = partition_users(943, 100, seed=0)
    sizes = sorted(len(p) for p in parts)
    assert len(parts) == 100 and sizes[0] == 9 and sizes[-1] == 10
    allu = np.concatenate(parts)
    assert sorted(allu.tolist()) == list(range(943))
    assert all(np.all(np.diff(p) > 0) for p in parts)
    assert [p.tolist() for p in partition_users(943, 100, seed=0)] == [p.tolist() for p in parts]
    one = partition_users(10, 1)
    assert len(one) == 1 and one[0].tolist() == list(range(10))
    each = partition_users(5, 5)
    assert [p.tolist() for p in each] == [[0], [1], [2], [3], [4]]
    with pytest.raises(ValueError):
        partition_users(5, 6)
    with pytest.raises(ValueError):
        partition_users(5, 0)


def test_fold_and_client_counts_must_be_whole_numbers():
    # int(2.7) == 2 used to give 2 folds (and 2 clients for M=2.5) without a word
    r = generate("tiny")
    with pytest.raises(ValueError, match=r"k must be a whole number, got 2\.7"):
        kfold_copies(r, 2.7)
    with pytest.raises(ValueError, match=r"M must be a whole number, got 2\.5"):
        partition_users(10, 2.5)
    assert [len(te) for _, te in kfold_copies(r, 5.0, seed=1)] == [72] * 5
    assert [len(g) for g in partition_users(10, np.int64(3))] == [4, 3, 3]


def test_validation_fraction_error_names_val_frac():
    r = Ratings([0] * 10, list(range(10)), [1.0] * 10, timestamps=list(range(10)))
    with pytest.raises(ValueError, match=r"^val_frac must be in \[0, 1\), got 1\.5$"):
        temporal_holdout_with_validation(r, 0.2, 1.5)
    with pytest.raises(ValueError, match=r"^test_frac must be in \[0, 1\), got -0\.1$"):
        temporal_holdout_with_validation(r, -0.1, 0.2)


def test_random_holdout_size_is_the_decimal_floor():
    # 0.29 * 100 is 28.999999999999996 in binary floating point: the global hold-out drew 28
    # test ratings where floor(0.29 x 100) = 29, and per_user_random (which floors with a
    # tolerance) drew 29 from the same single user
    r = Ratings([0] * 100, list(range(100)), [1.0] * 100)
    assert len(random_holdout(r, 0.29, seed=0)[1]) == 29
    assert len(per_user_random(r, 0.29, seed=0)[1]) == 29
    big = Ratings(np.zeros(100_000_000 // 1000, dtype=np.int32), np.arange(100_000), np.ones(100_000))
    assert len(random_holdout(big, 0.29, seed=0)[1]) == 29_000
    assert len(random_holdout(r, 0.1, seed=0)[1]) == 10 and len(random_holdout(r, 0.005, seed=0)[1]) == 0


@pytest.mark.parametrize("seed", [-1, 1.5, True, "3", [1, 2]])
def test_a_seed_that_is_not_a_non_negative_integer_is_refused_naming_seed(seed):
    # numpy said "expected non-negative integer" or "SeedSequence expects int or sequence of ints
    # for entropy not 1.5", naming no parameter; True seeded as 1
    r = generate("tiny")
    msg = f"^seed must be an integer >= 0, None or a numpy.random.Generator, got {re.escape(repr(seed))}$"
    for split in (lambda: kfold_copies(r, 2, seed=seed), lambda: random_holdout(r, 0.2, seed=seed),
                  lambda: per_user_random(r, 0.2, seed=seed), lambda: partition_users(10, 2, seed=seed)):
        with pytest.raises(ValueError, match=msg):
            split()
    with pytest.raises(ValueError, match=f"^seed must be an integer >= 0, got {re.escape(repr(seed))}$"):
        generate("tiny", seed=seed)


def test_numpy_and_huge_integer_seeds_are_the_python_integer():
    r = generate("tiny")
    assert generate("tiny", seed=np.uint8(3)).fingerprint() == generate("tiny", seed=3).fingerprint()
    assert [te.fingerprint() for _, te in kfold_copies(r, 2, seed=np.int64(7))] == \
        [te.fingerprint() for _, te in kfold_copies(r, 2, seed=7)]
    big = 2 ** 70
    assert [len(te) for _, te in kfold_copies(r, 2, seed=big)] == [180, 180]
    assert [g.tolist() for g in partition_users(6, 2, seed=big)] == [g.tolist() for g in partition_users(6, 2, seed=big)]
    assert len(random_holdout(r, 0.25, seed=None)[1]) == 90
