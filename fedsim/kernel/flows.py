"""``FairShareLinkModel``: a flow-level link model. Concurrent transfers share each port's bandwidth
max-min fairly; a TCP variant adds the connection handshake and slow start.

Every node has an egress port (capacity = its uplink) and an ingress port (its downlink); the
network core between them is not a bottleneck (a star, as in docs/network-model.md). A message
copy from A to B is a *flow* through A's egress and B's ingress:

- while it is active it gets a max-min fair share of both ports: rates are recomputed whenever a
  flow starts or ends (progressive filling: the port with the smallest fair share fixes the rate
  of its flows, which are then removed from the others; repeated), so a server receiving 943
  uploads at once divides its downlink among them, and a flow's rate is limited by the slowest
  port on its path;
- bytes pipeline through the path: the first byte reaches B ``A.latency + B.latency`` after it
  left A, the message arrives when its last byte does (``arrival = tx_end + latency``), instead of
  being stored and forwarded whole at each port as in ``FifoLinkModel``.

With ``tcp=True`` each port also carries the segments' TCP/IP headers (52 bytes per segment of
``mss`` = 1,448 payload bytes: the payload moves at 96.5 % of the line rate), and each message
pays what a fresh TCP connection costs before its bytes flow at the fair rate (as the ground-truth harness sends each message on its own connection; see
validation/README.md): the handshake (one round trip) and slow start: the sender starts with a
window of ``initial_window`` segments of ``mss`` bytes and doubles it every round trip until the
window covers the path's bandwidth-delay product. The time this costs beyond a transfer at the
path's full rate is computed once per message from its size, the path's capacity (the slower of
the two ports) and the round-trip time, and added before the flow starts sharing bandwidth: an
additive start-up latency, like SimGrid's latency correction, but derived from the window
doubling instead of fitted. It ignores losses, delayed ACKs and the interaction of slow start
with sharing (a flow in slow start uses less than its share; here it uses none, then all).

Cost: a reallocation is a few NumPy passes over the active flows (no per-byte or per-packet
work); the copies of a broadcast that start together are allocated once; flows that end at the
same instant (within a nanosecond; two ulps of the clock after 2**22 s) end in one event. Deterministic: no clock, no random draws
but the kernel's seeded loss draw. Ends of different hubs at one instant run in the order they were
scheduled: a hub's at its last change (``_flush``), hubs changed at one instant by port number
(docs/network-model.md, "Ends at one instant").
"""

from __future__ import annotations

import math
import sys
from heapq import heappop, heappush
from typing import Any

import numpy as np

from .envelope import Envelope
from .errors import NetworkConfigError
from .ledger import RX_START, TX_END, TX_START
from .node import Node
from .linkmodel import LinkModel, check_time

__all__ = ["FairShareLinkModel", "tcp_startup_delay"]

_INF = math.inf
_EPS_TIME = 1e-9  # flows due to end within this many seconds of each other end together
_MIN_RATE = sys.float_info.min  # below it (subnormal) 1 / rate overflows: no finite time per byte


