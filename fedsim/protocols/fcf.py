"""FCF (Ammad-ud-din et al. 2019): federated collaborative filtering for implicit feedback, as actors.

Every client takes part in every round (as in the FedRec paper's complexity paragraph, which is
what this protocol is a baseline for). Message flow (kinds), one round t:

    server -> every client  ``model``      {Q: float32[m, d]}      4 m d payload bytes
    client -> server        ``gradients``  {grad: float32[m, d]}   4 m d payload bytes

so each client costs exactly ``2 x 4 x m x d`` payload bytes per round (FedRec, section "The
Comparison of Complexity with FCF": ``8 x m x d``), whatever its data: the gradient covers all m
items, consumed or not (Eq. 3), which is FCF's privacy argument and its cost.

    at the end: server -> every client  ``stop``  None

Client (``fedsim.math.fcf.fcf_client``): p_u in closed form for the received Q (the ALS step,
confidence ``1 + alpha y_ui``), then ``grad_i = (1 + alpha y_ui)(p_u . q_i - y_ui) p_u`` for all
m items. Server: sums the gradients in node-id order and steps Q
(``fcf_server_update``: Adam by default, as the FCF paper does, or plain gradient descent).

The server keeps Q (and Adam's state) in float64 and sends float32 (``wire_dtype``); clients
compute in float64 and send float32. A client returns the p_u it solved in its last round, i.e.
for the Q it last received; the server returns that Q too (``Q_sent``), so ``P @ Q_sent.T`` is a
consistent model without any extra message. p_u and the client's items never leave it.

No randomness except the server's initial Q (``ctx.rng.normal(0, init_std, (m, d))``) unless
``init`` continues a previous run (``{"Q", "adam"}`` as returned by the server).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..math.fcf import AdamState, fcf_client, fcf_server_update

__all__ = ["FCFConfig", "FCFJob", "SERVER", "TRAINING_KINDS", "build", "client_name", "payload_bytes_per_client_round"]

SERVER = "server"
TRAINING_KINDS = ("model", "gradients")


@dataclass(frozen=True)
class FCFConfig:
    """FCF hyper-parameters: ``rounds`` in this run, latent dimension ``d``, confidence
    ``alpha``, regularisation ``lam`` (user closed form and item step), server ``lr``,
    ``optimizer`` "adam" or "sgd", ``average`` the gradients over clients instead of summing,
    ``wire_dtype`` of both messages, ``init_std`` of the initial Q."""

    rounds: int = 40
    d: int = 10
    alpha: float = 1.0
    lam: float = 0.1
    lr: float = 0.05
    optimizer: str = "adam"
    average: bool = False
    wire_dtype: str = "float32"
    init_std: float = 0.1

    def __post_init__(self) -> None:
        if self.optimizer not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")
        if self.rounds < 0 or self.d < 1:
            raise ValueError("rounds must be >= 0 and d >= 1")
        np.dtype(self.wire_dtype)


def payload_bytes_per_client_round(m: int, d: int, itemsize: int = 4) -> int:
    """The FedRec paper's FCF figure: ``2 x 4 x m x d`` (download of Q plus upload of the
    gradient, float32)."""
    return 2 * itemsize * int(m) * int(d)


def client_name(u: int, n_users: int) -> str:
    return f"client/{u:0{max(4, len(str(n_users - 1)))}d}"


async def server(ctx, clients: list[str], n_items: int, cfg: FCFConfig, init: dict | None = None,
                 round_offset: int = 0) -> dict:
    """Returns ``{"Q": Q after the last step, "Q_sent": the last Q sent (what the clients' p_u
    were solved for), "adam": {"m", "v", "t"} or None}``."""
    d = cfg.d
    wire = np.dtype(cfg.wire_dtype)
    adam = None
    if init is None:
        Q = ctx.rng.normal(0.0, cfg.init_std, size=(int(n_items), d))
        if cfg.optimizer == "adam":
            adam = AdamState.zeros(Q.shape)
    else:
        Q = np.array(init["Q"], dtype=np.float64)
        if cfg.optimizer == "adam":
            a = init.get("adam")
            adam = AdamState.zeros(Q.shape) if a is None else AdamState(
                m=np.array(a["m"], dtype=np.float64), v=np.array(a["v"], dtype=np.float64), t=int(a["t"]))
    Q_sent = Q.astype(wire)
    n = len(clients)
    for t in range(cfg.rounds):
        r = round_offset + t
        ctx.begin_round(r)
        Q_sent = Q.astype(wire)
        await ctx.broadcast(clients, "model", {"Q": Q_sent})
        got = await ctx.gather("gradients", senders=clients, round=r)
        G = np.zeros(Q.shape, dtype=np.float64)
        for msg in got:  # node-id order
            G += msg.payload["grad"]
        fcf_server_update(Q, G, cfg.lr, cfg.lam, n_clients=n, average=cfg.average, adam=adam)
        await ctx.compute((n + 10.0) * Q.size, "aggregate")
    await ctx.broadcast(clients, "stop", None)
    state = None if adam is None else {"m": adam.m, "v": adam.v, "t": adam.t}
    return {"Q": Q, "Q_sent": Q_sent, "adam": state}


async def client(ctx, items: np.ndarray, cfg: FCFConfig) -> np.ndarray | None:
    """One user's client (``items``: its training item ids, private). Returns the p_u of its
    last round (None if it never took part)."""
    wire = np.dtype(cfg.wire_dtype)
    items = np.asarray(items, dtype=np.int64)
    p = None
    while True:
        msg = await ctx.receive(("model", "stop"))
        if msg.kind == "stop":
            return p
        Q = msg.payload["Q"]
        m, d = Q.shape
        p, grad = fcf_client(Q, items, cfg.alpha, cfg.lam)
        # Q^T Q, the user-item part, a d x d solve, and the m x d gradient
        await ctx.compute(2.0 * m * d * d + 2.0 * items.shape[0] * d * d + d ** 3 + 4.0 * m * d, "train")
        await ctx.send(SERVER, "gradients", {"grad": grad.astype(wire)})


@dataclass
class FCFJob:
    cfg: FCFConfig
    n_users: int
    n_items: int
    clients: list[str]

    def collect(self, result) -> dict:
        """``{"P", "Q", "Q_sent", "adam", "config"}``; ``P @ Q_sent.T`` scores the items."""
        srv = result[SERVER]
        P = np.zeros((self.n_users, self.cfg.d))
        for u, name in enumerate(self.clients):
            if result[name] is not None:
                P[u] = result[name]
        return {"P": P, "Q": srv["Q"], "Q_sent": srv["Q_sent"], "adam": srv["adam"], "config": asdict(self.cfg)}


def build(net, user_items: list[np.ndarray], n_items: int, cfg: FCFConfig, *, init: dict | None = None,
          round_offset: int = 0) -> FCFJob:
    """Place an FCF server and one client per user (``user_items[u]``: u's training item ids).
    ``init`` continues a previous run (the server's returned ``Q`` and ``adam``). Declares ``d``
    as the ledger unit (one unit = one item vector)."""
    n_users = len(user_items)
    clients = [client_name(u, n_users) for u in range(n_users)]
    net.set_unit(cfg.d)
    net.add_node(SERVER, server, clients, int(n_items), cfg, init, int(round_offset), role="server")
    for u, name in enumerate(clients):
        net.add_node(name, client, np.asarray(user_items[u], dtype=np.int64), cfg)
    return FCFJob(cfg, n_users, int(n_items), clients)
