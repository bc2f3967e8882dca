"""What another process loads to know this one's plug-ins (``plugin_files``, ``plugin_state``,
``load_plugin_state``) once a plug-in's registration has been removed or replaced.

A file whose protocol had been removed stayed in ``plugin_files()``; a later file registering the
same name loaded fine here, but every spawned or forkserver pool worker (and every Ray task) then
loaded both files and failed: ``a protocol named 'x' is already registered``. (A test that loaded
a tutorial plug-in in pytest's own process and removed its protocol broke every later Ray test
so.) Every load here runs in a process of its own, so that pytest's stays clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# a protocol of this file's own (its build is defined here: two files registering one name are two
# sources, which the registry refuses unless replace=True)
_PROTO = """\
from dataclasses import replace
from fedsim.protocols import REGISTRY, register

def build(net, data, cfg, **kw):
    return REGISTRY["demo"].build(net, data, cfg, **kw)

for _name in {names!r}:
    register(replace(REGISTRY["demo"], name=_name, summary=_name + " of " + __file__, build=build),
             replace={replace!r})
"""

_WIRES = """\
from fedsim.kernel import AsyncioNetwork, register_link_model, register_transport
from fedsim.kernel.sim import FifoLinkModel

class Wire(FifoLinkModel):
    pass

def framed(**kw):
    return AsyncioNetwork(**kw)

for _name in {links!r}:
    register_link_model(_name, Wire, "a wire of " + __file__)
for _name in {transports!r}:
    register_transport(_name, framed, "a transport of " + __file__)
"""

_PROBE = """\
import inspect
import json
import os
import subprocess
import sys


def known(_=None):
    '''Every protocol, link model and transport this process holds: (kind, name, the file of its
    build or factory).'''
    from fedsim.kernel.registry import LINK_MODEL_REGISTRY, TRANSPORT_REGISTRY
    from fedsim.protocols import REGISTRY

    def src(f):
        try:
            return os.path.basename(inspect.getfile(f))
        except TypeError:
            return repr(f)

    return sorted([["protocol", s.name, src(s.build)] for s in REGISTRY.specs()]
                  + [[r.kind, e.name, src(e.factory)] for r in (LINK_MODEL_REGISTRY, TRANSPORT_REGISTRY)
                     for e in r.entries()])


def fresh():
    '''known() of a fresh interpreter that loads this process's plug-in files,
    load_plugins(plugin_files()); the last line of its error if it fails.'''
    from fedsim.protocols import plugin_files

    code = ("import sys, json, pf_probe\\n"
            "from fedsim.protocols import load_plugins\\n"
            "load_plugins(sys.argv[1:], entry_points=False)\\n"
            "print(json.dumps(pf_probe.known()))\\n")
    res = subprocess.run([sys.executable, "-c", code, *plugin_files()], capture_output=True, text=True, timeout=60)
    if res.returncode:
        return res.stderr.strip().splitlines()[-1]
    return json.loads(res.stdout)


def spawned():
    '''known() of a pool worker started by spawn (pmap, as a sweep's points run), or its error.'''
    from fedsim.studies.parallel import pmap

    failed = []
    got = pmap(known, [0], workers=1, on_error=lambda i, exc: failed.append(str(exc).split(" (in the task")[0]))
    return failed[0] if failed else got[0]


def report(fresh_files=False):
    from fedsim.protocols import plugin_files

    out = {"files": [os.path.basename(f) for f in plugin_files()], "known": known()}
    if fresh_files:
        out["fresh_files"] = fresh()
    out["spawned"] = spawned()
    print(json.dumps(out))
"""


def _run(tmp_path: Path, body: str, **plugins: str) -> list[dict]:
    """Run ``body`` (after ``import pf_probe``, with the start method spawn) in a process of its
    own, the ``plugins`` (file name -> text) written into ``tmp_path``; what its reports printed."""
    for name, text in {**plugins, "pf_probe.py": _PROBE}.items():
        (tmp_path / name).write_text(text)
    main = tmp_path / "pf_main.py"
    main.write_text("import multiprocessing\n"
                    "if __name__ == '__main__':\n"
                    "    multiprocessing.set_start_method('spawn')\n"
                    "    import pf_probe\n"
                    "    from fedsim.protocols import REGISTRY, load_plugins\n"
                    "    from fedsim.kernel.registry import LINK_MODEL_REGISTRY, TRANSPORT_REGISTRY\n"
                    + "".join(f"    {line}\n" for line in body.strip().splitlines()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    env.pop("FEDSIM_PLUGINS", None)
    res = subprocess.run([sys.executable, str(main)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    return [json.loads(line) for line in res.stdout.splitlines()]


def _proto(*names: str, replace: bool = False) -> str:
    return _PROTO.format(names=names, replace=replace)


def _mine(known: list) -> list:
    """The entries of ``known`` that come from this test's files (``pf_*.py``)."""
    return [k for k in known if k[2].startswith("pf_")]


