"""The floor under any kernel: FedRec's actors run with a message path that costs (almost) nothing,
against the same actors on ``SimNetwork`` and the vectorised central twin.

    python benchmarks/fedrec_floor.py [--data ../shared/data/ml-100k] [--iterations 10] [--repeats 3]
                                      [--clock wall|process]

``NullNetwork`` places the actors exactly as ``fedrec.build`` places them on a transport, but a
message is the sender's payload handed to the receiver (arrays as read-only views, as a decoded
message's are): no encoding, no ledger, no link model, no simulated time, no event heap; a
waiting actor is resumed from a plain queue. It keeps only what the actors' code needs (their
generators from (seed, node id), ``receive`` by kind, ``gather`` in node-id order, drafts that
reopen). Whatever a kernel does, however compiled, it cannot make a run cheaper than this: what
is left is the actors' own code and their math, as the simulation calls them. Every timed run
(and the warm-up) is checked to give the same V (and O) as the ``SimNetwork`` run beside it, bit
for bit (so both did the same work), and their time is reported as a ratio to the central twin's, like
``benchmarks/fedrec_split.py`` (whole run: setup included, divided by the iterations; medians,
runs of the three sides alternating). This is a measuring instrument, not a transport: it has
no deadlines, no faults and no accounting.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import deque

import numpy as np

from fedsim.data import resolve
from fedsim.kernel import SimNetwork
from fedsim.kernel.context import Gathered, Message
from fedsim.protocols import fedrec
from fedsim.protocols.fedrec import FedRecConfig
from fedsim.seeding import node_rng
from fedsim.studies.fedrec import make_folds, paper_lr
from fedrec_split import CLOCK, run_options  # benchmarks/, the script's own folder

_PARK = object()


class _Park:
    __slots__ = ()

    def __await__(self):
        return (yield _PARK)


_park = _Park()


def _read_only(payload):
    if type(payload) is not dict:
        return payload
    out = {}
    for k, v in payload.items():
        if type(v) is np.ndarray:
            v = v.view()
            v.flags.writeable = False
        out[k] = v
    return out


class _Draft:
    """What the actors use of ``fedsim.kernel.codec.Draft``: a payload of fresh arrays, sent as
    is, always writable again (the receiver has let go of its view by the time it is reopened:
    the stochastic server reopens only after the reply)."""

    __slots__ = ("kind", "payload")

    def __init__(self, kind, template):
        self.kind = kind
        self.payload = {k: (np.empty_like(v) if type(v) is np.ndarray else v) for k, v in template.items()}

    def reopen(self) -> bool:
        return True


class _Node:
    __slots__ = ("id", "coro", "mailbox", "want", "gathering", "result", "done", "round")

    def __init__(self, node_id, coro):
        self.id = node_id
        self.coro = coro
        self.mailbox = deque()
        self.want = None  # kinds it waits for (receive), or None
        self.gathering = None  # (kind, senders left, messages) of a gather in progress
        self.result = None
        self.done = False
        self.round = 0  # the label of what it sends (begin_round), as on a transport


class NullContext:
    __slots__ = ("_net", "_node", "_rng")

    def __init__(self, net, node):
        self._net, self._node, self._rng = net, node, None

    @property
    def id(self):
        return self._node.id

    @property
    def rng(self):
        if self._rng is None:
            self._rng = node_rng(self._net.seed, self._node.id)
        return self._rng

    def begin_round(self, rnd):
        self._node.round = rnd

    def draft(self, kind, template, *, zero=True):
        return _Draft(kind, template)

    async def send(self, dst, kind, payload, *, anonymous=False):
        self._net.post(self._node.id, (dst,), kind, payload)

    async def broadcast(self, dsts, kind, payload):
        self._net.post(self._node.id, tuple(dsts), kind, payload)

    async def compute(self, flops, label="compute"):
        pass

    async def receive(self, kind=None, *, timeout=None, deadline=None):
        if timeout is not None or deadline is not None:
            raise NotImplementedError("NullNetwork has no time")
        node = self._node
        box = node.mailbox
        for i, msg in enumerate(box):
            if kind is None or msg.kind == kind or (type(kind) is not str and msg.kind in kind):
                del box[i]
                return msg
        node.want = kind if kind is not None else ()
        return await _park

    async def gather(self, kind, *, senders=None, count=None, timeout=None, deadline=None, round=None):
        if senders is None or timeout is not None or deadline is not None:
            raise NotImplementedError("NullNetwork gathers from named senders, without time")
        node = self._node
        left = set(senders)
        got = []
        keep = deque()
        for msg in node.mailbox:
            if msg.kind == kind and msg.sender in left:
                left.discard(msg.sender)
                got.append(msg)
            else:
                keep.append(msg)
        node.mailbox = keep
        if left:
            node.gathering = (kind, left, got)
            await _park
        got.sort(key=lambda m: m.sender)
        return Gathered(got, [], 0)


class NullNetwork:
    """Actors placed as on a transport (``add_node``), run by ``run()``; see the module doc."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.nodes: dict[str, _Node] = {}
        self.ready: deque = deque()
        self.before: list = []

    def set_unit(self, unit) -> None:
        pass

    def before_run(self, fn) -> None:  # (Network.before_run: called once when run starts)
        if fn not in self.before:
            self.before.append(fn)

    def add_node(self, node_id, fn, *args, role=None, **kwargs) -> None:
        node = _Node(node_id, None)
        node.coro = fn(NullContext(self, node), *args, **kwargs)
        self.nodes[node_id] = node
        self.ready.append((node, None))

    def post(self, src, dsts, kind, payload) -> None:
        payload = _read_only(payload.payload if type(payload) is _Draft else payload)
        ready = self.ready
        rnd = self.nodes[src].round
        for dst in dsts:
            node = self.nodes[dst]
            msg = Message(kind, dict(payload) if type(payload) is dict else payload, src, rnd, 0)
            w = node.want
            if w is not None and (w == () or w == kind or (type(w) is not str and kind in w)):
                node.want = None
                ready.append((node, msg))
                continue
            g = node.gathering
            if g is not None and g[0] == kind and src in g[1]:
                g[1].discard(src)
                g[2].append(msg)
                if not g[1]:
                    node.gathering = None
                    ready.append((node, None))
                continue
            node.mailbox.append(msg)

    def run(self) -> dict:
        for fn in self.before:
            fn()
        ready = self.ready
        while ready:
            node, value = ready.popleft()
            try:
                node.coro.send(value)
            except StopIteration as stop:
                node.done, node.result = True, stop.value
        stuck = [n.id for n in self.nodes.values() if not n.done]
        if stuck:
            raise RuntimeError(f"NullNetwork: {len(stuck)} actors never finished, e.g. {stuck[:3]}")
        return {k: n.result for k, n in self.nodes.items()}


