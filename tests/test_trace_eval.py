"""``fedsim trace NAME --eval`` (``trace(..., test_frac=...)``): the protocol's evaluation
messages in the trace. A trace ran the tiny preset without held-out ratings, so no evaluation
message (FedRec's ``evaluate``/``eval``, the autoencoders') was ever in one; with ``--eval`` a
fraction of each user's ratings is held out, split as ``fedsim run`` splits them, and the
protocol evaluates them every round (unless ``--set eval_every=N``). Each view must hold the
evaluation messages exactly as the run's ledger has them."""

from __future__ import annotations

import pytest

from fedsim.experiment import UsageError
from fedsim.protocols import REGISTRY
from fedsim.protocols.contract import check_tiny
from fedsim.studies.trace import TracingNetwork, trace
from test_trace_faults import _traced_networks, assert_page_holds_the_ledger

EVALUATING = ["fedrec", "personalfr", "fedavg-ae"]


def _split_as_fedsim_run(spec, data, frac: float, seed: int):
    """(train, test) of ``data`` as ``fedsim run`` holds ratings out (written out here, not taken
    from the code under test): the most recent ones of an implicit protocol's timestamped data,
    else a per-user random choice from the stream of (seed, "split")."""
    from fedsim.data import per_user_random, temporal_holdout
    from fedsim.seeding import node_rng

    if spec.data == "implicit" and data.timestamps is not None:
        return temporal_holdout(data, frac)
    return per_user_random(data, frac, seed=node_rng(seed, "split"))


@pytest.mark.parametrize("name", EVALUATING)
def test_a_trace_with_test_ratings_holds_each_rounds_evaluation_as_the_ledger_has_it(name, tmp_path):
    spec = REGISTRY[name]
    kinds = spec.kinds_for("evaluation")
    assert kinds  # (what the test is about: each of these protocols declares evaluation kinds)
    # without test ratings (the trace as it was): no evaluation message
    plain, _ = trace(name, tmp_path / "plain", clients=3, rounds=2, formats=("log",))
    assert [r for r in plain.ledger.records() if r["kind"] in kinds] == []

    net, paths = trace(name, tmp_path / "eval", clients=3, rounds=2, test_frac=0.2, formats=("html", "log"))
    rows = list(net.ledger.records())
    # the same run built by hand: the preset's ratings split as fedsim run splits them, evaluated every round
    data, cfg = check_tiny(spec, spec.tiny(3, 2, 0))
    train, test = _split_as_fedsim_run(spec, data, 0.2, 0)
    assert 0 < len(test) < len(data) and len(train) + len(test) == len(data)
    ref = TracingNetwork(seed=0, profile="lan")
    spec.build(ref, train, cfg.replace(eval_every=1), test=test)
    ref.run()
    fields = ("src", "dst", "kind", "round", "bytes", "raw_bytes", "status", "send_time", "arrival_time")
    assert [tuple(r[f] for f in fields) for r in rows] == [tuple(r[f] for f in fields) for r in ref.ledger.records()]
    # every round is evaluated: in each, every client answers the server with its evaluation
    clients = sorted(n for n in net.nodes if net.ledger.roles.get(n) == "client")
    answers = [r for r in rows if r["kind"] in kinds and r["dst"] == "server"]
    by_round: dict[int, list[str]] = {}
    for r in answers:
        by_round.setdefault(r["round"], []).append(r["src"])
    assert len(by_round) == 2 and all(sorted(s) == clients for s in by_round.values()), by_round
    # the page holds every message as the ledger has it, evaluation messages among them
    html = paths["html"].read_text()
    data_page = assert_page_holds_the_ledger(html, net)
    evals = [r for r in rows if r["kind"] in kinds]
    assert [(m["src"], m["dst"], m["kind"], m["round"], m["bytes"]) for m in data_page["messages"]
            if m["kind"] in kinds] == [(r["src"], r["dst"], r["kind"], r["round"], r["bytes"]) for r in evals]
    assert f", evaluated on {len(test)} held-out ratings (test_frac 0.2)" in html
    # the step log: each evaluation message's send once
    log = paths["log"].read_text().splitlines()
    sent = [line for line in log if any(f" sends {k} (" in line for k in kinds)]
    assert len(sent) == len(evals)


def test_an_eval_every_given_is_kept(tmp_path):
    # FedRec with T = 2 and eval_every = 2: the evaluation of iteration 2 only (not every round)
    net, _ = trace("fedrec", tmp_path, clients=2, rounds=2, test_frac=0.2, sets=["eval_every=2"], formats=("log",))
    rounds = sorted({r["round"] for r in net.ledger.records() if r["kind"] == "eval"})
    every, _ = trace("fedrec", tmp_path / "every", clients=2, rounds=2, test_frac=0.2, formats=("log",))
    assert rounds == [2] and sorted({r["round"] for r in every.ledger.records() if r["kind"] == "eval"}) == [1, 2]


