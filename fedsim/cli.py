"""The ``fedsim`` command line: run scenarios, sweep them, trace protocols, list what exists,
manage datasets.

    fedsim [--plugin FILE] run [NAME|PROTOCOL|PATH] [--config run.toml] [--data D] [--out DIR] [--force]
           [--set k=v ...] [--seed N] [--profile P] [--link-model M] [--transport T] [--loss P]
           [--dropout P] [--link-option k=v ...] [--transport-option k=v ...] [--quiet] [--ledger]
    fedsim sweep NAME --grid key=v1,v2 [--grid ...] [--workers N] [--backend local|ray [--address ADDR]]
                 [--config sweep.toml] [run options]
    fedsim trace PROTOCOL [--clients 3] [--rounds 1] [--set k=v ...] [--eval] [--seed N] [--profile P] [--link-model M]
                 [--link-option k=v ...] [--loss P] [--dropout P] [--dropout-window START,END] [--out DIR] [--force] [--html] [--open]
    fedsim compare PROTOCOL [--against tcp|asyncio|T] [--processes N] [run options but --transport]
    fedsim list
    fedsim data get|list|path ...

NAME is a scenario of scenarios/ or any registered protocol (one run of it); ``--plugin`` (or
$FEDSIM_PLUGINS) loads protocols, link models and transports defined in other files first (their
names are then taken wherever a built-in one is). ``fedsim run NAME --help`` lists
the scenario's parameters.

Errors a user can cause print one line (``error: ...``) and exit with status 2, leaving no
output folder behind (so does a disk or quota that fills up during a run: ``error: the run
stopped: No space left on device ...``); a run that does not finish (a deadlock, a real transport
that broke, an allocation beyond memory) prints ``error: the run did not finish ...`` with who waits
for what, the process and nodes, or the actor, and exits with status 1 (``fedsim trace`` writes its views of
the run up to the deadlock all the same and names their folder); Ctrl-C exits with status 130,
and SIGTERM, which stops a run the same way, with 143 (``terminated (SIGTERM): ...``), leaving no folder (the console script is ``fedsim.__main__.entry``, which also catches one that
comes while this module is still importing).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import sys
import warnings
from typing import Sequence

from . import __version__
from .config import ConfigError
from .experiment import (
    FlagOnce, ScenarioError, StoreOnce, UsageError, add_run_arguments, default_out_dir, list_scenarios, load_scenario,
    plural, scenario_name,
)
from .experiment.configfile import at
from .experiment.params import set_keys
from .experiment.runner import (
    RUN_FAILURES, add_fault_arguments, add_option_arguments, closing_line, did_not_finish, did_not_finish_line, net_from_args,
    resolve_run_options,
)
from .kernel.errors import DeadlockError, NetworkConfigError
from .signals import returns_its_status, sigterm_as_interrupt

DEFAULT_SCENARIO = "quickstart"


def build_parser(scenario_help: str | None = None, command: str | None = None) -> argparse.ArgumentParser:
    """The parser; ``scenario_help`` (the parameters of the scenario named on the command line)
    becomes the epilog of ``command``'s help."""
    ap = argparse.ArgumentParser(prog="fedsim", description="Federated recommender protocols on a "
                                 "simulated network that counts every byte.")
    ap.add_argument("--version", action="version", version=f"fedsim {__version__}")
    ap.add_argument("--plugin", action="append", default=[], metavar="FILE",
                    help="a Python file that registers protocols, link models or transports (repeatable; also "
                         "$FEDSIM_PLUGINS)")
    sub = ap.add_subparsers(dest="command", metavar="{run,sweep,trace,compare,list,data}")
    sub.required = True
    fmt = {"formatter_class": argparse.RawDescriptionHelpFormatter}
    run = sub.add_parser("run", help="run a scenario (default: the quick demo)",
                         epilog=scenario_help if command == "run" else
                         "fedsim run NAME --help lists the parameters of scenario or protocol NAME.", **fmt)
    run.add_argument("scenario", nargs="?", default=None,
                     help=f"scenario name, protocol name, or path to a script (default {DEFAULT_SCENARIO}, "
                          "or the config file's scenario)")
    add_run_arguments(run)
    sw = sub.add_parser("sweep", help="run a scenario over a grid of parameters (a local process pool, or Ray)",
                        epilog=scenario_help if command == "sweep" else
                        "fedsim sweep NAME --help lists the parameters of NAME (each can be a --grid axis).", **fmt)
    sw.add_argument("scenario", nargs="?", default=None, help="scenario name or path (or the config file's)")
    sw.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                    help="grid values of one parameter or of seed, data, profile, link_model, transport, loss, "
                         "dropout, link_options.KEY, transport_options.KEY (repeatable; list parameters separate "
                         "values with ';')")
    sw.add_argument("--workers", action=StoreOnce, type=int, default=None,
                    help="points at once: worker processes, or the CPUs of a local Ray instance (default: one per "
                         "core; on a Ray cluster: as many as it schedules)")
    sw.add_argument("--backend", action=StoreOnce, choices=("local", "ray"), default=None,
                    help="run the points on a local process pool (default) or as Ray tasks (the ray extra)")
    sw.add_argument("--address", action=StoreOnce, default=None, metavar="ADDR",
                    help="with --backend ray: an existing Ray cluster (HOST:PORT, ray://HOST:10001 or auto; default: "
                         "start a local Ray instance)")
    add_run_arguments(sw)
    tr = sub.add_parser("trace", help="trace a protocol message by message (HTML viewer, Mermaid, timeline, log)")
    tr.add_argument("protocol", help="protocol to trace (see fedsim list)")
    tr.add_argument("--clients", action=StoreOnce, type=int, default=3, help="number of clients (default 3)")
    tr.add_argument("--rounds", action=StoreOnce, type=int, default=1, help="rounds (default 1, at most 1000)")
    tr.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="protocol option")
    tr.add_argument("--eval", action=FlagOnce,
                    help="hold 20%% of each user's ratings out (split as fedsim run does) and have the protocol "
                         "evaluate them, every round unless --set eval_every=N: its evaluation messages are traced")
    tr.add_argument("--seed", action=StoreOnce, type=int, default=0)
    tr.add_argument("--profile", action=StoreOnce, default="lan", help="network profile (default lan)")
    tr.add_argument("--link-model", action=StoreOnce, default=None, dest="link_model",
                    help="simulated links: fifo (default), fair, tcp, or one a --plugin registers (fedsim list)")
    add_option_arguments(tr, transport=False)  # (a trace runs on its own simulator: no --transport)
    add_fault_arguments(tr)  # (a lossy run waits for ever without the protocol's --set deadline=SECONDS)
    tr.add_argument("--out", action=StoreOnce, help="output folder (default runs/<time>-trace-<protocol>)")
    tr.add_argument("--force", action=FlagOnce, help="replace what --out holds")
    tr.add_argument("--html", action=FlagOnce,
                    help="write only trace.html (one self-contained page: sequence, timeline, step-through)")
    tr.add_argument("--open", action=FlagOnce, help="open trace.html in a web browser")
    tr.add_argument("--ledger", action=FlagOnce,
                    help="also write ledger.csv: every message of the traced run, a row each (bytes, array bytes, "
                         "floats, times, fate), as fedsim run --ledger writes it")
    cp = sub.add_parser("compare", help="run a protocol on the simulator and on a real transport, side by side")
    cp.add_argument("scenario", metavar="protocol", help="registered protocol (see fedsim list)")
    cp.add_argument("--against", action=StoreOnce, default="tcp", dest="against",
                    help="the transport to compare the simulator with: tcp (default), asyncio, or one a --plugin "
                         "registers (fedsim list)")
    cp.add_argument("--processes", action=StoreOnce, type=int, default=None,
                    help="worker processes of the tcp run, or of a plug-in transport that takes processes (default "
                         "4); refused for a transport that does not take them (asyncio)")
    add_run_arguments(cp, helps={
        "profile": "network profile: ideal, lan, wan, mobile (default lan)",
        "set": "a field of the protocol's configuration (repeatable; the fields: fedsim run PROTOCOL --help)",
        "transport": "sim only: fedsim compare runs the simulator itself; name the other transport with --against",
        "transport_options": "an argument of the --against transport's constructor (repeatable; e.g. "
                             "stall_timeout=60 for tcp)",
        "out": "output folder (default: runs/<timestamp>-compare-<protocol>); must not exist or be empty, unless "
               "--force"})
    sub.add_parser("list", help="list scenarios, protocols, network profiles, link models and transports")
    from .data import cli as data_cli

    data_cli.add_subparser(sub)
    return ap


