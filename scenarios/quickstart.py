"""Quick demo: FedRec and FedRec++ on built-in synthetic ratings, accuracy and bytes per role.

Trains batch PMF four ways on one train/test split (unfederated; FedRec with rho = 0; FedRec with
hybrid filling at rho = 1; FedRec++ with one denoiser at rho = 1), every federated party an
actor on a simulated network, and prints test MAE/RMSE and the communication per role read from
the message ledger. Finishes in well under a minute on the default synthetic data.
"""

from __future__ import annotations

import time

from fedsim.experiment import Param, RunContext, UsageError, format_number, plural, scenario_main
from fedsim.protocols import fedrec, fedrecpp
from fedsim.protocols.fedrec import FedRecConfig
from fedsim.protocols.fedrecpp import FedRecPPConfig
from fedsim.studies.datasets import data_note
from fedsim.studies.fedrec import evaluate_fold, make_folds, refuse_faults

# typical wall time on a 2-core machine, shown by `fedsim list`
RUN_TIME = 'about 5-15 s (5.6 s measured on 2026-11-27 on 2 cores shared with other jobs, 13 s on 2026-11-26; docs/quickstart.md)'
DEFAULT_DATA = "ml100k-like"
DEFAULT_PROFILE = "wan"
PARAMS = {
    "iterations": Param.of(FedRecConfig, "T", 15),
    "d": Param.of(FedRecConfig, "d"),
    "lr": Param.of(FedRecConfig, "lr"),
    "lam": Param.of(FedRecConfig, "lam"),
    "rho": Param.of(FedRecConfig, "rho", 1.0, help="sampling parameter of the HF and FedRec++ runs"),
}
# two runs' test RMSEs "equal" in the note: the lossless runs agree to float rounding
EQUAL_RMSE = 1e-4


