"""The command line, sweeps and teaching traces."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from fedsim.cli import main
from fedsim.studies.sweep import parse_grid, run_sweep
from fedsim.protocols import REGISTRY
from fedsim.studies.trace import trace

REPO = Path(__file__).resolve().parents[1]


def fedsim_cmd(*args, cwd=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "fedsim", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


def test_bare_run_prints_accuracy_and_communication_tables(tmp_path):
    res = fedsim_cmd("run", "--out", str(tmp_path / "out"), "--data", "tiny", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "Communication per role" in res.stdout
    assert re.search(r"(rmse|weight_error)", res.stdout, re.I)
    out = tmp_path / "out"
    results = json.loads((out / "results.json").read_text())
    assert results["seed"] == 0 and results["ledger_totals"]["messages"] > 0
    assert {"numpy", "msgpack", "python"} <= set(results["versions"])
    assert (out / "report.md").read_text().startswith("# ")
    assert all((out / f"{t}.csv").exists() for t in results["tables"])


@pytest.mark.parametrize("args, message", [
    (["run", "no_such_scenario"], "unknown scenario or protocol 'no_such_scenario'"),
    (["run", "quickstart", "--set", "bogus=1"], "unknown parameter 'bogus'"),
    (["run", "quickstart", "--set", "iterations=many"], "--set iterations: expected int, got 'many'"),
    (["run", "quickstart", "--set", "lr=fast"], "--set lr: expected float, got 'fast'"),
    (["run", "demo", "--set", "rounds"], "--set expects key=value"),
    (["run", "quickstart", "--profile", "moon"], "unknown network profile 'moon'"),
    (["sweep", "demo", "--grid", "bogus=1,2"], "unknown parameter 'bogus'"),
    (["sweep", "demo", "--grid", "rounds=1,x"], "expected int, got 'x'"),
    (["trace", "nothing"], "cannot trace 'nothing'"),
    # one FPL client's positives are the whole catalogue: the actor's check, not a traceback
    (["trace", "fpl", "--clients", "1"], "cannot trace fpl with 1 client"),
    (["trace", "fedrec", "--set", "d=2", "--set", "d=3"], "--set d: given twice"),
    # more clients than the tiny preset has users: a ValueError traceback from its preset
    (["trace", "fedrec", "--clients", "100000"],
     "error: cannot trace fedrec with 100000 clients: tiny presets have 1 to 30 clients, got 100000"),
    # --rounds had no bound: --rounds 100000000 ran until killed
    (["trace", "demo", "--rounds", "1001"],
     "error: cannot trace demo with 1001 rounds: traces have 1 to 1000 rounds, got 1001"),
])
def test_user_errors_are_one_line_without_traceback(args, message, tmp_path):
    res = fedsim_cmd(*args, "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert res.returncode == 2
    lines = [ln for ln in res.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in res.stderr


def test_missing_data_file_is_a_one_line_error(tmp_path):
    res = fedsim_cmd("run", "fedrec_table2", "--data", str(tmp_path / "nope" / "u.data"), "--out",
                     str(tmp_path / "o"), cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "nope" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_list_shows_scenarios_protocols_and_traceables(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ("quickstart", "demo", "fedrec_table2", "fedrecpp_table3", "fedrec", "fedrecpp"):
        assert name in out


@pytest.mark.parametrize("argv", [["--help"], ["trace", "--help"], ["compare", "--help"], ["data", "--help"],
                                  ["data", "get", "--help"], ["run", "--help"]])
def test_help_prints_help_and_no_error(argv, capsys):
    """--help is not a mistake: help on stdout, exit 0, and no argparse error on stderr (the
    look-ahead for `run NAME --help` once printed 'the following arguments are required')."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    assert exc.value.code == 0 and out.startswith("usage: fedsim") and err == "", err