def _whole_at_least(name: str, value: object, lo: int, unit: str) -> int:
    """``value`` as an int if it is a whole number >= ``lo``; else ``NetworkConfigError`` naming
    ``name`` (a window that never grows made the start-up loop run for ever)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        whole = True  # (math.isfinite raised OverflowError for an int above the largest float)
    else:
        whole = isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer()
    if not whole or value < lo:
        raise NetworkConfigError(f"{name} must be a whole number of {unit} >= {lo}, got {value!r}")
    return int(value)


def _end_tolerance(now: float) -> float:
    """Seconds within which a hub's flows due to end end together at ``now``: a nanosecond, or
    two ulps of the clock once those are longer (after 2**22 s). A sliver left by rounding must
    be due at a later instant than ``now``, or its rescheduled end finds the clock where it was,
    for ever (a run sharing a port after about 2e7 s never returned)."""
    return max(_EPS_TIME, 2.0 * math.ulp(now))


def tcp_startup_delay(size: float, capacity: float, rtt: float, *, mss: int = 1448, initial_window: int = 10,
                      handshake: bool = True) -> float:
    """Seconds a TCP transfer of ``size`` bytes over a path of ``capacity`` bytes/s and round
    trip ``rtt`` takes beyond ``size / capacity``: one round trip of handshake (if ``handshake``)
    and the slow-start rounds in which the window (``initial_window`` x ``mss`` bytes, doubling
    every round trip) is smaller than the bandwidth-delay product.

    In each such round the sender sends a window and waits for its acknowledgement (one round
    trip); once the window reaches ``capacity x rtt`` the rest flows at full rate. The last byte
    leaves the sender when the data before it has been sent, so a transfer that ends within a
    window-limited round pays that round's transmission, not its round trip.

    Raises ``NetworkConfigError`` (a ``ValueError``) for an ``mss`` or ``initial_window`` below 1
    (a window that could never grow), a ``size`` that is not finite and non-negative, a
    ``capacity`` that is not positive (``inf`` allowed) or an ``rtt`` that is negative or NaN
    (they gave a ZeroDivisionError, or a NaN delay that became NaN times). An infinite ``rtt``
    gives an infinite delay with a handshake.
    """
    if mss < 1 or initial_window < 1:  # the window would never grow: refused, not looped on
        _whole_at_least("mss", mss, 1, "bytes")
        _whole_at_least("initial_window", initial_window, 1, "segments")
    if not (0 <= size < _INF and capacity > 0 and rtt >= 0):  # also NaN
        for name, v, ok in (("size", size, 0 <= size < _INF), ("capacity", capacity, capacity > 0),
                            ("rtt", rtt, rtt >= 0)):
            if not ok:
                raise NetworkConfigError(f"tcp_startup_delay: {name} must be "
                                         f"{'a positive number of bytes/s' if name == 'capacity' else 'non-negative'}"
                                         f"{' and finite' if name == 'size' else ''}, got {v!r}")
    if size <= 0 or rtt <= 0:
        return 0.0
    extra = rtt if handshake else 0.0
    w = float(initial_window * mss)
    sent = 0.0
    t = 0.0
    bdp = capacity * rtt
    while True:
        if w >= bdp:  # bandwidth-limited from here on
            t += (size - sent) / capacity if capacity != _INF else 0.0
            break
        chunk = min(w, size - sent)
        sent += chunk
        if sent >= size:
            t += chunk / capacity if capacity != _INF else 0.0
            break
        t += rtt
        w *= 2.0
    full = size / capacity if capacity != _INF else 0.0
    return extra + max(t - full, 0.0)


def _no_end(f: "_Flow", t: float, left: float, rate: float) -> None:
    """Refuse the end of ``f`` at ``t``, a time that is not finite (``check_time``)."""
    check_time(t, f.tup[0], "its last byte would leave", f"{left!r} bytes left at {rate!r} bytes/s")


class _Flow:
    """One active transfer. ``mode``: ``fixed`` (a rate that stays until the next change: a flow
    with no shared port, or any flow while the model runs in general mode), ``level`` (sharing its
    hub's water level: progress is the hub's virtual time), ``capped`` (in a hub, held at its
    other port's capacity, below the level)."""

    __slots__ = ("seq", "s", "d", "size", "tup", "mode", "hub", "phi", "left", "t", "rate", "cap", "version")

    def __init__(self, seq: int, s: int, d: int, size: float, tup: tuple) -> None:
        self.seq, self.s, self.d, self.size, self.tup = seq, s, d, size, tup
        self.mode = "fixed"
        self.hub: _Hub | None = None
        self.phi = 0.0  # level: the hub's virtual time at which the flow is done
        self.left = size  # fixed/capped: bytes still to send at time t, at rate
        self.t = 0.0
        self.rate = 0.0
        self.cap = _INF  # in a hub: the capacity of its other port
        self.version = 0

    def describe(self) -> str:
        """The flow's message in words (for the event queue's error messages)."""
        return self.tup[0].describe()

    def remaining(self, now: float) -> float:
        if self.mode == "level":
            return max(self.phi - self.hub.virtual(now), 0.0)
        return max(self.left - self.rate * (now - self.t), 0.0)


class _Hub:
    """A port shared by several flows, each of which has its other port to itself. Its capacity
    C is split by water level: flows whose other end allows less than the level (``capped``) get
    that, the others (``level``) share what is left equally. Level flows progress together, so
    their progress is one virtual clock V (bytes served to each since the hub was formed) and a
    flow is done when V reaches its ``phi``: joining, leaving and a change of level cost a heap
    operation, not a pass over the flows."""

    __slots__ = ("port", "C", "V", "t", "L", "capsum", "n_level", "by_phi", "by_cap", "capped", "version",
                 "members", "due")

    def __init__(self, port: int, C: float, now: float) -> None:
        self.port, self.C = port, C
        self.V, self.t, self.L = 0.0, now, _INF
        self.capsum = 0.0
        self.n_level = 0
        self.by_phi: list = []  # (phi, seq, version, flow) of level flows
        self.by_cap: list = []  # (cap, seq, version, flow) of level flows
        self.capped: list = []  # (-cap, seq, version, flow) of capped flows
        self.version = 0
        self.members = 0
        self.due = _INF  # when its end event (``_hub_due`` of this version) is scheduled

    def virtual(self, now: float) -> float:
        if self.n_level and now > self.t:
            return self.V + self.L * (now - self.t)
        return self.V

    def advance(self, now: float) -> None:
        self.V = self.virtual(now)
        self.t = now

    def describe(self) -> str:
        """The hub's next flow to end, in words (for the event queue's error messages)."""
        first = _top(self.by_phi, "level", self)
        return f"port {self.port} shared by {self.members} flows" + (
            f", the next to end carrying {first[3].describe()}" if first is not None else "")


def _top(heap: list, mode: str, hub) -> tuple | None:
    """The first entry of ``heap`` whose flow is still in ``mode`` in ``hub`` at that version
    (stale entries are dropped: lazy deletion)."""
    while heap:
        e = heap[0]
        f = e[3]
        if f.mode == mode and f.hub is hub and f.version == e[2]:
            return e
        heappop(heap)
    return None


class FairShareLinkModel(LinkModel):
    """Max-min fair sharing of every node's egress and ingress port among the transfers through
    it, with pipelined delivery; ``tcp=True`` adds each message's TCP start-up (handshake and slow
    start, ``tcp_startup_delay``). See the module docstring for the model and its limits.

    How the allocation is kept up to date: while no flow crosses two shared ports (the pattern of
    every federated round: a server's port shared by many clients, each client's other port its
    own), each shared port is a ``_Hub`` with its own water level and virtual clock, and a flow
    starting or ending costs a few heap operations whatever the number of flows. When some flow
    does cross two shared ports (two clients both sending to one server and one denoiser, say),
    the model switches to recomputing the whole allocation (``max_min_rates``) at every change
    until the pattern is gone again. Both give the same max-min rates (tested against each other
    and against a plain progressive filling)."""

    name = "fair"

    def __init__(self, *, tcp: bool = False, mss: int = 1448, initial_window: int = 10,
                 handshake: bool = True, header_bytes: int | None = None) -> None:
        self.tcp = bool(tcp)
        self.mss = _whole_at_least("mss", mss, 1, "bytes")
        self.initial_window = _whole_at_least("initial_window", initial_window, 1, "segments")
        self.handshake = bool(handshake)
        # with TCP, each segment of mss payload bytes carries IPv4 and TCP headers (20 + 32 with
        # timestamps): a port of rate R moves R x mss / (mss + headers) payload bytes per second
        self.header_bytes = ((52 if tcp else 0) if header_bytes is None
                             else _whole_at_least("header_bytes", header_bytes, 0, "bytes"))
        self.efficiency = self.mss / (self.mss + self.header_bytes)
        if not self.efficiency >= _MIN_RATE:  # a header so large that no payload byte would ever move
            raise NetworkConfigError(f"header_bytes {self.header_bytes} leaves no room for payload in segments of "
                                     f"mss {self.mss} bytes (efficiency {self.efficiency!r})")
        if tcp:
            self.name = "tcp"
        self._net: Any = None
        self._port: dict[str, int] = {}  # node id -> k (egress port 2k, ingress port 2k + 1)
        self._caps: list[float] = []
        self._at: dict[int, set] = {}  # port -> active flows through it
        self._hubs: dict[int, _Hub] = {}
        self._general = False  # some flow crosses two shared ports: full reallocations
        self._activated = 0
        self._dirty: set = set()  # hubs (or None: the general allocation) to reschedule now
        self._flush_pending = False

    # -- the link-model interface ---------------------------------------------------------------
    def bind(self, net) -> None:
        super().bind(net)  # (refuses an instance another network has: its flows are that run's)
        self._net = net

    def transmit(self, net, src: Node, dst: Node, envl: Envelope) -> None:
        latency = src.spec.link.latency + dst.spec.link.latency
        now = net.now()
        if not now + latency < _INF:
            check_time(now + latency, envl, "its first byte would reach the receiver",
                       f"sent at t = {now!r} s, latencies {src.spec.link.latency!r} s of {src.id!r} and "
                       f"{dst.spec.link.latency!r} s of {dst.id!r}")
        lost = bool(src.spec.loss) and net.draw_loss(src)
        delay = 0.0
        if self.tcp:
            cap = min(src.spec.link.uplink, dst.spec.link.downlink) * self.efficiency
            try:
                delay = tcp_startup_delay(envl.nbytes, cap, 2.0 * latency, mss=self.mss,
                                          initial_window=self.initial_window, handshake=self.handshake)
            except NetworkConfigError as err:  # (a path whose payload rate underflows to 0)
                raise NetworkConfigError(f"{envl.describe()}: {err}") from None
            if not now + delay < _INF:
                check_time(now + delay, envl, "its TCP start-up would end",
                           f"{envl.nbytes} bytes over a path of {cap!r} bytes/s with a round trip of "
                           f"{2.0 * latency!r} s")
        flow = (envl, dst, latency, lost, src)
        if delay > 0.0:
            net.schedule(delay, self._activate, flow)
        else:
            self._activate(flow)

    # -- ports and flows --------------------------------------------------------------------------
    def _ports(self, node: Node) -> int:
        k = self._port.get(node.id)
        if k is None:
            caps = [node.spec.link.uplink * self.efficiency, node.spec.link.downlink * self.efficiency]
            for name, rate, cap in zip(("uplink", "downlink"), (node.spec.link.uplink, node.spec.link.downlink), caps):
                if not cap >= _MIN_RATE:  # a subnormal rate: one byte would take inf seconds
                    raise NetworkConfigError(f"node {node.id!r}: its {name} of {rate!r} bytes/s carries {cap!r} "
                                             f"payload bytes/s after headers (efficiency {self.efficiency!r}), "
                                             "too little for finite transfer times")
            k = self._port[node.id] = len(self._port)
            self._caps += caps
        return k

    def node_offline(self, net, node: Node) -> None:
        """Cut every flow from or to ``node`` now (in activation order): the copy is lost and its
        share of the other port goes to the flows left. A flow drawn lost keeps its note."""
        k = self._port.get(node.id)
        if k is None or self._net is not net:
            return  # no flow has ever used its ports
        cut = self._at.get(2 * k, set()) | self._at.get(2 * k + 1, set())
        now = net.now()
        for f in sorted(cut, key=lambda f: f.seq):
            if f.s == 2 * k and self._ends_now(f, now):
                # its last byte leaves at this very instant (its end event, queued after the
                # dropout, has not run yet): sent, as under fifo and LinkModel's contract
                # (a copy is cut only if its tx_end is after offline_at)
                self._complete(f)
            else:
                self._complete(f, "sender offline" if f.s == 2 * k else "receiver offline")

    def _ends_now(self, f: _Flow, now: float) -> bool:
        """Whether ``f``'s end event is due at ``now``: for a fixed or capped flow, the time its
        ``_due`` was scheduled for (``f.t + f.left / f.rate``, as the event queue added it); for a
        level flow, its hub's end is due and would take it (``_hub_due``'s tolerance)."""
        if f.mode == "level":
            hub = f.hub
            return hub.due <= now and f.phi - hub.virtual(now) <= hub.L * _end_tolerance(now)
        return f.rate > 0.0 and f.t + f.left / f.rate <= now

    def _activate(self, tup: tuple) -> None:
        net = self._net
        envl, dst, latency, lost, src = tup
        if net.is_offline(src) or net.is_offline(dst):
            # one end dropped out during the TCP start-up: no byte moves
            net.lose(envl, "link loss" if lost else "sender offline" if net.is_offline(src) else "receiver offline")
            return
        now = net.now()
        if not now + latency < _INF:
            check_time(now + latency, envl, "its first byte would reach the receiver",
                       f"sent at t = {now!r} s, latency {latency!r} s")
        s, d = 2 * self._ports(src), 2 * self._ports(dst) + 1  # (refuses a port too slow for finite times)
        envl.row[TX_START] = now
        envl.row[RX_START] = now + latency
        size = float(envl.nbytes)
        if size <= 0.0 or min(self._caps[s], self._caps[d]) == _INF:
            self._finish(tup, now)  # nothing to share: the bytes leave at once
            return
        f = _Flow(self._activated, s, d, size, tup)
        self._activated += 1
        f.t = now
        self._at.setdefault(s, set()).add(f)
        self._at.setdefault(d, set()).add(f)
        if self._general:
            self._mark(None)
            return
        ns, nd = len(self._at[s]), len(self._at[d])
        if ns > 1 and nd > 1:
            self._enter_general(now)
            return
        if ns == 1 and nd == 1:
            self._fix(f, min(self._caps[s], self._caps[d]), now)
            return
        p, q = (s, d) if ns > 1 else (d, s)  # p: the shared port, q: the flow's own
        hub = self._hubs.get(p)
        if hub is None:
            # p just became shared: the flow already there must have its other port to itself
            (g,) = [x for x in self._at[p] if x is not f]
            g_other = g.d if g.s == p else g.s
            if len(self._at[g_other]) > 1:
                self._enter_general(now)
                return
            hub = self._hubs[p] = _Hub(p, self._caps[p], now)
            g.left, g.t = g.remaining(now), now
            g.version += 1
            self._join(hub, g, self._caps[g_other], now)
        self._join(hub, f, self._caps[q], now)

    def _fix(self, f: _Flow, rate: float, now: float) -> None:
        """Give ``f`` a fixed rate from now and schedule its end."""
        f.left, f.t = f.remaining(now), now
        f.mode, f.hub, f.rate = "fixed", None, rate
        f.version += 1
        delay = f.left / rate
        if not now + delay < _INF:
            _no_end(f, now + delay, f.left, rate)
        self._net.schedule(delay, self._due, f, f.version)

    def _due(self, f: _Flow, version: int) -> None:
        if f.version == version:
            self._complete(f)

    # -- hubs -------------------------------------------------------------------------------------
    def _join(self, hub: _Hub, f: _Flow, cap: float, now: float) -> None:
        hub.advance(now)
        f.hub, f.cap = hub, cap
        f.mode = "level"
        f.phi = hub.V + f.left
        f.version += 1
        hub.members += 1
        hub.n_level += 1
        heappush(hub.by_phi, (f.phi, f.seq, f.version, f))
        heappush(hub.by_cap, (f.cap, f.seq, f.version, f))
        self._rebalance(hub, now)

    def _rebalance(self, hub: _Hub, now: float) -> None:
        """Move flows between level and capped until the level is consistent (level flows'
        capacities at or above it, capped ones below), then reschedule the hub's next end."""
        hub.advance(now)
        while True:
            hub.L = (hub.C - hub.capsum) / hub.n_level if hub.n_level else _INF
            low = _top(hub.by_cap, "level", hub)
            if low is not None and low[0] < hub.L:  # held below the level by its own port
                f = low[3]
                f.left, f.t = max(f.phi - hub.V, 0.0), now
                f.mode, f.rate = "capped", f.cap
                f.version += 1
                hub.n_level -= 1
                hub.capsum += f.cap
                heappush(hub.capped, (-f.cap, f.seq, f.version, f))
                delay = f.left / f.cap
                if not now + delay < _INF:
                    _no_end(f, now + delay, f.left, f.cap)
                self._net.schedule(delay, self._due, f, f.version)
                continue
            high = _top(hub.capped, "capped", hub)
            if high is not None and -high[0] > hub.L:  # the level has come down past it
                f = high[3]
                f.left, f.t = f.remaining(now), now
                f.mode = "level"
                f.phi = hub.V + f.left
                f.version += 1
                hub.n_level += 1
                hub.capsum -= f.cap
                heappush(hub.by_phi, (f.phi, f.seq, f.version, f))
                heappush(hub.by_cap, (f.cap, f.seq, f.version, f))
                continue
            break
        self._mark(hub)

    def _mark(self, hub) -> None:
        # changes at one instant (a broadcast's copies starting) are rescheduled once, after every
        # event already queued for this instant
        self._dirty.add(hub)
        if not self._flush_pending:
            self._flush_pending = True
            self._net.schedule(0.0, self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        dirty, self._dirty = self._dirty, set()
        now = self._net.now()
        if None in dirty or self._general:
            if self._general:
                self._reallocate(now)
            dirty.discard(None)
        # a deterministic order, by port (numbered as nodes first take part in a flow): hubs whose
        # ends fall on one instant end in this order (docs/network-model.md, "Ends at one instant")
        for hub in sorted(dirty, key=lambda h: h.port):
            if self._hubs.get(hub.port) is not hub:
                continue  # dissolved since
            hub.version += 1
            hub.due = _INF
            first = _top(hub.by_phi, "level", hub)
            if first is not None and hub.n_level:
                hub.advance(now)
                delay = max(first[0] - hub.V, 0.0) / hub.L
                if not now + delay < _INF:
                    _no_end(first[3], now + delay, first[0] - hub.V, hub.L)
                hub.due = now + delay
                self._net.schedule(delay, self._hub_due, hub, hub.version)

    def _hub_due(self, hub: _Hub, version: int) -> None:
        if version != hub.version or self._hubs.get(hub.port) is not hub:
            return
        now = self._net.now()
        hub.advance(now)
        tol = hub.L * _end_tolerance(now)  # bytes a level flow moves in that time
        done = []
        while True:
            e = _top(hub.by_phi, "level", hub)
            if e is None or e[0] - hub.V > tol:
                break
            heappop(hub.by_phi)
            done.append(e[3])
        if not done:  # rounding left a sliver: look again when it is due
            self._mark(hub)
            return
        for f in sorted(done, key=lambda f: f.seq):  # activation order, as one batch
            self._complete(f)

    def _complete(self, f: _Flow, cut: str | None = None) -> None:
        """``f``'s last byte left now; or, with ``cut`` (why), one end dropped out and the flow
        stops now, its copy lost. Either way its ports' shares go to the flows left."""
        now = self._net.now()
        f.version += 1
        for p in (f.s, f.d):
            self._at[p].discard(f)
        hub = f.hub
        mode = f.mode
        f.mode, f.hub = "done", None
        if cut is None:
            self._finish(f.tup, now)
        else:
            envl, lost = f.tup[0], f.tup[3]
            envl.row[TX_END] = now  # where the sending stopped
            self._net.lose(envl, "link loss" if lost else cut)
        if self._general:
            self._mark(None)
            return
        if hub is not None:
            hub.advance(now)
            hub.members -= 1
            if mode == "level":
                hub.n_level -= 1
            else:
                hub.capsum -= f.cap
            if hub.members <= 1:
                self._dissolve(hub, now)
            else:
                self._rebalance(hub, now)

    def _dissolve(self, hub: _Hub, now: float) -> None:
        """A hub down to one flow: that flow has both ports to itself again."""
        del self._hubs[hub.port]
        for g in list(self._at.get(hub.port, ())):
            rem = g.remaining(now)
            g.left, g.t = rem, now
            self._fix(g, min(self._caps[g.s], self._caps[g.d]), now)

    # -- the general case: every flow's rate recomputed at every change ---------------------------
    def _all_flows(self) -> list[_Flow]:
        flows = {f for fs in self._at.values() for f in fs}
        return sorted(flows, key=lambda f: f.seq)

    def _enter_general(self, now: float) -> None:
        for f in self._all_flows():
            f.left, f.t = f.remaining(now), now
            f.mode, f.hub, f.rate = "fixed", None, 0.0
            f.version += 1
        self._hubs.clear()
        self._general = True
        self._mark(None)

    def _reallocate(self, now: float) -> None:
        flows = self._all_flows()
        for f in flows:
            f.left, f.t = f.remaining(now), now
        if not flows:
            self._general = False
            return
        shared = {p for p, fs in self._at.items() if len(fs) > 1}
        if not any(f.s in shared and f.d in shared for f in flows):
            # the pattern is gone: back to hubs, from every flow's remaining bytes
            self._general = False
            for f in flows:
                f.version += 1
                f.mode, f.hub = "fixed", None
            for p in sorted(shared):
                hub = self._hubs[p] = _Hub(p, self._caps[p], now)
                for f in sorted(self._at[p], key=lambda f: f.seq):
                    self._join(hub, f, self._caps[f.d if f.s == p else f.s], now)
            for f in flows:
                if f.s not in shared and f.d not in shared:
                    self._fix(f, min(self._caps[f.s], self._caps[f.d]), now)
            return
        caps = np.asarray(self._caps)
        rates = max_min_rates(np.array([f.s for f in flows]), np.array([f.d for f in flows]), caps)
        for f, r in zip(flows, rates.tolist()):
            f.mode, f.rate = "fixed", r
            f.version += 1
            delay = f.left / r if r > 0 else _INF
            if not now + delay < _INF:  # (a rate of 0 was scheduled at inf: the flow then ended at t = inf)
                _no_end(f, now + delay, f.left, r)
            self._net.schedule(delay, self._due_general, f, f.version)

    def _due_general(self, f: _Flow, version: int) -> None:
        if f.version == version:
            self._complete(f)

    def _finish(self, flow: tuple, now: float) -> None:
        """The last byte of ``flow`` left its sender at ``now``; it arrives one latency later."""
        envl, dst, latency, lost, _ = flow
        envl.row[TX_END] = now
        net = self._net
        if lost:
            net.lose(envl, "link loss")
        else:
            net.schedule(latency, net.deliver, envl, dst)


def max_min_rates(src: np.ndarray, dst: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Max-min fair rates of flows through two ports each (``src[f]``, ``dst[f]``: indices into
    ``caps``, the ports' capacities; ``inf`` allowed).

    When no flow crosses two shared ports (the common case: a server's port shared by many
    clients, each client's other port its own), each shared port is independent and its
    allocation is one water-filling over its flows' other-end capacities (``_hub_rates``). Else
    progressive filling (``_progressive_rates``)."""
    P = caps.size
    count = np.bincount(src, minlength=P) + np.bincount(dst, minlength=P)
    shared_s, shared_d = count[src] > 1, count[dst] > 1
    if not (shared_s & shared_d).any():
        return _hub_rates(src, dst, caps, shared_s, shared_d)
    return _progressive_rates(src, dst, caps)


def _hub_rates(src, dst, caps, shared_s, shared_d) -> np.ndarray:
    """Max-min rates when every flow crosses at most one shared port (its *hub*): a hub of
    capacity C whose flows' other ends allow c_1, ..., c_n gives every flow min(c_i, L), with the
    water level L the solution of sum_i min(c_i, L) = C (L = inf if the c_i sum to at most C).
    L is found by fixed-point iteration: start from C / n; the flows whose c_i is below the
    current level are held at c_i and the rest share what is left; the level only rises and a
    flow once held stays held, so it ends within as many steps as there are distinct binding
    capacities (usually one or two), each a few NumPy passes, with no sort. Flows whose two
    ports are both their own get the smaller capacity."""
    own = ~(shared_s | shared_d)
    rate = np.minimum(caps[src], caps[dst])  # right for flows without a hub; hubs' flows overwritten
    if own.all():
        return rate
    via = np.flatnonzero(~own)
    hub = np.where(shared_s[via], src[via], dst[via])
    other = np.where(shared_s[via], caps[dst[via]], caps[src[via]])
    hubs = np.unique(hub) if not (hub == hub[0]).all() else hub[:1]
    for H in hubs.tolist():
        mine = via if hubs.size == 1 else via[hub == H]
        c = other if hubs.size == 1 else other[hub == H]
        C = caps[H]
        if C == _INF:  # a hub without limit: each flow gets its other end
            rate[mine] = c
            continue
        held = np.zeros(c.size, bool)
        level = C / c.size
        while True:
            below = c < level
            if not (below & ~held).any():
                break
            held = below
            n_free = c.size - int(held.sum())
            if n_free == 0:
                level = _INF
                break
            level = (C - float(c[held].sum())) / n_free
        rate[mine] = np.minimum(c, level)
    return rate


def _progressive_rates(src: np.ndarray, dst: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Progressive filling, with one shortcut that keeps the number of passes small: a port that
    carries a single unfixed flow is fixed at once whenever its capacity is at most the smallest
    fair share of the ports that carry several (fixing such a flow can only raise the other
    ports' shares, so it would be next anyway). Each pass is a few NumPy operations over the
    flows."""
    F = src.size
    rate = np.zeros(F)
    fixed = np.zeros(F, bool)
    left = caps.astype(np.float64).copy()
    P = caps.size
    while True:
        free = np.flatnonzero(~fixed)
        if free.size == 0:
            return rate
        s, d = src[free], dst[free]
        count = np.bincount(s, minlength=P) + np.bincount(d, minlength=P)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(count > 0, left / np.maximum(count, 1), np.inf)
        multi = count > 1
        hub = float(share[multi].min()) if multi.any() else np.inf
        # single-flow ports at or below every shared port's share: fix their flows now
        single = (count == 1) & (share <= hub)
        pick = single[s] | single[d]
        if pick.any():
            level = np.minimum(share[s], share[d])[pick]
        else:
            level_all = float(share.min())
            if level_all == np.inf:  # only infinite ports left
                rate[free] = np.inf
                return rate
            at = share <= level_all * (1 + 1e-12)
            pick = at[s] | at[d]
            level = np.full(int(pick.sum()), level_all)
        chosen = free[pick]
        rate[chosen] = level
        fixed[chosen] = True
        used = np.bincount(src[chosen], weights=level, minlength=P) + np.bincount(dst[chosen], weights=level,
                                                                               minlength=P)
        finite = np.isfinite(left)
        left[finite] -= used[finite]
        np.maximum(left, 0.0, out=left)
