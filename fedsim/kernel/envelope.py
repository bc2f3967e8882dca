"""Messages as the kernel carries them: ``Envelope`` (one copy in transit or in a mailbox),
``Payload`` (the encoded document one send shares among its copies) and the collectors a
``gather`` waits with.

These are part of the public interface for people who write a transport or a link model
(docs/network-model.md); actors never see them (they get ``Message`` objects from ``Context``).
"""

from __future__ import annotations

from typing import Any, Callable

from .codec import Encoded, decode_encoded
from .ledger import DST, SEQ
from ..units import plural

__all__ = ["Collector", "Envelope", "InOrder", "LATER", "Payload", "matches"]

#: What ``Collector.offer`` / ``InOrder.offer`` return for a message labelled with a later round
#: than the gather's: not taken, it belongs in the receiver's mailbox (arrival order), for a
#: later ``receive``/``gather`` of the round it is labelled with. Truthy, like ``True`` (the
#: gather is complete): a transport tells the two apart only when ``offer`` returns true.
LATER = "later"


def matches(kind: str | tuple[str, ...] | None, env_kind: str) -> bool:
    """Whether a message of kind ``env_kind`` satisfies a wait for ``kind`` (``None``: any kind;
    a tuple: any of its kinds)."""
    if kind is None:
        return True
    if type(kind) is str:
        return kind == env_kind
    return env_kind in kind


class Payload:
    """An encoded document shared by all envelopes of one send/broadcast, decoded at most once
    (on first read)."""

    __slots__ = ("encoded", "decoded", "has_decoded")

    def __init__(self, encoded: Encoded) -> None:
        self.encoded = encoded
        self.decoded: Any = None
        self.has_decoded = False

    def value(self) -> Any:
        """The decoded payload. Each reader gets its own top-level dict or list; arrays stay
        shared read-only views. Raises ``CodecError`` if the document does not decode."""
        if not self.has_decoded:
            self.decoded = decode_encoded(self.encoded)
            self.has_decoded = True
        v = self.decoded
        if type(v) is dict:
            return dict(v)
        if type(v) is list:
            return list(v)
        return v


class Envelope:
    """One copy of a message, from its send until it is read or lost.

    ``row`` is the message's ledger row (a list; a link model fills its timing fields through the
    column positions ``fedsim.kernel.ledger.TX_START``, ``TX_END``, ``RX_START``); ``nbytes`` is
    what the copy costs on the wire (document plus framing).
    """

    __slots__ = ("kind", "payload", "src", "anonymous", "round", "row", "nbytes")

    def __init__(self, kind: str, payload: Payload, src: str, anonymous: bool, rnd: int,
                 row: list, nbytes: int) -> None:
        self.kind = kind
        self.payload = payload
        self.src = src
        self.anonymous = anonymous
        self.round = rnd
        self.row = row
        self.nbytes = nbytes

    def __repr__(self) -> str:
        return f"Envelope({self.kind!r} from {self.src!r}, round {self.round}, {self.nbytes} B)"

    def describe(self) -> str:
        """This copy in words, for error messages: kind, sender, receiver, ledger row, size."""
        return (f"message {self.kind!r} from {self.src!r} to {self.row[DST]!r} (ledger row {self.row[SEQ]}, "
                f"{self.nbytes} bytes)")


class Collector:
    """What one ``gather`` waits for: messages of its kind, one per expected sender (``pending``)
    or ``want`` of them, labelled with ``round`` (any round if it is None).

    The transport offers it every matching message that arrives (``offer``), so a network can
    fill it without resuming the actor once per message; the actor resumes when it is
    ``complete`` (or at its deadline).

    ``drop``: called with the ledger row of each message ``offer`` discards (None: nobody is
    told), so that a ledger that keeps only the rows still in motion (``StreamingLedger``) can
    let that one go: it is never read (``Ledger.discarded``)."""

    __slots__ = ("got", "want", "pending", "round", "complete", "drop")

    def __init__(self, want: int, pending: set | None, rnd: int | None,
                 drop: Callable[[list], Any] | None = None) -> None:
        self.got: list[Envelope] = []
        self.want = want
        self.pending = pending
        self.round = rnd
        self.complete = want <= 0
        self.drop = drop

    def offer(self, env: Envelope) -> bool | str:
        """Keep ``env``, discard it, or leave it. Discarded (an earlier round's: a late arrival; a
        sender not expected or already heard from): the transport drops it from the mailbox,
        unread in the ledger. Left: one labelled with a later round than ``round`` is not this
        gather's; ``offer`` returns ``LATER`` and the transport keeps it in (or puts it into) the
        receiver's mailbox, in arrival order. Otherwise returns whether the gather is now
        complete (``True``/``False``)."""
        rnd = self.round
        if rnd is not None and env.round != rnd:  # (one comparison for a message of the round)
            return LATER if env.round > rnd else _discard(self, env)
        pending = self.pending
        if pending is not None:
            if env.src not in pending:
                return _discard(self, env)
            pending.remove(env.src)
        got = self.got
        got.append(env)
        if len(got) >= self.want:
            self.complete = True
            return True
        return False

    def describe(self) -> str:
        """What is still missing, for error messages."""
        if self.pending is not None:
            return _senders(sorted(self.pending), self.want)
        return f"{self.want - len(self.got)} more of {plural(self.want, 'message')} (any sender)"


class InOrder:
    """What ``gather_each`` waits for: the message of the next sender in node-id order. Every
    message of ``round`` (any round if None) from an expected sender is kept (``held``) until its
    turn; ``offer`` returns ``True`` when the one awaited now (``order[pos]``) is there, and
    treats other rounds as ``Collector.offer`` does (``LATER`` for a later one's)."""

    __slots__ = ("order", "pos", "held", "pending", "round", "complete", "drop")

    def __init__(self, order: list[str], rnd: int | None, drop: Callable[[list], Any] | None = None) -> None:
        self.order = order
        self.pos = 0
        self.held: dict[str, Envelope] = {}
        self.pending = set(order)
        self.round = rnd
        self.complete = False
        self.drop = drop  # as Collector's

    def offer(self, env: Envelope) -> bool | str:
        rnd = self.round
        if rnd is not None and env.round != rnd:
            return LATER if env.round > rnd else _discard(self, env)  # (stale: left unread)
        src = env.src
        if src not in self.pending:
            return _discard(self, env)  # unexpected, or a second message from the same sender: left unread
        self.pending.remove(src)
        self.held[src] = env
        if src == self.order[self.pos]:
            self.complete = True
            return True
        return False

    def describe(self) -> str:
        return _senders(sorted(self.pending), len(self.order))


def _discard(col: "Collector | InOrder", env: Envelope) -> bool:
    """``offer``'s answer for a message it discards (False), after telling ``col.drop``."""
    if col.drop is not None:
        col.drop(env.row)
    return False


def _senders(missing: list[str], of: int, shown: int = 5) -> str:
    names = ", ".join(missing[:shown]) + (f", ... ({len(missing) - shown} more)" if len(missing) > shown else "")
    return f"{len(missing)} of {plural(of, 'sender')}: {names}"
