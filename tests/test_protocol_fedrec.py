"""FedRec as actors: equal to its centralized twin, its communication equal to the paper's formula."""

import numpy as np
import pytest

from fedsim.config import ConfigError
from fedsim.data import generate
from fedsim.kernel import AsyncioNetwork, SimNetwork
from fedsim.protocols import fedrec
from fedsim.protocols.fedrec import FedRecConfig

from conftest import as_ratings


@pytest.fixture(scope="module")
def tiny():
    r = generate("tiny", seed=3)
    return r.users, r.items, r.values.astype(np.float64), r.n_users, r.n_items


def federated(data, cfg, seed=7, profile="ideal", test=None):
    net = SimNetwork(seed=seed, profile=profile)
    test = None if test is None else as_ratings(*test, *data[3:5])
    job = fedrec.build(net, as_ratings(*data), cfg, test=test)
    return job.collect(net.run()).model, net


@pytest.mark.parametrize("cfg", [
    FedRecConfig("PMF(B)", d=4, T=6, lr=0.5, dtype="float64"),
    FedRecConfig("PMF(B)", d=4, T=6, lr=0.5, dtype="float64", rho=2, strategy="ua"),
    FedRecConfig("PMF(B)", d=4, T=6, lr=0.5, dtype="float64", rho=1, strategy="hf", T_predict=1, T_local=3),
    FedRecConfig("PMF(B)", d=4, T=6, lr=0.5, dtype="float64", rho=1, resample=False),
    FedRecConfig("PMF(B)", d=4, T=4, lr=0.5, dtype="float64", order="paper"),
    FedRecConfig("PMF(S)", d=4, T=4, lr=0.05, dtype="float64"),
    FedRecConfig("PMF(S)", d=4, T=4, lr=0.05, client_lr=0.03, dtype="float64", rho=1, strategy="hf",
                 T_predict=0, T_local=2),
    FedRecConfig("SVD++(S)", d=4, T=4, lr=0.05, dtype="float64"),
    FedRecConfig("SVD++(S)", d=4, T=4, lr=0.05, dtype="float64", rho=2, strategy="ua"),
], ids=lambda c: f"{c.model}-rho{c.rho}-{c.strategy}-{'resample' if c.resample else 'once'}-{c.order}")
def test_federated_equals_centralized_twin(tiny, cfg):
    fed, _ = federated(tiny, cfg)
    cen = fedrec.central_twin(as_ratings(*tiny), cfg, seed=7)
    assert fed.diverged_at is None and cen.diverged_at is None
    assert np.abs(fed.V).max() > 1e-3  # trained, not the initial noise
    np.testing.assert_allclose(fed.U, cen.U, rtol=0, atol=1e-9)
    np.testing.assert_allclose(fed.V, cen.V, rtol=0, atol=1e-9)
    if cfg.implicit:
        np.testing.assert_allclose(fed.O, cen.O, rtol=0, atol=1e-9)


def test_rho_zero_federated_equals_unfederated_and_seeds_matter(tiny):
    cfg = FedRecConfig("PMF(B)", d=4, T=5, lr=0.5, dtype="float64")
    a, _ = federated(tiny, cfg, seed=1)
    b, _ = federated(tiny, cfg, seed=2)
    assert np.abs(a.V - b.V).max() > 1e-4


@pytest.mark.asyncio
async def test_fedrec_runs_identically_on_asyncio(tiny):
    cfg = FedRecConfig("PMF(S)", d=4, T=3, lr=0.05, dtype="float64", rho=1)
    sim, _ = federated(tiny, cfg)
    net = AsyncioNetwork(seed=7)
    job = fedrec.build(net, as_ratings(*tiny), cfg)
    aio = job.collect(await net.run_async(timeout=60)).model
    np.testing.assert_array_equal(sim.V, aio.V)
    np.testing.assert_array_equal(sim.U, aio.U)


