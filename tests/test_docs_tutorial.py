"""The tutorial in docs/writing-a-protocol.md: its one-file protocol is short, registers itself,
learns, shows up in `fedsim list`, runs with `fedsim run`, and passes the contract checks every
registered protocol passes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedsim.data import generate
from fedsim.kernel import SimNetwork
from fedsim.protocols import REGISTRY, load_plugins

DOC = Path(__file__).resolve().parents[1] / "docs" / "writing-a-protocol.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    code = BLOCKS[0]
    lines = [ln for ln in code.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert len(lines) < 110, f"the tutorial protocol has {len(lines)} lines"
    path = tmp_path_factory.mktemp("tutorial") / "fedavg_mf.py"
    path.write_text(code)
    load_plugins([path])
    yield path
    REGISTRY.remove("fedavg-mf")


def test_the_tutorial_protocol_registers_and_learns(plugin):
    spec = REGISTRY["fedavg-mf"]
    data = generate("tiny", seed=0)
    net = SimNetwork(seed=0, profile="wan")
    res = spec.build(net, data, spec.Config(rounds=30)).collect(net.run())
    U, V = res.params["U"], res.params["V"]
    pred = np.einsum("kd,kd->k", U[data.users], V[data.items])
    rmse = float(np.sqrt(np.mean((pred - data.values) ** 2)))
    baseline = float(np.sqrt(np.mean((data.values.mean() - data.values) ** 2)))
    assert rmse < 0.8 * baseline
    sent = {(r["role"], r["direction"]): r for r in net.ledger.by_role(per_round=False)}
    # half of the 30 clients per round, one model message each, 30 rounds, plus the stop broadcast
    assert sent[("server", "sent")]["messages"] == 30 * 15 + 30
    assert res.duration > 0


def test_the_tutorial_protocol_passes_the_contract(plugin):
    import test_protocol_contract as contract

    contract.test_the_spec_is_complete("fedavg-mf")
    contract.test_every_message_is_declared_by_the_spec("fedavg-mf")
    for link_model in ("fifo", "tcp"):
        contract.test_same_parameters_and_bytes_on_both_transports("fedavg-mf", link_model)
    contract.test_same_seed_byte_identical_ledger("fedavg-mf", "fifo")


def test_the_python_usage_block_runs(plugin, monkeypatch):
    monkeypatch.chdir(plugin.parent)  # the block loads "fedavg_mf.py" by its relative name
    ns: dict = {}
    exec(compile(BLOCKS[1], str(DOC), "exec"), ns)
    assert ns["result"].params["V"].shape == (40, 8)


def test_the_checking_block_runs(plugin, monkeypatch):
    monkeypatch.chdir(plugin.parent)
    ns: dict = {}
    exec(compile(BLOCKS[1], str(DOC), "exec"), ns)  # (its imports and load_plugins)
    exec(compile(BLOCKS[2], str(DOC), "exec"), ns)
    sim, aio = ns["results"]
    assert sim.protocol == aio.protocol == "fedavg-mf" and sim.params["V"].shape == (40, 4)
    assert np.array_equal(sim.params["U"], aio.params["U"])


def _fedsim(*args, cwd):
    return subprocess.run([sys.executable, "-m", "fedsim", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_fedsim_list_and_run_find_the_plugin(plugin, tmp_path):
    res = _fedsim("--plugin", str(plugin), "list", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert re.search(r"^\s+fedavg-mf\s+FedAvg on matrix factorisation", res.stdout, re.M)
    assert "parameters: d, rounds, fraction, lr, lam, epochs, deadline" in res.stdout
    # the plug-in's lines are its summary and parameters: no run time fedsim never measured (the
    # built-ins' "run time: seconds on the default tiny data" stood under the last protocol listed)
    lines = res.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("fedavg-mf "))
    assert lines[at + 1].strip() == "parameters: d, rounds, fraction, lr, lam, epochs, deadline"
    assert lines[at + 2] == ""
    assert "run time: seconds" not in res.stdout
    assert ("protocols (fedsim run NAME, fedsim trace NAME; parameters: fedsim run NAME --help; the built-in ones "
            "run in seconds on the default tiny data):") in lines
    res = _fedsim("--plugin", str(plugin), "run", "fedavg-mf", "--data", "tiny", "--set", "rounds=3",
                  "--profile", "wan", "--quiet", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    kinds = (tmp_path / "out" / "kinds.csv").read_text()
    assert "model,training,server,client" in kinds and "update,training,client,server" in kinds
    res = _fedsim("--plugin", str(plugin), "run", "fedavg-mf", "--set", "fraction=2", "--out",
                  str(tmp_path / "bad"), cwd=tmp_path)
    assert res.returncode == 2 and "fraction" in res.stderr and "<= 1" in res.stderr


def test_fedsim_plugins_puts_the_plugin_under_the_contract_test(plugin, tmp_path):
    """The page's `FEDSIM_PLUGINS=fedavg_mf.py pytest tests/test_protocol_contract.py`: the
    contract test's parametrisation includes the plug-in protocol."""
    tests = Path(__file__).resolve().parent
    env = {**os.environ, "FEDSIM_PLUGINS": str(plugin), "PYTHONPATH": str(tests.parent)}
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-o", "addopts=", "-q", "-p",
                          "no:cacheprovider", str(tests / "test_protocol_contract.py")], capture_output=True,
                         text=True, cwd=tmp_path, env=env, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "test_the_spec_is_complete[fedavg-mf]" in res.stdout
    assert "test_same_seed_byte_identical_ledger[fedavg-mf-fifo]" in res.stdout


