"""Privacy audit: what a curious server, its accomplices and a network observer learn from every protocol.

Every protocol runs on a simulated network with a tap that records what crossed it; each attack
gets only the view of its adversary (the server; the server with one or all denoisers; an
observer of message sizes and timings) and is scored against the users' true item sets:
precision, recall, F1, AUC and exact recovery, beside the random guess of the same size, the
run's accuracy (RMSE for FedRec and FedRec++, P@10 for FPL and FCF) and its bytes per client from
the ledger. Defences (local noise, secure aggregation, FedRec++'s secure noise) are protocol
options and are audited the same way.

PersonalFR runs once with Partial Compression (its ``indices``) and, by default, three times without
(``personalfr_uncompressed``: kept momentum, reset momentum, masked training), where
``personalfr_idle_rows`` reads the item sets off the whole decoders the clients return. Its baseline
FedAvg-AE runs with the same clients, model and rounds, the clients keeping their momentum and resetting
it (``fedavg_momentum``), where ``fedavg_idle_rows`` reads them off the whole models the clients return.

Data: ``--data`` for FedRec, FedRec++, PersonalFR and FedAvg-AE (MovieLens 100K in docs/privacy.md);
``--set fpl_data=PATH,PATH`` for FPL and FCF (the Foursquare city files; default: ``--data``
as implicit feedback). ``--set protocols=fedrec`` (and the other lists) audits part of the grid.
The defaults are sized for the whole audit to finish in a few minutes on two cores (see
docs/privacy.md for the command that made its table and how long it took). The protocols run
without a deadline: a network that can lose a message is refused (audit a faulty run with
``fedsim.privacy.capture`` and a deadline).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

from fedsim.experiment import Param, RunContext, UsageError, scenario_main
from fedsim.kernel import NetSpec
from fedsim.math.fpl_presets import PRESET_NAMES
from fedsim.privacy.metrics import METRICS, summarize
from fedsim.protocols import REGISTRY
from fedsim.protocols.fcf import FCFConfig
from fedsim.protocols.fedrec import FedRecConfig, paper_lr
from fedsim.protocols.fedrecpp import FedRecPPConfig
from fedsim.protocols.fpl import config_for_preset
from fedsim.studies.fedrec import make_folds
from fedsim.studies.faults import refuse_faults
from fedsim.studies.fedrecpp import denoisers
from fedsim.studies.parallel import count_done, default_workers, pmap
from fedsim.studies.privacy import AttackSpec, AuditTask, FoldData, SplitData, run_task

RUN_TIME = "about 4-8 min on ML-100K + two Foursquare cities with 2 workers, by host (4 min 03 s measured on the quiet 2-core machine of 2026-11-23, 4 min 50 s on 2026-11-26's slower one, 7 min 22 s on 2026-11-28's slower still, FedAvg-AE included; docs/privacy.md, docs/performance.md)"
DEFAULT_DATA = "ml100k-like"
PROTOCOLS = ("fedrec", "fedrecpp", "fpl", "fcf", "personalfr", "fedavg-ae")
DEFENCES = ("noise", "secagg", "secure_noise")
# the uncompressed PersonalFR runs: their `defence` label and configuration changes
PFR_UNCOMPRESSED = ("keep", "reset", "masked")
PFR_VARIANTS = {"keep": ("uncompressed", {}),
                "reset": ("uncompressed, reset momentum", {"client_momentum": "reset"}),
                "masked": ("uncompressed, masked", {"uncompressed_training": "masked"})}
# the FedAvg-AE runs: their clients' momentum, and its `defence` label
FEDAVG_MOMENTUM = ("keep", "reset")
FEDAVG_VARIANTS = {"keep": "kept momentum", "reset": "reset momentum"}
PARAMS = {
    "protocols": Param(list(PROTOCOLS), "protocols to audit", kind="strs", choices=PROTOCOLS),
    "models": Param(["PMF(B)", "PMF(S)", "SVD++(S)"], "FedRec models", kind="strs",
                    choices=("PMF(B)", "PMF(S)", "SVD++(S)")),
    "strategies": Param(["ua", "hf"], "FedRec fillings", kind="strs", choices=("ua", "hf")),
    "rhos": Param([1, 2, 3], "FedRec PMF(B) sampling parameters rho", kind="ints", min=0),
    "iterations": Param.of(FedRecConfig, "T", 40, help="iterations of the batch FedRec and FedRec++ runs (the "
                           "paper: 100; the learning rate has decayed to 1 % of gamma by 40)"),
    "d": Param.of(FedRecConfig, "d"),
    "sgd_iterations": Param(2, "iterations of the stochastic FedRec runs (hybrid filling switched on from the "
                            "second: T_predict = 0)", min=1),
    "sgd_rhos": Param([1], "rho of the stochastic FedRec runs", kind="ints", min=0),
    "sgd_targets": Param(200, "stochastic runs: the users whose traffic is recorded and attacked (a seeded "
                         "sample; 0: all)", min=0),
    "etas": Param(["1", "n/4"], "FedRec++ denoisers (a number or n/K)", kind="strs"),
    "pp_rhos": Param([1], "rho of the FedRec++ runs", kind="ints", min=1),
    "link_profiles": Param(["wan", "mobile"], "network profiles of the FedRec++ linking runs (the run's own "
                           "profile is added)", kind="strs"),
    "link_iterations": Param(2, "iterations of the FedRec++ linking runs", min=1),
    "fpl_data": Param([], "FPL and FCF datasets (paths; none: --data as implicit feedback)", kind="strs"),
    "presets": Param(list(PRESET_NAMES), "FPL presets", kind="strs", choices=PRESET_NAMES),
    "pis": Param([0.0, 0.1, 0.5, 1.0], "FPL disclosure probabilities pi", kind="floats", min=0, max=1),
    "fpl_epochs": Param(4, "FPL epochs (the attacks are scored after each: rounds observed)", min=1),
    "fpl_min_interactions": Param(20, "FPL: keep users with at least this many interactions", min=1),
    "fpl_max_users": Param(-1, "FPL: a seeded subset of this many users (0: all; -1: 100 on synthetic data, all "
                           "on real data)"),
    "fcf_rounds": Param(3, "FCF rounds", min=1),
    "personalfr_clients": Param(100, "PersonalFR clients (users are grouped into them)", min=1),
    "personalfr_uncompressed": Param(list(PFR_UNCOMPRESSED), "PersonalFR without compression (no indices sent; "
                                     "the server reads the whole decoder each client returns): clients keep their "
                                     "momentum (keep), reset it each round (reset), or train only their own rows "
                                     "(masked); none: only the compressed run", kind="strs",
                                     choices=PFR_UNCOMPRESSED),
    "personalfr_rounds": Param(10, "rounds of the uncompressed PersonalFR runs (C = 0.1, K = 5 local epochs)",
                               min=1),
    "fedavg_momentum": Param(list(FEDAVG_MOMENTUM), "FedAvg-AE runs (the clients, model and rounds of the "
                             "uncompressed PersonalFR runs): clients keep their momentum between rounds (keep) or "
                             "reset it (reset); none: no FedAvg-AE run", kind="strs", choices=FEDAVG_MOMENTUM),
    "defences": Param(list(DEFENCES), "defences to audit", kind="strs", choices=DEFENCES),
    "noise_sigmas": Param([0.001, 0.01, 0.1], "upload_noise standard deviations", kind="floats", min=0),
    "defence_iterations": Param(13, "iterations of the FedRec secure-aggregation and FedRec++ secure-noise runs "
                                "(their models equal the undefended ones: tests/test_secagg.py; 0: iterations)",
                                min=0),
    "secagg_neighbours": Param(4, "secure aggregation: ring neighbours per client", min=2),
    "imia_users": Param(100, "users the reference attack (IMIA) attacks per run (a seeded sample; 0: all)",
                        min=0),
    "seeds": Param(1, "protocol seeds per configuration (intervals pool users and seeds)", min=1),
    "workers": Param(0, "worker processes (0: one per core)", min=0),
}


def _specs(*items) -> tuple:
    """The attacks of a task, each once: with a one-round observation (``iterations`` 1 or 2) the
    window of the several-round attacks is the one-round attack's, the same spec twice, whose rows
    ``_pool_seeds`` would pool as two seeds (58 users of 29)."""
    return tuple(dict.fromkeys(items))


def _rounds(n: int) -> str:
    """An attack window's label: ``1 round``, ``2 rounds`` (a one-round window read "1 rounds")."""
    return f"{int(n)} round{'s' if int(n) != 1 else ''}"


