"""Tests written from a hand mutation-testing pass over the protocol actors (fedsim/protocols):
each one fails with a specific mutant of the code applied (named in its docstring) and checks the
run against an independent computation (the central twin, a hand computation from the data, the
documented random draws), never against a number copied from the code's output."""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import pytest

from fedsim.data import Ratings, generate
from fedsim.kernel import SimNetwork
from fedsim.math.pmf import init_item_factors
from fedsim.protocols import fcf, fedavg_ae, fedrec, fedrecpp, fpl, personalfr
from fedsim.protocols.fedae import FedAEConfig, selection_size
from fedsim.protocols.common import SERVER, client_names
from fedsim.protocols.fedrec import FedRecConfig
from fedsim.protocols.fedrecpp import FedRecPPConfig
from fedsim.protocols.fpl import FPLConfig
from fedsim.seeding import node_rng

from test_protocol_faults import LossyClients


@pytest.fixture(scope="module")
def tiny_split():
    """The tiny synthetic ratings split into training and test ratings over one index space."""
    r = generate("tiny", seed=3)
    rng = np.random.default_rng(0)
    test = rng.random(len(r.users)) < 0.2
    mk = lambda m: Ratings(r.users[m], r.items[m], r.values[m].astype(np.float64),  # noqa: E731
                           n_users=r.n_users, n_items=r.n_items)
    return mk(~test), mk(test)


def _fedrec_run(data, cfg, seed=7, test=None, net=None):
    net = net or SimNetwork(seed=seed, profile="ideal")
    res = fedrec.build(net, data, cfg, test=test).collect(net.run())
    return res, net


# ---------------------------------------------------------------------------------------------
# FedRec


@pytest.mark.parametrize("T,every,want", [(5, 2, [2, 4]), (4, 2, [2, 4]), (3, 1, [1, 2, 3])])
def test_fedrec_batch_evaluates_after_every_eval_every_iterations_up_to_t_and_no_more(tiny_split, T, every, want):
    """Mutant: the final evaluation (after iteration T) made whether or not T is a multiple of
    ``eval_every`` (``cfg.T % cfg.eval_every == 0`` dropped): T = 5, every 2 added a sixth
    row after iteration 5. The rows are the central twin's evaluations after those iterations."""
    train, test = tiny_split
    cfg = FedRecConfig("PMF(B)", d=4, T=T, lr=0.5, dtype="float64", eval_every=every)
    res, _ = _fedrec_run(train, cfg, test=test)
    assert [m["iteration"] for m in res.metrics] == want
    twin = fedrec.central_twin(train, cfg.replace(eval_every=0), seed=7, test=test)
    by_it = {h["iteration"]: h for h in twin.history}
    for m in res.metrics:
        assert m["n"] == len(test.users)
        assert m["rmse"] == pytest.approx(by_it[m["iteration"]]["rmse"], rel=1e-9)
        assert m["mae"] == pytest.approx(by_it[m["iteration"]]["mae"], rel=1e-9)


def test_fedrec_svdpp_evaluation_uses_the_implicit_term_over_sqrt_of_the_rated_count(tiny_split):
    """Mutant: ``O[rated].sum(axis=0) / rated.shape[0]`` for ``/ np.sqrt(rated.shape[0])`` in a
    client's SVD++ prediction (``_local_errors``). The federated evaluations equal the central
    twin's (``TrainResult`` predicts SVD++ with |I_u|^-1/2), iteration by iteration."""
    train, test = tiny_split
    cfg = FedRecConfig("SVD++(S)", d=4, T=3, lr=0.05, dtype="float64", eval_every=1, init_scale=0.3)
    res, _ = _fedrec_run(train, cfg, test=test)
    twin = fedrec.central_twin(train, cfg.replace(eval_every=0), seed=7, test=test)
    assert [m["iteration"] for m in res.metrics] == [1, 2, 3]
    for m, h in zip(res.metrics, twin.history):
        assert m["rmse"] == pytest.approx(h["rmse"], rel=1e-9)
        assert m["mae"] == pytest.approx(h["mae"], rel=1e-9)
    # the implicit term is large enough here for the two normalisations to differ visibly
    O = twin.O
    csr = train.by_user()
    u = int(np.argmax(np.diff(csr.indptr)))
    rated = csr.indices[csr.indptr[u]:csr.indptr[u + 1]]
    assert rated.size > 1 and np.abs(O[rated].sum(0) / np.sqrt(rated.size) - O[rated].sum(0) / rated.size).max() > 1e-3


