"""One simulation at internet scale on one machine: FedRec PMF(B) on the ml20m-like preset.

    python benchmarks/scale.py [--clients 1000,6040,10000,100000,138493] [--iterations 3]
                               [--preset ml20m-like] [--cache DIR] [--ledger stream|memory]
                               [--protocol fedrec|fpl] [--ml1m]

Generates the preset once (``--item-space id_range``: 131,262 item ids, 26,744 rated) and keeps it
in ``--cache`` as .npy files, then for each client count n runs, in a fresh child process, FedRec
PMF(B) (d = 20, float32, the paper's lr 0.8, rho = 0) with one actor per user on the first n
users (all their ratings; the item space stays the whole id range) for ``--iterations``
iterations on ``SimNetwork(profile="ideal")`` with a ``StreamingLedger`` (``--ledger memory``: the
in-memory one). Per run: setup (building the network: CSR, actors), each iteration's wall time
(from the server's ``begin_round`` to the next one, the last one to its ``stop`` broadcast;
iteration 0 also starts every actor: its generator and U_u), peak resident memory of the child
(``VmHWM``: everything, the dataset included), ledger rows and bytes. ``--ml1m`` adds the
ml1m-like preset's 6,040 users (3,706 items) as a second reference for the 6,040-client round.
``--protocol fpl``: FPL rounds (pFPL preset, every client every round, on the binarized data)
instead; ``--central``: FedRec's central twin (the same arithmetic vectorised, no actors; its
iteration 0 includes its setup), for the federated / central ratio at this scale. Prints a table
and, last, one JSON line.

Refuses a client count outside 1..the preset's users (the child would run fewer users under the
requested count's label) and fewer than 2 iterations (the per-client figures are of the iterations
after the first).

Targets (issue 25): at 138,493 clients at most 15 s per iteration and 8 GiB peak; time per client
of an iteration at 138,493 clients at most 1.5 x that at 6,040 clients.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _hwm_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def dataset(preset: str, seed: int, item_space: str, cache: Path) -> Path:
    """The preset's users/items/values as .npy files in ``cache`` (generated on first use)."""
    d = cache / f"{preset}-s{seed}-{item_space}"
    if (d / "meta.json").exists():
        return d
    from fedsim.data import generate

    d.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    r = generate(preset, seed=seed, item_space=item_space)
    gen = time.perf_counter() - t
    for name in ("users", "items", "values"):
        np.save(d / f"{name}.npy", getattr(r, name))
    meta = {"preset": preset, "seed": seed, "item_space": item_space, "n_users": r.n_users, "n_items": r.n_items,
            "ratings": len(r), "generate_s": gen, "generate_peak_mib": _hwm_mib()}
    (d / "meta.json").write_text(json.dumps(meta))
    return d


class _Timed:
    """Context mix-in recording, for the server, when each round begins and when it stops."""

    marks: list = []  # (wall, CPU) seconds

    def begin_round(self, rnd: int) -> None:
        if self.node_id == "server":
            _Timed.marks.append((time.perf_counter(), time.process_time()))
        super().begin_round(rnd)

    async def broadcast(self, dsts, kind, payload) -> None:
        if kind == "stop" and self.node_id == "server":
            _Timed.marks.append((time.perf_counter(), time.process_time()))
        await super().broadcast(dsts, kind, payload)


class _GCClock:
    """Wall time spent in the cyclic garbage collector, per generation (gc.callbacks)."""

    def __init__(self) -> None:
        self.time = [0.0, 0.0, 0.0]
        self.count = [0, 0, 0]
        self._t = 0.0
        import gc

        gc.callbacks.append(self)

    def stop(self) -> None:
        import gc

        gc.callbacks.remove(self)

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            g = info["generation"]
            self.time[g] += time.perf_counter() - self._t
            self.count[g] += 1


