"""FedRec Table 2: PMF(B), PMF(S), SVD++(S), unfederated vs federated (rho = 0), k folds.

For each model, lambda is chosen from ``lambdas`` by the unfederated model's MAE and reused for
every fold and both frameworks. The paper scores the candidates on the first copy's test part;
here, by default (``search_on=validation``), on a validation split cut from the first copy's
training part (a random fifth of it), so no test rating is read before the table's runs
(``search_on=first_copy`` is the paper's rule). Federated runs are the
actors on a simulated network; unfederated runs are the centralized twins. By default the two
frameworks use independent seeds, so MD measures the same seed-to-seed spread the paper's MD
does (with ``same_seed=true`` they are identical to rounding: the equivalence made exact).
A run that diverges is reported as such and never averaged into the table.
"""

from __future__ import annotations

import math

import numpy as np

from fedsim.experiment import Param, RunContext, ScenarioError, UsageError, scenario_main
from fedsim.math.metrics import md_stdr
from fedsim.protocols.fedrec import FedRecConfig, formula_payload_floats
from fedsim.studies.fedrec import fold_stats, make_folds, paper_lr, refuse_faults, run_one
from fedsim.studies.paper_values import FEDREC_TABLE2_ML100K
from fedsim.studies.datasets import data_note
from fedsim.studies.learning import did_not_learn, warn_not_learned
from fedsim.studies.parallel import count_done, default_workers, pmap
from fedsim.studies import reference
from fedsim.studies.search import confirm_fold, run_search, search_fold, ties_text, tied_with_chosen

# typical wall time on a 2-core machine, shown by `fedsim list`
RUN_TIME = 'about 1.5-3 min at ML-100K scale, the default (30 runs of T = 100 with searches, paper order and scikit-surprise; 1 min 28 s measured quiet on 2026-11-23, 3 min 06 s on 2026-11-26\'s slower machine; docs/performance.md)'
DEFAULT_DATA = "ml100k-like"
PARAMS = {
    "folds": Param(5, "number of data copies (folds)", min=2),
    "iterations": Param.of(FedRecConfig, "T", 100),
    "d": Param.of(FedRecConfig, "d"),
    "models": Param(["PMF(B)", "PMF(S)", "SVD++(S)"], "models to run", kind="strs",
                    choices=("PMF(B)", "PMF(S)", "SVD++(S)")),
    "lambdas": Param([0.1, 0.01, 0.001], "lambda grid searched by MAE (see search_on)", kind="floats", min=0),
    "lam": Param(-1.0, "fixed lambda for all models (negative: search lambdas)"),
    "search_on": Param("validation", "where lambda is scored: a validation split of copy 1's training part, "
                       "or copy 1's test part (the paper's rule)", choices=("validation", "first_copy")),
    "same_seed": Param(False, "use the same seed for federated and unfederated runs"),
    "paper_order": Param(True, "also run every model's central twin in the paper's printed update order "
                         "(Algorithm 2 / 5: U_u stepped before the item gradients) on every fold and report it"),
    "reference": Param("surprise", "independent reference trained on the same folds: scikit-surprise's "
                       "SVD(biased=False) for PMF and SVDpp for SVD++ (the 'reference' extra), or none",
                       choices=("surprise", "none")),
    "dtype": Param.of(FedRecConfig, "dtype"),
    "workers": Param(0, "worker processes (0: one per core)", min=0),
}


def _seed(base: int, fold: int, framework: str, same: bool) -> int:
    return base * 1000 + fold * 10 + (0 if same or framework == "federated" else 5)


def _run_cost(task) -> float:
    _, framework, cfg, *_ = task
    return (20.0 if framework == "federated" else 1.0) * (2.0 if cfg.model == "SVD++(S)" else 1.0)


