"""Every attack on a case where the answer is known by construction (it must recover it) and on a
case where a defence hides the signal (it must fail)."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.privacy import Guess, capture, summarize
from fedsim.privacy.attacks import (
    IMIA, FCFLine, FPLNeverNegative, FPLSign, ImpliedRatings, Intersection, NoiseLinking, NoiseMatching,
    PersonalFRIdleRows, PersonalFRIndices, SgdChain, SizeOnly, SvdppODelta, run_attack, score_sizes,
)
from fedsim.privacy.attacks.implicit import fpl_signs, fpl_split
from fedsim.privacy.audit import attack_capture, known_answer_ratings, observed_clients
from fedsim.privacy.views import Observed, Public, View, ViewSpec, build_view
from fedsim.protocols import REGISTRY
from fedsim.protocols.fcf import FCFConfig
from fedsim.protocols.fedrec import FedRecConfig
from fedsim.protocols.fedrecpp import FedRecPPConfig
from fedsim.protocols.fpl import FPLConfig


@pytest.fixture(scope="module")
def ratings():
    return known_answer_ratings()


def _score(attack, cap, rounds=None):
    run, rows = attack_capture(attack, cap, rounds=rounds, targets=observed_clients(cap, rounds))
    return summarize(rows), run


@pytest.mark.parametrize("strategy", ["ua", "hf"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_implied_ratings_recovers_every_rated_set_of_batch_fedrec(ratings, strategy, dtype):
    cfg = FedRecConfig("PMF(B)", d=4, T=3, rho=1.0, strategy=strategy, T_predict=0, dtype=dtype)
    s, _ = _score(ImpliedRatings(), capture("fedrec", ratings, cfg, seed=3), rounds=[1])
    assert s["users"] == 20 and s["exact"] == 1.0 and s["auc"] == 1.0
    assert s["precision_rand"] == pytest.approx(0.5)  # the baseline 1 / (1 + rho)


@pytest.mark.parametrize("model,attack", [("PMF(S)", SgdChain), ("SVD++(S)", SvdppODelta)])
@pytest.mark.parametrize("strategy", ["ua", "hf"])
def test_stochastic_attacks_recover_every_rated_set(ratings, model, attack, strategy):
    cfg = FedRecConfig(model, d=4, T=3, rho=1.0, strategy=strategy, T_predict=0, lr=0.01)
    s, _ = _score(attack(), capture("fedrec", ratings, cfg, seed=3), rounds=[1])
    assert s["users"] >= 8 and s["exact"] == 1.0


@pytest.mark.parametrize("rounds", [[0], [1], [2], None])
def test_svdpp_odelta_does_not_depend_on_the_rounds_the_server_watched(ratings, rounds):
    # a stochastic client's learning rate decays with its calls since the start of the run; a
    # view of round 1 or 2 holds none of the server's earlier calls, so the attack cannot count
    # them. It used to count the calls in its view, added back the wrong shrink lr lam O_j and,
    # with a lam where that shows (0.05), claimed sampled items: exact 0.385 (round 1) and 0.000
    # (round 2), precision 0.672 and 0.555, against 1.000 for round 0 and every round.
    cfg = FedRecConfig("SVD++(S)", d=4, T=3, rho=1.0, strategy="ua", T_predict=0, lr=0.01, lam=0.05)
    s, _ = _score(SvdppODelta(), capture("fedrec", ratings, cfg, seed=3), rounds=rounds)
    assert s["users"] >= 8 and s["exact"] == 1.0 and s["precision"] == 1.0


@pytest.mark.parametrize("model,attack", [("PMF(B)", ImpliedRatings), ("PMF(S)", SgdChain),
                                          ("SVD++(S)", SvdppODelta)])
def test_local_noise_defeats_the_per_upload_attacks(ratings, model, attack):
    lr = 0.8 if model == "PMF(B)" else 0.01
    cfg = FedRecConfig(model, d=4, T=3, rho=1.0, strategy="ua", lr=lr, upload_noise=1e-3)
    s, _ = _score(attack(), capture("fedrec", ratings, cfg, seed=3), rounds=[1])
    assert s["exact"] == 0.0
    assert s["f1"] <= s["f1_rand"] + 0.1  # no better than guessing among the uploaded items


def test_secure_aggregation_leaves_the_server_nothing_per_user(ratings):
    cfg = FedRecConfig("PMF(B)", d=4, T=3, rho=1.0, secure_aggregation=True, secagg_neighbours=4)
    cap = capture("fedrec", ratings, cfg, seed=3)
    for attack in (ImpliedRatings(), Intersection(), IMIA()):
        s, run = _score(attack, cap, rounds=[1, 2])
        assert run.inference == {} and s["users"] == 20 and s["recall"] == 0.0 and s["auc"] == 0.5
    # the size observer saw every (masked) upload, all of one size, and reads nothing from them; it
    # used to read the unmasked kind only, and its row said it saw no user (size_users 0)
    _, (row,) = attack_capture(SizeOnly(), cap, rounds=[1])
    from fedsim.kernel.ledger import BYTES, KIND, ROUND

    masked = {r[BYTES] for r, *_ in cap.recorder.entries if r[KIND] == "masked" and r[ROUND] == 1}
    assert len(masked) == 1 and row["size_estimate"] == "upload bytes" and row["size_users"] == 20
    size = float(next(iter(masked)))
    assert run_attack(SizeOnly(), cap.recorder, cap.public, rounds=[1]).inference == {u: size for u in cap.truth}
    assert np.isnan(row["size_exact"]) and np.isnan(row["size_mre"]) and np.isnan(row["size_spearman"])


def test_intersection_needs_resampling(ratings):
    cfg = FedRecConfig("PMF(B)", d=4, T=4, rho=1.0)
    s, _ = _score(Intersection(), capture("fedrec", ratings, cfg, seed=3), rounds=[0, 1, 2, 3])
    assert s["recall"] == 1.0 and s["precision"] > 0.9 and s["precision"] > s["precision_rand"] + 0.2
    # sampling once (resample=False) gives the same item set every time: nothing to intersect
    cfg = FedRecConfig("PMF(B)", d=4, T=4, rho=1.0, resample=False)
    s, _ = _score(Intersection(), capture("fedrec", ratings, cfg, seed=3), rounds=[0, 1, 2, 3])
    assert s["precision"] == pytest.approx(0.5) and s["exact"] == 0.0


@pytest.mark.parametrize("eta", [1, 5])
def test_noise_matching_under_collusion(ratings, eta):
    cap = capture("fedrecpp", ratings, FedRecPPConfig(d=4, T=2, rho=1.0, eta=eta), seed=3)
    s, run = _score(NoiseMatching(), cap, rounds=[1])
    assert s["exact"] == 1.0 and s["users"] == 20 - eta  # every ordinary client, exactly
    if eta > 1:  # one colluding denoiser: its own group exactly, the others only the upload
        s1, _ = _score(NoiseMatching(1), cap, rounds=[1])
        assert 0 < s1["exact"] < 1.0


def test_secure_noise_breaks_the_matching_only_for_large_groups(ratings):
    big = capture("fedrecpp", ratings, FedRecPPConfig(d=4, T=2, rho=1.0, eta=1, secure_noise=True,
                                                       secagg_neighbours=2), seed=3)
    s, run = _score(NoiseMatching(), big, rounds=[1])
    # one group of 19: the others' sampled items cover the catalogue; nothing is left to claim
    assert s["exact"] == 0.0 and s["recall"] < 0.05
    small = capture("fedrecpp", ratings, FedRecPPConfig(d=4, T=2, rho=1.0, eta=5, secure_noise=True,
                                                         secagg_neighbours=2), seed=3)
    s2, _ = _score(NoiseMatching(), small, rounds=[1])
    assert s2["exact"] == 0.0 and s2["recall"] > 0.2  # groups of three hide little


def test_network_linking_by_order_and_size(ratings):
    cap = capture("fedrecpp", ratings, FedRecPPConfig(d=4, T=2, rho=1.0, eta=1), seed=3)
    _, rows = attack_capture(NoiseLinking("time"), cap, rounds=[1])
    assert len(rows) == 19 and np.mean([r["correct"] for r in rows]) == 1.0  # a FIFO channel keeps the order
    # secure noise: every noise message has the same size; sizes alone link no better than chance
    sec = capture("fedrecpp", ratings, FedRecPPConfig(d=4, T=2, rho=1.0, eta=1, secure_noise=True,
                                                       secagg_neighbours=2), seed=3)
    _, rows = attack_capture(NoiseLinking("size"), sec, rounds=[1])
    assert np.mean([r["correct"] for r in rows]) <= 3.0 / 19


@pytest.fixture(scope="module")
def implicit():
    return known_answer_ratings(n_users=12, n_items=200, per_user=(15, 25)).binarize()


@pytest.mark.parametrize("pi,rounds", [(0.5, 6), (1.0, 6), (1.0, 120)])
def test_fpl_sign_split_is_exact(implicit, pi, rounds):
    # 120 rounds: late in training g is small and the factor parts alone no longer split cleanly
    cfg = FPLConfig(clients_per_round=12, triples=10, rounds=rounds, d=4, pi=pi, lr=0.2)
    cap = capture("fpl", implicit, cfg, seed=2)
    s, run = _score(FPLSign(), cap)
    assert s["precision"] == 1.0  # every item in a positive group is consumed
    sent = cap.result.info["sent_positive"].sum()
    assert sent > 0 and s["recall"] > 0.3


def test_fpl_sign_finds_nothing_at_pi_zero_and_under_secure_aggregation(implicit):
    cap = capture("fpl", implicit, FPLConfig(clients_per_round=12, triples=10, rounds=6, d=4, pi=0.0), seed=2)
    s, _ = _score(FPLSign(), cap)
    assert s["recall"] == 0.0 and s["precision"] == 0.0
    run = run_attack(FPLNeverNegative(), cap.recorder, cap.public)
    for user, g in run.inference.items():
        # negatives are never consumed: every consumed item the server has seen as anyone's negative
        # is among the items never seen as hers
        seen = np.intersect1d(cap.truth[user], g.pool)
        assert seen.size and np.isin(seen, g.predicted).all()
    sec = capture("fpl", implicit, FPLConfig(clients_per_round=12, triples=10, rounds=6, d=4, pi=1.0,
                                             secure_aggregation=True, secagg_neighbours=4), seed=2)
    for attack in (FPLSign(), FPLNeverNegative()):
        s, run = _score(attack, sec)
        assert run.inference == {} and s["recall"] == 0.0
    _, (row,) = attack_capture(SizeOnly(), sec)  # every masked update seen, one size: nothing read
    assert row["size_estimate"] == "upload bytes" and row["size_users"] == len(observed_clients(sec)) == 12
    assert np.isnan(row["size_spearman"])


def test_fpl_attacks_answer_in_the_order_the_uploads_were_observed(implicit):
    # fpl_never_negative collected its users in a set of node ids: its answer's order changed with
    # PYTHONHASHSEED from one process to the next (the cross-process check is
    # tests/test_determinism_across_processes.py); both FPL attacks now follow the view's order
    cap = capture("fpl", implicit, FPLConfig(clients_per_round=5, triples=4, rounds=3, d=4, pi=0.5), seed=6)
    view = build_view(ViewSpec.server(), cap.recorder, cap.public)
    first_seen = list(dict.fromkeys(m.sender for m in view.messages if m.kind == "update" and not m.outgoing))
    assert len(first_seen) == 8 and first_seen != sorted(first_seen)  # an order a sort would not give
    for attack in (FPLSign(), FPLNeverNegative()):
        run = run_attack(attack, cap.recorder, cap.public)
        assert list(run.inference) == first_seen, attack.name


def test_fcf_line_recovers_consumed_items(implicit):
    cap = capture("fcf", implicit, FCFConfig(rounds=2, d=4), seed=2)
    s, _ = _score(FCFLine(threshold=0.01), cap, rounds=[1])
    assert s["exact"] == 1.0


def _fake_view(protocol, cfg, n_items, messages):
    obs = tuple(Observed(i, k, r, s, rc, 0, 0.0, s == "server", _Doc(p)) for i, (k, r, s, rc, p) in
                enumerate(messages))
    return View(ViewSpec.server(), Public(protocol, cfg, "server", ("client/0000",), n_items), frozenset({"server"}),
                obs, None)


class _Doc:
    def __init__(self, p):
        self.p = p

    def value(self):
        return self.p


def test_fcf_line_fails_when_the_rows_are_not_rank_one():
    rng = np.random.default_rng(0)
    Q = rng.normal(size=(300, 4))
    grad = rng.normal(size=(300, 4))  # what the server would see if clients sent noise
    view = _fake_view("fcf", FCFConfig(d=4), 300, [("model", 0, "server", "client/0000", {"Q": Q}),
                                                    ("gradients", 0, "client/0000", "server", {"grad": grad})])
    g = FCFLine(threshold=0.01).run(view)["client/0000"]
    truth = np.arange(10)
    precision = np.intersect1d(g.predicted, truth).size / max(g.predicted.size, 1)
    assert precision <= 2 * truth.size / 300  # no better than claiming items at random


def test_personalfr_indices_is_full_disclosure_and_fedavg_none():
    spec = REGISTRY["personalfr"]
    data, cfg = spec.tiny(4, 1, 0)
    cap = capture("personalfr", data, cfg, seed=1)
    s, _ = _score(PersonalFRIndices(), cap)
    assert s["exact"] == 1.0 and s["users"] == 4
    spec = REGISTRY["fedavg-ae"]
    data, cfg = spec.tiny(4, 1, 0)
    cap = capture("fedavg-ae", data, cfg, seed=1)
    run = run_attack(PersonalFRIndices(), cap.recorder, cap.public)
    assert run.inference == {}  # FedAvg sends the whole model: no item list to read


def test_uncompressed_personalfr_gives_the_indices_and_size_attacks_nothing_to_read():
    # without Partial Compression no client sends its item set (docs/personalfr.md): until
    # 2026-11-28 the indices went all the same, and both attacks read every client's I_m exactly
    spec = REGISTRY["personalfr"]
    data, cfg = spec.tiny(4, 1, 0)
    cap = capture("personalfr", data, cfg.replace(compression=False), seed=1)
    # the server saw every client upload (its update: tiny selects them all), and no item set
    assert observed_clients(cap) == list(cap.public.clients) and len(cap.public.clients) == 4
    assert run_attack(PersonalFRIndices(), cap.recorder, cap.public).inference == {}
    assert run_attack(SizeOnly(), cap.recorder, cap.public).inference == {}
    assert len(cap.result.ledger.select(kind="update"))  # the run did train


def _rows_off_the_zero_gradient_path(sent, update):
    """The output rows of an uncompressed PersonalFR update that did not follow the path of a row
    with no gradient: starting from zero momentum, K local SGD steps map every such row (weight,
    bias) to c times the row sent, one c for all of them (weight decay only), so the rows off that
    line are the ones the client's data reached."""
    w0, w1 = (np.asarray(d["dec.W2"], np.float64) for d in (sent, update))
    b0, b1 = (np.asarray(d["dec.b2"], np.float64) for d in (sent, update))
    c = np.median(np.linalg.norm(w1, axis=1) / np.linalg.norm(w0, axis=1))
    off = np.abs(w1 - c * w0).max(axis=1) + np.abs(b1 - c * b0)
    return np.flatnonzero(off > 1e-6 * (1 + np.abs(w0).max()))


