"""``Node``: what a transport keeps about one node (its actor sees only a ``Context``).

Public for people who write a transport or a link model (docs/network-model.md); actors never
touch it.
"""

from __future__ import annotations

from typing import Any, Callable

from .errors import RunEnded
from .links import NodeSpec

__all__ = ["Node", "cancelled", "hand_over", "offline_wait", "withdraw"]


class Node:
    """Kernel-side state of one node.

    Identity and configuration: ``id``, ``role`` (current label, changed by ``ctx.set_role``),
    ``spec`` (link, speed, loss, dropout), ``actor`` with ``args``/``kwargs``.
    Run state: ``ctx``, ``coro``, ``round`` (label of what it sends), ``mailbox`` (a deque of
    envelopes, made on first delivery), ``waiter`` (what it is blocked on; transport-specific),
    ``done``/``result``, ``offline``, ``sent`` (messages it has sent: the sequence number that
    keys its loss draws), ``waits`` (the gathers its actor has begun, ``gather`` and
    ``gather_each``: the last one's number, which its missing records carry, ``Missing.wait``), ``flops`` (the FLOPs of its ``ctx.compute`` calls that returned, per
    label, empty before the first; ``RunResult.flops`` copies it).
    Link-model state: ``egress_free``/``ingress_free`` (the FIFO model's port clocks) and
    ``link_state`` (free for any other link model).
    """

    __slots__ = ("id", "role", "spec", "actor", "args", "kwargs", "ctx", "round", "mailbox",
                 "waiter", "egress_free", "ingress_free", "offline", "done", "result", "coro",
                 "proc", "sent", "waits", "loss_rng", "gathering", "link_state", "flops", "__weakref__")

    def __init__(self, node_id: str, role: str, spec: NodeSpec, actor: Callable[..., Any], args: tuple,
                 kwargs: dict | None) -> None:
        self.id = node_id
        self.role = role
        self.spec = spec
        self.actor = actor
        self.args = args
        self.kwargs = kwargs
        self.ctx: Any = None
        self.round = 0
        self.mailbox: Any = None  # a deque, created on first delivery
        self.waiter: Any = None
        self.egress_free = 0.0
        self.ingress_free = 0.0
        self.offline = False
        self.done = False
        self.result: Any = None
        self.coro: Any = None
        self.proc: Any = None
        self.sent = 0
        self.waits = 0  # gathers begun (Context.gather, gather_each): the number of the last one
        self.loss_rng: Any = None
        self.gathering: Any = None  # the collector of a gather in progress (for error messages)
        self.link_state: Any = None
        self.flops: dict[str, float] = {}  # label -> FLOPs computed (Context.compute)

    def __repr__(self) -> str:
        return f"Node({self.id!r}, role={self.role!r})"

    def describe(self) -> str:
        """This node in words, for error messages."""
        return f"node {self.id!r} (role {self.role!r})"


def hand_over(node: Node, envl: Any) -> bool:
    """Give ``envl`` to ``node`` on a transport whose waiters are futures (``node.waiter`` is
    ``(kind, future, forever)``, as on AsyncioNetwork and TcpNetwork). If ``node`` waits for that
    kind: in a receive, resolve the future with ``envl``; in a gather (``node.gathering``, the
    collector of ``Network.collect``), offer ``envl`` to the collector, as SimNetwork's delivery
    does, and resolve the future (with None) only once the collector is complete: what came
    before the gather's timeout fired is the gather's, what comes after it (the future is
    done then) stays in the mailbox, as on SimNetwork, and the actor resumes once per gather,
    not once per message. Otherwise (no wait of that kind, a wait already over, or an envelope of a later
    round than the gather's, ``LATER``) append it to the mailbox. Returns True if it woke a
    wait that had no timeout (the transport's count of blocked actors goes down by one)."""
    from collections import deque

    from .envelope import LATER, matches

    w = node.waiter
    if w is not None and matches(w[0], envl.kind) and not w[1].done():
        col = node.gathering  # (Network.collect's collector; None in a receive)
        if col is None:
            node.waiter = None
            w[1].set_result(envl)
            return bool(w[2])
        taken = col.offer(envl)
        if taken is not LATER:
            if not taken:  # kept (the gather is not complete yet), or discarded unread
                return False
            node.waiter = None
            w[1].set_result(None)
            return bool(w[2])
    if node.mailbox is None:
        node.mailbox = deque()
    node.mailbox.append(envl)
    return False


def withdraw(node: Node, fut: Any) -> bool:
    """The wait of ``node`` on ``fut`` ended without a message (the actor's task was cancelled,
    e.g. by an ``asyncio.wait_for`` of its own around a ``receive``): forget it, so that nothing
    is handed to that future any more. Returns True if it was still waiting (no message had
    resolved it: a transport that counted it among the blocked actors counts it out again)."""
    w = node.waiter
    if w is not None and w[1] is fut:
        node.waiter = None
        return True
    return False


def cancelled(task: Any) -> BaseException:
    """The ``CancelledError`` a cancelled asyncio task ended with (its message kept). For the
    transports that run actors as tasks: one cancelled before the run's end (``Network.end_run``)
    was not cancelled by the transport but by the actor's own code, and is the actor's error."""
    from asyncio import CancelledError

    try:
        task.result()
    except CancelledError as exc:
        return exc
    raise ValueError(f"{task!r} was not cancelled")


def offline_wait(node: Node) -> RunEnded:
    """The error of a wait (or sleep, compute) by the actor of ``node`` after its dropout closed
    it (from one of its ``finally`` blocks), on every transport."""
    return RunEnded(f"actor {node.id!r} (role {node.role!r}) waited after its node dropped out (in a finally block?)")
