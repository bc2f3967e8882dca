"""PersonalFR and FedAvg-AE as actors: bytes on the wire equal the active parameters plus msgpack framing,
no encoder parameter in any payload, Partial Compression enacted = accounted, ratios from the ledger."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedsim.data import generate, partition_users, per_user_random
from fedsim.kernel import AsyncioNetwork, SimNetwork, decode_message, encode_message
from fedsim.kernel.codec import Draft
from fedsim.math import active as act
from fedsim.math import ae_train
from fedsim.math import autoencoder as ae
from fedsim.math import optim
from fedsim.protocols import fedavg_ae, personalfr
from fedsim.protocols.personalfr import FedAEConfig
from fedsim.seeding import node_rng

HIDDEN = (8, 4)


def _task(preset="tiny", seed=1, task="explicit", **over):
    r = generate(preset, seed=seed, **over)
    tr, te = per_user_random(r, 0.2, seed=0)
    return ae_train.prepare((tr.users, tr.items, tr.values), (te.users, te.items, te.values), r.n_users,
                            r.n_items, task=task)


@pytest.fixture(scope="module")
def tiny():
    return _task()


def _run(mod, task, M, cfg, seed=0, framing=0, wrap=None, evaluate=True):
    net = SimNetwork(seed=seed, framing_bytes=framing)
    target = net if wrap is None else wrap(net)
    job = mod.place(target, task, partition_users(task.n_users, M, seed=0), cfg, evaluate=evaluate)
    return job, _flat(job.collect(net.run())), net


def _flat(result):
    """The Result as the dict these tests read: info, the evaluations and the server's return value."""
    return {**result.info, "history": result.metrics, "server": result.run["server"]}


# --------------------------------------------------------------------- msgpack sizes, computed by hand


def _len_header(n, fix_limit, fix_size=1):
    if n < fix_limit:
        return fix_size
    return 3 if n < 2**16 else 5


def mp_str(s: str) -> int:
    n = len(s.encode())
    return n + (1 if n < 32 else 2 if n < 256 else 3 if n < 2**16 else 5)


def mp_uint(v: int) -> int:
    return 1 if v < 128 else 2 if v < 256 else 3 if v < 2**16 else 5


def _ext_framing(body: int) -> int:
    if body in (1, 2, 4, 8, 16):
        return 2  # fixext: marker + type
    return 3 if body < 256 else 4 if body < 2**16 else 6  # ext 8/16/32: marker + length + type


