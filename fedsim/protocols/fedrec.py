"""FedRec (Lin et al. 2020) as actors: federated PMF(B), PMF(S) and SVD++(S) with user
averaging (UA) or hybrid filling (HF) of sampled unrated items.

Message flow (kinds), one iteration t:

batch (Algorithms 1-3)
    server -> every client   ``model``      {t, V, eval}           m x d floats (eval: evaluate this time)
    client -> server         ``gradients``  {items, grads}         |I_u u I'_u| ids + x d floats
    the server averages each item's gradients over the users who sent one (Eq. 9), updates V.

stochastic (Algorithms 4-5), n times per iteration, for a user drawn with replacement:
    server -> that client    ``model``      {t, V} (+ O for SVD++)  m x d (x2) floats
    client -> server         ``gradients``  {items, grads} (+ o_deltas for SVD++)
    the server applies them at once.

end of training
    server -> every client   ``stop``       {diverged_at}

optional evaluation (``eval_every``; kinds listed in ``EVAL_KINDS`` so cost tables can leave
them out): in batch mode the client evaluates its private test ratings with the V it has just
downloaded and its current U_u and answers ``eval`` {sse, sae, n}, and after the last iteration
(if T is a multiple of ``eval_every``) the server sends ``evaluate`` {V}, since no download
follows, labelled round T (a round of its own: the evaluation riding on round T-1's download is
labelled T-1, and a late answer to it must not be taken for the final one); in stochastic mode the
server sends ``evaluate`` {V (, O)} at the end of iteration t, labelled t. A client labels its
``eval`` answer with the round of the request it answers.
Either way the evaluations are of the models after iterations eval_every, 2 eval_every, ..., up
to T. Three scalars per client: the server learns a client's error sums, not its ratings.

defences (docs/privacy.md; off by default)
    ``upload_noise`` sigma: every uploaded value gets Gaussian noise N(0, sigma^2) (its own generator).
    ``secure_aggregation`` (batch only): once, client -> server ``keys`` {pub}, server -> every
    client ``peers`` {pubs}; then each iteration a client sends ``masked`` {masked: uint64[m (d+1)]}
    (its gradients and item counts, dense over all m items, fixed point, plus pairwise masks) in
    place of ``gradients``; the server adds them modulo 2^64 (the masks cancel) and decodes Eq. 9's
    sums and counts. A missing upload makes the round undecodable: V is left unchanged. A client
    whose ``keys`` did not reach the server (lost or late) is sent nothing but ``stop`` and uploads
    nothing (``info["missing"]``: one ``keys`` record at round -1); with fewer than two clients
    left, nobody takes part and every round is skipped (a ``masked`` record per round, V unchanged).
    A client whose gradients do not fit the fixed-point range (or are not finite) sends ``masked``
    {overflow: true} instead; the server then stops with ``diverged_at`` = that iteration (1-based),
    V as it was before it (a plain run stops once V is not finite; fixed point overflows first).

U_u never leaves its client. The rated items a client uploads gradients for are, with rho > 0,
hidden among rho x |I_u| sampled unrated items, drawn afresh each call (``resample=True``, the
paper's algorithms) or once (``resample=False``). See docs/fedrec.md for the privacy difference.

Every random draw comes from ``ctx.rng`` (the server: V, O, user order; a client: U_u, samples);
``central_twin`` trains the same model centrally with generators derived the same way, so that
federated and unfederated runs can be compared bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import Config, ConfigError, param
from ..math.jit import warm_up
from ..math.rows import dots_in_order
from ..math.fedrec_central import TrainResult, to_csr, train_pmf_batch, train_pmf_sgd, train_svdpp_sgd
from ..math.filling import sample_unrated, users_sampling_all
from ..math.secagg import decode, unmask_sum
from ..math.pmf import (
    BatchClient,
    accumulate_item_grads,
    apply_mean_step,
    decayed_lr,
    draw_user_order,
    init_item_factors,
    init_user_factor,
    server_apply_sgd,
)
from ..math.sgd_client import SGDClient
from ..math.svdpp import server_apply_o_delta
from ..seeding import node_rng
from .common import SERVER, BadMessageError, check_data, client_name, client_names, sort_by_item
from .contract import Kind, ProtocolSpec, Result, server_result
from .registry import register
from .secagg import (
    KEYLESS,
    TOO_FEW,
    client_keys,
    dense_rows,
    key_exchange_kinds,
    masked_body,
    masked_vectors,
    overflowed,
    server_relay_keys,
)

__all__ = [
    "EVAL_KINDS", "FedRecConfig", "FedRecJob", "MODELS", "SPEC", "build", "central_twin", "client_name",
    "formula_payload_floats", "paper_lr",
]

MODELS = {"PMF(B)": "batch", "PMF(S)": "sgd", "SVD++(S)": "sgd"}


@dataclass(frozen=True)
class FedRecConfig(Config):
    """FedRec hyper-parameters (paper names). ``lr`` is gamma (server / batch rate, decayed
    x``decay`` per iteration); ``client_lr`` the stochastic clients' own rate (decayed per call,
    default ``lr``; refused for PMF(B), whose one rate ``lr`` steps U and V). ``dtype`` is used for
    computation *and* on the wire."""

    model: str = param("PMF(B)", "model: batch PMF, stochastic PMF or stochastic SVD++", choices=tuple(MODELS))
    d: int = param(20, "latent dimension", min=1)
    T: int = param(100, "iterations", min=0)
    lr: float = param(0.8, "learning rate gamma (x decay per iteration); the paper: 0.8 for PMF(B), 0.01 "
                      "for the stochastic models", min=0, exclusive_min=True)
    client_lr: float | None = param(None, "stochastic clients' own learning rate (none: lr)", min=0,
                                    exclusive_min=True, none_ok=True)
    lam: float = param(0.001, "regularisation lambda", min=0)
    rho: float = param(0.0, "unrated items sampled per rated item (0: none; capped at the user's unrated items)", min=0)
    strategy: str = param("ua", "virtual ratings of sampled items: user averaging or hybrid filling",
                          choices=("ua", "hf"))
    T_predict: int = param(10, "hybrid filling: iteration from which sampled items are predicted", min=0)
    T_local: int = param(10, "hybrid filling: local steps of the user's copy", min=0)
    hf_convention: str = param("code", "when hybrid filling switches to predictions: the authors' code or "
                               "the paper's Algorithm 3", choices=("code", "paper"))
    order: str = param("code", "client update order: the authors' code (item gradients with U_u before "
                       "its step) or the paper's printed order (Algorithm 2 for PMF(B), Algorithm 5 for the "
                       "stochastic models: U_u updated first)", choices=("code", "paper"))
    resample: bool = param(True, "draw the sampled items afresh every call (the paper) or once")
    decay: float = param(0.9, "learning-rate decay per iteration", min=0, exclusive_min=True)
    init_scale: float = param(0.005, "factors start uniform in (-init_scale, init_scale)", min=0)
    dtype: str = param("float32", "computation and wire dtype", choices=("float32", "float64"))
    eval_every: int = param(0, "clients evaluate their private test ratings every this many iterations "
                            "(0: never; at most T)", min=0)
    deadline: float | None = param(None, "seconds the server waits for a round's uploads (and a stochastic "
                                   "client's reply) before going on with what arrived (none: until all arrive)",
                                   min=0, exclusive_min=True, none_ok=True)
    upload_noise: float = param(0.0, "privacy defence: standard deviation of the Gaussian noise a client adds to "
                                "every value it uploads (gradients, O deltas; 0: none; no clipping, so no formal "
                                "differential-privacy guarantee)", min=0)
    secure_aggregation: bool = param(False, "privacy defence (batch PMF only, >= 2 clients): clients upload their gradients and "
                                     "item counts as one dense fixed-point vector over all m items, masked with "
                                     "pairwise keys that cancel in the server's sum (docs/privacy.md)")
    secagg_neighbours: int = param(8, "secure aggregation: ring neighbours each client masks with (even: k/2 on each "
                                   "side)", min=2)

    def validate(self) -> None:
        # batch clients step U_u with the iteration's lr (one rate for U and V): client_lr was ignored
        if self.client_lr is not None and MODELS[self.model] == "batch":
            raise ConfigError(f"client_lr is the stochastic clients' own learning rate; {self.model} "
                              f"has one rate for U and V (lr), got client_lr={self.client_lr}", "client_lr")
        # evaluations are after iterations eval_every, 2 eval_every, ... <= T: beyond T the run
        # asked for evaluations came back with an empty metrics list, nothing said
        if self.eval_every > self.T:
            raise ConfigError(f"eval_every = {self.eval_every} is more than T = {self.T}: no iteration "
                              f"would be evaluated (allowed: 0 for never, or 1 to T)", "eval_every")

    @property
    def style(self) -> str:
        return MODELS[self.model]

    @property
    def implicit(self) -> bool:
        return self.model == "SVD++(S)"


def paper_lr(model: str) -> float:
    """The paper's learning rates: 0.8 for batch PMF, 0.01 for the stochastic models."""
    return 0.8 if model == "PMF(B)" else 0.01


