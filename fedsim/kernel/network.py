"""``Network``: the transport interface every transport implements, and ``RunResult``.

A *transport* carries messages between actors: ``SimNetwork`` (virtual time, a link model),
``AsyncioNetwork`` (a real event loop, in-process mailboxes), and any transport someone adds
(docs/network-model.md, "Writing a transport"). It subclasses ``Network`` and implements:

``now()``                                  the transport's clock (seconds since the run started)
``post(src, dsts, kind, encoded, anon)``   hand one encoded message to the network for ``dsts``
``wait(node, kind, timeout)``              an awaitable that resumes ``node`` with the next
                                           matching envelope, or ``None`` at the timeout
``sleep(node, seconds)``, ``compute(node, flops, label)``   let time pass for ``node``
``run(*, strict=True)``                    run every actor; return a ``RunResult``

and may override ``collect`` (fill a gather's collector without resuming the actor per
message). A transport that carries messages in this process also calls ``self.tap.observe(row,
payload)`` in ``post`` for every message copy, right after creating its ledger row, when ``tap`` is
set (see ``Network.tap``); one that cannot (``TcpNetwork``: the rows are made in worker
processes) refuses to run with a tap.

Its ``run`` calls ``check_faults`` (and ``check_tap`` if it calls the tap) and then ``call_before_run`` (what ``before_run`` registered:
work done once in the launching process; a transport that forks calls it before forking) before
any actor starts. It uses the shared helpers below: ``actor_coroutine`` (start an actor), ``take`` and
``offer_queued`` (the mailbox), ``destinations``,
``draw_loss`` (seeded loss keyed by sender and message number), ``record_missing``, ``log``,
``blocked``, ``finish`` (build the ``RunResult``, raising ``DeadlockError`` when strict) and
``end_run`` (called before closing the actors left: what they send then is dropped).

Actors never see any of this: they hold a ``Context``, which calls these methods.
"""

from __future__ import annotations

import math
import numbers
import re
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from types import CoroutineType
from typing import Any, Awaitable, Callable, Iterable

import numpy as np

from ..seeding import node_rng
from .codec import DEFAULT_MAX_BYTES, Encoded
from .context import Context
from .envelope import LATER, Envelope, matches
from .errors import (
    ActorError, DeadlockError, FedsimError, MessageTooLargeError, NetworkConfigError, RunEnded, UnknownNodeError, clock_text,
)
from .ledger import Ledger, Missing, whole_number
from .links import Faults, LinkSpec, NodeSpec, Profile, get_profile
from .node import Node

__all__ = ["Actor", "Network", "RunResult", "on_network_built"]

# observers of network construction (progress displays); see on_network_built
_BUILT_HOOKS: list[Callable[["Network"], None]] = []


def on_network_built(hook: Callable[["Network"], None]) -> Callable[[], None]:
    """Call ``hook(net)`` with every network constructed in this process from now on, at the end
    of its constructor; returns a function that removes the hook. For observers only: progress
    displays keep the network to read ``len(net.ledger)``, the last row's round and ``net.now()``
    from another thread while it runs. A hook must not change the network (results would then
    depend on who watches) and should be quick; an exception it raises propagates."""
    _BUILT_HOOKS.append(hook)

    def remove() -> None:
        if hook in _BUILT_HOOKS:
            _BUILT_HOOKS.remove(hook)

    return remove

Actor = Callable[..., Awaitable[Any]]
_NODE_ID = re.compile(r"^[A-Za-z0-9_.:/\-]+$")
_KERNEL_STREAMS = ("link:", "dropout:", "loss:")  # node_rng names the kernel draws from


def _dropped_post(src: Node, dsts: tuple, kind: str, encoded: Encoded, anonymous: bool) -> None:
    """``post`` once the run has ended (``Network.end_run``): the message goes nowhere."""


def _no_wait(node: Node, *args: Any) -> None:
    """``wait``, ``collect``, ``sleep`` and ``compute`` once the run has ended (``Network.end_run``):
    an actor's ``finally`` block cannot wait any more (on SimNetwork it made closing the actor fail
    with "coroutine ignored GeneratorExit"; on AsyncioNetwork a receive there hung the run)."""
    raise RunEnded(f"actor {node.id!r} (role {node.role!r}) waited after the run had ended (in a finally block?)")


