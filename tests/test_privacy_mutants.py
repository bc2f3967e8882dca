"""Tests written from a hand mutation-testing pass over fedsim/privacy: each one fails with a
specific mutant of the code applied (named in its docstring) and checks the function against an
independent computation (a plain-Python pairwise count, a hand-computed case, a closed form or
SciPy), never against the function's own output."""

import math
import warnings

import numpy as np
import pytest

from fedsim.privacy import Guess, score_guess, summarize
from fedsim.privacy.metrics import auc, score_inference


def pairwise_auc(scores, positive):
    """P(score of a positive > score of a negative), ties one half: every pair counted."""
    pos = [s for s, p in zip(scores, positive) if p]
    neg = [s for s, p in zip(scores, positive) if not p]
    return sum((a > b) + 0.5 * (a == b) for a in pos for b in neg) / (len(pos) * len(neg))


# ---------------------------------------------------------------------------------------------
# metrics


def test_auc_of_a_mask_without_negatives_or_positives_is_nan_without_a_warning():
    """Mutant: ``if p == 0:`` for ``if p == 0 or n == 0:``. Every item positive, the formula is
    0 / 0: NaN too, but through NumPy's 'invalid value' RuntimeWarning on every such user."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(auc(np.array([0.3, 0.1, 0.2]), np.array([True, True, True])))
        assert math.isnan(auc(np.array([0.3, 0.1, 0.2]), np.array([False, False, False])))


def test_random_baseline_auc_and_exact_by_hand():
    """Mutants: ``auc_rand`` computed on the attack's scores instead of the pool indicator; the
    exact-recovery baseline without ``pool_hit == |I|`` (a pool missing a true item cannot draw
    I), and as ``1 / |pool|`` instead of ``1 / C(|pool|, k)`` (equal at |pool| = 4, k = 3, the
    existing case)."""
    n_items = 8
    truth = [1, 2, 3]
    # the pool holds every true item: a draw of 3 among 5 is I with probability 1 / C(5, 3)
    g = Guess(np.array([1, 2, 3, 5, 6]), np.array([0.9, 0.1, 0.8, 0.7, 0.2]), np.array([1, 3, 5]))
    s = score_guess(g, np.array(truth), n_items)
    assert s["exact_rand"] == pytest.approx(1 / math.comb(5, 3))
    indicator = [1.0 if i in (1, 2, 3, 5, 6) else 0.0 for i in range(n_items)]
    positive = [i in truth for i in range(n_items)]
    assert s["auc_rand"] == pytest.approx(pairwise_auc(indicator, positive))  # 0.8
    assert s["auc_rand"] == pytest.approx(0.8)
    full = [dict(zip([1, 2, 3, 5, 6], [0.9, 0.1, 0.8, 0.7, 0.2])).get(i, -math.inf) for i in range(n_items)]
    assert s["auc"] == pytest.approx(pairwise_auc(full, positive))
    # the pool misses item 3: no draw of 3 of it is I, however large the claim
    g = Guess(np.array([1, 2, 4, 5]), np.array([0.9, 0.1, 0.8, 0.7]), np.array([1, 2, 4]))
    assert score_guess(g, np.array(truth), n_items)["exact_rand"] == 0.0


def test_score_guess_refuses_the_item_id_n_items_by_name():
    """Mutant: ``a.max() > n_items`` for ``>= n_items``: the id n_items passed the check and
    failed later as an IndexError that named nothing."""
    g = Guess.of_set([1, 2])
    for truth, pool in (([1, 5], [1, 2]), ([1, 2], [1, 2, 5])):
        with pytest.raises(ValueError, match=r"outside 0\.\.4"):
            score_guess(Guess.of_set([1, 2], pool=pool), np.array(truth), 5)
    assert score_guess(g, np.array([1, 4]), 5)["precision"] == 0.5  # id 4 of 5 is in range


def test_score_inference_skips_empty_true_sets_and_lists_targets_in_sorted_order():
    """Mutants: without ``if len(items) == 0: continue`` (a client with no item in the training
    data made score_guess raise and the whole audit stop); ``list(truth)`` for
    ``sorted(truth)`` (rows in the dict's insertion order)."""
    truth = {"client/2": np.array([0, 1]), "client/0": np.array([], dtype=np.int64), "client/1": np.array([2])}
    inference = {"client/2": Guess.of_set([0]), "client/1": Guess.of_set([2, 3])}
    rows = score_inference(inference, truth, 4)
    assert [r["target"] for r in rows] == ["client/1", "client/2"]
    assert [(r["precision"], r["recall"]) for r in rows] == [(0.5, 1.0), (1.0, 0.5)]


def test_summarize_leaves_nan_out_of_the_mean_and_of_each_seeds_mean():
    """Mutants: without ``v = v[~np.isnan(v)]`` (one user's AUC of NaN, no negative, made the
    whole mean NaN) and without the same filter per seed (the seed spread NaN)."""
    rows = [{"auc": 1.0, "seed": 0}, {"auc": math.nan, "seed": 0}, {"auc": 0.5, "seed": 0},
            {"auc": 0.25, "seed": 1}, {"auc": math.nan, "seed": 1}]
    out = summarize(rows, keys=["auc"])
    assert out["users"] == 5.0
    assert out["auc"] == pytest.approx((1.0 + 0.5 + 0.25) / 3)
    assert out["auc_ci"] == pytest.approx(1.96 * np.std([1.0, 0.5, 0.25], ddof=1) / math.sqrt(3))
    assert out["auc_seed_sd"] == pytest.approx(np.std([0.75, 0.25], ddof=1))


def test_a_guess_whose_pool_repeats_an_item_is_refused():
    """Mutant: the repeated-pool check dropped (a repeated item took the score of its last copy
    in score_guess, the pool size counted it twice in the baselines)."""
    with pytest.raises(ValueError, match="repeats"):
        Guess(np.array([1, 2, 1]), np.array([0.5, 0.1, 0.9]), np.array([1]))


# ---------------------------------------------------------------------------------------------
# size-only attack


def _upload_bytes(kind, body):
    from fedsim.kernel.codec import encode_message

    return len(encode_message(kind, body).data)


def test_rows_of_size_finds_every_row_count_of_an_fpl_upload_of_d_10():
    """A real bug (not a mutant): the row count was read off the slope of the size between 0 and
    64 rows, which includes the items array's header growing by some bytes (48.06 bytes a row
    for 48): from 3,590 rows on, FPL's uploads of d = 10 (its default) were off by more than
    the 4 rows searched, and ``rows_of_size`` said None. Sizes here: the codec's own encoding of
    the upload with k rows, plus the framing."""
    from types import SimpleNamespace

    from fedsim.privacy.attacks.size import rows_of_size

    cfg = SimpleNamespace(d=10, dtype="float32")
    for k in (0, 1, 63, 64, 65, 1489, 1490, 3589, 3600, 5000, 6744):
        body = {"items": np.zeros(k, np.int32), "rows": np.zeros((k, 11), np.float32)}
        size = _upload_bytes("update", body)
        assert rows_of_size("fpl", cfg, "update", size, 0, 6744) == k
        # with 7 bytes of framing per message, the same upload is 7 bytes larger on the wire
        assert rows_of_size("fpl", cfg, "update", size + 7, 7, 6744) == k
    # a size no row count has, and one beyond max_rows
    assert rows_of_size("fpl", cfg, "update", _upload_bytes("update", {"items": np.zeros(2, np.int32),
                                                                      "rows": np.zeros((2, 11), np.float32)}) + 1,
                        0, 100) is None
    big = {"items": np.zeros(101, np.int32), "rows": np.zeros((101, 11), np.float32)}
    assert rows_of_size("fpl", cfg, "update", _upload_bytes("update", big), 0, 100) is None


def test_spearman_against_scipy_with_ties_and_nan_for_a_constant_without_a_warning():
    """Mutant: without the constant-input test (``np.all(x == x[0])``): NumPy's corrcoef of a
    constant gives NaN too, through a RuntimeWarning (division by zero) per call."""
    from scipy.stats import spearmanr

    from fedsim.privacy.attacks.size import spearman

    x = np.array([3.0, 1.0, 2.0, 2.0, 5.0, 1.0])
    y = np.array([10.0, 12.0, 12.0, 3.0, 7.0, 1.0])
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(spearman(np.array([2.0, 2.0, 2.0]), np.array([1.0, 2.0, 3.0])))
        assert math.isnan(spearman(np.array([1.0, 2.0, 3.0]), np.array([4.0, 4.0, 4.0])))


def test_score_sizes_leaves_out_estimates_that_are_not_finite():
    """Mutant: without ``np.isfinite(estimates[u])``: an infinite estimate made the median
    relative error infinite, a NaN one made spearman raise."""
    from fedsim.privacy.attacks.size import score_sizes

    truth = {"a": np.arange(2), "b": np.arange(4), "c": np.arange(3), "d": np.arange(5)}
    est = {"a": 2.0, "b": 5.0, "c": math.inf, "d": math.nan}
    out = score_sizes(est, truth)
    assert out["size_users"] == 2.0
    assert out["size_exact"] == 0.5
    assert out["size_mre"] == pytest.approx((0.0 + 0.25) / 2)  # median of {0, 1/4}
    assert out["size_spearman"] == pytest.approx(1.0)


def test_fpl_merged_count_reads_a_count_on_the_rising_side_only():
    """Mutant: the search up to floor(pi m) for floor(pi m / (1 + pi)) (the module docstring's
    rising side of E[k | n]). m = 20, T = 30, pi = 0.5: E[k | n], computed here in plain Python,
    rises up to n = 7 and falls beyond; a mean count of E[k | 8] is read as the nearest n of
    1..6, not as 8."""
    from fedsim.privacy.attacks.size import fpl_merged_count

    m, T, pi = 20, 30, 0.5

    def expected(n):
        return n * (1 - (1 - pi / n) ** T) + (m - n) * (1 - (1 - 1 / (m - n)) ** T)

    values = [expected(n) for n in range(1, m)]
    assert max(range(1, m), key=expected) == 7 and values == sorted(values[:7]) + sorted(values[7:], reverse=True)
    top = math.floor(pi * m / (1 + pi))
    for n_true in (3, 8, 12):
        want = min(range(1, top + 1), key=lambda n: (abs(expected(n) - expected(n_true)), n))
        assert fpl_merged_count(expected(n_true), m, T, pi) == want
    assert fpl_merged_count(expected(8), m, T, pi) == 5


# ---------------------------------------------------------------------------------------------
# the audit's reading of the ledger: a hand-made recording


def _row(seq, rnd, src, dst, kind, status):
    src_role = "server" if src == "server" else "client"
    dst_role = "server" if dst == "server" else "client"
    return [seq, rnd, src, dst, src_role, dst_role, kind, 100, 0, 0, 0.0, 0.0, 0.0, 0.0, 0.0, status, True,
            False, ""]


def _fake_capture(messages, protocol="fedrec"):
    """A capture holding only what the audit's ledger readers read: the recorded rows (each
    with a payload stand-in), the protocol, the server's name and the references' key."""
    from types import SimpleNamespace

    entries = [(_row(i, *m), object(), 0) for i, m in enumerate(messages)]
    return SimpleNamespace(protocol=protocol, public=SimpleNamespace(server="server"),
                           recorder=SimpleNamespace(entries=entries), key=b"k" * 16)


#: FedRec, four clients. Round -1: a model and an upload outside training (set-up). Round 0: the
#: server calls c0..c3; c0 and c2 upload, c1's and c3's uploads are lost. Round 1: it calls c0
#: and c1 (not c2); both upload.
_ROUNDS = [
    (-1, "server", "c0", "model", "delivered"), (-1, "c0", "server", "gradients", "delivered"),
    (0, "server", "c0", "model", "delivered"), (0, "server", "c1", "model", "delivered"),
    (0, "server", "c2", "model", "delivered"), (0, "server", "c3", "model", "delivered"),
    (0, "c0", "server", "gradients", "delivered"), (0, "c1", "server", "gradients", "lost"),
    (0, "c2", "server", "gradients", "delivered"), (0, "c3", "server", "gradients", "lost"),
    (1, "server", "c0", "model", "delivered"), (1, "server", "c1", "model", "delivered"),
    (1, "c0", "server", "gradients", "delivered"), (1, "c1", "server", "gradients", "delivered"),
]


def test_upload_rounds_and_partly_seen_by_hand():
    """Mutants: ``upload_rounds`` counting rounds below 0 (a set-up message is no training
    round's call), and counting a lost upload as seen; ``partly_seen`` without ``seen and`` (a
    client called and never seen is unseen, not partly seen)."""
    from fedsim.privacy.audit import observed_clients, partly_seen, upload_rounds

    cap = _fake_capture(_ROUNDS)
    assert upload_rounds(cap) == {"c0": ({0, 1}, {0, 1}), "c1": ({0, 1}, {1}), "c2": ({0}, {0}),
                                  "c3": ({0}, set())}
    assert observed_clients(cap) == ["c0", "c1", "c2"]
    assert partly_seen(cap) == ["c1"]
    assert partly_seen(cap, clients=["c3", "c1", "c2"]) == ["c1"]
    assert upload_rounds(cap, rounds=0) == {"c0": ({0}, {0}), "c1": ({0}, set()), "c2": ({0}, {0}),
                                            "c3": ({0}, set())}


def test_score_links_by_hand():
    """Mutants: a window ``rounds=1`` read as the rounds below 1 (``range(..., rounds)``); the
    candidates counting lost uploads; the random baseline ``1 / (n + 1)``. FedRec++'s anonymous
    noise: round 0 has two uploads delivered (c0, c2) and one lost (c1); round 1 two (c0, c1)."""
    from types import SimpleNamespace

    from fedsim.privacy.audit import score_links
    from fedsim.privacy.views import ref_of

    msgs = [(0, "c0", "server", "gradients", "delivered"), (0, "c1", "server", "gradients", "lost"),
            (0, "c2", "server", "gradients", "delivered"), (0, "c0", "d0", "noise", "delivered"),
            (0, "c2", "d0", "noise", "lost"),
            (1, "c0", "server", "gradients", "delivered"), (1, "c1", "server", "gradients", "delivered"),
            (1, "c1", "d0", "noise", "delivered"), (2, "c0", "d0", "noise", "delivered")]
    cap = _fake_capture(msgs, protocol="fedrecpp")
    ref = {seq: ref_of(seq, cap.key) for seq in range(len(msgs))}  # network 0: the reference of seq
    run = SimpleNamespace(inference={ref[3]: "c0", ref[7]: "c0"})  # right for round 0, wrong for round 1
    rows = score_links(run, cap, rounds=1)
    assert rows == [
        {"target": "c0", "round": 0, "correct": 1.0, "linked": 1.0, "candidates": 2.0, "correct_rand": 0.5},
        {"target": "c1", "round": 1, "correct": 0.0, "linked": 1.0, "candidates": 2.0, "correct_rand": 0.5},
    ]
    assert [r["round"] for r in score_links(run, cap)] == [0, 1, 2]
    assert score_links(run, cap)[2]["correct_rand"] == 0.0  # no upload in round 2: no candidate


# ---------------------------------------------------------------------------------------------
# IMIA


class _Doc:
    def __init__(self, payload):
        self.payload = payload

    def value(self):
        return self.payload


def _fcf_view(msgs, clients, n_items=12):
    """A server's view of an FCF run made of ``msgs`` (kind, round, sender, receiver, payload)."""
    from fedsim.privacy.views import Observed, Public, View, ViewSpec
    from fedsim.protocols.fcf import FCFConfig

    obs = tuple(Observed(i, k, r, s, rc, 0, 0.0, s == "server", _Doc(p)) for i, (k, r, s, rc, p) in enumerate(msgs))
    return View(ViewSpec.server(), Public("fcf", FCFConfig(d=3), "server", tuple(clients), n_items),
                frozenset({"server"}), obs, None)


def test_imia_pairs_an_upload_only_with_the_model_of_its_own_round():
    """Mutant: without ``model.round != m.round``: an upload of round 0 that reached the server
    after it had sent the round-1 model (a late reply) was attacked with the round-1 model, one
    the client never trained on. It is not attacked (the server has no model it knows she used)."""
    from fedsim.privacy.attacks import IMIA

    rng = np.random.default_rng(0)
    q0, q1 = rng.normal(size=(12, 3)), rng.normal(size=(12, 3))
    msgs = [("model", 0, "server", "c0", {"Q": q0}), ("model", 1, "server", "c0", {"Q": q1}),
            ("gradients", 0, "c0", "server", {"grad": rng.normal(size=(12, 3))})]
    assert IMIA().run(_fcf_view(msgs, ["c0"])) == {}
    # the same upload labelled with the round of the last model is attacked
    msgs[2] = ("gradients", 1, "c0", "server", msgs[2][4])
    assert list(IMIA().run(_fcf_view(msgs, ["c0"]))) == ["c0"]


def test_imia_sample_lists_its_users_in_name_order():
    """Mutant: ``users[i] for i in pick`` for ``sorted(pick)``: the sample (``AttackRun.sample``)
    and the attack's answers came in the draw's order. Seed 0 draws users 2 and 0 (in that
    order) of three."""
    from fedsim.privacy.attacks import IMIA
    from fedsim.seeding import node_rng

    assert node_rng(0, "imia:users").choice(3, size=2, replace=False).tolist() == [2, 0]  # the draw, unsorted
    rng = np.random.default_rng(1)
    msgs = []
    for c in ("c0", "c1", "c2"):
        msgs += [("model", 0, "server", c, {"Q": rng.normal(size=(12, 3))}),
                 ("gradients", 0, c, "server", {"grad": rng.normal(size=(12, 3))})]
    view = _fcf_view(msgs, ["c0", "c1", "c2"])
    attack = IMIA(max_users=2, seed=0)
    assert attack.sample(view) == ("c0", "c2")
    assert list(attack.run(view)) == ["c0", "c2"]


def test_replay_lr_is_the_clients_own_decayed_rate():
    """Mutant: the stochastic client's rate replayed from ``lr`` whatever ``client_lr`` (FedRec's
    stochastic clients step with their own rate, decayed per call: client_lr * decay**call)."""
    from fedsim.privacy.attacks.imia import replay_lr
    from fedsim.protocols.fedrec import FedRecConfig

    cfg = FedRecConfig("PMF(S)", lr=0.5, client_lr=0.05, decay=0.8)
    assert replay_lr(cfg, 3, True) == pytest.approx(0.05 * 0.8 ** 3)
    assert replay_lr(cfg.replace(client_lr=None), 3, True) == pytest.approx(0.5 * 0.8 ** 3)
    assert replay_lr(FedRecConfig("PMF(B)", lr=0.5, decay=0.8), 2, False) == pytest.approx(0.5 * 0.8 ** 2)