def config(model: str, T: int) -> FedRecConfig:
    return FedRecConfig(model, d=20, T=T, lr=paper_lr(model), lam=0.001, dtype="float32")


def run_null(data, model, T):
    net = NullNetwork(seed=0)
    fedrec.build(net, data, config(model, T))
    return net.run()["server"]


def run_sim(data, model, T):
    net = SimNetwork(seed=0)
    fedrec.build(net, data, config(model, T))
    return net.run().results["server"]


def same_bits(a, b) -> bool:
    """Whether two results hold the same arrays bit for bit (dtype, shape and bytes: -0.0 is not
    0.0, and a NaN equals itself), or both lack one."""
    if (a is None) != (b is None):
        return False
    return a is None or (a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes())


def check_same(model: str, T: int, null: dict, sim: dict) -> None:
    for key in ("V", "O"):
        if not same_bits(null[key], sim[key]):
            raise SystemExit(f"{model}, {T} iterations: the null network's {key} differs from SimNetwork's")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    run_options(ap)
    args = ap.parse_args(argv)
    clock, T = CLOCK[args.clock], args.iterations
    if T < 1 or args.repeats < 1:
        ap.error("--iterations and --repeats must be at least 1")
    data = make_folds(resolve(args.data), 5, 0)[0].train_ratings()
    sides = {"null": run_null, "sim": run_sim,
             "central": lambda data, model, T: fedrec.central_twin(data, config(model, T), seed=0)}
    out = {}
    print(f"{args.clock} clock, seconds per iteration (whole run / {T}), medians of {args.repeats}")
    print("| model | null network | SimNetwork | central twin | null / central | SimNetwork / central |")
    print("|---|---:|---:|---:|---:|---:|")
    for model in ("PMF(B)", "PMF(S)", "SVD++(S)"):
        check_same(model, 2, run_null(data, model, 2), run_sim(data, model, 2))  # warm-up, and the same work?
        sides["central"](data, model, 1)
        times = {k: [] for k in sides}
        for _ in range(args.repeats):
            got = {}
            for name, fn in sides.items():
                t = clock()
                got[name] = fn(data, model, T)
                times[name].append((clock() - t) / T)
            check_same(model, T, got["null"], got["sim"])  # the timed runs did the same work
        m = {k: statistics.median(v) for k, v in times.items()}
        m["null_ratio"], m["sim_ratio"] = m["null"] / m["central"], m["sim"] / m["central"]
        out[model] = m
        print(f"| {model} | {m['null']:.4f} | {m['sim']:.4f} | {m['central']:.4f} | **{m['null_ratio']:.2f}** | "
              f"{m['sim_ratio']:.2f} |", flush=True)
    print(json.dumps({"iterations": T, "repeats": args.repeats, "clock": args.clock, "s_per_iteration": out}))


if __name__ == "__main__":
    main()
