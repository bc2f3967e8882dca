"""fedsim.privacy's framework: the network tap, the views (an attack reads only what its view
allows), the metrics (against hand computations and brute force)."""

from __future__ import annotations

import gc
from dataclasses import replace
import math

import numpy as np
import pytest

from fedsim.kernel import AsyncioNetwork, NetworkConfigError, SimNetwork, TcpNetwork
from fedsim.kernel.codec import decode_message
from fedsim.privacy import Guess, Public, Recorder, ViewSpec, build_view, capture, score_guess, summarize
from fedsim.privacy.attacks import Attack, run_attack
from fedsim.privacy.audit import known_answer_ratings
from fedsim.privacy.metrics import auc
from fedsim.privacy.views import Observed, Packet, View
from fedsim.protocols import REGISTRY
from fedsim.protocols.fedrecpp import FedRecPPConfig


def _run(proto, net, rec=None):
    spec = REGISTRY[proto]
    data, cfg = spec.tiny(4, 2, 0)
    if rec is not None:
        rec.attach(net)
    job = spec.build(net, data, cfg)
    return job.collect(net.run())


@pytest.mark.parametrize("make", [lambda: SimNetwork(seed=2, profile="wan"), lambda: AsyncioNetwork(seed=2)])
def test_the_tap_sees_every_copy_with_its_row_and_payload(make):
    net = make()
    rec = Recorder()
    res = _run("fedrecpp", net, rec)
    rows = net.ledger.rows
    assert len(rec) == len(rows) > 0
    assert all(e[0] is r for e, r in zip(rec.entries, rows))  # the ledger's own rows, in order
    for row, payload, n in rec.entries:
        assert n == 0
        kind, doc = decode_message(payload.encoded.data)
        assert kind == row[6]
        assert len(payload.encoded.data) + net.framing_bytes == row[7]  # the size the ledger charged
    # an observer changes nothing: the same run without it gives the same parameters and ledger
    again = make()
    res2 = _run("fedrecpp", again)
    np.testing.assert_array_equal(res.params["V"], res2.params["V"])
    assert again.tap is None and len(again.ledger) == len(rows)


def test_recorder_filters_bound_what_it_keeps():
    net = SimNetwork(seed=1)
    rec = Recorder(rounds=[1], kinds=["gradients"], nodes=["client/0001"])
    _run("fedrec", net, rec)
    kept = [(row[1], row[6], row[2], row[3]) for row, p, _ in rec.entries if p is not None]
    assert kept and all(r == 1 and k == "gradients" and "client/0001" in (s, d) for r, k, s, d in kept)
    assert len(rec) == len(net.ledger)  # every row is still there


def test_tcp_refuses_a_tap_and_a_second_tap_is_refused():
    net = TcpNetwork(seed=1, processes=1)
    Recorder().attach(net)
    with pytest.raises(NetworkConfigError, match="tap"):
        _run("fedrec", net)
    with pytest.raises(ValueError):
        Recorder().attach(net)


@pytest.fixture(scope="module")
def pp_capture():
    cfg = FedRecPPConfig(d=4, T=2, rho=1.0, eta=2)
    return capture("fedrecpp", known_answer_ratings(n_users=10), cfg, seed=5,
                   net=SimNetwork(seed=5, profile="wan"))


def test_server_view_holds_exactly_what_the_server_sent_and_received(pp_capture):
    cap = pp_capture
    v = build_view(ViewSpec.server(), cap.recorder, cap.public)
    led = cap.result.ledger
    expect = led.select(dst="server", fate="delivered").totals().messages + led.select(src="server").totals().messages
    assert len(v) == expect
    for m in v:
        assert isinstance(m, Observed)
        assert m.receiver == "server" or m.outgoing
        assert m.kind != "noise"  # the server never sees the noise


