"""Scenarios by name are this checkout's ``scenarios/`` when fedsim is imported from a checkout,
even when an import hook (an editable install of another clone or git worktree) maps
``fedsim.scenarios`` to another folder."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

import fedsim
from fedsim.experiment import list_scenarios, load_scenario
from fedsim.experiment.discovery import SCENARIO_PACKAGE

# the scenarios beside the fedsim imported: a checkout's scenarios/ folder, or (fedsim installed
# with pip install ., as CI does) the copy installed as fedsim/scenarios
_CHECKOUT = (Path(fedsim.__file__).resolve().parents[1] / "scenarios").resolve()
FROM_CHECKOUT = (_CHECKOUT / "__init__.py").is_file()
SCENARIOS = _CHECKOUT if FROM_CHECKOUT else (Path(fedsim.__file__).resolve().parent / "scenarios").resolve()


@pytest.fixture
def restore_modules():
    saved = {k: v for k, v in sys.modules.items() if k == SCENARIO_PACKAGE or k.startswith(SCENARIO_PACKAGE + ".")}
    yield
    for k in [k for k in sys.modules if k == SCENARIO_PACKAGE or k.startswith(SCENARIO_PACKAGE + ".")]:
        del sys.modules[k]
    sys.modules.update(saved)


def test_every_scenario_by_name_is_this_checkouts():
    for name, _ in list_scenarios():
        assert Path(load_scenario(name).__file__).resolve() == SCENARIOS / f"{name}.py", name


@pytest.mark.skipif(not FROM_CHECKOUT, reason="fedsim is installed, not imported from a checkout: its scenarios "
                                               "are the installed copy, which no other checkout's hook replaces")
def test_another_checkouts_package_imported_first_is_replaced(tmp_path, restore_modules):
    other = tmp_path / "other" / "scenarios"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("")
    (other / "quickstart.py").write_text("PARAMS = {}\nWHO = 'other'\n\ndef run(ctx):\n    pass\n")
    for k in [k for k in sys.modules if k == SCENARIO_PACKAGE or k.startswith(SCENARIO_PACKAGE + ".")]:
        del sys.modules[k]
    # what an editable install's import hook of the other checkout does
    spec = importlib.util.spec_from_file_location(SCENARIO_PACKAGE, other / "__init__.py",
                                                  submodule_search_locations=[str(other)])
    pkg = importlib.util.module_from_spec(spec)
    sys.modules[SCENARIO_PACKAGE] = pkg
    spec.loader.exec_module(pkg)
    importlib.import_module(f"{SCENARIO_PACKAGE}.quickstart")
    assert sys.modules[f"{SCENARIO_PACKAGE}.quickstart"].WHO == "other"
    mod = load_scenario("quickstart")
    assert Path(mod.__file__).resolve() == SCENARIOS / "quickstart.py" and not hasattr(mod, "WHO")
    assert sys.modules[f"{SCENARIO_PACKAGE}.quickstart"] is mod
