"""Small data presets the protocols' ``tiny`` functions share (traces, docs, the contract test)."""

from __future__ import annotations

import numpy as np

__all__ = ["tiny_ratings"]


def tiny_ratings(clients: int, seed: int = 0):
    """The ratings of the first ``clients`` users of the ``tiny`` synthetic preset (seeded), over
    exactly those users and the preset's items."""
    from ..data import Ratings, generate

    r = generate("tiny", seed=seed)
    if not 1 <= clients <= r.n_users:
        raise ValueError(f"tiny presets have 1 to {r.n_users} clients, got {clients}")
    keep = r.users < clients
    ts = None if r.timestamps is None else r.timestamps[keep]
    return Ratings(r.users[keep], r.items[keep], r.values[keep].astype(np.float32), n_users=clients,
                   n_items=r.n_items, timestamps=ts, name=f"tiny[{clients} users]")
