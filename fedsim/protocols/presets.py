"""Small data presets the protocols' ``tiny`` functions share (traces, docs, the contract test)."""

from __future__ import annotations

import numpy as np

__all__ = ["check_tiny_clients", "tiny_clients", "tiny_ratings"]


def tiny_clients() -> int:
    """The most clients a ``tiny`` preset has: the ``tiny`` synthetic preset's users (30); a
    teaching trace is of a handful."""
    from ..data.synthetic import PRESETS

    return int(PRESETS["tiny"]["n_users"])


def check_tiny_clients(clients: int, users_per_client: int = 1) -> None:
    """``ValueError`` unless ``clients`` is 1 to ``tiny_clients() // users_per_client``, saying so
    in clients (``tiny presets have 1 to 15 clients (2 users each), got 16``)."""
    most = tiny_clients() // users_per_client
    if not 1 <= clients <= most:
        each = f" ({users_per_client} users each)" if users_per_client != 1 else ""
        raise ValueError(f"tiny presets have 1 to {most} clients{each}, got {clients}")


def tiny_ratings(clients: int, seed: int = 0, users_per_client: int = 1):
    """The ratings of the first ``clients`` x ``users_per_client`` users of the ``tiny`` synthetic
    preset (seeded), over exactly those users and the preset's items; ``ValueError`` for more
    clients than it has (``check_tiny_clients``)."""
    from ..data import Ratings, generate

    check_tiny_clients(clients, users_per_client)
    users = clients * users_per_client
    r = generate("tiny", seed=seed)
    keep = r.users < users
    ts = None if r.timestamps is None else r.timestamps[keep]
    return Ratings(r.users[keep], r.items[keep], r.values[keep].astype(np.float32), n_users=users,
                   n_items=r.n_items, timestamps=ts, name=f"tiny[{users} users]")