def select_lambda(ctx: RunContext, folds, models, workers):
    """``({model: lambda}, rows)``: lambda by the unfederated MAE on the search fold (central
    twins: the search builds no network)."""
    if ctx["lam"] >= 0:
        return {m: ctx["lam"] for m in models}, []
    fold = search_fold(folds, ctx["search_on"], len(folds), ctx.seed)
    groups = {m: [FedRecConfig(m, d=ctx["d"], T=ctx["iterations"], lr=paper_lr(m), lam=lam, dtype=ctx["dtype"])
                  for lam in ctx["lambdas"]] for m in models}
    n = sum(len(v) for v in groups.values())
    ctx.progress.update(0, n, stage=f"lambda search ({ctx['search_on']})")
    try:
        best, rows = run_search(fold, groups, seed=_seed(ctx.seed, 0, "unfederated", True), workers=workers,
                                confirm=confirm_fold(folds, ctx["search_on"], len(folds), ctx.seed),
                                on_done=count_done(lambda k: ctx.progress.update(k, n)),
                                describe=lambda c: {"model": c.model, "lambda": c.lam})
    except ValueError as exc:
        raise ScenarioError(f"lambda search: {exc}") from None
    for r in rows:
        r.pop("group", None)
        r["scored_on"] = ctx["search_on"]
    return {m: best[m].lam for m in models}, rows


def run(ctx: RunContext) -> None:
    # its runs have no deadline: refused before any work (a lost message was a worker's DeadlockError, a
    # client that dropped out after its last upload a zeroed user factor in a table of complete runs)
    refuse_faults(ctx.net, "fedrec_table2", UsageError)
    ratings = ctx.load_data()
    data_note(ctx, ratings)
    folds = make_folds(ratings, ctx["folds"], ctx.seed)
    workers = ctx["workers"] or default_workers()
    models = ctx["models"]
    lams, sel_rows = select_lambda(ctx, folds, models, workers)
    if sel_rows:
        where = ("a validation split of copy 1's training part" if ctx["search_on"] == "validation"
                 else "copy 1's test part (the paper's rule)")
        ctx.table("lambda_selection", sel_rows, title=f"Lambda search on {where} (unfederated, by MAE)")
        paper = ("" if ctx["search_on"] != "validation" else
                 "; the paper scored the candidates on copy 1's test part: --set search_on=first_copy")
        # a tie was shown as a choice (tiny data: the three lambdas give the same MAE)
        tied = tied_with_chosen(sel_rows, ["model"])
        ctx.note("Chosen lambda: " + ", ".join(f"{m} {lams[m]:g}" + ties_text([f"{o['lambda']:g}" for o in tied[(m,)]])
                                               for m in models) + f" (scored on {where}{paper}).")

    tasks = []
    for m in models:
        cfg = FedRecConfig(m, d=ctx["d"], T=ctx["iterations"], lr=paper_lr(m), lam=lams[m],
                           dtype=ctx["dtype"])
        for f in folds:
            for fw in ("unfederated", "federated"):
                tasks.append((f, fw, cfg, _seed(ctx.seed, f.index, fw, ctx["same_seed"]), ctx.net, False, ctx.ledger_dir))
    ctx.progress.update(0, len(tasks), stage="table 2 runs")
    # federated runs take 10-30x longer than their central twins, SVD++ the longest: start them first
    outs = pmap(run_one, tasks, workers, on_done=count_done(lambda k: ctx.progress.update(k, len(tasks))), cost=_run_cost)
    for o in outs:  # what each run's network recorded (they ran in worker processes)
        ctx.record_run(o.record)

    rows, md_rows, comm_rows, per_fold = [], [], [], []
    n_rated = len(folds[0].train[0])
    # a model with a run that did not learn: federated and unfederated both stay at the initial
    # model, so MD below STDR says nothing of losslessness (the column said True for them)
    stuck = {o.cfg.model for o in outs
             if getattr(o, "initial_rmse", None) is not None and did_not_learn(o.initial_rmse, o.rmse)}
    for m in models:
        by_fw = {fw: [o for o in outs if o.cfg.model == m and o.framework == fw]
                 for fw in ("unfederated", "federated")}
        stats = {}
        for fw, runs in by_fw.items():
            for o in runs:
                per_fold.append({"model": m, "framework": fw, "fold": o.fold + 1, "lambda": o.cfg.lam,
                                 "mae": o.mae, "rmse": o.rmse, "diverged_at": o.diverged_at or "",
                                 "wall_s": o.wall_s})
            s = fold_stats(runs)
            if s.diverged:
                ctx.caveat("diverged", f"**{m} {fw}: diverged on fold(s) {s.diverged}**; its row is not averaged.")
            stats[fw] = (s.mae, s.rmse, bool(s.diverged))
            paper = FEDREC_TABLE2_ML100K.get((m, fw), (math.nan,) * 4)
            rows.append({"model": m, "framework": fw, "lambda": lams[m], "mae_mean": s.mae_mean,
                         "mae_std": s.mae_std, "rmse_mean": s.rmse_mean, "rmse_std": s.rmse_std,
                         "diverged_runs": len(s.diverged), "paper_mae": paper[0], "paper_rmse": paper[2]})
        if not stats["federated"][2] and not stats["unfederated"][2]:
            a = md_stdr(stats["federated"][0], stats["unfederated"][0])
            r = md_stdr(stats["federated"][1], stats["unfederated"][1])
            md_rows.append({"model": m, "mae_md_pct": a.md, "mae_stdr_pct": a.stdr,
                            "rmse_md_pct": r.md, "rmse_stdr_pct": r.stdr,
                            "md_below_stdr": ("n/a: a run did not learn" if m in stuck
                                              else bool(a.md < a.stdr and r.md < r.stdr))})
        fed0 = by_fw["federated"][0]
        if fed0.ledger is not None:
            n, mi = folds[0].n_users, folds[0].n_items
            formula = formula_payload_floats(n_rated, 0.0, mi, n, ctx["d"])
            # both at the run's float width (float64 compared with a 4-byte formula showed a
            # false 2x gap); floats only: the ledger's count of float scalars, not its index bytes
            width = 4 if ctx["dtype"] == "float32" else 8
            comm_rows.append({"model": m, "ledger_float_bytes": width * fed0.ledger["floats"],
                              "formula_float_bytes": width * formula,
                              "wire_bytes": fed0.ledger["bytes"],
                              "messages": fed0.ledger["messages"]})
    warn_not_learned(ctx, [(f"{o.cfg.model} {o.framework}", o) for o in outs])
    ctx.table("table2", rows, title="Table 2: MAE and RMSE (mean +- population std over folds)")
    ctx.table("md_stdr", md_rows, title="MD and STDR (percent; MD < STDR: lossless within the model's own spread)",
              floatfmt=".3f")
    ctx.table("communication", comm_rows, title="Communication per iteration, fold 1 (ledger vs section 3.3 formula)",
              floatfmt=".0f")
    ctx.table("per_fold", per_fold, title="Per fold")
    if ctx["paper_order"]:
        run_paper_order_table(ctx, folds, models, lams, outs, workers)
    if ctx["reference"] == "surprise":
        run_reference_table(ctx, folds, models, outs, workers)
    ctx.note("Stochastic runs draw n users with replacement per iteration, so their per-iteration "
             "traffic replaces |R| in the formula by the drawn users' rating counts (and, for "
             "SVD++, doubles it for O). The formula applies exactly to PMF(B).")
    ctx.note(f"Folds run on {workers} worker process(es); the paper's values are shown for "
             "MovieLens 100K and do not apply to synthetic data.")


