"""The message ledger: one row per message sent, the single source of every cost figure.

A row is created when a message is handed to the network and completed as the message moves:
transmission start and end on the sender's egress port, start of reception on the receiver's
ingress port, arrival, and finally whether the receiver ever read it. Costs are aggregated from
these rows (per role and round, per kind, per node, totals) and exported as CSV.

Status of a row:
``delivered``  reached the receiver's mailbox (``read`` tells whether an actor consumed it);
``lost``       dropped by the network (``note`` says why: link loss, sender or receiver offline);
``in_flight``  still travelling when the simulation stopped.
Conservation: bytes sent = bytes delivered + bytes lost + bytes in flight.

``Ledger`` keeps every row in memory (a list per row, about 400 bytes with its objects).
``StreamingLedger`` keeps only the rows that may still change (in flight, or delivered and not yet
read) and writes the others, as fixed-size binary records, to a file; every query and the CSV
export read them back, with the same results (tested against ``Ledger`` on the same runs).
"""

from __future__ import annotations

import csv
import io
import math
import numbers
import os
import secrets
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, TextIO

import numpy as np

__all__ = [
    "ARRIVAL", "BYTES", "COLUMNS", "FATES", "FILTERS", "Ledger", "LedgerView", "Missing", "ROW_COLUMNS", "RX_START", "StreamingLedger",
    "StreamView", "Totals", "TX_END", "TX_START", "csv_writer",
]

# The stored fields of a row, in order: the one place that names them. Rows are plain lists (cheap
# to create on the per-message hot path); the position constants below are derived from these
# names, so a column added here cannot leave an index pointing at its neighbour.
ROW_COLUMNS = (
    "seq", "round", "src", "dst", "src_role", "dst_role", "kind", "bytes", "raw_bytes", "floats",
    "send_time", "tx_start", "tx_end", "rx_start", "arrival_time", "status", "read", "anonymous", "note",
)
_POS = {name: i for i, name in enumerate(ROW_COLUMNS)}
SEQ, ROUND, SRC, DST = _POS["seq"], _POS["round"], _POS["src"], _POS["dst"]
SRC_ROLE, DST_ROLE, KIND = _POS["src_role"], _POS["dst_role"], _POS["kind"]
BYTES, RAW, FLOATS = _POS["bytes"], _POS["raw_bytes"], _POS["floats"]
SEND_T, TX_START, TX_END = _POS["send_time"], _POS["tx_start"], _POS["tx_end"]
RX_START, ARRIVAL = _POS["rx_start"], _POS["arrival_time"]
STATUS, READ, ANON, NOTE = _POS["status"], _POS["read"], _POS["anonymous"], _POS["note"]
# What records and CSV files show: the stored fields plus the derived ``units`` (floats / unit)
# after ``floats``.
COLUMNS = ROW_COLUMNS[: FLOATS + 1] + ("units",) + ROW_COLUMNS[FLOATS + 1:]
_INT_COLUMNS = frozenset({"seq", "round", "bytes", "raw_bytes", "floats"})
_TIME_COLUMNS = frozenset({"send_time", "tx_start", "tx_end", "rx_start", "arrival_time"})
_BOOL_COLUMNS = frozenset({"read", "anonymous"})
FATES = ("delivered", "lost", "in_flight")

_NAN = math.nan
_INF = math.inf


@dataclass(frozen=True, slots=True)
class Missing:
    """A message a receiver waited for with a deadline and did not get in time: one record per
    message missing (``sender`` None for a ``gather(count=...)``, whose senders are not known).
    ``expected`` is how many messages the wait it belongs to asked for and ``arrived`` how many of
    them it got, the same on every record of one wait (so ``expected - arrived`` of them), on
    every transport (the wait, ``gather``/``gather_each``, is counted where it is given up, in the
    receiver's own process); None on a record made without them (built by hand). ``wait`` tells
    the receiver's waits apart: its gathers (``gather``, ``gather_each``) are numbered 1, 2, ...
    in the order its actor began them, and every record of one wait carries that wait's number
    (two waits of one kind and round that give up at one instant are two waits, not one), the
    same on every transport (counted by the receiver's own actor as it begins each gather, given
    up or not); None on a record made without it."""

    round: int
    receiver: str
    sender: str | None
    kind: str
    time: float
    expected: int | None = None
    arrived: int | None = None
    wait: int | None = None


@dataclass(frozen=True, slots=True)
class Totals:
    """What a set of ledger rows adds up to.

    ``wire_bytes`` is what the messages cost on the wire (document plus the network's framing),
    ``payload_bytes`` the encoded documents alone, ``raw_bytes`` the array payloads inside them,
    ``floats`` the floating-point array elements and ``units`` floats / the ledger's unit (NaN if
    no unit was declared).
    """

    messages: int = 0
    wire_bytes: int = 0
    payload_bytes: int = 0
    raw_bytes: int = 0
    floats: int = 0
    units: float = _NAN


def _as_set(v: Any) -> frozenset | None:
    """A filter value as the set of allowed values (None: no filter)."""
    if v is None:
        return None
    if isinstance(v, (str, numbers.Integral)):
        return frozenset((int(v) if isinstance(v, numbers.Integral) else v,))
    return frozenset(v)