def test_fedrec_upload_noise_is_gaussian_of_the_given_sigma_on_every_gradient():
    """Mutant: ``noise_rng.normal(0.0, 1.0, ...)`` for ``normal(0.0, cfg.upload_noise, ...)``.
    One batch iteration, rho = 0 (a client uploads its rated items, ascending): the noisy run's V
    minus the noise-free run's (same seed: the noise generator is spawned, it leaves the other
    draws alone) is -lr x the per-item mean of the clients' noise, each client's noise drawn from
    ``node_rng(seed, name).spawn(1)[0]`` as N(0, sigma^2) over its (|I_u|, d) gradient rows."""
    r = generate("tiny", seed=5)
    data = Ratings(r.users, r.items, r.values.astype(np.float64), n_users=r.n_users, n_items=r.n_items)
    sigma, seed, d, lr = 0.05, 4, 3, 0.5
    cfg = FedRecConfig("PMF(B)", d=d, T=1, lr=lr, dtype="float64")
    clean, _ = _fedrec_run(data, cfg, seed=seed)
    noisy, _ = _fedrec_run(data, cfg.replace(upload_noise=sigma), seed=seed)
    csr = data.by_user()
    noise_sum = np.zeros((data.n_items, d))
    counts = np.zeros(data.n_items)
    for u, name in enumerate(client_names(data.n_users)):
        items = np.asarray(csr.indices[csr.indptr[u]:csr.indptr[u + 1]])
        gen = node_rng(seed, name).spawn(1)[0]
        noise_sum[items] += gen.normal(0.0, sigma, (items.size, d))
        counts[items] += 1
    has = counts > 0
    want = np.zeros_like(noise_sum)
    want[has] = -lr * noise_sum[has] / counts[has, None]
    np.testing.assert_allclose(noisy.params["V"] - clean.params["V"], want, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(noisy.params["U"], clean.params["U"])  # U_u never leaves: no noise


def test_fedrec_secure_rounds_without_members_still_report_their_evaluations():
    """Mutant: the evaluation of a round skipped for want of two keyed members left out (only
    the ``missing`` record kept). Two of three keys lost: no member, every round skipped; with
    ``eval_every = 1`` every iteration's evaluation is still a row (over no client's ratings:
    n = 0), as the module documents ("an evaluation has n = 0"), then the final one (none: no
    member to ask either)."""
    data, cfg = fedrec.tiny(3, 3, 0)
    cfg = cfg.replace(secure_aggregation=True, deadline=5.0, eval_every=1)
    net = LossyClients(["client/0000", "client/0002"], seed=0, profile="lan")
    res = fedrec.build(net, data, cfg, test=data).collect(net.run())
    assert res.run.complete
    assert [(m["iteration"], m["n"]) for m in res.metrics] == [(1, 0), (2, 0), (3, 0)]
    assert all(np.isnan(m["rmse"]) and np.isnan(m["mae"]) for m in res.metrics)


def test_fedrec_batch_stop_is_labelled_with_the_last_iteration_after_the_final_evaluation(tiny_split):
    """Mutant: ``ctx.begin_round(cfg.T - 1)`` dropped after the final evaluation (labelled T, a
    round of its own): ``stop`` went out labelled T, a round with no iteration. The ledger's
    rounds: T iterations 0..T-1 of model/gradients, the final evaluate and its answers at T,
    stop at T - 1."""
    train, test = tiny_split
    T = 3
    cfg = FedRecConfig("PMF(B)", d=4, T=T, lr=0.5, dtype="float64", eval_every=1)
    _, net = _fedrec_run(train, cfg, test=test)
    rounds: dict[str, set] = {}
    for r in net.ledger.records():
        rounds.setdefault(r["kind"], set()).add(r["round"])
    assert rounds["model"] == rounds["gradients"] == set(range(T))
    assert rounds["evaluate"] == {T}
    assert rounds["eval"] == set(range(1, T + 1))
    assert rounds["stop"] == {T - 1}


@pytest.mark.parametrize("rho", [0.0, 1.0])
def test_fedrec_batch_server_charges_two_flops_per_uploaded_value_and_three_per_model_value(rho):
    """Mutant: the server's aggregation charged ``3 m d`` per round without the ``2 x rows x d``
    of adding the uploads. With rho = 0 every client uploads its rated items, so a round's rows
    are the number of training ratings R: the server's ``aggregate`` FLOPs over T rounds are
    T (2 R d + 3 m d); with rho = 1 (a sampled item per rated one, none capped here) 2 R."""
    r = generate("tiny", seed=5, n_items=160)
    data = Ratings(r.users, r.items, r.values.astype(np.float64), n_users=r.n_users, n_items=r.n_items)
    counts = np.bincount(data.users, minlength=data.n_users)
    assert (counts * (1 + rho) <= data.n_items).all()  # no user's sample is capped
    T, d = 3, 4
    cfg = FedRecConfig("PMF(B)", d=d, T=T, lr=0.1, rho=rho, dtype="float64")
    res, _ = _fedrec_run(data, cfg)
    rows = len(data.users) * (1 + rho)
    assert res.run.flops[SERVER]["aggregate"] == T * (2.0 * rows * d + 3.0 * data.n_items * d)


def test_fedrec_a_user_factor_that_overflowed_in_the_last_call_marks_the_run_diverged():
    """Mutant: ``collect`` without its check of U (only the server's V checked). One user with one
    rating, PMF(S), one iteration, a client rate of 1e308: the client's step of U_u overflows
    (|lr x error x V_i| > 1.8e308) while the item gradient it uploads, taken with U_u before the
    step, leaves V finite, so the server sees nothing wrong. The result must say the run
    diverged at iteration 1, as the central twin does."""
    data = Ratings(np.array([0]), np.array([1]), np.array([5.0]), n_users=1, n_items=3)
    cfg = FedRecConfig("PMF(S)", d=2, T=1, lr=0.01, client_lr=1e308, dtype="float64", init_scale=1.0)
    res, _ = _fedrec_run(data, cfg, seed=0)
    assert np.isfinite(res.params["V"]).all() and not np.isfinite(res.params["U"]).all()
    assert fedrec.central_twin(data, cfg, seed=0).diverged_at == 1
    assert res.info["diverged_at"] == res.model.diverged_at == 1


# ---------------------------------------------------------------------------------------------
# FedRec++


def test_fedrecpp_deals_a_random_permutation_of_the_ordinary_clients_round_robin():
    """Mutant: ``denoisers[j % eta]`` for ``denoisers[k % eta]`` (the ordinary clients dealt in
    node-id order, the permutation drawn but not used: client 0's denoiser fixed for every seed).
    The server's documented draws, replayed from ``node_rng(seed, "server")``: V (as FedRec's
    server), the eta denoisers (``choice``, sorted), then a permutation of the ordinary clients,
    dealt round-robin over the denoisers."""
    n, eta, m, d = 9, 2, 30, 3
    rng = np.random.default_rng(1)
    users = np.repeat(np.arange(n), 4)
    items = np.concatenate([rng.choice(m, 4, replace=False) for _ in range(n)])
    data = Ratings(users, items, rng.integers(1, 6, users.size).astype(np.float64), n_users=n, n_items=m)
    names = client_names(n)
    firsts = set()
    for seed in range(6):
        cfg = FedRecPPConfig(d=d, T=1, eta=eta, rho=1.0, dtype="float64")
        net = SimNetwork(seed=seed, profile="ideal")
        res = fedrecpp.build(net, data, cfg).collect(net.run())
        srv = node_rng(seed, SERVER)
        init_item_factors(srv, m, d, scale=cfg.init_scale, dtype=np.float64)
        den = [names[i] for i in np.sort(srv.choice(n, size=eta, replace=False))]
        ordinary = [c for c in names if c not in den]
        perm = srv.permutation(len(ordinary))
        want = {ordinary[j]: den[k % eta] for k, j in enumerate(perm)}
        assert res.info["denoisers"] == den
        assert res.info["assignment"] == want
        firsts.add(den.index(want[ordinary[0]]))
    assert firsts == {0, 1}  # the first ordinary client is not always dealt to the first denoiser


class _Tap:
    """Keeps (src, dst, kind, round, payload) of every message copy a run sends."""

    def __init__(self):
        self.seen = []

    def observe(self, row, payload):
        from fedsim.kernel.ledger import DST, KIND, ROUND, SRC

        self.seen.append((row[SRC], row[DST], row[KIND], row[ROUND], payload.value()))


@pytest.fixture(scope="module")
def pp_data():
    r = generate("tiny", seed=11, n_items=120)
    return Ratings(r.users, r.items, r.values.astype(np.float64), n_users=r.n_users, n_items=r.n_items)


@pytest.mark.parametrize("convention,order", [("paper", "code"), ("paper", "paper"), ("code", "paper")])
def test_fedrecpp_without_denoisers_is_fedrecs_hybrid_filling_under_either_convention(pp_data, convention, order):
    """Mutant: the eta = 0 client calling the batch step with ``hf_convention="code"`` whatever
    the configuration says (only the code convention was compared with FedRec). The model equals
    FedRec's central twin with the same hybrid filling, convention and update order."""
    kw = dict(d=4, T=6, lr=0.8, rho=1, T_predict=1, T_local=3, dtype="float64", hf_convention=convention,
              order=order)
    net = SimNetwork(seed=4)
    pp = fedrecpp.build(net, pp_data, FedRecPPConfig(eta=0, **kw)).collect(net.run())
    twin = fedrec.central_twin(pp_data, FedRecConfig("PMF(B)", strategy="hf", **kw), seed=4)
    np.testing.assert_allclose(pp.params["V"], twin.V, rtol=0, atol=1e-9)
    np.testing.assert_allclose(pp.params["U"], twin.U, rtol=0, atol=1e-9)
    # the two conventions train different models here (the test tells them apart)
    other = fedrec.central_twin(pp_data, FedRecConfig("PMF(B)", strategy="hf", **{
        **kw, "hf_convention": "code" if convention == "paper" else "paper"}), seed=4)
    assert np.abs(other.V - twin.V).max() > 1e-6


def test_fedrecpp_noise_of_the_first_iteration_is_user_averaging_before_hybrid_filling_starts(pp_data):
    """Mutant: ``hf_active(t + 1, ...)`` for ``hf_active(t, ...)`` in a denoised client's step
    (hybrid filling one iteration early; lossless either way, so the model does not show it, but
    the uploads the server and denoisers see do). With T_predict = 0 and the code convention
    (predictions when t > T_predict), iteration 0's virtual ratings are the user's mean rating:
    each sampled item j's noise gradient is (V_j . U_u - mean) U_u + lam V_j, with U_u and V the
    initial factors, replayed from the documented first draws of ``node_rng(seed, name)``."""
    seed, d, lam = 4, 4, 0.01
    cfg = FedRecPPConfig(d=d, T=1, lr=0.8, lam=lam, rho=1, eta=2, T_predict=0, T_local=3, dtype="float64",
                         init_scale=0.3)
    net = SimNetwork(seed=seed)
    net.tap = tap = _Tap()
    res = fedrecpp.build(net, pp_data, cfg).collect(net.run())
    V0 = init_item_factors(node_rng(seed, SERVER), pp_data.n_items, d, scale=cfg.init_scale, dtype=np.float64)
    csr = pp_data.by_user()
    names = client_names(pp_data.n_users)
    noise = [(src, p) for src, dst, kind, rnd, p in tap.seen if kind == "noise"]
    assert sorted(src for src, _ in noise) == sorted(res.info["assignment"])  # one per ordinary client
    for src, p in noise:
        u = names.index(src)
        rated = np.asarray(csr.indices[csr.indptr[u]:csr.indptr[u + 1]])
        r = np.asarray(csr.data[csr.indptr[u]:csr.indptr[u + 1]], dtype=np.float64)
        U0 = node_rng(seed, src).uniform(-cfg.init_scale, cfg.init_scale, d)
        items = np.asarray(p["items"])
        assert items.size == min(rated.size, pp_data.n_items - rated.size)  # rho = 1, capped at the unrated
        assert np.unique(items).size == items.size and not np.isin(items, rated).any()
        e = V0[items] @ U0 - r.mean()
        np.testing.assert_allclose(p["grads"], e[:, None] * U0[None, :] + lam * V0[items], rtol=1e-12, atol=1e-15)


def test_fedrecpp_a_user_factor_that_overflowed_in_the_last_iteration_marks_the_run_diverged():
    """Mutant: ``collect`` without its check of U (only the server's V checked). One user with one
    rating 5, one batch iteration at lr = 1e308 (code order: the item gradient is taken with U_u
    before its step): U_1 = U_0 - lr (e V_0 + lam U_0) and V_1 = V_0 - lr (e U_0 + lam V_0) with
    e ~ -5, so a seed whose initial |V_0| is large and |U_0| small (replayed from the documented
    first draws) overflows U alone. The run diverged at iteration 1, as FedRec's twin says."""
    data = Ratings(np.array([0]), np.array([1]), np.array([5.0]), n_users=1, n_items=3)
    for seed in range(200):
        U0 = node_rng(seed, "client/0000").uniform(-1.0, 1.0, 1)
        V0 = init_item_factors(node_rng(seed, SERVER), 3, 1, scale=1.0, dtype=np.float64)
        if abs(V0[1, 0]) > 0.6 and abs(U0[0]) < 0.2:
            break
    cfg = FedRecPPConfig(d=1, T=1, lr=1e308, lam=0.0, rho=0, eta=0, dtype="float64", init_scale=1.0)
    net = SimNetwork(seed=seed)
    res = fedrecpp.build(net, data, cfg).collect(net.run())
    assert np.isfinite(res.params["V"]).all() and not np.isfinite(res.params["U"]).all()
    twin = fedrec.central_twin(data, FedRecConfig("PMF(B)", d=1, T=1, lr=1e308, lam=0.0, dtype="float64",
                                                  init_scale=1.0), seed=seed)
    assert twin.diverged_at == 1
    assert res.info["diverged_at"] == res.model.diverged_at == 1


def test_fedrecpp_without_denoisers_records_each_rounds_missing_uploads():
    """Mutant: the eta = 0 server's ``missing`` record of a round with lost uploads left out (only
    the denoised path recorded its losses). client/0001 loses every message it sends: each of
    the three rounds misses its one upload, and says so."""
    data, cfg = fedrecpp.tiny(4, 3, 0)
    cfg = cfg.replace(eta=0, deadline=5.0)
    net = LossyClients(["client/0001"], seed=0, profile="lan")
    res = fedrecpp.build(net, data, cfg).collect(net.run())
    assert res.run.complete
    assert res.info["missing"] == [{"round": t, "kind": "gradients", "clients": 1, "groups": 0, "left_out": 1}
                                   for t in range(3)]


@pytest.mark.parametrize("rho", [0.0, 1.0])
def test_fedrecpp_server_charges_two_flops_per_uploaded_value_and_three_per_model_value(rho):
    """Mutant: the uploads' rows left out of the server's ``aggregate`` FLOPs (only the denoisers'
    sums counted). Without denoisers (FedRec with hybrid filling) every client uploads its rated
    items and rho as many sampled ones (none capped here): T (2 R (1 + rho) d + 3 m d) over T
    rounds, R the training ratings."""
    r = generate("tiny", seed=5, n_items=160)
    data = Ratings(r.users, r.items, r.values.astype(np.float64), n_users=r.n_users, n_items=r.n_items)
    assert (np.bincount(data.users, minlength=data.n_users) * (1 + rho) <= data.n_items).all()
    T, d = 3, 4
    net = SimNetwork(seed=1)
    res = fedrecpp.build(net, data, FedRecPPConfig(d=d, T=T, rho=rho, eta=0, dtype="float64")).collect(net.run())
    rows = len(data.users) * (1 + rho)
    assert res.run.flops[SERVER]["aggregate"] == T * (2.0 * rows * d + 3.0 * data.n_items * d)


# ---------------------------------------------------------------------------------------------
# FPL


def test_fpl_a_resumed_runs_missing_records_carry_the_networks_round_numbers():
    """Mutant: a missing update recorded with the loop's ``t`` instead of the round ``r`` =
    round_offset + t the messages are labelled with. client/0001 loses every message it sends;
    every client is selected every round, so each round misses one update: rounds 0, 1 in the
    first run, 2, 3 in the run resumed from it (numbered after the first's two rounds)."""
    data, cfg = fpl.tiny(4, 2, 0)
    cfg = cfg.replace(deadline=5.0)
    net = LossyClients(["client/0001"], seed=0, profile="lan")
    first = fpl.build(net, data, cfg).collect(net.run())
    net = LossyClients(["client/0001"], seed=1, profile="lan")
    second = fpl.build(net, data, cfg, resume=first).collect(net.run())
    assert [(m["round"], m["clients"]) for m in first.info["missing"]] == [(0, 1), (1, 1)]
    assert [(m["round"], m["clients"]) for m in second.info["missing"]] == [(2, 1), (3, 1)]
    assert {r["round"] for r in net.ledger.records() if r["kind"] == "update"} == {2, 3}



class _OfflineAt(SimNetwork):
    """A simulated network on which node ``node`` drops out at ``at`` seconds."""

    def __init__(self, node, at, **kw):
        super().__init__(**kw)
        self.node, self.at = node, at

    def add_node(self, node_id, actor, *args, **kwargs):
        if node_id == self.node:
            kwargs["offline_at"] = self.at
        super().add_node(node_id, actor, *args, **kwargs)


def test_fpl_secure_rounds_missing_a_masked_upload_are_recorded_and_leave_theta():
    """Mutant: the ``missing`` record of a secure round that lost an upload left out (the round
    was still skipped). client/0001 drops out after its round-0 upload (sent at 2.0 ms on lan,
    round 1's model reaches it at 4.1 ms): rounds 1 and 2 cannot be decoded, are recorded as
    skipped, and Theta_S is that of a one-round run."""
    data, cfg = fpl.tiny(4, 3, 0)
    cfg = cfg.replace(secure_aggregation=True, secagg_neighbours=2, deadline=5.0, dtype="float64")
    net = _OfflineAt("client/0001", 0.0035, seed=0, profile="lan")
    res = fpl.build(net, data, cfg).collect(net.run())
    assert res.info["lost_clients"] == ["client/0001"]
    assert res.info["missing"] == [{"round": r, "kind": "masked", "clients": 1, "skipped": True} for r in (1, 2)]
    net = SimNetwork(seed=0, profile="lan")
    one = fpl.build(net, data, cfg.replace(rounds=1)).collect(net.run())
    np.testing.assert_array_equal(res.params["theta"], one.params["theta"])

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fpl_a_client_counts_one_negative_row_per_triple_and_the_rest_as_positive(dtype):
    """Mutant: ``sent_negative += nrows`` (every row counted negative) for ``nrows - npos``. Each
    triple sends its negative item's row, and its positive item's with probability pi: a client's
    negatives are triples x rounds taken part in, and its positives plus negatives the rows the
    server received from it (``record_received``) and the ledger's units of its updates."""
    data, cfg = fpl.tiny(5, 3, 2)
    cfg = cfg.replace(triples=7, pi=0.5, dtype=dtype, record_received=True)
    net = SimNetwork(seed=2)
    res = fpl.build(net, data, cfg).collect(net.run())
    names = client_names(data.n_users)
    rows = {c: 0 for c in names}
    for _, sender, items, _ in res.info["received"]:
        rows[sender] += items.shape[0]
    units = {c: 0.0 for c in names}
    for r in net.ledger.records():
        if r["kind"] == "update":
            units[r["src"]] += r["units"]
    for u, c in enumerate(names):
        assert res.info["rounds"][u] == cfg.rounds  # every client every round (tiny)
        assert res.info["sent_negative"][u] == cfg.triples * cfg.rounds
        assert res.info["sent_positive"][u] + res.info["sent_negative"][u] == rows[c] == units[c]
    assert 0 < res.info["sent_positive"].sum() < cfg.triples * cfg.rounds * data.n_users  # pi = 0.5 bites


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fpl_update_rows_arrive_sorted_by_item_id(dtype):
    """Mutant: the rows of the non-compiled client round (float64, or without numba) left in the
    math's blocked layout (negatives, then positives) instead of sorted by item id (stable): a
    row's position would tell the server whether it is a positive update (module docstring, 3.)."""
    data, cfg = fpl.tiny(5, 3, 2)
    cfg = cfg.replace(triples=9, pi=1.0, dtype=dtype, record_received=True)
    net = SimNetwork(seed=2)
    res = fpl.build(net, data, cfg).collect(net.run())
    assert res.info["received"]
    for _, sender, items, rows in res.info["received"]:
        assert items.shape[0] == rows.shape[0] == 2 * cfg.triples  # pi = 1: both rows of every triple
        assert (np.diff(items) >= 0).all(), (sender, items)


def test_fpl_a_user_factor_that_overflowed_marks_the_run_diverged_though_theta_is_finite():
    """Mutant: ``collect`` without its check of the clients' p_u (only the server's Theta_S
    checked). 500 users of one item each, one client per round, 200 triples, pi = 0 (negative
    rows only, spread over the catalogue) and ``user_update="end_of_round"`` (the rows are
    taken with p_u before its one step): at lr = 2e307 the step of p_u by the sum of 200 triples'
    deltas overflows while every item row, added once or a few times, stays finite."""
    n = 500
    data = Ratings(np.arange(n), np.arange(n), np.ones(n), n_users=n, n_items=n)
    cfg = FPLConfig(clients_per_round=1, triples=200, rounds=1, d=2, lr=2e307, pi=0.0, dtype="float64",
                    user_update="end_of_round", reg_scale=0.0)
    net = SimNetwork(seed=0)
    res = fpl.build(net, data, cfg).collect(net.run())
    assert np.isfinite(res.params["theta"]).all() and not np.isfinite(res.params["P"]).all()
    assert res.info["rounds_done"] == 1
    assert res.info["diverged_at"] == 1


# ---------------------------------------------------------------------------------------------
# PersonalFR and FedAvg-AE


def test_selection_size_is_the_floor_of_c_m_for_the_decimal_fraction_given():
    """Mutant: ``int(fraction * n_clients)`` without the 1e-9 (0.58 x 50 is 28.999999999999996 in
    floating point: 28 clients for the 29 of max(floor(C M), 1)). Checked against exact rational
    arithmetic on the decimal the user wrote, for every two-digit C and M up to 100, and in a
    FedAvg run of 50 clients at C = 0.58."""
    for M in range(1, 101):
        for k in range(1, 101):
            f = k / 100
            assert selection_size(f, M) == max(int(Fraction(str(f)) * M), 1), (f, M)
    data = generate("tiny", seed=1, n_users=50)
    cfg = FedAEConfig(rounds=2, fraction=0.58, local_epochs=1, hidden=(4, 2), clients=50)
    net = SimNetwork(seed=0)
    res = fedavg_ae.build(net, data, cfg).collect(net.run())
    assert [len(s) for s in res.info["selected"]] == [29, 29]


def _ae_run(mod, cfg, seed=0, clients=3, test=False):
    from fedsim.protocols.fedae import tiny_autoencoder

    data, base = tiny_autoencoder(clients, cfg.rounds, seed)
    net = SimNetwork(seed=seed)
    res = mod.build(net, data, base.replace(**{k: v for k, v in cfg.to_dict().items() if k != "clients"}),
                    test=data if test else None).collect(net.run())
    return res, net


@pytest.mark.parametrize("mod", [personalfr, fedavg_ae])
def test_cosine_annealing_starts_at_the_full_rate_and_anneals_from_the_second_round(mod):
    """Mutants: ``cosine_lr(lr, t, rounds)`` for ``t - 1`` in ``FedAEConfig.lr_at`` (round 1 of 1
    trained at rate 0: (1 + cos pi) / 2), and the PersonalFR client training at ``cfg.lr`` instead
    of ``cfg.lr_at(t)`` (no annealing at all). Cosine annealing's first round is at the full rate,
    so a one-round run equals the constant schedule's bit for bit; its second of two is at half
    the rate, so a two-round run does not."""
    cfg = FedAEConfig(rounds=1, fraction=1.0, local_epochs=1, hidden=(8, 4), clients=3)
    a, _ = _ae_run(mod, cfg.replace(schedule="cosine"))
    b, _ = _ae_run(mod, cfg.replace(schedule="constant"))
    assert a.params.keys() == b.params.keys()
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k], err_msg=k)
    c, _ = _ae_run(mod, cfg.replace(rounds=2, schedule="cosine"))
    e, _ = _ae_run(mod, cfg.replace(rounds=2, schedule="constant"))
    assert max(np.abs(c.params[k] - e.params[k]).max() for k in c.params) > 1e-6
    assert cfg.replace(rounds=2).lr_at(1) == cfg.lr and cfg.replace(rounds=2).lr_at(2) == pytest.approx(cfg.lr / 2)


