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
    job = spec.build(net, data, cfg, **({"test": data} if test else {}))
    return net, importlib.import_module("fedsim.protocols." + protocol.replace("-", "_")), job


def _server_sends(protocol: str, kind: str, rewrite, change: dict | None = None, round: int = 0,
                  test: bool = False) -> str:
    """The text of the BadMessageError a client stopped with, given the server's ``kind``
    messages rewritten by ``rewrite(payload)``."""
    net, mod, _ = _net(protocol, change, test)
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
    net, mod, _ = _net("fedrecpp")
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
    assert "V must be a float32 array of shape (40, 8), got float32 of shape (40, 1)" in text, text


@pytest.mark.parametrize("jit", [True, False], ids=["compiled if available", "numpy"])
def test_pmf_batch_client_refuses_item_rows_narrower_than_the_user_factor(jit, monkeypatch):
    # rows one column wide were broadcast against U_u: gradients of U_u's width from nothing
    from fedsim.math import _sgd_numba
    from fedsim.math.pmf import pmf_batch_client

    if not jit:
        monkeypatch.setattr(_sgd_numba, "compiled", lambda: None)
    U = np.ones(4, np.float32)
    for rows in (np.ones((3, 1), np.float32), np.ones((3, 2), np.float32), np.ones(3, np.float32)):
        with pytest.raises(ValueError, match=r"item rows of shape \(3(, [12])?,?\) for a user factor of shape "
                                             r"\(4,\): they must be 4 wide"):
            pmf_batch_client(U, rows, np.ones(3, np.float32), 0.1, 0.0)


_STOCHASTIC = "V must be a float32 array (the run's dtype), got "
_WHOLE = "V must be a float32 array of shape (40, 8), got "


@pytest.mark.parametrize("model", ["PMF(B)", "PMF(S)", "SVD++(S)"])
@pytest.mark.parametrize("dtype", ["float16", "float64", "int32"])
def test_fedrec_client_refuses_a_model_of_another_dtype(model, dtype):
    # float16: a bare NotImplementedError of the compiled step, naming no peer; float64 in a
    # float32 run: trained on silently; int32 (SVD++): integer gradients, and the server blamed
    # the client for them
    text = _server_sends("fedrec", "model", lambda p: {**p, "V": p["V"].astype(dtype)}, {"model": model})
    want = (_WHOLE + f"{dtype} of shape (40, 8)") if model == "PMF(B)" else _STOCHASTIC + dtype
    assert want in text, text


@pytest.mark.parametrize("fault, why", [
    # the client did not answer the evaluation the server then waited for: a deadlock report
    (lambda p: {k: v for k, v in p.items() if k != "eval"}, "model must carry eval = true or false, got None"),
    (lambda p: {**p, "eval": None}, "model must carry eval = true or false, got None"),
    (lambda p: {**p, "eval": "no"}, "model must carry eval = true or false, got 'no'"),  # taken for true
    # another round's label: its learning rate (and hybrid filling) taken silently
    (lambda p: {**p, "t": p["t"] + 1}, "model must carry t = its round 0, got 1"),
    (lambda p: {**p, "t": -5}, "model must carry t = its round 0, got -5"),
    (lambda p: {**p, "t": 0.5}, "model must carry t = its round 0, got 0.5"),
    # a row past the items: the client sampled it and the server blamed the client for the id
    (lambda p: {**p, "V": np.concatenate([p["V"], p["V"][:1]])}, _WHOLE + "float32 of shape (41, 8)"),
], ids=["no eval", "eval None", "eval str", "t next", "t negative", "t float", "V long"])
@pytest.mark.parametrize("change", [{}, {"secure_aggregation": True, "secagg_neighbours": 2}], ids=["plain", "secure"])
def test_fedrec_batch_client_checks_the_whole_model_message(fault, why, change):
    text = _server_sends("fedrec", "model", fault, {"model": "PMF(B)", "eval_every": 1, **change}, test=True)
    assert why in text, text


_STOCHASTIC_FAULTS = {  # all taken silently by the stochastic client before
    # another round's label: hybrid filling switched on by it (the client's rate counts its calls)
    "t next": ("model", lambda p: {**p, "t": p["t"] + 1}, "model must carry t = its round 0, got 1"),
    "t negative": ("model", lambda p: {**p, "t": -5}, "model must carry t = its round 0, got -5"),
    "t float": ("model", lambda p: {**p, "t": 0.5}, "model must carry t = its round 0, got 0.5"),
    "t bool": ("model", lambda p: {**p, "t": False}, "model must carry t = its round 0, got False"),  # == 0
    # a row past the items: sampled (rho > 0), and the server blamed the client for its id
    "V long": ("V", lambda a: np.concatenate([a, a[:1]]), _WHOLE + "float32 of shape (41, 8)"),
    # (SVD++) rows past the items: never read, the message taken as it was
    "O long": ("O", lambda a: np.concatenate([a, a[:1]]), "O must be a float32 array of shape (40, 8), got "
               "float32 of shape (41, 8)"),
}
_STOCHASTIC_CASES = [(m, rho, f) for m in ("PMF(S)", "SVD++(S)") for rho in (1.0, 0.0) for f in _STOCHASTIC_FAULTS
                     if m == "SVD++(S)" or not f.startswith("O")]  # (only SVD++ sends O)