def params_help(mod) -> str:
    """The parameters of scenario ``mod`` for ``--help``: name, type and bounds, default, help."""
    name = scenario_name(mod)
    lines = [f"parameters of {name} (--set KEY=VALUE, or [params] in a --config file; "
             f"lists: comma separated):"]
    rows = [(k, p.describe(), p.default_text(), p.help) for k, p in mod.PARAMS.items()]
    w0 = max([len(r[0]) for r in rows] + [4])
    w1 = min(max([len(r[1]) for r in rows] + [4]), 34)
    w2 = min(max([len(r[2]) for r in rows] + [7]), 16)
    lines.append(f"  {'name':<{w0}}  {'type':<{w1}}  {'default':<{w2}}  help")
    for k, t, d, h in rows:
        lines.append(f"  {k:<{w0}}  {t:<{w1}}  {d:<{w2}}  {h}")
    doc = (mod.__doc__ or "").strip()
    if doc:
        lines = [doc.split("\n\n")[0].replace("\n", " "), ""] + lines
    return "\n".join(lines)


def _scenario_for_help(argv: list[str]) -> tuple[str | None, str | None]:
    """(command, scenario) when ``argv`` asks for ``run [NAME] --help`` (``run --help``: the default
    scenario's) or ``sweep NAME --help``."""
    if not ({"-h", "--help"} & set(argv)):
        return None, None
    rest = [a for a in argv if a not in ("-h", "--help")]
    try:  # a look-ahead only: its complaints (a missing argument, once --help is gone) are not shown
        with contextlib.redirect_stderr(io.StringIO()):
            pre, _ = build_parser().parse_known_args(rest)
    except SystemExit:
        return None, None
    if pre.command not in ("run", "sweep"):
        return None, None
    if pre.command == "sweep" and pre.scenario is None:  # (a sweep has no default scenario)
        return None, None
    return pre.command, pre.scenario or DEFAULT_SCENARIO


