"""Run a ground-truth pattern (validation/patterns.py) through fedsim's own network models.

Each node of the pattern becomes an actor on a ``SimNetwork`` whose nodes have the pattern's
rates and latencies (``LinkSpec(up, down, latency)``); a message is sent at its ``start``, or
``delay`` seconds after the messages it waits for (``after``) have all been received by its
sender. Every message's document is padded to exactly the pattern's ``bytes`` (framing 0), so
the simulator charges the same sizes the TCP transfers carried. The result has the ground-truth
files' shape (``validation/results.py``): per message ``start`` (when it was sent) and
``completion`` (its ledger arrival time), and the round (the last completion).

    python -m validation.fedsim_run [--models fifo,fair,tcp] [--out validation/results]

writes ``fedsim-<model>.json`` beside ``ns3.json`` and ``real_tcp.json``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import platform
import sys
import time
from pathlib import Path

import numpy as np

from fedsim.kernel import LinkSpec, SimNetwork, encode_message

MODELS = ("fifo", "fair", "tcp")


def _padding(nbytes: int) -> dict:
    """A payload whose encoded document is exactly ``nbytes`` long."""
    overhead = len(encode_message("m", {"b": np.zeros(0, np.uint8)}).data)
    for extra in range(0, 16):  # msgpack's ext header grows with the body; find the exact fit
        n = nbytes - overhead - extra
        if n < 0:
            break
        payload = {"b": np.zeros(n, np.uint8)}
        if len(encode_message("m", payload).data) == nbytes:
            return payload
    raise ValueError(f"cannot pad a document to exactly {nbytes} bytes")


def run_pattern(pattern: dict, model: str, seed: int = 0) -> dict:
    """Simulate ``pattern`` on link model ``model``; returns a pattern result (see the module
    docstring). Raises ``ValueError`` for a pattern this driver cannot express: a message that
    waits for messages its sender does not receive, or two messages over the same (src, dst)."""
    msgs = sorted(pattern["messages"], key=lambda m: m["id"])
    by_id = {m["id"]: m for m in msgs}
    pairs = {(m["src"], m["dst"]) for m in msgs}
    if len(pairs) != len(msgs):
        raise ValueError(f"{pattern['name']}: two messages share a (src, dst) pair")
    for m in msgs:
        for a in m["after"]:
            if by_id[a]["dst"] != m["src"]:
                raise ValueError(f"{pattern['name']}: message {m['id']} waits for message {a}, which its "
                                 "sender does not receive")
    payloads = {n: _padding(n) for n in {m["bytes"] for m in msgs}}
    net = SimNetwork(seed=seed, link_model=model)

    def node_actor(node: str):
        timed = sorted((m for m in msgs if m["src"] == node and not m["after"]), key=lambda m: (m["start"], m["id"]))
        waiting = [m for m in msgs if m["src"] == node and m["after"]]
        inbox = {m["src"]: m["id"] for m in msgs if m["dst"] == node}  # one message per sender

        async def actor(ctx):
            t = 0.0  # the actor's own schedule of timed sends (it cannot read the clock)
            for m in timed:
                if m["start"] > t:
                    await ctx.sleep(m["start"] - t)
                    t = m["start"]
                await ctx.send(m["dst"], "m", payloads[m["bytes"]])
            got: set[int] = set()
            pending = list(waiting)
            while pending or len(got) < len(inbox):
                for m in [m for m in pending if set(m["after"]) <= got]:
                    pending.remove(m)
                    if m["delay"] > 0:
                        await ctx.sleep(m["delay"])
                    await ctx.send(m["dst"], "m", payloads[m["bytes"]])
                if len(got) < len(inbox):
                    got.add(inbox[(await ctx.receive("m")).sender])
                elif pending:
                    raise RuntimeError(f"{node}: messages {[m['id'] for m in pending]} wait for ones never sent")

        return actor

    for node, spec in pattern["nodes"].items():
        net.add_node(node, node_actor(node), link=LinkSpec(spec["up"], spec["down"], spec["latency"]),
                     role="server" if node == "server" else "client")
    t0 = time.perf_counter()
    net.run()
    wall = time.perf_counter() - t0
    ids = {(m["src"], m["dst"]): m["id"] for m in msgs}
    out = []
    for r in net.ledger.records():
        m = by_id[ids[(r["src"], r["dst"])]]
        out.append({"id": m["id"], "src": m["src"], "dst": m["dst"], "bytes": m["bytes"], "start": r["send_time"],
                    "completion": r["arrival_time"], "duration": r["arrival_time"] - r["send_time"]})
    out.sort(key=lambda x: x["id"])
    return {"name": pattern["name"], "complete": all(r["status"] == "delivered" for r in net.ledger.records()),
            "round": max(x["completion"] for x in out), "wall_s": wall, "messages": out}


def main(argv=None) -> int:
    from .patterns import all_patterns
    from .results import dump

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--only", default="", help="run only patterns whose name starts with this")
    args = ap.parse_args(argv)
    pats = [p for p in all_patterns() if p["name"].startswith(args.only)]
    for model in args.models.split(","):
        t0 = time.perf_counter()
        results = [run_pattern(p, model) for p in pats]
        doc = {"engine": f"fedsim-{model}", "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
               "python": platform.python_version(), "total_wall_s": time.perf_counter() - t0, "patterns": results}
        dump(doc, Path(args.out) / f"fedsim-{model}.json")
        print(f"fedsim-{model}: {len(results)} patterns in {doc['total_wall_s']:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
