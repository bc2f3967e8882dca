"""Exceptions raised by the kernel. All derive from ``FedsimError``."""

from __future__ import annotations

__all__ = [
    "ActorError",
    "DeadlockError",
    "FedsimError",
    "ForeignAwaitError",
    "MessageTooLargeError",
    "NetworkConfigError",
    "RunEnded",
    "TransportError",
    "UnknownNodeError",
    "clock_text",
]


def clock_text(t: float) -> str:
    """A time on a run's clock for an error message: six significant digits, as ``.6g``, but
    never an exponent (a deadlock at 1,234,567.8 s of a run on a slow link read ``1.23457e+06``,
    one at 25 µs ``2.5e-05``): ``1234568``, ``0.000025``, ``0.5``."""
    import numpy as np

    t = float(t)
    text = f"{t:.6g}"
    if "e+" in text:
        return f"{t:.0f}"
    if "e-" in text:
        return np.format_float_positional(t, precision=6, unique=False, fractional=False, trim="-")
    return text


class FedsimError(Exception):
    """Base class of every error fedsim raises on purpose."""


class NetworkConfigError(FedsimError, ValueError):
    """A network, node or link was configured with an invalid value (negative bandwidth, ...)."""


class UnknownNodeError(FedsimError, LookupError):
    """A message was addressed to, or a setting named, a node that does not exist."""


class ForeignAwaitError(FedsimError, RuntimeError):
    """An actor awaited something its transport cannot drive (e.g. ``asyncio.sleep`` on SimNetwork)."""


class MessageTooLargeError(FedsimError, ValueError):
    """An actor tried to send a message larger than its transport's bound (``max_message_bytes``);
    nothing was sent. ``node``, ``kind``, ``nbytes`` and ``limit`` say which, what and how much."""

    def __init__(self, node: str, kind: str, nbytes: int, limit: int) -> None:
        self.node, self.kind, self.nbytes, self.limit = node, kind, nbytes, limit
        super().__init__(f"node {node!r} tried to send a {kind!r} message of {nbytes:,} bytes, above the "
                         f"transport's bound of {limit:,} bytes (max_message_bytes); nothing was sent")


class RunEnded(FedsimError):
    """Raised by a ``ctx`` call that would wait (``receive``, ``gather``, ``sleep``, ``compute``)
    once the run is over, i.e. from an actor's ``finally`` block while its transport closes or
    cancels it: the run's outcome is fixed and nothing can arrive any more. Transports treat an
    actor that ends with it like one they closed; an actor need not catch it."""


class ActorError(FedsimError):
    """An actor raised; ``node`` names it and ``__cause__`` is the original exception."""

    def __init__(self, node: str, role: str, cause: BaseException) -> None:
        self.node = node
        self.role = role
        super().__init__(f"actor {node!r} (role {role!r}) failed: {type(cause).__name__}: {cause}")


class DeadlockError(FedsimError, RuntimeError):
    """A run ended with actors still blocked and nothing left that could wake them (no message
    in flight, no timer pending). ``blocked`` maps each blocked node to what it waits for,
    ``time`` is the (simulated or scaled real) time at which the run stopped, ``offline`` lists
    the nodes that had dropped out, ``result`` is the partial ``RunResult`` (what
    ``run(strict=False)`` would have returned), ``lost`` maps each blocked node that messages
    addressed to it were lost on the way to (the loss of a server's ``stop`` when faults cover
    the server's role: what it waited for will never come) to how many and the last of them
    (``1 message to it lost, the last 'stop' from 'server' sent at t = 0.5 s (link loss)``),
    said on its line."""

    def __init__(self, blocked: dict[str, str], time: float, offline: list[str], result=None,
                 lost: dict[str, str] | None = None) -> None:
        self.blocked = dict(blocked)
        self.time = float(time)
        self.offline = list(offline)
        self.result = result
        self.lost = dict(lost or {})
        lines = [f"deadlock at t = {clock_text(self.time)} s: {len(blocked)} actor(s) still waiting with nothing "
                 "left in flight that could wake them:"]
        shown = list(blocked.items())
        for node, what in shown[:20]:
            why = self.lost.get(node)
            lines.append(f"  {node} waits in {what}" + (f"; {why}" if why else ""))
        if len(shown) > 20:
            lines.append(f"  ... and {len(shown) - 20} more")
        if offline:
            more = f", ... ({len(offline) - 10} more)" if len(offline) > 10 else ""
            lines.append(f"  offline: {', '.join(offline[:10])}{more}")
        lines.append("  (run(strict=False) returns the partial result instead)")
        super().__init__("\n".join(lines))


class TransportError(FedsimError, ConnectionError):
    """A transport between processes failed: a peer sent a malformed or oversized frame, closed
    its connection (in the middle of a frame or not), died, could not be reached, or made no
    progress. ``node`` is the node the failure is pinned on (the sender of a bad frame, else the
    first node of the process concerned; None if unknown), ``nodes`` every node of that process,
    ``process`` its index, ``kind`` what happened (``frame``, ``midframe``, ``closed``,
    ``connect``, ``died``, ``stall``)."""

    def __init__(self, message: str, *, node: str | None = None, nodes: tuple = (), process: int | None = None,
                 kind: str = "closed") -> None:
        self.node = node
        self.nodes = tuple(nodes)
        self.process = process
        self.kind = kind
        super().__init__(message)
