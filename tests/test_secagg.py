"""Secure aggregation (fedsim.math.secagg): masks cancel to the last bit, the decoded sum is within
the fixed-point bound of the float sum; and the defences built on it as protocol options keep each
protocol's model (FedRec++ stays exactly lossless) and declare their message kinds."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.config import ConfigError
from fedsim.data import generate
from fedsim.kernel import SimNetwork
from fedsim.math import secagg
from fedsim.protocols import REGISTRY, fedrec, fedrecpp
from fedsim.protocols.fedrec import FedRecConfig
from fedsim.protocols.fedrecpp import FedRecPPConfig
from fedsim.protocols.fpl import FPLConfig

from conftest import as_ratings, rewrite_sends, run_to_bad_message


def _keys(n, seed=0):
    rng = np.random.default_rng(seed)
    secrets = [secagg.dh_secret(rng) for _ in range(n)]
    pubs = [secagg.dh_public(s) for s in secrets]
    return secrets, pubs


@pytest.mark.parametrize("n,k", [(2, 8), (5, 2), (9, 4), (12, 3), (30, 8)])
def test_masks_cancel_bit_for_bit_and_the_sum_decodes(n, k):
    rng = np.random.default_rng(n * 100 + k)
    secrets, pubs = _keys(n, n)
    members = sorted(rng.choice(50, size=n, replace=False).tolist())
    sec = dict(zip(members, secrets))
    pub = dict(zip(members, pubs))
    xs = {m: rng.normal(scale=rng.choice([1e-6, 1.0, 1e3]), size=37) for m in members}
    uploads = []
    for m in members:
        keys = {v: secagg.dh_shared(sec[m], pub[v]) for v in secagg.ring_neighbours(members, m, k)}
        y = secagg.masked_upload(xs[m], m, keys, rnd=7)
        if n > 2 or k >= 1:
            assert not np.array_equal(y, secagg.encode(xs[m]))  # masked: not the plain encoding
        uploads.append(y)
    total = secagg.unmask_sum(uploads)
    exact = np.zeros(37, dtype=np.uint64)
    for m in members:
        exact += secagg.encode(xs[m])
    np.testing.assert_array_equal(total, exact)  # integer arithmetic: to the last bit
    ref = np.sum([xs[m] for m in members], axis=0)
    assert np.abs(secagg.decode(total) - ref).max() <= n * 2.0 ** -(secagg.FRACTION_BITS + 1) + 1e-12 * np.abs(ref).max()
    # without one upload the masks of its neighbours stay in: garbage
    partial = secagg.decode(secagg.unmask_sum(uploads[1:]))
    assert np.abs(partial - (ref - xs[members[0]])).max() > 1.0


def test_ring_is_symmetric_and_dh_agrees():
    for n in range(2, 12):
        for k in range(2, 10):
            ms = list(range(n))
            nb = {u: set(secagg.ring_neighbours(ms, u, k)) for u in ms}
            assert all((u in nb[v]) == (v in nb[u]) for u in ms for v in ms)
            assert all(len(nb[u]) >= 1 for u in ms)
    a, b = 123456789, 987654321
    assert secagg.dh_shared(a, secagg.dh_public(b)) == secagg.dh_shared(b, secagg.dh_public(a))
    with pytest.raises(OverflowError):
        secagg.encode(np.array([2.0 ** 40]))


@pytest.fixture(scope="module")
def data():
    r = generate("tiny", seed=11, n_items=120)
    return as_ratings(r.users, r.items, r.values.astype(np.float64), r.n_users, r.n_items)


def _run(mod, data, cfg, seed=4):
    net = SimNetwork(seed=seed)
    res = mod.build(net, data, cfg).collect(net.run())
    return res, net


@pytest.mark.parametrize("dtype,tol", [("float32", 1e-6), ("float64", 1e-9)])
def test_fedrec_secure_aggregation_trains_the_same_model(data, dtype, tol):
    base = FedRecConfig("PMF(B)", d=4, T=6, rho=1.0, strategy="hf", T_predict=2, T_local=3, dtype=dtype)
    plain, _ = _run(fedrec, data, base)
    sec, net = _run(fedrec, data, base.replace(secure_aggregation=True, secagg_neighbours=4))
    np.testing.assert_allclose(sec.params["V"], plain.params["V"], rtol=0, atol=tol)
    np.testing.assert_allclose(sec.params["U"], plain.params["U"], rtol=0, atol=tol)
    assert fedrec.SPEC.undeclared(net.ledger) == []
    kinds = {k["kind"]: k for k in net.ledger.by_kind()}
    assert "gradients" not in kinds and kinds["masked"]["messages"] == 6 * data.n_users
    m, d = data.n_items, 4
    # each masked upload carries m (d + 1) uint64 whatever the user's data: the defence's price
    assert kinds["masked"]["raw_bytes"] == 6 * data.n_users * m * (d + 1) * 8


def test_secure_aggregation_is_refused_where_it_hides_nothing(data):
    with pytest.raises(ConfigError, match="secure_aggregation"):
        fedrec.build(SimNetwork(), data, FedRecConfig("PMF(S)", d=4, T=1, secure_aggregation=True))
    with pytest.raises(ConfigError, match="secure_aggregation"):
        REGISTRY["fpl"].build(SimNetwork(), data.binarize(), FPLConfig(clients_per_round=1, secure_aggregation=True))
    with pytest.raises(ConfigError, match="secure_noise"):
        fedrecpp.build(SimNetwork(), data, FedRecPPConfig(d=4, T=1, eta=0, secure_noise=True))


def test_fedrec_secure_aggregation_is_refused_for_a_single_client():
    """One client's "sum" is its own upload, decoded by the server: nothing is hidden (FPL refuses
    one client per round for the same reason)."""
    spec = REGISTRY["fedrec"]
    data, cfg = spec.tiny(1, 2, 0)
    assert data.n_users == 1
    with pytest.raises(ConfigError, match="secure_aggregation needs at least 2 clients"):
        spec.build(SimNetwork(), data, cfg.replace(secure_aggregation=True))
    spec.build(SimNetwork(), data, cfg)  # without the defence one client is fine


@pytest.mark.parametrize("rho", [1, 3])
@pytest.mark.parametrize("eta", [1, 3, 15])
def test_fedrecpp_secure_noise_stays_lossless(data, rho, eta):
    pp, net = _run(fedrecpp, data, FedRecPPConfig(d=4, T=10, lr=0.8, rho=rho, eta=eta, T_predict=2, T_local=3,
                                                  dtype="float64", secure_noise=True, secagg_neighbours=2))
    base, _ = _run(fedrec, data, FedRecConfig("PMF(B)", d=4, T=10, lr=0.8, rho=0, dtype="float64"))
    np.testing.assert_allclose(pp.params["V"], base.params["V"], rtol=0, atol=1e-9)
    np.testing.assert_allclose(pp.params["U"], base.params["U"], rtol=0, atol=1e-9)
    assert fedrecpp.SPEC.undeclared(net.ledger) == []
    noise = net.ledger.select(kind="noise")
    assert len(noise) and noise.column("anonymous").all()
    assert len(set(noise.column("bytes").tolist())) == 1  # every noise message has the same size


def test_fpl_secure_aggregation_and_noise(data):
    spec = REGISTRY["fpl"]
    imp = data.binarize()
    cfg = FPLConfig(clients_per_round=10, triples=3, rounds=4, d=4, pi=0.5)
    plain, _ = _run(spec, imp, cfg)
    sec, net = _run(spec, imp, cfg.replace(secure_aggregation=True, secagg_neighbours=4))
    np.testing.assert_allclose(sec.params["theta"], plain.params["theta"], rtol=0, atol=1e-6)
    # the clients' draws are untouched (the same triples and disclosures); p_u moves with Theta_S's
    # rounding only
    np.testing.assert_array_equal(sec.info["sent_positive"], plain.info["sent_positive"])
    np.testing.assert_allclose(sec.params["P"], plain.params["P"], rtol=0, atol=1e-6)
    assert spec.undeclared(net.ledger) == []
    noisy, _ = _run(spec, imp, cfg.replace(upload_noise=0.05))
    np.testing.assert_array_equal(noisy.info["sent_positive"], plain.info["sent_positive"])
    assert np.abs(noisy.params["theta"] - plain.params["theta"]).max() > 1e-4


def test_fedrec_upload_noise_keeps_the_sampling_and_costs_accuracy(data):
    base = FedRecConfig("PMF(B)", d=4, T=6, rho=1.0, dtype="float64")
    plain, pnet = _run(fedrec, data, base)
    noisy, nnet = _run(fedrec, data, base.replace(upload_noise=0.1))
    # the same items are uploaded (the noise has its own generator), with other values
    np.testing.assert_array_equal(pnet.ledger.view().column("bytes"), nnet.ledger.view().column("bytes"))
    assert np.abs(noisy.params["V"] - plain.params["V"]).max() > 1e-3


# the runs are made to diverge (clients see inf): no NumPy overflow or invalid-value warning reaches
# the user's terminal (these filters ignored them; none came, with numba or without)
@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("name,flag,over", [
    ("fedrec", "secure_aggregation", {"lr": 500.0, "rho": 0.0}),
    ("fpl", "secure_aggregation", {"lr": 1e6}),
    ("fedrecpp", "secure_noise", {"lr": 500.0}),
])
def test_a_diverging_secure_run_reports_divergence_as_the_plain_run_does(name, flag, over):
    """Values beyond the fixed-point range (or not finite) used to crash a client (OverflowError);
    now the client flags them, the server stops at that round and reports ``diverged_at``, no later
    than the plain run (fixed point overflows before floats do), with the last finite model."""
    spec = REGISTRY[name]
    data, cfg = spec.tiny(6, 30, 0)
    cfg = cfg.replace(dtype="float64", **over)
    out = []
    for on in (False, True):
        net = SimNetwork(seed=0)
        out.append((spec.build(net, data, cfg.replace(**{flag: True} if on else {})).collect(net.run()), net))
    (plain, _), (sec, net) = out
    assert plain.info["diverged_at"] is not None
    assert sec.run.complete
    stop = sec.info["diverged_at"]
    assert stop is not None and stop <= plain.info["diverged_at"]
    # no training message after the round that overflowed
    kinds = {"masked", "gradients", "noise"}
    assert max(r["round"] for r in net.ledger.records() if r["kind"] in kinds) == stop - 1
    model = sec.params["theta" if name == "fpl" else "V"]
    assert np.isfinite(model).all()
    if name == "fpl":  # the rounds applied: those before the one that overflowed (it said the 30 planned)
        assert sec.info["rounds_done"] == sec.state["rounds_done"] == stop - 1 < 30
    assert spec.undeclared(net.ledger) == []
    if name != "fpl":
        with pytest.raises(Exception, match="diverged|non-finite|Divergence"):
            sec.model.evaluate(data.users, data.items, data.values)


def test_an_upload_that_does_not_fit_is_flagged_not_masked():
    from fedsim.protocols.secagg import MaskingKeys, masked_body

    secrets, pubs = _keys(3)
    keys = MaskingKeys(1, secrets[1], np.array(pubs, dtype=np.uint64), 2)
    x = np.array([0.5, -2.0, 3.0])
    body = masked_body(keys, x, [0, 1, 2], 4)
    np.testing.assert_array_equal(body["masked"], keys.upload(x, [0, 1, 2], 4))
    for bad in (np.inf, np.nan, 2.0 ** 40):
        assert masked_body(keys, np.array([0.5, bad, 3.0]), [0, 1, 2], 4) == {"overflow": True}


def test_a_sum_that_would_wrap_around_is_refused_at_encoding():
    # each value fitted the old per-value check (|x| < 2^30) while the sum of three wrapped past
    # int64's 2^31 (in fixed point) and decoded to a wrong value, silently
    x = np.array([0.9 * 2.0 ** 30])
    wrapped = secagg.decode(secagg.unmask_sum([secagg.encode(x)] * 3))
    assert wrapped[0] != pytest.approx(3 * x[0])  # what the old check let through
    with pytest.raises(OverflowError, match="sum over 3"):
        secagg.encode(x, parties=3)
    assert secagg.limit(3) == 2.0 ** 30 / 3
    ok = np.array([secagg.limit(3) * 0.999, -secagg.limit(3) * 0.999])
    total = secagg.decode(secagg.unmask_sum([secagg.encode(ok, parties=3)] * 3))
    np.testing.assert_allclose(total, 3 * ok, rtol=1e-15)


def test_the_masked_upload_bound_counts_the_keyed_members():
    from fedsim.protocols.secagg import MaskingKeys, masked_body

    secrets, pubs = _keys(4)
    x = np.array([0.3 * 2.0 ** 30])  # fits a sum over 3, not over 4
    keys = MaskingKeys(1, secrets[1], np.array(pubs, dtype=np.uint64), 2)
    assert keys.parties([0, 1, 2, 3]) == 4
    assert masked_body(keys, x, [0, 1, 2, 3], 0) == {"overflow": True}
    assert "masked" in masked_body(keys, x, [0, 1, 2], 0)
    keyless = np.array(pubs, dtype=np.uint64)
    keyless[3] = 0  # member 3's key never reached the server: the sum is over three
    keys = MaskingKeys(1, secrets[1], keyless, 2)
    assert keys.parties([0, 1, 2, 3]) == 3
    assert "masked" in masked_body(keys, x, [0, 1, 2, 3], 0)


def _corrupt_masked(fault: str):
    """A client's sends with its ``masked`` uploads (to the server, or anonymous noise to a
    denoiser) replaced: ``short`` keeps one entry (the sum broadcast it over all), ``float`` casts
    the vector to float64 (the sum cast it back to uint64, rounded), ``missing`` drops it."""
    def rewrite(kind, payload):
        if not (isinstance(payload, dict) and "masked" in payload):
            return payload
        y = payload["masked"]
        return {"short": {"masked": y[:1]}, "float": {"masked": y.astype(np.float64)},
                "missing": {"mask": y}}[fault]
    return rewrite


@pytest.mark.parametrize("fault, why", [("short", "masked must be a uint64 vector of {} entries, got uint64 of shape \\(1,\\)"),
                                        ("float", "masked must be a uint64 vector of {} entries, got float64 of shape"),
                                        ("missing", "KeyError: 'masked'")])
@pytest.mark.parametrize("name, flag", [("fedrec", "secure_aggregation"), ("fpl", "secure_aggregation"),
                                        ("fedrecpp", "secure_noise")])
def test_a_malformed_masked_upload_is_an_error_naming_its_sender(name, flag, fault, why):
    import re

    spec = REGISTRY[name]
    data, cfg = spec.tiny(4, 2, 0)
    cfg = cfg.replace(**{flag: True, "secagg_neighbours": 2})
    net = SimNetwork(seed=0)
    spec.build(net, data, cfg)
    clients = sorted(n for n in net.nodes if n.startswith("client"))
    mod = {"fedrec": fedrec, "fedrecpp": fedrecpp}.get(name) or __import__("fedsim.protocols.fpl").protocols.fpl
    bad = clients[1]
    if name == "fedrecpp":
        bad = clients  # which client is ordinary is drawn in the run: every ordinary one corrupts its noise
    rewrite_sends(net, [bad] if isinstance(bad, str) else bad, mod.client, _corrupt_masked(fault))
    err, cause = run_to_bad_message(net)
    if name == "fedrecpp":  # anonymous noise, to a denoiser
        assert cause.sender is None and cause.kind == "noise" and cause.round == 0
    else:
        assert cause.sender == bad and cause.kind == "masked" and cause.round == 0
        assert err.node == "server"
    m, d = (data.n_items, cfg.d)
    assert re.search(why.format(m * (d + 1)), str(cause)), str(cause)


def test_unmask_sum_of_no_upload_is_a_clear_error():
    with pytest.raises(ValueError, match="no upload"):
        secagg.unmask_sum([])


@pytest.mark.parametrize("mod,cfg,setup_kinds", [
    (fedrec, FedRecConfig("PMF(B)", d=4, T=3, rho=1.0, secure_aggregation=True, secagg_neighbours=2), {"keys", "peers"}),
    (fedrecpp, FedRecPPConfig(d=4, T=3, rho=1.0, eta=2, secure_noise=True, secagg_neighbours=2),
     {"assign", "keys", "peers"}),
])
def test_the_key_exchange_is_labelled_with_the_setup_round_not_the_first_training_round(data, mod, cfg, setup_kinds):
    # the server relays the keys at round -1 (info["missing"] says so), but a node starts at round
    # 0: the clients' keys came labelled 0, the server adopted that label and relayed the peers in
    # round 0 too, mixing the key exchange with the first round's training messages
    _, net = _run(mod, data, cfg)
    cols = net.ledger.columns()
    kinds = {r: set() for r in set(cols["round"].tolist())}
    for r, k in zip(cols["round"].tolist(), cols["kind"].tolist()):
        kinds[r].add(k)
    assert sorted(kinds) == [-1, 0, 1, 2]
    assert kinds[-1] == setup_kinds
    assert not any(kinds[r] & {"keys", "peers"} for r in (0, 1, 2))


def test_masked_upload_adds_each_mask_term_into_the_encoding_with_no_mask_vector():
    # masked_upload built mask()'s vector (zeros plus every PRG term) and then added it: a third
    # vector of the upload's length alive at once. Modulo 2^64 the order of the additions does not
    # matter, so the terms go into the encoding directly: the same upload, two vectors at most.
    import tracemalloc

    rng = np.random.default_rng(8)
    x = rng.normal(size=200_000)
    keys = {1: 12345, 4: 999, 7: 2 ** 40 + 3}
    want = secagg.encode(x, parties=9) + secagg.mask(3, keys, 5, x.size)  # the definition
    tracemalloc.start()
    try:
        y = secagg.masked_upload(x, 3, keys, 5, parties=9)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert y.dtype == np.uint64 and y.tobytes() == want.tobytes()
    assert peak < 2.5 * x.nbytes  # the encoding and one PRG term (before: and the mask, 3 x)


def test_encode_checks_the_range_without_a_vector_of_magnitudes(monkeypatch):
    # encode tested np.all(np.abs(x) < bound): two temporaries of the upload's length per client
    # and round. The extremes say the same: every value finite and inside (-bound, bound).
    called = []
    monkeypatch.setattr(np, "abs", lambda *a, **k: called.append(1) or np.absolute(*a, **k))
    bound = secagg.limit(3)
    ok = np.array([-bound * (1 - 2 ** -40), 0.0, -0.0, 1.5, bound * (1 - 2 ** -40)])
    assert secagg.encode(ok, parties=3).view(np.int64).tolist() == \
        np.rint(np.ldexp(ok, secagg.FRACTION_BITS)).astype(np.int64).tolist()
    for bad in (bound, -bound, np.inf, -np.inf, np.nan):
        with pytest.raises(OverflowError, match="fixed-point range of a sum over 3"):
            secagg.encode(np.array([0.0, bad, 1.0]), parties=3)
    assert called == []