def run_paper_order_table(ctx: RunContext, folds, models, lams, outs, workers) -> None:
    """The central twins in the paper's printed order beside the code's order (the table's
    unfederated runs), same folds and seeds; a fold that diverges is shown, never averaged."""
    tasks = []
    for m in models:
        cfg = FedRecConfig(m, d=ctx["d"], T=ctx["iterations"], lr=paper_lr(m), lam=lams[m], dtype=ctx["dtype"],
                           order="paper")
        for f in folds:
            tasks.append((f, "unfederated", cfg, _seed(ctx.seed, f.index, "unfederated", ctx["same_seed"]),
                          "ideal", False))
    ctx.progress.update(0, len(tasks), stage="paper's update order")
    paper = pmap(run_one, tasks, workers, on_done=count_done(lambda k: ctx.progress.update(k, len(tasks))))
    rows = []
    for m in models:
        for order, runs in (("code", [o for o in outs if o.cfg.model == m and o.framework == "unfederated"]),
                            ("paper", [o for o in paper if o.cfg.model == m])):
            s = fold_stats(runs)
            rows.append({"model": m, "order": order, "mae_mean": s.mae_mean, "mae_std": s.mae_std,
                         "rmse_mean": s.rmse_mean, "rmse_std": s.rmse_std,
                         "diverged_folds": ",".join(str(k) for k in s.diverged),
                         "per_fold_rmse": " ".join("diverged" if o.diverged_at is not None else f"{o.rmse:.4f}"
                                                   for o in runs)})
    ctx.table("paper_order", rows, title="Update order: the authors' code (default) against the paper's printed "
              "Algorithm 2 / 5 (unfederated, same folds and seeds)")
    div = [f"{r['model']} (fold(s) {r['diverged_folds']})" for r in rows if r["order"] == "paper" and r["diverged_folds"]]
    if div:
        ctx.note("**The paper's printed order diverged** for " + "; ".join(div) + ": those means are NaN, the "
                 "other folds' errors are listed per fold.")


