"""Per-message completion times of communication patterns over the real Linux TCP stack, shaped.

    python -m validation.real_tcp --latency-free -o validation/results/real_tcp.json
    python -m validation.real_tcp single/wan0/1MB star/c10/d0ms/1MB -o out.json
    python -m validation.real_tcp --json my_pattern.json -o out.json

Needs root, ``unshare`` and ``tc`` (htb, u32, ingress, mirred) and the ifb device. The command
re-executes itself under ``unshare -n``: everything below happens in a private network
namespace that this harness creates and that disappears with the process; it refuses to touch
``tc`` in a namespace it did not create. Only loopback addresses (127.1.x.y) are used.

Nodes. Pattern node k gets its own loopback address 127.1.(k // 250).(k % 250 + 1). All nodes
live in one process on one epoll loop (non-blocking sockets; no asyncio: its transports cost
~0.3 ms of Python per connection): a receiver is a listening socket on its node's address, a
sender a socket bound to its node's address and to a port of its own (message i from port
10000 + i), so the receiver knows a message by the sender's port. Each message is its own TCP
connection, opened at the message's start time (or ``delay`` after its dependencies completed,
as seen by the receiving application), writing exactly ``bytes`` bytes and closing.

Shaping on one loopback device, in two stages (a packet from A to B passes both):

1. ``lo`` egress: an htb class per *source* address with rate A.up (a pfifo leaf): A's uplink.
   All of A's connections (a broadcast to N clients, an upload and a noise message at once,
   the ACKs A sends) share it, in FIFO order of what TCP hands to the device.
2. ``lo`` ingress is redirected (tc mirred) to an ``ifb`` device whose egress has an htb class
   per *destination* address with rate B.down: B's downlink (the router's port towards B). Fan-in
   at the server (N uploads at once) queues here, as at a router.

u32 filters hash on the address's last byte, so classifying costs O(1), not O(N) per packet.
Rates are scaled by 1514/1502: Linux puts 1514 bytes (14 of Ethernet header) on the shaper
for a full 1448-byte segment, ns-3's point-to-point link 1502 (2 of PPP), so a full segment
takes the same time in both. Queues (pfifo leaves) hold ``queue_packets`` packets (default
100,000: no drops in practice; drops are read from ``tc -s`` and reported).

What it models: per-node uplink and downlink rates in both directions, sharing of a node's
uplink by all its connections, fan-in queueing at a node's downlink, ACKs on the reverse path,
the real kernel's TCP (CUBIC set per socket, SACK, timestamps, IW10, autotuned buffers up to
the kernel's limits, TSQ, F-RTO, RACK).
What it does not: propagation latency (netem is not in this kernel, and without sch_fq there is
no earliest-departure-time trick either): the RTT is the queueing delay plus a few tens of
microseconds, so patterns with latency run as if latency were 0 (each result says
``latency_modelled: false``), and slow start finishes within microseconds. The sender's
uplink queue is the host's own qdisc, so TCP Small Queues keep about a millisecond of each
connection's data in it (on a real access link the bottleneck queue is in the modem, which
TSQ does not see); the downlink queue is not subject to TSQ (packets are orphaned at loopback),
as at a router. Every node lives in one Python process on a shared machine: for a message of
a few hundred microseconds of link time (lan rates) the measured time includes event-loop
latency (tens to hundreds of microseconds, more with hundreds of concurrent connections).

Output (JSON): the same document as validation/ns3_star.py (engine "linux-tcp"), plus per
pattern ``latency_modelled``, ``repeats`` and per message the value of every repeat
(``completion_runs``); ``completion`` is the median of the repeats, ``start``/``connected``/
``first_byte`` come from the run whose completion is the median. Times in seconds from the
pattern's t0 (time.monotonic).
"""

from __future__ import annotations

import datetime as _dt
import errno
import heapq
import json
import os
import platform
import resource
import select
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from validation import patterns as P  # noqa: E402
from validation import results as R  # noqa: E402

