"""PersonalFR Table III: Joint, FedAvg and PersonalFR for M in {100, 300} clients, explicit RMSE and implicit NDCG@10.

Users are split 80/20 per user at random, partitioned into M clients of balanced size; every client trains
on its users, the server picks a fraction C of the clients per round. Metrics are federated evaluations
(the server sends the model to every client, clients return sums over their private test entries) every
``eval_every`` rounds; ``best`` is the best of them (the paper's reporting: best epoch on the test set),
``final`` the last. Communication per round is read from the ledger. The paper's figures (ML1M) are
shown beside ours.
"""

from __future__ import annotations

from fedsim.experiment import Param, RunContext, scenario_main
from fedsim.studies.personalfr import COMMON_PARAMS, execute, make_specs, plot_curves, result_tables, verdicts

# typical wall time on a 2-core machine, shown by `fedsim list`
RUN_TIME = 'about 28-36 min on ML-100K with the defaults (800 rounds, 5 seeds + validation runs, 2 cores; 27 min 29 s measured 2026-11-26 15:15 UTC, 35 min 40 s at 13:21 UTC on the same, then slower, machine with slightly older code; docs/performance.md)'
DEFAULT_DATA = "ml100k-like"
PARAMS = {"clients": Param([100, 300], "numbers of clients M (0: one user per client)"), **COMMON_PARAMS}


def run(ctx: RunContext) -> None:
    specs = make_specs(ctx, list(ctx["clients"]))
    outs = execute(ctx, specs, "table III runs")
    rows = result_tables(ctx, outs, title="Table III: Joint, FedAvg and PersonalFR (selected / best on test / final evaluation; mean +- population std over repeats)")
    verdicts(ctx, rows)
    plot_curves(ctx, outs, "curves")
    ctx.note(f"Data `{ctx.data}` ({outs[0]['n_users']} users x {outs[0]['n_items']} items), 80/20 per-user split. "
             "`paper_ml1m` is the paper's figure on MovieLens-1M (800 rounds, best of 4 seeds' curves averaged); "
             "learning curves are in `results_curves.csv`.")


if __name__ == "__main__":
    raise SystemExit(scenario_main(globals()))
