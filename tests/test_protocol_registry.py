"""The registry as the extension point: a plug-in can neither silently replace a built-in
protocol nor break another plug-in."""

from __future__ import annotations

import pickle

import pytest

from fedsim.protocols import REGISTRY, load_plugins

PLUGIN = '''
from dataclasses import dataclass
from fedsim.config import Config, param
from fedsim.protocols import Kind, ProtocolSpec, register

@dataclass(frozen=True)
class {cls}(Config):
    rounds: int = param(1, "rounds", min=1)

def build(net, data, cfg, **kw):
    raise NotImplementedError

def tiny(clients, rounds, seed):
    return None, {cls}(rounds=rounds)

register(ProtocolSpec(name={name!r}, summary="plug-in", Config={cls}, kinds=(Kind("m", "server", "client"),),
                      build=build, tiny=tiny, data="none"))
'''


def test_a_plugin_copying_a_builtin_spec_with_its_own_build_is_refused(tmp_path):
    # same name, same summary, and its own function called build (the qualname the old check compared)
    path = tmp_path / "fork.py"
    path.write_text("import dataclasses\nfrom fedsim.protocols import REGISTRY, register\n"
                    "def build(net, data, cfg, **kw):\n    raise RuntimeError('not the built-in')\n"
                    "register(dataclasses.replace(REGISTRY['fedrec'], build=build))\n")
    builtin = REGISTRY["fedrec"]
    with pytest.raises(ValueError, match="a protocol named 'fedrec' is already registered"):
        load_plugins([path], entry_points=False)
    assert REGISTRY["fedrec"] is builtin


def test_the_same_spec_registered_twice_is_fine():
    spec = REGISTRY["fedrec"]
    REGISTRY.add(__import__("dataclasses").replace(spec))  # an equal spec from the same source
    REGISTRY.add(spec)  # put the original back


def test_two_plugins_with_the_same_file_name_keep_their_own_modules(tmp_path):
    paths = []
    for sub, name, cls in (("a", "reg-test-a", "CfgA"), ("b", "reg-test-b", "CfgB")):
        (tmp_path / sub).mkdir()
        p = tmp_path / sub / "proto.py"
        p.write_text(PLUGIN.format(name=name, cls=cls))
        paths.append(p)
    try:
        assert load_plugins(paths, entry_points=False) == ["reg-test-a", "reg-test-b"]
        for name in ("reg-test-a", "reg-test-b"):
            cfg = REGISTRY[name].Config(rounds=2)
            assert pickle.loads(pickle.dumps(cfg)) == cfg  # the first one could not be pickled
    finally:
        REGISTRY.remove("reg-test-a")
        REGISTRY.remove("reg-test-b")


def test_a_plugin_protocol_named_like_a_scenario_does_not_shadow_it():
    import dataclasses

    from fedsim.experiment import UsageError, load_scenario

    REGISTRY.add(dataclasses.replace(REGISTRY["demo"], name="quickstart"))
    try:
        # `fedsim run quickstart` ran the plug-in instead of the quickstart scenario
        with pytest.raises(UsageError, match="'quickstart' is both a scenario and a registered protocol"):
            load_scenario("quickstart")
    finally:
        REGISTRY.remove("quickstart")
    assert load_scenario("quickstart").__name__.endswith("quickstart")
    assert load_scenario("demo").PROTOCOL == "demo"  # built-in protocols are no scenarios' names


@pytest.mark.parametrize("name", ["fed/avg", "x.py", ""])
def test_a_protocol_name_the_command_line_cannot_run_is_refused(name):
    import dataclasses

    # `fedsim list` listed such a protocol, `fedsim run NAME` took it for a script path
    with pytest.raises(ValueError, match="protocol name"):
        dataclasses.replace(REGISTRY["demo"], name=name)


def test_kinds_given_as_a_generator_are_kept():
    # the checks used the generator up: the spec then declared no kind at all
    import dataclasses

    from fedsim.protocols import REGISTRY

    base = REGISTRY["demo"]
    spec = dataclasses.replace(base, name="demo-gen", kinds=(k for k in base.kinds))
    assert spec.kinds == tuple(base.kinds) and spec.kinds


