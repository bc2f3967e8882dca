"""The ``fedsim`` command line: run scenarios, list what exists, manage datasets.

    fedsim [--plugin FILE] run [NAME|PROTOCOL|PATH] [--data D] [--out DIR] [--set k=v ...] [--seed N]
           [--profile P] [--link-model M] [--transport T] [--loss P] [--dropout P] [--quiet] [--ledger]
    fedsim sweep NAME --grid key=v1,v2 [--grid ...] [--workers N] [--out DIR] [run options]
    fedsim trace PROTOCOL [--clients 3] [--rounds 1] [--set k=v] [--out DIR]
    fedsim list
    fedsim data get|list|path ...

NAME is a scenario of scenarios/ or any registered protocol (one run of it); ``--plugin`` (or
$FEDSIM_PLUGINS) loads protocols defined in other files first.

Errors a user can cause print one line (``error: ...``) and exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from . import __version__
from .config import ConfigError
from .kernel.errors import NetworkConfigError
from .experiment import (
    ScenarioError, UsageError, add_run_arguments, default_out_dir, list_scenarios, load_scenario,
    net_from_args, parse_sets, run_scenario,
)

DEFAULT_SCENARIO = "quickstart"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fedsim", description="Federated recommender protocols on a "
                                 "simulated network that counts every byte.")
    ap.add_argument("--version", action="version", version=f"fedsim {__version__}")
    ap.add_argument("--plugin", action="append", default=[], metavar="FILE",
                    help="a Python file that registers protocols (repeatable; also $FEDSIM_PLUGINS)")
    sub = ap.add_subparsers(dest="command", metavar="{run,sweep,trace,list,data}")
    sub.required = True
    run = sub.add_parser("run", help="run a scenario (default: the quick demo)")
    run.add_argument("scenario", nargs="?", default=DEFAULT_SCENARIO,
                     help=f"scenario name, protocol name, or path to a script (default {DEFAULT_SCENARIO})")
    add_run_arguments(run)
    sw = sub.add_parser("sweep", help="run a scenario over a grid of parameters on a process pool")
    sw.add_argument("scenario", help="scenario name or path")
    sw.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                    help="grid values of one parameter (repeatable; list parameters separate values with ';')")
    sw.add_argument("--workers", type=int, default=0, help="worker processes (default: one per core)")
    add_run_arguments(sw)
    tr = sub.add_parser("trace", help="trace a protocol message by message (Mermaid, timeline, log)")
    tr.add_argument("protocol", help="protocol to trace (see fedsim list)")
    tr.add_argument("--clients", type=int, default=3, help="number of clients (default 3)")
    tr.add_argument("--rounds", type=int, default=1, help="rounds (default 1)")
    tr.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="protocol option")
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--profile", default="lan", help="network profile (default lan)")
    tr.add_argument("--out", help="output folder (default runs/<time>-trace-<protocol>)")
    sub.add_parser("list", help="list scenarios and protocols")
    from .data import cli as data_cli

    data_cli.add_subparser(sub)
    return ap


def _cmd_run(args: argparse.Namespace) -> int:
    mod = load_scenario(args.scenario)
    res = run_scenario(mod, data=args.data, out=args.out, overrides=parse_sets(mod, args.set),
                       seed=args.seed, quiet=args.quiet, ledger=args.ledger, net=net_from_args(mod, args))
    if not args.quiet:
        print(f"\nresults in {args.out or 'runs/'} ({', '.join(t + '.csv' for t in res['tables'])}, "
              f"report.md, results.json); wall {res['wall_time_s']:.1f} s")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from .studies.sweep import parse_grid, run_sweep

    mod = load_scenario(args.scenario)
    grid = parse_grid(mod, args.grid)
    if not grid:
        raise UsageError("fedsim sweep needs at least one --grid key=v1,v2,...")
    fixed = parse_sets(mod, args.set)
    if "workers" in mod.PARAMS and "workers" not in fixed and "workers" not in grid:
        fixed["workers"] = 1  # the sweep's own pool already uses the cores
    out = args.out or str(default_out_dir("sweep-" + args.scenario.replace("/", "_")))
    quiet = args.quiet or not sys.stderr.isatty()

    def progress(i, total, res):
        if not quiet:
            print(f"[{i + 1}/{total}] {res['status']}: {res['point']}", file=sys.stderr)

    summary = run_sweep(args.scenario, grid, out, data=args.data, fixed=fixed, seed=args.seed,
                        net=net_from_args(mod, args), workers=args.workers or None, progress=progress)
    print(f"sweep: {summary['points']} points, {len(summary['done'])} run, "
          f"{len(summary['skipped'])} already done, {len(summary['failed'])} failed; results in {out}")
    for f in summary["failed"]:
        print(f"  failed {f['point']}: {f['error']} (see {f['out']}/error.txt)", file=sys.stderr)
    return 1 if summary["failed"] else 0


def _cmd_trace(args: argparse.Namespace) -> int:
    from .studies.trace import trace

    out = args.out or str(default_out_dir("trace-" + args.protocol))
    net, paths = trace(args.protocol, out, clients=args.clients, rounds=args.rounds, seed=args.seed,
                       profile=args.profile, sets=args.set)
    print(f"traced {len(net.ledger)} messages; wrote " + ", ".join(str(p) for p in paths.values()))
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from .config import fields_of
    from .kernel.sim import LINK_MODELS
    from .kernel import PROFILES, TRANSPORTS
    from .protocols import REGISTRY

    print("scenarios (fedsim run NAME):")
    for name, desc in list_scenarios():
        print(f"  {name:<26} {desc}")
    print("\nprotocols (fedsim run NAME, fedsim trace NAME; parameters: fedsim run NAME --help):")
    for spec in REGISTRY.specs():
        print(f"  {spec.name:<26} {spec.summary}")
        names = ", ".join(f.name for f in fields_of(spec.Config))
        print(f"  {'':<26}   parameters: {names}")
    print("\nnetwork profiles (--profile): " + ", ".join(PROFILES))
    print("link models (--link-model): " + ", ".join(LINK_MODELS))
    print("transports (--transport): " + ", ".join(TRANSPORTS))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        from .protocols import load_plugins

        try:
            load_plugins(args.plugin)
        except FileNotFoundError as exc:
            raise UsageError(str(exc)) from None
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "list":
            return _cmd_list(args)
        if args.command == "sweep":
            return _cmd_sweep(args)
        if args.command == "trace":
            return _cmd_trace(args)
        if args.command == "data":
            from .data import cli as data_cli

            return data_cli.run(args)
    except (UsageError, ScenarioError, ConfigError, NetworkConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # output piped into a reader that stopped early (`fedsim list | head`): not an error.
        # Point stdout at devnull so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    ap.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