def _load_config(args: argparse.Namespace, sweep: bool = False) -> dict | None:
    if not args.config:
        return None
    from .experiment.configfile import load_config

    return load_config(args.config, sweep=sweep)


@contextlib.contextmanager
def _from_config(args: argparse.Namespace, doc: dict | None):
    """Errors about ``data`` and ``out`` that came from the configuration file name the file and
    its key, not the command-line option the user did not give (``run.toml: line 2: data: unknown
    dataset 'x'`` rather than ``--data: unknown dataset 'x'``); so does a protocol's check of its
    settings together (``ConfigError`` naming a key, as ``eval_every`` beyond ``T``) when that key
    came from the file's ``[params]`` and not from ``--set``."""
    try:
        yield
    except ConfigError as exc:
        key = exc.key
        params = (doc or {}).get("params") or {}
        given = set_keys(getattr(args, "set", None))
        if key is not None and key in params and key not in given:
            raise ConfigError(f"{at(doc, 'params', key)}: [params] {key}: {exc}", key) from None
        raise
    except UsageError as exc:
        text = str(exc)
        for key in ("data", "out"):
            if doc and getattr(args, key, None) is None and key in doc and text.startswith(f"--{key}"):
                rest = text.removeprefix(f"--{key}").removeprefix(":").lstrip()
                raise UsageError(f"{at(doc, key)}: {key}: {rest}") from None
        raise


