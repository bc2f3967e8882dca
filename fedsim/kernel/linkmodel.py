"""``LinkModel``: the public interface of SimNetwork's link models (how a message crosses the
network). ``FifoLinkModel`` (fedsim.kernel.sim) and ``FairShareLinkModel`` (fedsim.kernel.flows)
implement it; docs/network-model.md shows how to write another."""

from __future__ import annotations

from typing import Any

from .envelope import Envelope
from .node import Node

__all__ = ["LinkModel"]


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
    clock, no global random state.

    Dropout: ``node_offline`` is called at the instant a node's link goes down (its
    ``spec.offline_at``), whether or not its actor has finished; ``net.is_offline(node)`` says
    whether a node's link is down now. A message its sender had not finished transmitting by
    then, or one whose receiver's link is down when it would arrive, must end ``lost`` (notes
    ``sender offline`` / ``receiver offline``), and should stop using the ports it held from
    that instant. ``net.deliver`` loses what a link model lets through anyway (a copy whose
    ``TX_END`` is after its sender's ``offline_at``, or whose receiver is offline), so a model
    that ignores dropout is still correct about which messages arrive, only not about the time
    the ports stay busy.
    """

    name = "custom"

    def transmit(self, net: Any, src: Node, dst: Node, envl: Envelope) -> None:
        raise NotImplementedError  # pragma: no cover

    def node_offline(self, net: Any, node: Node) -> None:
        """``node``'s link went down now (its ``offline_at``): stop what it was still sending
        or receiving. The default does nothing (see the class docstring)."""