@pytest.mark.parametrize("block", [1, 2])
def test_each_python_block_runs_on_its_own(plugin, block):
    """A reader copies one block of the page into a file beside fedavg_mf.py and runs it in a
    fresh interpreter: each block has its own imports and loads the plug-in itself. The checking
    block used REGISTRY without importing it or loading the plug-in (NameError), as it was only
    ever run after the usage block, in the same namespace."""
    script = plugin.parent / f"block{block}.py"
    script.write_text(BLOCKS[block])
    res = subprocess.run([sys.executable, script.name], capture_output=True, text=True, cwd=plugin.parent,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}, timeout=120)
    assert res.returncode == 0, res.stderr


def test_a_protocol_declared_under_the_entry_point_group_needs_no_plugin_option(tmp_path):
    """The page's entry-point route: an installed package (here its module and a .dist-info with
    entry_points.txt on the path, what `pip install` leaves) is found by `fedsim list`, `run` and
    `sweep` (whose worker processes load it too) without --plugin, and from Python after
    load_plugins()."""
    site = tmp_path / "site"
    (site / "tutorial_pkg").mkdir(parents=True)
    (site / "tutorial_pkg" / "__init__.py").write_text(BLOCKS[0])
    info = site / "tutorial_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tutorial-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fedsim.protocols]\nfedavg-mf = tutorial_pkg\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), str(site)])}
    env.pop("FEDSIM_PLUGINS", None)

    def fedsim(*args):
        return subprocess.run([sys.executable, "-m", "fedsim", *args], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=180)

    res = fedsim("list")
    assert res.returncode == 0, res.stderr
    assert re.search(r"^\s+fedavg-mf\s+FedAvg on matrix factorisation", res.stdout, re.M)
    res = fedsim("run", "fedavg-mf", "--set", "rounds=2", "--quiet", "--out", "one")
    assert res.returncode == 0, res.stderr
    assert "update,training,client,server" in (tmp_path / "one" / "kinds.csv").read_text()
    res = fedsim("sweep", "fedavg-mf", "--grid", "fraction=0.3,0.6", "--set", "rounds=2", "--workers", "2",
                 "--quiet", "--out", "sw")
    assert res.returncode == 0, res.stderr
    assert "2 points, 2 run, 0 already done, 0 failed" in res.stdout
    code = ("from fedsim.protocols import REGISTRY, load_plugins\n"
            "before = 'fedavg-mf' in REGISTRY\nprint(before, load_plugins(), 'fedavg-mf' in REGISTRY)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env,
                         timeout=120)
    assert res.stdout.split() == ["False", "['fedavg-mf']", "True"], res.stderr


