"""``TcpNetwork``: the same actors in separate OS processes, exchanging frames over real TCP.

``run()`` forks one process per group of actors (``processes``, ``placement``); each runs its
actors as asyncio tasks and carries every message as one frame on a TCP connection, including
messages between two actors of the same process (every message crosses the kernel's TCP stack,
so every ledger row is a frame that was really on the wire). The launching process builds the
actors (``spec.build(net, ...)`` as on any transport), coordinates and collects; it runs no
actor. Actors see exactly the documents they would see on ``SimNetwork``; their ``ctx.rng``,
the loss draws (keyed by sender and message number, drawn at the sender) and node-id order in
``gather`` are those of every transport, so final parameters are bit-identical to SimNetwork's
with the same seed.

Process model. ``fork`` (Linux, POSIX): a child inherits the built actors, their arguments
(data slices, configs) and the node table without pickling anything, and copy-on-write keeps
the data shared. Children are forked before the parent starts any event loop or thread of its
own, and with no thread of fedsim's alive: the progress display's thread (``fedsim-progress``)
and a pool worker's ``fedsim-beats`` are stopped while the parent forks and started again after
(``fedsim.forks.threads_paused``), so that no child inherits a lock one of them held. Each
child starts a fresh loop, and writes through ``sys.stdout`` and ``sys.stderr`` of its own
(``fedsim.forks.own_std_streams``: a thread of the program's own may hold their lock at the
fork), and tqdm gets a lock of its own where another thread held tqdm's at the fork
(``fedsim.forks.fresh_tqdm_lock_in_child``). A child asks the kernel to kill it if the parent dies
(``PR_SET_PDEATHSIG``, where available) and exits when its control connection closes, or when
it is refused at start-up (the parent stopped listening: it is ending the run, after a Ctrl-C or
a failure it reports itself), quietly, with status 3 (a control port it cannot reach otherwise:
one line saying so); it leaves through ``os._exit`` (no atexit handlers, no inherited buffers
flushed twice). A child ignores SIGINT from its first step (the terminal's Ctrl-C reaches the
whole process group: the parent decides); a Ctrl-C while the parent forks is raised once every
child's pid is recorded, so that each is still reaped. The coordinator cancels and awaits every
task it started (a control connection accepted after that is closed unread), and the parent's
loop teardown then cancels, in rounds, whatever is left (also tasks that cancelled tasks start,
and tasks cancelled again that lost a cancellation) before it closes the loop: no task is left
pending, whatever the load.

Rendezvous. The parent listens on 127.0.0.1 (an ephemeral port) for control connections. Each
child binds its own data listener (``host``, ephemeral port), connects to the parent and says
hello (its process index, a 16-byte run token inherited through fork, its pid and port). Once
every child has, the parent sends the address table (process index -> host, port; node ->
process is the placement every child inherited) and ``go`` with the time origin: its
``time.monotonic()`` reading. A child opens its connection to a process (itself included, so all
processes are treated alike) when it first sends a frame there, presenting the token (stray
connections without it are closed unread); the frames posted meanwhile wait in that
connection's queue (their ``tx_start`` is when they are handed to the socket). Its listener
accepts its peers' connections until the run ends. (Every child used to connect to every
process before ``go``: processes^2 connections, and a start-up that grew with their square; a
star protocol needs two per client process.) So a worker holds at most 2 x processes
connections: ``run`` refuses (``NetworkConfigError``, before forking) a run whose workers could
need more descriptors than the open-file limit (``ulimit -n``) allows, saying how many
(``check_descriptors``: the worst case, every process talking to every other), or whose
estimated memory is above what the system has available (``check_memory``); a worker that
cannot accept a peer's connection all the same (descriptors taken otherwise: after an accept
failed, a connection still waits ``_ACCEPT_GRACE``, 2 s, later) ends the run, naming itself and
the limit. Each listener's backlog has room for every process (they may all connect at once:
past a full backlog a connection waited a SYN retransmission, 1 s or more). CLOCK_MONOTONIC is system-wide on Linux, so every process
measures ``now()`` from the same origin (processes on other hosts would need a clock-offset
exchange, which this transport does not do).

Wire format of a data frame (big-endian)::

    u32  length    bytes after this field: 21 + len(document)
    u32  src       sender's node index (its position in the network's node table)
    u32  dst       receiver's node index
    u64  number    the sender's message number of this copy (Node.sent: keys the loss draws)
    i32  round     the round label of the message
    u8   flags     bit 0: anonymous
    ...  document  the codec's msgpack document [kind, payload], exactly as encoded at the sender

so a frame costs ``FRAME_OVERHEAD`` = 25 bytes beyond its document: the network's
``framing_bytes`` (fixed; the ledger's wire bytes are frame bytes and
``totals().payload_bytes`` the documents). Control messages between the parent and a child
are ``u32 length`` + one codec document (maps with an ``op``) of at most ``CONTROL_FRAME_BYTES``
(1 MiB), whatever ``max_message_bytes`` is: a worker's report (its ledger rows, arrivals, steps,
missing-message records, nodes, and its actors' return values, each up to ``max_message_bytes``)
goes in as many frames as that takes, and an actor's exception message and traceback travel cut
to 64 Ki characters each. Nothing is pickled, anywhere.

Ledger. The sender records each copy (send time: when ``post`` was called; ``tx_start``: when
its frame was handed to the socket; ``tx_end``: when the socket's user-space buffer had drained
past it into the kernel), the receiver its reception (``rx_start``: the length prefix was read;
``arrival_time``: the whole frame was read and decoded; ``read``; ``dst_role``: the receiver's
role when it read the message, or at arrival if it never did: a real network has no instant at
which the sender could see it), all in
seconds since the common origin (divided by ``time_scale``). The parent merges them into one
``Ledger`` with the simulator's columns, rows in order of (sender id, sender's message number);
a copy lost by the seeded loss draw is never framed and is recorded ``lost`` by its sender.

Dropout (``offline_at``, ``Faults(dropout=...)``, the times every transport draws, keyed by seed
and node id) means what it means on ``SimNetwork`` and ``AsyncioNetwork``. The worker hosting a
node arms a timer at its ``offline_at`` on the common clock (``t0`` + ``offline_at`` times
``time_scale``; at 0 the actor never starts); then the node's actor is cancelled (its ``finally``
blocks run; a wait there raises ``RunEnded``, a send there is dropped, with no ledger row), and the
node is listed in ``RunResult.offline``. Every process holds every node's spec and reads the same
clock, so the sender decides what it can: a copy sent to a node whose ``offline_at`` has come
(also one whose actor had finished) is recorded ``lost``, note ``receiver offline``, and never
framed; one a node sends at or after its ``offline_at`` (its actor held the loop past it: the
cancellation takes effect at its next await) is ``lost``, note ``sender offline``, never framed; a
copy drawn lost keeps ``link loss`` (the loss draw is made for every copy, so the draws stay keyed
by message number). A frame sent before its receiver's ``offline_at`` and read after it is
recorded by the receiving process: ``lost``, note ``receiver offline``, with its ``rx_start``
(its bytes came in) and no ``arrival_time``. A dropout still to come keeps the run going (each
process reports its dropouts to come in its status): actors blocked on a node whose dropout is
still to come are not a deadlock before it happens. Which copies a dropout costs depends on how
far the protocol had got in real time, as on ``AsyncioNetwork``.

Quiescence and the deadlock rule. Every ``poll_interval`` the parent asks each process for
(frames sent, frames received, bytes in and out, actors blocked without timeout, actors
finished, dropouts still to come, an activity counter). The run is over when two consecutive
snapshots are identical, every actor of every process is finished (or closed by its dropout) or
blocked, no dropout is still to come, and frames sent == frames received (no frame in flight):
then nothing can wake anyone. Actors still blocked then are a deadlock:
``run(strict=True)`` raises ``DeadlockError`` naming each and what it waits for (described in
its own process), ``strict=False`` returns the partial result. The parent then tells every
process to stop; each closes its blocked actors, sends its report (return values encoded with
the codec, ledger rows, roles, missing-message records, the FLOPs each node's ``ctx.compute``
calls charged: ``RunResult.flops``) and exits.

Safety. The data listeners bind to ``host``, 127.0.0.1 by default; a host that is not a
loopback address is refused (``NetworkConfigError``) unless ``allow_remote=True``. A frame
longer than ``max_frame_bytes`` (default ``max_message_bytes`` + 25: the largest frame a
conforming sender makes; never unbounded), shorter than its header, or with a header not valid on
its connection (a sender the peer does not host, a receiver this process does not host, a
message number not above that sender's last one there: a repeated frame) closes that connection
and ends the run with ``TransportError`` naming the sending node (or the peer process's
nodes); documents are decoded by the codec's bounded decoder (``max_message_bytes``, depth
limit) on arrival, and a malformed one ends the run the same way, naming its sender. (Unlike
SimNetwork and AsyncioNetwork, which decode a document when the receiver reads it: a document
the sender's encoder takes and the decoder refuses, nested deeper than 32, ends a TcpNetwork run
with this ``TransportError`` when it arrives, read or not, where the others raise the reader's
``ActorError``/``CodecError`` only if it is read.) A peer
that closes its connection (mid-frame or not) or dies, a connection refused, or no progress
at all for ``stall_timeout`` seconds with frames outstanding (the bytes of a long frame still
coming in, counted per MiB, are progress), or a process that does not answer the coordinator's
status poll for ``stall_timeout`` seconds and is stopped (``kill -STOP``, a debugger; one whose
actor computes without awaiting, holding its event loop, is waited for), ends the run with
``TransportError`` naming the process and the nodes it hosts (how a process died: its exit
status or signal). A control frame one side cannot read (over ``CONTROL_FRAME_BYTES``, or not a
control message) ends it the same way, with what was wrong with it: not with the exit status of
the worker that leaves because of it. An actor that raises (``CancelledError`` too, when its own code
ends it cancelled) ends it with ``ActorError`` naming the actor (the
original exception rebuilt from its type and message, with the remote traceback as a note); a
return value the codec cannot encode is an ``ActorError`` naming the actor too. In every
outcome, children still alive are told to abort, killed (SIGKILL) after a bounded grace period,
and reaped, in a ``finally``; ``run(timeout=...)`` bounds the whole run (``TimeoutError``).

What it does not do: start processes on other hosts (every process is forked here; with
``allow_remote`` the listeners can face another interface, nothing more), encrypt or
authenticate beyond the run token, model bandwidth or latency (time is real: what the
machine's loopback and CPUs give; dropout is a cut at a real instant, not a cut in the middle of a
frame's bytes), or run on platforms without ``fork``. ``compute`` only yields, as on ``AsyncioNetwork``.
"""

from __future__ import annotations

import asyncio
import builtins
import errno
import ipaddress
import math
import numbers
import os
import signal
import socket
import struct
import sys
import threading
import time
import traceback
from collections import deque
from typing import Any, Callable, Iterator, Mapping

from .codec import DEFAULT_MAX_DEPTH, CodecError, Encoded, decode, decode_message, encode
from .envelope import Envelope, Payload
from .errors import (
    ActorError, FedsimError, ForeignAwaitError, MessageTooLargeError, NetworkConfigError,
    RunEnded, TransportError, UnknownNodeError,
)
from .ledger import ARRIVAL, DST_ROLE, NOTE, READ, RX_START, SRC, STATUS, TX_END, TX_START, Missing, StreamingLedger
from .network import Network, RunResult, check_flag, check_run_timeout, check_time_scale
from .node import Node, cancelled, hand_over, withdraw
from .realtime import ClosedOnDropout
from .registry import register_transport
from ..forks import own_std_streams, threads_paused
from ..signals import sigint_deferred
from ..units import human_bytes, plural

