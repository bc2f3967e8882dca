"""A server given a malformed upload stops with an error naming the peer that sent it.

Item ids out of range (a negative one counted from the end by NumPy's indexing) and arrays of
the wrong shape (a (1, d) block broadcast over every listed row) were taken silently by most
servers, changing the wrong rows of the model; ids past the end failed as a bare IndexError of
the server. Each case replaces one client's actor by one that answers every model with a
malformed upload."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.kernel import ActorError, SimNetwork
from fedsim.protocols import REGISTRY
from fedsim.protocols.common import BadMessageError

from conftest import rewrite_sends, run_to_bad_message


def _width(model: dict) -> tuple[int, int]:
    """(rows, width) of the model the server sent: V (FedRec), theta (FPL), Q (FCF)."""
    for key in ("V", "theta", "Q"):
        if key in model:
            return np.shape(model[key])
    raise AssertionError(sorted(model))


def _uploads(protocol: str, fault: str):
    def body(model: dict) -> tuple[str, dict]:
        m, d = _width(model)
        if protocol == "fcf":
            grad = np.zeros((1, d) if fault == "shape" else (m, d), np.float32)
            return "gradients", {"grad": grad}
        items = {"negative": [-1], "past_end": [m], "shape": [0, 1], "repeat": [0, 0], "unsorted": [1, 0]}[fault]
        # one row: the wrong shape for two ids (a repeat and an order fault send a row per id)
        rows = np.zeros((1 if fault == "shape" or len(items) == 1 else len(items), d), np.float32)
        key = "rows" if protocol == "fpl" else "grads"
        body = {"items": np.array(items, np.int32), key: rows}
        if "O" in model:  # SVD++: the upload is complete but for its fault
            body["o_deltas"] = rows
        return ("update" if protocol == "fpl" else "gradients"), body
    return body


def _malicious(upload):
    async def actor(ctx, *args, **kwargs):
        while True:
            msg = await ctx.receive()
            if msg.kind == "stop":
                return None
            if msg.kind == "model":
                kind, payload = upload(msg.payload)
                await ctx.send("server", kind, payload)
    return actor


CASES = [(p, c, f) for p, c in [("fedrec", {}), ("fedrec", {"model": "PMF(S)"}), ("fedrec", {"model": "SVD++(S)"}),
                                 ("fedrecpp", {"eta": 0}), ("fpl", {})]
         for f in ("negative", "past_end", "shape")] + [("fcf", {}, "shape")]  # (FCF's upload has no item ids)
# FedRec uploads list each item once, in ascending order (sort_by_item): a repeated id was added
# once by NumPy's indexing and twice by the compiled update, a run's result depending on whether
# numba was installed. (FPL's server sums repeated rows, np.add.at, as its Eq. 7 reads.)
CASES += [(p, c, f) for p, c in [("fedrec", {}), ("fedrec", {"model": "PMF(S)"}), ("fedrec", {"model": "SVD++(S)"}),
                                  ("fedrecpp", {"eta": 0})]
          for f in ("repeat", "unsorted")]


def _tiny_net(protocol: str, change: dict | None = None, **build) -> tuple[SimNetwork, str]:
    """``protocol``'s tiny preset (4 clients, 2 rounds, with ``change``) placed on a network, and
    the client whose messages the test corrupts (the second by id)."""
    spec = REGISTRY[protocol]
    data, cfg = spec.tiny(4, 2, 0)
    if change:
        cfg = cfg.replace(**change)
    net = SimNetwork(seed=1)
    spec.build(net, data, cfg, **({"test": data} if build.get("test") else {}))
    return net, sorted(n for n in net.nodes if n.startswith("client"))[1]


@pytest.mark.parametrize("protocol, change, fault", CASES, ids=[f"{p}-{c}-{f}" for p, c, f in CASES])
def test_a_malformed_upload_is_an_error_naming_its_sender(protocol, change, fault):
    net, bad = _tiny_net(protocol, change)
    net.nodes[bad].actor = _malicious(_uploads(protocol, fault))
    with pytest.raises(ActorError) as info:
        net.run()
    cause = info.value.__cause__
    assert isinstance(cause, BadMessageError), repr(cause)
    assert cause.sender == bad and f"from {bad} (round 0)" in str(cause)
    assert info.value.node == "server" and bad in str(info.value)


def _ae_malicious(fault: str):
    """A PersonalFR or FedAvg-AE client that sends bad indices ('indices') or, answering the
    model, a parameter dict with one row where the merge expects them all ('shape'; FedAvg-AE
    clients send no indices: 'shape-only')."""
    async def actor(ctx, *args, **kwargs):
        if fault == "indices":
            await ctx.send("server", "indices", {"items": np.array([3, 1], np.int32)})  # not increasing
        elif fault == "shape":
            await ctx.send("server", "indices", {"items": np.array([0, 1], np.int32)})
        while True:
            msg = await ctx.receive()
            if msg.kind == "stop":
                return None
            if msg.kind in ("decoder", "model"):
                field = "dec" if msg.kind == "decoder" else "model"
                params = {k: np.asarray(v) for k, v in msg.payload[field].items()}
                first = sorted(params)[0]
                params[first] = params[first][:1]
                await ctx.send("server", "update", {field: params})
    return actor


@pytest.mark.parametrize("protocol, change, fault", [
    ("personalfr", {}, "indices"), ("personalfr", {}, "shape"), ("personalfr", {"compression": False}, "shape"),
    ("fedavg-ae", {}, "shape")])
def test_a_malformed_autoencoder_message_is_an_error_naming_its_sender(protocol, change, fault):
    spec = REGISTRY[protocol]
    data, cfg = spec.tiny(3, 2, 0)
    cfg = cfg.replace(fraction=1.0, **change)
    net = SimNetwork(seed=1)
    spec.build(net, data, cfg)
    bad = sorted(n for n in net.nodes if n.startswith("client"))[1]
    net.nodes[bad].actor = _ae_malicious("shape-only" if protocol == "fedavg-ae" else fault)
    with pytest.raises(ActorError) as info:
        net.run()
    cause = info.value.__cause__
    assert isinstance(cause, BadMessageError), repr(cause)
    assert cause.sender == bad and cause.kind == ("indices" if fault == "indices" else "update")
    assert info.value.node == "server" and bad in str(info.value)


def _corrupt_noise(fault: str):
    """A FedRec++ client's sends with its anonymous noise messages replaced by ``fault``'s."""
    def rewrite(kind, payload):
        if kind != "noise":
            return payload
        d = payload["grads"].shape[1]
        if fault == "repeat":  # rows for each id, one id twice
            return {"items": np.array([3, 1, 3], np.int32), "grads": np.ones((3, d), np.float32)}
        if fault == "items-list":  # a bare AttributeError of the denoiser ('list' has no shape)
            return {"items": payload["items"].tolist(), "grads": payload["grads"]}
        if fault == "grads-list":  # summed as numbers
            return {"items": payload["items"], "grads": payload["grads"].tolist()}
        if fault == "grads-int":  # nothing a client computes, summed as numbers
            return {"items": payload["items"], "grads": payload["grads"].astype(np.int8)}
        return {"items": np.array([1, 3], np.int32), "grads": np.ones((1, d), np.float32)}  # NumPy would broadcast
    return rewrite


@pytest.mark.parametrize("fault, why", [("repeat", "noise: item id 3 appears more than once"),
                                        ("shape", "noise: 2 item ids need rows of shape \\(2, 8\\), got \\(1, 8\\)"),
                                        ("items-list", "noise: item ids must be a 1-D integer array, got list"),
                                        ("grads-list", "noise: rows must be a float array, got list"),
                                        ("grads-int", "noise: rows must be a float array, got int8")])
def test_a_malformed_noise_message_stops_the_denoiser_naming_kind_and_round(fault, why):
    # the denoiser summed a repeated id's rows once (fancy-index +=) and took the sum to the server
    from fedsim.protocols import fedrecpp

    data, cfg = REGISTRY["fedrecpp"].tiny(4, 2, 0)
    net = SimNetwork(seed=1)
    REGISTRY["fedrecpp"].build(net, data, cfg)
    rewrite_sends(net, [n for n in net.nodes if n.startswith("client")], fedrecpp.client, _corrupt_noise(fault))
    _, cause = run_to_bad_message(net)
    assert cause.sender is None and cause.kind == "noise" and cause.round == 0
    assert str(cause).startswith("'noise' from an anonymous sender (round 0): ValueError: ")
    import re
    assert re.search(why, str(cause)), str(cause)


def _run_with_one_replaced(protocol: str, change: dict, kind: str, payload):
    from fedsim.protocols import demo, fedavg_ae, fedrec, fpl, personalfr

    net, bad = _tiny_net(protocol, change, test=kind == "eval")
    real = {"demo": demo, "fedrec": fedrec, "fpl": fpl, "personalfr": personalfr, "fedavg-ae": fedavg_ae}[protocol].client
    rewrite_sends(net, [bad], real, lambda k, p: payload if k == kind else p)
    err, cause = run_to_bad_message(net)
    assert cause.sender == bad and cause.kind == kind and err.node == "server"
    return str(cause)


@pytest.mark.parametrize("payload, why", [
    ({"sse": -1.0, "sae": 0.5, "n": 1}, "sse=-1.0"),  # an RMSE of sqrt of a smaller sum
    ({"sse": float("nan"), "sae": 0.5, "n": 1}, "sse=nan"),  # a NaN RMSE from one client
    ({"sse": 1.0, "sae": 0.5, "n": 1.5}, "n=1.5"),
    ({"sse": 1.0, "sae": 0.5, "n": -3}, "n=-3"),
    ({"sse": "1", "sae": 0.5, "n": 1}, "sse='1'"),
    ({"sse": 1.0, "n": 1}, "KeyError: 'sae'"),
])
def test_a_malformed_eval_reply_is_an_error_naming_its_sender(payload, why):
    # they were summed into the reported metrics as they came (a missing key a bare KeyError)
    text = _run_with_one_replaced("fedrec", {"model": "PMF(S)", "eval_every": 1}, "eval", payload)
    assert why in text


@pytest.mark.parametrize("protocol, change", [("fedrec", {"secure_aggregation": True, "secagg_neighbours": 2}),
                                              ("fpl", {"secure_aggregation": True, "secagg_neighbours": 2})])
@pytest.mark.parametrize("pub, why", [(0, "got 0"), (-5, "got -5"), ((1 << 61) - 1, f"got {(1 << 61) - 1}"),
                                      (2.5, "got 2.5"), (None, "got None")])
def test_a_malformed_public_key_is_an_error_naming_its_sender(protocol, change, pub, why):
    # 0 read as "not heard from"; a negative or oversized key was an OverflowError of the server
    text = _run_with_one_replaced(protocol, change, "keys", {"pub": pub})
    assert f"pub must be an integer in [1, {(1 << 61) - 1}), {why}" in text


@pytest.mark.parametrize("payload, why", [
    ({"g": np.ones(1), "n": 3}, "g must be a float vector of 5 entries, got float64 of shape (1,)"),  # broadcast
    ({"g": np.ones(5), "n": -3}, "n must be a positive integer, got -3"),  # the step turned round
    ({"g": np.ones(5), "n": 0}, "n must be a positive integer, got 0"),  # a division by zero
    ({"g": [1.0] * 5, "n": 3}, "g must be a float vector of 5 entries, got list"),
    ({"n": 3}, "KeyError: 'g'"),
])
def test_the_demo_server_checks_what_its_clients_send(payload, why):
    # the protocol the tutorial starts from shows the check every server makes
    assert why in _run_with_one_replaced("demo", {"dim": 5}, "gradient", payload)


@pytest.mark.parametrize("protocol", ["personalfr", "fedavg-ae"])
@pytest.mark.parametrize("payload, why", [
    ({"sse": -1.0, "n": 2, "ndcg_sum": 0.0, "ndcg_users": 0}, "sse=-1.0"),
    ({"sse": 1.0, "n": 2.5, "ndcg_sum": 0.0, "ndcg_users": 0}, "n=2.5"),
    ({"sse": 1.0, "n": 2, "ndcg_sum": 3.0, "ndcg_users": 1}, "ndcg_sum=3.0"),  # an NDCG of 3
    ({"sse": 1.0, "n": 2, "ndcg_sum": 0.5, "ndcg_users": -1}, "ndcg_users=-1"),
    ({"sse": 1.0, "n": 2}, "eval must hold sse, n, ndcg_sum, ndcg_users, got ['n', 'sse']"),  # counted as 0
])
def test_a_malformed_autoencoder_eval_reply_is_an_error_naming_its_sender(protocol, payload, why):
    assert why in _run_with_one_replaced(protocol, {"fraction": 1.0}, "eval", payload)


def _run_rewritten(protocol: str, kind: str, rewrite, change: dict | None = None) -> str:
    """Run ``protocol``'s tiny preset with client 1's ``kind`` messages rewritten by
    ``rewrite(payload)``; the server must stop with a BadMessageError naming it. Returns its text."""
    from fedsim.protocols import fcf, fpl

    net, bad = _tiny_net(protocol, change)
    rewrite_sends(net, [bad], {"fpl": fpl, "fcf": fcf}[protocol].client,
                  lambda k, p: rewrite(p) if k == kind else p)
    err, cause = run_to_bad_message(net)
    assert cause.sender == bad and cause.kind == kind and cause.round == 0 and err.node == "server"
    return str(cause)


@pytest.mark.parametrize("rows, why", [
    (lambda r: r.tolist(), "rows must be a float array, got list"),  # a bare TypeError: list * float32
    (lambda r: [["x"] * r.shape[1]] * r.shape[0], "rows must be a float array, got list"),
    (lambda r: r.astype(np.int32), "rows must be a float array, got int32"),  # (a real client sends floats)
    (lambda r: r != 0, "rows must be a float array, got bool"),
])
def test_fpl_refuses_update_rows_that_are_not_a_float_array(rows, why):
    # rows as a list (of numbers or not) stopped the server with a bare TypeError of its sum
    text = _run_rewritten("fpl", "update", lambda p: {"items": p["items"], "rows": rows(p["rows"])})
    assert why in text


def test_fpl_refuses_update_items_that_are_not_an_array():
    # items as a list passed the id checks and stopped the server with a bare AttributeError
    text = _run_rewritten("fpl", "update", lambda p: {"items": p["items"].tolist(), "rows": p["rows"]})
    assert "update: item ids must be a 1-D integer array, got list" in text


@pytest.mark.parametrize("grad, why", [
    (lambda g: [["x"] * g.shape[1]] * g.shape[0], "grad must be a float array of shape (40, 4), got list"),
    (lambda g: [[None] * g.shape[1]] * g.shape[0], "grad must be a float array of shape (40, 4), got list"),
    (lambda g: g.tolist(), "grad must be a float array of shape (40, 4), got list"),
    (lambda g: g != 0, "grad must be a float array of shape (40, 4), got bool of shape (40, 4)"),
    (lambda g: g[:1], "grad must be a float array of shape (40, 4), got float32 of shape (1, 4)"),
])
def test_fcf_refuses_a_gradient_that_is_not_a_float_array_of_the_model_shape(grad, why):
    # strings or None were a bare UFuncTypeError of the server's sum; a bool array was summed as 0/1
    text = _run_rewritten("fcf", "gradients", lambda p: {"grad": grad(p["grad"])})
    assert why in text


def _ae_update_rewritten(protocol: str, change: dict, conv) -> str:
    """Run ``protocol``'s tiny preset (4 clients, every one every round) with client 1's
    ``update`` arrays converted by ``conv``; the server must stop with a BadMessageError naming
    it. Returns its text."""
    from fedsim.protocols import fedavg_ae, personalfr

    spec = REGISTRY[protocol]
    data, cfg = spec.tiny(4, 2, 0)
    net = SimNetwork(seed=1)
    spec.build(net, data, cfg.replace(**change))
    bad = sorted(n for n in net.nodes if n.startswith("client"))[1]
    field = "dec" if protocol == "personalfr" else "model"

    def rewrite(kind, payload):
        if kind != "update":
            return payload
        params = payload.payload if hasattr(payload, "payload") else payload  # (FedAvg sends a draft)
        return {field: {k: conv(np.asarray(v)) for k, v in params[field].items()}}
    rewrite_sends(net, [bad], {"personalfr": personalfr, "fedavg-ae": fedavg_ae}[protocol].client, rewrite)
    err, cause = run_to_bad_message(net)
    assert cause.sender == bad and cause.kind == "update" and cause.round == 1 and err.node == "server"
    return str(cause)


@pytest.mark.parametrize("protocol, change", [("personalfr", {}), ("personalfr", {"compression": False}),
                                              ("fedavg-ae", {}), ("personalfr", {"dtype": "float64"})])
@pytest.mark.parametrize("conv, got", [
    (lambda a: a.tolist(), "list"),  # a bare AttributeError of the server ('list' has no shape)
    (lambda a: a != 0, "bool"),  # averaged as 0s and 1s
    (lambda a: a.astype(np.int32), "int32"),  # averaged as numbers
    (lambda a: a.astype(np.float16), "float16"),  # a bare NotImplementedError of the compiled merge
    (lambda a: a.astype(np.float64 if a.dtype == np.float32 else np.float32), "other float"),  # taken silently
])
def test_an_autoencoder_update_must_hold_arrays_of_the_runs_dtype(protocol, change, conv, got):
    text = _ae_update_rewritten(protocol, change, conv)
    want = change.get("dtype", "float32")
    if got == "other float":
        got = "float32" if want == "float64" else "float64"
    assert f"must hold {want} arrays (the run's dtype), got {{'" in text and f"': '{got}'" in text, text


@pytest.mark.parametrize("protocol", ["personalfr", "fedavg-ae"])
@pytest.mark.parametrize("task, payload, rule", [
    # an sse without test entries: summed into the others' RMSE (raised it)
    ("explicit", {"sse": 5.0, "n": 0, "ndcg_sum": 0.0, "ndcg_users": 0}, "sse = 0 when n = 0"),
    ("explicit", {"sse": 1.0, "n": 2, "ndcg_sum": 0.5, "ndcg_users": 1}, "ndcg_sum = ndcg_users = 0"),
    ("explicit", {"sse": 1.0, "n": 2, "ndcg_sum": float("nan"), "ndcg_users": 1}, "ndcg_sum = ndcg_users = 0"),
    # more NDCG users than test entries: each user counted has one entry at least (lowered the NDCG)
    ("implicit", {"sse": 0.0, "n": 1, "ndcg_sum": 0.0, "ndcg_users": 3}, "ndcg_users <= n"),
    ("implicit", {"sse": 2.0, "n": 3, "ndcg_sum": 1.0, "ndcg_users": 2}, "sse = 0"),
])
def test_an_autoencoder_eval_reply_must_be_sums_its_task_gives(protocol, task, payload, rule):
    text = _run_with_one_replaced(protocol, {"fraction": 1.0, "task": task}, "eval", payload)
    assert f"eval of the {task} task must carry " in text and rule in text, text
    assert (f"got sse={payload['sse']!r}, n={payload['n']!r}, ndcg_sum={payload['ndcg_sum']!r}, "
            f"ndcg_users={payload['ndcg_users']!r}") in text


@pytest.mark.parametrize("task", ["explicit", "implicit"])
def test_honest_eval_replies_of_either_task_pass_the_check(task):
    from fedsim.kernel import Message
    from fedsim.math import ae_train
    from fedsim.math import autoencoder as ae
    from fedsim.protocols.fedae import checked_eval

    data, _ = REGISTRY["personalfr"].tiny(4, 2, 0)
    t = ae_train.prepare((data.users, data.items, data.values), (data.users, data.items, data.values),
                         int(data.n_users), int(data.n_items), task=task)
    p = ae.init_params(t.n_items, np.random.default_rng(0), (8, 4))
    sums = {k: v for k, v in ae_train.eval_sums(p, t).items() if k != "flops"}
    assert sums["n"] > 0 and (sums["ndcg_users"] > 0) == (task == "implicit")
    assert checked_eval(Message("eval", sums, "client/0001", 1, 0), task) is sums
    empty = Message("eval", dict(ae_train.EMPTY_SUMS), "client/0001", 1, 0)  # a client without test entries
    assert checked_eval(empty, task) == ae_train.EMPTY_SUMS
