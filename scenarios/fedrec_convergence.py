"""FedRec Figure 3: test RMSE per iteration for the unfederated model, federated rho = 0 and
federated HF with rho in {1, 2, 3} (first fold). HF's (T_predict, T_local) are searched as in ``fedrec_rho`` (``search_on``).

Federated curves are measured inside the protocol: each iteration the clients evaluate their
private test ratings with the model they hold and send back three error sums (kind ``eval``,
kept out of the communication tables). The unfederated curve comes from the centralized twin.
"""

from __future__ import annotations

from fedsim.experiment import Param, RunContext, UsageError, scenario_main
from fedsim.protocols.fedrec import FedRecConfig
from fedsim.studies.fedrec import make_folds, paper_lr, refuse_faults, run_one
from fedsim.studies.datasets import data_note
from fedsim.studies.learning import warn_not_learned
from fedsim.studies.paper_values import FEDREC_HF_SETTINGS
from fedsim.studies.parallel import count_done, default_workers, pmap
from fedsim.studies.search import SEARCH_RULES, choose_hf

# typical wall time on a 2-core machine, shown by `fedsim list`
RUN_TIME = 'about 7-10 min at ML-100K scale, the default (6 min 32 s measured quiet on 2026-11-23, 9 min 40 s on 2026-11-26\'s slower machine; docs/performance.md)'
DEFAULT_DATA = "ml100k-like"
PARAMS = {
    "folds": Param(5, "number of copies the data is cut into (the first is used)", min=2),
    "iterations": Param.of(FedRecConfig, "T", 100),
    "d": Param.of(FedRecConfig, "d"),
    "models": Param(["PMF(B)", "PMF(S)", "SVD++(S)"], "models", kind="strs",
                    choices=("PMF(B)", "PMF(S)", "SVD++(S)")),
    "lam": Param.of(FedRecConfig, "lam"),
    "rhos": Param([1, 2, 3], "HF sampling parameters", kind="ints", min=0),
    "search_on": Param("validation", "where HF's (T_predict, T_local) are scored: a validation split of copy 1's "
                       "training part, copy 1's test part (the paper's rule) or none (the authors' ML100K settings)",
                       choices=SEARCH_RULES),
    "dtype": Param.of(FedRecConfig, "dtype"),
    "workers": Param(0, "worker processes (0: one per core)", min=0),
}


def run(ctx: RunContext) -> None:
    # its runs have no deadline: refused before any work (a lost message was a worker's DeadlockError, a
    # client that dropped out after its last upload a zeroed user factor in a table of complete runs)
    refuse_faults(ctx.net, "fedrec_convergence", UsageError)
    ratings = ctx.load_data()
    data_note(ctx, ratings, paper=None)  # no published value is printed beside the curves
    folds = make_folds(ratings, ctx["folds"], ctx.seed)
    fold = folds[0]
    workers = ctx["workers"] or default_workers()

    def make_cfg(key, tp, tl):
        m, rho = key
        return FedRecConfig(m, d=ctx["d"], T=ctx["iterations"], lr=paper_lr(m), lam=ctx["lam"], rho=float(rho),
                            strategy="hf", T_predict=tp, T_local=tl, dtype=ctx["dtype"])

    def authors(key):
        m, rho = key
        return FEDREC_HF_SETTINGS[m][rho - 1] if 1 <= rho <= 3 else (10, 10)

    hf = choose_hf(ctx, folds, [(m, rho) for m in ctx["models"] for rho in ctx["rhos"] if rho > 0], make_cfg,
                   rule=ctx["search_on"], workers=workers, paper=authors, seed=ctx.seed * 1000 + 999,
                   key_names=("model", "rho"))
    tasks, labels = [], []
    for m in ctx["models"]:
        base = FedRecConfig(m, d=ctx["d"], T=ctx["iterations"], lr=paper_lr(m), lam=ctx["lam"], dtype=ctx["dtype"])
        tasks.append((fold, "unfederated", base, ctx.seed, ctx.net, True, ctx.ledger_dir))
        labels.append((m, "unfederated"))
        tasks.append((fold, "federated", base, ctx.seed, ctx.net, True, ctx.ledger_dir))
        labels.append((m, "federated rho=0"))
        for rho in ctx["rhos"]:
            cfg = make_cfg((m, rho), *hf.get((m, rho), authors((m, rho))))
            tasks.append((fold, "federated", cfg, ctx.seed, ctx.net, True, ctx.ledger_dir))
            labels.append((m, f"federated HF rho={rho}"))
    ctx.progress.update(0, len(tasks), stage="convergence runs")
    outs = pmap(run_one, tasks, workers, on_done=count_done(lambda k: ctx.progress.update(k, len(tasks))))
    for o in outs:  # what each run's network recorded (they ran in worker processes)
        ctx.record_run(o.record)
    rows = []
    for (m, label), o in zip(labels, outs):
        for h in o.history:
            if h.get("rmse") is not None:
                rows.append({"model": m, "run": label, "iteration": h["iteration"], "mae": h["mae"], "rmse": h["rmse"]})
        if o.diverged_at is not None:
            ctx.caveat("diverged", f"**{m} {label} diverged at iteration {o.diverged_at}.**")
    warn_not_learned(ctx, [(f"{m} {label}", o) for (m, label), o in zip(labels, outs)])
    ctx.table("convergence", rows, title="Test RMSE per iteration (fold 1)")
    final = [r for r in rows if r["iteration"] == ctx["iterations"]]
    ctx.table("final", final, title="After the last iteration")

    for m in ctx["models"]:
        def draw(ax, m=m):
            for label in dict.fromkeys(lbl for mm, lbl in labels if mm == m):
                pts = [(r["iteration"], r["rmse"]) for r in rows if r["model"] == m and r["run"] == label]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label)
            ax.set_xlabel("iteration")
            ax.set_ylabel("test RMSE")
            ax.set_ylim(top=min(1.3, max([r["rmse"] for r in rows if r["model"] == m] + [1.0])))
            ax.legend()
            ax.set_title(f"FedRec convergence: {m}")

        ctx.plot("convergence_" + m.replace("+", "p").replace("(", "_").replace(")", ""), draw)


if __name__ == "__main__":
    raise SystemExit(scenario_main(globals()))
