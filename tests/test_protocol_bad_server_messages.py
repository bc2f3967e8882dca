"""A client given a malformed message from its server stops with a ``BadMessageError`` naming the
server, the message's kind and its round (as servers name the clients whose uploads they cannot
use). Before, such a message stopped a client with a bare ValueError / TypeError / IndexError /
AttributeError that named neither the server nor the message, or was taken silently. Each case
runs a protocol's tiny preset with the real server's messages of one kind rewritten in flight
(``conftest.ServerRewritingContext``)."""

from __future__ import annotations

import importlib

import numpy as np
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
_B = "V must be a float32 array of shape (40, 8), got "  # a message failing the clients' fast tests is checked whole
_FEDREC_FAULTS = {
    # V of one row: sample_unrated's bare ValueError ('rated item 33 is outside [0, 1)')
    "short V": (lambda p: {**p, "V": p["V"][:1]}, _B + "float32 of shape (1, 8)"),
    "1-D V": (lambda p: {**p, "V": p["V"][0]}, _B + "float32 of shape (8,)"),
    # batch: the rate's int(t); stochastic: hybrid filling's t > T_predict (a bare TypeError)
    "string t": (lambda p: {**p, "t": "x"}, "model must carry t = its round 0, got 'x'"),
    "no V": (lambda p: {k: v for k, v in p.items() if k != "V"}, "KeyError: 'V'"),
    # (a bare AttributeError: 'list' object has no attribute 'shape')
    "V a list": (lambda p: {**p, "V": p["V"].tolist()}, _B + "list"),
    # a V narrower than U: the compiled stochastic step read V's rows and wrote the gradient
    # rows past their ends (heap corruption: 'corrupted size vs. prev_size')
    "narrow V": (lambda p: {**p, "V": p["V"][:, :2].copy()}, _B + "float32 of shape (40, 2)"),
}
_FEDREC_CASES = [(m, f) for m in _FEDREC_MODELS for f in _FEDREC_FAULTS]


@pytest.mark.parametrize("model, fault", _FEDREC_CASES, ids=[f"{m}-{f}" for m, f in _FEDREC_CASES])
def test_fedrec_client_names_a_malformed_model_message(model, fault):
    rewrite, why = _FEDREC_FAULTS[fault]
    text = _run("fedrec", "model", rewrite, {"model": model})
    assert why in text, text


_O = "O must be a float32 array of shape (40, 8), got "


@pytest.mark.parametrize("fault, why", [
    # (an IndexError of the kernel: an item index out of bounds for the 1 rows of the item factors)
    (lambda p: {**p, "O": p["O"][:1]}, _O + "float32 of shape (1, 8)"),
    (lambda p: {**p, "O": p["O"][0]}, _O + "float32 of shape (8,)"),  # a numba TypingError
    # taken silently: the kernel read O's rows past their ends
    (lambda p: {**p, "O": p["O"][:, :2].copy()}, _O + "float32 of shape (40, 2)"),
    (lambda p: {k: v for k, v in p.items() if k != "O"}, _O + "NoneType"),
], ids=["short", "1-D", "narrow", "missing"])
def test_fedrec_svdpp_client_names_a_malformed_O(fault, why):
    text = _run("fedrec", "model", fault, {"model": "SVD++(S)"})
    assert why in text, text


def test_fedrec_client_names_a_malformed_evaluate_message():
    # (the evaluation's bare IndexError: index 33 is out of bounds for axis 0 with size 1)
    text = _run("fedrec", "evaluate", lambda p: {**p, "V": p["V"][:1]}, {"model": "PMF(S)", "eval_every": 1},
                test=True)
    assert "V must be a float32 array of shape (40, 8), got float32 of shape (1, 8)" in text, text


@pytest.mark.parametrize("fault, why", [
    # taken for a denoiser's role: it collected no model of its own, and the run ended in a deadlock report
    (lambda p: {**p, "role": "boss"}, "got {'role': 'boss'"),
    # an ordinary client without its denoiser's name: taken for one of FedRec (eta = 0), a deadlock
    (lambda p: {"role": p["role"]} if p["role"] == "ordinary" else p, "got {'role': 'ordinary'}"),
    (lambda p: {**p, "denoiser": 5} if p.get("denoiser") else p, "'denoiser': 5"),  # an UnknownNodeError of its send
    (lambda p: None, "got None"),  # a bare TypeError
], ids=["role", "no denoiser", "denoiser int", "None"])
def test_fedrecpp_client_refuses_an_assignment_of_no_real_role(fault, why):
    text = _run("fedrecpp", "assign", fault, round=-1)
    assert "assign must be {role: 'denoiser'} or {role: 'ordinary', denoiser: a node id or None}" in text, text
    assert why in text, text


