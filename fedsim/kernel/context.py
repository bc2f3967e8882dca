"""What an actor sees: ``Context``, the small transport API, and the values it returns.

An actor is ``async def actor(ctx, ...)``. It talks to the world only through ``ctx``:

``await ctx.send(dst, kind, payload)``            one message to one node
``ctx.draft(kind, template)``                      a message whose arrays are written in place, then sent
``await ctx.broadcast(dsts, kind, payload)``       the same payload to many (encoded once)
``await ctx.receive(kind=None, timeout=...)``      the next message (optionally of a kind)
``await ctx.gather(kind, senders=... | count=...)`` many messages, in node-id order
``async for msg in ctx.gather_each(kind, senders=...)``  the same, one at a time as they arrive
``await ctx.sleep(seconds)`` / ``await ctx.compute(flops)``
``ctx.deadline(seconds)``, ``ctx.begin_round(r)``, ``ctx.set_role(role)``, ``ctx.rng``, ``ctx.node_id``

The same actor runs on ``SimNetwork`` (virtual time) and ``AsyncioNetwork`` (a real event loop);
it must await nothing but these calls.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from .codec import CodecError, Draft, draft_message, encode_message
from .envelope import Collector, Envelope, InOrder
from .errors import UnknownNodeError
from .ledger import READ, SEQ

from .node import Node

# Context never imports the network module (which imports this one): it only calls the transport
# interface documented in fedsim.kernel.network, on whatever transport created it.

__all__ = ["Context", "Deadline", "GatherEach", "Gathered", "Message"]

_INF = math.inf


def _flag(anonymous: Any) -> bool:
    """``send``'s ``anonymous`` that is neither True nor False (called only then, off the common
    path): NumPy's bool_ as a bool; anything else is refused, falsy values too (``0``, ``None``,
    ``""``: one that means "not anonymous" is written False)."""
    if isinstance(anonymous, (bool, np.bool_)):
        return bool(anonymous)
    raise TypeError(f"send: anonymous must be True or False, got {type(anonymous).__name__} {anonymous!r:.80}")


class Message:
    """A received message (treat as read-only). ``sender`` is ``None`` when it came over an
    anonymous channel.

    ``payload`` arrays are read-only views shared with the other recipients of the same
    broadcast: copy before modifying. ``nbytes`` is what crossed the wire for it.
    """

    # a plain slotted class: one is made per message received, and a frozen dataclass's
    # __init__ costs several times more (object.__setattr__ per field)
    __slots__ = ("kind", "payload", "sender", "round", "nbytes")

    def __init__(self, kind: str, payload: Any, sender: str | None, round: int, nbytes: int) -> None:
        self.kind = kind
        self.payload = payload
        self.sender = sender
        self.round = round
        self.nbytes = nbytes

    def __repr__(self) -> str:
        return (f"Message(kind={self.kind!r}, sender={self.sender!r}, round={self.round}, "
                f"nbytes={self.nbytes})")


@dataclass(frozen=True, slots=True)
class Gathered:
    """What ``Context.gather`` collected: ``messages`` in deterministic order (by sender id;
    anonymous messages by their encoded bytes) and the ``missing`` senders (or count)."""

    messages: list[Message]
    missing: list[str] = field(default_factory=list)
    missing_count: int = 0

    def __iter__(self):
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

    @property
    def complete(self) -> bool:
        return self.missing_count == 0


class Deadline:
    """An instant, fixed when ``Context.deadline`` was called; opaque to actors."""

    __slots__ = ("_at",)

    def __init__(self, at: float) -> None:
        self._at = at

    def __repr__(self) -> str:
        return f"<Deadline at {self._at:.6g}>"


class GatherEach:
    """The async iterator ``Context.gather_each`` returns: messages one by one, in node-id order.

    After the loop, ``missing`` lists the senders whose message did not arrive by the deadline
    (also recorded in the ledger, with the number ``wait`` of this wait among its node's
    gathers: ``Missing.wait``) and ``complete`` says whether there were none.
    """

    __slots__ = ("missing", "_ctx", "_kind", "_col", "_end", "_expired", "_done", "_wait")

    def __init__(self, ctx: "Context", kind: str, order: list[str], end: float | None,
                 rnd: int | None, wait: int) -> None:
        self.missing: list[str] = []
        self._ctx = ctx
        self._kind = kind
        self._col = InOrder(order, rnd, ctx._net.ledger.discarded)
        self._end = end
        self._expired = False
        self._done = False
        self._wait = wait

    @property
    def complete(self) -> bool:
        return not self.missing

    def __aiter__(self) -> "GatherEach":
        return self

    async def __anext__(self) -> Message:
        col, ctx = self._col, self._ctx
        order, held = col.order, col.held
        while col.pos < len(order):
            sender = order[col.pos]
            env = held.pop(sender, None)
            if env is None and not self._expired:
                net, node, kind = ctx._net, ctx._node, self._kind
                net.offer_queued(node, kind, col, stop=False)  # what arrived while the actor was busy
                env = held.pop(sender, None)
                if env is None:
                    left = None if self._end is None else self._end - net.now()
                    if left is None or left > 0:
                        col.complete = False
                        await net.collect(node, kind, col, left)
                        env = held.pop(sender, None)
                    if env is None:
                        self._expired = True  # from now on, only what is already held
            col.pos += 1
            if env is not None:
                if env.anonymous:
                    # node-id order would reveal who sent what; gather(count=...) orders by content
                    raise ValueError(f"gather_each: a {self._kind!r} message came over an anonymous "
                                     "channel; its order would reveal the sender: use gather(count=...)")
                return ctx._open(env)
            self.missing.append(sender)
        if not self._done:
            self._done = True
            if self.missing:
                ctx._net.record_missing(ctx._node, self._kind, self.missing, self._col.round, len(self._col.order),
                                        self._wait)
        raise StopAsyncIteration


class Context:
    """The transport API handed to one actor. Subclassed by each transport; actors only use the
    public methods documented here."""

    __slots__ = ("_net", "_node", "_rng")

    def __init__(self, net: Any, node: Node) -> None:  # net: any transport (fedsim.kernel.network)
        self._net = net
        self._node = node
        self._rng: np.random.Generator | None = None

    # -- identity ---------------------------------------------------------------------------
    @property
    def node_id(self) -> str:
        """This node's id."""
        return self._node.id

    @property
    def role(self) -> str:
        """This node's current role label (used by the ledger's per-role accounting)."""
        return self._node.role

    def set_role(self, role: str) -> None:
        """Change this node's role label (e.g. a client chosen as denoiser). Messages sent
        afterwards are accounted under the new role. Does not block. Raises ``ValueError`` naming
        the node for a ``role`` that is not a non-empty str (``None`` became the role 'None',
        which no ``Kind`` declares)."""
        if not isinstance(role, str) or not role:
            raise ValueError(f"set_role on node {self._node.id!r}: role must be a non-empty str, got {role!r}")
        self._node.role = str(role)
        self._net.ledger.set_role(self._node.id, self._node.role)

    @property
    def rng(self) -> np.random.Generator:
        """This actor's own generator, derived from (network seed, node id): the only source of
        randomness an actor may use."""
        if self._rng is None:
            self._rng = self._net.rng_for(self._node.id)
        return self._rng

    def begin_round(self, rnd: int) -> None:
        """Label the messages this node sends from now on with round ``rnd`` (a whole number: an
        int, a NumPy integer or a float without a fraction). A node that receives a message
        adopts its round if larger, so usually only the server calls this. Does not block.
        Raises ``ValueError`` naming the node for anything else (``int()`` truncated 1.7 to
        round 1, silently)."""
        self._node.round = rnd if type(rnd) is int else _round_label(rnd, f"begin_round on node {self._node.id!r}")

    @property
    def round(self) -> int:
        """The round this node's messages are labelled with now: the last ``begin_round``, or a
        larger label read since on a received message (0 at the start)."""
        return self._node.round

    # -- sending ----------------------------------------------------------------------------
    async def send(self, dst: str, kind: str, payload: Any, *, anonymous: bool = False) -> None:
        """Queue one message for ``dst``. Returns as soon as it is queued on this node's egress
        port (it never waits for transmission). With ``anonymous=True`` the receiver gets
        ``sender=None`` (the ledger still records both ends).

        ``payload`` may be a ``Draft`` of ``draft(kind, ...)``, sent as it is.

        Raises ``UnknownNodeError`` for an unknown ``dst``, ``TypeError`` for a ``dst`` that is
        not a node id (a list: ``broadcast`` sends to several), ``CodecError`` for a payload the
        codec cannot encode or a draft already sent (and not reopened), ``ValueError`` for a
        draft of another kind, ``MessageTooLargeError`` for a document larger than the
        transport's ``max_message_bytes``, and ``TypeError`` for an ``anonymous`` that is not a
        bool (NumPy's ``bool_`` is taken as one; a falsy ``0``, ``None`` or ``""`` is refused as
        ``"no"`` is, not taken for False). Nothing is sent when it raises.
        """
        if anonymous is not False and anonymous is not True:
            # the ledger stored the value as given: np.True_ went into the CSV as "True" (not "1",
            # and not what a StreamingLedger of the same run wrote), 1 into records() as 1
            anonymous = _flag(anonymous)
        kind = str(kind)
        net = self._net
        encoded = _sealed(payload, kind) if type(payload) is Draft else encode_message(kind, payload)
        if len(encoded.data) > net.max_message_bytes:
            net.check_size(self._node, kind, encoded)
        if net.tracing:
            _post_traced(net, self._node, (dst,), kind, encoded, anonymous)
        else:
            net.post(self._node, (dst,), kind, encoded, anonymous)

    async def broadcast(self, dsts: Iterable[str], kind: str, payload: Any) -> None:
        """Queue the same payload for every node of ``dsts`` (in that order). The payload is
        encoded once; each destination is charged its full size (a node listed twice gets two
        copies; an empty ``dsts`` sends nothing). Does not block. Raises as ``send`` does (for
        the first unknown destination: nothing is sent to the others either), and ``TypeError``
        for ``dsts`` that is one node id (a str: its characters were taken for node ids,
        "unknown node 's'") or not iterable (naming the node and what was given: ``broadcast on
        node 'a' takes a list of node ids, got NoneType None``); nothing is sent then."""
        if isinstance(dsts, str):
            raise TypeError(f"broadcast takes a list of node ids, got the str {dsts!r}; ctx.send sends to one")
        kind = str(kind)
        net = self._net
        encoded = _sealed(payload, kind) if type(payload) is Draft else encode_message(kind, payload)
        if len(encoded.data) > net.max_message_bytes:
            net.check_size(self._node, kind, encoded)
        try:  # (no cost unless it raises: broadcast is per-message hot)
            if net.tracing:
                _post_traced(net, self._node, tuple(dsts), kind, encoded, False)
            else:
                net.post(self._node, tuple(dsts), kind, encoded, False)
        except TypeError:
            err = _not_destinations(self._node, dsts)
            if err is None:
                raise
            raise err from None

    def draft(self, kind: str, template: dict, *, zero: bool = True) -> Draft:
        """A message of ``kind`` whose arrays are written where they will be sent from (no copy
        into the document at send time): ``draft.payload`` is ``template`` with each array (top
        level, or in a map one level down) replaced by a writable view of the same shape and
        dtype. Fill them, then ``send``/``broadcast`` the draft as the payload (same ``kind``); it
        is then sealed (read-only) and cannot be sent again unless ``draft.reopen()`` finds that
        nothing else holds it any more (then it is writable again, in place). Elements not
        written are zero, or undefined with ``zero=False`` (for callers that write every element). Does not block;
        raises ``CodecError`` for a template the codec cannot encode (see
        ``fedsim.kernel.codec.Draft``), and ``TypeError`` for a ``zero`` that is not True or False
        (NumPy's ``bool_`` is taken as one; ``0``, ``None`` or ``""`` are refused, not taken for
        False: truthiness made ``zero="no"`` zero the arrays and ``zero=None`` leave them
        uninitialised)."""
        return draft_message(str(kind), template, zero=zero)

    # -- receiving --------------------------------------------------------------------------
    def deadline(self, seconds: float) -> Deadline:
        """A deadline ``seconds`` from now, to pass to ``receive``/``gather``. Raises
        ``ValueError`` unless ``seconds`` is a finite non-negative number (a bool, a str or bytes
        is none, as for every timeout of ``receive``/``gather``/``gather_each`` and ``sleep``)."""
        s = _seconds(seconds)
        if s is None:
            raise ValueError(f"deadline needs a finite non-negative number of seconds, got {seconds!r}")
        return Deadline(self._net.now() + s)

    def _timeout_of(self, timeout: float | None, deadline: Deadline | None, call: str) -> float | None:
        """Seconds ``call`` may wait (None: no limit; <= 0 once ``deadline`` has passed).

        A timeout must be finite and non-negative: SimNetwork would otherwise schedule the expiry
        at t = inf (the run's duration becomes inf) or NaN (which breaks the event queue's
        order), and AsyncioNetwork would wait for ever. None is how to wait without limit."""
        if timeout is not None:
            t = _seconds(timeout)
            if t is None:
                raise ValueError(f"{call}: timeout must be a finite non-negative number of seconds (or None), "
                                 f"got {timeout!r}")
            timeout = t
        if deadline is not None:
            if type(deadline) is not Deadline:
                raise TypeError(f"{call}: deadline must be a Deadline made by ctx.deadline(seconds), got {deadline!r}")
            left = deadline._at - self._net.now()
            return left if timeout is None else min(left, timeout)
        return timeout

    async def receive(self, kind: str | tuple[str, ...] | None = None, *,
                      timeout: float | None = None, deadline: Deadline | None = None) -> Message | None:
        """The oldest waiting message (of ``kind``, a kind or tuple of kinds, if given).

        Blocks until one arrives; with ``timeout`` (seconds) or ``deadline``, returns ``None``
        if none has arrived by then. Messages of other kinds stay in the mailbox.

        Kinds are compared as plain strings, as ``send`` labels messages (``str(kind)``): a str
        subclass such as ``np.str_`` is one kind, a list or set is a tuple of kinds.

        Raises ``ValueError`` for a ``timeout`` that is not a finite non-negative number
        (``None`` waits without limit) and ``TypeError`` for a ``deadline`` not made by
        ``deadline``.
        """
        # one type test for the usual str; str, None and tuple filters are used as they are
        if type(kind) is not str and kind is not None and type(kind) is not tuple:
            kind = _kinds(kind)
        net = self._net
        env = net.take(self._node, kind)
        if env is None:
            if timeout is None and deadline is None:  # the common case, without the helper's call
                env = await net.wait(self._node, kind, None)
            else:
                t = self._timeout_of(timeout, deadline, "receive")
                if t is not None and t <= 0:
                    return None
                env = await net.wait(self._node, kind, t)
        return None if env is None else self._open(env)

    def _open(self, env: Envelope) -> Message:
        row = env.row
        row[READ] = True
        if self._net.tracing:  # when it was read: the trace shows one read after its arrival then
            self._net.read_at[row[SEQ]] = self._net.now()
            self._net.happened.append(("read", row[SEQ]))
        node = self._node
        if env.round > node.round:
            node.round = env.round
        try:
            payload = env.payload.value()
        except CodecError as exc:
            # a document the sender's encoder took and this side's decoder refuses (nesting deeper
            # than the receiving limit, keys that do not survive the round trip): name the message,
            # and its sender unless it came anonymously (the ledger row tells the experimenter)
            who = "an anonymous sender" if env.anonymous else repr(env.src)
            raise CodecError(f"message {env.kind!r} from {who} to {node.id!r} (round {env.round}, ledger row "
                             f"{env.row[SEQ]}) does not decode: {exc}") from exc
        return Message(env.kind, payload, None if env.anonymous else env.src, env.round, env.nbytes)

    async def gather(self, kind: str, *, senders: Iterable[str] | None = None,
                     count: int | None = None, timeout: float | None = None,
                     deadline: Deadline | None = None, round: int | None = None) -> Gathered:
        """Collect messages of ``kind``: one from each of ``senders``, or ``count`` of them.

        Returns when all have arrived or at the timeout/deadline, whichever is first; what did
        not arrive is reported in ``missing``/``missing_count`` and recorded in the ledger.
        With ``round``, only messages labelled with that round are taken: one labelled with an
        earlier round (a late arrival) is discarded unread; one labelled with a later round (its
        sender is already in a round this node has not reached) is not taken either, and stays
        in the mailbox, in arrival order, for the ``receive``/``gather`` of its own round.
        Without ``round`` every message of ``kind`` is taken, whatever its label. Messages are
        returned in node-id order (anonymous ones ordered by content), so sums over them do not
        depend on arrival order. ``kind`` is compared as ``receive`` does.

        Raises ``ValueError`` unless exactly one of ``senders`` and ``count`` is given, for a
        ``count`` that is not a non-negative integer, a ``timeout`` that is not a finite
        non-negative number, or a ``round`` that is not a whole number; ``TypeError`` for a
        ``deadline`` not made by ``deadline``; ``UnknownNodeError`` for an unknown sender;
        ``TypeError`` naming the node for ``senders`` that is not an iterable of node ids (and
        what was given: ``gather on node 'a' takes senders= as a list of node ids, got NoneType
        None``; or the sender that is no id, a list), or one str (even one node's id, as
        ``broadcast`` refuses one: ``senders="server"``, write ``["server"]``).
        """
        if (senders is None) == (count is None):
            raise ValueError("gather needs exactly one of senders= or count=")
        if type(kind) is not str and kind is not None and type(kind) is not tuple:
            kind = _kinds(kind)
        if round is not None and round.__class__ is not int:  # (an attribute, no call: gather is per-message hot)
            round = _round_label(round, "gather")
        if count is not None and (isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 0):
            # a negative count would report missing_count < 0; a fractional one would be truncated
            raise ValueError(f"gather: count must be a non-negative integer, got {count!r}")
        dl = self._timeout_of(timeout, deadline, "gather")
        net, node = self._net, self._node
        if senders is not None:
            if senders.__class__ is str:  # (broadcast refuses one str too: "b" worked by accident, "bc" was b and c)
                raise _one_str_senders("gather", senders)
            try:
                expected = list(dict.fromkeys(senders))
            except TypeError:
                err = _not_senders("gather", node, senders)
                if err is None:
                    raise
                raise err from None
            for s in expected:
                if s not in net.nodes:
                    raise _unknown_sender("gather", senders, s)
            col = Collector(len(expected), set(expected), round, net.ledger.discarded)
        else:
            col = Collector(int(count), None, round, net.ledger.discarded)
        # this wait's number among the node's gathers (Missing.wait): counted here, once per
        # gather, given up or not, so that it is the same on every transport
        node.waits = wait = node.waits + 1
        net.offer_queued(node, kind, col)  # what is already in the mailbox, oldest first
        if not col.complete and (dl is None or dl > 0):
            await net.collect(node, kind, col, dl)
        got, pending, want = col.got, col.pending, col.want
        # node-id order; anonymous messages (no id to sort by) by their encoded content
        got.sort(key=lambda e: ("", bytes(e.payload.encoded.data)) if e.anonymous else (e.src, b""))
        messages = [self._open(e) for e in got]
        missing = sorted(pending) if pending is not None else []
        missing_count = want - len(got)
        if missing_count:
            self._net.record_missing(self._node, kind, missing or [None] * missing_count, round, want, wait)
        return Gathered(messages, missing, missing_count)

    def gather_each(self, kind: str, *, senders: Iterable[str], timeout: float | None = None,
                    deadline: Deadline | None = None, round: int | None = None) -> GatherEach:
        """``async for msg in ctx.gather_each(kind, senders=...)``: the messages ``gather`` would
        return, in the same order (node id), each handed over as soon as it and those of every
        sender before it in that order have arrived, so that the actor can fold each into a sum
        and let it go. Sums come out bit-identical to summing ``gather``'s list, while only the
        messages that arrived ahead of their turn are held (with senders whose ids sort in the
        order they were contacted, none are), instead of all of them.

        With ``timeout``/``deadline``, waiting stops at the deadline (checked whenever the
        iterator has to wait): the senders not heard from by then are skipped, listed in the
        iterator's ``missing`` after the loop and recorded in the ledger. ``round`` takes only
        messages of that round, as in ``gather`` (an earlier round's discarded unread, a later
        round's left in the mailbox). Leaving the loop early leaves the rest unread.
        Raises (at the call) ``UnknownNodeError`` for an unknown sender, ``TypeError`` for
        ``senders`` as ``gather`` does, ``ValueError`` for a
        ``timeout`` that is not a finite non-negative number or a ``round`` that is not a whole
        number, ``TypeError`` for a ``deadline`` not made by ``deadline``; and (in the loop, when
        it comes to it) ``ValueError`` for a message that came over an anonymous channel (its
        place in node-id order would reveal its sender: use ``gather(count=...)``).
        """
        net = self._net
        if round is not None and round.__class__ is not int:  # (an attribute, no call: gather is per-message hot)
            round = _round_label(round, "gather_each")
        if senders.__class__ is str:
            raise _one_str_senders("gather_each", senders)
        try:
            expected = list(dict.fromkeys(senders))
        except TypeError:
            err = _not_senders("gather_each", self._node, senders)
            if err is None:
                raise
            raise err from None
        for s in expected:  # (before the sort: an id that is no str is unknown, not a bare "'<' not supported")
            if s not in net.nodes:
                raise _unknown_sender("gather_each", senders, s)
        expected.sort()
        dl = self._timeout_of(timeout, deadline, "gather_each")
        node = self._node
        node.waits = wait = node.waits + 1  # (as gather: Missing.wait)
        return GatherEach(self, str(kind), expected, None if dl is None else net.now() + dl, round, wait)

    # -- time -------------------------------------------------------------------------------
    async def sleep(self, seconds: float) -> None:
        """Let ``seconds`` of time pass for this node: blocks for ``seconds`` of simulated time on
        SimNetwork, ``seconds * time_scale`` real seconds on the real-time transports. Raises
        ``ValueError`` unless ``seconds`` is a finite non-negative number (NaN, inf, a negative
        number, ``None``, a bool, a str or bytes: ``float()`` took True for one second and "2" for
        two)."""
        s = _seconds(seconds)
        if s is None:
            raise ValueError(f"sleep needs a finite non-negative duration, got {seconds!r}")
        await self._net.sleep(self._node, s)

    async def compute(self, flops: float, label: str = "compute") -> None:
        """Charge ``flops`` floating-point operations of local work: on SimNetwork this node's
        time advances by ``flops / speed``; on a real loop it only yields. Once it returns, the
        FLOPs count in the run's ``RunResult.flops`` under this node and ``label`` (also if the
        node drops out later); a compute the node's dropout or the run's end cuts does not count.
        Blocks for ``flops / speed`` simulated seconds on SimNetwork (``speed``: the node's
        ``flops`` spec); yields to the loop once on the real-time transports. Raises
        ``ValueError`` unless ``flops`` is a finite non-negative number (also for ``None``, a bool,
        a str or bytes, even one that reads as a number; nothing is counted then)."""
        cls = flops.__class__  # (attributes first: compute is called per exchange)
        f = float(flops) if cls is float or cls is int or _is_number(flops) else math.nan
        if not 0 <= f < _INF:  # also NaN
            raise ValueError(f"compute needs a finite non-negative flop count, got {flops!r}")
        node = self._node
        await self._net.compute(node, f, label)
        # (called per exchange in the stochastic protocols: one lookup and one store when the
        # label was seen before, the common case)
        tally = node.flops
        try:
            tally[label] += f
        except (KeyError, TypeError):  # a new label, or one that is not a str (kept as its str)
            key = label if type(label) is str else str(label)
            tally[key] = tally.get(key, 0.0) + f

    def log(self, text: str) -> None:
        """Add a line to the run's step log (kept only when the network traces)."""
        self._net.log(self._node, str(text))


