"""FedAvg on PersonalFR's autoencoder (the paper's baseline): clients train the whole model, the server
averages whole models.

Message flow (kinds; sizes for the default model in float32, ``n`` items):

round t = 1..T
    the server draws ``max(int(C M), 1)`` clients with its own generator (the same draws as the PersonalFR
    server with the same seed: both first initialise one whole autoencoder from ``ctx.rng``)
    server -> chosen clients  ``model``   {t, model: encoder + decoder}     4 (66,176 + 513 n) + 196 bytes, one broadcast
    client: K local epochs of the whole model (its own momentum kept across rounds, weight decay on every row)
    client -> server          ``update``  {model}                            4 (66,176 + 513 n) + 192 bytes
    server: equal-weight mean of the received models (float64 accumulation, node-id order)

evaluation (``EVAL_KINDS``, left out of cost tables)
    server -> every client  ``evaluate``  {t, model}
    client -> server        ``eval``      {sse, n, ndcg_sum, ndcg_users}

end
    server -> every client  ``stop``

Configuration: ``fedsim.protocols.personalfr.FedAEConfig`` (its PersonalFR-only fields are ignored).
"""

from __future__ import annotations

import numpy as np

from ..math import ae_train
from ..math import autoencoder as ae
from ..math import optim
from .common import SERVER, all_finite, check_data
from .contract import Kind, ProtocolSpec
from .fedae import (
    FedAEConfig, FedAEJob, check_against_data, checked_download, checked_params, evaluate_clients, merge_flops,
    param_shapes, place_actors, prepare_task, selection_size, SHARED_KINDS, tiny_autoencoder, unscored,
)
from .registry import register

__all__ = ["EVAL_KINDS", "FedAEConfig", "SERVER", "SPEC", "build", "client", "place", "server"]


async def server(ctx, clients: list[str], n_items: int, cfg: FedAEConfig, evaluate: bool = False) -> dict:
    """The FedAvg server. Returns ``{"model", "history", "selected", "flops", "missing", "diverged_at"}``
    (``diverged_at``: the round, 1-based, after whose mean the model was not finite, or whose evaluation
    had a prediction that was not; the server stops there, that evaluation not kept; else None)."""
    dt = np.dtype(cfg.dtype)
    rng = ctx.rng
    model = ae.init_params(n_items, rng, tuple(cfg.hidden), dtype=dt)
    M = len(clients)
    k = selection_size(cfg.fraction, M)
    history, selected = [], []
    missing: list[dict] = []
    flops = 0
    diverged_at = None
    for t in range(1, cfg.rounds + 1):
        ctx.begin_round(t)
        chosen = [clients[i] for i in np.sort(rng.choice(M, size=k, replace=False))]
        selected.append(chosen)
        await ctx.broadcast(chosen, "model", {"t": t, "model": model})
        got = await ctx.gather("update", senders=chosen, round=t, timeout=cfg.deadline)
        if got.missing:
            missing.append({"round": t, "kind": "update", "clients": len(got.missing)})
        shapes = {k: v.shape for k, v in model.items()}
        models = [checked_params(m, "model", shapes, dt) for m in got]
        if models:  # the mean of the models that arrived (none: the model stays)
            model = ae.mean_params(models, model)
        f = merge_flops(models)
        flops += f
        await ctx.compute(f, "aggregate")
        if not all_finite(model):  # once per round: the clients are not sent a NaN model
            diverged_at = t
            break
        if evaluate and cfg.wants_eval(t):
            row = await evaluate_clients(ctx, clients, {"t": t, "model": model}, t, cfg)
            if unscored(row, cfg.task):
                diverged_at = t
                break
            history.append(row)
    await ctx.broadcast(clients, "stop", None)
    return {"model": model, "history": history, "selected": selected, "flops": flops, "missing": missing,
            "diverged_at": diverged_at}