def _scenario_of(args: argparse.Namespace, doc: dict | None):
    """The scenario module the command line names, else the configuration file's (an error then
    names the file and its ``scenario`` key), else the default; an empty name is refused."""
    if args.scenario is not None:
        if not args.scenario.strip():
            raise UsageError("the scenario name is empty; give one or leave it out (default "
                             f"{DEFAULT_SCENARIO})")
        return load_scenario(args.scenario)
    if doc and doc.get("scenario") is not None:
        try:
            return load_scenario(doc["scenario"])
        except UsageError as exc:
            raise UsageError(f"{at(doc, 'scenario')}: scenario: {exc}") from None
    return load_scenario(DEFAULT_SCENARIO)


def _cmd_run(args: argparse.Namespace) -> int:
    from .experiment import run_scenario

    doc = _load_config(args)
    mod = _scenario_of(args, doc)
    with _from_config(args, doc):
        res = run_scenario(mod, **resolve_run_options(mod, args, doc))
    print(("" if args.quiet else "\n") + closing_line(res))
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from .experiment import run_scenario
    from .experiment.compare import compare_scenario
    from .protocols import REGISTRY

    if args.scenario not in REGISTRY:
        close = REGISTRY.closest(args.scenario)
        raise UsageError(f"fedsim compare takes a registered protocol, not {args.scenario!r}"
                         + (f"; did you mean {close!r}?" if close else "") + f" (protocols: {', '.join(REGISTRY)})")
    from .experiment.compare import check_against

    # (the same checks as compare_scenario's, the options named as on the command line)
    check_against(args.against, args.processes, option="--processes", label="--against")
    if args.transport not in (None, "sim"):
        raise UsageError("fedsim compare runs the simulator itself; name the other transport with --against")
    doc = _load_config(args)
    if ((doc or {}).get("network") or {}).get("transport") not in (None, "sim"):
        raise UsageError(f"{at(doc, 'network', 'transport')}: [network] transport: fedsim compare runs the simulator itself; name "
                         "the other transport with --against")
    if "transport_options" in ((doc or {}).get("network") or {}):
        raise UsageError(f"{at(doc, 'network', 'transport_options')}: [network] transport_options: fedsim compare gives "
                         "the --against transport the command line's --transport-option")
    from .experiment.netoptions import parse_options

    # (the options of the --against transport: the run's own network is the simulator)
    options = parse_options("transport", args.against, args.transport_options or ())
    args.transport_options = None
    if options and args.processes is not None and "processes" in dict(options):
        raise UsageError("--processes and --transport-option processes: the same option given twice; give it once")
    mod = compare_scenario(args.scenario, args.against, args.processes, options)
    with _from_config(args, doc):
        res = run_scenario(mod, **resolve_run_options(mod, args, doc))
    print(("" if args.quiet else "\n") + closing_line(res))
    return 0


