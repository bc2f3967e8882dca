"""Counts of 1 in rarely reached messages were written as plurals: a deadlock's "1 of 1 senders",
a protocol's "there are only 1 clients", "n = 1 clients", "the 1 users of the data", the data
layer's "cannot cut 1 ratings", "all 1 ratings are -1", "index out of range for 1 ratings"."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedsim.config import ConfigError
from fedsim.data import Ratings, kfold_copies, load_anime
from fedsim.data.loaders import DataFormatError
from fedsim.kernel import SimNetwork
from fedsim.kernel.envelope import Collector, InOrder
from fedsim.protocols import REGISTRY
from fedsim.protocols.fedae import check_clients
from fedsim.protocols.fedrecpp import check_eta


def test_the_kernel_says_what_is_missing_in_the_number_it_takes():
    assert Collector(1, {"c0"}, 0).describe() == "1 of 1 sender: c0"
    assert Collector(2, {"c0", "c1"}, 0).describe() == "2 of 2 senders: c0, c1"
    assert Collector(1, None, 0).describe() == "1 more of 1 message (any sender)"
    assert Collector(3, None, 0).describe() == "3 more of 3 messages (any sender)"
    assert InOrder(["c0"], 0).describe() == "1 of 1 sender: c0"


def run_one_client(name: str, **over):
    spec = REGISTRY[name]
    data, cfg = spec.tiny(1, 1, 11)
    net = SimNetwork(seed=11, profile="lan")
    return spec.build(net, data, dataclasses.replace(cfg, **over)).collect(net.run())


def test_a_protocol_with_one_client_says_so_in_the_singular():
    # (FPL's "only 1 clients" is written the same way, but one user is refused before: with no other
    # user its training catalogue is its own items, so it has no negative to draw)
    with pytest.warns(UserWarning, match="eta = 1 > n/2"):
        res = run_one_client("fedrecpp", c=9)
    assert res.info["adjusted"] == [{"setting": "c", "asked": 9, "used": 1,
                                     "why": "there is only 1 client, taking part in every iteration"}]
    with pytest.raises(ConfigError) as err:
        check_eta(2, 1, False)
    assert str(err.value) == "eta = 2 denoisers is impossible with n = 1 client"
    with pytest.raises(ConfigError) as err:
        check_clients(3, 1)
    assert str(err.value) == ("clients = 3 is more than the 1 user of the data: each client holds at least one "
                              "user (give clients <= 1, or 0 for one user per client)")


def test_the_data_layer_counts_one_rating_in_the_singular(tmp_path):
    one = Ratings([0], [0], [4.0])
    with pytest.raises(ValueError) as err:
        kfold_copies(one, k=2)
    assert str(err.value) == "cannot cut 1 rating into 2 parts"
    with pytest.raises(ValueError) as err:
        one.subset(np.array([3]))
    assert str(err.value) == "subset: index out of range for 1 rating"
    f = tmp_path / "rating.csv"
    f.write_text("user_id,anime_id,rating\n1,1,-1\n")
    with pytest.raises(DataFormatError) as err:
        load_anime(f)
    assert str(err.value) == (f"{f}: the 1 rating is -1 (unrated): nothing is left with unrated='drop'; use "
                              "unrated='implicit'")
