"""Communication patterns for the ground-truth harness: what is sent, by whom, to whom, when.

A *pattern* is a JSON-serialisable dict::

    {"name": "bcast/wan/het/n10",          # unique; "/"-separated family/parameters
     "description": "...",                 # optional, free text
     "meta": {...},                        # optional, free: family, net, n, seed, sigma, ...
     "nodes": {                            # every node of the star, by id
         "server":   {"up": 125000000.0,   # uplink node -> router, bytes/s (finite, > 0)
                      "down": 125000000.0, # downlink router -> node, bytes/s (finite, > 0)
                      "latency": 0.005},   # one-way propagation of the access link, s (>= 0)
         "client/0": {...}, ...},
     "messages": [                         # any order; ids unique non-negative ints
         {"id": 0, "src": "server", "dst": "client/0",
          "bytes": 134592,                 # application payload, > 0
          "start": 0.0,                    # s; used when "after" is empty
          "after": [],                     # ids of messages this one waits for
          "delay": 0.0},                   # s after the last of "after" completed
         ...]}

Semantics. Topology is a star: every node has its own access link to one central router; a
message from A to B is serialised at A.up on A's link, crosses the router, is serialised at
B.down on B's link and propagates A.latency + B.latency in all. A message with an empty
``after`` starts (its sender opens the connection) at ``start``; otherwise ``delay`` seconds
after the last of the listed messages *completed*, i.e. after its last byte was delivered to
the receiving application. ``after`` must not form cycles. ``start`` is ignored when ``after``
is non-empty (it is still written, as 0.0, so every message has the same keys).

Families (``all_patterns()`` returns all of them, 116 patterns):

- ``single/{net}/{size}``: one message client/0 -> server, 10 KB, 100 KB, 1 MB or 10 MB
  (decimal: 10_000 ... 10_000_000 bytes), median client and server of the net.
- ``bcast/{net}/{homo|het}/n{N}``: the server sends V (134,592 B) to N clients (ids 0..N-1, at
  t = 0, all at once); client i answers with 21,000 B as soon as it has V (ids N..2N-1).
- ``fedrecpp/{net}/{homo|het}/n{N}``: FedRec++'s round. client/0 is the denoiser. V to all N
  clients (ids 0..N-1); every ordinary client (1..N-1), once it has V, uploads 21,000 B to the
  server and sends a 10,000 B noise message to client/0 (two connections at once); client/0
  sends its 30,000 B sum to the server once it has V and all N-1 noise messages. The
  denoiser does not upload gradients of its own (it folds them into the sum, as in
  fedsim.protocols.fedrecpp). Noise goes directly to the denoiser over the star (the anonymity
  relay of the protocol is not modelled).
- ``star/c{1|10}/d{0|1|20|100}ms/{size}``: the 24 star configurations of the original check
  (plus 8 latency-free ones): 1 or 10 clients on 10 Mbit/s spokes (both ways) with one-way
  delay d, a server on a 50 Mbit/s link (both ways) with delay ``STAR_SERVER_LATENCY`` (0: the
  original description gives the server link no delay), every client uploading ``size`` at t=0.

Nets (``NETS``): ``lan`` (everyone 1 Gbit/s both ways, 0.5 ms), ``wan`` (server 1 Gbit/s, 5 ms;
clients 10 up / 50 down Mbit/s, 25 ms, sigma 0.5), ``mobile`` (server 1 Gbit/s, 5 ms; clients
2 up / 10 down Mbit/s, 60 ms, sigma 0.8) -- fedsim's profiles of the same names -- and ``lan0``,
``wan0``, ``mobile0``: the same rates with every latency 0, for the real-TCP harness, which
cannot add latency. 1 Mbit/s = 125,000 bytes/s.

Heterogeneity (``het``): a client's uplink and downlink are the median times independent
factors exp(N(0, sigma)) drawn exactly as fedsim's ``Profile.draw`` draws them, from
``fedsim.seeding.node_rng(seed, "link:" + node_id)`` (the first two of its three normals), so
a fedsim network with the same profile, seed and node ids gets the same rates. The server is
never spread. Default seed 0.

``python -m validation.patterns`` lists the names; ``--dump NAME`` prints one pattern as JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable

from fedsim.seeding import node_rng

MBIT = 1e6 / 8  # bytes/s in one Mbit/s
V_BYTES = 134_592  # V as the issue gives it (1682 x 20 float32 = 134,560 B, plus 32 B of encoding)
UPLOAD_BYTES = 21_000
NOISE_BYTES = 10_000
DENOISED_BYTES = 30_000
SIZES = {"10KB": 10_000, "100KB": 100_000, "1MB": 1_000_000, "10MB": 10_000_000}
CLIENT_COUNTS = (10, 100, 943)
STAR_SERVER_LATENCY = 0.0
DEFAULT_SEED = 0

# net -> (server (up, down, latency), client (up, down, latency), sigma)
NETS: dict[str, tuple[tuple[float, float, float], tuple[float, float, float], float]] = {
    "lan": ((1000 * MBIT, 1000 * MBIT, 0.0005), (1000 * MBIT, 1000 * MBIT, 0.0005), 0.0),
    "wan": ((1000 * MBIT, 1000 * MBIT, 0.005), (10 * MBIT, 50 * MBIT, 0.025), 0.5),
    "mobile": ((1000 * MBIT, 1000 * MBIT, 0.005), (2 * MBIT, 10 * MBIT, 0.060), 0.8),
}
for _n in ("lan", "wan", "mobile"):
    _s, _c, _sig = NETS[_n]
    NETS[_n + "0"] = ((_s[0], _s[1], 0.0), (_c[0], _c[1], 0.0), _sig)
del _n, _s, _c, _sig


def _node(up: float, down: float, latency: float) -> dict:
    return {"up": float(up), "down": float(down), "latency": float(latency)}


def _msg(mid: int, src: str, dst: str, nbytes: int, start: float = 0.0,
         after: Iterable[int] = (), delay: float = 0.0) -> dict:
    return {"id": int(mid), "src": src, "dst": dst, "bytes": int(nbytes), "start": float(start),
            "after": [int(a) for a in after], "delay": float(delay)}


def client_id(i: int) -> str:
    return f"client/{i}"


def star_nodes(net: str, n_clients: int, het: bool = False, seed: int = DEFAULT_SEED) -> dict:
    """server plus client/0..n-1 on ``net``; with ``het`` the clients' rates are spread."""
    server, client, sigma = NETS[net]
    nodes = {"server": _node(*server)}
    for i in range(n_clients):
        cid = client_id(i)
        up, down, lat = client
        if het:
            if sigma <= 0:
                raise ValueError(f"net {net!r} has no spread (sigma 0)")
            # math.exp, as fedsim's Profile.draw: NumPy's vectorised exp (AVX512F on some CPUs)
            # differs from libm's in the last bit, and the patterns' rates must be fedsim's
            f_up, f_down, _f_cpu = (math.exp(z) for z in node_rng(seed, "link:" + cid).normal(0.0, sigma, size=3).tolist())
            up, down = up * f_up, down * f_down
        nodes[cid] = _node(up, down, lat)
    return nodes