def run(ctx: RunContext) -> None:
    # its runs have no deadline: refused before any work (a lost message was a worker's DeadlockError, a
    # client that dropped out after its last upload a zeroed user factor in a table of complete runs)
    refuse_faults(ctx.net, "quickstart", UsageError)
    ratings = ctx.load_data()
    data_note(ctx, ratings, paper=None)  # no published value is printed
    fold = make_folds(ratings, 5, ctx.seed)[0]
    data = fold.train_ratings()
    base = FedRecConfig("PMF(B)", d=ctx["d"], T=ctx["iterations"], lr=ctx["lr"], lam=ctx["lam"])
    acc, comm = [], []
    diverged = []  # (run, iteration): no score (an lr of 1e23 made evaluate's DivergenceError a traceback)

    def report(name, model, net, t0):
        mae, rmse, diverged_at = evaluate_fold(model, fold)
        if diverged_at is not None:
            diverged.append((name, diverged_at))
        acc.append({"run": name, "mae": mae, "rmse": rmse, "wall_s": time.perf_counter() - t0,
                    "simulated_s": net.now() if net else 0.0})
        if net is None:
            return
        ctx.record_network(net)
        for r in net.ledger.by_role(per_round=False):
            comm.append({"run": name, "role": r["role"], "direction": r["direction"], "nodes": r["nodes"],
                         "messages": r["messages"], "bytes_per_node": r["bytes_per_node"],
                         "units_per_node": r["units_per_node"]})

    ctx.progress.update(0, 4, stage="quickstart")
    t0 = time.perf_counter()
    report("unfederated", fedrec.central_twin(data, base, seed=ctx.seed), None, t0)
    ctx.progress.update(1, 4)
    for i, (name, cfg) in enumerate([("FedRec rho=0", base),
                                     (f"FedRec HF rho={ctx['rho']:g}", FedRecConfig(
                                         "PMF(B)", d=ctx["d"], T=ctx["iterations"], lr=ctx["lr"], lam=ctx["lam"],
                                         rho=ctx["rho"], strategy="hf", T_predict=5, T_local=10))]):
        t0 = time.perf_counter()
        net = ctx.network()
        job = fedrec.SPEC.build(net, data, cfg)
        report(name, job.collect(net.run()).model, net, t0)
        ctx.progress.update(2 + i, 4)
    t0 = time.perf_counter()
    net = ctx.network()
    cfg = FedRecPPConfig(d=ctx["d"], T=ctx["iterations"], lr=ctx["lr"], lam=ctx["lam"], rho=ctx["rho"], eta=1,
                         T_predict=5, T_local=10)
    job = fedrecpp.SPEC.build(net, data, cfg)
    report(f"FedRec++ eta=1 rho={ctx['rho']:g}", job.collect(net.run()).model, net, t0)
    ctx.progress.update(4, 4)
    ctx.table("accuracy", acc, title=f"Test accuracy after {plural(ctx['iterations'], 'iteration')} (fold 1 of 5)")
    ctx.table("communication", comm, title="Communication per role over the whole run (from the ledger)",
              floatfmt=".1f")
    def draw(ax):
        keys = list(dict.fromkeys((r["run"], r["role"]) for r in comm))
        for k, (direction, color) in enumerate((("sent", "#4C72B0"), ("received", "#55A868"))):
            vals = {(r["run"], r["role"]): r["bytes_per_node"] for r in comm if r["direction"] == direction}
            ax.barh([i + 0.4 * k for i in range(len(keys))], [vals.get(key, 0.0) for key in keys], height=0.4,
                    color=color, label=direction)
        ax.set_yticks([i + 0.2 for i in range(len(keys))], [f"{run}: {role}" for run, role in keys], fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("bytes per node over the whole run (from the ledger)")
        ax.set_title("Communication per role")
        ax.legend(fontsize=7)

    ctx.plot("cost_per_role", draw)
    if diverged:
        ctx.caveat("diverged", "**Diverged.** " + ", ".join(f"{name} at iteration {t}" for name, t in diverged)
                   + ": the model was not finite there; its NaN MAE and RMSE are no score.")
    ctx.note((comparison_note(acc, ctx["rho"]) + " " if not diverged else "")
             + "Units are d-float latent vectors. Under FedRec++ every client "
             "starts as `client` and becomes `ordinary` or `denoiser` when the server's `assign` message arrives, so "
             "the `client` row is those messages.")


def comparison_note(acc: list[dict], rho: float) -> str:
    """What the four runs' test RMSEs show, from the figures (a fixed sentence said hybrid filling
    costs a little accuracy and FedRec++ removes that cost whatever the runs computed: at T = 2 on
    tiny data all four were equal). ``acc``: the accuracy rows, in the order the runs were made."""
    unfed, rho0, hf, pp = (r["rmse"] for r in acc)

    def same(a: float, b: float) -> str:
        return "equals" if abs(a - b) <= EQUAL_RMSE else "does NOT equal"

    cost = hf - rho0
    return (f"Test RMSE: FedRec with rho = 0 {rho0:.4f} {same(rho0, unfed)} the unfederated model's {unfed:.4f} "
            f"(to {EQUAL_RMSE:g}" + ("; the federation is lossless)" if abs(rho0 - unfed) <= EQUAL_RMSE else ")")
            + (f"; hybrid filling at rho = {rho:g}, which uploads gradients for sampled unrated items beside the rated "
               f"ones, {hf:.4f}, {format_number(cost, '+.4f')} against rho = 0 " if rho > 0 else
               # (at rho = 0 no unrated item is sampled: the sentence said it uploaded gradients for some)
               f"; hybrid filling at rho = 0 (no unrated item sampled: the same run) {hf:.4f}, "
               f"{format_number(cost, '+.4f')} against "
               "rho = 0 ")
            + ("(a cost in accuracy)" if cost > EQUAL_RMSE else
               "(more accurate than rho = 0 in this run)" if cost < -EQUAL_RMSE else "(no difference in accuracy)")
            + f"; FedRec++ with one denoiser {pp:.4f}, {format_number(pp - rho0, '+.4f')} against rho = 0: it "
            f"{same(pp, rho0)} "
            f"FedRec at rho = 0 (to {EQUAL_RMSE:g}).")


if __name__ == "__main__":
    raise SystemExit(scenario_main(globals()))
