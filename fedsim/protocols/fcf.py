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
(``fcf_server_update``: Adam by default, as the FCF paper does, or plain gradient descent). A
round in which no gradient arrived (loss, dropout, deadline) leaves Q and Adam's state as they
were; its ``missing`` record says ``skipped``. After each step the server checks Q (as it would
send it): if it is not finite (a step too large for the data) it stops there and says so
(``info["diverged_at"]``), so no client is sent a model that is not finite.

The server keeps Q (and Adam's state) in float64 and sends float32 (``wire_dtype``); clients
compute in float64 and send float32. A client returns the p_u it solved in its last round, i.e.
for the Q it last received; the server returns that Q too (``Q_sent``), so ``P @ Q_sent.T`` is a
consistent model without any extra message. p_u and the client's items never leave it.

No randomness except the server's initial Q (``ctx.rng.normal(0, init_std, (m, d))``) unless
``init`` continues a previous run (``{"Q", "adam"}`` as returned by the server).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..config import Config, ConfigError, param
from ..math.fcf import AdamState, fcf_client, fcf_server_update
from .common import SERVER, BadMessageError, all_finite, check_data, client_name, client_names
from .contract import Kind, ProtocolSpec, Result, server_result
from .fpl import user_item_lists
from .registry import register

__all__ = ["FCFConfig", "FCFJob", "SERVER", "SPEC", "TRAINING_KINDS", "build", "client_name",
           "payload_bytes_per_client_round"]

@dataclass(frozen=True)
class FCFConfig(Config):
    """FCF hyper-parameters: ``rounds`` in this run, latent dimension ``d``, confidence
    ``alpha``, regularisation ``lam`` (user closed form and item step), server ``lr``,
    ``optimizer`` "adam" or "sgd", ``average`` the gradients over clients instead of summing,
    ``wire_dtype`` of both messages, ``init_std`` of the initial Q."""

    rounds: int = param(40, "rounds in this run (every client takes part in every round)", min=0)
    d: int = param(10, "latent dimension", min=1)
    alpha: float = param(1.0, "confidence 1 + alpha y_ui", min=0)
    lam: float = param(0.1, "regularisation lambda", min=0)
    lr: float = param(0.05, "server learning rate", min=0, exclusive_min=True)
    optimizer: str = param("adam", "server optimizer", choices=("adam", "sgd"))
    average: bool = param(False, "average the gradients over clients instead of summing them")
    wire_dtype: str = param("float32", "dtype of both messages", choices=("float32", "float64"))
    init_std: float = param(0.1, "standard deviation of the initial Q (> 0: from Q = 0 every p_u and every "
                            "gradient is 0, and Q never moves)", min=0, exclusive_min=True)
    deadline: float | None = param(None, "seconds the server waits for a round's gradients before stepping with "
                                   "what arrived (none: until all arrive)", min=0, exclusive_min=True, none_ok=True)


def payload_bytes_per_client_round(m: int, d: int, itemsize: int = 4) -> int:
    """The FedRec paper's FCF figure: ``2 x 4 x m x d`` (download of Q plus upload of the
    gradient, float32)."""
    return 2 * itemsize * int(m) * int(d)


async def server(ctx, clients: list[str], n_items: int, cfg: FCFConfig, init: dict | None = None,
                 round_offset: int = 0) -> dict:
    """Returns ``{"Q": Q after the last step, "Q_sent": the last Q sent (what the clients' p_u
    were solved for), "adam": {"m", "v", "t"} or None, "missing", "diverged_at"}``. The server
    checks Q once per round, after its step: if Q (or Q in ``wire_dtype``, what it would send) is
    not finite, it stops there, ``diverged_at`` that round (1-based, counted from the first run's,
    like ``rounds_done``), and no client is sent it; else ``diverged_at`` is None."""
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
    Q_sent = Q_next = Q.astype(wire)  # Q_next: Q as the next round sends it (made once: checked, then sent)
    n = len(clients)
    missing: list[dict] = []
    diverged_at = None
    for t in range(cfg.rounds):
        r = round_offset + t
        ctx.begin_round(r)
        Q_sent = Q_next
        await ctx.broadcast(clients, "model", {"Q": Q_sent})
        got = await ctx.gather("gradients", senders=clients, round=r, timeout=cfg.deadline)
        if got.missing:
            missing.append({"round": r, "kind": "gradients", "clients": len(got.missing)})
        if not got.messages:
            # nothing to learn from: the regulariser alone would shrink Q (and advance Adam's
            # step count) in a round nobody took part in; FedRec and FPL leave their model too
            if got.missing:
                missing[-1]["skipped"] = True
            else:  # no client at all
                missing.append({"round": r, "kind": "gradients", "clients": 0, "skipped": True})
            continue
        G = np.zeros(Q.shape, dtype=np.float64)
        for msg in got:  # node-id order
            grad = msg.payload.get("grad") if isinstance(msg.payload, dict) else None
            # a (1, d) block would be broadcast over every item; a list of strings or None was a bare
            # UFuncTypeError of the sum, and a bool array was summed as 0s and 1s
            if type(grad) is not np.ndarray or grad.dtype.kind != "f" or grad.shape != G.shape:
                got = (f"{grad.dtype} of shape {grad.shape}" if isinstance(grad, np.ndarray)
                       else type(grad).__name__)
                raise BadMessageError(msg, f"grad must be a float array of shape {G.shape}, got {got}")
            with np.errstate(over="ignore", invalid="ignore"):  # (a client's inf: Q is checked below)
                G += grad
        # the sum (or, with ``average``, the mean) over the clients that answered
        with np.errstate(over="ignore", invalid="ignore"):  # (checked below)
            fcf_server_update(Q, G, cfg.lr, cfg.lam, n_clients=max(len(got), 1), average=cfg.average, adam=adam)
        await ctx.compute((n + 10.0) * Q.size, "aggregate")
        with np.errstate(over="ignore"):
            Q_next = Q.astype(wire)
        if not all_finite(Q_next):  # Q, and Q as sent (float32 holds less than float64)  # once per round: the clients are not sent a model that is not finite
            diverged_at = r + 1
            break
    await ctx.broadcast(clients, "stop", None)
    state = None if adam is None else {"m": adam.m, "v": adam.v, "t": adam.t}
    return {"Q": Q, "Q_sent": Q_sent, "adam": state, "missing": missing, "diverged_at": diverged_at}


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
        Q = msg.payload.get("Q") if type(msg.payload) is dict else None
        if (type(Q) is not np.ndarray or Q.dtype != wire or Q.ndim != 2 or Q.shape[1] != cfg.d
                or (items.shape[0] and Q.shape[0] <= items.max())):
            # (a short or 1-D Q, a list, was a bare ValueError or AttributeError of the client; a
            # narrow one was solved for, and the server blamed the client for its gradient's shape)
            got = f"{Q.dtype} of shape {Q.shape}" if isinstance(Q, np.ndarray) else type(Q).__name__
            raise BadMessageError(msg, f"Q must be a {wire} array of {cfg.d} columns and a row for each of the "
                                       f"client's items, got {got}")
        m, d = Q.shape
        p, grad = fcf_client(Q, items, cfg.alpha, cfg.lam)
        # Q^T Q, the user-item part, a d x d solve, and the m x d gradient
        await ctx.compute(2.0 * m * d * d + 2.0 * items.shape[0] * d * d + d ** 3 + 4.0 * m * d, "train")
        with np.errstate(over="ignore"):  # an overflow to inf makes Q not finite: the server stops then
            grad = grad.astype(wire)
        await ctx.send(SERVER, "gradients", {"grad": grad})


@dataclass
class FCFJob:
    cfg: FCFConfig
    n_users: int
    n_items: int
    clients: list[str]
    rounds_done: int

    def collect(self, run) -> Result:
        """``params``: ``P`` (the p_u each client solved in its last round, zeros if it never
        took part), ``Q`` (after the last step) and ``Q_sent`` (what the p_u were solved for:
        ``P @ Q_sent.T`` scores the items); ``info["adam"]`` the optimizer state,
        ``info["diverged_at"]``: the round (1-based, counted like ``rounds_done``) after whose step
        the server found Q not finite and stopped (a step too large for the data, e.g. a huge
        ``alpha`` or ``lr``; ``Q_sent`` and ``P`` are then those of that round, finite); else the
        rounds done if some p_u is not finite at the end (known only then); else None;
        ``rounds_done``: the rounds whose step was taken, the diverging one included;
        ``state``: what ``build(..., resume=result)`` continues from."""
        srv = server_result(run)
        P = np.zeros((self.n_users, self.cfg.d))
        gone = [name for name in self.clients if name not in run.results]
        for u, name in enumerate(self.clients):
            if run.results.get(name) is not None:
                P[u] = run.results[name]
        diverged_at = srv["diverged_at"]
        done = self.rounds_done + self.cfg.rounds if diverged_at is None else diverged_at
        state = {"Q": srv["Q"], "adam": srv["adam"], "rounds_done": done}
        if diverged_at is None and not all_finite(P, srv["Q"], srv["Q_sent"]):
            diverged_at = done  # the clients' p_u: known only to have happened by the end
        return Result("fcf", self.cfg, {"P": P, "Q": srv["Q"], "Q_sent": srv["Q_sent"]}, [], run,
                      info={"adam": srv["adam"], "rounds_done": done, "diverged_at": diverged_at,
                            "missing": srv["missing"], "lost_clients": gone,
                            "lost_users": [u for u, name in enumerate(self.clients) if name not in run.results]},
                      state=state)


def build(net, data, cfg: FCFConfig | None = None, *, test=None, resume=None) -> FCFJob:
    """Place an FCF server and one client per user of ``data`` (implicit training ``Ratings``).
    ``resume``: a previous FCF ``Result`` (or its ``state``): continue from its Q and Adam state,
    numbering rounds after it. FCF makes no federated evaluation (``test`` is ignored). Declares
    ``d`` as the ledger unit (one unit = one item vector). Raises ``ValueError`` for data without
    users (``common.check_data``), ``ConfigError`` for ``lam = 0`` with ``d`` above the number of
    items (singular equations for every p_u)."""
    cfg = cfg or FCFConfig()
    check_data("FCF", data)
    if cfg.lam == 0 and cfg.d > int(data.n_items):
        # Q^T Q + alpha Q+^T Q+ has rank at most n_items < d: p_u's normal equations are singular
        # (math.fcf.fcf_user_factor gives such a user a p_u of NaN, and the server stops on it)
        raise ConfigError(f"FCF: lam = 0 with d = {cfg.d} above the {int(data.n_items)} items: each user's "
                          "closed-form p_u solves singular equations (rank at most the number of items); give "
                          "lam > 0 or d <= the number of items", "lam")
    state = resume.state if isinstance(resume, Result) else resume
    if state is not None and not isinstance(state, Mapping):
        raise TypeError("resume must be a previous Result or its state dict")
    init = None if not state else {"Q": state["Q"], "adam": state.get("adam")}
    offset = int(state.get("rounds_done", 0)) if state else 0
    user_items = user_item_lists(data)
    n_users = len(user_items)
    clients = client_names(n_users)
    net.set_unit(cfg.d)
    net.add_node(SERVER, server, clients, int(data.n_items), cfg, init, offset, role="server")
    for u, name in enumerate(clients):
        net.add_node(name, client, user_items[u], cfg)
    return FCFJob(cfg, n_users, int(data.n_items), clients, offset)


def tiny(clients: int = 3, rounds: int = 2, seed: int = 0):
    """A few users of the ``tiny`` synthetic preset as implicit feedback, d = 4."""
    from .presets import tiny_ratings

    return tiny_ratings(clients, seed).binarize(), FCFConfig(rounds=rounds, d=4)


SPEC = register(ProtocolSpec(
    name="fcf",
    summary="FCF: federated implicit MF; every client uploads gradients for all m items each round (baseline)",
    Config=FCFConfig,
    kinds=(
        Kind("model", "server", "client", "training", "{Q: float32[m, d]}"),
        Kind("gradients", "client", "server", "training", "{grad: float32[m, d]}: every item, consumed or not"),
        Kind("stop", "server", "client", "control", "None"),
    ),
    build=build, tiny=tiny, data="implicit", metric="", rounds_field="rounds",
    paper="Ammad-ud-din et al.: Federated Collaborative Filtering for Privacy-Preserving Personalized "
          "Recommendation System (arXiv 1901.09888, 2019)",
))

# the kinds SPEC declares for training (model, gradients): derived, as FPL's, not a hand list
TRAINING_KINDS = SPEC.kinds_for("training")