def test_an_uncompressed_personalfr_update_still_shows_the_item_set():
    # what dropping the indices does not hide (docs/privacy.md): the whole decoder a client returns
    # moved only by weight decay on the rows of items its users did not rate, so a server comparing
    # it with the decoder it sent reads I_m exactly, at a client's first selection (momentum zero)
    from fedsim.kernel.ledger import KIND, ROUND, SRC

    spec = REGISTRY["personalfr"]
    data, cfg = spec.tiny(6, 2, 0)
    cap = capture("personalfr", data, cfg.replace(compression=False, fraction=0.5), seed=1)
    sent = {row[ROUND]: doc.value()["dec"] for row, doc, _ in cap.recorder.entries if row[KIND] == "decoder"}
    first, checked = set(), 0
    for row, doc, _ in cap.recorder.entries:
        if row[KIND] == "update" and row[SRC] not in first:
            first.add(row[SRC])
            got = _rows_off_the_zero_gradient_path(sent[row[ROUND]], doc.value()["dec"])
            np.testing.assert_array_equal(got, cap.truth[row[SRC]])
            checked += 1
    assert checked == len(first) >= 4 and all(0 < cap.truth[u].size < data.n_items for u in first)


def test_size_only_reads_the_rated_count_off_fedrec_uploads(ratings):
    cap = capture("fedrec", ratings, FedRecConfig("PMF(B)", d=4, T=2, rho=2.0), seed=3)
    run = run_attack(SizeOnly(), cap.recorder, cap.public)
    out = score_sizes(run.inference, cap.truth)
    assert out["size_users"] == 20 and out["size_exact"] == 1.0
    # the audit's entry point scores it the same way (it used to treat the counts as item guesses)
    _, rows = attack_capture(SizeOnly(), cap)
    assert rows == [out]
    _, rows = attack_capture(SizeOnly(), cap, targets=sorted(cap.truth)[:5])
    assert rows[0]["size_users"] == 5 and rows[0]["size_exact"] == 1.0


