"""Paired runs: FedRec and FedRec++ under the same seed start from the same parameters, select the
same participants and sample the same items, so that their difference is the method alone."""

import numpy as np
import pytest

import fedsim.math.pmf as pmf_math
import fedsim.protocols.fedrecpp as pp_mod
from fedsim.data import generate
from fedsim.kernel import SimNetwork
from fedsim.protocols import fedrec, fedrecpp
from fedsim.protocols.fedrec import FedRecConfig
from fedsim.protocols.fedrecpp import FedRecPPConfig
from fedsim.seeding import node_rng, substream


@pytest.fixture(scope="module")
def data():
    return generate("tiny", seed=11, n_items=120)


def test_substream_depends_on_the_seed_not_on_the_draws():
    a, b = node_rng(3, "server"), node_rng(3, "server")
    b.random(17)  # drawing from the parent does not move the sub-stream
    x = substream(a, "participation").random(5)
    np.testing.assert_array_equal(x, substream(b, "participation").random(5))
    # nor does drawing from the sub-stream move the parent
    c = node_rng(3, "server")
    substream(c, "participation").random(9)
    np.testing.assert_array_equal(c.random(3), node_rng(3, "server").random(3))
    assert not np.array_equal(x, substream(a, "other").random(5))
    assert not np.array_equal(x, substream(node_rng(4, "server"), "participation").random(5))
    assert not np.array_equal(x, node_rng(3, "server").random(5))
    with pytest.raises(ValueError, match="SeedSequence"):
        substream(np.random.Generator(np.random.RandomState(0)._bit_generator), "x")


def _record_samples(monkeypatch):
    """Wrap every ``sample_unrated`` the protocols call; record (rated items, sampled items)."""
    calls: list = []
    real = pmf_math.sample_unrated

    def spy(rng, rated, m, rho):
        out = real(rng, rated, m, rho)
        calls.append((tuple(int(i) for i in rated), tuple(int(i) for i in out)))
        return out

    monkeypatch.setattr(pmf_math, "sample_unrated", spy)
    monkeypatch.setattr(pp_mod, "sample_unrated", spy)
    return calls


def _per_client(calls):
    out: dict = {}
    for rated, sampled in calls:
        out.setdefault(rated, []).append(sampled)
    return out


def _run(module, data, cfg, seed):
    net = SimNetwork(seed=seed)
    job = module.build(net, data, cfg)
    return job.collect(net.run()), net


def _participants(net):
    model = net.ledger.select(kind="model")
    rounds = model.column("round")
    dst = model.column("dst")
    return {int(t): sorted(str(x) for x in dst[rounds == t]) for t in np.unique(rounds)}


@pytest.mark.parametrize("c", [0, 12])
def test_fedrec_and_fedrecpp_select_the_same_clients_and_sample_the_same_items(data, monkeypatch, c):
    kw = dict(d=4, T=6, lr=0.8, rho=2.0, T_predict=2, T_local=3, c=c, dtype="float64")
    calls = _record_samples(monkeypatch)
    res0, net0 = _run(fedrecpp, data, FedRecPPConfig(eta=0, **kw), seed=7)
    s0 = _per_client(calls)
    calls.clear()
    res1, net1 = _run(fedrecpp, data, FedRecPPConfig(eta=1, **kw), seed=7)
    s1 = _per_client(calls)
    # the same participants in every iteration
    p0, p1 = _participants(net0), _participants(net1)
    assert p0 == p1
    if c:
        assert all(len(v) == c for v in p0.values())
        assert len({tuple(v) for v in p0.values()}) > 1  # drawn afresh each iteration
    # the same items sampled by every ordinary client (the denoiser samples nothing)
    den = res1.info["denoisers"]
    assert len(den) == 1
    ptr, idx = res1.model.indptr, res1.model.indices
    u = int(den[0].split("/")[1])
    den_rated = tuple(int(i) for i in idx[ptr[u]:ptr[u + 1]])
    assert den_rated not in s1 and den_rated in s0
    del s0[den_rated]
    assert s0 == s1 and sum(len(v) for v in s1.values()) > 0
    # FedRec's own protocol (every client every iteration) samples what FedRec++ does at c = n
    if not c:
        calls.clear()
        fr, _ = _run(fedrec, data, FedRecConfig("PMF(B)", d=4, T=6, lr=0.8, rho=2.0, strategy="hf", T_predict=2,
                                                T_local=3, dtype="float64"), seed=7)
        sf = _per_client(calls)
        del sf[den_rated]
        assert sf == s1
        np.testing.assert_array_equal(fr.params["V"], res0.params["V"])  # eta = 0 is FedRec with HF


def test_same_seed_same_initial_parameters(data):
    fr, _ = _run(fedrec, data, FedRecConfig("PMF(B)", d=4, T=0, rho=1.0, strategy="hf"), seed=5)
    for eta in (0, 1):
        pp, _ = _run(fedrecpp, data, FedRecPPConfig(d=4, T=0, rho=1.0, eta=eta), seed=5)
        np.testing.assert_array_equal(pp.params["V"], fr.params["V"])
        np.testing.assert_array_equal(pp.params["U"], fr.params["U"])


def test_fedrecpp_is_lossless_under_partial_participation(data):
    """With the participants paired, FedRec++ at c < n equals FedRec (eta = 0) at rho = 0 with the
    same c: the denoised round is the pure rated-item round of the same participants."""
    kw = dict(d=4, T=8, lr=0.8, T_predict=2, T_local=3, c=10, dtype="float64")
    base, _ = _run(fedrecpp, data, FedRecPPConfig(eta=0, rho=0.0, **kw), seed=9)
    for eta in (1, 4):
        pp, _ = _run(fedrecpp, data, FedRecPPConfig(eta=eta, rho=2.0, **kw), seed=9)
        np.testing.assert_allclose(pp.params["V"], base.params["V"], rtol=0, atol=1e-9)
        np.testing.assert_allclose(pp.params["U"], base.params["U"], rtol=0, atol=1e-9)
    noisy, _ = _run(fedrecpp, data, FedRecPPConfig(eta=0, rho=2.0, **kw), seed=9)
    assert np.abs(noisy.params["V"] - base.params["V"]).max() > 1e-4
