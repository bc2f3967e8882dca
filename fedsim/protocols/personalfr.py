"""PersonalFR (Le et al. 2022) as actors: private encoders, a shared decoder averaged by the server
(Partially Federated Learning) and, with Partial Compression, only the active decoder parameters on the wire.

Message flow (kinds; sizes for the default model ``[n, 256, 128] / [128, 256, n]`` in float32):

setup (round 0), Algorithm 1's first loop, with ``compression=True`` only
    client -> server   ``indices``  {items: int32[|I_m|]}                   4 |I_m| + 27..28 bytes
        the items rated by the client's users in its training data; the server records them to cut
        each client's slice (Expression 3) and to merge it (Eq. 5). The paper sends them "to find the
        active parameters" (section III-C); without Partial Compression the server needs none, and no
        client sends its item set: the run has no setup message, every client takes part.

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
    server -> every client taking part  ``evaluate``  {t, dec: the whole global decoder}
        (with compression, a client whose indices never arrived never trains: it is left out, the row's
        ``left_out``; without compression every client is asked)
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

import numpy as np

from ..math import active as act
from ..math import ae_train
from ..math import autoencoder as ae
from ..math import optim
from .common import SERVER, all_finite, check_data, client_name
from .contract import Kind, ProtocolSpec
from .fedae import (
    FedAEConfig, FedAEJob, check_against_data, checked_download, checked_items, checked_params, evaluate_clients,
    merge_flops, param_shapes, place_actors, prepare_task, selection_size, SHARED_KINDS, tiny_autoencoder, unscored,
)
from .registry import register

__all__ = [
    "EVAL_KINDS", "FedAEConfig", "FedAEJob", "SERVER", "SPEC", "build", "client", "client_name", "place",
    "selection_size", "server",
]


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


async def server(ctx, clients: list[str], n_items: int, cfg: FedAEConfig, evaluate: bool = False) -> dict:
    """The PersonalFR server. Returns ``{"decoder", "history", "selected", "flops", "missing", "diverged_at"}``
    where ``history`` holds one federated evaluation per evaluated round and ``selected`` the clients of
    every round. ``diverged_at``: the round (1-based) after whose merge the decoder was not finite, or whose
    evaluation had a prediction that was not (a client's private encoder diverged); the server stops there
    (that evaluation is not kept: its NaN is no score), else None."""
    dt = np.dtype(cfg.dtype)
    rng = ctx.rng
    decoder = ae.decoder_of(ae.init_params(n_items, rng, tuple(cfg.hidden), dtype=dt))  # D_g^0
    M = len(clients)
    missing: list[dict] = []
    if cfg.compression:  # Algorithm 1's first loop: the item sets, to cut each client's slice from
        ctx.begin_round(0)
        got = await ctx.gather("indices", senders=clients, round=0, timeout=cfg.deadline)
        items = {m.sender: checked_items(m, n_items) for m in got}  # I = {I_1..I_M}
        if got.missing:
            missing.append({"round": 0, "kind": "indices", "clients": len(got.missing)})
        members = [c for c in clients if c in items]
    else:  # without Partial Compression the server needs no item set (PFL alone, as FedAvg): none is sent
        members = list(clients)
    taking_part = set(members)
    k = selection_size(cfg.fraction, M)
    history, selected = [], []
    flops = 0
    diverged_at = None
    for t in range(1, cfg.rounds + 1):
        ctx.begin_round(t)
        # the draw is over all M clients (the same draws whatever was lost); with compression, a client
        # whose indices never arrived cannot be given its slice, so it is left out of the round
        chosen = [clients[i] for i in np.sort(rng.choice(M, size=k, replace=False)) if clients[i] in taking_part]
        selected.append(chosen)
        if cfg.compression:
            for name in chosen:  # each client gets its own slice (Expression 3)
                await ctx.send(name, "decoder", {"t": t, "dec": act.extract_active(decoder, items[name])})
        else:
            await ctx.broadcast(chosen, "decoder", {"t": t, "dec": decoder})
        got = await ctx.gather("update", senders=chosen, round=t, timeout=cfg.deadline)
        if got.missing:
            missing.append({"round": t, "kind": "update", "clients": len(got.missing)})
        shapes = {k: v.shape for k, v in decoder.items()}
        w_key, b_key = ae.output_keys(decoder)
        slices = []
        for m in got:  # node-id order
            if cfg.compression:  # its active decoder: the output rows of its items only
                n_m = len(items[m.sender])
                shapes = {**shapes, w_key: (n_m, *decoder[w_key].shape[1:]), b_key: (n_m, *decoder[b_key].shape[1:])}
            slices.append(checked_params(m, "dec", shapes, dt))
        if not slices:
            pass  # nothing arrived: the decoder stays
        elif cfg.compression:  # Eq. 5 over the clients whose update arrived
            decoder = act.merge_active(decoder, slices, [items[m.sender] for m in got], mode=cfg.merge)
        else:
            decoder = ae.mean_params(slices, decoder)
        f = merge_flops(slices)
        flops += f
        await ctx.compute(f, "aggregate")
        if not all_finite(decoder):  # once per round: the clients are not sent a NaN decoder
            diverged_at = t
            break
        if evaluate and cfg.wants_eval(t):
            # over the clients that take part: with compression, one whose indices never arrived never
            # trained (its encoder is the initial one), so it is left out and counted (left_out), not
            # evaluated; without, every client takes part (as FedAvg's)
            row = await evaluate_clients(ctx, members, {"t": t, "dec": decoder}, t, cfg)
            if unscored(row, cfg.task):
                diverged_at = t
                break
            row["left_out"] = M - len(members)
            history.append(row)
    await ctx.broadcast(clients, "stop", None)
    return {"decoder": decoder, "history": history, "selected": selected, "flops": flops, "missing": missing,
            "diverged_at": diverged_at}


async def client(ctx, data: ae_train.AETask, cfg: FedAEConfig) -> dict:
    """A PersonalFR client holding the users of ``data`` (training rows private, test entries private).

    Returns ``{"encoder", "flops", "eval_flops", "rounds"}``: its final private encoder (the experimenter's
    copy; it is never sent; ``None`` if it was never needed), the training FLOPs it charged, the evaluation
    FLOPs, the rounds it trained in. The encoder is drawn when first needed (first selection or
    evaluation); nothing else draws from the generator before, so this equals drawing it at the start.
    """
    rng = ctx.rng
    items = act.rated_items(data.mask)  # I_m
    if cfg.compression:  # only Partial Compression needs the server to know I_m (section III-C)
        await ctx.send(SERVER, "indices", {"items": items.astype(np.int32)})
    cut = cfg.encoder_input == "cut"
    # input rows: the columns of the items this client's users rated, if the encoder is cut to them
    x = data.x[:, items] if cut else data.x
    if cfg.compression:
        target, mask = data.x[:, items], data.mask[:, items]
    else:
        target, mask = data.x, data.mask
    view = ae_train.AETask(data.task, x, data.mask, data.test_ptr, data.test_items, data.test_values)
    dt = np.dtype(cfg.dtype)
    # what the server's messages must hold: the whole decoder to evaluate with, its slice of this
    # client's items (compression) or the whole decoder to train
    whole = param_shapes(data.n_items, cfg.hidden, part="dec")
    mine = param_shapes(data.n_items, cfg.hidden, n_out=len(items), part="dec") if cfg.compression else whole
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
            sums = ae_train.eval_sums(ae.join(enc, checked_download(msg, "dec", whole, dt, training=False)), view,
                                      k=cfg.eval_k)
            eval_flops += sums["flops"]
            await ctx.compute(sums["flops"], "eval")
            # labelled with the round of the request it answers: a client behind may already have read
            # a later round's message (a small one overtaking this large one), and the server must not
            # take this answer for that round's
            now_round = ctx.round
            ctx.begin_round(msg.round)
            await ctx.send(SERVER, "eval", {k: sums[k] for k in ("sse", "n", "ndcg_sum", "ndcg_users")})
            ctx.begin_round(now_round)
            del p, msg  # the evaluated decoder (views of the whole broadcast document) is not kept while idle
            continue
        dec = checked_download(msg, "dec", mine, dt, training=True)
        t = p["t"]
        params = ae.join(enc, ae.copy_params(dec))  # decoded arrays are read-only
        if cfg.client_momentum == "reset":
            state = None  # local_train starts from zero momentum and keeps none
        elif state is None:
            state = optim.sgd_init(params)  # kept across rounds: I_m and the shapes never change
        if restrict is None and not cfg.compression and cfg.uncompressed_training == "masked":
            restrict = act.restriction(params, out_items=items)
        res = ae_train.local_train(
            params, state, x, target, mask, epochs=cfg.local_epochs, batch=cfg.batch, lr=cfg.lr_at(t), rng=rng,
            loss=cfg.loss, momentum=cfg.momentum, nesterov=cfg.nesterov, weight_decay=cfg.weight_decay,
            clip=cfg.clip, dropout=cfg.dropout, lazy=cfg.untouched == "lazy", restrict=restrict)
        flops += res.flops
        rounds.append(t)
        await ctx.compute(res.flops, "train")
        enc = ae.encoder_of(params)  # stays here
        await ctx.send(SERVER, "update", {"dec": ae.decoder_of(params)})
        if cfg.client_momentum == "reset":  # as FedAvg's client (fedavg_ae.client says why only then)
            del params  # the message holds its own copy of the decoder; the encoder is in enc
            state = None
        # the received decoder (views of its document: the round's whole broadcast without
        # compression) is not kept while idle in either mode (as fedavg_ae.client)
        del dec, p, msg


# ------------------------------------------------------------------------------------------------
# placing the actors


def build(net, data, cfg: FedAEConfig | None = None, *, test=None, resume=None) -> FedAEJob:
    """Place a PersonalFR server and ``cfg.clients`` clients (users partitioned at random with the
    network's seed, balanced; 0: one user per client) on ``net`` (any transport). ``data``: the
    training ``Ratings``; ``test``: optional held-out ``Ratings`` the clients evaluate the model
    on privately (every ``eval_every`` rounds and after the last: ``Result.metrics``). PersonalFR
    runs cannot be resumed.
    Raises ``ValueError`` (``common.check_data``) for data without users, and for test ratings outside ``data``'s index space or empty."""
    cfg = cfg or FedAEConfig()
    if resume is not None:
        raise ValueError("PersonalFR runs cannot be resumed; run for more rounds instead")
    check_data("PersonalFR", data, test, evaluates=True)
    task, groups = prepare_task(data, test, cfg, net.seed)
    return place(net, task, groups, cfg, evaluate=test is not None)


def place(net, task: ae_train.AETask, groups: list[np.ndarray], cfg: FedAEConfig, *, evaluate: bool = True,
          server_role: str = "server") -> FedAEJob:
    """``build`` for callers that prepared the ``AETask`` and the user groups themselves (studies
    that reuse one prepared dataset across many runs): ``groups[m]`` are the user indices of
    client ``m``; ``evaluate`` runs the federated evaluations on the task's test entries."""
    return place_actors(net, "personalfr", server, client, task, groups, cfg, evaluate, server_role)


SPEC = register(ProtocolSpec(
    name="personalfr",
    summary="PersonalFR: private encoders, a shared decoder, Partial Compression of the active decoder rows",
    Config=FedAEConfig,
    kinds=(
        Kind("indices", "client", "server", "setup", "{items: int32[|I_m|]}: the items the client's users rated "
             "(with compression only: without, no client sends its item set)"),
        Kind("decoder", "server", "client", "training", "{t, dec}: the active decoder (or the whole one)"),
        Kind("update", "client", "server", "training", "{dec}: the trained active decoder"),
        *SHARED_KINDS,
    ),
    build=build, tiny=tiny_autoencoder, data="explicit", metric="rmse", rounds_field="rounds",
    check_data=check_against_data,
    paper="Le et al.: Personalized Federated Recommender Systems with Private and Partially Federated "
          "AutoEncoders (Asilomar 2022)",
))

# the kinds cost tables leave out, read off the spec (a hand list here could drift from it)
EVAL_KINDS = SPEC.kinds_for("evaluation")
