"""What the real-time transports (``AsyncioNetwork``, ``TcpNetwork``) share about dropout.

On a real loop a node's dropout cancels its actor's task (at its next await); from then on the
actor is closed: a wait, sleep or compute in one of its ``finally`` blocks raises ``RunEnded``
(``node.offline_wait``, as on ``SimNetwork``), and what it sends is dropped (the transports'
``post`` checks ``closed``). :class:`ClosedOnDropout` gives a transport that ``wait`` (around its
own ``wait_for_message``), ``sleep`` and ``compute``, given a ``time_scale`` and a ``closed`` set.
"""

from __future__ import annotations

import asyncio

from .node import Node, offline_wait

__all__ = ["ClosedOnDropout"]


class ClosedOnDropout:
    """Mixin of a real-time transport (listed before ``Network`` among its bases): ``closed``
    (node ids whose actor got the cancellation of its dropout; an empty set made here),
    ``time_scale`` its clock's divisor (1.0 unless the transport sets it), and
    ``wait_for_message(node, kind, timeout)`` its own wait (a timed one through ``message_within``).
    Before, a transport that did not make ``closed`` itself failed its first actor's first wait
    with ``AttributeError: ... no attribute 'closed'``, blamed on that actor."""

    closed: set[str]
    time_scale: float = 1.0

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.closed = set()

    async def wait_for_message(self, node: Node, kind, timeout: float | None):  # pragma: no cover
        raise NotImplementedError

    async def wait(self, node: Node, kind, timeout: float | None):
        if node.id in self.closed:
            raise offline_wait(node)
        try:
            return await self.wait_for_message(node, kind, timeout)
        except asyncio.CancelledError:
            self.closed_if_offline(node)
            raise

    async def sleep(self, node: Node, seconds: float) -> None:
        if node.id in self.closed:
            raise offline_wait(node)
        try:
            await asyncio.sleep(seconds * self.time_scale)
        except asyncio.CancelledError:
            self.closed_if_offline(node)
            raise

    async def compute(self, node: Node, flops: float, label: str) -> None:
        """Only yields: a real loop's computation takes the time it takes."""
        if node.id in self.closed:
            raise offline_wait(node)
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            self.closed_if_offline(node)
            raise

    @staticmethod
    async def await_within(fut: asyncio.Future, seconds: float):
        """The result of ``fut`` (a timed wait's future), awaited at most ``seconds``: past them,
        ``TimeoutError`` (``fut`` cancelled if it was not done; it may have got its result in the
        loop pass the timeout fired in, which the caller checks). Through ``asyncio.timeout``,
        not ``asyncio.wait_for``: 3.11's ``wait_for``, cancelled in the loop pass in which ``fut``
        got its result, returns that result and loses the cancellation (an actor's dropout, or
        the run's end, that cancelled its timed receive as a message came went unnoticed: the
        actor ran on)."""
        async with asyncio.timeout(seconds):
            return await fut

    async def message_within(self, node: Node, fut: asyncio.Future, timeout: float):
        """The message ``fut`` (``node``'s timed wait's future, set by the transport's delivery)
        gets within ``timeout`` seconds of the run's clock (``timeout * time_scale`` real ones), or
        ``None`` past them, ``node``'s wait withdrawn. A message that came in the loop pass the
        timeout fired in is returned, not lost: the timeout raises then, and the message, already
        out of the mailbox, was dropped (what each real-time transport's timed wait needs; one
        helper instead of a copy in each)."""
        try:
            return await self.await_within(fut, timeout * self.time_scale)
        except TimeoutError:
            if fut.done() and not fut.cancelled():
                return fut.result()
            node.waiter = None
            return None

    def closed_if_offline(self, node: Node) -> None:
        """A wait of ``node`` ended cancelled: if by its dropout, its actor is being closed from
        here on (what it sends is dropped, a wait raises ``RunEnded``)."""
        if node.offline:
            self.closed.add(node.id)
