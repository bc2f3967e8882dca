"""Exceptions raised by the kernel. All derive from ``FedsimError``."""

from __future__ import annotations

__all__ = [
    "ActorError",
    "FedsimError",
    "ForeignAwaitError",
    "NetworkConfigError",
    "UnknownNodeError",
]


class FedsimError(Exception):
    """Base class of every error fedsim raises on purpose."""


class NetworkConfigError(FedsimError, ValueError):
    """A network, node or link was configured with an invalid value (negative bandwidth, ...)."""


class UnknownNodeError(FedsimError, LookupError):
    """A message was addressed to, or a setting named, a node that does not exist."""


class ForeignAwaitError(FedsimError, RuntimeError):
    """An actor awaited something its transport cannot drive (e.g. ``asyncio.sleep`` on SimNetwork)."""


class ActorError(FedsimError):
    """An actor raised; ``node`` names it and ``__cause__`` is the original exception."""

    def __init__(self, node: str, role: str, cause: BaseException) -> None:
        self.node = node
        self.role = role
        super().__init__(f"actor {node!r} (role {role!r}) failed: {type(cause).__name__}: {cause}")
