"""FedRec++ runs that do not go as planned: a denoiser that is still gathering one round's noise
when the next round's noise arrives, a lost key relay under secure noise, malformed messages the
denoiser and the server read. Tiny synthetic data only."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fedsim.kernel import SimNetwork
from fedsim.protocols import REGISTRY, fedrecpp

from conftest import RewritingContext


class _Faulty(RewritingContext):
    """A client's context that swallows its round-0 ``noise`` (``drop``: as if it were lost) and,
    on a denoiser, sleeps ``delay`` seconds before gathering round 0's noise (busy elsewhere)."""

    def __init__(self, ctx, drop: bool, delay: float) -> None:
        super().__init__(ctx, lambda kind, payload: payload)
        self._drop, self._delay = drop, delay

    async def send(self, dst, kind, payload, **kw):
        if self._drop and kind == "noise" and self._ctx.round == 0:
            return None
        return await self._ctx.send(dst, kind, payload, **kw)

    async def gather(self, kind, **kw):
        if kind == "noise" and kw.get("round") == 0 and self._delay:
            await self._ctx.sleep(self._delay)
        return await self._ctx.gather(kind, **kw)


def _late_denoiser_run(delay: float, *, secure: bool = False, T: int = 2):
    spec = REGISTRY["fedrecpp"]
    data, cfg = spec.tiny(4, T, 0)
    cfg = cfg.replace(deadline=1.0, dtype="float64", secure_noise=secure, secagg_neighbours=2)
    net = SimNetwork(seed=0, profile="lan")
    job = spec.build(net, data, cfg)
    ordinary = sorted(n for n in net.nodes if n.startswith("client"))
    # the server's first draw after V picks the denoiser: find it from a clean run's result
    net0 = SimNetwork(seed=0, profile="lan")
    den = spec.build(net0, data, cfg.replace(T=0)).collect(net0.run()).info["denoisers"]
    dropper = [c for c in ordinary if c not in den][0]

    def wrap(name):
        async def actor(ctx, *args, **kwargs):
            return await fedrecpp.client(_Faulty(ctx, name == dropper, delay if name in den else 0.0),
                                         *args, **kwargs)
        return actor

    for name in ordinary:
        net.nodes[name].actor = wrap(name)
    res = job.collect(net.run())
    return res, net


@pytest.mark.parametrize("secure", [False, True])
def test_a_late_denoiser_never_mixes_the_next_rounds_noise_into_its_sum(secure):
    """Round 0: one noise message is lost, so the denoiser's round-0 sum cannot be complete; the
    denoiser is also late (it gathers 0.5 s after the collect), so the server gives up on it at its
    deadline and starts round 1 while the denoiser still waits. Round 1's noise then arrived inside
    the denoiser's round-0 gather, which counted it as round 0's (a gather with ``round`` took
    later rounds then; now it leaves them in the mailbox), completed, and sent a sum of two
    rounds' noise, labelled round 1 (the label of the last message it read): the server took it as round 1's sum and subtracted noise it never
    received, silently (V off by up to 0.016 here, no record). The run must equal the one whose denoiser is on
    time: round 0 left out (recorded), round 1 exact."""
    late, net = _late_denoiser_run(0.5, secure=secure)
    ontime, _ = _late_denoiser_run(0.0, secure=secure)
    # the lost noise message shows as the denoiser's missing sum; its group of 4 left out
    assert ontime.info["missing"] == [{"round": 0, "kind": "denoised", "clients": 1, "groups": 1, "left_out": 4}]
    assert late.info["missing"] == ontime.info["missing"]
    np.testing.assert_array_equal(late.params["V"], ontime.params["V"])
    # and the late run did use round 1's noise for round 1: a sum was sent and used
    den = late.info["denoisers"][0]
    sums = [r for r in net.ledger.records() if r["kind"] == "denoised" and r["src"] == den]
    assert [r["round"] for r in sums] == [1]


