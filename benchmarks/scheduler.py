"""Which scheduler under SimNetwork: fedsim's own EventQueue, or simpy through its public API?

    python benchmarks/scheduler.py [--clients 6040] [--repeats 3]

Runs the kernel benchmark's broadcast-and-gather round (benchmarks/kernel.py) and its ping-pong
twice per repeat, alternating: once on ``EventQueue`` (a heap of ``(time, seq, fn, args)``
tuples) and once on ``SimpyQueue``, the same interface written with simpy's public API only (one
``Timeout`` event with a callback per scheduled call, ``Environment.run``, ``Environment.now``;
no batching of a broadcast's copies, which simpy's API has no way to express). Prints medians and
the ratio, and one JSON line. The decision it informed is in docs/performance.md ("The scheduler").
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

from fedsim.kernel import SimNetwork, encode_message
from fedsim.kernel.events import EventQueue


class SimpyQueue:
    """``EventQueue``'s interface on simpy's public API (needs ``pip install simpy``)."""

    def __init__(self) -> None:
        import simpy

        self.env = simpy.Environment()
        self._end: float | None = None

    @property
    def now(self) -> float:
        return self.env.now if self._end is None else self._end

    @now.setter
    def now(self, t: float) -> None:
        # SimNetwork sets ``now`` once a run has drained, to the time of its last event that did
        # something (the run's duration); simpy's clock has no public setter, so it is kept here
        self._end = t

    def schedule(self, delay, fn, *args) -> None:
        ev = self.env.timeout(delay, (fn, args))
        ev.callbacks.append(_call)

    def hold(self) -> bool:
        return False

    def release(self) -> None:  # pragma: no cover - never holding
        pass

    def run(self, until=None) -> bool:
        self._end = None
        if until is None:
            self.env.run()
            return False
        self.env.run(until=until)
        return bool(self.env.peek() != float("inf"))


def _call(ev) -> None:
    fn, args = ev.value
    fn(*args)


def ping_pong(queue_factory, n: int = 20_000) -> float:
    payload = encode_message("ping", {"x": 1})

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

    net = SimNetwork(profile="lan", queue=queue_factory())
    net.add_node("ping", pinger)
    net.add_node("pong", ponger)
    t = time.perf_counter()
    net.run()
    return (time.perf_counter() - t) / (2 * n) * 1e6


def round_time(queue_factory, n_clients: int, m: int = 3706, d: int = 20, rows: int = 265, rounds: int = 2,
               keep: list | None = None) -> float:
    """Seconds per round (the network is appended to ``keep`` if given, for its ledger)."""
    from kernel import _client_rows  # benchmarks/kernel.py: the same client data
    from fedsim.math.rows import RowSum

    clients = [f"c{i:05d}" for i in range(n_clients)]

    async def server(ctx):
        V = ctx.rng.random((m, d), dtype=np.float32)
        for r in range(rounds):
            ctx.begin_round(r)
            await ctx.broadcast(clients, "V", {"V": V})
            acc = RowSum(m, d)
            async for msg in ctx.gather_each("g", senders=clients):
                acc.add(msg.payload["ids"], msg.payload["g"])
            V = V - 1e-6 * acc.total
        await ctx.broadcast(clients, "stop", None)

    async def client(ctx, ids):
        while True:
            msg = await ctx.receive(("V", "stop"))
            if msg.kind == "stop":
                return
            await ctx.send("server", "g", {"ids": ids, "g": msg.payload["V"].take(ids, axis=0)})

    net = SimNetwork(seed=0, profile="lan", queue=queue_factory())
    net.add_node("server", server, role="server")
    for i, c in enumerate(clients):
        net.add_node(c, client, _client_rows(i, m, rows))
    t = time.perf_counter()
    net.run()
    spent = time.perf_counter() - t
    if keep is not None:
        keep.append(net)
    return spent / rounds


def main() -> None:
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=6040)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    res: dict[str, dict[str, list]] = {"EventQueue": {"us_per_message": [], "s_per_round": []},
                                       "simpy": {"us_per_message": [], "s_per_round": []}}
    for _ in range(args.repeats):
        for name, factory in (("EventQueue", EventQueue), ("simpy", SimpyQueue)):
            res[name]["us_per_message"].append(ping_pong(factory))
            res[name]["s_per_round"].append(round_time(factory, args.clients))
    out = {}
    for name, figs in res.items():
        for key, vals in figs.items():
            out[f"{name}_{key}"] = statistics.median(vals)
            print(f"{name:<11} {key:<15} median {statistics.median(vals):.4g}  (runs: "
                  + ", ".join(f"{v:.4g}" for v in vals) + ")")
    for key in ("us_per_message", "s_per_round"):
        out[f"ratio_{key}"] = out[f"simpy_{key}"] / out[f"EventQueue_{key}"]
        print(f"simpy / EventQueue, {key}: {out[f'ratio_{key}']:.2f}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
