"""FPL run helpers: FPL, FCF, BPR-MF, Top-Pop and Random runs on an :class:`ImplicitSplit`,
each a :class:`RunRecord` of one evaluation per epoch, and the communication figures read from
the runs' ledgers (see :mod:`fedsim.studies.fpl`)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from ...kernel import NetSpec
from ...math.bpr import bpr_scores, init_item_params, init_user_factor
from ...math.fpl_central import fpl_epoch, pack_samplers
from ...math.bpr_central import train_bpr
from ...math.fpl_presets import PRESET_NAMES, fpl_preset
from ...math.popularity import random_scores, toppop_item_scores
from ...protocols import fcf as fcf_proto
from ...protocols import fpl as fpl_proto
from ...protocols.common import client_names
from ...seeding import node_rng, seed_sequence
from ..faults import FAULT_STUDY, network_faults, refuse_faults
from .data import ImplicitSplit

__all__ = [
    "RunRecord", "best_epoch", "candidate_epochs", "flatten_metrics", "epoch_seed", "ledger_tcc", "mean_cce",
    "network_faults", "run_bpr", "run_fcf", "run_fpl",
    "run_random", "run_toppop", "training_traffic",
]


@dataclass
class RunRecord:
    """One training run: ``curve`` holds one dict per evaluation (``epoch``; per evaluator
    ``{name}_p``, ``_r``, ``_f1``, ``_ic``, ``_gini``, ``_bd``; for federated runs the ledger's
    ``cce_ledger`` (units of the training kinds in that epoch), ``bytes``, and the closed forms)."""

    method: str
    params: dict
    curve: list[dict]
    wall_s: float
    info: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "RunRecord":
        return cls(d["method"], d["params"], d["curve"], d["wall_s"], d.get("info", {}))


def candidate_epochs(n_epochs: int, step: int = 1) -> list[int]:
    """The epochs a model is chosen from: the multiples of ``step`` up to ``n_epochs`` (the
    paper's "{10, ..., 50} iterations" is step 10 of 50), or the last epoch when there is none."""
    step = max(1, int(step))
    c = list(range(step, int(n_epochs) + 1, step))
    return c or [int(n_epochs)]


def best_epoch(rec: RunRecord, on: str = "val", metric: str = "p", epochs: list[int] | None = None) -> dict:
    """The curve entry with the highest ``{on}_{metric}`` (the first one on ties) among the
    evaluated entries whose ``epoch`` is in ``epochs`` (all when None); ``on`` falls back to
    "test" only when no entry of the run has validation figures (the test protocol). Entries
    without the figure (epochs not evaluated, ``eval_every`` > 1) are not candidates. Raises
    ``ValueError`` for an empty curve or when no entry is a candidate."""
    key = f"{on}_{metric}"
    if not rec.curve:
        raise ValueError(f"{rec.method}: empty curve")
    # judged on the whole curve: the first entry of a run evaluated every k epochs has no figures
    # at all, and reading it as "no validation" chose on test figures
    if not any(key in c for c in rec.curve):
        key = f"test_{metric}"
    pool = [c for c in rec.curve if key in c and (epochs is None or c["epoch"] in set(epochs))]
    if not pool:
        raise ValueError(f"{rec.method}: no evaluation at the candidate epochs {epochs}")
    # rounded: means of per-user figures that are equal up to the last bit of a float sum are ties,
    # which go to the first entry
    vals = np.round(np.array([c[key] for c in pool], dtype=np.float64), 12)
    vals[np.isnan(vals)] = -np.inf  # a diverged evaluation is never chosen over a finite one
    return pool[int(np.argmax(vals))]


def flatten_metrics(epoch: int, metrics: dict[str, dict]) -> dict:
    """One curve entry: ``epoch`` and every evaluator's figures as ``{evaluator}_{figure}``."""
    out: dict[str, Any] = {"epoch": epoch}
    for name, m in metrics.items():
        for k, v in m.items():
            out[f"{name}_{k}"] = v
    return out


def epoch_seed(seed: int, epoch: int) -> int:
    """The network seed of epoch ``epoch`` of a run seeded ``seed`` (a 63-bit integer)."""
    w = seed_sequence(seed, f"fpl:epoch:{epoch}").generate_state(2, np.uint32)
    return (int(w[0]) << 31) ^ int(w[1])


def _refuse_faults(profile: str | NetSpec, what: str) -> None:
    refuse_faults(profile, f"{what} runs with no deadline and reads every client's final state",
                  "a loss would stop it in a deadlock, a client that drops out after its last upload would leave "
                  f"its user factor zeroed without a word; {FAULT_STUDY}")


def training_traffic(net, spec) -> dict[str, float]:
    """One network's training traffic from its ledger: units (vectors) both ways, down (sent by
    the server) and up, wire and array bytes, messages; of every kind protocol ``spec`` (a
    ``ProtocolSpec``) declares for training (``spec.kinds_for("training")``: FPL's ``model``,
    ``update`` and, with secure aggregation, ``masked``, whose uint64 words are bytes, not units).
    A hand list of kinds missed FPL's ``masked`` uploads."""
    train = net.ledger.select(kind=spec.kinds_for("training"))
    t = train.totals()
    down = train.select(src_role="server").totals()
    return {"cce_ledger": float(t.units), "down_units": float(down.units), "up_units": float(t.units - down.units),
            "bytes": int(t.wire_bytes), "raw_bytes": int(t.raw_bytes), "messages": int(t.messages)}


def run_fpl(split: ImplicitSplit, preset: str, pi: float, epochs: int, *, d: int = 10, lr: float = 0.05,
            seed: int = 0, profile: str | NetSpec = "ideal", rounding: str = "round", definition: str = "code",
            dtype: str = "float32", merge: str = "none", local_item_updates: bool = False,
            user_update: str = "per_triple", on_epoch: Callable[[int, dict], None] | None = None,
            record_network: Callable[[Any], None] | None = None, start: tuple[RunRecord, dict] | None = None,
            checkpoint: Callable[[RunRecord, dict], None] | None = None, engine: str = "actors",
            eval_every: int = 1) -> RunRecord:
    """Train FPL preset ``preset`` with disclosure ``pi`` for ``epochs`` epochs, one network per
    epoch; evaluate after every epoch. Each curve entry carries the ledger's figures for that
    epoch (``cce_ledger`` etc.), the exact count ``cce_exact`` = visits (|I| + T) + positives sent
    (from the clients' own counts), the closed form of the schedule actually run
    (``cce_formula``) and of the paper's fractional T and rpe (``cce_formula_paper``).

    ``start = (record, {"theta", "P"})`` continues a run of ``len(record.curve)`` epochs (same
    parameters) from its final model; epoch e only depends on the model after epoch e - 1 and on
    ``epoch_seed(seed, e)``, so a continued run equals one run of ``epochs`` epochs.
    ``checkpoint(record_so_far, {"theta", "P"})`` is called after every epoch. A run whose scores
    stop being finite (a learning rate too large), or whose server stopped because its model was
    not (checked once per round, by the twin too, which stops in the same round), stops after that epoch, which is
    evaluated whatever ``eval_every`` says: its record keeps ``epochs`` as asked, ``diverged_at``
    the epoch, and the curve ends there (NaN figures, flagged ``diverged``).

    ``eval_every``: the model is evaluated after the epochs that are multiples of it and after
    the last (the training does not depend on it). ``engine="actors"`` (default): every epoch
    has a curve entry with its ledger figures, the evaluation figures only where evaluated.
    ``engine="twin"``: the same epochs computed without messages by
    :func:`fedsim.math.fpl_central.fpl_epoch` (bit-identical to the actors' model, in a
    fraction of the time; the protocol's defaults only: ``dtype="float32"``, ``merge="none"``,
    no local item updates, per-triple user steps, and a profile without loss or dropouts, which
    the twin does not model); curve entries only at the evaluated epochs, with the clients'
    counts (``visits``, ``positives_sent``, ``cce_exact``) and the closed forms but no ledger
    figures: there are no messages. ``start`` and ``checkpoint`` are for the actors only. Either
    engine refuses (``ValueError``) a network that can lose a message (:func:`network_faults`):
    the actors' servers here have no deadline."""
    if preset not in PRESET_NAMES:
        raise ValueError(f"unknown preset {preset!r}")
    if engine == "twin":
        if start is not None or checkpoint is not None:
            raise ValueError("engine='twin' runs are not resumable (start/checkpoint are for the actors)")
        if (dtype, merge, local_item_updates, user_update) != ("float32", "none", False, "per_triple"):
            raise ValueError("engine='twin' replays the protocol's defaults only (float32, merge 'none', frozen "
                             "items, per-triple user steps); use engine='actors'")
        return _run_fpl_twin(split, preset, pi, epochs, d=d, lr=lr, seed=seed, profile=profile, rounding=rounding,
                             definition=definition, eval_every=eval_every, on_epoch=on_epoch)
    if engine != "actors":
        raise ValueError(f"engine must be 'actors' or 'twin', got {engine!r}")
    _refuse_faults(profile, "run_fpl")
    every = max(1, int(eval_every))
    nu, ni = split.n_users, split.n_items
    exact = fpl_preset(preset, nu, split.x_plus, definition)
    sched = exact.schedule(rounding)
    cfg = fpl_proto.config_for_preset(preset, nu, split.x_plus, epochs=1, rounding=rounding, definition=definition,
                                      d=d, lr=lr, pi=pi, dtype=dtype, merge=merge,
                                      local_item_updates=local_item_updates, user_update=user_update)
    resume = None  # what the next epoch's network continues from: a Result or its state
    curve: list[dict] = []
    wall0 = 0.0
    if start is not None:
        prev, state = start
        curve = [dict(c) for c in prev.curve]
        resume = {"theta": np.array(state["theta"]), "P": np.array(state["P"], dtype=np.float64),
                  "rounds_done": len(curve) * cfg.rounds}
        wall0 = float(prev.wall_s)
    params = {"preset": preset, "pi": float(pi), "epochs": int(epochs), "d": d, "lr": lr, "seed": seed,
              "profile": NetSpec.of(profile).profile, "rounding": rounding, "definition": definition, "dtype": dtype,
              "merge": merge, "local_item_updates": local_item_updates, "user_update": user_update,
              "clients_per_round": cfg.clients_per_round, "triples": cfg.triples,
              "rounds_per_epoch": cfg.rounds}
    if every > 1:
        params["eval_every"] = every
    t0 = time.perf_counter()
    for e in range(len(curve), int(epochs)):
        te = time.perf_counter()
        net = NetSpec.of(profile).build(epoch_seed(seed, e))
        job = fpl_proto.SPEC.build(net, split.train, cfg, resume=resume)
        result = job.collect(net.run())
        resume = result
        out = {**result.params, **result.info}
        P = out["P"]
        led = training_traffic(net, fpl_proto.SPEC)
        visits = int(out["rounds"].sum())
        pos = int(out["sent_positive"].sum())
        train_s = time.perf_counter() - te
        # the protocol's server stopped this epoch's network in the round it found its model not
        # finite: evaluated now (NaN figures, flagged), whatever eval_every says, and the run stops
        stopped = out.get("diverged_at") is not None
        if (e + 1) % every == 0 or e + 1 == int(epochs) or stopped:
            with np.errstate(over="ignore", invalid="ignore"):  # non-finite scores: the evaluator flags them
                scores = bpr_scores(P, out["Q"].astype(np.float64), out["b"].astype(np.float64))
            entry = flatten_metrics(e + 1, split.evaluate(scores))
        else:
            entry = {"epoch": e + 1}
        entry.update(led)
        entry.update({
            "visits": visits, "positives_sent": pos, "negatives_sent": int(out["sent_negative"].sum()),
            "cce_exact": visits * (ni + cfg.triples) + pos,
            "cce_formula": sched.cce(ni, pi),
            "cce_formula_paper": exact.cce(ni, pi),
            "sim_time": result.duration, "train_s": train_s, "wall_s": time.perf_counter() - te,
        })
        curve.append(entry)
        if record_network is not None:
            record_network(net)
        if on_epoch is not None:
            on_epoch(e + 1, entry)
        if stopped or any(entry.get(f"{name}_diverged") for name in split.evaluators):
            # the model's scores are no longer finite: every later epoch would be NaN too (never chosen)
            params["diverged_at"] = e + 1
            break
        if checkpoint is not None:
            checkpoint(RunRecord(preset, {**params, "epochs": e + 1}, list(curve), wall0 + time.perf_counter() - t0),
                       {"theta": out["theta"], "P": P})
        del net, job
    return RunRecord(preset, params, curve, wall0 + time.perf_counter() - t0)


def _run_fpl_twin(split: ImplicitSplit, preset: str, pi: float, epochs: int, *, d: int, lr: float, seed: int,
                  profile: str | NetSpec, rounding: str, definition: str, eval_every: int,
                  on_epoch: Callable[[int, dict], None] | None) -> RunRecord:
    """``run_fpl(..., engine="twin")``: epoch e draws from the streams the actors of epoch e's
    network would get (``node_rng(epoch_seed(seed, e), node id)``)."""
    spec = NetSpec.of(profile)
    why = network_faults(spec)
    if why is not None:
        raise ValueError(f"engine='twin' does not model message loss or dropouts ({why}), and the actors' runs here "
                         "have no deadline: measure faults with scenarios/fault_study.py")
    nu, ni = split.n_users, split.n_items
    exact = fpl_preset(preset, nu, split.x_plus, definition)
    sched = exact.schedule(rounding)
    cfg = fpl_proto.config_for_preset(preset, nu, split.x_plus, epochs=1, rounding=rounding, definition=definition,
                                      d=d, lr=lr, pi=pi)
    every = max(1, int(eval_every))
    samplers = fpl_proto.make_samplers(fpl_proto.user_item_lists(split.train), ni,
                                       np.unique(np.asarray(split.train.items)))
    packed = pack_samplers(samplers)
    names = client_names(nu)
    theta = np.empty((ni, d + 1), dtype=np.float32)
    P = np.empty((nu, d), dtype=np.float64)
    params = {"preset": preset, "pi": float(pi), "epochs": int(epochs), "d": d, "lr": lr, "seed": seed,
              "profile": spec.profile, "rounding": rounding, "definition": definition, "dtype": "float32",
              "merge": "none", "local_item_updates": False, "user_update": "per_triple",
              "clients_per_round": cfg.clients_per_round, "triples": cfg.triples, "rounds_per_epoch": cfg.rounds,
              "engine": "twin", "eval_every": every}
    curve: list[dict] = []
    visits = pos = neg = 0
    t0 = time.perf_counter()
    for e in range(int(epochs)):
        te = time.perf_counter()
        es = epoch_seed(seed, e)
        server_rng = node_rng(es, fpl_proto.SERVER)
        rngs: dict[int, np.random.Generator] = {}
        if e == 0:  # what the actors draw first: the server its (Q, b), every client its p_u
            Q, b = init_item_params(ni, d, server_rng)
            theta[:, :d] = Q
            theta[:, d] = b
            for u in range(nu):
                rngs[u] = node_rng(es, names[u])
                P[u] = init_user_factor(d, rngs[u])
        counts = fpl_epoch(theta, P, packed, clients_per_round=cfg.clients_per_round, triples=cfg.triples,
                           rounds=cfg.rounds, lr=lr, pi=pi, reg=cfg.reg, server_rng=server_rng,
                           client_rng=lambda c: rngs[c] if c in rngs else node_rng(es, names[c]))
        v, ps, ng = (int(counts[k].sum()) for k in ("rounds", "sent_positive", "sent_negative"))
        visits, pos, neg = visits + v, pos + ps, neg + ng
        # fpl_epoch stops in the round whose Theta_S is not finite, as the actors' server does (it ran
        # the epoch to its end on NaN: other visits, rows and p_u than the actors'); a p_u that is not
        # finite is known at the end of the epoch, as the actors' result knows it. Either way the model
        # is evaluated now (NaN figures, flagged), whatever eval_every says
        stopped = counts["rounds_done"] < cfg.rounds or not (np.isfinite(theta).all() and np.isfinite(P).all())
        if (e + 1) % every and e + 1 != int(epochs) and not stopped:
            continue
        train_s = time.perf_counter() - te
        with np.errstate(over="ignore", invalid="ignore"):  # non-finite scores: the evaluator flags them
            scores = bpr_scores(P, theta[:, :d].astype(np.float64), theta[:, d].astype(np.float64))
        entry = flatten_metrics(e + 1, split.evaluate(scores))
        entry.update({
            "visits": v, "positives_sent": ps, "negatives_sent": ng, "cce_exact": v * (ni + cfg.triples) + ps,
            "cce_formula": sched.cce(ni, pi), "cce_formula_paper": exact.cce(ni, pi), "train_s": train_s,
            "wall_s": time.perf_counter() - te,
        })
        curve.append(entry)
        if on_epoch is not None:
            on_epoch(e + 1, entry)
        if stopped or any(entry.get(f"{name}_diverged") for name in split.evaluators):
            params["diverged_at"] = e + 1
            break
    return RunRecord(preset, params, curve, time.perf_counter() - t0,
                     info={"visits": visits, "positives_sent": pos, "negatives_sent": neg})


def run_fcf(split: ImplicitSplit, rounds: int, *, d: int = 10, alpha: float = 1.0, lam: float = 0.1,
            lr: float = 0.05, optimizer: str = "adam", seed: int = 0, profile: str | NetSpec = "ideal", eval_every: int = 1,
            on_epoch: Callable[[int, dict], None] | None = None,
            record_network: Callable[[Any], None] | None = None) -> RunRecord:
    """Train FCF for ``rounds`` rounds of all clients (one "epoch" = one round: every client
    processes all its data), in networks of ``eval_every`` rounds, evaluating ``P @ Q_sent.T``
    after each. Curve entries carry the ledger's figures per round (averaged over the chunk):
    ``bytes_per_client_round`` and ``raw_bytes_per_client_round`` (payload arrays only). Refuses
    (``ValueError``) a network that can lose a message (:func:`network_faults`): no deadline here."""
    _refuse_faults(profile, "run_fcf")
    nu, ni = split.n_users, split.n_items
    state = None
    curve = []
    t0 = time.perf_counter()
    done = 0
    chunk = 0
    while done < rounds:
        k = min(int(eval_every), rounds - done)
        cfg = fcf_proto.FCFConfig(rounds=k, d=d, alpha=alpha, lam=lam, lr=lr, optimizer=optimizer)
        te = time.perf_counter()
        net = NetSpec.of(profile).build(epoch_seed(seed, chunk))
        job = fcf_proto.SPEC.build(net, split.train, cfg, resume=state)
        result = job.collect(net.run())
        state = result.state
        out = result.params
        stopped = result.info.get("diverged_at")
        k = int(result.info["rounds_done"]) - done  # the rounds this network ran (fewer when the server stopped)
        done += k
        chunk += 1
        led = training_traffic(net, fcf_proto.SPEC)
        # a server that found Q not finite (or not finite as sent: float32 holds less than its
        # float64) stopped there: the model is Q as it would be sent, whose scores the evaluator
        # flags (NaN figures, diverged: never chosen), not the last Q_sent, a finite model of the
        # round before that the study would take for this run's
        with np.errstate(over="ignore", invalid="ignore"):
            Q = out["Q_sent"] if stopped is None else out["Q"].astype(cfg.wire_dtype)
            scores = out["P"] @ Q.astype(np.float64).T
        entry = flatten_metrics(done, split.evaluate(scores))
        entry.update({key: v / k for key, v in led.items()})
        entry.update({"bytes_per_client_round": led["bytes"] / (k * nu),
                      "raw_bytes_per_client_round": led["raw_bytes"] / (k * nu),
                      "formula_bytes_per_client_round": fcf_proto.payload_bytes_per_client_round(ni, d),
                      "sim_time": result.duration, "wall_s": time.perf_counter() - te})
        curve.append(entry)
        if record_network is not None:
            record_network(net)
        if on_epoch is not None:
            on_epoch(done, entry)
        if stopped is not None or any(entry.get(f"{name}_diverged") for name in split.evaluators):
            # every later round would start from a model that is not finite (as run_fpl's runs stop)
            diverged_at = done if stopped is None else int(stopped)
            break
    else:
        diverged_at = None
    params = {"rounds": int(rounds), "d": d, "alpha": alpha, "lam": lam, "lr": lr, "optimizer": optimizer,
              "seed": seed, "profile": NetSpec.of(profile).profile, "eval_every": int(eval_every)}
    if diverged_at is not None:
        params["diverged_at"] = diverged_at
    return RunRecord("FCF", params, curve, time.perf_counter() - t0)


def run_bpr(split: ImplicitSplit, epochs: int, *, d: int = 10, lr: float = 0.05, seed: int = 0,
            eval_every: int = 1, on_epoch: Callable[[int, dict], None] | None = None) -> RunRecord:
    """Centralized BPR-MF (``fedsim.math.bpr_central.train_bpr``, X+ steps per epoch, negatives
    from the catalogue), evaluated after every ``eval_every`` epochs and after the last (the
    training does not depend on it; on a city file evaluation costs more than an epoch). A run
    whose parameters stop being finite (a learning rate too large) stops after that epoch, as
    ``run_fpl``'s do: ``diverged_at`` the epoch, and the curve ends with its evaluation (NaN
    figures, flagged ``diverged``)."""
    csr = split.train.by_user()
    curve = []
    t0 = time.perf_counter()

    def cb(epoch, model):
        entry = flatten_metrics(epoch, split.evaluate(model.scores()))
        curve.append(entry)
        if on_epoch is not None:
            on_epoch(epoch, entry)

    model = train_bpr(np.asarray(csr.indptr), np.asarray(csr.indices), split.n_users, split.n_items, d, int(epochs),
                      lr, node_rng(seed, "bpr"), catalogue=split.catalogue, eval_callback=cb,
                      eval_every=int(eval_every))
    params = {"epochs": int(epochs), "d": d, "lr": lr, "seed": seed}
    if int(eval_every) > 1:
        params["eval_every"] = int(eval_every)
    if model.diverged_at is not None:
        # train_bpr stopped before evaluating that epoch: its (NaN) evaluation ends the curve
        cb(model.diverged_at, model)
        params["diverged_at"] = model.diverged_at
    return RunRecord("BPR-MF", params, curve, time.perf_counter() - t0)


def run_toppop(split: ImplicitSplit) -> RunRecord:
    """Top-Pop: every user's scores are the items' training interaction counts (ties broken by
    ascending item id); one evaluation (epoch 0)."""
    t0 = time.perf_counter()
    s = toppop_item_scores(split.train.items, n_items=split.n_items)
    scores = np.broadcast_to(s, (split.n_users, split.n_items))
    return RunRecord("Top-Pop", {}, [flatten_metrics(0, split.evaluate(scores))], time.perf_counter() - t0)


def run_random(split: ImplicitSplit, seed: int = 0) -> RunRecord:
    """Random scores (drawn from ``node_rng(seed, "random")``); one evaluation (epoch 0)."""
    t0 = time.perf_counter()
    scores = random_scores(split.n_users, split.n_items, node_rng(seed, "random"))
    return RunRecord("Random", {"seed": seed}, [flatten_metrics(0, split.evaluate(scores))], time.perf_counter() - t0)


def mean_cce(rec: RunRecord, upto: int | None = None) -> float:
    """The ledger's mean vectors per epoch over the first ``upto`` epochs (all by default)."""
    c = rec.curve[: upto or len(rec.curve)]
    return float(np.mean([e["cce_ledger"] for e in c]))


def ledger_tcc(rec: RunRecord, epochs: int) -> float:
    """TCC from the ledger: the vectors actually exchanged in the first ``epochs`` epochs."""
    return float(sum(e["cce_ledger"] for e in rec.curve[:epochs]))