@pytest.mark.parametrize("model, rho, fault", _STOCHASTIC_CASES,
                         ids=[f"{m}-rho {r:g}-{f}" for m, r, f in _STOCHASTIC_CASES])
def test_fedrec_stochastic_client_checks_the_model_message(model, rho, fault):
    field, fault, why = _STOCHASTIC_FAULTS[fault]
    rewrite = fault if field == "model" else (lambda p: {**p, field: fault(p[field])})
    text = _server_sends("fedrec", "model", rewrite, {"model": model, "rho": rho})
    assert why in text, text


_EVAL_FAULTS = {  # all taken silently: the metrics of a model the server does not hold
    "V long": ("V", lambda a: np.concatenate([a, a[:1]]), "float32 of shape (41, 8)"),
    "V int32": ("V", lambda a: a.astype(np.int32), "int32 of shape (40, 8)"),
    "V bool": ("V", lambda a: a != 0, "bool of shape (40, 8)"),
    "V float16": ("V", lambda a: a.astype(np.float16), "float16 of shape (40, 8)"),
    "O int32": ("O", lambda a: a.astype(np.int32), "int32 of shape (40, 8)"),
    "O narrow": ("O", lambda a: a[:, :1].copy(), "float32 of shape (40, 1)"),
}
_EVAL_CASES = [(m, r, f) for m, r in [("PMF(B)", 2), ("PMF(S)", 0), ("SVD++(S)", 0)] for f in _EVAL_FAULTS
               if m == "SVD++(S)" or not f.startswith("O")]  # (only SVD++ sends O)


@pytest.mark.parametrize("model, round, fault", _EVAL_CASES, ids=[f"{m}-{f}" for m, _, f in _EVAL_CASES])
def test_fedrec_client_checks_an_evaluate_message(model, round, fault):
    field, fault, got = _EVAL_FAULTS[fault]
    change = {"model": model, "eval_every": 1, "T": 2, "lr": 0.001, "client_lr": 0.001} if model != "PMF(B)" \
        else {"model": model, "eval_every": 1}
    text = _server_sends("fedrec", "evaluate", lambda p: {**p, field: fault(p[field])}, change, round=round, test=True)
    assert f"{field} must be a float32 array of shape (40, 8), got {got}" in text, text


# --- FedRec++ with secure noise: the round's participants, checked by the client -------------

@pytest.mark.parametrize("fault, got", [
    # without the client itself: a bare ValueError of the masking ('1 is not among the members')
    (lambda a: a[a != a[-1]], None),
    (lambda a: a[:0], "got int32 []"),
    # -1 counted from the end of the key list: a mask with another client's key, silently
    (lambda a: np.append(a, -1).astype(np.int32), None),
    (lambda a: np.append(a, 10 ** 6).astype(np.int32), None),
    (lambda a: a.astype(np.float32), "got float32"),  # ids as floats
    (lambda a: "x", "got str"),  # a bare ValueError
], ids=["without it", "empty", "negative", "past the end", "floats", "str"])
def test_fedrecpp_secure_noise_client_checks_the_participants(fault, got):
    text = _server_sends("fedrecpp", "model", lambda p: {**p, "part": fault(p["part"])},
                         {"secure_noise": True, "secagg_neighbours": 2})
    assert "part must be the round's participants, client indices in [0, 4) naming this client (" in text, text
    if got is not None:
        assert got in text, text


@pytest.mark.parametrize("fault, got", [
    (lambda a: a[a != a[-1]], None),  # a bare ValueError of the masking ('3 is not among the members')
    (lambda a: np.append(a, -1).astype(np.int32), None),  # masked with the last client's key, silently
    (lambda a: a.astype(np.float32), "got float32"),
    (lambda a: a.tolist(), "got list"),
], ids=["without it", "negative", "floats", "list"])
def test_fpl_secure_client_checks_the_members(fault, got):
    text = _server_sends("fpl", "model", lambda p: {**p, "members": fault(p["members"])},
                         {"secure_aggregation": True, "secagg_neighbours": 2})
    assert "members must be the round's participants, client indices in [0, 4) naming this client (" in text, text
    if got is not None:
        assert got in text, text


