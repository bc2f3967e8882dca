"""fedsim.privacy on runs that did not go as planned: lost uploads, clients that dropped out, a
deadline. An attack can only read what reached the adversary; the audit says whom it scored,
whom it attacked and whom it left out."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.kernel import NetSpec
from fedsim.kernel.ledger import DST, KIND, ROUND, SRC, STATUS
from fedsim.privacy import capture, observed_clients, summarize
from fedsim.privacy.attacks import IMIA, ImpliedRatings
from fedsim.privacy.audit import attack_capture, known_answer_ratings
from fedsim.protocols.fedrec import FedRecConfig


@pytest.fixture(scope="module")
def lossy():
    # 20 users, a fifth of every client's messages lost, a server that waits 5 s for a round
    cfg = FedRecConfig("PMF(B)", d=4, T=3, rho=1.0, deadline=5.0)
    return capture("fedrec", known_answer_ratings(n_users=20), cfg, net=NetSpec(loss=0.2).build(3), seed=3)


def test_attack_capture_scores_the_clients_whose_upload_the_server_saw(lossy):
    # attack_capture scored every client with a true set: the 3 whose round-1 upload was lost,
    # which no attack on the uploads can have read, counted as misses: precision and exact
    # recovery 0.85 over 20 users for an attack that recovered every upload it saw exactly
    lost = sorted({row[SRC] for row, *_ in lossy.recorder.entries
                   if row[ROUND] == 1 and row[KIND] == "gradients" and row[STATUS] == "lost"})
    seen = observed_clients(lossy, [1])
    assert len(lost) == 3 and len(seen) == 17 and not set(lost) & set(seen)
    assert seen == sorted({row[SRC] for row, *_ in lossy.recorder.entries if row[ROUND] == 1 and
                           row[DST] == "server" and row[KIND] == "gradients" and row[STATUS] == "delivered"})
    run, rows = attack_capture(ImpliedRatings(), lossy, rounds=[1])
    s = summarize(rows)
    assert sorted(run.inference) == seen and [r["target"] for r in rows] == seen
    assert s["users"] == 17 and s["precision"] == 1.0 and s["exact"] == 1.0
    # IMIA: the same population (its figures over 17 users, not 20 with three empty guesses)
    run, rows = attack_capture(IMIA(), lossy, rounds=[1])
    assert [r["target"] for r in rows] == seen == sorted(run.inference)
    # an int window reads as build_view does: every round up to it
    assert observed_clients(lossy, 1) == sorted(set(observed_clients(lossy, [0])) | set(seen))
    # explicit targets are still scored as given (a target not seen: a miss)
    _, rows = attack_capture(ImpliedRatings(), lossy, rounds=[1], targets=[lost[0], seen[0]])
    assert [(r["target"], r["precision"]) for r in rows] == [(lost[0], 0.0), (seen[0], 1.0)]


def test_audit_rows_say_whom_they_scored_attacked_and_left_out_and_score_accuracy_on_the_clients_present():
    # run_task's rows said only how many users were scored, and its RMSE counted the clients that
    # dropped out (their zero user factors) as if they had trained. Here 4 of 20 clients drop out
    # at 0.05 s on wan, after their round-0 upload: rounds 1 and 2 miss their uploads.
    from fedsim.protocols import REGISTRY
    from fedsim.studies.privacy import AttackSpec, AuditTask, run_task

    data = known_answer_ratings(n_users=20)
    test = (np.asarray(data.users), np.asarray(data.items), np.asarray(data.values))
    cfg = FedRecConfig("PMF(B)", d=4, T=3, rho=1.0, deadline=1.0, lr=0.5, init_scale=0.5)
    spec = NetSpec(profile="wan", dropout=0.3, window=(0.05, 0.05))
    task = AuditTask("t", "fedrec", {}, cfg, data, test, 0, spec, None, None,
                     (AttackSpec("implied_ratings", (), (1,), "1 round"),
                      AttackSpec("imia", (("max_users", 5),), (1,), "1 round"),
                      AttackSpec("intersection", (), (0, 1, 2), "3 rounds")))
    out = run_task(task)
    net = spec.build(0)
    res = REGISTRY["fedrec"].build(net, data, cfg).collect(net.run())  # the same run
    assert res.info["lost_users"] == [2, 4, 5, 12]
    keep = ~np.isin(test[0], res.info["lost_users"])
    present = res.model.evaluate(*(a[keep] for a in test))[1]
    assert present != res.model.evaluate(*test)[1]
    got = {r["attack"]: r for r in out["rows"]}
    for r in out["rows"]:
        assert r["accuracy"] == present and r["missing_uploads"] == 8 and r["lost_clients"] == 4
    ir, imia, inter = got["implied_ratings"], got["imia"], got["intersection"]
    assert (ir["users"], ir["attacked"], ir["unseen"], ir["precision"], ir["exact"]) == (16, 16, 4, 1.0, 1.0)
    assert (imia["users"], imia["attacked"], imia["unseen"]) == (5, 5, 4)
    # the clients that dropped out uploaded in round 0: seen in the window, scored, one upload each;
    # called in rounds 1 and 2 without an upload: partly seen (in one round's window, nobody is)
    assert (inter["users"], inter["attacked"], inter["unseen"], inter["partly_seen"]) == (20, 20, 0, 4)
    assert ir["partly_seen"] == imia["partly_seen"] == 0


def test_privacy_audit_refuses_a_network_that_loses_messages(tmp_path):
    # its runs have no deadline: a loss was a DeadlockError in a worker process (a dropout after a
    # client's last upload, a complete-looking table with that client's user factor zeroed)
    from fedsim.experiment import UsageError, run_scenario

    with pytest.raises(UsageError) as exc:
        run_scenario("privacy_audit", data="tiny", out=tmp_path / "o", net=NetSpec(loss=0.05), quiet=True,
                     overrides={"protocols": ["fedrec"], "models": ["PMF(B)"], "rhos": [1], "iterations": 2,
                                "defences": [], "workers": 1})
    assert str(exc.value) == (
        "privacy_audit runs its protocols with no deadline on a network that loses no message; this one does "
        "(loss 0.05): a loss would stop a run in a deadlock, a client that drops out after its last upload would "
        "leave its user factor zeroed in the accuracy column; audit a faulty run with fedsim.privacy.capture and a "
        "deadline (docs/privacy.md)")
    assert list(tmp_path.iterdir()) == []


def test_a_window_holds_the_setup_of_the_rounds_it_reaches_only():
    # FPL with secure aggregation over two networks (epochs of 2 rounds): the second exchanges its
    # keys at setup label -3 (key_setup_round(2)), after round 1. Every negative label passed every
    # window, so a view of the first epoch (rounds up to 1) held the second epoch's key exchange.
    from collections import Counter

    from fedsim.kernel import SimNetwork
    from fedsim.privacy import Public, Recorder, ViewSpec, build_view
    from fedsim.protocols import REGISTRY
    from fedsim.protocols.fpl import FPLConfig, key_setup_round

    data = known_answer_ratings(n_users=6, n_items=60, per_user=(10, 12)).binarize()
    cfg = FPLConfig(clients_per_round=6, triples=4, rounds=2, d=3, pi=0.5, lr=0.1, secure_aggregation=True,
                    secagg_neighbours=2)
    rec, res = Recorder(), None
    for e in range(2):
        net = SimNetwork(seed=e)
        rec.attach(net)
        job = REGISTRY["fpl"].build(net, data, cfg, **({} if res is None else {"resume": res}))
        res = job.collect(net.run())
    assert key_setup_round(2) == -3
    assert Counter(r[1] for r, *_ in rec.entries if r[1] < 0) == {-1: 12, -3: 12}
    pub = Public("fpl", cfg, "server", tuple(job.clients), data.n_items)

    def setup(rounds):
        return Counter(m.round for m in build_view(ViewSpec.server(), rec, pub, rounds=rounds) if m.round < 0)

    assert setup(1) == setup((0, 1)) == setup((1,)) == {-1: 12}  # the first epoch: its own keys only
    assert setup(2) == setup((2,)) == setup(None) == {-1: 12, -3: 12}
    assert setup(()) == {}  # no training round: no setup it precedes


def test_clients_whose_uploads_the_recorder_left_out_are_not_scored_as_misses():
    # a recorder keeping the payloads of 5 clients: the server saw all 20 uploads, the audit can
    # attack 5. attack_capture scored the 15 others as misses (precision 0.25 over 20 users for an
    # attack exact on every upload it read); they are left out, and the audit's rows count them.
    from fedsim.studies.privacy import AttackSpec, AuditTask, run_task

    data = known_answer_ratings(n_users=20)
    cfg = FedRecConfig("PMF(B)", d=4, T=2, rho=1.0)
    names = [f"client/{u:04d}" for u in range(20)]
    cap = capture("fedrec", data, cfg, seed=3, nodes=names[:5])
    assert observed_clients(cap, [1]) == names
    assert observed_clients(cap, [1], recorded=True) == names[:5]
    run, rows = attack_capture(ImpliedRatings(), cap, rounds=[1])
    assert run.unrecorded > 0 and sorted(run.inference) == names[:5]
    s = summarize(rows)
    assert s["users"] == 5 and s["precision"] == 1.0 and s["exact"] == 1.0
    # run_task: a recorder whose rounds leave out the window's uploads scores nobody, and says so
    task = AuditTask("t", "fedrec", {}, cfg, data, None, 3, None, (0,), None,
                     (AttackSpec("implied_ratings", (), (1,), "1 round"),))
    row = run_task(task)["rows"][0]
    assert (row["users"], row["attacked"], row["unseen"], row["unrecorded_users"]) == (0, 0, 0, 20)


def test_an_fpl_audit_row_scores_p_at_10_on_the_clients_present():
    # the FPL accuracy beside the attacks ranked a client that dropped out by its zeroed user factor
    # (item biases alone), as if FPL had trained it; checked against a per-user computation on the
    # split's own test evaluator over the clients still present
    from fedsim.data import generate
    from fedsim.math.bpr import bpr_scores
    from fedsim.math.metrics import precision_at, top_n
    from fedsim.protocols import REGISTRY
    from fedsim.protocols.fpl import FPLConfig
    from fedsim.studies.fpl import prepare
    from fedsim.studies.privacy import AttackSpec, AuditTask, run_task

    split = prepare(generate("ml100k-like", seed=2, n_users=30, n_items=150, n_ratings=1500, min_per_user=30),
                    min_interactions=20, protocol="test")
    cfg = FPLConfig(clients_per_round=split.n_users, triples=5, rounds=3, d=4, pi=0.5, deadline=5.0)
    spec = NetSpec(profile="wan", dropout=0.3, window=(0.0, 0.3))
    task = AuditTask("t", "fpl", {}, cfg, split, None, 0, spec, None, None, (AttackSpec("fpl_sign"),))
    out = run_task(task)
    net = spec.build(0)
    res = REGISTRY["fpl"].build(net, split.train, cfg).collect(net.run())  # the same run
    lost = res.info["lost_users"]
    assert lost and len(lost) < split.n_users
    th = res.params["theta"].astype(np.float64)
    ev = split.evaluators["test"]
    per = precision_at(top_n(bpr_scores(res.params["P"], th[:, :4], th[:, 4]), ev.exclude, ev.n), ev.truth, ev.n,
                       per_user=True)
    everyone = float(np.nanmean(per))
    per[lost] = np.nan
    present = float(np.nanmean(per))
    assert present != everyone
    assert [r["accuracy"] for r in out["rows"]] == [present] * len(out["rows"]) and out["rows"]


def _fpl_lossy_run(first_only):
    # FPL on 6 clients, every one called each round; the server loses an eighth of what it sends
    # (seed 28: client/0003's models of rounds 0 and 1 are lost, every stop arrives), and waits
    # 1 s for a round's updates
    from fedsim.kernel import SimNetwork
    from fedsim.kernel.links import Faults
    from fedsim.privacy import Public, Recorder
    from fedsim.privacy.audit import Capture, truth_of
    from fedsim.protocols import REGISTRY
    from fedsim.protocols.fpl import FPLConfig

    data = known_answer_ratings(n_users=6, n_items=60, per_user=(10, 12)).binarize()
    cfg = FPLConfig(clients_per_round=6, triples=8, rounds=4, d=3, pi=1.0, lr=0.1, deadline=1.0)
    net = SimNetwork(seed=28, faults=Faults(loss=0.12, roles=("server",)))
    rec = Recorder(first_only=first_only).attach(net)
    job = REGISTRY["fpl"].build(net, data, cfg)
    res = job.collect(net.run())
    pub = Public("fpl", cfg, "server", tuple(job.clients), int(data.n_items))
    return Capture("fpl", cfg, rec, pub, truth_of("fpl", data, job), res, net, 0.0, 28)


def test_first_only_keeps_each_clients_first_delivered_model_and_the_reference_attack_reads_it():
    # Recorder(first_only=("model",)) kept each client's first model SENT: client/0003's, lost, so
    # it trained its first upload (round 2) on the round-2 model, which was not kept, and IMIA
    # could not attack it: a miss (F1 0) among the scored clients. It keeps the first delivered.
    cap = _fpl_lossy_run(("model",))
    models = [(row[DST], row[ROUND], row[STATUS], p is not None) for row, p, _ in cap.recorder.entries
              if row[KIND] == "model"]
    assert [(r, s) for d, r, s, _ in models if d == "client/0003"] == [
        (0, "lost"), (1, "lost"), (2, "delivered"), (3, "delivered")]
    assert [(d, r) for d, r, s, kept in models if kept] == [
        ("client/0000", 0), ("client/0001", 0), ("client/0002", 0), ("client/0004", 0), ("client/0005", 0),
        ("client/0003", 2)]
    first_up = min(row[ROUND] for row, *_ in cap.recorder.entries
                   if row[SRC] == "client/0003" and row[KIND] == "update" and row[STATUS] == "delivered")
    assert first_up == 2
    run, rows = attack_capture(IMIA(), cap)
    # the same answers, bit for bit, as from a recorder that kept every model
    full = _fpl_lossy_run(())
    run_full, rows_full = attack_capture(IMIA(), full)
    assert sorted(run.inference) == sorted(run_full.inference) == [f"client/{u:04d}" for u in range(6)]
    for u, g in run.inference.items():
        np.testing.assert_array_equal(g.pool, run_full.inference[u].pool)
        np.testing.assert_array_equal(g.scores, run_full.inference[u].scores)
    assert [r["f1"] for r in rows] == [r["f1"] for r in rows_full]
    assert {r["target"]: round(r["f1"], 3) for r in rows}["client/0003"] == 0.308


def test_first_only_settles_candidates_by_their_fate_known_after_observe():
    # the transports call observe with a row still in flight; its fate comes later (a loss drawn in
    # the link model, a receiver offline at delivery, a flow model's late loss)
    from fedsim.kernel.ledger import ARRIVAL, Ledger
    from fedsim.privacy import Recorder

    led = Ledger()
    rec = Recorder(first_only=("model",))
    rec.networks = 1

    def send(dst, t):
        row = led.new_row(0, "server", dst, "server", "client", "model", 10, 0, 0, t, False)
        rec.observe(row, ("payload", dst, t))
        return row

    def kept(dst):
        return [p for row, p, _ in rec.entries if row[DST] == dst and p is not None]

    def settle(row, fate, at=None):
        row[STATUS] = fate
        if at is not None:
            row[ARRIVAL] = at

    # a: the first copy still in flight when the second is sent; the first arrives: it alone is kept
    a1, a2 = send("a", 0.0), send("a", 1.0)
    settle(a1, "delivered", 2.0)
    settle(a2, "delivered", 3.0)
    send("a", 4.0)
    assert kept("a") == [("payload", "a", 0.0)]
    # b: the first copy lost, the second in flight at the third's send, then delivered
    b1 = send("b", 0.0)
    settle(b1, "lost")
    b2 = send("b", 1.0)
    b3 = send("b", 2.0)
    # (reading entries settles what is known: b1 lost, b2 and b3 still in flight, both kept)
    assert [p is not None for row, p, _ in rec.entries if row[DST] == "b"] == [False, True, True]
    settle(b2, "delivered", 5.0)
    settle(b3, "delivered", 4.0)  # it overtook b2 (a flow-level link model): the client had it first
    assert kept("b") == [("payload", "b", 2.0)]
    # c: every copy lost: nothing kept (the client trained on none of them)
    for t in (0.0, 1.0):
        settle(send("c", t), "lost")
    assert kept("c") == []
    # a later copy, once the first delivered is known, is not kept
    send("b", 9.0)
    assert kept("b") == [("payload", "b", 2.0)]
    assert [p is not None for row, p, _ in rec.entries if row[DST] == "b"] == [False, False, True, False]


def test_partly_seen_counts_clients_called_in_a_round_of_the_window_whose_upload_was_not_seen():
    # the leakage rows said how many clients were scored, not how many of them the server saw in
    # only some of the rounds it called them in: an attack over rounds read fewer of their uploads
    from fedsim.privacy import partly_seen, upload_rounds

    cap = _fpl_lossy_run(("model",))  # client/0001 lost its models of rounds 1 and 2, client/0003 of 0 and 1
    every = frozenset(range(4))
    assert upload_rounds(cap) == {
        **{f"client/{u:04d}": (every, every) for u in (0, 2, 4, 5)},
        "client/0001": (every, frozenset({0, 3})), "client/0003": (every, frozenset({2, 3}))}
    assert partly_seen(cap) == ["client/0001", "client/0003"]
    assert partly_seen(cap, [0]) == []  # one round: client/0003 is unseen there, not partly seen
    assert partly_seen(cap, [1, 2]) == ["client/0003"]  # client/0001: no upload in the window, unseen
    assert partly_seen(cap, [2, 3]) == ["client/0001"] and partly_seen(cap, 1) == ["client/0001"]
    assert partly_seen(cap, None, ["client/0000", "client/0003"]) == ["client/0003"]


def test_clients_fpl_did_not_draw_in_a_round_are_not_partly_seen():
    # FPL calls 3 of its 6 clients per round: everyone is seen in fewer rounds than the window
    # holds, and nobody is partly seen, since every upload the server expected came
    from fedsim.protocols.fpl import FPLConfig
    from fedsim.studies.privacy import AttackSpec, AuditTask, run_task

    data = known_answer_ratings(n_users=6, n_items=60, per_user=(10, 12)).binarize()
    cfg = FPLConfig(clients_per_round=3, triples=8, rounds=4, d=3, pi=0.5, lr=0.1)
    task = AuditTask("t", "fpl", {}, cfg, data, None, 0, None, None, None,
                     (AttackSpec("fpl_sign"), AttackSpec("fpl_never_negative", (), (0, 1), "2 rounds")))
    out = run_task(task)
    rows = {r["attack"]: r for r in out["rows"]}
    assert rows["fpl_sign"]["partly_seen"] == rows["fpl_never_negative"]["partly_seen"] == 0
    assert (rows["fpl_sign"]["users"], rows["fpl_sign"]["unseen"]) == (5, 1)  # one client never drawn
    # the same run under a Recorder: 3 calls per round, each client in fewer than the 4 rounds
    from fedsim.privacy import capture, partly_seen, upload_rounds

    cap = capture("fpl", data, cfg, seed=0)
    per = upload_rounds(cap)
    assert sum(len(c) for c, _ in per.values()) == 12 and all(c == s for c, s in per.values())
    assert any(len(s) < 4 for _, s in per.values()) and partly_seen(cap) == []


def test_first_only_keeps_no_copy_still_in_flight_when_its_run_ended():
    # a run stopped at `until` (or deadlocked) leaves copies in flight for ever: the first model
    # to a client was kept as a candidate that could still arrive, and read after the run, as the
    # client's first delivered model, which it never got
    from fedsim.kernel import LinkSpec, SimNetwork
    from fedsim.privacy import Recorder

    async def server(ctx):
        await ctx.send("slow", "model", {"v": 1})
        await ctx.send("fast", "model", {"v": 2})

    async def client(ctx):
        await ctx.receive("model")

    net = SimNetwork(seed=0)
    rec = Recorder(first_only=("model",)).attach(net)
    net.add_node("server", server, role="server")
    net.add_node("slow", client, link=LinkSpec(latency=10.0))
    net.add_node("fast", client, link=LinkSpec(latency=0.001))
    res = net.run(until=1.0, strict=False)
    assert res.unfinished == ["slow"]
    kept = {row[DST]: (row[STATUS], p is not None) for row, p, _ in rec.entries}
    assert kept == {"slow": ("in_flight", False), "fast": ("delivered", True)}


def test_imia_on_a_sample_scores_its_sample_answered_or_not():
    # IMIA with max_users attacks a seeded sample of the clients it saw. attack_capture scored
    # every client seen, the ones outside the sample as misses (here 10 users, 6 of them never
    # attacked: F1 diluted to 0.19); run_task scored only the sample members it answered for, so
    # under secure aggregation (every upload masked, nothing to answer) the row had 0 users: the
    # 10 clients seen were neither scored nor counted anywhere, where IMIA without a sample and
    # every other attack score them as misses. Now both score the sample, answered or not.
    from fedsim.privacy.metrics import score_inference
    from fedsim.studies.privacy import AttackSpec, AuditTask, run_task

    data = known_answer_ratings(n_users=10)
    cap = capture("fedrec", data, FedRecConfig("PMF(B)", d=4, T=2, rho=1.0), seed=1)
    run, rows = attack_capture(IMIA(max_users=4), cap, rounds=[1])
    assert len(run.sample) == 4 and set(run.sample) <= set(observed_clients(cap, [1]))
    assert [r["target"] for r in rows] == list(run.sample) == sorted(run.inference)
    solo = score_inference(run.inference, cap.truth, cap.public.n_items, run.sample)
    assert rows == solo
    assert attack_capture(IMIA(), cap, rounds=[1])[0].sample is None  # no sample: every client seen
    assert attack_capture(IMIA(max_users=10), cap, rounds=[1])[0].sample is None

    cfg = FedRecConfig("PMF(B)", d=4, T=2, rho=1.0, secure_aggregation=True)
    task = AuditTask("t", "fedrec", {}, cfg, data, None, 0, NetSpec(), None, None,
                     (AttackSpec("implied_ratings", (), (1,), "1 round"),
                      AttackSpec("imia", (("max_users", 4),), (1,), "1 round"),
                      AttackSpec("imia", (), (1,), "1 round")))
    got = [(r["attack"], r["users"], r["attacked"], r["unseen"], r["f1"], r["f1_rand"]) for r in run_task(task)["rows"]]
    assert got == [("implied_ratings", 10, 0, 0, 0.0, 0.0), ("imia", 4, 0, 0, 0.0, 0.0), ("imia", 10, 0, 0, 0.0, 0.0)]


def test_audit_missing_uploads_count_fedrecpp_uploads_the_server_gave_up_on():
    """FedRec++'s missing records named no kind (per round: groups and clients left out), so the
    audit's ``missing_uploads`` read 0 for a run that lost uploads. Counted by hand here: 4 of 20
    clients, all ordinary, drop out at 0.05 s on wan after their round-0 upload; in rounds 1 and 2
    the server gives up on their gradients (4 x 2) and, as every group lost a member (the result's
    records: all groups left out), on each denoiser's sum (2 denoisers x 2 rounds)."""
    from fedsim.protocols import REGISTRY
    from fedsim.protocols.fedrecpp import FedRecPPConfig
    from fedsim.studies.privacy import AttackSpec, AuditTask, run_task

    data = known_answer_ratings(n_users=20)
    test = (np.asarray(data.users), np.asarray(data.items), np.asarray(data.values))
    cfg = FedRecPPConfig(d=4, T=3, rho=1.0, eta=2, deadline=1.0)
    spec = NetSpec(profile="wan", dropout=0.3, window=(0.05, 0.05))
    out = run_task(AuditTask("t", "fedrecpp", {}, cfg, data, test, 0, spec, None, None,
                             (AttackSpec("implied_ratings", (), (1,), "1 round"),)))
    net = spec.build(0)
    res = REGISTRY["fedrecpp"].build(net, data, cfg).collect(net.run())  # the same run
    lost, denoisers = res.info["lost_clients"], res.info["denoisers"]
    assert len(lost) == 4 and not set(lost) & set(denoisers) and len(denoisers) == 2
    # (the result's records, one per round and kind: every group broken by its lost members,
    # counted under gradients, and each denoiser's sum missing)
    assert [(r["round"], r["kind"], r["groups"]) for r in res.info["missing"]] == [
        (1, "gradients", 2), (1, "denoised", 0), (2, "gradients", 2), (2, "denoised", 0)]
    expected = len(lost) * 2 + len(denoisers) * 2
    assert expected == 12
    assert len(out["rows"]) == 1 and out["rows"][0]["missing_uploads"] == expected