class _LosesPeersTo(RewritingContext):
    """The server's context, whose ``peers`` broadcast does not reach ``victim`` (lost)."""

    def __init__(self, ctx, victim: str) -> None:
        super().__init__(ctx, lambda kind, payload: payload)
        self._victim = victim

    async def broadcast(self, dsts, kind, payload):
        if kind == "peers":
            dsts = [d for d in dsts if d != self._victim]
        return await self._ctx.broadcast(dsts, kind, payload)


def _lost_peers_run(name: str, victim_of):
    from fedsim.protocols import fedrec, fpl

    spec = REGISTRY[name]
    module = {"fedrec": fedrec, "fpl": fpl, "fedrecpp": fedrecpp}[name]
    data, cfg = spec.tiny(8, 2, 5)
    option = "secure_noise" if name == "fedrecpp" else "secure_aggregation"
    cfg = cfg.replace(**{option: True}, secagg_neighbours=2, deadline=5.0, dtype="float64",
                      **({"eta": 2} if name == "fedrecpp" else {}))
    net0 = SimNetwork(seed=5, profile="lan")
    clean = spec.build(net0, data, cfg).collect(net0.run())
    victim = victim_of(clean)
    net = SimNetwork(seed=5, profile="lan")
    job = spec.build(net, data, cfg)

    async def server(ctx, *args, **kwargs):
        return await module.server(_LosesPeersTo(ctx, victim), *args, **kwargs)
    net.nodes["server"].actor = server
    return job.collect(net.run()), net, victim, clean


def test_a_lost_peers_message_ends_secure_noise_in_a_result_not_a_deadlock():
    """The server relays the public keys (``peers``); the one to an ordinary client is lost. That
    client waited for ``peers`` alone, so a run with a deadline, which otherwise ends in a result,
    ended in a DeadlockError naming it. It now waits for ``peers`` or ``stop``: it cannot mask, so
    it sends nothing more; the server, which holds its key, waits for its upload in every round up
    to the deadline and leaves its group out of every round (recorded), the other group exact."""
    res, net, victim, clean = _lost_peers_run("fedrecpp", lambda r: sorted(r.info["assignment"])[0])
    assert res.run.complete
    den = res.info["assignment"][victim]
    size = 1 + sum(1 for a in res.info["assignment"].values() if a == den)
    # its gradients missing broke its group (counted there); its denoiser, short of its noise, sent no sum
    assert res.info["missing"] == [
        r for t in range(2) for r in ({"round": t, "kind": "gradients", "clients": 1, "groups": 1, "left_out": size},
                                      {"round": t, "kind": "denoised", "clients": 1, "groups": 0, "left_out": 0})]
    assert [r["kind"] for r in net.ledger.records() if r["src"] == victim] == ["keys"]
    # the other group is exact: V is FedRec's at rho = 0 on its members' ratings alone
    from fedsim.data import Ratings
    from fedsim.protocols import fedrec

    data, cfg = REGISTRY["fedrecpp"].tiny(8, 2, 5)
    kept = [c for c, a in res.info["assignment"].items() if a != den] + [d for d in res.info["denoisers"] if d != den]
    keep = np.isin(data.users, [int(c.split("/")[1]) for c in kept])
    sub = Ratings(data.users[keep], data.items[keep], data.values[keep], n_users=data.n_users, n_items=data.n_items)
    ref = fedrec.central_twin(sub, fedrec.FedRecConfig(d=cfg.d, T=2, lr=cfg.lr, lam=cfg.lam, rho=0.0, dtype="float64",
                                                       init_scale=cfg.init_scale), seed=5)
    np.testing.assert_allclose(res.params["V"], ref.V, rtol=0, atol=1e-9)
    assert res.info["denoisers"] == clean.info["denoisers"] and len(kept) == 8 - size


