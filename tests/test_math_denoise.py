"""FedRec++ denoising arithmetic (Eq. 5, 9) on a hand-computed example."""

import re

import numpy as np
import pytest

from fedsim.math.denoise import denoiser_sums, remove_noise
from fedsim.math.pmf import accumulate_item_grads, apply_mean_step


def test_denoiser_sums_by_hand():
    # two noise messages (items 1,4 and 4,0), the denoiser rated items 4 and 2
    items, sums, counts = denoiser_sums(
        [np.array([1, 4]), np.array([4, 0])],
        [np.array([[1.0], [2.0]]), np.array([[10.0], [100.0]])],
        np.array([4, 2]), np.array([[0.5], [7.0]]), d=1, dtype=np.float64)
    np.testing.assert_array_equal(items, [0, 1, 2, 4])
    np.testing.assert_array_equal(sums[:, 0], [100.0, 1.0, -7.0, 12.0 - 0.5])
    np.testing.assert_array_equal(counts, [1, 1, -1, 1])  # own ratings counted out
    _, _, printed = denoiser_sums([np.array([1, 4])], [np.ones((2, 1))], np.array([4]), np.ones((1, 1)),
                                  d=1, dtype=np.float64, count_own=False)
    np.testing.assert_array_equal(printed, [1, 1])


def test_noise_removal_leaves_the_raters_mean():
    """Server: uploads carry real + noise gradients; after Eq. 5 each item's mean is over its raters."""
    m, d = 5, 2
    rng = np.random.default_rng(0)
    real = {0: [0, 1], 1: [1, 3]}  # ordinary clients' rated items
    noise = {0: [2, 4], 1: [0, 4]}  # their sampled items
    denoiser_rated = [3]
    g = {(u, i): rng.normal(size=d) for u in range(3) for i in range(m)}
    G, C = np.zeros((m, d)), np.zeros(m, np.int64)
    for u in (0, 1):
        items = np.array(real[u] + noise[u])
        accumulate_item_grads(G, C, items, np.array([g[u, i] for i in items]), distinct=True)
    it, S, cnt = denoiser_sums([np.array(noise[u]) for u in (0, 1)],
                               [np.array([g[u, i] for i in noise[u]]) for u in (0, 1)],
                               np.array(denoiser_rated), np.array([g[2, 3]]), d=d, dtype=np.float64)
    remove_noise(G, C, it, S, cnt)
    V = np.zeros((m, d))
    apply_mean_step(V, G, C, 1.0)
    raters = {0: [(0, 0)], 1: [(0, 1), (1, 1)], 3: [(1, 3), (2, 3)]}
    for i in range(m):
        want = -np.mean([g[k] for k in raters[i]], axis=0) if i in raters else np.zeros(d)
        np.testing.assert_allclose(V[i], want, atol=1e-12)


def test_remove_noise_refuses_counts_out_of_their_bounds_changing_nothing():
    from fedsim.math.denoise import check_noise_counts

    named = np.array([1, 1, 2, 4, 4, 4], np.int64)  # the group's uploads: item 1 twice, 2 once, 4 three times
    items = np.array([1, 2, 3, 4])
    check_noise_counts(items, np.array([2, -1, -1, 3]), -1, named)  # at the bounds: fine
    G, C = np.ones((5, 2)), np.full(5, 5, np.int64)
    for counts, low, why in [(np.array([3, 0, 0, 0]), -1, "item 1 has count 3, outside [-1, 2]"),
                             (np.array([0, 0, 1, 0]), -1, "item 3 has count 1, outside [-1, 0]"),
                             (np.array([0, -2, 0, 0]), -1, "item 2 has count -2, outside [-1, 1]"),
                             (np.array([0, 0, -1, 0]), 0, "item 3 has count -1, outside [0, 0]")]:
        with pytest.raises(ValueError, match=re.escape(why)):
            remove_noise(G, C, items, np.ones((4, 2)), counts, bounds=(low, named))
    with pytest.raises(ValueError, match="must be an integer array, got float64"):
        remove_noise(G, C, items, np.ones((4, 2)), np.zeros(4), bounds=(-1, named))
    assert (G == 1).all() and (C == 5).all()


def test_denoiser_sums_adds_whole_rows_once_per_message_with_the_loop_s_bits(monkeypatch):
    # each noise message cost a searchsorted and a fancy-index += of its rows (a denoiser's
    # collection was one of these per ordinary client); now one search for all messages, one
    # bincount for the counts, and a whole-row add (rows.RowSum) per message, in message order
    from fedsim.math import denoise, rows

    adds = []

    class Counted(rows.RowSum):
        def add(self, ids, block):
            adds.append(len(ids))
            super().add(ids, block)

    monkeypatch.setattr(denoise, "RowSum", Counted)
    rng = np.random.default_rng(4)
    m, d = 60, 3
    its = [np.sort(rng.choice(m, size=k, replace=False)).astype(np.int32) for k in (5, 0, 17, 9, 30, 1)]
    gs = [(rng.normal(size=(len(i), d)) * 10.0 ** rng.integers(-5, 5, size=(len(i), 1))).astype(np.float32)
          for i in its]
    gs[2][0] = -0.0  # a -0.0 alone on its item stays +0.0 + -0.0 = +0.0, as in the loop
    own_i = np.array([3, 8, 59], dtype=np.int32)
    own_g = rng.normal(size=(3, d)).astype(np.float32)
    items, sums, counts = denoiser_sums(its, gs, own_i, own_g, d=d, dtype=np.float32)
    assert adds == [len(i) for i in its]
    # the reference: the per-message loop, item by item in message order
    want_items = np.unique(np.concatenate([*its, own_i]).astype(np.int64))
    want = np.zeros((want_items.size, d), dtype=np.float32)
    want_c = np.zeros(want_items.size, dtype=np.int64)
    for i, g in zip(its, gs):
        for r, item in enumerate(i):
            k = int(np.searchsorted(want_items, item))
            want[k] = want[k] + g[r]
            want_c[k] += 1
    k = np.searchsorted(want_items, own_i)
    want[k] -= own_g
    want_c[k] -= 1
    assert items.tobytes() == want_items.tobytes()
    assert sums.dtype == np.float32 and sums.tobytes() == want.tobytes()
    assert counts.dtype == np.int64 and counts.tolist() == want_c.tolist()