def test_personalfr_a_private_encoder_that_overflowed_marks_the_run_diverged():
    """Mutant: ``collect`` without its check of the clients' private encoders (the server only
    ever sees the decoder). One round at lr = 2e38 in float32, no clipping, momentum, decay or
    dropout: the encoder's first layer (inputs up to 5 stars) overflows while the decoder the
    server merges stays finite; no evaluation runs, so only the returned encoders show it. The
    run diverged at its last round, ``cfg.rounds``."""
    cfg = FedAEConfig(rounds=1, fraction=1.0, local_epochs=1, hidden=(8, 4), clients=3, lr=2e38, clip=0.0,
                      momentum=0.0, nesterov=False, weight_decay=0.0, dropout=0.0, schedule="constant")
    res, _ = _ae_run(personalfr, cfg)
    enc = [v for k, v in res.params.items() if k.startswith("enc:")]
    dec = [v for k, v in res.params.items() if not k.startswith("enc:")]
    assert enc and dec and all(np.isfinite(v).all() for v in dec)
    assert not all(np.isfinite(v).all() for v in enc)
    assert res.info["diverged_at"] == cfg.rounds == 1



def test_fedavg_records_each_rounds_missing_updates():
    """Mutant: FedAvg's ``missing`` record of a round with lost updates left out. client/0001
    loses every message it sends; every client is selected every round (C = 1): each of the two
    rounds misses one update, and the model is the mean of the others' (the same as PersonalFR
    records, tested elsewhere)."""
    from fedsim.protocols.fedae import tiny_autoencoder

    data, cfg = tiny_autoencoder(3, 2, 0)
    net = LossyClients(["client/0001"], seed=0, profile="lan")
    res = fedavg_ae.build(net, data, cfg.replace(deadline=5.0)).collect(net.run())
    assert res.run.complete
    assert res.info["missing"] == [{"round": t, "kind": "update", "clients": 1} for t in (1, 2)]

