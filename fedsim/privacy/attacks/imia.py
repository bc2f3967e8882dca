"""The reference attack: interaction-level membership inference (IMIA).

Yuan et al., "Interaction-level Membership Inference Attack Against Federated Recommender
Systems" (WWW 2023; public code ``hi-weiyuan/FedRec_IMIA``). The curious server attacks a user at
the first round it sees her upload. It knows the model it sent and the items she uploaded
updates for. It guesses which uploaded items are her positives, trains a *shadow* copy of her
client (a fresh user factor, the model it sent, her protocol's own update rule) on that guess,
and compares, item by item, the update the shadow produces with the one she really sent: items
whose simulated update is closest to the real one are taken to be labelled right. It confirms
the labels of the closest ``lam`` share of the still-unconfirmed items, keeps the confirmed
positives, re-guesses the rest at random, and repeats until it has confirmed as many positives
as it expects (``select_ratio`` of the pool) or ``max_iter`` rounds.

Written for this project from the paper's description and the public code's structure (not
copied): the paper's shadow is a model trained with binary cross-entropy on the guessed labels;
here each protocol's own client step is the shadow, with binary labels where the protocol has a
rating (FedRec's explicit ratings have no "positive" value: the shadow uses 1 for a guessed
rated item and 0 for a guessed sampled one, as the published attack does for every protocol).
``select_ratio``: the share of positives in the pool the server expects: ``1 / (1 + rho)`` for
FedRec and FedRec++ (public), the published default 0.2 for the others.

FPL's shadow is the client's round with the run's own options (``merge``, ``local_item_updates``,
``user_update`` of the public ``FPLConfig``; it used to replay the defaults whatever the run's),
its rows summed per item as the real upload's are (with ``merge`` "last" one row per item: the
last delta, as the client sends it).

The shadow steps with the learning rate the client used for that upload, which the server knows:
FedRec's batch client and FedRec++'s decay ``lr`` by the iteration ``t`` of the model the server
sent (``decayed_lr(lr, t, decay)``); FedRec's stochastic client decays its own rate by the number
of its calls before this one, i.e. the models the server sent it before (those of rounds outside
the view's window are in ``View.outside``), so that a window starting after round 0 replays the
rate of that round, not the first round's. (On a lossy network a model the server sent may not
have reached the client; the server cannot tell, and counts it.)
"""

from __future__ import annotations

import numpy as np

from ...math import bpr as bprm
from ...math.fcf import fcf_client
from ...math.pmf import decayed_lr, init_user_factor, pmf_batch_client, pmf_sgd_client
from ...seeding import node_rng
from ..metrics import Guess
from ..views import View, ViewSpec
from .base import Attack

__all__ = ["IMIA", "replay_lr"]


def replay_lr(cfg, call: int, stochastic: bool) -> float:
    """The learning rate of a FedRec (FedRec++) client's ``call`` (the decay exponent: the
    model's iteration t for a batch client, the client's calls before this one for a stochastic
    one), as the client computes it (``fedsim.protocols.fedrec.client``)."""
    if stochastic:
        return decayed_lr(cfg.client_lr if cfg.client_lr is not None else cfg.lr, call, cfg.decay)
    return decayed_lr(cfg.lr, call, cfg.decay)


def _fedrec_shadow(cfg, model, items, labels, rng, call, stochastic):
    V = np.asarray(model["V"])
    Vr = V[items]
    U = init_user_factor(rng, cfg.d, scale=cfg.init_scale, dtype=V.dtype)
    r = labels.astype(V.dtype)
    lr = replay_lr(cfg, call, stochastic)
    order = getattr(cfg, "order", "code")  # the client's update order (the paper's: lr moves the item rows)
    if stochastic:
        _, g = pmf_sgd_client(U, Vr, r, lr, cfg.lam, order=order)
    else:
        _, g = pmf_batch_client(U, Vr, r, lr, cfg.lam, order=order)
    return np.asarray(g, dtype=np.float64)


