"""PersonalFR runs: the parameters the PersonalFR scenarios share, one training run per
:class:`RunSpec` (Joint, FedAvg or PersonalFR; picklable, so runs go to worker processes), and
the specs a scenario's configuration asks for.

Users are split 80/20 per user at random, partitioned into M clients of balanced size; every
client trains on its users, the server picks a fraction C of the clients per round. Metrics are
federated evaluations every ``eval_every`` rounds; communication is read from the ledger.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...config import ConfigError
from ...data import partition_users, per_user_random, resolve
from ...experiment import Param, RunContext, UsageError
from ...kernel import NetSpec, network_record
from ...math import ae_train
from ...protocols import fedavg_ae, personalfr
from ...protocols.personalfr import FedAEConfig
from ...protocols.fedae import check_threshold as fedae_check_threshold
from ...seeding import node_rng
from ..faults import refuse_faults
from ..parallel import count_done, default_workers, pmap

__all__ = [
    "COMMON_PARAMS", "METRIC", "PROTOCOLS", "RunSpec", "check_clients", "check_network", "check_threshold",
    "comm_from_ledger", "config_from", "execute", "load_task", "make_specs", "run_spec", "spec_cost", "split",
]

METRIC = {"explicit": "rmse", "implicit": "ndcg"}


def protocol_run(n_users: int) -> str:
    """Where the faults of PersonalFR and FedAvg-AE are measured, as a command that runs on data
    of ``n_users`` users: ``fedsim run personalfr`` partitions them into ``clients`` (default
    100), more than the users of a small data set (30 on ``tiny``) is refused."""
    M = min(FedAEConfig.clients, int(n_users))
    return (f"measure faults with `fedsim run personalfr --set deadline=SECONDS --set clients={M}` (or fedavg-ae) "
            f"on the same data and network, which reports what was missing (clients: at most the data's "
            f"{int(n_users)} users, 0: one user per client)")


PROTOCOLS = {"fedavg": fedavg_ae, "personalfr": personalfr}

COMMON_PARAMS = {
    "tasks": Param(["explicit", "implicit"], "tasks: explicit (RMSE) and/or implicit (NDCG@10)", kind="strs",
                   choices=("explicit", "implicit")),
    "methods": Param(["joint", "fedavg", "personalfr"], "methods to run", kind="strs",
                     choices=("joint", "fedavg", "personalfr")),
    "rounds": Param.of(FedAEConfig, "rounds", 800, help="communication rounds T (the paper's 800)"),
    "eval_every": Param.of(FedAEConfig, "eval_every", 10),
    "fraction": Param.of(FedAEConfig, "fraction"),
    "local_epochs": Param.of(FedAEConfig, "local_epochs"),
    "batch": Param.of(FedAEConfig, "batch"),
    "lr": Param.of(FedAEConfig, "lr"),
    "merge": Param.of(FedAEConfig, "merge"),
    "compression": Param.of(FedAEConfig, "compression"),
    "encoder_input": Param("cut", "PersonalFR encoder width: cut (own items; same model, less memory) or dense",
                           choices=("cut", "dense")),
    "client_momentum": Param("keep", "clients keep their momentum between rounds (keep) or not (reset)",
                             choices=("keep", "reset")),
    "joint_epochs": Param(0, "Joint epochs (0: as many as rounds)", min=0),
    "joint_batch": Param(500, "Joint batch size (Adam lr 1e-3)", min=1),
    "threshold": Param.of(FedAEConfig, "threshold"),
    "test_frac": Param(0.2, "per-user test fraction", min=0, max=0.9, exclusive_min=True),
    "repeats": Param(5, "repetitions with seeds seed, seed+1, ...: mean +- population std (the paper: 4)", min=1),
    "select_on": Param("validation", "which evaluation round is reported: the best on a validation split cut "
                       "from the first repetition's training part, applied to every repetition's test curve "
                       "(validation), or each run's best on its test split (test: the paper's rule, optimistic)",
                       choices=("validation", "test")),
    "val_frac": Param(0.2, "validation fraction of each user's training entries (select_on=validation)",
                      min=0, max=0.9, exclusive_min=True),
    "workers": Param(0, "worker processes (0: one per core)", min=0),
}


@dataclass(frozen=True)
class RunSpec:
    """One training run (picklable for worker processes)."""

    method: str  # joint, fedavg, personalfr
    data: str
    seed: int
    task: str
    threshold: float
    test_frac: float
    M: int = 0  # 0: one user per client
    cfg: FedAEConfig | None = None
    profile: Any = "ideal"  # a profile name or a fedsim.kernel.NetSpec
    ledger_dir: str | None = None  # where the network's ledger goes (--ledger), if anywhere
    evaluate: bool = True
    joint_epochs: int = 0
    joint_batch: int = 500
    validation: bool = False  # train on the training part minus a validation split, evaluate on that split
    val_frac: float = 0.2


_TASKS: dict = {}


def split(data: str, seed: int, test_frac: float, val_frac: float | None = None):
    """``(ratings, train, held_out)``: ``data`` split ``1 - test_frac`` / ``test_frac`` per user at
    random with ``seed``; with ``val_frac`` the training part is split again per user (a
    ``val_frac`` validation share, seed-derived) and ``(ratings, train minus validation,
    validation)`` is returned: the test part is then not returned at all."""
    ratings = resolve(data)
    tr, te = per_user_random(ratings, test_frac, seed=seed)
    if val_frac is None:
        return ratings, tr, te
    tr2, va = per_user_random(tr, val_frac, seed=seed + 100_003)
    return ratings, tr2, va


def load_task(data: str, seed: int, task: str, threshold: float, test_frac: float, val_frac: float | None = None):
    """The ``ae_train.AETask`` of dataset ``data`` (synthetic presets generated with seed 0) split
    ``1 - test_frac`` / ``test_frac`` per user at random with ``seed``, for ``task``; with
    ``val_frac``, the task of the training part minus a validation split, evaluated on that
    split (see :func:`split`). Cached per process (the last one asked for)."""
    key = (data, seed, task, threshold, test_frac, val_frac)
    if key not in _TASKS:
        ratings, tr, te = split(data, seed, test_frac, val_frac)
        t = ae_train.prepare((tr.users, tr.items, tr.values), (te.users, te.items, te.values), ratings.n_users,
                             ratings.n_items, task=task, threshold=threshold)
        t.info["name"] = ratings.name
        _TASKS.clear()  # one dataset at a time per process (ML1M-sized rows are ~110 MB)
        _TASKS[key] = t
    return _TASKS[key]


def comm_from_ledger(net, rounds: int, spec) -> dict:
    """Communication figures of one run of protocol ``spec`` (a ``ProtocolSpec``: PersonalFR's
    or FedAvg-AE's), read from the ledger by the purposes the spec declares for its kinds, not
    from hand lists of kinds: ``total_bytes`` and ``messages`` every kind but the evaluation's;
    the download (``down_*``) and upload (``up_*``, ``client_rounds``) the training kinds sent
    by and to the server (PersonalFR's ``decoder`` and ``update``, FedAvg-AE's ``model`` and
    ``update``); ``setup_bytes`` the setup kinds (PersonalFR's ``indices``); ``eval_bytes`` the
    evaluation kinds."""
    led = net.ledger
    if not len(led):
        return {}
    evaluation = spec.kinds_for("evaluation")
    train = led.select(exclude_kinds=evaluation).totals()
    training = led.select(kind=spec.kinds_for("training"))
    down = training.select(src_role="server").totals()
    up = training.select(dst_role="server").totals()
    return {
        "total_bytes": int(train.wire_bytes),
        "setup_bytes": int(led.select(kind=spec.kinds_for("setup")).totals().wire_bytes),
        "bytes_per_round": float((down.wire_bytes + up.wire_bytes) / rounds),
        "down_bytes_per_client": float(down.wire_bytes / max(down.messages, 1)),
        "up_bytes_per_client": float(up.wire_bytes / max(up.messages, 1)),
        "up_floats_per_client": float(up.floats / max(up.messages, 1)),
        "client_rounds": int(up.messages),
        "eval_bytes": int(led.select(kind=evaluation).totals().wire_bytes),
        "messages": int(train.messages),
    }


def check_network(profile, n_users: int) -> None:
    """Refuse (``UsageError``) a network that can lose a message (``network_faults``: loss,
    dropout, a profile whose nodes lose or drop out), before any work. The PersonalFR scenarios
    run without a deadline and read whole runs: such a network ended in a ``DeadlockError``
    advising a ``--set deadline`` they do not have (with a deadline, what a run left out would
    not reach their tables). Faults are measured on the protocol itself: ``fedsim run personalfr
    --loss P --set deadline=S --set clients=M`` (M at most the data's ``n_users``) reports what
    was missing (:func:`protocol_run`)."""
    refuse_faults(profile, "the PersonalFR scenarios run FedAvg and PersonalFR with no deadline",
                  protocol_run(n_users), UsageError)


def run_spec(spec: RunSpec) -> dict:
    """Run one spec; returns its history, best/final metric, FLOPs and ledger figures (module-level, so it
    can run in a worker process); a run that diverged (federated, or the Joint baseline's epochs) has ``diverged_at`` and a NaN ``final``. Raises ``DeadlockError`` when a federated run's network ends with
    actors still blocked, ``ValueError`` for a federated run on a network that can lose a message
    (:func:`check_network`: the figures returned are those of a whole run, and nothing here
    carries what a run with a deadline left out)."""
    task = load_task(spec.data, spec.seed, spec.task, spec.threshold, spec.test_frac,
                     spec.val_frac if spec.validation else None)
    if spec.method != "joint":  # (after the data: the command it suggests names a number of clients it has)
        refuse_faults(spec.profile, f"PersonalFR study runs ({spec.method}) read whole runs", protocol_run(task.n_users))
    key = METRIC[spec.task]
    t0 = time.perf_counter()
    out: dict[str, Any] = {"method": spec.method, "task": spec.task, "seed": spec.seed, "M": spec.M,
                           "n_users": task.n_users, "n_items": task.n_items, "validation": spec.validation}
    if spec.method == "joint":
        epochs = spec.joint_epochs or (spec.cfg.rounds if spec.cfg else 200)
        every = spec.cfg.eval_every if spec.cfg and spec.cfg.eval_every else max(epochs // 10, 1)
        res = ae_train.train_joint(task, epochs=epochs, rng=node_rng(spec.seed, "joint"), batch=spec.joint_batch,
                                   eval_every=every, k=spec.cfg.eval_k if spec.cfg else 10)
        hist = [dict(h, round=h["epoch"]) for h in res.history]
        # as a federated run's: stopped at the epoch its model was found not finite, no figure of it kept
        out["diverged_at"] = res.diverged_at
        out.update(rounds=epochs, rounds_run=res.epochs, client_flops=res.flops, comm={}, sim_time=0.0, totals={})
    else:
        M = spec.M or task.n_users
        groups = partition_users(task.n_users, M, seed=spec.seed)
        net = NetSpec.of(spec.profile).build(spec.seed)
        job = PROTOCOLS[spec.method].place(net, task, groups, spec.cfg, evaluate=spec.evaluate)
        result = job.collect(net.run())  # a run that ends with actors blocked raises DeadlockError
        hist = result.metrics
        info = result.info
        # a run that diverged stopped there, its NaN evaluation not kept: its last row is an earlier
        # round's, not the final model's (which has no figure: NaN, so the report counts it in nan_runs)
        out["diverged_at"] = info.get("diverged_at")
        label = f"{spec.method}-{spec.task}-M{M}-s{spec.seed}" + ("-validation" if spec.validation else "")
        # a run that diverged stopped in that round: its figures per round are over the rounds it ran
        ran = int(out["diverged_at"]) if out["diverged_at"] is not None else spec.cfg.rounds
        out.update(M=M, rounds=spec.cfg.rounds, rounds_run=ran, client_flops=info["client_flops"],
                   server_flops=info["server_flops"], comm=comm_from_ledger(net, ran, PROTOCOLS[spec.method].SPEC), sim_time=result.duration,
                   totals=net.ledger.totals(), clients_per_round=len(info["selected"][0]),
                   record=network_record(net, spec.ledger_dir, label))
    vals = [h[key] for h in hist]
    finite = [v for v in vals if not math.isnan(v)]
    best_i = (int(np.nanargmin(vals)) if key == "rmse" else int(np.nanargmax(vals))) if finite else None
    out.update(history=[{"round": h["round"], key: h[key]} for h in hist],
               final=vals[-1] if vals and out.get("diverged_at") is None else float("nan"),
               best=vals[best_i] if best_i is not None else float("nan"),
               best_round=hist[best_i]["round"] if best_i is not None else None,
               wall_s=time.perf_counter() - t0)
    return out


def config_from(ctx: RunContext, **over) -> FedAEConfig:
    """The ``FedAEConfig`` of ``ctx``'s COMMON_PARAMS values, updated with ``over``."""
    kw = dict(rounds=ctx["rounds"], fraction=ctx["fraction"], local_epochs=ctx["local_epochs"], batch=ctx["batch"],
              lr=ctx["lr"], merge=ctx["merge"], compression=ctx["compression"],
              encoder_input=ctx["encoder_input"], client_momentum=ctx["client_momentum"],
              eval_every=ctx["eval_every"])
    kw.update(over)
    return FedAEConfig(**kw)


def check_clients(clients, n_users: int) -> None:
    """Refuse (``UsageError``) a number of clients M outside [0, n_users] (0: one user per
    client), before any worker starts; a worker's ValueError traceback said it before."""
    bad = [M for M in clients if not 0 <= int(M) <= n_users]
    if bad:
        raise UsageError(f"--set clients: {', '.join(map(str, bad))} not in [0, {n_users}] (the data's users; "
                         "0: one user per client)")


def check_threshold(ctx: RunContext, ratings: Any, tasks) -> None:
    """Refuse (``UsageError``) the implicit task with the default ``threshold`` (3.5, for 1-5
    stars) on data rated above 5 unless the caller set it (``ctx.given``): on a 1-10 scale it made
    4 to 10 positive, silently (the paper: > 3.5 on ML1M, > 8 on Anime, section IV-A). The check
    is the protocols' (``fedae.check_threshold``, which ``fedsim run personalfr`` applies too)."""
    if "implicit" not in tasks:
        return
    try:
        fedae_check_threshold(ctx["threshold"], ratings, ctx.given, f"--data {ctx.data}")
    except ConfigError as exc:  # (a scenario's errors about its settings are UsageErrors)
        raise UsageError(str(exc)) from None


def make_specs(ctx: RunContext, clients: list[int], **cfg_over) -> list[RunSpec]:
    """The runs ``ctx`` asks for: per repeat (seed ``ctx.seed + repeat``) and task, Joint (if
    among the methods) then FedAvg and PersonalFR (those among them) for every M in ``clients``,
    all with :func:`config_from` ``(ctx, task=task, **cfg_over)``. With ``select_on=validation``
    the first repeat's runs come twice: once on its validation split (``validation=True``: they
    choose the reported round) and once as usual. The data is read here once (``ctx.load_data``),
    so that a bad ``--data`` is a ``UsageError`` before any worker starts, as is a network that can lose
    a message when federated runs are asked for (:func:`check_network`) and the default implicit
    threshold on data rated above 5 (:func:`check_threshold`)."""
    ratings = ctx.load_data()  # a missing or unreadable --data: one 'error: --data: ...' line, not a worker's traceback
    if {"fedavg", "personalfr"} & set(ctx["methods"]):
        check_network(ctx.net, ratings.n_users)
    check_clients(clients, ratings.n_users)
    check_threshold(ctx, ratings, ctx["tasks"])
    specs = []
    select = ctx.config.get("select_on", "test")
    reps = [(rep, False) for rep in range(ctx["repeats"])]
    if select == "validation":
        reps = [(0, True)] + reps
    for rep, validation in reps:
        seed = ctx.seed + rep
        for task in ctx["tasks"]:
            cfg = config_from(ctx, task=task, **cfg_over)
            common = dict(data=ctx.data, seed=seed, task=task, threshold=ctx["threshold"],
                          test_frac=ctx["test_frac"], profile=ctx.net, ledger_dir=ctx.ledger_dir,
                          validation=validation, val_frac=ctx.config.get("val_frac", 0.2))
            if "joint" in ctx["methods"]:
                specs.append(RunSpec("joint", cfg=cfg, joint_epochs=ctx["joint_epochs"],
                                     joint_batch=ctx["joint_batch"], **common))
            for M in clients:
                for method in ("fedavg", "personalfr"):
                    if method in ctx["methods"]:
                        specs.append(RunSpec(method, M=M, cfg=cfg, **common))
    return specs


def spec_cost(spec: RunSpec) -> float:
    """A rough relative duration of ``spec``, for starting the longest runs first (measured on ML-100K at
    800 rounds, one BLAS thread: FedAvg M=300 155 s, PersonalFR M=300 87 s, FedAvg M=100 66 s,
    PersonalFR M=100 53 s, Joint 44 s; this formula orders them the same way). A federated round costs
    about a whole-model step per selected client and local epoch (PersonalFR's about half of it, its
    decoder slices and encoders being smaller) plus a fixed part; M = 0 (one user per client) is taken
    as 1,000 clients."""
    cfg = spec.cfg or FedAEConfig()
    if spec.method == "joint":
        return float(spec.joint_epochs or cfg.rounds) * 40.0
    clients = spec.M or 1000
    selected = max(int(cfg.fraction * clients + 1e-9), 1)
    weight = 1.2 if spec.method == "fedavg" else 0.6
    return float(cfg.rounds) * (selected * cfg.local_epochs * weight + 20.0)


def execute(ctx: RunContext, specs: list[RunSpec], stage: str) -> list[dict]:
    """:func:`run_spec` of every spec on ``ctx["workers"]`` processes (0: one per core), with
    progress under ``stage``; adds each run's simulated time and ledger totals to ``ctx``'s.
    Returns the runs' results in ``specs`` order."""
    workers = ctx["workers"] or default_workers()
    ctx.progress.update(0, len(specs), stage=stage)
    outs = pmap(run_spec, specs, workers, on_done=count_done(lambda k: ctx.progress.update(k, len(specs), stage=stage)),
                cost=spec_cost)
    for o in outs:  # the networks stayed in the worker processes: their figures came back instead
        ctx.record_run(o.get("record"))
    return outs
