"""``SimNetwork``: actors as native coroutines driven by an event queue in virtual time.

Each actor coroutine is stepped by ``_ActorProcess``: whatever the coroutine yields must be the
kernel's park marker (the kernel's own awaitables yield exactly that); the process resumes the
coroutine with the awaited call's value when the kernel says so. Anything else an actor awaits
(an asyncio future, ``asyncio.sleep``) is reported as ``ForeignAwaitError`` naming the actor and
the object.

Messages travel through a ``LinkModel``; the default ``FifoLinkModel`` is store-and-forward with
FIFO egress and ingress ports (docs/network-model.md). Everything is deterministic: events at
equal times are processed in scheduling order (``EventQueue``), and the only randomness (loss
draws, per-node spread) comes from generators derived from the network seed.

The link-model interface (public; docs/network-model.md, "Writing a link model"):
``LinkModel.transmit(net, src, dst, envelope)`` is called once per (message, receiver) at send
time; it fills the ledger row's ``TX_START``, ``TX_END`` and ``RX_START`` fields and eventually
calls ``net.deliver(envelope, dst)`` or ``net.lose(envelope, note)``, scheduling its own steps
with ``net.schedule(delay, fn, *args)`` and reading ``net.now()``; ``net.draw_loss(src)`` is the
seeded loss draw.
"""

from __future__ import annotations

import gc
import math
import numbers
from asyncio import CancelledError
import traceback
from collections import deque
from functools import partial
from typing import Any

import numpy as np

from .envelope import LATER, Envelope, Payload
from .errors import ActorError, FedsimError, ForeignAwaitError, NetworkConfigError, RunEnded
from .events import EventQueue, describe_event
from .flows import FairShareLinkModel
from .linkmodel import LinkModel, check_time
from .ledger import ARRIVAL, DST, NOTE, RX_START, SEND_T, SEQ, STATUS, TX_END, TX_START
from .network import Network, RunResult, check_flag
from .node import Node, offline_wait
from .registry import LINK_MODEL_REGISTRY, register_link_model, register_transport
from ..units import plural

__all__ = ["FifoLinkModel", "LINK_MODELS", "LinkModel", "SimNetwork", "get_link_model"]

_INF = math.inf
_NAN = math.nan
# the ledger times a link model of the user's own must keep in order (_check_order): pairs (a, b)
# of positions in _TIME_NAMES where a may not come after b
_TIME_NAMES = ("send_time", "tx_start", "tx_end", "rx_start", "arrival_time")
_ORDER = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 4), (3, 4))
# how far below a model's own end time the clock may read when the model scheduled its delivery
# after `end - now` (plus latencies) seconds: each of those few float operations rounds by half an ulp
_CLOCK_ROUNDING_ULPS = 4
_GC_GEN0 = 1_000_000


_PARK = object()  # what a parked actor yields: "resume me when the kernel says so"


class _Park:
    """Awaitable that suspends the actor until the kernel resumes it with a value."""

    __slots__ = ()

    def __await__(self):
        return (yield _PARK)


_park = _Park()


class _ActorProcess:
    """Steps one actor coroutine (a minimal, coroutine-aware process of the event queue).

    The coroutine may only yield ``_PARK`` (through the kernel's awaitables); the kernel later
    calls ``step`` with the value the awaited call returns. Anything else it yields is an
    object this network cannot drive: the actor gets ``ForeignAwaitError`` at its ``await``.
    """

    __slots__ = ("node", "coro", "net")

    def __init__(self, node: Node, coro, net: "SimNetwork") -> None:
        self.node = node
        self.coro = coro
        self.net = net

    def describe(self) -> str:
        """Whose steps these are (for the event queue's error messages)."""
        return self.node.describe()

    def step(self, value: Any = None, exc: BaseException | None = None) -> None:
        node = self.node
        if node.done or node.offline:
            return
        net = self.net
        net.active_at = net.queue.now  # an actor moves: the run is still going at this instant
        coro = self.coro
        while True:
            try:
                target = coro.send(value) if exc is None else coro.throw(exc)
            except StopIteration as stop:
                node.done = True
                node.result = stop.value
                return
            except ForeignAwaitError:
                raise  # already names the actor and what it awaited
            except RuntimeError as err:
                if "no running event loop" in str(err):
                    raise ForeignAwaitError(
                        f"actor {node.id!r} (role {node.role!r}) awaited {_origin(err)}, an asyncio "
                        "primitive, on SimNetwork; use ctx.sleep/ctx.receive instead"
                    ) from err
                raise ActorError(node.id, node.role, err) from err
            except (Exception, CancelledError) as err:  # (CancelledError, raised by the actor's own
                # code, is a BaseException: it left run() naming no actor)
                raise ActorError(node.id, node.role, err) from err
            if target is _PARK:
                return
            value, exc = None, ForeignAwaitError(
                f"actor {node.id!r} (role {node.role!r}) awaited {target!r:.120}, which SimNetwork "
                "cannot drive; an actor may only await its ctx methods"
            )