def run_reference_table(ctx: RunContext, folds, models, outs, workers) -> None:
    """scikit-surprise on the same folds beside fedsim's central twins (see
    fedsim.studies.reference); its hyperparameters searched like lambda (``search_on``)."""
    if not reference.available():
        ctx.note("Independent reference skipped: scikit-surprise is not installed "
                 "(`pip install 'fedsim[reference]'`).")
        return
    algos = list(dict.fromkeys(reference.ALGORITHMS[m] for m in models))
    fold = search_fold(folds, ctx["search_on"], len(folds), ctx.seed)
    cands = [(fold, a, p, ctx["d"], ctx.seed) for a in algos for p in reference.SURPRISE_GRID[a]]
    ctx.progress.update(0, len(cands), stage="reference: surprise search")
    found = pmap(reference.run_reference, cands, workers, on_done=count_done(lambda k: ctx.progress.update(k, len(cands))))
    best = {a: min((o for o in found if o.algorithm == a), key=lambda o: o.mae).params for a in algos}
    ctx.table("reference_search", [{"algorithm": o.algorithm, **o.params, "mae": o.mae, "rmse": o.rmse,
                                    "chosen": o.params == best[o.algorithm]} for o in found],
              title=f"scikit-surprise hyperparameters by MAE on the {ctx['search_on'].replace('_', ' ')} split")
    tasks = [(f, a, best[a], ctx["d"], ctx.seed * 1000 + f.index) for a in algos for f in folds]
    ctx.progress.update(0, len(tasks), stage="reference: surprise on every fold")
    ref = pmap(reference.run_reference, tasks, workers, on_done=count_done(lambda k: ctx.progress.update(k, len(tasks))))
    rows = []
    for m in models:
        a = reference.ALGORITHMS[m]
        ours = fold_stats([o for o in outs if o.cfg.model == m and o.framework == "unfederated"])
        theirs = [o for o in ref if o.algorithm == a]
        r_mae = np.array([o.mae for o in theirs])
        r_rmse = np.array([o.rmse for o in theirs])
        rows.append({"model": m, "fedsim_central_mae": ours.mae_mean, "fedsim_central_mae_std": ours.mae_std,
                     "fedsim_central_rmse": ours.rmse_mean, "fedsim_central_rmse_std": ours.rmse_std,
                     "surprise": a, "surprise_params": " ".join(f"{k}={v}" for k, v in best[a].items()),
                     "surprise_mae": r_mae.mean(), "surprise_mae_std": r_mae.std(),
                     "surprise_rmse": r_rmse.mean(), "surprise_rmse_std": r_rmse.std(),
                     "rmse_difference": ours.rmse_mean - r_rmse.mean()})
    ctx.table("reference", rows, title="fedsim's central twins beside scikit-surprise on the same folds "
              "(mean +- population std)")
    ctx.note("The reference is scikit-surprise " + _surprise_version() + ": SVD(biased=False) is PMF; SVDpp is "
             "SVD++ with a global mean and user and item biases (surprise's SVD++ always has them; fedsim's, like "
             "the authors' code, has none), so for SVD++ it is the same family, not the same model.")


def _surprise_version() -> str:
    try:
        from importlib.metadata import version

        return version("scikit-surprise")
    except Exception:  # the version is decoration only
        return ""


if __name__ == "__main__":
    raise SystemExit(scenario_main(globals()))