# --------------------------------------------------------------------------------------------
# actors


# what a malformed server message raises in a client's use of it (a missing field, None or a list
# for an array, an array of the wrong shape, a string for t)
# (NotImplementedError: a compiled kernel given arrays of a dtype it has no version for)
_MODEL_ERRORS = (KeyError, TypeError, ValueError, IndexError, AttributeError, NotImplementedError)


def _check(V: np.ndarray, O: np.ndarray | None) -> bool:
    return bool(np.isfinite(V).all() and (O is None or np.isfinite(O).all()))


async def server(ctx, clients: list[str], m: int, cfg: FedRecConfig) -> dict:
    """The FedRec server. Returns ``{"V", "O", "diverged_at", "eval", "missing"}`` where ``eval``
    holds one ``{iteration, mae, rmse, n}`` per evaluation (clients' error sums, aggregated) and
    ``missing`` one record per round with missing uploads (and, with secure aggregation, one at
    round -1 for the clients whose key was lost and one per round skipped for want of two
    members, each with its ``reason``)."""
    dt = np.dtype(cfg.dtype)
    d = cfg.d
    rng = ctx.rng
    V = init_item_factors(rng, m, d, scale=cfg.init_scale, dtype=dt)
    O = init_item_factors(rng, m, d, scale=cfg.init_scale, dtype=dt) if cfg.implicit else None
    evals: list[dict] = []
    missing: list[dict] = []  # per round: the clients whose upload (or key) did not arrive by the deadline
    diverged_at = None
    n = len(clients)
    members: list[str] = []  # secure aggregation: the clients that take part in every round
    lone = 0  # secure aggregation: a client with a key left out because it would be the only one
    if cfg.secure_aggregation:
        ctx.begin_round(-1)
        pubs = await server_relay_keys(ctx, clients, cfg.deadline)
        # a client whose key is not in the published list cannot mask (nobody shares a key with
        # it): it is left out of the whole run, as it leaves itself out (client: keys.keyed)
        members = [c for c, p in zip(clients, pubs) if int(p)]
        if len(members) < n:
            missing.append({"round": -1, "kind": "keys", "clients": n - len(members), "reason": KEYLESS})
        if len(members) < 2:
            # a lone member's "sum" would be its own gradients in the clear: nobody takes part
            lone, members = len(members), []
    for t in range(cfg.T):
        ctx.begin_round(t)
        lr_t = decayed_lr(cfg.lr, t, cfg.decay)
        want_eval = bool(cfg.eval_every) and t > 0 and t % cfg.eval_every == 0
        if cfg.secure_aggregation and not members:
            # no participant: nothing is sent or awaited, V stays (an evaluation has n = 0)
            missing.append({"round": t, "kind": "masked", "clients": lone, "skipped": True, "reason": TOO_FEW})
            if want_eval:
                evals.append(await _collect_eval(ctx, members, t, t, cfg.deadline))
        elif cfg.secure_aggregation:
            await ctx.broadcast(members, "model", {"t": t, "V": V, "eval": want_eval})
            got = await ctx.gather("masked", senders=members, round=t, timeout=cfg.deadline)
            if want_eval:
                evals.append(await _collect_eval(ctx, members, t, t, cfg.deadline))
            if overflowed(got):
                # a client's gradients did not fit the fixed-point range (or were not finite): the
                # sum cannot be formed, and a plain run's V would be about to stop being finite
                diverged_at = t + 1
                break
            if got.missing:
                # a missing upload leaves its neighbours' masks in the sum: nothing to decode
                missing.append({"round": t, "kind": "masked", "clients": len(got.missing), "skipped": True})
            else:
                vec = decode(unmask_sum(masked_vectors(got, m * (d + 1))))
                grad_sum = vec[: m * d].reshape(m, d).astype(dt)
                counts = np.rint(vec[m * d:]).astype(np.int64)
                with np.errstate(over="ignore", invalid="ignore"):
                    apply_mean_step(V, grad_sum, counts, lr_t)  # Eq. 9
            await ctx.compute(2.0 * len(got) * m * (d + 1) + 3.0 * m * d, "aggregate")
        elif cfg.style == "batch":
            await ctx.broadcast(clients, "model", {"t": t, "V": V, "eval": want_eval})
            # Eq. 9 averages each item's gradients over the users who sent one: a missing upload
            # simply leaves its items' means over the others (and an item nobody sent unchanged)
            got = await ctx.gather("gradients", senders=clients, round=t, timeout=cfg.deadline)
            if got.missing:
                missing.append({"round": t, "kind": "gradients", "clients": len(got.missing)})
            if want_eval:
                evals.append(await _collect_eval(ctx, clients, t, t, cfg.deadline))
            grad_sum = np.zeros((m, d), dtype=dt)
            counts = np.zeros(m, dtype=np.int64)
            rows = 0
            with np.errstate(over="ignore", invalid="ignore"):  # divergence is checked below
                for msg in got:  # node-id order
                    try:
                        items = msg.payload["items"]
                        accumulate_item_grads(grad_sum, counts, items, msg.payload["grads"], ascending=True)
                    except (KeyError, TypeError, ValueError, IndexError) as exc:
                        raise BadMessageError(msg, exc) from exc
                    rows += items.shape[0]
                apply_mean_step(V, grad_sum, counts, lr_t)  # Eq. 9
            # the uploads' documents (n x |I_u| x d floats) go now, not when the next gather
            # replaces them: the next round's uploads would otherwise arrive on top of them
            got = msg = items = None
            await ctx.compute(2.0 * rows * d + 3.0 * m * d, "aggregate")
        else:
            order = draw_user_order(rng, n)
            silent: set[int] = set()  # drawn this iteration and did not answer in time: skipped until the next
            doc = None  # this iteration's model message, written in place while no one else holds it
            for u in order.tolist():  # Python ints: cheaper to index and hash than NumPy ones
                if u in silent:
                    continue
                if doc is not None and not doc.reopen():  # the last copy is still held (a late reply)
                    V, O, doc = V.copy(), None if O is None else O.copy(), None
                if doc is None:
                    # V (and O) move into a draft of the message: it is sent to one client after
                    # another, and the server's updates go into it between two sends as long as
                    # each client has let go of it (Draft.reopen), instead of V being copied
                    # into a new message for every exchange
                    doc = ctx.draft("model", {"t": t, "V": V} if O is None else {"t": t, "V": V, "O": O},
                                    zero=False)
                    np.copyto(doc.payload["V"], V)
                    V = doc.payload["V"]
                    if O is not None:
                        np.copyto(doc.payload["O"], O)
                        O = doc.payload["O"]
                await ctx.send(clients[u], "model", doc)
                if cfg.deadline is None:
                    msg = await ctx.receive("gradients")
                    if msg.sender != clients[u]:
                        # (one comparison per exchange) a second upload from the client before, read
                        # as this client's reply, would be applied in its place, silently
                        raise BadMessageError(msg, f"gradients came from {msg.sender!r} while the model was "
                                              f"with {clients[u]!r}: one upload per model sent")
                else:
                    got = await ctx.gather("gradients", senders=[clients[u]], round=t, timeout=cfg.deadline)
                    if not got.messages:
                        # a late reply could only be told from this iteration's next one by its
                        # sender, so the user is not asked again in this iteration
                        silent.add(u)
                        continue
                    msg = got.messages[0]
                if not doc.reopen():  # still held (a tap, a trace): the update goes to a copy
                    V, O, doc = V.copy(), None if O is None else O.copy(), None
                try:
                    items = msg.payload["items"]
                    server_apply_sgd(V, items, msg.payload["grads"], lr_t, ascending=True)
                    if O is not None:
                        server_apply_o_delta(O, items, msg.payload["o_deltas"], ascending=True)
                except (KeyError, TypeError, ValueError, IndexError) as exc:
                    raise BadMessageError(msg, exc) from exc
                await ctx.compute(4.0 * items.shape[0] * d, "apply")
            if silent:
                missing.append({"round": t, "kind": "gradients", "clients": len(silent)})
            if cfg.eval_every and (t + 1) % cfg.eval_every == 0:
                if not _check(V, O):  # a model that is not finite is neither sent nor scored (inf)
                    diverged_at = t + 1
                    break
                body = {"V": V} if O is None else {"V": V, "O": O}
                await ctx.broadcast(clients, "evaluate", body)
                evals.append(await _collect_eval(ctx, clients, t + 1, t, cfg.deadline))
        if not _check(V, O):
            diverged_at = t + 1
            break
    if (cfg.style == "batch" and diverged_at is None and cfg.eval_every and cfg.T
            and cfg.T % cfg.eval_every == 0):
        # a batch evaluation rides on the next model download, and there is none after the last
        # iteration: the returned model is evaluated as the stochastic server evaluates it
        # labelled round T, a round of its own: with eval_every = 1 the evaluation that rode on
        # round T-1's download is labelled T-1, and a late answer to it must not be taken for this one
        takers = members if cfg.secure_aggregation else clients
        ctx.begin_round(cfg.T)
        await ctx.broadcast(takers, "evaluate", {"V": V})
        evals.append(await _collect_eval(ctx, takers, cfg.T, cfg.T, cfg.deadline))
        ctx.begin_round(cfg.T - 1)  # stop stays labelled with the last iteration's round
    await ctx.broadcast(clients, "stop", {"diverged_at": diverged_at})
    if cfg.style != "batch":  # V (and O) may be views on a message: own them
        V, O = V.copy(), None if O is None else O.copy()
    return {"V": V, "O": O, "diverged_at": diverged_at, "eval": evals, "missing": missing}