def single(net: str, size: str | int) -> dict:
    """One message client/0 -> server of ``size`` (a key of SIZES or a byte count)."""
    label = size if isinstance(size, str) else f"{int(size)}B"
    nbytes = SIZES[size] if isinstance(size, str) else int(size)
    return {"name": f"single/{net}/{label}",
            "description": f"one {nbytes} B message client/0 -> server on {net}",
            "meta": {"family": "single", "net": net, "bytes": nbytes},
            "nodes": star_nodes(net, 1),
            "messages": [_msg(0, "client/0", "server", nbytes)]}


def broadcast_gather(net: str, n: int, het: bool = False, seed: int = DEFAULT_SEED) -> dict:
    """V from the server to n clients at t=0; each client answers 21,000 B on receiving V."""
    msgs = [_msg(i, "server", client_id(i), V_BYTES) for i in range(n)]
    msgs += [_msg(n + i, client_id(i), "server", UPLOAD_BYTES, after=[i]) for i in range(n)]
    kind = "het" if het else "homo"
    return {"name": f"bcast/{net}/{kind}/n{n}",
            "description": f"broadcast of V ({V_BYTES} B) to {n} clients and their {UPLOAD_BYTES} B answers, {net}, {kind}",
            "meta": {"family": "bcast", "net": net, "n": n, "het": het, "sigma": NETS[net][2] if het else 0.0,
                     "seed": seed},
            "nodes": star_nodes(net, n, het, seed),
            "messages": msgs}


