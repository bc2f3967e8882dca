"""Why FPL's P@10 rises with client dropout in ``fault_study``: which users are evaluated, not
what dropout does to the model (the evidence behind docs/reliability.md's FPL bullet).

    python benchmarks/fault_fpl_users.py [--data ml100k-like] [--dropouts 0.1,0.3] [--loss 0,0.2]

Runs FPL as ``scenarios/fault_study.py`` does (temporal 20 % hold-out of the binarized data,
every client every round, 20 triples, pi 0.5, 20 rounds, wan profile, deadline 5 s, dropouts
uniform in the first 30 s, seed 0): once without faults, then with each (loss, dropout). A
client that dropped out takes its p_u with it and is left out of the evaluation, so each
faulty run's P@10 is over fewer users. For each faulty run it prints its P@10 and, over the
same users, the fault-free model's; and the fault-free model's over the users who dropped out.
If the fault-free model scores the remaining users as high as the faulty run does, the rise is
the population's (the users left out ranked worse), not the training's. About 10 s on ML100K
size.
"""

from __future__ import annotations

import argparse

import numpy as np

from fedsim.data import resolve, temporal_holdout
from fedsim.kernel import NetSpec
from fedsim.protocols import fpl
from fedsim.protocols.fpl import FPLConfig


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="ml100k-like")
    ap.add_argument("--dropouts", type=floats, default=[0.1, 0.3])
    ap.add_argument("--loss", type=floats, default=[0.0, 0.2])
    args = ap.parse_args()
    train, test = temporal_holdout(resolve(args.data).binarize(), 0.2)
    cfg = FPLConfig(clients_per_round=train.n_users, triples=20, rounds=20, pi=0.5, deadline=5.0)

    def run(loss: float, dropout: float):
        net = NetSpec(profile="wan", loss=loss, dropout=dropout, window=(0.0, 30.0)).build(0)
        job = fpl.build(net, train, cfg, test=test)
        return job, job.collect(net.run())

    job, clean = run(0.0, 0.0)
    P, theta = clean.params["P"], clean.params["theta"]
    print(f"fault-free: P@10 {clean.metrics[0]['p@10']:.4f} over {clean.metrics[0]['users']} users")
    print("| loss | dropout | users | P@10 of the faulty run | fault-free model, same users | fault-free model, "
          "users who dropped out |")
    print("|---|---|---:|---:|---:|---:|")
    for loss in args.loss:
        for dropout in args.dropouts:
            _, res = run(loss, dropout)
            gone = set(res.info["lost_clients"])
            present = np.array([name not in gone for name in job.clients], dtype=bool)
            same = fpl.top10(P, theta, cfg.d, train, test, present)
            lost = fpl.top10(P, theta, cfg.d, train, test, ~present)
            row = res.metrics[0]
            print(f"| {loss:g} | {dropout:g} | {row['users']} | {row['p@10']:.4f} | {same['p@10']:.4f} | "
                  f"{lost['p@10']:.4f} ({lost['users']} users) |")


if __name__ == "__main__":
    main()