async def _collect_eval(ctx, clients, iteration: int, rnd: int, deadline: float | None = None) -> dict:
    # the metrics are over the test ratings of the clients that answered (n says how many)
    got = await ctx.gather("eval", senders=clients, round=rnd, timeout=deadline)
    sse = sae = n = 0
    for m in got:
        try:
            e_sse, e_sae, e_n = m.payload["sse"], m.payload["sae"], m.payload["n"]
        except (KeyError, TypeError) as exc:
            raise BadMessageError(m, exc) from exc
        # a negative or NaN error sum, or a count that is not a whole number, would make the
        # reported RMSE and MAE a number that no set of predictions gives (inf is a diverged model)
        if not (type(e_n) is int and e_n >= 0 and all(type(x) in (int, float) and x >= 0 for x in (e_sse, e_sae))):
            raise BadMessageError(m, f"eval must carry sums sse, sae >= 0 and a count n >= 0, "
                                     f"got sse={e_sse!r}, sae={e_sae!r}, n={e_n!r}")
        sse += e_sse
        sae += e_sae
        n += e_n
    # missing: the clients whose answer did not arrive by the deadline (their ratings are not in n)
    return {"iteration": iteration, "mae": sae / n if n else float("nan"),
            "rmse": float(np.sqrt(sse / n)) if n else float("nan"), "n": n, "missing": len(got.missing)}


