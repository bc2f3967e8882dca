"""Secure aggregation by pairwise masks (Bonawitz et al. 2017, without dropout recovery), as pure
integer arithmetic.

Each participant u encodes its vector x_u in fixed point, ``q_u = round(x_u 2^F)`` as int64 seen
as uint64, and uploads ``y_u = q_u + sum_{v in N(u)} s(u, v) PRG(k_uv, t)`` modulo 2^64, with
``s(u, v) = +1`` if u comes before v and -1 otherwise, and ``k_uv`` a key only u and v know. Every
mask appears once with + and once with -, so ``sum_u y_u = sum_u q_u`` modulo 2^64 *exactly*
(integer arithmetic: bit for bit), and ``decode`` turns that sum back into floats; each y_u alone
is uniformly distributed to anyone without the keys. The sum is exact as long as it stays within
int64 (|sum of x| < 2^(63 - F)), which ``encode`` guarantees by refusing values of 2^(62 - F) / n
or more for a sum over n participants; each value carries a rounding error of at most 2^-(F+1).

Keys come from a toy Diffie-Hellman exchange in the multiplicative group modulo the Mersenne prime
2^61 - 1 (``dh_public``, ``dh_shared``): enough to model the protocol's messages, their sizes and
their costs, NOT a secure key agreement (61-bit discrete logarithms are easy). A real deployment
uses X25519 (32-byte public keys) and an authenticated PRG.

Neighbours (``ring_neighbours``): each participant masks with the ``k`` nearest participants on a
ring in the order given (k/2 on each side), as in the sparse-graph variants of secure
aggregation (Bell et al. 2020): cost O(k L) per participant instead of O(n L).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = [
    "DH_GENERATOR", "DH_PRIME", "FRACTION_BITS", "decode", "dh_public", "dh_secret", "dh_shared", "encode",
    "limit", "mask", "masked_upload", "ring_neighbours", "unmask_sum",
]

DH_PRIME = (1 << 61) - 1
DH_GENERATOR = 37
FRACTION_BITS = 32


def dh_secret(rng: np.random.Generator) -> int:
    """A private exponent in [2, p - 2] (one ``rng.integers`` call)."""
    return int(rng.integers(2, DH_PRIME - 1))


def dh_public(secret: int) -> int:
    """g^secret mod p."""
    return pow(DH_GENERATOR, int(secret), DH_PRIME)


def dh_shared(secret: int, other_public: int) -> int:
    """The shared key of a pair: other_public^secret mod p (the same from both sides)."""
    return pow(int(other_public), int(secret), DH_PRIME)


def limit(parties: int = 1, bits: int = FRACTION_BITS) -> float:
    """The largest magnitude (exclusive) a value may have so that a sum over ``parties`` such
    values stays exact in int64: 2^(62 - bits) / parties (the sum then stays below 2^(62 - bits),
    half the int64 range, whatever the rounding)."""
    return 2.0 ** (62 - bits) / max(int(parties), 1)


def encode(x: np.ndarray, bits: int = FRACTION_BITS, parties: int = 1) -> np.ndarray:
    """Fixed point: ``round(x 2^bits)`` as int64, returned as uint64 (two's complement). Raises
    ``OverflowError`` for values that do not fit: not finite, or |x| >= ``limit(parties, bits)``,
    so that the sum of ``parties`` encoded vectors cannot wrap around 2^64 (it would decode to
    wrong values with nothing to tell)."""
    x = np.asarray(x, dtype=np.float64).ravel()
    bound = limit(parties, bits)
    # |x| < bound for every value, read off the extremes (a NaN makes both comparisons false, as an
    # infinity makes one): two reductions, no temporary arrays (|x| and the comparison were two
    # more vectors of the upload's length per client and round)
    if x.size and not (-bound < x.min() and x.max() < bound):
        raise OverflowError(f"secure aggregation: a value does not fit the fixed-point range of a sum over "
                            f"{int(parties)} ({bound:.4g})")
    q = np.ldexp(x, bits)
    np.rint(q, out=q)
    return q.astype(np.int64).view(np.uint64)


def decode(q: np.ndarray, bits: int = FRACTION_BITS) -> np.ndarray:
    """The floats of a fixed-point (sum) vector: its uint64 entries read as int64, times 2^-bits."""
    return np.ldexp(np.asarray(q, dtype=np.uint64).view(np.int64).astype(np.float64), -bits)


def _prg(key: int, rnd: int, length: int) -> np.ndarray:
    bg = np.random.PCG64(np.random.SeedSequence([int(key) & 0xFFFFFFFFFFFFFFFF, int(rnd) & 0xFFFFFFFF, 0x5EC]))
    return bg.random_raw(int(length)).astype(np.uint64, copy=False)


def ring_neighbours(members: Sequence, me, k: int) -> list:
    """The ``k`` members nearest to ``me`` on the ring of ``members`` in the order given,
    alternately the next and the previous ones: all the others when ``k >= len(members) - 1``,
    else ``k`` rounded down to even (k/2 on each side), so that v is u's neighbour exactly when u
    is v's (the masks cancel only then). Raises ``ValueError`` if ``me`` is not a member."""
    ms = np.asarray(members)
    n = ms.shape[0]
    where = np.flatnonzero(ms == me)
    if where.size == 0:
        raise ValueError(f"{me!r} is not among the members")
    pos = int(where[0])
    k = min(int(k), n - 1)
    if k < n - 1 and k % 2:
        k -= 1  # an even k keeps the relation symmetric (k/2 on each side), so the masks cancel
    if k >= n - 1:
        return [x.item() if hasattr(x, "item") else x for x in np.concatenate([ms[pos + 1:], ms[:pos]])]
    steps = np.empty(k, dtype=np.int64)
    half = np.arange(1, k // 2 + 1)
    steps[0::2], steps[1::2] = half, -half
    return [x.item() if hasattr(x, "item") else x for x in ms[(pos + steps) % n]]


def mask(me: int, keys: dict[int, int], rnd: int, length: int) -> np.ndarray:
    """Participant ``me``'s mask for round ``rnd``: the sum over its neighbours v (``keys``: v ->
    shared key) of +PRG(k, rnd) if me < v, -PRG(k, rnd) otherwise, modulo 2^64."""
    m = np.zeros(int(length), dtype=np.uint64)
    for v, key in sorted(keys.items()):
        r = _prg(key, rnd, length)
        if me < v:
            m += r
        else:
            m -= r
    return m


def masked_upload(x: np.ndarray, me: int, keys: dict[int, int], rnd: int, bits: int = FRACTION_BITS,
                  parties: int = 1) -> np.ndarray:
    """``encode(x, bits, parties) + mask(...)`` modulo 2^64: what participant ``me`` uploads
    (``parties``: how many uploads the sum will add up). Raises ``OverflowError`` as ``encode``."""
    q = encode(x, bits, parties)
    # mask()'s terms added into q directly (no mask vector of its own: one vector and one pass
    # fewer); addition modulo 2^64 is exact in any order, so the upload is the same to the bit
    for v, key in sorted(keys.items()):
        if me < v:
            q += _prg(key, rnd, q.size)
        else:
            q -= _prg(key, rnd, q.size)
    return q


def unmask_sum(uploads: Sequence[np.ndarray]) -> np.ndarray:
    """The sum modulo 2^64 of the masked uploads (the masks cancel when every participant's
    upload is in): the sum of their fixed-point vectors, exactly; ``decode`` it. Raises
    ``ValueError`` when there is no upload (the vector length is unknown)."""
    if len(uploads) == 0:
        raise ValueError("unmask_sum: no upload to sum")
    total = np.zeros(np.asarray(uploads[0]).size, dtype=np.uint64)
    for y in uploads:
        total += np.asarray(y, dtype=np.uint64)
    return total