SETTINGS: dict = {
    "congestion_control": "cubic",
    "nodelay": True,
    "mtu": 1500,
    "gso": False,                 # gso_max_segs 1: one segment per skb on the shaper
    "framing_scale": 1514 / 1502,
    "burst_bytes": 1514,          # htb burst/cburst per class: at least one full frame ...
    "min_burst_s": 0.002,         # ... and at least 2 ms at the class rate (see the README)
    "queue_packets": 100_000,
    "settle_s": 0.3,              # pause before each run (FIN/ACK of the previous run)
    "lead_s": 0.05,               # t0 = now + lead after every listener is up
    "timeout_min_s": 20.0,
    "recv_buffer": 1 << 18,
    "send_chunk": 1 << 16,        # bytes per send() call
    "tx_batch": 16,               # writable sockets served per turn (all readable ones are)
}

_ENV_MARK = "FEDSIM_GT_NETNS_PARENT"  # inode of the parent's network namespace


# -- addresses and tc -------------------------------------------------------------------------

def node_addresses(node_ids: list[str]) -> dict[str, str]:
    if len(node_ids) > 250 * 250:
        raise ValueError("too many nodes")
    return {nid: f"127.1.{k // 250}.{k % 250 + 1}" for k, nid in enumerate(node_ids)}


def _rate_bits(bytes_per_s: float, s: dict) -> int:
    return max(8, int(round(bytes_per_s * 8 * s["framing_scale"])))


def _burst(bytes_per_s: float, s: dict) -> int:
    return int(max(s["burst_bytes"], bytes_per_s * s["framing_scale"] * s["min_burst_s"]))


def tc_batch(pattern: dict, addrs: dict[str, str], s: dict) -> dict[str, list[str]]:
    """The tc commands (for ``tc -batch``) of both stages: {"lo": [...], "ifb0": [...]}."""
    out = {}
    for dev, key, at, field in (("lo", "src", 12, "up"), ("ifb0", "dst", 16, "down")):
        cmds = [f"qdisc add dev {dev} root handle 1: htb default 0 r2q 1"]
        cmds.append(f"filter add dev {dev} parent 1: prio 1 handle 2: protocol ip u32 divisor 256")
        cmds.append(f"filter add dev {dev} parent 1: prio 1 protocol ip u32 ht 800:: "
                    f"match ip {key} 127.1.0.0/16 hashkey mask 0x000000ff at {at} link 2:")
        for k, nid in enumerate(pattern["nodes"]):
            rate = float(pattern["nodes"][nid][field])
            c = k + 2
            bits, burst = _rate_bits(rate, s), _burst(rate, s)
            cmds.append(f"class add dev {dev} parent 1: classid 1:{c:x} htb rate {bits}bit ceil {bits}bit "
                        f"burst {burst} cburst {burst} quantum 1514")
            cmds.append(f"qdisc add dev {dev} parent 1:{c:x} handle {c:x}: pfifo limit {int(s['queue_packets'])}")
            addr = addrs[nid]
            last = int(addr.rsplit(".", 1)[1])
            cmds.append(f"filter add dev {dev} parent 1: prio 1 protocol ip u32 ht 2:{last:x}: "
                        f"match ip {key} {addr}/32 flowid 1:{c:x}")
        out[dev] = cmds
    return out


def _run(cmd: list[str], inp: str | None = None, timeout: float = 60.0, check: bool = True) -> str:
    r = subprocess.run(cmd, input=inp, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[:2000]}")
    return r.stdout


def _netns_inode() -> int:
    return os.stat("/proc/self/ns/net").st_ino


def _assert_own_namespace() -> None:
    parent = os.environ.get(_ENV_MARK)
    if not parent or int(parent) == _netns_inode():
        raise RuntimeError("refusing to configure tc outside the private namespace this harness created")