def test_every_info_key_the_command_line_reads_is_in_the_page():
    """The bullet "What `fedsim run` reads from a `Result`" is a plug-in author's list of the
    ``info`` keys that change a run's report. It left out ``lost_users``, which ``Result.present``
    reads to leave a dropped-out client's user out of the test scores: a plug-in without it had
    its dropped users' zero factors scored as if they had trained, with no word."""
    repo = Path(__file__).resolve().parents[1]
    read = set()
    for path in [*(repo / "fedsim" / "experiment").glob("*.py"), repo / "fedsim" / "protocols" / "contract.py"]:
        read |= set(re.findall(r"""\binfo(?:\.get\(|\[)"(\w+)"[\]),]""", path.read_text()))
    assert {"diverged_at", "missing", "lost_clients", "adjusted", "lost_users"} <= read
    bullet = re.search(r"^- \*\*What `fedsim run` reads from a `Result`\.\*\*(.*?)^- \*\*", DOC.read_text(),
                       re.S | re.M).group(1)
    assert sorted(k for k in read if f"`{k}`" not in bullet) == []


def test_the_config_bullet_lists_every_keyword_param_takes():
    """The bullet gave `param(default, help, choices=..., min=..., max=...)`; the tutorial's own
    code used `exclusive_min` and `none_ok`, which it did not list (and a reader guessing an
    `exclusive_max` by symmetry got a TypeError at import)."""
    import inspect

    from fedsim.config import param

    bullet = re.search(r"^- \*\*A `Config`\.\*\*(.*?)^- \*\*", DOC.read_text(), re.S | re.M).group(1)
    listed = re.search(r"`param\((.*?)\)`", " ".join(bullet.split())).group(1)
    names = [p.split("=")[0].strip() for p in listed.split(",")]
    assert names == list(inspect.signature(param).parameters)


