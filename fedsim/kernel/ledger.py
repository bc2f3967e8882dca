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
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable, TextIO

import numpy as np

__all__ = ["Ledger", "Missing", "COLUMNS"]

COLUMNS = (
    "seq", "round", "src", "dst", "src_role", "dst_role", "kind", "bytes", "raw_bytes", "floats",
    "units", "send_time", "tx_start", "tx_end", "rx_start", "arrival_time", "status", "read",
    "anonymous", "note",
)
# positions in a row list (rows are plain lists: cheap to create on the per-message hot path)
SEQ, ROUND, SRC, DST, SRC_ROLE, DST_ROLE, KIND, BYTES, RAW, FLOATS = range(10)
SEND_T, TX_START, TX_END, RX_START, ARRIVAL, STATUS, READ, ANON, NOTE = range(10, 19)

_NAN = math.nan


@dataclass(frozen=True, slots=True)
class Missing:
    """A message a receiver waited for with a deadline and did not get in time."""

    round: int
    receiver: str
    sender: str | None
    kind: str
    time: float


class Ledger:
    """Every message of one run. ``unit`` is the number of floats that make one accounting unit
    (the protocol's latent dimension d); ``units`` columns are ``floats / unit`` (NaN if unset)."""

    def __init__(self, unit: int | None = None) -> None:
        self.rows: list[list[Any]] = []
        self.missing: list[Missing] = []
        self.unit = unit
        self.roles: dict[str, str] = {}  # each node's current (final) role
        self.role_members: dict[str, set[str]] = defaultdict(set)  # every node that held a role

    def set_role(self, node: str, role: str) -> None:
        """Record that ``node`` holds ``role`` from now on (rows keep the role at send time)."""
        self.roles[node] = role
        self.role_members[role].add(node)

    # -- recording (called by transports) ----------------------------------------------------
    def new_row(self, rnd: int, src: str, dst: str, src_role: str, dst_role: str, kind: str,
                nbytes: int, raw: int, floats: int, t: float, anonymous: bool) -> list[Any]:
        row = [len(self.rows), rnd, src, dst, src_role, dst_role, kind, nbytes, raw, floats,
               t, _NAN, _NAN, _NAN, _NAN, "in_flight", False, anonymous, ""]
        self.rows.append(row)
        return row

    # -- reading ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.rows)

    def _units(self, floats: float) -> float:
        return floats / self.unit if self.unit else _NAN

    def records(self) -> Iterable[dict[str, Any]]:
        """Rows as dicts with the columns of ``COLUMNS``."""
        for r in self.rows:
            yield self._as_dict(r)

    def _as_dict(self, r: list[Any]) -> dict[str, Any]:
        d = dict(zip(COLUMNS[:10], r[:10]))
        d["units"] = self._units(r[FLOATS])
        d.update(zip(COLUMNS[11:], r[10:]))
        return d

    def columns(self) -> dict[str, np.ndarray]:
        """Column arrays (numeric columns as numpy numbers, text columns as object arrays)."""
        if not self.rows:
            return {c: np.empty(0) for c in COLUMNS}
        cols = list(zip(*self.rows))
        out: dict[str, np.ndarray] = {}
        names = [c for c in COLUMNS if c != "units"]
        for name, col in zip(names, cols):
            if name in ("seq", "round", "bytes", "raw_bytes", "floats"):
                out[name] = np.asarray(col, dtype=np.int64)
            elif name in ("send_time", "tx_start", "tx_end", "rx_start", "arrival_time"):
                out[name] = np.asarray(col, dtype=np.float64)
            elif name in ("read", "anonymous"):
                out[name] = np.asarray(col, dtype=bool)
            else:
                out[name] = np.asarray(col, dtype=object)
        out["units"] = out["floats"] / self.unit if self.unit else np.full(len(self.rows), _NAN)
        return out

    def totals(self) -> dict[str, float]:
        """Message and byte totals; ``bytes == delivered_bytes + lost_bytes + in_flight_bytes``."""
        t = defaultdict(float)
        for r in self.rows:
            t["messages"] += 1
            t["bytes"] += r[BYTES]
            t["raw_bytes"] += r[RAW]
            t["floats"] += r[FLOATS]
            t[f"{r[STATUS]}_bytes"] += r[BYTES]
            t[f"{r[STATUS]}_messages"] += 1
            if r[STATUS] == "delivered" and not r[READ]:
                t["unread_messages"] += 1
        out = {k: t.get(k, 0.0) for k in (
            "messages", "bytes", "raw_bytes", "floats", "delivered_messages", "delivered_bytes",
            "lost_messages", "lost_bytes", "in_flight_messages", "in_flight_bytes", "unread_messages")}
        out["units"] = self._units(out["floats"])
        out["missing"] = len(self.missing)
        return {k: (int(v) if k != "units" and float(v).is_integer() else v) for k, v in out.items()}

    def by_role(self, *, per_round: bool = True, kinds: Iterable[str] | None = None,
                exclude_kinds: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Traffic per role (and round), in both directions.

        Each row: ``round`` (or -1 when ``per_round`` is false), ``role``, ``direction``
        (``sent`` or ``received``; a message counts as received only if it was delivered),
        ``messages``, ``bytes``, ``raw_bytes``, ``floats``, ``units``, ``nodes`` (how many nodes
        held that role at some point of the run; rows carry the roles at the time of sending)
        and ``bytes_per_node`` / ``units_per_node``.
        """
        keep = set(kinds) if kinds is not None else None
        drop = set(exclude_kinds)
        acc: dict[tuple, list[float]] = defaultdict(lambda: [0, 0, 0, 0])
        for r in self.rows:
            k = r[KIND]
            if (keep is not None and k not in keep) or k in drop:
                continue
            rnd = r[ROUND] if per_round else -1
            for key in ((rnd, r[SRC_ROLE], "sent"),) + (
                ((rnd, r[DST_ROLE], "received"),) if r[STATUS] == "delivered" else ()
            ):
                a = acc[key]
                a[0] += 1
                a[1] += r[BYTES]
                a[2] += r[RAW]
                a[3] += r[FLOATS]
        counts = {role: len(members) for role, members in self.role_members.items()}
        out = []
        for (rnd, role, direction), (m, b, raw, fl) in sorted(acc.items()):
            n = counts.get(role, 0)
            out.append({
                "round": rnd, "role": role, "direction": direction, "messages": m, "bytes": b,
                "raw_bytes": raw, "floats": fl, "units": self._units(fl), "nodes": n,
                "bytes_per_node": b / n if n else _NAN,
                "units_per_node": self._units(fl) / n if n else _NAN,
            })
        return out

    def by_kind(self) -> list[dict[str, Any]]:
        """Traffic per message kind: messages, bytes, raw_bytes, floats, units."""
        acc: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        for r in self.rows:
            a = acc[r[KIND]]
            a[0] += 1
            a[1] += r[BYTES]
            a[2] += r[RAW]
            a[3] += r[FLOATS]
        return [{"kind": k, "messages": m, "bytes": b, "raw_bytes": raw, "floats": fl,
                 "units": self._units(fl)} for k, (m, b, raw, fl) in sorted(acc.items())]

    def by_node(self, *, exclude_kinds: Iterable[str] = ()) -> dict[str, dict[str, float]]:
        """Per node: messages/bytes/floats sent and received (delivered), excluding some kinds."""
        drop = set(exclude_kinds)
        keys = ("sent_messages", "sent_bytes", "sent_floats",
                "received_messages", "received_bytes", "received_floats")
        acc: dict[str, dict[str, float]] = {n: dict.fromkeys(keys, 0) for n in self.roles}
        for r in self.rows:
            if r[KIND] in drop:
                continue
            s = acc.setdefault(r[SRC], dict.fromkeys(keys, 0))
            s["sent_messages"] += 1
            s["sent_bytes"] += r[BYTES]
            s["sent_floats"] += r[FLOATS]
            if r[STATUS] == "delivered":
                d = acc.setdefault(r[DST], dict.fromkeys(keys, 0))
                d["received_messages"] += 1
                d["received_bytes"] += r[BYTES]
                d["received_floats"] += r[FLOATS]
        return acc

    def rounds(self) -> list[int]:
        """The round labels that occur, sorted."""
        return sorted({r[ROUND] for r in self.rows})

    # -- export -----------------------------------------------------------------------------
    def to_csv(self, dest: str | TextIO | None = None) -> str | None:
        """Write every row as CSV (header ``COLUMNS``). Floats are written with ``repr`` so two
        identical runs give identical bytes. With ``dest=None`` the CSV text is returned."""
        buf = io.StringIO() if dest is None else None
        fh = buf
        close = False
        if isinstance(dest, str):
            fh = open(dest, "w", newline="", encoding="utf-8")
            close = True
        elif dest is not None:
            fh = dest
        try:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(COLUMNS)
            for r in self.rows:
                d = self._as_dict(r)
                w.writerow([_fmt(d[c]) for c in COLUMNS])
        finally:
            if close:
                fh.close()
        return buf.getvalue() if buf is not None else None

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


def _fmt(v: Any) -> str:
    if isinstance(v, float):  # float() first: NumPy 2's repr of np.float64 is the call, not the number
        v = float(v)
        return "" if math.isnan(v) else repr(v)
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


def _num(v: float) -> str:
    return "-" if v != v else f"{v:.1f}"
