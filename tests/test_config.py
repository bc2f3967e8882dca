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
    ('scenario = ""\n', "scenario"), ('data = " "\n', "data"), ('out = ""\n', "out"),
    ('[network]\nprofile = ""\n', "[network] profile"), ('[network]\ntransport = ""\n', "[network] transport"),
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
