"""The ``fedsim`` command line: run scenarios, list what exists, manage datasets.

    fedsim run [NAME|PATH] [--data D] [--out DIR] [--set k=v ...] [--seed N] [--profile P] [--quiet] [--ledger]
    fedsim list
    fedsim data get|list|path ...

Errors a user can cause print one line (``error: ...``) and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from . import __version__
from .experiment import (
    ScenarioError, UsageError, add_run_arguments, list_scenarios, load_scenario, parse_sets,
    run_scenario,
)

DEFAULT_SCENARIO = "quickstart"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="fedsim", description="Federated recommender protocols on a "
                                 "simulated network that counts every byte.")
    ap.add_argument("--version", action="version", version=f"fedsim {__version__}")
    sub = ap.add_subparsers(dest="command", metavar="{run,list,data}")
    sub.required = True
    run = sub.add_parser("run", help="run a scenario (default: the quick demo)")
    run.add_argument("scenario", nargs="?", default=DEFAULT_SCENARIO,
                     help=f"scenario name or path to a script (default {DEFAULT_SCENARIO})")
    add_run_arguments(run)
    sub.add_parser("list", help="list scenarios and protocols")
    from .data import cli as data_cli

    data_cli.add_subparser(sub)
    return ap


def _cmd_run(args: argparse.Namespace) -> int:
    mod = load_scenario(args.scenario)
    res = run_scenario(mod, data=args.data, out=args.out, overrides=parse_sets(mod, args.set),
                       seed=args.seed, profile=args.profile, quiet=args.quiet, ledger=args.ledger)
    if not args.quiet:
        print(f"\nresults in {args.out or 'runs/'} ({', '.join(t + '.csv' for t in res['tables'])}, "
              f"report.md, results.json); wall {res['wall_time_s']:.1f} s")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    print("scenarios (fedsim run NAME):")
    for name, desc in list_scenarios():
        print(f"  {name:<26} {desc}")
    from .protocols import PROTOCOLS

    print("\nprotocols:")
    for name, desc in PROTOCOLS.items():
        print(f"  {name:<26} {desc}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    try:
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "list":
            return _cmd_list(args)
        if args.command == "data":
            from .data import cli as data_cli

            return data_cli.run(args)
    except (UsageError, ScenarioError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    ap.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