@pytest.mark.parametrize("name", ["fedrec", "fpl"])
def test_a_lost_peers_message_ends_secure_aggregation_in_a_result_not_a_deadlock(name):
    """The same for FedRec's and FPL's secure aggregation (the same key exchange): no deadlock;
    the client sends nothing after its key, and every round that waits for its masked upload is
    skipped (no dropout recovery), so the model is the initial one."""
    res, net, victim, _ = _lost_peers_run(name, lambda r: "client/0003")
    assert res.run.complete
    assert [r["kind"] for r in net.ledger.records() if r["src"] == victim] == ["keys"]
    assert res.info["missing"] == [{"round": t, "kind": "masked", "clients": 1, "skipped": True} for t in range(2)]
    spec = REGISTRY[name]
    data, cfg = spec.tiny(8, 2, 5)
    cfg = cfg.replace(secure_aggregation=True, secagg_neighbours=2, deadline=5.0, dtype="float64",
                      **{spec.rounds_field: 0})
    net0 = SimNetwork(seed=5, profile="lan")
    ref = spec.build(net0, data, cfg).collect(net0.run())
    for k, v in ref.params.items():
        if k not in ("U", "P"):
            np.testing.assert_array_equal(res.params[k], v, err_msg=k)


@pytest.mark.parametrize("name", ["fedrecpp", "fedrec", "fpl"])
@pytest.mark.parametrize("payload, why", [(5, "the payload must be a map, got int"),
                                          ({"overflow": False}, "{overflow: true} alone, got {'overflow': False}"),
                                          ({"overflow": 1}, "{overflow: true} alone, got {'overflow': 1}")])
def test_a_malformed_secure_upload_flag_is_an_error_naming_its_sender(name, payload, why):
    # a payload that is not a map was a bare TypeError of the server ('in' on an int), and
    # {overflow: false} (or 1) stopped the run as diverged at that round
    from fedsim.protocols import fedrec, fpl

    spec = REGISTRY[name]
    data, cfg = spec.tiny(4, 2, 0)
    option = "secure_noise" if name == "fedrecpp" else "secure_aggregation"
    cfg = cfg.replace(**{option: True}, secagg_neighbours=2)
    kind = "gradients" if name == "fedrecpp" else "masked"
    net = SimNetwork(seed=1)
    spec.build(net, data, cfg)
    real = {"fedrec": fedrec, "fpl": fpl, "fedrecpp": fedrecpp}[name].client
    from conftest import rewrite_sends, run_to_bad_message

    rewrite_sends(net, [n for n in net.nodes if n.startswith("client")], real,
                  lambda k, p: payload if k == kind else p)
    err, cause = run_to_bad_message(net)
    assert err.node == "server" and cause.kind == kind and cause.round == 0
    assert cause.sender.startswith("client/") and why in str(cause), str(cause)


@pytest.mark.parametrize("payload", [{"t": 0, "expected": -1}, {"t": 0, "expected": 1.5}, {"t": 0.0, "expected": 3},
                                     {"expected": 3}, {"t": 0, "expected": 3, "own": "yes"}, [0, 3]])
def test_a_malformed_collect_stops_the_denoiser_naming_the_server(payload):
    # expected = -1 or 1.5 was a bare ValueError of the denoiser's gather; a missing t a KeyError
    spec = REGISTRY["fedrecpp"]
    data, cfg = spec.tiny(4, 2, 0)
    net = SimNetwork(seed=1)
    spec.build(net, data, cfg)

    class Bad(RewritingContext):
        def __init__(self, ctx):
            super().__init__(ctx, lambda kind, p: payload if kind == "collect" else p)

    async def server(ctx, *args, **kwargs):
        return await fedrecpp.server(Bad(ctx), *args, **kwargs)
    net.nodes["server"].actor = server
    from conftest import run_to_bad_message

    err, cause = run_to_bad_message(net)
    assert err.node.startswith("client/") and cause.sender == "server" and cause.kind == "collect"
    assert f"collect must be {{t: int, expected: int >= 0[, own: bool]}}, got {payload!r}" in str(cause)