def fedrecpp_round(net: str, n: int, het: bool = False, seed: int = DEFAULT_SEED) -> dict:
    """FedRec++'s three hops with client/0 as the one denoiser (see the module docstring)."""
    if n < 2:
        raise ValueError("FedRec++ needs a denoiser and at least one ordinary client")
    msgs = [_msg(i, "server", client_id(i), V_BYTES) for i in range(n)]
    mid = n
    noise_ids = []
    for i in range(1, n):
        msgs.append(_msg(mid, client_id(i), "server", UPLOAD_BYTES, after=[i]))
        msgs.append(_msg(mid + 1, client_id(i), client_id(0), NOISE_BYTES, after=[i]))
        noise_ids.append(mid + 1)
        mid += 2
    msgs.append(_msg(mid, client_id(0), "server", DENOISED_BYTES, after=[0, *noise_ids]))
    kind = "het" if het else "homo"
    return {"name": f"fedrecpp/{net}/{kind}/n{n}",
            "description": (f"FedRec++ round on {net} ({kind}): V to {n} clients, {n - 1} uploads of {UPLOAD_BYTES} B "
                            f"and noise of {NOISE_BYTES} B to denoiser client/0, its {DENOISED_BYTES} B sum to the server"),
            "meta": {"family": "fedrecpp", "net": net, "n": n, "het": het, "sigma": NETS[net][2] if het else 0.0,
                     "seed": seed, "denoiser": client_id(0)},
            "nodes": star_nodes(net, n, het, seed),
            "messages": msgs}


def star_upload(n_clients: int, delay_ms: float, size: str,
                server_latency: float = STAR_SERVER_LATENCY) -> dict:
    """The original check: clients on 10 Mbit/s spokes uploading ``size`` at once to a 50 Mbit/s server."""
    nbytes = SIZES[size]
    nodes = {"server": _node(50 * MBIT, 50 * MBIT, server_latency)}
    for i in range(n_clients):
        nodes[client_id(i)] = _node(10 * MBIT, 10 * MBIT, delay_ms / 1000.0)
    d = f"{delay_ms:g}"
    return {"name": f"star/c{n_clients}/d{d}ms/{size}",
            "description": (f"{n_clients} clients on 10 Mbit/s spokes with {d} ms one-way delay each upload "
                            f"{nbytes} B at t=0 to a server on a 50 Mbit/s link ({server_latency * 1000:g} ms)"),
            "meta": {"family": "star", "n": n_clients, "delay_ms": delay_ms, "bytes": nbytes,
                     "server_latency": server_latency},
            "nodes": nodes,
            "messages": [_msg(i, client_id(i), "server", nbytes) for i in range(n_clients)]}


