"""Seed derivation: one independent, reproducible random stream per (seed, name).

Every actor gets its generator from ``node_rng(seed, node_id)``; a centralized twin that must
reproduce a federated run bit for bit derives the same streams with the same call. The derivation
depends only on its arguments (never on creation order or global state), so adding a node never
perturbs the streams of the others.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["name_key", "node_rng", "seed_sequence", "substream"]


def name_key(name: str) -> tuple[int, ...]:
    """Map a name to four 32-bit words (stable across runs, platforms and Python versions)."""
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=16).digest()
    return tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))


def seed_sequence(seed: int, name: str) -> np.random.SeedSequence:
    """The ``SeedSequence`` for stream ``name`` under experiment seed ``seed``.

    Raises ``ValueError`` if ``seed`` is negative (numpy would reject it later, less clearly).
    """
    if int(seed) < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return np.random.SeedSequence(entropy=int(seed), spawn_key=name_key(str(name)))


def node_rng(seed: int, name: str) -> np.random.Generator:
    """A fresh ``numpy.random.Generator`` (PCG64) for stream ``name`` under ``seed``."""
    return np.random.Generator(np.random.PCG64(seed_sequence(seed, name)))


def substream(rng: np.random.Generator, name: str) -> np.random.Generator:
    """A generator for the named sub-stream ``name`` of ``rng``'s seed: a fresh PCG64 whose
    ``SeedSequence`` has ``rng``'s entropy and its spawn key extended by ``name_key(name)``.

    It depends only on how ``rng`` was *seeded* (never on how far ``rng`` has been drawn, and
    drawing from it never moves ``rng``), so an actor can keep one kind of draw (say, which
    clients take part) in step across protocols whose other draws differ. Raises
    ``ValueError`` when ``rng`` was not seeded from a ``SeedSequence`` (e.g. a legacy seed)."""
    ss = getattr(rng.bit_generator, "seed_seq", None)
    if not isinstance(ss, np.random.SeedSequence):
        raise ValueError("substream() needs a generator seeded from a numpy SeedSequence")
    child = np.random.SeedSequence(entropy=ss.entropy, spawn_key=tuple(ss.spawn_key) + name_key(str(name)),
                                   pool_size=ss.pool_size)
    return np.random.Generator(np.random.PCG64(child))
