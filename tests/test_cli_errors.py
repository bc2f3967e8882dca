"""Issue 24's bad inputs and blockers, each as the exact command: one ``error:`` line naming the
file, line or key (with a hint), exit status 2, and no output folder left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def fedsim_cmd(*args, cwd, timeout=180, env=None):
    return subprocess.run([sys.executable, "-m", "fedsim", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=env)


def one_error_line(res) -> str:
    """The run failed with status 2 and said so in exactly one line starting with 'error:'."""
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1, lines
    return errors[0]


def nothing_left(cwd: Path, out: Path | None = None) -> None:
    """No run folder (default or --out), and no temporary folder beside it."""
    assert not (cwd / "runs").exists(), list((cwd / "runs").rglob("*"))
    if out is not None:
        assert not out.exists()
        assert not list(out.parent.glob(f".{out.name}.partial-*"))


@pytest.fixture
def files(tmp_path):
    (tmp_path / "bad.data").write_text("1\t2\t3\t4\n1\tx\t3\n")
    (tmp_path / "empty.data").write_text("")
    (tmp_path / "plain.csv").write_text("user,item,rating\n1,2,3\n")
    return tmp_path


@pytest.mark.parametrize("args, expected", [
    (["run", "quickstart", "--data", "bad.data"],
     "error: --data: bad.data, line 2: expected 4 fields (user, item, rating, timestamp) separated by tab, found 3"),
    (["run", "quickstart", "--data", "empty.data"], "error: --data: empty.data: empty file"),
    (["run", "quickstart", "--data", "plain.csv"], "error: --data: plain.csv: cannot tell the dataset format"),
    (["run", "quickstart", "--set", "iterations=-3"], "error: --set iterations: must be >= 0, got -3"),
    (["run", "quickstart", "--set", "d=-5"], "error: --set d: must be >= 1, got -5"),
    (["run", "quickstart", "--set", "rho=-1"], "error: --set rho: must be >= 0, got -1"),
    (["run", "quickstart", "--set", "lr=-1"], "error: --set lr: must be > 0, got -1"),
    (["run", "fedrec_table2", "--set", "folds=1"], "error: --set folds: must be >= 2, got 1"),
    (["trace", "fpl", "--set", "pi=2"], "error: --set pi: must be <= 1, got 2"),
    (["run", "quickstart", "--set", "iteration=3"], "did you mean 'iterations'?"),
    (["run", "quickstart", "--set", "iterations=2", "--set", "iterations=3"],
     "error: --set iterations: given twice; give each key once"),
    (["sweep", "quickstart", "--grid", "iteration=1,2"], "did you mean 'iterations'?"),
    (["sweep", "quickstart", "--grid", "seed=0,-1"], "error: --grid seed: expected a non-negative integer"),
    (["sweep", "quickstart", "--grid", "profile=lan,moon"], "unknown network profile 'moon'"),
    (["trace", "fedrecp"], "did you mean 'fedrecpp'?"),
    (["run", "quickstart", "--config", "nope.toml"], "error: --config: no such file: nope.toml"),
    (["run", "demo", "--out", "/proc/fedsim-out"], "error: --out /proc/fedsim-out: cannot write there"),
    (["run", "demo", "--out", "bad.data"], "error: --out bad.data is a file, not a folder"),
    (["run", "demo", "--dropout-window", "5"], "error: --dropout-window expects START,END in seconds, got '5'"),
    (["run", "demo", "--seed", "-1"], "error: --seed must be non-negative, got -1"),
    (["run", "demo", "--data", "/nonexistent/r.csv"],
     "error: --data /nonexistent/r.csv: does not apply, demo makes its own data"),
    # an empty value was read as "not given": the default data, folder, profile, scenario
    (["run", "quickstart", "--data", ""], "error: --data is empty; give a value or leave the option out"),
    (["run", "demo", "--out", ""], "error: --out is empty; give a value or leave the option out"),
    (["run", "demo", "--profile", ""], "error: unknown network profile ''"),
    (["run", "demo", "--dropout-window", ""], "error: --dropout-window expects START,END in seconds, got ''"),
    (["run", ""], "error: the scenario name is empty"),
    (["trace", "demo", "--out", ""], "error: --out is empty"),
    (["sweep", "demo", "--grid", "rounds=1,2", "--data", ""], "error: --data is empty"),
])
def test_bad_input_is_one_error_line_and_leaves_no_folder(args, expected, files):
    res = fedsim_cmd(*args, cwd=files)
    line = one_error_line(res)
    assert line.startswith(expected) or expected in line, line
    nothing_left(files)


def test_bad_input_with_out_leaves_no_out_folder(files):
    out = files / "o"
    line = one_error_line(fedsim_cmd("run", "quickstart", "--data", "bad.data", "--out", str(out), cwd=files))
    assert "bad.data, line 2" in line
    nothing_left(files, out)


def test_plain_csv_message_names_no_python_function(files):
    line = one_error_line(fedsim_cmd("run", "quickstart", "--data", "plain.csv", cwd=files))
    assert "load_csv" not in line and "fedsim.data." not in line
    assert "MovieLens" in line and "docs/data.md" in line


def test_data_get_offline_suggests_from_zip_and_data_path(tmp_path):
    # port 9 (discard) on loopback: connection refused, as with no network
    res = subprocess.run([sys.executable, "-m", "fedsim", "data", "get", "ml-100k", "--url",
                          "http://127.0.0.1:9/ml-100k.zip", "--cache-dir", str(tmp_path / "cache")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=60)
    line = one_error_line(res)
    assert "cannot download ml-100k" in line and "--from ZIP" in line and "--data PATH" in line
    assert "urlopen error" not in line
    assert not (tmp_path / "cache" / "ml-100k").exists()


def test_reused_out_is_refused_unless_force(tmp_path):
    out = tmp_path / "o"
    args = ("run", "demo", "--set", "rounds=1", "--out", str(out), "--quiet")
    assert fedsim_cmd(*args, cwd=tmp_path).returncode == 0
    first = json.loads((out / "results.json").read_text())
    line = one_error_line(fedsim_cmd("run", "demo", "--set", "rounds=2", "--out", str(out), cwd=tmp_path))
    assert f"--out {out} already holds a finished run; use --force" in line
    assert json.loads((out / "results.json").read_text()) == first  # untouched
    res = fedsim_cmd("run", "demo", "--set", "rounds=2", "--out", str(out), "--force", "--quiet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads((out / "results.json").read_text())["config"]["rounds"] == 2
    assert not list(tmp_path.glob(".o.*"))  # neither the temporary nor the replaced folder remains


def test_run_help_lists_the_scenario_parameters(tmp_path):
    res = fedsim_cmd("run", "quickstart", "--help", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    text = res.stdout
    assert "parameters of quickstart" in text
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("iterations "))
    assert "int; >= 0" in line and " 15 " in line and "iterations" in line.lower()
    res = fedsim_cmd("run", "fedrec", "--help", cwd=tmp_path)
    rho = next(ln for ln in res.stdout.splitlines() if ln.strip().startswith("rho "))
    from fedsim.config import fields_of
    from fedsim.protocols import REGISTRY

    info = {f.name: f for f in fields_of(REGISTRY["fedrec"].Config)}["rho"]
    assert info.help[:40] in rho and info.describe() in rho
    # a sweep's help lists the same parameters (any of them is a grid axis)
    assert "parameters of demo" in fedsim_cmd("sweep", "demo", "--help", cwd=tmp_path).stdout


def test_list_shows_typical_run_times(tmp_path):
    from fedsim.experiment import list_scenarios
    from fedsim.experiment.discovery import scenario_run_times

    res = fedsim_cmd("list", cwd=tmp_path)
    times = scenario_run_times()
    assert sorted(times) == sorted(n for n, _ in list_scenarios())  # every scenario declares one
    assert res.stdout.count("run time: ") >= len(times)
    lines = res.stdout.splitlines()
    for name, text in times.items():  # each scenario's own declaration, on the line below its name
        i = next(k for k, ln in enumerate(lines) if ln.strip().startswith(name + " "))
        assert lines[i + 1].strip() == f"run time: {text}"


def test_config_file_with_command_line_overrides(tmp_path):
    (tmp_path / "run.toml").write_text(
        'scenario = "demo"\nseed = 3\nout = "from_toml"\nquiet = true\n\n[params]\nrounds = 2\nclients = 4\n\n'
        '[network]\nprofile = "wan"\nlink_model = "fair"\n')
    res = fedsim_cmd("run", "--config", "run.toml", "--set", "clients=5", "--out", "o", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    saved = json.loads((tmp_path / "o" / "results.json").read_text())
    assert saved["scenario"] == "demo" and saved["seed"] == 3
    assert saved["config"]["rounds"] == 2 and saved["config"]["clients"] == 5  # --set wins over [params]
    assert saved["network"]["profile"] == "wan" and saved["network"]["link_model"] == "fair"
    assert not (tmp_path / "from_toml").exists()  # --out wins over out


def test_a_config_file_with_a_byte_order_mark_is_read(tmp_path):
    # a UTF-8 byte order mark (Windows editors) was "run.toml: line 1, column 1: Invalid statement"
    (tmp_path / "run.toml").write_bytes(b"\xef\xbb\xbfseed = 3\n[params]\nrounds = 2\nclients = 5\n")
    res = fedsim_cmd("run", "demo", "--config", "run.toml", "--out", "o", "--quiet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    saved = json.loads((tmp_path / "o" / "results.json").read_text())
    assert saved["seed"] == 3 and saved["config"]["rounds"] == 2 and saved["config"]["clients"] == 5
    (tmp_path / "bad.toml").write_bytes(b"\xef\xbb\xbfseed = 1\nsed = 2\n")  # lines counted as before
    assert one_error_line(fedsim_cmd("run", "demo", "--config", "bad.toml", cwd=tmp_path)) == (
        "error: bad.toml: line 2: unknown key 'sed'; did you mean 'seed'? (known: [network], [params], data, force, "
        "ledger, out, quiet, scenario, seed)")


@pytest.mark.parametrize("nest", ["[", "{a = "], ids=["arrays", "inline-tables"])
def test_a_config_file_nested_too_deeply_is_one_error_line(nest, tmp_path):
    # tomllib reads nesting recursively: 2000 levels were a RecursionError traceback
    close = "]" if nest == "[" else "}"
    (tmp_path / "run.toml").write_text("seed = 1\nx = " + nest * 2000 + "1" * (nest != "[") + close * 2000 + "\n")
    line = one_error_line(fedsim_cmd("run", "demo", "--config", "run.toml", cwd=tmp_path))
    assert line == ("error: run.toml: arrays or inline tables nested too deeply to read (a few hundred levels); no "
                    "option takes more than a flat array")
    nothing_left(tmp_path)


@pytest.mark.parametrize("text, expected", [
    ('sed = 1\n', "run.toml: line 1: unknown key 'sed'; did you mean 'seed'?"),
    ('seed = "one"\n', "run.toml: line 1: seed: expected int, got 'one'"),
    ('[params]\nrounds = -1\n', "run.toml: line 2: [params] rounds: must be >= 0, got -1"),  # the key named
    ('[params]\nclients = 2\nrounds = 1.5\n', "run.toml: line 3: [params] rounds: expected int, got 1.5"),
    ('[network]\nlink_model = "fair"\n"link-model" = "tcp"\n',
     "run.toml: line 3: [network] 'link_model' and 'link-model' are the same key; give it once"),
    ('[params]\nrounds = "x"\n', "run.toml: line 2: [params] rounds: expected int, got 'x'"),
    ('[params]\nround = 1\n', "run.toml: line 2: [params] unknown parameter 'round' for scenario demo; did you mean 'rounds'?"),
    ('[network]\nprofil = "wan"\n', "run.toml: line 2: unknown key [network] 'profil'; did you mean 'profile'?"),
    ('[network]\nprofile = "moon"\n', "run.toml: line 2: [network] profile: unknown network profile 'moon'"),
    ('seed = 1\nseed = = 2\n', "run.toml: line 2, column 8: Invalid value"),
    ('[grid]\nrounds = [1, 2]\n', "run.toml: line 1: [grid] is for fedsim sweep, not fedsim run"),
    ('seed = -1\n', "run.toml: line 1: seed: expected a non-negative integer, got -1"),
    ('seed = true\n', "run.toml: line 1: seed"),
    ('[network]\nloss = 2\n', "run.toml: line 2: [network] loss: must be a probability in [0, 1], got 2"),
    ('[network]\ndropout_window = [5, 1]\n', "run.toml: line 2: [network] dropout_window: must be"),
    # a boolean in the window was refused in the command line's words ("--dropout-window expects ...")
    ('[network]\ndropout = 0.1\ndropout_window = [true, 1]\n',
     "run.toml: line 3: [network] dropout_window: expected [START, END] in seconds, got [True, 1]"),
    ('seed = 1\n\n[[params]]\nrounds = 1\n',  # an array of tables: no line was given
     "run.toml: line 3: params must be a table ([params]), got [{'rounds': 1}]"),
    ('out = ""\n', "run.toml: line 1: out: empty; give a value or leave the key out"),  # it wrote to runs/<time>-demo
    ('[network]\nprofile = ""\n', "run.toml: line 2: [network] profile: empty"),  # it ran the default profile
    ('data = "/nonexistent/r.csv"\n', "run.toml: line 1: data: /nonexistent/r.csv: does not apply, demo makes its own"),
    ('out = "bad.data"\n', "run.toml: line 1: out: bad.data is a file, not a folder"),  # was "--out bad.data ..."
])
def test_config_file_errors_name_the_file_and_key(text, expected, tmp_path):
    (tmp_path / "bad.data").write_text("")
    (tmp_path / "run.toml").write_text(text)
    line = one_error_line(fedsim_cmd("run", "demo", "--config", "run.toml", cwd=tmp_path))
    assert expected in line, line
    nothing_left(tmp_path)


@pytest.mark.parametrize("text, expected", [
    # a bad [network] value named the file and no line, and for loss, dropout and the window the
    # kernel's name ("faults: loss must be ..."), while every other key's error gave its line
    ('seed = 1\n\n[network]\nprofile = "lan"\nloss = -0.5\n',
     "run.toml: line 5: [network] loss: must be a probability in [0, 1], got -0.5"),
    ('[network]\nprofile = "lan"\ndropout = 1.5\ndropout_window = [0, 10]\n',
     "run.toml: line 3: [network] dropout: must be a probability in [0, 1], got 1.5"),
    ('[network]\ndropout = 0.5\ndropout_window = [-1, 10]\n',
     "run.toml: line 3: [network] dropout_window: must be (start, end) with 0 <= start <= end < inf seconds, got "
     "(-1.0, 10.0)"),
    ('[params]\nrounds = 1\n[network]\n"link-model" = "fast"\n',
     "run.toml: line 4: [network] link-model: unknown link model 'fast'; known: fifo, fair, tcp"
     "; a link model in a file of your own is loaded with fedsim --plugin FILE (or FEDSIM_PLUGINS=FILE)"),
    ('[network]\nloss = 0.1\ntransport = "udp"\n',
     "run.toml: line 3: [network] transport: unknown transport 'udp'; known: sim, asyncio, tcp"
     "; a transport in a file of your own is loaded with fedsim --plugin FILE (or FEDSIM_PLUGINS=FILE)"),
    ('[network]\nloss = "a"\n', "run.toml: line 2: [network] loss: expected a number, got 'a'"),  # (as before)
    # two keys each right alone: the table's line
    ('seed = 1\n[network]\nlink_model = "fair"\ntransport = "tcp"\n',
     "run.toml: line 2: [network] link model 'fair' applies to the simulator only, not to transport 'tcp'"),
])
def test_config_file_network_errors_name_the_line_and_key(text, expected, tmp_path):
    (tmp_path / "run.toml").write_text(text)
    line = one_error_line(fedsim_cmd("run", "demo", "--config", "run.toml", cwd=tmp_path))
    assert line == "error: " + expected
    nothing_left(tmp_path)


@pytest.mark.parametrize("text, options, expected", [
    # a [network] key of the file that does not go with an option of the command line: the
    # message named neither the file nor the key ("link model 'fair' applies to the simulator
    # only, not to transport 'tcp'", with no --link-model on the command line)
    ('seed = 1\n[network]\nlink_model = "fair"\n', ["--transport", "tcp"],
     "run.toml: line 3: [network] link_model = 'fair' with the command line's options: link model 'fair' applies "
     "to the simulator only, not to transport 'tcp'"),
    ('[network]\nprofile = "lan"\n"link-model" = "tcp"\n', ["--transport", "asyncio"],
     "run.toml: line 3: [network] link-model = 'tcp' with the command line's options: link model 'tcp' applies "
     "to the simulator only, not to transport 'asyncio'"),
    ('[network]\ntransport = "tcp"\n', ["--link-model", "fair"],
     "run.toml: line 2: [network] transport = 'tcp' with the command line's options: link model 'fair' applies "
     "to the simulator only, not to transport 'tcp'"),
])
def test_config_file_network_keys_that_conflict_with_the_command_line_name_the_line_and_key(
        text, options, expected, tmp_path):
    (tmp_path / "run.toml").write_text(text)
    line = one_error_line(fedsim_cmd("run", "fedrec", "--config", "run.toml", *options, cwd=tmp_path))
    assert line == "error: " + expected
    nothing_left(tmp_path)


def test_the_command_line_wins_over_the_config_file_and_results_json_records_what_ran(tmp_path):
    # the documented rule (docs/cli.md, "Configuration files"): the file's value is replaced, not
    # checked, and results.json holds the value the run used
    (tmp_path / "run.toml").write_text('scenario = "fedrec"\ndata = "ml1m-like"\nseed = 3\n\n[params]\nT = 5\n'
                                       'lr = 0.5\n\n[network]\nprofile = "wan"\nlink_model = "fair"\n')
    res = fedsim_cmd("run", "--config", "run.toml", "--data", "tiny", "--seed", "7", "--set", "T=1",
                     "--profile", "lan", "--link-model", "fifo", "--out", "o", "--quiet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    saved = json.loads((tmp_path / "o" / "results.json").read_text())
    assert (saved["data"], saved["seed"], saved["config"]["T"], saved["config"]["lr"]) == ("tiny", 7, 1, 0.5)
    assert (saved["network"]["profile"], saved["network"]["link_model"]) == ("lan", "fifo")


@pytest.mark.parametrize("text, expected", [
    # the scenario, data and out of the file: errors named the command-line option, or none
    ('scenario = "fedrex"\n', "run.toml: line 1: scenario: unknown scenario or protocol 'fedrex'; did you mean 'fedrec'?"),
    ('scenario = ""\n', "run.toml: line 1: scenario: empty; give a value or leave the key out"),  # it ran quickstart
    ('scenario = "fedrec"\ndata = "nosuch"\n', "run.toml: line 2: data: unknown dataset 'nosuch'"),
    ('scenario = "fedrec"\ndata = ""\n', "run.toml: line 2: data: empty"),  # it ran the default data
    ('scenario = "demo"\nout = "used"\n', "run.toml: line 2: out: used already holds files; use --force"),
])
def test_config_file_scenario_data_and_out_errors_name_the_file_and_key(text, expected, tmp_path):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("x")
    (tmp_path / "run.toml").write_text(text)
    line = one_error_line(fedsim_cmd("run", "--config", "run.toml", cwd=tmp_path))
    assert line.startswith("error: " + expected), line
    nothing_left(tmp_path)
    assert [p.name for p in (tmp_path / "used").iterdir()] == ["x"]


@pytest.mark.parametrize("text,expected", [
    ('workers = 0\n[grid]\nrounds = [1]\n', "sweep.toml: line 2: workers: must be an integer of at least 1, got 0"),
    ('address = "127.0.0.1:1"\n[grid]\nrounds = [1]\n', "sweep.toml: line 2: address is the address of a Ray cluster"),
    ('[grid]\nrounds = [-1, 2]\n', "sweep.toml: line 3: [grid] rounds: must be >= 0, got -1"),
    ('[grid]\nround = [1]\n', "sweep.toml: line 3: [grid] unknown parameter 'round' for scenario demo; did you mean 'rounds'?"),
    ('[grid]\nseed = [true]\n', "sweep.toml: line 3: [grid] seed: expected a non-negative integer, got True"),
    ('[grid]\nlink_model = ["fifo"]\n"link-model" = ["tcp"]\n',
     "sweep.toml: line 4: [grid] 'link_model' and 'link-model' are the same key; give it once"),
    ('[grid]\nprofile = ["lan", "moon"]\n', "sweep.toml: line 3: [grid] profile: unknown network profile 'moon'"),
])
def test_sweep_config_file_errors_name_the_file_and_key(text, expected, tmp_path):
    (tmp_path / "sweep.toml").write_text('scenario = "demo"\n' + text)
    line = one_error_line(fedsim_cmd("sweep", "--config", "sweep.toml", "--out", "sw", cwd=tmp_path))
    assert line.startswith("error: " + expected), line
    nothing_left(tmp_path, tmp_path / "sw")


def test_a_config_files_ray_address_under_backend_local_on_the_command_line_says_what_overrides_what(tmp_path):
    # the error said the address "needs backend = \"ray\"", which the file had: --backend local
    # on the command line had overridden it, and nothing said so
    (tmp_path / "sweep.toml").write_text('scenario = "demo"\nbackend = "ray"\naddress = "127.0.0.1:6379"\n'
                                         '[grid]\nrounds = [1]\n')
    line = one_error_line(fedsim_cmd("sweep", "--config", "sweep.toml", "--backend", "local", "--out", "sw",
                                     cwd=tmp_path))
    assert line == ('error: sweep.toml: line 3: address is the address of a Ray cluster, and --backend local runs '
                    'no Ray (it overrides the file\'s backend = "ray"); leave out --backend, or the file\'s address')
    nothing_left(tmp_path, tmp_path / "sw")


def test_sweep_config_file(tmp_path):
    (tmp_path / "sweep.toml").write_text(
        'scenario = "demo"\nworkers = 1\nquiet = true\n\n[params]\nclients = 2\n\n'
        '[grid]\nrounds = [1, 2]\nprofile = ["lan", "wan"]\n')
    res = fedsim_cmd("sweep", "--config", "sweep.toml", "--grid", "rounds=3", "--out", "sw", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    names = sorted(p.parent.name for p in (tmp_path / "sw").glob("*/results.json"))
    assert names == ["rounds=3,profile=lan", "rounds=3,profile=wan"]  # --grid replaced the file's axis
    saved = json.loads((tmp_path / "sw" / "rounds=3,profile=wan" / "results.json").read_text())
    assert saved["config"]["clients"] == 2 and saved["network"]["profile"] == "wan"
    (tmp_path / "bad.toml").write_text('scenario = "demo"\n[grid]\nrounds = 3\n')
    line = one_error_line(fedsim_cmd("sweep", "--config", "bad.toml", "--out", "sw2", cwd=tmp_path))
    assert "bad.toml: line 3: [grid] rounds: expected a list of values, got 3" in line
    assert not (tmp_path / "sw2").exists()


FORMS = ("expected HOST:PORT (a cluster's head node, port 6379 unless it was started with another), "
         "ray://HOST:PORT (Ray Client, port 10001 by default) or auto")


@pytest.mark.parametrize("address, expected", [
    ("http://127.0.0.1:8265", "--address http://127.0.0.1:8265: http:// is not a Ray address (a web address: the "
                              "Ray dashboard's, port 8265, is not where tasks are sent); " + FORMS),
    ("tcp://h:1", "--address tcp://h:1: tcp:// is not a Ray address; " + FORMS),
    ("127.0.0.1", "--address 127.0.0.1: no port; " + FORMS),
    ("127.0.0.1:notaport", "--address 127.0.0.1:notaport: the port 'notaport' is not a number from 1 to 65535; "
                           + FORMS),
    ("h:0", "--address h:0: the port '0' is not a number from 1 to 65535; " + FORMS),
    (":6379", "--address :6379: no host; " + FORMS),
    ("::1:6379", "--address ::1:6379: an IPv6 address takes brackets ([ADDRESS]:PORT); " + FORMS),
    ("h:1/x", "--address h:1/x: not a host and port; " + FORMS),
    ("", "--address is empty: " + FORMS + " (or no --address for a local Ray instance)"),
    ("local", "--address local: a local Ray instance is what no --address starts; give a cluster's address: "
              + FORMS.removeprefix("expected ")),
    ("auto", None), ("head:6379", None), ("[::1]:6379", None), ("ray://head:10001", None), ("ray://head", None),
])
def test_a_malformed_ray_address_is_refused_naming_it_and_the_expected_forms(address, expected):
    # Ray's own messages said "Invalid address format", "Name or service not known" (of
    # 'http://127.0.0.1') or named a port of another host; an empty address was "a local Ray
    # instance: Ray did not start". Checked without Ray (it need not be installed for this)
    from fedsim.studies.raypool import address_error

    error = address_error(address)
    assert (str(error) if error else None) == expected


def test_a_malformed_ray_address_is_one_error_line_before_ray_starts(tmp_path):
    # on the command line and in a config file (which names the file and key); nothing is written,
    # and Ray need not be installed to be told
    res = fedsim_cmd("sweep", "demo", "--grid", "rounds=1", "--backend", "ray", "--address",
                     "http://127.0.0.1:8265", "--out", "sw", cwd=tmp_path)
    assert one_error_line(res).startswith("error: --address http://127.0.0.1:8265: http:// is not a Ray address")
    (tmp_path / "sweep.toml").write_text('scenario = "demo"\nbackend = "ray"\naddress = "127.0.0.1"\n'
                                         '[grid]\nrounds = [1]\n')
    res = fedsim_cmd("sweep", "--config", "sweep.toml", "--out", "sw", cwd=tmp_path)
    assert one_error_line(res) == "error: sweep.toml: line 3: address 127.0.0.1: no port; " + FORMS
    nothing_left(tmp_path, tmp_path / "sw")


def test_an_unknown_host_is_named_as_such(monkeypatch):
    import socket

    from fedsim.experiment import UsageError
    from fedsim.studies import raypool

    def unknown(*a, **kw):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", unknown)
    with pytest.raises(UsageError) as e:
        raypool._check_reachable("nosuch.invalid:6379")
    assert str(e.value) == ("--address nosuch.invalid:6379: no Ray cluster answers there (the host nosuch.invalid "
                            "is not known: Name or service not known)")


def test_sweep_help_names_every_address_form_the_sweep_takes():
    # the help named HOST:PORT and ray://HOST:10001 but not auto, which docs/cli.md and the sweep take
    from fedsim.cli import build_parser

    sweep = build_parser()._subparsers._group_actions[0].choices["sweep"]
    help_text = " ".join(sweep.format_help().split())
    assert "(HOST:PORT, ray://HOST:10001 or auto; default: start a local Ray instance)" in help_text


def test_a_run_that_deadlocks_says_who_waits_for_what_without_a_traceback(tmp_path):
    # a lost message with no deadline: the run ended in a traceback whose last line advised
    # run(strict=False), an API call the command line has no way to make
    res = fedsim_cmd("run", "fedrec", "--set", "T=2", "--loss", "0.3", "--out", "o", "--quiet", cwd=tmp_path)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.splitlines()
    assert lines[0] == ("error: the run did not finish, no output folder was written: deadlock at t = 0 s: 31 "
                        "actor(s) still waiting with nothing left in flight that could wake them:")
    assert lines[1].startswith("  server waits in gather 'gradients' for 7 of 30 senders: client/0003, ")
    assert lines[-1] == ("  a lost message (--loss) or a dropped-out client (--dropout) is waited for for ever "
                         "unless the protocol has a deadline (--set deadline=SECONDS)")
    assert "strict=False" not in res.stderr
    nothing_left(tmp_path, tmp_path / "o")
    script = tmp_path / "s.py"  # a scenario script run directly says the same
    script.write_text("from fedsim.experiment import Param, scenario_main\n"
                      "from fedsim.experiment.protocol_run import protocol_scenario\n"
                      "_p = protocol_scenario('fedrec')\nPARAMS = _p.PARAMS\nrun = _p.run\n"
                      "if __name__ == '__main__':\n    raise SystemExit(scenario_main(globals()))\n")
    res = subprocess.run([sys.executable, str(script), "--T", "2", "--loss", "0.3", "--out", "o2", "--quiet"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.startswith("error: the run did not finish, no output folder was written: deadlock at")
    assert not (tmp_path / "o2").exists()


def test_a_protocol_check_of_settings_together_names_the_config_files_line(tmp_path):
    # eval_every beyond T is refused by FedRecConfig itself (two settings together): from the
    # file's [params] the message named neither the file nor the line
    (tmp_path / "run.toml").write_text("[params]\nT = 2\neval_every = 5\n")
    line = one_error_line(fedsim_cmd("run", "fedrec", "--config", "run.toml", "--data", "tiny", cwd=tmp_path))
    assert line == ("error: run.toml: line 3: [params] eval_every: eval_every = 5 is more than T = 2: "
                    "no iteration would be evaluated (allowed: 0 for never, or 1 to T)")
    nothing_left(tmp_path)
    # the same key from --set is the command line's: no file named
    line = one_error_line(fedsim_cmd("run", "fedrec", "--config", "run.toml", "--set", "eval_every=5", "--data", "tiny",
                                     cwd=tmp_path))
    assert line == ("error: eval_every = 5 is more than T = 2: no iteration would be evaluated (allowed: "
                    "0 for never, or 1 to T)")
    nothing_left(tmp_path)


@pytest.mark.parametrize("protocol", ["personalfr", "fedavg-ae"])
def test_more_autoencoder_clients_than_users_is_one_line_naming_clients(protocol, tmp_path):
    # the default 100 clients on the 30 users of `tiny`: a ValueError traceback from the user
    # partition, deep under the protocol's build; then "FedAEConfig.clients = 100", a class the user
    # never named (PersonalFR and FedAvg-AE share it) for a setting the user never set
    line = one_error_line(fedsim_cmd("run", protocol, "--data", "tiny", cwd=tmp_path))
    assert line == ("error: clients = 100 (the default) is more than the 30 users of the data: each client holds at "
                    "least one user (give clients <= 30, or 0 for one user per client)")
    nothing_left(tmp_path)


@pytest.mark.parametrize("d, cause", [
    ("10000000000000", "MemoryError: Unable to allocate"),  # 2.84 PiB: more than any address space
    ("9223372036854775807", "ValueError: array is too big"),  # NumPy: its size does not fit in an address
])
def test_a_size_too_large_for_memory_is_one_error_line_and_leaves_no_folder(d, cause, tmp_path):
    # a d the configuration's bounds accept (an int >= 1 of 64 bits) stopped the run with a
    # traceback of the server's model init
    res = fedsim_cmd("run", "fedrec", "--data", "tiny", "--set", f"d={d}", "--set", "T=1", "--out", "o", "--quiet",
                     cwd=tmp_path)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: the run did not finish, no output folder was written: actor 'server' (role "
                               f"'server') ran out of memory: {cause}"), lines[0]
    assert lines[0].endswith("; a size parameter (d, hidden, triples, clients, ...) is too large for this machine")
    nothing_left(tmp_path, tmp_path / "o")


@pytest.mark.parametrize("how", ["fedsim run", "scenario script"])
def test_a_tcp_worker_that_dies_is_an_error_naming_it_not_a_traceback(tmp_path, how):
    # the review's reproduction: `fedsim run fedrec --transport tcp` with a worker killed (kill -9)
    # printed a 35-line traceback through fedsim's internals ending in the TransportError; so did
    # the script run as `python SCRIPT` (scenario_main), after the command line was fixed
    script = tmp_path / "dies.py"
    script.write_text(
        "import os, signal\n"
        "from fedsim.experiment import scenario_main\n"
        "PARAMS = {}\n"
        "async def server(ctx):\n"
        "    await ctx.gather('x', senders=['c0', 'c1'])\n"
        "async def client(ctx, die):\n"
        "    if die:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    await ctx.send('server', 'x', 1)\n"
        "def run(ctx):\n"
        "    net = ctx.network()\n"
        "    net.add_node('server', server, role='server')\n"
        "    net.add_node('c0', client, False)\n"
        "    net.add_node('c1', client, True)\n"
        "    net.run(timeout=60)\n"
        "if __name__ == '__main__':\n"
        "    raise SystemExit(scenario_main(globals()))\n")
    out = tmp_path / "out"
    options = ("--transport", "tcp", "--out", str(out), "--quiet")
    if how == "fedsim run":
        res = fedsim_cmd("run", str(script), *options, cwd=tmp_path)
    else:
        res = subprocess.run([sys.executable, str(script), *options], capture_output=True, text=True, timeout=180,
                             cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 1, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    first = res.stderr.splitlines()[0]
    assert first.startswith("error: the run did not finish, no output folder was written: process ")
    assert "hosting c1) was killed by signal 9 (SIGKILL) during run" in first
    nothing_left(tmp_path, out)


def test_a_protocol_plugin_given_as_a_scenario_path_says_how_to_run_it(tmp_path):
    """The tutorial's file saved as fedavg_mf.py and run as `fedsim run fedavg_mf.py` (a path is
    a scenario script) was 'is not a fedsim scenario (it needs PARAMS and run(ctx))', which said
    nothing of --plugin; and `fedsim run fedavg-mf` without --plugin did not mention it either."""
    import re

    doc = (REPO / "docs" / "writing-a-protocol.md").read_text()
    (tmp_path / "fedavg_mf.py").write_text(re.findall(r"```python\n(.*?)```", doc, re.S)[0])
    line = one_error_line(fedsim_cmd("run", "fedavg_mf.py", "--quiet", cwd=tmp_path))
    assert line == ("error: fedavg_mf.py is not a fedsim scenario but a protocol plug-in (it registers "
                    "'fedavg-mf'): run it with fedsim --plugin fedavg_mf.py run fedavg-mf")
    nothing_left(tmp_path)
    line = one_error_line(fedsim_cmd("run", "fedavg-mf", "--quiet", cwd=tmp_path))
    assert line.startswith("error: unknown scenario or protocol 'fedavg-mf'")
    assert line.endswith("; a protocol in a file of your own: fedsim --plugin FILE run NAME)")
    nothing_left(tmp_path)
    # the hint's command works
    res = fedsim_cmd("--plugin", "fedavg_mf.py", "run", "fedavg-mf", "--set", "rounds=1", "--quiet", "--out", "o",
                     cwd=tmp_path)
    assert res.returncode == 0, res.stderr


def test_a_plugin_already_loaded_and_given_as_a_scenario_path_is_still_named_a_plugin(tmp_path):
    """`fedsim --plugin fedavg_mf.py run fedavg_mf.py` (the file loaded as a plug-in, then given
    where a scenario goes; also a package's module its entry point had loaded): registering the
    same spec again added no name, so the file was taken for a broken scenario, 'is not a fedsim
    scenario (it needs PARAMS and run(ctx))'. The registration it made again counts."""
    import re

    doc = (REPO / "docs" / "writing-a-protocol.md").read_text()
    (tmp_path / "fedavg_mf.py").write_text(re.findall(r"```python\n(.*?)```", doc, re.S)[0])
    line = one_error_line(fedsim_cmd("--plugin", "fedavg_mf.py", "run", "fedavg_mf.py", "--quiet", cwd=tmp_path))
    assert line == ("error: fedavg_mf.py is not a fedsim scenario but a protocol plug-in (it registers "
                    "'fedavg-mf'): run it with fedsim --plugin fedavg_mf.py run fedavg-mf")
    nothing_left(tmp_path)
    # the same from Python, in a process of its own: a plug-in file loaded here stays in this
    # process's plugin_files() (what a Ray task loads), beside the tutorial tests' own copy of the
    # same protocol, which a Ray worker then refused as registered twice
    path = str(tmp_path / "fedsim_mf_check.py")
    Path(path).write_text(f"""
from fedsim.experiment import UsageError, load_scenario
from fedsim.protocols import REGISTRY, load_plugins
load_plugins([{str(tmp_path / "fedavg_mf.py")!r}], entry_points=False)
spec = REGISTRY["fedavg-mf"]
try:
    load_scenario({str(tmp_path / "fedavg_mf.py")!r})
except UsageError as exc:
    print(exc)
print(REGISTRY["fedavg-mf"] is spec)
""")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("FEDSIM_PLUGINS", None)
    res = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    plugin = tmp_path / "fedavg_mf.py"
    # the plug-in's own spec, not the scenario load's, is back
    assert res.stdout.splitlines() == [f"{plugin} is not a fedsim scenario but a protocol plug-in (it registers "
                                       f"'fedavg-mf'): run it with fedsim --plugin {plugin} run fedavg-mf", "True"]


def test_a_plugin_loaded_as_a_scenario_is_not_left_registered(tmp_path):
    import re

    from fedsim.experiment import UsageError, load_scenario
    from fedsim.protocols import REGISTRY

    doc = (REPO / "docs" / "writing-a-protocol.md").read_text()
    path = tmp_path / "fedavg_mf.py"
    path.write_text(re.findall(r"```python\n(.*?)```", doc, re.S)[0])
    before = list(REGISTRY)
    with pytest.raises(UsageError, match="protocol plug-in"):
        load_scenario(str(path))
    assert list(REGISTRY) == before and "fedsim_scenario_fedavg_mf" not in sys.modules


_WIRES = '''
from fedsim.kernel import AsyncioNetwork, FifoLinkModel, register_link_model, register_transport


@register_link_model("rv-slow", description="fifo under another name")
class Slow(FifoLinkModel):
    pass


class Framed(AsyncioNetwork):
    pass


register_transport("rv-framed", Framed, "asyncio under another name")
'''


@pytest.mark.parametrize("with_protocol", [False, True])
def test_a_link_model_or_transport_plugin_loaded_as_a_scenario_is_not_left_registered(tmp_path, with_protocol):
    """load_scenario undid a protocol plug-in given as a scenario, but kept the link models and
    transports a plug-in file registers (and, with no protocol in it, said only 'it needs PARAMS
    and run(ctx)', nothing of --plugin, its module left in sys.modules)."""
    from fedsim.experiment import UsageError, load_scenario
    from fedsim.kernel import LINK_MODELS, TRANSPORTS
    from fedsim.protocols import REGISTRY

    source = _WIRES
    if with_protocol:
        source += ("from dataclasses import replace\nfrom fedsim.protocols import register\n"
                   "from fedsim.protocols.demo import SPEC\nregister(replace(SPEC, name='rv-demo'))\n")
    path = tmp_path / "wires.py"
    path.write_text(source)
    before = (list(REGISTRY), dict(LINK_MODELS), dict(TRANSPORTS))
    with pytest.raises(UsageError) as err:
        load_scenario(str(path))
    if with_protocol:
        assert str(err.value) == (f"{path} is not a fedsim scenario but a protocol plug-in (it registers 'rv-demo', "
                                  f"link model 'rv-slow', transport 'rv-framed'): run it with fedsim --plugin {path} "
                                  "run rv-demo")
    else:
        assert str(err.value) == (f"{path} is not a fedsim scenario but a plug-in (it registers link model 'rv-slow', "
                                  f"transport 'rv-framed'): use it with fedsim --plugin {path} run SCENARIO "
                                  "--link-model rv-slow")
    assert (list(REGISTRY), dict(LINK_MODELS), dict(TRANSPORTS)) == before
    assert "fedsim_scenario_wires" not in sys.modules


def test_a_plugin_given_as_a_scenario_is_undone_as_a_failed_plugin_load_is(tmp_path):
    """load_scenario undid a plug-in file given as a scenario path by hand, less than
    all_or_nothing undoes a failed load: a plug-in file it loaded itself stayed listed by
    plugin_files (and its module in sys.modules) though its link model was gone, so a later
    --plugin of that file was skipped as loaded; and a good scenario loaded earlier under the same
    module name was deleted from sys.modules instead of put back."""
    from fedsim.experiment import UsageError, load_scenario
    from fedsim.kernel import LINK_MODELS, TRANSPORTS
    from fedsim.protocols import REGISTRY, entry_points_loaded, plugin_files

    inner = tmp_path / "inner_wire.py"
    inner.write_text("from fedsim.kernel import FifoLinkModel, register_link_model\n\n\n"
                     "@register_link_model('rv-inner', description='fifo under another name')\n"
                     "class Inner(FifoLinkModel):\n    pass\n")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    good = tmp_path / "a" / "outer.py"
    good.write_text("PARAMS = {}\n\n\ndef run(ctx):\n    return {}\n")
    outer = tmp_path / "b" / "outer.py"
    outer.write_text(f"from fedsim.protocols import load_plugins\nload_plugins([{str(inner)!r}], entry_points=False)\n")
    mod = load_scenario(str(good))
    assert sys.modules["fedsim_scenario_outer"] is mod
    before = (list(REGISTRY), dict(LINK_MODELS), dict(TRANSPORTS), plugin_files(), entry_points_loaded())
    modules = set(sys.modules)
    with pytest.raises(UsageError) as err:
        load_scenario(str(outer))
    assert str(err.value) == (f"{outer} is not a fedsim scenario but a plug-in (it registers link model 'rv-inner'): "
                              f"use it with fedsim --plugin {outer} run SCENARIO --link-model rv-inner")
    assert (list(REGISTRY), dict(LINK_MODELS), dict(TRANSPORTS), plugin_files(), entry_points_loaded()) == before
    assert str(inner.resolve()) not in plugin_files()
    assert sorted(n for n in set(sys.modules) - modules if n.startswith("fedsim_plugin_")) == []
    assert sys.modules["fedsim_scenario_outer"] is mod  # the earlier load's module is back
    del sys.modules["fedsim_scenario_outer"]


def test_run_scenario_and_run_sweep_refuse_a_seed_or_workers_the_command_line_refuses(tmp_path):
    # run_scenario(seed=2.5) ran and recorded seed 2 (int(seed)), seed=True seed 1; run_sweep
    # likewise, and run_sweep(workers=1.5) ran with 1.5 recorded in sweep.json; the command line
    # (--seed and --workers take integers) and a config file refuse them. No folder is left
    import numpy as np

    from fedsim.experiment import UsageError, run_scenario
    from fedsim.studies.sweep import run_sweep

    for seed, message in ((2.5, "--seed must be a non-negative integer, got 2.5"),
                          (True, "--seed must be a non-negative integer, got True"),
                          ("3", "--seed must be a non-negative integer, got '3'"),
                          (-1, "--seed must be non-negative, got -1")):
        with pytest.raises(UsageError) as err:
            run_scenario("demo", seed=seed, out=tmp_path / "run", overrides={"rounds": 1, "clients": 2}, quiet=True)
        assert str(err.value) == message
        with pytest.raises(UsageError) as err:
            run_sweep("demo", {"rounds": [1]}, tmp_path / "sweep", fixed={"clients": 2}, seed=seed, workers=1)
        assert str(err.value) == message
    for workers in (1.5, True, 0):
        with pytest.raises(UsageError) as err:
            run_sweep("demo", {"rounds": [1]}, tmp_path / "sweep", fixed={"clients": 2}, workers=workers)
        assert str(err.value) == f"--workers must be an integer of at least 1, got {workers!r}"
    assert list(tmp_path.iterdir()) == []
    # as the command line refuses them: a config file's workers of 1.5, --seed 2.5
    (tmp_path / "s.toml").write_text("workers = 1.5\n")
    res = fedsim_cmd("sweep", "demo", "--grid", "rounds=1", "--config", str(tmp_path / "s.toml"), "--out",
                     str(tmp_path / "o"), cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.splitlines() == [
        f"error: {tmp_path / 's.toml'}: line 1: workers: expected int, got 1.5"], res.stderr
    res = fedsim_cmd("run", "demo", "--seed", "2.5", "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert res.returncode == 2 and "--seed: invalid int value: '2.5'" in res.stderr, res.stderr
    (tmp_path / "s.toml").unlink()
    # NumPy integers are integers: recorded as plain ints
    run_scenario("demo", seed=np.int64(3), out=tmp_path / "np", overrides={"rounds": 1, "clients": 2}, quiet=True)
    assert json.loads((tmp_path / "np" / "results.json").read_text())["seed"] == 3
    summary = run_sweep("demo", {"rounds": [1]}, tmp_path / "npsweep", fixed={"clients": 2}, seed=np.int64(2),
                        workers=np.int64(1))
    assert summary["failed"] == [] and len(summary["done"]) == 1
    assert json.loads((tmp_path / "npsweep" / "sweep.json").read_text())["workers"] == 1


def test_run_scenario_and_run_sweep_refuse_a_profile_beside_net_and_name_a_bad_net_profile_as_a_usage_error(tmp_path):
    # run_scenario(profile="wan", net=NetSpec(profile="lan")) ran on lan, the profile ignored (the
    # command line has one profile, --profile or the config file's, the command line's winning);
    # run_scenario(net="wann") raised NetworkConfigError where profile="wann" raised UsageError
    from fedsim.experiment import UsageError, run_scenario
    from fedsim.kernel import NetSpec
    from fedsim.studies.sweep import run_sweep

    both = "profile given with net: net describes the whole network (give NetSpec(profile=...) as net, or leave net out)"
    for call in (lambda **kw: run_scenario("demo", out=tmp_path / "run", overrides={"rounds": 1, "clients": 2},
                                           quiet=True, **kw),
                 lambda **kw: run_sweep("demo", {"rounds": [1]}, tmp_path / "sweep", fixed={"clients": 2}, workers=1,
                                        **kw)):
        with pytest.raises(UsageError) as err:
            call(profile="wan", net=NetSpec(profile="lan"))
        assert str(err.value) == both
        with pytest.raises(UsageError) as err:
            call(net="wann")
        assert str(err.value) == "unknown network profile 'wann'; known: ideal, lan, mobile, wan"
    assert list(tmp_path.iterdir()) == []
    run_scenario("demo", out=tmp_path / "run", overrides={"rounds": 1, "clients": 2}, quiet=True, net="wan")
    assert json.loads((tmp_path / "run" / "results.json").read_text())["profile"] == "wan"


def test_run_sweep_refuses_an_empty_data_or_out_as_fedsim_sweep_does(tmp_path, monkeypatch):
    # run_sweep(out="") wrote to the default runs/sweep-... folder and run_sweep(data="") ran every
    # point to the failure "--data is empty"; fedsim sweep (and run_scenario) refuse both up front
    from fedsim.experiment import UsageError
    from fedsim.studies.sweep import run_sweep

    monkeypatch.chdir(tmp_path)
    for kw in ({"out": ""}, {"out": "  "}, {"data": "", "out": tmp_path / "s"}):
        opt = "data" if "data" in kw else "out"
        with pytest.raises(UsageError) as err:
            run_sweep("demo", {"rounds": [1]}, fixed={"clients": 2}, workers=1, **kw)
        assert str(err.value) == f"--{opt} is empty; give a value or leave the option out"
    assert list(tmp_path.iterdir()) == []
    res = fedsim_cmd("sweep", "demo", "--grid", "rounds=1", "--out", "", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.splitlines() == ["error: --out is empty; give a value or leave the "
                                                               "option out"], res.stderr


SETUP_BUG_PLUGIN = '''
from dataclasses import dataclass

from fedsim.config import Config, param
from fedsim.protocols import Kind, ProtocolSpec, Result, register
from fedsim.protocols.common import SERVER, client_names
from fedsim.protocols.contract import server_result
from fedsim.protocols.presets import tiny_ratings


@dataclass(frozen=True)
class SetupCfg(Config):
    rounds: int = param(1, "rounds", min=0)


async def server(ctx, clients):
    ctx.begin_round(-1)
    await ctx.broadcast(clients, "hello", None)
    got = await ctx.gather("stats", senders=clients, round=-1)
    await ctx.broadcast(clients, "stop", None)
    return len(got)


async def client(ctx):
    await ctx.receive("hello")
    await ctx.send(SERVER, "stats", {"n": 1})  # (without ctx.begin_round(msg.round): labelled round 0)
    await ctx.receive("stop")


@dataclass
class Job:
    cfg: SetupCfg

    def collect(self, run):
        return Result("setup-bug", self.cfg, {}, [], run, {"n": server_result(run)})


def build(net, data, cfg=None, *, test=None, resume=None):
    names = client_names(data.n_users)
    net.add_node(SERVER, server, names, role="server")
    for name in names:
        net.add_node(name, client)
    return Job(cfg or SetupCfg())


register(ProtocolSpec(name="setup-bug", summary="answers a round -1 message under round 0", Config=SetupCfg,
                      build=build, tiny=lambda clients=3, rounds=1, seed=0: (tiny_ratings(clients, seed), SetupCfg(rounds)),
                      kinds=(Kind("hello", "server", "client", "setup"), Kind("stats", "client", "server", "setup"),
                             Kind("stop", "server", "client", "control"))))
'''


def test_a_plugin_that_deadlocks_with_nothing_lost_is_not_told_to_add_a_deadline(tmp_path):
    # an out-of-tree protocol whose clients answer a round -1 message under round 0 deadlocks on a
    # network without faults: the advice said "a lost message (--loss) or a dropped-out client
    # (--dropout) is waited for for ever unless the protocol has a deadline", though nothing was lost
    (tmp_path / "setup_bug.py").write_text(SETUP_BUG_PLUGIN)
    res = fedsim_cmd("--plugin", "setup_bug.py", "run", "setup-bug", "--out", "o", "--quiet", cwd=tmp_path)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.splitlines()
    assert lines[0] == ("error: the run did not finish, no output folder was written: deadlock at t = 0 s: 31 "
                        "actor(s) still waiting with nothing left in flight that could wake them:")
    assert lines[1] == ("  server waits in gather 'stats' for 30 of 30 senders: client/0000, client/0001, client/0002, "
                        "client/0003, client/0004, ... (25 more); their 30 'stats' messages wait in its mailbox "
                        "labelled round 0, not -1: client/0000, client/0001, client/0002, client/0003, client/0004, "
                        "... (25 more) (a node labels what it sends with the largest round it began or received, 0 at "
                        "the start: the senders answer a message of round -1 after ctx.begin_round(msg.round))")
    assert lines[-1] == ("  no message was lost and no node dropped out: the actors above wait for messages that no "
                         "actor sent, or sent with another kind or round label")
    nothing_left(tmp_path, tmp_path / "o")


@pytest.mark.parametrize("args", [["trace", "fedrec++"], ["trace", "FedRec++"], ["run", "fedrec++"],
                                  ["run", "FedRec++"], ["compare", "fedrec++"], ["trace", "FPL"]])
def test_a_protocol_named_as_its_paper_names_it_gets_the_right_hint(args, capsys, tmp_path):
    # the pages write FedRec++, the command takes fedrecpp: `fedsim trace fedrec++` said "did you mean
    # 'fedrec'?" (the other protocol), `FedRec++` and `FPL` gave no hint, and compare never gave one
    from fedsim.cli import main

    assert main([*args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    want = "fpl" if args[1] == "FPL" else "fedrecpp"
    assert err.startswith("error: ") and err.count("\n") == 1 and f"; did you mean {want!r}?" in err, err
    assert not (tmp_path / "o").exists()
