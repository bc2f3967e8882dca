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

from typing import Any, Iterable

from ..kernel.ledger import DST, KIND, ROUND, SRC

__all__ = ["Recorder"]


class Recorder:
    """A tap that records the rows of every message copy and the payloads of those selected.

    ``rounds``, ``kinds``, ``nodes``: keep a copy's payload only if its round label is in
    ``rounds`` or negative (setup, which every view shows), its kind in ``kinds`` and its sender or receiver in ``nodes`` (``None``: no
    restriction on that field); for the kinds of ``first_only``, only each receiver's first
    message of that kind (the model a client got at its first round: what an attack on a
    client's first upload needs, at a fraction of the memory of every model). Rows are always
    kept. One recorder may be attached to several
    networks in turn (a protocol run split into one network per epoch): ``attach`` each before it
    runs. ``entries`` lists ``(row, payload or None, network)`` in the order the copies were sent,
    ``network`` counting the networks attached so far from 0 (each network's clock and message
    numbers start afresh; views order and name messages by network first).
    """

    __slots__ = ("entries", "rounds", "kinds", "nodes", "networks", "first_only", "_firsts")

    def __init__(self, *, rounds: Iterable[int] | None = None, kinds: Iterable[str] | None = None,
                 nodes: Iterable[str] | None = None, first_only: Iterable[str] = ()) -> None:
        self.entries: list[tuple[list, Any, int]] = []
        self.rounds = None if rounds is None else frozenset(int(r) for r in rounds)
        self.kinds = None if kinds is None else frozenset(kinds)
        self.nodes = None if nodes is None else frozenset(nodes)
        self.first_only = frozenset(first_only)
        self._firsts: set = set()
        self.networks = 0

    def attach(self, net: Any) -> "Recorder":
        """Make this recorder ``net``'s tap (``net.tap = self``) and return it. Raises
        ``ValueError`` if ``net`` already has another tap."""
        if net.tap is not None and net.tap is not self:
            raise ValueError("the network already has a tap")
        net.tap = self
        self.networks += 1
        return self

    def keeps(self, row: list) -> bool:
        """Whether the payload of the copy with ledger row ``row`` is kept."""
        if self.rounds is not None and row[ROUND] not in self.rounds and row[ROUND] >= 0:
            return False  # setup messages (negative rounds) are kept: views show them in every window
        if self.kinds is not None and row[KIND] not in self.kinds:
            return False
        nodes = self.nodes
        if nodes is not None and row[SRC] not in nodes and row[DST] not in nodes:
            return False
        if row[KIND] in self.first_only:
            key = (row[KIND], row[DST])
            if key in self._firsts:
                return False
            self._firsts.add(key)
        return True

    def observe(self, row: list, payload: Any) -> None:
        """Called by the transport for every message copy (``Network.tap``); never raises."""
        self.entries.append((row, payload if self.keeps(row) else None, self.networks - 1))

    def __len__(self) -> int:
        return len(self.entries)