def test_audit_missing_uploads_count_personalfr_updates_not_only_its_indices():
    """PersonalFR's clients upload their indices once and an ``update`` each round they are
    drawn; the audit counted only the kinds its attacks read (``indices``), so the updates the
    server gave up on were left out. By hand from the result's own records (indices and update,
    per round): a fifth of the clients' messages lost on wan, the server waiting 5 s."""
    from fedsim.protocols import REGISTRY
    from fedsim.studies.privacy import AttackSpec, AuditTask, run_task

    spec = REGISTRY["personalfr"]
    data, cfg = spec.tiny(8, 3, 0)
    cfg = cfg.replace(deadline=5.0)
    net_spec = NetSpec(profile="wan", loss=0.2)
    out = run_task(AuditTask("t", "personalfr", {}, cfg, data, None, 0, net_spec, None, None,
                             (AttackSpec("personalfr_indices", (), None, "all"),)))
    net = net_spec.build(0)
    res = spec.build(net, data, cfg).collect(net.run())  # the same run
    kinds = {r["kind"] for r in res.info["missing"]}
    assert kinds == {"indices", "update"}
    expected = sum(r["clients"] for r in res.info["missing"])
    assert expected > sum(r["clients"] for r in res.info["missing"] if r["kind"] == "indices")
    assert len(out["rows"]) == 1 and out["rows"][0]["missing_uploads"] == expected


