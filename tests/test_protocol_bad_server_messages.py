"""A client given a malformed message from its server stops with a ``BadMessageError`` naming the
server, the message's kind and its round (as servers name the clients whose uploads they cannot
use). Before, such a message stopped a client with a bare ValueError / TypeError / IndexError /
AttributeError that named neither the server nor the message, or was taken silently. Each case
runs a protocol's tiny preset with the real server's messages of one kind rewritten in flight
(``conftest.ServerRewritingContext``)."""

from __future__ import annotations

import importlib

import pytest

from fedsim.kernel import SimNetwork
from fedsim.protocols import REGISTRY

from conftest import rewrite_server, run_to_bad_server_message


def _run(protocol: str, kind: str, rewrite, change: dict | None = None, clients: int = 4, round: int = 0,
         test: bool = False):
    """``protocol``'s tiny preset (``clients`` clients, 2 rounds, with ``change``; ``test``: its
    training data as test ratings too) with the server's ``kind`` messages rewritten; returns the
    text of the BadMessageError a client stopped with, naming that kind and ``round``."""
    spec = REGISTRY[protocol]
    data, cfg = spec.tiny(clients, 2, 0)
    if change:
        cfg = cfg.replace(**change)
    net = SimNetwork(seed=1)
    spec.build(net, data, cfg, **({"test": data} if test else {}))
    mod = importlib.import_module("fedsim.protocols." + protocol.replace("-", "_"))
    rewrite_server(net, mod.server, kind, rewrite)
    _, cause = run_to_bad_server_message(net, kind, round)
    return str(cause)


_FEDREC_MODELS = ["PMF(B)", "PMF(S)", "SVD++(S)"]
_FEDREC_FAULTS = {
    # V of one row: sample_unrated's bare ValueError ('rated item 33 is outside [0, 1)')
    "short V": (lambda p: {**p, "V": p["V"][:1]}, "is outside [0, 1)"),
    "1-D V": (lambda p: {**p, "V": p["V"][0]}, "ValueError: "),
    # batch: the rate's int(t); stochastic: hybrid filling's t > T_predict
    "string t": (lambda p: {**p, "t": "x"}, {"PMF(B)": "ValueError: invalid literal for int() with base 10: 'x'",
                                            "PMF(S)": "TypeError: '>' not supported between instances of 'str' and 'int'",
                                            "SVD++(S)": "TypeError: '>' not supported between instances of 'str' and 'int'"}),
    "no V": (lambda p: {k: v for k, v in p.items() if k != "V"}, "KeyError: 'V'"),
    "V a list": (lambda p: {**p, "V": p["V"].tolist()}, "AttributeError: 'list' object has no attribute 'shape'"),
    # a V narrower than U: the compiled stochastic step read V's rows and wrote the gradient
    # rows past their ends (heap corruption: 'corrupted size vs. prev_size')
    "narrow V": (lambda p: {**p, "V": p["V"][:, :2].copy()}, "ValueError: "),
}
_FEDREC_CASES = [(m, f) for m in _FEDREC_MODELS for f in _FEDREC_FAULTS]


@pytest.mark.parametrize("model, fault", _FEDREC_CASES, ids=[f"{m}-{f}" for m, f in _FEDREC_CASES])
def test_fedrec_client_names_a_malformed_model_message(model, fault):
    rewrite, why = _FEDREC_FAULTS[fault]
    text = _run("fedrec", "model", rewrite, {"model": model})
    assert (why[model] if isinstance(why, dict) else why) in text, text


@pytest.mark.parametrize("fault, why", [
    (lambda p: {**p, "O": p["O"][:1]}, "IndexError: an item index is out of bounds for the 1 rows of the item factors"),
    (lambda p: {**p, "O": p["O"][0]}, "ValueError: not enough values to unpack (expected 2, got 1)"),  # a numba TypingError
    # taken silently: the kernel read O's rows past their ends
    (lambda p: {**p, "O": p["O"][:, :2].copy()}, "item factors of shape (40, 8) (O (40, 2)) for a user factor of 8"),
    (lambda p: {k: v for k, v in p.items() if k != "O"}, "ValueError: SVD++ needs the implicit factors O"),
], ids=["short", "1-D", "narrow", "missing"])
def test_fedrec_svdpp_client_names_a_malformed_O(fault, why):
    text = _run("fedrec", "model", fault, {"model": "SVD++(S)"})
    assert why in text, text


def test_fedrec_client_names_a_malformed_evaluate_message():
    # (the evaluation's bare IndexError: index 33 is out of bounds for axis 0 with size 1)
    text = _run("fedrec", "evaluate", lambda p: {**p, "V": p["V"][:1]}, {"model": "PMF(S)", "eval_every": 1},
                test=True)
    assert "IndexError: index " in text and "out of bounds for axis 0 with size 1" in text, text
