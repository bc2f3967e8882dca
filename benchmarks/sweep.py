"""Sweep benchmark: the same 8-point grid on 1 and on 2 worker processes.

    python benchmarks/sweep.py [--repeats 3] [--scenario fedrecpp_table2] [--workdir DIR]

Each point is a FedRec/FedRec++ run on the ``tiny`` synthetic preset, sized to take a few
seconds so that process start-up and result writing are part of what is measured, as in a real
sweep. ``--grid even`` (the default) is lambda x lr (4 x 2) at rho = 1, eta = 1: every point
costs the same, so the ratio measures the pool; ``--grid uneven`` is rho x eta (4 x 2), whose
points differ up to 9x in cost (rho = 0 against rho = 2 with a denoiser), so the ratio also
shows load imbalance. Every repeat starts from an empty folder (nothing skipped). Prints one
line per run and, last, one JSON object with the median wall seconds per worker count and
their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from fedsim.studies.sweep import run_sweep

GRIDS = {
    "even": ({"lam": [0.1, 0.01, 0.001, 0.0001], "lr": [0.8, 0.5]},
             {"folds": 2, "iterations": 60, "d": 10, "workers": 1, "rhos": [1], "eta": 1}),
    "uneven": ({"rhos": [[0], [1], [2], [3]], "eta": [0, 1]},
               {"folds": 2, "iterations": 60, "d": 10, "workers": 1}),
}


def one(workdir: Path, workers: int, scenario: str, data: str, grid: str) -> float:
    out = workdir / f"w{workers}"
    if out.exists():
        shutil.rmtree(out)
    axes, fixed = GRIDS[grid]
    t = time.perf_counter()
    summary = run_sweep(scenario, axes, out, data=data, fixed=fixed, workers=workers)
    wall = time.perf_counter() - t
    if summary["failed"] or len(summary["done"]) != 8:
        raise SystemExit(f"sweep did not complete: {summary}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scenario", default="fedrecpp_table2")
    ap.add_argument("--data", default="tiny")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--grid", default="even", choices=sorted(GRIDS))
    args = ap.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="fedsim-sweep-bench-"))
    times: dict[int, list[float]] = {1: [], 2: []}
    for r in range(args.repeats):
        for w in (1, 2):  # interleaved, so slow phases of a noisy machine hit both
            s = one(workdir, w, args.scenario, args.data, args.grid)
            times[w].append(s)
            print(f"repeat {r + 1}: {w} worker(s) {s:.2f} s", flush=True)
    med = {w: statistics.median(v) for w, v in times.items()}
    print(json.dumps({"scenario": args.scenario, "grid": args.grid, "points": 8, "cores": os.cpu_count(),
                      "s_1_worker": med[1], "s_2_workers": med[2], "ratio_2_over_1": med[2] / med[1],
                      "runs": times, "load_avg_1min": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
