"""PersonalFR learning curves (Figures 3-4): test RMSE / NDCG@10 of FedAvg and PersonalFR after every few rounds.

Figure 3: M in {100, 300} clients, explicit and implicit feedback; Figure 4: one user per client
(``--set clients=0``; batch 1). Every ``eval_every`` rounds the server sends the global model to every
client, which evaluates it on its private test entries (PersonalFR: its own encoder and the global decoder)
and returns sums; the curves CSV has one row per evaluation, the plots one line per method and M, with the
Joint baseline's curve (per epoch) when ``joint`` is among the methods.
"""

from __future__ import annotations

from fedsim.experiment import Param, RunContext, scenario_main
from fedsim.protocols.personalfr import FedAEConfig
from fedsim.studies.personalfr import COMMON_PARAMS, execute, make_specs, plot_curves, result_tables

# typical wall time on a 2-core machine, shown by `fedsim list`
RUN_TIME = 'about 26 min on ML-100K with the defaults (800 rounds, 5 seeds + validation runs, evaluation every 5 rounds, 2 cores; 25 min 31 s measured 2026-11-26 17:52 UTC, docs/performance.md)'
DEFAULT_DATA = "ml100k-like"
PARAMS = {
    "clients": Param([100, 300], "numbers of clients M (0: one user per client, Figure 4)"),
    **COMMON_PARAMS,
    "methods": Param(["fedavg", "personalfr"], "methods to run", kind="strs",
                     choices=("joint", "fedavg", "personalfr")),
    "eval_every": Param.of(FedAEConfig, "eval_every", 5, help="federated evaluation every this many rounds"),
}


def run(ctx: RunContext) -> None:
    clients = list(ctx["clients"])
    over = {"batch": 1} if clients == [0] and ctx["batch"] == PARAMS["batch"].default else {}
    specs = make_specs(ctx, clients, **over)
    outs = execute(ctx, specs, "learning curves")
    result_tables(ctx, outs, title="End points of the curves (best / final evaluation)", name="curves")
    plot_curves(ctx, outs, "curves")
    ctx.note("One row per evaluation in `curves_curves.csv` (task, method, clients, seed, round, metric).")


if __name__ == "__main__":
    raise SystemExit(scenario_main(globals()))