class LedgerView:
    """A selection of a ledger's rows (``Ledger.select``), in ledger order: totals, groupings,
    columns. Views are cheap (a list of references to the rows) and can be narrowed further with
    ``select``."""

    __slots__ = ("ledger", "rows")

    def __init__(self, ledger: "Ledger", rows: list[list[Any]]) -> None:
        self.ledger = ledger
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def select(self, **filters: Any) -> "LedgerView":
        """The rows of this view that also pass ``filters`` (see ``Ledger.select``, which says
        what it raises)."""
        _check_filters(filters)
        return LedgerView(self.ledger, _filter(self.rows, **filters))

    def totals(self) -> Totals:
        """Messages, wire/payload/array bytes, floats and units of these rows."""
        m = len(self.rows)
        b = raw = fl = 0
        for r in self.rows:
            b += r[BYTES]
            raw += r[RAW]
            fl += r[FLOATS]
        return Totals(m, b, b - m * self.ledger.framing_bytes, raw, fl, self.ledger.units_of(fl))

    def group(self, *keys: str) -> dict[Any, Totals]:
        """Totals per value of the columns ``keys`` (one key: the value; several: a tuple),
        sorted by key. A time column's NaN (a time never reached) is one key, sorted last.
        Raises ``ValueError`` without ``keys`` and ``KeyError`` naming a key that is no column of
        the rows (``units``, derived from ``floats``, included)."""
        if not keys:
            raise ValueError("group needs at least one column name")
        idx = [_group_pos(k) for k in keys]
        times = [i for i in idx if ROW_COLUMNS[i] in _TIME_COLUMNS]
        acc: dict[Any, list] = {}
        for r in self.rows:
            if times and any(r[i] != r[i] for i in times):
                # NaN != NaN: a dict took each NaN object for a key of its own (rows merged from
                # TcpNetwork's workers hold many), and sorted() ordered them by insertion
                r = list(r)
                for i in times:
                    if r[i] != r[i]:
                        r[i] = _NAN
            key = r[idx[0]] if len(idx) == 1 else tuple(r[i] for i in idx)
            a = acc.get(key)
            if a is None:
                a = acc[key] = [0, 0, 0, 0]
            a[0] += 1
            a[1] += r[BYTES]
            a[2] += r[RAW]
            a[3] += r[FLOATS]
        fb = self.ledger.framing_bytes
        units = self.ledger.units_of
        if times:
            order = sorted(acc, key=_nan_last if len(idx) == 1 else lambda k: tuple(_nan_last(v) for v in k))
        else:
            order = sorted(acc)
        return {k: Totals(m, b, b - m * fb, raw, fl, units(fl)) for k in order for m, b, raw, fl in (acc[k],)}

    def column(self, name: str) -> np.ndarray:
        """One column of these rows as an array (``units`` derived; see ``Ledger.columns``)."""
        if name == "units":
            return self.column("floats") / self.ledger.unit if self.ledger.unit else np.full(len(self.rows), _NAN)
        try:
            i = _POS[name]
        except KeyError:
            raise KeyError(f"no ledger column {name!r}; columns: {', '.join(COLUMNS)}") from None
        vals = [r[i] for r in self.rows]
        if name in _INT_COLUMNS:
            return np.asarray(vals, dtype=np.int64)
        if name in _TIME_COLUMNS:
            return np.asarray(vals, dtype=np.float64)
        if name in _BOOL_COLUMNS:
            return np.asarray(vals, dtype=bool)
        return np.asarray(vals, dtype=object)

    def iter_columns(self, *names: str) -> Iterable[dict[str, np.ndarray]]:
        """Several columns at once, piece by piece: yields, in ledger order, ``{name: array}`` for
        consecutive pieces of these rows (each array what ``column`` gives for that piece's rows;
        no piece is empty, none for an empty view). One pass for all the names, in memory bounded
        by a piece (``_PIECE_ROWS`` rows here; a ``StreamView``'s pieces are its ledger's chunks),
        where a ``column`` call per name would make a pass each."""
        _check_names(names)
        rows = self.rows
        for a in range(0, len(rows), _PIECE_ROWS):
            piece = LedgerView(self.ledger, rows[a:a + _PIECE_ROWS])
            yield {name: piece.column(name) for name in names}

    def rounds(self) -> list[int]:
        """The round labels that occur, sorted."""
        return sorted({r[ROUND] for r in self.rows})

    def span(self) -> float:
        """Seconds from the first send to the last arrival of these rows (NaN if none arrived)."""
        arrivals = [r[ARRIVAL] for r in self.rows if r[ARRIVAL] == r[ARRIVAL]]
        if not arrivals:
            return _NAN
        return max(arrivals) - min(r[SEND_T] for r in self.rows)

    def records(self) -> Iterable[dict[str, Any]]:
        """Rows as dicts with the columns of ``COLUMNS``."""
        as_dict = self.ledger.as_dict
        for r in self.rows:
            yield as_dict(r)


# the rows of one piece of LedgerView.iter_columns (a StreamView's pieces are its chunks)
_PIECE_ROWS = 262_144


FILTERS = ("kind", "exclude_kinds", "round", "src", "dst", "src_role", "dst_role", "fate", "anonymous", "read",
           "min_round")


def _check_filters(filters: dict) -> None:
    """``select``'s keywords: each one of ``FILTERS`` (a misspelt one was the ``TypeError`` of a
    private function, "_filter() got an unexpected keyword argument 'knd'")."""
    for name in filters:
        if name not in FILTERS:
            raise TypeError(f"select: unknown filter {name!r}; filters: {', '.join(FILTERS)}")


def _group_pos(name: str) -> int:
    """The row position of ``group``'s key ``name``; ``KeyError`` naming it otherwise (it was a
    bare ``KeyError: 'nope'``; ``column`` said which columns there are)."""
    try:
        return _POS[name]
    except (KeyError, TypeError):
        if name == "units":
            raise KeyError("group: 'units' is derived (floats / unit), not a column to group by") from None
        raise KeyError(f"no ledger column {name!r}; columns: {', '.join(COLUMNS)}") from None


def _check_names(names: tuple) -> None:
    """``iter_columns``' names: at least one, each a column of ``COLUMNS`` (before any pass)."""
    if not names:
        raise ValueError("iter_columns needs at least one column name")
    for name in names:
        if name not in COLUMNS:
            raise KeyError(f"no ledger column {name!r}; columns: {', '.join(COLUMNS)}")


def _nan_last(v: Any) -> tuple:
    """A sort key that orders NaN after every number (and is the value itself otherwise)."""
    return (True, 0.0) if v != v else (False, v)


def _kinds(kinds: Any) -> frozenset:
    """``exclude_kinds`` as a set of kinds: one kind (a str, as ``kind`` takes it) or a collection
    (a str was taken as the collection of its characters, so excluded nothing)."""
    return frozenset((kinds,)) if isinstance(kinds, str) else frozenset(kinds)


def _check_flags(anonymous: Any, read: Any, min_round: Any) -> None:
    """Refuse (``ValueError`` naming the filter) an ``anonymous`` or ``read`` that is not a bool
    and a ``min_round`` that is not a number: ``read="no"`` selected nothing, silently, and
    ``min_round="1"`` failed in the comparison, differently in memory and streamed."""
    for name, v in (("anonymous", anonymous), ("read", read)):
        if v is not None and not isinstance(v, (bool, np.bool_)):
            raise ValueError(f"select: {name} must be True, False or None, got {v!r}")
    if min_round is not None and (isinstance(min_round, (bool, np.bool_)) or not isinstance(min_round, numbers.Real)
                                  or min_round != min_round):
        raise ValueError(f"select: min_round must be a round number, got {min_round!r}")