__all__ = ["CONTROL_FRAME_BYTES", "FRAME_OVERHEAD", "RemoteException", "TcpNetwork"]

_PREFIX = struct.Struct(">I")
_REST = struct.Struct(">IIQiB")  # src, dst, number, round, flags: what follows the length prefix
FRAME_OVERHEAD = _PREFIX.size + _REST.size  # 25 bytes per frame beyond its document
_MAX_LENGTH = 0xFFFFFFFF
_HANDSHAKE_BYTES = 4096  # bound on a peer's or a child's hello document
# Bound on every other control document, in both directions. It has nothing to do with the
# application's max_message_bytes (a run with small messages has as many ledger rows to report as
# any other); what grows with the run is cut to fit it.
CONTROL_FRAME_BYTES = 1 << 20
_READ_LIMIT = 1 << 20  # StreamReader buffer limit
_READ_CHUNK = 1 << 20  # a longer document is read (and its progress counted) in pieces of this size
_REPORT_CHUNK = 2000  # the most list items per report frame (fewer when they do not fit)
_TEXT_CAP = 1 << 16  # characters of an actor's exception message, and of its traceback, reported
_I32 = (-(1 << 31), (1 << 31) - 1)
_NAN = math.nan
# which failure explains a broken run best, when several are reported (lower first)
_PRIORITY = {"actor": 0, "died": 1, "frame": 2, "midframe": 3, "connect": 4, "stall": 5, "closed": 6}


class RemoteException(FedsimError):
    """An actor's exception of a type the parent cannot rebuild from its name: ``type_name``
    and the message of the original (the remote traceback is attached as a note)."""

    def __init__(self, type_name: str, message: str) -> None:
        self.type_name = type_name
        super().__init__(f"{type_name}: {message}")