def _denoised_count_run(change, *, count_own=True, secure=False):
    """A tiny FedRec++ run (4 clients, one denoiser, 3 ordinary in its group) whose denoiser's
    round-0 ``denoised`` counts go through ``change(items, counts, uploads) -> counts``; returns the
    server's BadMessageError and the round-0 uploads' item ids (the counts' upper bounds)."""
    from conftest import rewrite_sends, run_to_bad_message

    spec = REGISTRY["fedrecpp"]
    data, cfg = spec.tiny(4, 2, 0)
    cfg = cfg.replace(count_own=count_own, secure_noise=secure, secagg_neighbours=2)
    net = SimNetwork(seed=1)
    spec.build(net, data, cfg)
    uploads = []

    def rewrite(kind, p):
        if kind == "gradients":
            uploads.append(np.asarray(p["items"]).tolist())
        if kind == "denoised":
            p = {**p, "counts": change(np.asarray(p["items"]), np.asarray(p["counts"]).copy(), uploads)}
        return p
    rewrite_sends(net, [n for n in net.nodes if n.startswith("client")], fedrecpp.client, rewrite)
    err, cause = run_to_bad_message(net)
    assert err.node == "server" and cause.kind == "denoised" and cause.round == 0
    assert cause.sender.startswith("client/") and cause.sender in str(err)
    assert len(uploads) == 3
    return cause, uploads


def _named(uploads, item):
    return sum(item in u for u in uploads)


@pytest.mark.parametrize("secure", [False, True])
def test_a_denoised_count_above_the_groups_uploads_is_refused_naming_item_and_bound(secure):
    # an inflated count shrank the item's step (|U_i| recovered too small), silently
    def inflate(items, counts, uploads):
        counts[1] = 3 + 1  # more than the 3 uploads of the group can name
        return counts
    cause, uploads = _denoised_count_run(inflate, secure=secure)
    item = int(re.search(r"item (\d+) has", str(cause)).group(1))
    high = _named(uploads, item)
    assert f"denoised counts: item {item} has count 4, outside [-1, {high}] (its group's uploads that name it, " \
           "-1 for the denoiser's own rating)" in str(cause)


def test_a_denoised_count_within_the_group_size_but_above_its_items_bound_is_refused():
    # the bound is per item: the group's uploads that name this very item, not the group's size
    chosen = {}

    def one_above(items, counts, uploads):
        named = np.array([_named(uploads, int(i)) for i in items])
        k = int(np.flatnonzero(named < 3)[0])  # an item fewer than all 3 uploads name
        chosen["item"], chosen["bound"] = int(items[k]), int(named[k])
        counts[k] = named[k] + 1
        return counts
    cause, _ = _denoised_count_run(one_above)
    item, bound = chosen["item"], chosen["bound"]
    assert bound < 3
    assert f"item {item} has count {bound + 1}, outside [-1, {bound}]" in str(cause)


@pytest.mark.parametrize("count_own, value, low", [(True, -2, -1), (False, -1, 0)])
def test_a_denoised_count_below_its_range_is_refused(count_own, value, low):
    # a negative recovered |U_i| froze the item (apply_mean_step skips counts <= 0), silently;
    # without count_own a denoiser never subtracts its own ratings: -1 is out of range too
    def lower(items, counts, uploads):
        counts[0] = value
        return counts
    cause, uploads = _denoised_count_run(lower, count_own=count_own)
    item = int(re.search(r"item (\d+) has", str(cause)).group(1))
    assert f"item {item} has count {value}, outside [{low}, {_named(uploads, item)}]" in str(cause)


def test_float_denoised_counts_are_refused():
    # a float count was truncated into the server's int64 counts
    cause, _ = _denoised_count_run(lambda items, counts, uploads: counts + 0.5)
    assert "denoised counts must be an integer array, got float64" in str(cause)