class _Msg:
    def __init__(self, payload, sender="client/0001", kind="eval", rnd=3):
        self.payload, self.sender, self.kind, self.round = payload, sender, kind, rnd


def test_an_implicit_eval_answer_with_an_ndcg_sum_above_its_users_is_refused():
    """Mutant: ``0 <= ndcg_sum`` without ``<= ndcg_users`` in ``checked_eval`` (only the explicit
    task's rule, NDCG sums 0, caught it in the tests): an NDCG is at most 1 per user, so a sum of
    3 over 2 users is no set of predictions' and would raise everyone's reported NDCG."""
    from fedsim.protocols.common import BadMessageError
    from fedsim.protocols.fedae import checked_eval

    ok = {"sse": 0.0, "n": 3, "ndcg_sum": 2.0, "ndcg_users": 2}
    assert checked_eval(_Msg(ok), "implicit") is ok  # an NDCG of 1 for both users
    with pytest.raises(BadMessageError, match=r"'eval' from client/0001 \(round 3\).*ndcg_sum=3\.0"):
        checked_eval(_Msg({**ok, "ndcg_sum": 3.0}), "implicit")


def test_indices_with_a_repeated_item_are_refused():
    """Mutant: ``np.diff(arr) < 0`` for ``<= 0`` in ``checked_items``: a repeated id passed as
    strictly increasing (the server slices and merges the decoder's rows by these ids, one row
    per item)."""
    from fedsim.protocols.common import BadMessageError
    from fedsim.protocols.fedae import checked_items

    assert checked_items(_Msg({"items": np.array([1, 3, 4])}, kind="indices"), 5).tolist() == [1, 3, 4]
    with pytest.raises(BadMessageError, match=r"'indices' from client/0001.*strictly increasing ids in \[0, 5\)"):
        checked_items(_Msg({"items": np.array([1, 3, 3])}, kind="indices"), 5)