def _local_errors(U_u, V, O, rated, test_items, test_ratings, clip) -> dict:
    if test_items.shape[0] == 0:
        return {"sse": 0.0, "sae": 0.0, "n": 0}
    u = np.asarray(U_u, dtype=np.float64)
    if O is not None and rated.shape[0]:
        u = u + O[rated].astype(np.float64).sum(axis=0) / np.sqrt(rated.shape[0])
    # summed left to right, not by BLAS (whose gemv / ddot order depends on the CPU kernel OpenBLAS
    # picks: OPENBLAS_CORETYPE=Prescott moved the reported RMSE in its last bits), so a run's
    # metrics are the same bits on every machine, as its parameters are
    pred = dots_in_order(V[test_items].astype(np.float64), u)
    if not np.isfinite(pred).all():
        return {"sse": float("inf"), "sae": float("inf"), "n": int(test_items.shape[0])}
    err = np.clip(pred, *clip) - test_ratings
    return {"sse": float(np.cumsum(err * err)[-1]), "sae": float(np.abs(err).sum()), "n": int(err.shape[0])}


def _check_factors(msg, p, n_items: int | None, d: int, dt: np.dtype, names) -> None:
    """``BadMessageError`` naming ``msg`` unless each of ``names`` in its payload ``p`` is a
    ``dt`` array of shape (``n_items``, ``d``) (any number of rows if ``n_items`` is None)."""
    for name in names:
        a = p.get(name) if type(p) is dict else None
        if (type(a) is not np.ndarray or a.dtype != dt or a.ndim != 2 or a.shape[1] != d
                or (n_items is not None and a.shape[0] != n_items)):
            got = f"{a.dtype} of shape {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
            raise BadMessageError(msg, f"{name} must be a {dt} array of shape ({n_items or 'm'}, {d}), got {got}")


