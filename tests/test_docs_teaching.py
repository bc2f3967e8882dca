"""What the protocol pages show of a round, message by message, is what the documented commands
draw: every Mermaid diagram of docs/fedrec.md, fedrecpp.md, fpl.md and personalfr.md is the
`sequence.mmd` of the `fedsim trace ...` command named just before it, and the fields a page says
a message carries are the fields the trace finds in it. (The diagrams were right and pinned by
nothing; fpl.md's step 3 named the math's `up` fields, `is_positive` among them, as what a client
sends, while the wire carries `items` and `rows` and keeps `is_positive` on the client.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from fedsim.studies.trace import trace

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = ("fedrec.md", "fedrecpp.md", "fpl.md", "personalfr.md")


def documented_diagrams():
    """(page, command, diagram) for every ```mermaid block, with the last `fedsim trace ...` before it."""
    out = []
    for page in PAGES:
        text = (DOCS / page).read_text()
        for m in re.finditer(r"```mermaid\n(.*?)```", text, re.S):
            commands = re.findall(r"`(fedsim trace [^`]+)`", text[:m.start()])
            assert commands, f"{page}: a diagram with no command before it"
            out.append(pytest.param(page, commands[-1], m.group(1), id=f"{page}:{commands[-1]}"))
    return out


def run_documented(command: str, out: Path):
    """``trace(...)`` as ``fedsim trace`` runs the command (its options: --clients, --rounds, --set)."""
    args = shlex.split(command)[2:]
    name, opts, sets = args[0], {"clients": 3, "rounds": 1}, []
    it = iter(args[1:])
    for a in it:
        if a in ("--clients", "--rounds"):
            opts[a[2:]] = int(next(it))
        elif a == "--set":
            sets.append(next(it))
        else:
            raise AssertionError(f"an option this test does not read: {a} in {command}")
    return trace(name, out, sets=sets, formats=("mermaid",), **opts)


@pytest.mark.parametrize("page, command, diagram", documented_diagrams())
def test_each_documented_diagram_is_what_its_command_draws(page, command, diagram, tmp_path):
    _, paths = run_documented(command, tmp_path)
    assert paths["mermaid"].read_text().strip() == diagram.strip()


def test_there_is_a_diagram_for_each_protocol_a_teacher_traces():
    commands = {shlex.split(c)[2] for _, c, _ in (p.values for p in documented_diagrams())}
    assert {"fedrec", "fedrecpp", "fpl", "fcf", "personalfr", "fedavg-ae"} <= commands


def test_fpl_message_flow_names_the_fields_its_update_carries(tmp_path):
    text = " ".join((DOCS / "fpl.md").read_text().split())
    step = re.search(r"3\. Client sends `(\w+)` \(((?:`[^`]+`(?:, )?)+)\)", text)
    assert step, "fpl.md's message flow no longer says what a client sends in step 3"
    kind, said = step.group(1), re.findall(r"`(\w+) (\w+)\[([^\]]*)\]`", step.group(2))
    net, _ = trace("fpl", tmp_path, clients=2, rounds=1, formats=("log",))
    sent = [net.payloads[i] for i, r in enumerate(net.ledger.records()) if r["kind"] == kind]
    assert sent, f"no {kind!r} message in the trace"
    for fields in sent:
        assert [(f["name"], f["dtype"], len(f["shape"])) for f in fields] == \
            [(name, dtype, len(dims.split(","))) for name, dtype, dims in said]


def test_the_readable_traces_of_docs_cli_run_quietly(tmp_path, capsys):
    # every command of cli.md's table "Readable traces, protocol by protocol" runs, with no warning or
    # note: the stochastic FedRec row's lr=0.01 keeps it finite (the preset's 0.8 diverges from round 2)
    from fedsim.cli import main

    text = (DOCS / "cli.md").read_text()
    table = text[text.index("**Readable traces, protocol by protocol**"):]
    table = table[:table.index("\n\n", table.index("| protocol |"))]
    commands = re.findall(r"`(fedsim trace [^`]+)`", table)
    assert {shlex.split(c)[2] for c in commands} >= {"fedrec", "fedrecpp", "fpl", "personalfr", "fedavg-ae"}
    for i, command in enumerate(commands):
        args = shlex.split(command)[1:] + ["--rounds", "3", "--html", "--out", str(tmp_path / str(i))]
        assert main(args) == 0, command
        assert capsys.readouterr().err == "", command


@pytest.mark.parametrize("model, label", [("PMF(B)", 2), ("PMF(S)", 1), ("SVD++(S)", 1)])
def test_fedrec_evaluation_labels_against_the_metrics_rounds_as_documented(model, label, tmp_path):
    # docs/fedrec.md: a metrics row's round is the iterations done; PMF(B)'s evaluation messages carry
    # it, the stochastic models' the round of the iteration just done (a trace beside `fedsim run`'s
    # table showed the stochastic evaluation one round earlier, and no page said why)
    from fedsim.experiment.protocol_run import hold_out
    from fedsim.kernel import SimNetwork
    from fedsim.protocols import REGISTRY

    text = " ".join((DOCS / "fedrec.md").read_text().split())
    assert ("the stochastic models' the round of the iteration just done, one less: in `fedsim trace fedrec --eval "
            "--rounds 2 --set \"model=PMF(S)\" --set lr=0.01` the `evaluate` and `eval` of round 0 are `fedsim run`'s "
            "evaluation of round 1") in text
    spec = REGISTRY["fedrec"]
    data, cfg = spec.tiny(3, 2, 0)
    train, test = hold_out(spec, data, 0.2, 0, "tiny")
    net = SimNetwork(seed=0, profile="lan")
    res = spec.build(net, train, cfg.replace(model=model, lr=0.01, eval_every=2), test=test).collect(net.run())
    assert [m["round"] for m in res.metrics] == [2] == [m["iteration"] for m in res.metrics]
    evals = {r["round"] for r in res.ledger.records() if r["kind"] in ("evaluate", "eval")}
    assert evals == {label}  # the evaluation after iteration 2 (eval_every = 2)