def _origin(err: BaseException) -> str:
    """Name of the innermost Python function in ``err``'s traceback (what the actor awaited)."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return "an unknown object"
    f = frames[-1]
    mod = f.filename.replace("\\", "/").rsplit("/", 2)
    where = ".".join(p.removesuffix(".py") for p in mod[-2:])
    return f"{where}.{f.name}()"


class FifoLinkModel(LinkModel):
    """Store-and-forward: the message holds the sender's egress port for ``size/uplink``
    (FIFO behind earlier messages), propagates ``src.latency + dst.latency``, then holds the
    receiver's ingress port for ``size/downlink`` (FIFO in order of arrival at the port)."""

    name = "fifo"

    def transmit(self, net: "SimNetwork", src: Node, dst: Node, envl: Envelope) -> None:
        now = net.queue.now
        row = envl.row
        size = envl.nbytes
        up = src.spec.link.uplink
        start = src.egress_free if src.egress_free > now else now
        end = start if up == _INF else start + size / up
        if not end < _INF:  # (one comparison on the hot path; also NaN)
            check_time(end, envl, "its last byte would leave", f"{size} bytes from t = {start!r} s at {src.id!r}'s "
                       f"uplink of {up!r} bytes/s")
        src.egress_free = end
        off = src.spec.offline_at
        if off is not None and end > off:
            # the sender drops out before its last byte leaves: the copy is cut at off (or never
            # starts), never reaches the receiver's port and so never holds it
            if start < off:
                row[TX_START] = start
                row[TX_END] = off
            if src.spec.loss and net.draw_loss(src):  # drawn all the same: draws key on message numbers
                net.lose(envl, "link loss")
            else:
                net.schedule(off - now, net.lose, envl, "sender offline")
            return
        row[TX_START] = start
        row[TX_END] = end
        if src.spec.loss and net.draw_loss(src):
            net.lose(envl, "link loss")
            return
        at_port = end + src.spec.link.latency + dst.spec.link.latency
        if not at_port < _INF:
            check_time(at_port, envl, "it would reach the receiver's port",
                       f"sent until t = {end!r} s, latencies {src.spec.link.latency!r} s of {src.id!r} and "
                       f"{dst.spec.link.latency!r} s of {dst.id!r}")
        down = dst.spec.link.downlink
        if down == _INF:
            row[RX_START] = at_port
            net.schedule(at_port - now, net.deliver, envl, dst)
        else:
            net.schedule(at_port - now, self._at_ingress, net, envl, dst)

    @staticmethod
    def _at_ingress(net: "SimNetwork", envl: Envelope, dst: Node) -> None:
        if net.is_offline(dst):  # lost here, without holding the port of a node that is gone
            net.lose(envl, "receiver offline")
            return
        now = net.queue.now
        start = dst.ingress_free if dst.ingress_free > now else now
        end = start + envl.nbytes / dst.spec.link.downlink
        if not end < _INF:
            check_time(end, envl, "its last byte would arrive", f"{envl.nbytes} bytes from t = {start!r} s at "
                       f"{dst.id!r}'s downlink of {dst.spec.link.downlink!r} bytes/s")
        dst.ingress_free = end
        envl.row[RX_START] = start
        net.schedule(end - now, net.deliver, envl, dst)


LINK_MODELS = LINK_MODEL_REGISTRY
"""The registered link models (``fedsim.kernel.registry``): as a mapping, name -> description
(``fifo``, ``fair``, ``tcp``, then those plug-ins register). A live view: it was a plain dict of
the three built-in names."""

register_link_model("fifo", FifoLinkModel, "store-and-forward, FIFO egress then FIFO ingress (the default)")
register_link_model("fair", partial(FairShareLinkModel, tcp=False),
                    "flow level: max-min fair sharing of every port, pipelined (fedsim.kernel.flows)")
register_link_model("tcp", partial(FairShareLinkModel, tcp=True),
                    "flow level as 'fair', plus each message's TCP handshake and slow start")


