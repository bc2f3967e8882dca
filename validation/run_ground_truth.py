"""Run every pattern through ns-3 and the real Linux TCP stack; write the ground-truth files.

    python -m validation.run_ground_truth                    # both engines, all patterns
    python -m validation.run_ground_truth --only ns3         # or --only real
    python -m validation.run_ground_truth --select 'bcast/*' --out-dir /tmp/gt

Writes ``ns3.json``, ``ns3_router100.json`` (ns-3 again with 100-packet queues, ns-3's default
size, at the router's ports, i.e. the downlinks: drops and retransmission timeouts instead of
deep queues; hosts keep deep queues of their own, as a Linux host's qdisc backpressures its
sockets instead of dropping), ``real_tcp.json`` (see
validation/results.py for the layout) and ``summary.md`` (every pattern's round completion
time from all three) into ``--out-dir`` (default validation/results). The engines run one after the other, each in its own process
(ns-3's import costs 600 MB; the real-TCP harness re-executes itself in a private network
namespace), never at the same time: real TCP's times depend on a quiet CPU.

Real TCP runs every latency-free pattern ``--real-repeats`` times (default 3; the median is
reported) and every pattern with latency ``--real-latency-repeats`` times (default 1; 0 skips
them): it cannot add latency, so those runs repeat their latency-free twins' experiment under
another name and are marked ``latency_modelled: false``.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from validation import patterns as P  # noqa: E402
from validation import results as R  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def _engine(module: str, args: list[str], timeout: float) -> int:
    cmd = [sys.executable, "-m", f"validation.{module}", *args]
    print("+", " ".join(cmd[:6]), "..." if len(cmd) > 6 else "", file=sys.stderr, flush=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")]))
    try:
        return subprocess.run(cmd, cwd=REPO, env=env, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        print(f"{module}: gave up after {timeout:.0f} s", file=sys.stderr)
        return 124


def _fmt(x, digits=4):
    return "-" if x is None else f"{x:.{digits}f}"


def summary(ns3_path: Path | None, real_path: Path | None, names: list[str],
            shallow_path: Path | None = None) -> str:
    ns3 = R.load(ns3_path) if ns3_path and ns3_path.exists() else {}
    real = R.load(real_path) if real_path and real_path.exists() else {}
    shallow = R.load(shallow_path) if shallow_path and shallow_path.exists() else {}
    head = []
    for label, path in (("ns-3", ns3_path), ("ns-3, 100-packet router ports", shallow_path), ("real TCP", real_path)):
        if path and path.exists():
            doc = R.load_doc(path)
            ver = doc.get("ns3_version") or doc.get("tc", "")
            head.append(f"- {label}: {path.name}, {doc['date']}, kernel {doc['kernel']}, {ver}, "
                        f"{doc.get('total_wall_s', '?')} s wall, load average {doc.get('loadavg_start')} -> "
                        f"{doc.get('loadavg_end')}")
    lines = ["# Ground truth: round completion times (s)", "", *head, "",
             "ns-3 round = last completion; real TCP = median of its repeats [min, max]; "
             "'no lat' = the pattern has latency, real TCP ran without it; retx = TCP retransmissions "
             "in ns-3 (spurious timeouts in deep queues); cpu = the real-TCP harness's CPU seconds per "
             "wall second (near 1: harness-bound, real times are upper bounds); r100 = ns-3 with "
             "100-packet queues (ns-3's default size) at the router's ports (the downlinks) instead of "
             "1e6, with its retransmissions and drops.", "",
             "| pattern | ns-3 | retx | real TCP | real runs | cpu | ns-3 r100 | r100 retx/drops | note |",
             "|---|---:|---:|---:|---|---:|---:|---:|---|"]
    for name in names:
        a, b, c = ns3.get(name), real.get(name), shallow.get(name)
        if a is None and b is None:
            continue
        runs = ""
        note = []
        if b is not None:
            ok = [x for x in b["round_runs"] if x is not None]
            runs = f"[{_fmt(min(ok))}, {_fmt(max(ok))}]" if len(ok) > 1 else ""
            if not b["latency_modelled"]:
                note.append("no lat")
            if b.get("queue_drops"):
                note.append(f"real drops {b['queue_drops']}")
            if b.get("errors"):
                note.append("real errors")
        if a is not None and a.get("queue_drops"):
            note.append(f"ns-3 drops {a['queue_drops']}")
        for label, x in (("ns-3", a), ("r100", c), ("real", b)):
            if x is not None and not x["complete"]:
                done = sum(v is not None for v in (m["completion"] for m in x["messages"]))
                note.append(f"{label}: {done}/{len(x['messages'])} complete")
        cpu = max((x or 0) for x in b["cpu_busy"]) if b is not None else None
        q100 = f"{c['retransmissions']}/{c['queue_drops']}" if c else "-"
        lines.append(f"| {name} | {_fmt(a['round']) if a else '-'} | {a['retransmissions'] if a else '-'} | "
                     f"{_fmt(b['round']) if b else '-'} | {runs} | {_fmt(cpu, 2)} | "
                     f"{_fmt(c['round']) if c else '-'} | {q100} | {', '.join(note)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=["ns3", "real"], help="run one engine only")
    ap.add_argument("--select", action="append", default=[], metavar="GLOB",
                    help="pattern names to run (fnmatch; repeatable; default all)")
    ap.add_argument("--real-repeats", type=int, default=3)
    ap.add_argument("--real-latency-repeats", type=int, default=1)
    ap.add_argument("--no-shallow", action="store_true",
                    help="skip the second ns-3 pass with 100-packet router queues (ns3_router100.json)")
    ap.add_argument("--out-dir", default=str(HERE / "results"))
    ap.add_argument("--summary-only", action="store_true", help="rewrite summary.md from the existing files")
    args = ap.parse_args(argv)

    pats = P.all_patterns()
    if args.select:
        pats = [p for p in pats if any(fnmatch.fnmatch(p["name"], g) for g in args.select)]
    names = [p["name"] for p in pats]
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ns3_out, real_out = out / "ns3.json", out / "real_tcp.json"
    shallow_out = out / "ns3_router100.json"
    rc = 0
    t0 = time.perf_counter()
    if not args.summary_only and args.only in (None, "ns3"):
        rc |= _engine("ns3_star", [*names, "-o", str(ns3_out)], timeout=3 * 3600)
        if not args.no_shallow:
            rc |= _engine("ns3_star", [*names, "--router-queue-packets", "100", "-o", str(shallow_out)],
                          timeout=3 * 3600)
    t1 = time.perf_counter()
    if not args.summary_only and args.only in (None, "real"):
        real_names = [p["name"] for p in pats if not P.has_latency(p) or args.real_latency_repeats > 0]
        rc |= _engine("real_tcp", [*real_names, "--repeats", str(args.real_repeats),
                                   "--repeats-with-latency", str(max(args.real_latency_repeats, 1)),
                                   "-o", str(real_out)], timeout=3 * 3600)
    t2 = time.perf_counter()
    (out / "summary.md").write_text(summary(ns3_out, real_out, names, shallow_out))
    print(f"ns-3 {t1 - t0:.0f} s, real TCP {t2 - t1:.0f} s; wrote {out}/summary.md", file=sys.stderr)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
