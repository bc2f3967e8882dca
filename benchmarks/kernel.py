"""Kernel benchmarks: per-message overhead, broadcast-and-gather rounds, memory per idle actor.

    python benchmarks/kernel.py [--quick] [--no-memory]

Prints one line per figure and, last, one JSON object with at least ``us_per_message``,
``s_per_round_943`` and ``s_per_round_6040``. Figures are medians over repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import msgpack
import numpy as np

from fedsim.kernel import SimNetwork, encode_message
from fedsim.math.rows import RowSum


def ping_pong(n: int) -> float:
    """Microseconds of kernel time per message (payload pre-encoded: encode excluded)."""
    payload = encode_message("ping", {"x": 1})  # tiny; we measure the kernel, not the codec

    async def pinger(ctx):
        net = ctx._net
        for _ in range(n):
            net.post(ctx._node, ("pong",), "ping", payload, False)
            await ctx.receive("pong")

    async def ponger(ctx):
        net = ctx._net
        for _ in range(n):
            await ctx.receive("ping")
            net.post(ctx._node, ("ping",), "pong", payload, False)

    net = SimNetwork(profile="lan")
    net.add_node("ping", pinger)
    net.add_node("pong", ponger)
    t = time.perf_counter()
    net.run()
    return (time.perf_counter() - t) / (2 * n) * 1e6


def _client_rows(i: int, m: int, rows: int) -> np.ndarray:
    """The rows client ``i`` holds (its rated items): its data, made before the clock starts,
    the same for fedsim and the bare loop."""
    return np.sort(np.random.default_rng(i).permutation(m)[:rows]).astype(np.int32)


def broadcast_gather(n_clients: int, m: int, d: int, rows: int, rounds: int, seed: int = 0) -> float:
    """Seconds per round: server broadcasts an m x d float32 matrix, each client returns
    ``rows`` random rows with their int32 ids, the server sums them into an m x d matrix."""
    # zero-padded, so that node-id order is the order the server contacts them in
    clients = [f"c{i:05d}" for i in range(n_clients)]

    async def server(ctx):
        V = ctx.rng.random((m, d), dtype=np.float32)
        for r in range(rounds):
            ctx.begin_round(r)
            await ctx.broadcast(clients, "V", {"V": V})
            acc = RowSum(m, d)
            # node-id order (ids are unique within a message), each reply folded in as it arrives
            # and then let go: holding all 6040 (128 MB) until the last arrives, as gather's list
            # does, makes the round fault in 128 MB of fresh pages, about 0.15 s on this machine
            async for msg in ctx.gather_each("g", senders=clients):
                acc.add(msg.payload["ids"], msg.payload["g"])
            V = V - 1e-6 * acc.total
        return float(V.sum())

    async def client(ctx, ids):
        while True:
            msg = await ctx.receive("V")
            await ctx.send("server", "g", {"ids": ids, "g": msg.payload["V"].take(ids, axis=0)})

    net = SimNetwork(seed=seed, profile="lan")
    net.add_node("server", server, role="server")
    for i, c in enumerate(clients):
        net.add_node(c, client, _client_rows(i, m, rows))
    t = time.perf_counter()
    # the clients are left waiting for a next V, as in the round this benchmark has always timed
    # (no stop broadcast, so figures stay comparable with earlier commits): not a deadlock here
    net.run(strict=False)
    return (time.perf_counter() - t) / rounds


def bare_loop(n_clients: int, m: int, d: int, rows: int, rounds: int) -> float:
    """The same round in a bare simpy + msgpack loop: the same array work (clients slice their
    rows out of V, the server sums them; the broadcast is decoded once and shared, as fedsim
    does), but no ledger, no link model, no codec validation, no per-actor generators, no
    coroutines. The reference for the kernel's overhead. Needs simpy (``pip install ".[bench]"``)."""
    import simpy

    env = simpy.Environment()
    V0 = np.random.default_rng(0).random((m, d), dtype=np.float32)
    stores = [simpy.Store(env) for _ in range(n_clients)]
    back = simpy.Store(env)
    ids_of = [_client_rows(i, m, rows) for i in range(n_clients)]

    def server():
        V = V0
        for _ in range(rounds):
            data = msgpack.packb(V.tobytes())
            for s in stores:
                s.put(data)
            acc = RowSum(m, d)
            for _ in range(n_clients):
                doc = msgpack.unpackb((yield back.get()))
                ids = np.frombuffer(doc[0], np.int32)
                acc.add(ids, np.frombuffer(doc[1], np.float32).reshape(len(ids), d))
            V = V - 1e-6 * acc.total

    decoded = {}  # one decode per broadcast (unpacking 6040 copies of V would cost ~0.2 s a round)

    def client(i):
        ids = ids_of[i]
        while True:
            data = yield stores[i].get()
            V = decoded.get(id(data))
            if V is None:
                decoded.clear()
                V = decoded[id(data)] = np.frombuffer(msgpack.unpackb(data), np.float32).reshape(m, d)
            back.put(msgpack.packb([ids.tobytes(), V.take(ids, axis=0).tobytes()]))

    env.process(server())
    for i in range(n_clients):
        env.process(client(i))
    t = time.perf_counter()
    env.run()
    return (time.perf_counter() - t) / rounds


