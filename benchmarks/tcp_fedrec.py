"""FedRec PMF(B) over real TCP in separate processes, against the simulator's prediction.

    python benchmarks/tcp_fedrec.py [--data DIR] [--processes 4] [--iterations 5]
                                    [--seed 0] [--timeout 600]

MovieLens 100K (default ``$FEDSIM_SHARED_DATA/ml-100k`` or ``../shared/data/ml-100k`` beside the
repository; the ``ml100k-like`` synthetic preset when it is absent; ``--data`` any ratings folder,
file or preset, a missing one being an error), fold 1 of
5 (80/20), 943 clients; ``FedRecConfig(model="PMF(B)", T=iterations)``. The same actors run
twice with the same seed: on ``SimNetwork(profile="lan")``, charging each message TCP's frame header
(``framing_bytes=FRAME_OVERHEAD``, 25 bytes, as ``fedsim compare`` does), and on ``TcpNetwork`` (the server in
one process, the clients spread over the others, loopback TCP). Checks: test RMSE equal to 1e-9
(it is bit-identical in practice: the final parameters are compared too) and equal payload bytes
per message kind. Reports the wall time of each run (TCP: from forking the workers to the merged
ledger), the TCP run's measured duration, and per iteration the time the TCP ledger measured
beside what the simulator predicts for a LAN. A round's time, on both ledgers alike: from the
first send of round r to the first send of round r + 1 (the last round: to its last arrival).
Prints a table and one JSON line. Real time on a shared machine: the figures move with its load.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from fedsim.data import generate, kfold_copies, load_movielens, resolve
from fedsim.kernel import SimNetwork, TcpNetwork
from fedsim.kernel.tcp import FRAME_OVERHEAD
from fedsim.protocols import fedrec
from fedsim.protocols.fedrec import FedRecConfig

# ../shared/data/ml-100k beside the repository, or under $FEDSIM_SHARED_DATA (as tests/conftest.py)
DEFAULT_DATA = Path(os.environ.get("FEDSIM_SHARED_DATA")
                    or Path(__file__).resolve().parents[1].parent / "shared" / "data") / "ml-100k"


def round_times(ledger) -> list[float]:
    """Per round label: first send of round r to first send of round r + 1 (last round: to its
    last arrival)."""
    cols = ledger.columns()
    rounds = sorted(set(int(r) for r in cols["round"]))
    first = {r: float(cols["send_time"][cols["round"] == r].min()) for r in rounds}
    out = []
    for i, r in enumerate(rounds):
        if i + 1 < len(rounds):
            out.append(first[rounds[i + 1]] - first[r])
        else:
            out.append(float(np.nanmax(cols["arrival_time"][cols["round"] == r])) - first[r])
    return out


def bytes_per_kind(ledger) -> dict:
    return {k: {"messages": t.messages, "payload_bytes": t.payload_bytes, "wire_bytes": t.wire_bytes}
            for k, t in ledger.view().group("kind").items()}


def run(net, train, cfg, **run_kw):
    job = fedrec.build(net, train, cfg)
    t = time.perf_counter()
    res = job.collect(net.run(**run_kw))
    return res, time.perf_counter() - t


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", help="a ratings folder or file, or a preset (default: ml-100k beside the repository, "
                    "ml100k-like when it is absent)")
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args(argv)

    if args.data is not None:  # as given (a missing path is an error, not the synthetic stand-in)
        ratings = resolve(args.data, seed=args.seed)
        source = ratings.name or args.data
    elif (DEFAULT_DATA / "u.data").is_file():
        ratings, source = load_movielens(DEFAULT_DATA), "MovieLens 100K"
    else:
        ratings, source = generate("ml100k-like", seed=args.seed), "ml100k-like (synthetic; real data absent)"
    train, test = kfold_copies(ratings, 5, seed=args.seed)[0]
    cfg = FedRecConfig(model="PMF(B)", T=args.iterations)

    # (the prediction charged no frame header, 25 bytes a message fewer than TCP sends)
    sim, sim_wall = run(SimNetwork(seed=args.seed, profile="lan", framing_bytes=FRAME_OVERHEAD), train, cfg)
    net = TcpNetwork(seed=args.seed, processes=args.processes)
    tcp, tcp_wall = run(net, train, cfg, timeout=args.timeout)

    _, sim_rmse = sim.model.evaluate(test.users, test.items, test.values)
    _, tcp_rmse = tcp.model.evaluate(test.users, test.items, test.values)
    identical = sim.params.keys() == tcp.params.keys() and all(
        np.array_equal(sim.params[k], tcp.params[k]) for k in sim.params)
    sim_kinds, tcp_kinds = bytes_per_kind(sim.ledger), bytes_per_kind(tcp.ledger)
    same_bytes = ({k: v["payload_bytes"] for k, v in sim_kinds.items()}
                  == {k: v["payload_bytes"] for k, v in tcp_kinds.items()})
    sim_rounds, tcp_rounds = round_times(sim.ledger), round_times(tcp.ledger)

    print(f"FedRec PMF(B), {source}: {train.n_users} clients, {len(train)} training / {len(test)} test ratings, "
          f"{args.iterations} iterations, seed {args.seed}")
    print(f"TcpNetwork: {len(net.groups)} processes ({', '.join(str(len(g)) for g in net.groups)} nodes), "
          f"loopback; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end")
    print()
    print(f"{'round':>6}{'sim lan (s)':>14}{'tcp measured (s)':>19}")
    for r, (a, b) in enumerate(zip(sim_rounds, tcp_rounds)):
        print(f"{r:>6}{a:>14.3f}{b:>19.3f}")
    print(f"{'total':>6}{sim.duration:>14.3f}{tcp.duration:>19.3f}   (run duration)")
    print()
    print(f"wall time: SimNetwork {sim_wall:.2f} s, TcpNetwork {tcp_wall:.2f} s (fork to merged ledger)")
    print(f"test RMSE: sim {sim_rmse:.12f}, tcp {tcp_rmse:.12f}, |diff| = {abs(sim_rmse - tcp_rmse):.3g}; "
          f"final parameters bit-identical: {identical}")
    print(f"{'kind':<12}{'messages':>10}{'payload bytes':>16}{'tcp wire bytes':>16}  equal")
    for k in sorted(sim_kinds):
        s, t = sim_kinds[k], tcp_kinds.get(k, {})
        print(f"{k:<12}{s['messages']:>10}{s['payload_bytes']:>16,}{t.get('wire_bytes', 0):>16,}  "
              f"{s['payload_bytes'] == t.get('payload_bytes')}")
    out = {
        "benchmark": "tcp_fedrec", "data": source, "clients": int(train.n_users), "iterations": args.iterations,
        "seed": args.seed, "processes": len(net.groups), "nodes_per_process": [len(g) for g in net.groups],
        "rmse_sim": sim_rmse, "rmse_tcp": tcp_rmse, "rmse_equal_1e-9": abs(sim_rmse - tcp_rmse) <= 1e-9,
        "params_bit_identical": identical, "payload_bytes_equal_per_kind": same_bytes,
        "payload_bytes_per_kind": {k: v["payload_bytes"] for k, v in tcp_kinds.items()},
        "tcp_wire_bytes": int(tcp.ledger.view().totals().wire_bytes),
        "wall_s": {"sim": round(sim_wall, 3), "tcp": round(tcp_wall, 3)},
        "duration_s": {"sim_lan": round(sim.duration, 4), "tcp": round(tcp.duration, 4)},
        "round_s": {"sim_lan": [round(x, 4) for x in sim_rounds], "tcp": [round(x, 4) for x in tcp_rounds]},
        "cpus": os.cpu_count(), "loadavg_1min": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(out))
    if not (out["rmse_equal_1e-9"] and same_bytes):
        raise SystemExit("TCP and SimNetwork disagree")
    return out


if __name__ == "__main__":
    main()