def _post_traced(net, node, dsts: tuple, kind: str, encoded, anonymous: bool) -> None:
    """``net.post`` on a network that traces: each ledger row it adds is a send in
    ``net.happened``, placed before whatever ``post`` itself recorded (AsyncioNetwork delivers
    or loses a copy inside ``post``: its arrival or loss came before its send)."""
    first, at = len(net.ledger), len(net.happened)
    net.post(node, dsts, kind, encoded, anonymous)
    net.happened[at:at] = [("send", seq) for seq in range(first, len(net.ledger))]


def _kinds(kind: Any) -> str | tuple[str, ...]:
    """A ``receive``/``gather`` kind filter other than a str, None or tuple, as the transports
    match it: a str subclass (``np.str_``, e.g. read from an array of kinds) as a plain str (the
    matcher takes anything but a str for a collection of kinds and tests ``in``: a substring test
    on a string), another collection as a tuple of str, anything else as ``str(kind)``, the label
    ``send`` gives it. Done here, where the filter is given, not per message delivered."""
    if isinstance(kind, str):
        return str(kind)
    try:
        kinds = tuple(kind)
    except TypeError:
        return str(kind)
    return tuple(str(k) for k in kinds)


def _not_destinations(node, dsts: Any) -> TypeError | None:
    """Made when ``broadcast`` to ``dsts`` raised ``TypeError``: that of ``tuple(dsts)`` ("'NoneType'
    object is not iterable" said neither the call nor the node) replaced by one naming the node and
    what was given; else (``dsts`` iterable: the TypeError is another's, such as the destinations'
    own) None, and the handler re-raises the original. Off the send path."""
    try:
        iter(dsts)
    except TypeError:
        return TypeError(f"broadcast on node {node.id!r} takes a list of node ids, got {type(dsts).__name__} {dsts!r}")
    return None