def test_size_only_at_the_sampling_cap_gives_the_lower_bound(ratings):
    # 90 items, 24-40 ratings: at rho 2 a user with n >= 30 uploads all 90 rows (the sampling is
    # capped by her m - n unrated items), so her size says only n >= 30
    capped = known_answer_ratings(per_user=(24, 40))
    m = capped.n_items
    for rho in (2.0, 3.0):
        cap = capture("fedrec", capped, FedRecConfig("PMF(B)", d=4, T=1, rho=rho), seed=3)
        est = run_attack(SizeOnly(), cap.recorder, cap.public).inference
        n_min = next(n for n in range(m + 1) if n + int(rho * n) >= m)
        assert sorted(est) == sorted(cap.truth)  # nobody drops out of the score
        for user, items in cap.truth.items():
            n = len(items)
            assert est[user] == (n if n + int(rho * n) < m else n_min), (rho, user, n)
        assert any(len(items) + int(rho * len(items)) >= m for items in cap.truth.values())


def test_network_linking_at_the_sampling_cap():
    # users at the cap send noise of m - n rows beside an upload of m rows: the sizes must not
    # rule their true links out (they did when the noise was predicted as int(rho n) rows)
    capped = known_answer_ratings(per_user=(24, 40))
    cap = capture("fedrecpp", capped, FedRecPPConfig(d=4, T=2, rho=2.0, eta=1), seed=3)
    _, rows = attack_capture(NoiseLinking("size+time"), cap, rounds=[1])
    assert len(rows) == 19 and np.mean([r["correct"] for r in rows]) == 1.0


def test_fpl_split_leaves_a_row_without_a_bias_sign_out_of_both_groups():
    # a bias delta of exactly 0 is g underflowed (its factor part is then -lambda q, with no p_u
    # component) and a NaN one a diverging round: neither has a side. The split used to put such
    # a row on the side of the factor parts' principal direction.
    p = np.array([1.0, 0.2])
    F = np.array([p, 0.9 * p, 1.1 * p, -p, -0.8 * p, 0.7 * p, 0.3 * p])
    g = np.array([0.3, 0.3, 0.3, -0.3, -0.3, 0.0, np.nan])
    rows = np.column_stack([F, g])
    np.testing.assert_array_equal(fpl_signs(np.arange(7), rows, None, 0.0), [1, 1, 1, -1, -1, 0, 0])
    np.testing.assert_array_equal(fpl_split(np.arange(7), rows, None, 0.0), [True] * 3 + [False] * 4)


def test_fpl_sign_stays_exact_when_the_regularisation_makes_the_scores_run_away():
    # lr = 1 and reg_scale = 20 (lambda_user = lambda_pos = 1): after a few rounds x_uij is so large
    # that g = sigma(-x_uij) is 0 in float32 for 1038 of the 6407 rows sent; the tie-break by the
    # factor parts (-lambda q there) claimed negatives: precision 0.370 after 30 rounds, and the
    # never-negative set lost 70 % of I_u (recall 0.299)
    data = known_answer_ratings(n_users=12, n_items=80, per_user=(10, 14)).binarize()
    cfg = FPLConfig(clients_per_round=12, triples=12, rounds=30, d=4, pi=0.5, lr=1.0, reg_scale=20.0)
    cap = capture("fpl", data, cfg, seed=1)
    zero = sum(int((np.asarray(p.value()["rows"])[:, -1] == 0).sum()) for row, p, _ in cap.recorder.entries
               if row[6] == "update")
    assert zero == 1038 and cap.result.info["diverged_at"] is None
    s = summarize(attack_capture(FPLSign(), cap)[1])
    assert (s["users"], s["precision"], s["recall"], s["exact"]) == (12, 1.0, 1.0, 1.0)
    s = summarize(attack_capture(FPLNeverNegative(), cap)[1])
    assert s["recall"] == 1.0 and s["precision"] > 0.99
    # a run that diverges (non-finite rows in its last round): the split used to raise LinAlgError
    cfg = FPLConfig(clients_per_round=12, triples=12, rounds=60, d=4, pi=0.5, lr=2.0)
    cap = capture("fpl", data, cfg, seed=1)
    assert cap.result.info["diverged_at"] == 54
    s = summarize(attack_capture(FPLSign(), cap)[1])
    assert (s["precision"], s["recall"]) == (1.0, 1.0)


class _OracleIMIA(IMIA):
    """IMIA with a shadow that reproduces an item's real update exactly when its guessed label is
    right (the ideal shadow), or a random one when told to fail."""

    def __init__(self, truth, real, fail=False, **kw):
        super().__init__(**kw)
        self.truth, self.real, self.fail = truth, real, fail

    def shadow(self, cfg, model, items, labels, rng, call, stochastic):
        if self.fail:
            return rng.normal(size=self.real.shape)
        right = np.isin(items, self.truth) == (labels > 0)
        return np.where(right[:, None], self.real, self.real + 10.0)


