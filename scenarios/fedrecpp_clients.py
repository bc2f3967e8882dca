"""FedRec++ Figure 2: FedRec vs FedRec++ (eta = 1) with c in {0.2n, 0.6n, n} participating
clients per iteration and rho in {0, 1, 2, 3}.

The server draws the c participants afresh every iteration. Runs on the first ``folds`` copies
(default 1, the paper's figure is a single curve per setting).
"""

from __future__ import annotations

from fedsim.experiment import Param, RunContext, scenario_main
from fedsim.protocols.fedrecpp import FedRecPPConfig
from fedsim.studies.fedrec import fold_stats, group_runs, make_folds
from fedsim.studies.fedrecpp import hf_setting, run_pp
from fedsim.studies.parallel import default_workers, pmap

# typical wall time on a 2-core machine, shown by `fedsim list`
RUN_TIME = 'tens of minutes at ML-100K scale (FedRec and FedRec++ per fraction and rho, T = 100; not measured)'
DEFAULT_DATA = "ml100k-like"
PARAMS = {
    "folds": Param(5, "the data is cut into this many copies", min=2),
    "use_folds": Param(1, "how many of the copies to run", min=1),
    "iterations": Param.of(FedRecPPConfig, "T", 100),
    "fractions": Param([0.2, 0.6, 1.0], "participating fraction c / n", kind="floats", min=0, max=1, exclusive_min=True),
    "rhos": Param([0, 1, 2, 3], "sampling parameters", kind="ints", min=0),
    "eta": Param.of(FedRecPPConfig, "eta"),
    "d": Param.of(FedRecPPConfig, "d"),
    "lam": Param.of(FedRecPPConfig, "lam"),
    "lr": Param.of(FedRecPPConfig, "lr"),
    "workers": Param(0, "worker processes (0: one per core)", min=0),
}


def run(ctx: RunContext) -> None:
    ratings = ctx.load_data()
    folds = make_folds(ratings, ctx["folds"], ctx.seed)[: ctx["use_folds"]]
    n = ratings.n_users
    workers = ctx["workers"] or default_workers()
    tasks, keys = [], []
    for frac in ctx["fractions"]:
        c = max(1, int(round(frac * n)))
        for rho in ctx["rhos"]:
            tp, tl = hf_setting(rho)
            for name, eta in [("FedRec", 0)] + ([("FedRec++", ctx["eta"])] if rho > 0 else []):
                cfg = FedRecPPConfig(d=ctx["d"], T=ctx["iterations"], lr=ctx["lr"], lam=ctx["lam"], rho=float(rho),
                                     eta=eta, c=0 if c >= n else c, T_predict=tp, T_local=tl)
                for f in folds:
                    tasks.append((f, cfg, ctx.seed * 1000 + f.index, ctx.net, False, ctx.ledger_dir))
                    keys.append((frac, name, rho))
    ctx.progress.update(0, len(tasks), stage="participation sweep")
    outs = pmap(run_pp, tasks, workers, on_done=lambda i, _: ctx.progress.update(i + 1, len(tasks)))
    for o in outs:  # what each run's network recorded (they ran in worker processes)
        ctx.record_run(o.record)
    rows = []
    for key, runs in group_runs(outs, keys).items():
        s = fold_stats(runs)
        rows.append({"c_fraction": key[0], "algorithm": key[1], "rho": key[2], "mae_mean": s.mae_mean,
                     "rmse_mean": s.rmse_mean, "rmse_std": s.rmse_std, "diverged_runs": len(s.diverged)})
    ctx.table("clients", rows, title="RMSE for participating fractions c/n and rho (Figure 2)")

    def draw(ax):
        for frac in ctx["fractions"]:
            for name, ls in (("FedRec", "--"), ("FedRec++", "-")):
                pts = sorted((r["rho"], r["rmse_mean"]) for r in rows if r["c_fraction"] == frac and
                             (r["algorithm"] == name or (r["rho"] == 0 and name == "FedRec++")))
                ax.plot([p[0] for p in pts], [p[1] for p in pts], ls=ls, marker="o", label=f"{name} c={frac:g}n")
        ax.set_xlabel("rho")
        ax.set_ylabel("RMSE")
        ax.legend(fontsize=7)

    ctx.plot("clients", draw)


if __name__ == "__main__":
    raise SystemExit(scenario_main(globals()))
