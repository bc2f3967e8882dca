"""What several protocols share: node names and the order of uploaded rows."""

from __future__ import annotations

import numpy as np

__all__ = ["BadMessageError", "SERVER", "client_name", "client_names", "sort_by_item"]

SERVER = "server"


class BadMessageError(ValueError):
    """A peer's message the receiving actor cannot use (item ids out of range, arrays of the
    wrong shape, a missing field): names the sender, the kind and the round, so that the
    run's ``ActorError`` says which peer sent what, not only which actor stopped.
    ``BadMessageError(msg, why)`` with ``msg`` the received message and ``why`` the exception
    (or text) saying what is wrong with it."""

    def __init__(self, msg, why) -> None:
        who = "an anonymous sender" if msg.sender is None else msg.sender
        super().__init__(f"{msg.kind!r} from {who} (round {msg.round}): "
                         f"{why if isinstance(why, str) else f'{type(why).__name__}: {why}'}")
        self.sender, self.kind, self.round = msg.sender, msg.kind, msg.round


def client_name(u: int, n_clients: int) -> str:
    """Node id of client ``u`` of ``n_clients``: zero-padded (at least 4 digits) so that node-id
    order, in which servers aggregate, equals client order."""
    return f"client/{u:0{max(4, len(str(n_clients - 1)))}d}"


def client_names(n_clients: int) -> list[str]:
    """``client_name(u, n_clients)`` for every u, in order."""
    width = max(4, len(str(n_clients - 1)))
    return [f"client/{u:0{width}d}" for u in range(n_clients)]


def sort_by_item(body: dict) -> dict:
    """Upload rows sorted by item id (stable): the math returns rated items first, and that
    position would tell the server which items are rated. Servers aggregate per item, so the
    order changes no result. ``body`` maps names to arrays of equal first dimension, one of them
    ``"items"``."""
    order = np.argsort(body["items"], kind="stable")
    return {k: v[order] for k, v in body.items()}