@pytest.mark.parametrize("denoiser", ["x", "client/9999", "client/04", "server", "client/000\u00b2",
                                      "client/" + "9" * 5000])
def test_fedrecpp_client_refuses_a_denoiser_that_is_no_other_client(denoiser):
    # a bare UnknownNodeError of the client's first noise message ('message addressed to unknown
    # node'), naming neither the server nor its assign message; 'server' was sent the noise
    text = _server_sends("fedrecpp", "assign", lambda p: {**p, "denoiser": denoiser} if p.get("denoiser") else p,
                         round=-1)
    assert f"assign must name as denoiser another client's node id (of 4 clients), got {denoiser!r}" in text, text


def test_fedrecpp_client_refuses_itself_as_its_denoiser():
    # each ordinary client told that it is its own denoiser (it sent its noise to itself)
    net, mod, _ = _net("fedrecpp")

    async def server(ctx, *args, **kwargs):
        from conftest import ServerRewritingContext

        class Self(ServerRewritingContext):
            async def send(self, dst, kind, payload, **kw):
                if kind == "assign" and isinstance(payload, dict) and payload.get("denoiser"):
                    payload = {**payload, "denoiser": dst}
                return await self._ctx.send(dst, kind, payload, **kw)
        return await mod.server(Self(ctx, "assign", lambda p: p), *args, **kwargs)
    net.nodes["server"].actor = server
    _, cause = run_to_bad_server_message(net, "assign", -1)
    assert "assign must name as denoiser another client's node id (of 4 clients), got 'client/000" in str(cause)


# --- what the protocols tolerate: a client's non-finite upload is the run's divergence --------

_NAN_UPLOADS = [("demo", {}, "gradient", "g"), ("fcf", {}, "gradients", "grad"),
                ("fedrec", {"model": "PMF(B)"}, "gradients", "grads"), ("fedrecpp", {}, "gradients", "grads"),
                ("fpl", {}, "update", "rows"), ("personalfr", {"fraction": 1.0}, "update", "dec"),
                ("fedavg-ae", {"fraction": 1.0}, "update", "model")]


@pytest.mark.parametrize("protocol, change, kind, field", _NAN_UPLOADS, ids=[p for p, *_ in _NAN_UPLOADS])
def test_a_non_finite_upload_is_reported_as_divergence_not_success(protocol, change, kind, field):
    # not an error (a diverging learning rate gives the same values), but never a silent success:
    # the result says from which round the model stopped being finite
    net, mod, job = _net(protocol, change)
    bad = sorted(n for n in net.nodes if n.startswith("client"))[1]

    def poison(a):
        a = np.array(a)
        a.reshape(-1)[:] = np.nan
        return a

    def rewrite(k, p):
        if k != kind:
            return p
        p = dict(p.payload) if hasattr(p, "payload") else dict(p)  # (a draft: its arrays)
        p[field] = {n: poison(v) for n, v in p[field].items()} if isinstance(p[field], dict) else poison(p[field])
        return p
    rewrite_sends(net, [n for n in net.nodes if n.startswith("client")] if protocol == "fedrecpp" else [bad],
                  mod.client, rewrite)
    result = job.collect(net.run())
    assert result.info["diverged_at"] in (1, 2), result.info
    assert not all(np.isfinite(v).all() for v in result.params.values() if isinstance(v, np.ndarray))


# --- FedRec stochastic: one upload per model sent ----------------------------------------------

class _TwiceContext:
    """A client's context that sends its gradients twice (a buggy or malicious client)."""

    def __init__(self, ctx) -> None:
        self._ctx = ctx

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    async def send(self, dst, kind, payload, **kw):
        await self._ctx.send(dst, kind, payload, **kw)
        if kind == "gradients":
            await self._ctx.send(dst, kind, payload, **kw)


@pytest.mark.parametrize("model", ["PMF(S)", "SVD++(S)"])
def test_fedrec_stochastic_server_refuses_a_second_upload_taken_for_the_next_clients_reply(model):
    # before: the second upload was read as the next client's reply and applied in its place, and
    # the run ended with the last client's reply never read, without a word
    from fedsim.protocols import fedrec

    net, mod, job = _net("fedrec", {"model": model})
    first = job.clients[1]

    async def twice(ctx, *args, **kwargs):
        return await fedrec.client(_TwiceContext(ctx), *args, **kwargs)
    net.nodes[first].actor = twice
    err, cause = run_to_bad_message(net)
    assert err.node == "server" and cause.kind == "gradients" and cause.round == 0
    assert f"gradients came from {first!r} while the model was with" in str(cause)
    assert "one upload per model sent" in str(cause)