class TcpNetwork(ClosedOnDropout, Network):
    """Run every actor, or group of actors, in its own forked OS process; messages travel as
    length-prefixed frames over TCP on ``host`` (module docstring: wire format, process model,
    safety rules).

    ``processes``: how many worker processes (at most one per node; ``None``: one per node).
    ``placement``: which process each node runs in: a mapping or a callable ``node_id -> index``
    in ``range(processes)`` (empty processes are not started); by default the nodes whose role
    is not ``client`` share process 0 and the clients are cut into contiguous, balanced groups
    over the others (with one process, or no clients, every node is dealt contiguously).
    ``host``: where the data listeners bind (loopback unless ``allow_remote=True``).
    ``max_frame_bytes``: the longest frame a receiver accepts (default ``max_message_bytes`` +
    ``FRAME_OVERHEAD``); a sender refuses a message whose frame would be longer
    (``MessageTooLargeError``, as for ``max_message_bytes``). Neither bounds the control frames
    between the coordinator and the workers (``CONTROL_FRAME_BYTES``). ``time_scale``: real
    seconds per protocol second (positive and finite), as on ``AsyncioNetwork`` (multiplies sleeps
    and timeouts, divides the clock). ``poll_interval``: seconds between the coordinator's status polls;
    ``stall_timeout``: seconds without any progress, with frames outstanding, or without the
    answer to a status poll of a process that is stopped, after which the run fails; ``start_timeout``: bound on the rendezvous and on collecting the reports. ``framing_bytes`` is fixed at
    ``FRAME_OVERHEAD``. Other keywords as ``Network`` (``faults`` with loss and dropout, and a node's
    ``loss``/``offline_at``, as on every transport: module docstring, "Dropout").

    Raises ``NetworkConfigError`` naming the parameter for ``processes`` that is not an integer of
    at least 1 or None, a ``time_scale``, ``poll_interval``, ``stall_timeout`` or
    ``start_timeout`` that is not a positive finite number, an ``allow_remote`` that is not True
    or False, a ``host`` that is no str, cannot be resolved or is not loopback without
    ``allow_remote``, a ``max_frame_bytes`` that is not a whole number in range, a ``framing_bytes``
    other than ``FRAME_OVERHEAD``, a ``StreamingLedger``, and as ``Network`` for the others.

    After ``run``: ``pids`` (the worker processes started, all reaped by then),
    ``exit_status`` (pid -> wait status), ``groups`` (node ids per process).

    Fault-injection points for tests (override in a subclass; the children run the subclass's
    code): ``frame`` builds each data frame, ``peer_address`` says where a process connects to
    reach another.
    """

    def __init__(self, *, processes: int | None = 4, placement: Mapping[str, int] | Callable[[str], int] | None = None,
                 host: str = "127.0.0.1", allow_remote: bool = False, max_frame_bytes: int | None = None,
                 time_scale: float = 1.0, poll_interval: float = 0.01, stall_timeout: float = 30.0,
                 start_timeout: float = 30.0, **kwargs: Any) -> None:
        framing = kwargs.pop("framing_bytes", FRAME_OVERHEAD)
        if framing != FRAME_OVERHEAD:
            raise NetworkConfigError(f"TcpNetwork's framing is its frame header: framing_bytes is {FRAME_OVERHEAD}, "
                                     f"got {framing!r}")
        super().__init__(framing_bytes=FRAME_OVERHEAD, **kwargs)
        if isinstance(self.ledger, StreamingLedger):
            raise NetworkConfigError("TcpNetwork merges its processes' ledgers in memory: it cannot record into a "
                                     "StreamingLedger")
        if not hasattr(os, "fork"):
            raise NetworkConfigError("TcpNetwork needs os.fork (Linux or another POSIX system)")
        # int() made 1.5 processes one and "2" two, silently; True was one
        if processes is not None and (not _is_int(processes) or processes < 1):
            raise NetworkConfigError(f"processes must be an integer of at least 1 (or None: one per node), "
                                     f"got {processes!r}")
        time_scale = check_time_scale(time_scale)
        for name, v in (("poll_interval", poll_interval), ("stall_timeout", stall_timeout),
                        ("start_timeout", start_timeout)):
            # (a str was "'>' not supported between instances of 'str' and 'int'", naming nothing)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (v > 0 and math.isfinite(v)):
                raise NetworkConfigError(f"{name} must be a positive number of seconds, got {v!r}")
        allow_remote = check_flag("allow_remote", allow_remote)
        if not isinstance(host, str):
            raise NetworkConfigError(f"host must be a host name or address (str), got {type(host).__name__} {host!r}")
        check_host(host, allow_remote)
        if max_frame_bytes is None:
            max_frame_bytes = min(self.max_message_bytes + FRAME_OVERHEAD, _MAX_LENGTH + _PREFIX.size)
        elif not (_is_int(max_frame_bytes) or (isinstance(max_frame_bytes, numbers.Real) and not isinstance(
                max_frame_bytes, bool) and math.isfinite(max_frame_bytes) and float(max_frame_bytes).is_integer())):
            # int() truncated 1000.5 and took "1000" and True
            raise NetworkConfigError(f"max_frame_bytes must be a whole number, got {max_frame_bytes!r}")
        max_frame_bytes = int(max_frame_bytes)
        if not FRAME_OVERHEAD < max_frame_bytes <= _MAX_LENGTH + _PREFIX.size:
            raise NetworkConfigError(f"max_frame_bytes must be in ({FRAME_OVERHEAD}, {_MAX_LENGTH + _PREFIX.size}], "
                                     f"got {max_frame_bytes!r}")
        self.processes = None if processes is None else int(processes)
        self.placement = placement
        self.host = host
        self.allow_remote = allow_remote
        self.max_frame_bytes = max_frame_bytes
        self.time_scale = float(time_scale)
        self.poll_interval = float(poll_interval)
        self.stall_timeout = float(stall_timeout)
        self.start_timeout = float(start_timeout)
        self.pids: list[int] = []
        self.exit_status: dict[int, int] = {}
        self.groups: list[list[str]] = []
        self._t0: float | None = None
        self._stopped_at = 0.0  # what now() says when the clock does not run (before and after the run)
        self._ids: list[str] = []
        self._index: dict[str, int] = {}
        self._proc_of: list[int] = []
        self._worker: _Worker | None = None
        self._waits: dict[str, str] = {}
        self.closed: set[str] = set()  # (in a worker) its nodes whose actor got the cancellation of its dropout

    # -- the transport interface (called in the worker processes) ---------------------------------
    def now(self) -> float:
        """Seconds since the common origin (the coordinator's ``go``), divided by ``time_scale``;
        0 before the run starts, and after it (in the launching process) the time at which it
        ended, ``RunResult.duration`` (or the time of the failure that ended it), as on the other
        transports: what is read after the run (``network_record``'s ``sim_time``) is the run's
        time, not the time of reading."""
        t0 = self._t0
        return self._stopped_at if t0 is None else (time.monotonic() - t0) / self.time_scale

    def post(self, src: Node, dsts: tuple, kind: str, encoded: Encoded, anonymous: bool) -> None:
        w = self._worker
        if w is None:
            raise FedsimError("TcpNetwork carries messages only while it runs, inside its worker processes")
        if src.id in self.closed:  # a finally block of an actor closed by its dropout: as on SimNetwork
            return
        targets = self.destinations(dsts)
        doc = encoded.data
        if type(doc) is not bytes:  # a draft's document (a read-only view on its buffer): frames take bytes
            doc = bytes(doc)
        nbytes = len(doc) + FRAME_OVERHEAD
        if nbytes > self.max_frame_bytes:
            raise MessageTooLargeError(src.id, kind, len(doc), self.max_frame_bytes - FRAME_OVERHEAD)
        rnd = src.round
        if not _I32[0] <= rnd <= _I32[1]:
            raise FedsimError(f"node {src.id!r}: round label {rnd} does not fit the frame header (32-bit signed)")
        now = self.now()
        new_row = self.ledger.new_row
        raw, floats = encoded.array_bytes, encoded.floats
        sid, srole = src.id, src.role
        base = src.sent
        src.sent += len(targets)
        proc_of, index = self._proc_of, self._index
        off = src.spec.offline_at
        cut = off is not None and now >= off  # its dropout has come; its actor still runs until its next await
        if cut:
            w.go_offline(src)  # (its timer may not have fired: the loop was busy)
        for k, dst in enumerate(targets):
            row = new_row(rnd, sid, dst.id, srole, dst.role, kind, nbytes, raw, floats, now, anonymous)
            w.sent_rows.append((base + k, row))
            if src.spec.loss and self.draw_loss(src):  # drawn for every copy: the draws stay keyed by number
                row[STATUS], row[NOTE] = "lost", "link loss"
                continue
            if cut:
                row[STATUS], row[NOTE] = "lost", "sender offline"
                continue
            doff = dst.spec.offline_at  # (every process has every node's spec, and one clock)
            if doff is not None and (dst.offline or now >= doff):
                row[STATUS], row[NOTE] = "lost", "receiver offline"  # never framed, as a copy lost by the draw
                continue
            w.send(proc_of[index[dst.id]], (sid, dst.id, base + k, rnd, anonymous, doc, row))
        w.touch(now)

    async def wait_for_message(self, node: Node, kind, timeout: float | None):
        w = self._worker
        fut = w.loop.create_future()
        forever = timeout is None
        node.waiter = (kind, fut, forever)
        w.touch(self.now())  # the actor's last step (a run that deadlocks ends at its last one)
        if forever:
            w.blocked += 1
            try:
                return await fut
            except asyncio.CancelledError:
                if withdraw(node, fut):  # a wait the actor gave up: it is not blocked (AsyncioNetwork.wait)
                    w.blocked -= 1
                raise
        got = await self.message_within(node, fut, timeout)
        if got is None:
            w.touch(self.now())
        return got

    def waits_for(self, node: Node) -> str:
        text = self._waits.get(node.id)
        return text if text is not None else super().waits_for(node)

    # -- fault-injection points ----------------------------------------------------------------
    def frame(self, src: str, dst: str, number: int, rnd: int, anonymous: bool, document: bytes) -> bytes:
        """The bytes of one data frame (module docstring: wire format). Called in the sending
        process just before the frame is written; override to inject faults (tests)."""
        index = self._index
        return _PREFIX.pack(_REST.size + len(document)) + _REST.pack(
            index[src], index[dst], number, rnd, 1 if anonymous else 0) + document

    def peer_address(self, proc: int, host: str, port: int) -> tuple[str, int]:
        """Where a process connects to reach process ``proc``, which reported ``host``:``port``.
        Override to inject faults (tests)."""
        return host, port

    # -- running -------------------------------------------------------------------------------
    def run(self, timeout: float | None = None, *, strict: bool = True) -> RunResult:
        """Fork the worker processes, run every actor until all have finished or nothing can
        happen any more, merge the processes' ledgers and return the ``RunResult``.

        With ``strict`` a run that ends with actors blocked raises ``DeadlockError`` (carrying the
        partial result); a node with ``offline_at`` drops out then (module docstring), and one whose
        dropout is still to come keeps the run going. Raises ``ActorError`` if an actor raises or
        returns a value the codec cannot encode, ``TransportError`` if a peer misbehaves, dies or cannot be reached,
        ``TimeoutError`` after ``timeout`` real seconds, ``NetworkConfigError`` before anything
        runs if the faults match no node's role, a ``tap`` is set (its rows are made in the
        workers), ``timeout`` is not positive seconds or None or ``strict`` is not True or False, and before forking if its workers
        would need more open files or memory than there are (``check_descriptors``,
        ``check_memory``). No worker process outlives the call. A network runs once (``FedsimError``
        on a second call); one refused before forking (any of the above, or a ``before_run``
        function that raised) can run again once mended. Must not be called from inside a
        running event loop."""
        if self.ran:
            raise FedsimError("a network runs once; build a new one for another run")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise FedsimError("TcpNetwork.run forks worker processes: call it outside a running event loop")
        if self.tap is not None:
            raise NetworkConfigError("TcpNetwork does not support a tap (its ledger rows are made in the worker "
                                     "processes): observe a SimNetwork or AsyncioNetwork run instead")
        timeout = check_run_timeout(timeout)
        strict = check_flag("strict", strict)
        self.check_faults()
        if not self.nodes:
            self.call_before_run()  # (called by every transport's run, nodes or not)
            self.ran = True
            return self.finish(0.0, strict=strict)
        self.groups = self._place()
        self._ids = list(self.nodes)
        self._index = {nid: i for i, nid in enumerate(self._ids)}
        proc = {nid: p for p, group in enumerate(self.groups) for nid in group}
        self._proc_of = [proc[nid] for nid in self._ids]
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        token = os.urandom(16)
        self.check_descriptors(len(self.groups))
        self.check_memory(len(self.groups))
        # (what the workers would each load otherwise: loaded once here, inherited by the fork)
        self.call_before_run()
        # it counts as run from here on: a refusal above (descriptors, memory, a before_run
        # function) leaves it to run again once mended, as SimNetwork and AsyncioNetwork do
        self.ran = True
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        parent = os.getpid()
        started: list[int] = []
        coordinator = None
        try:
            # A Ctrl-C while forking waits until every child is recorded (and is then raised): one
            # raised just after a fork lost the child's pid (never reaped), or ran the launching
            # process's code in the child (raised before it ignores SIGINT: a second "interrupted"
            # line or a traceback from the child, and a child holding stderr open).
            # No thread of fedsim's is alive while forking (threads_paused: the progress display's
            # fedsim-progress, a pool worker's fedsim-beats; started again once every child is
            # forked). A fork copies only this thread, and every lock as it was: one another thread
            # held then stays held in the child for ever (the display writing to stderr held the
            # stream's lock; 3.12+ warns of any such fork). What a child could still take over from
            # a thread: the display's own lock and log file, and a pool worker's beat pipe, are
            # never used in a child (it runs actors only, with its own loop); logging's locks and
            # the import lock are made anew in a child by CPython; a thread that is not fedsim's
            # (the program's own) may hold the std streams' or tqdm's lock: the child writes through
            # streams of its own (own_std_streams) and tqdm's lock is replaced
            # (fresh_tqdm_lock_in_child, registered at fork).
            with threads_paused(), sigint_deferred():
                for p in range(len(self.groups)):
                    sys.stdout.flush()
                    sys.stderr.flush()
                    pid = os.fork()
                    if pid == 0:  # the child: never returns
                        code = 70
                        try:
                            code = _worker_process(self, p, port, token, parent, listener)
                        finally:
                            os._exit(code)
                    started.append(pid)
                    self.pids.append(pid)
            coordinator = _Coordinator(self, listener, token, deadline, timeout)
            reports = _run_bounded(coordinator.run)
            duration = self._merge(reports)
            self._stopped_at, self._t0 = duration, None
        finally:
            if self._t0 is not None:  # it failed after go: the clock stops at the failure
                self._stopped_at, self._t0 = self.now(), None
            listener.close()
            # a clean run's workers are leaving already; after a failure they were told to abort
            clean = coordinator is not None and coordinator.phase == "bye"
            self._reap(started, grace=5.0 if clean else 1.0 if coordinator is not None else 0.0)
        return self.finish(duration, strict=strict)

    def check_descriptors(self, nprocs: int | None = None) -> None:
        """Refuse (``NetworkConfigError``, before any process starts) a run whose worker processes
        (``nprocs``; None: those the nodes added so far would be placed on, as :meth:`run` places
        them) could need more open files than the soft ``RLIMIT_NOFILE`` (``ulimit -n``) allows: each
        holds what it inherits from the launching process (counted now: those numbered below the
        limit, and the coordinator's listener, which :meth:`run` opens after this check), at most a
        connection to and one from every process (``2 * nprocs``: connections are opened by a first
        frame, and a protocol whose nodes all talk to each other opens them all) and 5 of its own (its
        listener, its control connection, its event loop's selector and wake-up pair, and the one
        each accept takes even when no connection is waiting: asyncio accepts until none is).
        Past the limit a worker could not accept its peers' connections, and the run waited
        ``start_timeout`` while asyncio logged each failed accept."""
        try:
            import resource
        except ImportError:  # pragma: no cover - no fork there either
            return
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return
        if nprocs is None:
            nprocs = self.count_processes()
        # (the listener was counted only when run had opened it: a check before run, as fedsim
        # compare's, passed one file short of what the run then refused)
        inherited = _open_descriptors(below=soft) + 1
        need = inherited + 2 * nprocs + 5
        if need > soft:
            top = "unlimited" if hard == resource.RLIM_INFINITY else hard
            raise NetworkConfigError(
                f"TcpNetwork with {plural(nprocs, 'worker process', 'worker processes')} needs {need} open files in each (a connection to and "
                f"from every process, {inherited} inherited, 5 of its own), above the open-file limit "
                f"ulimit -n = {soft} (hard limit {top}): raise it, e.g. `ulimit -n {need}`, or use fewer processes")

    def check_memory(self, nprocs: int | None = None) -> None:
        """Refuse (``NetworkConfigError``, before any process starts) a run whose worker processes
        (``nprocs``; None: those the nodes added so far would be placed on, as :meth:`run` places
        them) cannot fit in the memory the system has available (``MemAvailable`` in
        ``/proc/meminfo``), at ``BASELINE_BYTES`` (4 MiB) per process: less than a forked worker
        was measured to hold of its own (an idle actor's worker 5.1 MiB of private pages,
        ``test_a_worker_holds_at_least_the_memory_check_memorys_estimate_of_its_own``; FedRec on
        1,000 items with one process per node, after :meth:`before_run`'s functions ran in the
        launching process, 9.2-16.6 MB per worker, proportional set size summed over the workers:
        1.67 GB in all at 100 clients, 3.54 GB at 300, 9.97 GB at 1,000; docs/network-model.md's
        table). What the actors and their data add comes
        on top: the estimate is low on purpose, so that only a run that cannot fit is refused,
        before the kernel's out-of-memory killer ends it (or another process). Where
        ``MemAvailable`` cannot be read (no /proc), nothing is checked."""
        per = BASELINE_BYTES
        avail = _mem_available()
        if avail is None:
            return
        if nprocs is None:
            nprocs = self.count_processes()
        need = per * nprocs
        if need > avail:
            need_text, avail_text = human_bytes(need), human_bytes(avail)
            if need_text == avail_text:  # rounded alike: "needs 7.3 GB, above the 7.3 GB available" said nothing
                need_text, avail_text = f"{need:,} bytes", f"{avail:,} bytes"
            raise NetworkConfigError(
                f"TcpNetwork with {plural(nprocs, 'worker process', 'worker processes')} needs at least {need_text} of memory "
                f"({human_bytes(per)} per process, less than a worker process was measured to hold), "
                f"above the {avail_text} available (MemAvailable in /proc/meminfo): use fewer processes")

    def count_processes(self, roles: Mapping[str, str] | None = None) -> int:
        """How many worker processes :meth:`run` would start for the nodes ``roles`` (node id ->
        role, in the order they are added; default: the nodes added so far), placed as ``run``
        places them (``NetworkConfigError`` for a placement that does not fit them). ``fedsim
        compare`` counts them from the simulator's nodes (the same build), to check this network
        before building its actors."""
        if roles is None:
            roles = {nid: node.role for nid, node in self.nodes.items()}
        return len(self._place(roles)) if roles else 0

    def _place(self, roles: Mapping[str, str] | None = None) -> list[list[str]]:
        if roles is None:
            roles = {nid: node.role for nid, node in self.nodes.items()}
        ids = list(roles)
        n = len(ids)
        count = n if self.processes is None else max(1, min(self.processes, n))
        pl = self.placement
        if pl is None:
            others = [i for i in ids if roles[i] != "client"]
            clients = [i for i in ids if roles[i] == "client"]
            if count >= 2 and others and clients:
                return [others] + _chunks(clients, count - 1)
            return _chunks(ids, count)
        get = pl.get if isinstance(pl, Mapping) else pl
        limit = n if self.processes is None else self.processes
        groups: list[list[str]] = [[] for _ in range(limit)]
        for nid in ids:
            k = get(nid)
            if k is None or not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < limit:
                raise NetworkConfigError(f"placement of node {nid!r} must be a process index in range({limit}), "
                                         f"got {k!r}")
            groups[k].append(nid)
        return [g for g in groups if g]

    def _merge(self, reports: list[dict]) -> float:
        """Fill the parent's nodes and ledger from the workers' reports; returns the duration."""
        rows: dict[tuple[str, int], list] = {}
        for rep in reports:
            for r in rep["rows"]:
                num = r[0]
                r[0] = 0
                rows[(r[SRC], num)] = r
        for rep in reports:
            for src, num, rx, arrival, read, role, status, note in rep["arrivals"]:
                r = rows.get((src, num))
                if r is None:
                    raise TransportError(f"process {rep['proc']} reports a frame from {src!r} (number {num}) that no "
                                         "process sent", node=src, kind="frame")
                # (status: delivered, or lost with note "receiver offline": it came after its receiver's dropout)
                r[RX_START], r[ARRIVAL], r[STATUS], r[READ], r[DST_ROLE] = rx, arrival, status, bool(read), role
                r[NOTE] = note
        merged = [rows[k] for k in sorted(rows)]
        for i, r in enumerate(merged):
            r[0] = i
        led = self.ledger
        led.rows = merged
        led.missing = sorted((Missing(*m) for m in (m for rep in reports for m in rep["missing"])),
                             key=lambda m: (m.time, m.receiver, -1 if m.wait is None else m.wait, m.kind,
                                            str(m.sender)))
        self.steps = sorted((tuple(s) for rep in reports for s in rep["steps"]), key=lambda s: (s[0], s[1]))
        duration = 0.0
        for rep in reports:
            for role, members in rep["role_members"].items():
                for nid in members:
                    led.role_members[role].add(nid)
            for nid, info in rep["nodes"].items():
                node = self.nodes[nid]
                node.role = info["role"]
                led.roles[nid] = info["role"]
                node.offline = bool(info["offline"])
                # what its ctx.compute calls charged in the worker (RunResult.flops), empty if nothing
                node.flops = {str(k): float(v) for k, v in (info["flops"] or {}).items()}
                if info["done"]:
                    node.done = True
                    node.result = rep["results"][nid]
                elif info["waits"] is not None:
                    self._waits[nid] = info["waits"]
            duration = max(duration, rep["last"])
        return duration

    def _reap(self, pids: list[int], grace: float) -> None:
        """Wait up to ``grace`` seconds for the workers to exit, SIGKILL the rest, reap all."""
        alive = [p for p in pids if p not in self.exit_status]
        end = time.monotonic() + grace
        while alive:
            alive = [p for p in alive if not self._reaped(p)]
            if not alive or time.monotonic() >= end:
                break
            time.sleep(0.005)
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        end = time.monotonic() + 10.0
        while alive and time.monotonic() < end:  # a SIGKILLed process is reaped at once, unless stuck in the kernel
            alive = [p for p in alive if not self._reaped(p)]
            if alive:
                time.sleep(0.005)
        if alive:  # pragma: no cover - a process in uninterruptible sleep for 10 s
            raise TransportError(f"worker processes {alive} did not exit after SIGKILL within 10 s", kind="died")

    def _reaped(self, pid: int) -> bool:
        if pid in self.exit_status:
            return True
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped by someone else
            self.exit_status[pid] = -1
            return True
        if got == 0:
            return False
        self.exit_status[pid] = status
        return True

    def describe_process(self, p: int) -> str:
        """``process p (pid N; hosting a, b, ...)``, for error messages."""
        pid = self.pids[p] if p < len(self.pids) else None
        return f"process {p} ({'' if pid is None else f'pid {pid}; '}hosting {_names(self.groups[p])})"