def check_flag(name: str, value: Any) -> bool:
    """``value`` as a bool if it is one (``True``/``False``, or a NumPy bool); else
    ``NetworkConfigError`` naming ``name``: ``bool()`` took ``"yes"``, ``"no"``, ``1`` and ``[]`` for
    flags (``trace="no"`` traced), silently."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise NetworkConfigError(f"{name} must be True or False, got {type(value).__name__} {value!r:.80}")


def check_run_timeout(value: Any) -> float | None:
    """``value`` as the ``timeout`` of a real-time transport's ``run``: None (no bound) or a
    positive number of real seconds (inf: no bound either). Raises ``NetworkConfigError`` naming
    ``timeout`` otherwise, before anything runs: 0, a negative number or NaN would end the run at
    once with a ``TimeoutError``, as if its actors had been too slow, a str with a ``TypeError``
    naming nothing, and a bool (True: 1 s) is no number of seconds."""
    if value is None:
        return None
    # a number only: True was a timeout of 1 s
    t = float(value) if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) else math.nan
    if not t > 0:  # also NaN
        raise NetworkConfigError(f"timeout must be positive seconds or None, got {value!r}")
    return t


def check_time_scale(value: Any) -> float:
    """``value`` as the ``time_scale`` of a real-time transport (real seconds per protocol second):
    a positive finite float. Raises ``NetworkConfigError`` naming ``time_scale`` otherwise: 0
    would turn every timeout into an immediate expiry (a timed receive returns None while its
    message is on its way, unlike on SimNetwork), inf every sleep and timeout into a wait for ever,
    and the clock divides by it."""
    # a number only: float() took "2" and True (a scale of 1), silently
    scale = float(value) if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) else math.nan
    if not 0 < scale < math.inf:  # also NaN
        raise NetworkConfigError(f"time_scale must be a positive finite number of real seconds per protocol "
                                 f"second, got {value!r}")
    return scale


@dataclass
class RunResult:
    """The outcome of ``Network.run``.

    ``results``: each finished actor's return value; ``unfinished``: the nodes still blocked (or
    still running, when the run stopped at ``until``) when it ended, closed by the kernel;
    ``blocked``: for each of them, what it was waiting for (the nodes of the roles with the fewest blocked first, then in node-id order: a deadlock's report shows the first 20); ``offline``: the nodes that dropped
    out (both lists in node-id order, whatever order the nodes were added in); ``duration``: simulated seconds (SimNetwork) or real seconds divided by the time scale
    (AsyncioNetwork, TcpNetwork); ``ledger``; ``trace`` and ``log`` (when the network traces);
    ``flops``: for each node that computed, the FLOPs of its ``ctx.compute`` calls that returned,
    per label (node id -> {label: FLOPs}), whether it finished, dropped out or was closed at the
    run's end: the work done, which a node's return value does not carry when it never returns
    (``total_flops`` adds them up). A compute cut by the node's dropout or the run's end does not
    count. The same on every transport (TcpNetwork's workers report their nodes' counts).
    """

    results: dict[str, Any]
    unfinished: list[str]
    offline: list[str]
    duration: float
    ledger: Ledger
    trace: list[tuple] = field(default_factory=list)
    log: list[tuple] = field(default_factory=list)
    blocked: dict[str, str] = field(default_factory=dict)
    flops: dict[str, dict[str, float]] = field(default_factory=dict)

    def __getitem__(self, node_id: str) -> Any:
        """What node ``node_id``'s actor returned. Raises ``KeyError`` naming the node and why
        it has no result: it did not finish (in ``unfinished``, with what it waited for), it
        dropped out (``offline``), or there is no such node (listing the nodes with results)."""
        try:
            return self.results[node_id]
        except KeyError:
            pass
        except TypeError:  # unhashable: "unhashable type: 'list'" named nothing
            raise KeyError(f"a RunResult is indexed by node id (str), got {type(node_id).__name__} "
                           f"{node_id!r:.80}") from None
        if node_id in self.offline:
            raise KeyError(f"node {node_id!r} dropped out: it has no result") from None
        if node_id in self.unfinished:
            waits = self.blocked.get(node_id)
            why = f" (it waited for {waits})" if waits else ""
            raise KeyError(f"node {node_id!r} did not finish{why}: it has no result") from None
        ids = list(self.results)
        shown = ", ".join(map(repr, ids[:20])) + (f", ... ({len(ids)} in all)" if len(ids) > 20 else "")
        raise KeyError(f"no node {node_id!r} in this run; the nodes with results: "
                       f"{shown or 'none'}") from None

    def total_flops(self, nodes: Iterable[str] | None = None, labels: Iterable[str] | None = None) -> float:
        """The FLOPs computed by ``nodes`` (default: every node) under ``labels`` (default: any
        label), from ``flops``, added in the order of ``nodes`` then of each node's labels (a node
        that computed nothing adds 0)."""
        want = None if labels is None else {str(x) for x in ([labels] if isinstance(labels, str) else labels)}
        ids = self.flops if nodes is None else ([nodes] if isinstance(nodes, str) else nodes)
        total = 0.0
        for nid in ids:
            for label, f in self.flops.get(nid, {}).items():
                if want is None or label in want:
                    total += f
        return total

    @property
    def complete(self) -> bool:
        """True if every actor that did not drop out finished."""
        return not self.unfinished


class Network:
    """Base class of the transports: nodes, seeding, the ledger and the shared helpers.

    Build one, ``add_node`` each actor, then ``run``. A network runs once.

    ``seed`` fixes every random draw (actors' ``ctx.rng``, per-node link spread, loss);
    ``profile`` the default node specs; ``framing_bytes`` what each message costs on the wire
    beyond its document; ``unit`` the floats per accounting unit (or ``set_unit`` later);
    ``trace`` keeps compute spans, step logs, when each message was read (``read_at``), when
    each lost one was lost (``lost_at``) and the order in which these and the sends happened
    (``happened``);
    ``max_message_bytes`` the largest document an actor may send (``MessageTooLargeError`` at the
    sender above it); ``faults`` seeded loss and
    dropout for the nodes of some roles (``Faults``); ``ledger`` the (empty) ledger to record into,
    e.g. a ``StreamingLedger`` that keeps finished rows on disk (default: a new in-memory
    ``Ledger``); the network sets its framing bytes, and its unit when ``unit`` is given.

    Raises ``NetworkConfigError`` naming the parameter for a ``seed`` that is not a non-negative
    integer (not a float, not a bool), a ``framing_bytes``, ``unit`` or ``max_message_bytes``
    that is not a whole number in range, an unknown ``profile``, ``faults`` that are not a
    ``Faults``, a ``trace`` that is not True or False (:func:`check_flag`), or a ``ledger`` that
    is not a ``Ledger``, not empty or a closed ``StreamingLedger``.
    """

    #: True when ``now()`` and a run's duration are simulated seconds (SimNetwork), False when
    #: they are real seconds measured on this machine (divided by the time scale)
    simulated: bool = False

    context_class: type[Context] = Context

    #: An optional observer of every message (None: off, and then it costs one attribute test per
    #: send). Set it before ``run`` to an object with ``observe(row, payload)``: the transport calls
    #: it once per message copy handed to the network, at send time, with the copy's ledger row
    #: (the list ``Ledger.new_row`` returned: the transport fills its timing fields and status as
    #: the copy moves, so read them after the run) and the ``Payload`` the copies of that send share
    #: (``payload.value()`` decodes it, read-only arrays). An observer must not modify either; it
    #: sees what the network carries, so it is the hook for audits that model an eavesdropper
    #: (``fedsim.privacy``). Actors never see it. ``run`` raises ``NetworkConfigError`` before
    #: anything runs if it has no callable ``observe`` (it failed at the first send, as an
    #: ``ActorError`` of the sending actor); transports that create rows outside this process
    #: (``TcpNetwork``) raise it if a tap is set at all.
    tap: Any = None

    def __init__(self, *, seed: int = 0, profile: str | Profile = "ideal", framing_bytes: int = 0,
                 unit: int | None = None, trace: bool = False,
                 max_message_bytes: int = DEFAULT_MAX_BYTES, faults: Faults | None = None,
                 ledger: Ledger | None = None) -> None:
        # an integer seed only: int() truncated 1.7 to 1 (another run's seed, silently) and
        # failed on NaN without naming the parameter; True is not a seed either
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
            raise NetworkConfigError(f"seed must be a non-negative integer, got {seed!r}")
        framing = whole_number(framing_bytes)
        if framing is None or framing < 0:
            raise NetworkConfigError(f"framing_bytes must be a whole number >= 0, got {framing_bytes!r}")
        units = None if unit is None else whole_number(unit)
        if unit is not None and (units is None or units <= 0):
            raise NetworkConfigError(f"unit must be a positive number of floats, got {unit!r}")
        bound = whole_number(max_message_bytes)
        if bound is None or bound <= 0:
            raise NetworkConfigError(f"max_message_bytes must be a positive whole number, got {max_message_bytes!r}")
        if faults is not None and not isinstance(faults, Faults):
            raise NetworkConfigError(f"faults must be a Faults, got {type(faults).__name__}")
        tracing = check_flag("trace", trace)
        self.seed = int(seed)
        self.profile = get_profile(profile)
        self.framing_bytes = framing
        self.max_message_bytes = bound
        self.faults = faults if faults is not None and faults.active else None
        self._faulted = False  # whether some node got the faults (check_faults)
        if ledger is None:
            ledger = Ledger(unit=units, framing_bytes=self.framing_bytes)
        else:
            if not isinstance(ledger, Ledger):  # (it was "object of type 'int' has no len()")
                raise NetworkConfigError(f"ledger must be a fedsim.kernel.Ledger (or StreamingLedger), got "
                                         f"{type(ledger).__name__} {ledger!r:.80}")
            if getattr(ledger, "closed", False):  # (it recorded until a query or flush failed)
                raise NetworkConfigError(f"the ledger given to a network is a closed StreamingLedger (its file was "
                                         f"{ledger.path})")
            if len(ledger):
                raise NetworkConfigError(f"the ledger given to a network must be empty, it has {len(ledger)} rows")
            ledger.framing_bytes = self.framing_bytes
            if units is not None:
                ledger.unit = units
        self.ledger = ledger
        self.nodes: dict[str, Node] = {}
        self.tracing = tracing
        self.trace: list[tuple] = []  # (node, start, end, label) compute/sleep spans
        self.steps: list[tuple] = []  # (time, node, text)
        # when the receiver's actor took each message (ledger seq -> now() at its receive or
        # gather's return), kept only when tracing: the ledger's ``read`` column says only
        # whether, and a message can wait in the mailbox (a later round's) or in a gather
        self.read_at: dict[int, float] = {}
        # when each lost copy was lost (ledger seq -> now() when the transport decided it), kept
        # only when tracing: the ledger has no column for it, and the step log shows a loss then
        self.lost_at: dict[int, float] = {}
        # what happened, in the order it happened, kept only when tracing: ("send", seq) per
        # ledger row, ("arrive", seq), ("lost", seq), ("read", seq), ("span", i) for trace[i],
        # ("log", i) for steps[i] and ("missing", i) for ledger.missing[i]. Events at one
        # simulated time are in several lists (ledger, trace, steps), each in its own order: this
        # says which of them came first
        self.happened: list[tuple[str, int]] = []
        self.ran = False
        self.ended = False  # see end_run
        #: None before the run; the run's RunResult once ``finish`` built it, also that of a run
        #: that ended in a deadlock (DeadlockError's partial one): the views of a run
        #: (fedsim.studies.trace) show the actors still blocked then from it, whether the network
        #: traced or not. None after a run stopped by an ActorError (no result was made).
        self.result: RunResult | None = None
        self._before_run: list[Callable[[], Any]] = []  # see before_run
        for hook in tuple(_BUILT_HOOKS):
            hook(self)

    # -- configuration ----------------------------------------------------------------------
    def add_node(self, node_id: str, actor: Actor, *args: Any, role: str = "client",
                 link: LinkSpec | None = None, flops: float | None = None, loss: float | None = None,
                 offline_at: float | None = None, **kwargs: Any) -> None:
        """Register ``actor(ctx, *args, **kwargs)`` as node ``node_id``.

        Link, speed and loss default to the network profile's spec for ``role`` (with its
        seeded per-node spread); pass them to override. ``*args`` and ``**kwargs`` go to the
        actor when the run starts (keywords named like ``add_node``'s own, ``role``, ``link``,
        ``flops``, ``loss``, ``offline_at``, are taken by ``add_node``); arguments that do not fit
        its signature are an ``ActorError`` naming the node at ``run``. Does not block.

        Raises ``NetworkConfigError`` for an id that is not a str (5 became node '5', which
        ``ctx.send(5)`` then did not find; None became 'None'), a duplicate or malformed id (also
        one beginning with ``link:``, ``dropout:`` or ``loss:``, the names of the kernel's own
        random streams), a ``role`` that is not a non-empty str, an actor that is not callable,
        invalid spec values, or a network that has already run.
        """
        if not isinstance(node_id, str):
            raise NetworkConfigError(f"a node id is a str, got {type(node_id).__name__} {node_id!r}")
        node_id = str(node_id)
        if not isinstance(role, str) or not role:
            raise NetworkConfigError(f"node {node_id!r}: role must be a non-empty str, got {role!r}")
        if self.ran:
            raise NetworkConfigError("cannot add nodes after the network has run")
        if node_id in self.nodes:
            raise NetworkConfigError(f"duplicate node id {node_id!r}")
        if not _NODE_ID.match(node_id):
            raise NetworkConfigError(f"node id {node_id!r} may only use letters, digits and _ . : / -")
        if node_id.startswith(_KERNEL_STREAMS):
            # the kernel derives its own generators from (seed, "link:" + id) and the like: a node
            # named "loss:c1" would draw, as its ctx.rng, the very numbers that decide c1's losses
            raise NetworkConfigError(f"node id {node_id!r} begins like one of the kernel's random streams "
                                     f"({', '.join(_KERNEL_STREAMS)}): choose another name")
        if not callable(actor):
            raise NetworkConfigError(f"actor of node {node_id!r} is not callable: {actor!r}")
        try:
            base = self.profile.draw(role, node_rng(self.seed, f"link:{node_id}") if self.profile.sigma else None)
        except NetworkConfigError as err:  # (the profile does not know the node)
            raise NetworkConfigError(f"node {node_id!r}: {err}") from None
        faults = self.faults
        if faults is not None and str(role) in faults.roles:
            self._faulted = True
            if loss is None:
                loss = faults.loss
            if offline_at is None:
                offline_at = faults.offline_at(node_rng(self.seed, f"dropout:{node_id}"))
        if link is None and flops is None and loss is None and offline_at is None:
            spec = base  # shared: no per-node copy for the common case (memory per idle actor)
        else:
            try:
                spec = NodeSpec(
                    link=base.link if link is None else link,
                    flops=base.flops if flops is None else flops,
                    loss=base.loss if loss is None else loss,
                    offline_at=offline_at,
                )
            except NetworkConfigError as err:  # (NodeSpec does not know the node)
                raise NetworkConfigError(f"node {node_id!r}: {err}") from None
        self.nodes[node_id] = Node(node_id, str(role), spec, actor, args, kwargs or None)
        self.ledger.set_role(node_id, str(role))

    def before_run(self, fn: Callable[[], Any]) -> None:
        """Register ``fn()`` to be called once, in the process that calls ``run``, before any
        actor starts: for work every actor's process would otherwise repeat. Functions are called
        in the order they were registered; one registered twice is called once. ``TcpNetwork``
        calls them just before it forks its worker processes, which then inherit what they
        loaded instead of each loading its own copy (the built-in protocols whose actors call
        compiled kernels register ``fedsim.math.jit.warm_up``: numba's compiler initialised once
        for all the workers; in each it took 50-90 MB and a quarter of a second of CPU, docs/
        network-model.md); ``SimNetwork`` and ``AsyncioNetwork`` call them at the start of
        ``run``, before their clocks start. What ``fn`` raises propagates from ``run``, before
        any actor starts. Raises ``TypeError`` for a ``fn`` that is not callable, and
        ``FedsimError`` once the network has run."""
        if not callable(fn):
            raise TypeError(f"before_run takes a function of no arguments, got {fn!r}")
        if self.ran:
            raise FedsimError("before_run: the network has run already")
        if fn not in self._before_run:
            self._before_run.append(fn)

    @property
    def before_run_calls(self) -> tuple[Callable[[], Any], ...]:
        """The functions registered with :meth:`before_run`, in the order they are called."""
        return tuple(self._before_run)

    def call_before_run(self) -> None:
        """Call the functions registered with :meth:`before_run` (a transport's ``run`` calls
        this once, after its checks and before any actor starts, or before it forks)."""
        for fn in tuple(self._before_run):
            fn()

    def set_unit(self, floats: int) -> None:
        """Declare how many floats make one accounting unit (the latent dimension d): the ledger's
        ``units`` columns (NaN without it). Raises ``NetworkConfigError`` unless ``floats`` is a
        positive whole number. Also after the run: it changes only how the ledger counts."""
        unit = whole_number(floats)
        if unit is None or unit <= 0:
            raise NetworkConfigError(f"unit must be a positive number of floats, got {floats!r}")
        self.ledger.unit = unit

    def node_spec(self, node_id: str) -> NodeSpec:
        """The spec (link, speed, loss, dropout) node ``node_id`` runs with."""
        return self.node(node_id).spec

    def node(self, node_id: str) -> Node:
        """The kernel-side state of ``node_id``; raises ``UnknownNodeError``."""
        try:
            return self.nodes[node_id]
        except KeyError:
            raise UnknownNodeError(f"unknown node {node_id!r}") from None

    def rng_for(self, node_id: str) -> np.random.Generator:
        """The generator actor ``node_id`` gets as ``ctx.rng``."""
        return node_rng(self.seed, node_id)

    # -- what a transport implements ----------------------------------------------------------
    def now(self) -> float:
        """The transport's clock: seconds since the run started."""
        raise NotImplementedError  # pragma: no cover

    def post(self, src: Node, dsts: tuple, kind: str, encoded: Encoded, anonymous: bool) -> None:
        """Send ``encoded`` (a message of ``kind``) from ``src`` to every node of ``dsts``, in
        that order: one ledger row and one envelope per destination, sharing one ``Payload``.
        Must not block; raises ``UnknownNodeError`` (before sending anything) for an unknown
        destination. Once the run has ended (``end_run``) posts are dropped before they get
        here."""
        raise NotImplementedError  # pragma: no cover

    def wait(self, node: Node, kind, timeout: float | None):
        """An awaitable that resumes ``node`` with the next envelope matching ``kind`` (see
        ``matches``), or ``None`` once ``timeout`` seconds (> 0, or None: no limit) have passed.
        The envelope is one handed to ``node`` after the call: ``receive`` calls it when ``take``
        found nothing, but the base class's ``collect`` also with envelopes of ``kind`` in the
        mailbox, of a later round than its gather's, left there for their own round: a ``wait``
        that took from the mailbox would get the same one back for ever. Raises ``RunEnded`` (``fedsim.kernel.node.
        offline_wait``) for a node whose dropout closed its actor, and once the run has ended
        (``end_run``)."""
        raise NotImplementedError  # pragma: no cover

    async def sleep(self, node: Node, seconds: float) -> None:
        """Let ``seconds`` (finite, >= 0) of the transport's time pass for ``node``: the actor
        resumes after them (simulated seconds on SimNetwork, ``seconds * time_scale`` real ones
        on the real-time transports). Raises ``RunEnded`` as ``wait`` does."""
        raise NotImplementedError  # pragma: no cover

    async def compute(self, node: Node, flops: float, label: str) -> None:
        """Charge ``flops`` of local work to ``node``: SimNetwork resumes the actor after ``flops
        / node.spec.flops`` simulated seconds (at once for 0 FLOPs or an infinite speed); the
        real-time transports yield to their loop once. ``Context.compute`` counts the FLOPs once
        it returns. Raises ``RunEnded`` as ``wait`` does."""
        raise NotImplementedError  # pragma: no cover

    def run(self, *, strict: bool = True) -> RunResult:
        """Run every actor until all have finished or nothing can happen any more. With
        ``strict`` a run that ends with actors blocked raises ``DeadlockError``; an actor that
        raises makes it raise ``ActorError``. Calls ``end_run`` before it closes the actors
        still running (what their ``finally`` blocks send is dropped)."""
        raise NotImplementedError  # pragma: no cover

    # -- shared helpers for transports ----------------------------------------------------------
    def check_faults(self) -> None:
        """Raise ``NetworkConfigError`` if the network has faults but none of its nodes had one
        of their roles when added: the faults would silently apply to no node (a misspelt role,
        a protocol whose nodes have other roles). Transports call it before they run."""
        f = self.faults
        if f is not None and self.nodes and not self._faulted:
            roles = ", ".join(sorted({n.role for n in self.nodes.values()}))
            raise NetworkConfigError(f"faults apply to the roles {f.roles!r}, which no node has (roles: {roles})")

    def check_tap(self) -> None:
        """Raise ``NetworkConfigError`` if ``tap`` is set to something without a callable
        ``observe``: the first message sent would otherwise stop the run with an
        ``AttributeError`` blamed on its sender. Transports that call the tap call this before
        they run."""
        tap = self.tap
        if tap is not None and not callable(getattr(tap, "observe", None)):
            raise NetworkConfigError(f"the network's tap must have an observe(row, payload) method, got {tap!r}")

    def end_run(self) -> None:
        """Mark the run as over. A transport calls this once the run's outcome is fixed (its
        ``RunResult`` built, or the error that ends it raised), before it closes or cancels the
        actors still running: their ``finally`` blocks run then, and nothing they do is recorded
        any more. ``post`` drops what they send (it would get a ledger row sent after the end,
        ``in_flight`` for ever) and ``record_missing`` what their gathers miss; a wait (``wait``,
        ``collect``, ``sleep``, ``compute``) raises ``RunEnded``, which the transport's closing
        absorbs. Idempotent."""
        self.ended = True
        # instance attributes over the transport's own methods, which (the per-message hot path)
        # thus need no test for a state that only exists once the run is over
        self.post = _dropped_post
        self.wait = self.collect = self.sleep = self.compute = _no_wait


    @staticmethod
    def take(node: Node, kind) -> Envelope | None:
        """The oldest mailbox envelope matching ``kind`` (removed), or None. Never blocks."""
        box = node.mailbox
        if box:
            if kind is None or matches(kind, box[0].kind):
                return box.popleft()
            for i, envl in enumerate(box):
                if matches(kind, envl.kind):
                    del box[i]
                    return envl
        return None

    @staticmethod
    def offer_queued(node: Node, kind, col, stop: bool = True) -> None:
        """Offer ``col`` (a ``Collector`` or ``InOrder``) the mailbox's envelopes of ``kind``,
        oldest first (until it is complete, with ``stop``). Those it takes or discards leave the
        mailbox; those of a later round than its own (``offer`` returns ``LATER``) stay where
        they are, in arrival order. Never blocks."""
        box = node.mailbox
        if not box or (stop and col.complete):
            return
        i = 0
        while i < len(box):
            env = box[i]
            if kind is None or matches(kind, env.kind):
                r = col.offer(env)
                if r is LATER:
                    i += 1
                    continue
                if i:
                    del box[i]
                else:
                    box.popleft()
                if r and stop:
                    return
            else:
                i += 1

    async def collect(self, node: Node, kind, col, timeout: float | None) -> None:
        """Offer ``col`` (a ``Collector`` or ``InOrder``) each envelope of ``kind`` as it arrives,
        until it is complete or ``timeout`` seconds (> 0, or None for no limit) have passed.
        What is in the mailbox is offered first (``offer_queued``). An envelope of a later round
        than ``col``'s is not taken: it goes to the mailbox (a transport whose ``wait`` returns
        one has it appended). With a ``wait`` that returns each message this generic form resumes
        the actor once per message; on the transports whose waiters are futures ``hand_over``
        offers each message to ``col`` itself as it arrives and resolves the wait (with None) once
        ``col`` is complete, so the actor resumes once, and a message that comes after the
        timeout fired (the wait is over) stays in the mailbox, as on SimNetwork, which overrides
        this method."""
        end = None if timeout is None else self.now() + timeout
        node.gathering = col
        try:
            while not col.complete:
                self.offer_queued(node, kind, col)
                if col.complete:
                    return
                left = None if end is None else end - self.now()
                if left is not None and left <= 0:
                    return
                env = await self.wait(node, kind, left)
                if env is None:
                    return
                if col.offer(env) is LATER:
                    box = node.mailbox
                    if box is None:
                        box = node.mailbox = deque()
                    box.append(env)
        finally:
            node.gathering = None

    def actor_coroutine(self, node: Node) -> Coroutine:
        """Give ``node`` its context (``node.ctx``) and call its actor: the coroutine the
        transport runs. Raises ``FedsimError`` naming the node if the actor is not an async
        function (the call returned anything but a coroutine), and ``ActorError`` naming the node
        (the original exception as ``__cause__``) if the call itself raises: arguments that do
        not fit the actor's signature (``add_node``'s ``*args``/``**kwargs``; a bare
        ``TypeError`` naming no node before, where ``TcpNetwork`` named it), or a plain
        function's body raising. Shared so that every transport refuses the same actors with the
        same error."""
        node.ctx = self.context_class(self, node)
        try:
            coro = node.actor(node.ctx, *node.args, **(node.kwargs or {}))
        except Exception as err:
            raise ActorError(node.id, node.role, err) from err
        if type(coro) is not CoroutineType and not isinstance(coro, Coroutine):
            raise FedsimError(f"actor of node {node.id!r} is not an async function "
                              f"(it returned {type(coro).__name__})")
        return coro

    def check_size(self, src: Node, kind: str, encoded: Encoded) -> None:
        """Raise ``MessageTooLargeError`` (naming ``src``) if ``encoded`` exceeds
        ``max_message_bytes``."""
        if len(encoded.data) > self.max_message_bytes:
            raise MessageTooLargeError(src.id, kind, len(encoded.data), self.max_message_bytes)

    def destinations(self, dsts: tuple) -> list[Node] | tuple[Node]:
        """The nodes of ``dsts``, all looked up before anything is sent (an unknown id raises
        ``UnknownNodeError``, a destination that is not hashable ``TypeError``, and nothing is
        half-sent)."""
        nodes = self.nodes
        try:
            if len(dsts) == 1:  # send(): no list comprehension (a function call in 3.11)
                return (nodes[dsts[0]],)
            return [nodes[d] for d in dsts]
        except KeyError:
            bad = next(d for d in dsts if d not in nodes)
            raise UnknownNodeError(f"message addressed to unknown node {bad!r}") from None
        except TypeError:  # an unhashable destination (a list given to send): "unhashable type: 'list'" said nothing
            bad = next(d for d in dsts if not isinstance(d, str))
            raise TypeError(f"a destination is a node id (str), got {type(bad).__name__} {bad!r}"
                            + ("; ctx.broadcast sends to several" if isinstance(bad, (list, tuple, set)) else "")) from None

    def draw_loss(self, src: Node) -> bool:
        """Whether the next message copy ``src`` sends is lost (probability ``src.spec.loss``).

        The draws of each sender come from its own generator, derived from (seed, "loss:" +
        node id), one per copy in the order the sender sends them: a message's fate depends only
        on who sent it and its number among that sender's messages, not on how the transport
        interleaves senders, so every transport loses exactly the same messages."""
        p = src.spec.loss
        if not p:
            return False
        rng = src.loss_rng
        if rng is None:
            rng = src.loss_rng = node_rng(self.seed, f"loss:{src.id}")
        return rng.random() < p

    def record_missing(self, node: Node, kind: str, senders: list, rnd: int | None = None,
                       expected: int | None = None, wait: int | None = None) -> None:
        """Record in the ledger that ``node``'s wait for ``kind`` (of round ``rnd``; None: the
        node's current round), which asked for ``expected`` messages, ended without ``senders``
        (nothing once the run has ended: ``end_run``): one ``Missing`` each, with ``expected``
        and ``arrived`` (``expected - len(senders)``; both None without ``expected``) and the
        wait's number among the node's gathers, ``wait`` (``Node.waits`` when it began). A wait for
        round r records round r even if the node has moved on (it read a later round's message
        before), which would otherwise label the missing senders with it."""
        if self.ended:
            return
        t = self.now()
        rnd = node.round if rnd is None else int(rnd)
        arrived = None if expected is None else expected - len(senders)
        missing = self.ledger.missing
        for s in senders:
            if self.tracing:
                self.happened.append(("missing", len(missing)))
            missing.append(Missing(rnd, node.id, s, kind, t, expected, arrived, wait))

    def log(self, node: Node, text: str) -> None:
        """Add a step-log line (kept only when the network traces)."""
        if self.tracing:
            self.happened.append(("log", len(self.steps)))
            self.steps.append((self.now(), node.id, text))

    def waits_for(self, node: Node) -> str:
        """What a blocked ``node`` waits for, in words (for ``DeadlockError``)."""
        col = node.gathering
        kind = self.waiting_kind(node)
        if col is not None:
            offline = {n.id for n in self.nodes.values() if n.offline}
            text = f"gather {kind!r} for {col.describe()}"
            gone = sorted(s for s in (col.pending or ()) if s in offline)
            if gone:
                text += f" (offline: {', '.join(gone[:5])}{', ...' if len(gone) > 5 else ''})"
            return text + self._waiting_elsewhere(node, kind, col)
        return f"receive {kind!r}" if kind is not None else "receive (any kind)"

    @staticmethod
    def _waiting_elsewhere(node: Node, kind, col) -> str:
        """For ``waits_for``: the messages a gather of ``round`` waits for that sit in ``node``'s
        mailbox labelled with a later round (``LATER``), from its pending senders (any sender for
        a ``count`` gather), in words; '' if none. A reply to a message of an earlier round (a
        setup exchange at round -1) is labelled with its sender's round, not the message's."""
        rnd = getattr(col, "round", None)
        if rnd is None or not node.mailbox:
            return ""
        pending = col.pending
        later = [e for e in node.mailbox if matches(kind, e.kind) and e.round > rnd
                 and (pending is None or e.src in pending)]
        if not later:
            return ""
        rounds = sorted({e.round for e in later})
        senders = sorted({e.src for e in later})
        names = ", ".join(senders[:5]) + (f", ... ({len(senders) - 5} more)" if len(senders) > 5 else "")
        kinds = sorted({e.kind for e in later})
        what = "their" if pending is not None else ""
        return (f"; {what}{' ' if what else ''}{len(later)} {'/'.join(repr(k) for k in kinds)} "
                f"{'messages wait' if len(later) != 1 else 'message waits'} in its mailbox labelled round"
                f"{'s' if len(rounds) > 1 else ''} {', '.join(map(str, rounds))}, not {rnd}: {names} (a node labels "
                "what it sends with the largest round it began or received, 0 at the start: the senders answer a "
                f"message of round {rnd} after ctx.begin_round(msg.round))")

    def waiting_kind(self, node: Node):
        """The kind(s) ``node`` is blocked on (transports that store waits differently override)."""
        w = node.waiter
        return w[0] if w is not None else None

    def finish(self, duration: float, *, strict: bool, drained: bool = True) -> RunResult:
        """The ``RunResult`` of a run that stopped at ``duration``. With ``strict`` and
        ``drained`` (nothing left that could happen), unfinished actors are a deadlock: raises
        ``DeadlockError`` carrying the partial result; either is kept in ``result``. Call it
        before closing the coroutines (it reads what they wait for)."""
        nodes = self.nodes.values()
        results = {n.id: n.result for n in nodes if n.done}
        # in node-id order, not in the order the nodes were added (which build code may choose)
        unfinished = sorted(n.id for n in nodes if not n.done and not n.offline)
        offline = sorted(n.id for n in nodes if n.offline)
        # what each waits for, the actors of the roles with the fewest blocked first (a deadlock's
        # report shows 20: the server waiting for its gather, not only the first of 30 clients
        # waiting for its model), then in node-id order
        per_role: dict[str, int] = {}
        for nid in unfinished:
            per_role[self.nodes[nid].role] = per_role.get(self.nodes[nid].role, 0) + 1
        shown = sorted(unfinished, key=lambda nid: (per_role[self.nodes[nid].role], nid))
        blocked = {nid: self.waits_for(self.nodes[nid]) for nid in shown} if drained else {}
        flops = {n.id: dict(n.flops) for n in nodes if n.flops}
        res = RunResult(results, unfinished, offline, duration, self.ledger, self.trace, self.steps, blocked, flops)
        self.result = res
        if strict and drained and unfinished:
            raise DeadlockError(blocked, duration, offline, res, self.lost_to(unfinished))
        return res

    def lost_to(self, nodes: list[str]) -> dict[str, str]:
        """For each of ``nodes`` that messages addressed to it were lost on the way to: how many,
        and the last (kind, sender, send time, why), for ``DeadlockError``: a client whose server's
        ``stop`` was lost waits for ever, and the error says why. One pass over the lost rows, made
        only at a deadlock."""
        last: dict[str, dict] = {}
        count: dict[str, int] = {}
        for r in self.ledger.select(fate="lost", dst=nodes).records():
            last[r["dst"]] = r
            count[r["dst"]] = count.get(r["dst"], 0) + 1
        out = {}
        for node in nodes:
            r = last.get(node)
            if r is not None:
                n = count[node]
                out[node] = (f"{n} message{'s' if n != 1 else ''} to it lost, the last {r['kind']!r} from "
                             f"{r['src']!r} sent at t = {clock_text(r['send_time'])} s ({r['note'] or 'lost'})")
        return out
