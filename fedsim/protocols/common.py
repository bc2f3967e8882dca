"""What several protocols share: node names, the order of uploaded rows, the divergence check."""

from __future__ import annotations

import numpy as np

__all__ = ["BadMessageError", "SERVER", "all_finite", "check_data", "client_name", "client_names", "sort_by_item"]

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


def all_finite(*parts) -> bool:
    """Whether every value of ``parts`` (arrays, or dicts of arrays such as an autoencoder's
    parameters) is finite: the check a server makes of its model once per round, so that a run
    whose model stopped being finite (a learning rate too large for the data) stops there with
    ``info["diverged_at"]`` instead of sending NaN to its clients for the remaining rounds."""
    for part in parts:
        arrays = part.values() if isinstance(part, dict) else (part,)
        if not all(np.isfinite(a).all() for a in arrays):
            return False
    return True


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


def check_data(protocol: str, data, test=None, *, evaluates: bool = False) -> None:
    """Refuse, before any actor is placed, data a run of ``protocol`` cannot use, with a
    ``ValueError`` naming the protocol and what is wrong:

    * training ``data`` over no user (``n_users == 0``): there is no client to place (a run
      with no client, or an error from deep inside: ``M must be in [1, n_users = 0]``);
    * held-out ``test`` ratings (a ``Ratings``, or None) holding a user or an item outside the
      training index space (``0..n_users-1`` x ``0..n_items-1``): the model has no factor for
      them, and the evaluation failed deep inside (an IndexError, a broadcast error) or, for
      FPL, only after the whole run. Splits of one ``Ratings`` (``fedsim.data.splits``) keep
      its index space, so they always pass;
    * with ``evaluates`` (the run evaluates ``test``), empty test ratings: every evaluation
      would be over no rating, a metrics list of NaN that looks like a result."""
    nu, ni = int(data.n_users), int(data.n_items)
    if nu == 0:
        raise ValueError(f"{protocol}: the training data has no user (n_users = 0): there is no client to place")
    if test is None:
        return
    users, items = np.asarray(test.users), np.asarray(test.items)
    bad_u = users[users >= nu]
    bad_i = items[items >= ni]
    if bad_u.size or bad_i.size:
        what = []
        if bad_u.size:
            what.append(f"{np.unique(bad_u).size} user(s) from {int(bad_u.min())} on")
        if bad_i.size:
            what.append(f"{np.unique(bad_i).size} item(s) from {int(bad_i.min())} on")
        raise ValueError(f"{protocol}: the test ratings hold {' and '.join(what)}, outside the training data's "
                         f"index space ({nu} users x {ni} items): the model has nothing to predict them with; "
                         f"build test and training data over one index space (fedsim.data's splits do)")
    if evaluates and users.size == 0:
        raise ValueError(f"{protocol}: the test ratings are empty: every evaluation would be over no rating "
                         f"(NaN metrics); give test ratings or none")