def setup_namespace(s: dict) -> None:
    """lo up at the MTU, no GSO, ifb0 up, lo ingress redirected to ifb0, kernel limits raised."""
    _assert_own_namespace()
    _run(["ip", "link", "set", "lo", "up"])
    _run(["ip", "link", "set", "lo", "mtu", str(s["mtu"])])
    if not s["gso"]:
        _run(["ip", "link", "set", "dev", "lo", "gso_max_segs", "1", "gso_max_size", str(s["mtu"])])
    _run(["ip", "link", "add", "ifb0", "type", "ifb"])
    _run(["ip", "link", "set", "ifb0", "mtu", str(s["mtu"])])
    _run(["ip", "link", "set", "ifb0", "up"])
    _run(["tc", "qdisc", "add", "dev", "lo", "handle", "ffff:", "ingress"])
    _run(["tc", "filter", "add", "dev", "lo", "parent", "ffff:", "protocol", "ip", "u32", "match", "u32", "0", "0",
          "action", "mirred", "egress", "redirect", "dev", "ifb0"])
    for key, val in (("net.ipv4.tcp_max_syn_backlog", "65536"), ("net.core.somaxconn", "65535"),
                     ("net.ipv4.tcp_syncookies", "0"), ("net.ipv4.ip_local_port_range", "20000 60999")):
        _run(["sysctl", "-q", "-w", f"{key}={val}"])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def apply_shaping(pattern: dict, addrs: dict[str, str], s: dict) -> None:
    _assert_own_namespace()
    clear_shaping()
    for dev, cmds in tc_batch(pattern, addrs, s).items():
        _run(["tc", "-batch", "-"], inp="\n".join(cmds) + "\n", timeout=120)


def clear_shaping() -> None:
    for dev in ("lo", "ifb0"):
        _run(["tc", "qdisc", "del", "dev", dev, "root"], check=False)


def tc_counters() -> dict:
    """Packets sent, dropped and overlimits summed over the leaves of both stages."""
    tot = {"sent_packets": 0, "dropped": 0, "backlog_packets": 0}
    for dev in ("lo", "ifb0"):
        doc = json.loads(_run(["tc", "-s", "-j", "qdisc", "show", "dev", dev]) or "[]")
        for q in doc:
            if q.get("kind") == "pfifo":
                tot["sent_packets"] += int(q.get("packets", 0))
                tot["dropped"] += int(q.get("drops", 0))
                tot["backlog_packets"] += int(q.get("qlen", 0))
    return tot


# -- the engine: one epoll loop ------------------------------------------------------------

def pattern_timeout(pattern: dict, s: dict) -> float:
    """A generous bound: 20 s plus 10 x (busiest port's bytes / its rate) per dependency level."""
    load: dict[tuple[str, str], float] = {}
    for m in pattern["messages"]:
        load[(m["src"], "up")] = load.get((m["src"], "up"), 0.0) + m["bytes"] / pattern["nodes"][m["src"]]["up"]
        load[(m["dst"], "down")] = load.get((m["dst"], "down"), 0.0) + m["bytes"] / pattern["nodes"][m["dst"]]["down"]
    by_id = {m["id"]: m for m in pattern["messages"]}
    depth: dict[int, int] = {}

    def level(i: int) -> int:
        if i not in depth:
            depth[i] = 0  # placeholder (validate() refuses cycles)
            depth[i] = 1 + max((level(a) for a in by_id[i]["after"]), default=0)
        return depth[i]

    levels = max(level(i) for i in by_id)
    extra = sum(float(m.get("start", 0.0)) + float(m.get("delay", 0.0)) for m in pattern["messages"])
    return s["timeout_min_s"] + 10.0 * max(load.values()) * levels + min(extra, 3600.0)


