"""Run every registered protocol's tiny preset (and variants with loss, dropout, deadlines, secure
aggregation, gather(count=), other link models, a trace and a tap) on SimNetwork with fixed seeds,
and print one digest per run: of the ledger CSV bytes, the returned parameters' bytes, the
metrics, the info, the run's outcome and (where on) the trace, the step log and the tap's rows
and payload bytes.

``tests/test_determinism_across_processes.py`` runs this file in subprocesses with different
``PYTHONHASHSEED`` values (set iteration order, dict-of-set order) and with numba on and off, and
compares the digests: "a seed fixes everything" must hold across processes, not only within one.

    python tests/determinism_probe.py [--only NAME,...] [--protocols P,...]

prints one JSON object: {run name: {part: hex digest}}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script from anywhere: import this checkout's fedsim
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from fedsim.kernel import Faults, SimNetwork
from fedsim.kernel.links import LinkSpec, NodeSpec, Profile
from fedsim.protocols import REGISTRY, load_plugins

_MBIT = 1e6 / 8
# clients lose a fifth of what they send (a profile's own loss, not Faults)
LOSSY = Profile("lossy-wan", NodeSpec(LinkSpec(1000 * _MBIT, 1000 * _MBIT, 0.005), flops=1e11),
                NodeSpec(LinkSpec(10 * _MBIT, 50 * _MBIT, 0.025), flops=1e10, loss=0.2), sigma=0.5)
FAULTS = Faults(loss=0.15, dropout=0.3, window=(0.0, 0.5))


def _canon(v, depth: int = 0):
    """``v`` as plain data with a repr that does not depend on the process (no ids, no
    addresses): arrays by dtype, shape and a digest of their bytes."""
    if depth > 8:
        return "<deep>"
    if isinstance(v, np.ndarray):
        return ("array", str(v.dtype), v.shape, hashlib.blake2b(np.ascontiguousarray(v).tobytes(),
                                                                digest_size=8).hexdigest())
    if isinstance(v, np.generic):
        return ("np", str(v.dtype), v.item() if not isinstance(v, np.floating) else float(v).hex())
    if isinstance(v, float):
        return float(v).hex() if math.isfinite(v) else repr(v)
    if isinstance(v, (str, int, bool, type(None), bytes)):
        return v
    if isinstance(v, dict):
        return ("dict", [(_canon(k, depth + 1), _canon(x, depth + 1)) for k, x in v.items()])
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [_canon(x, depth + 1) for x in v])
    if isinstance(v, (set, frozenset)):
        # a set's own order is not output: compare its contents
        return ("set", sorted(repr(_canon(x, depth + 1)) for x in v))
    if hasattr(v, "__dataclass_fields__"):
        return (type(v).__name__, [(k, _canon(getattr(v, k), depth + 1)) for k in v.__dataclass_fields__])
    return ("obj", type(v).__name__)


def _h(*parts) -> str:
    h = hashlib.blake2b(digest_size=10)
    for p in parts:
        h.update(p if isinstance(p, bytes) else repr(p).encode())
        h.update(b"\x00")
    return h.hexdigest()


def digest(res, net, recorder=None) -> dict[str, str]:
    """The parts of one run, each digested."""
    run = res.run
    out = {
        "ledger": _h(res.ledger.to_csv().encode()),
        "missing": _h(_canon(list(getattr(res.ledger, "missing", [])))),
        "params": _h(*[(k, str(np.asarray(v).dtype), np.asarray(v).shape, np.ascontiguousarray(v).tobytes())
                       for k, v in res.params.items()]),
        "metrics": _h(_canon(res.metrics)),
        "info": _h(_canon(res.info)),
        "run": _h(_canon([sorted(run.results), run.unfinished, run.offline, run.blocked, run.duration])),
    }
    if run.trace or run.log:
        out["trace"] = _h(_canon(run.trace), _canon(run.log))
    if recorder is not None:
        out["tap"] = _h(*[(list(row), None if p is None else bytes(p.encoded.data), n)
                          for row, p, n in recorder.entries])
    return out


def variants() -> dict:
    """name -> (protocol, clients, rounds, data seed, config changes, network kwargs, extras)."""
    v: dict = {}
    for name in REGISTRY:
        v[f"{name}/wan"] = (name, 4, 2, 7, {}, dict(seed=7, profile="wan"), {})
        v[f"{name}/faults"] = (name, 8, 3, 3, dict(deadline=5.0), dict(seed=3, profile="wan", faults=FAULTS), {})
        v[f"{name}/lossy-fair"] = (name, 6, 2, 5, dict(deadline=2.0),
                                   dict(seed=5, profile=LOSSY, link_model="fair"), {})
    sec = dict(deadline=5.0, secagg_neighbours=2)
    v.update({
        "fedrec/secagg-faults": ("fedrec", 8, 3, 3, dict(sec, secure_aggregation=True),
                                 dict(seed=3, profile="wan", faults=FAULTS), {}),
        "fedrec/pmfs-faults": ("fedrec", 6, 2, 3, dict(model="PMF(S)", lr=0.01, deadline=5.0),
                               dict(seed=3, profile="wan", faults=FAULTS), {}),
        "fedrec/svdpp-tcp": ("fedrec", 5, 2, 4, dict(model="SVD++(S)", lr=0.005, deadline=5.0),
                             dict(seed=4, profile="wan", link_model="tcp", faults=Faults(loss=0.25)), {}),
        "fedrec/server-loss": ("fedrec", 6, 3, 2, dict(deadline=3.0),
                               dict(seed=2, profile="lan", faults=Faults(loss=0.3, roles=("server",))),
                               dict(strict=False)),  # a lost "stop" leaves its client waiting
        "fpl/secagg-faults": ("fpl", 8, 3, 3, dict(sec, secure_aggregation=True),
                              dict(seed=3, profile="wan", faults=FAULTS), {}),
        "fedrecpp/eta2-faults": ("fedrecpp", 10, 2, 2, dict(eta=2, deadline=5.0),
                                 dict(seed=2, profile="lan", faults=Faults(loss=0.2)), {}),
        "fedrecpp/secure-noise-faults": ("fedrecpp", 10, 2, 5, dict(sec, eta=2, secure_noise=True, dtype="float64"),
                                         dict(seed=5, profile="wan", faults=FAULTS), {}),
        "fedrecpp/secure-noise-trace-tap": ("fedrecpp", 8, 2, 5, dict(sec, eta=2, secure_noise=True),
                                            dict(seed=5, profile="wan", trace=True), dict(tap=True)),
        # evaluations on held-out ratings (metrics), under loss with a deadline
        "fedrec/eval-loss": ("fedrec", 6, 3, 1, dict(eval_every=1, deadline=3.0),
                             dict(seed=1, profile="wan", faults=Faults(loss=0.2)), dict(holdout=0.2)),
        "fpl/eval-loss": ("fpl", 6, 2, 1, dict(deadline=3.0), dict(seed=1, profile="wan", faults=Faults(loss=0.2)),
                          dict(holdout=0.2)),
        "personalfr/eval-loss": ("personalfr", 4, 3, 1, dict(eval_every=1, deadline=3.0),
                                 dict(seed=1, profile="wan", faults=Faults(loss=0.2)), dict(holdout=0.2)),
        "fedavg-ae/eval-loss": ("fedavg-ae", 4, 3, 1, dict(eval_every=1, deadline=3.0),
                                dict(seed=1, profile="wan", faults=Faults(loss=0.2)), dict(holdout=0.2)),
        "fpl/trace-tap": ("fpl", 5, 2, 1, {}, dict(seed=1, profile="mobile", trace=True, link_model="tcp"),
                          dict(tap=True)),
    })
    return v


def run_one(spec_tuple) -> dict[str, str]:
    name, clients, rounds, dseed, changes, netkw, extra = spec_tuple
    spec = REGISTRY[name]
    data, cfg = spec.tiny(clients, rounds, dseed)
    if changes:
        cfg = cfg.replace(**changes)
    net = SimNetwork(**netkw)
    recorder = None
    if extra.get("tap"):
        from fedsim.privacy.record import Recorder

        recorder = Recorder().attach(net)
    test = None
    if extra.get("holdout"):
        from fedsim.data import random_holdout

        data, test = random_holdout(data, extra["holdout"], seed=dseed)
    job = spec.build(net, data, cfg, test=test)
    res = job.collect(net.run(strict=extra.get("strict", True)))
    out = digest(res, net, recorder)
    out["facts"] = facts(res)
    return out


def facts(res) -> dict:
    """Plain figures that say whether a run exercised what its variant is for (not compared
    across processes beyond the digests: the test checks them)."""
    t = res.ledger.totals()
    rows = list(res.ledger.records())
    return {"lost": int(t["lost_messages"]), "missing": len(res.ledger.missing), "offline": len(res.run.offline),
            "kinds": sorted({r["kind"] for r in rows}), "anonymous": sum(bool(r["anonymous"]) for r in rows),
            "metrics": len(res.metrics), "trace": len(res.run.trace) + len(res.run.log)}


def audits() -> dict:
    """name -> (protocol, clients, rounds, config changes, network kwargs): runs recorded whole,
    on which every attack of ``fedsim.studies.privacy.ATTACKS`` written for the protocol is run."""
    return {
        "audit/fedrec": ("fedrec", 6, 2, dict(rho=1.0), dict(seed=2, profile="wan")),
        "audit/fedrec-svdpp": ("fedrec", 5, 2, dict(model="SVD++(S)", lr=0.005), dict(seed=2, profile="wan")),
        "audit/fedrecpp": ("fedrecpp", 8, 2, dict(eta=2), dict(seed=2, profile="wan")),
        "audit/fpl": ("fpl", 6, 2, {}, dict(seed=2, profile="wan")),
        "audit/fcf": ("fcf", 5, 2, {}, dict(seed=2, profile="wan")),
        "audit/personalfr": ("personalfr", 4, 2, {}, dict(seed=2, profile="wan")),
    }


def run_audit(spec_tuple) -> dict[str, str]:
    from fedsim.privacy.audit import attack_capture, capture
    from fedsim.studies.privacy import ATTACKS

    name, clients, rounds, changes, netkw = spec_tuple
    spec = REGISTRY[name]
    data, cfg = spec.tiny(clients, rounds, 2)
    if changes:
        cfg = cfg.replace(**changes)
    cap = capture(name, data, cfg, net=SimNetwork(**netkw), seed=netkw["seed"])
    out = {"run": _h(cap.result.ledger.to_csv().encode())}
    for aname, cls in ATTACKS.items():
        if name not in cls.protocols:
            continue
        run, rows = attack_capture(cls(), cap)
        # the inference in the order the attack returned it (its own output) and the scores
        out[aname] = _h(_canon(dict(run.inference)), _canon(rows), run.messages, run.unrecorded)
    return out


def run_traces() -> dict[str, str]:
    """``fedsim trace`` of every protocol (3 clients, 1 round, lan, with secure aggregation where
    the protocol has it): a digest of each file written but the PNG (matplotlib's)."""
    import tempfile

    from fedsim.studies.trace import trace

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in REGISTRY:
            sets = {"fedrec": ["secure_aggregation=true"], "fpl": ["secure_aggregation=true"],
                    "fedrecpp": ["secure_noise=true", "eta=1"]}.get(name, [])
            folder = Path(tmp) / name.replace("/", "_")
            net, paths = trace(name, folder, clients=3, rounds=1, seed=4, profile="wan", sets=sets,
                               formats=("html", "mermaid", "svg", "log"))
            out[name] = _h(*[(k, Path(p).read_bytes()) for k, p in sorted(paths.items())])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="run names (comma-separated); default: all")
    ap.add_argument("--protocols", default="", help="protocols (comma-separated); default: all")
    args = ap.parse_args(argv)
    load_plugins(entry_points=False)
    todo = variants()
    todo.update(audits())
    if args.only:
        want = args.only.split(",")
        unknown = [w for w in want if w not in todo]
        if unknown:
            raise SystemExit(f"unknown run names {unknown}; known: {', '.join(todo)}")
        todo = {k: todo[k] for k in want}
    if args.protocols:
        ps = set(args.protocols.split(","))
        todo = {k: t for k, t in todo.items() if t[0] in ps}
    out = {k: run_audit(t) if k.startswith("audit/") else run_one(t) for k, t in todo.items()}
    if not args.only:
        out["trace"] = run_traces()
    json.dump(out, sys.stdout, indent=0, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