@pytest.mark.parametrize("model,rho", [("PMF(B)", 0), ("PMF(B)", 2), ("PMF(S)", 1), ("PMF(B)", 3)])
def test_payload_per_iteration_equals_section_3_3_formula(model, rho):
    data = generate("tiny", seed=5, n_items=160)
    cfg = FedRecConfig(model, d=8, T=3, lr=0.1 if model == "PMF(B)" else 0.01, rho=rho, dtype="float32")
    m = data.n_items
    # the formula assumes rho |I_u| unrated items exist for every user
    counts = np.bincount(data.users, minlength=data.n_users)
    assert (counts * (1 + rho) <= m).all()
    net = SimNetwork(seed=0, framing_bytes=40)
    job = fedrec.build(net, data, cfg)
    job.collect(net.run())
    cols = net.ledger.columns()
    expected = fedrec.formula_payload_floats(len(data), rho, m, data.n_users, cfg.d)
    for t in range(cfg.T):
        sel = (cols["round"] == t) & np.isin(cols["kind"], ["model", "gradients"])
        if model == "PMF(B)":
            assert cols["floats"][sel].sum() == expected
            assert cols["floats"][sel].sum() * 4 == 4 * cfg.d * (len(data) * (1 + rho) + m * data.n_users)
        else:  # stochastic: n draws with replacement, so |R| is replaced by the drawn users' counts
            picked = cols["dst"][sel & (cols["kind"] == "model")]
            users = np.array([int(p.split("/")[1]) for p in picked])
            assert cols["floats"][sel].sum() == cfg.d * (counts[users].sum() * (1 + rho) + m * len(users))
    # what crossed the wire: payload floats x 4 plus ids, msgpack structure and 40 B framing each
    assert (cols["bytes"] >= cols["raw_bytes"] + 40).all()
    assert cols["raw_bytes"].sum() == (cols["floats"].sum() * 4
                                       + 4 * sum(int(f / cfg.d) for f, k in zip(cols["floats"], cols["kind"]) if k == "gradients"))


def _server_view(data, resample):
    users, items, ratings, n, m = data
    cfg = FedRecConfig("PMF(B)", d=4, T=6, lr=0.3, rho=1, dtype="float64", resample=resample)
    seen: dict[int, list[set]] = {}

    class SpyContext:  # the real context, but every gathered upload is also recorded
        def __init__(self, ctx):
            self._ctx = ctx

        def __getattr__(self, name):
            return getattr(self._ctx, name)

        async def gather(self, kind, **kw):
            got = await self._ctx.gather(kind, **kw)
            for msg in got:
                u = int(msg.sender.split("/")[1])
                items = msg.payload["items"].tolist()
                assert items == sorted(items)  # position must not tell rated from sampled
                seen.setdefault(u, []).append(set(items))
            return got

    async def spying_server(ctx, clients, m_, cfg_):
        return await fedrec.server(SpyContext(ctx), clients, m_, cfg_)

    net = SimNetwork(seed=2)
    fedrec.build(net, as_ratings(users, items, ratings, n, m), cfg)
    net.nodes["server"].actor = spying_server
    net.run()
    return seen


def test_resampling_lets_the_server_intersect_uploads_to_find_rated_items(tiny):
    users, items = tiny[0], tiny[1]
    rated = set(items[users == 0].tolist())
    fresh = _server_view(tiny, resample=True)[0]
    once = _server_view(tiny, resample=False)[0]
    # each upload hides the rated items among as many sampled ones
    assert all(len(s) == 2 * len(rated) and rated <= s for s in fresh + once)
    # sampled afresh: the intersection of uploads converges to exactly the rated set
    assert set.intersection(*fresh) == rated
    # sampled once: every upload is the same set; the server cannot tell which half is rated
    assert all(s == once[0] for s in once) and set.intersection(*once) != rated


# the run is made to diverge: no NumPy overflow or invalid-value warning reaches the user's terminal
# (these filters ignored them; none came, with numba or without)
@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_divergence_is_detected_not_averaged(tiny):
    cfg = FedRecConfig("PMF(B)", d=4, T=30, lr=500.0, dtype="float64")
    fed, _ = federated(tiny, cfg)
    assert fed.diverged_at is not None and fed.diverged_at <= 30
    with pytest.raises(Exception, match="diverged|non-finite|Divergence"):
        fed.evaluate(*tiny[:3])


def test_federated_evaluation_matches_central_metrics(tiny):
    users, items, ratings, n, m = tiny
    rng = np.random.default_rng(0)
    test_mask = rng.random(len(users)) < 0.2
    train = (users[~test_mask], items[~test_mask], ratings[~test_mask], n, m)
    test = (users[test_mask], items[test_mask], ratings[test_mask])
    cfg = FedRecConfig("PMF(B)", d=4, T=6, lr=0.5, dtype="float64", eval_every=1)
    fed, net = federated(train, cfg, test=test)
    cen = fedrec.central_twin(as_ratings(*train), cfg, seed=7, test=test)
    # federated eval at iteration t uses the state after t iterations, like the central history
    for e in fed.history:
        h = cen.history[e["iteration"] - 1]
        assert e["mae"] == pytest.approx(h["mae"], abs=1e-9)
        assert e["rmse"] == pytest.approx(h["rmse"], abs=1e-9)
    assert [e["iteration"] for e in fed.history] == list(range(1, cfg.T + 1))
    assert set(net.ledger.columns()["kind"]) >= {"eval"}
    with pytest.raises(ConfigError, match="eval_every needs held-out test ratings"):
        federated(train, cfg)  # evaluations over no ratings: refused, not a list of NaN


