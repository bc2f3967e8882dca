"""FPL (Anelli et al. 2022): federated pair-wise learning with user-controlled disclosure, as actors.

The server holds Theta_S = (Q, b); each client u holds p_u and its training items (private).

Message flow (kinds), one round t (section 4.2):

    server -> each selected client  ``model``   {theta: float[|I|, d+1]}   Theta_S = [Q | b]
    client -> server                ``update``  {items: int32[k], rows: float[k, d+1]}
    the server adds ``lr x`` every row to its item (Eq. 7, a sum over all rows of all clients).

    at the end: server -> every client  ``stop``  None

1. The server draws U^-_t (``clients_per_round`` clients) with its ``ctx.rng`` and broadcasts
   Theta_S^{t-1} to them.
2. A selected client draws T triples (u, i, j) from its own items, steps p_u after each
   (Eq. 3-6) and builds one row ``[Delta q_k | Delta b_k]`` (no lr) per sent item update: the
   negative item of every triple, and the positive item of a triple iff its Bernoulli(pi) draw
   succeeds (``fedsim.math.bpr.fpl_client_round``, whose draw order is documented there).
3. It sends the rows sorted by item id (stable), so a row's position does not tell the server
   whether it is a positive or a negative update (the blocked layout of the math would).
4. The server sums them into Theta_S (``server_apply_sum``), in node-id order of the senders.

Counting rule (the unit of the ledger): Theta_S travels as ONE ``(n, d+1)`` float array and an
update as ONE ``(k, d+1)`` float array (item ids are int32, not floats), and ``build`` declares
``d + 1`` as the ledger unit. So one ledger unit is one "vector" of the paper's CCE,
``(q_i, b_i)``: a client visit costs exactly ``|I|`` units down and ``T + #positives sent`` units
up, and an epoch ``rpe |U^-| (|I| + T) + #positives sent`` (section 6.3's closed form
``rpe |U^-| (|I| + T(1 + pi))`` is its expectation). ``stop`` carries no float.

Randomness: the server's ``ctx.rng`` draws the initial (Q, b) (``init_item_params``, unless
``init`` is given) and then, per round, the selection: nothing when every client is selected,
``rng.integers(n)`` for one client, ``rng.choice(n, k, replace=False)`` (sorted) otherwise. A
client's ``ctx.rng`` draws p_u (``init_user_factor``, unless given) and then exactly one
``rng.random((3, T))`` per round it takes part in.

p_u never leaves its client. Long runs are split into several networks (one per epoch, say):
``build(..., init=theta, user_factors=P, round_offset=...)`` continues a previous run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..math.bpr import (
    BPRReg,
    fpl_client_round,
    init_item_params,
    init_user_factor,
    TripleSampler,
    make_triple_sampler,
)
from ..math.fpl_presets import PRESET_NAMES, FPLSchedule, fpl_preset

__all__ = [
    "FPLConfig",
    "FPLJob",
    "SERVER",
    "TRAINING_KINDS",
    "build",
    "client_name",
    "config_for_preset",
    "make_samplers",
]

SERVER = "server"
TRAINING_KINDS = ("model", "update")


@dataclass(frozen=True)
class FPLConfig:
    """FPL hyper-parameters for one network run.

    ``clients_per_round`` |U^-|, ``triples`` T, ``rounds`` rounds in this run (an epoch is
    ``rounds_per_epoch`` of them), ``d`` latent dimension, ``lr`` alpha, ``pi`` the probability
    of sending each positive update. ``dtype`` is used for Theta_S on the server and on the wire
    (the client computes in float64). ``merge``, ``local_item_updates`` and ``user_update`` are
    the options of :func:`fedsim.math.bpr.fpl_client_round` (defaults: the paper's count, item
    parameters frozen within a round, p_u stepped per triple). ``reg_scale``: regularisation
    ``BPRReg.paper(lr)`` times this (1 = the paper's lr/20, lr/20, lr/200). ``record_received``
    makes the server return every update it received (tests, traces).
    """

    clients_per_round: int = 1
    triples: int = 1
    rounds: int = 1
    d: int = 10
    lr: float = 0.05
    pi: float = 1.0
    dtype: str = "float32"
    merge: bool | str = False
    local_item_updates: bool = False
    user_update: str = "per_triple"
    reg_scale: float = 1.0
    record_received: bool = False
    preset: str = ""
    rounds_per_epoch: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.pi) <= 1.0:
            raise ValueError(f"pi must lie in [0, 1], got {self.pi}")
        if self.clients_per_round < 1 or self.triples < 1 or self.rounds < 0 or self.d < 1:
            raise ValueError("clients_per_round, triples and d must be >= 1 and rounds >= 0")
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if self.user_update not in ("per_triple", "end_of_round"):
            raise ValueError(f"user_update must be 'per_triple' or 'end_of_round', got {self.user_update!r}")
        np.dtype(self.dtype)

    @property
    def reg(self) -> BPRReg:
        r = BPRReg.paper(self.lr)
        s = float(self.reg_scale)
        return BPRReg(r.user * s, r.pos_item * s, r.neg_item * s, r.bias * s)

    @property
    def unit(self) -> int:
        """Floats per ledger unit: one vector ``(q_i, b_i)`` = d + 1 floats."""
        return self.d + 1


def config_for_preset(name: str, n_users: int, x_plus: int, *, epochs: float = 1, rounding: str = "round",
                      definition: str = "code", **kw) -> FPLConfig:
    """An :class:`FPLConfig` for preset ``name`` (sFPL, sFPL+, pFPL, pFPL+) on |U| = n_users,
    X+ = x_plus, running ``epochs`` epochs (``rounds = round(epochs x rpe)``). ``kw``: any other
    field (d, lr, pi, ...)."""
    if name not in PRESET_NAMES:
        raise ValueError(f"unknown preset {name!r}; expected one of {PRESET_NAMES}")
    sch: FPLSchedule = fpl_preset(name, n_users, x_plus, definition).schedule(rounding)
    return FPLConfig(clients_per_round=sch.clients_per_round, triples=sch.triples_per_client,
                     rounds=int(round(epochs * sch.rounds_per_epoch)), preset=name,
                     rounds_per_epoch=sch.rounds_per_epoch, **kw)


def client_name(u: int, n_users: int) -> str:
    """Node id of user ``u``'s client: zero-padded so that id order equals user order."""
    return f"client/{u:0{max(4, len(str(n_users - 1)))}d}"


# --------------------------------------------------------------------------------------------
# actors


def _select(rng: np.random.Generator, n: int, k: int) -> np.ndarray | range:
    if k >= n:
        return range(n)
    if k == 1:
        return (int(rng.integers(n)),)
    return np.sort(rng.choice(n, size=k, replace=False)).tolist()


async def server(ctx, clients: list[str], n_items: int, cfg: FPLConfig, init: np.ndarray | None = None,
                 round_offset: int = 0) -> dict:
    """The FPL server. Returns ``{"theta": [Q | b] (n_items, d+1), "received": [...]}`` where
    ``received`` (only with ``cfg.record_received``) lists ``(round, sender, items, rows)`` of
    every update."""
    dt = np.dtype(cfg.dtype)
    d = cfg.d
    n = len(clients)
    k = min(cfg.clients_per_round, n)
    rng = ctx.rng
    theta = np.empty((n_items, d + 1), dtype=dt)
    if init is None:
        Q, b = init_item_params(n_items, d, rng)
        theta[:, :d] = Q
        theta[:, d] = b
    else:
        theta[...] = init
    lr = float(cfg.lr)
    received: list = []
    for t in range(cfg.rounds):
        r = round_offset + t
        ctx.begin_round(r)
        names = [clients[i] for i in _select(rng, n, k)]
        await ctx.broadcast(names, "model", {"theta": theta})
        got = await ctx.gather("update", senders=names, round=r)
        rows_in = 0
        for msg in got:  # node-id order
            items = msg.payload["items"]
            rows = msg.payload["rows"]
            np.add.at(theta, items, rows * dt.type(lr))
            rows_in += items.shape[0]
            if cfg.record_received:
                received.append((r, msg.sender, np.array(items), np.array(rows)))
        await ctx.compute(2.0 * rows_in * (d + 1), "aggregate")
    await ctx.broadcast(clients, "stop", None)
    return {"theta": theta, "received": received}


async def client(ctx, sampler: TripleSampler, cfg: FPLConfig, p_init: np.ndarray | None = None) -> dict:
    """One user's client. ``sampler``: the sampling tables of its training items (private;
    positives drawn with replacement, negatives from the catalogue minus its items; see
    :func:`make_samplers`). Returns ``{"p": p_u, "rounds": rounds taken part in,
    "sent_positive": positive rows sent, "sent_negative": negative rows sent}``."""
    d = cfg.d
    dt = np.dtype(cfg.dtype)
    rng = ctx.rng
    p = init_user_factor(d, rng) if p_init is None else np.array(p_init, dtype=np.float64)
    reg = cfg.reg
    T = cfg.triples
    stats = {"rounds": 0, "sent_positive": 0, "sent_negative": 0}
    flops_per_triple = 14.0 * d  # x_uij, the p_u step and two item rows
    while True:
        msg = await ctx.receive(("model", "stop"))
        if msg.kind == "stop":
            return {"p": p, **stats}
        theta = msg.payload["theta"]
        p, up = fpl_client_round(p, theta[:, :d], theta[:, d], sampler, T, cfg.lr, cfg.pi, rng, reg=reg,
                                 merge=cfg.merge, local_item_updates=cfg.local_item_updates,
                                 user_update=cfg.user_update)
        order = np.argsort(up.items, kind="stable")
        rows = np.empty((up.n_vectors, d + 1), dtype=dt)
        rows[:, :d] = up.deltas[order]
        rows[:, d] = up.bias_deltas[order]
        stats["rounds"] += 1
        npos = up.n_positive
        stats["sent_positive"] += npos
        stats["sent_negative"] += up.n_vectors - npos
        await ctx.compute(flops_per_triple * T, "train")
        await ctx.send(SERVER, "update", {"items": up.items[order], "rows": rows})


# --------------------------------------------------------------------------------------------
# placing the actors, collecting the result


@dataclass
class FPLJob:
    """What ``build`` placed on a network; ``collect`` turns a run's result into arrays."""

    cfg: FPLConfig
    n_users: int
    n_items: int
    clients: list[str]
    extra: dict = field(default_factory=dict)

    def collect(self, result) -> dict:
        """``{"Q", "b", "theta", "P", "rounds", "sent_positive", "sent_negative", "received",
        "config"}``: the server's model, the clients' p_u stacked in user order, per-client
        counts (int arrays), and the server's record of updates (if asked)."""
        srv = result[SERVER]
        d = self.cfg.d
        theta = srv["theta"]
        P = np.empty((self.n_users, d), dtype=np.float64)
        counts = {k: np.zeros(self.n_users, dtype=np.int64) for k in ("rounds", "sent_positive", "sent_negative")}
        for u, name in enumerate(self.clients):
            r = result[name]
            P[u] = r["p"]
            for k in counts:
                counts[k][u] = r[k]
        return {"Q": theta[:, :d], "b": theta[:, d], "theta": theta, "P": P, **counts,
                "received": srv["received"], "config": asdict(self.cfg)}


def make_samplers(user_items: list[np.ndarray], n_items: int,
                  catalogue: np.ndarray | None = None) -> list[TripleSampler]:
    """Every client's :class:`TripleSampler` (build them once and pass them to :func:`build` for
    each network of a long run: about 1.5 ms per client)."""
    cat = None if catalogue is None else np.unique(np.asarray(catalogue, dtype=np.int64))
    return [make_triple_sampler(np.asarray(it, dtype=np.int64), n_items, cat) for it in user_items]


def build(net, user_items: list[np.ndarray] | None, n_items: int, cfg: FPLConfig, *,
          catalogue: np.ndarray | None = None, samplers: list[TripleSampler] | None = None,
          init: np.ndarray | None = None, user_factors: np.ndarray | None = None, round_offset: int = 0) -> FPLJob:
    """Place an FPL server and one client per user on ``net`` (any transport).

    ``user_items[u]``: user u's training item ids (every user needs at least one, and at least
    one catalogue item she has not consumed). ``catalogue``: the item ids negatives are drawn
    from (default ``range(n_items)``; the FPL studies pass the training catalogue). Or pass
    ``samplers`` (from :func:`make_samplers`) instead of both.
    ``init`` (``(n_items, d+1)`` = [Q | b]) and ``user_factors`` (``(n_users, d)``) continue a
    previous run instead of drawing fresh parameters; ``round_offset`` numbers this run's rounds
    after it. Declares ``d + 1`` (one vector (q_i, b_i)) as the ledger's unit.
    """
    if samplers is None:
        if user_items is None:
            raise ValueError("build needs user_items or samplers")
        samplers = make_samplers(user_items, n_items, catalogue)
    n_users = len(samplers)
    clients = [client_name(u, n_users) for u in range(n_users)]
    net.set_unit(cfg.unit)
    net.add_node(SERVER, server, clients, int(n_items), cfg, init, int(round_offset), role="server")
    for u, name in enumerate(clients):
        p0 = None if user_factors is None else user_factors[u]
        net.add_node(name, client, samplers[u], cfg, p0)
    return FPLJob(cfg, n_users, int(n_items), clients)
