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
from fedsim.experiment import UsageError, list_scenarios, load_scenario
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


_BROKEN = '''"""A scenario that fails half way through its import."""
from fedsim.kernel import FifoLinkModel, register_link_model
from fedsim.protocols import register
from fedsim.protocols.demo import SPEC
from dataclasses import replace

register(replace(SPEC, name="sd-broken-demo"))
register_link_model("sd-broken-slow", type("Slow", (FifoLinkModel,), {}))
PARAMS = {"version": 1}


def run(ctx):
    return {}


def fail():
    raise RuntimeError("half way")


fail()
'''


def test_a_scenario_script_that_raises_while_importing_leaves_nothing_behind(tmp_path):
    """A scenario script that raised while being imported stayed in sys.modules, half initialised,
    with what it had registered (a protocol, a link model): a second load in the same process (a
    test, a notebook, fedsim compare) found them. Now nothing of it is kept, and the error still
    names the script's line, in its traceback and in a note."""
    import traceback

    from fedsim.kernel import LINK_MODELS, TRANSPORTS
    from fedsim.protocols import REGISTRY, plugin_files

    path = tmp_path / "sd_broken.py"
    path.write_text(_BROKEN)
    name = "fedsim_scenario_sd_broken"
    before = (list(REGISTRY), dict(LINK_MODELS), dict(TRANSPORTS), plugin_files())
    for _ in range(2):  # the same error each time: the first load left nothing the second sees
        with pytest.raises(RuntimeError) as err:
            load_scenario(str(path))
        assert str(err.value) == "half way"
        assert name not in sys.modules
        assert (list(REGISTRY), dict(LINK_MODELS), dict(TRANSPORTS), plugin_files()) == before
        frames = [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(err.value.__traceback__)]
        assert frames[-2:] == [(str(path), 20, "<module>"), (str(path), 17, "fail")]
        assert err.value.__notes__ == [f"(while loading the scenario script {path}, line 17: nothing of it was kept)"]
    # mended, it loads (its registrations kept this time), and is the module sys.modules has
    path.write_text(_BROKEN.replace("\nfail()\n", "\n").replace('{"version": 1}', '{"version": 2}'))
    try:
        mod = load_scenario(str(path))
        assert sys.modules[name] is mod and mod.PARAMS == {"version": 2}
        assert "sd-broken-demo" in REGISTRY and "sd-broken-slow" in LINK_MODELS
        # broken again: the module loaded before is back in sys.modules, with its registrations
        path.write_text("PARAMS = {}\n\n\ndef run(ctx):\n    return {}\n\n\n1 / 0\n")
        with pytest.raises(ZeroDivisionError) as err:
            load_scenario(str(path))
        assert sys.modules[name] is mod
        assert "sd-broken-demo" in REGISTRY and "sd-broken-slow" in LINK_MODELS
        assert err.value.__notes__ == [f"(while loading the scenario script {path}, line 8: nothing of it was kept)"]
        # a script that does not parse: the note names the line Python stopped at
        path.write_text("PARAMS = {}\n\ndef run(ctx:\n    return {}\n")
        with pytest.raises(SyntaxError) as err:
            load_scenario(str(path))
        assert sys.modules[name] is mod
        assert err.value.__notes__ == [f"(while loading the scenario script {path}, line 3: nothing of it was kept)"]
    finally:
        sys.modules.pop(name, None)
        REGISTRY.remove("sd-broken-demo")
        LINK_MODELS.remove("sd-broken-slow")


def test_a_script_that_is_neither_a_scenario_nor_a_plugin_is_refused_leaving_nothing_behind(tmp_path):
    # refused after the load was over, its module stayed in sys.modules, and the plug-in files it
    # had loaded itself stayed listed (a later --plugin of one was skipped as loaded already)
    from fedsim.protocols import plugin_files

    inner = tmp_path / "sd_inner_plugin.py"
    inner.write_text("X = 1\n")
    path = tmp_path / "sd_neither.py"
    path.write_text(f"from fedsim.protocols import load_plugins\nload_plugins([{str(inner)!r}], entry_points=False)\n"
                    "VALUE = 3\n")
    before = plugin_files()
    with pytest.raises(UsageError) as err:
        load_scenario(str(path))
    assert str(err.value) == f"{path} is not a fedsim scenario (it needs PARAMS and run(ctx))"
    assert "fedsim_scenario_sd_neither" not in sys.modules
    assert plugin_files() == before and str(inner) not in plugin_files()