def get_link_model(model: "LinkModel | str", options: Any = ()) -> "LinkModel":
    """A link model by name (registered: ``LINK_MODELS``, ``register_link_model``), or ``model``
    itself if it is one. A name gives a fresh instance, its factory's (link models keep per-run
    state: an instance serves one network, which ``LinkModel.bind`` enforces), called with
    ``options`` (a mapping or (key, value) pairs: the keyword arguments of ``--link-option
    KEY=VALUE``, ``NetSpec(link_options=...)``; none by default). Raises ``NetworkConfigError``
    (an unknown name: the registered ones, and the closest; a factory that raises, naming the
    model and the options it was given; options with an instance)."""
    options = dict(options)
    if options and not isinstance(model, str):
        raise NetworkConfigError(f"link model options ({', '.join(options)}) go with a registered name, not with "
                                 f"{type(model).__name__} {model!r:.80}: give the instance made with them")
    if isinstance(model, LinkModel):
        if type(model).transmit is LinkModel.transmit:
            raise NetworkConfigError(f"link model {type(model).__name__} does not define transmit(net, src, dst, "
                                     "envelope), the one method a LinkModel must implement")
        return model
    if isinstance(model, str) and model in LINK_MODEL_REGISTRY:
        entry = LINK_MODEL_REGISTRY.entry(model)
        given = f" with options {', '.join(f'{k}={v!r}' for k, v in options.items())}" if options else ""
        try:
            made = entry.factory(**options)
        except FedsimError as err:
            if not options:
                raise
            raise NetworkConfigError(f"link model {model!r}{given}: {err}") from err
        except Exception as err:  # (it left the command with a traceback naming no link model)
            frames = traceback.extract_tb(err.__traceback__)
            at = f" ({frames[-1].filename}, line {frames[-1].lineno}, in {frames[-1].name})" if frames else ""
            what = getattr(entry.factory, "__qualname__", None) or f"{entry.factory!r:.120}"
            raise NetworkConfigError(f"link model {model!r}{given}: its registered factory {what} raised "
                                     f"{type(err).__name__}: {err}{at}") from err
        if not isinstance(made, LinkModel):
            raise NetworkConfigError(f"link model {model!r}: its registered factory {entry.factory!r} returned "
                                     f"{type(made).__name__} {made!r}, not a fedsim.kernel.LinkModel")
        if made.name == LinkModel.name:  # (a class without a name of its own: errors name it as registered)
            made.name = model
        return get_link_model(made)  # (checked as an instance given directly is)
    if isinstance(model, type) and issubclass(model, LinkModel):
        raise NetworkConfigError(f"link model {model.__name__} is a class: give an instance, "
                                 f"link_model={model.__name__}(...) (each network needs a new one), or register "
                                 f"it (register_link_model) and give its name")
    if not isinstance(model, str) and hasattr(model, "transmit"):
        raise NetworkConfigError(f"link model {model!r} is not a fedsim.kernel.LinkModel: subclass it (it "
                                 "provides node_offline and the name)")
    raise NetworkConfigError(LINK_MODEL_REGISTRY.unknown(model, "a fedsim.kernel.LinkModel instance"))


def _check_until(value: Any) -> float:
    """``run``'s ``until`` as a float, or ``NetworkConfigError`` before anything runs: the event
    queue refused 0, a negative number and NaN only once the actors had been started (the network
    then counted as run), a str with a bare float() error, and took True for 1 second."""
    t = math.nan
    if not isinstance(value, (bool, str, bytes)):
        try:
            t = float(value)
        except (TypeError, ValueError):
            pass
    if not t > 0:  # also NaN
        raise NetworkConfigError(f"SimNetwork.run: until must be a positive number of simulated seconds or None, "
                                 f"got {value!r}")
    return t