def test_a_protocol_removed_and_registered_again_by_another_file_is_known_from_that_file_in_spawned_workers(
        tmp_path):
    # the reported failure: pf_a.py's protocol removed, pf_b.py registers the name; the parent was
    # fine, but plugin_files() still listed pf_a.py, and its spawned workers (and a fresh process
    # loading plugin_files()) loaded both files and failed on pf_b.py
    [got] = _run(tmp_path, """
load_plugins(["pf_a.py", "pf_n.py"], entry_points=False)
REGISTRY.remove("pf-p")
load_plugins(["pf_b.py"], entry_points=False)
pf_probe.report(fresh_files=True)
""", **{"pf_a.py": _proto("pf-p"), "pf_n.py": "N = 1\n", "pf_b.py": _proto("pf-p")})
    # exactly the parent's protocols, link models and transports, by name and source
    assert got["spawned"] == got["fresh_files"] == got["known"]
    # pf_a.py contributes nothing any more; pf_n.py registered nothing: what it does is not known
    assert got["files"] == ["pf_n.py", "pf_b.py"]
    assert _mine(got["known"]) == [["protocol", "pf-p", "pf_b.py"]]


def test_a_file_with_one_of_its_two_protocols_removed_stays_listed_and_other_processes_forget_that_one(tmp_path):
    # pf_c.py registers two protocols and one is removed: the file stays (its other protocol is
    # needed); a process loading the parent's state forgets the removed one too (loaded whole, it
    # knew a protocol the parent did not), and pf_d.py registering that name since clashed there
    first, then = _run(tmp_path, """
load_plugins(["pf_c.py"], entry_points=False)
REGISTRY.remove("pf-q2")
pf_probe.report()
load_plugins(["pf_d.py"], entry_points=False)
pf_probe.report()
""", **{"pf_c.py": _proto("pf-q1", "pf-q2"), "pf_d.py": _proto("pf-q2")})
    assert first["files"] == ["pf_c.py"]
    assert _mine(first["known"]) == [["protocol", "pf-q1", "pf_c.py"]]
    assert first["spawned"] == first["known"]
    assert then["files"] == ["pf_c.py", "pf_d.py"]
    assert _mine(then["known"]) == [["protocol", "pf-q1", "pf_c.py"], ["protocol", "pf-q2", "pf_d.py"]]
    assert then["spawned"] == then["known"]


def test_a_protocol_replaced_by_a_later_file_is_that_files_in_other_processes(tmp_path):
    # pf_e.py's protocol replaced (replace=True) by pf_f.py's: pf_e.py is no longer listed; pf_g.py
    # keeps one protocol of two, the other replaced; pf_h.py then registers the name pf_f.py held,
    # once it was removed (loaded with pf_e.py and pf_f.py, it clashed)
    first, then = _run(tmp_path, """
load_plugins(["pf_e.py", "pf_g.py", "pf_f.py"], entry_points=False)
pf_probe.report()
REGISTRY.remove("pf-r")
load_plugins(["pf_h.py"], entry_points=False)
pf_probe.report()
""", **{"pf_e.py": _proto("pf-r"), "pf_g.py": _proto("pf-s", "pf-t"), "pf_f.py": _proto("pf-r", "pf-t", replace=True),
        "pf_h.py": _proto("pf-r")})
    assert first["files"] == ["pf_g.py", "pf_f.py"]
    assert _mine(first["known"]) == [["protocol", "pf-r", "pf_f.py"], ["protocol", "pf-s", "pf_g.py"],
                                     ["protocol", "pf-t", "pf_f.py"]]
    assert first["spawned"] == first["known"]
    assert then["files"] == ["pf_g.py", "pf_f.py", "pf_h.py"]
    assert _mine(then["known"]) == [["protocol", "pf-r", "pf_h.py"], ["protocol", "pf-s", "pf_g.py"],
                                    ["protocol", "pf-t", "pf_f.py"]]
    assert then["spawned"] == then["known"]


def test_link_models_and_transports_a_file_registered_count_as_its_protocols_do(tmp_path):
    # pf_w.py registers a link model and two transports; pf_x.py a link model only. pf_x.py's
    # removed: it is no longer listed; pf_w.py's link model and one transport removed and registered
    # again by pf_y.py: pf_w.py stays for its other transport, and the other processes hold pf_y.py's
    first, then = _run(tmp_path, """
load_plugins(["pf_w.py", "pf_x.py"], entry_points=False)
LINK_MODEL_REGISTRY.remove("pf-xwire")
LINK_MODEL_REGISTRY.remove("pf-wire")
TRANSPORT_REGISTRY.remove("pf-tr2")
pf_probe.report()
load_plugins(["pf_y.py"], entry_points=False)
pf_probe.report()
""", **{"pf_w.py": _WIRES.format(links=("pf-wire",), transports=("pf-tr", "pf-tr2")),
        "pf_x.py": _WIRES.format(links=("pf-xwire",), transports=()),
        "pf_y.py": _WIRES.format(links=("pf-wire",), transports=("pf-tr2",))})
    assert first["files"] == ["pf_w.py"]
    assert _mine(first["known"]) == [["transport", "pf-tr", "pf_w.py"]]
    assert first["spawned"] == first["known"]
    assert then["files"] == ["pf_w.py", "pf_y.py"]
    assert _mine(then["known"]) == [["link model", "pf-wire", "pf_y.py"], ["transport", "pf-tr", "pf_w.py"],
                                    ["transport", "pf-tr2", "pf_y.py"]]
    assert then["spawned"] == then["known"]


