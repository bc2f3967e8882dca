"""Edge values of the protocols' configuration fields on tiny data: each run completes with the
result that setting calls for, or the Config refuses the value up front."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedsim.kernel import SimNetwork
from fedsim.math.filling import n_sampled, users_sampling_all
from fedsim.protocols import REGISTRY


def run(name: str, clients: int = 3, rounds: int = 2, seed: int = 11, test=None, **over):
    spec = REGISTRY[name]
    data, cfg = spec.tiny(clients, rounds, seed)
    cfg = dataclasses.replace(cfg, **over)
    net = SimNetwork(seed=seed, profile="lan")
    job = spec.build(net, data, cfg) if test is None else spec.build(net, data, cfg, test=test)
    return data, job.collect(net.run())


def test_users_sampling_all_matches_n_sampled():
    indptr = np.array([0, 0, 1, 3, 7, 10])  # |I_u| = 0, 1, 2, 4, 3 of m = 10 items
    m = 10
    for rho in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 1e6):
        got = users_sampling_all(indptr, m, rho)
        want = [u for u in range(5) if int(rho * (indptr[u + 1] - indptr[u])) > m - (indptr[u + 1] - indptr[u])]
        assert got == want, rho
    assert users_sampling_all(indptr, m, 0.0) == []
    assert users_sampling_all(indptr, m, 1.5) == []  # int(1.5 * 4) = 6 = 10 - 4: fits exactly
    assert users_sampling_all(indptr, m, 2.0) == [3]  # int(2 * 4) = 8 > 10 - 4
    assert users_sampling_all(indptr, m, 1e6) == [1, 2, 3, 4]  # the user with no ratings samples nothing
    assert n_sampled(4, m, 1.5) == 6 and n_sampled(4, m, 1.4) == 5


def test_rho_beyond_the_unrated_items_samples_all_and_says_so():
    for name in ("fedrec", "fedrecpp"):
        data, res = run(name, rho=1e6)
        n = np.bincount(np.asarray(data.users), minlength=data.n_users)
        assert res.info["sampling_all"] == [u for u in range(data.n_users) if n[u] > 0], name
        _, fits = run(name, rho=1.0)
        assert fits.info["sampling_all"] == users_sampling_all(np.concatenate([[0], np.cumsum(n)]),
                                                               data.n_items, 1.0)
        _, none = run(name, rho=0.0)
        assert none.info["sampling_all"] == []


def test_fedrec_eval_every_beyond_T_is_refused_up_front():
    """Evaluations fall after iterations eval_every, 2 eval_every, ... <= T: with eval_every > T
    (T = 0 included) a run asked for evaluations returned none, silently."""
    from fedsim.config import ConfigError
    from fedsim.protocols.fedrec import FedRecConfig

    for T, every in ((2, 3), (2, 50), (0, 1)):
        with pytest.raises(ConfigError, match=rf"eval_every = {every} is more than T = {T}.*0 for never, or 1 to T") \
                as err:
            FedRecConfig(T=T, eval_every=every)
        assert err.value.key == "eval_every"
    # at most T: the last evaluation is of the returned model
    data, res = run("fedrec", rounds=2, eval_every=2, test=REGISTRY["fedrec"].tiny(3, 2, 11)[0])
    assert [m["round"] for m in res.metrics] == [2]
    assert FedRecConfig(T=0, eval_every=0).eval_every == 0