def test_an_audit_run_with_every_client_gone_has_no_accuracy_says_why_and_warns_nothing():
    # every client drops out at 0.05 s (after its round-0 upload): FedRec's RMSE over the clients
    # present was a mean over no rating, NaN with NumPy's "Mean of empty slice" and "invalid value
    # encountered in scalar divide" warnings, and nothing in the rows or the report said why
    import warnings

    from fedsim.experiment import load_scenario
    from fedsim.studies.privacy import AttackSpec, AuditTask, run_task

    data = known_answer_ratings(n_users=20)
    test = (np.asarray(data.users), np.asarray(data.items), np.asarray(data.values))
    cfg = FedRecConfig("PMF(B)", d=4, T=3, rho=1.0, deadline=1.0, lr=0.5, init_scale=0.5)
    tasks = [AuditTask("t", "fedrec", {"protocol": "fedrec", "model": "PMF(B)", "rho": 1}, cfg, data, test, 0,
                       NetSpec(profile="wan", dropout=1.0, window=(0.05, 0.05)), None, None,
                       (AttackSpec("implied_ratings", (), (1,), "1 round"),)),
             AuditTask("u", "fedrec", {"protocol": "fedrec", "model": "PMF(B)", "rho": 1}, cfg, data, test, 1,
                       NetSpec(profile="wan"), None, None, (AttackSpec("implied_ratings", (), (1,), "1 round"),))]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        outs = [run_task(t) for t in tasks]
    assert [f"{w.category.__name__}: {w.message}" for w in seen] == []
    gone, whole = outs[0]["rows"][0], outs[1]["rows"][0]
    assert gone["lost_clients"] == 20 and np.isnan(gone["accuracy"]) and gone["accuracy_metric"] == "rmse"
    assert gone["unevaluated"] == outs[0]["info"]["unevaluated"] == "all 20 users with test ratings dropped out"
    assert np.isfinite(whole["accuracy"]) and "unevaluated" not in whole and outs[1]["info"]["unevaluated"] is None
    note = load_scenario("privacy_audit").unevaluated_note
    assert note(tasks, outs) == ("**Not evaluated.** 1 run(s) had no accuracy to report (fedrec (model PMF(B), "
                                 "rho 1), seed 0: all 20 users with test ratings dropped out): their NaN accuracy "
                                 "is no score.")
    assert note(tasks[1:], outs[1:]) is None


