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

With ``tcp=True`` each message also pays what a fresh TCP connection costs before its bytes flow
at the fair rate (as the ground-truth harness sends each message on its own connection; see
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
same instant (within a nanosecond) end in one event. Deterministic: no clock, no random draws
but the kernel's seeded loss draw.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .envelope import Envelope
from .ledger import RX_START, TX_END, TX_START
from .node import Node
from .linkmodel import LinkModel

__all__ = ["FairShareLinkModel", "tcp_startup_delay"]

_INF = math.inf
_EPS_TIME = 1e-9  # flows due to end within this many seconds of each other end together


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
    """
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


class FairShareLinkModel(LinkModel):
    """Max-min fair sharing of every node's egress and ingress port among the transfers through
    it, with pipelined delivery; ``tcp=True`` adds each message's TCP start-up (handshake and slow
    start, ``tcp_startup_delay``). See the module docstring for the model and its limits."""

    name = "fair"

    def __init__(self, *, tcp: bool = False, mss: int = 1448, initial_window: int = 10,
                 handshake: bool = True) -> None:
        self.tcp = bool(tcp)
        self.mss = int(mss)
        self.initial_window = int(initial_window)
        self.handshake = bool(handshake)
        if tcp:
            self.name = "tcp"
        self._net: Any = None
        self._port: dict[str, int] = {}  # node id -> k (egress port 2k, ingress port 2k + 1)
        self._cap_store = np.zeros(64)  # port capacities, grown by doubling
        self._caps = self._cap_store[:0]
        # active flows, in order of activation (swap-removal keeps the arrays dense)
        n = 64
        self._n = 0
        self._src = np.zeros(n, np.int64)  # egress port
        self._dst = np.zeros(n, np.int64)  # ingress port
        self._left = np.zeros(n)  # bytes still to send
        self._rate = np.zeros(n)  # bytes/s
        self._seq = np.zeros(n, np.int64)  # activation number: the deterministic tie order
        self._flows: list[tuple] = []  # (envelope, dst node, latency)
        self._activated = 0
        self._t = 0.0  # when _left was last brought up to date
        self._dirty = False
        self._token = 0  # invalidates a scheduled completion check after a reallocation

    # -- the link-model interface ---------------------------------------------------------------
    def transmit(self, net, src: Node, dst: Node, envl: Envelope) -> None:
        if self._net is None:
            self._net = net
        elif self._net is not net:
            raise RuntimeError("a FairShareLinkModel serves one network; make one per SimNetwork")
        latency = src.spec.link.latency + dst.spec.link.latency
        lost = bool(src.spec.loss) and net.draw_loss(src)
        delay = 0.0
        if self.tcp:
            cap = min(src.spec.link.uplink, dst.spec.link.downlink)
            delay = tcp_startup_delay(envl.nbytes, cap, 2.0 * latency, mss=self.mss,
                                      initial_window=self.initial_window, handshake=self.handshake)
        flow = (envl, dst, latency, lost, src)
        if delay > 0.0:
            net.schedule(delay, self._activate, flow)
        else:
            self._activate(flow)

    # -- flows ------------------------------------------------------------------------------------
    def _ports(self, node: Node) -> int:
        k = self._port.get(node.id)
        if k is None:
            k = self._port[node.id] = len(self._port)
            if 2 * k + 2 > self._cap_store.size:
                store = np.zeros(2 * self._cap_store.size)
                store[: 2 * k] = self._cap_store[: 2 * k]
                self._cap_store = store
            self._cap_store[2 * k] = node.spec.link.uplink
            self._cap_store[2 * k + 1] = node.spec.link.downlink
            self._caps = self._cap_store[: 2 * k + 2]
        return k

    def _activate(self, flow: tuple) -> None:
        net = self._net
        envl, dst, latency, lost, src = flow
        now = net.now()
        envl.row[TX_START] = now
        envl.row[RX_START] = now + latency
        size = float(envl.nbytes)
        ks, kd = self._ports(src), self._ports(dst)
        if size <= 0.0 or min(src.spec.link.uplink, dst.spec.link.downlink) == _INF:
            self._finish(flow, now)  # nothing to share: the bytes leave at once
            return
        self._advance(now)
        i = self._n
        if i == len(self._src):
            self._grow()
        self._src[i], self._dst[i] = 2 * ks, 2 * kd + 1
        self._left[i] = size
        self._rate[i] = 0.0
        self._seq[i] = self._activated
        self._activated += 1
        self._flows.append(flow)
        self._n = i + 1
        self._mark_dirty()

    def _grow(self) -> None:
        n = 2 * len(self._src)
        for name in ("_src", "_dst", "_left", "_rate", "_seq"):
            a = getattr(self, name)
            b = np.zeros(n, a.dtype)
            b[: len(a)] = a
            setattr(self, name, b)

    def _advance(self, now: float) -> None:
        """Bring every active flow's remaining bytes up to ``now`` at its current rate."""
        dt = now - self._t
        if dt > 0.0 and self._n:
            n = self._n
            left = self._left[:n]
            left -= self._rate[:n] * dt
            np.maximum(left, 0.0, out=left)
        self._t = now

    def _mark_dirty(self) -> None:
        # flows started at the same instant (a broadcast's copies) share one reallocation, run
        # after every event already queued for this instant
        if not self._dirty:
            self._dirty = True
            self._net.schedule(0.0, self._reallocate)

    def _reallocate(self) -> None:
        self._dirty = False
        net = self._net
        now = net.now()
        self._advance(now)
        n = self._n
        if not n:
            return
        self._rate[:n] = max_min_rates(self._src[:n], self._dst[:n], self._caps)
        self._token += 1
        with np.errstate(divide="ignore"):
            eta = self._left[:n] / self._rate[:n]
        nxt = float(eta.min())
        if nxt != _INF:
            net.schedule(max(nxt, 0.0), self._complete, self._token)

    def _complete(self, token: int) -> None:
        if token != self._token:
            return  # rates changed since this check was scheduled
        net = self._net
        now = net.now()
        self._advance(now)
        n = self._n
        with np.errstate(divide="ignore"):
            eta = self._left[:n] / self._rate[:n]
        done = np.flatnonzero(eta <= _EPS_TIME)
        if done.size == 0:  # rounding left a sliver: check again when it is due
            self._mark_dirty()
            return
        done = done[np.argsort(self._seq[done], kind="stable")]  # activation order
        finished = [self._flows[i] for i in done]
        keep = np.ones(n, bool)
        keep[done] = False
        idx = np.flatnonzero(keep)
        m = idx.size
        for name in ("_src", "_dst", "_left", "_rate", "_seq"):
            a = getattr(self, name)
            a[:m] = a[idx]
        self._flows = [self._flows[i] for i in idx]
        self._n = m
        for flow in finished:
            self._finish(flow, now)
        self._mark_dirty()

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

    Progressive filling, with one shortcut that keeps the number of passes small: a port that
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