def _not_senders(call: str, node, senders: Any) -> TypeError | None:
    """Made when ``dict.fromkeys(senders)`` raised ``TypeError`` in ``call``: one naming the node and
    what was given for ``senders`` that is not iterable ("'NoneType' object is not iterable" named
    neither the call nor the node), or the sender that is not hashable ("unhashable type: 'list'");
    else (the TypeError is another's, such as a generator's own) None, and the handler re-raises
    the original. Off the gather's path."""
    try:
        items = iter(senders)
    except TypeError:
        return TypeError(f"{call} on node {node.id!r} takes senders= as a list of node ids, got "
                         f"{type(senders).__name__} {senders!r}")
    for s in items:
        try:
            hash(s)
        except TypeError:
            return TypeError(f"{call} on node {node.id!r}: a sender is a node id (str), got {type(s).__name__} {s!r}")
    return None


def _one_str_senders(call: str, senders: str) -> TypeError:
    """The error for ``senders`` given as one str, whatever its characters: they were taken for node
    ids ("unknown sender 'e'" for ``senders="server"``; ``senders="b"`` worked by accident,
    ``senders="bc"`` gathered from b and c). Refused as ``broadcast`` refuses one str."""
    return TypeError(f"{call} takes senders= as a list of node ids, got the str {senders!r}; "
                     f"write senders=[{senders!r}]")


