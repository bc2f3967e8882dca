"""Where a federated FedRec run spends its time: the math floor against the simulation, and what
the simulation costs against the vectorised central twin.

    python benchmarks/fedrec_split.py [--data ../shared/data/ml-100k] [--iterations 10] [--repeats 3]
                                      [--clock wall|process]

Runs the actors of PMF(B), PMF(S) and SVD++(S) (rho = 0, d = 20, float32) on fold 1 of 5 on a
`SimNetwork`, with every math-floor function the actors call wrapped in a timer (the client
steps, the server updates, sampling, initialisation, the learning-rate schedule). "math" is the
time inside those functions, measured in a run of its own (the timers add a call to every math
call: the federated times and ratios are those of runs without them); "simulation" is the
federated time less the math: the kernel (scheduling,
ledger, link model), the codec (encoding every upload, decoding each message once), the actors'
own glue (building payloads, the aggregation loop) and evaluation. It also times the
centralized twin (the same arithmetic, vectorised, no messages), run by run alternating with the
federated one so that both see the same machine.

Two ratios federated / central: "whole run" divides each run of ``--iterations`` iterations,
setup included (building 943 actors or the central state; both derive one generator per user,
which weighs about as much as 10 central iterations), by the iterations, as the issue's figures
do; "per extra iteration" is (run of T iterations - run of 1 iteration) / (T - 1), the cost of an
iteration once everything is set up. Medians over repeats; prints a table and one JSON line.
``--clock process`` measures CPU time of this process instead of wall time (steadier on a
shared machine; the same on an idle one). ``--tree DIR`` times the fedsim of another checkout
(its root), so that two trees can be run one after the other, in the same minutes (a folder
without a fedsim package is refused, and the fedsim imported is checked to be the tree's).
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time

import os
import sys


def tree_argument(argv: list[str]) -> str | None:
    """The checkout named by ``--tree DIR`` or ``--tree=DIR`` in ``argv`` (None without one).
    Exits naming the folder when it holds no ``fedsim`` package: the installed fedsim would be
    timed instead, silently."""
    tree = None
    for k, a in enumerate(argv):
        if a == "--tree" and k + 1 < len(argv):
            tree = argv[k + 1]
        elif a.startswith("--tree="):
            tree = a.split("=", 1)[1]
    if tree is not None and not os.path.isfile(os.path.join(tree, "fedsim", "__init__.py")):
        raise SystemExit(f"--tree {tree}: no fedsim package there ({os.path.join(tree, 'fedsim', '__init__.py')} "
                         "is not a file); give the root of a fedsim checkout")
    return tree


def check_tree(tree: str | None, module_file: str) -> None:
    """Exits unless the fedsim imported (``module_file``, a file of its package) is ``tree``'s."""
    if tree is None:
        return
    package = os.path.dirname(os.path.abspath(module_file))
    while os.path.basename(package) != "fedsim" and os.path.dirname(package) != package:
        package = os.path.dirname(package)
    if not os.path.samefile(package, os.path.join(tree, "fedsim")):
        raise SystemExit(f"--tree {tree}: fedsim was imported from {package} instead")


_TREE = tree_argument(sys.argv[1:]) if __name__ == "__main__" else None
if _TREE is not None:  # another checkout's fedsim, before anything imports it
    sys.path.insert(0, _TREE)

from fedsim.data import resolve  # noqa: E402
from fedsim.kernel import SimNetwork  # noqa: E402
from fedsim.math.pmf import BatchClient  # noqa: E402
from fedsim.math.sgd_client import SGDClient  # noqa: E402
from fedsim.protocols import fedrec  # noqa: E402
from fedsim.protocols.fedrec import FedRecConfig  # noqa: E402
from fedsim.studies.fedrec import make_folds, paper_lr  # noqa: E402

# what the actors import from the math floor (fedsim/protocols/fedrec.py): functions, and the
# methods of the per-client objects
MATH = ["accumulate_item_grads", "apply_mean_step", "decayed_lr", "draw_user_order", "init_item_factors",
        "init_user_factor", "server_apply_sgd", "server_apply_o_delta", "sample_unrated"]
METHODS = [(BatchClient, "step"), (SGDClient, "call")]
CLOCK = {"wall": time.perf_counter, "process": time.process_time}


class Timers:
    def __init__(self, clock) -> None:
        self.total = 0.0
        self.depth = 0
        self.clock = clock

    def wrap(self, fn):
        @functools.wraps(fn)
        def timed(*a, **k):
            if self.depth:  # a math function calling another: count once
                return fn(*a, **k)
            self.depth += 1
            t = self.clock()
            try:
                return fn(*a, **k)
            finally:
                self.total += self.clock() - t
                self.depth -= 1
        return timed