def test_imia_loop_recovers_the_positives_with_an_ideal_shadow_and_not_with_a_useless_one():
    rng = np.random.default_rng(1)
    items = np.arange(40)
    grads = rng.normal(size=(40, 4))
    truth = np.arange(0, 40, 2)  # half of the pool: rho = 1
    view = _fake_view("fedrec", FedRecConfig("PMF(B)", d=4, rho=1.0), 40, [
        ("model", 0, "server", "client/0000", {"t": 0, "V": np.zeros((40, 4), np.float32)}),
        ("gradients", 0, "client/0000", "server", {"items": items.astype(np.int32), "grads": grads})])
    # confirming a few items per iteration, it confirms only right labels until the very end (where
    # the last random fill may be wrong): at most two mistakes
    g = _OracleIMIA(truth, grads, lam=0.05, max_iter=200).run(view)["client/0000"]
    assert g.predicted.size == truth.size and np.intersect1d(g.predicted, truth).size >= truth.size - 2
    bad = _OracleIMIA(truth, grads, fail=True, lam=0.05, max_iter=200).run(view)["client/0000"]
    hit = np.intersect1d(bad.predicted, truth).size / max(bad.predicted.size, 1)
    assert 0.2 < hit < 0.8  # about the half a random guess gets


def test_imia_runs_on_every_protocol_it_declares(ratings, implicit):
    caps = [capture("fedrec", ratings, FedRecConfig("PMF(B)", d=4, T=2, rho=1.0), seed=3),
            capture("fedrec", ratings, FedRecConfig("PMF(S)", d=4, T=1, rho=1.0, lr=0.01), seed=3),
            capture("fedrecpp", ratings, FedRecPPConfig(d=4, T=2, rho=1.0, eta=1), seed=3),
            capture("fpl", implicit, FPLConfig(clients_per_round=12, triples=10, rounds=2, d=4), seed=2),
            capture("fcf", implicit, FCFConfig(rounds=1, d=4), seed=2)]
    for cap in caps:
        run = run_attack(IMIA(max_users=5), cap.recorder, cap.public)
        assert 1 <= len(run.inference) <= 5 and all(isinstance(g, Guess) for g in run.inference.values())


def test_network_linking_by_time_has_no_global_order_to_read(ratings):
    # five denoisers, ideal profile: every time is 0. The observer sees the order of arrival at
    # each watched link, not an order between the server's and the denoisers' links; the view
    # used to list them in the run's sending order (each noise right after its sender's upload)
    # and time alone linked 15 / 15. What is left: 4 / 15 by time, 9 / 15 with sizes.
    cap = capture("fedrecpp", ratings, FedRecPPConfig(d=4, T=2, rho=1.0, eta=5), seed=3)
    _, rows = attack_capture(NoiseLinking("time"), cap, rounds=[1])
    assert len(rows) == 15 and sum(r["correct"] for r in rows) == 4.0
    _, rows = attack_capture(NoiseLinking("size+time"), cap, rounds=[1])
    assert sum(r["correct"] for r in rows) == 9.0


def test_noise_matching_uses_every_denoisers_sums_the_server_reads(ratings):
    # the server reads every denoiser's `denoised` message, under its name: a user outside the
    # colluding denoiser's group is still left with her upload minus her group's noise items. The
    # attack used the colluding denoisers' messages alone, and gave such a user her whole upload,
    # understating what the server learns. What it now claims wrongly can only be a sampled item
    # her denoiser rated itself (its count of -1 cancels the noise's +1 in the sums it sends)
    plain = capture("fedrecpp", ratings, FedRecPPConfig(d=4, T=2, rho=1.0, eta=5), seed=3)
    assignment = plain.result.info["assignment"]
    run, rows = attack_capture(NoiseMatching(1), plain, rounds=[1], targets=observed_clients(plain, [1]))
    assert len(run.inference) == 15
    for user, guess in run.inference.items():
        wrong = set(guess.predicted.tolist()) - set(plain.truth[user].tolist())
        assert wrong <= set(plain.truth[assignment[user]].tolist()), (user, sorted(wrong))
    s1 = summarize(rows)
    assert s1["precision"] > 0.8 and 0 < s1["exact"] < 1.0  # (it was 0.60: whole uploads, rho = 1)
    secure = capture("fedrecpp", ratings, FedRecPPConfig(d=4, T=2, rho=1.0, eta=5, secure_noise=True,
                                                         secagg_neighbours=2), seed=3)
    one, _ = _score(NoiseMatching(1), secure, rounds=[1])
    every, _ = _score(NoiseMatching(), secure, rounds=[1])
    assert one == every  # under secure noise one colluding denoiser adds nothing to the server's sums


def _recording_clients(monkeypatch):
    """Patch FedRec's client classes to record, per client (by its rated items), the iteration
    and the learning rate of every training call it makes."""
    from fedsim.protocols import fedrec as fedrec_proto

    seen: dict[tuple, list] = {}

    class Batch(fedrec_proto.BatchClient):
        def step(self, U_u, V, t, lr, rng=None, sampled=None):
            seen.setdefault(tuple(self.rated.tolist()), []).append((t, lr))
            return super().step(U_u, V, t, lr, rng, sampled)

    class SGD(fedrec_proto.SGDClient):
        def call(self, U_u, V, O, t, lr, rng=None, sampled=None):
            seen.setdefault(tuple(self.rated.tolist()), []).append((t, lr))
            return super().call(U_u, V, O, t, lr, rng, sampled)

    monkeypatch.setattr(fedrec_proto, "BatchClient", Batch)
    monkeypatch.setattr(fedrec_proto, "SGDClient", SGD)
    return seen


@pytest.mark.parametrize("model,lr,window,users,late", [
    ("PMF(B)", 0.8, (2,), 20, 20), ("PMF(S)", 0.01, (2,), 12, 9),
    ("PMF(S)", 0.01, (1, 3), 19, 15),  # round 2, between the two, is left out: its calls count too
])
def test_imia_replays_each_upload_with_the_rate_the_client_used_when_the_window_starts_late(
        ratings, monkeypatch, model, lr, window, users, late):
    # the attacker counted a client's calls from the first round of its view: with a window
    # starting at round 2, it replayed the batch client's upload with decayed_lr(lr, 0) instead
    # of decayed_lr(lr, 2), and a stochastic client's with its first call's rate instead of the
    # rate after the calls of rounds 0 and 1 (which the server made, and counts: View.outside)
    from fedsim.privacy.attacks.imia import replay_lr

    seen = _recording_clients(monkeypatch)
    cfg = FedRecConfig(model, d=4, T=4, rho=1.0, lr=lr)
    cap = capture("fedrec", ratings, cfg, seed=3)
    csr = ratings.by_user()
    rated = {f"client/{u:04d}": tuple(np.asarray(csr.row_indices(u)).tolist()) for u in range(ratings.n_users)}
    assert len(set(rated.values())) == ratings.n_users  # a client is told apart by its items
    view = build_view(IMIA.view, cap.recorder, cap.public, rounds=window, key=cap.key)
    calls = IMIA().calls(view)
    stochastic = model != "PMF(B)"
    assert len(calls) == users
    n_late = 0
    for user, call in calls.items():
        log = seen[rated[user]]
        # the client's first training call in the window, by hand: its t and the rate it used
        k = next(i for i, (t, _) in enumerate(log) if t in window)
        t, used = log[k]
        assert call == (k if stochastic else t)  # calls made before it (stochastic), its iteration (batch)
        assert replay_lr(cfg, call, stochastic) == used
        n_late += call > 0
    assert n_late == late  # users with calls before their first one in the window (all, in batch)