def _filter(rows: list[list[Any]], *, kind: Any = None, exclude_kinds: Iterable[str] = (), round: Any = None,
            src: Any = None, dst: Any = None, src_role: Any = None, dst_role: Any = None,
            fate: Any = None, anonymous: bool | None = None, read: bool | None = None,
            min_round: int | None = None) -> list[list[Any]]:
    checks = []
    for pos, val in ((KIND, kind), (ROUND, round), (SRC, src), (DST, dst), (SRC_ROLE, src_role),
                     (DST_ROLE, dst_role), (STATUS, fate)):
        allowed = _as_set(val)
        if allowed is not None:
            checks.append((pos, allowed))
    fates = _as_set(fate)
    if fates is not None and not fates <= set(FATES):
        raise ValueError(f"fate must be one of {FATES}, got {sorted(fates - set(FATES))}")
    _check_flags(anonymous, read, min_round)
    drop = _kinds(exclude_kinds)
    out = rows
    for pos, allowed in checks:
        out = [r for r in out if r[pos] in allowed]
    if drop:
        out = [r for r in out if r[KIND] not in drop]
    if min_round is not None:
        out = [r for r in out if r[ROUND] >= min_round]
    if anonymous is not None:
        out = [r for r in out if bool(r[ANON]) == anonymous]
    if read is not None:
        out = [r for r in out if bool(r[READ]) == read]
    return out if out is not rows else list(rows)


