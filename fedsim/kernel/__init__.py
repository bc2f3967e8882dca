"""The kernel: codec, ledger, link model and the transports actors run on.

It knows nothing of any protocol. Actors use only ``Context`` (``fedsim.kernel.context``).
"""

from .codec import CodecError, Encoded, decode, decode_message, encode, encode_message
from .context import Context, Deadline, GatherEach, Gathered, Message
from .errors import ActorError, FedsimError, ForeignAwaitError, NetworkConfigError, UnknownNodeError
from .ledger import COLUMNS, Ledger, Missing
from .links import PROFILES, LinkSpec, NodeSpec, Profile, get_profile
from .network import Network, RunResult
from .sim import FifoLinkModel, LinkModel, SimNetwork
from .aio import AsyncioNetwork

__all__ = [
    "ActorError", "AsyncioNetwork", "COLUMNS", "CodecError", "Context", "Deadline", "Encoded", "FedsimError",
    "FifoLinkModel", "ForeignAwaitError", "GatherEach", "Gathered", "Ledger", "LinkModel", "LinkSpec", "Message",
    "Missing", "Network", "NetworkConfigError", "NodeSpec", "PROFILES", "Profile", "RunResult",
    "SimNetwork", "UnknownNodeError", "decode", "decode_message", "encode", "encode_message",
    "get_profile",
]