def test_imia_scores_at_least_as_well_with_the_clients_rates_on_a_late_window(ratings):
    # measured on this run before the fix (call counted from the window's first round) and after:
    # PMF(S) seed 1 F1 0.5206 -> 0.5234 (AUC 0.8014 -> 0.8027), seed 0 unchanged; PMF(B) unchanged
    # to the last digit (in the code's order a batch client's item gradients do not depend on lr)
    want = {("PMF(B)", 0): (20, 0.492979, 0.793798), ("PMF(B)", 1): (20, 0.498780, 0.795066),
            ("PMF(S)", 0): (12, 0.473936, 0.780229), ("PMF(S)", 1): (12, 0.523365, 0.802740)}
    for model, lr in (("PMF(B)", 0.8), ("PMF(S)", 0.01)):
        cap = capture("fedrec", ratings, FedRecConfig(model, d=4, T=4, rho=1.0, lr=lr), seed=3)
        for seed in (0, 1):
            _, rows = attack_capture(IMIA(seed=seed), cap, rounds=(2,), targets=observed_clients(cap, (2,)))
            s = summarize(rows)
            users, f1, auc = want[model, seed]
            assert s["users"] == users
            assert s["f1"] == pytest.approx(f1, abs=1e-6) and s["auc"] == pytest.approx(auc, abs=1e-6)


@pytest.mark.parametrize("model", ["PMF(B)", "PMF(S)"])
def test_imia_shadow_steps_in_the_clients_update_order(model):
    # the shadow always stepped in the code's order; with order="paper" the client takes its
    # item gradients with the updated U_u (and lr moves them)
    from fedsim.math.pmf import init_user_factor, pmf_batch_client, pmf_sgd_client
    from fedsim.privacy.attacks.imia import replay_lr

    rng = np.random.default_rng(0)
    V = rng.normal(size=(10, 4)).astype(np.float32)
    items = np.arange(10)
    labels = (items % 2).astype(np.float64)
    cfg = FedRecConfig(model, d=4, lr=0.8, order="paper")
    stochastic = model != "PMF(B)"
    got = IMIA().shadow(cfg, {"V": V, "t": 1}, items, labels, np.random.default_rng(1), 1, stochastic)
    U = init_user_factor(np.random.default_rng(1), 4, scale=cfg.init_scale, dtype=V.dtype)
    step = pmf_sgd_client if stochastic else pmf_batch_client
    _, g = step(U, V, labels.astype(V.dtype), replay_lr(cfg, 1, stochastic), cfg.lam, order="paper")
    np.testing.assert_array_equal(got, np.asarray(g, dtype=np.float64))
    _, g_code = step(U, V, labels.astype(V.dtype), replay_lr(cfg, 1, stochastic), cfg.lam, order="code")
    assert np.abs(got - g_code).max() > 1e-3


FPL_OPTIONS = [{}, {"merge": "sum"}, {"merge": "last"}, {"local_item_updates": True},
               {"user_update": "end_of_round"}, {"merge": "last", "local_item_updates": True}]


@pytest.mark.parametrize("opts", FPL_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "default")
def test_imia_fpl_shadow_replays_the_clients_own_update_rule(implicit, opts):
    # the shadow replayed every upload with the default rule (merge none, item parameters frozen,
    # p_u per triple) whatever the run's options. Given the client's own data (her items as the
    # guessed positives over the whole catalogue) and her generator, the shadow must reproduce
    # her first upload, per item, bit for bit: same p_u draw, same triples, same rule
    from fedsim.seeding import node_rng

    cfg = FPLConfig(clients_per_round=12, triples=10, rounds=1, d=4, pi=1.0, lr=0.2, **opts)
    cap = capture("fpl", implicit, cfg, seed=2)
    view = build_view(IMIA.view, cap.recorder, cap.public, key=cap.key)
    first = IMIA()._first_uploads(view)
    assert len(first) == 12
    n = cap.public.n_items
    catalogue = np.unique(np.asarray(implicit.items))
    for user, (model, up, _) in first.items():
        pool, real = IMIA()._real("fpl", cfg, up, n)
        labels = np.isin(catalogue, cap.truth[user]).astype(np.float64)
        sim = IMIA().shadow(cfg, model, catalogue, labels, node_rng(2, user), 0, False)
        where = np.searchsorted(catalogue, pool)
        np.testing.assert_array_equal(sim[where], real)
        rest = np.ones(catalogue.size, dtype=bool)
        rest[where] = False
        assert not sim[rest].any()  # nothing for an item she did not upload


@pytest.mark.parametrize("opts,want", [({"merge": "last"}, (0.313201, 0.850186)),
                                       ({"merge": "last", "local_item_updates": True}, (0.311617, 0.850186))])
def test_imia_on_fpl_with_merge_last_scores_above_the_default_rule_shadow(implicit, opts, want):
    # mean over IMIA seeds 0-4 on 12 users, T = 40. Measured before the fix (the shadow summed
    # every triple's row where the client sends each item's last one): F1 0.2614 AUC 0.8441
    # (merge last), 0.2601 / 0.8439 (and local item updates); random F1 0.2297; the default
    # rule's run scores 0.3113 / 0.8493 with either shadow
    cfg = FPLConfig(clients_per_round=12, triples=40, rounds=1, d=4, pi=1.0, lr=0.2, **opts)
    cap = capture("fpl", implicit, cfg, seed=2)
    f1, auc = [], []
    for seed in range(5):
        _, rows = attack_capture(IMIA(seed=seed), cap, targets=observed_clients(cap))
        s = summarize(rows)
        assert s["users"] == 12
        f1.append(s["f1"])
        auc.append(s["auc"])
    assert np.mean(f1) == pytest.approx(want[0], abs=1e-6) and np.mean(auc) == pytest.approx(want[1], abs=1e-6)
    assert s["f1_rand"] == pytest.approx(0.2297, abs=1e-4)


def test_size_only_on_unmerged_fpl_reads_the_positives_sent_per_round(implicit):
    cfg = FPLConfig(clients_per_round=12, triples=40, rounds=20, d=4, pi=0.5, lr=0.05)
    cap = capture("fpl", implicit, cfg, seed=2)
    run, rows = attack_capture(SizeOnly(), cap)
    info = cap.result.info
    want = info["sent_positive"] / info["rounds"]
    got = np.array([run.inference[u] for u in cap.public.clients])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert rows[0]["size_estimate"] == "positives sent per round" and np.isnan(rows[0]["size_exact"])


