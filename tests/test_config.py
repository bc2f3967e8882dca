"""Typed values (``fedsim.config`` and ``fedsim.experiment.params``): every bad value is a
``ConfigError``/``UsageError`` naming the key, never silently coerced."""

from __future__ import annotations

import pytest

from fedsim.config import ConfigError
from fedsim.experiment.errors import UsageError
from fedsim.experiment.params import Param, check_value, parse_value
from fedsim.protocols import REGISTRY


@pytest.mark.parametrize("param, value", [
    (Param([1, 2], kind="ints"), [1.5, 2]),        # int() would truncate it to [1, 2]
    (Param([1, 2], kind="ints"), [True, 2]),       # int(True) == 1
    (Param([1, 2], kind="ints"), ["1", "x"]),      # was a bare ValueError, naming no key
    (Param([1, 2], kind="ints"), {"a": 1}),        # a TOML table iterates over its keys
    (Param([0.5], kind="floats"), [float("nan")]),  # a scalar float refuses NaN: so does a list
    (Param([0.5], kind="floats"), [True]),
    (Param(["a"], kind="strs"), [1, None]),        # str() would make them '1' and 'None'
])
def test_list_elements_are_checked_like_scalars(param, value):
    with pytest.raises(UsageError, match=r"^--set k: "):
        check_value("k", value, param)


def test_list_elements_keep_the_coercions_scalars_have():
    assert check_value("k", [2.0, 3], Param([1], kind="ints")) == [2, 3]  # TOML 2.0 is the integer 2
    assert check_value("k", [1, 2], Param([0.5], kind="floats")) == [1.0, 2.0]
    assert parse_value("k", "1,2", Param([1], kind="ints")) == [1, 2]


@pytest.mark.parametrize("text", ["nan,1", "1,inf"])
def test_non_finite_list_text_is_refused(text):
    with pytest.raises(UsageError, match="--set k: element"):
        parse_value("k", text, Param([0.5], kind="floats"))


@pytest.mark.parametrize("value", ["inf", "-inf", float("inf"), pytest.param(10 ** 400, id="huge-int")])
def test_non_finite_floats_are_refused(value):
    with pytest.raises(UsageError, match="--set lr: must be finite"):
        check_value("lr", value, Param(0.1, min=0, exclusive_min=True))


def test_config_fields_refuse_truncated_and_non_finite_values():
    cfg = REGISTRY["personalfr"].Config
    with pytest.raises(ConfigError, match=r"hidden element 1\.5 must be an integer"):
        cfg(hidden=(256, 1.5))
    with pytest.raises(ConfigError, match="lr must be finite"):
        REGISTRY["fedrec"].Config(lr=float("inf"))
    assert cfg(hidden=[64.0, 32]).hidden == (64, 32)


def test_from_strings_refuses_a_key_given_twice():
    from fedsim.config import ConfigError
    from fedsim.protocols.fedrec import FedRecConfig

    cfg = FedRecConfig.from_strings(["d=4", "T=3"], lr=0.1)
    assert (cfg.d, cfg.T, cfg.lr) == (4, 3, 0.1)
    assert FedRecConfig.from_strings(["d=4"], d=8).d == 4  # a string overrides base
    with pytest.raises(ConfigError, match="d given twice"):
        FedRecConfig.from_strings(["d=4", " d=5"])