def _check_model(msg, t, factors: dict, n_items: int | None, d: int, dt: np.dtype, want_eval=False) -> None:
    """A ``model`` message: ``t`` its round (another round's label had the client take that
    round's learning rate or hybrid filling, silently), ``eval`` a bool (batch: a message without
    it had the client not answer the evaluation the server waited for, a deadlock report), each of
    ``factors`` (V; O for SVD++) a ``dt`` array of shape (n_items, d) (a V with rows past the items
    had the client sample them, and the server blame the client for the ids); else
    ``BadMessageError`` naming it. The clients call it only for a message that failed their
    attribute tests for an honest one."""
    if type(t) is not int or t != msg.round:
        raise BadMessageError(msg, f"model must carry t = its round {msg.round}, got {t!r}")
    if type(want_eval) is not bool:
        raise BadMessageError(msg, f"model must carry eval = true or false, got {want_eval!r}")
    _check_factors(msg, factors, n_items, d, dt, tuple(factors))


async def client(ctx, rated: np.ndarray, ratings: np.ndarray, cfg: FedRecConfig,
                 test_items: np.ndarray | None = None, test_ratings: np.ndarray | None = None,
                 clip: tuple[float, float] = (1.0, 5.0), index: int = 0, n_items: int | None = None,
                 n_clients: int | None = None) -> np.ndarray:
    """One user's client: ``rated`` item ids ascending and their ``ratings`` (private).
    Returns its final U_u. Optional private test ratings are used only for ``eval`` replies.
    ``index``: its position among the clients (secure aggregation's ring) and ``n_clients`` their
    number (the length of the key list). ``n_items``: the number of items, the rows a ``model``
    or an ``evaluate`` message's V (and O) must have (None: any number)."""
    dt = np.dtype(cfg.dtype)
    rng = ctx.rng
    # the defences draw from generators spawned from ctx.rng, which leaves its draws unchanged
    noise_rng = rng.spawn(1)[0] if cfg.upload_noise > 0 else None
    keys = (await client_keys(ctx, index, cfg.secagg_neighbours, n_clients=n_clients) if cfg.secure_aggregation
            else None)
    U = init_user_factor(rng, cfg.d, scale=cfg.init_scale, dtype=dt)
    if keys is not None and (not keys.keyed or len(keys.members()) < 2):
        # the server left it out of every round (its key is not in the published list, or it
        # would be the only member), seeing the same list: it is sent nothing but ``stop``
        # (already read if the list never came)
        if not keys.stopped:
            await ctx.receive("stop")
        return U
    rated = np.ascontiguousarray(rated, dtype=np.int32)
    ratings = np.ascontiguousarray(ratings, dtype=dt)
    test_items = np.empty(0, np.int32) if test_items is None else np.asarray(test_items, np.int32)
    test_ratings = np.empty(0) if test_ratings is None else np.asarray(test_ratings, np.float64)
    batch = cfg.style == "batch"
    v_shape = (n_items, cfg.d)  # a model's V (and O) (n_items None: the whole check, any rows)
    ndarray = np.ndarray
    implicit = cfg.implicit
    # the client's rows converted once for all its calls (same results as the per-call functions)
    fixed = dict(rho=cfg.rho, strategy=cfg.strategy, T_predict=cfg.T_predict, T_local=cfg.T_local,
                 hf_convention=cfg.hf_convention, lam=cfg.lam)
    rows = (BatchClient(rated, ratings, dt, order=cfg.order, **fixed) if batch
            else SGDClient(rated, ratings, dt, cfg.order, strict=True, **fixed))
    # an upload of the rated items alone (nothing sampled) is then already in item order
    ascending = rated.shape[0] < 2 or bool((rated[1:] > rated[:-1]).all())
    calls = 0
    sample_once: np.ndarray | None = None
    while True:
        msg = await ctx.receive(("model", "evaluate", "stop"))
        kind, p = msg.kind, msg.payload
        if kind == "stop":
            return U
        # A server's message this client cannot use (a field missing, t not its round, V or O not
        # n_items x d of the run's dtype) stops it with a BadMessageError naming the message. A
        # model runs once per stochastic exchange, a cost issue 25 measures: the message as every
        # honest server sends it passes a few attribute tests, no call, and only one failing them
        # goes through the whole check (_check_model), which names the fault; errors of the work
        # the message feeds are caught around it (a try costs nothing until something is raised)
        if kind == "evaluate":
            _check_factors(msg, p, n_items, cfg.d, dt, ("V", "O") if implicit else ("V",))
            try:
                errs = _local_errors(U, p["V"], p.get("O"), rated, test_items, test_ratings, clip)
            except _MODEL_ERRORS as exc:
                raise BadMessageError(msg, exc) from exc
            now_round = ctx.round  # the answer is labelled with the request's round (personalfr.py says why)
            ctx.begin_round(msg.round)
            await ctx.send(SERVER, "eval", errs)
            ctx.begin_round(now_round)
            continue
        try:
            t = p["t"]
            V = p["V"]
        except _MODEL_ERRORS as exc:
            raise BadMessageError(msg, exc) from exc
        want_eval = False
        if batch:  # (once per round, not per stochastic exchange: the message is checked whole)
            want_eval = p.get("eval")
            # attribute tests for the message as every honest server sends it (a dtype is one
            # object per type); anything else goes through the whole check, which names the fault
            if not (t.__class__ is int and t == msg.round and want_eval.__class__ is bool
                    and V.__class__ is ndarray and V.dtype is dt and V.shape == v_shape):
                _check_model(msg, t, {"V": V}, n_items, cfg.d, dt, want_eval)
        elif not (t.__class__ is int and t == msg.round and V.__class__ is ndarray and V.shape == v_shape
                  and (not implicit or (O := p.get("O")).__class__ is ndarray and O.shape == v_shape)):
            # (per stochastic exchange, so the same kind of attribute tests, no dtype: SGDClient.call
            # makes that test anyway and refuses another dtype)
            O = p.get("O") if implicit else None
            _check_model(msg, t, {"V": V, "O": O} if implicit else {"V": V}, n_items, cfg.d, dt)
        if want_eval:
            try:
                errs = _local_errors(U, V, None, rated, test_items, test_ratings, clip)
            except _MODEL_ERRORS as exc:
                raise BadMessageError(msg, exc) from exc
            await ctx.send(SERVER, "eval", errs)
        try:
            sampled = None
            if not cfg.resample and cfg.rho > 0:
                if sample_once is None:
                    sample_once = sample_unrated(rng, rated, V.shape[0], cfg.rho)
                sampled = sample_once
            if batch:
                up = rows.step(U, V, t, decayed_lr(cfg.lr, t, cfg.decay), rng, sampled)
                flops = 6.0 * up.items.shape[0] * cfg.d
            else:
                lr_c = decayed_lr(cfg.client_lr if cfg.client_lr is not None else cfg.lr, calls, cfg.decay)
                calls += 1
                if implicit:
                    up = rows.call(U, V, O, t, lr_c, rng, sampled)
                    # each SGD step also moves the O rows of all rated items
                    flops = (6.0 + 2.0 * rated.shape[0]) * up.items.shape[0] * cfg.d
                else:
                    up = rows.call(U, V, None, t, lr_c, rng, sampled)
                    flops = 6.0 * up.items.shape[0] * cfg.d
            # let go of the downloaded model before waiting: its document (m x d floats, re-encoded
            # for every stochastic exchange) is freed now and its memory reused while still in cache,
            # instead of each client keeping one alive until its next call (its rows kept for the
            # masked upload: read only there, as a read of V.shape is one tuple made per exchange)
            if keys is not None:
                m = V.shape[0]
        except _MODEL_ERRORS as exc:
            raise BadMessageError(msg, exc) from exc
        msg = p = V = O = None
        body = {"items": up.items, "grads": up.grads}
        if up.o_deltas is not None:
            body["o_deltas"] = up.o_deltas
        U = up.U
        up = None
        await ctx.compute(flops, "train")
        if noise_rng is not None:
            body = {k: (v + noise_rng.normal(0.0, cfg.upload_noise, v.shape).astype(v.dtype)) if k != "items" else v
                    for k, v in body.items()}
        if not (ascending and body["items"] is rated):
            body = sort_by_item(body)  # rated and sampled items mixed (see sort_by_item)
        if keys is not None:
            dense = dense_rows(m, cfg.d, body["items"], body["grads"], counts=True)
            await ctx.compute(float(dense.size * (1 + keys.k)), "mask")
            await ctx.send(SERVER, "masked", masked_body(keys, dense, keys.members(), t))
            continue
        await ctx.send(SERVER, "gradients", body)
        # the encoded upload holds its own copy: the arrays need not wait here for the next model
        body = None