def child(args) -> dict:
    """One run in this (fresh) process; returns its figures."""
    from fedsim.data import Ratings
    from fedsim.kernel import Context, SimNetwork, StreamingLedger

    t0 = time.perf_counter()
    d = Path(args.data)
    meta = json.loads((d / "meta.json").read_text())
    users = np.load(d / "users.npy", mmap_mode="r")
    n = min(args.n, meta["n_users"])
    # rows are sorted by user: the first n users are a prefix (search with the array's own dtype: an
    # int64 needle would make NumPy convert the whole memory-mapped column, 0.8 GB for netflix-like)
    end = int(np.searchsorted(users, users.dtype.type(n)))
    data = Ratings(np.array(users[:end]), np.array(np.load(d / "items.npy", mmap_mode="r")[:end]),
                   np.array(np.load(d / "values.npy", mmap_mode="r")[:end]), n_users=n, n_items=meta["n_items"])
    del users
    load = time.perf_counter() - t0

    if args.central:
        return central(args, data, n, end, meta, load)
    ledger = StreamingLedger() if args.ledger == "stream" else None
    net = SimNetwork(seed=0, ledger=ledger)
    net.context_class = type("TimedContext", (_Timed, Context), {"__slots__": ()})
    t = time.perf_counter()
    if args.protocol == "fedrec":
        from fedsim.protocols.fedrec import FedRecConfig, build

        cfg = FedRecConfig("PMF(B)", d=20, T=args.iterations, lr=0.8, lam=0.001, dtype="float32")
        build(net, data, cfg)
    else:
        from fedsim.protocols.fpl import FPLConfig, build

        implicit = data.binarize()
        cfg = FPLConfig(clients_per_round=n, triples=args.triples, rounds=args.iterations, d=20, preset="pFPL")
        build(net, implicit, cfg)
    del data
    setup = time.perf_counter() - t
    gc_clock = _GCClock()
    t = time.perf_counter()
    net.run()
    run = time.perf_counter() - t
    gc_clock.stop()  # the run only (not the ledger queries below)
    marks = _Timed.marks
    iters = [b[0] - a[0] for a, b in zip(marks, marks[1:])]
    cpu_iters = [b[1] - a[1] for a, b in zip(marks, marks[1:])]
    tot = net.ledger.totals()
    return {"clients": n, "ratings": end, "items": meta["n_items"], "load_s": load, "setup_s": setup, "run_s": run,
            "iteration_s": iters, "iteration_cpu_s": cpu_iters, "peak_mib": _hwm_mib(), "ledger_rows": tot["messages"], "ledger_bytes": tot["bytes"],
            "ledger": args.ledger, "protocol": args.protocol, "gc_s": gc_clock.time, "gc_collections": gc_clock.count}


