"""Wall time of a FedRec PMF(B) iteration under each link model, side by side.

    python benchmarks/link_models.py [--data ml1m-like] [--iterations 1] [--repeats 3] [--profile wan]

Builds the data once, runs each model once untimed (a warm-up), then for each repeat runs the same FedRec PMF(B) network (every client of
the data, one actor each) under ``fifo``, ``fair`` and ``tcp`` in turn and reports the median wall
time per iteration of each and the ratios to ``fifo`` (the issue's target: ``fair`` within 3x of
``fifo`` on the 6,040-client ``wan`` round), plus each model's simulated round time. One JSON
line last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from fedsim.data import resolve
from fedsim.kernel import SimNetwork
from fedsim.protocols import REGISTRY

MODELS = ("fifo", "fair", "tcp")


def one_run(data, model: str, profile: str, iterations: int) -> tuple[float, float]:
    spec = REGISTRY["fedrec"]
    net = SimNetwork(seed=0, profile=profile, link_model=model)
    job = spec.build(net, data, spec.Config(T=iterations))
    t = time.perf_counter()
    result = job.collect(net.run())
    return (time.perf_counter() - t) / iterations, result.duration / iterations


def measure(data, profile: str, iterations: int, repeats: int, run=one_run) -> tuple[dict, dict]:
    """Wall seconds per iteration of each model over ``repeats`` rounds (the models in turn), and
    each model's simulated round. One untimed run of each model first: the first run of a
    process pays for compiling the clients' kernels and first-touch memory (on ``tiny``, 0.99 s
    against 0.003 s), which would have been charged to ``fifo`` alone."""
    for m in MODELS:
        run(data, m, profile, iterations)
    wall: dict[str, list] = {m: [] for m in MODELS}
    sim: dict[str, float] = {}
    for _ in range(repeats):
        for m in MODELS:
            w, s = run(data, m, profile, iterations)
            wall[m].append(w)
            sim[m] = s
    return wall, sim


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="ml1m-like")
    ap.add_argument("--iterations", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", default="wan")
    args = ap.parse_args(argv)
    data = resolve(args.data)
    print(f"{args.data}: {data.n_users} clients, {data.n_items} items, {len(data)} ratings; profile {args.profile}")
    if args.repeats < 1 or args.iterations < 1:
        ap.error("--repeats and --iterations must be at least 1")
    wall, sim = measure(data, args.profile, args.iterations, args.repeats)
    fig = {"clients": data.n_users, "profile": args.profile}
    for m in MODELS:
        med = statistics.median(wall[m])
        fig[f"{m}_s_per_iteration"] = med
        fig[f"{m}_simulated_round_s"] = sim[m]
        print(f"{m:<5} wall {med:.3f} s/iteration (runs " + ", ".join(f"{w:.3f}" for w in wall[m])
              + f"); simulated round {sim[m]:.3f} s")
    for m in ("fair", "tcp"):
        fig[f"{m}_over_fifo"] = fig[f"{m}_s_per_iteration"] / fig["fifo_s_per_iteration"]
        print(f"{m} / fifo: {fig[f'{m}_over_fifo']:.2f}")
    print(json.dumps(fig))


if __name__ == "__main__":
    main()
