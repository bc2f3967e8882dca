"""Network.before_run: functions called once in the launching process before any actor starts
(TcpNetwork: before it forks, so its workers inherit what they loaded), and the built-in
protocols' use of it (numba's compiler started once: fedsim.math.jit.warm_up)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fedsim.kernel import AsyncioNetwork, FedsimError, SimNetwork, TcpNetwork
from fedsim.math import jit
from fedsim.protocols import REGISTRY

REPO = Path(__file__).resolve().parents[1]
CALLS: list[tuple[str, int]] = []  # (what, pid of the process that called it)
STATE: dict[str, str] = {}  # set by the hooks; read by actors (in TCP's workers: inherited by fork)


def first() -> None:
    CALLS.append(("first", os.getpid()))
    STATE["loaded"] = "yes"


def second() -> None:
    CALLS.append(("second", os.getpid()))


async def reader(ctx):
    # what the hooks left behind, seen from the actor's own process
    return STATE.get("loaded"), os.getpid()


def _net(transport: str):
    if transport == "sim":
        return SimNetwork(seed=0)
    if transport == "asyncio":
        return AsyncioNetwork(seed=0, time_scale=0.01)
    return TcpNetwork(seed=0, processes=2)


@pytest.mark.parametrize("transport", ["sim", "asyncio", "tcp"])
def test_before_run_functions_run_once_in_order_in_the_launching_process_before_any_actor(transport):
    CALLS.clear()
    STATE.clear()
    net = _net(transport)
    net.before_run(first)
    net.before_run(second)
    net.before_run(first)  # registered twice: called once
    assert net.before_run_calls == (first, second)
    for i in range(4):
        net.add_node(f"n{i}", reader)
    assert CALLS == []  # not before run
    res = net.run() if transport == "sim" else net.run(timeout=60)
    assert res.complete
    assert CALLS == [("first", os.getpid()), ("second", os.getpid())]
    # every actor saw what the first function set, also in TCP's forked workers (other pids):
    # it ran before they were forked
    assert {v[0] for v in res.results.values()} == {"yes"}
    pids = {v[1] for v in res.results.values()}
    if transport == "tcp":
        assert len(pids) == 2 and os.getpid() not in pids
    else:
        assert pids == {os.getpid()}
    with pytest.raises(FedsimError, match="has run already"):
        net.before_run(second)


@pytest.mark.parametrize("transport", ["sim", "asyncio", "tcp"])
def test_what_a_before_run_function_raises_propagates_before_any_actor_starts(transport):
    started = []

    async def actor(ctx):
        started.append(ctx.node_id)
        return 1

    def broken():
        raise RuntimeError("cannot load the kernels")

    net = _net(transport)
    net.before_run(broken)
    net.add_node("a", actor)
    with pytest.raises(RuntimeError, match="cannot load the kernels"):
        net.run() if transport == "sim" else net.run(timeout=60)
    assert started == []
    if transport == "tcp":
        assert net.pids == []  # nothing was forked


@pytest.mark.parametrize("transport", ["sim", "asyncio", "tcp"])
def test_a_network_without_nodes_calls_its_before_run_functions_too(transport):
    # every transport calls them once when run is called; TcpNetwork, with no node to place,
    # returned its empty result without calling them
    CALLS.clear()
    net = _net(transport)
    net.before_run(second)
    res = net.run() if transport == "sim" else net.run(timeout=60)
    assert res.complete and res.results == {}
    assert CALLS == [("second", os.getpid())]


@pytest.mark.parametrize("transport", ["sim", "asyncio", "tcp"])
def test_a_network_whose_before_run_function_failed_can_run_once_mended(transport):
    # the same on every transport: nothing ran, so the network has not run (TcpNetwork counted
    # itself run before its checks, and refused the second try)
    tries = []

    def flaky():
        tries.append(1)
        if len(tries) == 1:
            raise RuntimeError("the kernels' cache is locked")

    async def actor(ctx):
        return 7

    net = _net(transport)
    net.before_run(flaky)
    net.add_node("a", actor)
    with pytest.raises(RuntimeError, match="cache is locked"):
        net.run() if transport == "sim" else net.run(timeout=60)
    res = net.run() if transport == "sim" else net.run(timeout=60)
    assert res.complete and res.results == {"a": 7} and len(tries) == 2
    with pytest.raises(FedsimError, match="runs once"):
        net.run() if transport == "sim" else net.run(timeout=60)


def test_before_run_refuses_what_is_not_a_function():
    with pytest.raises(TypeError, match="function of no arguments"):
        SimNetwork().before_run("warm")


@pytest.mark.parametrize("name,registers", [("fedrec", True), ("fedrecpp", True), ("fpl", True), ("personalfr", True),
                                            ("fedavg-ae", True), ("fcf", False), ("demo", False)])
def test_protocols_whose_actors_call_compiled_kernels_start_numbas_compiler_once(name, registers):
    # fcf and demo call NumPy only: starting numba's compiler for them would cost for nothing
    spec = REGISTRY[name]
    data, cfg = spec.tiny(3, 1, 0)
    net = SimNetwork(seed=0)
    spec.build(net, data, cfg)
    assert (jit.warm_up in net.before_run_calls) is registers


def _python(code: str, argv: str = "", **env) -> str:
    out = subprocess.run([sys.executable, "-c", code, argv], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(REPO), **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


_FORK_AND_COMPILE = """
import os, sys
from fedsim.math import jit
import numba

def own():
    with open("/proc/self/smaps_rollup") as fh:
        return sum(int(l.split()[1]) * 1024 for l in fh if l.startswith(("Private_Clean:", "Private_Dirty:")))

if sys.argv[1] == "warm":
    jit.warm_up()
r, w = os.pipe()
pid = os.fork()
if pid == 0:  # a worker: compiles and calls a kernel of its own
    before = own()
    numba.njit(lambda x: x * 2)(3)
    os.write(w, str(own() - before).encode())
    os._exit(0)
os.waitpid(pid, 0)
print(int(os.read(r, 100)))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="reads /proc/self/smaps_rollup (Linux)")
def test_warm_up_before_a_fork_spares_the_child_starting_numbas_compiler():
    # what before_run(warm_up) is for: a worker forked after warm_up compiles its first kernel
    # with a fraction of the memory of its own a worker forked before needs (measured: 14 MiB
    # against 91 MiB; LLVM's start is inherited)
    pytest.importorskip("numba", reason="numba (the fast extra) is not installed")
    cold = int(_python(_FORK_AND_COMPILE, argv="cold"))
    warm = int(_python(_FORK_AND_COMPILE, argv="warm"))
    assert cold > 30 * 2**20 and warm < cold / 3, (cold, warm)


def test_warm_up_runs_once_and_imports_nothing_without_numba():
    code = "import sys\nfrom fedsim.math import jit\nprint(jit.warm_up(), jit.warm_up(), 'numba' in sys.modules)\n"
    assert _python(code, FEDSIM_NO_NUMBA="1") == "False False False"
    pytest.importorskip("numba", reason="numba (the fast extra) is not installed")
    assert _python(code) == "True False True"
