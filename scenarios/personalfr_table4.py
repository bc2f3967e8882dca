"""PersonalFR Table IV: Joint, FedAvg and PersonalFR with one user per client, explicit RMSE and implicit NDCG@10.

Every user is a client (M = number of users); the server picks a fraction C of them per round; local batch
1 (the authors' code). Same machinery and outputs as ``personalfr_table3`` (best and final federated
evaluation, communication per round from the ledger, learning curves). Defaults differ for memory: FedAvg
clients reset their momentum each round (``client_momentum=reset``: keeping a whole-model buffer per user
would need M model copies) and PersonalFR encoders are cut to the client's own items (the same model).
"""

from __future__ import annotations

from fedsim.experiment import Param, RunContext, scenario_main
from fedsim.protocols.personalfr import FedAEConfig
from fedsim.studies.personalfr import (
    COMMON_PARAMS,
    execute,
    make_specs,
    plot_curves,
    result_tables,
    verdicts,
)

# typical wall time on a 2-core machine, shown by `fedsim list`
RUN_TIME = 'about 27-35 min on ML-100K with the defaults (800 rounds, 5 seeds + validation runs, 2 cores; 26 min 41 s measured 2026-11-26 16:53 UTC, 34 min 17 s an hour earlier: the machine\'s speed varies through the day; docs/performance.md)'
DEFAULT_DATA = "ml100k-like"
PARAMS = {
    **COMMON_PARAMS,
    "batch": Param.of(FedAEConfig, "batch", 1, help="local batch size B (users; one user per client)"),
    "client_momentum": Param("reset", "clients keep their momentum between rounds (keep) or not (reset)",
                             choices=("keep", "reset")),
}


def run(ctx: RunContext) -> None:
    specs = make_specs(ctx, [0])
    outs = execute(ctx, specs, "table IV runs")
    rows = result_tables(ctx, outs, title="Table IV: one user per client (selected / best on test / final evaluation; mean +- population std over repeats)")
    verdicts(ctx, rows)
    plot_curves(ctx, outs, "curves")
    ctx.note(f"Data `{ctx.data}` ({outs[0]['n_users']} users = clients, {outs[0]['n_items']} items), 80/20 "
             "per-user split. `paper_ml1m`: the paper's Table IV (ML1M, 6040 clients, 800 rounds).")


if __name__ == "__main__":
    raise SystemExit(scenario_main(globals()))