async def client(ctx, data: ae_train.AETask, cfg: FedAEConfig) -> dict:
    """A FedAvg client holding the users of ``data``. Returns ``{"flops", "eval_flops", "rounds"}``."""
    rng = ctx.rng
    state = None
    flops = eval_flops = 0
    rounds = []
    dt = np.dtype(cfg.dtype)
    shapes = param_shapes(data.n_items, cfg.hidden)  # what the server's model must be
    while True:
        msg = await ctx.receive(("model", "evaluate", "stop"))
        if msg.kind == "stop":
            return {"flops": flops, "eval_flops": eval_flops, "rounds": rounds}
        p = msg.payload
        if msg.kind == "evaluate":
            sums = ae_train.eval_sums(checked_download(msg, "model", shapes, dt, training=False), data, k=cfg.eval_k)
            eval_flops += sums["flops"]
            await ctx.compute(sums["flops"], "eval")
            # labelled with the round of the request it answers: a client behind may already have read
            # a later round's message (a small one overtaking this large one), and the server must not
            # take this answer for that round's
            now_round = ctx.round
            ctx.begin_round(msg.round)
            await ctx.send(SERVER, "eval", {k: sums[k] for k in ("sse", "n", "ndcg_sum", "ndcg_users")})
            ctx.begin_round(now_round)
            del p, msg  # the evaluated model (views of the whole broadcast document) is not kept while idle
            continue
        checked_download(msg, "model", shapes, dt, training=True)
        t = p["t"]
        # the received model (read-only arrays) is the training's source: local_train fills these
        # arrays from it, the copy folded into its pass over the untouched entries. They are the
        # update's own document (a draft): trained where they are sent from, not copied into it
        update = ctx.draft("update", {"model": p["model"]}, zero=False)  # (local_train writes every element)
        params = update.payload["model"]
        if cfg.client_momentum == "reset":
            state = None  # local_train starts from zero momentum and keeps none
        elif state is None:
            state = optim.sgd_init(params)
        res = ae_train.local_train(
            params, state, data.x, data.x, data.mask, epochs=cfg.local_epochs, batch=cfg.batch, lr=cfg.lr_at(t),
            rng=rng, loss=cfg.loss, momentum=cfg.momentum, nesterov=cfg.nesterov, weight_decay=cfg.weight_decay,
            clip=cfg.clip, dropout=cfg.dropout, lazy=cfg.untouched == "lazy", source=p["model"])
        flops += res.flops
        rounds.append(t)
        await ctx.compute(res.flops, "train")
        await ctx.send(SERVER, "update", update)
        if cfg.client_momentum == "reset":
            # the message holds its own encoded copy: drop ours, and the momentum we will rebuild, before
            # waiting (with one user per client, 943 idle clients kept 7 GB). Measured only in this mode:
            # with "keep" (personalfr_table3) dropping them made the run slower (39 -> 43 min, minor page
            # faults 4.2 M -> 164 M, the allocator handing the memory back and forth), so there the
            # client's own copies (trained model, momentum) stay until its next message
            del params, update
            state = None
        # the received model is not kept while idle in either mode: its arrays are views of the
        # round's whole broadcast document, which every idle client kept alive until its next
        # message (one document more per round until every client had been chosen again; dropping
        # it was measured on small runs only: less memory, the same time; docs/performance.md)
        del p, msg


def build(net, data, cfg: FedAEConfig | None = None, *, test=None, resume=None) -> FedAEJob:
    """Place a FedAvg server and ``cfg.clients`` clients (users partitioned at random with the
    network's seed; 0: one user per client) on ``net`` (any transport); as PersonalFR's ``build``
    (``test``: held-out ``Ratings`` for the federated evaluations). Cannot be resumed.
    Raises ``ValueError`` (``common.check_data``) for data without users, and for test ratings outside ``data``'s index space or empty."""
    cfg = cfg or FedAEConfig()
    if resume is not None:
        raise ValueError("FedAvg runs cannot be resumed; run for more rounds instead")
    check_data("FedAvg-AE", data, test, evaluates=True)
    task, groups = prepare_task(data, test, cfg, net.seed)
    return place(net, task, groups, cfg, evaluate=test is not None)


def place(net, task: ae_train.AETask, groups: list[np.ndarray], cfg: FedAEConfig, *, evaluate: bool = True,
          server_role: str = "server") -> FedAEJob:
    """``build`` for callers that prepared the ``AETask`` and the user groups themselves."""
    return place_actors(net, "fedavg-ae", server, client, task, groups, cfg, evaluate, server_role)


SPEC = register(ProtocolSpec(
    name="fedavg-ae",
    summary="FedAvg on PersonalFR's autoencoder: whole-model local training and averaging (baseline)",
    Config=FedAEConfig,
    kinds=(
        Kind("model", "server", "client", "training", "{t, model}: encoder + decoder"),
        Kind("update", "client", "server", "training", "{model}: the locally trained whole model"),
        *SHARED_KINDS,
    ),
    build=build, tiny=tiny_autoencoder, data="explicit", metric="rmse", rounds_field="rounds",
    check_data=check_against_data,
    paper="McMahan et al. 2017 (FedAvg), as the baseline of Le et al. 2022 (PersonalFR)",
))

# the kinds cost tables leave out, read off the spec (a hand list here could drift from it)
EVAL_KINDS = SPEC.kinds_for("evaluation")