def _cmd_sweep(args: argparse.Namespace, term: list[int]) -> int:
    from .experiment.live import active
    from .studies.sweep import (
        SweepInterrupted, SweepNotStarted, axis_parameter, check_grid, check_workers, failure_line, option_hint, parse_grid,
        run_sweep,
    )

    doc = _load_config(args, sweep=True) or {}
    if args.scenario is None and doc.get("scenario") is None:
        raise UsageError("fedsim sweep needs a scenario (fedsim sweep NAME --grid KEY=V1,V2, or scenario = "
                         "\"NAME\" in the --config file)")
    mod = _scenario_of(args, doc)
    name = args.scenario if args.scenario is not None else doc["scenario"]
    grid = {}
    file_axes = []  # (its path in the file, the key check_grid reads): network.dropout = [...] is a table
    for key, values in (doc.get("grid") or {}).items():
        if key in ("network", "params", "link_options", "transport_options") and isinstance(values, dict):
            file_axes += [((key, k), (f"{key}.{k}", v)) for k, v in values.items()]
        else:
            file_axes.append(((key,), (key, values)))
    net_doc = doc.get("network") or {}
    names = (args.link_model or net_doc.get("link_model") or "fifo", args.transport or net_doc.get("transport") or "sim")

    def hinted(exc: UsageError, file: bool = False) -> str:
        """``exc``'s text, and, for an unknown axis that is an option of the link model or transport,
        the axis to write (link_options.KEY)."""
        import re

        m = re.match(r"--grid: unknown parameter '([^']*)'", str(exc))
        return str(exc) + (option_hint(m.group(1), *names, file=file) if m else "")

    for path, (key, values) in file_axes:  # one key at a time: the error names its line
        try:
            grid.update(check_grid(mod, {key: values}))
        except UsageError as exc:
            text = hinted(exc, file=True)
            for prefix in ("--grid: ", "--grid ", "grid ", "--set "):
                text = text.removeprefix(prefix)
            raise UsageError(f"{at(doc, 'grid', *path)}: [grid] {text}") from None
    try:
        grid.update(parse_grid(mod, args.grid))  # the command line's axes replace the file's
    except UsageError as exc:
        raise UsageError(hinted(exc)) from None
    if not grid:
        raise UsageError("fedsim sweep needs at least one --grid key=v1,v2,... (or a [grid] table in --config)")
    opts = resolve_run_options(mod, args, doc)
    fixed = opts["overrides"]
    on_command_line = set_keys(args.set)
    for key in map(axis_parameter, grid):  # a grid axis replaces the file's [params] value (an --set one is refused)
        if key in fixed and key not in on_command_line:
            del fixed[key]
    if "workers" in mod.PARAMS and "workers" not in fixed and "workers" not in grid:
        fixed["workers"] = 1  # the sweep's own pool already uses the cores
    workers = args.workers if args.workers is not None else doc.get("workers")
    if args.workers is not None or workers is None:
        workers = check_workers(workers)
    else:
        workers = check_workers(workers, f"{at(doc, 'workers')}: workers:")

    backend = args.backend or doc.get("backend") or "local"
    if backend not in ("local", "ray"):
        raise UsageError(f"{at(doc, 'backend')}: backend: expected 'local' or 'ray', got {backend!r}")
    address = args.address if args.address is not None else doc.get("address")
    if args.address is None and address is not None and backend != "ray":
        if args.backend is not None and doc.get("backend") == "ray":  # the file's backend, overridden here
            raise UsageError(f"{at(doc, 'address')}: address is the address of a Ray cluster, and --backend "
                             f"{args.backend} runs no Ray (it overrides the file's backend = \"ray\"); leave out "
                             "--backend, or the file's address")
        raise UsageError(f"{at(doc, 'address')}: address is the address of a Ray cluster: it needs backend = \"ray\" "
                         "(or --backend ray)")
    if args.address is None and address is not None:
        from .studies.raypool import address_error

        error = address_error(address, f"{at(doc, 'address')}: address")
        if error:
            raise error

    def progress(i, total, res):
        # each failure once, as it happens (also with --quiet: it is an error, not progress),
        # printed through the progress display so that its bar is not torn
        if res["status"] == "failed":
            display = active()
            (display.print if display is not None else print)(failure_line(res), file=sys.stderr)

    try:
        with _from_config(args, doc):
            summary = run_sweep(name, grid, opts["out"], data=opts["data"], fixed=fixed, seed=opts["seed"],
                                net=opts["net"], workers=workers, progress=progress, force=opts["force"],
                                quiet=opts["quiet"], backend=backend, address=address, ledger=opts["ledger"])
    except SweepNotStarted as exc:  # (said "the run's output folder was not written")
        left = (f"no point was run; the same command resumes the sweep in {exc.out}/" if exc.out is not None
                else NO_SWEEP_WRITTEN)
        print(f"{_stopped(term)}: {left}", file=sys.stderr)
        return 130
    except SweepInterrupted as exc:
        s = exc.summary
        failed = f", {len(s['failed'])} failed (above)" if s["failed"] else ""
        print(f"interrupted: {plural(len(s['done']), 'point')} run, {len(s['skipped'])} done before{failed}, "
              f"{len(s['not_run'])} not run; the same command resumes. Results so far in {s['out']}/ "
              f"(report.md, sweep.json)", file=sys.stderr)
        return 130
    again = f" ({len(summary['rerun'])} of them again)" if summary["rerun"] else ""
    failed = (" (above; each in its folder's error.txt, with the traceback of each that raised)"
              if summary["failed"] else "")
    unwritten = sum(1 for r in summary["failed"] if r.get("unwritten"))
    if unwritten:  # (a full disk: a point's error.txt could not be written either)
        failed = (f" (above; each in its folder's error.txt, with the traceback of each that raised, except {unwritten} "
                  "whose error.txt could not be written)" if unwritten < len(summary["failed"])
                  else " (above; their error.txt could not be written)")
    if len(summary["fedsim_versions"]) > 1:  # a sweep resumed by another fedsim
        print("warning: the points were run by different fedsims ("
              + "; ".join(f"{v}: {len(pts)} point(s)" for v, pts in summary["fedsim_versions"].items())
              + "); their figures may not be comparable (report.md's fedsim column)", file=sys.stderr)
    caveats = ""
    if summary["caveats"]:
        words = sorted({w for c in summary["caveats"] for w in c["caveats"]})
        caveats = f", {len(summary['caveats'])} with caveats ({', '.join(words)}: report.md)"
    print(f"sweep: {plural(summary['points'], 'point')}, {len(summary['done'])} run{again}, "
          f"{len(summary['skipped'])} already done, {len(summary['failed'])} failed{failed}{caveats}; results in "
          f"{summary['out']}/ (report.md, sweep.json, "
          f"{', '.join(os.path.basename(c) for c in summary['combined']) or 'no combined tables'})")
    used = summary["backend"]
    if "startup_s" in used and not opts["quiet"]:
        print(f"ray: {format(used['cpus'], 'g') if used['cpus'] else '?'} CPUs{' at ' + used['address'] if used['address'] else ''}, "
              f"start-up {used['startup_s']:.1f} s, points {used['run_s']:.1f} s, shutdown {used['shutdown_s']:.1f} s")
    return 1 if summary["failed"] else 0