@pytest.mark.parametrize("fault, got", [
    # a t of no round (negative, huge, the next one) had the denoiser wait for a model that never
    # came; more noise than there are other clients, for noise that never came: a deadlock report
    (lambda p: {**p, "t": -1}, "got t = -1, expected = 3"),
    (lambda p: {**p, "t": 10 ** 9}, "got t = 1000000000, expected = 3"),
    (lambda p: {**p, "t": p["t"] + 1}, "got t = 1, expected = 3"),
    (lambda p: {**p, "expected": 10 ** 9}, "got t = 0, expected = 1000000000"),
], ids=["t negative", "t huge", "t next", "expected huge"])
def test_fedrecpp_denoiser_refuses_a_collect_of_another_round_or_beyond_the_clients(fault, got):
    text = _run("fedrecpp", "collect", fault)
    assert f"collect must name its own round (t = 0) and expect at most 3 noise messages, {got}" in text, text


@pytest.mark.parametrize("change", [{}, {"eta": 0}], ids=["denoising", "eta 0"])
@pytest.mark.parametrize("fault, why", [
    (lambda p: {**p, "V": p["V"][:1]}, "V must be a float32 array of shape (40, 8), got float32 of shape (1, 8)"),
    (lambda p: {**p, "V": p["V"][0]}, "V must be a float32 array of shape (40, 8), got float32 of shape (8,)"),
    (lambda p: {**p, "V": p["V"][:, :2].copy()}, "V must be a float32 array of shape (40, 8), got float32 of shape (40, 2)"),
    (lambda p: {**p, "V": p["V"].tolist()}, "V must be a float32 array of shape (40, 8), got list"),
    (lambda p: {**p, "t": "x"}, "model must carry t = its round 0, got 'x'"),
], ids=["short V", "1-D V", "narrow V", "V a list", "string t"])
def test_fedrecpp_client_names_a_malformed_model_message(change, fault, why):
    text = _run("fedrecpp", "model", fault, change)
    assert why in text, text


def test_fedrecpp_secure_noise_client_names_a_malformed_participant_list():
    # a bare TypeError ('NoneType' object is not iterable) of the masking client
    text = _run("fedrecpp", "model", lambda p: {**p, "part": None}, {"secure_noise": True, "secagg_neighbours": 2})
    assert "part must be the round's participants, client indices in [0, 4) naming this client (" in text \
        and text.endswith("), got NoneType"), text


_AE = [("personalfr", "decoder", "dec", {}), ("personalfr", "decoder", "dec", {"compression": False}),
       ("fedavg-ae", "model", "model", {})]


@pytest.mark.parametrize("protocol, kind, field, change", _AE, ids=["personalfr", "personalfr-uncompressed", "fedavg-ae"])
@pytest.mark.parametrize("fault, why", [
    (lambda p, f: {**p, "t": "x"}, "t must be the round the message is labelled with (1), got 'x'"),  # a bare ValueError
    (lambda p, f: {**p, "t": 1.5}, "t must be the round the message is labelled with (1), got 1.5"),  # taken as 1
    (lambda p, f: None, "t must be the round the message is labelled with (1), got None"),  # a bare TypeError
    (lambda p, f: {**p, f: [1, 2]}, ("must hold arrays of shapes {", "}, got list")),  # a bare AttributeError
    (lambda p, f: {**p, f: {k: v[:1] for k, v in p[f].items()}},  # a bare IndexError
     ("must hold arrays of shapes {", "}, got {", "W1': (1, ")),
    # trained in float64, and the server blamed the client for its update's dtype
    (lambda p, f: {**p, f: {k: v.astype(np.float64) for k, v in p[f].items()}},
     "must hold float32 arrays (the run's dtype), got {"),
], ids=["t string", "t float", "None", "params a list", "params short", "params float64"])
def test_autoencoder_client_names_a_malformed_model_message(protocol, kind, field, change, fault, why):
    text = _run(protocol, kind, lambda p: fault(p, field), {"fraction": 1.0, **change}, round=1)
    assert all(w in text for w in ((why,) if isinstance(why, str) else why)), text


@pytest.mark.parametrize("protocol, field", [("personalfr", "dec"), ("fedavg-ae", "model")])
def test_autoencoder_client_names_a_malformed_evaluate_message(protocol, field):
    # the evaluation's bare AttributeError ('list' object has no attribute 'items')
    text = _run(protocol, "evaluate", lambda p: {**p, field: [1]}, {"fraction": 1.0}, round=2, test=True)
    assert f"{field} must hold arrays of shapes {{" in text and text.endswith("got list"), text


