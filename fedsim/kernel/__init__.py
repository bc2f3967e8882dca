"""The kernel: codec, ledger, link models and the transports actors run on (``SimNetwork``,
``AsyncioNetwork``, ``TcpNetwork``).

It knows nothing of any protocol. Actors use only ``Context`` (``fedsim.kernel.context``). People
who write a transport implement ``Network``'s transport interface (``fedsim.kernel.network``);
people who write a link model implement ``LinkModel`` (``fedsim.kernel.linkmodel``); both use
``Node`` and ``Envelope`` and the ledger's column positions, and register their component by name
(``register_link_model``, ``register_transport``: ``fedsim.kernel.registry``) so that the command
line's ``--link-model`` and ``--transport`` take it. See docs/network-model.md.
"""

from .codec import CodecError, Encoded, decode, decode_message, encode, encode_message
from .context import Context, Deadline, GatherEach, Gathered, Message
from .envelope import LATER, Collector, Envelope, InOrder, Payload, matches
from .errors import (
    ActorError, DeadlockError, FedsimError, ForeignAwaitError, MessageTooLargeError, NetworkConfigError,
    RunEnded, TransportError, UnknownNodeError,
)
from .events import EventQueue
from .ledger import COLUMNS, Ledger, LedgerView, Missing, StreamingLedger, StreamView, Totals
from .links import PROFILES, Faults, LinkSpec, NodeSpec, Profile, get_profile
from .netspec import TRANSPORTS, NetSpec
from .network import Network, RunResult
from .node import Node
from .records import network_record
from .registry import register_link_model, register_transport
from .sim import LINK_MODELS, FifoLinkModel, LinkModel, SimNetwork, get_link_model
from .aio import AsyncioNetwork
from .tcp import TcpNetwork

__all__ = [
    "ActorError", "AsyncioNetwork", "COLUMNS", "CodecError", "Collector", "Context", "Deadline", "DeadlockError",
    "Encoded", "Envelope", "EventQueue", "Faults", "FedsimError", "FifoLinkModel", "ForeignAwaitError", "GatherEach",
    "Gathered", "InOrder", "LATER", "LINK_MODELS", "Ledger", "LedgerView", "LinkModel", "LinkSpec", "Message", "MessageTooLargeError",
    "Missing", "NetSpec", "Network", "NetworkConfigError", "Node", "NodeSpec", "PROFILES", "Payload", "Profile",
    "RunEnded", "RunResult", "SimNetwork", "StreamView", "StreamingLedger", "TRANSPORTS", "TcpNetwork", "Totals", "TransportError", "UnknownNodeError", "decode",
    "decode_message", "encode", "encode_message", "get_link_model", "get_profile", "matches", "network_record",
    "register_link_model", "register_transport",
]
