"""PersonalFR Figure 5: communication and computation of FedAvg over PersonalFR against the number of clients M.

For each M, FedAvg and PersonalFR (Partial Compression on) run the same rounds with the same seed, so the
server picks the same clients. Communication is read from the ledger: bytes of the model download and
upload per selected client and round (the one-off ``indices`` message of PersonalFR is reported beside
it). Computation is what the clients charged with ``ctx.compute`` (forward, backward, clipping, SGD step
FLOPs as executed). The formulas beside them are checks: FedAvg sends the whole model, PersonalFR the
active decoder (Expression 3); the paper plots ``2 |D| / |D_active|`` (the notes on the authors' code).
PersonalFR's encoder is dense by default (as the paper counts computation); ``encoder_inputs`` adds the
cut encoder (same model, fewer FLOPs). Which clients are selected (and so how many items are active) is
random: the whole measurement is repeated with seeds seed .. seed + repeats - 1 (split, partition and
selection) and the table gives the mean and population std of every figure over them.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fedsim.experiment import Param, RunContext, scenario_main
from fedsim.protocols.personalfr import FedAEConfig
from fedsim.studies.personalfr import RunSpec, check_clients, check_network, check_threshold, execute, load_task

# typical wall time on a 2-core machine, shown by `fedsim list`
RUN_TIME = 'under half a minute at ML-100K scale with 2 workers (16 s measured quiet on 2026-11-26, docs/performance.md; 92 s on 2026-11-22\'s shared machine)'
DEFAULT_DATA = "ml100k-like"
PARAMS = {
    "clients": Param([1, 10, 100, 300, 0], "numbers of clients M (0: one user per client)"),
    "rounds": Param.of(FedAEConfig, "rounds", 1, help="rounds per run (ratios per round; every round draws C M clients)"),
    "fraction": Param.of(FedAEConfig, "fraction"),
    "local_epochs": Param.of(FedAEConfig, "local_epochs"),
    "batch": Param.of(FedAEConfig, "batch", help="local batch size B (1 when one user per client)"),
    "task": Param.of(FedAEConfig, "task"),
    "encoder_inputs": Param(["dense", "cut"], "PersonalFR encoder widths to charge", kind="strs",
                            choices=("dense", "cut")),
    "threshold": Param.of(FedAEConfig, "threshold"),
    "test_frac": Param(0.2, "per-user test fraction", min=0, max=0.9, exclusive_min=True),
    "repeats": Param(5, "repetitions with seeds seed, seed+1, ... (mean and population std)", min=1),
    "workers": Param(0, "worker processes (0: one per core)", min=0),
}
RATIOS = ("comm_ratio", "formula_ratio", "formula_2D_over_Dactive", "mean_active_items")

# Le et al. 2022, Figure 5 / text: communication 2.5x to 27x, computation 1.25x to 1.9x (ML1M, M = 1 .. 6040)
PAPER_RANGE = "paper (ML1M): communication ~2.5x (M = 1) to ~27x (6040), computation ~1.25x to ~1.9x"


def seed_row(seed: int, runs: dict, n_users: int, n_items: int, whole: int, dec_full: int) -> dict:
    """The figures of one seed and M: ``runs`` maps (method, encoder input) to the run outcomes
    (:func:`fedsim.studies.personalfr.run_spec`'s), FedAvg's under ("fedavg", "dense"); ``whole``
    and ``dec_full`` are the model's and the decoder's parameter counts. Bytes are per selected
    client and round, down plus up (ledger); ``formula_ratio`` is the whole model over PersonalFR's
    upload floats (the active decoder); ``mean_active_items`` solves that upload for the active
    items (the decoder's last layer has 256 weights and a bias per item); the computation ratios
    are FedAvg's client FLOPs over each PersonalFR encoder's."""
    fa = runs[("fedavg", "dense")]
    n_clients = fa["M"]
    row = {"clients": n_clients, "seed": seed, "users_per_client": n_users / n_clients,
           "selected_per_round": fa["clients_per_round"]}
    pf = next(v for (m, _), v in runs.items() if m == "personalfr")
    c_fa, c_pf = fa["comm"], pf["comm"]
    n_active = (pf["comm"]["up_floats_per_client"] - (dec_full - n_items * 257)) / 257
    row.update({
        "fedavg_bytes_per_client": c_fa["down_bytes_per_client"] + c_fa["up_bytes_per_client"],
        "personalfr_bytes_per_client": c_pf["down_bytes_per_client"] + c_pf["up_bytes_per_client"],
        "comm_ratio": (c_fa["down_bytes_per_client"] + c_fa["up_bytes_per_client"])
        / (c_pf["down_bytes_per_client"] + c_pf["up_bytes_per_client"]),
        "formula_ratio": whole / pf["comm"]["up_floats_per_client"],
        "formula_2D_over_Dactive": 2 * dec_full / pf["comm"]["up_floats_per_client"],
        "mean_active_items": n_active,
        "indices_bytes_per_client": c_pf["setup_bytes"] / n_clients,
    })
    for (m, enc), o in runs.items():
        if m == "personalfr":
            row[f"comp_ratio_{enc}"] = fa["client_flops"] / o["client_flops"]
    return row


def mean_rows(per_seed: list[dict]) -> list[dict]:
    """One row per number of clients: the mean over its seeds of every figure, and for the ratios
    the population std (NaN for one repeat: no spread measured), ``repeats`` the seeds."""
    rows = []
    for M in sorted({r["clients"] for r in per_seed}):
        these = [r for r in per_seed if r["clients"] == M]
        row = {k: v for k, v in these[0].items() if k != "seed"}
        for k in list(row):
            if k in ("clients", "users_per_client", "selected_per_round"):
                continue
            vals = np.array([r[k] for r in these], dtype=np.float64)
            row[k] = float(vals.mean())
            if k in RATIOS or k.startswith("comp_ratio_"):
                # one repeat measures no spread: its std read 0.000, a spread of none (as results.csv's
                # _std columns: NaN, an empty cell)
                row[f"{k}_std"] = float(vals.std()) if len(these) > 1 else float("nan")
        row["repeats"] = len(these)
        rows.append(row)
    return rows


def run(ctx: RunContext) -> None:
    ratings = ctx.load_data()  # a missing or unreadable --data: one 'error: --data: ...' line, not a traceback
    check_network(ctx.net, ratings.n_users)  # ratios of whole runs: a network that loses messages is refused before any work
    check_threshold(ctx, ratings, (ctx["task"],))
    task = load_task(ctx.data, ctx.seed, ctx["task"], ctx["threshold"], ctx["test_frac"])
    check_clients(ctx["clients"], task.n_users)
    specs = []
    for rep in range(ctx["repeats"]):
        for M in ctx["clients"]:
            one = M in (0, task.n_users)
            cfg = FedAEConfig(rounds=ctx["rounds"], fraction=ctx["fraction"], local_epochs=ctx["local_epochs"],
                              batch=1 if one else ctx["batch"], task=ctx["task"], client_momentum="reset")
            common = dict(data=ctx.data, seed=ctx.seed + rep, task=ctx["task"], threshold=ctx["threshold"],
                          test_frac=ctx["test_frac"], M=M, profile=ctx.net, evaluate=False, ledger_dir=ctx.ledger_dir)
            specs.append(RunSpec("fedavg", cfg=cfg, **common))
            for enc in ctx["encoder_inputs"]:
                specs.append(RunSpec("personalfr", cfg=replace(cfg, encoder_input=enc), **common))
    outs = execute(ctx, specs, "compression runs")
    from fedsim.math import autoencoder as ae

    model = ae.init_params(task.n_items, np.random.default_rng(0), (256, 128))
    whole, dec_full = ae.param_count(model), ae.param_count(ae.decoder_of(model))
    by_run: dict = {}
    for spec, o in zip(specs, outs):
        by_run.setdefault((spec.seed, spec.M), {})[(spec.method, spec.cfg.encoder_input)] = o
    per_seed = [seed_row(seed, runs, task.n_users, task.n_items, whole, dec_full)
                for (seed, M), runs in by_run.items()]
    rows = mean_rows(per_seed)
    ctx.table("compression", rows, title="FedAvg / PersonalFR per selected client and round: bytes (ledger) "
              "and FLOPs (charged); mean (and population std, none for one repeat) over the repeats", floatfmt=".3f")
    ctx.table("compression_per_seed", sorted(per_seed, key=lambda r: (r["clients"], r["seed"])),
              title="Per seed", floatfmt=".3f")
    ctx.note(f"Data `{ctx.data}`: {task.n_users} users, {task.n_items} items; model [n, 256, 128] / [128, 256, n], "
             f"{whole:,} parameters ({dec_full:,} in the decoder). `formula_ratio` = whole model / active decoder "
             f"floats (what the bytes should give up to msgpack framing); {PAPER_RANGE}. `comp_ratio_dense` keeps "
             "PersonalFR's encoder dense (the paper's count), `comp_ratio_cut` charges the cut encoder. The "
             "one-off `indices` message is `indices_bytes_per_client` (not in the per-round figures).")

    def draw(ax):
        xs = [r["clients"] for r in rows]
        ax.plot(xs, [r["comm_ratio"] for r in rows], marker="o", label="communication (ledger)")
        for enc in ctx["encoder_inputs"]:
            ax.plot(xs, [r[f"comp_ratio_{enc}"] for r in rows], marker="s", label=f"computation ({enc} encoder)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("number of clients M")
        ax.set_ylabel("FedAvg / PersonalFR")
        ax.legend()

    ctx.plot("compression", draw)


if __name__ == "__main__":
    raise SystemExit(scenario_main(globals()))