def test_personalfr_idle_rows_tells_a_lost_decoder_from_a_lost_update():
    # uncompressed PersonalFR with kept momentum, the server's messages lost at 15 % (seed 17): the
    # decoders of rounds 2 and 3 never reached client/0000 and that of round 3 never reached client/0002,
    # who trained in neither round, so their buffers did not move. The attack took every decoder sent as
    # one trained on and read their later updates off a wrong path, every untouched row claimed
    # (precision 0.30 and 0.40 for those two, 0.78 over the 6 clients, 4 exact). It now tries both for
    # a round without an update and keeps what the next update's untouched rows follow
    from fedsim.kernel import SimNetwork
    from fedsim.kernel.links import Faults
    from fedsim.privacy.attacks import PersonalFRIdleRows
    from fedsim.protocols import REGISTRY

    spec = REGISTRY["personalfr"]
    data, cfg = spec.tiny(6, 2, 0)
    cfg = cfg.replace(compression=False, fraction=0.5, rounds=6, local_epochs=2, deadline=5.0)
    cap = capture("personalfr", data, cfg, net=SimNetwork(seed=17, faults=Faults(loss=0.15, roles=("server",))),
                  seed=17)
    lost = [(r[DST], r[ROUND]) for r, _, _ in cap.recorder.entries if r[STATUS] == "lost" and r[KIND] == "decoder"]
    assert lost == [("client/0000", 2), ("client/0000", 3), ("client/0002", 3), ("client/0001", 6)]
    run, rows = attack_capture(PersonalFRIdleRows(), cap)
    s = summarize(rows)
    assert (s["users"], len(run.inference), s["precision"], s["recall"], s["exact"]) == (6, 6, 1.0, 1.0, 1.0)