def _help_text(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    assert exc.value.code == 0 and err == "", err
    return re.sub(r"\s+", " ", out)


def test_help_texts_say_what_each_command_does_and_defaults_to(capsys):
    """What docs/cli.md says, and the commands do: before, `fedsim --help` said `list` lists
    "scenarios and protocols" (it also lists the profiles, link models and transports);
    `fedsim sweep --help` listed the parameters of quickstart, as if a sweep ran it by default
    (a sweep without a name is an error); `fedsim compare --help` gave run's texts: its profile's
    default "the scenario's, usually ideal" (compare's is lan), --set "a scenario parameter",
    --transport offering asyncio and tcp (compare refuses every transport but sim) and an output
    folder runs/<timestamp>-<scenario>. Every run's --data named three of the seven synthetic
    presets and not the Foursquare city files it takes."""
    top = _help_text(["--help"], capsys)
    assert "list list scenarios, protocols, network profiles, link models and transports" in top
    sweep = _help_text(["sweep", "--help"], capsys)
    assert "parameters of quickstart" not in sweep
    assert "fedsim sweep NAME --help lists the parameters of NAME" in sweep
    assert "parameters of quickstart" in _help_text(["run", "--help"], capsys)  # run's default
    assert "parameters of fedrec" in _help_text(["sweep", "fedrec", "--help"], capsys)
    compare = _help_text(["compare", "--help"], capsys)
    assert "--profile PROFILE network profile: ideal, lan, wan, mobile (default lan)" in compare
    assert "--set KEY=VALUE a field of the protocol's configuration (repeatable; the fields: fedsim run " \
           "PROTOCOL --help)" in compare
    assert "--transport TRANSPORT sim only: fedsim compare runs the simulator itself; name the other " \
           "transport with --against" in compare
    assert "--out OUT output folder (default: runs/<timestamp>-compare-<protocol>)" in compare
    assert "usually ideal" not in compare and "set a scenario parameter" not in compare
    # --data: seven presets, and Foursquare city files (docs/cli.md), not the three it named
    assert "--data DATA dataset: a synthetic preset (tiny, ml100k-like, ml1m-like, ...: docs/data.md), a " \
           "MovieLens folder or ratings file, a Foursquare city file, or a downloaded name (ml-100k)" in compare


def test_a_warning_about_the_settings_is_one_line_not_a_line_of_fedsims_source(capsys, tmp_path):
    """docs/cli.md's `fedsim trace fedrecpp --set eta=2` (eta above n/2 on the 3 clients of a trace,
    whose preset allows it) warns that a denoiser is exposed. Before, Python showed the warning as
    `/.../fedsim/studies/trace.py:185: ExposedDenoiserWarning: ...` followed by that line of
    fedsim's source, `job = spec.build(net, data, cfg)`, which is no place the user can change;
    now one line saying what is wrong with the settings. Other warnings are shown as Python shows them."""
    import warnings

    assert main(["trace", "fedrecpp", "--set", "eta=2", "--html", "--out", str(tmp_path / "t")]) == 0
    err = capsys.readouterr().err
    assert err == ("warning: eta = 2 > n/2 = 1.5: 1 denoiser(s) get no ordinary client, so their own gradients "
                   "reach the server undisguised\n")
    from fedsim.cli import show_warning

    show_warning(DeprecationWarning("old"), DeprecationWarning, "/x/y.py", 7)
    assert capsys.readouterr().err == warnings.formatwarning("old", DeprecationWarning, "/x/y.py", 7)


def test_list_summaries_are_whole_first_sentences():
    from fedsim.experiment import first_sentence, list_scenarios

    assert first_sentence("FedRec Figure 3: RMSE for rho = 0 and\n   HF (first fold). More text.\n\nBody.") == \
        "FedRec Figure 3: RMSE for rho = 0 and HF (first fold)."
    assert first_sentence("Version 1.5 of a title without a stop") == "Version 1.5 of a title without a stop"
    for name, summary in list_scenarios():
        assert summary.endswith("."), (name, summary)


def test_list_into_a_closed_pipe_is_quiet():
    # `fedsim list | head -1`: the reader has gone away; no BrokenPipeError traceback
    r, w = os.pipe()
    os.close(r)  # every write to w now fails with EPIPE
    try:
        res = subprocess.run([sys.executable, "-m", "fedsim", "list"], stdout=w, stderr=subprocess.PIPE,
                             text=True, timeout=60)
    finally:
        os.close(w)
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr


def test_scenario_script_runs_directly(tmp_path):
    res = subprocess.run([sys.executable, str(REPO / "scenarios" / "quickstart.py"), "--out", str(tmp_path),
                          "--data", "tiny", "--iterations", "3", "--quiet"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["config"]["iterations"] == 3 and results["profile"] == "wan"
    assert results["simulated_time_s"] > 0


def test_sweep_runs_every_point_and_combines_tables(tmp_path):
    out = tmp_path / "sw"
    from fedsim.experiment import load_scenario

    grid = parse_grid(load_scenario("demo"), ["rounds=1,2", "clients=2,3"])
    assert grid == {"rounds": [1, 2], "clients": [2, 3]}
    s = run_sweep("demo", grid, out, workers=2)
    assert s["points"] == 4 and len(s["done"]) == 4 and not s["failed"]
    rows = (out / "combined_summary.csv").read_text().splitlines()
    assert rows[0].startswith("rounds,clients,") and len(rows) == 5
    again = run_sweep("demo", grid, out, workers=2)
    assert again["done"] == [] and len(again["skipped"]) == 4


def test_a_failed_point_does_not_lose_the_others(tmp_path):
    script = tmp_path / "flaky.py"
    script.write_text(
        "from fedsim.experiment import Param\n"
        "PARAMS = {'x': Param(0, 'x')}\n"
        "def run(ctx):\n"
        "    if ctx['x'] == 2:\n"
        "        raise RuntimeError('boom at 2')\n"
        "    ctx.table('t', [{'x': ctx['x'], 'y': ctx['x'] ** 2}])\n")
    s = run_sweep(str(script), {"x": [1, 2, 3]}, tmp_path / "out", workers=2)
    assert len(s["done"]) == 2 and len(s["failed"]) == 1 and "boom at 2" in s["failed"][0]["error"]
    assert (tmp_path / "out" / "x=2" / "error.txt").read_text().count("boom at 2") >= 1
    assert (tmp_path / "out" / "combined_t.csv").read_text().splitlines()[1:] == ["1,1,1", "3,3,9"]


def test_killed_sweep_resumes_only_the_missing_points(tmp_path):
    log = tmp_path / "runs.log"
    script = tmp_path / "slow.py"
    script.write_text(
        "import time\n"
        "from fedsim.experiment import Param\n"
        "PARAMS = {'x': Param(0, 'x')}\n"
        "def run(ctx):\n"
        f"    open({str(log)!r}, 'a').write(str(ctx['x']) + '\\n')\n"
        "    time.sleep(0.8)\n"
        "    ctx.table('t', [{'x': ctx['x']}])\n")
    out = tmp_path / "out"
    args = [sys.executable, "-m", "fedsim", "sweep", str(script), "--grid", "x=1,2,3,4,5,6",
            "--workers", "1", "--out", str(out)]
    proc = subprocess.Popen(args, cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and len(list(out.glob("*/results.json"))) < 2:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = {p.parent.name for p in out.glob("*/results.json")}
    assert 2 <= len(finished) < 6
    log.write_text("")
    res = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    rerun = {f"x={v}" for v in log.read_text().split()}
    assert rerun == {f"x={v}" for v in range(1, 7)} - finished
    assert len(list(out.glob("*/results.json"))) == 6


# text in which Mermaid finds no syntax: no ';' '#' ':' '%' '<' '>' '&' but in entity codes (#58;)
_MERMAID_TEXT = r"(?:[^;#:%<>&\n]|#\d+;)+"
MERMAID_LINE = re.compile(
    r"^sequenceDiagram$"
    rf"|^    participant N\d+ as [\w/.\-]+(?:#58;[\w/.\-]+)* \({_MERMAID_TEXT}\)$"
    rf"|^    Note (over|right of) N\d+: {_MERMAID_TEXT}$"
    rf"|^    N\d+(->>|-->>|-x)N\d+: {_MERMAID_TEXT}$")


def _unescape(s):
    return re.sub(r"#(\d+);", lambda m: chr(int(m.group(1))), s)


def parse_mermaid(text):
    """Validate the sequence-diagram subset we emit and return its messages."""
    lines = text.rstrip("\n").split("\n")
    assert lines[0] == "sequenceDiagram"
    aliases, messages = {}, []
    for ln in lines:
        assert MERMAID_LINE.match(ln), f"not valid Mermaid sequence syntax: {ln!r}"
        m = re.match(r"^    participant (N\d+) as (\S+) ", ln)
        if m:
            aliases[m.group(1)] = _unescape(m.group(2))
        m = re.match(r"^    (N\d+)(->>|-->>|-x)(N\d+): (\S+)( \(anonymous\))? (\d+) B", ln)
        if m:
            assert m.group(1) in aliases and m.group(3) in aliases, "undeclared participant"
            messages.append((aliases[m.group(1)], aliases[m.group(3)], _unescape(m.group(4)), int(m.group(6)),
                             m.group(2) == "-->>"))
    return messages


def test_fedrecpp_trace_matches_the_ledger_message_for_message(tmp_path):
    net, paths = trace("fedrecpp", tmp_path, clients=3, rounds=1)
    text = paths["mermaid"].read_text()
    messages = parse_mermaid(text)
    ledger = [(r["src"], r["dst"], r["kind"], r["bytes"], r["anonymous"]) for r in net.ledger.records()]
    assert messages == ledger
    roles = net.ledger.roles
    assert sorted(roles.values()) == ["denoiser", "ordinary", "ordinary", "server"]
    # the anonymous channel is visible: dashed arrows labelled anonymous, into the denoiser only
    anon = [m for m in messages if m[4]]
    assert len(anon) == 2 and all(roles[m[1]] == "denoiser" and m[2] == "noise" for m in anon)
    assert text.count("sender hidden from") == 2
    svg = paths["svg"].read_text()
    assert svg.startswith("<svg") and svg.count("<rect") > len(messages) and "stroke-dasharray" in svg
    log = paths["log"].read_text()
    assert log.count(" sends ") == len(messages) and "receives noise (round 0) from (anonymous)" in log


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_traceable_protocol_draws_every_ledger_message(name, tmp_path):
    net, paths = trace(name, tmp_path, clients=3, rounds=1)
    messages = parse_mermaid(paths["mermaid"].read_text())
    ledger = [(r["src"], r["dst"], r["kind"], r["bytes"], r["anonymous"]) for r in net.ledger.records()]
    assert messages == ledger and len(ledger) >= 6
    assert paths["log"].read_text().count(" sends ") == len(ledger)


def test_a_trace_of_more_rounds_than_the_bound_is_refused_naming_it(tmp_path):
    # --rounds had no bound (--clients has the tiny preset's): a huge N ran until killed
    from fedsim.experiment import UsageError
    from fedsim.studies.trace import MAX_TRACE_ROUNDS

    assert MAX_TRACE_ROUNDS == 1000
    for name in ("demo", "fedrec"):
        with pytest.raises(UsageError) as err:
            trace(name, tmp_path / "o", clients=2, rounds=10**8)
        assert str(err.value) == f"cannot trace {name} with 100000000 rounds: traces have 1 to 1000 rounds, got 100000000"
        assert not (tmp_path / "o").exists()
    with pytest.raises(UsageError, match=r"^cannot trace demo with 1001 rounds: traces have 1 to 1000 rounds, got 1001$"):
        trace("demo", tmp_path / "o", clients=1, rounds=MAX_TRACE_ROUNDS + 1)
    net, _ = trace("demo", tmp_path / "most", clients=1, rounds=MAX_TRACE_ROUNDS, formats=("log",))
    assert net.ledger.select(kind="weights").rounds() == list(range(MAX_TRACE_ROUNDS))


@pytest.mark.filterwarnings("ignore::UserWarning")  # (FedRec++'s one client: a denoiser with no ordinary client)
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_a_trace_of_more_clients_than_the_tiny_preset_has_is_refused_naming_the_bound(name, tmp_path):
    # fedrec & co. stopped in a ValueError traceback from tiny_ratings; the autoencoders' said
    # "got 32" of 16 clients (their users); demo had no bound: --clients 100000 ran for minutes
    from fedsim.experiment import UsageError
    from fedsim.protocols.presets import tiny_clients

    per = 2 if name in ("fedavg-ae", "personalfr") else 1  # (two users per client)
    most = tiny_clients() // per
    assert most == 30 // per
    with pytest.raises(UsageError) as err:
        trace(name, tmp_path / "o", clients=most + 1, rounds=1)
    each = " (2 users each)" if per == 2 else ""
    assert str(err.value) == (f"cannot trace {name} with {most + 1} clients: tiny presets have 1 to {most} "
                              f"clients{each}, got {most + 1}")
    assert not (tmp_path / "o").exists()
    if name != "fpl":  # (one FPL client has no negative item: refused as it builds)
        net, _ = trace(name, tmp_path / "one", clients=1, rounds=1, formats=("log",))
        assert {r["dst"] for r in net.ledger.records() if r["src"] == "server"} == \
            {n for n, role in net.ledger.roles.items() if role != "server"}


@pytest.mark.parametrize("name, sets, message", [
    # the page's title said "3 clients, 1 round" of a run of 50 clients (150 messages), of 4 rounds;
    # and --set clients passed by the tiny preset's bound of 30 clients
    ("demo", ["clients=50"], "--set clients: a trace's clients are its --clients; give --clients 50 instead"),
    ("fedavg-ae", ["clients=5"], "--set clients: a trace's clients are its --clients; give --clients 5 instead"),
    ("demo", ["rounds=4"], "--set rounds: a trace's rounds are its --rounds; give --rounds 4 instead"),
    ("fedrec", ["d=4", "T=4"], "--set T: a trace's rounds are its --rounds; give --rounds 4 instead"),
    # docs/cli.md's `--set rounds=4` for a protocol whose rounds field has another name: before, "unknown
    # parameter 'rounds' for protocol fedrec (known: T, ...)", not saying that --rounds is the way
    ("fedrec", ["rounds=4"], "--set rounds: a trace's rounds are its --rounds (fedrec counts them in T); give "
                             "--rounds 4 instead"),
])
def test_a_trace_refuses_a_set_of_its_own_clients_or_rounds(name, sets, message, tmp_path):
    from fedsim.experiment import UsageError

    with pytest.raises(UsageError) as err:
        trace(name, tmp_path / "o", clients=3, rounds=1, sets=sets)
    assert str(err.value) == message and not (tmp_path / "o").exists()


def test_a_trace_whose_model_diverged_says_so(capsys, tmp_path):
    """docs/fedrec.md's `fedsim trace fedrec --set "model=PMF(S)"` over 3 rounds: the tiny preset's lr
    (0.8, PMF(B)'s) makes the stochastic model diverge in its second round, where the server stops.
    Before, the trace said nothing: the only sign was `diverged_at` in the stop messages' payloads."""
    out = tmp_path / "t"
    assert main(["trace", "fedrec", "--rounds", "3", "--set", "model=PMF(S)", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert err == ("note: the model diverged: its server found it not finite after 2 of the 3 rounds and stopped "
                   "there (stop carries diverged_at 2); a smaller learning rate (--set lr=...) keeps it finite\n")
    assert "<h1>fedsim trace: fedrec: 3 clients, 3 rounds, profile lan, seed 0, diverged: not finite after 2 of its " \
           "3 rounds</h1>" in (out / "trace.html").read_text()
    assert main(["trace", "fedrec", "--rounds", "3", "--set", "model=PMF(S)", "--set", "lr=0.01", "--html",
                 "--out", str(tmp_path / "ok")]) == 0
    assert capsys.readouterr().err == "" and "diverged: not" not in (tmp_path / "ok" / "trace.html").read_text()


def test_personalfr_trace_shows_indices_then_active_decoders_and_no_encoder(tmp_path):
    net, paths = trace("personalfr", tmp_path, clients=3, rounds=1)
    kinds = [r["kind"] for r in net.ledger.records()]
    assert kinds == ["indices"] * 3 + ["decoder"] * 3 + ["update"] * 3 + ["stop"] * 3
    _, fa_paths = trace("fedavg-ae", tmp_path / "fa", clients=3, rounds=1)
    fa = {(m[0], m[1], m[2]): m[3] for m in parse_mermaid(fa_paths["mermaid"].read_text())}
    # every PersonalFR decoder slice is smaller than FedAvg's whole model to the same client
    for src, dst, kind, nbytes, _ in parse_mermaid(paths["mermaid"].read_text()):
        if kind == "decoder":
            assert nbytes < fa[(src, dst, "model")]


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_a_traced_messages_fields_add_up_to_its_array_bytes(name, tmp_path):
    """The page's payload table lists every array the ledger counts: PersonalFR's `decoder` and
    `update` (and FedAvg's `model`) carry their arrays in a map one level down, `{dec: {name: array}}`,
    and the table said `dec: dict of 4`, which neither showed the active rows a client was sent nor
    added up to the `556 B of array payload` above it."""
    net, _ = trace(name, tmp_path, clients=3, rounds=1, formats=("log",))
    for i, r in enumerate(net.ledger.records()):
        fields = net.payloads[i]
        assert sum(f.get("bytes", 0) for f in fields) == r["raw_bytes"], (r["kind"], fields)
        assert not any(f.get("value", "").startswith("dict of") for f in fields), (r["kind"], fields)
    if name == "personalfr":  # each client is sent the decoder rows of the items its `indices` named
        rows = list(net.ledger.records())
        items = {r["src"]: net.payloads[i][0]["shape"][0] for i, r in enumerate(rows) if r["kind"] == "indices"}
        for i, r in enumerate(rows):
            if r["kind"] == "decoder":
                fields = net.payloads[i]
                assert [f["name"] for f in fields] == ["t", "dec['dec.W1']", "dec['dec.b1']", "dec['dec.W2']",
                                                       "dec['dec.b2']"]
                assert fields[3]["shape"] == [items[r["dst"]], 8] and fields[4]["shape"] == [items[r["dst"]]]


def test_trace_ledger_writes_the_traced_runs_ledger_row_for_row(capsys, tmp_path):
    """A teacher's communication table of the very run drawn: `fedsim trace ... --ledger` writes its
    ledger.csv (before, the option did not exist: the traced run's ledger could be had from Python
    only, and `fedsim run PROTOCOL --ledger` runs every user of the data, not the trace's 3 clients)."""
    import csv

    out = tmp_path / "t"
    assert main(["trace", "fedrecpp", "--ledger", "--out", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"traced 15 messages; wrote {out}/: trace.html, sequence.mmd, "
                                              "timeline.svg, steps.log")
    with open(out / "ledger.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    drawn = parse_mermaid((out / "sequence.mmd").read_text())
    assert [(r["src"], r["dst"], r["kind"], int(r["bytes"]), r["anonymous"] == "1") for r in rows] == drawn
    assert [r["round"] for r in rows] == ["-1"] * 3 + ["0"] * 12
    assert sum(int(r["raw_bytes"]) for r in rows if r["kind"] == "noise") == 2 * 7 * (4 + 4 * 8)  # (4 + 4d) rho|I_u|
    assert main(["trace", "fpl", "--clients", "2", "--html", "--ledger", "--out", str(tmp_path / "h")]) == 0
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == ["ledger.csv", "trace.html"]


def test_mermaid_validator_rejects_bad_syntax():
    with pytest.raises(AssertionError):
        parse_mermaid("sequenceDiagram\n    N0->>N1: a; b 3 B\n")
    with pytest.raises(AssertionError):
        parse_mermaid("sequenceDiagram\n    participant N0 as a (b)\n    N0->>N9: x 3 B, sent\n")
    with pytest.raises(AssertionError):
        parse_mermaid("sequenceDiagram\n    participant N0 as a (b)\n    N0->>N0: x:y 3 B, sent\n")
    assert parse_mermaid("sequenceDiagram\n    participant N0 as a#58;0 (b#59;)\n    N0->>N0: x#58;y 3 B, sent\n") \
        == [("a:0", "a:0", "x:y", 3, False)]


def test_csv_cells_are_plain_numbers_for_numpy_scalars(tmp_path):
    from fedsim.experiment import write_csv

    rows = [{"a": np.float64(0.1), "b": np.float32(0.5), "c": np.int64(7), "d": np.bool_(True),
             "e": float("nan"), "f": np.float64("nan"), "g": "x"}]
    write_csv(tmp_path / "t.csv", rows, list(rows[0]))
    assert (tmp_path / "t.csv").read_text().splitlines() == ["a,b,c,d,e,f,g", "0.1,0.5,7,True,,,x"]
    # the learning-curve files spell NaN out; a row may also be a plain sequence of cells
    write_csv(tmp_path / "u.csv", [rows[0], ["1", "a,b"]], ["a", "e", "h"], nan="nan")
    assert (tmp_path / "u.csv").read_text().splitlines() == ["a,e,h", "0.1,nan,", '1,"a,b"']


def test_progress_lines_show_the_recorded_networks_totals_in_human_units():
    import io

    from fedsim.experiment import Progress

    stream = io.StringIO()  # not a terminal: one plain line per step
    p = Progress(True, stream=stream)
    p.update(1, 4, stage="demo")
    assert "msgs" not in stream.getvalue()  # nothing recorded yet
    p.recorded = {"sim_time": 2.5, "messages": 1234, "bytes": 5_600_000}
    p.update(4, 4)
    last = stream.getvalue().splitlines()[-1]
    assert "demo 4/4" in last and "elapsed" in last and "sim 2.5 s" in last and "1234 msgs" in last
    assert "5.6 MB" in last
    p.update(4, 4, messages=7)  # a scenario's own figures win (same step: no new line)
    p.update(3, 4, messages=7)
    last = stream.getvalue().splitlines()[-1]
    assert "7 msgs" in last and "1234" not in last
    p.finish()


def test_quiet_or_piped_runs_draw_no_progress_bar(tmp_path):
    res = fedsim_cmd("run", "quickstart", "--data", "tiny", "--set", "iterations=2", "--out", str(tmp_path / "o"),
                     cwd=tmp_path)
    assert res.returncode == 0 and "\r" not in res.stderr and "[#" not in res.stderr


@pytest.mark.parametrize("args, line", [
    (["run", "demo", "--seed", "1", "--seed", "2"], "fedsim run: error: argument --seed: given twice (1, then 2); give it once"),
    (["run", "demo", "--seed=1", "--seed", "1"], "fedsim run: error: argument --seed: given twice (1, then 1); give it once"),
    (["run", "demo", "--loss", "0.1", "--data", "tiny", "--loss", "0.2"],
     "fedsim run: error: argument --loss: given twice (0.1, then 0.2); give it once"),
    (["run", "demo", "--link-model", "fifo", "--link-model", "fair"],
     "fedsim run: error: argument --link-model: given twice ('fifo', then 'fair'); give it once"),
    (["run", "demo", "--quiet", "--quiet"], "fedsim run: error: argument --quiet: given twice; give it once"),
    (["sweep", "demo", "--workers", "1", "--workers", "2"],
     "fedsim sweep: error: argument --workers: given twice (1, then 2); give it once"),
    (["trace", "fedavg", "--clients", "2", "--clients", "3"],
     "fedsim trace: error: argument --clients: given twice (2, then 3); give it once"),
    (["compare", "fedavg", "--processes", "2", "--processes", "3"],
     "fedsim compare: error: argument --processes: given twice (2, then 3); give it once"),
])
def test_a_run_option_given_twice_is_refused_naming_it(args, line, capsys, tmp_path, monkeypatch):
    # `fedsim run --seed 1 --seed 2` silently ran seed 2 (argparse keeps the last), while a key
    # given twice to --set is refused; nothing runs and nothing is written
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == line and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_options_meant_to_repeat_still_repeat():
    from fedsim.cli import build_parser

    args = build_parser().parse_args(["--plugin", "a.py", "--plugin", "b.py", "sweep", "demo", "--grid", "rounds=1,2",
                                      "--grid", "seed=0,1", "--set", "rounds=1", "--set", "clients=2", "--seed", "3"])
    assert (args.plugin, args.grid, args.set, args.seed) == (["a.py", "b.py"], ["rounds=1,2", "seed=0,1"],
                                                             ["rounds=1", "clients=2"], 3)
    args = build_parser().parse_args(["trace", "fedavg", "--set", "lr=1", "--set", "rounds=2", "--clients", "4"])
    assert (args.set, args.clients, args.seed, args.html) == (["lr=1", "rounds=2"], 4, 0, False)


def test_a_scenario_script_refuses_an_option_given_twice(tmp_path):
    # `python scenarios/quickstart.py --iterations 3 --iterations 2` silently ran 2
    res = subprocess.run([sys.executable, str(REPO / "scenarios" / "quickstart.py"), "--iterations", "3",
                          "--iterations", "2", "--out", str(tmp_path / "o")], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.splitlines()[-1] == ("scenarios/quickstart.py: error: argument --iterations: given twice "
                                           "('3', then '2'); give it once")
    assert not (tmp_path / "o").exists()