class _Run:
    """One run of a pattern on a bare epoll loop (asyncio's transports cost ~0.3 ms of Python per
    connection; opening one here costs ~20 us, so 943 connections start within ~20 ms)."""

    def __init__(self, pattern: dict, addrs: dict[str, str], lport: int, s: dict):
        self.s = s
        self.addrs = addrs
        self.lport = lport
        self.msgs = sorted(pattern["messages"], key=lambda m: m["id"])
        self.pos = {m["id"]: k for k, m in enumerate(self.msgs)}
        n = len(self.msgs)
        self.pending = [len(set(m["after"])) for m in self.msgs]
        self.dependents: list[list[int]] = [[] for _ in range(n)]
        for k, m in enumerate(self.msgs):
            for a in set(m["after"]):
                self.dependents[self.pos[a]].append(k)
        self.rx = [0] * n
        self.t_start: list[float | None] = [None] * n
        self.t_conn: list[float | None] = [None] * n
        self.t_first: list[float | None] = [None] * n
        self.t_done: list[float | None] = [None] * n
        self.sent = [0] * n
        self.errors: list[str] = []
        self.ndone = 0
        self.buf = memoryview(bytearray(s["recv_buffer"]))
        self.payload = memoryview(bytes(max(m["bytes"] for m in self.msgs)))
        self.t0 = 0.0
        # Receivers (listeners and accepted connections) and senders poll separately: every turn
        # serves all readable sockets, then at most ``tx_batch`` writable ones, so a burst of
        # sends (943 x 134 KB, each send() also running the kernel's softirq work) cannot hold
        # back the timestamps of arrivals, which stand for other machines.
        self.ep = select.epoll()
        self.ep_tx = select.epoll()
        self.handlers: dict[int, tuple] = {}  # fd -> (kind, socket, message index)
        self.timers: list[tuple[float, int, int]] = []  # (when, seq, message index) to launch
        self.seq = 0

    # receiving side
    def _accept(self, lsock: socket.socket) -> None:
        while True:
            try:
                conn, peer = lsock.accept()
            except BlockingIOError:
                return
            k = peer[1] - 10000
            if not 0 <= k < len(self.msgs):
                conn.close()
                continue
            conn.setblocking(False)
            self.handlers[conn.fileno()] = ("rx", conn, k)
            self.ep.register(conn.fileno(), select.EPOLLIN)

    def _read(self, fd: int, conn: socket.socket, k: int) -> None:
        buf = self.buf
        while True:
            try:
                nbytes = conn.recv_into(buf)
            except BlockingIOError:
                return
            except OSError as e:
                self.errors.append(f"message {self.msgs[k]['id']}: receive: {e}")
                nbytes = 0
            if nbytes == 0:
                self._drop(fd, conn)
                return
            now = time.monotonic()
            if self.t_first[k] is None:
                self.t_first[k] = now - self.t0
            self.rx[k] += nbytes
            if self.t_done[k] is None and self.rx[k] >= self.msgs[k]["bytes"]:
                self._completed(k, now)

    def _completed(self, k: int, now: float) -> None:
        self.t_done[k] = now - self.t0
        self.ndone += 1
        for d in self.dependents[k]:
            self.pending[d] -= 1
            if self.pending[d] == 0:
                delay = float(self.msgs[d].get("delay", 0.0))
                if delay > 0:
                    self._at(now + delay, d)
                else:
                    self._launch(d)

    # sending side
    def _at(self, when: float, k: int) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (when, self.seq, k))

    def _launch(self, k: int) -> None:
        m = self.msgs[k]
        self.t_start[k] = time.monotonic() - self.t0
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, self.s["congestion_control"].encode())
            if self.s["nodelay"]:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.bind((self.addrs[m["src"]], 10000 + k))
            sock.setblocking(False)
            err = sock.connect_ex((self.addrs[m["dst"]], self.lport))
            if err not in (0, errno.EINPROGRESS):
                raise OSError(err, os.strerror(err))
        except OSError as e:
            self.errors.append(f"message {m['id']}: connect: {e}")
            sock.close()
            return
        self.handlers[sock.fileno()] = ("tx", sock, k)
        self.ep_tx.register(sock.fileno(), select.EPOLLOUT)

    def _write(self, fd: int, sock: socket.socket, k: int) -> None:
        m = self.msgs[k]
        if self.t_conn[k] is None:
            err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self.errors.append(f"message {m['id']}: connect: {os.strerror(err)}")
                self._drop(fd, sock)
                return
            self.t_conn[k] = time.monotonic() - self.t0
        total = m["bytes"]
        chunk = self.s["send_chunk"]
        for _ in range(2):  # at most two chunks per turn (level-triggered: the rest next turn)
            if self.sent[k] >= total:
                break
            try:
                self.sent[k] += sock.send(self.payload[self.sent[k]: min(total, self.sent[k] + chunk)])
            except BlockingIOError:
                return
            except OSError as e:
                self.errors.append(f"message {m['id']}: send: {e}")
                self._drop(fd, sock)
                return
        if self.sent[k] < total:
            return
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self._drop(fd, sock)

    def _drop(self, fd: int, sock: socket.socket) -> None:
        h = self.handlers.pop(fd, None)
        try:
            (self.ep_tx if h is not None and h[0] == "tx" else self.ep).unregister(fd)
        except (OSError, ValueError):
            pass
        sock.close()

    def run(self, timeout: float) -> None:
        listeners = []
        cpu0, wall0 = sum(os.times()[:2]), time.monotonic()
        try:
            for dst in sorted({m["dst"] for m in self.msgs}):
                ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                ls.bind((self.addrs[dst], self.lport))
                ls.listen(65535)
                ls.setblocking(False)
                listeners.append(ls)
                self.handlers[ls.fileno()] = ("listen", ls, -1)
                self.ep.register(ls.fileno(), select.EPOLLIN)
            self.t0 = time.monotonic() + self.s["lead_s"]
            for k, m in enumerate(self.msgs):
                if self.pending[k] == 0:
                    self._at(self.t0 + float(m.get("start", 0.0)), k)
            deadline = self.t0 + timeout
            n = len(self.msgs)
            while self.ndone < n:
                now = time.monotonic()
                while self.timers and self.timers[0][0] <= now:
                    self._launch(heapq.heappop(self.timers)[2])
                if now >= deadline:
                    self.errors.append(f"timeout after {timeout:.0f} s: {self.ndone}/{n} complete")
                    break
                for fd, _ev in self.ep.poll(0):
                    self._serve(fd)
                tx = self.ep_tx.poll(0, self.s["tx_batch"])
                for fd, _ev in tx:
                    self._serve(fd)
                if tx or self.ndone == n:
                    continue
                # nothing to send: sleep until an arrival, a writable socket or the next timer
                wait = min(deadline, self.timers[0][0] if self.timers else deadline) - time.monotonic()
                ready = select.select([self.ep.fileno(), self.ep_tx.fileno()], [], [], max(0.0, wait))[0]
                del ready
        finally:
            for fd, (kind, sock, k) in list(self.handlers.items()):
                self._drop(fd, sock)
            self.ep.close()
            self.ep_tx.close()
            self.cpu_s = sum(os.times()[:2]) - cpu0
            self.wall_s = time.monotonic() - wall0

    def _serve(self, fd: int) -> None:
        h = self.handlers.get(fd)
        if h is None:
            return
        kind, sock, k = h
        if kind == "rx":
            self._read(fd, sock, k)
        elif kind == "tx":
            self._write(fd, sock, k)
        else:
            self._accept(sock)