@pytest.mark.parametrize("merge", ["sum", "last"])
def test_size_only_on_merged_fpl_estimates_the_item_count(implicit, merge):
    # merged, a client sends one row per distinct item: k = T + positives sent (what the attack
    # assumed) was wrong, its estimate was mean(k) - T (negative here) and unscored against |I_u|.
    # Now it inverts E[k | n]; with the catalogue negatives are drawn from (142 of the 200 items)
    from fedsim.privacy.attacks.size import fpl_merged_count

    cfg = FPLConfig(clients_per_round=12, triples=40, rounds=20, d=4, pi=1.0, lr=0.05, merge=merge,
                    record_received=True)
    cap = capture("fpl", implicit, cfg, seed=2)
    m = np.unique(np.asarray(implicit.items)).size
    assert m == 142
    run = run_attack(SizeOnly(catalogue=m), cap.recorder, cap.public)
    k = {}
    for _, sender, items, _ in cap.result.info["received"]:
        assert np.unique(items).size == items.size  # one row per item
        k.setdefault(sender, []).append(items.size)
    assert sorted(k) == sorted(run.inference)
    for user, ks in k.items():
        assert run.inference[user] == fpl_merged_count(float(np.mean(ks)), m, 40, 1.0)
    est = [run.inference[u] for u in cap.public.clients]
    assert est == [17.0, 16.0, 21.0, 23.0, 17.0, 29.0, 24.0, 25.0, 15.0, 14.0, 19.0, 25.0]
    assert [len(cap.truth[u]) for u in cap.public.clients] == [17, 16, 20, 22, 17, 25, 24, 24, 16, 15, 19, 25]
    out = score_sizes(run.inference, cap.truth, estimate="|I_u|")
    assert out["size_exact"] == pytest.approx(0.5) and out["size_mre"] == pytest.approx(1 / 48)
    assert out["size_spearman"] == pytest.approx(0.989405, abs=1e-6)
    # the audit's entry point (catalogue: the public n_items, 200) says what it estimated
    _, rows = attack_capture(SizeOnly(), cap)
    assert rows[0]["size_estimate"] == "|I_u|" and rows[0]["size_mre"] == pytest.approx(0.1225)


def _hand_made_rounds():
    """Two rounds of one client of a 6-item decoder (3 hidden units: output rows W 6 x 3 and biases
    b), float32, stepped with the protocol's own rule (``optim.sgd_step``): its users rated items 1
    and 4, the only rows with a gradient; 2 local epochs of 2 batches (S = 4 Nesterov steps a round),
    lr 0.1 in round 1 and 0.05 in round 2 (cosine over 2 rounds), weight decay 0.01, momentum 0.9,
    the buffer kept between the rounds; the server's second decoder is another one (its merge).
    Returns ``(cfg, [(round, sent, returned)])`` (decoders as dicts)."""
    from fedsim.math import optim

    cfg = REGISTRY["personalfr"].Config(rounds=2, lr=0.1, local_epochs=2, momentum=0.9, nesterov=True,
                                        weight_decay=0.01, compression=False, clients=1)
    assert (cfg.lr_at(1), cfg.lr_at(2)) == (0.1, 0.05)
    rng = np.random.default_rng(7)
    hidden = {"dec.W1": np.zeros((3, 2), np.float32), "dec.b1": np.zeros(3, np.float32)}
    state = None
    out = []
    for t in (1, 2):
        sent = {**hidden, "dec.W2": rng.normal(size=(6, 3)).astype(np.float32),
                "dec.b2": rng.normal(size=6).astype(np.float32)}
        p = {k: sent[k].copy() for k in ("dec.W2", "dec.b2")}
        state = optim.sgd_init(p) if state is None else state
        for _ in range(4):
            g = {k: np.zeros_like(v) for k, v in p.items()}
            g["dec.W2"][[1, 4]] = rng.normal(size=(2, 3))
            g["dec.b2"][[1, 4]] = rng.normal(size=2)
            optim.sgd_step(p, g, state, lr=cfg.lr_at(t), momentum=0.9, nesterov=True, weight_decay=0.01)
        out.append((t, sent, {**hidden, **p}))
    return cfg, out


def test_idle_rows_reads_a_hand_made_decoder_exactly_and_needs_the_kept_momentum():
    from fedsim.privacy.attacks.personalfr import idle_map, steps_of

    cfg, rounds = _hand_made_rounds()
    (_, d1, u1), (_, d2, u2) = rounds
    idle = [0, 2, 3, 5]
    # the closed form (module docstring of fedsim/privacy/attacks/personalfr.py): one zero-gradient
    # Nesterov step maps (p, buf) by [[1 - lr wd (1 + mu), -lr mu^2], [wd, mu]]; four steps from a zero
    # buffer give c1 p, and the buffer e1 p carried into round 2 gives c2 q + f2 e1 p there
    np.testing.assert_array_equal(idle_map(1, 0.1, 0.9, True, 0.01), [[1 - 0.1 * 0.01 * 1.9, -0.1 * 0.81], [0.01, 0.9]])
    (c1, _), (e1, _) = idle_map(4, 0.1, 0.9, True, 0.01)
    (c2, f2), _ = idle_map(4, 0.05, 0.9, True, 0.01)
    for key in ("dec.W2", "dec.b2"):
        np.testing.assert_allclose(u1[key][idle], c1 * d1[key][idle].astype(np.float64), rtol=1e-6)
        np.testing.assert_allclose(u2[key][idle], c2 * d2[key][idle].astype(np.float64)
                                   + f2 * e1 * d1[key][idle].astype(np.float64), rtol=1e-6)
    rows = [np.column_stack([d["dec.W2"], d["dec.b2"]]) for d in (d1, u1)]
    assert steps_of(*rows, 0.1, 0.9, True, 0.01, per=2) == 4  # 2 epochs of 2 batches, read off the update
    msgs = [m for t, d, u in rounds for m in (("decoder", t, "server", "client/0000", {"t": t, "dec": d}),
                                              ("update", t, "client/0000", "server", {"dec": u}))]
    g = PersonalFRIdleRows().run(_fake_view("personalfr", cfg, 6, msgs))["client/0000"]
    np.testing.assert_array_equal(g.predicted, [1, 4])
    assert g.scores[idle].max() <= 2.0 and g.scores[[1, 4]].min() > 1e4  # (rounding units off the idle path)
    # the same updates read as if the client reset its momentum: round 2's untouched rows carry the buffer
    # e1 d1 the reading leaves out, and every row is off its path (the median check's failure on kept momentum)
    g = PersonalFRIdleRows().run(_fake_view("personalfr", cfg.replace(client_momentum="reset"), 6, msgs))["client/0000"]
    np.testing.assert_array_equal(g.predicted, np.arange(6))
    # with compression the update is the active slice, whose items the indices name: nothing to read here
    assert PersonalFRIdleRows().run(_fake_view("personalfr", cfg.replace(compression=True), 6, msgs)) == {}


@pytest.mark.parametrize("changes", [{}, {"client_momentum": "reset"}, {"uncompressed_training": "masked"},
                                     {"untouched": "stepwise"}, {"nesterov": False}],
                         ids=["keep", "reset", "masked", "stepwise", "plain-momentum"])
def test_idle_rows_reads_every_uncompressed_personalfr_client_exactly(changes):
    # every client's I_m from the whole decoders it returned, later selections included: under kept
    # momentum (the default) the buffer of an untouched row is the linear map of the decoders the
    # server sent it before, so the path is known exactly there too (the median check of
    # test_an_uncompressed_personalfr_update_still_shows_the_item_set read only first selections
    # exactly: on ML-100K 10 of 38 later ones, docs/privacy.md)
    from fedsim.kernel.ledger import KIND, SRC

    spec = REGISTRY["personalfr"]
    data, cfg = spec.tiny(6, 2, 0)
    cap = capture("personalfr", data, cfg.replace(compression=False, fraction=0.5, rounds=6, local_epochs=2,
                                                  **changes), seed=1)
    ups = [row[SRC] for row, _, _ in cap.recorder.entries if row[KIND] == "update"]
    assert len(ups) == 18 and len(set(ups)) == 5  # 13 later selections, each read with its history
    s, run = _score(PersonalFRIdleRows(), cap)
    assert (s["users"], s["precision"], s["recall"], s["exact"], s["auc"]) == (5, 1.0, 1.0, 1.0, 1.0)
    assert s["f1_rand"] < 0.6  # (a random guess of |I_m| items among all n)
    if not changes:  # kept momentum: the median check (buffer taken as zero) reads none of the later ones
        from fedsim.kernel.ledger import ROUND

        sent = {row[ROUND]: doc.value()["dec"] for row, doc, _ in cap.recorder.entries if row[KIND] == "decoder"}
        seen, exact, later = set(), 0, 0
        for row, doc, _ in cap.recorder.entries:
            if row[KIND] == "update":
                if row[SRC] in seen:
                    later += 1
                    exact += np.array_equal(_rows_off_the_zero_gradient_path(sent[row[ROUND]], doc.value()["dec"]),
                                            cap.truth[row[SRC]])
                seen.add(row[SRC])
        assert (exact, later) == (0, 13)