def _fedrec_tasks(ctx, add, fold, data, n_users) -> None:
    T = int(ctx["iterations"])
    r1 = max(0, min(11, T - 2))  # the first round with hybrid filling on (code convention: t > T_predict = 10)
    obs = (r1, r1 + 1) if T > r1 + 1 else (r1,)
    imia = AttackSpec("imia", (("max_users", ctx["imia_users"] or None),), (r1,), "1 round")
    size = AttackSpec("size_only", (), (r1,), "1 round")
    inter1 = AttackSpec("intersection", (), (r1,), "1 round")
    inter2 = AttackSpec("intersection", (), obs, _rounds(len(obs)))
    test = fold.test
    for model in ctx["models"]:
        if model == "PMF(B)":
            for strategy in ctx["strategies"]:
                for rho in ctx["rhos"]:
                    cfg = FedRecConfig(model, d=ctx["d"], T=T, lr=paper_lr(model), rho=float(rho), strategy=strategy)
                    add("fedrec", {"model": model, "strategy": strategy, "rho": rho}, cfg, data, test, obs, None,
                        _specs(AttackSpec("implied_ratings", (), (r1,), "1 round"), inter1, inter2, imia, size))
        else:
            Ts = int(ctx["sgd_iterations"])
            first = AttackSpec("sgd_chain" if model == "PMF(S)" else "svdpp_odelta", (), (Ts - 1,), "1 round")
            for strategy in ctx["strategies"]:
                for rho in ctx["sgd_rhos"]:
                    cfg = FedRecConfig(model, d=ctx["d"], T=Ts, lr=paper_lr(model), rho=float(rho), strategy=strategy,
                                       T_predict=0)
                    add("fedrec", {"model": model, "strategy": strategy, "rho": rho}, cfg, data, test, None,
                        ctx["sgd_targets"] or None,
                        _specs(first, AttackSpec("intersection", (), None, _rounds(Ts)),
                               AttackSpec("imia", (("max_users", ctx["imia_users"] or None),), None, "first call"),
                               AttackSpec("size_only", (), (Ts - 1,), "1 round")))
    if "noise" in ctx["defences"]:
        for sigma in ctx["noise_sigmas"]:
            cfg = FedRecConfig("PMF(B)", d=ctx["d"], T=T, lr=paper_lr("PMF(B)"), rho=1.0, strategy="ua",
                               upload_noise=float(sigma))
            add("fedrec", {"model": "PMF(B)", "strategy": "ua", "rho": 1, "defence": f"noise {sigma:g}"}, cfg, data,
                test, obs, None, _specs(AttackSpec("implied_ratings", (), (r1,), "1 round"), inter2, imia, size))
    if "secagg" in ctx["defences"]:
        Td = int(ctx["defence_iterations"]) or T
        cfg = FedRecConfig("PMF(B)", d=ctx["d"], T=max(Td, max(obs) + 1), lr=paper_lr("PMF(B)"), rho=1.0,
                           strategy="ua", secure_aggregation=True, secagg_neighbours=ctx["secagg_neighbours"])
        add("fedrec", {"model": "PMF(B)", "strategy": "ua", "rho": 1, "defence": "secagg"}, cfg, data, test, obs,
            None, _specs(AttackSpec("implied_ratings", (), (r1,), "1 round"), inter2, imia, size))