def whole_number(value: Any) -> int | None:
    """``value`` as an int if it is a whole number (an int, a NumPy integer, a float without a
    fraction), else None (a fraction, which int() would truncate, NaN, a bool, a str, ...). The
    check of the ledger's and the network's counts (``unit``, ``framing_bytes``, ...)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return None


def _check_unit_and_framing(unit: Any, framing_bytes: Any) -> tuple[int | None, int]:
    """A ledger's ``unit`` (None or a positive whole number) and ``framing_bytes`` (a whole
    number >= 0), as a network checks them; ``ValueError`` naming the one that is not: unit=0
    made every ``units`` column NaN as if no unit were declared, 1.5 divided by a fraction, a str
    failed at the first query, and int() truncated a framing of 1.5 to 1."""
    units = None if unit is None else whole_number(unit)
    if unit is not None and (units is None or units <= 0):
        raise ValueError(f"unit must be a positive number of floats (or None), got {unit!r}")
    framing = whole_number(framing_bytes)
    if framing is None or framing < 0:
        raise ValueError(f"framing_bytes must be a whole number >= 0, got {framing_bytes!r}")
    return units, framing


class Ledger:
    """Every message of one run. ``unit`` is the number of floats that make one accounting unit
    (the protocol's latent dimension d); ``units`` columns are ``floats / unit`` (NaN if unset).
    ``framing_bytes`` is what the network adds to each document on the wire (so that payload
    bytes = wire bytes - framing). Raises ``ValueError`` naming ``unit`` unless it is None or a
    positive whole number, and ``framing_bytes`` unless it is a whole number >= 0 (as a network
    does: ``NetworkConfigError``)."""

    def __init__(self, unit: int | None = None, framing_bytes: int = 0) -> None:
        unit, framing_bytes = _check_unit_and_framing(unit, framing_bytes)
        self.rows: list[list[Any]] = []
        self.missing: list[Missing] = []
        self.unit = unit
        self.framing_bytes = framing_bytes
        self.roles: dict[str, str] = {}  # each node's current (final) role
        self.role_members: dict[str, set[str]] = defaultdict(set)  # every node that held a role

    def set_role(self, node: str, role: str) -> None:
        """Record that ``node`` holds ``role`` from now on (rows keep the role at send time)."""
        self.roles[node] = role
        self.role_members[role].add(node)

    # -- recording (called by transports) ----------------------------------------------------
    def new_row(self, rnd: int, src: str, dst: str, src_role: str, dst_role: str, kind: str,
                nbytes: int, raw: int, floats: int, t: float, anonymous: bool) -> list[Any]:
        """Append the row of one message copy handed to the network at ``t`` and return it (a
        list; its transport fills the timing fields and the status as the copy moves)."""
        row = [len(self.rows), rnd, src, dst, src_role, dst_role, kind, nbytes, raw, floats,
               t, _NAN, _NAN, _NAN, _NAN, "in_flight", False, anonymous, ""]
        self.rows.append(row)
        return row

    def discarded(self, row: list[Any]) -> None:
        """The transport says that the delivered copy of ``row`` will never be read: a gather
        discarded it unread (a late arrival, labelled with an earlier round than the gather's, or
        one from a sender it did not expect). Nothing changes in the row (it stays delivered and
        unread); a ``StreamingLedger`` takes it for final, and writes it out and forgets it."""

    # -- reading ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.rows)

    def units_of(self, floats: float) -> float:
        """``floats`` in accounting units (NaN if no unit was declared)."""
        return floats / self.unit if self.unit else _NAN

    def select(self, **filters: Any) -> LedgerView:
        """The rows that pass every filter, in ledger order. Each filter takes one value or a
        collection of allowed values: ``kind``, ``round``, ``src``, ``dst``, ``src_role``,
        ``dst_role`` (roles at the time of sending), ``fate`` (``delivered``, ``lost``,
        ``in_flight``); also ``exclude_kinds`` (one kind or a collection), ``min_round`` (rounds at or after),
        ``anonymous`` and ``read`` (booleans). Raises ``TypeError`` naming a filter that is none
        of these (``FILTERS``), ``ValueError`` for a ``fate`` none of ``FATES``, an
        ``anonymous`` or ``read`` that is not a bool, or a ``min_round`` that is not a number."""
        _check_filters(filters)
        return LedgerView(self, _filter(self.rows, **filters))

    def view(self) -> LedgerView:
        """All rows as a ``LedgerView``."""
        return LedgerView(self, self.rows)

    def as_dict(self, r: list[Any]) -> dict[str, Any]:
        """One row as a dict with the columns of ``COLUMNS``."""
        d = dict(zip(ROW_COLUMNS, r))
        out = {}
        for c in COLUMNS:
            out[c] = self.units_of(r[FLOATS]) if c == "units" else d[c]
        return out

    def records(self) -> Iterable[dict[str, Any]]:
        """Rows as dicts with the columns of ``COLUMNS``."""
        return self.view().records()

    def columns(self) -> dict[str, np.ndarray]:
        """Column arrays (numeric columns as numpy numbers, text columns as object arrays)."""
        v = self.view()
        if not self.rows:
            return {c: np.empty(0) for c in COLUMNS}
        return {c: v.column(c) for c in COLUMNS}

    def totals(self) -> dict[str, float]:
        """Message and byte totals; ``bytes == delivered_bytes + lost_bytes + in_flight_bytes``."""
        all_ = self.view().totals()
        fates = self.view().group("status")
        out: dict[str, float] = {"messages": all_.messages, "bytes": all_.wire_bytes, "raw_bytes": all_.raw_bytes,
                                 "floats": all_.floats}
        for fate in FATES:
            t = fates.get(fate, Totals())
            out[f"{fate}_messages"] = t.messages
            out[f"{fate}_bytes"] = t.wire_bytes
        out = {k: out[k] for k in ("messages", "bytes", "raw_bytes", "floats", "delivered_messages",
                                    "delivered_bytes", "lost_messages", "lost_bytes", "in_flight_messages",
                                    "in_flight_bytes")}
        out["unread_messages"] = len(self.select(fate="delivered", read=False))
        out["units"] = self.units_of(out["floats"])
        out["missing"] = len(self.missing)
        return {k: (int(v) if k != "units" and float(v).is_integer() else v) for k, v in out.items()}

    def by_role(self, *, per_round: bool = True, kinds: Iterable[str] | None = None,
                exclude_kinds: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Traffic per role (and round), in both directions.

        Each row: ``round`` (or -1 when ``per_round`` is false), ``role``, ``direction``
        (``sent`` or ``received``; a message counts as received only if it was delivered),
        ``messages``, ``bytes``, ``raw_bytes``, ``floats``, ``units``, ``nodes`` (how many nodes
        held that role at some point of the run; rows carry the roles at the time of sending)
        and ``bytes_per_node`` / ``units_per_node``. Raises ``ValueError`` for a ``per_round``
        that is not True or False (``"no"`` was per round), and as ``select`` for the kinds.
        """
        if not isinstance(per_round, (bool, np.bool_)):
            raise ValueError(f"by_role: per_round must be True or False, got {per_round!r}")
        v = self.select(kind=kinds, exclude_kinds=exclude_kinds)
        acc: dict[tuple, Totals] = {}
        keys = ("round", "src_role") if per_round else ("src_role",)
        for k, t in v.group(*keys).items():
            rnd, role = k if per_round else (-1, k)
            acc[(rnd, role, "sent")] = t
        keys = ("round", "dst_role") if per_round else ("dst_role",)
        for k, t in v.select(fate="delivered").group(*keys).items():
            rnd, role = k if per_round else (-1, k)
            acc[(rnd, role, "received")] = t
        counts = {role: len(members) for role, members in self.role_members.items()}
        out = []
        for (rnd, role, direction), t in sorted(acc.items()):
            n = counts.get(role, 0)
            out.append({
                "round": rnd, "role": role, "direction": direction, "messages": t.messages,
                "bytes": t.wire_bytes, "raw_bytes": t.raw_bytes, "floats": t.floats, "units": t.units, "nodes": n,
                "bytes_per_node": t.wire_bytes / n if n else _NAN,
                "units_per_node": t.units / n if n else _NAN,
            })
        return out

    def by_kind(self) -> list[dict[str, Any]]:
        """Traffic per message kind: messages, bytes, raw_bytes, floats, units."""
        return [{"kind": k, "messages": t.messages, "bytes": t.wire_bytes, "raw_bytes": t.raw_bytes,
                 "floats": t.floats, "units": t.units} for k, t in self.view().group("kind").items()]

    def by_node(self, *, exclude_kinds: Iterable[str] = ()) -> dict[str, dict[str, float]]:
        """Per node: messages/bytes/floats sent and received (delivered), excluding some kinds."""
        keys = ("sent_messages", "sent_bytes", "sent_floats",
                "received_messages", "received_bytes", "received_floats")
        acc: dict[str, dict[str, float]] = {n: dict.fromkeys(keys, 0) for n in self.roles}
        v = self.select(exclude_kinds=exclude_kinds)
        for direction, col, view in (("sent", "src", v), ("received", "dst", v.select(fate="delivered"))):
            for node, t in view.group(col).items():
                a = acc.setdefault(node, dict.fromkeys(keys, 0))
                a[f"{direction}_messages"] += t.messages
                a[f"{direction}_bytes"] += t.wire_bytes
                a[f"{direction}_floats"] += t.floats
        return acc

    def rounds(self) -> list[int]:
        """The round labels that occur, sorted."""
        return self.view().rounds()

    # -- export -----------------------------------------------------------------------------
    def _iter_rows(self) -> Iterable[list[Any]]:
        """Every row, in ledger order (what ``to_csv`` writes)."""
        return iter(self.rows)

    def to_csv(self, dest: str | os.PathLike | TextIO | None = None) -> str | None:
        """Write every row as CSV (header ``COLUMNS``). Floats are written with ``repr`` so two
        identical runs give identical bytes. ``dest``: a path, written atomically (into a
        temporary file beside it, then renamed over it: ``dest`` holds its previous content or
        the whole CSV, never part of it, and an export that fails removes the temporary file);
        an open text file, written into; or None, and the CSV text is returned.

        Raises what writing or reading the rows back raises: ``OSError`` naming ``dest`` (not the
        temporary file: a folder that does not exist, ``dest`` a folder, no permission),
        ``ValueError`` for a closed ``StreamingLedger`` and for an empty ``dest``."""
        if isinstance(dest, (str, os.PathLike)) and not os.fspath(dest):
            # "" wrote a hidden temporary file into the working folder, then failed to rename it
            raise ValueError("to_csv: dest is empty; give a file path, an open text file, or None for the text")
        if dest is None:
            buf = io.StringIO()
            self._write_csv(buf)
            return buf.getvalue()
        if isinstance(dest, (str, os.PathLike)):
            # in place, a failure part way left a header-only or truncated file that reads as a
            # valid ledger with fewer messages
            _write_replacing(dest, self._write_csv)
        else:
            self._write_csv(dest)
        return None

    def _write_csv(self, fh: TextIO) -> None:
        w = csv_writer(fh)
        w.writerow(COLUMNS)
        for r in self._iter_rows():
            d = self.as_dict(r)
            w.writerow([_fmt(d[c]) for c in COLUMNS])

    def summary(self) -> str:
        """A short plain-text table: totals and traffic per role over the whole run."""
        t = self.totals()
        lines = [
            f"messages {t['messages']}, bytes {t['bytes']} (payload arrays {t['raw_bytes']}), "
            f"delivered {t['delivered_bytes']}, lost {t['lost_bytes']}, in flight {t['in_flight_bytes']}, "
            f"unread messages {t['unread_messages']}, missing {t['missing']}",
            f"{'role':<12}{'direction':<10}{'nodes':>7}{'messages':>10}{'bytes':>14}{'bytes/node':>14}{'units/node':>12}",
        ]
        for row in self.by_role(per_round=False):
            lines.append(
                f"{row['role']:<12}{row['direction']:<10}{row['nodes']:>7}{row['messages']:>10}"
                f"{row['bytes']:>14}{_num(row['bytes_per_node']):>14}{_num(row['units_per_node']):>12}"
            )
        return "\n".join(lines)


class _LineEnds:
    """A file for ``csv.writer(..., lineterminator="\\r\\n")`` that writes each row with "\\n"
    instead. The writer quotes a field holding any character of its line terminator; told "\\n",
    Python 3.11's left a "\\r" bare (a kind "r\\rs" went out as r\\rs and read back as two rows)."""

    __slots__ = ("_write",)

    def __init__(self, fh: TextIO) -> None:
        self._write = fh.write

    def write(self, line: str) -> Any:
        return self._write(line[:-2] + "\n")  # every row the writer writes ends in its "\r\n"


def csv_writer(fh: TextIO) -> Any:
    """A CSV writer into ``fh``: minimal quoting (a field with a comma, quote, "\\r" or "\\n" is
    quoted, every other field is written as it is) and "\\n" at the end of each row."""
    return csv.writer(_LineEnds(fh), lineterminator="\r\n")


def _naming(exc: OSError, path: str) -> OSError:
    """``exc`` again (same class, errno and text) naming ``path`` instead of the temporary file."""
    return type(exc)(exc.errno, exc.strerror, path) if exc.errno is not None else exc


def _write_replacing(dest: str | os.PathLike, write: Callable[[TextIO], None]) -> None:
    """Call ``write(fh)`` on a new temporary text file beside ``dest``, flush it to disk and rename
    it over ``dest`` (``os.replace``: atomic on one file system). If anything fails, the temporary
    file is removed and ``dest`` is left as it was; the exception propagates."""
    path = os.fspath(dest)
    folder, name = os.path.split(path)
    # unique to this process and call (several may export side by side), and short enough for
    # the file system whatever the length of the destination's name
    tmp = os.path.join(folder, f".{name[:120]}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fh = open(tmp, "x", newline="", encoding="utf-8")  # "x": never another writer's file
    except OSError as exc:
        # named the temporary file (".ledger.csv.123.ab12cd34.tmp"), which the caller never gave
        raise _naming(exc, path) from None
    try:
        try:
            with fh:
                write(fh)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            # a full disk (write, flush, close: ENOSPC) named no file: the file the caller gave
            if exc.filename is None and exc.errno is not None:  # (OSError("text") would read "[Errno None] None")
                exc.filename = path
            raise
        try:
            os.replace(tmp, path)
        except OSError as exc:  # (dest a folder: it named the temporary file first)
            raise _naming(exc, path) from None
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# --------------------------------------------------------------------------------------------
# Streaming: rows on disk as fixed-size records once they can no longer change

_STATUS_NAMES = FATES
_STATUS_CODES = {name: k for k, name in enumerate(_STATUS_NAMES)}
_TEXT_COLUMNS = ("src", "dst", "src_role", "dst_role", "kind", "note")
# One record per row: the stored fields after ``seq`` (a row's place in the file is its seq), in
# ROW_COLUMNS order; text as codes into the ledger's string table, status as an index into FATES.
_RECORD = np.dtype([
    ("round", "<i8"), ("src", "<i4"), ("dst", "<i4"), ("src_role", "<i4"), ("dst_role", "<i4"), ("kind", "<i4"),
    ("bytes", "<i8"), ("raw_bytes", "<i8"), ("floats", "<i8"), ("send_time", "<f8"), ("tx_start", "<f8"),
    ("tx_end", "<f8"), ("rx_start", "<f8"), ("arrival_time", "<f8"), ("status", "i1"), ("read", "?"),
    ("anonymous", "?"), ("note", "<i4"),
])
assert _RECORD.names == ROW_COLUMNS[1:]
_TEXT_POS = tuple(_POS[c] for c in _TEXT_COLUMNS)


class StreamingLedger(Ledger):
    """A ``Ledger`` that keeps in memory only the rows that can still change, and the rest in a
    file: for runs whose ledger would not fit in memory (a 138,493-client FedRec round has
    277,000 rows; 100M rows of a list each would need about 40 GB).

    ``StreamingLedger(path=None, unit=None, framing_bytes=0, chunk_rows=262144)``; give it to a
    network with ``SimNetwork(..., ledger=StreamingLedger(...))`` (also ``AsyncioNetwork``;
    ``TcpNetwork`` merges its processes' ledgers in memory and refuses it). ``path``: the file of
    binary records (99 bytes a row; created or truncated); None: a temporary file, deleted by
    ``close`` or when the ledger is garbage collected. The file is this ledger's storage, not an
    export format: export with ``to_csv``. Raises ``ValueError`` for a ``unit`` or
    ``framing_bytes`` as ``Ledger`` does, a ``chunk_rows`` that is not a positive whole number or
    an empty ``path``, ``TypeError`` for a ``path`` that is no str or ``os.PathLike``, and
    ``OSError`` naming the file when it cannot be created (all before any file is made).

    When a row is final: a row is created when its message is sent, and a transport fills in its
    timing, status and ``read`` as the message moves; it cannot change any more once the message
    is lost, or delivered and read, or delivered and discarded unread by a gather (a late
    arrival: ``Ledger.discarded``). Such rows are written out (in batches, each at its ``seq``
    position, so a row that stays unread for long holds up nothing) whenever the rows held in
    memory reach twice as many as after the previous write, at least ``chunk_rows``: the
    bookkeeping is O(1) per row and memory is bounded by the rows genuinely in motion (in flight,
    or delivered and not yet read). Every query first writes the current state of those too.

    Queries: all of ``Ledger``'s (``select`` with every filter, ``view``, ``totals``, ``by_role``,
    ``by_kind``, ``by_node``, ``rounds``, ``records``, ``columns``, ``summary``, ``to_csv``, and on
    views ``totals``, ``group``, ``column``, ``iter_columns``, ``rounds``, ``span``, ``records``,
    ``len``) with the same results; they scan the file in chunks of ``chunk_rows`` records, so
    each costs a pass over it (``iter_columns``: one pass for several columns). ``to_csv`` is byte for byte the in-memory ledger's. The one difference: there is no
    ``rows`` list (on the ledger or its views; ``AttributeError`` saying so). A view's ``group``
    by a time column holds the selected rows in memory for the pass (its groups are about as many).
    """

    def __init__(self, path: str | os.PathLike | None = None, unit: int | None = None, framing_bytes: int = 0,
                 chunk_rows: int = 262_144) -> None:
        # not Ledger.__init__: it would make a row list
        self._fd: int | None = None  # (first: __del__ reads it if a check below raises)
        unit, framing_bytes = _check_unit_and_framing(unit, framing_bytes)
        self.missing: list[Missing] = []
        self.unit = unit
        self.framing_bytes = framing_bytes
        self.roles: dict[str, str] = {}
        self.role_members: dict[str, set[str]] = defaultdict(set)
        if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, numbers.Integral) or chunk_rows < 1:
            # int() truncated 2.5 to 2 and failed on None without naming the parameter
            raise ValueError(f"chunk_rows must be a positive whole number, got {chunk_rows!r}")
        self.chunk_rows = int(chunk_rows)
        if path is not None and not isinstance(path, (str, os.PathLike)):
            # 5 was os.fspath's "expected str, bytes or os.PathLike object, not int", naming no parameter
            raise TypeError(f"path must be a file path (str or os.PathLike) or None, got {type(path).__name__} "
                            f"{path!r:.80}")
        if path is not None and not os.fspath(path):
            raise ValueError("path is empty; give a file path, or None for a temporary file")
        if path is None:
            fd, name = tempfile.mkstemp(prefix="fedsim-ledger-", suffix=".bin")
            self._owned = True
        else:
            name = os.fspath(path)
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            self._owned = False
        self._fd, self.path = fd, str(name)
        self._n = 0
        # the round of the newest row (None before the first): what a progress display reads of a
        # running network without a row list (fedsim.experiment.live)
        self.last_round: int | None = None
        self._pending: list[list[Any]] = []
        self._dropped: set[int] = set()  # seqs of delivered rows a gather discarded unread (final)
        self._scan_at = self.chunk_rows
        self._codes: dict[Any, int] = {}
        self._strings: list[Any] = []
        self._code("")

    @property
    def rows(self):  # the base class's row list does not exist here
        raise AttributeError("a StreamingLedger keeps no list of rows: use select(), records() or to_csv()")

    def _code(self, value: Any) -> int:
        code = self._codes.get(value)
        if code is None:
            code = self._codes[value] = len(self._strings)
            self._strings.append(value)
        return code

    def set_role(self, node: str, role: str) -> None:
        super().set_role(node, role)
        self._code(node)
        self._code(role)

    # -- recording ----------------------------------------------------------------------------
    def new_row(self, rnd: int, src: str, dst: str, src_role: str, dst_role: str, kind: str,
                nbytes: int, raw: int, floats: int, t: float, anonymous: bool) -> list[Any]:
        row = [self._n, rnd, src, dst, src_role, dst_role, kind, nbytes, raw, floats,
               t, _NAN, _NAN, _NAN, _NAN, "in_flight", False, anonymous, ""]
        self._n += 1
        self.last_round = rnd
        pending = self._pending
        pending.append(row)
        if len(pending) >= self._scan_at:
            self._write_final()
        return row

    def discarded(self, row: list[Any]) -> None:
        self._dropped.add(row[SEQ])

    def _write_final(self) -> None:
        """Write the rows that can no longer change and forget them."""
        keep, done = [], []
        dropped = self._dropped
        for r in self._pending:
            status = r[STATUS]
            (done if status == "lost" or (status == "delivered" and (r[READ] or r[SEQ] in dropped)) else
             keep).append(r)
        if dropped:
            dropped.difference_update([r[SEQ] for r in done])
        self._write(done)
        self._pending = keep
        self._scan_at = max(2 * len(keep), self.chunk_rows)

    def _write(self, rows: list[list[Any]]) -> None:
        """Records of ``rows`` (in seq order) at their places in the file."""
        if not rows:
            return
        if self._fd is None:
            raise ValueError(f"the StreamingLedger is closed (its file was {self.path})")
        n = len(rows)
        cols = list(zip(*rows))
        rec = np.empty(n, _RECORD)
        codes, code = self._codes, self._code
        for name in _RECORD.names:
            pos = _POS[name]
            if pos in _TEXT_POS:
                rec[name] = [codes[v] if v in codes else code(v) for v in cols[pos]]
            elif name == "status":
                rec[name] = [_STATUS_CODES[v] for v in cols[pos]]
            else:
                rec[name] = cols[pos]
        seq = np.fromiter(cols[SEQ], np.int64, n)
        cuts = (np.flatnonzero(np.diff(seq) != 1) + 1).tolist()
        size = _RECORD.itemsize
        for a, b in zip([0, *cuts], [*cuts, n]):  # runs of consecutive rows: one write each
            data = rec[a:b].tobytes()
            at = int(seq[a]) * size
            while data:
                done = os.pwrite(self._fd, data, at)
                data, at = data[done:], at + done

    @property
    def closed(self) -> bool:
        """Whether ``close`` has been called (queries, ``flush`` and recording then fail)."""
        return self._fd is None

    def flush(self) -> None:
        """Write every row to the file: the final ones (then forgotten) and the current state of
        those still in motion (kept, and written again by a later flush if they change). Raises
        ``ValueError`` naming the file once the ledger is closed, whether or not rows were left
        to write (it did nothing when every row was out, and raised when some were not)."""
        if self._fd is None:
            raise ValueError(f"the StreamingLedger is closed (its file was {self.path})")
        self._write_final()
        self._write(self._pending)

    def close(self) -> None:
        """Close the file (and delete it if it is a temporary one). Queries and ``flush`` fail
        afterwards (``ValueError`` naming the file), and so does a network given the ledger
        (``NetworkConfigError``); a second ``close`` does nothing."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            if self._owned:
                try:
                    os.unlink(self.path)
                except FileNotFoundError:
                    pass

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    # -- reading ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    def _chunks(self) -> Iterable[tuple[int, np.ndarray]]:
        """(first seq, records) over the file, ``chunk_rows`` records at a time, after a flush."""
        self.flush()  # (ValueError naming the file once closed)
        if self._n == 0:
            return
        mm = np.memmap(self.path, _RECORD, mode="r", shape=(self._n,))
        for a in range(0, self._n, self.chunk_rows):
            yield a, mm[a:a + self.chunk_rows]

    def _decode(self, first: int, recs: np.ndarray) -> Iterable[list[Any]]:
        """Records back as rows (lists in ROW_COLUMNS order, the values the transports stored)."""
        strings = self._strings
        for k, t in enumerate(recs.tolist()):
            r = [first + k, *t]
            for pos in _TEXT_POS:
                r[pos] = strings[r[pos]]
            r[STATUS] = _STATUS_NAMES[r[STATUS]]
            yield r

    def _iter_rows(self) -> Iterable[list[Any]]:
        for first, recs in self._chunks():
            yield from self._decode(first, recs)

    def view(self) -> "StreamView":
        """All rows as a ``StreamView``."""
        return StreamView(self, ())

    def select(self, **filters: Any) -> "StreamView":
        """As ``Ledger.select``; a lazy view (each query on it scans the file). Made while a run
        is going, it differs from ``Ledger.select``'s: that one holds the rows recorded when it
        was made (a snapshot), this one also the rows recorded after, up to each query. After
        the run the two give the same answers."""
        return self.view().select(**filters)

    def columns(self) -> dict[str, np.ndarray]:
        if not self._n:
            return {c: np.empty(0) for c in COLUMNS}
        v = self.view()
        return {c: v.column(c) for c in COLUMNS}


def _compile_filters(led: StreamingLedger, *, kind: Any = None, exclude_kinds: Iterable[str] = (),
                     round: Any = None, src: Any = None, dst: Any = None, src_role: Any = None,
                     dst_role: Any = None, fate: Any = None, anonymous: bool | None = None,
                     read: bool | None = None, min_round: int | None = None) -> tuple:
    """``_filter``'s keywords as conditions on records: (op, field, argument) triples. A text
    column's argument is the set of allowed values, turned into codes only when the view is
    evaluated (``_codes``): a value's code exists once a row holding it has been written, and the
    rows still in memory at ``select`` (every row of a small run) are written by the evaluation's
    flush."""
    fates = _as_set(fate)
    if fates is not None and not fates <= set(FATES):
        raise ValueError(f"fate must be one of {FATES}, got {sorted(fates - set(FATES))}")
    _check_flags(anonymous, read, min_round)
    conds = []
    for field, val in (("kind", kind), ("round", round), ("src", src), ("dst", dst), ("src_role", src_role),
                       ("dst_role", dst_role), ("status", fate)):
        allowed = _as_set(val)
        if allowed is None:
            continue
        if field == "round":
            arg = np.array([v for v in allowed if isinstance(v, numbers.Real) and not isinstance(v, bool)]
                           + [int(v) for v in allowed if isinstance(v, bool)], dtype=np.float64)
        elif field == "status":
            arg = np.array([_STATUS_CODES[v] for v in allowed], dtype=np.int64)
        else:
            # codes looked up here missed the values of rows not yet written: the first
            # select(kind="model") after a run held in memory selected nothing
            conds.append(("in text", field, allowed))
            continue
        conds.append(("in", field, arg))
    drop = _kinds(exclude_kinds)
    if drop:
        conds.append(("not in text", "kind", drop))
    if min_round is not None:
        conds.append((">=", "round", min_round))
    if anonymous is not None:
        conds.append(("==", "anonymous", anonymous))
    if read is not None:
        conds.append(("==", "read", read))
    return tuple(conds)


class StreamView:
    """A selection of a ``StreamingLedger``'s rows: ``LedgerView``'s interface (``select``,
    ``totals``, ``group``, ``column``, ``iter_columns``, ``rounds``, ``span``, ``records``, ``len``)
    with the same results, evaluated by scanning the ledger's file; no ``rows`` list."""

    __slots__ = ("ledger", "_conds")

    def __init__(self, ledger: StreamingLedger, conds: tuple) -> None:
        self.ledger = ledger
        self._conds = conds

    def select(self, **filters: Any) -> "StreamView":
        _check_filters(filters)
        return StreamView(self.ledger, self._conds + _compile_filters(self.ledger, **filters))

    def _codes_of(self) -> list[tuple]:
        """The conditions with text values as arrays of their codes (after ``_chunks``' flush has
        written every row, so that every value in the ledger has one; a value without a code is
        in no row)."""
        codes = self.ledger._codes
        out = []
        for op, field, arg in self._conds:
            if op in ("in text", "not in text"):
                op = op[:-5]
                arg = np.array([codes[v] for v in arg if v in codes], dtype=np.int64)
                if op == "not in" and not arg.size:
                    continue
            out.append((op, field, arg))
        return out

    def _selected(self) -> Iterable[tuple[int, np.ndarray, np.ndarray]]:
        """Chunk by chunk: (the chunk's first row number, its records, the mask of the selected
        rows among them)."""
        conds = None
        for first, recs in self.ledger._chunks():
            if conds is None:  # (the first chunk comes after the flush)
                conds = self._codes_of()
            mask = np.ones(recs.shape[0], dtype=bool)
            for op, field, arg in conds:
                col = recs[field]
                if op == "in":
                    mask &= np.isin(col, arg)
                elif op == "not in":
                    mask &= ~np.isin(col, arg)
                elif op == ">=":
                    mask &= col >= arg
                else:
                    mask &= col == arg
            yield first, recs, mask

    def __len__(self) -> int:
        return sum(int(mask.sum()) for _, _, mask in self._selected())

    def totals(self) -> Totals:
        m = b = raw = fl = 0
        for _, recs, mask in self._selected():
            m += int(mask.sum())
            b += int(recs["bytes"][mask].sum())
            raw += int(recs["raw_bytes"][mask].sum())
            fl += int(recs["floats"][mask].sum())
        led = self.ledger
        return Totals(m, b, b - m * led.framing_bytes, raw, fl, led.units_of(fl))

    def _values(self, name: str, recs: np.ndarray) -> np.ndarray:
        col = recs[name]
        if name in _TEXT_COLUMNS:
            return np.array(self.ledger._strings, dtype=object)[col]
        if name == "status":
            return np.array(_STATUS_NAMES, dtype=object)[col]
        return col

    def group(self, *keys: str) -> dict[Any, Totals]:
        if not keys:
            raise ValueError("group needs at least one column name")
        for k in keys:
            _group_pos(k)  # KeyError for an unknown name, as LedgerView.group
        if any(k in _TIME_COLUMNS for k in keys):
            return self._group_rows(keys)
        acc: dict[Any, list] = {}
        for first, recs, mask in self._selected():
            if not mask.any():
                continue
            sel = recs[mask]
            if "seq" in keys:
                seqs = first + np.flatnonzero(mask)
            cols = [seqs if k == "seq" else sel[k] for k in keys]
            key_arr = np.rec.fromarrays(cols) if len(cols) > 1 else cols[0]
            uniq, inv = np.unique(key_arr, return_inverse=True)
            inv = inv.reshape(-1)
            order = np.argsort(inv, kind="stable")
            starts = np.flatnonzero(np.r_[True, np.diff(inv[order]) != 0])
            sums = [np.add.reduceat(sel[c][order].astype(np.int64), starts) for c in ("bytes", "raw_bytes", "floats")]
            counts = np.diff(np.r_[starts, order.shape[0]])
            strings, names = self.ledger._strings, _STATUS_NAMES
            for j, u in enumerate(uniq.tolist()):
                parts = u if len(keys) > 1 else (u,)
                vals = tuple(strings[v] if k in _TEXT_COLUMNS else names[v] if k == "status" else v
                             for k, v in zip(keys, parts))
                key = vals if len(keys) > 1 else vals[0]
                a = acc.get(key)
                if a is None:
                    a = acc[key] = [0, 0, 0, 0]
                a[0] += int(counts[j])
                a[1] += int(sums[0][j])
                a[2] += int(sums[1][j])
                a[3] += int(sums[2][j])
        fb = self.ledger.framing_bytes
        units = self.ledger.units_of
        return {k: Totals(m, b, b - m * fb, raw, fl, units(fl)) for k, (m, b, raw, fl) in sorted(acc.items())}

    def _group_rows(self, keys: tuple[str, ...]) -> dict[Any, Totals]:
        """``group`` by keys that include a time column: ``LedgerView.group`` over the selected rows,
        decoded (a pass that holds them in memory: grouping by a time has about one group per row
        anyway)."""
        rows = []
        led = self.ledger
        for first, recs, mask in self._selected():
            idx = np.flatnonzero(mask)
            for k, r in zip(idx.tolist(), led._decode(0, recs[idx])):
                r[SEQ] = first + k
                rows.append(r)
        return LedgerView(led, rows).group(*keys)

    def _piece(self, name: str, first: int, recs: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Column ``name`` of the selected records of one chunk, with the dtype ``column`` gives."""
        if name == "units":
            led = self.ledger
            fl = recs["floats"][mask].astype(np.int64)
            return fl / led.unit if led.unit else np.full(fl.shape[0], _NAN)
        if name == "seq":
            return first + np.flatnonzero(mask).astype(np.int64)
        return self._values(name, recs[mask]).astype(_dtype(name))

    def column(self, name: str) -> np.ndarray:
        led = self.ledger
        if name == "units":
            return self.column("floats") / led.unit if led.unit else np.full(len(self), _NAN)
        if name not in _POS:
            raise KeyError(f"no ledger column {name!r}; columns: {', '.join(COLUMNS)}")
        parts = []
        for first, recs, mask in self._selected():
            parts.append(first + np.flatnonzero(mask) if name == "seq" else self._values(name, recs[mask]))
        dt = _dtype(name)
        return np.concatenate(parts).astype(dt) if parts else np.empty(0, dtype=dt)

    def iter_columns(self, *names: str) -> Iterable[dict[str, np.ndarray]]:
        """As ``LedgerView.iter_columns``: one scan of the file for all the names, a piece per
        chunk of ``chunk_rows`` records that holds selected rows."""
        _check_names(names)
        for first, recs, mask in self._selected():
            if mask.any():
                yield {name: self._piece(name, first, recs, mask) for name in names}

    def rounds(self) -> list[int]:
        seen: set[int] = set()
        for _, recs, mask in self._selected():
            seen.update(np.unique(recs["round"][mask]).tolist())
        return sorted(seen)

    def span(self) -> float:
        """Seconds from the first send to the last arrival of these rows (NaN if none arrived)."""
        first, last = _INF, -_INF
        for _, recs, mask in self._selected():
            if not mask.any():
                continue
            first = min(first, float(recs["send_time"][mask].min()))
            arr = recs["arrival_time"][mask]
            arr = arr[arr == arr]
            if arr.size:
                last = max(last, float(arr.max()))
        return _NAN if last == -_INF else last - first

    @property
    def rows(self):  # LedgerView's row list does not exist here
        raise AttributeError("a StreamView keeps no list of rows: use records(), column() or the other queries")

    def records(self) -> Iterable[dict[str, Any]]:
        led = self.ledger
        for first, recs, mask in self._selected():
            idx = np.flatnonzero(mask)
            for k, r in zip(idx.tolist(), led._decode(0, recs[idx])):
                r[SEQ] = first + k
                yield led.as_dict(r)


def _dtype(name: str) -> Any:
    """The dtype of a stored column's array (``column``)."""
    if name in _INT_COLUMNS:
        return np.int64
    if name in _TIME_COLUMNS:
        return np.float64
    if name in _BOOL_COLUMNS:
        return bool
    return object


def _fmt(v: Any) -> str:
    if isinstance(v, float):  # float() first: NumPy 2's repr of np.float64 is the call, not the number
        v = float(v)
        return "" if math.isnan(v) else repr(v)
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


def _num(v: float) -> str:
    return "-" if v != v else f"{v:.1f}"
