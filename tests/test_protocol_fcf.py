"""FCF as actors: every client moves 2 x 4 x m x d payload bytes per round, whatever its data, and
the run equals the math replayed centrally."""

import numpy as np
import pytest

from fedsim.data import generate
from fedsim.kernel import SimNetwork
from fedsim.math.fcf import AdamState, fcf_client, fcf_server_update
from fedsim.protocols import fcf
from fedsim.protocols.fcf import FCFConfig
from fedsim.seeding import node_rng

SEED = 3


@pytest.fixture(scope="module")
def tiny():
    r = generate("tiny", seed=4).binarize()
    csr = r.by_user()
    return [np.asarray(csr.row_indices(u), dtype=np.int64) for u in range(r.n_users)], r.n_items, r


def run(tiny, cfg, **kw):
    net = SimNetwork(seed=SEED)
    job = fcf.build(net, tiny[2], cfg, **kw)
    res = job.collect(net.run())
    return {**res.params, **res.info, "result": res}, net


@pytest.mark.parametrize("d", [2, 5])
def test_payload_bytes_per_client_per_round_are_8md(tiny, d):
    items, m, _ = tiny
    cfg = FCFConfig(rounds=3, d=d)
    _, net = run(tiny, cfg)
    expected = fcf.payload_bytes_per_client_round(m, d)
    assert expected == 2 * 4 * m * d
    for rec_round in range(cfg.rounds):
        for u in range(len(items)):
            name = fcf.client_name(u, len(items))
            rows = [r for r in net.ledger.records()
                    if r["round"] == rec_round and r["kind"] in fcf.TRAINING_KINDS and name in (r["src"], r["dst"])]
            assert sorted(r["kind"] for r in rows) == ["gradients", "model"]
            assert sum(r["raw_bytes"] for r in rows) == expected  # download of Q + upload of all m gradients
            assert all(r["floats"] == m * d and r["units"] == m for r in rows)
            # on the wire: the same plus msgpack framing (a few dozen bytes per message)
            assert 0 < sum(r["bytes"] for r in rows) - expected < 100


def test_upload_size_does_not_depend_on_the_clients_data(tiny):
    items, m, _ = tiny
    counts = [len(i) for i in items]
    assert min(counts) < max(counts)
    _, net = run(tiny, FCFConfig(rounds=1, d=3))
    up = [r["raw_bytes"] for r in net.ledger.records() if r["kind"] == "gradients"]
    assert len(up) == len(items) and len(set(up)) == 1


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_federated_run_equals_the_math_replayed(tiny, optimizer):
    items, m, _ = tiny
    cfg = FCFConfig(rounds=3, d=3, optimizer=optimizer, lr=0.05 if optimizer == "adam" else 0.01)
    out, _ = run(tiny, cfg)
    Q = node_rng(SEED, fcf.SERVER).normal(0.0, cfg.init_std, size=(m, cfg.d))
    adam = AdamState.zeros(Q.shape) if optimizer == "adam" else None
    for _ in range(cfg.rounds):
        Qs = Q.astype(np.float32)
        G = np.zeros_like(Q)
        P = []
        for u in range(len(items)):
            p, g = fcf_client(Qs, items[u], cfg.alpha, cfg.lam)
            P.append(p)
            G += g.astype(np.float32)
        fcf_server_update(Q, G, cfg.lr, cfg.lam, adam=adam)
    np.testing.assert_allclose(out["Q"], Q, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(out["Q_sent"], Qs)
    np.testing.assert_allclose(out["P"], np.stack(P), rtol=0, atol=1e-10)


def test_two_chunks_equal_one_run(tiny):
    items, m, _ = tiny
    whole, _ = run(tiny, FCFConfig(rounds=2, d=3))
    first, _ = run(tiny, FCFConfig(rounds=1, d=3))
    items, m, _ = tiny
    net = SimNetwork(seed=SEED + 9)  # the seed only draws the initial Q, given here
    job = fcf.build(net, tiny[2], FCFConfig(rounds=1, d=3), resume=first["result"])
    res = job.collect(net.run())
    second = {**res.params, **res.info}
    assert net.ledger.rounds() == [1]
    np.testing.assert_allclose(second["Q"], whole["Q"], rtol=0, atol=1e-12)
    np.testing.assert_allclose(second["P"], whole["P"], rtol=0, atol=1e-12)


def test_study_run_fcf_reports_ledger_bytes(tiny):
    from fedsim.studies import fpl as study

    r = generate("ml100k-like", seed=1, n_users=40, n_items=80, n_ratings=1600, min_per_user=25)
    split = study.prepare(r, protocol="test")
    rec = study.run_fcf(split, 3, d=4, eval_every=2)
    assert [c["epoch"] for c in rec.curve] == [2, 3]
    for c in rec.curve:
        assert c["raw_bytes_per_client_round"] == c["formula_bytes_per_client_round"] == 8 * split.n_items * 4
        assert 0 <= c["test_p"] <= 1


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_a_round_without_any_gradient_leaves_q_and_adam_as_they_were(tiny, optimizer):
    # every client's upload lost: the server used to take its regularisation step anyway (Q shrunk
    # by lr lam Q, Adam's step count advanced) in rounds nobody took part in
    from fedsim.kernel import Faults

    items, m, r = tiny
    cfg = FCFConfig(rounds=3, d=3, optimizer=optimizer, lam=0.5, deadline=5.0)
    net = SimNetwork(seed=SEED, faults=Faults(loss=1.0, roles=("client",)))
    res = fcf.build(net, r, cfg).collect(net.run())
    Q0 = node_rng(SEED, fcf.SERVER).normal(0.0, cfg.init_std, size=(m, cfg.d))
    np.testing.assert_array_equal(res.params["Q"], Q0)
    if optimizer == "adam":
        assert res.info["adam"]["t"] == 0 and not res.info["adam"]["m"].any()
    assert res.info["missing"] == [{"round": t, "kind": "gradients", "clients": len(items), "skipped": True}
                                   for t in range(cfg.rounds)]


def test_an_alpha_whose_system_is_singular_ends_the_run_as_diverged(tiny):
    # alpha = 1e20: a client's closed-form solve was a LinAlgError, the run a traceback
    out, _ = run(tiny, FCFConfig(rounds=3, d=10, alpha=1e20))
    assert out["diverged_at"] == 1 and out["rounds_done"] == 1
    assert np.isnan(out["P"]).any()
