"""Adversaries' views: what one adversary sees of a recorded run, and nothing else.

An attack declares its view with a ``ViewSpec``; ``build_view`` cuts a ``Recorder``'s recording
into a ``View`` holding copies of exactly the observations that view allows, and the attack gets
that object alone (``fedsim.privacy.attacks.run_attack``): no reference to the recorder, the
ledger, the network, the protocol's job or the data. The boundary is an API boundary (Python has
no sandbox: code determined to walk the garbage collector could find other objects), which is
what an audit needs: every attack in this package reads its view only, and a test checks that a
view holds nothing outside its declaration.

Two kinds of view:

``nodes``    the adversary controls some nodes (the server; a denoiser; the server colluding
             with denoisers). It sees every message those nodes sent and every message delivered
             to them, with payloads (``Observed``). The sender of a message that came over an
             anonymous channel is ``None`` unless the adversary sent it itself: colluding nodes
             pool what they received, they do not learn what the channel hides.
``network``  a passive observer of the access links of some nodes (by role, e.g. the server's
             and the denoisers'): for every message delivered to them it sees the size on the
             wire, the round label of the frame, the kind (protocols are public and their phases
             tell kinds apart), when reception started and ended, and the sender unless the
             message travelled anonymously (``Packet``: no payload attribute at all). It does not
             see the senders' links (that would reveal every anonymous sender trivially).

Every view also carries ``public``: what the protocol makes public (its name and configuration,
the server's id, the clients' ids, the number of items).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Iterable, Iterator

from ..kernel.ledger import ANON, ARRIVAL, BYTES, DST, DST_ROLE, KIND, ROUND, RX_START, SEND_T, SEQ, SRC, SRC_ROLE, STATUS

__all__ = ["Observed", "Packet", "Public", "View", "ViewSpec", "build_view", "nodes_of_role", "ref_of"]


@dataclass(frozen=True)
class Public:
    """What every party knows: ``protocol`` name, its ``config`` (hyperparameters are public),
    the ``server`` id, the ``clients`` ids (node-id order) and ``n_items``."""

    protocol: str
    config: Any
    server: str
    clients: tuple[str, ...]
    n_items: int


class Observed:
    """One message as a payload-level adversary sees it: ``ref`` (an opaque reference, a keyed
    hash of the message that says nothing about its sender or its place in the run), ``kind``,
    ``round``, ``sender`` (None if
    it came anonymously to the adversary), ``receiver``, ``nbytes`` (wire size), ``time`` (arrival
    for a message the adversary received, send time for one it sent), ``outgoing`` (the adversary
    sent it) and ``payload`` (decoded on first access; arrays are read-only; None when the
    recorder did not keep it: the adversary saw the message, the audit did not record its
    content)."""

    __slots__ = ("ref", "kind", "round", "sender", "receiver", "nbytes", "time", "outgoing", "_doc")

    def __init__(self, ref, kind, rnd, sender, receiver, nbytes, time, outgoing, doc) -> None:
        self.ref = ref
        self.kind = kind
        self.round = rnd
        self.sender = sender
        self.receiver = receiver
        self.nbytes = nbytes
        self.time = time
        self.outgoing = outgoing
        self._doc = doc

    @property
    def payload(self) -> Any:
        doc = self._doc
        return None if doc is None else doc.value()

    def __repr__(self) -> str:
        return f"Observed({self.kind!r} {self.sender!r} -> {self.receiver!r}, round {self.round}, {self.nbytes} B)"


class Packet:
    """One message as a network observer sees it: ``ref`` (an opaque reference, as ``Observed``),
    ``kind``, ``round``, ``sender`` (None if
    anonymous), ``receiver``, ``nbytes`` on the wire, ``rx_start`` and ``arrival`` (start and end
    of reception on the receiver's link). There is no payload."""

    __slots__ = ("ref", "kind", "round", "sender", "receiver", "nbytes", "rx_start", "arrival")

    def __init__(self, ref, kind, rnd, sender, receiver, nbytes, rx_start, arrival) -> None:
        self.ref = ref
        self.kind = kind
        self.round = rnd
        self.sender = sender
        self.receiver = receiver
        self.nbytes = nbytes
        self.rx_start = rx_start
        self.arrival = arrival

    def __repr__(self) -> str:
        return f"Packet({self.kind!r} {self.sender!r} -> {self.receiver!r}, {self.nbytes} B at {self.arrival:.6g})"


@dataclass(frozen=True)
class ViewSpec:
    """Which adversary an attack plays. ``kind``: ``nodes`` or ``network``; ``roles``: the roles
    whose nodes it controls (nodes) or whose links it watches (network); ``count``: how many of
    the nodes of the last role (in node-id order; None: all); ``label``: a name for tables.

    Build with ``server()``, ``colluding(role, count)``, ``role(role, count)``, ``network(roles)``.
    """

    kind: str
    roles: tuple[str, ...]
    count: int | None = None
    label: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("nodes", "network"):
            raise ValueError(f"ViewSpec kind must be 'nodes' or 'network', got {self.kind!r}")
        if not self.roles:
            raise ValueError("ViewSpec needs at least one role")
        if self.count is not None and (isinstance(self.count, bool) or int(self.count) != self.count
                                       or self.count < 0):
            raise ValueError(f"ViewSpec count of {self.roles[-1]!r} nodes must be an integer >= 0 or None (all), "
                             f"got {self.count!r}")

    @classmethod
    def server(cls) -> "ViewSpec":
        """The honest-but-curious server: everything sent to it (with sender ids) and by it."""
        return cls("nodes", ("server",), None, "server")

    @classmethod
    def colluding(cls, role: str, count: int | None = None) -> "ViewSpec":
        """The server colluding with ``count`` nodes of ``role`` (None: all of them)."""
        what = "all" if count is None else str(count)
        return cls("nodes", ("server", role), count, f"server+{what} {role}")

    @classmethod
    def role(cls, role: str, count: int | None = 1) -> "ViewSpec":
        """``count`` curious nodes of ``role`` (what they receive and send), without the server."""
        what = "all" if count is None else str(count)
        return cls("nodes", (role,), count, f"{what} {role}")

    @classmethod
    def network(cls, roles: Iterable[str] = ("server",)) -> "ViewSpec":
        """A network observer of the links of the nodes of ``roles`` (sizes and timings only)."""
        r = tuple(roles)
        return cls("network", r, None, "network(" + ",".join(r) + ")")


class View:
    """What one adversary saw: ``spec``, ``public``, ``nodes`` (the node ids it controls or
    watches), ``messages`` (``Observed`` or ``Packet``, in the adversary's timeline), ``max_round`` (the last
    round label allowed, None: all; a setup label s counts as preceding round -1 - s), ``unrecorded`` (messages the adversary saw whose payload
    the recorder did not keep: listed with payload None) and ``outside``: how many messages it
    saw in the training rounds (labels >= 0) below ``max_round`` that a window of chosen rounds
    leaves out, by ``(kind, sender, receiver, round)`` (sender None as in ``messages``): counts
    only, no payload, size or time (the server knows how often it called a client before the
    rounds it attacks; ``count_outside``). Read-only."""

    __slots__ = ("spec", "public", "nodes", "messages", "max_round", "unrecorded", "outside")

    def __init__(self, spec: ViewSpec, public: Public, nodes: frozenset, messages: tuple, max_round,
                 unrecorded: int = 0, outside: dict | None = None) -> None:
        self.spec = spec
        self.public = public
        self.nodes = nodes
        self.messages = messages
        self.max_round = max_round
        self.unrecorded = unrecorded
        self.outside = MappingProxyType(dict(outside or {}))

    def count_outside(self, kind: str, *, before: int, sender: str | None = None,
                      receiver: str | None = None) -> int:
        """How many messages of ``kind`` (from ``sender``, to ``receiver``: None, any) the
        adversary saw labelled with a round below ``before`` that the window leaves out
        (``outside``; 0 for a window of every round up to one)."""
        return sum(c for (k, s, r, rnd), c in self.outside.items()
                   if k == kind and rnd < before and (sender is None or s == sender)
                   and (receiver is None or r == receiver))

    def __iter__(self) -> Iterator:
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    def select(self, kind: str | Iterable[str] | None = None, *, incoming: bool | None = None,
               sender: str | None = None, receiver: str | None = None) -> list:
        """The messages of ``kind`` (a kind or several), optionally only incoming (received) or
        outgoing ones (payload views), from ``sender`` or to ``receiver``, in the view's order."""
        kinds = None if kind is None else ({kind} if isinstance(kind, str) else set(kind))
        out = []
        for m in self.messages:
            if kinds is not None and m.kind not in kinds:
                continue
            if incoming is not None and getattr(m, "outgoing", False) == incoming:
                continue
            if sender is not None and m.sender != sender:
                continue
            if receiver is not None and m.receiver != receiver:
                continue
            out.append(m)
        return out

    def by_sender(self, kind: str) -> dict[str, list]:
        """Incoming messages of ``kind`` grouped by (known) sender, each list in the view's order."""
        out: dict[str, list] = {}
        for m in self.select(kind, incoming=True):
            if m.sender is not None:
                out.setdefault(m.sender, []).append(m)
        return MappingProxyType(out)

    def __repr__(self) -> str:
        return f"View({self.spec.label or self.spec.kind}: {len(self.messages)} messages, {len(self.nodes)} nodes)"


def nodes_of_role(entries: list, role: str) -> list[str]:
    """Node ids that held ``role`` when sending or receiving some recorded message, sorted."""
    found = set()
    for row, *_ in entries:
        if row[SRC_ROLE] == role:
            found.add(row[SRC])
        if row[DST_ROLE] == role:
            found.add(row[DST])
    return sorted(found)


def _adversary_nodes(spec: ViewSpec, entries: list, public: Public) -> frozenset:
    nodes: set[str] = set()
    for k, role in enumerate(spec.roles):
        ids = [public.server] if role == "server" else nodes_of_role(entries, role)
        if k == len(spec.roles) - 1 and spec.count is not None:
            ids = ids[: int(spec.count)]
        nodes.update(ids)
    return frozenset(nodes)


def ref_of(seq: int, key: bytes) -> int:
    """The opaque reference of the message copy numbered ``seq`` under ``key``: a 63-bit keyed
    BLAKE2b hash. An audit that knows the key can map references back to ledger rows; an
    attack, which never gets the key, cannot."""
    h = hashlib.blake2b(int(seq).to_bytes(8, "little"), key=key, digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1


def build_view(spec: ViewSpec, recording: Any, public: Public, *, rounds: int | Iterable[int] | None = None,
               key: bytes = b"fedsim.privacy") -> View:
    """The ``View`` of adversary ``spec`` over ``recording`` (a ``Recorder`` or its ``entries``).

    ``rounds``: only messages labelled with a round up to this one (an int) or in this set (an
    iterable), plus the setup messages (negative round labels: who is whose denoiser, public
    keys) of the training rounds up to the largest of them, which every adversary has seen
    whatever training rounds it watches (a setup label s precedes training round -1 - s: FedRec's
    and FedRec++'s -1 precedes round 0, the key exchange of an FPL network starting at round R is
    labelled -1 - R; a later network's setup is not in a window that ends before it); None: every
    round.
    The messages it saw in the rounds below the set's largest that the set leaves out are
    counted in ``View.outside`` (by kind, sender, receiver and round; nothing else of them). A payload view lists every message the adversary saw; those
    whose payload the recorder did not keep (its filters bound memory) have ``payload`` None and
    are counted in ``View.unrecorded``, so that an audit can say what it left out.

    Messages are listed in the order the adversary observed them: by arrival time (send time for
    what it sent; a network observer: start of reception), equal times at one node (the node
    that sent or received it, of the adversary's) in the order the network delivered them, which
    on a FIFO path is the order they were sent, and equal times at different nodes by node id (a
    recording of several networks in turn: network by network). The ideal profile makes every
    time equal, so there each node's order is all the timing an adversary gets, and it is real
    information (a channel that does not mix delivers anonymous messages in sending order); the
    interleaving of simultaneous messages at different nodes is not: nobody observes it, and the
    run's sending order there would pair each anonymous message with the upload sent next to it. The
    run's message numbers themselves are never shown: each message carries ``ref_of(seq, key)``
    (``seq``: the network's number in the recording times 2^40 plus the ledger row's number).
    """
    entries = recording.entries if hasattr(recording, "entries") else recording
    if rounds is None:
        allowed = None
        max_round = None
    elif isinstance(rounds, int):
        allowed = None
        max_round = int(rounds)
    else:
        allowed = frozenset(int(r) for r in rounds)
        max_round = max(allowed) if allowed else -1
    nodes = _adversary_nodes(spec, entries, public)
    out = []
    unrecorded = 0
    outside: dict[tuple, int] = {}
    for row, doc, net in entries:
        rnd = row[ROUND]
        seq = (int(net) << 40) | row[SEQ]  # message numbers start afresh in each network
        if max_round is not None and (rnd > max_round or (rnd < 0 and -1 - rnd > max_round)):
            # a setup label s precedes training round -1 - s (FedRec's -1: round 0; the key
            # exchange of an FPL epoch from round R: -1 - R): not yet seen by a window that ends before it
            continue
        src, dst = row[SRC], row[DST]
        anon = bool(row[ANON])
        # setup messages (negative rounds) stay in every view: the parties exchanged them
        left_out = allowed is not None and rnd not in allowed and rnd >= 0
        if spec.kind == "network":
            if dst in nodes and row[STATUS] == "delivered":
                if left_out:
                    k = (row[KIND], None if anon else src, dst, rnd)
                    outside[k] = outside.get(k, 0) + 1
                    continue
                out.append(((net, row[RX_START], dst, seq), Packet(ref_of(seq, key), row[KIND], rnd,
                                  None if anon else src, dst, row[BYTES], row[RX_START], row[ARRIVAL])))
            continue
        outgoing = src in nodes
        incoming = dst in nodes and row[STATUS] == "delivered"
        if not (outgoing or incoming):
            continue
        if left_out:
            k = (row[KIND], src if (outgoing or not anon) else None, dst, rnd)
            outside[k] = outside.get(k, 0) + 1
            continue
        if doc is None:
            unrecorded += 1  # the recorder's filters left its payload out: seen, payload None
        sender = src if (outgoing or not anon) else None
        t = row[SEND_T] if outgoing else row[ARRIVAL]
        out.append(((net, t, src if outgoing else dst, seq), Observed(ref_of(seq, key), row[KIND], rnd, sender, dst, row[BYTES], t,
                                            outgoing, doc)))
    # the adversary's own timeline: arrival (or, for what it sent, send) time; equal times at one
    # node in the order the network delivered them (the event queue is FIFO, so: sending order),
    # equal times at different nodes by node id: a coalition (or an observer of several links)
    # has no order between simultaneous events at different places, and the run's global sending
    # order there would link every anonymous message to the upload sent just before it
    out.sort(key=lambda m: m[0])
    return View(spec, public, nodes, tuple(m[1] for m in out), max_round, unrecorded, outside)
