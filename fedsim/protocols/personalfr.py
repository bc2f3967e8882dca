"""PersonalFR (Le et al. 2022) as actors: private encoders, a shared decoder averaged by the server
(Partially Federated Learning) and, with Partial Compression, only the active decoder parameters on the wire.

Message flow (kinds; sizes for the default model ``[n, 256, 128] / [128, 256, n]`` in float32):

setup (round 0), Algorithm 1's first loop
    client -> server   ``indices``  {items: int32[|I_m|]}                   4 |I_m| + 27..28 bytes
        the items rated by the client's users in its training data; the server records them.

round t = 1..T
    the server draws ``max(int(C M), 1)`` clients with its own generator (sorted by id)
    server -> client   ``decoder``  {t, dec: D_m,active}                    4 (33,024 + 257 |I_m|) + 103..108 bytes
        Expression 3: the hidden decoder layer whole (256 x 128 + 256), the output rows and biases of I_m.
        With ``compression=False``: the whole decoder (4 (33,024 + 257 n) + 106..108 bytes), one broadcast.
    client: K local epochs on its users (its own encoder, its own momentum kept across rounds)
    client -> server   ``update``   {dec: D_m,active}                       4..6 bytes fewer (no round number)
    server: Eq. 5 merge (``merge="per_item"``: each output row averaged over the clients that have it
        active; ``"algorithm1"``: Algorithm 1 as printed), or the plain mean of whole decoders.

evaluation (``EVAL_KINDS``, left out of cost tables), every ``eval_every`` rounds and after the last
    server -> every client  ``evaluate``  {t, dec: the whole global decoder}
    client -> server        ``eval``      {sse, n, ndcg_sum, ndcg_users}  (sums over its private test entries)

end
    server -> every client  ``stop``

The encoder ``E_m`` never leaves its client: no message carries an ``enc.*`` array (tested on every
payload of a run). Randomness: the server initialises a whole autoencoder with ``ctx.rng`` and keeps its
decoder (the same draws as the FedAvg server, so both pick the same clients each round with the same seed),
then draws the selections; a client draws its encoder first (``ae.init_params(n, ctx.rng, hidden,
decoder_hidden=(code,), n_out=0)``), then one permutation per local epoch and the dropout masks.

Computation is charged with ``ctx.compute(flops)`` using the FLOPs the math returns (forward, backward,
clipping, SGD step on the parameters held), and every client returns the total it charged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..math import active as act
from ..math import ae_train
from ..math import autoencoder as ae
from ..math import optim

__all__ = [
    "EVAL_KINDS", "FedAEConfig", "FedAEJob", "SERVER", "build", "client", "client_name", "selection_size",
    "server",
]

SERVER = "server"
EVAL_KINDS = ("evaluate", "eval")
MERGES = ("per_item", "algorithm1")
UNCOMPRESSED = ("full", "masked")


@dataclass(frozen=True)
class FedAEConfig:
    """Hyper-parameters of PersonalFR and of the FedAvg baseline (``fedsim.protocols.fedavg_ae``).

    Defaults: Table II and the authors' code (SGD lr 0.1, Nesterov momentum 0.9, weight decay 5e-4, cosine
    annealing per round, clipping at 1, dropout 0.5 on the code, C = 0.1, K = 5, B = 10, 800 rounds).

    PersonalFR only: ``compression`` (Partial Compression: exchange and train only the active decoder);
    ``merge`` (``"per_item"``: Eq. 5, each output row averaged over the clients that have it active;
    ``"algorithm1"``: Algorithm 1 as printed, rows a client lacks count with their previous value);
    ``uncompressed_training`` (with ``compression=False``: ``"full"`` trains and weight-decays every row of
    the whole decoder, as the authors' code; ``"masked"`` updates only the active rows, which makes it
    equal to ``compression=True, merge="algorithm1"``); ``encoder_input`` (``"dense"``: the private encoder
    has a column for every item, as the paper counts computation; ``"cut"``: it keeps only the columns of
    the client's own training items. The other columns only ever multiply zero inputs, in training and in
    prediction, so the model computes the same function (equal to rounding, tested); only the FLOPs and
    the memory differ).

    Both: ``client_momentum`` (``"keep"``: a client keeps its SGD momentum buffers between the rounds it
    is selected in, as the authors' code; ``"reset"``: fresh buffers every round, standard FedAvg, O(C M)
    memory instead of O(M) model-sized buffers).
    """

    rounds: int = 800
    fraction: float = 0.1
    local_epochs: int = 5
    batch: int = 10
    lr: float = 0.1
    momentum: float = 0.9
    nesterov: bool = True
    weight_decay: float = 5e-4
    clip: float = 1.0
    dropout: float = 0.5
    schedule: str = "cosine"
    hidden: tuple = (256, 128)
    task: str = "explicit"
    compression: bool = True
    merge: str = "per_item"
    uncompressed_training: str = "full"
    encoder_input: str = "dense"
    client_momentum: str = "keep"
    dtype: str = "float32"
    eval_every: int = 0
    eval_k: int = 10

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.local_epochs < 1 or self.batch < 1:
            raise ValueError("rounds, local_epochs and batch must be >= 1")
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")
        if self.schedule not in ("cosine", "constant"):
            raise ValueError(f"schedule must be 'cosine' or 'constant', got {self.schedule!r}")
        if self.task not in ae_train.TASKS:
            raise ValueError(f"task must be one of {tuple(ae_train.TASKS)}, got {self.task!r}")
        if self.merge not in MERGES:
            raise ValueError(f"merge must be one of {MERGES}, got {self.merge!r}")
        if self.uncompressed_training not in UNCOMPRESSED:
            raise ValueError(f"uncompressed_training must be one of {UNCOMPRESSED}")
        if self.encoder_input not in ("dense", "cut"):
            raise ValueError(f"encoder_input must be 'dense' or 'cut', got {self.encoder_input!r}")
        if self.client_momentum not in ("keep", "reset"):
            raise ValueError(f"client_momentum must be 'keep' or 'reset', got {self.client_momentum!r}")
        np.dtype(self.dtype)

    @property
    def loss(self) -> str:
        return ae_train.TASKS[self.task]

    def lr_at(self, t: int) -> float:
        """Learning rate of round ``t`` (1-based): cosine annealing from ``lr`` over ``rounds`` rounds."""
        if self.schedule == "constant":
            return self.lr
        return optim.cosine_lr(self.lr, t - 1, self.rounds)

    def wants_eval(self, t: int) -> bool:
        return t == self.rounds or bool(self.eval_every and t % self.eval_every == 0)


def selection_size(fraction: float, n_clients: int) -> int:
    """Clients per round: ``max(int(C M), 1)`` (McMahan et al.'s FedAvg rounding)."""
    return max(int(fraction * n_clients + 1e-9), 1)


def client_name(m: int, n_clients: int) -> str:
    """Node id of client ``m``, zero-padded so that id order is client order."""
    return f"client/{m:0{max(4, len(str(n_clients - 1)))}d}"


def init_encoder(n_items: int, rng: np.random.Generator, cfg: FedAEConfig, in_items=None) -> dict:
    """A client's private encoder (Xavier-uniform over the full width ``n_items``, zero biases), the first
    draws of its generator; no decoder draws are made (``n_out=0`` gives an empty output layer). With
    ``in_items`` only those input columns are kept (``encoder_input="cut"``): the same values as the dense
    encoder's columns."""
    hidden = tuple(cfg.hidden)
    p = ae.init_params(n_items, rng, hidden, decoder_hidden=(hidden[-1],), n_out=0, dtype=np.dtype(cfg.dtype))
    enc = ae.encoder_of(p)
    if in_items is not None:
        enc = act.slice_items(enc, in_items=in_items)
    return enc


async def _evaluate(ctx, clients: list[str], payload: dict, t: int, cfg: FedAEConfig) -> dict:
    """Send the model to every client, add up their test sums."""
    await ctx.broadcast(clients, "evaluate", payload)
    got = await ctx.gather("eval", senders=clients, round=t)
    sums = ae_train.add_sums(m.payload for m in got)
    out = ae_train.finish_eval(sums, cfg.task)
    out["round"] = t
    return out


def _merge_flops(slices) -> int:
    """Sum (multiply-add per received scalar) and one division per merged scalar."""
    received = sum(int(v.size) for s in slices for v in s.values())
    return 2 * received + max((sum(int(v.size) for v in s.values()) for s in slices), default=0)


async def server(ctx, clients: list[str], n_items: int, cfg: FedAEConfig, evaluate: bool = False) -> dict:
    """The PersonalFR server. Returns ``{"decoder", "history", "selected", "flops"}`` where ``history`` holds
    one federated evaluation per evaluated round and ``selected`` the clients of every round."""
    dt = np.dtype(cfg.dtype)
    rng = ctx.rng
    decoder = ae.decoder_of(ae.init_params(n_items, rng, tuple(cfg.hidden), dtype=dt))  # D_g^0
    M = len(clients)
    ctx.begin_round(0)
    got = await ctx.gather("indices", senders=clients, round=0)
    items = {m.sender: np.asarray(m.payload["items"], dtype=np.int64) for m in got}  # I = {I_1..I_M}
    k = selection_size(cfg.fraction, M)
    history, selected = [], []
    flops = 0
    for t in range(1, cfg.rounds + 1):
        ctx.begin_round(t)
        chosen = [clients[i] for i in np.sort(rng.choice(M, size=k, replace=False))]
        selected.append(chosen)
        if cfg.compression:
            for name in chosen:  # each client gets its own slice (Expression 3)
                await ctx.send(name, "decoder", {"t": t, "dec": act.extract_active(decoder, items[name])})
        else:
            await ctx.broadcast(chosen, "decoder", {"t": t, "dec": decoder})
        got = await ctx.gather("update", senders=chosen, round=t)
        slices = [m.payload["dec"] for m in got]  # node-id order
        if cfg.compression:
            decoder = act.merge_active(decoder, slices, [items[m.sender] for m in got], mode=cfg.merge)
        else:
            decoder = _mean(slices, decoder)
        f = _merge_flops(slices)
        flops += f
        await ctx.compute(f, "aggregate")
        if evaluate and cfg.wants_eval(t):
            history.append(await _evaluate(ctx, clients, {"t": t, "dec": decoder}, t, cfg))
    await ctx.broadcast(clients, "stop", None)
    return {"decoder": decoder, "history": history, "selected": selected, "flops": flops}


def _mean(models, like) -> dict:
    """Equal-weight mean of whole parameter dicts, accumulated in float64 in the given order."""
    out = {}
    for key, ref in like.items():
        acc = np.zeros(ref.shape, dtype=np.float64)
        for p in models:
            acc += p[key]
        out[key] = (acc / len(models)).astype(ref.dtype)
    return out


async def client(ctx, data: ae_train.AETask, cfg: FedAEConfig) -> dict:
    """A PersonalFR client holding the users of ``data`` (training rows private, test entries private).

    Returns ``{"encoder", "flops", "eval_flops", "rounds"}``: its final private encoder (the experimenter's
    copy; it is never sent; ``None`` if it was never needed), the training FLOPs it charged, the evaluation
    FLOPs, the rounds it trained in. The encoder is drawn when first needed (first selection or
    evaluation); nothing else draws from the generator before, so this equals drawing it at the start.
    """
    rng = ctx.rng
    items = act.rated_items(data.mask)  # I_m
    await ctx.send(SERVER, "indices", {"items": items.astype(np.int32)})
    cut = cfg.encoder_input == "cut"
    # input rows: the columns of the items this client's users rated, if the encoder is cut to them
    x = data.x[:, items] if cut else data.x
    if cfg.compression:
        target, mask = data.x[:, items], data.mask[:, items]
    else:
        target, mask = data.x, data.mask
    view = ae_train.AETask(data.task, x, data.mask, data.test_ptr, data.test_items, data.test_values)
    enc = None
    restrict = None
    state = None
    flops = eval_flops = 0
    rounds = []
    while True:
        msg = await ctx.receive(("decoder", "evaluate", "stop"))
        if msg.kind == "stop":
            return {"encoder": enc, "flops": flops, "eval_flops": eval_flops, "rounds": rounds}
        p = msg.payload
        if enc is None:  # E_m^0: the first draws of this client's generator
            enc = init_encoder(data.n_items, rng, cfg, in_items=items if cut else None)
        if msg.kind == "evaluate":  # the prediction stage: own encoder, global decoder
            sums = ae_train.eval_sums(ae.join(enc, p["dec"]), view, k=cfg.eval_k)
            eval_flops += sums["flops"]
            await ctx.compute(sums["flops"], "eval")
            await ctx.send(SERVER, "eval", {k: sums[k] for k in ("sse", "n", "ndcg_sum", "ndcg_users")})
            continue
        t = int(p["t"])
        params = ae.join(enc, ae.copy_params(p["dec"]))  # decoded arrays are read-only
        if state is None or cfg.client_momentum == "reset":
            state = optim.sgd_init(params)  # kept across rounds: I_m and the shapes never change
        if restrict is None and not cfg.compression and cfg.uncompressed_training == "masked":
            restrict = act.restriction(params, out_items=items)
        res = ae_train.local_train(
            params, state, x, target, mask, epochs=cfg.local_epochs, batch=cfg.batch, lr=cfg.lr_at(t), rng=rng,
            loss=cfg.loss, momentum=cfg.momentum, nesterov=cfg.nesterov, weight_decay=cfg.weight_decay,
            clip=cfg.clip, dropout=cfg.dropout, restrict=restrict)
        flops += res.flops
        rounds.append(t)
        await ctx.compute(res.flops, "train")
        enc = ae.encoder_of(params)  # stays here
        await ctx.send(SERVER, "update", {"dec": ae.decoder_of(params)})


# ------------------------------------------------------------------------------------------------
# placing the actors


@dataclass
class FedAEJob:
    """What ``build`` placed on a network; ``collect`` gathers a run's results."""

    protocol: str
    cfg: FedAEConfig
    clients: list[str]
    groups: list[np.ndarray]
    n_items: int
    extra: dict = field(default_factory=dict)

    def collect(self, result) -> dict:
        """``{"history", "final", "best", "client_flops", "server_flops", "selected", "server", "clients"}``:
        ``final`` / ``best`` are the last and the best evaluation (best epoch on the test set, the paper's
        reporting), ``client_flops`` the training FLOPs all clients charged."""
        srv = result[SERVER]
        hist = list(srv["history"])
        key = "rmse" if self.cfg.task == "explicit" else "ndcg"
        best = None
        if hist:
            vals = [h[key] for h in hist]
            i = int(np.nanargmin(vals) if key == "rmse" else np.nanargmax(vals))
            best = hist[i]
        return {
            "history": hist,
            "final": hist[-1] if hist else None,
            "best": best,
            "client_flops": int(sum(result[c]["flops"] for c in self.clients)),
            "server_flops": int(srv["flops"]),
            "selected": srv["selected"],
            "server": srv,
            "clients": {c: result[c] for c in self.clients},
            "config": asdict(self.cfg),
        }


def build(net, task: ae_train.AETask, groups: list[np.ndarray], cfg: FedAEConfig, *, evaluate: bool = True,
          server_role: str = "server") -> FedAEJob:
    """Place a PersonalFR server and one client per user group on ``net`` (any transport).

    ``groups[m]``: the user indices of client ``m`` (``fedsim.data.partition_users``). ``evaluate``: run the
    federated evaluations (``eval_every`` and after the last round; kinds ``EVAL_KINDS``).
    """
    M = len(groups)
    clients = [client_name(m, M) for m in range(M)]
    net.add_node(SERVER, server, clients, task.n_items, cfg, evaluate, role=server_role)
    for name, users in zip(clients, groups):
        net.add_node(name, client, task.rows(users), cfg)
    return FedAEJob("personalfr", cfg, clients, [np.asarray(g) for g in groups], task.n_items)
