"""Wall time of short PersonalFR-scenario runs, one per kind (FedAvg and PersonalFR at M = 300 and 100).

    OPENBLAS_NUM_THREADS=1 python benchmarks/personalfr_runs.py [--data ../shared/data/ml-100k] [--rounds 20]

Each kind is ``fedsim.studies.personalfr.runs.run_spec`` of the scenarios' defaults (explicit task,
``encoder_input=cut``, evaluation every 10 rounds) for ``--rounds`` rounds, timed after one warm-up run
(numba compilation, first-touch allocations). Prints one line ``kind=seconds ...``. To compare two
trees, run it alternately with ``PYTHONPATH=<tree>`` (a script's own folder, not the working
directory, comes first on ``sys.path``) and take medians.
"""

from __future__ import annotations

import argparse
import time

from fedsim.protocols.personalfr import FedAEConfig
from fedsim.studies.personalfr.runs import RunSpec, run_spec

KINDS = (("fedavg", 300), ("personalfr", 300), ("fedavg", 100), ("personalfr", 100))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data/ml-100k")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--task", default="explicit", choices=("explicit", "implicit"))
    args = ap.parse_args()
    out = []
    for method, M in KINDS:
        cfg = FedAEConfig(rounds=args.rounds, eval_every=10, task=args.task, encoder_input="cut")
        spec = RunSpec(method, data=args.data, seed=0, task=args.task, threshold=3.5, test_frac=0.2, M=M, cfg=cfg)
        run_spec(spec)  # warm-up
        t = time.perf_counter()
        run_spec(spec)
        out.append(f"{method}{M}={time.perf_counter() - t:.3f}")
    print(" ".join(out), flush=True)


if __name__ == "__main__":
    main()
