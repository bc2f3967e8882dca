"""``AsyncioNetwork``: the same actors as asyncio tasks on a real event loop.

Messages are encoded with the same codec and handed through in-process mailboxes, so actors see
exactly the bytes they would see on ``SimNetwork``. Bandwidth and latency are not modelled here
(time is the loop's real clock); link loss is applied with the same seeded generator. Nodes
with ``offline_at`` are not supported on this transport.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from ..seeding import node_rng
from .context import _Envelope, _matches, _Payload
from .errors import ActorError, FedsimError, NetworkConfigError
from .ledger import ARRIVAL, NOTE, RX_START, STATUS, TX_END, TX_START
from .network import Network, RunResult, _Node

__all__ = ["AsyncioNetwork"]


class AsyncioNetwork(Network):
    """Run actors as asyncio tasks. ``time_scale`` multiplies ``sleep`` and timeouts (seconds of
    real time per simulated second); ``compute`` only yields to the loop."""

    def __init__(self, *, time_scale: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not time_scale >= 0:
            raise NetworkConfigError(f"time_scale must be >= 0, got {time_scale!r}")
        self.time_scale = float(time_scale)
        self._loss_rng = node_rng(self.seed, "kernel:loss")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._t0 = 0.0
        self._blocked = 0
        self._finished = 0
        self._quiet: asyncio.Event | None = None
        self._error: BaseException | None = None

    def _now(self) -> float:
        return (self._loop.time() - self._t0) / (self.time_scale or 1.0) if self._loop else 0.0

    def _post(self, src: _Node, dsts: tuple, kind: str, encoded, anonymous: bool) -> None:
        targets = self._destinations(dsts)
        payload = _Payload(encoded)
        nbytes = len(encoded.data) + self.framing_bytes
        now = self._now()
        for dst in targets:
            row = self.ledger.new_row(src.round, src.id, dst.id, src.role, dst.role, kind, nbytes,
                                      encoded.array_bytes, encoded.floats, now, anonymous)
            row[TX_START] = row[TX_END] = row[RX_START] = now
            if src.spec.loss and self._loss_rng.random() < src.spec.loss:
                row[STATUS], row[NOTE] = "lost", "link loss"
                continue
            row[ARRIVAL] = now
            row[STATUS] = "delivered"
            envl = _Envelope(kind, payload, src.id, anonymous, src.round, row, nbytes)
            w = dst.waiter
            if w is not None and _matches(w[0], kind) and not w[1].done():
                dst.waiter = None
                if w[2]:
                    self._blocked -= 1
                w[1].set_result(envl)
            else:
                if dst.mailbox is None:
                    dst.mailbox = deque()
                dst.mailbox.append(envl)

    async def _wait(self, node: _Node, kind, timeout: float | None):
        fut = self._loop.create_future()
        forever = timeout is None
        node.waiter = (kind, fut, forever)
        if forever:
            self._blocked += 1
            self._check_quiet()
            return await fut
        try:
            return await asyncio.wait_for(fut, timeout * self.time_scale)
        except asyncio.TimeoutError:
            node.waiter = None
            return None

    async def _sleep(self, node: _Node, seconds: float) -> None:
        await asyncio.sleep(seconds * self.time_scale)

    async def _compute(self, node: _Node, flops: float, label: str) -> None:
        await asyncio.sleep(0)

    def _check_quiet(self) -> None:
        if self._finished + self._blocked >= len(self.nodes) and self._quiet is not None:
            self._quiet.set()

    def _task_done(self, node: _Node, task: asyncio.Task) -> None:
        self._finished += 1
        if task.cancelled():
            pass
        elif task.exception() is not None:
            exc = task.exception()
            if self._error is None:
                self._error = exc if isinstance(exc, FedsimError) and not isinstance(exc, ActorError) \
                    and str(exc).startswith("actor") else ActorError(node.id, node.role, exc)
                self._error.__cause__ = exc
            self._quiet.set()
        else:
            node.done = True
            node.result = task.result()
        self._check_quiet()

    async def run(self, timeout: float | None = None) -> RunResult:
        """Run every actor until all have finished or are blocked on ``receive`` with nothing in
        flight; blocked ones are then cancelled and listed in ``unfinished``. Raises
        ``ActorError`` if an actor raises, ``asyncio.TimeoutError`` after ``timeout`` seconds."""
        if self._ran:
            raise FedsimError("a network runs once; build a new one for another run")
        self._ran = True
        for node in self.nodes.values():
            if node.spec.offline_at is not None:
                raise NetworkConfigError(f"node {node.id!r}: offline_at is not supported by AsyncioNetwork")
        self._loop = asyncio.get_running_loop()
        self._t0 = self._loop.time()
        self._quiet = asyncio.Event()
        tasks = []
        for node in self.nodes.values():
            node.ctx = self.context_class(self, node)
            coro = node.actor(node.ctx, *node.args, **(node.kwargs or {}))
            task = self._loop.create_task(coro, name=node.id)
            task.add_done_callback(lambda t, n=node: self._task_done(n, t))
            tasks.append(task)
        try:
            await asyncio.wait_for(self._quiet.wait(), timeout)
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._error is not None:
            raise self._error
        return self._result(self._now())

    def run_sync(self, timeout: float | None = None) -> RunResult:
        """``asyncio.run(self.run(timeout))``, for callers without a loop."""
        return asyncio.run(self.run(timeout))
