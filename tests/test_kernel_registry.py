"""The registries of link models and transports (``fedsim.kernel.registry``): the built-in ones
registered like a plug-in's, names and duplicates checked, and a plug-in's link model and
transport taken by every command that takes a built-in name (run, sweep over a 2-worker pool,
a Ray task's worker, config files, trace, compare --against, list). Before, ``--link-model`` and
``--transport`` took the built-in names only (``unknown link model 'slow-wire'; known: fifo,
fair, tcp``): a link model or transport of one's own ran from Python only."""

from __future__ import annotations

import csv
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fedsim.kernel import (
    LINK_MODELS, TRANSPORTS, AsyncioNetwork, FifoLinkModel, LinkModel, NetSpec, NetworkConfigError, SimNetwork,
    get_link_model, register_link_model, register_transport,
)
from fedsim.kernel.flows import FairShareLinkModel
from fedsim.kernel.registry import LINK_MODEL_REGISTRY, TRANSPORT_REGISTRY

PLUGIN = '''"""A plug-in of a link model and a transport."""
from fedsim.kernel import AsyncioNetwork, LinkModel, register_link_model, register_transport
from fedsim.kernel.ledger import RX_START, TX_END, TX_START

RATE = 1000.0  # bytes/s
DELAY = 2.0  # s, after the last byte


@register_link_model("slow-wire", description="every copy alone on a 1000 B/s wire, then 2 s more")
class SlowWire(LinkModel):
    name = "slow-wire"

    def transmit(self, net, src, dst, envelope):
        now = net.now()
        end = now + envelope.nbytes / RATE
        envelope.row[TX_START] = now
        envelope.row[TX_END] = end
        if src.spec.loss and net.draw_loss(src):
            net.lose(envelope, "link loss")
            return
        at = end + src.spec.link.latency + dst.spec.link.latency + DELAY
        envelope.row[RX_START] = at
        net.schedule(at - now, net.deliver, envelope, dst)


class FramedAsyncio(AsyncioNetwork):
    """asyncio, with a 16-byte header charged on every message."""

    def __init__(self, **kwargs):
        kwargs["framing_bytes"] = 16
        super().__init__(**kwargs)


register_transport("framed-asyncio", FramedAsyncio, "asyncio, 16 header bytes charged per message")
'''
RATE, DELAY, HEADER = 1000.0, 2.0, 16


# (an unknown name says where one of your own comes from, as an unknown protocol's message does)
PLUGIN_LM = "; a link model in a file of your own is loaded with fedsim --plugin FILE (or FEDSIM_PLUGINS=FILE)"
PLUGIN_TR = "; a transport in a file of your own is loaded with fedsim --plugin FILE (or FEDSIM_PLUGINS=FILE)"