def test_a_training_download_labelled_with_another_round_is_refused():
    """Mutant: ``checked_download`` testing only that ``t`` is an int, not that it is the round
    the message is labelled with: a decoder of round 3 saying t = 2 had the client train with
    round 2's learning rate (cosine annealing) and report round 2 among its rounds, silently."""
    from fedsim.protocols.common import BadMessageError
    from fedsim.protocols.fedae import checked_download, param_shapes

    shapes = param_shapes(5, (4, 2), part="dec")
    dec = {k: np.zeros(s, dtype=np.float32) for k, s in shapes.items()}
    assert checked_download(_Msg({"t": 3, "dec": dec}, "server", "decoder"), "dec", shapes, "float32",
                            training=True) is dec
    with pytest.raises(BadMessageError, match=r"'decoder' from server \(round 3\): t must be the round the message "
                                              r"is labelled with \(3\), got 2"):
        checked_download(_Msg({"t": 2, "dec": dec}, "server", "decoder"), "dec", shapes, "float32", training=True)
    # an evaluation's download carries no round of training: not checked
    assert checked_download(_Msg({"t": 2, "dec": dec}, "server", "evaluate"), "dec", shapes, "float32",
                            training=False) is dec


# ---------------------------------------------------------------------------------------------
# FCF


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_fcf_averages_over_the_clients_whose_gradient_arrived(optimizer):
    """Mutant: ``n_clients=n`` (every client) for ``max(len(got), 1)`` (those that answered) in
    the server's step with ``average=True``. client/0001 loses every message it sends: the
    model must be that of the same run over the other three users alone (a client's gradient
    depends only on Q and its own items; the server draws Q first either way and sums in
    node-id order), bit for bit."""
    data, cfg = fcf.tiny(4, 3, 0)
    cfg = cfg.replace(average=True, optimizer=optimizer, lr=0.2, deadline=5.0, wire_dtype="float64")
    net = LossyClients(["client/0001"], seed=2, profile="lan")
    lossy = fcf.build(net, data, cfg).collect(net.run())
    assert [m["clients"] for m in lossy.info["missing"]] == [1, 1, 1]
    keep = data.users != 1
    users = data.users[keep]
    others = Ratings(np.where(users > 1, users - 1, users), data.items[keep], data.values[keep], n_users=3,
                     n_items=data.n_items)
    net = SimNetwork(seed=2, profile="lan")
    ref = fcf.build(net, others, cfg).collect(net.run())
    np.testing.assert_array_equal(lossy.params["Q"], ref.params["Q"])
    np.testing.assert_array_equal(lossy.params["P"][[0, 2, 3]], ref.params["P"])