@pytest.mark.parametrize("text, key", [
    ('scenario = ""\n', "line 1: scenario"), ('data = " "\n', "line 1: data"), ('out = ""\n', "line 1: out"),
    ('[network]\nprofile = ""\n', "line 2: [network] profile"),
    ('[network]\ntransport = ""\n', "line 2: [network] transport"),
])
def test_a_config_file_refuses_empty_text_naming_the_file_and_key(text, key, tmp_path):
    # each was read as "not given": scenario = "" ran quickstart, data = "" the default data,
    # out = "" wrote to runs/<time>-NAME, profile = "" the scenario's default profile
    from fedsim.experiment.configfile import load_config

    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(UsageError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: {key}: empty; give a value or leave the key out"


def test_the_api_refuses_empty_data_and_out(tmp_path, monkeypatch):
    from fedsim.experiment import run_scenario

    monkeypatch.chdir(tmp_path)  # (before the fix: a run in runs/ here)
    for kw in ({"data": ""}, {"out": ""}):
        with pytest.raises(UsageError, match=rf"^--{next(iter(kw))} is empty"):
            run_scenario("fedrec", quiet=True, **kw)


@pytest.mark.parametrize("value", [2 ** 63, -2 ** 63 - 1, 10 ** 20, 1e20, "99999999999999999999"])
def test_integers_beyond_64_bits_are_refused(value):
    # dim=10**20 was a NumPy traceback mid-run ("Maximum allowed dimension exceeded"), and
    # rounds=10**20 (or rounds = 1e20 in a TOML file) a run that never ended
    with pytest.raises(UsageError, match=r"^--set rounds: must fit in 64 bits"):
        check_value("rounds", value, Param(3, min=0 if not str(value).startswith("-") else None))


def test_integers_within_64_bits_are_kept():
    assert check_value("k", 2 ** 63 - 1, Param(3)) == 2 ** 63 - 1
    assert check_value("k", -2 ** 63, Param(3)) == -2 ** 63
    assert parse_value("k", "1,9223372036854775807", Param([1])) == [1, 2 ** 63 - 1]
    with pytest.raises(UsageError, match=r"^--set k: element 9223372036854775808 must fit in 64 bits"):
        parse_value("k", "1,9223372036854775808", Param([1]))
    with pytest.raises(ConfigError, match=r"^FedRecConfig\.d must fit in 64 bits"):
        REGISTRY["fedrec"].Config(d=10 ** 19)


@pytest.mark.parametrize("text", ["1,,2", "1,2,", ",1", " , "])
def test_an_empty_list_element_is_refused(text):
    # "1,,2" and "1,2," were read as [1, 2]: the empty element silently dropped
    with pytest.raises(UsageError) as info:
        parse_value("k", text, Param([1]))
    assert str(info.value) == (f"--set k: empty element in {text!r} (elements are comma separated; an empty "
                               "list is empty text)")
    with pytest.raises(ConfigError, match=r"^hidden of FedAEConfig: empty element in '64,,32'"):
        REGISTRY["personalfr"].Config.from_strings(["hidden=64,,32"])


def test_an_empty_list_is_empty_text():
    assert parse_value("k", "", Param([1])) == []
    assert parse_value("k", "  ", Param(["a"])) == []
    assert parse_value("k", " a , b ", Param(["a"])) == ["a", "b"]


def test_from_strings_names_an_unknown_base_key():
    from fedsim.protocols.fedrec import FedRecConfig

    # was a TypeError of the dataclass's __init__ ("unexpected keyword argument")
    with pytest.raises(ConfigError, match=r"^unknown parameter 'D' for FedRecConfig; did you mean 'd'\?"):
        FedRecConfig.from_strings(["T=3"], D=4)


@pytest.mark.parametrize("given, meant", [("ROUNDS", "rounds"), ("Rounds", "rounds"), ("D", "d"), ("t", "T"),
                                          ("local-epochs", "local_epochs"), ("LOCAL_EPOCHS", "local_epochs")])
def test_a_key_differing_in_case_or_hyphen_is_refused_with_the_key_meant(given, meant):
    from fedsim.config import unknown_key_message

    known = ["d", "T", "rounds", "local_epochs", "lr"]
    # difflib alone found nothing for ROUNDS, D or t: the message named no key
    assert unknown_key_message(given, known, "X") == (f"unknown parameter {given!r} for X; did you mean "
                                                      f"{meant!r}? (known: T, d, local_epochs, lr, rounds)")


def test_the_command_line_and_config_files_say_which_key_was_meant(tmp_path):
    from fedsim.experiment.configfile import load_config
    from fedsim.experiment.discovery import load_scenario
    from fedsim.experiment.params import parse_sets
    from fedsim.studies.sweep import parse_grid

    mod = load_scenario("demo")
    with pytest.raises(UsageError, match=r"^unknown parameter 'ROUNDS' for scenario demo; did you mean 'rounds'\?"):
        parse_sets(mod, ["ROUNDS=2"])
    with pytest.raises(UsageError, match=r"^--grid: unknown parameter 'DIM' for scenario demo; did you mean 'dim'\?"):
        parse_grid(mod, ["DIM=1,2"])
    path = tmp_path / "run.toml"
    path.write_text("SEED = 1\n")
    with pytest.raises(UsageError, match=r"unknown key 'SEED'; did you mean 'seed'\?"):
        load_config(path)


@pytest.mark.parametrize("grid, sep", [("rounds=1,,2", ","), ("rounds=1,2,", ","), ("seed=0,,1", ",")])
def test_a_grid_refuses_an_empty_value(grid, sep):
    from fedsim.experiment.discovery import load_scenario
    from fedsim.studies.sweep import parse_grid

    # the empty value was dropped: 1,,2 ran the points 1 and 2
    key, vals = grid.split("=")
    with pytest.raises(UsageError) as info:
        parse_grid(load_scenario("demo"), [grid])
    assert str(info.value) == f"--grid {key}: empty value in {vals!r} (values are separated by {sep!r})"
    assert parse_grid(load_scenario("demo"), ["rounds= 1 , 2 "]) == {"rounds": [1, 2]}


def test_key_lines_find_each_key_of_a_toml_text():
    from fedsim.experiment.configfile import key_lines

    text = ('# a comment\nscenario = "demo"\nnote = """\nrounds = 9\n"""\n\n[params]  # ours\nclients = 4\n'
            '"lr" = 0.1\nhidden = [\n  1,\n]\ndeadline = 2\n[ network ]\nlink-model = "fair"\nparams.x = 1\n')
    assert key_lines(text) == {("scenario",): 2, ("note",): 3, ("params",): 7, ("params", "clients"): 8,
                               ("params", "lr"): 9, ("params", "hidden"): 10, ("params", "deadline"): 13,
                               ("network",): 14, ("network", "link-model"): 15, ("network", "params", "x"): 16}


@pytest.mark.parametrize("text, expected", [
    # the key was named, not its line: in a long file, which "rounds" (of [params] or [grid])?
    ('seed = 1\n\n[params]\n# fewer\nclients = 4\nrounds = -1\n', "run.toml: line 6: [params] rounds: must be >= 0, got -1"),
    ('params = {clients = 4, rounds = -1}\n', "run.toml: line 1: [params] rounds: must be >= 0, got -1"),
    ('seed = 1\nparams.rounds = -1\n', "run.toml: line 2: [params] rounds: must be >= 0, got -1"),
    ('seed = 1\n[params]\n"rounds" = 1.5\n', "run.toml: line 3: [params] rounds: expected int, got 1.5"),
    ('\n\nseed = -2\n', "run.toml: line 3: seed: expected a non-negative integer, got -2"),
    ('[network]\nloss = 0.1\nprofil = "wan"\n', "run.toml: line 3: unknown key [network] 'profil'"),
])
def test_config_file_errors_name_the_line_of_the_key(text, expected, tmp_path):
    import argparse

    from fedsim.experiment.configfile import load_config
    from fedsim.experiment.discovery import load_scenario
    from fedsim.experiment.runner import add_run_arguments, resolve_run_options

    path = tmp_path / "run.toml"
    path.write_text(text)
    ap = argparse.ArgumentParser()
    add_run_arguments(ap)
    with pytest.raises(UsageError) as info:
        resolve_run_options(load_scenario("demo"), ap.parse_args([]), load_config(path))
    assert str(info.value).startswith(f"{tmp_path}/{expected}"), str(info.value)


def test_fedrec_refuses_a_client_rate_its_batch_clients_would_ignore():
    from fedsim.protocols.fedrec import FedRecConfig

    # PMF(B) has one rate, lr, for U and V: client_lr=0.05 ran as if not given (the message names
    # the key the user sets, --set client_lr, not the class: it said "FedRecConfig.client_lr")
    with pytest.raises(ConfigError, match=r"^client_lr is the stochastic clients' own learning rate; "
                                          r"PMF\(B\) has one rate for U and V \(lr\), got client_lr=0\.05$") as info:
        FedRecConfig(client_lr=0.05)
    assert info.value.key == "client_lr"
    assert FedRecConfig("PMF(S)", client_lr=0.05).client_lr == 0.05
    assert FedRecConfig("SVD++(S)", client_lr=0.05).client_lr == 0.05
    assert FedRecConfig(client_lr=None).client_lr is None
