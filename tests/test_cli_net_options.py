"""Constructor options of a link model or transport on the command line: ``--link-option
KEY=VALUE``, ``--transport-option KEY=VALUE`` (``fedsim run``, ``trace``, ``compare``, ``sweep``),
``[network] link_options`` and a sweep's ``link_options.KEY`` / ``transport_options.KEY`` axes.
Before, no command-line option reached a plug-in's constructor (a ``functools.partial`` per value
had to be registered). Plug-ins are loaded only in subprocesses (an in-process load leaks into
``plugin_files()``)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# a link model of a plug-in: each copy alone on a wire of `rate` bytes/s, delivered `extra` s after
# its last byte; and a SimNetwork subclass that charges `header` framing bytes a copy
PLUGIN = '''\
from fedsim.kernel import LinkModel, SimNetwork, register_link_model, register_transport
from fedsim.kernel.ledger import RX_START, TX_END, TX_START


@register_link_model("wire", description="each copy alone on a wire of rate B/s, then extra s")
class Wire(LinkModel):
    def __init__(self, rate: float = 1000.0, extra=0.0):
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate}")
        self.rate = rate
        self.extra = extra

    def transmit(self, net, src, dst, envelope):
        now = net.now()
        end = now + envelope.nbytes / self.rate
        envelope.row[TX_START], envelope.row[TX_END] = now, end
        if src.spec.loss and net.draw_loss(src):
            net.lose(envelope, "link loss")
            return
        envelope.row[RX_START] = end
        net.schedule(end - now + self.extra, net.deliver, envelope, dst)


class Headed(SimNetwork):
    def __init__(self, *, header: int = 0, **kwargs):
        super().__init__(**{**kwargs, "framing_bytes": header})


register_transport("headed", Headed, "the simulator, header bytes charged a copy")
'''


def _env() -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("FEDSIM_PLUGINS", None)
    return env


def _fedsim(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    plugin = tmp_path / "wires.py"
    if not plugin.exists():
        plugin.write_text(PLUGIN)
    return subprocess.run([sys.executable, "-m", "fedsim", "--plugin", str(plugin), *args], cwd=tmp_path,
                          env=_env(), capture_output=True, text=True, timeout=120)


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _first(path: Path) -> tuple[float, float, int]:
    """(tx_end, arrival_time, bytes) of the ledger's first copy (the server's 'weights' to client/000)."""
    row = _rows(path)[0]
    assert (row["src"], row["dst"], row["kind"]) == ("server", "client/000", "weights")
    return float(row["tx_end"]), float(row["arrival_time"]), int(row["bytes"])


def test_link_options_reach_a_plugin_link_models_constructor_recorded_and_byte_identical(tmp_path):
    # demo's weights document is 64 bytes: at rate 500 B/s it ends 64 / 500 = 0.128 s after its send
    # (t = 0) and arrives extra = 0.5 s later, 0.628 s; without the options (rate 1000): 0.064 s
    for out in ("a", "b"):
        res = _fedsim(tmp_path, "run", "demo", "--link-model", "wire", "--link-option", "rate=500",
                      "--link-option", "extra=0.5", "--ledger", "--quiet", "--out", out)
        assert res.returncode == 0, res.stderr
    assert _first(tmp_path / "a" / "ledger.csv") == (0.128, 0.628, 64)
    network = json.loads((tmp_path / "a" / "results.json").read_text())["network"]
    assert network["link_model"] == "wire" and network["link_options"] == {"extra": 0.5, "rate": 500.0}
    assert network["options"] == {}
    # the same seed and options: the same ledger, byte for byte
    assert (tmp_path / "a" / "ledger.csv").read_bytes() == (tmp_path / "b" / "ledger.csv").read_bytes()
    res = _fedsim(tmp_path, "run", "demo", "--link-model", "wire", "--ledger", "--quiet", "--out", "c")
    assert res.returncode == 0, res.stderr
    assert _first(tmp_path / "c" / "ledger.csv") == (0.064, 0.064, 64)
    assert "link_options" not in json.loads((tmp_path / "c" / "results.json").read_text())["network"]


_ERRORS = '''\
import contextlib, io, json, sys
from fedsim.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = main(argv)
    out.append([rc, err.getvalue()])
print(json.dumps(out))
'''


def test_a_wrong_option_is_one_error_line_naming_it_the_plugin_and_the_closest_and_writes_nothing(tmp_path):
    plugin = tmp_path / "wires.py"
    plugin.write_text(PLUGIN)
    base = ["--plugin", str(plugin), "run", "demo", "--quiet", "--out", "x"]
    cases = [
        ["--link-model", "wire", "--link-option", "rat=5"],
        ["--link-model", "wire", "--link-option", "rate=fast"],
        ["--link-model", "wire", "--link-option", "rate=-1"],
        ["--link-model", "wire", "--link-option", "rate"],
        ["--link-model", "wire", "--link-option", "rate=1", "--link-option", "rate=2"],
        ["--link-model", "wire", "--transport", "asyncio", "--link-option", "rate=5"],
        ["--transport", "headed", "--transport-option", "heder=16"],
        ["--transport", "headed", "--transport-option", "header=x"],
        ["--transport", "tcp", "--transport-option", "processes=0"],
        ["--transport", "tcp", "--transport-option", "placement=x"],
        ["--transport-option", "profile=wan"],
    ]
    argvs = [base + c for c in cases] + [["compare", "demo", "--processes", "2", "--transport-option", "processes=2",
                                          "--quiet", "--out", "x"]]
    res = subprocess.run([sys.executable, "-c", _ERRORS, json.dumps(argvs)], cwd=tmp_path,
                         env=_env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert [rc for rc, _ in got] == [2] * len(argvs)
    lines = [err for _, err in got]
    assert all(err.count("\n") == 1 and err.startswith("error: ") for err in lines), lines
    assert lines[0] == (f"error: --link-option rat: link model 'wire' (a plug-in's, {plugin}) takes no option 'rat' "
                        "(its options: extra, rate); did you mean 'rate'?\n")
    assert lines[1] == "error: --link-option rate: expected float, got 'fast'\n"
    assert lines[2].startswith("error: link model 'wire' with options rate=-1.0: its registered factory Wire raised "
                               "ValueError: rate must be > 0, got -1.0 (")
    assert lines[3] == "error: --link-option expects KEY=VALUE, got 'rate'\n"
    assert lines[4] == "error: --link-option rate: given twice; give each key once\n"
    assert lines[5] == ("error: --link-option: transport 'asyncio' takes no link model (it runs without one), so no "
                        "link model options\n")
    assert lines[6].startswith(f"error: --transport-option heder: transport 'headed' (a plug-in's, {plugin}) takes no "
                               "option 'heder' (its options: header, ")
    assert lines[6].endswith("; did you mean 'header'?\n")
    assert lines[7] == "error: --transport-option header: expected int, got 'x'\n"
    assert lines[8] == ("error: options for transport 'tcp': processes must be an integer of at least 1 (or None: "
                        "one per node), got 0\n")
    assert lines[9].startswith("error: --transport-option placement: transport 'tcp' takes placement as ")
    assert lines[10] == ("error: --transport-option profile: not an option of the transport: profile is the "
                         "NetSpec's own field (NetSpec(profile=...))\n")
    assert lines[11] == ("error: --processes and --transport-option processes: the same option given twice; give it "
                         "once\n")
    assert not (tmp_path / "x").exists()


def test_transport_options_reach_a_plugin_transport_and_trace_takes_link_options(tmp_path):
    res = _fedsim(tmp_path, "run", "demo", "--transport", "headed", "--transport-option", "header=16",
                  "--link-model", "wire", "--link-option", "rate=100", "--ledger", "--quiet", "--out", "h")
    assert res.returncode == 0, res.stderr
    # 64 document bytes + 16 of header = 80 bytes at 100 B/s: 0.8 s
    assert _first(tmp_path / "h" / "ledger.csv") == (0.8, 0.8, 80)
    network = json.loads((tmp_path / "h" / "results.json").read_text())["network"]
    assert network["options"] == {"header": 16} and network["link_options"] == {"rate": 100.0}
    # a trace runs on its own simulator: --link-option, and no --transport-option
    res = _fedsim(tmp_path, "trace", "demo", "--clients", "2", "--link-model", "wire", "--link-option", "rate=100",
                  "--ledger", "--html", "--out", "t")
    assert res.returncode == 0, res.stderr
    row = _rows(tmp_path / "t" / "ledger.csv")[0]
    assert (row["kind"], row["bytes"], float(row["tx_end"])) == ("weights", "56", 0.56)  # 56 B at 100 B/s


def test_a_sweep_varies_a_link_option_as_a_grid_axis_and_resumes_by_it(tmp_path):
    sweep = ["sweep", "demo", "--link-model", "wire", "--grid", "link_options.rate=500,1000", "--workers", "1",
             "--ledger", "--quiet", "--out", "sw"]
    res = _fedsim(tmp_path, *sweep)
    assert res.returncode == 0, res.stderr
    for value, end in (("500", 0.128), ("1000", 0.064)):
        point = tmp_path / "sw" / f"link_options.rate={value}"
        assert _first(point / "ledger.csv") == (end, end, 64)
        assert json.loads((point / "results.json").read_text())["network"]["link_options"] == {"rate": float(value)}
    # another fixed option: the points are another configuration, not done
    res = _fedsim(tmp_path, *sweep, "--link-option", "extra=0.5")
    assert res.returncode == 2
    assert "sw holds 2 point(s) run with another configuration (link_options.rate=500: link_options={'rate': 500.0}, " \
           "now {'extra': 0.5, 'rate': 500.0};" in res.stderr
    res = _fedsim(tmp_path, "sweep", "demo", "--link-model", "wire", "--grid", "link_options.rat=500", "--out", "s2")
    assert (res.returncode, res.stderr.splitlines()[-1]) == (2, (
        f"error: --grid link_options.rat: link model 'wire' (a plug-in's, {tmp_path / 'wires.py'}) takes no option "
        "'rat' (its options: extra, rate); did you mean 'rate'?"))
    # the bare name of an option is no axis (it may be a parameter's too): the error says how to write it
    res = _fedsim(tmp_path, "sweep", "demo", "--link-model", "wire", "--grid", "rate=500", "--out", "s2")
    assert (res.returncode, res.stderr.splitlines()[-1]) == (2, (
        "error: --grid: unknown parameter 'rate' for scenario demo (known: clients, deadline, dim, lr, rounds, seed, "
        "data, profile, link_model, transport, loss, dropout); rate is an argument of the constructor of link model "
        "'wire': write --grid link_options.rate=..."))
    assert not (tmp_path / "s2").exists()


_SPAWN = '''\
import multiprocessing, sys
if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")
    from fedsim.cli import main
    sys.exit(main(["--plugin", "wires.py", "sweep", "demo", "--link-model", "wire", "--link-option", "extra=0.5",
                   "--grid", "link_options.rate=500", "--workers", "1", "--ledger", "--quiet", "--out", "sw"]))
'''


def test_spawned_sweep_workers_receive_the_options_with_their_points(tmp_path):
    (tmp_path / "wires.py").write_text(PLUGIN)
    (tmp_path / "main.py").write_text(_SPAWN)
    res = subprocess.run([sys.executable, "main.py"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                         timeout=180)
    assert res.returncode == 0, res.stderr
    # (one point: a sweep plots nothing then, which takes most of a two-point sweep's seconds)
    assert _first(tmp_path / "sw" / "link_options.rate=500" / "ledger.csv") == (0.128, 0.628, 64)


def test_a_config_files_network_link_options_and_grid_axis(tmp_path):
    (tmp_path / "run.toml").write_text('[network]\nlink_model = "wire"\nlink_options = {rate = 500, extra = 0.5}\n')
    res = _fedsim(tmp_path, "run", "demo", "--config", "run.toml", "--link-option", "extra=0.25", "--ledger",
                  "--quiet", "--out", "r")
    assert res.returncode == 0, res.stderr
    assert _first(tmp_path / "r" / "ledger.csv") == (0.128, 0.378, 64)  # the command line's extra over the file's
    (tmp_path / "bad.toml").write_text('[network]\nlink_model = "wire"\nlink_options = {rat = 500}\n')
    res = _fedsim(tmp_path, "run", "demo", "--config", "bad.toml", "--quiet", "--out", "b")
    assert (res.returncode, res.stderr) == (2, (
        f"error: bad.toml: line 3: [network] link_options.rat: link model 'wire' (a plug-in's, {tmp_path / 'wires.py'}) "
        "takes no option 'rat' (its options: extra, rate); did you mean 'rate'?\n"))
    (tmp_path / "sweep.toml").write_text('[network]\nlink_model = "wire"\ntransport = "headed"\n\n[grid]\n'
                                         'link_options.rate = [250.0]\ntransport_options.header = [16]\n')
    res = _fedsim(tmp_path, "sweep", "demo", "--config", "sweep.toml", "--workers", "1", "--ledger", "--quiet",
                  "--out", "s")
    assert res.returncode == 0, res.stderr
    point = tmp_path / "s" / "link_options.rate=250.0,transport_options.header=16"
    assert _first(point / "ledger.csv") == (0.32, 0.32, 80)  # 64 + 16 bytes at 250 B/s
    network = json.loads((point / "results.json").read_text())["network"]
    assert (network["options"], network["link_options"]) == ({"header": 16}, {"rate": 250.0})


def test_compare_gives_the_against_transport_its_options_and_the_simulator_the_link_options(tmp_path):
    res = _fedsim(tmp_path, "compare", "demo", "--against", "asyncio", "--transport-option", "time_scale=0.5",
                  "--link-model", "wire", "--link-option", "rate=500", "--ledger", "--quiet", "--out", "c")
    assert res.returncode == 0, res.stderr
    assert [r["network"] for r in _rows(tmp_path / "c" / "summary.csv")] == [
        "sim (lan, wire link model (rate=500.0))", "asyncio (time_scale=0.5)"]
    sim = [r for r in _rows(tmp_path / "c" / "ledger.csv") if r["run"] == "00001-sim"]
    # the simulator's run on the wire of 500 B/s: 64 B sent at t = 0 end at 0.128 s
    assert (sim[0]["kind"], sim[0]["bytes"], float(sim[0]["tx_end"])) == ("weights", "64", 0.128)


_DRIVER = '''\
import pickle
from fedsim.protocols import load_plugins
load_plugins(["wires.py"], entry_points=False)
from fedsim.kernel import NetSpec
from fedsim.studies.sweep import SweepPoint, _remote_tasks
net = NetSpec(link_model="wire", link_options={"rate": 500, "extra": 0.5})
point = SweepPoint("demo", {"link_options.rate": "500"}, "sw/link_options.rate=500", None, 0, net, {}, {}, True)
with open("task.pkl", "wb") as f:
    pickle.dump(_remote_tasks([point])[0], f)
'''

_RAY_WORKER = '''\
import pickle, sys
from fedsim.protocols import plugin_files
from fedsim.studies.sweep import _run_point_remote
with open(sys.argv[1], "rb") as f:
    task = pickle.load(f)
assert not plugin_files(), plugin_files()
res = _run_point_remote(task)
assert res["status"] == "done", res
sys.stdout.write(res["files"]["ledger.csv"].decode())
'''


def test_a_ray_task_receives_the_options_with_its_point(tmp_path):
    # what a Ray worker runs for a point (_run_point_remote: the task pickled by the driver, the
    # plug-in sent as bytes), in a fresh process that has not loaded the plug-in, elsewhere
    (tmp_path / "wires.py").write_text(PLUGIN)
    (tmp_path / "driver.py").write_text(_DRIVER)
    res = subprocess.run([sys.executable, "driver.py"], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    (tmp_path / "wires.py").unlink()  # (the worker loads the copy the task carries)
    elsewhere = tmp_path / "worker"
    elsewhere.mkdir()
    (elsewhere / "worker.py").write_text(_RAY_WORKER)
    res = subprocess.run([sys.executable, "worker.py", str(tmp_path / "task.pkl")], cwd=elsewhere, env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    (elsewhere / "ledger.csv").write_text(res.stdout)
    assert _first(elsewhere / "ledger.csv") == (0.128, 0.628, 64)