@pytest.mark.parametrize("model,lr", [("PMF(B)", 0.5), ("PMF(S)", 0.05)])
@pytest.mark.parametrize("secure", [False, True])
def test_the_model_after_the_last_iteration_is_evaluated_in_every_mode(tiny, model, lr, secure):
    """eval_every = 3, T = 6: evaluations after iterations 3 and 6 in batch as in stochastic mode.
    The batch evaluation rides on the next model download, so the last one (the model the run
    returns, the figure the paper reports) used to be missing: [3] for PMF(B), [3, 6] for PMF(S)."""
    if secure and model != "PMF(B)":
        pytest.skip("secure aggregation is batch only")
    users, items, ratings, n, m = tiny
    test_mask = np.random.default_rng(0).random(len(users)) < 0.2
    train = (users[~test_mask], items[~test_mask], ratings[~test_mask], n, m)
    test = (users[test_mask], items[test_mask], ratings[test_mask])
    cfg = FedRecConfig(model, d=4, T=6, lr=lr, dtype="float64", eval_every=3, rho=1, secure_aggregation=secure)
    fed, net = federated(train, cfg, test=test)
    assert [e["iteration"] for e in fed.history] == [3, 6]
    # the last one is the returned model's error, computed here independently of the protocol
    pred = np.einsum("kd,kd->k", fed.U[test[0]], fed.V[test[1]])
    err = np.clip(pred, 1, 5) - test[2]
    assert fed.history[-1]["n"] == len(err)
    assert fed.history[-1]["mae"] == pytest.approx(np.abs(err).mean(), abs=1e-12)
    assert fed.history[-1]["rmse"] == pytest.approx(np.sqrt((err ** 2).mean()), abs=1e-12)
    assert fed.history[-1]["rmse"] == pytest.approx(fed.evaluate(*test)[1], abs=1e-12)


@pytest.mark.parametrize("model", ["PMF(S)", "SVD++(S)"])
@pytest.mark.parametrize("setting", ["on time", "late replies", "still in flight", "tap"])
def test_the_stochastic_server_writes_its_model_message_in_place_only_when_no_one_else_holds_it(tiny, model, setting,
                                                                                                monkeypatch):
    """The server updates V (and O) inside the message it sent last when every holder has let it
    go (Draft.reopen), and in a copy otherwise (a model message still in flight when the server
    gave up waiting, a tap keeping every payload): either way the run is the run that copies V for
    every message, bit for bit, and what a holder kept is what was sent to it."""
    from fedsim.kernel import codec
    from fedsim.privacy import Recorder

    profile, deadline = {"late replies": ("wan", 0.05), "still in flight": ("mobile", 0.05)}.get(setting, ("wan", None))
    cfg = FedRecConfig(model, d=4, T=3, lr=0.05, dtype="float64", rho=1, deadline=deadline)
    original = codec.Draft.reopen
    outcomes = []

    def counted(self):
        ok = original(self)
        outcomes.append(ok)
        return ok

    def run(reopen):
        monkeypatch.setattr(codec.Draft, "reopen", reopen)
        net = SimNetwork(seed=5, profile=profile)
        rec = None
        if setting == "tap":
            rec = Recorder(kinds=["model"])
            rec.attach(net)
        job = fedrec.build(net, as_ratings(*tiny), cfg)
        res = job.collect(net.run(strict=False))
        return res, net.ledger.to_csv(), rec

    reused, led_reused, rec = run(counted)
    copied, led_copied, _ = run(lambda self: False)
    for k in copied.params:
        assert reused.params[k].tobytes() == copied.params[k].tobytes()
    assert led_reused == led_copied
    if setting in ("on time", "late replies"):  # a late reply: its client had let the model go
        assert outcomes and all(outcomes)
        assert bool(copied.info["missing"]) == (setting == "late replies")
    elif setting == "still in flight":
        assert copied.info["missing"] and False in outcomes
    else:
        assert outcomes and not any(outcomes)
        # each kept model message still holds the V it was sent with: the stochastic server sends
        # n of them per iteration, each after one more client's update, so no two are equal
        vs = [codec.decode_encoded(p.encoded)["V"].tobytes() for row, p, _ in rec.entries if p is not None and row[6] == "model"]
        assert len(vs) == len(set(vs)) == cfg.T * tiny[3]
