"""``python scenarios/NAME.py --help`` prints every parameter with its type, default and help,
and exits 0 (scenario_main builds an argparse option of each parameter)."""

from __future__ import annotations

import pytest

from fedsim.experiment import list_scenarios, load_scenario, scenario_main

NAMES = [name for name, _ in list_scenarios()]


def _help(mod, capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "100000")  # argparse wraps at the terminal's width (and at hyphens)
    with pytest.raises(SystemExit) as exc:
        scenario_main(vars(mod), ["--help"])
    out, err = capsys.readouterr()
    assert exc.value.code == 0 and err == "", err
    return " ".join(out.split())


@pytest.mark.parametrize("name", NAMES)
def test_script_help_lists_every_parameter(name, capsys, monkeypatch):
    mod = load_scenario(name)
    out = _help(mod, capsys, monkeypatch)
    assert out.startswith(f"usage: scenarios/{mod.__name__.rsplit('.', 1)[-1]}.py")
    for key, p in mod.PARAMS.items():
        opt = f"--{key.replace('_', '-')} {p.type_name.upper()}"
        assert opt in out, (name, opt)
        assert " ".join(f"{p.help} ({p.describe()}; default {p.default_text()})".split()) in out, (name, key)


def test_a_percent_sign_in_a_parameter_help_is_printed_as_is(capsys, monkeypatch):
    # argparse %-formats help: "95 % CI" was a ValueError traceback (fpl_*), "1 % of" a TypeError
    mod = load_scenario("privacy_audit")
    out = _help(mod, capsys, monkeypatch)
    assert "the learning rate has decayed to 1 % of gamma by 40" in out
    assert "fit on the 80 %, choose on test" in _help(load_scenario("fpl_pi"), capsys, monkeypatch)


def test_defaults_are_shown_as_typed_in_both_helps(capsys, monkeypatch):
    # the script's help showed Python lists ("default ['fedrec', 'fpl']") where fedsim run NAME --help
    # shows "fedrec,fpl"; an empty default or choice ('': from the settings) showed as nothing
    out = _help(load_scenario("fault_study"), capsys, monkeypatch)
    assert "(strs; one of fedrec, fpl, personalfr; default fedrec,fpl,personalfr)" in out
    assert "default [" not in out
    out = _help(load_scenario("fpl_pi"), capsys, monkeypatch)
    assert "(str; one of '', paper, code; default '')" in out
    assert "(floats; default '')" in out  # pis: from the settings
    from fedsim.cli import params_help

    rows = {line.split()[0]: line for line in params_help(load_scenario("fpl_pi")).splitlines()[3:]}
    assert rows["user_filter"].split()[1:7] == ["str;", "one", "of", "'',", "paper,", "code"]
    assert rows["user_filter"].split()[7] == "''" and rows["pis"].split()[2] == "''"
    assert "  sFPL,sFPL+,pFPL,pFPL+  FPL presets to run" in rows["presets"]  # the default column, then the help