def test_collusion_view_keeps_the_channel_anonymous(pp_capture):
    cap = pp_capture
    den = sorted(cap.result.info["denoisers"])
    v1 = build_view(ViewSpec.colluding("denoiser", 1), cap.recorder, cap.public)
    vall = build_view(ViewSpec.colluding("denoiser"), cap.recorder, cap.public)
    assert v1.nodes == frozenset({"server", den[0]}) and vall.nodes == frozenset({"server", *den})
    noise1 = v1.select("noise", incoming=True)
    noise_all = vall.select("noise", incoming=True)
    assert noise1 and len(noise_all) > len(noise1)
    assert all(m.sender is None and m.receiver == den[0] for m in noise1)
    assert all(m.sender is None for m in noise_all)
    # the opaque references are not the ledger's sequence numbers
    assert {m.ref for m in noise_all}.isdisjoint(set(range(len(cap.result.ledger))))


def test_network_view_has_sizes_and_times_only(pp_capture):
    cap = pp_capture
    v = build_view(ViewSpec.network(("server", "denoiser")), cap.recorder, cap.public)
    assert v and all(isinstance(p, Packet) for p in v)
    p = v.messages[0]
    with pytest.raises(AttributeError):
        p.payload
    assert not hasattr(p, "__dict__") and "payload" not in Packet.__slots__  # nothing can be attached
    noise = [p for p in v if p.kind == "noise"]
    assert noise and all(p.sender is None for p in noise)
    rx = [p.rx_start for p in v]
    assert rx == sorted(rx)  # the observer's own timeline


class _Spy(Attack):
    """An attack that tries to read beyond its view and records what it found."""

    name = "spy"

    def __init__(self, spec):
        self.view = spec
        self.found = {}

    def run(self, view):
        self.found["type"] = type(view)
        self.found["attrs"] = set(View.__slots__)
        self.found["payloads"] = [getattr(m, "payload", "absent") for m in view]
        self.found["referents"] = [type(x).__name__ for x in gc.get_referents(view)]
        return {}


def test_an_attack_gets_its_view_object_and_nothing_else(pp_capture):
    cap = pp_capture
    spy = _Spy(ViewSpec.network(("server",)))
    run_attack(spy, cap.recorder, cap.public)
    assert spy.found["type"] is View
    assert spy.found["payloads"] and set(spy.found["payloads"]) == {"absent"}  # a network view has no payloads
    # what the view object refers to: its spec, the public facts, node ids and its messages only
    assert not {"Recorder", "Ledger", "SimNetwork", "Capture", "Result"} & set(spy.found["referents"])
    spy2 = _Spy(ViewSpec.server())
    run_attack(spy2, cap.recorder, cap.public)
    assert all(p is None or isinstance(p, dict) for p in spy2.found["payloads"])
    assert not {"Recorder", "Ledger", "SimNetwork", "Capture", "Result"} & set(spy2.found["referents"])


def test_round_windows_keep_setup_and_drop_other_rounds(pp_capture):
    cap = pp_capture
    v = build_view(ViewSpec.server(), cap.recorder, cap.public, rounds=[1])
    rounds = {m.round for m in v}
    assert 1 in rounds and -1 in rounds and 0 not in rounds
    assert {m.kind for m in v if m.round == -1} == {"assign"}


# ---------------------------------------------------------------------------------------------
# metrics


def _brute_auc(scores, pos):
    p = scores[pos]
    n = scores[~pos]
    tot = sum((a > b) + 0.5 * (a == b) for a in p for b in n)
    return tot / (len(p) * len(n))


def test_auc_matches_brute_force():
    rng = np.random.default_rng(3)
    for _ in range(20):
        s = rng.integers(0, 4, size=15).astype(float)
        s[rng.random(15) < 0.2] = -np.inf
        pos = rng.random(15) < 0.4
        if pos.all() or not pos.any():
            continue
        assert auc(s, pos) == pytest.approx(_brute_auc(s, pos))