def marginal_round(n_clients: int, m: int, d: int, rows: int) -> float:
    """Seconds of one round once the network runs: (4 rounds - 1 round) / 3, so that starting
    the actor coroutines and the server's first generator draw are not charged to the rounds."""
    return (4 * broadcast_gather(n_clients, m, d, rows, 4) - broadcast_gather(n_clients, m, d, rows, 1)) / 3


MEMORY_CHILD = r"""
import sys, gc
import numpy as np

def hwm_kib():
    # VmHWM belongs to this process's own address space. ru_maxrss does not: Linux carries
    # the parent's high-water mark across fork+exec, so a child of a big benchmark process
    # would report the parent's peak.
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")

from fedsim.kernel import SimNetwork
n = int(sys.argv[1]); with_kernel = sys.argv[2] == "1"
rng = np.random.default_rng(0)
data = [(rng.integers(0, 1682, 100).astype(np.int32), rng.random(100).astype(np.float32)) for _ in range(n)]
gc.collect()
base = hwm_kib()
if with_kernel:
    async def idle(ctx, items, ratings):
        await ctx.receive("never")
    async def stopper(ctx):
        return None
    net = SimNetwork()
    net.add_node("server", stopper, role="server")
    for i in range(n):
        net.add_node(f"client/{i}", idle, data[i][0], data[i][1])
    # run until every client is blocked in receive (coroutine frames live), then measure
    net.run(strict=False)
peak = hwm_kib()
print(base, peak)
"""


def memory_per_actor(n: int) -> dict:
    """Peak RSS (KiB) with n idle actors holding 100 ratings each, minus the same data alone."""
    out = {}
    for flag in ("0", "1"):
        res = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(n), flag],
                             capture_output=True, text=True, check=True)
        base, peak = map(int, res.stdout.split())
        out[flag] = peak
    kernel_kib = out["1"] - out["0"]
    return {"clients": n, "peak_rss_mib": out["1"] / 1024, "data_only_mib": out["0"] / 1024,
            "kernel_bytes_per_actor": kernel_kib * 1024 / n}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--no-memory", action="store_true")
    args = ap.parse_args()
    reps = 3 if args.quick else 5
    fig: dict = {}

    pp = [ping_pong(20000) for _ in range(reps)]
    fig["us_per_message"] = statistics.median(pp)
    print(f"ping-pong kernel overhead: {fig['us_per_message']:.2f} us/message (median of {reps})")

    r943 = [broadcast_gather(943, 1682, 20, 106, 3) for _ in range(reps)]
    fig["s_per_round_943"] = statistics.median(r943)
    print(f"broadcast+gather 943 clients, 1682x20: {fig['s_per_round_943']:.4f} s/round")
    r6040 = [broadcast_gather(6040, 3706, 20, 265, 2) for _ in range(max(3, reps - 2))]
    fig["s_per_round_6040"] = statistics.median(r6040)
    print(f"broadcast+gather 6040 clients, 3706x20: {fig['s_per_round_6040']:.4f} s/round")
    marg = [marginal_round(6040, 3706, 20, 265) for _ in range(3)]
    fig["s_per_round_6040_marginal"] = statistics.median(marg)
    bare6040 = [bare_loop(6040, 3706, 20, 265, 2) for _ in range(3)]
    fig["bare_s_per_round_6040"] = statistics.median(bare6040)
    print(f"  once set up: {fig['s_per_round_6040_marginal']:.4f} s/round; bare simpy+msgpack loop "
          f"{fig['bare_s_per_round_6040']:.4f} s/round")

    flower_like = [broadcast_gather(200, 1682, 20, 106, 5) for _ in range(reps)]
    bare = [bare_loop(200, 1682, 20, 106, 5) for _ in range(reps)]
    fig["ms_per_client_round_200"] = statistics.median(flower_like) / 200 * 1e3
    fig["bare_ms_per_client_round_200"] = statistics.median(bare) / 200 * 1e3
    print(f"200 clients x 5 rounds, 1682x20: fedsim {fig['ms_per_client_round_200']:.3f} ms/client-round, "
          f"bare simpy+msgpack {fig['bare_ms_per_client_round_200']:.3f}")

    if not args.no_memory:
        mem = [memory_per_actor(n) for n in (1000, 10000, 100000)]
        fig["memory"] = mem
        for m in mem:
            print(f"{m['clients']:>7} idle actors: peak RSS {m['peak_rss_mib']:.0f} MiB "
                  f"(data alone {m['data_only_mib']:.0f} MiB), kernel {m['kernel_bytes_per_actor']:.0f} B/actor")
    print(json.dumps(fig))


if __name__ == "__main__":
    main()