def fedsim_cmd(*args, cwd, env=None, timeout=180):
    return subprocess.run([sys.executable, "-m", "fedsim", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=env)


@pytest.fixture
def plugin(tmp_path) -> Path:
    path = tmp_path / "wires.py"
    path.write_text(PLUGIN)
    return path


def ledger_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def check_slow_wire_times(rows: list[dict], latency: float = 0.0) -> None:
    """Every copy's times are what the plug-in's model implies (ideal profile: no latency)."""
    assert rows and all(r["status"] == "delivered" for r in rows)
    for r in rows:
        send, nbytes = float(r["send_time"]), int(r["bytes"])
        end = send + nbytes / RATE
        assert (float(r["tx_start"]), float(r["tx_end"])) == (send, end), r
        assert float(r["rx_start"]) == float(r["arrival_time"]) == end + latency + latency + DELAY, r


# -- the registries -----------------------------------------------------------------------------


def test_the_built_in_names_are_registered_in_order_and_the_old_names_still_read_them():
    assert list(LINK_MODELS) == ["fifo", "fair", "tcp"] and LINK_MODELS is LINK_MODEL_REGISTRY
    assert list(TRANSPORTS) == ["sim", "asyncio", "tcp"] and TRANSPORTS is TRANSPORT_REGISTRY
    assert LINK_MODELS["fifo"] == "store-and-forward, FIFO egress then FIFO ingress (the default)"
    assert TRANSPORTS["asyncio"] == "AsyncioNetwork: one process, real event loop, in-process mailboxes"
    assert "fair" in LINK_MODELS and "udp" not in TRANSPORTS and 3 not in TRANSPORTS
    assert [(t.name, t.link_models) for t in TRANSPORTS.entries()] == [("sim", True), ("asyncio", False),
                                                                       ("tcp", False)]
    # a name gives a new instance each time (a link model serves one network)
    a, b = get_link_model("tcp"), get_link_model("tcp")
    assert a is not b and type(a) is FairShareLinkModel and (a.tcp, a.name) == (True, "tcp")
    assert type(get_link_model("fifo")) is FifoLinkModel and get_link_model("fair").tcp is False


def test_registering_refuses_bad_names_duplicates_and_factories_that_are_not_one():
    class Mine(LinkModel):
        def transmit(self, net, src, dst, envelope):
            net.deliver(envelope, dst)

    for bad in ("", "two words", "a,b", "-x", "x=1", "a/b", 3, None):
        with pytest.raises(ValueError, match=r"^link model name .*: expected letters, digits"):
            register_link_model(bad, Mine)
        with pytest.raises(ValueError, match=r"^transport name .*: expected letters, digits"):
            register_transport(bad, SimNetwork)
    with pytest.raises(ValueError, match=r"^a link model named 'fifo' is already registered \(store-and-forward, "
                                         r"FIFO egress then FIFO ingress \(the default\)\); choose another name, "
                                         r"or pass replace=True$"):
        register_link_model("fifo", Mine)
    with pytest.raises(ValueError, match=r"^a transport named 'tcp' is already registered"):
        register_transport("tcp", AsyncioNetwork, "mine")
    with pytest.raises(TypeError, match=r"^link model 'mine': the factory must be callable"):
        register_link_model("mine", Mine())
    with pytest.raises(TypeError, match=r"^link model 'mine': dict does not subclass fedsim.kernel.LinkModel$"):
        register_link_model("mine", dict)
    with pytest.raises(TypeError, match=r"^transport 'mine': the description must be a str, got int$"):
        register_transport("mine", SimNetwork, 5)
    assert "mine" not in LINK_MODELS and "mine" not in TRANSPORTS
    try:
        assert register_link_model("mine", description="mine")(Mine) is Mine  # as a decorator
        register_link_model("mine", Mine, "mine")  # the same again (a file imported twice): no error
        with pytest.raises(ValueError, match="already registered"):
            register_link_model("mine", Mine, "another description")
        # a factory returning something else than a LinkModel is said at the run that uses it
        register_link_model("mine", lambda: {}, "not one", replace=True)
        with pytest.raises(NetworkConfigError, match=r"^link model 'mine': its registered factory .* returned dict "
                                                     r"\{\}, not a fedsim.kernel.LinkModel$"):
            SimNetwork(link_model="mine")
        # a transport takes link models when its factory has a link_model parameter (SimNetwork's
        # subclasses), or when told
        register_transport("mine", type("MySim", (SimNetwork,), {}), "a SimNetwork of mine")
        register_transport("mine-aio", functools.partial(AsyncioNetwork), "", link_models=False)
        assert (TRANSPORTS.entry("mine").link_models, TRANSPORTS.entry("mine-aio").link_models) == (True, False)
        assert type(NetSpec(transport="mine", link_model="tcp").build(0).link_model) is FairShareLinkModel
        with pytest.raises(NetworkConfigError, match=r"^link model 'tcp' applies to the simulator only, not to "
                                                     r"transport 'mine-aio' \(transports that take a link model: "
                                                     r"sim, mine\)$"):
            NetSpec(transport="mine-aio", link_model="tcp")
    finally:
        LINK_MODEL_REGISTRY.remove("mine")
        TRANSPORT_REGISTRY.remove("mine")
        TRANSPORT_REGISTRY.remove("mine-aio")
    assert list(LINK_MODELS) == ["fifo", "fair", "tcp"] and list(TRANSPORTS) == ["sim", "asyncio", "tcp"]



def test_a_link_model_factory_that_needs_arguments_is_refused_when_registered():
    # the factory is called with no arguments, once per network: a class whose constructor needs
    # one was registered, and every run on it failed with the bare TypeError of its __init__
    # ("Shared.__init__() missing 1 required positional argument: 'rate'"), naming no link model
    class Shared(LinkModel):
        def __init__(self, rate):
            self.rate = rate

        def transmit(self, net, src, dst, envelope):
            net.deliver(envelope, dst)

    with pytest.raises(TypeError, match=r"^link model 'rv-shared': the factory is called with no arguments, and "
                                        r".*Shared needs some \(missing a required argument: 'rate'\); register "
                                        r"functools.partial\(.*Shared, \.\.\.\) with them, or a function$"):
        register_link_model("rv-shared", Shared, "needs a rate")
    assert "rv-shared" not in LINK_MODELS
    try:
        register_link_model("rv-shared", functools.partial(Shared, rate=2.0), "with its rate")
        assert SimNetwork(link_model="rv-shared").link_model.rate == 2.0
    finally:
        LINK_MODEL_REGISTRY.remove("rv-shared")

def test_unknown_names_are_one_line_with_the_registered_names_and_the_closest():
    with pytest.raises(NetworkConfigError) as err:
        NetSpec(link_model="fiar")
    assert str(err.value) == "unknown link model 'fiar'; known: fifo, fair, tcp; did you mean 'fair'?" + PLUGIN_LM
    with pytest.raises(NetworkConfigError) as err:
        NetSpec(transport="asyncoi")
    assert str(err.value) == "unknown transport 'asyncoi'; known: sim, asyncio, tcp; did you mean 'asyncio'?" + PLUGIN_TR
    with pytest.raises(NetworkConfigError) as err:
        NetSpec(transport="udp")
    assert str(err.value) == "unknown transport 'udp'; known: sim, asyncio, tcp" + PLUGIN_TR


def test_the_built_in_names_build_the_same_networks_as_before(tmp_path):
    # a name now goes through the registry: the same ledger as the model's own instance, built
    # directly as before the registry (on a profile with finite rates, where the models differ)
    from fedsim.protocols import REGISTRY

    spec = REGISTRY["fedrec"]
    ledgers = {}
    for name, direct in (("fifo", FifoLinkModel), ("fair", lambda: FairShareLinkModel()),
                         ("tcp", lambda: FairShareLinkModel(tcp=True))):
        for how, model in (("name", name), ("instance", direct())):
            data, cfg = spec.tiny(4, 2, 0)
            net = NetSpec(profile="mobile", link_model=name).build(0) if how == "name" else \
                SimNetwork(seed=0, profile="mobile", link_model=model)
            spec.build(net, data, cfg)
            net.run()
            path = tmp_path / f"{name}-{how}.csv"
            net.ledger.to_csv(path)
            ledgers[name, how] = path.read_bytes()
        assert ledgers[name, "name"] == ledgers[name, "instance"], name
    assert len({ledgers[n, "name"] for n in ("fifo", "fair", "tcp")}) == 3  # (three different models)



def test_a_registered_tcpnetwork_subclass_builds_with_its_frame_header_and_refuses_other_framing():
    # NetSpec.build passed framing_bytes (0 by default) to every transport but one named 'tcp':
    # TcpNetwork refuses any framing but its frame header, so a plug-in's TcpNetwork subclass
    # failed to build ('framing_bytes is 25, got 0'), and a framing given to it was left unchecked
    from fedsim.kernel import TcpNetwork
    from fedsim.kernel.tcp import FRAME_OVERHEAD

    class TcpAgain(TcpNetwork):
        pass

    register_transport("rv-tcp", TcpAgain, "tcp under another name")
    try:
        net = NetSpec(transport="rv-tcp").build(0)
        assert type(net) is TcpAgain and net.framing_bytes == FRAME_OVERHEAD
        assert NetSpec(transport="rv-tcp", framing_bytes=FRAME_OVERHEAD).build(0).framing_bytes == FRAME_OVERHEAD
        with pytest.raises(NetworkConfigError, match=r"^framing_bytes is fixed by transport 'rv-tcp' \(its frame "
                                                     rf"header, {FRAME_OVERHEAD} bytes\), got 3$"):
            NetSpec(transport="rv-tcp", framing_bytes=3)
        assert NetSpec(transport="asyncio", framing_bytes=3).build(0).framing_bytes == 3
    finally:
        TRANSPORT_REGISTRY.remove("rv-tcp")

# -- a plug-in's link model and transport on the command line -------------------------------------


def test_a_plugin_link_model_runs_from_the_command_line_with_the_times_it_implies(plugin, tmp_path):
    res = fedsim_cmd("--plugin", str(plugin), "run", "demo", "--link-model", "slow-wire", "--ledger", "--out", "o",
                     "--quiet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    saved = json.loads((tmp_path / "o" / "results.json").read_text())
    assert (saved["network"]["link_model"], saved["network"]["transport"]) == ("slow-wire", "sim")
    rows = ledger_rows(tmp_path / "o" / "ledger.csv")
    check_slow_wire_times(rows)
    # by hand: the server's first model, 64 bytes at t = 0: 0.064 s on the wire, then 2 s
    first = rows[0]
    assert (first["src"], first["send_time"], first["bytes"]) == ("server", "0.0", "64")
    assert (float(first["tx_end"]), float(first["arrival_time"])) == (0.064, 2.064)


def test_a_plugin_transport_runs_from_the_command_line(plugin, tmp_path):
    runs = {}
    for transport in ("asyncio", "framed-asyncio"):
        res = fedsim_cmd("--plugin", str(plugin), "run", "demo", "--transport", transport, "--ledger", "--out",
                         transport, "--quiet", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        saved = json.loads((tmp_path / transport / "results.json").read_text())
        assert saved["network"]["transport"] == transport
        runs[transport] = sorted((r["round"], r["src"], r["dst"], r["kind"], int(r["bytes"]))
                                 for r in ledger_rows(tmp_path / transport / "ledger.csv"))
    assert len(runs["asyncio"]) > 10
    # the same messages, each charged the plug-in's 16-byte header
    assert runs["framed-asyncio"] == [(*r[:4], r[4] + HEADER) for r in runs["asyncio"]]
    # a link model applies to the transports that take one (the plug-in's is an asyncio one)
    res = fedsim_cmd("--plugin", str(plugin), "run", "demo", "--transport", "framed-asyncio", "--link-model",
                     "slow-wire", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == ("error: link model 'slow-wire' applies to the simulator only, not to transport "
                                  "'framed-asyncio'")


def test_unknown_names_on_the_command_line_say_the_registered_ones(plugin, tmp_path):
    res = fedsim_cmd("--plugin", str(plugin), "run", "demo", "--link-model", "slow-wired", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == ("error: unknown link model 'slow-wired'; known: fifo, fair, tcp, slow-wire; did you "
                                  "mean 'slow-wire'?" + PLUGIN_LM)
    res = fedsim_cmd("run", "demo", "--link-model", "slow-wire", cwd=tmp_path)  # the plug-in not loaded
    assert res.stderr.strip() == "error: unknown link model 'slow-wire'; known: fifo, fair, tcp" + PLUGIN_LM
    res = fedsim_cmd("--plugin", str(plugin), "compare", "demo", "--against", "framed-asycnio", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == ("error: --against 'framed-asycnio': unknown transport; known: asyncio, tcp, "
                                  "framed-asyncio; did you mean 'framed-asyncio'?" + PLUGIN_TR)
    res = fedsim_cmd("compare", "demo", "--against", "sim", cwd=tmp_path)
    assert res.stderr.strip() == ("error: --against 'sim': the simulator itself (it is the run compared with); known: "
                                  "asyncio, tcp")
    assert not (tmp_path / "runs").exists()


def test_a_config_file_names_a_plugin_link_model_loaded_through_fedsim_plugins(plugin, tmp_path):
    import os

    (tmp_path / "run.toml").write_text('scenario = "demo"\n[network]\n"link-model" = "slow-wire"\n')
    env = {**os.environ, "FEDSIM_PLUGINS": str(plugin)}
    res = fedsim_cmd("run", "--config", "run.toml", "--ledger", "--out", "o", "--quiet", cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "o" / "results.json").read_text())["network"]["link_model"] == "slow-wire"
    check_slow_wire_times(ledger_rows(tmp_path / "o" / "ledger.csv"))
    # and a transport
    (tmp_path / "t.toml").write_text('scenario = "demo"\n[network]\ntransport = "framed-asyncio"\n')
    res = fedsim_cmd("run", "--config", "t.toml", "--out", "t", "--quiet", cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "t" / "results.json").read_text())["network"]["transport"] == "framed-asyncio"


def test_fedsim_list_shows_the_plugins_link_models_and_transports(plugin, tmp_path):
    res = fedsim_cmd("--plugin", str(plugin), "list", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    models = out[out.index("link models (--link-model; a plug-in registers more: docs/network-model.md):") + 1:]
    models = models[:models.index("")]
    listed = [ln.split(None, 1) for ln in models if not ln.startswith(" " * 29)]
    assert listed == [[n, LINK_MODELS[n]] for n in LINK_MODELS] + [
        ["slow-wire", "every copy alone on a 1000 B/s wire, then 2 s more"]]
    transports = out[out.index("transports (--transport):") + 1:]
    assert [ln.split(None, 1) for ln in transports if not ln.startswith(" " * 29)] == [
        [n, TRANSPORTS[n]] for n in TRANSPORTS] + [["framed-asyncio", "asyncio, 16 header bytes charged per message"]]
    # under each, the constructor options a command-line value can be: read off the signatures
    # here (fair's own keywords; fifo and the plug-in's SlowWire take none; tcp's but the spec's
    # own fields and the object-typed ledger and placement; FramedAsyncio's **kwargs reach
    # AsyncioNetwork's)
    import inspect

    from fedsim.kernel.flows import FairShareLinkModel

    def options_under(lines, name):
        i = next(k for k, ln in enumerate(lines) if ln.split(None, 1)[0] == name)
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        return nxt.split(": ", 1)[1].split(", ") if nxt.startswith(" " * 31 + "options (") else None

    fair = sorted(k for k in inspect.signature(FairShareLinkModel.__init__).parameters if k != "self")
    assert options_under(models, "fair") == fair and options_under(models, "tcp") == fair
    assert options_under(models, "fifo") is None and options_under(models, "slow-wire") is None
    assert all(ln.startswith(" " * 31 + "options (--link-option KEY=VALUE): ") for ln in models
               if ln.startswith(" " * 29))
    tcp = options_under(transports, "tcp")
    assert "processes" in tcp and "stall_timeout" in tcp and tcp == sorted(tcp)
    assert not {"seed", "profile", "faults", "link_model", "framing_bytes", "ledger", "placement"} & set(tcp)
    assert options_under(transports, "framed-asyncio") == options_under(transports, "asyncio")
    assert "time_scale" in options_under(transports, "asyncio")


def test_a_sweep_over_plugin_names_on_a_two_worker_pool(plugin, tmp_path):
    res = fedsim_cmd("--plugin", str(plugin), "sweep", "demo", "--grid", "link_model=fifo,slow-wire",
                     "--grid", "transport=sim", "--workers", "2", "--ledger", "--out", "sw", "--quiet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "2 points, 2 run, 0 already done, 0 failed" in res.stdout
    sw = tmp_path / "sw"
    check_slow_wire_times(ledger_rows(sw / "link_model=slow-wire,transport=sim" / "ledger.csv"))
    fifo = ledger_rows(sw / "link_model=fifo,transport=sim" / "ledger.csv")
    assert fifo and all(r["arrival_time"] == "0.0" for r in fifo)  # (ideal profile: fifo takes no time)
    # the plug-in's transport as an axis, and an unknown name refused before any point runs
    res = fedsim_cmd("--plugin", str(plugin), "sweep", "demo", "--grid", "transport=asyncio,framed-asyncio",
                     "--workers", "2", "--out", "sw2", "--quiet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    points = json.loads((tmp_path / "sw2" / "sweep.json").read_text())["points"]
    assert sorted((p["point"]["transport"], p["status"]) for p in points) == [("asyncio", "done"),
                                                                             ("framed-asyncio", "done")]
    res = fedsim_cmd("--plugin", str(plugin), "sweep", "demo", "--grid", "link_model=fifo,slow-wir", "--out", "sw3",
                     cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip() == ("error: --grid link_model: unknown link model 'slow-wir'; known: fifo, fair, tcp, "
                                  "slow-wire; did you mean 'slow-wire'?" + PLUGIN_LM)
    assert not (tmp_path / "sw3").exists()


def test_a_ray_task_loads_the_plugins_link_model(plugin, tmp_path):
    # what a Ray worker does, without Ray: a fresh interpreter unpickles the task (the plug-in's
    # bytes travel with it) and runs the point, whose network names the plug-in's link model
    task = tmp_path / "task.pkl"
    driver = (
        "import pickle\n"
        "from fedsim.protocols import load_plugins, plugin_files\n"
        f"load_plugins([{str(plugin)!r}])\n"
        "from fedsim.kernel import NetSpec\n"
        "from fedsim.studies import sweep as sw\n"
        "p = sw.SweepPoint('demo', {'link_model': 'slow-wire'}, 'unused', None, 0, "
        "NetSpec(link_model='slow-wire'), {}, {})\n"
        "plugins = tuple((f, open(f, 'rb').read()) for f in plugin_files())\n"
        f"open({str(task)!r}, 'wb').write(pickle.dumps((p, None, plugins)))\n")
    subprocess.run([sys.executable, "-c", driver], check=True, timeout=60)
    plugin.rename(tmp_path / "moved.py")  # the worker's machine need not have the file
    worker = (f"import pickle, sys\nfrom fedsim.studies.sweep import _run_point_remote\n"
              f"r = _run_point_remote(pickle.load(open({str(task)!r}, 'rb')))\n"
              "print(r['status'], r.get('error'))\n"
              "sys.stdout.write(r['files']['results.json'].decode())\n")
    res = subprocess.run([sys.executable, "-c", worker], capture_output=True, text=True, timeout=60)
    assert res.stdout.startswith("done None\n"), res.stdout + res.stderr
    saved = json.loads(res.stdout.split("\n", 1)[1])
    assert saved["network"]["link_model"] == "slow-wire"
    # the run the command line makes with the plug-in's model here: the same simulated time
    res = fedsim_cmd("--plugin", str(tmp_path / "moved.py"), "run", "demo", "--link-model", "slow-wire", "--out", "o",
                     "--quiet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    here = json.loads((tmp_path / "o" / "results.json").read_text())
    assert saved["simulated_time_s"] == here["simulated_time_s"] > DELAY


def test_trace_and_compare_take_the_plugins_names(plugin, tmp_path):
    res = fedsim_cmd("--plugin", str(plugin), "trace", "fedrec", "--link-model", "slow-wire", "--out", "t",
                     cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    log = (tmp_path / "t" / "steps.log").read_text().splitlines()
    sent = [ln for ln in log if "server sends model (round 0" in ln]
    got = [ln for ln in log if "client/0000 receives model (round 0)" in ln]
    nbytes = int(sent[0].split("round 0, ")[1].split(" B)")[0])
    lat = 0.0005  # lan, each end
    assert float(got[0].split()[0]) == round((nbytes / RATE + lat + lat + DELAY) * 1000, 3)
    res = fedsim_cmd("--plugin", str(plugin), "compare", "demo", "--against", "framed-asyncio", "--out", "c",
                     "--quiet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    rows = list(csv.DictReader(open(tmp_path / "c" / "summary.csv", newline="")))
    assert [r["network"].split(" ")[0] for r in rows] == ["sim", "framed-asyncio"]


def test_a_plugin_that_fails_leaves_none_of_its_link_models_or_transports(tmp_path):
    from fedsim.protocols import load_plugins

    path = tmp_path / "half.py"
    # a file of a link model and a transport only: the note called it a "protocol plug-in file", and
    # named no line of it (load_scenario's note names the line)
    path.write_text(PLUGIN + "raise RuntimeError('half done')\n")
    line = PLUGIN.count("\n") + 1
    with pytest.raises(RuntimeError, match="half done") as err:
        load_plugins([path], entry_points=False)
    assert err.value.__notes__ == [f"(while loading the plug-in file {path.resolve()}, line {line}: nothing of it was kept)"]
    assert list(LINK_MODELS) == ["fifo", "fair", "tcp"] and list(TRANSPORTS) == ["sim", "asyncio", "tcp"]


def test_the_link_model_and_transport_entry_point_groups_are_loaded(tmp_path, monkeypatch):
    from fedsim.protocols import load_plugins

    pkg = tmp_path / "fedsim_wires_probe"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(PLUGIN.split("class FramedAsyncio")[0])
    (pkg / "transports.py").write_text("from fedsim.kernel import AsyncioNetwork, register_transport\n"
                                       "class FramedAsyncio(AsyncioNetwork):\n    pass\n"
                                       "register_transport('framed-asyncio', FramedAsyncio, 'asyncio again')\n")
    dist = tmp_path / "fedsim_wires_probe-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fedsim-wires-probe\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[fedsim.link_models]\nslow-wire = fedsim_wires_probe.models\n\n"
                                           "[fedsim.transports]\nframed = fedsim_wires_probe.transports\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert load_plugins([], entry_points=True) == []  # (no protocol among them)
        assert list(LINK_MODELS)[-1] == "slow-wire" and list(TRANSPORTS)[-1] == "framed-asyncio"
        assert type(NetSpec(transport="framed-asyncio").build(0)).__module__ == "fedsim_wires_probe.transports"
        assert type(NetSpec(link_model="slow-wire").build(0).link_model).__name__ == "SlowWire"
    finally:
        LINK_MODEL_REGISTRY.remove("slow-wire")
        TRANSPORT_REGISTRY.remove("framed-asyncio")
        for n in [n for n in sys.modules if n.startswith("fedsim_wires_probe")]:
            del sys.modules[n]


RECORDER = '''"""The simulator, recording what it delivers: a SimNetwork subclass whose __init__ takes **kwargs."""
from fedsim.kernel import SimNetwork, register_transport


class Recorder(SimNetwork):
    def __init__(self, *, record_to="", **kwargs):
        super().__init__(**kwargs)
        self.record_to = record_to


register_transport("record", Recorder, "the simulator, recording")
'''


def test_a_simnetwork_subclass_taking_kwargs_takes_a_link_model(tmp_path):
    # register_transport read only the factory's own signature: a SimNetwork subclass whose
    # __init__ passes **kwargs on was taken for a transport without a link model, and
    # --link-model fair with it was refused ("applies to the simulator only, not to transport 'record'")
    (tmp_path / "rec.py").write_text(RECORDER)
    driver = ("import sys; from fedsim.protocols import load_plugins; load_plugins([sys.argv[1]])\n"
              "from fedsim.kernel import NetSpec\n"
              "from fedsim.kernel.registry import TRANSPORT_REGISTRY\n"
              "print(TRANSPORT_REGISTRY.entry('record').link_models)\n"
              "net = NetSpec(transport='record', link_model='fair', options={'record_to': 'x'}).build(0)\n"
              "print(type(net).__name__, net.link_model.name, net.record_to)\n")
    res = subprocess.run([sys.executable, "-c", driver, str(tmp_path / "rec.py")], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n") == ["True", "Recorder fair x", ""]
    res = fedsim_cmd("--plugin", "rec.py", "run", "demo", "--transport", "record", "--link-model", "tcp", "--out",
                     "o", "--quiet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    saved = json.loads((tmp_path / "o" / "results.json").read_text())
    assert (saved["network"]["transport"], saved["network"]["link_model"]) == ("record", "tcp")


PARTIALS = '''"""Transports registered as functools.partial of a class: a name per setting."""
from functools import partial

from fedsim.kernel import SimNetwork, TcpNetwork, register_transport


class Recorder(SimNetwork):
    def __init__(self, *, record_to="", **kwargs):
        super().__init__(**kwargs)
        self.record_to = record_to


register_transport("tcp2", partial(TcpNetwork, processes=2), "tcp on 2 processes")
register_transport("record-x", partial(Recorder, record_to="x"), "the simulator, recording to x")
'''


def test_a_partial_of_a_transport_class_is_taken_as_its_class(tmp_path):
    # frames_itself and the link-model default read only a class factory: a partial of TcpNetwork
    # was built with framing_bytes=0 ("TcpNetwork's framing is its frame header: framing_bytes is 25,
    # got 0"), and a partial of a SimNetwork subclass was refused a link model
    (tmp_path / "partials.py").write_text(PARTIALS)
    driver = ("import sys; from fedsim.protocols import load_plugins; load_plugins([sys.argv[1]])\n"
              "from fedsim.kernel import NetSpec\n"
              "net = NetSpec(transport='tcp2').build(0)\n"
              "print(type(net).__name__, net.framing_bytes, net.processes)\n"
              "net = NetSpec(transport='record-x', link_model='fair').build(0)\n"
              "print(type(net).__name__, net.link_model.name, net.record_to)\n")
    res = subprocess.run([sys.executable, "-c", driver, str(tmp_path / "partials.py")], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n") == ["TcpNetwork 25 2", "Recorder fair x", ""]
    res = fedsim_cmd("--plugin", "partials.py", "run", "demo", "--transport", "tcp2", "--ledger", "--out", "o",
                     "--quiet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    saved = json.loads((tmp_path / "o" / "results.json").read_text())
    assert saved["network"]["transport"] == "tcp2"
    rows = ledger_rows(tmp_path / "o" / "ledger.csv")
    # the server's first model: 64 bytes of document (above), 25 of frame header
    first = next(r for r in rows if r["src"] == "server")
    assert (first["round"], first["bytes"]) == ("0", str(64 + 25))


BROKEN = '''"""Transports that break their contract: a run that returns nothing, a factory that makes no network."""
from fedsim.kernel import AsyncioNetwork, register_transport


class Forgetful(AsyncioNetwork):
    def run(self, **kwargs):
        super().run(**kwargs)  # (no return)


register_transport("forgetful", Forgetful, "asyncio, whose run returns None")
register_transport("nothing", lambda **kwargs: None, "a factory that returns None")
'''


def test_a_transport_that_breaks_its_contract_is_one_error_line_naming_it(tmp_path):
    # a run() that returned None failed in the protocol's collect with a traceback ending
    # "AttributeError: 'NoneType' object has no attribute 'results'"; a factory that returned None,
    # in the protocol's build ("'NoneType' object has no attribute 'add_node'"): neither named the transport
    (tmp_path / "broken.py").write_text(BROKEN)
    res = fedsim_cmd("--plugin", "broken.py", "run", "demo", "--transport", "forgetful", "--out", "o", cwd=tmp_path)
    assert (res.returncode, res.stderr.strip().splitlines()[-1]) == (2, (
        "error: transport 'forgetful' (Forgetful): run() returned None, not a fedsim.kernel.RunResult (a transport's "
        "run ends with return self.finish(duration, strict=strict); docs/network-model.md, \"Writing a transport\")"))
    res = fedsim_cmd("--plugin", "broken.py", "compare", "demo", "--against", "forgetful", "--out", "c", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.strip().splitlines()[-1].startswith(
        "error: transport 'forgetful' (Forgetful): run() returned None, not a fedsim.kernel.RunResult")
    res = fedsim_cmd("--plugin", "broken.py", "run", "demo", "--transport", "nothing", "--out", "n", cwd=tmp_path)
    assert res.returncode == 2
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error: transport 'nothing': its factory <function <lambda> at ") and last.endswith(
        "> returned NoneType None, not a fedsim.kernel.Network"), res.stderr
    assert not any((tmp_path / d).exists() for d in ("o", "c", "n"))
