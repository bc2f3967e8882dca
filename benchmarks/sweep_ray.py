"""Ray backend against the local pool: the same sweep, side by side, alternating.

    python benchmarks/sweep_ray.py [--grid fedrec|even] [--repeats 5] [--workers 2] [--workdir DIR]

``--grid fedrec`` (the default) is ``fedsim sweep fedrec --grid rho=0,1,2,3 --data tiny``: 4 points
of about a second each, where fixed costs dominate; ``--grid even`` is benchmarks/sweep.py's 8
equal FedRec++ points of a few seconds each on ``tiny``. Each run is a fresh process (as a
``fedsim sweep`` command is) writing into an empty folder; the two backends alternate, so a slow
phase of a shared machine hits both. Per run it records the process's wall time and, from the
sweep's summary, the points phase (``run_s``: first point started to last point written) and,
for Ray, its start-up (a local instance of ``--workers`` CPUs) and shutdown. Prints a line per
run, then one JSON object: medians per backend and the ratios Ray / local of the whole command
and of the points phase alone.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep import GRIDS  # noqa: E402  (benchmarks/sweep.py: the 8-point grids)

SWEEPS = {
    "fedrec": ("fedrec", {"rho": [0.0, 1.0, 2.0, 3.0]}, {}),
    "even": ("fedrecpp_table2", *GRIDS["even"]),
}


def child(args: argparse.Namespace) -> None:
    """One sweep in this process; prints its summary's backend figures as JSON."""
    from fedsim.studies.sweep import run_sweep

    scenario, axes, fixed = SWEEPS[args.grid]
    s = run_sweep(scenario, axes, args.one_out, data="tiny", fixed=fixed, workers=args.workers, backend=args.one)
    n = math.prod(len(v) for v in axes.values())
    if s["failed"] or len(s["done"]) != n:
        raise SystemExit(f"sweep did not complete: {s['failed'] or s['not_run']}")
    print(json.dumps(s["backend"]))


def one(args: argparse.Namespace, backend: str, out: Path) -> dict:
    if out.exists():
        shutil.rmtree(out)
    t = time.perf_counter()
    res = subprocess.run([sys.executable, __file__, "--grid", args.grid, "--workers", str(args.workers),
                          "--one", backend, "--one-out", str(out)], capture_output=True, text=True)
    wall = time.perf_counter() - t
    if res.returncode != 0:
        raise SystemExit(f"{backend} sweep failed: {res.stderr[-2000:]}")
    return {"wall_s": wall, **json.loads(res.stdout.strip().splitlines()[-1])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--grid", default="fedrec", choices=sorted(SWEEPS))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--one", choices=("local", "ray"), help=argparse.SUPPRESS)
    ap.add_argument("--one-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        return child(args)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="fedsim-sweep-ray-bench-"))
    runs: dict[str, list[dict]] = {"local": [], "ray": []}
    load = [os.getloadavg()[0]]
    for r in range(args.repeats):
        for backend in (("local", "ray") if r % 2 == 0 else ("ray", "local")):
            m = one(args, backend, workdir / backend)
            runs[backend].append(m)
            extra = (f", Ray start-up {m['startup_s']:.2f} s, shutdown {m['shutdown_s']:.2f} s"
                     if backend == "ray" else "")
            print(f"repeat {r + 1}: {backend:5s} command {m['wall_s']:.2f} s, points {m['run_s']:.2f} s{extra}",
                  flush=True)
        load.append(os.getloadavg()[0])

    def med(backend: str, key: str) -> float:
        return statistics.median(m[key] for m in runs[backend])

    summary = {"grid": args.grid, "workers": args.workers, "repeats": args.repeats, "cores": os.cpu_count(),
               "local_command_s": med("local", "wall_s"), "ray_command_s": med("ray", "wall_s"),
               "local_points_s": med("local", "run_s"), "ray_points_s": med("ray", "run_s"),
               "ray_startup_s": med("ray", "startup_s"), "ray_shutdown_s": med("ray", "shutdown_s")}
    summary["ratio_command_ray_over_local"] = summary["ray_command_s"] / summary["local_command_s"]
    summary["ratio_points_ray_over_local"] = summary["ray_points_s"] / summary["local_points_s"]
    summary["load_avg_1min"] = load
    summary["runs"] = runs
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