# --------------------------------------------------------------------------------------------
# placing the actors, collecting the result


@dataclass
class FedRecJob:
    """What ``build`` placed on a network; ``collect`` turns a run's result into a model."""

    cfg: FedRecConfig
    n_users: int
    n_items: int
    clients: list[str]
    indptr: np.ndarray
    indices: np.ndarray

    def collect(self, run) -> Result:
        """``params``: U (from the clients' return values), V and O (SVD++) from the server's;
        ``metrics``: the federated evaluations (``eval_every`` with test ratings), each with
        ``round``, ``iteration``, ``mae``, ``rmse``, ``n``; ``model``: a ``TrainResult`` (predicts
        and evaluates ratings); ``info["diverged_at"]``: the 1-based iteration at which the
        model stopped being finite, or None; ``info["lost_clients"]`` and ``info["lost_users"]``
        (their user indices): the clients that dropped out, whose U rows are zeros (their factors
        left with them): leave their ratings out when scoring the model; ``info["sampling_all"]``:
        the users for whom rho x |I_u| exceeds their unrated items, so they sample every unrated
        item (rho is capped there; empty when rho fits every user)."""
        srv = server_result(run)
        dt = np.dtype(self.cfg.dtype)
        U = np.empty((self.n_users, self.cfg.d), dtype=dt)
        gone, gone_users = [], []
        for u, name in enumerate(self.clients):
            if name in run.results:
                U[u] = run.results[name]
            else:  # dropped out: its private factor is lost with it (zeros predict the lowest rating)
                U[u] = 0.0
                gone.append(name)
                gone_users.append(u)
        model = TrainResult(self.cfg.model, U, srv["V"], srv["O"], self.indptr, self.indices,
                            history=list(srv["eval"]), diverged_at=srv["diverged_at"],
                            params=self.cfg.to_dict(), iterations=srv["diverged_at"] or self.cfg.T)
        if model.diverged_at is None and not np.isfinite(U).all():
            model.diverged_at = self.cfg.T
        params = {"U": U, "V": srv["V"]} if srv["O"] is None else {"U": U, "V": srv["V"], "O": srv["O"]}
        metrics = [{"round": e["iteration"], **e} for e in srv["eval"]]
        return Result("fedrec", self.cfg, params, metrics, run,
                      info={"diverged_at": model.diverged_at, "missing": srv["missing"], "lost_clients": gone,
                            "lost_users": gone_users,
                            "sampling_all": users_sampling_all(self.indptr, self.n_items, self.cfg.rho)},
                      model=model)


