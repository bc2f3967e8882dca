"""Estimate the wall time of the whole FPL study (``fedsim run fpl_table2 --set settings=paper``) on a
data file from short timed samples, before committing hours to it.

Times, on the prepared split: epochs of each FPL preset on the twin (the search: 10 epochs
evaluated once, as the study evaluates every 10th) and as actors (the confirmation of a chosen
configuration: one epoch without evaluation), one BPR-MF epoch at each latent dimension of the
paper's grid, one FCF round, both kNN runs over the paper's k grid, a few VAE epochs per topology,
a few cornac BPR epochs. Then adds up the study's jobs (the paper's settings: 5 seeds, the BPR-MF
grid, 10 values of pi x 4 presets x 50 epochs on the twin at the d BPR-MF chooses, which is not
known in advance: one line per d; then 4 presets x 5 seeds as actors, counted at 50 epochs each:
an upper bound, a chosen epoch is 10 to 50) and divides by the workers, the way the study's
process pool spreads them (longest first; each of the three stages is max(total / workers,
longest job)).

    python benchmarks/fpl_study_time.py ../shared/data/foursquare-fedbpr-cities/Milan.tsv
    python benchmarks/fpl_study_time.py ../shared/data/foursquare-fedbpr-cities/Rome.tsv --workers 2

Samples taken while other jobs load the machine give upper bounds (say so when quoting them).
The last line is one JSON object with every sample and estimate.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fedsim.data import load_foursquare  # noqa: E402
from fedsim.math.fpl_presets import PRESET_NAMES  # noqa: E402
from fedsim.studies.fpl import PAPER, prepare, run_bpr, run_fcf, run_fpl  # noqa: E402
from fedsim.studies.fpl import baselines as lib  # noqa: E402


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", help="a Foursquare city file")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ds", type=int, nargs="*", default=list(PAPER.bpr_ds), help="latent dimensions to sample")
    ap.add_argument("--fpl-epochs", type=int, default=1, help="FPL epochs per sample")
    ap.add_argument("--vae-epochs", type=int, default=5, help="VAE epochs per sample")
    args = ap.parse_args()

    r = load_foursquare(args.data, None)
    sp = prepare(r, min_interactions=PAPER.threshold)
    print(f"{args.data}: {sp.info}", flush=True)
    s = PAPER
    seeds = s.seeds
    samples: dict[str, float] = {}
    for d in args.ds:
        # BPR-MF is evaluated at the candidate epochs only: time training and evaluation apart
        one = timed(lambda: run_bpr(sp, 1, d=d, lr=0.05))  # 1 epoch + 1 evaluation
        three = timed(lambda: run_bpr(sp, 3, d=d, lr=0.05, eval_every=3))  # 3 epochs + 1 evaluation
        samples[f"bpr_epoch_d{d}"] = max(0.0, (three - one) / 2)
        samples[f"bpr_eval_d{d}"] = max(0.0, one - samples[f"bpr_epoch_d{d}"])
        for preset in PRESET_NAMES:
            run_fpl(sp, preset, 0.5, 1, d=d, lr=0.05, engine="twin")  # compiles the kernels once
            samples[f"{preset}_twin_epoch_d{d}"] = timed(lambda: run_fpl(
                sp, preset, 0.5, 10, d=d, lr=0.05, engine="twin", eval_every=10)) / 10
            samples[f"{preset}_epoch_d{d}"] = timed(lambda: run_fpl(
                sp, preset, 0.5, args.fpl_epochs + 1, d=d, lr=0.05, eval_every=args.fpl_epochs + 1)) / (
                args.fpl_epochs + 1)
        samples[f"fcf_round_d{d}"] = timed(lambda: run_fcf(sp, 2, d=d)) / 2
        print({k: round(v, 3) for k, v in samples.items() if k.endswith(f"d{d}")}, flush=True)
    samples["user_knn_grid"] = timed(lambda: lib.run_knn(sp, "User-kNN", s.knn_ks))
    samples["item_knn_grid"] = timed(lambda: lib.run_knn(sp, "Item-kNN", s.knn_ks))
    if lib.cornac_available() and lib.torch_available():
        for topo in s.vae_topologies:
            samples[f"vae_epoch_{topo}"] = timed(lambda: lib.run_vae(sp, topo, [args.vae_epochs])) / args.vae_epochs
        samples["cornac_bpr_epoch_d10"] = timed(lambda: lib.run_cornac_bpr(sp, 3, d=10, lr=0.05)) / 3
    print({k: round(v, 3) for k, v in samples.items()}, flush=True)

    # the study's jobs (seconds each), as run_study builds them
    n_evals = len(range(s.epoch_step, s.bpr_epochs + 1, s.epoch_step)) or 1
    grid_jobs = [samples[f"bpr_epoch_d{d}"] * s.bpr_epochs + samples[f"bpr_eval_d{d}"] * n_evals
                 for d in args.ds for _ in s.bpr_lrs for _ in range(seeds)]
    base_jobs = grid_jobs + [samples["user_knn_grid"], samples["item_knn_grid"]]
    if "vae_epoch_200-100-200" in samples:
        base_jobs += [samples[f"vae_epoch_{t}"] * max(s.vae_epochs) for t in s.vae_topologies for _ in range(seeds)]
    estimates = {}
    def wall(jobs):
        return max(sum(jobs) / args.workers, max(jobs)) if jobs else 0.0

    for d in args.ds:
        fpl_jobs = [samples[f"{p}_twin_epoch_d{d}"] * s.preset_epochs()[p] for p in PRESET_NAMES for _ in s.pis
                    for _ in range(seeds)]
        confirm = [samples[f"{p}_epoch_d{d}"] * s.preset_epochs()[p] for p in PRESET_NAMES for _ in range(seeds)]
        other = [samples[f"fcf_round_d{d}"] * s.fcf_rounds] * seeds
        if "cornac_bpr_epoch_d10" in samples:  # sampled with an evaluation every epoch: an upper bound
            other += [samples["cornac_bpr_epoch_d10"] * s.bpr_epochs] * seeds
        jobs2 = fpl_jobs + other
        cpu = sum(base_jobs) + sum(jobs2) + sum(confirm)
        estimates[f"d{d}"] = {"cpu_s": cpu, "wall_s": wall(base_jobs) + wall(jobs2) + wall(confirm),
                              "fpl_twin_cpu_s": sum(fpl_jobs), "fpl_actors_cpu_s": sum(confirm),
                              "baselines_cpu_s": sum(base_jobs) + sum(other)}
        e = estimates[f"d{d}"]
        print(f"d = {d}: {len(fpl_jobs)} FPL runs on the twin ({sum(fpl_jobs) / 60:.1f} min CPU), {len(confirm)} "
              f"as actors (at most {sum(confirm) / 60:.1f} min CPU), baselines {e['baselines_cpu_s'] / 60:.1f} min "
              f"CPU; wall with {args.workers} workers at most {e['wall_s'] / 60:.1f} min", flush=True)
    print(json.dumps({"data": args.data, "split": sp.info, "workers": args.workers, "samples": samples,
                      "estimates": estimates}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