def test_fcf_a_resumed_run_that_diverges_counts_its_round_from_the_first_run():
    """Mutant: ``diverged_at = t + 1`` (the round within this run) for ``r + 1`` (counted from the
    first run's, like ``rounds_done``). Two rounds, then a run resumed from them at a rate that
    sends Q beyond float32 in its first step: it diverged in round 3, and 3 rounds are done."""
    data, cfg = fcf.tiny(3, 2, 0)
    net = SimNetwork(seed=0)
    first = fcf.build(net, data, cfg).collect(net.run())
    assert first.info["diverged_at"] is None
    # (Mutant: ``done = cfg.rounds`` without the previous runs' rounds: a resumed run numbered its
    # successor's rounds from its own count, and the test file's resume test ran out of memory)
    net = SimNetwork(seed=0)
    plain = fcf.build(net, data, cfg.replace(rounds=3), resume=first).collect(net.run())
    assert plain.info["diverged_at"] is None and plain.info["rounds_done"] == 5 == plain.state["rounds_done"]
    assert {r["round"] for r in net.ledger.records() if r["kind"] == "gradients"} == {2, 3, 4}
    net = SimNetwork(seed=0)
    second = fcf.build(net, data, cfg.replace(rounds=4, lr=1e39), resume=first).collect(net.run())
    assert second.info["diverged_at"] == 3
    assert second.info["rounds_done"] == 3
    assert {r["round"] for r in net.ledger.records() if r["kind"] == "gradients"} == {2}


