"""What every transport shares: nodes, their actors and specs, seeding, the ledger, results."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import numpy as np

from ..seeding import node_rng
from .context import Context, _Envelope, _matches
from .errors import NetworkConfigError, UnknownNodeError
from .ledger import Ledger, Missing
from .links import LinkSpec, NodeSpec, Profile, get_profile

__all__ = ["Network", "RunResult", "Actor"]

Actor = Callable[..., Awaitable[Any]]
_NODE_ID = re.compile(r"^[A-Za-z0-9_.:/\-]+$")


class _Node:
    """Kernel-side state of one node (its actor sees only a Context)."""

    __slots__ = ("id", "role", "spec", "actor", "args", "kwargs", "ctx", "round", "mailbox",
                 "waiter", "egress_free", "ingress_free", "offline", "done", "result", "coro",
                 "busy_until", "proc", "__weakref__")

    def __init__(self, node_id: str, role: str, spec: NodeSpec, actor: Actor, args: tuple,
                 kwargs: dict) -> None:
        self.id = node_id
        self.role = role
        self.spec = spec
        self.actor = actor
        self.args = args
        self.kwargs = kwargs
        self.ctx: Context | None = None
        self.round = 0
        self.mailbox: list[_Envelope] | None = None  # created on first delivery
        self.waiter: Any = None
        self.egress_free = 0.0
        self.ingress_free = 0.0
        self.offline = False
        self.done = False
        self.result: Any = None
        self.coro: Any = None
        self.busy_until = 0.0
        self.proc: Any = None


@dataclass
class RunResult:
    """The outcome of ``Network.run``: each finished actor's return value, the nodes that were
    still blocked when the run ended (closed by the kernel) or went offline, the simulated (or
    wall) duration, and the ledger."""

    results: dict[str, Any]
    unfinished: list[str]
    offline: list[str]
    duration: float
    ledger: Ledger
    trace: list[tuple] = field(default_factory=list)
    log: list[tuple] = field(default_factory=list)

    def __getitem__(self, node_id: str) -> Any:
        return self.results[node_id]


class Network:
    """Base class of the transports. Build it, ``add_node`` each actor, then ``run``."""

    context_class: type[Context] = Context

    def __init__(self, *, seed: int = 0, profile: str | Profile = "ideal", framing_bytes: int = 0,
                 unit: int | None = None, trace: bool = False) -> None:
        if int(seed) < 0:
            raise NetworkConfigError(f"seed must be non-negative, got {seed!r}")
        if int(framing_bytes) < 0:
            raise NetworkConfigError(f"framing_bytes must be >= 0, got {framing_bytes!r}")
        if unit is not None and int(unit) <= 0:
            raise NetworkConfigError(f"unit must be a positive number of floats, got {unit!r}")
        self.seed = int(seed)
        self.profile = get_profile(profile)
        self.framing_bytes = int(framing_bytes)
        self.ledger = Ledger(unit=None if unit is None else int(unit))
        self.nodes: dict[str, _Node] = {}
        self.tracing = bool(trace)
        self.trace: list[tuple] = []  # (node, start, end, label) compute/sleep spans
        self.steps: list[tuple] = []  # (time, node, text)
        self._ran = False

    # -- configuration ----------------------------------------------------------------------
    def add_node(self, node_id: str, actor: Actor, *args: Any, role: str = "client",
                 link: LinkSpec | None = None, flops: float | None = None, loss: float | None = None,
                 offline_at: float | None = None, **kwargs: Any) -> None:
        """Register ``actor(ctx, *args, **kwargs)`` as node ``node_id``.

        Link, speed and loss default to the network profile's spec for ``role`` (with its
        seeded per-node spread); pass them to override. Raises ``NetworkConfigError`` for a
        duplicate or malformed id or invalid spec values.
        """
        node_id = str(node_id)
        if self._ran:
            raise NetworkConfigError("cannot add nodes after the network has run")
        if node_id in self.nodes:
            raise NetworkConfigError(f"duplicate node id {node_id!r}")
        if not _NODE_ID.match(node_id):
            raise NetworkConfigError(f"node id {node_id!r} may only use letters, digits and _ . : / -")
        if not callable(actor):
            raise NetworkConfigError(f"actor of node {node_id!r} is not callable: {actor!r}")
        base = self.profile.draw(role, node_rng(self.seed, f"link:{node_id}") if self.profile.sigma else None)
        if link is None and flops is None and loss is None and offline_at is None:
            spec = base  # shared: no per-node copy for the common case (memory per idle actor)
        else:
            spec = NodeSpec(
                link=base.link if link is None else link,
                flops=base.flops if flops is None else flops,
                loss=base.loss if loss is None else loss,
                offline_at=offline_at,
            )
        self.nodes[node_id] = _Node(node_id, str(role), spec, actor, args, kwargs or None)
        self.ledger.set_role(node_id, str(role))

    def set_unit(self, floats: int) -> None:
        """Declare how many floats make one accounting unit (the latent dimension d)."""
        if int(floats) <= 0:
            raise NetworkConfigError(f"unit must be a positive number of floats, got {floats!r}")
        self.ledger.unit = int(floats)

    def node_spec(self, node_id: str) -> NodeSpec:
        return self._node(node_id).spec

    def _node(self, node_id: str) -> _Node:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise UnknownNodeError(f"unknown node {node_id!r}") from None

    def rng_for(self, node_id: str) -> np.random.Generator:
        """The generator actor ``node_id`` gets as ``ctx.rng``."""
        return node_rng(self.seed, node_id)

    # -- shared helpers for transports --------------------------------------------------------
    def _record_missing(self, node: _Node, kind: str, senders: list) -> None:
        t = self._now()
        for s in senders:
            self.ledger.missing.append(Missing(node.round, node.id, s, kind, t))

    def _log(self, node: _Node, text: str) -> None:
        if self.tracing:
            self.steps.append((self._now(), node.id, text))

    def _destinations(self, dsts: tuple) -> list[_Node] | tuple[_Node]:
        """The nodes of ``dsts``, all looked up before anything is sent (an unknown id raises
        ``UnknownNodeError`` and nothing is half-sent)."""
        nodes = self.nodes
        try:
            if len(dsts) == 1:  # send(): no list comprehension (a function call in 3.11)
                return (nodes[dsts[0]],)
            return [nodes[d] for d in dsts]
        except KeyError:
            bad = next(d for d in dsts if d not in nodes)
            raise UnknownNodeError(f"message addressed to unknown node {bad!r}") from None

    # -- transport primitives (implemented by subclasses) -------------------------------------
    def _now(self) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def _post(self, src: _Node, dsts: tuple, kind: str, encoded, anonymous: bool) -> None:
        raise NotImplementedError  # pragma: no cover

    @staticmethod
    def _take(node: _Node, kind):
        """The oldest mailbox message matching ``kind`` (removed), or None. Never blocks."""
        box = node.mailbox
        if box:
            if kind is None or _matches(kind, box[0].kind):
                return box.popleft()
            for i, envl in enumerate(box):
                if _matches(kind, envl.kind):
                    del box[i]
                    return envl
        return None

    def _wait(self, node: _Node, kind, timeout: float | None):
        """An awaitable that resumes with the next matching envelope, or None at ``timeout``
        (seconds, > 0, or None for no limit)."""
        raise NotImplementedError  # pragma: no cover

    async def _collect(self, node: _Node, kind, col, timeout: float | None) -> None:
        """Offer ``col`` (a gather's ``_Collector``) each message of ``kind`` as it arrives,
        until it is complete or ``timeout`` seconds (> 0, or None for no limit) have passed.
        This generic form resumes the actor once per message; a transport may fill ``col``
        itself and resume the actor once."""
        end = None if timeout is None else self._now() + timeout
        while not col.complete:
            env = self._take(node, kind)
            if env is None:
                left = None if end is None else end - self._now()
                if left is not None and left <= 0:
                    return
                env = await self._wait(node, kind, left)
                if env is None:
                    return
            col.offer(env)

    async def _sleep(self, node: _Node, seconds: float) -> None:
        raise NotImplementedError  # pragma: no cover

    async def _compute(self, node: _Node, flops: float, label: str) -> None:
        raise NotImplementedError  # pragma: no cover

    def _result(self, duration: float) -> RunResult:
        results = {n.id: n.result for n in self.nodes.values() if n.done}
        unfinished = [n.id for n in self.nodes.values() if not n.done and not n.offline]
        offline = [n.id for n in self.nodes.values() if n.offline]
        return RunResult(results, unfinished, offline, duration, self.ledger, self.trace, self.steps)


def _finite_div(size: float, rate: float) -> float:
    return 0.0 if math.isinf(rate) else size / rate
