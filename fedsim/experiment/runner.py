"""Running a scenario: :func:`run_scenario` (what ``fedsim run`` and ``fedsim sweep`` call) and
:func:`scenario_main` (what ``python scenarios/NAME.py ...`` calls)."""

from __future__ import annotations

import argparse
import datetime as _dt
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Sequence

from .context import Progress, RunContext
from .discovery import first_sentence, load_scenario, scenario_name
from .errors import ScenarioError, UsageError
from .params import parse_sets, parse_value, resolve_config
from .report import git_revision, versions, write_report, write_results

__all__ = ["add_run_arguments", "default_out_dir", "net_from_args", "network_spec", "run_scenario", "scenario_main"]


def default_out_dir(name: str) -> Path:
    """``runs/<YYYYmmdd-HHMMSS>-<name>``, relative to the working directory (not created)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{stamp}-{name}"


def network_spec(mod: ModuleType, profile: str | None = None, net: Any = None, **options: Any):
    """The ``NetSpec`` a run of ``mod`` uses: ``net`` if given, else the scenario's
    ``DEFAULT_PROFILE`` (or ``profile``) with ``options`` (``link_model``, ``loss``, ``dropout``,
    ``window``, ``transport``; None means the default). Raises ``UsageError`` for a bad value."""
    from ..kernel import NetSpec
    from ..kernel.errors import NetworkConfigError

    if net is not None:
        return NetSpec.of(net)
    kw = {k: v for k, v in options.items() if v is not None}
    try:
        return NetSpec(profile=profile or getattr(mod, "DEFAULT_PROFILE", "ideal"), **kw)
    except NetworkConfigError as exc:
        raise UsageError(str(exc)) from None


def run_scenario(mod: ModuleType | str, *, data: str | None = None, out: str | Path | None = None,
                 overrides: dict[str, Any] | None = None, seed: int = 0, profile: str | None = None,
                 quiet: bool = False, ledger: bool = False, net: Any = None) -> dict[str, Any]:
    """Run a scenario (a module, or a name or path :func:`load_scenario` takes) and write its
    files to ``out`` (default :func:`default_out_dir`); returns the content of results.json.
    ``net``: a ``fedsim.kernel.NetSpec`` (or a profile name) for every network the scenario
    builds; ``profile`` is a shorthand for ``NetSpec(profile)``.
    Raises ``UsageError`` for an unknown scenario, parameter, profile or dataset, a bad value or
    a negative seed; whatever the scenario raises (``ScenarioError`` among it) passes through."""
    if isinstance(mod, str):
        mod = load_scenario(mod)
    name = scenario_name(mod)
    cfg = resolve_config(mod, overrides or {})
    netspec = network_spec(mod, profile, net)
    if int(seed) < 0:
        raise UsageError(f"--seed must be non-negative, got {seed}")
    out_dir = Path(out) if out else default_out_dir(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    if ledger and (out_dir / "ledger.csv").exists():
        (out_dir / "ledger.csv").unlink()
    data_spec = data or getattr(mod, "DEFAULT_DATA", "ml100k-like")
    ctx = RunContext(name=name, config=cfg, data=data_spec, seed=int(seed), net=netspec,
                     out=out_dir, quiet=quiet, keep_ledger=ledger, progress=Progress(not quiet))
    t0 = time.perf_counter()
    try:
        mod.run(ctx)
    finally:
        ctx.progress.close()
    wall = time.perf_counter() - t0
    if ledger:
        merge_ledgers(Path(ctx.ledger_dir), out_dir / "ledger.csv")
    results = {
        "scenario": name,
        "config": cfg,
        "data": data_spec,
        "seed": int(seed),
        "profile": netspec.profile,
        "network": netspec.to_dict(),
        "versions": versions(),
        "git_revision": git_revision(),
        "wall_time_s": wall,
        "simulated_time_s": ctx.sim_time,
        "ledger_totals": ctx.ledger_totals,
        "tables": [t.name for t in ctx.tables],
        "plots": ctx.plots,
        "finished": _dt.datetime.now().isoformat(timespec="seconds"),
    }
    write_results(out_dir, results)
    write_report(out_dir, results, ctx.tables, ctx.notes)
    return results


def merge_ledgers(parts: Path, dest: Path) -> int:
    """Write every ledger CSV of ``parts`` (in name order) into ``dest``, each row prefixed with a
    ``run`` column naming the network it came from (the part's name); remove ``parts``. Returns
    the number of rows. Every part has the same header (the ledger's columns)."""
    import shutil

    files = sorted(parts.glob("*.csv")) if parts.is_dir() else []
    rows = 0
    with open(dest, "w", newline="", encoding="utf-8") as out:
        header = None
        for f in files:
            with open(f, encoding="utf-8") as fh:
                first = fh.readline()
                if header is None:
                    header = first
                    out.write("run," + first)
                elif first != header:
                    raise RuntimeError(f"ledger part {f} has another header than the others")
                for line in fh:
                    out.write(f"{f.stem},{line}")
                    rows += 1
        if header is None:
            out.write("run\n")
    shutil.rmtree(parts, ignore_errors=True)
    return rows


def add_run_arguments(ap: argparse.ArgumentParser) -> None:
    """Add the options every run takes (``--data --out --set --seed --profile --quiet --ledger``)
    to ``ap``; ``fedsim run``, ``fedsim sweep`` and :func:`scenario_main` share them."""
    ap.add_argument("--data", help="dataset: a synthetic preset (tiny, ml100k-like, ml1m-like), "
                                   "a MovieLens folder or ratings file, or a downloaded name (ml-100k)")
    ap.add_argument("--out", help="output folder (default: runs/<timestamp>-<scenario>)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="set a scenario parameter (repeatable)")
    ap.add_argument("--seed", type=int, default=0, help="experiment seed (default 0)")
    ap.add_argument("--profile", default=None,
                    help="network profile: ideal, lan, wan, mobile (default: the scenario's, usually ideal)")
    ap.add_argument("--link-model", default=None, dest="link_model",
                    help="simulated links: fifo (store-and-forward, default), fair (max-min fair flows), "
                         "tcp (fair flows plus TCP start-up)")
    ap.add_argument("--transport", default=None,
                    help="sim (simulated network, default), asyncio (one process, real time) or tcp "
                         "(separate processes over TCP on loopback)")
    ap.add_argument("--loss", type=float, default=None, help="probability that a client's message is lost")
    ap.add_argument("--dropout", type=float, default=None,
                    help="probability that a client drops out (at a time uniform in --dropout-window)")
    ap.add_argument("--dropout-window", default=None, dest="dropout_window", metavar="START,END",
                    help="seconds within which dropouts happen (default 0,0)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar or printed tables")
    ap.add_argument("--ledger", action="store_true",
                    help="also write every message of every network as ledger.csv (a run column says which)")


def net_from_args(mod: ModuleType, args: argparse.Namespace):
    """The ``NetSpec`` of parsed run options (see :func:`add_run_arguments`)."""
    window = None
    if getattr(args, "dropout_window", None):
        try:
            window = tuple(float(x) for x in args.dropout_window.split(","))
            if len(window) != 2:
                raise ValueError
        except ValueError:
            raise UsageError(f"--dropout-window expects START,END in seconds, got {args.dropout_window!r}") from None
    return network_spec(mod, args.profile, link_model=args.link_model, transport=args.transport,
                        loss=args.loss, dropout=args.dropout, window=window)


def scenario_main(namespace: dict[str, Any], argv: Sequence[str] | None = None) -> int:
    """``python scenarios/NAME.py ...``: parse arguments (each parameter is also ``--NAME``) and
    run. Errors a user can cause print one line and exit 2."""
    mod = sys.modules[namespace["__name__"]]
    name = Path(namespace.get("__file__", "scenario")).stem
    ap = argparse.ArgumentParser(prog=f"scenarios/{name}.py",
                                 description=first_sentence(namespace["__doc__"])
                                 if namespace.get("__doc__") else None)
    add_run_arguments(ap)
    for key, p in mod.PARAMS.items():
        ap.add_argument(f"--{key.replace('_', '-')}", dest=f"param_{key}", metavar=p.type_name.upper(),
                        help=f"{p.help} (default {p.default})")
    args = ap.parse_args(argv)
    try:
        overrides = parse_sets(mod, args.set)
        for key, p in mod.PARAMS.items():
            v = getattr(args, f"param_{key}")
            if v is not None:
                overrides[key] = parse_value(key, v, p)
        res = run_scenario(mod, data=args.data, out=args.out, overrides=overrides, seed=args.seed,
                           quiet=args.quiet, ledger=args.ledger, net=net_from_args(mod, args))
    except (UsageError, ScenarioError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(f"\nwrote {Path(args.out) if args.out else 'runs/'}: report.md, results.json, "
              f"{', '.join(t + '.csv' for t in res['tables'])}")
    return 0