def _unknown_sender(call: str, senders: Any, sender: Any) -> Exception:
    """The error for ``sender``, one of ``senders`` and no node: ``UnknownNodeError`` (``TypeError``
    for a str subclass given as ``senders``, its characters taken for node ids). Made only once a
    sender is found unknown, off the gather's path."""
    if isinstance(senders, str):
        return _one_str_senders(call, senders)
    return UnknownNodeError(f"{call}: unknown sender {sender!r}")


def _round_label(rnd: Any, call: str) -> int:
    """``rnd`` as a round label: an int for a whole number (a NumPy integer, a float without a
    fraction); else ``ValueError`` naming ``call`` (``int()`` truncated 1.7 to 1, and a gather for
    round 1.5 silently discarded round 1's messages as stale)."""
    if not isinstance(rnd, bool):
        if isinstance(rnd, numbers.Integral):
            return int(rnd)
        if isinstance(rnd, numbers.Real) and math.isfinite(rnd) and float(rnd).is_integer():
            return int(rnd)
    raise ValueError(f"{call}: a round is a whole number, got {rnd!r}")


def _seconds(value: Any) -> float | None:
    """``value`` as a finite non-negative float, or None if it is not one (NaN, inf, negative,
    not a number: a bool, a str or bytes too, which ``float()`` took: True for 1 s, "2" for 2 s)."""
    cls = value.__class__
    if cls is not float and cls is not int and not _is_number(value):  # (attributes first: per-exchange calls)
        return None
    s = float(value)
    return s if 0 <= s < _INF else None  # also refuses NaN


def _is_number(value: Any) -> bool:
    """Whether ``value`` (no float, no int) is a real number: a NumPy number or another
    ``numbers.Real``, not a bool (NumPy's neither), a str or bytes."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _sealed(draft: Draft, kind: str):
    """The encoded document of ``draft``, sent as a message of ``kind`` (which must be its own)."""
    if draft.kind != kind:
        raise ValueError(f"a {draft.kind!r} draft sent as a {kind!r} message")
    return draft.seal()