def _run_once(pattern: dict, addrs: dict[str, str], lport: int, s: dict) -> tuple[_Run, dict]:
    time.sleep(s["settle_s"])
    before = tc_counters()
    r = _Run(pattern, addrs, lport, s)
    r.run(pattern_timeout(pattern, s))
    after = tc_counters()
    return r, {k: after[k] - before[k] for k in ("sent_packets", "dropped")}


def run_pattern(pattern: dict, s: dict, index: int = 0, repeats: int = 1) -> dict:
    """Measure one pattern ``repeats`` times (inside the private namespace)."""
    P.validate(pattern)
    addrs = node_addresses(list(pattern["nodes"]))
    t_wall = time.perf_counter()
    apply_shaping(pattern, addrs, s)
    runs = []
    counters = {"sent_packets": 0, "dropped": 0}
    try:
        for rep in range(repeats):
            lport = 2000 + (index * 7 + rep) % 6000  # fresh 4-tuples: no TIME_WAIT clash
            r, c = _run_once(pattern, addrs, lport, s)
            runs.append(r)
            for key in counters:
                counters[key] += c[key]
    finally:
        clear_shaping()
    msgs = runs[0].msgs
    out_msgs = []
    for k, m in enumerate(msgs):
        comps = [r.t_done[k] for r in runs]
        ok = [c for c in comps if c is not None]
        if len(ok) == len(comps):
            med = statistics.median_low(comps)
            src = runs[comps.index(med)]
        else:
            med, src = None, runs[0]
        out_msgs.append({
            "id": m["id"], "src": m["src"], "dst": m["dst"], "bytes": int(m["bytes"]),
            "start": src.t_start[k], "connected": src.t_conn[k], "first_byte": src.t_first[k],
            "completion": med,
            "duration": None if med is None or src.t_start[k] is None else med - src.t_start[k],
            "completion_runs": comps,
        })
    rounds = [max(r.t_done) if all(t is not None for t in r.t_done) else None for r in runs]
    ok_rounds = [x for x in rounds if x is not None]
    return {
        "name": pattern.get("name", ""), "hash": P.pattern_hash(pattern),
        "latency_modelled": not P.has_latency(pattern),
        "complete": len(ok_rounds) == len(rounds),
        "round": statistics.median_low(ok_rounds) if len(ok_rounds) == len(rounds) else None,
        "round_runs": rounds,
        # CPU seconds (user + system, which includes network softirq work done in the harness's
        # context) per wall second of each run: near 1, the one harness process was the
        # bottleneck and app-level times include waiting for it
        "cpu_busy": [round(r.cpu_s / r.wall_s, 3) if r.wall_s > 0 else None for r in runs],
        "repeats": repeats,
        "wall_s": round(time.perf_counter() - t_wall, 3),
        "queue_drops": counters["dropped"], "shaper_packets": counters["sent_packets"],
        "errors": sorted({e for r in runs for e in r.errors})[:20],
        "messages": out_msgs,
    }


