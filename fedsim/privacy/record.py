"""Recording what a network carries: the tap that ``fedsim.privacy`` attaches to a run.

A ``Recorder`` is an observer for ``Network.tap`` (fedsim/kernel/network.py): the transport calls
``observe(row, payload)`` once per message copy, at send time, with the copy's ledger row and the
``Payload`` the copies of that send share. The recorder keeps every row (a reference: the
transport fills the timing fields and the status as the copy moves) and, for the copies its
filters select, the payload (a reference to the shared object; decoded at most once). Filters
exist to bound memory: a FedRec run on MovieLens 100K uploads about 30 MB per iteration, so an
audit records the payloads of the rounds and nodes it will attack, and only the rows elsewhere.

Nothing here reads the ledger, the actors or the protocol's data: the recording is exactly what
crossed the network. ``fedsim.privacy.views`` cuts it into what one adversary may see.
"""

from __future__ import annotations

import weakref
from typing import Any, Iterable

from ..kernel.ledger import ARRIVAL, DST, KIND, ROUND, SRC, STATUS

__all__ = ["Recorder"]


class Recorder:
    """A tap that records the rows of every message copy and the payloads of those selected.

    ``rounds``, ``kinds``, ``nodes``: keep a copy's payload only if its round label is in
    ``rounds`` or negative (setup, which every view shows), its kind in ``kinds`` and its sender or receiver in ``nodes`` (``None``: no
    restriction on that field); for the kinds of ``first_only``, only each receiver's first
    message of that kind that was delivered (the model a client trained its first upload on:
    what an attack on a client's first upload needs, at a fraction of the memory of every
    model). Rows are always kept.

    A copy's fate is not known when the transport calls ``observe`` (the row is ``in_flight``:
    ``SimNetwork`` draws a loss in the link model right after, decides "receiver offline" or a
    sender's dropout at delivery, and a flow-level link model may lose a copy at its end;
    ``AsyncioNetwork`` draws the loss after the call too), so ``first_only`` keeps the payload of
    every copy of that kind to that receiver until one of them is known delivered: at each later
    copy's ``observe`` and whenever ``entries`` is read, the delivered one that arrived first
    (ties: the one sent first) is kept and the others' payloads are dropped, lost copies' as soon
    as they are known lost; after that the receiver's later copies are not kept. So it holds at
    most one payload per receiver plus those still in flight when the next copy is sent, and,
    read after a run, exactly each receiver's first delivered copy (none if every copy was lost, or
    was still in flight when its network's run ended: stopped at ``until``, or deadlocked).
    It used to keep the first copy sent whatever its fate: a client whose first model was lost
    trained its first upload on a later model, which was not kept, and an attack on first
    uploads could not attack it (a miss in the scores). One recorder may be attached to several
    networks in turn (a protocol run split into one network per epoch): ``attach`` each before it
    runs. ``entries`` lists ``(row, payload or None, network)`` in the order the copies were sent,
    ``network`` counting the networks attached so far from 0 (each network's clock and message
    numbers start afresh; views order and name messages by network first).
    """

    __slots__ = ("_entries", "rounds", "kinds", "nodes", "networks", "first_only", "_firsts", "_pending", "_nets")

    def __init__(self, *, rounds: Iterable[int] | None = None, kinds: Iterable[str] | None = None,
                 nodes: Iterable[str] | None = None, first_only: Iterable[str] = ()) -> None:
        self._entries: list[tuple[list, Any, int]] = []
        self.rounds = None if rounds is None else frozenset(int(r) for r in rounds)
        self.kinds = None if kinds is None else frozenset(kinds)
        self.nodes = None if nodes is None else frozenset(nodes)
        self.first_only = frozenset(first_only)
        self._firsts: set = set()  # (kind, receiver) whose first delivered copy is known (and kept)
        self._pending: dict = {}  # (kind, receiver) -> indices in entries of candidates (payload kept)
        self._nets: list = []  # a weak reference to each network attached, in order
        self.networks = 0

    @property
    def entries(self) -> list[tuple[list, Any, int]]:
        """``(row, payload or None, network)`` per copy, in sending order; the ``first_only``
        candidates whose fate is now known are settled first (class docstring)."""
        if self._pending:
            for key in list(self._pending):
                self._settle(key)
        return self._entries

    def _settle(self, key) -> bool:
        """Drop the payloads of ``key``'s candidates known not to be its first delivered copy;
        True once that copy is known (then it alone is kept)."""
        entries = self._entries
        cands = self._pending[key]
        delivered = [i for i in cands if entries[i][0][STATUS] == "delivered"]
        if delivered:
            # a copy still in flight arrives after every delivered one: the first delivered is known
            # (network first: each network's clock starts afresh)
            win = min(delivered, key=lambda i: (entries[i][2], entries[i][0][ARRIVAL], i))
            drop = [i for i in cands if i != win]
        else:
            # lost, or still in flight on a network whose run has ended (stopped at ``until``, a
            # deadlock): such a copy is never delivered
            drop = [i for i in cands if entries[i][0][STATUS] != "in_flight" or self._ended(entries[i][2])]
        for i in drop:
            row, _, net = entries[i]
            entries[i] = (row, None, net)
        if delivered:
            del self._pending[key]
            self._firsts.add(key)
            return True
        if len(drop) == len(cands):
            del self._pending[key]
        elif drop:
            self._pending[key] = [i for i in cands if i not in drop]
        return False

    def _ended(self, k: int) -> bool:
        """Whether the run of the ``k``-th network attached has ended (or the network is gone)."""
        if not 0 <= k < len(self._nets):  # (rows observed without attach: nothing known of a run)
            return False
        net = self._nets[k]()
        return net is None or bool(getattr(net, "ended", False))

    def attach(self, net: Any) -> "Recorder":
        """Make this recorder ``net``'s tap (``net.tap = self``) and return it. Raises
        ``ValueError`` if ``net`` already has another tap."""
        if net.tap is not None and net.tap is not self:
            raise ValueError("the network already has a tap")
        net.tap = self
        self.networks += 1
        self._nets.append(weakref.ref(net))  # (not the network itself: a run's ledger is large)
        return self

    def keeps(self, row: list) -> bool:
        """Whether the payload of the copy with ledger row ``row`` passes the filters (``rounds``,
        ``kinds``, ``nodes``) and, for a ``first_only`` kind, whether its receiver's first
        delivered copy of that kind is not yet known (then ``observe`` keeps it as a candidate,
        which a later copy or reading ``entries`` may drop: class docstring)."""
        if self.rounds is not None and row[ROUND] not in self.rounds and row[ROUND] >= 0:
            return False  # setup messages (negative rounds) are kept: views show them in every window
        if self.kinds is not None and row[KIND] not in self.kinds:
            return False
        nodes = self.nodes
        if nodes is not None and row[SRC] not in nodes and row[DST] not in nodes:
            return False
        if row[KIND] in self.first_only:
            key = (row[KIND], row[DST])
            return not (key in self._firsts or (key in self._pending and self._settle(key)))
        return True

    def observe(self, row: list, payload: Any) -> None:
        """Called by the transport for every message copy (``Network.tap``); never raises."""
        keep = self.keeps(row)
        if keep and row[KIND] in self.first_only:
            self._pending.setdefault((row[KIND], row[DST]), []).append(len(self._entries))
        self._entries.append((row, payload if keep else None, self.networks - 1))

    def __len__(self) -> int:
        return len(self._entries)
