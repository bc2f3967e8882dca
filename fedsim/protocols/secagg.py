"""Secure aggregation as actor steps, shared by the protocols that offer it as a defence (FedRec's
batch PMF, FPL, FedRec++'s noise): the key exchange and the masked dense upload. The arithmetic is
``fedsim.math.secagg``; docs/privacy.md says what it hides and what it costs.

Key exchange (once, before training, in a setup round: a negative round label, -1 unless the
protocol says otherwise, so that the exchange shares no label with a training round), relayed by
the server as in Bonawitz et al.:

    client -> server   ``keys``   {pub}           one Diffie-Hellman public key (toy 61-bit group)
    server -> clients  ``peers``  {pubs: uint64[n]} every client's public key (0: none received)

A client draws its secret from a generator *spawned* from ``ctx.rng`` (spawning does not advance
the parent stream), so a run with secure aggregation makes the same random draws as one
without. Each round, a participant uploads its vector as one ``uint64`` array (fixed point plus
pairwise masks with its ring neighbours among the round's participants); the receiver adds them
modulo 2^64 and decodes the exact sum. A missing upload leaves the masks of its neighbours
uncancelled: the receiver cannot decode that round (no dropout recovery here).

A client whose ``keys`` message did not reach the server (lost, or past the deadline) has 0 in the
published list, so no other client can share a key with it: it cannot mask, and every protocol
leaves it out of every round of the run (it uploads nothing, the server neither expects nor selects
it, and the result's ``missing`` records it once, at the key exchange's round). Server and client
decide this from the same published list (``MaskingKeys.keyed``), without another message.

A client whose vector cannot be encoded (a value not finite, or beyond the fixed-point range
``|x| < 2^(62 - FRACTION_BITS) / n`` for a sum over n keyed participants, so that the sum cannot
wrap around: the run is diverging) sends ``{overflow: True}`` in place of its
masked vector (``masked_body``); the server then stops the run and reports it as diverged at that
round, as a plain run does once its model stops being finite. In a run that does not diverge every
value fits and nothing changes. The flag tells the server which client overflowed (one bit, only
in a diverging run).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..math import secagg
from .common import SERVER, BadMessageError
from .contract import Kind

__all__ = ["KEYLESS", "MaskingKeys", "TOO_FEW", "checked_members", "checked_pubs", "client_keys", "dense_rows", "key_exchange_kinds",
           "masked_body", "masked_vectors", "overflowed", "server_relay_keys"]

# the ``reason`` of the ``missing`` records these cases leave in a protocol's result
KEYLESS = "public key not received by the server (lost or late): left out of every round"
TOO_FEW = "fewer than two participants with a public key: no sum to hide an upload in, round skipped"


def key_exchange_kinds(client_role: str = "client", purpose: str = "secure aggregation",
                       masked: str | None = None, receivers: str | tuple[str, ...] | None = None) -> tuple[Kind, ...]:
    """The message kinds a protocol spec declares for this module's steps: ``keys`` and ``peers``
    between the server and ``client_role``, and, when ``masked`` describes the upload's layout,
    the ``masked`` upload itself (``purpose`` names the defence in the descriptions). ``receivers``:
    the roles ``peers`` may find its receivers in (default ``client_role``; FedRec++'s ordinary
    clients are still ``client`` if they dropped out before reading the assign that made them
    ``ordinary``)."""
    kinds = (Kind("keys", client_role, "server", "setup", f"{{pub}}: {purpose}, the client's public key"),
             Kind("peers", "server", client_role if receivers is None else receivers, "setup",
                  f"{{pubs: uint64[n]}}: {purpose}, every public key"))
    if masked is not None:
        kinds += (Kind("masked", client_role, "server", "training", f"{{masked: {masked}}}: {purpose}, "
                       "the dense masked upload ({overflow: true} instead when a value does not fit the "
                       "fixed-point range: the run diverged)"),)
    return kinds


async def server_relay_keys(ctx, clients: Sequence[str], deadline: float | None = None,
                            senders: Sequence[str] | None = None) -> np.ndarray:
    """Gather one ``keys`` message from each of ``senders`` (default: ``clients``; up to
    ``deadline``) and broadcast ``peers`` {pubs} to them: the public keys in the index order of
    ``clients`` (0 for a client not heard from). Returns the public keys."""
    senders = list(clients) if senders is None else list(senders)
    got = await ctx.gather("keys", senders=senders, timeout=deadline)
    index = {c: i for i, c in enumerate(clients)}
    pubs = np.zeros(len(clients), dtype=np.uint64)
    for m in got:
        try:
            pub = m.payload["pub"]
        except (KeyError, TypeError) as exc:
            raise BadMessageError(m, exc) from exc
        # an element of the group: 0 would read as "not heard from", and a negative or oversized
        # number was an OverflowError of the server (or a key reduced modulo 2^64)
        if type(pub) is not int or not 0 < pub < secagg.DH_PRIME:
            raise BadMessageError(m, f"pub must be an integer in [1, {secagg.DH_PRIME}), got {pub!r}")
        pubs[index[m.sender]] = np.uint64(pub)
    await ctx.broadcast(senders, "peers", {"pubs": pubs})
    return pubs


async def client_keys(ctx, me: int, k: int, setup_round: int = -1, n_clients: int | None = None) -> "MaskingKeys":
    """Send this client's public key to the server and wait for ``peers``; returns its
    ``MaskingKeys`` (``me``: its index among the clients; ``k``: ring neighbours per round;
    ``n_clients``: how many there are, the length the key list must have, if given).
    If ``stop`` comes instead (``peers`` was lost), the keys are ``stopped`` (not ``keyed``) and
    the run is over for the client: the caller returns without waiting for another ``stop``.
    ``keys`` is labelled ``setup_round`` (negative: a setup round, the one the server relays
    ``peers`` in; a node starts at round 0, and the key would otherwise be labelled with the
    first training round, and the server, adopting that label, relay ``peers`` in it too)."""
    ctx.begin_round(setup_round)
    rng = ctx.rng.spawn(1)[0]
    secret = secagg.dh_secret(rng)
    pub = secagg.dh_public(secret)
    await ctx.send(SERVER, "keys", {"pub": pub})
    # ``peers`` or, if that was lost, the end of the run: the server sends nothing else to a
    # client before ``peers`` but ``stop`` after it, and a client without the list cannot mask
    # (it waited for ``peers`` alone, and a lost one left it blocked: a DeadlockError at the end
    # of a run with a deadline, which otherwise ends in a result)
    msg = await ctx.receive(("peers", "stop"))
    if msg.kind == "stop":
        return MaskingKeys(me, secret, np.zeros(0, dtype=np.uint64), int(k), stopped=True)
    return MaskingKeys(me, secret, checked_pubs(msg, me, pub, n_clients), int(k))


def checked_pubs(msg, me: int, own: int, n_clients: int | None = None) -> np.ndarray:
    """The public keys of a ``peers`` message, if they are a 1-D uint64 array with an entry for
    client ``me`` that is its own key ``own`` (or 0: not heard from), every entry 0 or in
    [1, DH_PRIME); else ``BadMessageError`` naming the server's message (a short list was a bare
    IndexError of the client, a string a bare ValueError, and keys outside the group, e.g. -1,
    were taken: masks that did not cancel, a sum of noise taken for the model's update) and, given
    ``n_clients``, of that many entries (a key past the last client made it a phantom ring
    neighbour: masks that did not cancel, taken silently)."""
    pubs = msg.payload.get("pubs") if isinstance(msg.payload, dict) else None
    if (type(pubs) is not np.ndarray or pubs.dtype != np.uint64 or pubs.ndim != 1 or pubs.shape[0] <= me
            or (n_clients is not None and pubs.shape[0] != n_clients)
            or int(pubs[me]) not in (0, own) or bool((pubs >= secagg.DH_PRIME).any())):
        got = (f"{pubs.dtype} of shape {pubs.shape}" if isinstance(pubs, np.ndarray) else type(pubs).__name__)
        size = "" if n_clients is None else f" of {n_clients} entries (one per client)"
        raise BadMessageError(msg, f"pubs must be a uint64 vector{size} with entry {me} this client's key (or 0) "
                                   f"and every entry 0 or in [1, {secagg.DH_PRIME}), got {got}")
    return pubs


def checked_members(msg, members, keys: "MaskingKeys", field: str = "members") -> np.ndarray:
    """The participants a server's message names (its ``field``: FPL's ``members``, FedRec++'s
    ``part``), if they are a 1-D integer array of client indices in ``[0, len(keys.pubs))``
    naming this client; else ``BadMessageError`` naming the message (a list without the client
    was a bare ``ValueError`` of the masking, a negative index counted from the end of the key
    list and masked with another client's key, silently)."""
    if (type(members) is not np.ndarray or members.ndim != 1 or members.dtype.kind not in "iu" or not members.size
            or int(members.min()) < 0 or int(members.max()) >= keys.pubs.shape[0] or not (members == keys.me).any()):
        got = (f"{members.dtype} {members.tolist()!r:.80}" if isinstance(members, np.ndarray)
               else type(members).__name__)
        raise BadMessageError(msg, f"{field} must be the round's participants, client indices in [0, "
                                   f"{keys.pubs.shape[0]}) naming this client ({keys.me}), got {got}")
    return members


class MaskingKeys:
    """A client's view of the key exchange: its index ``me``, its secret, everyone's public keys
    and ``k``, the ring neighbours it masks with among a round's participants."""

    __slots__ = ("me", "secret", "pubs", "k", "stopped", "_shared", "_members")

    def __init__(self, me: int, secret: int, pubs: np.ndarray, k: int, stopped: bool = False) -> None:
        self.me = int(me)
        self.secret = int(secret)
        self.pubs = pubs
        self.k = int(k)
        self.stopped = bool(stopped)
        self._shared: dict[int, int] = {}
        self._members: np.ndarray | None = None

    @property
    def keyed(self) -> bool:
        """Whether the server's published list has this client's public key. If not, nobody can
        share a key with it, so its masks could not cancel: it takes part in no round. False too
        when ``stopped``: the client never got the list (``peers`` lost), and the run is over."""
        return not self.stopped and bool(self.pubs[self.me] != 0)

    def parties(self, members: Sequence[int]) -> int:
        """How many of ``members`` have a public key: the uploads a sum among them adds up."""
        ms = np.asarray(members, dtype=np.int64)
        return int(np.count_nonzero(self.pubs[ms])) if ms.size else 0

    def keys_for(self, members: Sequence[int]) -> dict[int, int]:
        """Shared keys with this client's ring neighbours among ``members`` (client indices in
        the order every participant uses: ascending; those without a public key left out, as
        every other participant leaves them out). Raises ``ValueError`` if this client has no
        published key (``keyed`` is False): its neighbours would not mask with it."""
        if not self.keyed:
            raise ValueError(f"client {self.me}'s public key did not reach the server: it cannot mask "
                             "(the protocol leaves it out of every round)")
        ms = np.asarray(members, dtype=np.int64)
        ms = ms[self.pubs[ms] != 0]
        out = {}
        for v in secagg.ring_neighbours(ms, self.me, self.k):
            v = int(v)
            if v not in self._shared:
                self._shared[v] = secagg.dh_shared(self.secret, int(self.pubs[v]))
            out[v] = self._shared[v]
        return out

    def upload(self, x: np.ndarray, members: Sequence[int], rnd: int) -> np.ndarray:
        """The masked fixed-point upload of ``x`` for round ``rnd`` among ``members``. Raises
        ``OverflowError`` if a value of ``x`` is not finite or too large for the sum over the
        round's keyed members to stay exact (``fedsim.math.secagg.limit``)."""
        return secagg.masked_upload(x, self.me, self.keys_for(members), rnd, parties=self.parties(members))

    def members(self) -> np.ndarray:
        """Every client index with a public key (ascending)."""
        if self._members is None:
            self._members = np.flatnonzero(self.pubs)
        return self._members


def masked_body(keys: MaskingKeys, x: np.ndarray, members: Sequence[int], rnd: int) -> dict:
    """The payload of a ``masked`` upload of ``x``: ``{"masked": keys.upload(x, members, rnd)}``,
    or ``{"overflow": True}`` if ``x`` has a value that is not finite or does not fit the fixed-point
    range (``fedsim.math.secagg.encode`` raises ``OverflowError``; nothing is masked then)."""
    try:
        return {"masked": keys.upload(x, members, rnd)}
    except OverflowError:
        # not an error of the protocol but a diverging run: say so, as the plain upload's
        # non-finite values would have told the server
        return {"overflow": True}


def overflowed(messages) -> bool:
    """Whether any of ``messages`` (received uploads) carries the ``overflow`` flag. Raises
    ``BadMessageError`` naming the sender for a payload that is not a map, or an ``overflow``
    field that is not ``{overflow: true}`` alone (a payload of another type was a bare TypeError
    of the server, and ``{overflow: false}`` stopped the run as diverged)."""
    flagged = False
    for msg in messages:
        p = msg.payload
        if type(p) is not dict:
            raise BadMessageError(msg, f"the payload must be a map, got {type(p).__name__}")
        if "overflow" in p:
            if p["overflow"] is not True or len(p) != 1:
                raise BadMessageError(msg, f"an overflow flag must be {{overflow: true}} alone, got {p!r}")
            flagged = True
    return flagged


def masked_vectors(messages, size: int) -> list[np.ndarray]:
    """The ``masked`` vectors of ``messages`` (received uploads), each checked to be a 1-D
    ``uint64`` array of ``size`` entries; else ``BadMessageError`` naming the sender. The sum
    modulo 2^64 would otherwise broadcast a one-entry vector over all of them, or cast floats or
    negative integers to uint64 without a word, and decode to a wrong model."""
    out = []
    for msg in messages:
        try:
            y = msg.payload["masked"]
        except (KeyError, TypeError) as exc:
            raise BadMessageError(msg, exc) from exc
        if type(y) is not np.ndarray or y.dtype != np.uint64 or y.shape != (size,):
            got = (f"{y.dtype} of shape {y.shape}" if isinstance(y, np.ndarray) else type(y).__name__)
            raise BadMessageError(msg, f"masked must be a uint64 vector of {size} entries, got {got}")
        out.append(y)
    return out


def dense_rows(n_items: int, width: int, items: np.ndarray, rows: np.ndarray, counts: bool = False) -> np.ndarray:
    """A flat float64 vector of ``n_items x width`` (item-major) with ``rows`` added at ``items``
    (duplicates summed), followed, with ``counts``, by ``n_items`` entries counting each item's
    rows: what a client masks and uploads instead of its sparse rows."""
    out = np.zeros(n_items * width + (n_items if counts else 0))
    dense = out[: n_items * width].reshape(n_items, width)
    items = np.asarray(items, dtype=np.int64)
    np.add.at(dense, items, np.asarray(rows, dtype=np.float64))
    if counts:
        np.add.at(out[n_items * width:], items, 1.0)
    return out