def _cmd_trace(args: argparse.Namespace) -> int:
    from .experiment.runner import OutputFolder, no_room_error
    from .experiment.protocol_run import DEFAULT_TEST_FRAC
    from .studies.trace import FORMATS, MAX_MERMAID_CHARS, MAX_PAGE_MESSAGES, trace

    if args.out is not None and not args.out.strip():  # it wrote to runs/<time>-trace-NAME instead
        raise UsageError("--out is empty; give a value or leave the option out")
    netspec = net_from_args(None, args)  # --profile, --loss, --dropout, --dropout-window as fedsim run reads them
    folder = OutputFolder(args.out or default_out_dir("trace-" + args.protocol), explicit=bool(args.out),
                          force=args.force)
    try:
        net, paths = trace(args.protocol, folder.tmp, clients=args.clients, rounds=args.rounds, seed=args.seed,
                           net=netspec, sets=args.set,
                           formats=(("html",) if args.html else FORMATS) + (("ledger",) if args.ledger else ()),
                           test_frac=DEFAULT_TEST_FRAC if args.eval else 0.0)
        final = folder.commit()
    except DeadlockError as exc:  # written all the same: the trace shows who waits for what
        if not getattr(exc, "paths", None):
            folder.discard()
            raise
        final = folder.commit()
        print(f"wrote {final}/: {', '.join(p.name for p in exc.paths.values())} (the run up to its deadlock)")
        print(f"error: {did_not_finish(exc, written=final, advice=getattr(exc, 'advice', None))}", file=sys.stderr)
        return 1
    except BaseException as exc:
        folder.discard()
        full = no_room_error(exc, folder.final, "trace")
        if full is not None:  # (was Python's traceback)
            raise full from None
        raise
    html = final / "trace.html"
    names = ", ".join(p.name for p in paths.values())
    print(f"traced {plural(len(net.ledger), 'message')}; wrote {final}/: {names}")
    if net.diverged_at is not None:  # (the trace just stopped early: its stop message alone said why)
        from .config import fields_of
        from .protocols import REGISTRY

        lr = "lr" in {f.name for f in fields_of(REGISTRY[args.protocol].Config)}
        print(f"note: the model diverged: its server found it not finite after {net.diverged_at} of the "
              f"{plural(args.rounds, 'round')} and stopped there (stop carries diverged_at {net.diverged_at})"
              + ("; a smaller learning rate (--set lr=...) keeps it finite" if lr else ""), file=sys.stderr)
    if args.eval:  # what --eval added, or that it added no message
        from .protocols import REGISTRY

        kinds = REGISTRY[args.protocol].kinds_for("evaluation")
        n = sum(1 for r in net.ledger.records() if r["kind"] in kinds)
        if n:
            print(f"{n} of them evaluation messages ({', '.join(kinds)}), on {DEFAULT_TEST_FRAC:g} of each "
                  "user's ratings held out")
        else:  # (a protocol that declares no evaluation kind is refused before it runs)
            print(f"no evaluation message: {args.protocol} sent no {' or '.join(kinds)} message in this run "
                  f"(with {DEFAULT_TEST_FRAC:g} of each user's ratings held out)")
    cuts = getattr(net, "cuts", {})
    if "html" in cuts:
        also = "" if args.html else " (every message is in steps.log)"
        print(f"trace.html draws the first whole rounds of at most {MAX_PAGE_MESSAGES} of the {len(net.ledger)} "
              f"messages and says which{also}")
    drawn = [name for f, name in (("svg", "timeline.svg"), ("png", "timeline.png")) if f in cuts and f in paths]
    if drawn:
        print(f"{' and '.join(drawn)} draw{'s' if len(drawn) == 1 else ''} the same {cuts['svg' if 'svg' in cuts else 'png']['shown']} "
              f"messages and say{'s' if len(drawn) == 1 else ''} so")
    if "mermaid" in cuts:
        print(f"sequence.mmd holds the first {cuts['mermaid']['shown']} messages (whole rounds within Mermaid's "
              f"{MAX_MERMAID_CHARS}-character limit) and says so")
    try:  # the trace is how an author sees such a message: written all the same, and said
        from .protocols import REGISTRY
        from .protocols.contract import check_ledger

        check_ledger(REGISTRY[args.protocol], net.ledger)
    except _contract_error() as exc:
        print(f"warning: {exc}", file=sys.stderr)
    print(f"open {html.resolve().as_uri()} in a browser (one file, works offline)")
    if args.open:
        import webbrowser

        webbrowser.open(html.resolve().as_uri())
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from .config import fields_of
    from .kernel import LINK_MODELS, PROFILES, TRANSPORTS
    from .protocols import REGISTRY

    from .experiment.discovery import scenario_run_times

    times = scenario_run_times()
    print("scenarios (fedsim run NAME; parameters: fedsim run NAME --help):")
    for name, desc in list_scenarios():
        print(f"  {name:<26} {desc}")
        if times.get(name):
            print(f"  {'':<26}   run time: {times[name]}")
    # (the run time was one line under the last protocol, a plug-in's too, read as that one's)
    print("\nprotocols (fedsim run NAME, fedsim trace NAME; parameters: fedsim run NAME --help; the built-in "
          "ones run in seconds on the default tiny data):")
    for spec in REGISTRY.specs():
        print(f"  {spec.name:<26} {spec.summary}")
        names = ", ".join(f.name for f in fields_of(spec.Config))
        print(f"  {'':<26}   parameters: {names}")
    print("\nnetwork profiles (--profile): " + ", ".join(PROFILES))
    # each one's constructor options that a command-line value can be (--link-option,
    # --transport-option KEY=VALUE); none listed for a factory whose **kwargs take any name
    from .experiment.netoptions import FLAGS, command_line_options

    for title, names, kind in (
            ("link models (--link-model; a plug-in registers more: docs/network-model.md):", LINK_MODELS, "link"),
            ("transports (--transport):", TRANSPORTS, "transport")):
        print("\n" + title)
        for name, desc in names.items():
            print(f"  {name:<26} {desc}")
            options = command_line_options(kind, name)
            if options:
                print(f"  {'':<26}   options ({FLAGS[kind]} KEY=VALUE): {', '.join(options)}")
    return 0