def test_personalfr_client_refuses_a_decoder_slice_that_is_not_of_its_items():
    """A client whose ``indices`` are emptied in flight: the server (which cannot refuse an empty
    list: a client whose users rated nothing sends one, and trains) sends it a decoder slice of no
    rows, and the client stopped with a bare IndexError of its training naming nothing."""
    from fedsim.protocols import personalfr

    from conftest import rewrite_sends

    spec = REGISTRY["personalfr"]
    data, cfg = spec.tiny(4, 2, 0)
    net = SimNetwork(seed=1)
    spec.build(net, data, cfg.replace(fraction=1.0))
    bad = sorted(n for n in net.nodes if n.startswith("client"))[1]
    rewrite_sends(net, [bad], personalfr.client,
                  lambda k, p: {"items": np.empty(0, np.int32)} if k == "indices" else p)
    err, cause = run_to_bad_server_message(net, "decoder", 1)
    assert err.node == bad
    assert "'dec.W2': (0, 8)" in str(cause) and "dec must hold arrays of shapes {'dec.W1': (8, 4)" in str(cause)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fault, got", [
    (lambda p: {**p, "theta": p["theta"][:1]}, "of shape (1, 5)"),  # a bare IndexError
    (lambda p: {**p, "theta": p["theta"][0]}, "of shape (5,)"),  # a bare IndexError
    # float32: the compiled round read past each row's end, taken silently
    (lambda p: {**p, "theta": p["theta"][:, :2].copy()}, "of shape (40, 2)"),
    (lambda p: {**p, "theta": p["theta"].tolist()}, "got list"),  # a bare AttributeError / TypeError
    (lambda p: {**p, "theta": p["theta"].astype(np.float16)}, "got float16 of shape (40, 5)"),  # taken silently
    (lambda p: None, "got NoneType"),  # a bare TypeError
], ids=["short", "1-D", "narrow", "list", "float16", "None"])
def test_fpl_client_names_a_malformed_model_message(dtype, fault, got):
    text = _run("fpl", "model", fault, {"dtype": dtype})
    assert f"theta must be a {dtype} array of 5 columns and at least 39 rows, " in text and got in text, text


def test_fpl_secure_aggregation_client_names_a_malformed_member_list():
    # a bare TypeError of the masking (int() of None)
    text = _run("fpl", "model", lambda p: {**p, "members": None}, {"secure_aggregation": True, "secagg_neighbours": 2})
    assert "members must be the round's participants, client indices in [0, 4) naming this client (" in text \
        and text.endswith("), got NoneType"), text


@pytest.mark.parametrize("fault, got", [
    (lambda p: {"Q": p["Q"][:1]}, "got float32 of shape (1, 4)"),  # a bare ValueError
    (lambda p: {"Q": p["Q"][0]}, "got float32 of shape (4,)"),  # a bare ValueError (unpacking)
    # solved for, and the server blamed the client for its gradient's shape
    (lambda p: {"Q": p["Q"][:, :2].copy()}, "got float32 of shape (40, 2)"),
    (lambda p: {"Q": p["Q"].tolist()}, "got list"),  # a bare AttributeError
    (lambda p: None, "got NoneType"),  # a bare TypeError
], ids=["short", "1-D", "narrow", "list", "None"])
def test_fcf_client_names_a_malformed_model_message(fault, got):
    text = _run("fcf", "model", fault)
    assert "Q must be a float32 array of 4 columns and a row for each of the client's items, " + got in text, text


@pytest.mark.parametrize("fault, got", [
    (lambda p: {"w": p["w"][:1]}, "got float64 of shape (1,)"),  # a bare ValueError of the matmul
    (lambda p: {"w": p["w"].tolist()}, "got list"),  # taken
    (lambda p: {"w": "x"}, "got str"),  # a bare UFuncTypeError
    (lambda p: None, "got NoneType"),  # a bare TypeError
], ids=["short", "list", "str", "None"])
def test_demo_client_names_a_malformed_weights_message(fault, got):
    text = _run("demo", "weights", fault, {"dim": 4})
    assert "w must be a float64 vector of 4 entries, " + got in text, text


_SECURE = [("fedrec", {"secure_aggregation": True, "secagg_neighbours": 2}),
           ("fpl", {"secure_aggregation": True, "secagg_neighbours": 2}),
           ("fedrecpp", {"secure_noise": True, "secagg_neighbours": 2})]


@pytest.mark.parametrize("protocol, change", _SECURE, ids=[p for p, _ in _SECURE])
@pytest.mark.parametrize("fault, got", [
    (lambda p: {"pubs": p["pubs"][:1]}, "got uint64 of shape (1,)"),  # a bare IndexError
    (lambda p: {"pubs": "x"}, "got str"),  # a bare ValueError
    (lambda p: None, "got NoneType"),  # a bare TypeError
    # keys outside the group (-1 as uint64), or not the client's own: taken, masks that do not cancel
    (lambda p: {"pubs": np.full(p["pubs"].shape, np.iinfo(np.uint64).max, np.uint64)}, "got uint64 of shape (4,)"),
    (lambda p: {"pubs": p["pubs"][::-1].copy()}, "got uint64 of shape (4,)"),
    # a key past the last client: a phantom ring neighbour, masks that did not cancel (FedRec's
    # V came out a sum of noise, silently)
    (lambda p: {"pubs": np.append(p["pubs"], p["pubs"][:1])}, "got uint64 of shape (5,)"),
], ids=["short", "str", "None", "outside the group", "not its own", "long"])
def test_secure_clients_refuse_a_malformed_list_of_public_keys(protocol, change, fault, got):
    text = _run(protocol, "peers", fault, change, round=-1)
    assert "pubs must be a uint64 vector of 4 entries (one per client) with entry " in text, text
    assert f"every entry 0 or in [1, {(1 << 61) - 1}), {got}" in text, text