def test_a_plugin_that_fails_while_loading_leaves_nothing_behind_and_loads_once_fixed(tmp_path):
    # a plug-in raising after its register call stayed in sys.modules half-initialised and its
    # protocol stayed registered (pointing at that module); the fixed file, loaded again, was
    # then refused: its build had moved, so its spec was no longer "the same source"
    import sys

    path = tmp_path / "half.py"
    broken = PLUGIN.format(name="reg-test-half", cls="CfgHalf") + (
        "import dataclasses\nfrom fedsim.protocols import REGISTRY\n"
        "register(dataclasses.replace(REGISTRY['demo'], summary='replaced'), replace=True)\n"
        "raise RuntimeError('half way')\n")
    path.write_text(broken)
    demo = REGISTRY["demo"]
    before = set(REGISTRY)
    modules = {n for n in sys.modules if n.startswith("fedsim_plugin_half_")}
    try:
        with pytest.raises(RuntimeError, match="half way") as err:
            load_plugins([path], entry_points=False)
        line = broken.splitlines().index("raise RuntimeError('half way')") + 1
        assert err.value.__notes__ == [f"(while loading the plug-in file {path.resolve()}, line {line}: nothing of it was kept)"]
        assert {n for n in sys.modules if n.startswith("fedsim_plugin_half_")} == modules == set()
        assert set(REGISTRY) == before and "reg-test-half" not in REGISTRY
        assert REGISTRY["demo"] is demo  # the spec it replaced is back
        # fixed: one line more above build, so that build is at another line than the first time
        path.write_text("# fixed\n" + PLUGIN.format(name="reg-test-half", cls="CfgHalf"))
        assert load_plugins([path], entry_points=False) == ["reg-test-half"]
        mod = sys.modules[REGISTRY["reg-test-half"].build.__module__]
        assert mod.__file__ == str(path.resolve()) and REGISTRY["reg-test-half"].build is mod.build
        assert load_plugins([path], entry_points=False) == []  # loaded: not again
    finally:
        REGISTRY.remove("reg-test-half")
        REGISTRY.add(demo, replace=True)


def test_an_entry_point_plugin_that_fails_while_loading_leaves_none_of_its_modules_and_loads_once_mended(
        tmp_path, monkeypatch):
    # a failed entry-point plug-in left its package and the submodules it had imported in
    # sys.modules ("nothing of it was kept" said the note): loaded again once mended, it found the
    # stale helper module and failed the same way
    import sys

    pkg = tmp_path / "fedsim_ep_probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("READY = False\n")
    (pkg / "proto.py").write_text("from . import helpers\nif not helpers.READY:\n    raise RuntimeError('not ready')\n"
                                  + PLUGIN.format(name="reg-test-ep", cls="CfgEp"))
    dist = tmp_path / "fedsim_ep_probe-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fedsim-ep-probe\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[fedsim.protocols]\nprobe = fedsim_ep_probe.proto\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import numpy  # noqa: F401 - a module not of the plug-in, already loaded: left alone

    others = {n: m for n, m in sys.modules.items() if not n.startswith("fedsim_ep_probe")}
    before = set(REGISTRY)
    try:
        with pytest.raises(RuntimeError) as err:
            load_plugins([], entry_points=True)
        assert str(err.value) == "not ready"
        assert err.value.__notes__ == ["(while loading the protocol plug-in module fedsim_ep_probe.proto "
                                       "(entry point 'probe'): nothing of it was kept)"]
        assert sorted(n for n in sys.modules if n.startswith("fedsim_ep_probe")) == []
        assert all(sys.modules.get(n) is m for n, m in others.items())
        assert set(REGISTRY) == before
        (pkg / "helpers.py").write_text("READY = True  # mended\n")
        assert load_plugins([], entry_points=True) == ["reg-test-ep"]
        assert sys.modules["fedsim_ep_probe.helpers"].READY is True
    finally:
        REGISTRY.remove("reg-test-ep")
        for n in [n for n in sys.modules if n.startswith("fedsim_ep_probe")]:
            del sys.modules[n]


