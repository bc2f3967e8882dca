"""Tests written from a hand mutation-testing pass over fedsim/math: each one fails with a
specific mutant of the code applied (named in its docstring) and checks the function against an
independent computation (a plain loop, a hand-computed case, a closed form or SciPy), never
against the function's own output."""

import numpy as np
import pytest

from fedsim.math.metrics import hits_at, precision_at
from fedsim.math.filling import n_sampled, sample_unrated, users_sampling_all
from fedsim.math.pmf import predict

# ---------------------------------------------------------------------------------------------
# metrics


def test_padding_is_never_a_hit_even_next_to_the_largest_test_item_id():
    """Mutant: ``hits = np.isin(key_rec, key_test)`` without ``& (r >= 0)``. A padded -1 of user
    u has the key ``u * 2**32 - 1``, which is the key of user u-1's item 2**32 - 1 (an id the
    test CSR accepts): without the mask user 1's padding counted as a hit."""
    big = (1 << 32) - 1
    test_csr = (np.array([0, 1, 2]), np.array([big, 3]))  # user 0: item 2**32-1; user 1: item 3
    recs = np.array([[big, 0], [-1, -1]])  # user 1 got no recommendation at all
    assert hits_at(recs, test_csr, 2).tolist() == [1, 0]
    assert precision_at(recs, test_csr, 2, per_user=True).tolist() == [0.5, 0.0]


# ---------------------------------------------------------------------------------------------
# FedRec PMF


def test_pmf_predict_is_the_dot_product_of_the_pair_of_each_entry():
    """Mutant: ``V[users]`` for ``V[items]`` in ``pmf.predict`` (Eq. 1)."""
    rng = np.random.default_rng(3)
    U = rng.normal(size=(3, 4))
    V = rng.normal(size=(5, 4))
    users, items = np.array([0, 2, 2, 1]), np.array([4, 0, 3, 1])
    want = [sum(U[u, f] * V[i, f] for f in range(4)) for u, i in zip(users, items)]
    assert predict(U, V, users, items) == pytest.approx(want, rel=1e-12)


def test_users_sampling_all_leaves_out_a_user_whose_rho_asks_for_exactly_the_unrated_items():
    """Mutant: ``wanted >= m - n`` for ``wanted > m - n``. With m = 6, a user of 2 ratings and
    rho = 2 asks for 4 items and there are exactly 4 unrated ones: the cap does not bite (the
    draw is min(4, 4) either way), so the user is not one whose rho was capped; with m = 5 it is."""
    indptr = np.array([0, 2, 3])  # user 0: 2 ratings, user 1: 1 rating
    assert users_sampling_all(indptr, 6, 2.0) == []  # asks 4 of 4 and 2 of 5
    assert users_sampling_all(indptr, 5, 2.0) == [0]  # asks 4 of 3 (capped) and 2 of 4
    # the definition, user by user: int(rho n) > m - n
    for m in range(3, 9):
        for rho in (0.5, 1.0, 2.0, 3.0):
            want = [u for u, n in enumerate((2, 1)) if int(rho * n) > m - n]
            assert users_sampling_all(indptr, m, rho) == want, (m, rho)
            for u, n in enumerate((2, 1)):
                rng = np.random.default_rng(0)
                got = sample_unrated(rng, np.arange(n), m, rho)
                assert len(got) == n_sampled(n, m, rho) == min(int(rho * n), m - n)