@pytest.mark.parametrize("bad_id", [40, 2**40])
def test_a_bad_noise_id_before_the_denoiser_has_a_model_is_refused_by_the_denoiser(bad_id):
    # a denoiser that had received no model (c < n: not a participant yet) checked noise ids
    # against the int64 maximum only, summed the bad id, and the server's range check then named
    # the denoiser: the error blamed it for its client's message
    from conftest import rewrite_sends, run_to_bad_message

    spec = REGISTRY["fedrecpp"]
    data, cfg = spec.tiny(4, 1, 0)
    assert data.n_items == 40
    net = SimNetwork(seed=0)
    spec.build(net, data, cfg.replace(c=2))  # seed 0: denoiser client/0001 takes no part in round 0

    def rewrite(kind, p):
        if kind == "noise":
            items = np.asarray(p["items"]).astype(np.int64)
            items[-1] = bad_id  # still distinct
            p = {**p, "items": items}
        return p
    rewrite_sends(net, [n for n in net.nodes if n.startswith("client")], fedrecpp.client, rewrite)
    err, cause = run_to_bad_message(net)
    assert err.node == "client/0001" and cause.sender is None and cause.kind == "noise" and cause.round == 0
    assert str(cause) == f"'noise' from an anonymous sender (round 0): IndexError: noise: item id {bad_id} outside [0, 40)"


def test_a_denoiser_that_did_not_train_this_round_may_not_subtract_its_own_rating():
    # with c < n a denoiser left out of the round sums its group's noise without its own gradients,
    # so no count of its can be -1 (its own rating subtracted): the bound's low end is 0 then
    # (seed 0, c = 2: the denoiser client/0002 is not drawn in round 0, two of its clients are)
    from conftest import rewrite_sends, run_to_bad_message

    spec = REGISTRY["fedrecpp"]
    data, cfg = spec.tiny(6, 2, 0)
    net = SimNetwork(seed=0)
    spec.build(net, data, cfg.replace(c=2))

    def rewrite(kind, p):
        if kind == "denoised":
            counts = np.asarray(p["counts"]).copy()
            counts[0] = -1
            p = {**p, "counts": counts}
        return p
    rewrite_sends(net, [n for n in net.nodes if n.startswith("client")], fedrecpp.client, rewrite)
    err, cause = run_to_bad_message(net)
    assert err.node == "server" and cause.kind == "denoised" and cause.round == 0
    assert cause.sender == "client/0002"
    item = int(re.search(r"item (\d+) has", str(cause)).group(1))
    assert re.search(rf"item {item} has count -1, outside \[0, \d+\]", str(cause))


@pytest.mark.parametrize("secure", [False, True])
def test_clients_that_drop_out_before_their_assign_are_no_breach_of_the_spec(secure, tmp_path, capsys):
    # `fedsim run fedrecpp --dropout 0.4 --set deadline=1` (dropouts at t = 0, before the assign is
    # read) stopped with "error: protocol 'fedrecpp' sent messages its spec does not declare: 'noise'
    # from ordinary to client": a denoiser gone before reading its assign is still a `client` when
    # its group's noise is sent to it (and, with secure noise, so is an ordinary client the server
    # relays the keys to: 'peers' from server to client)
    from fedsim.cli import main
    from fedsim.kernel import NetSpec
    from fedsim.protocols.contract import check_ledger

    spec = REGISTRY["fedrecpp"]
    data, cfg = spec.tiny(6, 2, 0)
    gone_denoiser = False
    for seed in range(4):
        net = NetSpec(profile="lan", dropout=0.4).build(seed)
        res = spec.build(net, data, cfg.replace(deadline=1.0, secure_noise=secure)).collect(net.run())
        gone_denoiser |= bool(set(res.info["denoisers"]) & set(res.run.offline))
        check_ledger(spec, res.ledger)  # raised ContractError
    assert gone_denoiser  # (the case the noise rows are about)
    args = ["run", "fedrecpp", "--set", "T=2", "--dropout", "0.4", "--set", "deadline=1", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "o")] + (["--set", "secure_noise=true"] if secure else [])) == 0
    assert "does not declare" not in capsys.readouterr().err