def as_arrays(r) -> tuple:
    """``(users, items, values)`` of a ``Ratings`` (or of such a tuple, passed through)."""
    return (r.users, r.items, r.values) if hasattr(r, "users") else tuple(r[:3])


def build(net, data, cfg: FedRecConfig | None = None, *, test=None, resume=None) -> FedRecJob:
    """Place a FedRec server and one client per user of ``data`` (a ``Ratings``: the training
    ratings over ``data.n_users`` users and ``data.n_items`` items) on ``net`` (any transport).
    Every user gets a client (users without training ratings still download and answer).
    ``test``: optional held-out ``Ratings`` given to the clients privately for the
    ``eval_every`` evaluations (required with ``eval_every``). Declares ``d`` as the ledger's
    unit. FedRec runs cannot be resumed (``resume`` must be None). Raises ``ValueError`` for
    data without users, for ``test`` ratings outside ``data``'s index space (or empty with
    ``eval_every``; ``common.check_data``), ``ConfigError`` for ``eval_every`` without
    ``test``, and for ``secure_aggregation`` with a stochastic model or
    fewer than 2 users (no sum to hide an upload in)."""
    cfg = cfg or FedRecConfig()
    if resume is not None:
        raise ValueError("FedRec runs cannot be resumed; run for more iterations (T) instead")
    if cfg.secure_aggregation and cfg.style != "batch":
        raise ConfigError(f"secure_aggregation needs the batch model PMF(B) (a stochastic server applies one "
                          f"client's upload at a time, so there is no sum to hide it in), got {cfg.model}",
                          "secure_aggregation")
    if cfg.eval_every and test is None:
        # every evaluation would be over no ratings: a metrics list of NaN that looks like a result
        raise ConfigError("eval_every needs held-out test ratings (test=...; fedsim run: test_frac > 0)", "eval_every")
    check_data("FedRec", data, test, evaluates=bool(cfg.eval_every))
    n_users, n_items = int(data.n_users), int(data.n_items)
    if cfg.secure_aggregation and n_users < 2:
        raise ConfigError(f"secure_aggregation needs at least 2 clients (the sum of one client's upload is that "
                          f"upload), got {n_users}", "secure_aggregation")
    dt = np.dtype(cfg.dtype)
    indptr, indices, values = to_csr(*as_arrays(data), n_users, dt)
    clients = client_names(n_users)
    if test is not None:
        t_ptr, t_idx, t_val = to_csr(*as_arrays(test), n_users, np.float64)
    net.set_unit(cfg.d)
    net.before_run(warm_up)  # the actors call compiled kernels: numba's compiler started once (Network.before_run)
    net.add_node(SERVER, server, clients, n_items, cfg, role="server")
    for u, name in enumerate(clients):
        lo, hi = indptr[u], indptr[u + 1]
        kw = {}
        if test is not None:
            kw = dict(test_items=t_idx[t_ptr[u]:t_ptr[u + 1]], test_ratings=t_val[t_ptr[u]:t_ptr[u + 1]])
        if cfg.secure_aggregation:
            kw["index"] = u  # the defence's ring position (only then: the actor's signature stays as it was)
            kw["n_clients"] = n_users
        kw["n_items"] = n_items
        net.add_node(name, client, indices[lo:hi], values[lo:hi], cfg, **kw)
    return FedRecJob(cfg, n_users, n_items, clients, indptr, indices)


