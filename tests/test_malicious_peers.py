"""A peer that sends a well-formed message whose content is wrong for the protocol: the run stops
with a ``BadMessageError`` naming the message (kind, sender, round) and what is wrong with it, on
the actor that received it, not with a bare exception, a silent change of the model or an error
blamed on another actor. Each case runs a protocol's tiny preset with one actor's messages of one
kind rewritten in flight (``conftest.rewrite_sends`` for clients, ``rewrite_server`` for servers).

The message kinds and faults covered here are those a sweep over every protocol, kind and
field (missing, wrong type, dtype, shape, ids out of range or repeated, NaN, wrong round label)
found handled badly; the others already had their tests (test_protocol_bad_messages.py,
test_protocol_bad_server_messages.py)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from fedsim.kernel import SimNetwork
from fedsim.protocols import REGISTRY

from conftest import rewrite_sends, rewrite_server, run_to_bad_message, run_to_bad_server_message


def _net(protocol: str, change: dict | None = None, test: bool = False):
    spec = REGISTRY[protocol]
    data, cfg = spec.tiny(4, 2, 0)
    if change:
        cfg = cfg.replace(**change)
    net = SimNetwork(seed=1)
    spec.build(net, data, cfg, **({"test": data} if test else {}))
    return net, importlib.import_module("fedsim.protocols." + protocol.replace("-", "_"))


def _server_sends(protocol: str, kind: str, rewrite, change: dict | None = None, round: int = 0,
                  test: bool = False) -> str:
    """The text of the BadMessageError a client stopped with, given the server's ``kind``
    messages rewritten by ``rewrite(payload)``."""
    net, mod = _net(protocol, change, test)
    rewrite_server(net, mod.server, kind, rewrite)
    _, cause = run_to_bad_server_message(net, kind, round)
    return str(cause)


# --- FedRec++: the denoiser's sums, checked by the server ------------------------------------

@pytest.mark.parametrize("fault, why", [
    # a bare AttributeError of the server ('list' object has no attribute 'shape'), naming nobody
    (lambda p: {**p, "items": p["items"].tolist()}, "denoised sums: item ids must be a 1-D integer array, got list"),
    # subtracted from the gradient sums as numbers, silently
    (lambda p: {**p, "sums": p["sums"].tolist()}, "denoised sums: rows must be a float array, got list"),
    (lambda p: {**p, "sums": p["sums"].astype(np.int32)}, "denoised sums: rows must be a float array, got int32"),
    (lambda p: {**p, "sums": p["sums"] != 0}, "denoised sums: rows must be a float array, got bool"),
], ids=["items list", "sums list", "sums int32", "sums bool"])
def test_fedrecpp_server_refuses_denoised_sums_that_are_not_arrays_of_their_kind(fault, why):
    net, mod = _net("fedrecpp")
    rewrite_sends(net, [n for n in net.nodes if n.startswith("client")], mod.client,
                  lambda k, p: fault(p) if k == "denoised" else p)
    err, cause = run_to_bad_message(net)
    assert err.node == "server" and cause.kind == "denoised" and cause.round == 0
    assert cause.sender.startswith("client/") and str(cause).startswith(f"'denoised' from {cause.sender} (round 0): ")
    assert why in str(cause), str(cause)


# --- FedRec: the server's model, checked by the client ---------------------------------------

def _fedrec_v(fault: str):
    def rewrite(p):
        V = p["V"]
        return {**p, "V": {"width 1": lambda: V[:, :1].copy()}[fault]()}
    return rewrite


@pytest.mark.parametrize("change", [{"model": "PMF(B)"}, {"model": "PMF(B)", "rho": 0.0},
                                    {"model": "PMF(B)", "secure_aggregation": True, "secagg_neighbours": 2}],
                         ids=["hf", "rated only", "secure"])
def test_fedrec_batch_client_refuses_a_model_one_column_wide(change):
    # V of one column was broadcast against the user factor: the client sent gradients of the
    # right shape computed from nothing the server sent, and the run ended as if all was well
    text = _server_sends("fedrec", "model", _fedrec_v("width 1"), change)
    assert "ValueError: item rows of shape (" in text and ", 1) for a user factor of shape (8,): they must be 8 wide" \
        in text, text