def _fpl_shadow(cfg, model, items, labels, rng, call, stochastic):
    theta = np.asarray(model["theta"])
    d = cfg.d
    pos = items[labels > 0]
    out = np.zeros((items.size, d + 1))
    if pos.size == 0 or pos.size == items.size:
        return out
    sampler = bprm.make_triple_sampler(pos, theta.shape[0], catalogue=np.unique(items))
    p = bprm.init_user_factor(d, rng)
    # the client's own update rule (its run's options are public: ``Public.config``); pi = 1: a
    # guessed positive is an uploaded item, so the shadow sends every positive update it draws
    _, up = bprm.fpl_client_round(p, theta[:, :d], theta[:, d], sampler, cfg.triples, cfg.lr, 1.0, rng, reg=cfg.reg,
                                  merge=cfg.merge, local_item_updates=cfg.local_item_updates,
                                  user_update=cfg.user_update)
    where = np.searchsorted(items, up.items)
    np.add.at(out[:, :d], where, up.deltas)
    np.add.at(out[:, d], where, up.bias_deltas)
    return out


def _fcf_shadow(cfg, model, items, labels, rng, call, stochastic):
    Q = np.asarray(model["Q"], dtype=np.float64)
    _, g = fcf_client(Q, items[labels > 0], cfg.alpha, cfg.lam)
    return g[items]


