"""Bad input at the public entry points is refused with an error naming the parameter, key, file
or peer; nothing is coerced (``int(1.5)``, ``bool("yes")``) or dropped silently, and no bare
built-in error (an ``AttributeError`` from deep inside, a ``KeyError`` of the key alone) is left
to the caller to decode. Each test names what the call did before."""

from __future__ import annotations

import re

import pytest


# -- run_scenario: what is run, and its overrides ---------------------------------------------

@pytest.mark.parametrize("mod, shown", [(5, "int 5"), (None, "None"), (b"demo", "bytes b'demo'")])
def test_run_scenario_refuses_a_scenario_that_is_no_module_nor_str(tmp_path, mod, shown):
    # 5 was "AttributeError: 'int' object has no attribute '__name__'" (from scenario_name)
    from fedsim.experiment import run_scenario

    shown = "NoneType None" if mod is None else shown
    with pytest.raises(TypeError, match="^" + re.escape("run_scenario takes a scenario module, or a scenario's name "
                                                        f"or path (str), got {shown}") + "$"):
        run_scenario(mod, out=str(tmp_path / "run"), quiet=True)
    assert list(tmp_path.iterdir()) == []


def test_run_scenario_refuses_a_module_that_is_no_scenario(tmp_path):
    # "AttributeError: module 're' has no attribute 'PARAMS'"
    from fedsim.experiment import UsageError, run_scenario

    with pytest.raises(UsageError, match=r"^module re is not a fedsim scenario \(it needs PARAMS and run\(ctx\)\)$"):
        run_scenario(re, out=str(tmp_path / "run"), quiet=True)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("overrides, shown", [
    (["rounds=2"], "list ['rounds=2']; parse_sets(scenario, strings) makes one of key=value strings"),
    ([], "list []; parse_sets(scenario, strings) makes one of key=value strings"),
    (("rounds", 2), "tuple ('rounds', 2); parse_sets(scenario, strings) makes one of key=value strings"),
    ("rounds=2", "str 'rounds=2'"),
])
def test_run_scenario_refuses_overrides_that_are_no_mapping(tmp_path, overrides, shown):
    # a list was "AttributeError: 'list' object has no attribute 'items'"; [] ran with the defaults
    from fedsim.experiment import load_scenario, resolve_config, run_scenario

    message = "^" + re.escape(f"overrides must be a mapping {{parameter: value}}, got {shown}") + "$"
    with pytest.raises(TypeError, match=message):
        run_scenario("demo", out=str(tmp_path / "run"), quiet=True, overrides=overrides)
    with pytest.raises(TypeError, match=message):
        resolve_config(load_scenario("demo"), overrides)
    assert list(tmp_path.iterdir()) == []


def test_run_scenario_refuses_an_override_key_that_is_no_str(tmp_path):
    # {1: 2} was "AttributeError: 'int' object has no attribute 'strip'" (the did-you-mean hint)
    from fedsim.experiment import run_scenario

    with pytest.raises(TypeError, match=r"^overrides: a key is a parameter name \(str\), got int 1$"):
        run_scenario("demo", out=str(tmp_path / "run"), quiet=True, overrides={1: 2})
    assert list(tmp_path.iterdir()) == []
    res = run_scenario("demo", out=str(tmp_path / "run"), quiet=True, overrides={"rounds": 1, "clients": 2})
    assert res["config"]["rounds"] == 1 and res["config"]["clients"] == 2