def central_twin(data, cfg: FedRecConfig, seed: int, test=None, on_divergence: str = "stop", callback=None,
                 backend=None) -> TrainResult:
    """Train the same model centrally ("unfederated") on ``data`` (``Ratings``), with each
    user's and the server's random streams derived exactly as the actors derive theirs from
    ``seed``: with the same seed the result equals the federated one (to rounding in the
    summation order). ``test``: ``Ratings`` or ``(users, items, ratings)`` evaluated per
    iteration into the result's history."""
    n_users, n_items = int(data.n_users), int(data.n_items)
    names = client_names(n_users)
    common = dict(d=cfg.d, T=cfg.T, lr=cfg.lr, lam=cfg.lam, rho=cfg.rho, strategy=cfg.strategy,
                  T_predict=cfg.T_predict, T_local=cfg.T_local, hf_convention=cfg.hf_convention,
                  user_rngs=lambda u: node_rng(seed, names[u]), server_rng=node_rng(seed, SERVER),
                  dtype=np.dtype(cfg.dtype), decay=cfg.decay, init_scale=cfg.init_scale,
                  resample=cfg.resample, test=None if test is None else as_arrays(test), callback=callback,
                  on_divergence=on_divergence)
    users, items, ratings = as_arrays(data)
    if cfg.model == "PMF(B)":
        return train_pmf_batch(users, items, ratings, n_users, n_items, order=cfg.order,
                               backend=backend, **common)
    trainer = train_svdpp_sgd if cfg.implicit else train_pmf_sgd
    return trainer(users, items, ratings, n_users, n_items, client_lr=cfg.client_lr,
                   backend=backend, order=cfg.order, **common)


def formula_payload_floats(n_rated_total: int, rho: float, m: int, n: int, d: int) -> float:
    """FedRec section 3.3: floats exchanged per iteration, d x [|R| (1 + rho) + m x n]
    (times 4 for bytes in float32)."""
    return d * (n_rated_total * (1 + rho) + m * n)


def tiny(clients: int = 3, rounds: int = 2, seed: int = 0):
    """A few users of the ``tiny`` synthetic preset, hybrid filling at rho = 1, d = 8."""
    from .presets import tiny_ratings

    return tiny_ratings(clients, seed), FedRecConfig(d=8, T=rounds, rho=1.0, strategy="hf")


SPEC = register(ProtocolSpec(
    name="fedrec",
    summary="FedRec: federated PMF(B), PMF(S), SVD++(S) with user averaging or hybrid filling",
    Config=FedRecConfig,
    kinds=(
        Kind("model", "server", "client", "training", "{t, V: float[m, d]} (+ eval flag in batch, O for SVD++)"),
        Kind("gradients", "client", "server", "training",
             ("{items: int32[k], grads: float[k, d]} over rated and sampled items, items strictly increasing "
              "(+ o_deltas for SVD++)")),
        Kind("evaluate", "server", "client", "evaluation",
             "{V (, O)}: stochastic models' evaluation; the batch model's after its last iteration"),
        Kind("eval", "client", "server", "evaluation", "{sse, sae, n}: error sums over private test ratings"),
        Kind("stop", "server", "client", "control", "{diverged_at}"),
        *key_exchange_kinds(masked="uint64[m (d + 1)]: gradients and item counts"),
    ),
    build=build, tiny=tiny, data="explicit", metric="rmse", rounds_field="T",
    paper="Lin, Pan, Ming: FedRec: Federated Recommendation With Explicit Feedback (IEEE Intelligent Systems, 2020)",
))

# the kinds cost tables leave out, read off the spec (a hand list here could drift from it)
EVAL_KINDS = SPEC.kinds_for("evaluation")