def test_personalfr_idle_rows_reads_a_client_whose_first_update_was_lost():
    # kept momentum, the clients' messages lost at 20 % (seed 5): the first updates of three clients were
    # lost, so none of their updates was trained from a zero buffer, and S (their local steps per round,
    # read off such an update) and their buffers were unknown: the attack answered for none of them
    # (3 of 6 clients, precision 0.50). It now tries S along with the rounds they trained in
    from fedsim.kernel import SimNetwork
    from fedsim.kernel.links import Faults
    from fedsim.privacy.attacks import PersonalFRIdleRows
    from fedsim.protocols import REGISTRY

    spec = REGISTRY["personalfr"]
    data, cfg = spec.tiny(6, 2, 0)
    cfg = cfg.replace(compression=False, fraction=0.5, rounds=6, local_epochs=2, deadline=5.0)
    cap = capture("personalfr", data, cfg, net=SimNetwork(seed=5, faults=Faults(loss=0.2)), seed=5)
    ups: dict = {}
    for r, _, _ in cap.recorder.entries:
        if r[KIND] == "update":
            ups.setdefault(r[SRC], []).append((r[ROUND], r[STATUS]))
    assert sorted(u for u, v in ups.items() if v[0][1] == "lost") == ["client/0001", "client/0003", "client/0005"]
    run, rows = attack_capture(PersonalFRIdleRows(), cap)
    s = summarize(rows)
    assert (s["users"], len(run.inference), s["precision"], s["recall"], s["exact"]) == (6, 6, 1.0, 1.0, 1.0)