def test_auc_and_spearman_refuse_a_nan_instead_of_ranking_it_first():
    # a NaN sorted above every number: auc gave a NaN-scored positive the top rank (1.0 here,
    # where the two numbers alone say 0.0), spearman correlated a NaN estimate as the largest
    from fedsim.privacy.attacks.size import spearman

    with pytest.raises(ValueError, match="score 0 is NaN"):
        auc(np.array([np.nan, 0.0, 1.0]), np.array([True, False, False]))
    with pytest.raises(ValueError, match="3 scores but a mask of 2"):
        auc(np.array([0.0, 1.0, 2.0]), np.array([True, False]))
    with pytest.raises(ValueError, match="NaN"):
        spearman(np.array([np.nan, 1.0, 2.0]), np.array([3.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match="3 values against 2"):
        spearman(np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0]))
    # what they compute where every value is a number, by hand
    assert auc(np.array([-np.inf, 0.0, 1.0]), np.array([True, False, False])) == 0.0
    assert auc(np.array([0.5, 0.5, 1.0, 0.0]), np.array([True, False, True, False])) == 0.875
    assert spearman(np.array([3.0, 1.0, 2.0]), np.array([30.0, 10.0, 20.0])) == pytest.approx(1.0)
    assert spearman(np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0])) == pytest.approx(-1.0)

def test_score_guess_by_hand():
    # catalogue of 10, truth {1, 2, 3}; the attack saw {1, 2, 4, 5} and claims {1, 4}
    g = Guess(np.array([1, 2, 4, 5]), np.array([0.9, 0.2, 0.8, 0.1]), np.array([1, 4]))
    s = score_guess(g, np.array([1, 2, 3]), 10)
    assert s["precision"] == 0.5 and s["recall"] == pytest.approx(1 / 3)
    assert s["f1"] == pytest.approx(2 * 0.5 * (1 / 3) / (0.5 + 1 / 3))
    assert s["exact"] == 0.0
    # AUC: positives 1 (0.9), 2 (0.2), 3 (-inf); negatives 4 (0.8), 5 (0.1) and five unseen (-inf)
    pairs = [(0.9, 0.8), (0.9, 0.1)] + [(0.9, -np.inf)] * 5 + [(0.2, 0.8), (0.2, 0.1)] + [(0.2, -np.inf)] * 5 \
        + [(-np.inf, 0.8), (-np.inf, 0.1)] + [(-np.inf, -np.inf)] * 5
    expect = sum((a > b) + 0.5 * (a == b) for a, b in pairs) / len(pairs)
    assert s["auc"] == pytest.approx(expect)
    # random guess of 2 among the 4 seen, of which 2 are true: precision 1/2, recall 2 * 1/2 / 3
    assert s["precision_rand"] == 0.5 and s["recall_rand"] == pytest.approx(1 / 3)
    assert s["exact_rand"] == 0.0  # |claim| != |truth|
    exact = score_guess(Guess.of_set([1, 2, 3], pool=[1, 2, 3, 4]), np.array([1, 2, 3]), 10)
    assert exact["exact"] == 1.0 and exact["auc"] == 1.0
    assert exact["exact_rand"] == pytest.approx(1 / math.comb(4, 3))


def test_a_guess_with_a_nan_score_or_a_claim_outside_its_pool_is_refused():
    # auc ranks NaN above every number: a NaN-scored positive would make a perfect AUC
    with pytest.raises(ValueError, match="NaN"):
        Guess(np.array([1, 2]), np.array([np.nan, 0.0]), np.array([1]))
    with pytest.raises(ValueError, match=r"claims \[7\]"):
        Guess(np.array([1, 2]), np.array([1.0, 0.0]), np.array([1, 7]))
    Guess(np.array([1, 2]), np.array([-np.inf, 0.0]), np.array([2]))  # -inf is a score


def test_fcf_line_scores_a_zero_gradient_as_telling_nothing():
    from fedsim.privacy.attacks import FCFLine
    from fedsim.privacy.views import Observed, Public, View, ViewSpec
    from fedsim.protocols.fcf import FCFConfig

    class Doc:
        def __init__(self, p):
            self.p = p

        def value(self):
            return self.p

    Q = np.random.default_rng(0).normal(size=(30, 4))
    msgs = [("model", 0, "server", "client/0000", {"Q": Q}),
            ("gradients", 0, "client/0000", "server", {"grad": np.zeros((30, 4))})]
    obs = tuple(Observed(i, k, r, s, rc, 0, 0.0, s == "server", Doc(p)) for i, (k, r, s, rc, p) in enumerate(msgs))
    view = View(ViewSpec.server(), Public("fcf", FCFConfig(d=4), "server", ("client/0000",), 30),
                frozenset({"server"}), obs, None)
    g = FCFLine().run(view)["client/0000"]
    assert g.predicted.size == 0 and not g.scores.any()


