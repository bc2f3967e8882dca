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
        assert " ".join(f"{p.help} ({p.describe()}; default {p.default})".split()) in out, (name, key)


def test_a_percent_sign_in_a_parameter_help_is_printed_as_is(capsys, monkeypatch):
    # argparse %-formats help: "95 % CI" was a ValueError traceback (fpl_*), "1 % of" a TypeError
    mod = load_scenario("privacy_audit")
    out = _help(mod, capsys, monkeypatch)
    assert "the learning rate has decayed to 1 % of gamma by 40" in out
    assert "fit on the 80 %, choose on test" in _help(load_scenario("fpl_pi"), capsys, monkeypatch)