def test_the_study_script_runs_from_beside_the_plugin_and_sweeps(plugin, tmp_path):
    """The page ended with "write `scenarios/NAME.py`": a folder inside fedsim, which an author
    outside it would have to edit. Its scenario script runs from anywhere: `fedsim run study.py`
    and `fedsim sweep study.py`, the plug-in loaded by the script itself."""
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "fedavg_mf.py").write_text(BLOCKS[0])
    (folder / "study.py").write_text(BLOCKS[3])
    res = _fedsim("run", "study.py", "--data", "tiny", "--set", "rounds=2", "--set", "fractions=0.5,1", "--quiet",
                  "--out", "o", cwd=folder)
    assert res.returncode == 0, res.stderr
    import csv

    with open(folder / "o" / "uploads.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["fraction"] for r in rows] == ["0.5", "1.0"]
    # 30 clients: 15, then 30 of them upload in each of the 2 rounds (counted in the ledger)
    assert [int(r["uploads"]) for r in rows] == [2 * 15, 2 * 30]
    assert all(float(r["train_rmse"]) > 0 for r in rows)
    assert int(rows[1]["upload_bytes"]) > int(rows[0]["upload_bytes"]) > 0
    res = _fedsim("sweep", "study.py", "--data", "tiny", "--grid", "seed=0,1", "--set", "rounds=1", "--set",
                  "fractions=0.5", "--workers", "2", "--quiet", "--out", "sw", cwd=folder)
    assert res.returncode == 0, res.stderr
    assert "2 points, 2 run, 0 already done, 0 failed" in res.stdout
    with open(folder / "sw" / "combined_uploads.csv", newline="") as fh:
        assert [r["seed"] for r in csv.DictReader(fh)] == ["0", "1"]


def test_the_plugin_traces_compares_and_runs_on_the_real_transports_with_faults(plugin, tmp_path):
    """The page says the plug-in can be traced and runs on every transport: the suite ran it on
    the simulator only (list, run, sweep, the contract test). Through the command line alone:
    `fedsim trace` with loss, `fedsim run --transport tcp` with loss and a deadline (the same
    copies lost as on the simulator: the loss draws are keyed by message), `fedsim compare`."""
    import csv

    def table(path):
        with open(path, newline="") as fh:
            return list(csv.DictReader(fh))

    res = _fedsim("--plugin", str(plugin), "trace", "fedavg-mf", "--clients", "3", "--rounds", "2", "--loss", "0.3",
                  "--set", "deadline=1", "--out", "t", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    log = (tmp_path / "t" / "steps.log").read_text()
    # one client of three (fraction 0.5) per round, then the stop to all three
    assert len(re.findall(r"server sends model \(round \d", log)) == 2
    assert len(re.findall(r"server sends stop ", log)) == 3
    assert (tmp_path / "t" / "trace.html").stat().st_size > 0
    runs = {}
    for transport in ("sim", "tcp"):
        res = _fedsim("--plugin", str(plugin), "run", "fedavg-mf", "--data", "tiny", "--set", "rounds=3", "--set",
                      "deadline=0.5", "--loss", "0.3", "--transport", transport, "--quiet", "--out", transport,
                      cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        runs[transport] = table(tmp_path / transport / "summary.csv")[0], table(tmp_path / transport / "kinds.csv")
    (sim, sim_kinds), (tcp, tcp_kinds) = runs["sim"], runs["tcp"]
    assert int(sim["lost_messages"]) > 0 and sim["lost_messages"] == tcp["lost_messages"]
    assert sim["missing_waits"] == tcp["missing_waits"]
    assert [(k["kind"], k["messages"], k["payload_bytes"]) for k in sim_kinds] == \
        [(k["kind"], k["messages"], k["payload_bytes"]) for k in tcp_kinds]
    res = _fedsim("--plugin", str(plugin), "compare", "fedavg-mf", "--against", "asyncio", "--set", "rounds=2",
                  "--quiet", "--out", "c", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert [r["parameters_bit_identical"] for r in table(tmp_path / "c" / "summary.csv")] == ["True", "True"]


def test_a_check_of_several_fields_is_validate_as_the_page_says(tmp_path):
    """The page named no way to check two settings together (the built-ins' `eval_every` beyond
    `T`); `Config.validate` is it. The page now says so, and what the command line does with it:
    the tutorial's Config given a validate is refused by `fedsim run` (key named, config file
    line) and `fedsim sweep` (the failing point named, nothing run)."""
    bullet = re.search(r"^- \*\*A `Config`\.\*\*(.*?)^- \*\*", DOC.read_text(), re.S | re.M).group(1)
    assert "`validate(self)`" in bullet and "`fedsim.config.ConfigError(message, key)`" in bullet
    code = BLOCKS[0].replace(
        "\n\n# --- math", "\n    def validate(self):\n        if self.epochs > self.rounds:\n"
        "            raise ConfigError(f'epochs = {self.epochs} > rounds = {self.rounds}', 'epochs')\n\n\n# --- math", 1)
    code = code.replace("from fedsim.config import Config, param", "from fedsim.config import Config, ConfigError, param")
    (tmp_path / "fedavg_mf.py").write_text(code)
    res = _fedsim("--plugin", "fedavg_mf.py", "run", "fedavg-mf", "--set", "rounds=1", "--out", "o", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip().splitlines()[-1] == "error: epochs = 2 > rounds = 1"
    (tmp_path / "run.toml").write_text('scenario = "fedavg-mf"\n[params]\nrounds = 1\nepochs = 2\n')
    res = _fedsim("--plugin", "fedavg_mf.py", "run", "--config", "run.toml", "--out", "o", cwd=tmp_path)
    assert res.stderr.strip().splitlines()[-1] == ("error: run.toml: line 4: [params] epochs: "
                                                   "epochs = 2 > rounds = 1")
    res = _fedsim("--plugin", "fedavg_mf.py", "sweep", "fedavg-mf", "--grid", "rounds=1,3", "--out", "sw",
                  cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1].startswith("error: 1 of the 2 points of the sweep to run would be "
                                                          "refused, so none was run: rounds=1: epochs = 2 > rounds = 1")
    assert not (tmp_path / "o").exists() and not (tmp_path / "sw").exists()