# ---------------------------------------------------------------------------------------------
# secure aggregation steps and what the protocols share


def _masking_keys(n, lost, k, seed=0):
    from fedsim.math import secagg
    from fedsim.protocols.secagg import MaskingKeys

    rng = np.random.default_rng(seed)
    secrets = [secagg.dh_secret(rng) for _ in range(n)]
    pubs = np.array([0 if i in lost else secagg.dh_public(s) for i, s in enumerate(secrets)], dtype=np.uint64)
    return [MaskingKeys(i, secrets[i], pubs, k) for i in range(n)]


@pytest.mark.parametrize("lost", [0, 2, 4])
def test_a_participant_list_naming_a_keyless_client_still_sums_exactly_over_the_keyed_ones(lost):
    """Mutant: ``keys_for`` without leaving out the members that have no public key: a keyed
    client then masked with a ring neighbour that never masks back (it cannot: nobody shares a
    key with it, and it uploads nothing), and the sum did not decode. Five clients, one key lost,
    every one of the five named: the four keyed uploads add up (mod 2^64) to the sum of their
    vectors, to the fixed-point grid. (With the middle client lost its two neighbours' stray
    masks, both of the same degenerate key, happen to cancel; with the first or last they add.)"""
    from fedsim.math.secagg import decode, unmask_sum

    keys = _masking_keys(5, {lost}, k=2)
    assert [kk.keyed for kk in keys] == [i != lost for i in range(5)]
    rng = np.random.default_rng(1)
    xs = {i: rng.normal(size=6) for i in range(5) if i != lost}
    members = [0, 1, 2, 3, 4]
    ups = [keys[i].upload(xs[i], members, 5) for i in xs]
    np.testing.assert_allclose(decode(unmask_sum(ups)), sum(xs.values()), rtol=0, atol=1e-8)
    # a client without a published key cannot mask at all: it is told so, not given garbage
    with pytest.raises(ValueError, match=f"client {lost}'s public key did not reach the server"):
        keys[lost].upload(np.zeros(6), members, 5)