def federated(data, model: str, T: int, clock, *, split: bool = True) -> dict:
    """One federated run of ``T`` iterations: its time (``fed``) and, with ``split``, the time
    inside the math floor (``math``; the timers add a wrapper call to every math call, so the
    ratios use the times of runs without them, ``split=False``)."""
    cfg = FedRecConfig(model, d=20, T=T, lr=paper_lr(model), lam=0.001, dtype="float32")
    if not split:
        t = clock()
        net = SimNetwork(seed=0)
        fedrec.build(net, data, cfg)
        net.run()
        return {"fed": clock() - t, "messages": len(net.ledger)}
    timers = Timers(clock)
    saved = {name: getattr(fedrec, name) for name in MATH if hasattr(fedrec, name)}
    saved_methods = {(cls, name): getattr(cls, name) for cls, name in METHODS}
    for name, fn in saved.items():
        setattr(fedrec, name, timers.wrap(fn))
    for (cls, name), fn in saved_methods.items():
        setattr(cls, name, timers.wrap(fn))
    try:
        t = clock()
        net = SimNetwork(seed=0)
        fedrec.build(net, data, cfg)
        net.run()
        wall = clock() - t
    finally:
        for name, fn in saved.items():
            setattr(fedrec, name, fn)
        for (cls, name), fn in saved_methods.items():
            setattr(cls, name, fn)
    return {"fed": wall, "math": timers.total, "sim": wall - timers.total, "messages": len(net.ledger)}


def central(data, model: str, T: int, clock) -> float:
    cfg = FedRecConfig(model, d=20, T=T, lr=paper_lr(model), lam=0.001, dtype="float32")
    t = clock()
    fedrec.central_twin(data, cfg, seed=0)
    return clock() - t


def at_least(low: int):
    """An argparse type: an int >= ``low`` (a usage error otherwise, not a traceback later)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if v < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {v}")
        return v
    return parse


def run_options(ap: argparse.ArgumentParser) -> None:
    """The options of a run against the central twin (shared with benchmarks/fedrec_floor.py)."""
    ap.add_argument("--data", default="../shared/data/ml-100k")
    ap.add_argument("--iterations", type=at_least(1), default=10)
    ap.add_argument("--repeats", type=at_least(1), default=3)
    ap.add_argument("--clock", default="wall", choices=tuple(CLOCK))


def main() -> None:
    ap = argparse.ArgumentParser()
    run_options(ap)
    ap.add_argument("--tree", help="root of another fedsim checkout to time (imported instead of the installed one), "
                    "to compare two trees in alternation")
    args = ap.parse_args()
    check_tree(args.tree, fedrec.__file__)
    T = args.iterations
    if T < 2:
        raise SystemExit("--iterations must be at least 2")
    clock = CLOCK[args.clock]
    ratings = resolve(args.data)
    data = make_folds(ratings, 5, 0)[0].train_ratings()
    out = {}
    for model in ("PMF(B)", "PMF(S)", "SVD++(S)"):  # warm-up: numba compilation, first-touch allocations
        federated(data, model, 1, clock)
        central(data, model, 1, clock)
    print(f"{args.clock} clock, seconds per iteration, medians of {args.repeats}")
    print("| model | federated | math | simulation | simulation share | central | federated / central (whole run) "
          "| federated, per extra iteration | central, per extra iteration | federated / central (per extra "
          "iteration) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model in ("PMF(B)", "PMF(S)", "SVD++(S)"):
        runs = []
        for _ in range(args.repeats):  # interleaved, so that both sides see the same minutes
            r = federated(data, model, T, clock, split=False)
            r["central"] = central(data, model, T, clock)
            r["fed1"] = federated(data, model, 1, clock, split=False)["fed"]
            r["central1"] = central(data, model, 1, clock)
            r["math"] = federated(data, model, T, clock)["math"]
            runs.append(r)
        med = {k: statistics.median(r[k] for r in runs) for k in ("fed", "math", "central", "fed1", "central1")}
        med["sim"] = med["fed"] - med["math"]
        m = {k: med[k] / T for k in ("fed", "math", "sim", "central")}
        m["fed_extra"] = (med["fed"] - med["fed1"]) / (T - 1)
        m["central_extra"] = (med["central"] - med["central1"]) / (T - 1)
        m["ratio_whole"] = m["fed"] / m["central"]
        m["ratio_extra"] = m["fed_extra"] / m["central_extra"]
        out[model] = m
        print(f"| {model} | {m['fed']:.4f} | {m['math']:.4f} | {m['sim']:.4f} | {100 * m['sim'] / m['fed']:.0f} % | "
              f"{m['central']:.4f} | **{m['ratio_whole']:.2f}** | {m['fed_extra']:.4f} | {m['central_extra']:.4f} | "
              f"{m['ratio_extra']:.2f} |", flush=True)
    print(json.dumps({"iterations": T, "repeats": args.repeats, "clock": args.clock, "tree": fedrec.__file__,
                      "s_per_iteration": out}))


if __name__ == "__main__":
    main()
