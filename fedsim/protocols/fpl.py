"""FPL (Anelli et al. 2022): federated pair-wise learning with user-controlled disclosure, as actors.

The server holds Theta_S = (Q, b); each client u holds p_u and its training items (private).

Message flow (kinds), one round t (section 4.2):

    server -> each selected client  ``model``   {theta: float[|I|, d+1]}   Theta_S = [Q | b]
    client -> server                ``update``  {items: int32[k], rows: float[k, d+1]}
    the server adds ``lr x`` every row to its item (Eq. 7, a sum over all rows of all clients).

    at the end: server -> every client  ``stop``  None

1. The server draws U^-_t (``clients_per_round`` clients, or every client when there are fewer:
   ``info["clients_per_round_used"]`` and ``info["adjusted"]`` say so) with its ``ctx.rng`` and
   broadcasts Theta_S^{t-1} to them.
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

Defences (docs/privacy.md; off by default): ``upload_noise`` adds N(0, sigma^2) to every value of a
client's rows; ``secure_aggregation`` makes the server relay public keys once per network
(``keys`` / ``peers``, in the setup round ``key_setup_round(round_offset)`` = -1 - the network's
first round: -1 for a run from round 0, -(r + 1) for one continued at round r, so that each
network's key exchange has a label of its own, shared with no training round and no other
network's exchange), name the round's participants in ``model`` (``members``) and receive
``masked`` {masked: uint64[|I| (d+1)]} (the rows summed per item, dense, fixed point, plus pairwise
masks with ring neighbours among the participants) instead of ``update``; it adds them modulo 2^64
and steps Theta_S with the decoded sum (a round with a missing upload cannot be decoded: skipped).
A client whose ``keys`` did not reach the server (lost or late) is never selected in that run (the
draw is made over all clients, then thinned; ``info["missing"]`` has one ``keys`` record at the
key exchange's setup round); a round left with fewer than two such participants is skipped (a
``masked`` record with its reason, Theta_S unchanged). A client whose rows do not fit the
fixed-point range (or are not finite) sends ``masked`` {overflow: true} instead: the server stops
there and ``info["diverged_at"]`` is that round (1-based), Theta_S as it was before it. Without
secure aggregation the server checks Theta_S once per round, after the round's updates: if it is
not finite it stops there (``diverged_at`` that round, Theta_S as it became), so no client is
sent a model that is not finite.

p_u never leaves its client. Long runs are split into several networks (one per epoch, say):
``build(..., resume=result)`` continues a previous run from its Theta_S and every p_u, its rounds
numbered after it. The continued network's actors draw from its own seed from the start (the
server, handed Theta_S, and each client, handed p_u, skip their initial draws), so the pieces are
not the bits of one uninterrupted run (FCF's are: it draws nothing after its initial Q); give each
piece a seed of its own, as ``studies.fpl.runs.run_fpl`` does (``epoch_seed``), and the chain is
reproducible, resumed from a checkpoint or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..config import Config, ConfigError, param

from ..math.jit import warm_up
from ..math.bpr import (
    BPRReg,
    fpl_client_round,
    init_item_params,
    init_user_factor,
    TripleSampler,
    make_triple_sampler,
)
from ..math import fpl_kernels
from ..math.fpl_central import CompiledClientRound, select_clients
from ..math.fpl_presets import PRESET_NAMES, FPLSchedule, fpl_preset
from ..math.rows import check_rows
from ..math.secagg import decode, unmask_sum
from .common import SERVER, BadMessageError, all_finite, check_data, client_name, client_names
from .contract import Kind, ProtocolSpec, Result, server_result
from .registry import register
from .secagg import (
    KEYLESS,
    TOO_FEW,
    checked_members,
    client_keys,
    dense_rows,
    key_exchange_kinds,
    masked_body,
    masked_vectors,
    overflowed,
    server_relay_keys,
)

__all__ = [
    "FPLConfig",
    "FPLJob",
    "SERVER",
    "SPEC",
    "TRAINING_KINDS",
    "build",
    "client_name",
    "clients_per_round_used",
    "config_for_preset",
    "key_setup_round",
    "make_samplers",
    "top10",
    "user_item_lists",
]

@dataclass(frozen=True)
class FPLConfig(Config):
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

    clients_per_round: int = param(1, "clients selected per round |U^-|", min=1)
    triples: int = param(1, "triples T each selected client trains on per round", min=1)
    rounds: int = param(1, "rounds in this run", min=0)
    d: int = param(10, "latent dimension", min=1)
    lr: float = param(0.05, "learning rate alpha", min=0, exclusive_min=True)
    pi: float = param(1.0, "probability of sending each positive-item update", min=0, max=1)
    dtype: str = param("float32", "Theta_S dtype on the server and on the wire", choices=("float32", "float64"))
    merge: str = param("none", "merge a client's updates of the same item within a round: none (the paper's "
                       "count), sum or last (the authors' code)", choices=("none", "sum", "last"))
    local_item_updates: bool = param(False, "clients step their item copies within a round")
    user_update: str = param("per_triple", "when p_u is stepped", choices=("per_triple", "end_of_round"))
    reg_scale: float = param(1.0, "regularisation: the paper's (lr/20, lr/20, lr/200) times this", min=0)
    record_received: bool = param(False, "the server returns every update it received (tests, traces)")
    preset: str = param("", "the preset the schedule came from (sFPL, sFPL+, pFPL, pFPL+; a label)")
    rounds_per_epoch: int = param(0, "rounds in one epoch (0: not an epoch schedule)", min=0)
    deadline: float | None = param(None, "seconds the server waits for a round's updates before summing what "
                                   "arrived (none: until all arrive)", min=0, exclusive_min=True, none_ok=True)
    upload_noise: float = param(0.0, "privacy defence: standard deviation of the Gaussian noise a client adds to "
                                "every value of its update rows (0: none; no clipping, no formal guarantee)", min=0)
    secure_aggregation: bool = param(False, "privacy defence (needs >= 2 clients per round): a client uploads its "
                                     "rows as one dense fixed-point vector over all items, masked with pairwise "
                                     "keys that cancel in the server's sum (docs/privacy.md)")
    secagg_neighbours: int = param(8, "secure aggregation: ring neighbours each client masks with (even: k/2 on each "
                                   "side)", min=2)

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


# --------------------------------------------------------------------------------------------
# actors


def clients_per_round_used(cfg: FPLConfig, n_clients: int) -> int:
    """The clients the server selects per round: ``clients_per_round``, capped at the number of
    clients (a sweep over datasets of several sizes may ask for more than a small one has; the
    result says so: ``info["clients_per_round_used"]`` and ``info["adjusted"]``)."""
    return min(int(cfg.clients_per_round), int(n_clients))


def key_setup_round(round_offset: int) -> int:
    """The round label of the secure-aggregation key exchange of a run whose training rounds start
    at ``round_offset``: ``-1 - round_offset`` (negative: a setup round, which no training round
    and no other run's key exchange shares; -1 for a run from round 0, as FedRec's). The training
    round it precedes is ``-1 - label``."""
    return -1 - int(round_offset)


async def server(ctx, clients: list[str], n_items: int, cfg: FPLConfig, init: np.ndarray | None = None,
                 round_offset: int = 0) -> dict:
    """The FPL server. Returns ``{"theta": [Q | b] (n_items, d+1), "received": [...], "missing":
    [...]}`` where ``received`` (only with ``cfg.record_received``) lists ``(round, sender, items,
    rows)`` of every update and ``missing`` has one record per round with missing uploads (and,
    with secure aggregation, one for the clients whose key was lost and one per round skipped for
    want of two members, each with its ``reason``), ``diverged_at`` (the 1-based round, counted
    from the first run's, in which a secure-aggregation upload overflowed, that round not applied,
    or after whose updates Theta_S was not finite; the server stopped there; else None) and
    ``rounds_done`` (the rounds applied or skipped, counted from the first run's)."""
    dt = np.dtype(cfg.dtype)
    d = cfg.d
    n = len(clients)
    k = clients_per_round_used(cfg, n)
    rng = ctx.rng
    theta = np.empty((n_items, d + 1), dtype=dt)
    if init is None:
        Q, b = init_item_params(n_items, d, rng)
        theta[:, :d] = Q
        theta[:, d] = b
    else:
        theta[...] = init
    lr = float(cfg.lr)
    with np.errstate(over="ignore"):  # (an absurd rate overflows the dtype: the divergence checks say so)
        lr_dt = dt.type(lr)
    kern = fpl_kernels.compiled()  # the updates' sum (None without numba: np.add.at)
    received: list = []
    missing: list[dict] = []
    diverged_at = None  # the 1-based round a client's rows overflowed in, or Theta_S stopped being finite in
    done = round_offset + cfg.rounds
    if cfg.secure_aggregation:
        # its own setup label: the previous network's last training round (round_offset - 1, as
        # it was) put this key exchange in the same round as that round's training messages
        setup = key_setup_round(round_offset)
        ctx.begin_round(setup)
        pubs = await server_relay_keys(ctx, clients, cfg.deadline)
        # a client whose key is not in the published list cannot mask (nobody shares a key with
        # it): it is never selected in this run, and it never expects to be (it gets only "stop")
        keyless = n - int(np.count_nonzero(pubs))
        if keyless:
            missing.append({"round": setup, "kind": "keys", "clients": keyless, "reason": KEYLESS})
    for t in range(cfg.rounds):
        r = round_offset + t
        ctx.begin_round(r)
        chosen = list(select_clients(rng, n, k))
        if cfg.secure_aggregation:
            # the draw is over all n clients (the same draws whatever was lost), then thinned
            chosen = [i for i in chosen if pubs[i]]
            if len(chosen) < 2:
                # a lone participant's "sum" would be its rows in the clear: nobody takes part
                missing.append({"round": r, "kind": "masked", "clients": len(chosen), "skipped": True,
                                "reason": TOO_FEW})
                continue
        names = [clients[i] for i in chosen]
        if cfg.secure_aggregation:
            await ctx.broadcast(names, "model", {"theta": theta, "members": np.asarray(chosen, dtype=np.int32)})
            got = await ctx.gather("masked", senders=names, round=r, timeout=cfg.deadline)
            if overflowed(got):
                # a client's rows did not fit the fixed-point range (or were not finite): the sum
                # cannot be formed, and Theta_S would be about to stop being finite
                diverged_at, done = r + 1, r
                break
            if got.missing:  # a missing upload leaves masks in the sum: the round cannot be decoded
                missing.append({"round": r, "kind": "masked", "clients": len(got.missing), "skipped": True})
            else:
                dense = decode(unmask_sum(masked_vectors(got, n_items * (d + 1)))).reshape(n_items, d + 1)
                theta += (dense * lr).astype(dt)
            await ctx.compute(2.0 * len(got) * n_items * (d + 1), "aggregate")
            continue
        await ctx.broadcast(names, "model", {"theta": theta})
        # the server sums updates (Eq. 7, no averaging): a missing client contributes nothing
        got = await ctx.gather("update", senders=names, round=r, timeout=cfg.deadline)
        if got.missing:
            missing.append({"round": r, "kind": "update", "clients": len(got.missing)})
        rows_in = 0
        for msg in got:  # node-id order
            try:
                items, rows = msg.payload["items"], msg.payload["rows"]
            except (KeyError, TypeError) as exc:
                raise BadMessageError(msg, exc) from exc
            # a well-formed update (an integer id vector, rows of theta's dtype and width) is added
            # by the compiled loop, its ids checked in the same call: np.add.at's additions in the
            # same order, bit for bit (tests/test_fpl.py), without its per-call cost
            if not (kern is not None and type(items) is np.ndarray and type(rows) is np.ndarray
                    and items.ndim == 1 and items.dtype.kind in "iu" and rows.dtype == dt
                    and rows.shape == (items.shape[0], theta.shape[1])
                    and kern.add_update(theta, items, rows, lr_dt)):
                try:
                    # (np.add.at wraps negative ids; items as a list was a bare AttributeError of the
                    # count below, rows as a list a bare TypeError of the sum, and an integer or bool
                    # array is nothing a client computes)
                    check_rows(items, rows, theta.shape[0], theta.shape[1], "update", upload=True)
                except (TypeError, ValueError, IndexError) as exc:
                    raise BadMessageError(msg, exc) from exc
                with np.errstate(over="ignore", invalid="ignore"):  # (checked below)
                    np.add.at(theta, items, rows * lr_dt)
            rows_in += items.shape[0]
            if cfg.record_received:
                received.append((r, msg.sender, np.array(items), np.array(rows)))
        await ctx.compute(2.0 * rows_in * (d + 1), "aggregate")
        if not all_finite(theta):  # once per round: the clients are not sent a model that is not finite
            diverged_at = done = r + 1
            break
    await ctx.broadcast(clients, "stop", None)
    return {"theta": theta, "received": received, "missing": missing, "diverged_at": diverged_at,
            "rounds_done": done}


async def client(ctx, sampler: TripleSampler, cfg: FPLConfig, p_init: np.ndarray | None = None,
                 index: int = 0, round_offset: int = 0, n_clients: int | None = None) -> dict:
    """One user's client. ``sampler``: the sampling tables of its training items (private;
    positives drawn with replacement, negatives from the catalogue minus its items; see
    :func:`make_samplers`); ``index``: its position among the clients and ``round_offset`` the
    run's first round (secure aggregation: its ring position and the key exchange's label), and
    ``n_clients`` their number (the length of the key list).
    Returns ``{"p": p_u, "rounds": rounds taken part in, "sent_positive": positive rows sent,
    "sent_negative": negative rows sent}``."""
    d = cfg.d
    dt = np.dtype(cfg.dtype)
    rng = ctx.rng
    # the defences draw from generators spawned from ctx.rng, which leaves its draws unchanged
    noise_rng = rng.spawn(1)[0] if cfg.upload_noise > 0 else None
    keys = (await client_keys(ctx, index, cfg.secagg_neighbours, key_setup_round(round_offset), n_clients)
            if cfg.secure_aggregation else None)
    p = init_user_factor(d, rng) if p_init is None else np.array(p_init, dtype=np.float64)
    reg = cfg.reg
    T = cfg.triples
    # the compiled round when numba is there: the same numbers as fpl_client_round and the sort
    # below, bit for bit (tests/test_math_fpl_central.py), without a Python loop over the triples
    fast = CompiledClientRound.make(sampler, d, T, cfg.lr, cfg.pi, reg, dtype=cfg.dtype, merge=cfg.merge,
                                    local_item_updates=cfg.local_item_updates, user_update=cfg.user_update)
    if fast is not None:
        p = np.array(p, dtype=np.float64)  # stepped in place: never the caller's array
    stats = {"rounds": 0, "sent_positive": 0, "sent_negative": 0}
    flops_per_triple = 14.0 * d  # x_uij, the p_u step and two item rows
    if keys is not None and keys.stopped:  # ``peers`` never came: the run ended without it
        return {"p": p, **stats}
    # the rows of theta the sampler can name (the catalogue's largest id + 1)
    need = int(sampler.n_catalogue) if sampler.catalogue is None else int(sampler.catalogue[-1]) + 1
    while True:
        # nothing of the last round is kept while waiting for the next: theta is a view on the
        # model message, which keeps the whole broadcast document alive (a client chosen once in
        # many rounds kept one; the documents of every round whose clients were not chosen again
        # since were alive at once), and the upload's arrays are in its own document
        msg = theta = items = rows = dense = None
        msg = await ctx.receive(("model", "stop"))
        if msg.kind == "stop":
            return {"p": p, **stats}
        theta = msg.payload.get("theta") if type(msg.payload) is dict else None
        if (type(theta) is not np.ndarray or theta.dtype != dt or theta.ndim != 2 or theta.shape[1] != d + 1
                or theta.shape[0] < need):
            # (a short or 1-D theta was a bare IndexError, a list a bare AttributeError or TypeError; a
            # narrow one was read past its rows' ends by the compiled round, one of another dtype taken)
            got = f"{theta.dtype} of shape {theta.shape}" if isinstance(theta, np.ndarray) else type(theta).__name__
            raise BadMessageError(msg, f"theta must be a {dt} array of {d + 1} columns and at least {need} rows, "
                                       f"got {got}")
        if fast is not None and theta.dtype == np.float32:
            items, rows, npos = fast(p, theta, rng.random((3, T)))  # the draw sample_triples makes
            nrows = items.shape[0]
        else:
            p, up = fpl_client_round(p, theta[:, :d], theta[:, d], sampler, T, cfg.lr, cfg.pi, rng, reg=reg,
                                     merge=cfg.merge, local_item_updates=cfg.local_item_updates,
                                     user_update=cfg.user_update)
            order = np.argsort(up.items, kind="stable")
            items = up.items[order]
            rows = np.empty((up.n_vectors, d + 1), dtype=dt)
            rows[:, :d] = up.deltas[order]
            rows[:, d] = up.bias_deltas[order]
            npos, nrows = up.n_positive, up.n_vectors
        stats["rounds"] += 1
        stats["sent_positive"] += npos
        stats["sent_negative"] += nrows - npos
        await ctx.compute(flops_per_triple * T, "train")
        if noise_rng is not None:
            rows += noise_rng.normal(0.0, cfg.upload_noise, rows.shape).astype(dt)
        if keys is not None:
            dense = dense_rows(theta.shape[0], d + 1, items, rows)
            await ctx.compute(float(dense.size * (1 + keys.k)), "mask")
            try:
                body = masked_body(keys, dense, checked_members(msg, msg.payload["members"], keys), msg.round)
            except (KeyError, TypeError, ValueError, IndexError) as exc:
                raise BadMessageError(msg, exc) from exc
            await ctx.send(SERVER, "masked", body)
            continue
        await ctx.send(SERVER, "update", {"items": items, "rows": rows})


# --------------------------------------------------------------------------------------------
# placing the actors, collecting the result


@dataclass
class FPLJob:
    """What ``build`` placed on a network; ``collect`` turns a run's result into a ``Result``."""

    cfg: FPLConfig
    n_users: int
    n_items: int
    clients: list[str]
    samplers: list[TripleSampler]
    rounds_done: int
    test: object = None
    train: object = None

    def collect(self, run) -> Result:
        """``params``: ``theta`` = [Q | b] (n_items, d+1), ``Q``, ``b`` and ``P`` (the clients'
        p_u stacked in user order); ``info``: per-client counts (int arrays ``rounds``,
        ``sent_positive``, ``sent_negative``), the server's record of updates (``received``, if
        ``record_received``), ``clients_per_round_used`` (``clients_per_round`` capped at the
        number of clients), ``adjusted`` (one record ``{setting, asked, used, why}`` when that cap
        applied, else empty: ``fedsim run`` reports it), ``rounds_done`` (the rounds whose updates were applied, counted
        from the first run's; those before the overflowing one, below, or up to the diverging one) and
        ``diverged_at``: the 1-based round (counted like ``rounds_done``) in which a secure-aggregation
        client's rows overflowed the fixed-point range (the server stopped there, Theta_S as before that
        round), or after whose updates the plain server found Theta_S not finite (it stopped there,
        Theta_S as it became); else ``rounds_done`` if some p_u is not finite at the end (known only
        then), or, with test ratings, if their scores are not (finite parameters too
        large to rank by); else None; ``metrics``: with test ratings and a model that did not
        diverge, one row of top-10 precision and recall on them (the experimenter's evaluation of
        the final model: FPL itself evaluates nothing) over the users with test items still
        present at the end (``users``; ``lost``: those left out, whose p_u left with them;
        ``info["lost_clients"]`` and ``info["lost_users"]``, their user indices, say which);
        ``state``: what ``build(..., resume=result)``
        continues."""
        srv = server_result(run)
        d = self.cfg.d
        theta = srv["theta"]
        P = np.zeros((self.n_users, d), dtype=np.float64)
        counts = {k: np.zeros(self.n_users, dtype=np.int64) for k in ("rounds", "sent_positive", "sent_negative")}
        gone = []
        for u, name in enumerate(self.clients):
            r = run.results.get(name)
            if r is None:  # dropped out: its p_u is lost with it (zeros)
                gone.append(name)
                continue
            P[u] = r["p"]
            for k in counts:
                counts[k][u] = r[k]
        lost = set(gone)
        present = np.array([name not in lost for name in self.clients], dtype=bool)
        # the server's count: a secure round that overflowed was not applied, so the rounds done are
        # those before it (counting the planned ones, a resumed run would have numbered its rounds
        # after rounds that never happened); a plain round whose Theta_S was not finite was applied
        done = srv["rounds_done"]
        diverged_at = srv["diverged_at"]
        if diverged_at is None and not all_finite(theta, P):
            diverged_at = done  # the clients' p_u: known only to have happened by the end
        params = {"theta": theta, "Q": theta[:, :d], "b": theta[:, d], "P": P}
        metrics = []
        if self.test is not None and diverged_at is None:
            # a client that dropped out took its p_u with it: it is left out of the evaluation (its
            # zero row would rank by item bias alone, a popularity list counted as FPL's), as
            # FedRec's error is over the clients present; the row says over how many users
            top = top10(P, theta, d, self.train, self.test, present)
            if top is None:  # finite parameters whose scores overflow: no ranking to measure
                diverged_at = done
            else:
                metrics.append({"round": done - 1, **top})
        state = {"theta": theta, "P": P, "samplers": self.samplers, "rounds_done": done}
        used = clients_per_round_used(self.cfg, self.n_users)
        adjusted = []
        if used != self.cfg.clients_per_round:
            adjusted.append({"setting": "clients_per_round", "asked": self.cfg.clients_per_round, "used": used,
                             "why": "there is only 1 client (one per user), selected in every round"
                             if self.n_users == 1 else f"there are only {self.n_users} clients (one per user), every "
                                                       "one of them selected in every round"})
        return Result("fpl", self.cfg, params, metrics, run,
                      info={**counts, "received": srv["received"], "rounds_done": done, "missing": srv["missing"],
                            "lost_clients": gone, "lost_users": [int(u) for u in np.flatnonzero(~present)],
                            "diverged_at": diverged_at, "clients_per_round_used": used, "adjusted": adjusted},
                      state=state)


def top10(P, theta, d, train, test, present=None) -> dict | None:
    """Precision and recall at 10 on ``test``, ranking, for each user, the items of the training
    catalogue (items some user has a training interaction with) that she has none with. An item
    seen only in test keeps its random initial parameters: never ranked (docs/fpl.md, as the
    studies' evaluator). None if a score is not finite (a diverged model has no ranking).
    ``present``: a mask of the users evaluated (None: all); ``users`` is how many of them have
    test items (those the means are over), ``lost`` how many users with test items were left out.
    With ``users`` 0 (every user with test items left out: dropped out) precision and recall are
    NaN, no figure, as the other protocols' evaluations over no rating (``fedsim run`` says that
    no user was evaluated)."""
    from ..math.bpr import bpr_scores
    from ..math.metrics import precision_at, recall_at, top_n

    with np.errstate(over="ignore", invalid="ignore"):
        scores = bpr_scores(P, theta[:, :d].astype(np.float64), theta[:, d].astype(np.float64))
    if present is not None:
        scores = np.where(present[:, None], scores, 0.0)  # (a lost user's row is not ranked below)
    if not np.isfinite(scores).all():
        return None
    cat = np.unique(np.asarray(train.items, dtype=np.int64))
    seen = train.by_user()
    # the user's training items as positions in the catalogue (every one of them is in it)
    mine = (np.asarray(seen.indptr, dtype=np.int64), np.searchsorted(cat, np.asarray(seen.indices, dtype=np.int64)))
    at = top_n(scores[:, cat], mine, 10)
    recs = np.where(at >= 0, cat[np.maximum(at, 0)], -1)
    truth = test.by_user()
    has_test = np.diff(np.asarray(truth.indptr)) > 0
    keep = has_test if present is None else has_test & present
    if not keep.any():
        p10 = r10 = float("nan")
    else:
        p10 = float(precision_at(recs, truth, 10, per_user=True)[keep].mean())
        r10 = float(recall_at(recs, truth, 10, per_user=True)[keep].mean())
    return {"p@10": p10, "r@10": r10, "users": int(keep.sum()), "lost": int((has_test & ~keep).sum())}


def user_item_lists(data) -> list[np.ndarray]:
    """Each user's item ids (int64, ascending) from implicit ``Ratings``."""
    csr = data.by_user()
    return [np.asarray(csr.row_indices(u), dtype=np.int64) for u in range(int(data.n_users))]


def make_samplers(user_items: list[np.ndarray], n_items: int,
                  catalogue: np.ndarray | None = None) -> list[TripleSampler]:
    """Every client's :class:`TripleSampler` (the catalogue is sorted once for all of them; a
    resumed run reuses the previous run's samplers). Raises ``ValueError`` naming the first user
    (and its client) who has no item, or whose items cover the whole catalogue: no positive, or
    no negative, to draw."""
    cat = None if catalogue is None else np.unique(np.asarray(catalogue, dtype=np.int64))
    out = []
    for u, it in enumerate(user_items):
        it = np.asarray(it, dtype=np.int64)
        who = f"user {u} ({client_name(u, len(user_items))})"
        if it.size == 0:
            raise ValueError(f"{who} has no training item: FPL draws its triples' positives from them")
        s = make_triple_sampler(it, n_items, cat, catalogue_unique=True)
        if s.n_negatives <= 0:
            raise ValueError(f"{who} consumed every item of the training catalogue ({s.n_catalogue}): "
                             "FPL has no negative to draw for its triples")
        out.append(s)
    return out


def build(net, data, cfg: FPLConfig | None = None, *, test=None, resume=None) -> FPLJob:
    """Place an FPL server and one client per user of ``data`` (implicit training ``Ratings``:
    every user needs at least one item, and at least one catalogue item she has not consumed) on
    ``net`` (any transport). Negatives are drawn from the training catalogue (the items of
    ``data``) minus the user's own items, as the paper's code does. ``test``: optional held-out
    ``Ratings`` for the final top-10 evaluation in ``Result.metrics`` (a ``ValueError`` at once
    if it is empty or holds a user or item outside ``data``'s index space, or ``data`` has no
    user: ``common.check_data``). ``resume``: a previous
    ``Result`` of FPL on the same data (or its ``state`` dict): this run continues from its model
    (Theta_S, every p_u) and numbers its rounds after it. Declares ``d + 1`` (one vector
    (q_i, b_i)) as the ledger's unit."""
    cfg = cfg or FPLConfig()
    check_data("FPL", data, test, evaluates=True)
    if test is not None and (test.n_users, test.n_items) != (data.n_users, data.n_items):
        # the evaluation pairs test rows with training rows user by user: one index space
        test = type(test)(test.users, test.items, test.values, n_users=data.n_users, n_items=data.n_items,
                       name=test.name)
    n_items = int(data.n_items)
    if cfg.secure_aggregation and clients_per_round_used(cfg, int(data.n_users)) < 2:
        raise ConfigError("secure_aggregation needs at least 2 clients per round (the sum of one client's update "
                          "is that update)", "secure_aggregation")
    state = resume.state if isinstance(resume, Result) else resume
    if state is not None and not isinstance(state, Mapping):
        raise TypeError("resume must be a previous Result or its state dict")
    samplers = state.get("samplers") if state else None
    if samplers is None:
        samplers = make_samplers(user_item_lists(data), n_items, np.unique(np.asarray(data.items)))
    n_users = len(samplers)
    if n_users != int(data.n_users):
        raise ValueError(f"resume state has {n_users} clients, data has {data.n_users} users")
    init = None if not state else state.get("theta")
    user_factors = None if not state else state.get("P")
    offset = int(state.get("rounds_done", 0)) if state else 0
    clients = client_names(n_users)
    net.set_unit(cfg.unit)
    net.before_run(warm_up)  # the actors call compiled kernels: numba's compiler started once (Network.before_run)
    net.add_node(SERVER, server, clients, n_items, cfg, init, offset, role="server")
    for u, name in enumerate(clients):
        p0 = None if user_factors is None else user_factors[u]
        # the defence's ring position and key-exchange label only then
        extra = {"index": u, "round_offset": offset, "n_clients": n_users} if cfg.secure_aggregation else {}
        net.add_node(name, client, samplers[u], cfg, p0, **extra)
    return FPLJob(cfg, n_users, n_items, clients, samplers, offset, test, data if test is not None else None)


def tiny(clients: int = 3, rounds: int = 2, seed: int = 0):
    """A few users of the ``tiny`` synthetic preset as implicit feedback, every client every
    round (pFPL-like), three triples, pi = 0.5, d = 4."""
    from .presets import tiny_ratings

    return (tiny_ratings(clients, seed).binarize(),
            FPLConfig(clients_per_round=clients, triples=3, rounds=rounds, d=4, pi=0.5, preset="pFPL"))


SPEC = register(ProtocolSpec(
    name="fpl",
    summary="FPL: federated pair-wise (BPR) learning; clients send each positive-item update with probability pi",
    Config=FPLConfig,
    kinds=(
        Kind("model", "server", "client", "training", "{theta: float[|I|, d+1]}: Theta_S = [Q | b]"),
        Kind("update", "client", "server", "training",
             "{items: int32[k], rows: float[k, d+1]}: T negative and the sent positive item updates"),
        Kind("stop", "server", "client", "control", "None"),
        *key_exchange_kinds(masked="uint64[|I| (d+1)]"),
    ),
    build=build, tiny=tiny, data="implicit", metric="p@10", rounds_field="rounds",
    paper="Anelli et al.: User-controlled federated matrix factorization for recommender systems (JIIS 2022)",
))

# the kinds SPEC declares for training: model, update and, with secure aggregation, masked
# (derived: the hand list it was had no masked, so a cost read off it missed the masked uploads)
TRAINING_KINDS = SPEC.kinds_for("training")