def test_client_name_pads_to_the_digits_of_the_largest_index():
    """Mutant: ``len(str(n_clients))`` for ``len(str(n_clients - 1))`` in ``client_name``: with
    exactly 10,000 clients (ids 0..9999, four digits) it wrote five digits, names no node has
    (``client_names`` writes four): FedRec++'s check of its denoiser's id, made with
    ``client_name``, refused an honest server's assignment."""
    for n in (1, 2, 10, 9999, 10_000, 10_001, 100_000, 100_001):
        width = max(4, len(str(n - 1)))
        names = client_names(n)
        assert len(names) == n
        for u in {0, min(1, n - 1), n // 2, n - 1}:
            assert fedrec.client_name(u, n) == names[u] == "client/" + str(u).zfill(width)
    assert fedrec.client_name(9999, 10_000) == "client/9999"
    assert fedrec.client_name(0, 10_001) == "client/00000"


@pytest.mark.parametrize("field", ["users", "items"])
def test_test_ratings_one_past_the_index_space_are_refused(field):
    """Mutant: ``items > n_items`` for ``items >= n_items`` in ``check_data`` (the same boundary
    for users is checked too): an item id equal to n_items has no factor row (ids are 0-based);
    it passed the check and failed deep in the evaluation."""
    from fedsim.protocols.common import check_data

    train = Ratings(np.array([0, 1, 2]), np.array([0, 1, 3]), np.array([4.0, 3.0, 5.0]), n_users=3, n_items=4)
    ok = dict(users=np.array([0, 2]), items=np.array([2, 3]))
    check_data("FedRec", train, Ratings(ok["users"], ok["items"], np.array([3.0, 2.0]), n_users=4, n_items=5))
    bad = {**ok, field: ok[field] + 1}  # users 1, 3 of 3 users or items 3, 4 of 4 items
    test = Ratings(bad["users"], bad["items"], np.array([3.0, 2.0]), n_users=4, n_items=5)
    what = "1 user(s) from 3 on" if field == "users" else "1 item(s) from 4 on"
    with pytest.raises(ValueError, match=re.escape(f"FedRec: the test ratings hold {what}, outside the training "
                                                   "data's index space (3 users x 4 items)")):
        check_data("FedRec", train, test)