def test_privacy_audit_scores_the_idle_rows_of_uncompressed_personalfr(tmp_path):
    # the audit had no uncompressed PersonalFR row: its only PersonalFR run used compression, whose
    # indices give the item sets away, and nothing read what an uncompressed run still shows. One
    # client a round (C = 0.1 of 6) for 4 rounds: 3 clients, one of them selected twice
    import csv

    from fedsim.experiment import run_scenario

    out = tmp_path / "audit"
    run_scenario("privacy_audit", data="tiny", out=out, seed=1, profile="ideal", quiet=True,
                 overrides={"protocols": ["personalfr"], "personalfr_clients": 6, "personalfr_rounds": 4,
                            "workers": 1})
    with open(out / "leakage.csv", newline="") as fh:
        rows = {(r["defence"], r["attack"]): r for r in csv.DictReader(fh)}
    got = {k: (r["T"], r["users"], r["attacked"], r["precision"], r["recall"], r["f1"], r["exact"])
           for k, r in rows.items()}
    assert got == {
        ("", "personalfr_indices"): ("1", "6.0", "6", "1.0", "1.0", "1.0", "1.0"),  # the compressed run, as before
        **{(d, "personalfr_indices"): ("4", "3.0", "0", "0.0", "0.0", "0.0", "0.0") for d in
           ("uncompressed", "uncompressed, reset momentum", "uncompressed, masked")},
        **{(d, "personalfr_idle_rows"): ("4", "3.0", "3", "1.0", "1.0", "1.0", "1.0") for d in
           ("uncompressed", "uncompressed, reset momentum", "uncompressed, masked")},
    }
    report = (out / "report.md").read_text()
    assert ("- personalfr (clients 6, defence uncompressed), personalfr_idle_rows [server, all]: F1 1.000"
            in report)


def test_idle_rows_reads_clients_whose_users_rated_most_of_the_catalogue():
    # the local steps per round S are read off a client's first update: the untouched rows all come back
    # as one multiple c(S) of the rows sent. S used to be the one whose c is nearest the median ratio of
    # returned to sent rows, which is a trained row's when most rows are trained: here the clients hold 10
    # users each and rate 39, 36 and 38 of the 40 items, S was misread and every untouched row claimed
    # (precision 0.975 and exact recovery for 1 of 3 clients; on ML-100K with M = 10, 74 % of the items
    # rated on average: exact for 5 of 10 clients)
    from fedsim.protocols.presets import tiny_ratings

    data = tiny_ratings(3, 0, users_per_client=10)
    cfg = REGISTRY["personalfr"].Config(rounds=3, fraction=1.0, local_epochs=2, hidden=(8, 4), batch=2, clients=3,
                                        compression=False)
    cap = capture("personalfr", data, cfg, seed=1)
    assert sorted(len(t) for t in cap.truth.values()) == [36, 38, 39] and data.n_items == 40
    s, _ = _score(PersonalFRIdleRows(), cap)
    assert (s["users"], s["precision"], s["recall"], s["exact"]) == (3, 1.0, 1.0, 1.0)


def _hand_made_fedavg_rounds():
    """Two rounds of one FedAvg-AE client of a 6-item autoencoder (one hidden layer of 3 units:
    encoder ``enc.W1`` 3 x 6, decoder output rows ``dec.W1`` 6 x 3 and biases ``dec.b1``), float32,
    stepped with the protocol's own rule (``optim.sgd_step``) on the whole model: items 1 and 4 are
    rated and positive (a gradient in their input column and output row), item 2 rated and negative as
    in the implicit task (a zero input: a gradient in its output row only), items 0, 3 and 5 unrated;
    the hidden bias always has one. 2 local epochs of 2 batches (S = 4 Nesterov steps a round), lr 0.1
    in round 1 and 0.05 in round 2 (cosine over 2 rounds), weight decay 0.01, momentum 0.9, the buffer
    kept between the rounds; the server's second model is another one (its mean). Returns
    ``(cfg, [(round, sent, returned)])`` (models as dicts)."""
    from fedsim.math import autoencoder as ae
    from fedsim.math import optim

    cfg = REGISTRY["fedavg-ae"].Config(rounds=2, lr=0.1, local_epochs=2, momentum=0.9, nesterov=True,
                                       weight_decay=0.01, clients=1, hidden=(3,))
    assert (cfg.lr_at(1), cfg.lr_at(2)) == (0.1, 0.05)
    rng = np.random.default_rng(11)
    state = None
    out = []
    for t in (1, 2):
        sent = ae.init_params(6, rng, (3,))
        sent["dec.b1"] = rng.normal(size=6).astype(np.float32)  # (a zero bias stays zero: show it move)
        assert sorted(sent) == ["dec.W1", "dec.b1", "enc.W1", "enc.b1"] and sent["enc.W1"].shape == (3, 6)
        p = {k: v.copy() for k, v in sent.items()}
        state = optim.sgd_init(p) if state is None else state
        for _ in range(4):
            g = {k: np.zeros_like(v) for k, v in p.items()}
            g["enc.W1"][:, [1, 4]] = rng.normal(size=(3, 2))
            g["enc.b1"][:] = rng.normal(size=3)
            g["dec.W1"][[1, 2, 4]] = rng.normal(size=(3, 3))
            g["dec.b1"][[1, 2, 4]] = rng.normal(size=3)
            optim.sgd_step(p, g, state, lr=cfg.lr_at(t), momentum=0.9, nesterov=True, weight_decay=0.01)
        out.append((t, sent, p))
    return cfg, out


def _fedavg_messages(rounds):
    return [m for t, d, u in rounds for m in (("model", t, "server", "client/0000", {"t": t, "model": d}),
                                              ("update", t, "client/0000", "server", {"model": u}))]


