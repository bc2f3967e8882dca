"""FedRec++ Table 3: communication per iteration of denoisers, ordinary clients and all clients
for eta in {0, 1, n/4, n/2} (rho = 1, c = n), read from the ledger; plus the simulated duration
of an iteration on the ``wan`` profile with and without denoisers.

Counting follows the paper: a client's sent plus received messages, the download of V excluded
(reported separately), averaged over iterations and over the clients of a role. Units are
latent vectors of d floats (80 bytes at d = 20 in float32). The paper's figures are printed
beside ours at rho = 1 only (its setting); with one draw the spread over draws is NaN.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fedsim.experiment import Param, RunContext, scenario_main
from fedsim.protocols.fedrecpp import FedRecPPConfig
from fedsim.studies.fedrec import make_folds
from fedsim.studies.datasets import data_note
from fedsim.studies.fedrecpp import denoisers, hf_setting, left_out, run_pp, warn_incomplete
from fedsim.studies.paper_values import FEDRECPP_TABLE3_ML100K
from fedsim.studies.parallel import count_done, default_workers, pmap

# typical wall time on a 2-core machine, shown by `fedsim list`
RUN_TIME = 'under a minute at ML-100K scale (17 s measured quiet on 2026-11-23, 27 s on 2026-11-26\'s slower machine; docs/performance.md)'
DEFAULT_DATA = "ml100k-like"
PARAMS = {
    "folds": Param(5, "the data is cut into this many copies; the first is used", min=2),
    # at least 1: the table's figures are per iteration (T = 0 divided by zero in role_costs)
    "iterations": replace(Param.of(FedRecPPConfig, "T", 10, help="iterations T (costs per iteration do not depend "
                                   "on T)"), min=1),
    "draws": Param(5, "independent draws of the denoisers and samples (seeds seed, seed+1, ...); figures are "
                      "their mean, the spread is reported", min=1),
    "timing_iterations": Param(3, "iterations of the wan-profile timing runs", min=1),
    "d": Param.of(FedRecPPConfig, "d"),
    "rho": Param.of(FedRecPPConfig, "rho"),
    "etas": Param(["0", "1", "n/4", "n/2"], "numbers of denoisers (ints or n/4, n/2)", kind="strs"),
    "lam": Param.of(FedRecPPConfig, "lam"),
    "lr": Param.of(FedRecPPConfig, "lr"),
    "deadline": Param.of(FedRecPPConfig, "deadline"),
    "workers": Param(0, "worker processes (0: one per core)", min=0),
}


def cost_tables(labels: list, outs: list, *, etas, n: int, dataset: str, seed: int,
                paper_rho: bool) -> tuple[list[dict], list[dict], list[dict]]:
    """Table 3 from the runs ``outs`` (``PPOutcome`` with costs) labelled ``(eta label, eta,
    "cost" or "wan", draw)``: ``(rows, per_draw, timing)``. ``rows``: per eta and role the mean
    over the draws of the units and bytes per iteration (population std, min and max of the units
    over the draws; the paper's figure and the difference from it when ``paper_rho``), and a row
    for the model download (not counted); ``per_draw`` every cost run's roles; ``timing`` the wan
    runs' seconds per iteration. ``n`` clients; draw k ran with seed ``seed + k``."""
    per_draw, timing, download, download_units, incomplete, diverged = [], [], {}, {}, {}, {}
    for (label, eta, kind, k), o in zip(labels, outs):
        if kind == "cost":
            for c in o.costs:
                if c["role"] == "denoiser" and eta == 0:
                    continue
                per_draw.append({"eta": label, "eta_value": eta, "draw": k, "seed": seed + k, "role": c["role"],
                                 "nodes": c["nodes"], "units_per_iteration": c["units_per_iteration"],
                                 "bytes_per_iteration": c["bytes_per_iteration"], "iterations": o.iterations,
                                 "diverged_at": o.diverged_at if o.diverged_at is not None else "", **left_out([o])})
            download.setdefault(label, []).append(o.download_bytes)
            download_units.setdefault(label, []).append(o.download_units)
            incomplete[label] = incomplete.get(label, 0) + int(o.incomplete)
            diverged[label] = diverged.get(label, 0) + int(o.diverged_at is not None)
        else:
            timing.append({"eta": label, "eta_value": eta, "profile": "wan",
                           "seconds_per_iteration": o.round_s, "iterations": o.iterations,
                           "diverged_at": o.diverged_at if o.diverged_at is not None else "", **left_out([o])})
    rows = []
    for label in etas:
        eta = denoisers(label, n)
        paper = dict(zip(("denoiser", "ordinary", "client"),
                         FEDRECPP_TABLE3_ML100K.get(label, (None,) * 3) if paper_rho else (None,) * 3))
        for role in ("denoiser", "ordinary", "client"):
            mine = [r for r in per_draw if r["eta"] == label and r["role"] == role]
            if not mine:
                continue
            units = np.array([r["units_per_iteration"] for r in mine])
            p = paper.get(role)
            rows.append({"dataset": dataset, "eta": label, "eta_value": eta, "role": role, "nodes": mine[0]["nodes"],
                         "units_per_iteration": float(units.mean()), "units_std_over_draws": float(units.std()) if units.size > 1 else float("nan"),
                         "units_min": float(units.min()), "units_max": float(units.max()),
                         "bytes_per_iteration": float(np.mean([r["bytes_per_iteration"] for r in mine])),
                         "paper_units": p if p is not None else "",
                         "diff_pct": 100 * (units.mean() / p - 1) if p else "",
                         "incomplete_draws": sum(r["incomplete_runs"] for r in mine),
                         "diverged_draws": sum(1 for r in mine if r["diverged_at"] != "")})
        rows.append({"dataset": dataset, "eta": label, "eta_value": eta, "role": "download_V (not counted)",
                     # units from the ledger's floats: wire bytes / (4 d) would count msgpack and framing
                     # bytes as vectors (1682.4 instead of ML100K's 1682 items)
                     # the mean over the draws (it kept the last draw's), as the roles' rows
                     "nodes": n, "units_per_iteration": float(np.mean(download_units[label])),
                     "units_std_over_draws": (float(np.std(download_units[label])) if len(download_units[label]) > 1
                                              else float("nan")),
                     "units_min": "", "units_max": "", "bytes_per_iteration": float(np.mean(download[label])),
                     "paper_units": "",
                     "diff_pct": "", "incomplete_draws": incomplete[label], "diverged_draws": diverged[label]})
    return rows, per_draw, timing


def run(ctx: RunContext) -> None:
    ratings = ctx.load_data()
    dataset = data_note(ctx, ratings)
    fold = make_folds(ratings, ctx["folds"], ctx.seed)[0]
    n = fold.n_users
    tp, tl = hf_setting(ctx["rho"], dataset=dataset)
    workers = ctx["workers"] or default_workers()
    for label in ctx["etas"]:  # all of them checked before the first run starts
        denoisers(label, n)
    draws = ctx["draws"]
    tasks, labels = [], []
    for label in ctx["etas"]:
        eta = denoisers(label, n)
        base = dict(d=ctx["d"], lr=ctx["lr"], lam=ctx["lam"], rho=ctx["rho"], eta=eta, T_predict=tp, T_local=tl,
                    deadline=ctx["deadline"])
        for k in range(draws):
            tasks.append((fold, FedRecPPConfig(T=ctx["iterations"], **base), ctx.seed + k, ctx.net, True, ctx.ledger_dir))
            labels.append((label, eta, "cost", k))
        tasks.append((fold, FedRecPPConfig(T=ctx["timing_iterations"], **base), ctx.seed, ctx.net.replace(profile="wan"),
                      True, ctx.ledger_dir))
        labels.append((label, eta, "wan", 0))
    ctx.progress.update(0, len(tasks), stage="table 3 runs")
    outs = pmap(run_pp, tasks, workers, on_done=count_done(lambda k: ctx.progress.update(k, len(tasks))))
    for o in outs:  # what each run's network recorded (they ran in worker processes)
        ctx.record_run(o.record)
    # the paper's Table 3 is at rho = 1: an ordinary client's units grow with the items it samples,
    # so another rho's figures compared with it gave a diff_pct of the setting, not of the protocol
    paper_rho = float(ctx["rho"]) == 1.0
    rows, per_draw, timing = cost_tables(labels, outs, etas=ctx["etas"], n=n, dataset=ctx.data, seed=ctx.seed,
                                         paper_rho=paper_rho)
    ctx.table("comm_cost", rows, title="Table 3: communication per iteration and client (ledger)", floatfmt=".1f")
    if not paper_rho:
        ctx.note(f"rho = {ctx['rho']:g}: the paper's Table 3 is at rho = 1, so no paper figure is printed beside ours.")
    ctx.table("comm_cost_draws", per_draw, title="Table 3, every draw", floatfmt=".1f")
    ctx.table("round_time", timing, title="Simulated duration of one iteration on the wan profile", floatfmt=".3f")
    warn_incomplete(ctx, [(f"eta={label} {kind} draw {k}", o) for (label, eta, kind, k), o in zip(labels, outs)])
    diverged_runs = [(f"eta={label} {kind} draw {k}", o) for (label, eta, kind, k), o in zip(labels, outs)
                     if o.diverged_at is not None]
    if diverged_runs:
        # a run that diverged stops after that iteration: its per-iteration figures are over the
        # iterations it ran (they were divided by T); a caveat: a note alone left results.json's caveats empty
        ctx.caveat("diverged", f"**WARNING: {len(diverged_runs)} run(s) diverged** (`diverged_draws`; `iterations`, `diverged_at` "
                 "per draw): "
                 + "; ".join(f"{name} at iteration {o.diverged_at}, {o.iterations} of {o.cfg.T} iterations run"
                             for name, o in diverged_runs)
                 + ". Their per-iteration figures are over the iterations they ran.")
    ctx.note(f"Figures are means over {draws} independent draws of the denoisers (seeds {ctx.seed}.."
             f"{ctx.seed + draws - 1}): which users become denoisers moves a role's mean |I_u| and so its units. "
             "The paper's `Client` column is not the plain average of its other two columns; ours is the "
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
