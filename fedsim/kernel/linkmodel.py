"""``LinkModel``: the public interface of SimNetwork's link models (how a message crosses the
network). ``FifoLinkModel`` (fedsim.kernel.sim) and ``FairShareLinkModel`` (fedsim.kernel.flows)
implement it; docs/network-model.md shows how to write another."""

from __future__ import annotations

import math
from typing import Any

from .envelope import Envelope
from .errors import NetworkConfigError
from .node import Node

__all__ = ["LinkModel", "check_time"]


def check_time(t: float, envl: Envelope, what: str, why: str) -> float:
    """``t`` if it is a finite time; else ``NetworkConfigError`` naming the message (kind, sender,
    receiver, ledger row), ``what`` would happen at ``t`` and ``why`` (the rates, latencies and
    sizes it came from). A link model calls it on the times it computes before it writes them into
    a ledger row or schedules an event at them: a rate too small or a latency too large for a
    message makes them inf or NaN, which the event queue would refuse without saying why."""
    if not t < math.inf:  # also NaN (times here are never -inf: they start from now >= 0)
        raise NetworkConfigError(f"{envl.describe()}: {what} at t = {t!r} s, not a finite time ({why}); "
                                 "the link rates are too small or the latencies too large for this message")
    return t


class LinkModel:
    """How a message crosses the network (the public link-model interface).

    ``transmit`` is called once per (message, receiver) at send time, in send order. It must
    fill the ledger row's timing fields (``envelope.row[TX_START]``, ``[TX_END]``,
    ``[RX_START]``; positions from ``fedsim.kernel.ledger``) and eventually call exactly one of
    ``net.deliver(envelope, dst)`` (which sets the arrival time to ``net.now()``) or
    ``net.lose(envelope, note)``. It schedules its own steps with ``net.schedule(delay, fn,
    *args)``, reads the clock with ``net.now()``, draws loss with ``net.draw_loss(src)`` and may
    keep per-node state in ``node.link_state``. ``src.spec.link`` / ``dst.spec.link`` give the
    rates (bytes/s, ``inf`` allowed) and latencies (s). A link model must be deterministic: no
    clock, no global random state. ``net.schedule`` takes a ``delay`` in seconds, a number (an
    int or float; NumPy's are taken as floats), and a callable ``fn``: for a model of one's own, a
    bool, str, bytes or None as ``delay`` (True was 1 s) or an ``fn`` that is not callable is a
    ``NetworkConfigError`` naming the model and the event, as is (a ``ValueError`` too) an event whose
    time is not finite or is before ``now()``; ``check_time(t, envelope, what, why)`` refuses
    a time that is not finite with a ``NetworkConfigError`` that says which message and why,
    before it is written into the row or scheduled (it does not know the clock: a time before
    ``now()`` passes it, and only ``net.schedule`` refuses that). ``SimNetwork`` refuses, with a ``NetworkConfigError``
    naming the model and the message, a second ``deliver``/``lose`` of a copy, a ``deliver`` of a
    copy whose timing fields are unset (NaN), a ``deliver``/``lose`` of a copy whose times are out
    of order (naming the model's class, the message's kind, ends and round, and the times: a copy
    keeps ``send_time <= tx_start <= tx_end <= arrival_time`` and ``tx_start <= rx_start <=
    arrival_time``, its arrival being the time of the ``deliver``; unset times are not compared),
    and copies still neither delivered nor lost when the run has nothing left to do; also a ``deliver``
    to another node than the copy's receiver, of something else than the envelope, times that are no
    numbers (an int or NumPy number is written back as a float), and a ``lose`` note that is not a
    non-empty str. What the model's own code raises in ``transmit``, in an event it scheduled or in
    ``node_offline`` becomes a ``NetworkConfigError`` naming the model, the message (event, node) and
    where it was raised, the original as its cause. (The built-in
    ``FifoLinkModel`` and ``FairShareLinkModel`` skip these checks: they would cost every message.)

    Dropout: ``node_offline`` is called at the instant a node's link goes down (its
    ``spec.offline_at``), whether or not its actor has finished; ``net.is_offline(node)`` says
    whether a node's link is down now. A message its sender had not finished transmitting by
    then, or one whose receiver's link is down when it would arrive, must end ``lost`` (notes
    ``sender offline`` / ``receiver offline``), and should stop using the ports it held from
    that instant. ``net.deliver`` loses what a link model lets through anyway (a copy whose
    ``TX_END`` is after its sender's ``offline_at``, or whose receiver is offline), so a model
    that ignores dropout is still correct about which messages arrive, only not about the time
    the ports stay busy.

    What it may rely on: ``net.seed``, the run's seed, from which it derives the generators of any
    draws of its own, ``fedsim.seeding.node_rng(net.seed, "mymodel:" + node.id)`` (``link:``,
    ``dropout:`` and ``loss:`` are the kernel's streams); it is made before the nodes are added, so
    per-node state is made when ``transmit`` first meets a node (``node.link_state``). Call
    ``net.draw_loss(src)`` once per copy, in ``transmit``, for the same copies to be lost as under
    every other model and transport.

    One network: an instance keeps the state of its network's run (ports, flows, a channel's
    next free time), so it serves the one ``SimNetwork`` that adopted it (``bind``); a second
    network given the same instance refuses it with a ``NetworkConfigError`` (give each network
    a new instance, or a name).
    """

    name = "custom"

    #: the network this instance serves (set by ``bind``; None until a SimNetwork adopts it)
    _network: Any = None

    def bind(self, net: Any) -> None:
        """Called once by a ``SimNetwork`` that adopts this instance (in its constructor, not
        per message): records ``net``; raises ``NetworkConfigError`` if another network has it.
        A subclass that overrides it calls ``super().bind(net)``."""
        if self._network is not None and self._network is not net:
            label = repr(self.name) if self.name != LinkModel.name else type(self).__name__
            raise NetworkConfigError(
                f"link model {label} ({type(self).__name__} instance) already serves another SimNetwork: an "
                "instance keeps the state of its network's run, which a second network would inherit; give "
                f"each network a new one (link_model={type(self).__name__}(...)) or a name")
        self._network = net

    def transmit(self, net: Any, src: Node, dst: Node, envl: Envelope) -> None:
        raise NotImplementedError  # pragma: no cover

    def node_offline(self, net: Any, node: Node) -> None:
        """``node``'s link went down now (its ``offline_at``): stop what it was still sending
        or receiving. The default does nothing (see the class docstring)."""