def test_a_ray_task_knows_the_drivers_plugins_as_the_driver_holds_them(tmp_path):
    # what a Ray worker does, without Ray: a fresh interpreter unpickles the task a sweep makes
    # (the plug-in files' bytes travel with it: the worker's machine need not have them) and runs
    # the point. pf_a.py's protocol was removed in the driver and pf_b.py registered its name:
    # the task carried both files, and the worker failed on pf_b.py before running the point
    for name in ("pf_a.py", "pf_b.py"):
        (tmp_path / name).write_text(_proto("pf-p"))
    (tmp_path / "pf_probe.py").write_text(_PROBE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    env.pop("FEDSIM_PLUGINS", None)
    driver = ("import json, pickle, pf_probe\n"
              "from fedsim.protocols import REGISTRY, load_plugins\n"
              "from fedsim.studies import sweep as sw\n"
              "load_plugins(['pf_a.py'], entry_points=False)\n"
              "REGISTRY.remove('pf-p')\n"
              "load_plugins(['pf_b.py'], entry_points=False)\n"
              "mod = sw.load_scenario('pf-p')\n"
              "p = sw.SweepPoint('pf-p', {'rounds': 1}, 'unused', None, 0, sw.network_spec(mod), {'rounds': 1}, {})\n"
              "open('task.pkl', 'wb').write(pickle.dumps(sw._remote_tasks([p])[0]))\n"
              "print(json.dumps(pf_probe.known()))\n")
    res = subprocess.run([sys.executable, "-c", driver], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    known = json.loads(res.stdout)
    assert _mine(known) == [["protocol", "pf-p", "pf_b.py"]]
    away = tmp_path / "away"
    away.mkdir()
    for name in ("pf_a.py", "pf_b.py"):
        (tmp_path / name).rename(away / name)
    worker = ("import json, pickle, pf_probe\n"
              "from fedsim.studies.sweep import _run_point_remote\n"
              "r = _run_point_remote(pickle.load(open('task.pkl', 'rb')))\n"
              "print(r['status'], r.get('error'), 'results.json' in r['files'])\n"
              "print(json.dumps(pf_probe.known()))\n")
    res = subprocess.run([sys.executable, "-c", worker], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    status, there = res.stdout.splitlines()
    assert status == "done None True"
    assert json.loads(there) == known  # pf-p from (a copy of) pf_b.py, by name and source


def test_a_file_that_replaced_an_entry_points_protocol_is_loaded_after_the_entry_points_in_other_processes(
        tmp_path):
    # the entry points loaded first, then pf_o.py replacing (replace=True) the name an installed
    # package's module registered: the workers loaded the files first and the entry points after,
    # and the entry point's module failed there, its name taken by pf_o.py
    pkg = tmp_path / "pf_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "pf_epmod.py").write_text(_proto("pf-ep", "pf-ep2"))
    dist = tmp_path / "pf_pkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pf-pkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[fedsim.protocols]\npf = pf_pkg.pf_epmod\n")
    [got] = _run(tmp_path, """
load_plugins([], entry_points=True)
load_plugins(["pf_o.py"], entry_points=False)
pf_probe.report()
""", **{"pf_o.py": _proto("pf-ep", replace=True)})
    assert got["spawned"] == got["known"]
    assert got["files"] == ["pf_o.py"]
    assert _mine(got["known"]) == [["protocol", "pf-ep", "pf_o.py"], ["protocol", "pf-ep2", "pf_epmod.py"]]


def test_load_plugin_state_refuses_what_is_not_a_state_and_files_not_one_per_file(tmp_path):
    # (nothing is loaded: the checks come first)
    from fedsim.protocols import PluginState, load_plugin_state

    with pytest.raises(TypeError, match=r"load_plugin_state takes a PluginState \(plugin_state\(\)\), got list"):
        load_plugin_state([str(tmp_path / "x.py")])
    state = PluginState(files=(str(tmp_path / "x.py"),), registered=((),))
    with pytest.raises(TypeError, match="load_plugin_state takes a list of paths, got the single path"):
        load_plugin_state(state, files=str(tmp_path / "y.py"))
    with pytest.raises(ValueError, match="load_plugin_state: 2 files given for the state's 1"):
        load_plugin_state(state, files=[tmp_path / "y.py", tmp_path / "z.py"])


def test_a_state_of_files_only_loads_them_all(tmp_path):
    # a PluginState made by hand, its files alone (registered left empty): every file loads
    (tmp_path / "pf_a.py").write_text(_proto("pf-p"))
    (tmp_path / "pf_b.py").write_text(_proto("pf-q"))
    code = ("from fedsim.protocols import PluginState, load_plugin_state\n"
            "print(load_plugin_state(PluginState(files=('pf_a.py', 'pf_b.py'))))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("FEDSIM_PLUGINS", None)
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "['pf-p', 'pf-q']\n"
