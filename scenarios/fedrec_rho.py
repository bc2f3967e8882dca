"""FedRec Figure 2: user averaging vs hybrid filling for rho in {0, 1, 2, 3} (federated).

Each (model, strategy, rho) runs on every fold with the actors on a simulated network; the
table gives MAE/RMSE mean +- std, the plot RMSE against rho. With HF, (T_predict, T_local) are
searched per (model, rho) from {5, 10, 15} x {5, 10, 15} by MAE, as the paper does, on a
validation split cut from the first copy's training part (``search_on=validation``; the
paper's rule, copy 1's test part, is ``first_copy``; ``none`` takes the authors' ML100K
settings). The search runs the central twins (equal to the federated runs with the same seed).
"""

from __future__ import annotations

import math

from fedsim.experiment import Param, RunContext, UsageError, scenario_main
from fedsim.protocols.fedrec import FedRecConfig
from fedsim.studies.fedrec import fold_stats, group_runs, make_folds, paper_lr, refuse_faults, run_one
from fedsim.studies.paper_values import FEDREC_HF_RMSE_ML100K, FEDREC_HF_SETTINGS, FEDREC_UA_RMSE_ML100K
from fedsim.studies.datasets import data_note
from fedsim.studies.learning import warn_not_learned
from fedsim.studies.parallel import count_done, default_workers, pmap
from fedsim.studies.search import SEARCH_RULES, choose_hf

# typical wall time on a 2-core machine, shown by `fedsim list`
RUN_TIME = 'about 6-9 min at ML-100K scale, the default (5 folds, T = 100; 5 min 31 s measured quiet on 2026-11-23, 8 min 50 s on 2026-11-26\'s slower machine; docs/performance.md)'
DEFAULT_DATA = "ml100k-like"
PARAMS = {
    "folds": Param(5, "number of data copies (folds)", min=2),
    "iterations": Param.of(FedRecConfig, "T", 100),
    "d": Param.of(FedRecConfig, "d"),
    "models": Param(["PMF(B)"], "models", kind="strs", choices=("PMF(B)", "PMF(S)", "SVD++(S)")),
    "rhos": Param([0, 1, 2, 3], "sampling parameters rho", kind="floats", min=0),
    "strategies": Param(["ua", "hf"], "filling strategies", kind="strs", choices=("ua", "hf")),
    "lam": Param.of(FedRecConfig, "lam", help="lambda (Table 2's choice on ML100K)"),
    "T_predict": Param(-1, "HF: iteration to start predicting (-1: searched, see search_on)", min=-1),
    "T_local": Param(-1, "HF: local training steps (-1: searched, see search_on)", min=-1),
    "search_on": Param("validation", "where (T_predict, T_local) are scored: a validation split of copy 1's "
                       "training part, copy 1's test part (the paper's rule), or none (the authors' "
                       "ML100K settings)", choices=SEARCH_RULES),
    "resample": Param.of(FedRecConfig, "resample"),
    "dtype": Param.of(FedRecConfig, "dtype"),
    "workers": Param(0, "worker processes (0: one per core)", min=0),
}


def authors_hf(key: tuple) -> tuple[int, int]:
    """The authors' ML100K (T_predict, T_local) for (model, rho); (10, 10) off their grid."""
    model, rho = key
    if rho >= 1 and int(rho) == rho and int(rho) <= 3:
        return FEDREC_HF_SETTINGS[model][int(rho) - 1]
    return 10, 10