def central(args, data, n: int, end: int, meta: dict, load: float) -> dict:
    """The central twin of the same FedRec PMF(B) run (same data, seed, arithmetic, no actors):
    iteration times from its per-iteration callback (iteration 0 includes its setup)."""
    from fedsim.protocols.fedrec import FedRecConfig, central_twin

    cfg = FedRecConfig("PMF(B)", d=20, T=args.iterations, lr=0.8, lam=0.001, dtype="float32")
    marks = [(time.perf_counter(), time.process_time())]
    central_twin(data, cfg, seed=0, callback=lambda it, state: marks.append((time.perf_counter(), time.process_time())))
    return {"clients": n, "ratings": end, "items": meta["n_items"], "load_s": load, "setup_s": 0.0,
            "run_s": marks[-1][0] - marks[0][0], "iteration_s": [b[0] - a[0] for a, b in zip(marks, marks[1:])],
            "iteration_cpu_s": [b[1] - a[1] for a, b in zip(marks, marks[1:])], "peak_mib": _hwm_mib(),
            "ledger_rows": 0, "ledger_bytes": 0, "ledger": "-", "protocol": "fedrec central twin",
            "gc_s": [0.0, 0.0, 0.0], "gc_collections": [0, 0, 0]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", default="1000,6040,10000,100000,138493")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--preset", default="ml20m-like")
    ap.add_argument("--item-space", default="id_range", choices=("id_range", "observed"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", default=os.environ.get("FEDSIM_BENCH_CACHE", "/tmp/fedsim-bench"))
    ap.add_argument("--ledger", default="stream", choices=("stream", "memory"))
    ap.add_argument("--protocol", default="fedrec", choices=("fedrec", "fpl"))
    ap.add_argument("--triples", type=int, default=20, help="FPL: triples per client and round")
    ap.add_argument("--ml1m", action="store_true", help="also the ml1m-like preset's 6,040 users")
    ap.add_argument("--central", action="store_true", help="run FedRec's central twin instead (the same arithmetic "
                    "vectorised, no actors): the denominator of the price of simulating")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args)))
        return

    if args.iterations < 2:
        raise SystemExit("--iterations must be at least 2: the per-client figures are of the iterations after "
                         "the first (which also starts every actor)")
    try:
        counts = [int(c) for c in args.clients.split(",")]
    except ValueError:
        raise SystemExit(f"--clients {args.clients!r}: give client counts separated by commas") from None
    cache = Path(args.cache)
    runs = [(dataset(args.preset, args.seed, args.item_space, cache), n) for n in counts]
    if args.ml1m:
        runs.append((dataset("ml1m-like", args.seed, "observed", cache), 6040))
    for d, n in runs:  # the child takes the first n users: more than the preset has would run fewer, mislabelled
        users = json.loads((d / "meta.json").read_text())["n_users"]
        if not 1 <= n <= users:
            raise SystemExit(f"--clients: {n:,} clients, but {d.name} has {users:,} users (1 to {users:,})")
    out = []
    print("| data | clients | ratings | setup s | iteration 0 s | later iterations s (each) | us per client "
          "(later) | CPU us per client (later) | peak MiB | ledger rows | GC s (gen 0/1/2) |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|", flush=True)
    for d, n in runs:
        cmd = [sys.executable, __file__, "--child", "--data", str(d), "--n", str(n), "--iterations",
               str(args.iterations), "--ledger", args.ledger, "--protocol", args.protocol, "--triples", str(args.triples)]
        if args.central:
            cmd.append("--central")
        res = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        if res.returncode:
            print(res.stderr, file=sys.stderr)
            raise SystemExit(f"child for {n} clients failed")
        r = json.loads(res.stdout.strip().splitlines()[-1])
        r["data"] = json.loads((d / "meta.json").read_text())["preset"]
        later = r["iteration_s"][1:] or r["iteration_s"]
        r["s_per_iteration"] = float(np.median(later))
        r["us_per_client"] = r["s_per_iteration"] / r["clients"] * 1e6
        r["cpu_s_per_iteration"] = float(np.median(r["iteration_cpu_s"][1:] or r["iteration_cpu_s"]))
        r["cpu_us_per_client"] = r["cpu_s_per_iteration"] / r["clients"] * 1e6
        out.append(r)
        print(f"| {r['data']} | {n:,} | {r['ratings']:,} | {r['setup_s']:.1f} | {r['iteration_s'][0]:.2f} | "
              f"{', '.join(f'{x:.2f}' for x in later)} | {r['us_per_client']:.1f} | {r['cpu_us_per_client']:.1f} | "
              f"{r['peak_mib']:.0f} | "
              f"{r['ledger_rows']:,} | {'/'.join(f'{x:.2f}' for x in r['gc_s'])} |", flush=True)
    ref = [r for r in out if r["clients"] == 6040 and r["data"] == args.preset]
    big = [r for r in out if r["clients"] == max(x["clients"] for x in out) and r["data"] == args.preset]
    summary = {"runs": out}
    if ref and big:
        summary["per_client_ratio_vs_6040"] = big[0]["us_per_client"] / ref[0]["us_per_client"]
        summary["cpu_per_client_ratio_vs_6040"] = big[0]["cpu_us_per_client"] / ref[0]["cpu_us_per_client"]
        print(f"time per client at {big[0]['clients']:,} clients / at 6,040: {summary['per_client_ratio_vs_6040']:.2f} "
              f"(wall), {summary['cpu_per_client_ratio_vs_6040']:.2f} (CPU)")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