def run_patterns_in_namespace(patterns: list[dict], s: dict, repeats: int = 1,
                              repeats_with_latency: int | None = None, log=None) -> dict:
    setup_namespace(s)
    load_start = os.getloadavg()
    results = []
    for i, p in enumerate(patterns):
        reps = repeats if (repeats_with_latency is None or not P.has_latency(p)) else repeats_with_latency
        res = run_pattern(p, s, i, reps)
        results.append(res)
        if log:
            rr = ", ".join("-" if x is None else f"{x:.4f}" for x in res["round_runs"])
            log(f"{res['name']:34s} round {rr} s  wall {res['wall_s']:.1f} s  drops {res['queue_drops']}  "
                f"cpu {max(x or 0 for x in res['cpu_busy']):.2f}"
                f"{'  ' + res['errors'][0] if res['errors'] else ''}")
    return {
        "engine": "linux-tcp",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "tc": _run(["tc", "-V"]).strip(),
        "cpus": os.cpu_count(),
        "loadavg_start": [round(x, 2) for x in load_start],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "settings": s,
        "note": ("no propagation latency can be added (no netem): patterns with latency ran with ~0 latency "
                 "(latency_modelled false)"),
        "patterns": results,
    }


def available() -> tuple[bool, str]:
    """Whether this machine can run the harness (root, unshare, tc, ip, ifb), and why not."""
    if os.geteuid() != 0:
        return False, "needs root"
    for tool in ("unshare", "tc", "ip"):
        if shutil.which(tool) is None:
            return False, f"{tool} not found"
    try:
        r = subprocess.run(["unshare", "-n", "sh", "-c",
                            "ip link set lo up && ip link add ifb0 type ifb && "
                            "tc qdisc add dev lo root handle 1: htb && "
                            "tc qdisc add dev lo handle ffff: ingress"],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"unshare -n failed: {e}"
    if r.returncode != 0:
        return False, f"namespace/tc/ifb unavailable: {r.stderr.strip()[:300]}"
    return True, ""


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="Measure communication patterns over real, shaped Linux TCP.")
    ap.add_argument("names", nargs="*", help="pattern names from validation.patterns")
    ap.add_argument("--all", action="store_true", help="every pattern (those with latency run without it)")
    ap.add_argument("--latency-free", action="store_true", help="every latency-free pattern")
    ap.add_argument("--json", nargs="*", default=[], metavar="FILE", help="pattern files (a pattern or a list)")
    ap.add_argument("--repeats", type=int, default=1, help="runs per pattern (median reported)")
    ap.add_argument("--repeats-with-latency", type=int, help="runs per pattern that has latency (default: --repeats)")
    ap.add_argument("--timeout", type=float, help="overall time limit, s (default: from the patterns)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a setting of SETTINGS (JSON value), e.g. --set min_burst_s=0.001")
    ap.add_argument("-o", "--out", help="write the result document here (default: stdout)")
    args = ap.parse_args(argv)
    pats: list[dict] = []
    allp = P.all_patterns()
    if args.all:
        pats += allp
    elif args.latency_free:
        pats += [p for p in allp if not P.has_latency(p)]
    if args.names:
        byname = {p["name"]: p for p in allp}
        pats += [byname[n] for n in args.names]
    for path in args.json:
        doc = json.loads(Path(path).read_text())
        pats += doc if isinstance(doc, list) else [doc]
    if not pats:
        ap.error("no patterns given")
    s = dict(SETTINGS)
    for kv in args.set:
        key, _, val = kv.partition("=")
        if key not in SETTINGS:
            ap.error(f"unknown setting {key!r}")
        s[key] = json.loads(val)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731

    if os.environ.get(_ENV_MARK):  # the child, inside its own namespace
        t_all = time.perf_counter()
        doc = run_patterns_in_namespace(pats, s, args.repeats, args.repeats_with_latency, log)
        doc["total_wall_s"] = round(time.perf_counter() - t_all, 1)
        if args.out:
            R.dump(doc, args.out, digits=6)
        else:
            print(json.dumps(doc, indent=1))
        return 0 if all(r["complete"] for r in doc["patterns"]) else 3

    ok, why = available()
    if not ok:
        print(f"real_tcp: cannot run: {why}", file=sys.stderr)
        return 2
    reps = max(args.repeats, args.repeats_with_latency or 0)
    limit = args.timeout or (60.0 + sum(reps * (pattern_timeout(p, s) + 5.0) for p in pats))
    env = dict(os.environ, **{_ENV_MARK: str(_netns_inode())})
    here = Path(__file__).resolve()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(here.parents[1]), env.get("PYTHONPATH", "")]))
    cmd = ["unshare", "-n", "--", sys.executable, str(here), *(argv if argv is not None else sys.argv[1:])]
    try:
        return subprocess.run(cmd, env=env, timeout=limit).returncode
    except subprocess.TimeoutExpired:
        print(f"real_tcp: gave up after {limit:.0f} s", file=sys.stderr)
        return 4


if __name__ == "__main__":
    raise SystemExit(main())
