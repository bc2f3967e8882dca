"""Memory and wall time of `TcpNetwork` runs with one worker process per node.

    python benchmarks/tcp_memory.py [--clients 100,300] [--items 1000] [--iterations 3] [--tree DIR]

Runs FedRec (PMF(B), d = 20) on synthetic data of n users on ``--items`` items (20 ratings per
user) with ``TcpNetwork(processes=n + 1)``: the server and every client in processes of their own.
A thread samples, every 0.2 s, the proportional set size (``Pss`` of ``/proc/PID/smaps_rollup``)
of every worker process and keeps the peak of their sum: the memory the workers hold, pages
shared with the launching process (forked, copy-on-write) divided among their sharers. The
memory check (``check_memory``) is left out (``BASELINE_BYTES`` set to 1), so that a run it would
refuse can be measured. ``--tree DIR`` measures the fedsim of another checkout (its root).
Prints one line per client count: processes, peak memory of the workers, per worker, wall time
of ``run``. Linux only (reads /proc).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="100,300", help="client counts, comma separated")
    ap.add_argument("--items", type=int, default=1000)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--tree", default=None, help="root of another fedsim checkout to measure")
    args = ap.parse_args()
    if args.tree:
        sys.path.insert(0, args.tree)
    import fedsim.kernel.tcp as tcp
    from fedsim.data import generate
    from fedsim.protocols import fedrec
    from fedsim.protocols.fedrec import FedRecConfig

    tcp.BASELINE_BYTES = 1  # measure what the memory check would refuse
    for n in (int(x) for x in args.clients.split(",")):
        data = generate("tiny", n_users=n, n_items=args.items, n_ratings=20 * n)
        net = tcp.TcpNetwork(seed=0, processes=n + 1)
        fedrec.build(net, data, FedRecConfig(T=args.iterations, d=20))
        peak = [0, 0]
        done = threading.Event()

        def sample() -> None:
            me = os.getpid()
            while not done.is_set():
                kids: list[str] = []
                for t in os.listdir(f"/proc/{me}/task"):
                    try:
                        with open(f"/proc/{me}/task/{t}/children") as fh:
                            kids += fh.read().split()
                    except OSError:
                        pass
                total = 0
                for pid in kids:
                    try:
                        with open(f"/proc/{pid}/smaps_rollup") as fh:
                            total += sum(int(line.split()[1]) * 1024 for line in fh if line.startswith("Pss:"))
                    except OSError:
                        pass
                if total > peak[0]:
                    peak[:] = [total, len(kids)]
                time.sleep(0.2)

        watcher = threading.Thread(target=sample, daemon=True)
        watcher.start()
        t0 = time.perf_counter()
        res = net.run(timeout=3600)
        wall = time.perf_counter() - t0
        done.set()
        watcher.join()
        assert res.complete
        print(f"clients {n}: {len(net.groups)} processes, peak memory of the workers {peak[0] / 1e9:.2f} GB "
              f"({peak[0] / max(peak[1], 1) / 1e6:.1f} MB per worker over {peak[1]}), run {wall:.1f} s", flush=True)


if __name__ == "__main__":
    main()