def _fedrecpp_tasks(ctx, add, fold, data, n_users) -> None:
    T = int(ctx["iterations"])
    r1 = max(0, min(11, T - 2))
    obs = (r1, r1 + 1) if T > r1 + 1 else (r1,)
    Td = max(int(ctx["defence_iterations"]) or T, max(obs) + 1)
    for secure in ([False, True] if "secure_noise" in ctx["defences"] else [False]):
        for eta_text in ctx["etas"]:
            eta = denoisers(eta_text, n_users, at_least_one=True)
            for rho in ctx["pp_rhos"]:
                cfg = FedRecPPConfig(d=ctx["d"], T=Td if secure else T, rho=float(rho), eta=eta, secure_noise=secure,
                                     secagg_neighbours=ctx["secagg_neighbours"])
                setting = {"model": "PMF(B)", "strategy": "hf", "rho": rho, "eta": eta_text,
                           **({"defence": "secure noise"} if secure else {})}
                add("fedrecpp", setting, cfg, data, fold.test, obs, None, _specs(
                    AttackSpec("implied_ratings", (), (r1,), "1 round"),
                    AttackSpec("intersection", (), obs, _rounds(len(obs))),
                    AttackSpec("noise_matching", (), (r1,), "1 round"),
                    AttackSpec("noise_matching", (("count", 1),), (r1,), "1 round"),
                    AttackSpec("noise_matching", (), obs, _rounds(len(obs))),
                    AttackSpec("imia", (("max_users", ctx["imia_users"] or None),), (r1,), "1 round"),
                    AttackSpec("size_only", (), (r1,), "1 round")))
                profiles = list(dict.fromkeys([ctx.net.profile, *ctx["link_profiles"]]))
                Tl = int(ctx["link_iterations"])
                for prof in profiles:
                    lcfg = FedRecPPConfig(d=ctx["d"], T=Tl, rho=float(rho), eta=eta, secure_noise=secure,
                                          secagg_neighbours=ctx["secagg_neighbours"])
                    links = tuple(AttackSpec("noise_linking", (("use", u),), None, _rounds(Tl))
                                  for u in ("size", "time", "size+time"))
                    add("fedrecpp", {**setting, "profile": prof}, lcfg, data, None, (), None, links,
                        net=replace(NetSpec.of(ctx.net), profile=prof))