class SimNetwork(Network):
    """A deterministic discrete-event network in virtual time.

    ``SimNetwork(seed=0, profile="ideal", framing_bytes=0, unit=None, trace=False,
    max_message_bytes=..., link_model=FifoLinkModel(), queue=EventQueue())``; then ``add_node``
    and ``run``. ``queue``: any object with ``EventQueue``'s interface (``now``, which a drained
    run also sets, to its duration; ``schedule``, ``hold``, ``release``, ``run``; ``pending``
    optional), e.g. one backed by another scheduler for comparison (benchmarks/scheduler.py).

    A run's duration (``RunResult.duration``, and ``now()`` once it has run) is the time of its
    last event that did something: an actor's step, a delivery, a loss, a node going offline.
    Events that find nothing left to do (the timeout of a receive answered earlier, a flow end a
    link model has since moved, the dropout of a node that had finished) neither lengthen it nor,
    when only they are left at ``until``, hide a deadlock.
    """

    simulated = True

    def __init__(self, *, link_model: LinkModel | str | None = None, queue: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.queue = EventQueue() if queue is None else queue
        # the queue's own method, not a wrapper: every message schedules through it
        self.schedule = self.queue.schedule
        self.link_model = get_link_model(link_model or "fifo")
        self.link_model.bind(self)  # (an instance serves one network: refused if another has it)
        # what post calls per copy: the model's own bound method (one attribute lookup), or, for a
        # link model of the user's own, the same call naming the model in what it raises
        self._transmit = self.link_model.transmit
        # when the last event that did something happened (an actor step, a delivery, a loss, a
        # node going offline): the run's duration. Events that find nothing to do (a timeout of
        # a receive answered long before, a flow end a link model has moved, the dropout of a
        # node that has finished) do not lengthen the run.
        self.active_at = 0.0
        self.settled = 0  # copies a link model of the user's own delivered or lost (the others are in flight)
        self._checked = type(self.link_model) not in (FifoLinkModel, FairShareLinkModel)
        if self._checked:
            # a link model of the user's own: each copy it settles is checked (delivered or lost
            # once, timing filled in and in order) and counted, and a drained run must have settled them all;
            # what it schedules is checked too (a number of seconds, a callable);
            # the built-in ones are tested to do so and skip this, which would cost every message
            # of every run (fedrec_split: 1-3 %)
            self.deliver = self._deliver_checked
            self.lose = self._lose_checked
            self.schedule = self._schedule_checked  # (the kernel's own events go to the queue directly)
            self._transmit = self._transmit_checked

    # -- the link-model interface -------------------------------------------------------------
    def now(self) -> float:
        """Simulated seconds since the run started."""
        return self.queue.now

    def schedule(self, delay: float, fn, *args) -> None:
        """Call ``fn(*args)`` after ``delay`` (>= 0) simulated seconds; FIFO among equal times.
        ``delay`` is a number of seconds (an int or float; NumPy's too) and ``fn`` a callable:
        for a link model of the user's own that is checked (``NetworkConfigError``, naming the model,
        also for a delay whose end is in the past or not finite, which the queue refuses with a
        ``ValueError`` naming the event), and what its events raise names it; for the built-in ones,
        which pass floats, not (the event queue's own method is called directly)."""
        self.queue.schedule(delay, fn, *args)

    def _schedule_checked(self, delay: Any, fn: Any, *args: Any) -> None:
        """``schedule`` for a link model of the user's own: refuses a ``delay`` that is no number
        (True was 1 s and False 0 s, silently; "1" or None a bare "unsupported operand" TypeError
        from the queue) and an ``fn`` that is not callable (the queue called it at the event's
        time: "'str' object is not callable"), naming the model and the event; a NumPy number is
        taken as a float, so that the clock and the ledger's times stay floats."""
        if not callable(fn):
            raise NetworkConfigError(
                f"link model {self._model_class_label()} scheduled {type(fn).__name__} {fn!r:.80}, which is not "
                "callable: net.schedule(delay, fn, *args) calls fn(*args) after delay seconds")
        cls = delay.__class__
        if cls is not float and cls is not int:
            if not isinstance(delay, numbers.Real) or isinstance(delay, (bool, np.bool_)):
                raise NetworkConfigError(
                    f"link model {self._model_class_label()} scheduled event {describe_event(fn, args)} after "
                    f"{type(delay).__name__} {delay!r:.80}: net.schedule(delay, fn, *args) takes a delay in seconds, "
                    "a number (int or float; NumPy's too), not a bool, str or bytes")
            delay = float(delay)
        now = self.queue.now
        if not now <= now + delay < _INF:  # (also NaN) the queue refused it naming the event, not the model
            why = "not finite" if not now + delay < _INF else "before the current time"
            raise NetworkConfigError(
                f"link model {self._model_class_label()} scheduled event {describe_event(fn, args)} after {delay!r} "
                f"s, at t = {now!r} + {delay!r} = {now + delay!r} s, which is {why}: net.schedule takes a delay >= 0 "
                "whose end is finite")
        if fn != self.deliver and fn != self.lose:
            # one of the model's own steps: what it raises names the model (net.deliver and net.lose
            # name it themselves)
            self.queue.schedule(delay, self._model_event, fn, args)
        else:
            self.queue.schedule(delay, fn, *args)

    def _transmit_checked(self, net: Any, src: Node, dst: Node, envl: Envelope) -> None:
        """``transmit`` of a link model of the user's own, what it raises naming the model and the
        message (it was the sending actor's error, naming only the actor)."""
        try:
            self.link_model.transmit(net, src, dst, envl)
        except Exception as err:
            named = self._model_raised(err, "transmit", envl.describe())
            if named is None:
                raise
            raise named from err

    def _model_event(self, fn: Any, args: tuple) -> None:
        """Run ``fn(*args)``, an event a link model of the user's own scheduled, naming the model
        and the event in what it raises (it left ``run`` bare: a ``KeyError`` naming nothing)."""
        try:
            fn(*args)
        except Exception as err:
            named = self._model_raised(err, "its event", describe_event(fn, args))
            if named is None:
                raise
            raise named from err

    def _model_raised(self, err: Exception, where: str, what: str) -> NetworkConfigError | None:
        """The error naming the link model for ``err``, which its ``where`` (``transmit``, ``its
        event``, ``node_offline``) raised about ``what``; None for an error that already says whose
        it is (an actor's ``ActorError``, ``ForeignAwaitError`` or ``RunEnded``, from an actor a
        delivery inside the model's call resumed; the kernel's own checks of the model, which begin
        with "link model"). fedsim's other errors raised in the model (``check_time``'s, an
        ``UnknownNodeError`` of ``net.node``) get the model's name in front."""
        if isinstance(err, (ActorError, ForeignAwaitError, RunEnded)) or (
                isinstance(err, NetworkConfigError) and str(err).startswith("link model ")):
            return None
        if isinstance(err, FedsimError):  # (check_time's names the message, net.node's the node: not the model)
            return NetworkConfigError(f"link model {self._model_class_label()}: {err}")
        frames = traceback.extract_tb(err.__traceback__)
        at = f" ({frames[-1].filename}, line {frames[-1].lineno}, in {frames[-1].name})" if frames else ""
        return NetworkConfigError(f"link model {self._model_class_label()} raised {type(err).__name__}: {err} in "
                                  f"{where} for {what}{at}")

    def deliver(self, envl: Envelope, dst: Node) -> None:
        """``envl`` reaches ``dst`` now: it is lost if its sender dropped out before finishing its
        transmission or ``dst`` is offline; otherwise it is marked delivered and either wakes
        ``dst`` (if it waits for that kind), goes to the collector of its gather (which keeps it,
        or discards it if it is labelled with an earlier round) or joins its mailbox (also when
        the gather is for an earlier round than its label)."""
        row = envl.row
        src = self.nodes[envl.src]
        off = src.spec.offline_at
        if off is not None and row[TX_END] > off:
            self.lose(envl, "sender offline")
            return
        if dst.offline or (dst.done and self.is_offline(dst)):
            # (a node that finished its part before its offline_at goes offline all the same)
            self.lose(envl, "receiver offline")
            return
        row[ARRIVAL] = self.active_at = self.queue.now
        row[STATUS] = "delivered"
        if self.tracing:
            self.happened.append(("arrive", row[SEQ]))
        w = dst.waiter
        # matches(w[0], kind), inlined: one call less per delivery
        if w is not None and ((k := w[0]) is None or k == envl.kind or (type(k) is not str and envl.kind in k)):
            col = w[2]
            if col is None:  # a receive: resume the actor with this message
                dst.waiter = None
                dst.proc.step(envl)
                return
            taken = col.offer(envl)
            if not taken:  # a gather's (kept, or discarded unread)
                return
            if taken is not LATER:  # a gather, now complete: resume the actor once
                dst.waiter = None
                dst.proc.step(None)
                return
            # a later round's than the gather's: it waits in the mailbox for its own
        box = dst.mailbox
        if box is None:
            box = dst.mailbox = deque()
        box.append(envl)

    def is_offline(self, node: Node) -> bool:
        """Whether ``node``'s link is down now: its ``offline_at`` has come, whether or not its
        actor had finished by then."""
        off = node.spec.offline_at
        return node.offline or (off is not None and self.queue.now >= off)

    def lose(self, envl: Envelope, note: str) -> None:
        """Mark ``envl`` lost (``note`` says why); it never arrives. A tracing network keeps the
        time in ``lost_at`` (by ledger seq)."""
        row = envl.row
        row[STATUS] = "lost"
        row[NOTE] = note
        self.active_at = self.queue.now
        if self.tracing:
            self.lost_at[row[SEQ]] = self.queue.now
            self.happened.append(("lost", row[SEQ]))

    def _deliver_checked(self, envl: Envelope, dst: Node) -> None:
        """``deliver`` for a link model of the user's own: refuses a copy already delivered or
        lost, and one whose timing fields were left unset (NaN in the ledger).

        A model that delivers at the time it wrote as ``TX_END`` or ``RX_START`` schedules
        ``net.deliver`` after ``end - net.now()`` seconds, and the clock then reads ``now + (end -
        now)``, which can round a few ulps below ``end`` (sent at 0.000256 s, ending at 0.00078 s:
        0.0007799999999999999). Such a copy arrives at ``end``, the time the model meant, in the
        ledger; an arrival earlier than that rounding is refused (``_check_order``)."""
        self._check_call(envl, "deliver", dst)
        row = envl.row
        if row[STATUS] != "in_flight":
            raise self._settled_twice(envl, "deliver")
        t = row[TX_START] + row[TX_END] + row[RX_START]
        if t != t:  # NaN if any of the three was left unset
            raise NetworkConfigError(
                f"link model {self._model_label()} delivered {envl.describe()} without filling its timing "
                f"fields (tx_start {row[TX_START]!r}, tx_end {row[TX_END]!r}, rx_start {row[RX_START]!r}): "
                "transmit must set envelope.row[TX_START], [TX_END] and [RX_START] before net.deliver")
        arrival = self.queue.now
        last = max(row[TX_END], row[RX_START])
        rounded = arrival < last <= arrival + _CLOCK_ROUNDING_ULPS * math.ulp(last)
        self._check_order(envl, last if rounded else arrival)
        SimNetwork.deliver(self, envl, dst)
        if row[STATUS] == "delivered":  # (lost instead, an offline end: counted by _lose_checked)
            if rounded:
                row[ARRIVAL] = last
            self.settled += 1

    def _lose_checked(self, envl: Envelope, note: str) -> None:
        """``lose`` for a link model of the user's own: refuses a copy already delivered or lost."""
        self._check_call(envl, "lose", None)
        if not isinstance(note, str) or not note:  # (5 went into the ledger's note column as it was)
            raise NetworkConfigError(
                f"link model {self._model_class_label()} called net.lose for {envl.describe()} with note "
                f"{type(note).__name__} {note!r:.80}: the note is a non-empty str saying why (e.g. \"link loss\")")
        if envl.row[STATUS] != "in_flight":
            raise self._settled_twice(envl, "lose")
        self._check_order(envl, _NAN)
        self.settled += 1
        SimNetwork.lose(self, envl, note)

    def _check_call(self, envl: Any, call: str, dst: Any) -> None:
        """For a link model of the user's own (its ``deliver`` and ``lose``): ``envl`` is an
        envelope transmit was given, ``dst`` (for a delivery) the node it is addressed to, and the
        row's timing fields are numbers (a float, or an int or NumPy number, written back as a
        float) or unset (NaN). Before, another object failed with an ``AttributeError``, a copy
        delivered to another node (its sender) went into that node's mailbox, and a str or None
        time with a ``TypeError`` naming nothing."""
        label = self._model_class_label()
        if not isinstance(envl, Envelope):
            raise NetworkConfigError(f"link model {label} called net.{call} with {type(envl).__name__} {envl!r:.80}, "
                                     "not an envelope: pass the envelope transmit was given")
        row = envl.row
        if dst is not None and (not isinstance(dst, Node) or dst.id != row[DST]):
            got = f"node {dst.id!r}" if isinstance(dst, Node) else f"{type(dst).__name__} {dst!r:.80}"
            raise NetworkConfigError(f"link model {label} delivered {envl.describe()} to {got}: net.deliver(envelope, "
                                     "dst) takes the dst transmit was given for that envelope")
        for pos, field in ((TX_START, "tx_start"), (TX_END, "tx_end"), (RX_START, "rx_start")):
            t = row[pos]
            if t.__class__ is not float:
                if not isinstance(t, numbers.Real) or isinstance(t, (bool, np.bool_)):
                    raise NetworkConfigError(
                        f"link model {label} called net.{call} for {envl.describe()} with {field} "
                        f"{type(t).__name__} {t!r:.80}: the row's times are numbers of seconds (float; NaN: unset)")
                row[pos] = float(t)

    def _check_order(self, envl: Envelope, arrival: float) -> None:
        """For a link model of the user's own (its ``deliver`` and ``lose``): refuse a copy whose
        times are out of order, which would go into the ledger's communication times as they are
        (a transmission ending before it starts, a copy arriving before its last byte left). A
        copy is sent, starts leaving, stops leaving, reaches the receiver, arrives:
        ``send_time <= tx_start <= tx_end <= arrival_time`` and ``tx_start <= rx_start <=
        arrival_time``, ``send_time`` first. Fields left unset (NaN: a lost copy's) are not
        compared; ``arrival`` is the arrival time a delivery gives it (NaN for a loss)."""
        row = envl.row
        times = (row[SEND_T], row[TX_START], row[TX_END], row[RX_START], arrival)
        for a, b in _ORDER:
            if times[b] < times[a]:  # (False when either is NaN)
                raise NetworkConfigError(
                    f"link model {self._model_class_label()} gave {envl.describe()} (round {envl.round}) times out "
                    f"of order: {_TIME_NAMES[b]} {times[b]!r} s is before {_TIME_NAMES[a]} {times[a]!r} s ("
                    + ", ".join(f"{n} {t!r}" for n, t in zip(_TIME_NAMES, times) if t == t)
                    + "); a copy's times must keep send_time <= tx_start <= tx_end <= arrival_time and tx_start "
                    "<= rx_start <= arrival_time (the arrival is when net.deliver is called)")

    def _model_class_label(self) -> str:
        """The link model's name and class (``'slow' (Slow)``), or its class alone if it has no name."""
        m = self.link_model
        return f"{m.name!r} ({type(m).__name__})" if m.name != LinkModel.name else type(m).__name__

    # what a link model of the user's own scheduled is net.deliver / net.lose: an event error
    # (describe_event) names them so, not by these private names the user never wrote
    _deliver_checked.__qualname__ = "SimNetwork.deliver"
    _lose_checked.__qualname__ = "SimNetwork.lose"

    def _model_label(self) -> str:
        m = self.link_model
        return repr(m.name) if m.name != LinkModel.name else type(m).__name__

    def _settled_twice(self, envl: Envelope, call: str) -> NetworkConfigError:
        row = envl.row
        was = f"{row[STATUS]}" + (f" ({row[NOTE]})" if row[NOTE] else "")
        return NetworkConfigError(f"link model {self._model_label()} called net.{call} for {envl.describe()}, "
                                  f"which was already {was}: each copy ends with exactly one net.deliver or "
                                  "net.lose")

    def _check_settled(self) -> None:
        """After a drained run every copy must have been delivered or lost: a link model that
        dropped one silently (no deliver, no lose, nothing scheduled) left it in flight for ever,
        and the actors waiting for it would be reported as a deadlock "with nothing in flight"."""
        left = len(self.ledger) - self.settled
        if not self._checked or left <= 0:
            return
        view = self.ledger.select(fate="in_flight")
        rows = list(zip(view.column("seq"), view.column("kind"), view.column("src"), view.column("dst")))[:5]
        shown = "; ".join(f"row {int(q)}: {k!r} from {s!r} to {d!r}" for q, k, s, d in rows)
        raise NetworkConfigError(f"link model {self._model_label()} neither delivered nor lost "
                                 f"{plural(left, 'message copy', 'message copies')} and scheduled nothing more ({shown}"
                                 f"{'; ...' if left > len(rows) else ''}): transmit must end each copy with "
                                 "net.deliver or net.lose, now or in an event it schedules")

    # -- the transport interface ----------------------------------------------------------------
    def post(self, src: Node, dsts: tuple, kind: str, encoded, anonymous: bool) -> None:
        if src.offline:
            return
        nbytes = len(encoded.data) + self.framing_bytes
        if len(dsts) == 1:  # a send: no loop, no held batch (one message per exchange of a stochastic round)
            try:
                dst = self.nodes.get(dsts[0])
            except TypeError:  # not hashable: destinations() below says what is wrong
                dst = None
            if dst is not None:
                src.sent += 1
                row = self.ledger.new_row(src.round, src.id, dst.id, src.role, dst.role, kind, nbytes,
                                          encoded.array_bytes, encoded.floats, self.queue.now, anonymous)
                payload = Payload(encoded)
                if self.tap is not None:
                    self.tap.observe(row, payload)
                self._transmit(self, src, dst, Envelope(kind, payload, src.id, anonymous, src.round, row, nbytes))
                return
        targets = self.destinations(dsts)
        payload = Payload(encoded)
        raw, floats = encoded.array_bytes, encoded.floats
        queue = self.queue
        now = queue.now
        new_row = self.ledger.new_row
        transmit = self._transmit
        rnd, sid, srole = src.round, src.id, src.role
        src.sent += len(targets)
        # a broadcast's copies enter the event queue one at a time (EventQueue.release)
        held = len(targets) > 1 and queue.hold()
        tap = self.tap
        try:
            for dst in targets:
                row = new_row(rnd, sid, dst.id, srole, dst.role, kind, nbytes, raw, floats, now, anonymous)
                if tap is not None:
                    tap.observe(row, payload)
                transmit(self, src, dst, Envelope(kind, payload, sid, anonymous, rnd, row, nbytes))
        finally:
            if held:
                queue.release()

    def wait(self, node: Node, kind, timeout: float | None, col=None):
        """Park ``node`` until a message of ``kind`` arrives (resumed with it) or ``timeout``
        (resumed with None). With a collector ``col``, arrivals are offered to it in ``deliver``
        and the actor resumes once, when ``col`` is complete, instead of once per message."""
        if node.offline:
            raise offline_wait(node)
        if timeout is not None:
            w = node.waiter = (kind, object(), col)
            self.queue.schedule(timeout, self._expire, node, w)
        else:
            node.waiter = (kind, None, col)
        return _park

    async def collect(self, node: Node, kind, col, timeout: float | None) -> None:
        await self.wait(node, kind, timeout, col)

    def waits_for(self, node: Node) -> str:
        w = node.waiter
        if w is not None and w[2] is not None:
            node.gathering = w[2]
        return super().waits_for(node)

    @staticmethod
    def _expire(node: Node, w: tuple) -> None:
        if node.waiter is w:
            node.waiter = None
            node.proc.step(None)

    async def sleep(self, node: Node, seconds: float) -> None:
        if node.offline:
            raise offline_wait(node)
        q = self.queue
        q.schedule(seconds, node.proc.step)  # (first: it refuses an end that is not finite)
        if self.tracing and seconds > 0:
            self.happened.append(("span", len(self.trace)))
            self.trace.append((node.id, q.now, q.now + seconds, "sleep"))
        await _park

    async def compute(self, node: Node, flops: float, label: str) -> None:
        if node.offline:
            raise offline_wait(node)
        speed = node.spec.flops
        if speed == _INF or flops == 0:
            return
        seconds = flops / speed
        q = self.queue
        q.schedule(seconds, node.proc.step)  # (first: it refuses an end that is not finite)
        if self.tracing:
            self.happened.append(("span", len(self.trace)))
            self.trace.append((node.id, q.now, q.now + seconds, label))
        await _park

    def _live(self, fn, args: tuple) -> bool:
        """Whether the pending event ``fn(*args)`` would still do something (conservatively:
        only the kernel's own timeouts and dropouts are known to go stale)."""
        if fn is self._expire:
            return args[0].waiter is args[1]
        if fn == self._go_offline:
            return not (args[0].done or args[0].offline)
        return True

    def _go_offline(self, node: Node) -> None:
        # the link goes down, also under a node that has finished: what it is still sending or
        # receiving is cut now, not when the link model would have finished it
        if self._checked:  # (a model of the user's own: what it raises names it)
            try:
                self.link_model.node_offline(self, node)
            except Exception as err:
                named = self._model_raised(err, "node_offline", node.describe())
                if named is None:
                    raise
                raise named from err
        else:
            self.link_model.node_offline(self, node)
        if node.done:
            return
        self.active_at = self.queue.now
        node.offline = True
        node.waiter = None
        if node.coro is not None:
            self._close(node)

    @staticmethod
    def _close(node: Node) -> None:
        """Close ``node``'s actor (its ``finally`` blocks run). A ``finally`` block that tries to
        wait gets ``RunEnded`` at that await (closing used to fail with a bare "coroutine ignored
        GeneratorExit"); what else one raises is the actor's error."""
        try:
            node.coro.close()
        except RunEnded:
            pass
        except Exception as err:
            raise ActorError(node.id, node.role, err) from err

    # -- running ------------------------------------------------------------------------------
    def run(self, until: float | None = None, *, strict: bool = True) -> RunResult:
        """Run every actor until all have finished, or nothing is left that could happen, or
        simulated time reaches ``until``. Actors still blocked at the end are closed (their
        ``finally`` blocks run) and listed in ``RunResult.unfinished`` with what they waited for
        in ``RunResult.blocked``. The run is over by then (``end_run``): what those ``finally``
        blocks send is dropped, with no ledger row, and what their gathers miss is not recorded.

        With ``strict`` (the default), a run that ends with actors blocked and nothing left in
        flight (a deadlock: a receive no one answers, a gather without deadline for a lost
        message or an offline peer) raises ``DeadlockError`` naming every blocked actor, what it
        waits for and the simulated time; ``strict=False`` returns the partial result instead.
        Stopping at ``until`` with events still pending is not a deadlock.

        Raises ``ActorError`` (with the original exception as ``__cause__``) if an actor
        raises, ``ForeignAwaitError`` if an actor awaits something this network cannot drive,
        and ``FedsimError`` naming the node if an actor is not an async function (nothing runs);
        ``NetworkConfigError`` before anything runs if the network's faults match no node's role,
        its ``tap`` has no ``observe`` method, ``until`` is not a positive number of seconds or
        None (inf: no bound), or ``strict`` is not True or False. A network runs once (``FedsimError`` on a second call).
        """
        if self.ran:
            raise FedsimError("a network runs once; build a new one for another run")
        if until is not None:
            until = _check_until(until)
        strict = check_flag("strict", strict)
        self.check_faults()
        self.check_tap()
        self.call_before_run()
        self.ran = True
        queue = self.queue
        # A run allocates millions of small tracked objects (ledger rows, envelopes, decoded
        # payloads, heap entries) that live across many others' lifetimes; CPython's default gen-0
        # threshold (700 in 3.11) would scan them over and over. Collect less often during the run
        # and restore after. At 100,000 a 10,000-client FedRec round of ml20m-like still spent 12 %
        # of its CPU time in 185 collections (benchmarks/scale.py reports GC time); at 1,000,000
        # there were none, and the cyclic garbage a run could leave meanwhile is bounded by it.
        # The actors and their data exist for the whole run: frozen (gc.freeze, unless the caller
        # froze objects of its own), the collections that still happen skip them (a 138,493-client
        # run spent 3.7 s in 3 full collections walking them, and 1.5 s more in young ones while
        # its actors were being created).
        threshold = gc.get_threshold()
        gc.set_threshold(max(threshold[0], _GC_GEN0), *threshold[1:])
        frozen = gc.get_freeze_count() == 0
        try:
            for node in self.nodes.values():
                # node.coro is set only once it is known to be a coroutine: the finally below
                # closes it (a plain return value has no close(), whose AttributeError would
                # replace the error naming the actor)
                node.coro = self.actor_coroutine(node)
                if node.spec.offline_at is not None:
                    queue.schedule(node.spec.offline_at, self._go_offline, node)
                node.proc = _ActorProcess(node, node.coro, self)
                queue.schedule(0.0, node.proc.step)
            if frozen:
                gc.freeze()
            stopped_early = queue.run(until)
            pending = getattr(queue, "pending", None)  # (optional in a queue of another make)
            if stopped_early and pending is not None and not any(self._live(fn, args) for _, fn, args in pending()):
                stopped_early = False  # only events that would do nothing are left: as drained
            if not stopped_early:
                queue.now = self.active_at  # now() after the run is its duration
                self._check_settled()
            return self.finish(queue.now, strict=strict, drained=not stopped_early)
        finally:
            # before the actors are closed: a message sent from a finally block would otherwise
            # get a row after the result was made, in flight for ever at a time nothing ran
            self.end_run()
            if frozen:
                gc.unfreeze()
            gc.set_threshold(*threshold)
            for node in self.nodes.values():
                if not node.done and not node.offline and node.coro is not None:
                    self._close(node)


register_transport("sim", SimNetwork, "SimNetwork: simulated time, the link model's bandwidth and latency (default)")
