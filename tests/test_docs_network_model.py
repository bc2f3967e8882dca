"""The link model written in docs/network-model.md runs, uses only public names, and does what its
docstring says."""

import re
from pathlib import Path

import numpy as np
import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "network-model.md"


def test_the_documented_link_model_uses_only_public_names_and_shares_one_channel():
    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    assert "._" not in code and "net._" not in code  # the public interface is enough
    ns: dict = {}
    exec(compile(code, str(DOC), "exec"), ns)
    net = ns["SimNetwork"](seed=0, profile="ideal", link_model=ns["SharedMedium"](rate=1e6))

    async def sender(ctx, dst):
        await ctx.send(dst, "m", {"x": np.zeros(999_950, np.uint8)})

    async def sink(ctx):
        await ctx.receive("m")

    net.add_node("a", sender, "c")
    net.add_node("b", sender, "d")
    net.add_node("c", sink)
    net.add_node("d", sink)
    net.run()
    rows = list(net.ledger.records())
    size = rows[0]["bytes"]
    # one channel: the second transmission waits for the first, whoever sends it
    assert [r["arrival_time"] for r in rows] == pytest.approx([size / 1e6, 2 * size / 1e6])


def test_the_documented_registrations_make_the_names_the_command_line_takes():
    # the registration blocks of "Using it from the command line" and "Writing a transport", run
    # after the model's block as a reader would: NetSpec (what every command builds from) takes them
    from fedsim.kernel import LINK_MODELS, TRANSPORTS, NetSpec
    from fedsim.kernel.registry import LINK_MODEL_REGISTRY, TRANSPORT_REGISTRY

    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 3
    ns: dict = {}
    try:
        for code in blocks:
            exec(compile(code, str(DOC), "exec"), ns)
        assert LINK_MODELS["shared-medium"] == "one 1 MB/s channel that every transmission occupies in turn"
        models = [NetSpec(profile="lan", link_model="shared-medium").build(0).link_model for _ in range(2)]
        assert models[0] is not models[1] and all(type(m) is ns["SharedMedium"] and m.rate == 1e6 for m in models)
        net = NetSpec(transport="framed-asyncio").build(0)
        assert type(net) is ns["FramedAsyncio"] and net.framing_bytes == 16
        assert TRANSPORTS["framed-asyncio"] == "asyncio, 16 header bytes charged per message"
    finally:
        LINK_MODEL_REGISTRY.remove("shared-medium")
        TRANSPORT_REGISTRY.remove("framed-asyncio")


def test_the_documented_link_model_runs_the_demo_on_the_ideal_profile():
    # what the documented `fedsim --plugin medium.py sweep demo --grid link_model=fifo,shared-medium`
    # runs at its shared-medium point (the demo's profile, ideal: no latency). Before, the kernel
    # refused the model's deliveries scheduled at `end - net.now()` when the clock's addition
    # rounded an ulp below end ("arrival_time 0.0007799999999999999 s is before tx_end 0.00078 s")
    from fedsim.protocols import REGISTRY

    code = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    ns: dict = {}
    exec(compile(code, str(DOC), "exec"), ns)
    spec = REGISTRY["demo"]
    runs = []
    for model in (ns["SharedMedium"](rate=1e6), "fifo"):
        net = ns["SimNetwork"](seed=0, profile="ideal", link_model=model)
        runs.append(spec.build(net, None, spec.Config()).collect(net.run()))  # the demo's defaults
    rows = list(runs[0].ledger.records())
    assert {r["status"] for r in rows} == {"delivered"}
    assert all(r["tx_end"] <= r["arrival_time"] and r["rx_start"] <= r["arrival_time"] for r in rows)
    assert runs[0].params["w"].tobytes() == runs[1].params["w"].tobytes()  # only times move


def test_the_stated_instant_where_two_ulps_of_the_clock_exceed_a_nanosecond_is_right():
    # flows ending within a nanosecond, "or two ulps of the clock after 2^N s", end in one event:
    # the doc (and flows.py) said 2^23 s, but two ulps pass a nanosecond from 2^22 s (4.19e6 s) on
    import math

    n = int(re.search(r"two ulps of the clock after 2\^(\d+) s", " ".join(DOC.read_text().split())).group(1))
    assert 2 * math.ulp(2.0 ** n) > 1e-9 >= 2 * math.ulp(math.nextafter(2.0 ** n, 0))


def test_the_documented_open_file_refusal_is_what_its_command_prints(tmp_path):
    # the doc's example was `fedsim compare --processes 150`: no protocol (a usage error), and
    # fedsim compare fedrec on its default data has 31 nodes, so 31 processes, which fit; its
    # 312 files (2P + 12) counted one file the shell had left open
    import os
    import resource
    import subprocess
    import sys

    text = " ".join(DOC.read_text().split())
    m = re.search(r"\(`fedsim (compare [^`]+)` under `ulimit -n (\d+)`: `(error: [^`]+?) \.\.\.`", text)
    args, limit, said = m.group(1).split(), int(m.group(2)), m.group(3)
    n = int(re.search(r"--processes (\d+)", m.group(1)).group(1))
    assert "needs up to about 2P + 11 open files per worker" in text and f"needs {2 * n + 11} open files" in said

    def lower_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(DOC.parents[1])}
    res = subprocess.run([sys.executable, "-m", "fedsim", *args, "--out", str(tmp_path / "o")], capture_output=True,
                         text=True, timeout=120, preexec_fn=lower_limit, env=env, cwd=tmp_path,
                         stdin=subprocess.DEVNULL)  # the standard streams open, no other file
    assert res.returncode == 2 and res.stderr.startswith(said), res.stderr
    assert not (tmp_path / "o").exists()