def all_patterns(seed: int = DEFAULT_SEED) -> list[dict]:
    """Every pattern of the ground truth, in a fixed order (see the module docstring)."""
    out: list[dict] = []
    for net in ("lan", "wan", "mobile", "lan0", "wan0", "mobile0"):
        out += [single(net, s) for s in SIZES]
    for fam in (broadcast_gather, fedrecpp_round):
        for net in ("lan", "wan", "mobile", "lan0", "wan0", "mobile0"):
            for het in (False, True):
                if het and NETS[net][2] <= 0:
                    continue
                out += [fam(net, n, het, seed) for n in CLIENT_COUNTS]
    for d in (1, 20, 100, 0):
        for c in (1, 10):
            out += [star_upload(c, d, s) for s in SIZES]
    return out


def by_name(name: str, seed: int = DEFAULT_SEED) -> dict:
    for p in all_patterns(seed):
        if p["name"] == name:
            return p
    raise KeyError(f"no pattern named {name!r}")


def has_latency(pattern: dict) -> bool:
    return any(n["latency"] > 0 for n in pattern["nodes"].values())


def pattern_hash(pattern: dict) -> str:
    """sha256 (16 hex digits) of the nodes and messages in canonical JSON: results carry it, so
    a consumer can check it regenerated exactly the pattern that was measured."""
    doc = {"nodes": pattern["nodes"], "messages": sorted(pattern["messages"], key=lambda m: m["id"])}
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def validate(pattern: dict) -> None:
    """Raise ValueError unless ``pattern`` follows the schema (ids, references, no cycles)."""
    nodes = pattern.get("nodes")
    if not isinstance(nodes, dict) or not nodes:
        raise ValueError("pattern has no nodes")
    for nid, spec in nodes.items():
        for key in ("up", "down"):
            v = spec.get(key)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"node {nid!r}: {key} must be a finite positive number of bytes/s")
        lat = spec.get("latency", 0.0)
        if not isinstance(lat, (int, float)) or not math.isfinite(lat) or lat < 0:
            raise ValueError(f"node {nid!r}: latency must be finite and >= 0")
    msgs = pattern.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ValueError("pattern has no messages")
    ids = [m["id"] for m in msgs]
    if len(set(ids)) != len(ids) or any((not isinstance(i, int)) or i < 0 for i in ids):
        raise ValueError("message ids must be unique non-negative integers")
    known = set(ids)
    for m in msgs:
        if m["src"] not in nodes or m["dst"] not in nodes:
            raise ValueError(f"message {m['id']}: unknown node {m['src']!r} or {m['dst']!r}")
        if m["src"] == m["dst"]:
            raise ValueError(f"message {m['id']}: src == dst")
        if int(m["bytes"]) <= 0:
            raise ValueError(f"message {m['id']}: bytes must be positive")
        if float(m.get("start", 0.0)) < 0 or float(m.get("delay", 0.0)) < 0:
            raise ValueError(f"message {m['id']}: negative start or delay")
        for a in m.get("after", []):
            if a not in known:
                raise ValueError(f"message {m['id']}: after refers to unknown id {a}")
    # cycles: Kahn
    after = {m["id"]: list(m.get("after", [])) for m in msgs}
    indeg = {i: len(set(a)) for i, a in after.items()}
    children: dict[int, list[int]] = {i: [] for i in after}
    for i, a in after.items():
        for p in set(a):
            children[p].append(i)
    todo = [i for i, d in indeg.items() if d == 0]
    seen = 0
    while todo:
        i = todo.pop()
        seen += 1
        for c in children[i]:
            indeg[c] -= 1
            if indeg[c] == 0:
                todo.append(c)
    if seen != len(after):
        raise ValueError("the after-dependencies form a cycle")


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="List or dump the ground-truth patterns.")
    ap.add_argument("--dump", metavar="NAME", help="print one pattern as JSON")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    args = ap.parse_args(argv)
    if args.dump:
        print(json.dumps(by_name(args.dump, args.seed), indent=1))
        return 0
    for p in all_patterns(args.seed):
        print(f"{p['name']:34s} {len(p['nodes']):5d} nodes {len(p['messages']):5d} messages"
              f"{'' if has_latency(p) else '  (latency-free)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