def run(ctx: RunContext) -> None:
    # its runs have no deadline: refused before any work (a lost message was a worker's DeadlockError, a
    # client that dropped out after its last upload a zeroed user factor in a table of complete runs)
    refuse_faults(ctx.net, "fedrec_rho", UsageError)
    ratings = ctx.load_data()
    data_note(ctx, ratings)
    folds = make_folds(ratings, ctx["folds"], ctx.seed)
    workers = ctx["workers"] or default_workers()

    def make_cfg(key, tp, tl):
        m, rho = key
        return FedRecConfig(m, d=ctx["d"], T=ctx["iterations"], lr=paper_lr(m), lam=ctx["lam"], rho=float(rho),
                            strategy="hf", T_predict=tp, T_local=tl, resample=ctx["resample"], dtype=ctx["dtype"])

    hf = {}
    if "hf" in ctx["strategies"]:
        hf = choose_hf(ctx, folds, [(m, rho) for m in ctx["models"] for rho in ctx["rhos"] if rho > 0], make_cfg,
                       rule=ctx["search_on"], workers=workers, paper=authors_hf,
                       fixed=(ctx["T_predict"], ctx["T_local"]), seed=ctx.seed * 1000 + 999, key_names=("model", "rho"))
    tasks, keys = [], []
    for m in ctx["models"]:
        for strat in ctx["strategies"]:
            for rho in ctx["rhos"]:
                if rho == 0 and strat != ctx["strategies"][0]:
                    continue  # rho = 0 samples nothing: both strategies are the same run
                tp, tl = hf.get((m, rho), authors_hf((m, rho)))
                cfg = FedRecConfig(m, d=ctx["d"], T=ctx["iterations"], lr=paper_lr(m), lam=ctx["lam"],
                                   rho=float(rho), strategy=strat, T_predict=tp, T_local=tl,
                                   resample=ctx["resample"], dtype=ctx["dtype"])
                for f in folds:
                    tasks.append((f, "federated", cfg, ctx.seed * 1000 + f.index, ctx.net, False, ctx.ledger_dir))
                    keys.append((m, strat, rho))
    ctx.progress.update(0, len(tasks), stage="rho sweep")
    outs = pmap(run_one, tasks, workers, on_done=count_done(lambda k: ctx.progress.update(k, len(tasks))))
    for o in outs:  # what each run's network recorded (they ran in worker processes)
        ctx.record_run(o.record)
    rows = []
    for (m, strat, rho), runs in group_runs(outs, keys).items():
        st = fold_stats(runs)
        strategies = ctx["strategies"] if rho == 0 else [strat]
        for s in strategies:
            paper = math.nan
            if rho >= 1 and int(rho) == rho and int(rho) <= 3:
                paper = (FEDREC_UA_RMSE_ML100K if s == "ua" else FEDREC_HF_RMSE_ML100K)[m][int(rho) - 1]
            rows.append({"model": m, "strategy": s, "rho": rho,
                         "T_predict": runs[0].cfg.T_predict if s == "hf" and rho > 0 else "",
                         "T_local": runs[0].cfg.T_local if s == "hf" and rho > 0 else "",
                         "mae_mean": st.mae_mean, "mae_std": st.mae_std, "rmse_mean": st.rmse_mean,
                         "rmse_std": st.rmse_std, "diverged_runs": len(st.diverged), "paper_rmse": paper,
                         "upload_floats_per_iter": runs[0].ledger["upload_floats"] if runs[0].ledger else math.nan})
        if st.diverged:
            ctx.caveat("diverged", f"**{m} {strat} rho={rho}: diverged on fold(s) {st.diverged}**; not averaged.")
    warn_not_learned(ctx, [(f"{o.cfg.model} {o.cfg.strategy} rho={o.cfg.rho:g}", o) for o in outs])
    ctx.table("rho", rows, title="Figure 2: RMSE against rho, user averaging vs hybrid filling")
    base = {r["model"]: r["rmse_mean"] for r in rows if r["rho"] == 0}
    for r in rows:
        r["rmse_minus_rho0"] = r["rmse_mean"] - base.get(r["model"], math.nan)
    ctx.table("rho_delta", [{k: r[k] for k in ("model", "strategy", "rho", "rmse_minus_rho0")} for r in rows],
              title="RMSE minus the rho = 0 RMSE (UA should grow with rho; HF stay within 0.005)")

    def draw(ax):
        for m in ctx["models"]:
            for s in ctx["strategies"]:
                pts = sorted((r["rho"], r["rmse_mean"]) for r in rows if r["model"] == m and r["strategy"] == s)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{m} {s.upper()}")
        ax.set_xlabel("rho")
        ax.set_ylabel("RMSE")
        ax.legend()
        ax.set_title("FedRec: RMSE vs sampling parameter")

    ctx.plot("rho", draw)


if __name__ == "__main__":
    raise SystemExit(scenario_main(globals()))
