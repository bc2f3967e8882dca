"""FedRec++ Table 3: communication per iteration of denoisers, ordinary clients and all clients
for eta in {0, 1, n/4, n/2} (rho = 1, c = n), read from the ledger; plus the simulated duration
of an iteration on the ``wan`` profile with and without denoisers.

Counting follows the paper: a client's sent plus received messages, the download of V excluded
(reported separately), averaged over iterations and over the clients of a role. Units are
latent vectors of d floats (80 bytes at d = 20 in float32).
"""

from __future__ import annotations

from fedsim.experiment import Param, RunContext, scenario_main
from fedsim.protocols.fedrecpp import FedRecPPConfig
from fedsim.studies.fedrec import make_folds
from fedsim.studies.fedrecpp import hf_setting, run_pp
from fedsim.studies.paper_values import FEDRECPP_TABLE3_ML100K
from fedsim.studies.parallel import default_workers, pmap

DEFAULT_DATA = "ml100k-like"
PARAMS = {
    "folds": Param(5, "the data is cut into this many copies; the first is used"),
    "iterations": Param(20, "iterations T (costs per iteration do not depend on T)"),
    "timing_iterations": Param(3, "iterations of the wan-profile timing runs"),
    "d": Param(20, "latent dimension"),
    "rho": Param(1.0, "sampling parameter"),
    "etas": Param(["0", "1", "n/4", "n/2"], "numbers of denoisers (ints or n/4, n/2)", kind="strs"),
    "lam": Param(0.001, "lambda"),
    "lr": Param(0.8, "learning rate gamma"),
    "workers": Param(0, "worker processes (0: one per core)"),
}


def eta_value(label: str, n: int) -> int:
    label = label.strip()
    if label.startswith("n/"):
        return n // int(label[2:])
    return int(label)


def run(ctx: RunContext) -> None:
    ratings = ctx.load_data()
    fold = make_folds(ratings, ctx["folds"], ctx.seed)[0]
    n = fold.n_users
    tp, tl = hf_setting(ctx["rho"])
    workers = ctx["workers"] or default_workers()
    tasks, labels = [], []
    for label in ctx["etas"]:
        eta = eta_value(label, n)
        base = dict(d=ctx["d"], lr=ctx["lr"], lam=ctx["lam"], rho=ctx["rho"], eta=eta, T_predict=tp, T_local=tl)
        tasks.append((fold, FedRecPPConfig(T=ctx["iterations"], **base), ctx.seed, ctx.profile, True))
        labels.append((label, eta, "cost"))
        tasks.append((fold, FedRecPPConfig(T=ctx["timing_iterations"], **base), ctx.seed, "wan", True))
        labels.append((label, eta, "wan"))
    ctx.progress.update(0, len(tasks), stage="table 3 runs")
    outs = pmap(run_pp, tasks, workers, on_done=lambda i, _: ctx.progress.update(i + 1, len(tasks)))
    rows, timing = [], []
    dataset = ctx.data
    for (label, eta, kind), o in zip(labels, outs):
        if kind == "cost":
            paper = dict(zip(("denoiser", "ordinary", "client"), FEDRECPP_TABLE3_ML100K.get(label, (None,) * 3)))
            for c in o.costs:
                if c["role"] == "denoiser" and eta == 0:
                    continue
                rows.append({"dataset": dataset, "eta": label, "eta_value": eta, "role": c["role"],
                             "nodes": c["nodes"], "units_per_iteration": c["units_per_iteration"],
                             "bytes_per_iteration": c["bytes_per_iteration"],
                             "paper_units": paper.get(c["role"], "")})
            rows.append({"dataset": dataset, "eta": label, "eta_value": eta, "role": "download_V (not counted)",
                         "nodes": n, "units_per_iteration": o.download_bytes / (4 * ctx["d"]),
                         "bytes_per_iteration": o.download_bytes, "paper_units": ""})
        else:
            timing.append({"eta": label, "eta_value": eta, "profile": "wan",
                           "seconds_per_iteration": o.round_s})
    ctx.table("comm_cost", rows, title="Table 3: communication per iteration and client (ledger)", floatfmt=".1f")
    ctx.table("round_time", timing, title="Simulated duration of one iteration on the wan profile", floatfmt=".3f")
    ctx.note("The paper's `Client` column is not the plain average of its other two columns; ours is the "
             "average over all clients of each client's own sent+received vectors (docs/fedrecpp.md).")

    def draw(ax):
        roles = ["denoiser", "ordinary", "client"]
        etas = list(ctx["etas"])
        for k, role in enumerate(roles):
            ys = [next((r["units_per_iteration"] for r in rows if r["eta"] == e and r["role"] == role), 0) for e in etas]
            ax.bar([i + 0.27 * (k - 1) for i in range(len(etas))], ys, width=0.27, label=role)
        ax.set_xticks(range(len(etas)), etas)
        ax.set_yscale("log")
        ax.set_xlabel("eta (denoisers)")
        ax.set_ylabel("latent vectors per iteration")
        ax.legend()

    ctx.plot("comm_cost", draw)


if __name__ == "__main__":
    raise SystemExit(scenario_main(globals()))
