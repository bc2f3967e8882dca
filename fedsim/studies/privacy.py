"""The privacy audit study: every protocol run under observation, every attack that applies run
through its declared view, scored against the true item sets, beside the run's accuracy and its
costs from the ledger (docs/privacy.md; the scenario is ``scenarios/privacy_audit.py``).

A grid point is an ``AuditTask``: one protocol configuration (a defence is a configuration), the
data, the rounds whose payloads are recorded, the attacks to run (``AttackSpec``: an attack name,
its parameters and the rounds its view covers). ``run_task`` (picklable, for worker processes)
runs the protocol with a ``Recorder`` on the network the run's ``NetSpec`` describes, runs the
attacks, and returns plain rows:

``leakage``  one row per (task, attack, rounds observed): precision, recall, F1, AUC, exact
             recovery (means over the users the server saw upload in those rounds, 95 %
             intervals: ``users``) and the random-guess baseline at the same set size, with the
             per-user scores (``scored``, to pool seeds); ``attacked`` (the users scored whom the
             attack answered for; the others are misses) and ``unseen`` (clients with a true set
             and no upload in the window: lost, dropped out, not drawn; not scored),
             ``unrecorded_users`` (seen, but no upload payload recorded: not scored),
             ``partly_seen`` (users scored whom the server called in some round of the window
             and saw no upload of theirs in it: ``fedsim.privacy.partly_seen``); the run's
             accuracy (FedRec and FedRec++: over the test ratings of the clients present at the
             end; NaN, with ``unevaluated`` saying why, when none could be had: every client with
             test ratings dropped out, the model diverged), ``missing_uploads`` (the uploads of any kind but evaluation that the server
             waited for with a deadline and did not get: the ledger's missing records) and
             ``lost_clients`` (what a faulty run left out); bytes
             per client (everything but evaluation traffic, from the ledger); protocol and attack
             seconds.
``sizes``    the size-only observer per task: exact |I_u| recoveries, median relative error, rank
             correlation.
``links``    the network observer of FedRec++'s anonymous channel: share of noise messages linked
             to their true sender, against one over the number of uploads of that round.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..kernel import NetSpec, network_record
from ..protocols import REGISTRY
from ..protocols.common import client_names
from ..privacy.attacks import (
    IMIA, FCFLine, FedAvgIdleRows, FPLNeverNegative, FPLSign, ImpliedRatings, Intersection, NoiseLinking, NoiseMatching,
    PersonalFRIdleRows, PersonalFRIndices, SgdChain, SizeOnly, SvdppODelta, score_sizes, size_estimate,
)
from ..privacy.attacks.base import run_attack
from ..privacy.audit import UPLOAD_KINDS, Capture, observed_clients, partly_seen, score_links, truth_of
from ..privacy.metrics import score_inference, summarize
from ..privacy.record import Recorder
from ..privacy.views import Public
from ..seeding import node_rng

__all__ = ["ATTACKS", "AttackSpec", "AuditTask", "FoldData", "SplitData", "UPLOAD_KINDS", "client_costs", "run_task"]

ATTACKS = {
    "implied_ratings": ImpliedRatings, "sgd_chain": SgdChain, "svdpp_odelta": SvdppODelta,
    "intersection": Intersection, "noise_matching": NoiseMatching, "noise_linking": NoiseLinking,
    "fpl_sign": FPLSign, "fpl_never_negative": FPLNeverNegative, "fcf_line": FCFLine,
    "personalfr_indices": PersonalFRIndices, "personalfr_idle_rows": PersonalFRIdleRows, "imia": IMIA,
    "fedavg_idle_rows": FedAvgIdleRows,
    "size_only": SizeOnly,
}


@dataclass(frozen=True)
class AttackSpec:
    """One attack of a task: ``name`` (a key of ``ATTACKS``), ``kw`` (its parameters),
    ``rounds`` (the view's rounds: a tuple; None: every recorded round) and ``window`` (a label
    for the table, e.g. "1 round")."""

    name: str
    kw: tuple = ()
    rounds: tuple | None = None
    window: str = "all"

    def build(self):
        return ATTACKS[self.name](**dict(self.kw))


@dataclass(frozen=True)
class AuditTask:
    """One grid point. ``setting``: the table's description of it; ``config``: the protocol's
    Config; ``data``: training ``Ratings`` (FPL and FCF: an ``ImplicitSplit``); ``test``:
    ``(users, items, ratings)`` for FedRec's RMSE; ``net``: the ``NetSpec``; ``observe``: rounds
    whose payloads are recorded (None: all); ``targets``: record and score only this many clients
    (a seeded sample; their messages to and from the server; None: all); ``epochs``: networks to run in turn (FPL epochs; each resumes the
    previous one); ``checkpoints``: epochs after which the attacks are scored again (rounds
    observed so far)."""

    label: str
    protocol: str
    setting: dict
    config: Any
    data: Any  # Ratings, an ImplicitSplit, or a picklable recipe (FoldData, SplitData)
    test: Any
    seed: int
    net: Any
    observe: tuple | None
    targets: int | None
    attacks: tuple
    epochs: int = 1
    checkpoints: tuple = ()
    ledger_dir: str | None = None
    build_kw: dict = field(default_factory=dict)


@dataclass(frozen=True)
class FoldData:
    """A task's explicit data as a picklable ``Fold`` (``Ratings`` are not picklable): ``load()``
    gives ``(training Ratings, test (users, items, ratings))``."""

    fold: Any

    def load(self):
        return self.fold.train_ratings(), self.fold.test


@dataclass(frozen=True)
class SplitData:
    """A task's implicit data as the recipe of its ``ImplicitSplit``: ``resolve(spec)`` then
    ``prepare(**kw)`` (deterministic), rebuilt in the worker process and cached there."""

    spec: str
    kw: tuple = ()

    def load(self):
        return _split(self.spec, self.kw), None


_SPLITS: dict = {}


def _split(spec: str, kw: tuple):
    key = (spec, kw)
    if key not in _SPLITS:
        from ..data import resolve
        from .fpl import loader_min_interactions, prepare

        args = dict(kw)
        ratings = resolve(spec)
        # a loader that filtered users itself (Foursquare files keep > 20 venues by default) is
        # asked for everyone when the audit keeps more users than it did, as the FPL scenarios do
        if loader_min_interactions(ratings) > int(args.get("min_interactions", 21)):
            ratings = resolve(spec, user_filter=None)
        _SPLITS[key] = prepare(ratings, **args)
    return _SPLITS[key]


def client_costs(ledgers: list, n_clients: int, skip_kinds: tuple) -> dict[str, float]:
    """Bytes per client over ``ledgers`` (everything but ``skip_kinds``): ``up_bytes`` sent by
    clients (every node but the server), ``down_bytes`` delivered to them, ``messages`` per
    client, and ``server_bytes`` (received by the server)."""
    up = down = msgs = srv = 0
    for led in ledgers:
        v = led.select(exclude_kinds=skip_kinds)
        t_up = v.select(src=[n for n in led.roles if n != "server"]).totals()
        t_down = v.select(fate="delivered", dst=[n for n in led.roles if n != "server"]).totals()
        t_srv = v.select(fate="delivered", dst="server").totals()
        up += t_up.wire_bytes
        down += t_down.wire_bytes
        msgs += t_up.messages + t_down.messages
        srv += t_srv.wire_bytes
    n = max(int(n_clients), 1)
    return {"up_bytes": up / n, "down_bytes": down / n, "bytes_per_client": (up + down) / n,
            "messages_per_client": msgs / n, "server_in_bytes": float(srv)}


def _targets(task: AuditTask, clients: list[str]) -> frozenset | None:
    if task.targets is None or task.targets >= len(clients):
        return None
    pick = node_rng(task.seed, "privacy:targets").choice(len(clients), size=int(task.targets), replace=False)
    return frozenset(clients[i] for i in sorted(pick))


def _accuracy(task: AuditTask, result) -> tuple[str, float, str | None]:
    """``(metric, value, unevaluated)``: the run's accuracy (FedRec, FedRec++: test RMSE; FPL,
    FCF: P@10), over the clients present at the end, and, when the task asked for one (test
    ratings given, or an implicit split) but none could be had, NaN and why in words (the model
    diverged; every user with test ratings dropped out; ...). A run with nothing to evaluate on
    (no test ratings: the linking runs) is NaN with None."""
    if task.protocol in ("fedrec", "fedrecpp"):
        if task.test is None or result.model is None:
            return "rmse", math.nan, None
        if result.model.diverged_at is not None:
            return "rmse", math.nan, f"the model diverged (round {int(result.model.diverged_at)})"
        # a client that dropped out took its user factor with it (zeros in the model, which
        # predict the lowest rating): its test ratings are left out (lost_clients says how many)
        users, items, values, left_out = result.present(*task.test[:3])
        if not len(users):  # a mean over no rating is no figure (NaN, with NumPy's "Mean of empty slice" warnings)
            return "rmse", math.nan, (f"all {left_out} users with test ratings dropped out" if len(task.test[0])
                                      else "the test ratings are empty")
        return "rmse", float(result.model.evaluate(users, items, values)[1]), None
    if task.protocol in ("fpl", "fcf") and hasattr(task.data, "evaluate"):
        from ..math.bpr import bpr_scores
        from ..math.metrics import precision_at, top_n

        if task.protocol == "fpl":
            th = result.params["theta"].astype(np.float64)
            d = th.shape[1] - 1
            scores = bpr_scores(result.params["P"], th[:, :d], th[:, d])
        else:
            scores = result.params["P"] @ result.params["Q_sent"].T
        lost = result.info.get("lost_users") or []
        if not len(lost):
            return "p@10", float(task.data.evaluate(scores)["test"]["p"]), None
        # a client that dropped out took its user factor with it (zeros): its users are left out,
        # as FPL's own evaluation and FedRec's error leave them out (lost_clients says how many)
        ev = task.data.evaluators["test"]
        if not np.isfinite(scores).all():
            return "p@10", math.nan, "the model's scores are not finite"
        per = precision_at(top_n(scores, ev.exclude, ev.n), ev.truth, ev.n, per_user=True)
        per[np.asarray(lost, dtype=np.int64)] = np.nan
        if not np.isfinite(per).any():
            return "p@10", math.nan, f"all {len(lost)} users with test items dropped out"
        return "p@10", float(np.nanmean(per)), None
    return "", math.nan, None


def reference_label(task: AuditTask) -> str:
    """What keys a task's opaque message references (with its seed): the protocol and its
    setting, not the task's label, which numbers the task in its grid. Attacks that break ties
    by reference (``noise_linking`` by size) then give one configuration and seed the same
    result whatever else the grid holds."""
    return task.protocol + ":" + json.dumps(task.setting, sort_keys=True, default=repr)


def run_task(task: AuditTask) -> dict:
    """Run one ``AuditTask`` (module docstring); returns ``{"rows", "sizes", "links", "records",
    "info"}`` of plain data (``info``: the task's ``label``, ``run_s``, ``diverged`` and
    ``unevaluated``, why its accuracy is NaN, or None)."""
    spec = REGISTRY[task.protocol]
    netspec = NetSpec.of(task.net)
    if hasattr(task.data, "load"):  # a picklable recipe (worker processes)
        loaded, test = task.data.load()
        task = replace(task, data=loaded, test=test if test is not None else task.test)
    data = task.data.train if hasattr(task.data, "train") else task.data
    n_users = int(data.n_users)
    names = client_names(n_users)
    rec = None
    records, ledgers = [], []
    t0 = time.perf_counter()
    result, resume, job, last_net = None, None, None, None
    tg: frozenset | None = None  # the targets: the only clients recorded and scored (None: all)
    epoch_rounds: list[int] = []
    missing_uploads, lost_clients = 0, set()  # what the run left out (faults and a deadline), over its epochs
    to_server = {k.name for k in spec.kinds if "server" in k.dst and k.purpose != "evaluation"}
    for e in range(task.epochs):
        net = netspec.build(task.seed if task.epochs == 1 else _epoch_seed(task.seed, e))
        if rec is None:
            tg = _targets(task, names)
            # runs recorded whole (FPL): every update, but each client's first model only (what
            # the reference attack needs: its first upload); a model per round would cost GBs
            first = ("model",) if task.observe is None and task.protocol == "fpl" else ()
            # a target's traffic is every message it sent or received (the server's with it among
            # them); adding the server to the nodes would keep every client's upload
            rec = Recorder(rounds=task.observe, nodes=tg, first_only=first)
        rec.attach(net)
        kw = dict(task.build_kw)
        if resume is not None:
            kw["resume"] = resume
        # (no spec.check_data: the audit's configurations are the privacy_audit scenario's own, no
        # setting of theirs is the user's to give; its PersonalFR runs the explicit task)
        job = spec.build(net, data, task.config, **kw)
        result = job.collect(net.run())
        resume = result
        info = getattr(result, "info", None) or {}
        # every upload the server waited for with a deadline and did not get (the ledger's missing
        # records): each kind the protocol sends to the server but evaluation answers. The result's
        # own records did not do: FedRec++'s named no kind until 2026-11-28 (its lost uploads read
        # 0), and the audit's attack kinds (UPLOAD_KINDS) left out PersonalFR's per-round updates until
        # personalfr_idle_rows read them (they need not name every kind the server waits for)
        missing_uploads += sum(1 for m in net.ledger.missing
                               if m.kind in to_server and net.ledger.roles.get(m.receiver) == "server")
        lost_clients.update(info.get("lost_clients") or ())
        ledgers.append(net.ledger)
        epoch_rounds.append(max(net.ledger.rounds(), default=-1))
        records.append(network_record(net, task.ledger_dir, f"{task.label}-e{e}" if task.epochs > 1 else task.label))
        last_net = net
    run_s = time.perf_counter() - t0
    public = Public(task.protocol, task.config, "server", tuple(job.clients), int(data.n_items))
    cap = Capture(task.protocol, task.config, rec, public, truth_of(task.protocol, data, job), result, last_net,
                  run_s, task.seed, reference_label(task))
    metric, acc, unevaluated = _accuracy(task, result)
    costs = client_costs(ledgers, len(job.clients), spec.kinds_for("evaluation"))
    sim_s = float(sum(r["sim_time"] for r in records))
    base = {**task.setting, "accuracy_metric": metric, "accuracy": acc, **costs, "run_s": run_s, "sim_s": sim_s,
            "missing_uploads": missing_uploads, "lost_clients": len(lost_clients)}
    if unevaluated is not None:  # a NaN accuracy where one was asked for, and why (no score)
        base["unevaluated"] = unevaluated
    base["T"] = int(getattr(task.config, "T", getattr(task.config, "rounds", 0)))
    if task.epochs > 1:
        base["T"] = task.epochs  # FPL: epochs
    rows, sizes, links = [], [], []
    views: dict = {}  # attacks of the same adversary over the same rounds share one view
    checkpoints = task.checkpoints or (task.epochs,)
    for spec_a in task.attacks:
        for cp in checkpoints:
            rounds = spec_a.rounds
            window = spec_a.window
            if task.epochs > 1:
                upto = epoch_rounds[cp - 1]
                rounds = tuple(r for r in range(-1, upto + 1)) if rounds is None else tuple(r for r in rounds
                                                                                           if r <= upto)
                window = f"{cp} epoch" + ("s" if cp > 1 else "")
            elif len(checkpoints) > 1:
                continue
            attack = spec_a.build()
            run = run_attack(attack, rec, public, rounds=rounds, key=cap.key, views=views)
            common = {**base, "attack": attack.name, "adversary": attack.view.label, "window": window,
                      "attack_s": run.seconds, "view_messages": run.messages, "unrecorded": run.unrecorded}
            if attack.about == "links":
                lr = score_links(run, cap, rounds=rounds)
                links.append({**common, "messages": len(lr),
                              "link_accuracy": float(np.mean([r["correct"] for r in lr])) if lr else math.nan,
                              "link_rand": float(np.mean([r["correct_rand"] for r in lr])) if lr else math.nan})
                continue
            if attack.about == "sizes":
                truth = cap.truth if tg is None else {u: t for u, t in cap.truth.items() if u in tg}
                sizes.append({**common, **score_sizes(run.inference, truth,
                                                      estimate=size_estimate(task.protocol, public.config))})
                continue
            # scored: the clients the server saw upload in the window (a client whose upload was
            # lost, who dropped out or was not called is left out: unseen), of the targets, and of
            # IMIA's sample; attacked: those the attack answered for (the others are misses)
            seen = observed_clients(cap, rounds)
            kept = observed_clients(cap, rounds, recorded=True)  # (seen, with a payload recorded)
            population = kept if tg is None else [u for u in kept if u in tg]
            if run.sample is not None:  # an attack on a sample (IMIA's max_users): its sample, answered or not
                chosen = set(run.sample)
                population = [u for u in population if u in chosen]
            scored = score_inference(run.inference, cap.truth, public.n_items, population)
            for r in scored:
                r["seed"] = task.seed
            seen_set = set(seen)
            unseen = sum(1 for u, t in cap.truth.items() if len(t) and (tg is None or u in tg) and u not in seen_set)
            attacked = sum(1 for r in scored if r["target"] in run.inference)
            unkept = sum(1 for u in set(seen) - set(kept) if len(cap.truth.get(u, ())) and (tg is None or u in tg))
            # of those scored, the ones seen upload in some but not all of the window's rounds in
            # which the server called them (an attack over rounds read fewer of their uploads)
            partly = len(partly_seen(cap, rounds, [r["target"] for r in scored]))
            rows.append({**common, **summarize(scored), "attacked": attacked, "unseen": unseen,
                         "unrecorded_users": unkept, "partly_seen": partly, "scored": scored})
    return {"rows": rows, "sizes": sizes, "links": links, "records": records,
            "info": {"label": task.label, "run_s": run_s, "diverged": getattr(result.model, "diverged_at", None)
                     if result is not None and result.model is not None else None, "unevaluated": unevaluated}}


def _epoch_seed(seed: int, epoch: int) -> int:
    from .fpl import epoch_seed

    return epoch_seed(seed, epoch)