def _fpl_tasks(ctx, add, splits) -> None:
    E = int(ctx["fpl_epochs"])
    cps = tuple(sorted({1, max(1, E // 2), E}))
    for name, split, recipe in splits:
        attacks = _specs(AttackSpec("fpl_sign"), AttackSpec("fpl_never_negative"),
                         AttackSpec("imia", (("max_users", ctx["imia_users"] or None),)),
                         AttackSpec("size_only"))
        for preset in ctx["presets"]:
            for pi in ctx["pis"]:
                cfg = config_for_preset(preset, split.n_users, split.x_plus, epochs=1, d=10, lr=0.05, pi=float(pi))
                add("fpl", {"data": name, "preset": preset, "pi": pi}, cfg, recipe, None, None, None, attacks,
                    epochs=E, checkpoints=cps)
        first = name == splits[0][0]
        if not first:
            continue
        cpr = [p for p in ("pFPL", "pFPL+") if p in ctx["presets"]] or ["pFPL"]
        if "noise" in ctx["defences"]:
            for sigma in ctx["noise_sigmas"]:
                cfg = config_for_preset(cpr[0], split.n_users, split.x_plus, epochs=1, d=10, lr=0.05, pi=0.5,
                                        upload_noise=float(sigma))
                add("fpl", {"data": name, "preset": cpr[0], "pi": 0.5, "defence": f"noise {sigma:g}"}, cfg, recipe,
                    None, None, None, attacks, epochs=E, checkpoints=(E,))
        if "secagg" in ctx["defences"]:
            for preset in cpr:
                cfg = config_for_preset(preset, split.n_users, split.x_plus, epochs=1, d=10, lr=0.05, pi=0.5,
                                        secure_aggregation=True, secagg_neighbours=ctx["secagg_neighbours"])
                add("fpl", {"data": name, "preset": preset, "pi": 0.5, "defence": "secagg"}, cfg, recipe, None, None,
                    None, attacks, epochs=E, checkpoints=(E,))


def _splits(ctx) -> list:
    """``[(name, ImplicitSplit, SplitData)]`` for FPL and FCF: ``fpl_data``, or ``--data``."""
    specs = list(ctx["fpl_data"]) or [str(ctx.data)]
    out = []
    from fedsim.data import resolve
    from fedsim.studies.fpl import NoUserLeftError

    for s in specs:
        opt = "fpl_data" if ctx["fpl_data"] else "--data"
        try:
            resolve(s)
        except FileNotFoundError as exc:
            raise UsageError(f"{opt}: {exc}") from None
        except ValueError as exc:  # a file of no format it reads (DataFormatError: file, line, reason)
            raise UsageError(f"{opt}: {exc}") from None
        max_users = int(ctx["fpl_max_users"])
        if max_users < 0:
            max_users = 0 if Path(s).exists() else 100  # synthetic presets: a 100-user subset
        kw = (("min_interactions", int(ctx["fpl_min_interactions"])), ("protocol", "test"),
              ("max_users", max_users), ("seed", ctx.seed))
        recipe = SplitData(s, kw)
        name = Path(s).stem if Path(s).exists() else s
        try:
            split = recipe.load()[0]
        except NoUserLeftError as exc:  # the data are too small for the filter: a traceback before
            raise UsageError(f"--set fpl_min_interactions: {opt} {s}: {exc}; set a lower fpl_min_interactions") \
                from None
        out.append((name, split, recipe))
    return out


def run(ctx: RunContext) -> None:
    refuse_faults(ctx.net, "privacy_audit runs its protocols with no deadline",
                  "a loss would stop a run in a deadlock, a client that drops out after its last upload would leave "
                  "its user factor zeroed in the accuracy column; audit a faulty run with fedsim.privacy.capture and "
                  "a deadline (docs/privacy.md)", UsageError)
    if ctx.net.transport not in ("sim", "asyncio"):
        raise UsageError("privacy_audit records messages through the network's tap: use the sim or asyncio "
                         "transport (TcpNetwork makes its ledger rows in worker processes)")
    chosen = set(ctx["protocols"])
    tasks: list[AuditTask] = []

    def add(protocol, setting, cfg, data, test, observe, targets, attacks, *, epochs=1, checkpoints=(), net=None,
            build_kw=None):
        for s in range(int(ctx["seeds"])):
            seed = ctx.seed * 1000 + s
            label = f"{protocol}-{len(tasks):03d}-s{s}"
            tasks.append(AuditTask(label, protocol, {"protocol": protocol, **setting}, cfg, data, test, seed,
                                   net or ctx.net, observe, targets, attacks, epochs, checkpoints, ctx.ledger_dir,
                                   build_kw or {}))

    if chosen & {"fedrec", "fedrecpp", "personalfr", "fedavg-ae"}:
        ratings = ctx.load_data()
        fold = make_folds(ratings, 5, ctx.seed)[0]
        train = fold.train_ratings()
        n_users = int(train.n_users)
        data_ref = FoldData(fold)  # what the worker processes rebuild the data from
        ctx.note(f"Explicit data `{ctx.data}`: {n_users} users, {train.n_items} items, {len(train)} training ratings "
                 f"(fold 1 of 5; its test part gives the RMSE).")
        if "fedrec" in chosen:
            _fedrec_tasks(ctx, add, fold, data_ref, n_users)
        if "fedrecpp" in chosen:
            _fedrecpp_tasks(ctx, add, fold, data_ref, n_users)
        if "personalfr" in chosen:
            pf = REGISTRY["personalfr"].Config(rounds=1, fraction=0.05, local_epochs=1, hidden=(32, 16),
                                               clients=min(int(ctx["personalfr_clients"]), n_users))
            add("personalfr", {"clients": pf.clients}, pf, data_ref, None, None, None,
                _specs(AttackSpec("personalfr_indices"), AttackSpec("size_only")))
            for variant in ctx["personalfr_uncompressed"]:
                # no indices: what the whole decoder a client returns shows (personalfr_idle_rows), over
                # several rounds so that later selections (kept momentum) are read too
                label, changes = PFR_VARIANTS[variant]
                pu = pf.replace(compression=False, rounds=int(ctx["personalfr_rounds"]), fraction=0.1,
                                local_epochs=5, **changes)
                add("personalfr", {"clients": pu.clients, "defence": label}, pu, data_ref, None, None, None,
                    _specs(AttackSpec("personalfr_indices"), AttackSpec("personalfr_idle_rows"),
                           AttackSpec("size_only")))
        if "fedavg-ae" in chosen:
            # PersonalFR's baseline on the uncompressed runs' clients, model and rounds: every client returns
            # the whole model it trained (fedavg_idle_rows: its output rows and input columns)
            for variant in ctx["fedavg_momentum"]:
                fa = REGISTRY["fedavg-ae"].Config(rounds=int(ctx["personalfr_rounds"]), fraction=0.1, local_epochs=5,
                                                  hidden=(32, 16), clients=min(int(ctx["personalfr_clients"]), n_users),
                                                  client_momentum=variant)
                add("fedavg-ae", {"clients": fa.clients, "defence": FEDAVG_VARIANTS[variant]}, fa, data_ref, None,
                    None, None, _specs(AttackSpec("fedavg_idle_rows")))
    if chosen & {"fpl", "fcf"}:
        splits = _splits(ctx)
        for name, sp, _ in splits:
            ctx.note(f"Implicit data `{name}`: {sp.n_users} users, catalogue {len(sp.catalogue)} items, "
                     f"X+ = {sp.x_plus} training interactions (per-user temporal 80/20; P@10 on the 20 %).")
        if "fpl" in chosen:
            _fpl_tasks(ctx, add, splits)
        if "fcf" in chosen:
            name, sp, recipe = splits[0]
            R = int(ctx["fcf_rounds"])
            add("fcf", {"data": name}, FCFConfig(rounds=R, d=10), recipe, None, (R - 1,), None,
                _specs(AttackSpec("fcf_line", (("threshold", 0.01),), (R - 1,), "1 round"),
                       AttackSpec("imia", (("max_users", ctx["imia_users"] or None),), (R - 1,), "1 round"),
                       AttackSpec("size_only", (), (R - 1,), "1 round")))
    if not tasks:
        raise UsageError("nothing to audit: check protocols")
    workers = ctx["workers"] or default_workers()
    ctx.progress.update(0, len(tasks), stage="privacy audit")
    outs = pmap(run_task, tasks, workers, on_done=count_done(lambda k: ctx.progress.update(k, len(tasks))),
                cost=_cost)
    rows, sizes, links = [], [], []
    for o in outs:
        for rec in o["records"]:
            ctx.record_run(rec)
        rows += o["rows"]
        sizes += o["sizes"]
        links += o["links"]
    said = unevaluated_note(tasks, outs)
    if said:
        ctx.caveat("unevaluated", said)
    rows = _pool_seeds(rows)
    cols = ["protocol", "data", "model", "strategy", "rho", "eta", "preset", "pi", "defence", "T", "adversary",
            "attack", "window", "users", "attacked", "unseen", "unrecorded_users", "partly_seen", *_metric_cols(), "accuracy_metric", "accuracy",
            "bytes_per_client", "up_bytes", "down_bytes", "run_s", "attack_s"]
    ctx.table("leakage", [{c: r.get(c, "") for c in cols} for r in rows], columns=cols,
              title="Leakage per protocol, setting and attack (means over the users the adversary saw upload in "
                    "the window, +- 95 % interval; attacked: those of them the attack answered for, the others "
                    "count as misses (IMIA: its sample of them); unseen: clients with no upload in the window, "
                    "unrecorded_users: clients seen whose uploads the audit did not record, neither scored; "
                    "partly_seen: users scored whom the server called in a round of the window without seeing "
                    "their upload in it; *_rand: the random guess of the same size among the items seen)",
              floatfmt=".4g")
    if sizes:
        scols = ["protocol", "data", "model", "strategy", "rho", "eta", "preset", "pi", "defence", "window",
                 "size_estimate", "size_users", "size_exact", "size_mre", "size_spearman", "bytes_per_client",
                 "attack_s"]
        ctx.table("sizes", [{c: r.get(c, "") for c in scols} for r in sizes], columns=scols,
                  title="Message sizes alone (an observer of the server's link): |I_u| recovered exactly, median "
                        "relative error, rank correlation with |I_u|", floatfmt=".4g")
    if links:
        lcols = ["protocol", "rho", "eta", "defence", "profile", "attack", "window", "messages", "link_accuracy",
                 "link_rand", "attack_s"]
        ctx.table("linking", [{c: r.get(c, "") for c in lcols} for r in links], columns=lcols,
                  title="FedRec++'s anonymous noise messages linked to their senders by a network observer (sizes "
                        "and arrival times at the server's and the denoisers' links)", floatfmt=".4g")
    _notes(ctx, rows)
    _plots(ctx, rows)


def unevaluated_note(tasks: list[AuditTask], outs: list[dict]) -> str | None:
    """The **Not evaluated** note for the runs (``run_task``'s answers ``outs`` to ``tasks``) whose
    accuracy was asked for and could not be had (``info["unevaluated"]``: the model diverged, every
    user with test ratings dropped out, ...), naming each run and why; None when there is none.
    Their accuracy is NaN, which read as a broken model (FedRec's was a mean over no rating, with
    NumPy's "Mean of empty slice" warnings, until 2026-11-28)."""
    which = [f"{_setting_text(t.setting)}, seed {t.seed}: {o['info']['unevaluated']}"
             for t, o in zip(tasks, outs) if o["info"].get("unevaluated")]
    if not which:
        return None
    return (f"**Not evaluated.** {len(which)} run(s) had no accuracy to report ({'; '.join(which)}): their NaN "
            "accuracy is no score.")


def _setting_text(setting: dict) -> str:
    """``fedrec (model PMF(B), strategy ua, rho 1)``: a task's protocol and setting, for notes."""
    what = ", ".join(f"{k} {v}" for k, v in setting.items() if k != "protocol" and v not in (None, ""))
    return f"{setting.get('protocol', '?')} ({what})" if what else str(setting.get("protocol", "?"))


def _cost(task: AuditTask) -> float:
    base = {"fedrec": 3.0, "fedrecpp": 3.0, "fpl": 1.0, "fcf": 1.0, "personalfr": 0.5, "fedavg-ae": 0.5}[task.protocol]
    cfg = task.config
    return base * getattr(cfg, "T", getattr(cfg, "rounds", 1) if task.protocol in ("personalfr", "fedavg-ae") else 1) * (4 if getattr(cfg, "secure_aggregation", False) or
                                          getattr(cfg, "secure_noise", False) else 1) * task.epochs


def _metric_cols() -> list[str]:
    out = []
    for m in METRICS:
        out += [m, f"{m}_ci", f"{m}_rand"]
    return out


def _pool_seeds(rows: list[dict]) -> list[dict]:
    """One row per configuration and attack: the per-user scores of all its seeds pooled
    (``summarize``: means, 95 % intervals over users and seeds, the spread of the per-seed means
    as ``*_seed_sd`` when there are several); the costs and accuracy averaged over the seeds."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    keys = ("protocol", "data", "model", "strategy", "rho", "eta", "preset", "pi", "defence", "profile", "attack",
            "window", "adversary")
    for r in rows:
        groups[tuple(str(r.get(k, "")) for k in keys)].append(r)
    out = []
    for grp in groups.values():
        merged = {k: v for k, v in grp[0].items() if k != "scored"}
        for k in ("attacked", "unseen", "unrecorded_users", "partly_seen"):  # counts of users, pooled over the seeds as the scores are
            if k in grp[0]:
                merged[k] = sum(int(g.get(k, 0)) for g in grp)
        for k, v in grp[0].items():
            if isinstance(v, float) and k not in ("scored",):
                vals = np.array([g.get(k, math.nan) for g in grp], dtype=float)
                merged[k] = float(np.mean(vals[~np.isnan(vals)])) if (~np.isnan(vals)).any() else math.nan
        scored = [x for g in grp for x in g.get("scored", [])]
        merged.update(summarize(scored))
        merged["seeds"] = len(grp)
        out.append(merged)
    return out


def _best(rows, keyf):
    best: dict = {}
    for r in rows:
        if r.get("adversary") != "server" or not isinstance(r.get("f1"), float) or math.isnan(r["f1"]):
            continue
        k = keyf(r)
        if k not in best or r["f1"] > best[k]["f1"]:
            best[k] = r
    return best


def _notes(ctx, rows) -> None:
    ctx.note("Baselines: precision_rand etc. are a random guess of as many items as the attack claimed, drawn "
             "from the items the adversary saw for that user (for FedRec: I_u u I'_u, precision 1 / (1 + rho)); "
             "auc_rand scores every seen item alike. Costs: bytes per client over the whole run, everything "
             "but evaluation messages, from the ledger.")
    lines = []
    for r in rows:
        if r.get("adversary") not in ("server",) and not str(r.get("adversary", "")).startswith("server+"):
            continue
        if not isinstance(r.get("f1"), float) or math.isnan(r["f1"]):
            continue
        what = ", ".join(f"{k} {r[k]}" for k in ("model", "strategy", "rho", "eta", "preset", "pi", "clients",
                                                  "defence") if r.get(k) not in (None, ""))
        # (PersonalFR's setting is its clients: its line read "personalfr (), ...")
        lines.append(f"{r['protocol']}{f' ({what})' if what else ''}, {r['attack']} [{r['adversary']}, "
                     f"{r['window']}]: F1 {r['f1']:.3f} (random {r['f1_rand']:.3f}), exact {r['exact']:.3f}")
    if lines:
        ctx.note("Every server-side attack, F1 against the random guess:\n\n" + "\n".join(f"- {x}" for x in lines))
    unmeasured = sorted({r["protocol"] for r in rows if not r.get("accuracy_metric")})
    if unmeasured:
        # (PersonalFR's rows had an accuracy of nan, an empty accuracy_metric and no word of why)
        ctx.note(f"No accuracy is measured for {', '.join(unmeasured)}: the audit runs it for what its messages "
                 "reveal and evaluates no model, so its `accuracy` is NaN and its `accuracy_metric` empty.")


def _plots(ctx, rows) -> None:
    explicit = _best([r for r in rows if r["protocol"] in ("fedrec", "fedrecpp")],
                     lambda r: (r["protocol"], r.get("model"), r.get("strategy"), r.get("rho"), r.get("eta"),
                                r.get("defence")))
    implicit = _best([r for r in rows if r["protocol"] in ("fpl", "fcf")],
                     lambda r: (r["protocol"], r.get("data"), r.get("preset"), r.get("pi"), r.get("defence")))

    def draw(ax, best, xlabel):
        pts = [r for r in best.values() if isinstance(r.get("accuracy"), float) and not math.isnan(r["accuracy"])]
        if not pts:
            return
        b = np.array([max(r["bytes_per_client"], 1.0) for r in pts])
        size = 20 + 180 * (np.log10(b) - np.log10(b).min()) / max(np.ptp(np.log10(b)), 1e-9)
        colors = {"fedrec": "#1f3b73", "fedrecpp": "#1b6e3a", "fpl": "#b5651d", "fcf": "#7f1f1f"}
        for r, s in zip(pts, size):
            ax.scatter(r["accuracy"], r["f1"], s=s, alpha=0.6, color=colors.get(r["protocol"], "grey"),
                       marker="s" if r.get("defence") else "o")
            label = "/".join(str(r.get(k)) for k in ("model", "strategy", "rho", "preset", "pi", "defence")
                             if r.get(k) not in (None, ""))
            ax.annotate(label, (r["accuracy"], r["f1"]), fontsize=5, alpha=0.7)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("F1 of the best server attack")
        ax.set_title("privacy / accuracy / communication (marker area: bytes per client, log; squares: defences)",
                     fontsize=7)

    if explicit:
        ctx.plot("tradeoff_explicit", lambda ax: draw(ax, explicit, "test RMSE (FedRec, FedRec++)"))
    if implicit:
        ctx.plot("tradeoff_implicit", lambda ax: draw(ax, implicit, "test P@10 (FPL, FCF)"))


if __name__ == "__main__":
    raise SystemExit(scenario_main(globals()))