def test_fedavg_idle_rows_reads_a_hand_made_model_exactly_and_needs_the_kept_momentum():
    from fedsim.privacy.attacks import FedAvgIdleRows
    from fedsim.privacy.attacks.fedavg import item_rows
    from fedsim.privacy.attacks.personalfr import idle_guesses, idle_map, steps_of

    cfg, rounds = _hand_made_fedavg_rounds()
    (_, d1, u1), (_, d2, u2) = rounds
    # the closed form of PersonalFR's decoder rows (fedsim/privacy/attacks/personalfr.py) holds for every
    # idle entry of the whole model: the output rows of the unrated items 0, 3, 5 and the input columns of
    # the items with a zero input, 0, 2, 3, 5: c1 p after round 1, c2 q + f2 e1 p after round 2
    (c1, _), (e1, _) = idle_map(4, 0.1, 0.9, True, 0.01)
    (c2, f2), _ = idle_map(4, 0.05, 0.9, True, 0.01)
    for key, idx in (("dec.W1", np.s_[[0, 3, 5]]), ("dec.b1", np.s_[[0, 3, 5]]), ("enc.W1", np.s_[:, [0, 2, 3, 5]])):
        np.testing.assert_allclose(u1[key][idx], c1 * d1[key][idx].astype(np.float64), rtol=1e-6)
        np.testing.assert_allclose(u2[key][idx], c2 * d2[key][idx].astype(np.float64)
                                   + f2 * e1 * d1[key][idx].astype(np.float64), rtol=1e-6)
    # each item's row: its output row (3 weights, 1 bias) and its input column (3 weights) side by side
    r1 = item_rows(d1)
    assert r1.shape == (6, 7) and r1.dtype == np.float64
    np.testing.assert_array_equal(r1[:, 4:], d1["enc.W1"].T)
    assert steps_of(item_rows(d1), item_rows(u1), 0.1, 0.9, True, 0.01, per=2) == 4  # 2 epochs of 2 batches
    msgs = _fedavg_messages(rounds)
    g = FedAvgIdleRows().run(_fake_view("fedavg-ae", cfg, 6, msgs))["client/0000"]
    np.testing.assert_array_equal(g.predicted, [1, 2, 4])
    assert g.scores[[0, 3, 5]].max() <= 2.0 and g.scores[[1, 2, 4]].min() > 1e4  # (rounding units off the path)
    # the input columns alone name the items with an input (the positives), not item 2
    view = _fake_view("fedavg-ae", cfg, 6, msgs)
    sent = {"client/0000": {t: d for t, d, _ in rounds}}
    back = {"client/0000": {t: u for t, _, u in rounds}}
    cols = idle_guesses(view, sent, back, lambda m: np.asarray(m["enc.W1"], np.float64).T, call_kind="model",
                        keep=True, masked=False, tol=64.0, max_steps=4096)["client/0000"]
    np.testing.assert_array_equal(cols.predicted, [1, 4])
    # read as if the client reset its momentum, round 2's idle entries carry the buffer e1 d1 the reading
    # leaves out: every item is off its path
    g = FedAvgIdleRows().run(_fake_view("fedavg-ae", cfg.replace(client_momentum="reset"), 6, msgs))["client/0000"]
    np.testing.assert_array_equal(g.predicted, np.arange(6))
    # PersonalFR's compression flag (True by default in the shared config) does not apply to FedAvg
    assert cfg.compression is True


@pytest.mark.parametrize("changes", [{}, {"client_momentum": "reset"}, {"untouched": "stepwise"}, {"nesterov": False},
                                     {"momentum": 0.0, "nesterov": False}, {"weight_decay": 0.0},
                                     {"schedule": "constant"}, {"task": "implicit"}],
                         ids=["keep", "reset", "stepwise", "plain-momentum", "no-momentum", "no-weight-decay",
                              "constant-lr", "implicit"])
def test_fedavg_idle_rows_reads_every_fedavg_client_exactly(changes):
    # FedAvg-AE (PersonalFR's baseline) returns the whole model every round: the output rows and input
    # columns of the items a client's users did not rate follow the zero-gradient path, later selections
    # (kept momentum) included. docs/privacy.md said "not measured" until 2026-11-28
    from fedsim.kernel.ledger import KIND, SRC
    from fedsim.privacy.attacks import FedAvgIdleRows

    spec = REGISTRY["fedavg-ae"]
    data, cfg = spec.tiny(6, 2, 0)
    cap = capture("fedavg-ae", data, cfg.replace(fraction=0.5, rounds=6, local_epochs=2, **changes), seed=1)
    ups = [row[SRC] for row, _, _ in cap.recorder.entries if row[KIND] == "update"]
    assert len(ups) == 18 and len(set(ups)) == 5  # 13 later selections, each read with its history
    assert sorted(len(cap.truth[u]) for u in set(ups)) == [8, 11, 24, 25, 28] and data.n_items == 40
    s, run = _score(FedAvgIdleRows(), cap)
    assert (s["users"], len(run.inference), s["precision"], s["recall"], s["exact"], s["auc"]) == (5, 5, 1.0, 1.0,
                                                                                                    1.0, 1.0)
    assert s["f1_rand"] == pytest.approx(0.48)  # (a random guess of |I_m| items among all n)


def test_privacy_audit_scores_the_idle_rows_of_fedavg(tmp_path):
    # the audit had no FedAvg-AE run (protocols could not name it) and docs/privacy.md said its updates'
    # leak was "not measured". One client a round (C = 0.1 of 6) for 4 rounds: 3 clients
    import csv

    from fedsim.experiment import run_scenario

    out = tmp_path / "audit"
    run_scenario("privacy_audit", data="tiny", out=out, seed=1, profile="ideal", quiet=True,
                 overrides={"protocols": ["fedavg-ae"], "personalfr_clients": 6, "personalfr_rounds": 4,
                            "workers": 1})
    with open(out / "leakage.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    got = [(r["protocol"], r["defence"], r["attack"], r["T"], r["users"], r["attacked"], r["unseen"], r["precision"],
            r["recall"], r["f1"], r["exact"], r["f1_rand"]) for r in rows]
    assert got == [("fedavg-ae", d, "fedavg_idle_rows", "4", "3.0", "3", "3", "1.0", "1.0", "1.0", "1.0", "0.725")
                   for d in ("kept momentum", "reset momentum")]
    report = (out / "report.md").read_text()
    assert ("- fedavg-ae (clients 6, defence kept momentum), fedavg_idle_rows [server, all]: F1 1.000 (random 0.725), "
            "exact 1.000") in report


@pytest.mark.parametrize("explained", [True, False])
def test_hybrid_filling_is_recognised_when_no_item_has_some_factor(explained):
    """fit_scale's "hf" check asks whether the sampled items' implied ratings are V_rest x for some
    x. With a factor that no item has (a zero column of V), V_rest^T V_rest is singular: the check
    solved it with np.linalg.solve, whose LinAlgError gave "" (not explained) although x fits
    exactly; and for a numerically singular system whether LAPACK raises depends on the CPU's
    kernels. Now the minimum-norm least-squares x (eigenvalues below d * eps of the largest left
    out) decides: "hf" at the true scale, and still not when the ratings leave V's span."""
    from fedsim.privacy.attacks.implied import fit_scale

    rng = np.random.default_rng(4)
    s = 2.0
    V = rng.normal(size=(30, 4))
    V[:, 3] = 0.0
    u = np.array([0.6, 0.0, 0.8, 0.0])  # the user's direction, a unit vector
    r = np.empty(30)
    r[:12] = rng.integers(1, 6, 12)  # rated: integer levels
    r[12:] = V[12:] @ np.array([0.5, 1.0, 0.25, 0.0])  # sampled: predictions V_j . x
    if not explained:
        r[12:] += np.where(np.arange(18) % 2 == 0, 0.01, -0.01)  # no x gives these
    a = V @ u
    b = s * (s * a - r)  # so that s a_i - b_i / s = r_i
    fit = fit_scale(a, b, V_rows=V, modes=("hf",))
    assert fit.s == pytest.approx(s, rel=1e-12)
    assert np.abs(fit.ratings - r).max() < 1e-12
    assert fit.explained == ("hf" if explained else "")