def test_summarize_interval_and_seed_spread():
    rows = [{"precision": x, "seed": s} for s, x in [(0, 1.0), (0, 0.0), (1, 1.0), (1, 1.0)]]
    out = summarize(rows, keys=["precision"])
    assert out["precision"] == 0.75 and out["users"] == 4
    assert out["precision_ci"] == pytest.approx(1.96 * np.std([1, 0, 1, 1], ddof=1) / 2)
    assert out["precision_seed_sd"] == pytest.approx(np.std([0.5, 1.0], ddof=1))


def test_view_public_is_what_the_protocol_makes_public(pp_capture):
    v = build_view(ViewSpec.server(), pp_capture.recorder, pp_capture.public)
    assert isinstance(v.public, Public) and v.public.protocol == "fedrecpp" and v.public.n_items == 90


def test_the_python_example_of_docs_privacy_runs(monkeypatch, tmp_path, capsys):
    import re
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    doc = Path(__file__).resolve().parents[1] / "docs" / "privacy.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(), re.S)
    assert blocks
    ns: dict = {}
    for b in blocks:
        exec(compile(b, str(doc), "exec"), ns)
    assert ns["summarize"](ns["rows"])["exact"] == 1.0


def test_audit_targets_bound_the_users_recorded_and_attacked():
    # AuditTask.targets (privacy_audit's sgd_targets): only a seeded sample of clients is recorded
    # and attacked. The recorder used to keep every message to or from the server, so every
    # client's upload was recorded and scored whatever targets said.
    from fedsim.seeding import node_rng
    from fedsim.studies.privacy import AttackSpec, AuditTask, run_task

    data = known_answer_ratings(n_users=20)
    cfg = REGISTRY["fedrec"].Config("PMF(S)", d=4, T=2, lr=0.01, rho=1.0, strategy="ua", T_predict=0)
    task = AuditTask("t", "fedrec", {}, cfg, data, None, 0, None, None, 5,
                     (AttackSpec("sgd_chain", (), (1,), "1 round"), AttackSpec("intersection", (), None, "2 rounds"),
                      AttackSpec("size_only", (), (1,), "1 round")))
    names = [f"client/{u:04d}" for u in range(20)]
    tg = {names[i] for i in node_rng(0, "privacy:targets").choice(20, size=5, replace=False)}
    out = run_task(task)
    for row in out["rows"]:
        scored = {x["target"] for x in row["scored"]}
        assert scored and scored <= tg, (row["attack"], sorted(scored))
        assert row["users"] == len(scored) <= 5
    assert 0 < out["sizes"][0]["size_users"] <= 5
    # nothing of the other clients was recorded: an unlimited task attacks more of them
    full = run_task(replace(task, targets=None))
    assert max(r["users"] for r in full["rows"]) > 5


def test_a_negative_count_of_colluding_nodes_is_refused(pp_capture):
    # count=-1 sliced the sorted node ids to "all but the last" and labelled it "server+-1 denoiser"
    with pytest.raises(ValueError, match="count"):
        ViewSpec.colluding("denoiser", -1)
    with pytest.raises(ValueError, match="count"):
        ViewSpec.role("denoiser", -2)
    assert build_view(ViewSpec.colluding("denoiser", 0), pp_capture.recorder, pp_capture.public).nodes == {"server"}


def test_scoring_a_target_without_a_true_set_names_it():
    from fedsim.privacy import score_inference

    with pytest.raises(ValueError, match="client/0007"):
        score_inference({}, {"client/0000": np.array([1])}, 5, ["client/0007"])