def test_an_eval_every_of_the_preset_gives_way_to_every_round(monkeypatch, tmp_path):
    # --eval evaluates every round unless --set eval_every=N (its help, docs/cli.md, trace's
    # docstring), but a preset's own eval_every other than 0 was kept: a plug-in protocol whose
    # tiny preset evaluates every 3rd round traced with --eval --rounds 4 showed round 3's
    # evaluation only (with --rounds 2, none). Here FedRec's preset made to say eval_every=3, as
    # such a plug-in's would
    import fedsim.studies.trace as tr

    made = tr.check_tiny

    def preset_every_3(spec, preset):
        data, cfg = made(spec, preset)
        return data, cfg.replace(eval_every=3)

    monkeypatch.setattr(tr, "check_tiny", preset_every_3)
    net, _ = trace("fedrec", tmp_path, clients=2, rounds=4, test_frac=0.2, formats=("log",))
    assert sorted({r["round"] for r in net.ledger.records() if r["kind"] == "eval"}) == [1, 2, 3, 4]
    given, _ = trace("fedrec", tmp_path / "given", clients=2, rounds=4, test_frac=0.2, sets=["eval_every=2"],
                     formats=("log",))
    assert sorted({r["round"] for r in given.ledger.records() if r["kind"] == "eval"}) == [2, 4]


def test_cli_trace_eval_says_how_many_evaluation_messages_the_page_holds(monkeypatch, tmp_path, capsys):
    from fedsim.cli import main
    from test_trace_faults import _page_data

    made = _traced_networks(monkeypatch)
    out = tmp_path / "t"
    assert main(["trace", "fedrec", "--eval", "--rounds", "2", "--out", str(out)]) == 0
    (net,) = made
    rows = list(net.ledger.records())
    kinds = REGISTRY["fedrec"].kinds_for("evaluation")
    data = _page_data((out / "trace.html").read_text())
    n = sum(m["kind"] in kinds for m in data["messages"])
    assert n == sum(r["kind"] in kinds for r in rows) and n > 0
    lines = capsys.readouterr().out.splitlines()
    names = "trace.html, sequence.mmd, timeline.svg, steps.log" + (", timeline.png" if (out / "timeline.png").exists()
                                                                    else "")
    assert lines[:2] == [f"traced {len(rows)} messages; wrote {out}/: {names}",
                         f"{n} of them evaluation messages (evaluate, eval), on 0.2 of each user's ratings held out"]


@pytest.mark.parametrize("argv, message", [
    (["demo", "--eval"], "cannot trace demo with --eval: it makes its own data, and holds none out to evaluate"),
    (["fcf", "--eval"], "cannot trace fcf with --eval: it declares no evaluation message kind, so no evaluation of "
                        "it goes over the network (fedsim run fcf evaluates its result outside it); trace it "
                        "without --eval"),
    (["fedrec", "--set", "eval_every=1"], "--set eval_every: fedrec evaluates on held-out test ratings, and a trace "
                                          "has none without --eval: add --eval (fedsim trace fedrec --eval --set "
                                          "eval_every=1)"),
])
def test_cli_trace_refuses_an_evaluation_it_cannot_show_in_one_line_and_writes_nothing(argv, message, tmp_path,
                                                                                        capsys):
    # (--set eval_every=1 without --eval was "cannot trace fedrec with 3 clients: eval_every needs
    # held-out test ratings (test=...; fedsim run: test_frac > 0)", blaming the clients)
    from fedsim.cli import main

    assert main(["trace", *argv, "--out", str(tmp_path / "t")]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("frac", [True, -0.1, 0.95, "0.2", None])
def test_trace_refuses_a_test_frac_that_is_no_fraction(frac, tmp_path):
    with pytest.raises(UsageError) as err:
        trace("fedrec", tmp_path, test_frac=frac)
    assert str(err.value) == f"test_frac: expected a number from 0 (no evaluation) to 0.9, got {frac!r}"
    assert list(tmp_path.iterdir()) == []


def test_a_test_frac_that_holds_no_rating_out_is_refused_naming_the_preset(tmp_path):
    from fedsim.protocols.presets import tiny_ratings

    n = len(tiny_ratings(1, 0))
    assert int(0.01 * n) == 0  # (one user's ratings: 1% of them is none)
    with pytest.raises(UsageError) as err:
        trace("fedrec", tmp_path / "t", clients=1, test_frac=0.01)
    assert str(err.value) == (f"fedrec: test_frac = 0.01 holds out no rating of the fedrec preset's data "
                              f"(tiny[1 users]) ({n} ratings of 1 user): give a larger test_frac, or 0 for no "
                              "test split")
    assert list(tmp_path.iterdir()) == []