def mp_array_ext(shape, itemsize, at=None) -> int:
    """Our array ext: 1 byte dtype code + 1 byte ndim + 4 bytes per dimension, zero padding, then
    the elements. Nested deeper than a map in the payload (``at`` None) the padding aligns the
    elements within the body; a payload array, or an array of a map in the payload, written at
    document offset ``at`` takes the smallest padding (0 to 7) that aligns them in the document."""
    head = 2 + 4 * len(shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * itemsize
    pads = [(-head) % itemsize]
    if at is not None:
        pads = [p for p in range(8) if (at + _ext_framing(head + p + nbytes) + head + p) % itemsize == 0] + pads
    body = head + pads[0] + nbytes
    return _ext_framing(body) + body


def expected_decoder_bytes(kind, shapes, itemsize, t=None) -> int:
    """Bytes of ``[kind, {"t": t, "dec": {name: array}}]`` (or without ``t``)."""
    size = 1 + mp_str(kind)  # fixarray of 2, the kind
    size += 1  # fixmap of the payload
    if t is not None:
        size += mp_str("t") + mp_uint(t)
    size += mp_str("dec") + _len_header(len(shapes), 16)
    for name, shape in shapes.items():  # (aligned in the document, as top-level arrays are)
        size += mp_str(name)
        size += mp_array_ext(shape, itemsize, at=size)
    return size


def test_bytes_per_client_equal_active_parameters_plus_framing(tiny):
    cfg = FedAEConfig(rounds=3, fraction=0.5, hidden=HIDDEN, batch=4, local_epochs=1)
    framing = 40
    job, res, net = _run(personalfr, tiny, 5, cfg, framing=framing, evaluate=False)
    q = HIDDEN[0]
    hidden_params = q * HIDDEN[1] + q  # dec.W1 (8, 4) and dec.b1 (8,)
    items = {name: act.rated_items(tiny.mask[g]) for name, g in zip(job.clients, job.groups)}
    rows = list(net.ledger.records())
    seen = {"indices": 0, "decoder": 0, "update": 0}
    for r in rows:
        if r["kind"] == "stop":
            continue
        client = r["src"] if r["src"] != "server" else r["dst"]
        n_act = len(items[client])
        if r["kind"] == "indices":
            at = 1 + mp_str("indices") + 1 + mp_str("items")
            expected = at + mp_array_ext((n_act,), 4, at)
            assert r["bytes"] == expected + framing and r["raw_bytes"] == 4 * n_act
            seen["indices"] += 1
            continue
        active = hidden_params + n_act * (q + 1)  # Expression 3
        dec = {"dec.W1": (q, HIDDEN[1]), "dec.b1": (q,), "dec.W2": (n_act, q), "dec.b2": (n_act,)}
        assert active == act.active_count({k: np.zeros(s) for k, s in dec.items()}, n_act)
        t = r["round"] if r["kind"] == "decoder" else None
        overhead = expected_decoder_bytes(r["kind"], dec, 4, t) - 4 * active
        assert r["floats"] == active
        assert r["raw_bytes"] == 4 * active
        assert r["bytes"] == 4 * active + overhead + framing
        assert overhead < 130  # framing of 4 arrays, their names and the round number
        seen[r["kind"]] += 1
    k = personalfr.selection_size(0.5, 5)
    assert seen == {"indices": 5, "decoder": 3 * k, "update": 3 * k}
    # and the uncompressed variant sends the whole decoder: n = all items
    cfg_off = FedAEConfig(rounds=1, fraction=0.5, hidden=HIDDEN, batch=4, local_epochs=1, compression=False)
    _, _, net_off = _run(personalfr, tiny, 5, cfg_off, evaluate=False)
    full = hidden_params + tiny.n_items * (q + 1)
    assert {r["floats"] for r in net_off.ledger.records() if r["kind"] in ("decoder", "update")} == {full}


# ------------------------------------------------------------------------------ encoder stays private


class _Recorder:
    """Test-only context wrapper: records every payload an actor sends, then sends it unchanged."""

    def __init__(self, ctx, log):
        self._ctx, self._log = ctx, log

    async def send(self, dst, kind, payload, **kw):
        # a draft (a message written in place) is recorded as the payload it carries
        self._log.append((self._ctx.node_id, dst, kind, payload.payload if isinstance(payload, Draft) else payload))
        await self._ctx.send(dst, kind, payload, **kw)

    async def broadcast(self, dsts, kind, payload):
        dsts = list(dsts)
        self._log.extend((self._ctx.node_id, d, kind, payload) for d in dsts)
        await self._ctx.broadcast(dsts, kind, payload)

    def __getattr__(self, name):
        return getattr(self._ctx, name)


class _RecordingNet:
    def __init__(self, net, log):
        self._net, self._log = net, log

    def add_node(self, node_id, actor, *args, **kwargs):
        log = self._log

        async def wrapped(ctx, *a, **kw):
            return await actor(_Recorder(ctx, log), *a, **kw)

        self._net.add_node(node_id, wrapped, *args, **kwargs)

    def __getattr__(self, name):  # the rest of the network's API (before_run, ...)
        return getattr(self._net, name)


def _walk(obj, path=""):
    """Yield (path, leaf) over a decoded payload."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, f"{path}/{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _walk(v, f"{path}/{i}")
    else:
        yield path, obj


def _payload_values(mod, task, cfg, M=4, seed=3):
    log = []
    job, res, net = _run(mod, task, M, cfg, seed=seed, wrap=lambda n: _RecordingNet(n, log))
    rows = list(net.ledger.records())
    assert len(rows) == len(log)  # every ledger row has its recorded payload
    keys, values = set(), []
    for row, (src, dst, kind, payload) in zip(rows, log):
        assert (row["src"], row["dst"], row["kind"]) == (src, dst, kind)
        data = encode_message(kind, payload).data
        assert len(data) == row["bytes"]  # what was recorded is what the ledger charged
        _, decoded = decode_message(data)
        for path, leaf in _walk(decoded):
            keys.update(p for p in path.split("/") if p)
            if isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f":
                values.append(leaf.ravel())
    return job, res, keys, np.unique(np.concatenate(values))


def _encoder_values(job, res, cfg, seed):
    """Every non-zero value of every client's initial and final encoder."""
    out = []
    for name in job.clients:
        init = personalfr.init_encoder(job.n_items, node_rng(seed, name), cfg)
        final = res["clients"][name].get("encoder")
        for enc in (init, final) if final is not None else (init,):
            out.extend(v.ravel() for v in enc.values())
    vals = np.unique(np.concatenate(out))
    return vals[vals != 0]


def test_no_payload_of_a_personalfr_run_carries_encoder_parameters(tiny):
    cfg = FedAEConfig(rounds=4, fraction=0.5, hidden=HIDDEN, batch=4, local_epochs=2, dtype="float64",
                      eval_every=2)
    job, res, keys, sent = _payload_values(personalfr, tiny, cfg)
    assert not any(k.startswith("enc.") for k in keys)
    assert {"dec.W1", "dec.b1", "dec.W2", "dec.b2"} <= keys
    enc_vals = _encoder_values(job, res, cfg, seed=3)
    # the recorded final encoders really are the trained ones (the check below is not vacuous)
    name = job.clients[0]
    init = personalfr.init_encoder(job.n_items, node_rng(3, name), cfg)
    assert not np.array_equal(init["enc.W1"], res["clients"][name]["encoder"]["enc.W1"])
    assert enc_vals.size > 4 * 300 and not np.isin(enc_vals, sent).any()


def test_the_encoder_check_does_find_encoders_in_fedavg(tiny):
    """Positive control: FedAvg ships whole models, and the same inspection finds their encoders."""
    cfg = FedAEConfig(rounds=2, fraction=0.5, hidden=HIDDEN, batch=4, local_epochs=1, dtype="float64")
    job, res, keys, sent = _payload_values(fedavg_ae, tiny, cfg)
    assert "enc.W1" in keys
    model0 = ae.init_params(tiny.n_items, node_rng(3, "server"), HIDDEN, dtype=np.float64)
    assert np.isin(model0["enc.W1"].ravel(), sent).all()


def _client_uploads(mod, task, cfg, M=5, seed=3):
    """Every (kind, decoded payload) a client sent the server in a run, in sending order."""
    log = []
    job, _, net = _run(mod, task, M, cfg, seed=seed, wrap=lambda n: _RecordingNet(n, log))
    out = []
    for src, dst, kind, payload in log:
        if src != "server":
            assert dst == "server"
            out.append((src, kind, decode_message(encode_message(kind, payload).data)[1]))
    return job, net, out


def test_without_compression_no_client_sends_its_item_set(tiny):
    """The paper's clients send their indices "to find the active parameters" (section III-C): only
    Partial Compression needs them. Without it the run has no ``indices`` message and no client
    payload holds an item id (until 2026-11-28 every client sent its I_m at round 0 all the same,
    756 bytes on this data, and the server learnt every client's item set)."""
    base = dict(rounds=2, fraction=0.6, hidden=HIDDEN, batch=4, local_epochs=1, eval_every=1)
    job, net, ups = _client_uploads(personalfr, tiny, FedAEConfig(**base, compression=False))
    assert not len(net.ledger.select(kind="indices"))
    assert {k for _, k, _ in ups} == {"update", "eval"}
    for _, kind, doc in ups:  # floats of the decoder, or the evaluation's sums and counts: no integer array
        assert not any(isinstance(v, np.ndarray) and v.dtype.kind in "iu" for _, v in _walk(doc)), kind
    k = personalfr.selection_size(0.6, 5)
    assert [r["kind"] for r in net.ledger.records() if r["dst"] == "server"].count("update") == 2 * k
    # positive control: with compression each client sends exactly its rated items, once
    job, net, ups = _client_uploads(personalfr, tiny, FedAEConfig(**base))
    sent = {src: doc["items"] for src, kind, doc in ups if kind == "indices"}
    assert sorted(sent) == sorted(job.clients)
    for name, g in zip(job.clients, job.groups):
        np.testing.assert_array_equal(sent[name], act.rated_items(tiny.mask[g]))
    assert len(net.ledger.select(kind="indices")) == 5


# ------------------------------------------------------------------- Partial Compression, accounting


def test_enacted_compression_equals_masked_uncompressed_training(tiny):
    """Sending and merging only active rows (Algorithm 1's merge) = averaging whole decoders trained with
    the inactive rows masked: the compression is enacted, and it changes the bytes, not the model."""
    base = dict(rounds=4, fraction=0.6, hidden=HIDDEN, batch=3, local_epochs=2, dtype="float64")
    _, on, net_on = _run(personalfr, tiny, 5, FedAEConfig(**base, merge="algorithm1"), evaluate=False)
    _, off, net_off = _run(personalfr, tiny, 5, FedAEConfig(**base, compression=False,
                                                             uncompressed_training="masked"), evaluate=False)
    assert on["selected"] == off["selected"]
    for k, v in on["server"]["decoder"].items():
        np.testing.assert_allclose(v, off["server"]["decoder"][k], rtol=1e-10, atol=1e-12)
    for name, c in on["clients"].items():
        for k, v in c["encoder"].items():
            np.testing.assert_allclose(v, off["clients"][name]["encoder"][k], rtol=1e-10, atol=1e-12)
    b_on = sum(r["bytes"] for r in net_on.ledger.by_kind() if r["kind"] in ("decoder", "update"))
    b_off = sum(r["bytes"] for r in net_off.ledger.by_kind() if r["kind"] in ("decoder", "update"))
    assert b_on < b_off
    assert on["client_flops"] < off["client_flops"]
    # the default per-item merge is a different aggregation
    _, per_item, _ = _run(personalfr, tiny, 5, FedAEConfig(**base), evaluate=False)
    assert not np.allclose(per_item["server"]["decoder"]["dec.W2"], on["server"]["decoder"]["dec.W2"])


def test_cut_encoder_computes_the_same_model_with_fewer_flops(tiny):
    """Columns of items a client never has input for only multiply zeros: dropping them (encoder_input="cut")
    changes the FLOPs, not the decoder, the predictions or the evaluations (float64, equal to rounding)."""
    base = dict(rounds=4, fraction=0.5, hidden=HIDDEN, batch=3, local_epochs=2, dtype="float64", eval_every=2)
    _, dense, _ = _run(personalfr, tiny, 4, FedAEConfig(**base))
    job, cut, _ = _run(personalfr, tiny, 4, FedAEConfig(**base, encoder_input="cut"))
    for k, v in dense["server"]["decoder"].items():
        np.testing.assert_allclose(v, cut["server"]["decoder"][k], rtol=1e-10, atol=1e-12)
    for a, b in zip(dense["history"], cut["history"]):
        assert a["rmse"] == pytest.approx(b["rmse"], rel=1e-10)
    name, users = job.clients[1], job.groups[1]
    items = act.rated_items(tiny.mask[users])
    enc_d, enc_c = dense["clients"][name]["encoder"], cut["clients"][name]["encoder"]
    assert enc_c["enc.W1"].shape == (HIDDEN[0], len(items))
    np.testing.assert_allclose(enc_d["enc.W1"][:, items], enc_c["enc.W1"], rtol=1e-10, atol=1e-12)
    assert cut["client_flops"] < dense["client_flops"]


@pytest.mark.parametrize("mod,over", [(fedavg_ae, {}), (fedavg_ae, {"client_momentum": "reset"}),
                                      (personalfr, {"compression": False}), (personalfr, {"task_": "implicit"})],
                         ids=["fedavg", "fedavg-reset", "personalfr-uncompressed", "personalfr-implicit"])
def test_lazy_local_steps_change_only_the_rounding(mod, over):
    """untouched="lazy" (the default) against "stepwise": the same messages byte for byte in size, the same
    FLOPs and selections, metrics and models equal to float rounding (float64)."""
    over = dict(over)
    task = _task(task=over.pop("task_", "explicit"))
    base = dict(rounds=4, fraction=0.5, hidden=HIDDEN, batch=3, local_epochs=2, dtype="float64", eval_every=2,
                task=task.task, **over)
    _, step, net_s = _run(mod, task, 4, FedAEConfig(**base, untouched="stepwise"))
    _, lazy, net_l = _run(mod, task, 4, FedAEConfig(**base))
    assert FedAEConfig().untouched == "lazy"
    assert [(r["kind"], r["bytes"]) for r in net_l.ledger.records()] == \
        [(r["kind"], r["bytes"]) for r in net_s.ledger.records()]
    assert lazy["client_flops"] == step["client_flops"] and lazy["selected"] == step["selected"]
    key = "rmse" if task.task == "explicit" else "ndcg"
    for a, b in zip(step["history"], lazy["history"]):
        assert a[key] == pytest.approx(b[key], rel=1e-9)
    model = "model" if mod is fedavg_ae else "decoder"
    for k, v in step["server"][model].items():
        np.testing.assert_allclose(lazy["server"][model][k], v, rtol=1e-9, atol=1e-12)


def _cost(net):
    return sum(r["bytes"] for r in net.ledger.records() if r["kind"] not in personalfr.EVAL_KINDS)


def test_communication_ratio_from_the_ledger_grows_with_the_number_of_clients():
    task = _task("tiny", seed=5, n_users=200, n_items=300, n_ratings=6000, min_per_user=10)
    base = dict(rounds=2, hidden=(16, 8), batch=10, local_epochs=1)
    comm, comp = [], []
    for M in (2, 10, 50, 200):
        cfg = FedAEConfig(**base, fraction=0.5 if M == 2 else 0.1)
        _, pf, net_p = _run(personalfr, task, M, cfg, evaluate=False)
        _, fa, net_f = _run(fedavg_ae, task, M, cfg, evaluate=False)
        assert pf["selected"] == fa["selected"]  # same server draws: same clients each round
        comm.append(_cost(net_f) / _cost(net_p))
        comp.append(fa["client_flops"] / pf["client_flops"])
    assert all(a < b for a, b in zip(comm, comm[1:])), comm
    assert comm[0] > 1.9 and comm[-1] > 5  # ~2 (encoder not sent) x the decoder's compression
    assert all(a < b for a, b in zip(comp, comp[1:])) and comp[0] > 1.0, comp


# ------------------------------------------------------------------------------ behaviour, determinism


def test_personalfr_learns_is_deterministic_and_selects_c_m_clients(tiny):
    cfg = FedAEConfig(rounds=12, fraction=0.34, hidden=(16, 8), batch=4, eval_every=1, lr=0.1)
    job, a, net_a = _run(personalfr, tiny, 6, cfg)
    _, b, net_b = _run(personalfr, tiny, 6, cfg)
    assert net_a.ledger.to_csv() == net_b.ledger.to_csv()
    assert all(np.array_equal(v, b["server"]["decoder"][k]) for k, v in a["server"]["decoder"].items())
    assert all(len(s) == 2 and s == sorted(s) for s in a["selected"])  # max(int(0.34 * 6), 1)
    rmse = [h["rmse"] for h in a["history"]]
    assert rmse[-1] < rmse[0] - 0.3 and a["best"]["rmse"] == min(rmse)
    assert a["history"][-1]["n"] == len(tiny.test_items)
    _, c, _ = _run(personalfr, tiny, 6, cfg, seed=1)
    assert c["selected"] != a["selected"]
    # every client got selected at least once, charged its FLOPs and trained in the rounds it was chosen
    for name, r in a["clients"].items():
        assert r["rounds"] == [t for t, s in enumerate(a["selected"], 1) if name in s]
        assert (r["flops"] > 0) == bool(r["rounds"])


def test_implicit_task_bce_and_ndcg(tiny):
    task = _task(task="implicit")
    assert set(np.unique(task.x[task.mask])) <= {0.0, 1.0} and (task.x[task.mask] == 0).any()
    assert task.mask.sum() == tiny.mask.sum()  # negatives stay observed (the authors' implicit task)
    cfg = FedAEConfig(rounds=3, fraction=0.5, hidden=HIDDEN, batch=4, task="implicit")
    for mod in (personalfr, fedavg_ae):
        _, res, _ = _run(mod, task, 4, cfg)
        assert 0.0 <= res["final"]["ndcg"] <= 1.0


@pytest.mark.asyncio
async def test_same_result_on_the_asyncio_transport(tiny):
    cfg = FedAEConfig(rounds=2, fraction=0.5, hidden=HIDDEN, batch=4, local_epochs=1)
    groups = partition_users(tiny.n_users, 4, seed=0)
    sim = SimNetwork(seed=2)
    job = personalfr.place(sim, tiny, groups, cfg)
    a = _flat(job.collect(sim.run()))
    aio = AsyncioNetwork(seed=2)
    job = personalfr.place(aio, tiny, groups, cfg)
    b = _flat(job.collect(await aio.run_async(timeout=60)))
    for k, v in a["server"]["decoder"].items():
        assert np.array_equal(v, b["server"]["decoder"][k])
    assert a["final"] == b["final"]


# ---------------------------------------------------------------------------------- math helpers


def test_ndcg_over_test_items_hand_computed():
    d = 1 / np.log2([2, 3, 4])
    # scores rank items as 2, 0, 1; labels 1, 0, 1 -> hits at ranks 1 and 2 of the top-3
    assert ae_train.ndcg_test_items(np.array([0.5, 0.1, 0.9]), np.array([1.0, 0.0, 1.0]), k=3) == pytest.approx(1.0)
    got = ae_train.ndcg_test_items(np.array([0.5, 0.9, 0.1]), np.array([1.0, 0.0, 1.0]), k=3)
    assert got == pytest.approx((d[1] + d[2]) / (d[0] + d[1]))
    assert ae_train.ndcg_test_items(np.array([0.2, 0.1]), np.array([0.0, 0.0]), k=10) == 0.0
    # cut at k: the positive ranked third does not count at k = 2
    assert ae_train.ndcg_test_items(np.array([3.0, 2.0, 1.0]), np.array([0.0, 0.0, 1.0]), k=2) == 0.0


def test_eval_sums_add_up_over_clients(tiny):
    p = ae.init_params(tiny.n_items, np.random.default_rng(0), HIDDEN)
    whole = ae_train.eval_sums(p, tiny)
    parts = [ae_train.eval_sums(p, tiny.rows(g)) for g in partition_users(tiny.n_users, 7, seed=1)]
    summed = ae_train.add_sums(parts)
    assert summed["n"] == whole["n"] == len(tiny.test_items)
    assert summed["sse"] == pytest.approx(whole["sse"], rel=1e-6)
    pred = ae.predict(p, tiny.x)
    users = np.repeat(np.arange(tiny.n_users), np.diff(tiny.test_ptr))
    ref = np.sqrt(np.mean((pred[users, tiny.test_items] - tiny.test_values) ** 2))
    assert ae_train.finish_eval(whole, "explicit")["rmse"] == pytest.approx(ref, rel=1e-6)


def test_joint_trainer_learns(tiny):
    res = ae_train.train_joint(tiny, epochs=60, rng=np.random.default_rng(0), batch=10, hidden=(16, 8), lr=0.01,
                               eval_every=30)
    assert [h["epoch"] for h in res.history] == [30, 60]
    assert res.history[-1]["rmse"] < 1.3 and res.flops > 0


def test_an_eval_answer_carries_the_round_of_the_request_it_answers():
    # on a flow-level link a lagging client reads round R's small decoder slice before round R-1's
    # large `evaluate`: its answer to that one must not go out labelled R (the server's round-R
    # gather would take it for the round-R figures and discard the real one as stale)
    from fedsim.data import generate, random_holdout
    from fedsim.kernel import SimNetwork
    from fedsim.protocols import REGISTRY
    from fedsim.protocols.fedae import FedAEConfig

    r = generate("ml100k-like", seed=1, n_users=40, n_items=2000, n_ratings=3000, min_per_user=20)
    train, test = random_holdout(r, 0.1, seed=0)
    cfg = FedAEConfig(rounds=4, fraction=1.0, local_epochs=1, hidden=(64, 16), batch=10, clients=20,
                      eval_every=1, deadline=1.0)
    net = SimNetwork(seed=0, profile="mobile", link_model="fair")
    REGISTRY["personalfr"].build(net, train, cfg, test=test).collect(net.run())
    recs = list(net.ledger.records())
    asked = {(x["dst"], x["round"]): x for x in recs if x["kind"] == "evaluate"}
    sliced = {(x["dst"], x["round"]): x for x in recs if x["kind"] == "decoder" and x["status"] == "delivered"}
    # the case arises: some round's decoder slice reached a client before the previous evaluate
    assert any(d["arrival_time"] < asked[(c, r - 1)]["arrival_time"] for (c, r), d in sliced.items()
               if (c, r - 1) in asked and asked[(c, r - 1)]["status"] == "delivered")
    evals = [x for x in recs if x["kind"] == "eval"]
    assert evals
    for x in evals:  # answered after its request arrived: the label names the request it answers
        req = asked[(x["src"], x["round"])]
        assert req["status"] == "delivered" and x["send_time"] >= req["arrival_time"], x


@pytest.mark.parametrize("mod", [personalfr, fedavg_ae])
def test_a_run_whose_every_evaluation_is_nan_is_collected_without_a_best(mod):
    """Every evaluation NaN (here: a held-out set with no entry, so RMSE has nothing to average;
    a diverged run gives the same) used to make ``collect`` fail with numpy's "All-NaN slice
    encountered" after the whole run: the result is kept, ``best`` is None, ``final`` the NaN one."""
    r = generate("tiny", seed=1)
    none = np.zeros(0, np.int64)
    task = ae_train.prepare((r.users, r.items, r.values), (none, none, np.zeros(0)), r.n_users, r.n_items)
    cfg = FedAEConfig(rounds=2, fraction=1.0, local_epochs=1, hidden=HIDDEN, batch=10, eval_every=1)
    _, res, _ = _run(mod, task, 3, cfg)
    assert [h["round"] for h in res["history"]] == [1, 2]
    assert all(np.isnan(h["rmse"]) and h["n"] == 0 for h in res["history"])
    assert res["best"] is None
    assert res["final"] is res["history"][-1]
    assert res["client_flops"] > 0


def test_config_refuses_nesterov_without_momentum_and_dropout_of_one():
    """``momentum=0`` (plain SGD) with the default ``nesterov=True``, and ``dropout=1``, passed the
    config's checks and then failed inside every client once the run had started ("Nesterov
    momentum needs momentum > 0", "dropout must be in [0, 1)"), naming no configuration key."""
    from fedsim.config import ConfigError

    # each names the key as the user sets it, not the class PersonalFR and FedAvg-AE share
    with pytest.raises(ConfigError) as e:
        FedAEConfig(momentum=0.0)
    assert str(e.value) == ("nesterov: Nesterov momentum needs momentum > 0 (for plain SGD set momentum=0 and "
                            "nesterov=false)") and e.value.key == "nesterov"
    with pytest.raises(ConfigError, match=r"^nesterov: "):
        FedAEConfig.from_strings(["momentum=0"])
    with pytest.raises(ConfigError) as e:
        FedAEConfig(dropout=1.0)
    assert str(e.value) == "dropout must be below 1 (it is the rate of units dropped), got 1.0"
    assert e.value.key == "dropout"
    # plain SGD, said so, trains
    cfg = FedAEConfig(rounds=1, fraction=1.0, local_epochs=1, hidden=HIDDEN, batch=10, momentum=0.0, nesterov=False)
    _, res, _ = _run(fedavg_ae, _task(), 3, cfg)
    assert res["client_flops"] > 0 and np.isfinite(res["history"][-1]["rmse"])


@pytest.mark.parametrize("mod", [personalfr, fedavg_ae])
def test_more_clients_than_users_names_clients_as_the_user_sets_it(mod):
    """The two protocols share FedAEConfig: more clients than users was refused as
    "FedAEConfig.clients = 100 ...", a class the user never named, for a value the user may not
    have set. The check of the configuration against the data (``spec.check_data``, before the
    run: also every sweep point's) says whether it was the default; ``build`` says the same without."""
    from fedsim.config import ConfigError

    spec = mod.SPEC
    data = generate("tiny")  # 30 users
    tail = ("is more than the 30 users of the data: each client holds at least one user (give clients <= 30, "
            "or 0 for one user per client)")
    with pytest.raises(ConfigError) as e:
        spec.check_data(FedAEConfig(), data, frozenset())
    assert str(e.value) == f"clients = 100 (the default) {tail}" and e.value.key == "clients"
    with pytest.raises(ConfigError) as e:
        spec.check_data(FedAEConfig(clients=31), data, frozenset({"clients"}))
    assert str(e.value) == f"clients = 31 {tail}" and e.value.key == "clients"
    assert spec.check_data(FedAEConfig(clients=30), data, frozenset({"clients"})) is None
    with pytest.raises(ConfigError) as e:
        spec.build(SimNetwork(seed=0), data, FedAEConfig(clients=31, rounds=1, hidden=HIDDEN))
    assert str(e.value) == f"clients = 31 {tail}" and e.value.key == "clients"


def test_config_refuses_no_hidden_layer():
    """``hidden=()`` (``--set hidden=``, ``hidden = []`` in a config file) passed the config's
    checks and failed in the server's model init as a bare ValueError, a traceback of the run."""
    from fedsim.config import ConfigError

    with pytest.raises(ConfigError) as e:
        FedAEConfig(hidden=())
    assert str(e.value) == "hidden must name at least one layer width (comma separated, e.g. 256,128), got none"
    assert e.value.key == "hidden"
    with pytest.raises(ConfigError, match=r"^hidden must name"):
        FedAEConfig.from_strings(["hidden="])
    assert FedAEConfig(hidden=(8,)).hidden == (8,)


def test_the_flop_figures_the_docs_quote_for_one_ml1m_user():
    """docs/personalfr.md's orientation paragraph (one ML1M user: n = 3706, 149 training items, dense
    encoder, dropout 0.5) recomputed from ``train_flops``, ``sgd_flops`` and ``clip_coef``'s count. It
    said "10 + 2 FLOPs per parameter" for the SGD step and the clipping: the step (weight decay,
    Nesterov momentum, update) counts 8 and the clipping norm 2, and 10 a parameter is what gives
    the 1.98 it quotes (12 would give 1.96)."""
    import re
    from pathlib import Path

    text = " ".join((Path(__file__).resolve().parents[1] / "docs" / "personalfr.md").read_text().split())
    m = re.search(r"costs ([\d.]+) MFLOP forward\+backward with the full model and ([\d.]+) MFLOP with the active "
                  r"decoder, ratio ([\d.]+); adding the SGD step and clipping on the parameters each side updates "
                  r"\(([\d.]+) M vs ([\d.]+) M; (\d+) \+ (\d+) FLOPs per parameter\) brings it to about ([\d.]+)", text)
    assert m, "the paragraph moved: update this test"
    full_mf, act_mf, ratio, whole_m, upd_m, step_f, clip_f, total = m.groups()
    n, k = 3706, 149
    full = ae.train_flops([n, 256, 128], [128, 256, n], 1, dropout=0.5)
    active = ae.train_flops([n, 256, 128], [128, 256, k], 1, dropout=0.5)
    assert (float(full_mf), float(act_mf), float(ratio)) == (round(full / 1e6, 2), round(active / 1e6, 2),
                                                             round(full / active, 2))
    whole = 66_176 + 513 * n  # the whole model FedAvg's client updates
    updated = (n * 256 + 256 + 256 * 128 + 128) + act.active_count(ae.init_params(4, np.random.default_rng(0)), k)
    assert (float(whole_m), float(upd_m)) == (round(whole / 1e6, 2), round(updated / 1e6, 2))
    step = optim.sgd_flops(1, momentum=0.9, nesterov=True, weight_decay=5e-4)
    _, coef, clip = optim.clip_coef({"g": np.zeros(1)}, 1.0)  # an unclipped step: the norm's count
    assert coef is None and (int(step_f), int(clip_f)) == (step, clip) == (8, 2)
    per = step + clip
    assert float(total) == round((full + per * whole) / (active + per * updated), 2) == 1.98


def test_ndcg_over_test_items_of_a_diverged_model_is_nan():
    """A NaN logit was sorted last, so a diverged model scored a plausible NDCG (here 1 / log2(3)
    for the one positive ranked second) while its RMSE would be NaN; checked_eval takes NaN sums
    as a diverged model's, and the metric now says so."""
    assert math.isnan(ae_train.ndcg_test_items(np.array([np.nan, 0.1]), np.array([1.0, 0.0]), k=2))
    assert math.isnan(ae_train.ndcg_test_items(np.array([np.inf, 0.1]), np.array([0.0, 1.0]), k=2))
    assert ae_train.ndcg_test_items(np.array([0.0, 0.1]), np.array([1.0, 0.0]), k=2) == 1 / np.log2(3)