@returns_its_status
def main(argv: Sequence[str] | None = None) -> int:
    """The command line; SIGTERM stops it as Ctrl-C does (``sigterm_as_interrupt``: the output
    folder is not written), with ``terminated (SIGTERM)`` for ``interrupted`` and status 143.
    The process ends with the status returned, also after a Ctrl-C handled while a module
    imported (``returns_its_status``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with sigterm_as_interrupt() as term, warnings.catch_warnings():
        warnings.showwarning = show_warning
        try:
            status = _main(argv, term)
        except KeyboardInterrupt:  # before a command runs (parsing, --help's scenario, imports): _main catches the rest
            print(f"{_stopped(term)}: nothing was run or written", file=sys.stderr)
            status = 130
        except BrokenPipeError:
            # output piped into a reader that stopped early (`fedsim list | head`): not an error.
            # Point stdout at devnull so the interpreter's final flush does not raise again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
    return 128 + signal.SIGTERM if term and status == 130 else status


# what a sweep stopped before it knew its folder leaves (loading the plug-ins, the scenario:
# numba's warm-up), or before it wrote in a folder that was not there
NO_SWEEP_WRITTEN = "the sweep ran no point and wrote nothing"


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """How the command line shows a warning (``warnings.showwarning`` while it runs): fedsim's own
    (``ExposedDenoiserWarning``: settings it runs but warns about) as one line, ``warning:
    MESSAGE``, since the place of fedsim's source that noticed it is nothing the user can change;
    any other as Python shows it, with its file and line."""
    out = sys.stderr if file is None else file
    if out is None:
        return
    if getattr(category, "__module__", "").split(".")[0] == "fedsim":
        text = f"warning: {message}\n"
    else:
        text = warnings.formatwarning(message, category, filename, lineno, line)
    try:
        out.write(text)
    except OSError:
        pass


def _stopped(term: list[int]) -> str:
    """How the command line was stopped, for its last line."""
    return "terminated (SIGTERM)" if term else "interrupted"


def _contract_error() -> type:
    """``ContractError`` (a plug-in protocol's build, collect or messages break the contract),
    imported when an exception is being matched: fedsim.protocols is not needed for --help."""
    from .protocols.contract import ContractError

    return ContractError


def _plugins(paths: list[str]) -> None:
    from .protocols import load_plugins

    try:
        load_plugins(paths)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None


def _main(argv: list[str], term: list[int] | None = None) -> int:
    from .experiment.allocator import keep_freed_memory

    keep_freed_memory()  # large freed blocks stay in the process (see there: page faults per message)
    command, scenario = _scenario_for_help(argv)
    scenario_help = None
    if scenario:
        try:
            pre, _ = build_parser().parse_known_args([a for a in argv if a not in ("-h", "--help")])
            _plugins(pre.plugin)
            scenario_help = params_help(load_scenario(scenario))
        except (UsageError, ScenarioError, ConfigError) as exc:
            scenario_help = f"(cannot list the parameters of {scenario}: {exc})"
    ap = build_parser(scenario_help, command)
    args = ap.parse_args(argv)
    try:
        _plugins(args.plugin)
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "list":
            return _cmd_list(args)
        if args.command == "sweep":
            return _cmd_sweep(args, term if term is not None else [])  # (the list SIGTERM is added to later)
        if args.command == "trace":
            return _cmd_trace(args)
        if args.command == "compare":
            return _cmd_compare(args)
        if args.command == "data":
            from .data import cli as data_cli

            return data_cli.run(args)
    except (UsageError, ScenarioError, ConfigError, NetworkConfigError, _contract_error()) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RUN_FAILURES as exc:  # a run that did not finish (deadlock, broken transport, memory): one line, no traceback
        text = did_not_finish_line(exc)
        if text is None:
            raise
        print(f"error: {text}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # a data command writes no run folder: an install stopped leaves nothing in the cache
        done = {"data": "nothing was installed", "sweep": NO_SWEEP_WRITTEN}.get(
            args.command, "the run's output folder was not written")
        print(f"{_stopped(term or [])}: {done}", file=sys.stderr)
        return 130
    ap.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