def test_linking_by_size_does_not_depend_on_the_tasks_place_in_the_grid():
    # Opaque references were keyed by the task's label, which numbers the task in its grid
    # (privacy_audit: "{protocol}-{index}-s{seed}"), and noise_linking by size breaks ties between
    # same-sized messages by reference: one configuration and seed linked 0.552 or 0.707 depending
    # on which other protocols the grid held. Many users here share a size (24..26 items each).
    from fedsim.kernel import NetSpec
    from fedsim.studies.privacy import AttackSpec, AuditTask, run_task

    data = known_answer_ratings(n_users=30, per_user=(24, 26))
    cfg = FedRecPPConfig(d=4, T=2, rho=1.0, eta=1)
    links = tuple(AttackSpec("noise_linking", (("use", u),), None, "2 rounds") for u in ("size", "time"))
    task = AuditTask("fedrecpp-000-s0", "fedrecpp", {"eta": "1", "profile": "wan"}, cfg, data, None, 0,
                     NetSpec(profile="wan"), (), None, links)
    results = [run_task(replace(task, label=label))["links"] for label in
               ("fedrecpp-000-s0", "fedrecpp-007-s0", "fedrecpp-031-s0")]
    by_size = [next(r["link_accuracy"] for r in res if r["attack"] == "noise_linking[size]") for res in results]
    assert 0.0 < by_size[0] < 1.0  # ties to break: neither all nor none linked
    assert by_size[1] == by_size[0] and by_size[2] == by_size[0]
    untimed = [[{k: v for k, v in r.items() if not k.endswith("_s")} for r in res] for res in results]
    assert untimed[1] == untimed[0] and untimed[2] == untimed[0]


def _row(seq, src, dst, src_role, dst_role, kind, anon, t=0.0, nbytes=100):
    # a ledger row by hand (fedsim.kernel.ledger.ROW_COLUMNS), delivered at t
    return [seq, 1, src, dst, src_role, dst_role, kind, nbytes, nbytes, 0, t, t, t, t, t, "delivered", False, anon, ""]


def test_simultaneous_messages_at_different_nodes_are_not_ordered_by_the_runs_sending_order():
    # two clients each send their upload to the server and, right after, their noise anonymously
    # to denoiser d; on the ideal profile every time is 0. Each node's own arrival order is real;
    # the interleaving of the server's and d's arrivals is not observed by anyone, and listing it
    # in sending order (upload a, noise, upload b, noise) named each noise's sender: the upload just
    # before it. The view lists each node's arrivals in its own order, nodes by id.
    rows = [_row(0, "a", "server", "client", "server", "gradients", False),
            _row(1, "a", "d", "client", "denoiser", "noise", True),
            _row(2, "b", "server", "client", "server", "gradients", False),
            _row(3, "b", "d", "client", "denoiser", "noise", True)]
    rec = [(r, None, 0) for r in rows]
    pub = Public("fedrecpp", None, "server", ("a", "b", "d"), 10)
    for spec in (ViewSpec.colluding("denoiser"), ViewSpec.network(("server", "denoiser"))):
        v = build_view(spec, rec, pub)
        assert [(m.kind, m.sender, m.receiver) for m in v] == [
            ("noise", None, "d"), ("noise", None, "d"), ("gradients", "a", "server"), ("gradients", "b", "server")]
    # a later time still comes later, whatever the node
    rows[1][13] = rows[1][14] = 1.0
    v = build_view(ViewSpec.colluding("denoiser"), rec, pub)
    assert [(m.kind, m.sender) for m in v] == [("noise", None), ("gradients", "a"), ("gradients", "b"), ("noise", None)]


def test_summarize_gives_no_spread_to_equal_scores():
    # 30 users each at F1 2/3: NumPy's sample sd is the rounding error of their mean, and the audit's
    # table printed an interval of "8.082e-17" (and a seed sd of "1.499e-17" for equal per-seed means)
    from fedsim.experiment import format_table

    rows = [{"target": f"client/{u:04d}", "seed": u % 2, "f1": 2 / 3, "precision": 0.1 * (1 + u % 3)}
            for u in range(30)]
    s = summarize(rows, keys=("f1", "precision"))
    assert s["f1_ci"] == 0.0 and s["f1_seed_sd"] == 0.0 and s["users"] == 30
    assert s["precision_ci"] > 0.0
    assert format_table([s], ["f1", "f1_ci", "f1_seed_sd"], ".4g").splitlines()[1].split() == ["0.6667", "0", "0"]
    one = summarize([{"f1": 0.5}], keys=("f1",))
    assert one["f1"] == 0.5 and math.isnan(one["f1_ci"])