def _fedavg_capture(seed, faults):
    from fedsim.kernel import SimNetwork
    from fedsim.protocols import REGISTRY

    data, cfg = REGISTRY["fedavg-ae"].tiny(6, 2, 0)
    cfg = cfg.replace(fraction=0.5, rounds=6, local_epochs=2, deadline=5.0)
    return capture("fedavg-ae", data, cfg, net=SimNetwork(seed=seed, faults=faults), seed=seed)


def test_fedavg_idle_rows_tells_a_lost_model_from_a_lost_update():
    # FedAvg-AE with kept momentum, the server's messages lost at 15 % (seed 17): the models of rounds 2
    # and 3 never reached client/0000 and that of round 3 never reached client/0002, who trained in
    # neither round (their buffers did not move); read_updates tries both for a round without an update,
    # as for PersonalFR's decoders (test_personalfr_idle_rows_tells_a_lost_decoder_from_a_lost_update)
    from fedsim.kernel.links import Faults
    from fedsim.privacy.attacks import FedAvgIdleRows

    cap = _fedavg_capture(17, Faults(loss=0.15, roles=("server",)))
    lost = [(r[KIND], r[DST], r[ROUND]) for r, _, _ in cap.recorder.entries if r[STATUS] == "lost"]
    assert lost == [("model", "client/0000", 2), ("model", "client/0000", 3), ("model", "client/0002", 3),
                    ("model", "client/0001", 6)]
    run, rows = attack_capture(FedAvgIdleRows(), cap)
    s = summarize(rows)
    assert (s["users"], len(run.inference), s["precision"], s["recall"], s["exact"]) == (6, 6, 1.0, 1.0, 1.0)


def test_fedavg_idle_rows_reads_a_client_whose_first_update_was_lost():
    # kept momentum, the clients' messages lost at 20 % (seed 5): the first updates of three clients were
    # lost, so none of their updates was trained from a zero buffer: S and the rounds they trained in are
    # tried together (steps_along), as for PersonalFR
    # (test_personalfr_idle_rows_reads_a_client_whose_first_update_was_lost)
    from fedsim.kernel.links import Faults
    from fedsim.privacy.attacks import FedAvgIdleRows

    cap = _fedavg_capture(5, Faults(loss=0.2))
    ups: dict = {}
    for r, _, _ in cap.recorder.entries:
        if r[KIND] == "update":
            ups.setdefault(r[SRC], []).append((r[ROUND], r[STATUS]))
    assert sorted(u for u, v in ups.items() if v[0][1] == "lost") == ["client/0001", "client/0003", "client/0005"]
    run, rows = attack_capture(FedAvgIdleRows(), cap)
    s = summarize(rows)
    assert (s["users"], len(run.inference), s["precision"], s["recall"], s["exact"]) == (6, 6, 1.0, 1.0, 1.0)