class IMIA(Attack):
    """The reference attack (module docstring). ``lam``: share of the pool confirmed per
    iteration (published default 0.9); ``max_iter``; ``select_ratio`` (None: from the protocol,
    see the module docstring); ``max_users``: attack at most this many users (a seeded sample;
    None: all); ``seed`` for the guesses and the shadows' initialisations."""

    name = "imia"
    view = ViewSpec.server()
    protocols = ("fedrec", "fedrecpp", "fpl", "fcf")

    def __init__(self, lam: float = 0.9, max_iter: int = 10, select_ratio: float | None = None,
                 max_users: int | None = None, seed: int = 0) -> None:
        self.lam = float(lam)
        self.max_iter = int(max_iter)
        self.select_ratio = select_ratio
        self.max_users = max_users
        self.seed = int(seed)

    def shadow(self, cfg, model, items, labels, rng, call, stochastic) -> np.ndarray:
        """The per-item update rows a client of the attacked protocol would send for ``items``
        labelled ``labels`` (1: positive), from a fresh user factor and the ``model`` the server
        sent; ``call``: the decay exponent of the client's learning rate for it (``replay_lr``;
        ``stochastic``: FedRec's sequential models)."""
        if "Q" in model:
            return _fcf_shadow(cfg, model, items, labels, rng, call, stochastic)
        if "theta" in model:
            return _fpl_shadow(cfg, model, items, labels, rng, call, stochastic)
        return _fedrec_shadow(cfg, model, items, labels, rng, call, stochastic)

    def calls(self, view: View) -> dict[str, int]:
        """Per user attacked (before ``max_users``): the decay exponent of the learning rate the
        shadow replays her first observed upload with (``replay_lr``; FedRec and FedRec++ only
        use it)."""
        return {u: c for u, (_, _, c) in self._first_uploads(view).items()}

    def _first_uploads(self, view: View):
        proto, cfg = view.public.protocol, view.public.config
        # the uploads, masked ones (secure aggregation) included: the server saw them and reads nothing
        up_kinds = {"fedrec": ("gradients", "masked"), "fedrecpp": ("gradients",), "fpl": ("update", "masked"),
                    "fcf": ("gradients",)}[proto]
        stochastic = proto == "fedrec" and getattr(cfg, "style", "batch") != "batch"
        last: dict[str, object] = {}
        calls: dict[str, int] = {}  # models sent to each client in the view so far
        first: dict[str, tuple] = {}
        for m in view.messages:
            if m.outgoing and m.kind == "model":
                calls[m.receiver] = calls.get(m.receiver, 0) + 1
                last[m.receiver] = m
            elif not m.outgoing and m.kind in up_kinds and m.sender is not None and m.sender not in first:
                model = last.get(m.sender)
                if m.payload is None or model is None or model.payload is None or model.round != m.round:
                    continue
                if stochastic:
                    # the client's calls before this one: every model sent to it before, those of
                    # the rounds the window leaves out included (counting from the window's first
                    # round replayed a later call with the first call's rate)
                    call = (calls[m.sender] - 1
                            + view.count_outside("model", before=model.round, receiver=m.sender))
                else:
                    # a batch client decays by the iteration of the model it got (its round label)
                    call = int(model.payload["t"]) if isinstance(model.payload, dict) and "t" in model.payload \
                        else int(model.round)
                first[m.sender] = (model.payload, m.payload, call)
        return first

    def _pick(self, first) -> list[str]:
        users = sorted(first)
        if self.max_users is not None and len(users) > self.max_users:
            pick = node_rng(self.seed, "imia:users").choice(len(users), size=self.max_users, replace=False)
            users = [users[i] for i in sorted(pick)]
        return users

    def sample(self, view: View) -> tuple[str, ...] | None:
        """With ``max_users`` below the users it could attack: the seeded sample it attacks
        (``Attack.sample``), a user whose upload it cannot read (masked) among them; else None."""
        first = self._first_uploads(view)
        if self.max_users is None or len(first) <= self.max_users:
            return None
        return tuple(self._pick(first))

    def run(self, view: View) -> dict[str, Guess]:
        proto, cfg = view.public.protocol, view.public.config
        first = self._first_uploads(view)
        users = self._pick(first)
        out = {}
        for user in users:
            model, up, call = first[user]
            g = self._attack_one(proto, cfg, model, up, call, node_rng(self.seed, f"imia:{user}"))
            if g is not None:
                out[user] = g
        return out

    def _real(self, proto, cfg, up, n_items):
        """The pool (items, ascending) and the real per-item update rows."""
        if proto == "fcf":
            if "grad" not in up:
                return None, None
            return np.arange(n_items, dtype=np.int64), np.asarray(up["grad"], dtype=np.float64)
        if "items" not in up:
            return None, None  # masked: nothing to compare with
        items = np.asarray(up["items"], dtype=np.int64)
        rows = np.asarray(up["rows"] if proto == "fpl" else up["grads"], dtype=np.float64)
        pool, where = np.unique(items, return_inverse=True)
        real = np.zeros((pool.size, rows.shape[1]))
        np.add.at(real, where.ravel(), rows)
        return pool, real

    def _attack_one(self, proto, cfg, model, up, call, rng) -> Guess | None:
        n_items = int(np.asarray(model["Q"] if proto == "fcf" else (model["theta"] if proto == "fpl" else
                                                                      model["V"])).shape[0])
        pool, real = self._real(proto, cfg, up, n_items)
        if pool is None or pool.size == 0:
            return None
        shadow = self.shadow
        stochastic = proto == "fedrec" and getattr(cfg, "style", "batch") != "batch"
        ratio = self.select_ratio
        if ratio is None:
            ratio = 1.0 / (1.0 + float(cfg.rho)) if proto in ("fedrec", "fedrecpp") else 0.2
        k = pool.size
        expect = max(1, int(round(ratio * k)))
        state = np.zeros(k)  # +1 confirmed positive, -1 confirmed negative, 0 unconfirmed
        guess = np.zeros(k, dtype=bool)
        guess[rng.choice(k, size=min(expect, k), replace=False)] = True
        per_iter = max(1, int(self.lam * k))
        for _ in range(self.max_iter):
            sim = shadow(cfg, model, pool, guess.astype(np.float64), rng, call, stochastic)
            dist = np.linalg.norm(real - sim, axis=1)
            open_ = np.flatnonzero(state == 0)
            take = open_[np.argsort(dist[open_], kind="stable")[:per_iter]]
            state[take] = np.where(guess[take], 1.0, -1.0)
            pos = int((state > 0).sum())
            rest = np.flatnonzero(state == 0)
            if pos >= expect or rest.size == 0:
                break
            guess = state > 0
            fill = min(expect - pos, rest.size)
            guess[rng.choice(rest, size=fill, replace=False)] = True
        return Guess(pool, state, pool[state > 0])