def _worker_process(net: "TcpNetwork", p: int, port: int, token: bytes, parent: int, listener: socket.socket) -> int:
    """What forked child ``p`` runs: worker ``p`` against the control port ``port``; returns its
    exit status (0 after a run, 3 when it left because the run was aborted or the launching
    process went away, 70 after an error of its own, whose traceback it prints)."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it kills us if it must
        # stdout and stderr of its own: a thread of the launching program's own (fedsim's are
        # stopped while it forks) may have held their lock at the fork, for ever here (a write,
        # a warning, a traceback hung the run)
        own_std_streams()
        listener.close()
        return _Worker(net, p, port, token, parent).main()
    except KeyboardInterrupt:
        # a Ctrl-C that reached this process (the terminal signals the whole process group)
        # before it ignored SIGINT: the launching process got it too and ends the run
        return 3
    except BaseException:  # noqa: BLE001 - report anything, then leave
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
        return 70


def _run_bounded(main: Callable[[], Any], teardown: float = 2.0) -> Any:
    """``asyncio.run(main())`` whose teardown gives up, past ``teardown`` seconds, only on tasks
    that ignore cancellation (``_teardown``; see ``_Worker.main`` on 3.11's wait_for). A Ctrl-C
    while the loop and ``main``'s task are made waits until both exist (a loop half made, or a
    coroutine never started, said so on stderr as the process ended).

    The teardown cancels in rounds until no task is left: a task cancelled in one round can
    start another as it ends (a control connection accepted just before a Ctrl-C gets its
    handler task only once the accepting task has run), one can lose a cancellation and is
    cancelled again, and a task still pending when the loop closes is destroyed with asyncio's
    "Task was destroyed but it is pending!" on stderr. (``main`` should not leave that to the
    teardown: the coordinator cancels and awaits its own tasks.)"""
    loop = None
    interrupted: list[bool] = []
    restore = None
    try:
        with sigint_deferred():
            loop = asyncio.new_event_loop()
            task = loop.create_task(main())
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            # While the loop runs, a Ctrl-C cancels the main task (whose cleanup tells the workers
            # to stop) instead of raising KeyboardInterrupt at whatever line the loop was on: raised
            # between making a coroutine and its task, it left one never awaited ("coroutine
            # '_Coordinator._watch' was never awaited" on stderr). A second one raises at once.
            # (asyncio.run does the same.)
            def on_sigint(signum, frame, loop=loop, task=task):
                if interrupted or task.done():
                    raise KeyboardInterrupt()
                interrupted.append(True)
                task.cancel()
                loop.call_soon_threadsafe(lambda: None)  # (wakes a loop waiting in select)

            restore = signal.signal(signal.SIGINT, on_sigint)
        try:
            result = loop.run_until_complete(task)
        except asyncio.CancelledError:
            if interrupted:
                raise KeyboardInterrupt() from None
            raise
        if interrupted:  # (the task ended anyway: the run was interrupted all the same)
            raise KeyboardInterrupt()
        return result
    finally:
        if restore is not None:
            signal.signal(signal.SIGINT, restore)
        if loop is not None:
            _teardown(loop, teardown)


def _teardown(loop: asyncio.AbstractEventLoop, teardown: float) -> None:
    """Cancel the tasks left on ``loop`` and close it. Every round cancels every task not done,
    again: one that got its cancellation while the operation it awaited completed (3.11's
    wait_for then returns the result and loses the cancellation) is cancelled once more. The
    rounds go on while each ends some task, however long that takes (a loaded machine); past
    ``teardown`` seconds, a round that ends none is the last, from the second round on (a task
    that ignores every cancellation: asyncio names it on stderr as the loop closes). Before, one
    such lost cancellation made a round wait out the whole bound and the next give up; and on a
    machine loaded enough that the first round outlasted the bound, that task was never cancelled
    again."""
    try:
        end = time.monotonic() + teardown
        rounds = 0
        while True:
            # first the callbacks already scheduled, which can start tasks of their own (a
            # connection's handler task is started by a callback of its transport)
            loop.run_until_complete(asyncio.sleep(0))
            tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
            if not tasks:
                break
            for t in tasks:
                t.cancel()
            loop.run_until_complete(asyncio.wait(tasks, timeout=_TEARDOWN_ROUND))
            rounds += 1
            if rounds >= 2 and time.monotonic() >= end and not any(t.done() for t in tasks):
                break
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


_TEARDOWN_ROUND = 0.05  # seconds a teardown round waits for the tasks it cancelled before cancelling again


_OUT_OF_FILES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_SHOWN_PROCESSES = 8  # processes a timeout's message describes, one line each
_ACCEPT_GRACE = 2.0  # seconds a worker whose accept failed for want of descriptors waits for its peers' connections


def _backlog(peers: int) -> int:
    """The listen backlog of a listener ``peers`` processes may connect to at once."""
    return max(100, peers + 8)


def _connection_waiting(sock: socket.socket | None) -> bool:
    """Whether a connection waits in the accept queue of listening socket ``sock`` (poll, not
    select: a descriptor may be numbered above select's 1024)."""
    if sock is None or sock.fileno() < 0:
        return False
    import select

    p = select.poll()
    p.register(sock.fileno(), select.POLLIN)
    return bool(p.poll(0))


# less memory of its own than a forked worker process was measured to hold (TcpNetwork.check_memory)
BASELINE_BYTES = 4 * 2**20


def _mem_available() -> int | None:
    """``MemAvailable`` of /proc/meminfo in bytes, None where it cannot be read."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (state T, or t: stopped by a debugger), from
    /proc/PID/stat; False where that cannot be read (it is then waited for, as a busy one)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3]  # (the command name may hold ')')
    return state in (b"T", b"t")


def _nofile_limit() -> str:
    """The soft open-file limit, as ``ulimit -n`` says it."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
    except (ImportError, OSError):  # pragma: no cover
        return "unknown"


def _open_descriptors(below: int) -> int:
    """How many file descriptors this process has open numbered below ``below`` (those a new
    descriptor could not take: one above the limit holds no place under it); 3, stdin/out/err,
    where it cannot tell."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            names = os.listdir(folder)  # (lists the descriptor listdir itself had open)
        except OSError:
            continue
        return max(0, sum(1 for f in names if f.isdigit() and int(f) < below) - 1)
    return 3  # pragma: no cover


def check_host(host: str, allow_remote: bool) -> None:
    """Raise ``NetworkConfigError`` unless every address ``host`` stands for is a loopback
    address, or ``allow_remote`` is set."""
    try:
        addrs = {ipaddress.ip_address(host)}
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise NetworkConfigError(f"cannot resolve host {host!r}: {exc}") from None
        addrs = {ipaddress.ip_address(str(i[4][0]).split("%")[0]) for i in infos}
    if not allow_remote and not all(a.is_loopback for a in addrs):
        raise NetworkConfigError(
            f"host {host!r} is not a loopback address: TcpNetwork listens on 127.0.0.1 unless told otherwise; "
            "pass allow_remote=True to listen on another interface on purpose")


def _is_int(value: Any) -> bool:
    """An int or a NumPy integer, not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _chunks(items: list, k: int) -> list[list]:
    k = max(1, min(k, len(items)))
    q, r = divmod(len(items), k)
    out, at = [], 0
    for i in range(k):
        n = q + (1 if i < r else 0)
        out.append(items[at:at + n])
        at += n
    return out


def _names(ids: list[str], shown: int = 4) -> str:
    more = f", ... ({len(ids) - shown} more)" if len(ids) > shown else ""
    return ", ".join(ids[:shown]) + more


def _listed(items: list[str], shown: int = 4) -> str:
    """``items`` joined by "; ", the first ``shown`` of them and how many more: a message about
    processes stays a few lines long with hundreds of them."""
    more = f"; ... and {len(items) - shown} more" if len(items) > shown else ""
    return "; ".join(items[:shown]) + more


def _size(doc: bytes) -> str:
    return f"{len(doc):,}-byte"


def _status_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "?"
        return f"was killed by signal {sig} ({name})"
    if os.WIFEXITED(status):
        return f"exited with status {os.WEXITSTATUS(status)}"
    return f"ended with wait status {status}"


def _pack(obj: Any) -> bytes:
    data = encode(obj).data
    return _PREFIX.pack(len(data)) + data


def _frames(make: Callable[[Any], dict], items: list | bytes, first: int) -> Iterator[bytes]:
    """The control frames ``_pack(make(part))`` of consecutive parts of ``items`` (a list or
    bytes) that together hold all of it, none for empty ``items``, one at a time. A part has at
    most ``first`` items (at least one), and half as many as the last one tried while its document
    is over ``CONTROL_FRAME_BYTES``. Raises ``CodecError`` when one item alone does not fit."""
    k, n, total = 0, max(1, first), len(items)
    while k < total:
        part = items[k:k + n]
        frame = _pack(make(part))
        if len(frame) - _PREFIX.size > CONTROL_FRAME_BYTES:
            if len(part) == 1:
                raise CodecError(f"one entry encodes to {len(frame) - _PREFIX.size:,} bytes, above the control-frame "
                                 f"bound of {CONTROL_FRAME_BYTES:,}: {repr(part[0])[:200]}")
            n = len(part) // 2
            continue
        yield frame
        k += len(part)


def _capped(text: str) -> str:
    """``text``, or its first and last _TEXT_CAP/2 characters when it is longer."""
    if len(text) <= _TEXT_CAP:
        return text
    half = _TEXT_CAP // 2
    return f"{text[:half]}\n... ({len(text) - 2 * half:,} characters cut) ...\n{text[-half:]}"


async def _read_doc(reader: asyncio.StreamReader, limit: int) -> dict:
    """One control document (u32 length + codec document, at most ``limit`` bytes)."""
    (n,) = _PREFIX.unpack(await reader.readexactly(_PREFIX.size))
    if n > limit:
        raise CodecError(f"control frame of {n} bytes above the bound of {limit}")
    doc = decode(await reader.readexactly(n), max_bytes=limit)
    if type(doc) is not dict or type(doc.get("op")) is not str:
        raise CodecError("control frame is not a map with an 'op'")
    return doc


def _exception_info(exc: BaseException) -> dict:
    # (cut: the report must fit a control frame, whatever the exception carries)
    info = {"type": type(exc).__name__, "module": type(exc).__module__, "message": _capped(str(exc)),
            "traceback": _capped("".join(traceback.format_exception(exc))), "args": None}
    if isinstance(exc, MessageTooLargeError):
        info["args"] = [exc.node, exc.kind, exc.nbytes, exc.limit]
    return info


_REBUILDABLE = {cls.__name__: cls for cls in (CodecError, FedsimError, ForeignAwaitError, NetworkConfigError,
                                              UnknownNodeError, TransportError)}


def _rebuild(info: dict, where: str) -> BaseException:
    """An actor's exception, rebuilt in the parent from its type name and message."""
    name, msg = info["type"], info["message"]
    exc: BaseException | None = None
    if name == "MessageTooLargeError" and info.get("args"):
        exc = MessageTooLargeError(*info["args"])
    else:
        cls = _REBUILDABLE.get(name)
        if name == "CancelledError" and info.get("module") == asyncio.CancelledError.__module__:
            cls = asyncio.CancelledError  # an actor that ended cancelled by its own code
        if cls is None and info.get("module") == "builtins":
            b = getattr(builtins, name, None)
            cls = b if isinstance(b, type) and issubclass(b, Exception) else None
        if cls is not None:
            try:
                exc = cls(msg)
            except Exception:  # noqa: BLE001 - constructors with other signatures
                exc = None
    if exc is None:
        exc = RemoteException(f"{info.get('module')}.{name}", msg)
    exc.add_note(f"raised in {where}; its traceback there:\n{info['traceback']}")
    return exc


# ------------------------------------------------------------------------------------------------
# a worker process


class _Received(list):
    """The receiver's half of a ledger row. When the actor reads the message (``Context`` sets
    ``READ``), the receiver's role at that moment becomes the row's ``dst_role``: the role in which
    it consumed the message (until then, its role at arrival)."""

    __slots__ = ("node",)

    def __setitem__(self, i, value) -> None:
        list.__setitem__(self, i, value)
        if i == READ and value:
            list.__setitem__(self, DST_ROLE, self.node.role)


class _Out:
    """One outbound connection, opened by the first frame to its process: frames queued by
    ``post``, written in order by ``pump``."""

    __slots__ = ("proc", "writer", "queue", "wake", "task")

    def __init__(self, proc: int) -> None:
        self.proc = proc
        self.writer: asyncio.StreamWriter | None = None  # once its pump has connected
        self.queue: deque = deque()
        self.wake = asyncio.Event()
        self.task: asyncio.Task | None = None


class _Worker:
    """The state and main loop of one worker process (runs in the child after fork)."""

    def __init__(self, net: TcpNetwork, proc: int, ctl_port: int, token: bytes, parent: int) -> None:
        self.net = net
        self.proc = proc
        self.ctl_port = ctl_port
        self.token = token
        self.parent = parent
        self.local = [net.nodes[i] for i in net.groups[proc]]
        self.nprocs = len(net.groups)
        self.loop: asyncio.AbstractEventLoop | None = None
        # counters the coordinator polls
        self.sent = 0
        self.received = 0
        self.blocked = 0
        self.finished = 0
        self.activity = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.sent_to = [0] * self.nprocs
        self.recv_from = [0] * self.nprocs
        self.last = 0.0
        # what the report carries
        self.sent_rows: list[tuple[int, list]] = []
        self.arrivals: list[list] = []
        self.results: dict[str, bytes] = {}
        self.outs: list[_Out | None] = [None] * self.nprocs
        self.inbound: set[int] = set()
        self.tasks: list[asyncio.Task] = []
        self.stopping = False
        self.ctl: asyncio.StreamWriter | None = None
        self.task_of: dict[str, asyncio.Task] = {}
        # its nodes with an offline_at, and the timers of those still to come
        self.dropouts = [n for n in self.local if n.spec.offline_at is not None]
        self.timers: list[asyncio.TimerHandle] = []
        self.out_of_files = False  # an accept failed for want of descriptors (checked _ACCEPT_GRACE later)
        self.accept_failures = 0
        self.addresses: list = []  # process index -> [host, port], from the coordinator's directory
        self.listening: socket.socket | None = None

    # -- entry ---------------------------------------------------------------------------------
    def main(self) -> int:
        # (SIGINT is ignored from the child's first step: _worker_process)
        _die_with_parent(self.parent)
        self.net._worker = self
        # No loop teardown: the process leaves through os._exit right after, and the kernel closes
        # its sockets. (asyncio.run's teardown waits for every cancelled task, and a task can lose
        # or ignore its cancellation: in 3.11 one cancelled inside wait_for just as the awaited read
        # completes, which is why the worker's timed waits use asyncio.timeout, or an actor's own
        # code that catches CancelledError.)
        return asyncio.new_event_loop().run_until_complete(self._main())

    async def _main(self) -> int:
        net = self.net
        self.loop = asyncio.get_running_loop()
        self.loop.set_exception_handler(self._loop_error)
        self.ops: asyncio.Queue = asyncio.Queue()
        self.go = asyncio.Event()
        family, _, _, _, addr = socket.getaddrinfo(net.host, 0, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.bind(addr)
        self.listening = sock
        # a backlog for every peer: they may all connect at once (the clients' first messages to
        # the server's process), and a connection past a full backlog waited a SYN retransmission
        # (1 s and more)
        server = await asyncio.start_server(self._inbound, sock=sock, limit=_READ_LIMIT,
                                            backlog=_backlog(self.nprocs))
        host, port = sock.getsockname()[:2]
        try:
            # (asyncio.timeout, not wait_for, here and in the worker's other timed waits: 3.11's
            # wait_for, cancelled in the loop pass in which what it awaits completes, loses the
            # cancellation; see ClosedOnDropout.await_within)
            async with asyncio.timeout(net.start_timeout):
                reader, self.ctl = await asyncio.open_connection("127.0.0.1", self.ctl_port, limit=_READ_LIMIT)
        except (ConnectionRefusedError, ConnectionResetError):
            # the launching process stopped listening before this process reached it: it is
            # ending the run (a Ctrl-C at start-up, or a failure of its own, which it reports);
            # a traceback here said nothing the user could act on
            server.close()
            return 3
        except (OSError, TimeoutError) as exc:  # (it listens, but cannot be reached): one line
            server.close()
            sys.stderr.write(f"fedsim: {net.describe_process(self.proc)} cannot reach the launching process at "
                             f"127.0.0.1:{self.ctl_port} ({type(exc).__name__}: {exc}); it leaves\n")
            return 3
        self._send_ctl({"op": "hello", "proc": self.proc, "token": self.token, "pid": os.getpid(), "host": host,
                        "port": port})
        ctl_task = self.loop.create_task(self._control(reader))
        try:
            directory = await self._op("directory")
            if directory is None:
                return 3
            self.addresses = directory["addresses"]
            net.pids = list(directory["pids"])  # a worker knows only its elder siblings' pids from fork
            # no connection yet: the one to process q is opened by the first frame to it (_pump),
            # and the listener accepts its peers' until the run ends
            go = await self._op("go")
            if go is None:
                return 3
            net._t0 = float(go["t0"])
            self.go.set()
            self._start_actors()
            stop = await self._op("stop")
            if stop is None:
                return 3
            await self._report()
            await self._op("bye")
            return 0
        finally:
            self.stopping = True
            ctl_task.cancel()
            server.close()
            try:  # a failure report still buffered goes out before the process leaves (os._exit)
                async with asyncio.timeout(1.0):
                    await self.ctl.drain()
            except Exception:  # noqa: BLE001 - the coordinator is gone
                pass

    async def _op(self, name: str) -> dict | None:
        """The next control message, which must be ``name``; None once told to abort."""
        msg = await self.ops.get()
        if msg["op"] == "abort":
            return None
        if msg["op"] != name:
            raise FedsimError(f"process {self.proc}: expected control message {name!r}, got {msg['op']!r}")
        return msg

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        """The loop's handler of errors no task catches. An accept that fails for want of file
        descriptors is logged by asyncio with a traceback, and retried a second later, for ever:
        at the open-file limit the run waited ``start_timeout`` with a traceback per failed accept
        on stderr. Here it is not logged; if a peer's connection still waits to be accepted
        ``_ACCEPT_GRACE`` seconds later (the failed accept may have been the one asyncio makes
        after the last connection, to find none waiting), that ends the run, reported once with
        the open-file limit; if none waits, the next failure (asyncio retries every second) is
        checked again. Anything else: asyncio's default handler."""
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _OUT_OF_FILES and "accept" in str(context.get("message")):
            self.accept_failures += 1
            if not self.out_of_files:
                self.out_of_files = True
                loop.call_later(_ACCEPT_GRACE, self._accepts_failed, exc)
            return
        if self.accept_failures and isinstance(exc, ValueError) and "_start_serving" in repr(context.get("handle")):
            return  # asyncio's retry of that accept, on the listener closed since (the run ended)
        loop.default_exception_handler(context)

    def _accepts_failed(self, exc: OSError) -> None:
        self.out_of_files = False  # (a later failed accept is checked again)
        if not self.stopping and _connection_waiting(self.listening):
            net = self.net
            self.fail("connect", f"{net.describe_process(self.proc)} cannot accept its peers' connections: "
                      f"{type(exc).__name__}: {exc} (open-file limit ulimit -n = {_nofile_limit()})",
                      node=net.groups[self.proc][0])

    # -- control channel -----------------------------------------------------------------------
    def _send_ctl(self, obj: dict) -> None:
        self.ctl.write(_pack(obj))

    async def _control(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                msg = await _read_doc(reader, CONTROL_FRAME_BYTES)
                if msg["op"] == "poll":
                    self._send_ctl(self._status(msg["wave"]))
                else:
                    if msg["op"] in ("stop", "abort"):
                        self.stopping = True  # readers: a closed connection is no failure any more
                    self.ops.put_nowait(msg)
        except asyncio.CancelledError:
            raise
        except (asyncio.IncompleteReadError, ConnectionError):  # the coordinator is gone: leave
            self.ops.put_nowait({"op": "abort"})
        except BaseException as exc:  # noqa: BLE001 - it spoke nonsense: say what, then leave
            # (left unsaid, the run's error was only this worker's exit status)
            net = self.net
            self.fail("frame", f"{net.describe_process(self.proc)} could not read a control frame from the "
                      f"launching process: {type(exc).__name__}: {exc}", node=net.groups[self.proc][0])
            self.ops.put_nowait({"op": "abort"})

    def _status(self, wave: int) -> dict:
        return {"op": "status", "proc": self.proc, "wave": wave, "sent": self.sent, "received": self.received,
                "blocked": self.blocked, "finished": self.finished, "n": len(self.local),
                "pending": sum(1 for n in self.dropouts if not (n.done or n.offline)),
                "activity": self.activity, "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
                "sent_to": self.sent_to, "recv_from": self.recv_from}

    def fail(self, kind: str, message: str, *, node: str | None = None, peer: int | None = None) -> None:
        """Report a failure to the coordinator (which ends the run)."""
        try:
            self._send_ctl({"op": "fail", "kind": kind, "message": message, "node": node, "peer": peer,
                            "proc": self.proc})
        except Exception:  # noqa: BLE001 - the control connection is gone: the coordinator knows
            pass

    # -- connections ---------------------------------------------------------------------------
    async def _connect(self, q: int) -> asyncio.StreamWriter | None:
        """The connection to process ``q`` (opened by its first frame); None after a failure,
        which is reported."""
        net = self.net
        host, port = net.peer_address(q, *self.addresses[q])
        try:
            async with asyncio.timeout(net.start_timeout):
                reader, writer = await asyncio.open_connection(host, port, limit=_READ_LIMIT)
        except (OSError, asyncio.TimeoutError) as exc:
            what = "timed out" if isinstance(exc, asyncio.TimeoutError) else f"{type(exc).__name__}: {exc}"
            if isinstance(exc, OSError) and exc.errno in _OUT_OF_FILES:
                what += f" (open-file limit ulimit -n = {_nofile_limit()})"
            if not self.stopping:
                self.fail("connect", f"process {self.proc} cannot connect to {net.describe_process(q)} at "
                          f"{host}:{port}: {what}", node=net.groups[q][0], peer=q)
            return None
        writer.transport.set_write_buffer_limits(high=0)  # drain() returns once the frame is in the kernel
        writer.write(_pack({"op": "peer", "token": self.token, "proc": self.proc}))
        return writer

    async def _inbound(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        net = self.net
        try:
            try:
                async with asyncio.timeout(net.start_timeout):
                    hello = await _read_doc(reader, _HANDSHAKE_BYTES)
            except Exception:  # noqa: BLE001 - a stray or broken connection: close it unread
                writer.close()
                return
            q = hello.get("proc")
            if (hello["op"] != "peer" or hello.get("token") != self.token or type(q) is not int
                    or not 0 <= q < self.nprocs or q in self.inbound):
                writer.close()
                return
            self.inbound.add(q)
            await self.go.wait()
            await self._read_frames(reader, writer, q)
        except asyncio.CancelledError:
            return  # shutting down (a connection handler that ends cancelled makes asyncio log it)
        except Exception as exc:  # noqa: BLE001 - anything else is a bug; say so rather than hang
            self.fail("closed", f"process {self.proc}: reading from a peer failed: {type(exc).__name__}: {exc}")
        finally:
            # the connection is over (its peer ended it, or it was refused): closed here, not left
            # to the garbage collector, which closed it with a ResourceWarning ("unclosed
            # <StreamWriter ...>") on the terminal of a process that lived on (closing twice is nothing)
            writer.close()

    def send(self, q: int, item: tuple) -> None:
        out = self.outs[q]
        if out is None:  # the first frame to process q: its pump opens the connection first
            out = self.outs[q] = _Out(q)
            out.task = self.loop.create_task(self._pump(out))
        out.queue.append(item)
        out.wake.set()
        self.sent += 1
        self.sent_to[q] += 1

    def touch(self, now: float) -> None:
        self.activity += 1
        if now > self.last:
            self.last = now

    async def _pump(self, out: _Out) -> None:
        """Connect to ``out.proc``, then write ``out``'s frames in order; a frame's ``tx_start``
        is when it is handed to the socket (after the connection stands), ``tx_end`` when it left
        user space."""
        net = self.net
        writer = out.writer = await self._connect(out.proc)
        if writer is None:
            return
        transport = writer.transport
        queue = out.queue
        frame = net.frame
        item = None
        try:
            while True:
                if not queue:
                    out.wake.clear()
                    await out.wake.wait()
                    continue
                item = queue.popleft()
                src, dst, num, rnd, anon, doc, row = item
                data = frame(src, dst, num, rnd, anon, doc)
                if transport.is_closing():
                    raise ConnectionResetError("the connection is closed")
                row[TX_START] = net.now()
                writer.write(data)
                if transport.get_write_buffer_size():
                    await writer.drain()
                row[TX_END] = net.now()
                self.bytes_out += len(data)
                item = None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            if not self.stopping:
                src = item[0] if item is not None else None
                during = f" while sending a frame from node {src!r}" if src else ""
                self.fail("closed", f"process {self.proc} lost its connection to {net.describe_process(out.proc)}"
                          f"{during}: {type(exc).__name__}: {exc}", node=net.groups[out.proc][0], peer=out.proc)

    async def _read_frames(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, q: int) -> None:
        net = self.net
        readexactly = reader.readexactly
        limit = net.max_frame_bytes
        nodes, ids, proc_of = net.nodes, net._ids, net._proc_of
        peer = net.describe_process(q)
        src = None
        got = 0
        expected = 0
        # the numbers of each sender's frames on this connection, which strictly increase (its
        # copies are numbered in send order and one queue per connection writes them in order):
        # a repeated number would be a second delivery of one ledger row
        last: dict[int, int] = {}
        try:
            while True:
                src, got, expected = None, 0, _PREFIX.size
                pre = await readexactly(_PREFIX.size)
                rx = net.now()
                self.bytes_in += _PREFIX.size
                (length,) = _PREFIX.unpack(pre)
                got, expected = _PREFIX.size, length + _PREFIX.size
                if expected > limit or length < _REST.size:
                    if length >= _REST.size:  # name the sender if its header follows promptly
                        try:
                            async with asyncio.timeout(1.0):
                                rest = await readexactly(_REST.size)
                            i = _REST.unpack(rest)[0]
                            if i < len(ids) and proc_of[i] == q:
                                src = ids[i]
                        except Exception:  # noqa: BLE001
                            pass
                    who = f"node {src!r} in {peer}" if src else peer
                    what = (f"a frame of {expected:,} bytes, above max_frame_bytes = {limit:,}" if expected > limit
                            else f"a frame of {expected} bytes, shorter than the {FRAME_OVERHEAD}-byte frame header")
                    self.fail("frame", f"process {self.proc} received {what} from {who}; connection closed",
                              node=src or net.groups[q][0], peer=q)
                    writer.close()
                    return
                rest = await readexactly(_REST.size)
                got += _REST.size
                self.bytes_in += _REST.size
                i, j, num, rnd, flags = _REST.unpack(rest)
                if i >= len(ids) or proc_of[i] != q or j >= len(ids) or proc_of[j] != self.proc or flags > 1:
                    bad = (f"sender index {i}" if i >= len(ids) or proc_of[i] != q else
                           f"receiver index {j}" if j >= len(ids) or proc_of[j] != self.proc else f"flags {flags}")
                    self.fail("frame", f"process {self.proc} received a malformed frame header from {peer}: {bad} "
                              "is not valid on this connection; connection closed", node=net.groups[q][0], peer=q)
                    writer.close()
                    return
                src = ids[i]
                before = last.get(i, -1)
                if num <= before:
                    self.fail("frame", f"process {self.proc} received a frame from node {src!r} in {peer} with message "
                              f"number {num} after number {before} (a repeated or reordered frame); connection "
                              "closed", node=src, peer=q)
                    writer.close()
                    return
                last[i] = num
                left = length - _REST.size
                if left <= _READ_CHUNK:
                    doc = await readexactly(left)
                    self.bytes_in += left
                else:
                    # a long document in pieces, each counted as it comes: a frame on its way is
                    # progress (counted whole on arrival, a frame taking over stall_timeout to
                    # cross was "no progress ... with frames outstanding")
                    parts = []
                    while left:
                        part = await readexactly(min(left, _READ_CHUNK))
                        parts.append(part)
                        left -= len(part)
                        got += len(part)
                        self.bytes_in += len(part)
                    doc = b"".join(parts)
                    del parts
                try:
                    kind, payload = decode_message(doc, max_bytes=net.max_message_bytes, max_depth=DEFAULT_MAX_DEPTH)
                except CodecError as exc:
                    self.fail("frame", f"process {self.proc} received a malformed frame from node {src!r} in {peer}: "
                              f"its {_size(doc)} document does not decode ({exc}); connection closed",
                              node=src, peer=q)
                    writer.close()
                    return
                self._deliver(q, src, nodes[ids[j]], num, rnd, flags == 1, kind, doc, payload, expected, rx)
        except asyncio.IncompleteReadError as exc:
            if self.stopping and got == 0 and not exc.partial:
                return  # the run is over: a clean end of stream
            if got == 0 and not exc.partial:
                self.fail("closed", f"{peer} closed its connection to process {self.proc}",
                          node=net.groups[q][0], peer=q)
            else:
                have = got + len(exc.partial)
                who = f"node {src!r} in {peer}" if src else peer
                self.fail("midframe", f"the connection from {who} to process {self.proc} closed in the middle of a "
                          f"frame ({have:,} of {expected:,} bytes)", node=src or net.groups[q][0], peer=q)
        except (ConnectionError, OSError) as exc:
            if not self.stopping:
                self.fail("closed", f"the connection from {peer} to process {self.proc} failed: "
                          f"{type(exc).__name__}: {exc}", node=net.groups[q][0], peer=q)

    def _deliver(self, q: int, src: str, dst: Node, num: int, rnd: int, anonymous: bool, kind: str, doc: bytes,
                 payload: Any, nbytes: int, rx: float) -> None:
        now = self.net.now()
        doff = dst.spec.offline_at
        if doff is not None and (dst.offline or now >= doff):
            # it came after its receiver's dropout (also one whose actor had finished): lost there,
            # as on SimNetwork a copy reaching an offline node (its bytes came in: rx_start is set)
            arow = _Received((num, rnd, src, dst.id, "", dst.role, kind, nbytes, 0, 0, _NAN, _NAN, _NAN, rx, _NAN,
                              "lost", False, anonymous, "receiver offline"))
            arow.node = dst
            self.arrivals.append(arow)
            self.received += 1
            self.recv_from[q] += 1
            self.touch(now)
            return
        arow = _Received((num, rnd, src, dst.id, "", dst.role, kind, nbytes, 0, 0, _NAN, _NAN, _NAN, rx, now,
                          "delivered", False, anonymous, ""))
        arow.node = dst
        self.arrivals.append(arow)
        p = Payload(Encoded(doc, 0, 0))
        p.decoded = payload
        p.has_decoded = True
        envl = Envelope(kind, p, src, anonymous, rnd, arow, nbytes)
        self.received += 1
        self.recv_from[q] += 1
        self.touch(now)
        if hand_over(dst, envl):
            self.blocked -= 1

    # -- actors --------------------------------------------------------------------------------
    def _start_actors(self) -> None:
        net = self.net
        t0 = net._t0
        for node in self.local:
            node.ctx = net.context_class(net, node)
            try:
                coro = node.actor(node.ctx, *node.args, **(node.kwargs or {}))
            except Exception as exc:  # noqa: BLE001
                self._actor_failed(node, exc)
                continue
            if not asyncio.iscoroutine(coro):
                self._actor_failed(node, FedsimError(f"actor of node {node.id!r} is not an async function "
                                                     f"(it returned {type(coro).__name__})"))
                continue
            off = node.spec.offline_at
            if off is not None:
                if off <= 0:  # offline from the start: its actor never runs (as on SimNetwork)
                    node.offline = True
                    coro.close()
                    self.finished += 1
                    continue
                # at t0 + offline_at on the common clock (the loop's clock is time.monotonic, as t0's)
                self.timers.append(self.loop.call_later(max(0.0, t0 + off * net.time_scale - time.monotonic()),
                                                        self.go_offline, node))
            task = self.loop.create_task(coro, name=node.id)
            task.add_done_callback(lambda t, n=node: self._task_done(n, t))
            self.tasks.append(task)
            self.task_of[node.id] = task

    def go_offline(self, node: Node) -> None:
        """``node``'s ``offline_at`` has come: cancel its actor (unless it has finished or the run
        is over); ``_task_done`` counts it out."""
        if node.done or node.offline or self.net.ended:
            return
        node.offline = True
        self.touch(self.net.now())  # (a dropout is activity: a status poll sees it)
        task = self.task_of.get(node.id)
        if task is not None:
            task.cancel()

    def _task_done(self, node: Node, task: asyncio.Task) -> None:
        # an actor closed at the run's end does nothing of the run: its end must not date the
        # run's last activity (that was the coordinator's stop, after two polls or more)
        if task.cancelled() and self.net.ended:
            return
        # (a task cancelled before the run's end was ended by the actor's own code: the worker
        # cancels its actors only after end_run; taken for one it had closed, it was never counted
        # finished nor reported, and the run waited for it until its timeout, for ever without one)
        exc = cancelled(task) if task.cancelled() else task.exception()
        if node.offline and (task.cancelled() or isinstance(exc, RunEnded)):
            # closed by its dropout (RunEnded: its finally block tried to wait): out of the run
            self.finished += 1
            self.touch(self.net.now())
            return
        if isinstance(exc, RunEnded):
            return  # cancelled at the run's end, and its finally block tried to wait
        self.touch(self.net.now())
        if exc is not None:
            self._actor_failed(node, exc)
            return
        try:
            data = encode(task.result()).data
        except CodecError as err:
            self._actor_failed(node, CodecError(f"its return value cannot travel back to the launching process: {err}"))
            return
        if len(data) > self.net.max_message_bytes:
            self._actor_failed(node, CodecError(f"its return value encodes to {len(data):,} bytes, above "
                                                f"max_message_bytes = {self.net.max_message_bytes:,}"))
            return
        node.done = True
        self.results[node.id] = data
        self.finished += 1

    def _actor_failed(self, node: Node, exc: BaseException) -> None:
        try:
            self._send_ctl({"op": "fail", "kind": "actor", "node": node.id, "role": node.role, "proc": self.proc,
                            "pid": os.getpid(), "error": _exception_info(exc),
                            "message": f"actor {node.id!r} failed"})
        except Exception:  # noqa: BLE001
            pass

    # -- the end -------------------------------------------------------------------------------
    async def _report(self) -> None:
        """Close blocked actors (after describing what they wait for) and send the report."""
        net = self.net
        waits = {n.id: net.waits_for(n) for n in self.local if not (n.done or n.offline)}
        # the run is over: what the cancelled actors' finally blocks send is dropped (it would be
        # a row in this report, in flight for ever), as on the other transports
        net.end_run()
        for h in self.timers:
            h.cancel()
        for t in self.tasks:
            if not t.done():
                t.cancel()
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=net.start_timeout)
        role_members = {}
        local = {n.id for n in self.local}
        for role, members in net.ledger.role_members.items():
            mine = sorted(members & local)
            if mine:
                role_members[role] = mine
        rows = []
        for num, row in self.sent_rows:
            r = list(row)
            r[0] = num
            rows.append(r)
        lists = {
            "nodes": [[n.id, n.done, n.role, waits.get(n.id), n.offline, n.flops] for n in self.local],
            "role_members": [[role, nid] for role, members in role_members.items() for nid in members],
            "missing": [[m.round, m.receiver, m.sender, m.kind, m.time, m.expected, m.arrived, m.wait]
                        for m in net.ledger.missing],
            "steps": [list(s) for s in net.steps],
            "rows": rows,
            "arrivals": [[a[2], a[0], a[RX_START], a[ARRIVAL], a[READ], a[DST_ROLE], a[STATUS], a[NOTE]]
                         for a in self.arrivals],
        }
        # every part of the report is cut to fit CONTROL_FRAME_BYTES: a run of small messages has
        # as many rows as any other, and a return value may be as long as max_message_bytes
        try:
            self._send_ctl({"op": "report", "proc": self.proc, "last": self.last})
            for op, items in lists.items():
                for frame in _frames(lambda part, op=op: {"op": op, "items": part}, items, _REPORT_CHUNK):
                    self.ctl.write(frame)
                    await self.ctl.drain()
            for nid, data in self.results.items():
                room = CONTROL_FRAME_BYTES - _HANDSHAKE_BYTES - len(nid)
                for frame in _frames(lambda part, nid=nid: {"op": "result", "node": nid, "data": part}, data, room):
                    self.ctl.write(frame)
                    await self.ctl.drain()
        except CodecError as exc:
            self.fail("frame", f"{net.describe_process(self.proc)} cannot send its report: {exc}")
            return
        self._send_ctl({"op": "done", "proc": self.proc})
        await self.ctl.drain()


def _die_with_parent(parent: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux); leave at once if the
    parent is already gone."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: the closed control connection still ends us
        pass
    if os.getppid() != parent:
        os._exit(3)


# ------------------------------------------------------------------------------------------------
# the coordinator (the launching process)


class _Failed(Exception):
    """Internal: a failure was reported; the coordinator ends the run."""


class _ResetIsEnd(asyncio.StreamReaderProtocol):
    """The coordinator's side of a control connection: one its worker resets ends as one it
    closes, with what the worker sent before the reset still read. A worker that leaves with
    control frames unread (after it reported a failure, the frames sent with the one it could not
    read: go, the polls) resets its connection as it exits. asyncio then raised the
    ``ConnectionResetError`` (or the ``BrokenPipeError`` of the coordinator's next write to it)
    before the bytes its stream held, and a write's error closed the connection with the bytes the
    socket held unread: the worker's report was lost, and the run's error was its exit status.
    Here the bytes still in the socket are read into the stream (the reset comes after them), and
    the stream ends as at a close."""

    def __init__(self, stream: asyncio.StreamReader, connected: Callable, *, loop) -> None:
        super().__init__(stream, connected, loop=loop)
        self.stream = stream
        self.sock: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.sock = transport.get_extra_info("socket")  # (still open in connection_lost)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, ConnectionError):
            if self.sock is not None:
                try:
                    with self.sock.dup() as sock:  # (a socket object of its own, on a copy of the descriptor)
                        sock.setblocking(False)
                        while data := sock.recv(1 << 16):
                            self.stream.feed_data(data)
                except OSError:  # the reset itself (ECONNRESET) once the bytes before it are read
                    pass
            exc = None
        super().connection_lost(exc)


class _Child:
    __slots__ = ("proc", "pid", "writer", "host", "port", "status", "report", "done", "eof", "died",
                 "left_unasked", "reported")

    def __init__(self, proc: int, pid: int) -> None:
        self.proc = proc
        self.pid = pid
        self.writer: asyncio.StreamWriter | None = None
        self.host = ""
        self.died = False
        self.left_unasked = False  # its control connection closed before any abort
        self.reported = False  # it reported a failure
        self.port: int | None = None
        self.status: dict | None = None
        # a worker's report, as its frames come in (see _Worker._report); results[node]: pieces
        self.report: dict = {"nodes": {}, "role_members": {}, "missing": [], "steps": [], "rows": [],
                             "arrivals": [], "results": {}}
        self.done = False
        self.eof = False


class _Coordinator:
    def __init__(self, net: TcpNetwork, listener: socket.socket, token: bytes, deadline: float | None,
                 timeout: float | None) -> None:
        self.net = net
        self.listener = listener
        self.token = token
        self.deadline = deadline
        self.timeout = timeout
        self.children = [_Child(p, pid) for p, pid in enumerate(net.pids)]
        self.failures: list[dict] = []
        self.phase = "start-up"
        self.aborted = False
        self.closing = False  # the run is ending: a control connection accepted now gets no handler
        self.wave = 0

    async def run(self) -> list[dict]:
        net = self.net
        self.loop = asyncio.get_running_loop()
        self.changed = asyncio.Event()
        self.tasks: list[asyncio.Task] = []
        loop = self.loop

        def control_protocol() -> _ResetIsEnd:  # (what start_server makes, but a reset ends the stream as a close)
            return _ResetIsEnd(asyncio.StreamReader(limit=_READ_LIMIT, loop=loop), self._connected, loop=loop)

        server = await loop.create_server(control_protocol, sock=self.listener,
                                          backlog=_backlog(len(self.children)))
        watch = self.loop.create_task(self._watch())
        try:
            start_by = time.monotonic() + net.start_timeout
            await self._until(lambda c: c.port is None, start_by, "to report its address")
            # the directory and go at once: a worker connects to a peer when it first sends it a
            # frame, not before (a full mesh at start-up cost processes^2 connections)
            directory = _pack({"op": "directory", "addresses": [[c.host, c.port] for c in self.children],
                               "pids": net.pids})
            self.phase = "run"
            t0 = time.monotonic()
            net._t0 = t0
            for c in self.children:
                self._send(c, directory, packed=True)
                self._send(c, {"op": "go", "t0": t0})
            await self._poll()
            self.phase = "stop"
            for c in self.children:
                self._send(c, {"op": "stop"})
            await self._until(lambda c: not c.done, time.monotonic() + net.start_timeout, "to send its report")
            self.phase = "bye"
            for c in self.children:
                self._send(c, {"op": "bye"})
            return [self._decode_report(c) for c in self.children]
        except _Failed:
            await self._settle()
            err = self._error()
            err.__suppress_context__ = True  # not "during handling of _Failed"; keeps __cause__
            raise err
        finally:
            # Every task this coordinator started ends here, cancelled and awaited, and none starts
            # after: a connection accepted from now on is closed unread (_connected). Left to the
            # loop's teardown, a handler started late (a Ctrl-C as the workers connect) could be
            # pending when the loop closed ("Task was destroyed but it is pending!" on stderr).
            self.closing = True
            if self.phase != "bye":
                self._abort()
            server.close()
            watch.cancel()
            for t in self.tasks:
                t.cancel()
            for c in self.children:
                if c.writer is not None:
                    c.writer.close()
            await asyncio.gather(watch, *self.tasks, return_exceptions=True)

    # -- messages ------------------------------------------------------------------------------
    def _send(self, c: _Child, obj: dict | bytes, packed: bool = False) -> None:
        if c.writer is not None and not c.writer.is_closing():
            try:
                c.writer.write(obj if packed else _pack(obj))
            except Exception:  # noqa: BLE001 - the child is gone; its reader will say so
                pass

    def _abort(self) -> None:
        if not self.aborted:
            self.aborted = True
            for c in self.children:
                self._send(c, {"op": "abort"})

    def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A control connection's handler task, started here rather than by asyncio's streams
        (a coroutine as ``start_server``'s callback): in 3.11 a handler task that streams
        started and that was cancelled before its first step (a Ctrl-C at start-up) made the
        streams' own callback raise ``CancelledError`` ("Exception in callback ..." and a
        traceback on stderr). Such a task closes its connection. Once the run is ending
        (``closing``) a connection gets no handler: it is closed unread, and its worker leaves as
        one told to abort does."""
        if self.closing:
            writer.close()
            return
        task = self.loop.create_task(self._accepted(reader, writer))
        self.tasks.append(task)
        task.add_done_callback(lambda t: writer.close() if t.cancelled() else None)

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._control(reader, writer)
        except asyncio.CancelledError:
            return  # shutting down (a connection handler that ends cancelled makes asyncio log it)

    async def _control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            # (asyncio.timeout, not wait_for: 3.11's wait_for, cancelled in the step in which the
            # read completed, returned the hello and lost the cancellation; the handler then read
            # the worker's connection for ever and was pending when the loop closed)
            async with asyncio.timeout(self.net.start_timeout):
                hello = await _read_doc(reader, _HANDSHAKE_BYTES)
        except Exception:  # noqa: BLE001 - not one of ours (or silent for start_timeout)
            writer.close()
            return
        if self.closing:  # (the run is ending: its abort went out before this worker was known)
            writer.close()
            return
        p = hello.get("proc")
        if (hello["op"] != "hello" or hello.get("token") != self.token or type(p) is not int
                or not 0 <= p < len(self.children) or self.children[p].writer is not None
                or hello.get("pid") != self.children[p].pid):
            writer.close()
            return
        c = self.children[p]
        c.writer = writer
        c.host = str(hello["host"])
        c.port = int(hello["port"])
        self.changed.set()
        try:
            while True:
                msg = await _read_doc(reader, CONTROL_FRAME_BYTES)
                self._dispatch(c, msg)
                self.changed.set()
        except asyncio.CancelledError:
            raise
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception as exc:  # noqa: BLE001
            self._fail({"kind": "frame", "message": f"{self.net.describe_process(c.proc)} sent a malformed control "
                        f"frame: {exc}", "proc": c.proc, "node": self.net.groups[c.proc][0]})
            # Not read any further, the worker waits until it is told to abort, and then leaves
            # with status 0 or 3: a consequence, which must not pass for the cause (a death is
            # first among failures). A death by a signal is still reported (_settle).
            c.eof = True
            return
        c.eof = True
        c.left_unasked = not self.aborted
        self.changed.set()
        if self.phase != "bye" and not c.done:
            end = time.monotonic() + 2.0  # how did it end?
            while not self.net._reaped(c.pid) and time.monotonic() < end:
                await asyncio.sleep(0.005)
            self._died(c)

    def _dispatch(self, c: _Child, msg: dict) -> None:
        op = msg["op"]
        if op == "status":
            if msg.get("wave") == self.wave:
                c.status = msg
        elif op == "fail":
            c.reported = True
            self._fail(msg)
        elif op == "report":
            c.report["proc"], c.report["last"] = msg["proc"], msg["last"]
        elif op == "result":
            c.report["results"].setdefault(msg["node"], []).append(msg["data"])
        elif op in ("missing", "steps", "rows", "arrivals"):
            c.report[op].extend(msg["items"])
        elif op == "nodes":
            for nid, done, role, waits, offline, flops in msg["items"]:
                c.report["nodes"][nid] = {"done": done, "role": role, "waits": waits, "offline": offline,
                                          "flops": flops}
        elif op == "role_members":
            for role, nid in msg["items"]:
                c.report["role_members"].setdefault(role, []).append(nid)
        elif op == "done":
            c.done = True

    def _fail(self, info: dict) -> None:
        if self.aborted and info.get("kind") != "died":
            return  # workers leaving on our abort close their connections: consequences, not causes
        self.failures.append(info)
        self.changed.set()

    def _died(self, c: _Child) -> None:
        """Record how ``c`` ended (once), unless it left because it was told to or after it
        reported a failure itself."""
        if c.died:
            return
        status = self.net.exit_status.get(c.pid)
        if (status is not None and os.WIFEXITED(status) and os.WEXITSTATUS(status) in (0, 3)
                and (c.reported or self.aborted and not c.left_unasked)):
            # it left because it was told to, or after saying what went wrong (a death is first
            # among failures: its exit would hide what it said)
            return
        c.died = True
        how = "closed its control connection" if status is None else \
            "ended (reaped elsewhere)" if status == -1 else _status_text(status)
        self._fail({"kind": "died", "proc": c.proc, "node": self.net.groups[c.proc][0],
                    "message": f"{self.net.describe_process(c.proc)} {how} during {self.phase}"})

    async def _watch(self) -> None:
        """Notice a worker that exits without a word (e.g. before it could connect)."""
        while True:
            await asyncio.sleep(0.05)
            for c in self.children:
                if c.writer is None and self.net._reaped(c.pid):
                    self._died(c)

    async def _until(self, pending: Callable[[_Child], bool], by: float | None, what: str,
                     bound: float | None = None) -> None:
        """Wait until no child is ``pending``; raise ``_Failed`` on a failure, ``TransportError``
        past ``by`` (the start-up and report bounds, ``start_timeout`` seconds, or ``bound``),
        ``TimeoutError`` past the run's deadline."""
        while True:
            if self.failures:
                raise _Failed
            late = [c for c in self.children if pending(c)]
            if not late:
                return
            now = time.monotonic()
            if self.deadline is not None and now >= self.deadline:
                self._timeout()
            if by is not None and now >= by:
                net = self.net
                raise TransportError(
                    f"TcpNetwork {self.phase}: waited {net.start_timeout if bound is None else bound} s for every "
                    f"process {what}; still "
                    f"waiting for {_listed([net.describe_process(c.proc) for c in late])}",
                    node=net.groups[late[0].proc][0], nodes=tuple(net.groups[late[0].proc]),
                    process=late[0].proc, kind="stall")
            limits = [t for t in (by, self.deadline) if t is not None]
            self.changed.clear()
            try:
                # (asyncio.timeout, not wait_for: 3.11's wait_for, cancelled in the step after the
                # event was set, returned and lost the cancellation: a Ctrl-C as a status came in
                # was ignored, and the run went on)
                async with asyncio.timeout(None if not limits else min(limits) - now):
                    await self.changed.wait()
            except TimeoutError:
                pass

    def _timeout(self) -> None:
        lines = [f"TcpNetwork.run: no result within timeout = {self.timeout} s (during {self.phase})"]
        known = [c for c in self.children if c.status is not None]
        for c in known[:_SHOWN_PROCESSES]:
            s = c.status
            if s is not None:
                busy = s["n"] - s["blocked"] - s["finished"]
                later = f", {s['pending']} to drop out" if s["pending"] else ""
                lines.append(f"  process {c.proc}: {s['finished']} finished, {s['blocked']} blocked, {busy} busy "
                             f"of {s['n']} actors{later}; {s['sent']} frames sent, {s['received']} received")
        if len(known) > _SHOWN_PROCESSES:
            lines.append(f"  ... and {len(known) - _SHOWN_PROCESSES} more processes")
        raise TimeoutError("\n".join(lines))

    async def _poll(self) -> None:
        """Poll the workers until two consecutive identical snapshots show every actor finished
        or blocked and no frame in flight; fail after ``stall_timeout`` without progress."""
        net = self.net
        prev = None
        still_since = None
        keys = ("sent", "received", "blocked", "finished", "pending", "activity", "bytes_in", "bytes_out")
        while True:
            self.wave += 1
            for c in self.children:
                c.status = None
                self._send(c, {"op": "poll", "wave": self.wave})
            await self._answers()
            stats = [c.status for c in self.children]
            snap = tuple(tuple(s[k] for k in keys) for s in stats)
            # (a dropout still to come is something that can happen: not idle yet, as on SimNetwork)
            idle = all(s["blocked"] + s["finished"] == s["n"] and not s["pending"] for s in stats)
            if idle and snap == prev:
                if sum(s["sent"] for s in stats) == sum(s["received"] for s in stats):
                    return
                now = time.monotonic()
                if still_since is None:
                    still_since = now
                elif now - still_since > net.stall_timeout:
                    self._stalled(stats)
            elif snap != prev:
                still_since = None
            prev = snap
            try:
                async with asyncio.timeout(net.poll_interval):  # (not wait_for: see _until)
                    await self._failed_soon()
            except TimeoutError:
                pass

    async def _answers(self) -> None:
        """Wait until every process answered the status poll just sent. One that has not for
        ``stall_timeout`` seconds and is stopped (``kill -STOP``, a debugger: state T in
        /proc) ends the run: before, the run waited for it for ever (the command line sets no
        run timeout). One that is running is an actor computing without awaiting, which holds
        its event loop: that is waited for, however long (bounding it ended every TCP run with
        a step longer than 30 s)."""
        net = self.net
        while True:
            try:
                await self._until(lambda c: c.status is None, time.monotonic() + net.stall_timeout,
                                  "to answer its status poll", bound=net.stall_timeout)
                return
            except TransportError:
                stopped = [c for c in self.children if c.status is None and _stopped(c.pid)]
                if stopped:
                    raise TransportError(
                        f"TcpNetwork {self.phase}: waited {net.stall_timeout} s for every process to answer its "
                        f"status poll (a process stopped: kill -STOP, a debugger); still waiting for "
                        f"{_listed([net.describe_process(c.proc) + ', stopped' for c in stopped])}",
                        node=net.groups[stopped[0].proc][0], nodes=tuple(net.groups[stopped[0].proc]),
                        process=stopped[0].proc, kind="stall") from None

    async def _failed_soon(self) -> None:
        while not self.failures:
            self.changed.clear()
            await self.changed.wait()
        raise _Failed

    def _stalled(self, stats: list[dict]) -> None:
        net = self.net
        lines = []
        first = None
        for i, s in enumerate(stats):
            for j, t in enumerate(stats):
                if s["sent_to"][j] != t["recv_from"][i]:
                    first = first or (i, j)
                    lines.append(f"{net.describe_process(j)} has received {t['recv_from'][i]} of the "
                                 f"{s['sent_to'][j]} frames {net.describe_process(i)} sent it")
        i = first[0] if first else 0
        self._fail({"kind": "stall", "proc": i, "node": net.groups[i][0],
                    "message": f"no progress for {net.stall_timeout} s with frames outstanding: " + _listed(lines)})
        raise _Failed

    async def _settle(self) -> None:
        """After a first failure: give the other reports (the death behind a closed connection,
        the frame it left half-written) 0.4 s to come in, then tell everyone to abort and watch
        0.2 s more for deaths. A worker whose control connection is still being read is left to
        its reader, which records how it ended once the connection has closed: a worker that
        reported a failure and exited may have its report still unread in that connection, and
        taken for dead here its exit status came first, hiding what it said."""
        for grace, abort in ((0.4, False), (0.2, True)):
            if abort:
                self._abort()
            end = time.monotonic() + grace
            while time.monotonic() < end:
                for c in self.children:
                    if (c.writer is None or c.eof) and self.net._reaped(c.pid):
                        if not self.aborted:
                            c.left_unasked = True
                        self._died(c)
                await asyncio.sleep(0.02)

    def _error(self) -> BaseException:
        net = self.net
        fails = sorted(self.failures, key=lambda f: _PRIORITY.get(f.get("kind"), 9))
        first = fails[0]
        if first.get("kind") == "actor":
            where = f"{net.describe_process(first['proc'])}"
            cause = _rebuild(first["error"], where)
            if isinstance(cause, FedsimError) and str(cause).startswith("actor"):
                return cause
            err = ActorError(first["node"], first.get("role", "?"), cause)
            err.__cause__ = cause
            return err
        others = []
        for f in fails[1:]:
            if f.get("message") != first.get("message") and f.get("message") not in others:
                others.append(f.get("message"))
        text = first["message"]
        if others:
            text += "\n  also: " + "\n  also: ".join(others[:3]) + (
                f"\n  ... and {len(others) - 3} more" if len(others) > 3 else "")
        p = first.get("peer") if first.get("peer") is not None else first.get("proc")
        nodes = tuple(net.groups[p]) if p is not None and 0 <= p < len(net.groups) else ()
        return TransportError(text, node=first.get("node"), nodes=nodes, process=p, kind=first.get("kind", "closed"))

    def _decode_report(self, c: _Child) -> dict:
        rep = c.report
        results = {}
        for nid, pieces in rep["results"].items():
            try:
                results[nid] = decode(b"".join(pieces), max_bytes=self.net.max_message_bytes)
            except CodecError as exc:
                node = self.net.nodes[nid]
                err = ActorError(nid, node.role, CodecError(f"its return value could not be decoded in the "
                                                            f"launching process: {exc}"))
                raise err from exc
        rep["results"] = results
        return rep


register_transport("tcp", TcpNetwork, "TcpNetwork: actors in separate processes, length-prefixed frames over TCP on loopback")
