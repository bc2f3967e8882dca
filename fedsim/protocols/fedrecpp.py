"""FedRec++ (Liang et al. 2021) as actors: denoising clients make FedRec's hybrid filling
lossless.

Setup (once): the server draws ``eta`` denoisers at random and assigns every ordinary client to
one of them (random, balanced), telling each client its role (``assign``).

One iteration t (batch PMF, c participating clients drawn at random by the server):

phase 1, TRAINING
    server -> participants        ``model``     {t, V}
    ordinary -> server            ``gradients`` {items, grads}  over I_u u I'_u (Eq. 3, 4)
    ordinary -> its denoiser      ``noise``     {items, grads}  over I'_u (Eq. 8), *anonymous*
    a participating denoiser computes its own gradients over I_u and keeps them (no upload).
phase 2, COLLECTING
    server -> each denoiser       ``collect``   {t, expected}  (how many noise messages to expect)
    denoiser -> server            ``denoised``  {items, sums, counts}  (Eq. 9 and |U'_i^d|)
                                  only once it holds all ``expected`` noise messages of round t
                                  (not of a later round: those are kept for their own round)
    the server removes the noise (Eq. 5), recovers |U_i| and updates V (Eq. 6), each count
    checked first: in [-1 (0 without count_own, or when the denoiser did not train this
    round), the number of the group's uploads that name the item] (``denoise.check_noise_counts``).
end
    server -> every client        ``stop``

Choices where the paper is silent or inconsistent (docs/fedrecpp.md):

- Signs: the denoiser sends S = sum of received noise - its own gradients (Eq. 9) and the
  server computes G - sum_d S (Eq. 5); the result is the pure rated-item gradient sum, the
  denoisers' own gradients included.
- Counts: the denoiser sends ``counts = |U'_i^d| - [i in I_d]`` (its own ratings enter as a
  correction) so that |U_i| = |U_i u U'_i| - sum_d counts counts every rater, denoisers
  included; with ``count_own=False`` it sends the paper's |U'_i^d| and the denoisers' ratings
  are missing from |U_i| (not exactly lossless). The correction shows the server a denoiser's
  rated items that none of its clients sampled (count -1): the price of exactness, documented.
- Clients update U_u from rated items only (Eq. 7) when denoising is on; with ``eta = 0`` the
  protocol is FedRec with HF (U_u from rated and sampled items, division by |U_i u U'_i|).
- Participation: denoisers collect every iteration whether or not they train in it. The c
  participants are drawn from the server's ``participation`` sub-stream (``seeding.substream``),
  so FedRec (eta = 0) and FedRec++ with the same seed select the same clients every iteration.

Defence (docs/privacy.md; off by default): ``secure_noise``. The server tells each ordinary client
its group (the ordinary clients of its denoiser) in ``assign``, relays public keys once (``keys`` /
``peers``) and names each round's participants in ``model`` (``part``); an ordinary client puts its
noise on a fixed-point grid (the same values in its upload), and sends it as ``noise``
{masked: uint64[m (d+1)]}: gradients and counts, dense over all m items, plus pairwise masks with
its ring neighbours among its group's participants. The denoiser adds its messages modulo 2^64 and
reads only the group's sum (a group of one participant is not hidden). Still lossless. An ordinary
client whose ``keys`` did not reach the server (lost or late) cannot mask: it is never made a
participant in that run (the draw is made over all clients, then thinned) and is sent nothing but
``stop``; ``info["missing"]`` has one record with ``kind`` ``keys`` at round -1. An ordinary
client whose noise does not fit the fixed-point grid (or is not finite) sends ``gradients``
{overflow: true} instead of its upload and noise: the server stops with ``diverged_at`` = that
iteration (1-based), V as it was before it.

With any eta >= 1 the model equals FedRec with rho = 0 (tested to 1e-9 in float64).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from ..config import Config, ConfigError, param
from ..math.jit import warm_up
from ..math.fedrec_central import TrainResult, to_csr
from ..math.denoise import denoiser_sums, denoiser_sums_dense, remove_noise
from ..math.filling import hf_active, sample_unrated, user_mean, users_sampling_all, virtual_ratings_hf
from ..math.rows import check_rows
from ..math.secagg import decode, encode, unmask_sum
from ..math.pmf import (
    accumulate_item_grads,
    apply_mean_step,
    batch_client_step,
    decayed_lr,
    init_item_factors,
    init_user_factor,
    pmf_batch_client,
)
from ..seeding import substream
from .common import SERVER, BadMessageError, check_data, client_name, client_names, sort_by_item
from .contract import Kind, ProtocolSpec, Result, server_result
from .fedrec import as_arrays
from .registry import register
from .secagg import (KEYLESS, checked_members, client_keys, dense_rows, key_exchange_kinds, masked_vectors,
                     overflowed, server_relay_keys)

__all__ = ["ExposedDenoiserWarning", "FedRecPPConfig", "FedRecPPJob", "SPEC", "build", "participants_used",
           "TRAINING_KINDS"]

class ExposedDenoiserWarning(UserWarning):
    """More denoisers than ordinary clients: some denoisers collect no noise, so what they
    send the server is their own gradients in the clear (FedRec++ section RQ3)."""


@dataclass(frozen=True)
class FedRecPPConfig(Config):
    """FedRec++ parameters: FedRec's batch PMF with hybrid filling, plus ``eta`` denoisers and
    ``c`` participating clients per iteration (0: all; more than there are clients: all, and the
    result says so, ``info["c_used"]``)."""

    d: int = param(20, "latent dimension", min=1)
    T: int = param(100, "iterations", min=0)
    lr: float = param(0.8, "learning rate gamma (x decay per iteration)", min=0, exclusive_min=True)
    lam: float = param(0.001, "regularisation lambda", min=0)
    rho: float = param(1.0, "unrated items sampled per rated item (capped at the user's unrated items)", min=0)
    eta: int = param(1, "denoising clients (0: FedRec with hybrid filling)", min=0)
    c: int = param(0, "participating clients per iteration (0: all)", min=0)
    strategy: str = param("hf", "virtual ratings of sampled items: user averaging or hybrid filling",
                          choices=("ua", "hf"))
    T_predict: int = param(10, "hybrid filling: iteration from which sampled items are predicted", min=0)
    T_local: int = param(10, "hybrid filling: local steps of the user's copy", min=0)
    hf_convention: str = param("code", "when hybrid filling switches to predictions: the authors' code or "
                               "the paper's Algorithm 3", choices=("code", "paper"))
    order: str = param("code", "batch client update order: the authors' code or the paper's printed order",
                       choices=("code", "paper"))
    decay: float = param(0.9, "learning-rate decay per iteration", min=0, exclusive_min=True)
    init_scale: float = param(0.005, "factors start uniform in (-init_scale, init_scale)", min=0)
    dtype: str = param("float32", "computation and wire dtype", choices=("float32", "float64"))
    count_own: bool = param(True, "denoisers correct the item counts for their own ratings (exactly lossless)")
    allow_exposed: bool = param(False, "allow eta > n/2 (denoisers without ordinary clients expose their "
                                "gradients; a warning instead of an error)")
    deadline: float | None = param(None, "seconds the server waits for uploads and for the denoisers' sums, "
                                   "and a denoiser for its noise messages (none: until all arrive)",
                                   min=0, exclusive_min=True, none_ok=True)
    secure_noise: bool = param(False, "privacy defence: ordinary clients send their noise as one dense fixed-point "
                               "vector over all items, masked with pairwise keys among the clients of the same "
                               "denoiser, so a denoiser learns only its group's sum (docs/privacy.md)")
    secagg_neighbours: int = param(8, "secure noise: ring neighbours each client masks with (even: k/2 on each "
                                   "side)", min=2)


def check_eta(eta: int, n: int, allow_exposed: bool) -> None:
    """eta > n is impossible (ConfigError); eta > n/2 leaves denoisers without ordinary clients,
    exposing their gradients: an error unless ``allow_exposed``, then a warning."""
    if eta > n:
        raise ConfigError(f"eta = {eta} denoisers is impossible with n = {n} client{'' if n == 1 else 's'}", "eta")
    if eta > n - eta:
        msg = (f"eta = {eta} > n/2 = {n / 2:g}: {eta - (n - eta)} denoiser(s) get no ordinary client, "
               "so their own gradients reach the server undisguised")
        if not allow_exposed:
            raise ConfigError(msg + " (pass allow_exposed=True to run anyway)", "eta")
        warnings.warn(msg, ExposedDenoiserWarning, stacklevel=3)


def participants_used(cfg: FedRecPPConfig, n_clients: int) -> int:
    """The clients taking part in each iteration: ``c``, or all ``n_clients`` when ``c`` is 0 or
    larger than that (a sweep over datasets of several sizes may ask for more than a small one
    has; the result says so: ``info["c_used"]`` and ``info["adjusted"]``)."""
    n = int(n_clients)
    return n if cfg.c == 0 else min(int(cfg.c), n)


# --------------------------------------------------------------------------------------------
# actors


async def server(ctx, clients: list[str], m: int, cfg: FedRecPPConfig) -> dict:
    """Returns ``{"V", "denoisers", "assignment", "diverged_at", "missing"}`` (``missing``: per
    round with losses, one record per kind of message missing, as the other protocols': ``kind``
    (``gradients``; ``denoised``, a denoiser's sum, also what a lost ``noise`` message shows as,
    the denoiser then saying nothing), ``clients`` (how many of them did not arrive), and what
    that left out of the update: ``groups`` (denoiser groups broken; a group broken by both kinds
    counted under ``gradients``, so that they add up over a round's records) and ``left_out``
    (those groups' clients; without denoisers, the clients whose gradients are missing); with
    secure noise, a record at round -1 of ``kind`` ``keys`` counts the ordinary clients left out
    of the whole run because their key did not reach the server)."""
    dt = np.dtype(cfg.dtype)
    d = cfg.d
    rng = ctx.rng
    V = init_item_factors(rng, m, d, scale=cfg.init_scale, dtype=dt)  # first draw: as FedRec's server
    n = len(clients)
    den_idx = np.sort(rng.choice(n, size=cfg.eta, replace=False)) if cfg.eta else np.empty(0, np.int64)
    denoisers = [clients[i] for i in den_idx]
    den_pos = set(den_idx.tolist())
    ordinary = [c for i, c in enumerate(clients) if i not in den_pos]
    assignment: dict[str, str] = {}
    if denoisers:
        # balanced: a random permutation of the ordinary clients dealt round-robin
        perm = rng.permutation(len(ordinary))
        for k, j in enumerate(perm):
            assignment[ordinary[j]] = denoisers[k % len(denoisers)]
    ctx.begin_round(-1)
    index = {c: i for i, c in enumerate(clients)}
    groups: dict[str, np.ndarray] = {}
    if cfg.secure_noise:
        by_denoiser: dict[str, list[int]] = {dn: [] for dn in denoisers}
        for c, a in assignment.items():  # one pass (a pass over every client per denoiser was O(n eta))
            by_denoiser[a].append(index[c])
        for dn in denoisers:
            groups[dn] = np.array(sorted(by_denoiser[dn]), dtype=np.int32)
    for c in clients:
        if c in assignment:
            body = {"role": "ordinary", "denoiser": assignment[c]}
            if cfg.secure_noise:
                body["group"] = groups[assignment[c]]  # the clients that mask with each other
            await ctx.send(c, "assign", body)
        elif denoisers:
            await ctx.send(c, "assign", {"role": "denoiser"})
        else:
            await ctx.send(c, "assign", {"role": "ordinary", "denoiser": None})
    den_set = set(denoisers)
    # Who takes part is drawn from a sub-stream of the server's seed, not from ``rng``: the
    # denoiser draws above consume ``rng`` only when eta > 0, so with one stream FedRec (eta = 0)
    # and FedRec++ (eta >= 1) under the same seed would select different participants (and their
    # clients would then sample different items). Paired runs make their difference the method.
    part_rng = substream(rng, "participation")
    lost_rounds: list[dict] = []  # what was missing per round and kind, and the groups it left out
    keyless: set[str] = set()  # secure noise: ordinary clients whose key is not in the published list
    if cfg.secure_noise and denoisers:
        pubs = await server_relay_keys(ctx, clients, cfg.deadline, senders=ordinary)
        # such a client cannot mask (nobody in its group shares a key with it): it takes part in
        # no round of the run, as it knows from the same list (client: keys.keyed)
        keyless = {c for c in ordinary if not pubs[index[c]]}
        if keyless:
            lost_rounds.append({"round": -1, "kind": "keys", "clients": len(keyless), "groups": 0,
                                "left_out": len(keyless), "reason": KEYLESS})
    diverged_at = None
    c_part = participants_used(cfg, n)
    for t in range(cfg.T):
        ctx.begin_round(t)
        lr_t = decayed_lr(cfg.lr, t, cfg.decay)
        if c_part >= n:
            part = list(clients)
        else:
            part = [clients[i] for i in np.sort(part_rng.choice(n, size=c_part, replace=False))]
        if keyless:  # drawn over all n clients (the same draws whatever was lost), then thinned
            part = [p for p in part if p not in keyless]
        model = {"t": t, "V": V}
        if cfg.secure_noise and denoisers:  # who takes part: a client masks with its group's participants
            model["part"] = np.array([index[p] for p in part], dtype=np.int32)
        await ctx.broadcast(part, "model", model)
        ordinary_part = [p for p in part if p not in den_set]
        got = await ctx.gather("gradients", senders=ordinary_part, round=t, timeout=cfg.deadline)
        if cfg.secure_noise and overflowed(got):
            # a client's noise did not fit the fixed-point grid (or was not finite): no sum can
            # remove it, and a plain run's V would be about to stop being finite
            diverged_at = t + 1
            break
        uploads = got.messages
        if denoisers:
            expected = {dn: 0 for dn in denoisers}
            for p in ordinary_part:
                expected[assignment[p]] += 1
            part_set = set(part) if c_part < n else None
            for dn in denoisers:
                body = {"t": t, "expected": expected[dn]}
                if part_set is not None:  # (with everyone taking part, a denoiser knows it does)
                    body["own"] = dn in part_set  # it has (will have) this round's model
                await ctx.send(dn, "collect", body)
            sums = await ctx.gather("denoised", senders=denoisers, round=t, timeout=cfg.deadline)
            # Noise travels anonymously, so a denoiser's sum can only be removed exactly if it
            # covers the very uploads the server holds. A group (a denoiser and its ordinary
            # clients) counts in this round only if every upload of the group arrived and the
            # denoiser's sum too (a denoiser answers only when it received every noise message it
            # was told to expect); the rest of the round stays exactly lossless.
            # (a lost noise message shows as its denoiser's missing sum: the denoiser says nothing)
            broken_by: dict[str, str] = {}  # a broken group (its denoiser) -> the first kind missing from it
            for p in got.missing:
                broken_by.setdefault(assignment[p], "gradients")
            for dn in sums.missing:
                broken_by.setdefault(dn, "denoised")
            if broken_by:
                lost_sums = sums.missing
                uploads = [msg for msg in uploads if assignment[msg.sender] not in broken_by]
                sums = [msg for msg in sums if msg.sender not in broken_by]
                for kind, lost in (("gradients", got.missing), ("denoised", lost_sums)):
                    if lost:
                        groups = {dn for dn, k in broken_by.items() if k == kind}
                        lost_rounds.append({"round": t, "kind": kind, "clients": len(lost), "groups": len(groups),
                                            "left_out": sum(1 for p in part if (assignment.get(p) or p) in groups)})
        elif got.missing:
            lost_rounds.append({"round": t, "kind": "gradients", "clients": len(got.missing), "groups": 0,
                                "left_out": len(got.missing)})
        G = np.zeros((m, d), dtype=dt)
        C = np.zeros(m, dtype=np.int64)
        rows = 0
        named: dict[str, list] = {}  # per denoiser, the item ids of its group's uploads (its counts' bounds)
        with np.errstate(over="ignore", invalid="ignore"):  # divergence is checked below
            for msg in uploads:  # node-id order (Eq. 4 and |U_i u U'_i|)
                try:
                    items = msg.payload["items"]
                    accumulate_item_grads(G, C, items, msg.payload["grads"], ascending=True)
                except (KeyError, TypeError, ValueError, IndexError) as exc:
                    raise BadMessageError(msg, exc) from exc
                rows += items.shape[0]
                if denoisers:
                    named.setdefault(assignment[msg.sender], []).append(items)
            if denoisers:
                trains = set(part)  # a denoiser's own gradients (and count corrections) are in its sum
                for msg in sums:  # Eq. 5 and the count recovery, node-id order
                    try:
                        items = msg.payload["items"]
                        # each count in [-1 (its own rating) or 0, the group's uploads naming the item]
                        group = named.get(msg.sender, [])
                        bound = np.sort(np.concatenate(group).astype(np.int64)) if group else np.empty(0, np.int64)
                        low = -1 if cfg.count_own and msg.sender in trains else 0
                        remove_noise(G, C, items, msg.payload["sums"], msg.payload["counts"], bounds=(low, bound))
                    except (KeyError, TypeError, ValueError, IndexError) as exc:
                        raise BadMessageError(msg, exc) from exc
                    rows += items.shape[0]
        with np.errstate(over="ignore", invalid="ignore"):
            apply_mean_step(V, G, C, lr_t)  # Eq. 6
        await ctx.compute(2.0 * rows * d + 3.0 * m * d, "aggregate")
        if not np.isfinite(V).all():
            diverged_at = t + 1
            break
    await ctx.broadcast(clients, "stop", {"diverged_at": diverged_at})
    return {"V": V, "denoisers": denoisers, "assignment": assignment, "diverged_at": diverged_at,
            "missing": lost_rounds}


def _denoised_client_step(U, V, rated, r, t, lr, cfg: FedRecPPConfig, rng, with_noise: bool, mu=None):
    """Algorithm 2 TRAINING with denoising: U_u from rated items only (Eq. 7); gradients of the
    rated items, and (ordinary clients) of sampled items with HF/UA virtual ratings (Eq. 3), all
    taken with one user factor: U_u before its update (``order="code"``) or after it
    (``order="paper"``, Algorithm 2 lines 5-8). The virtual ratings come from U_u before the
    update in both (the copy U'_u of line 2). ``mu``: the user's mean rating (``user_mean(r,
    V.dtype)``, computed here if not given; a client's ratings never change: it computes it once)."""
    dt = V.dtype
    new_u, g_rated = pmf_batch_client(U, V[rated], r, lr, cfg.lam, order=cfg.order)
    if not with_noise:
        return new_u, g_rated, None, None
    sampled = sample_unrated(rng, rated, V.shape[0], cfg.rho) if cfg.rho > 0 else np.empty(0, np.int32)
    if sampled.shape[0] == 0:
        return new_u, g_rated, sampled, np.empty((0, V.shape[1]), dtype=dt)
    if cfg.strategy == "hf" and hf_active(t, cfg.T_predict, cfg.hf_convention):
        virt = virtual_ratings_hf(U, V[rated], r, V[sampled], lr, cfg.lam, cfg.T_local).astype(dt)
    else:
        virt = np.full(sampled.shape[0], user_mean(r, dt) if mu is None else mu, dtype=dt)
    # gradient noise (Eq. 8): the sampled items' gradients, with the U_u the rated items' gradients
    # were taken with (pmf_batch_client's "code" order takes them with the U_u it is given); a
    # second factor would set the sampled rows apart from the rated ones in the upload
    _, g_noise = pmf_batch_client(new_u if cfg.order == "paper" else U, V[sampled], virt, lr, cfg.lam,
                                  order="code")
    return new_u, g_rated, sampled, g_noise


_MODEL_ERRORS = (KeyError, TypeError, ValueError, IndexError, AttributeError)


def _assignment(msg, cfg: FedRecPPConfig, me: str = "", n_clients: int = 0) -> tuple:
    """``(role, denoiser, group)`` of an ``assign`` message, else ``BadMessageError`` naming it: a
    role other than "ordinary" or "denoiser" was taken as a denoiser's (which then collected no
    model of its own, and the run ended in a deadlock report), an ordinary client without a
    ``denoiser`` field as one of FedRec (eta = 0); with ``n_clients`` known, a denoiser that is
    not another client's node id (``me`` this client's) was a bare ``UnknownNodeError`` of the
    first noise message sent to it. ``group`` (secure noise): the client indices of its
    denoiser's group, as a set, or None."""
    a = msg.payload
    role = a.get("role") if type(a) is dict else None
    den = a.get("denoiser") if role == "ordinary" else None
    if (role not in ("ordinary", "denoiser") or (role == "ordinary" and "denoiser" not in a)
            or not (den is None or type(den) is str)):
        raise BadMessageError(msg, "assign must be {role: 'denoiser'} or {role: 'ordinary', denoiser: a node id "
                                   f"or None}}, got {a!r}")
    if den is not None and n_clients and (den == me or not _is_client(den, n_clients)):
        raise BadMessageError(msg, f"assign must name as denoiser another client's node id (of {n_clients} "
                                   f"clients), got {den!r}")
    group = None
    if cfg.secure_noise and den is not None:
        try:
            ids = np.asarray(a["group"])
            group = set(ids.tolist())
        except _MODEL_ERRORS as exc:
            raise BadMessageError(msg, exc) from exc
        # (an integer array's elements are ints: only another kind is looked at element by element)
        if ids.dtype.kind not in "iu" and not all(type(g) is int for g in group):
            raise BadMessageError(msg, f"group must be client indices, got {a['group']!r}")
    return role, den, group


def _is_client(node: str, n_clients: int) -> bool:
    """Whether ``node`` is the node id of one of ``n_clients`` clients (``client_name``). (ASCII
    digits only, as many as ``client_name`` writes: ``str.isdigit`` also takes '²', which ``int``
    refuses, and ``int`` refuses over 4,300 digits: a bare ValueError of the client, not the
    server's bad message.)"""
    digits = node[7:] if node.startswith("client/") else ""
    return (digits.isascii() and digits.isdigit() and len(digits) == len(client_name(0, n_clients)) - 7
            and int(digits) < n_clients and client_name(int(digits), n_clients) == node)


def _model(msg, n_items: int, cfg: FedRecPPConfig, dt) -> tuple:
    """``(t, V)`` of a ``model`` message, else ``BadMessageError`` naming it: t the round it is
    sent in, V an array of the run's dtype and shape (n_items x d; a V of other rows or width
    failed deep in the step as a bare IndexError or broadcast error, or, longer, had the client
    sample ids the server then blamed it for)."""
    p = msg.payload
    t = p.get("t") if type(p) is dict else None
    V = p.get("V") if type(p) is dict else None
    if type(t) is not int or t != msg.round:
        raise BadMessageError(msg, f"model must carry t = its round {msg.round}, got {t!r}")
    if (type(V) is not np.ndarray or V.dtype != dt or V.ndim != 2 or V.shape[1] != cfg.d
            or (n_items and V.shape[0] != n_items)):
        got = f"{V.dtype} of shape {V.shape}" if isinstance(V, np.ndarray) else type(V).__name__
        raise BadMessageError(msg, f"V must be a {dt} array of shape ({n_items or 'm'}, {cfg.d}), got {got}")
    return t, V


async def _denoiser_train(ctx, U, V, rated, r, t: int, lr: float, cfg: FedRecPPConfig, rng) -> tuple:
    """A denoiser's step on the model of iteration ``t``: ``(new U_u, (t, its rated items'
    gradients))``, kept for the collection of that iteration."""
    U_new, g_rated, _, _ = _denoised_client_step(U, V, rated, r, t, lr, cfg, rng, False)
    await ctx.compute(6.0 * rated.shape[0] * cfg.d, "train")
    return U_new, (t, g_rated)


async def client(ctx, rated: np.ndarray, ratings: np.ndarray, cfg: FedRecPPConfig, index: int = 0,
                 n_items: int = 0, n_clients: int = 0) -> np.ndarray:
    """An ordinary or denoising client (the server decides). Returns its final U_u. ``index``:
    its position among the clients (secure noise), ``n_items`` the number of items (``build``
    passes it: a denoiser checks noise ids against it, and secure noise's vectors have that many
    rows; 0: unknown, then the model's once one came), ``n_clients`` the number of clients
    (``build`` passes it: a denoiser refuses a ``collect`` expecting more noise messages than there
    are other clients; 0: unknown). A server's message it cannot use (an ``assign`` of no real
    role, a ``model`` whose t is not its round or whose V is not n_items x d of the run's dtype, a
    ``collect`` whose t is not its round) stops it with a ``BadMessageError`` naming the message."""
    dt = np.dtype(cfg.dtype)
    rng = ctx.rng
    U = init_user_factor(rng, cfg.d, scale=cfg.init_scale, dtype=dt)
    rated = np.asarray(rated, dtype=np.int32)
    r = np.asarray(ratings, dtype=dt)
    mu = user_mean(r, dt)  # UA's virtual rating (and HF's before T_predict): fixed, computed once
    first = await ctx.receive(("assign", "stop"))
    if first.kind == "stop":  # the assignment was lost: this client never took part
        return U
    role, my_denoiser, group = _assignment(first, cfg, ctx.node_id, n_clients)
    ctx.set_role(role)
    keys = None
    if group is not None:
        keys = await client_keys(ctx, index, cfg.secagg_neighbours, n_clients=n_clients or None)
        if not keys.keyed:
            # the server left it out of every round (its key is not in the published list, which
            # it has too): it is sent nothing but ``stop`` (already read if the list never came)
            if not keys.stopped:
                await ctx.receive("stop")
            return U
        # its group's client indices (ascending; only those a participant list can name), and a
        # flag per client to mark a round's participants in
        group_ids = np.sort(np.fromiter(group, dtype=np.int64, count=len(group)))
        group_ids = group_ids[(group_ids >= 0) & (group_ids < keys.pubs.shape[0])]
        in_part = np.zeros(keys.pubs.shape[0], dtype=bool)
    own: tuple | None = None  # a denoiser's gradients of the current iteration
    # the catalogue's size, a denoiser's bound for noise ids: known from the start (a denoiser
    # that has had no model yet, c < n, checked them against the int64 maximum only, and the
    # server's range check then blamed it for its client's bad id)
    m_items: int | None = n_items or None
    while True:
        msg = await ctx.receive(("model", "collect", "stop"))
        p = msg.payload
        if msg.kind == "stop":
            return U
        if msg.kind == "model":
            t, V = _model(msg, n_items, cfg, dt)
            m_items = m_items or V.shape[0]
            lr = decayed_lr(cfg.lr, t, cfg.decay)
            if my_denoiser is None and role == "ordinary":  # eta = 0: FedRec with HF
                up = batch_client_step(U, V, rated, r, t=t, lr=lr, lam=cfg.lam, rng=rng, rho=cfg.rho,
                                       strategy=cfg.strategy, T_predict=cfg.T_predict,
                                       T_local=cfg.T_local, hf_convention=cfg.hf_convention,
                                       order=cfg.order)
                U = up.U
                await ctx.compute(6.0 * up.items.shape[0] * cfg.d, "train")
                await ctx.send(SERVER, "gradients", sort_by_item({"items": up.items, "grads": up.grads}))
                continue
            if role != "ordinary":
                U, own = await _denoiser_train(ctx, U, V, rated, r, t, lr, cfg, rng)
                continue
            try:
                U_new, g_rated, sampled, g_noise = _denoised_client_step(U, V, rated, r, t, lr, cfg, rng, True, mu)
                if keys is not None:
                    # the group's participants this round (ascending), vectorised: a set of every
                    # participant and two sorted intersections per client and round were O(c) in
                    # Python per client
                    part = checked_members(msg, p["part"], keys, "part")
                    in_part[part] = True
                    members = group_ids[in_part[group_ids]]
                    in_part[part] = False
            except _MODEL_ERRORS as exc:
                raise BadMessageError(msg, exc) from exc
            U = U_new
            k = rated.shape[0] + (sampled.shape[0] if sampled is not None else 0)
            await ctx.compute(6.0 * k * cfg.d, "train")
            if keys is not None:
                # the noise on the fixed-point grid, in the upload as in the masked sum, so that
                # the server removes exactly what it received (bit for bit in float64)
                # (the range of a sum over the group's keyed members, which the masked upload
                # below checks again: it must not fail after the upload has gone)
                parties = keys.parties(members)
                try:
                    g_noise = decode(encode(g_noise, parties=parties)).reshape(g_noise.shape).astype(dt)
                except OverflowError:
                    # noise the grid cannot hold (not finite, or beyond its range: the run is
                    # diverging) can be neither masked nor removed exactly: the client tells the
                    # server so in place of its upload, and sends its denoiser nothing
                    await ctx.send(SERVER, "gradients", {"overflow": True})
                    continue
            items = np.concatenate([rated, sampled])
            grads = np.concatenate([g_rated, g_noise])
            await ctx.send(SERVER, "gradients", sort_by_item({"items": items, "grads": grads}))
            if keys is None:
                await ctx.send(my_denoiser, "noise", {"items": sampled, "grads": g_noise}, anonymous=True)
            else:
                dense = dense_rows(V.shape[0], cfg.d, sampled, g_noise, counts=True)
                await ctx.compute(float(dense.size * (1 + keys.k)), "mask")
                await ctx.send(my_denoiser, "noise", {"masked": keys.upload(dense, members, t)}, anonymous=True)
            continue
        # COLLECTING (denoisers only)
        if (type(p) is not dict or type(p.get("t")) is not int or type(p.get("expected")) is not int
                or p["expected"] < 0 or type(p.get("own", True)) is not bool):
            # (a bad count was a bare ValueError of the denoiser's gather, a float t waited for a
            # model that never matched)
            raise BadMessageError(msg, f"collect must be {{t: int, expected: int >= 0[, own: bool]}}, got {p!r}")
        if p["t"] != msg.round or (n_clients and p["expected"] >= n_clients):
            # a t other than the round it is sent in (negative, huge, another round's) waited for
            # a model that never came, an expected count beyond the other clients for noise that
            # never came: the run ended in a deadlock report instead of an error
            raise BadMessageError(msg, f"collect must name its own round (t = {msg.round}) and expect at most "
                                       f"{n_clients - 1 if n_clients else 'the other clients'} noise messages, "
                                       f"got t = {p['t']}, expected = {p['expected']}")
        t = p["t"]
        while p.get("own", True) and (own is None or own[0] != t):
            # this round's model is still on its way: on a flow-level link the small collect can
            # overtake it, and a sum without the denoiser's own gradients would silently lose its
            # ratings from the round (with a deadline, a model that does not come is given up)
            m = await ctx.receive("model", timeout=cfg.deadline)
            if m is None:
                break
            q_t, q_V = _model(m, n_items, cfg, dt)
            m_items = m_items or q_V.shape[0]
            U, own = await _denoiser_train(ctx, U, q_V, rated, r, q_t, decayed_lr(cfg.lr, q_t, cfg.decay), cfg, rng)
        if p.get("own", True) and (own is None or own[0] != t):
            continue  # no model, no own gradients: say nothing, the server leaves this group out
        expected = p["expected"]
        # round t's noise only: an earlier round's (late) is discarded; a later round's (a client
        # sends round t + 1's once the server has closed round t) stays in the mailbox for the
        # collect of its own round. In gather's order (anonymous messages: by their content).
        noise = (await ctx.gather("noise", count=expected, round=t, timeout=cfg.deadline)).messages
        if len(noise) != expected:
            # an incomplete sum cannot be removed exactly: say nothing, and the server leaves this
            # group out of the round
            own = None
            continue
        if own is not None and own[0] == t:
            own_items, own_grads = rated, own[1]
        else:
            own_items, own_grads = np.empty(0, np.int32), np.empty((0, cfg.d), dtype=dt)
        if cfg.secure_noise:
            # the masks cancel in the sum of the group's messages: only that sum is readable
            if noise:
                vec = decode(unmask_sum(masked_vectors(noise, n_items * (cfg.d + 1))))
            else:
                vec = np.zeros(n_items * (cfg.d + 1))
            noise_sum, noise_counts = vec[: n_items * cfg.d].reshape(n_items, cfg.d), vec[n_items * cfg.d:]
            items, sums, counts = denoiser_sums_dense(noise_sum, noise_counts, own_items, own_grads, dtype=dt,
                                                      count_own=cfg.count_own)
            touched = len(noise) * n_items * (cfg.d + 1) + own_items.shape[0]
        else:
            for msg in noise:
                # a noise message's rows are summed per item: a repeated id would be counted
                # once, a block of the wrong shape broadcast, ids as a list fail as a bare
                # AttributeError, rows as a list or of integers be summed as numbers (the sender
                # is anonymous, so the error names the kind and round only)
                try:
                    check_rows(msg.payload["items"], msg.payload["grads"],
                               np.iinfo(np.int64).max if m_items is None else m_items, cfg.d, "noise",
                               distinct=True, upload=True)
                except (KeyError, TypeError, ValueError, IndexError) as exc:
                    raise BadMessageError(msg, exc) from exc
            parts_items = [msg.payload["items"] for msg in noise]
            parts_grads = [msg.payload["grads"] for msg in noise]
            # content order (gather), then the denoiser's own gradients (Eq. 9)
            with np.errstate(over="ignore", invalid="ignore"):  # (a diverging model: the server checks V)
                items, sums, counts = denoiser_sums(parts_items, parts_grads, own_items, own_grads, d=cfg.d,
                                                    dtype=dt, count_own=cfg.count_own)
            touched = sum(it.shape[0] for it in parts_items) + own_items.shape[0]
        own = None
        await ctx.compute(float(touched * cfg.d), "denoise")
        await ctx.send(SERVER, "denoised", {"items": items.astype(np.int32), "sums": sums,
                                            "counts": counts.astype(np.int32)})


# --------------------------------------------------------------------------------------------


@dataclass
class FedRecPPJob:
    cfg: FedRecPPConfig
    n_users: int
    n_items: int
    clients: list[str]
    indptr: np.ndarray
    indices: np.ndarray

    def collect(self, run) -> Result:
        """``params``: U and V; ``model``: a ``TrainResult``; ``info``: ``denoisers``,
        ``assignment`` (ordinary client -> its denoiser), ``diverged_at``, ``missing``,
        ``lost_clients`` and ``lost_users`` (their user indices: zero U rows, to leave out when
        scoring the model), ``sampling_all`` (the users for whom rho x |I_u| exceeds their
        unrated items, so they sample every unrated item: rho is capped there), ``c_used`` (the
        clients that took part in each iteration: ``c``, all of them for ``c = 0``, capped at the
        number of clients) and ``adjusted`` (one record ``{setting, asked, used, why}`` when ``c``
        was larger than the number of clients, else empty: ``fedsim run`` reports it). FedRec++
        makes no federated evaluations (``metrics`` is empty)."""
        srv = server_result(run)
        U = np.empty((self.n_users, self.cfg.d), dtype=np.dtype(self.cfg.dtype))
        gone, gone_users = [], []
        for u, name in enumerate(self.clients):
            if name in run.results:
                U[u] = run.results[name]
            else:  # dropped out: its private factor is lost with it
                U[u] = 0.0
                gone.append(name)
                gone_users.append(u)
        model = TrainResult("FedRec++", U, srv["V"], None, self.indptr, self.indices,
                            diverged_at=srv["diverged_at"], params=self.cfg.to_dict(),
                            iterations=srv["diverged_at"] or self.cfg.T)
        if model.diverged_at is None and not np.isfinite(U).all():
            model.diverged_at = self.cfg.T
        info = {"denoisers": srv["denoisers"], "assignment": srv["assignment"], "diverged_at": model.diverged_at,
                "missing": srv["missing"], "lost_clients": gone,
                "lost_users": gone_users,
                "sampling_all": users_sampling_all(self.indptr, self.n_items, self.cfg.rho)}
        info["c_used"] = participants_used(self.cfg, self.n_users)
        info["adjusted"] = []
        if self.cfg.c > self.n_users:
            info["adjusted"].append({"setting": "c", "asked": self.cfg.c, "used": info["c_used"],
                                     "why": "there is only 1 client, taking part in every iteration" if self.n_users == 1
                                     else f"there are only {self.n_users} clients, every one of them taking part in "
                                          "every iteration"})
        return Result("fedrecpp", self.cfg, {"U": U, "V": srv["V"]}, [], run, info=info, model=model)


def build(net, data, cfg: FedRecPPConfig | None = None, *, test=None, resume=None) -> FedRecPPJob:
    """Place a FedRec++ server and one client per user of ``data`` (training ``Ratings``) on
    ``net``. Raises ``ConfigError`` for an impossible ``eta`` (or one above n/2 unless
    ``cfg.allow_exposed``). FedRec++ has no federated evaluation (``test`` is ignored: evaluate
    the result's model) and cannot be resumed. Raises ``ValueError`` for data without users
    (``common.check_data``)."""
    cfg = cfg or FedRecPPConfig()
    if resume is not None:
        raise ValueError("FedRec++ runs cannot be resumed; run for more iterations (T) instead")
    check_data("FedRec++", data)
    n_users, n_items = int(data.n_users), int(data.n_items)
    check_eta(cfg.eta, n_users, cfg.allow_exposed)
    if cfg.secure_noise and cfg.eta == 0:
        raise ConfigError("secure_noise needs denoisers (eta >= 1)", "secure_noise")
    dt = np.dtype(cfg.dtype)
    indptr, indices, values = to_csr(*as_arrays(data), n_users, dt)
    clients = client_names(n_users)
    net.set_unit(cfg.d)
    net.before_run(warm_up)  # the actors call compiled kernels: numba's compiler started once (Network.before_run)
    net.add_node(SERVER, server, clients, n_items, cfg, role="server")
    for u, name in enumerate(clients):
        lo, hi = indptr[u], indptr[u + 1]
        extra = {"index": u} if cfg.secure_noise else {}  # the defence's input only
        net.add_node(name, client, indices[lo:hi], values[lo:hi], cfg, n_items=n_items, n_clients=n_users, **extra)
    return FedRecPPJob(cfg, n_users, n_items, clients, indptr, indices)


def tiny(clients: int = 3, rounds: int = 2, seed: int = 0):
    """A few users of the ``tiny`` synthetic preset, one denoiser, rho = 1, d = 8."""
    from .presets import tiny_ratings

    return tiny_ratings(clients, seed), FedRecPPConfig(d=8, T=rounds, rho=1.0, eta=1, allow_exposed=True)


SPEC = register(ProtocolSpec(
    name="fedrecpp",
    summary="FedRec++: FedRec PMF(B) with denoising clients that make hybrid filling lossless",
    Config=FedRecPPConfig,
    kinds=(
        Kind("assign", "server", "client", "setup", "{role, denoiser}: each client's role and its denoiser"),
        # roles change when "assign" is read: the first model download may still find a client
        Kind("model", "server", ("client", "ordinary", "denoiser"), "training", "{t, V: float[m, d]}"),
        Kind("gradients", "ordinary", "server", "training",
             "{items, grads} over rated and sampled items, items strictly increasing (eta = 0: FedRec with "
             "hybrid filling; secure noise: "
             "{overflow: true} instead when the noise does not fit the fixed-point grid: the run diverged)"),
        # a denoiser that dropped out before it read its assign is still a client to its group
        Kind("noise", "ordinary", ("denoiser", "client"), "training",
             "{items, grads} of the sampled items, anonymous, to the client's denoiser (secure noise: "
             "{masked: uint64[m (d + 1)]})", anonymous=True),
        # every client a denoiser (one client, eta = n): round 0's collect follows the assign at
        # once, before the denoiser has read it (no upload to wait for)
        Kind("collect", "server", ("client", "denoiser"), "training", "{t, expected}: noise messages to expect"),
        Kind("denoised", "denoiser", "server", "training", "{items, sums, counts}: Eq. 9 and the count correction"),
        *key_exchange_kinds("ordinary", "secure noise", receivers=("ordinary", "client")),
        # T = 0: the stop follows the assign before any client has read it
        Kind("stop", "server", ("client", "ordinary", "denoiser"), "control", "{diverged_at}"),
    ),
    build=build, tiny=tiny, data="explicit", metric="rmse", rounds_field="T",
    paper="Liang, Pan, Ming: FedRec++: Lossless Federated Recommendation with Explicit Feedback (AAAI 2021)",
))

# the kinds SPEC declares for training (model, gradients, noise, collect, denoised), as FPL's
# and FCF's (derived; the hand list it was had the uploads alone and was read nowhere)
TRAINING_KINDS = SPEC.kinds_for("training")