def test_a_plugin_that_loads_the_entry_points_and_then_fails_leaves_entry_points_loaded_as_it_was(
        tmp_path, monkeypatch):
    # all_or_nothing forgot the plug-ins a failed load had loaded itself (plugin_files, the entry
    # points' modules in _loaded) but not that it had loaded the entry points: entry_points_loaded()
    # stayed True, and a pool's spawn or forkserver workers then loaded entry points the parent
    # had forgotten (fedsim.studies.parallel._worker_plugins)
    from fedsim.protocols import entry_points_loaded, plugin_files
    from fedsim.protocols import registry

    monkeypatch.setattr(registry, "_entry_points", [False])
    path = tmp_path / "ep_then_fail.py"
    path.write_text("from fedsim.protocols import load_plugins\n"
                    "load_plugins([], entry_points=True)\n"
                    "raise RuntimeError('after the entry points')\n")
    files = plugin_files()
    with pytest.raises(RuntimeError, match="after the entry points"):
        load_plugins([path], entry_points=False)
    assert (entry_points_loaded(), plugin_files()) == (False, files)
    # the same load that succeeds keeps it
    path.write_text("from fedsim.protocols import load_plugins\nload_plugins([], entry_points=True)\n")
    try:
        load_plugins([path], entry_points=False)
        assert entry_points_loaded() is True and plugin_files() == [*files, str(path.resolve())]
    finally:
        registry._files[:] = files
        registry._loaded.discard(str(path.resolve()))


def test_entry_point_modules_a_failed_plugin_loaded_are_not_kept_and_load_again_once_it_is_mended(
        tmp_path, monkeypatch):
    # a plug-in file that loads the entry points and then fails: the rollback forgot the entry
    # point's protocol and that it was loaded, but kept its modules in sys.modules; loaded again
    # (the file mended, the package updated), the entry point's import found the stale module and
    # ran nothing: its protocol was never registered again (load_plugins returned [])
    import sys

    from fedsim.protocols import registry

    monkeypatch.setattr(registry, "_entry_points", [False])
    monkeypatch.setattr(registry, "_loaded", set(registry._loaded))
    monkeypatch.setattr(registry, "_files", list(registry._files))
    pkg = tmp_path / "fedsim_ep_nested"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("SUMMARY = 'first'\n")
    proto = PLUGIN.format(name="reg-test-nested", cls="CfgNested").replace(
        'summary="plug-in"', "summary=helpers.SUMMARY")
    (pkg / "proto.py").write_text("from . import helpers\n" + proto)
    dist = tmp_path / "fedsim_ep_nested-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fedsim-ep-nested\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[fedsim.protocols]\nnested = fedsim_ep_nested.proto:build\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "outer.py"
    path.write_text("from fedsim.protocols import load_plugins\nload_plugins([], entry_points=True)\n"
                    "raise RuntimeError('after the entry points')\n")
    import numpy  # noqa: F401 - a module not of the plug-ins, already loaded: left alone

    others = {n: m for n, m in sys.modules.items() if not n.startswith("fedsim_ep_nested")}
    before = set(REGISTRY)
    try:
        with pytest.raises(RuntimeError, match="after the entry points"):
            load_plugins([path], entry_points=False)
        assert sorted(n for n in sys.modules if n.startswith("fedsim_ep_nested")) == []
        assert all(sys.modules.get(n) is m for n, m in others.items())
        assert set(REGISTRY) == before
        # the package updated and the file mended: both loaded afresh
        (pkg / "helpers.py").write_text("SUMMARY = 'second'\n")
        path.write_text("from fedsim.protocols import load_plugins\nload_plugins([], entry_points=True)\n")
        assert load_plugins([path], entry_points=False) == ["reg-test-nested"]
        assert REGISTRY["reg-test-nested"].summary == "second"
        assert REGISTRY["reg-test-nested"].build is sys.modules["fedsim_ep_nested.proto"].build
    finally:
        REGISTRY.remove("reg-test-nested")
        for n in [n for n in sys.modules if n.startswith("fedsim_ep_nested") or n.startswith("fedsim_plugin_outer_")]:
            del sys.modules[n]
