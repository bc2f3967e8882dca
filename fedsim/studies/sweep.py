"""Parameter sweeps: a grid of scenario runs on a local process pool, keyed by configuration.

Each grid point runs as an ordinary scenario run in its own folder (``OUT/key=value,.../``),
whose results.json records the point's whole resolved configuration (scenario, parameters,
data, seed, network). Any scenario parameter is a grid axis, and so are the run options
``seed``, ``data``, ``profile``, ``link_model``, ``transport``, ``loss`` and ``dropout``, and the
constructor options ``link_options.KEY`` and ``transport_options.KEY`` (``--link-option``,
``--transport-option``), typed for each point by its link model's or transport's constructor.
Wherever the sweep shows a point (folder names, combined tables, report.md, sweep.log, messages)
it is :func:`point_label`'s ``x=2,f=1+2``: a list value's elements joined by ``+``.

Re-running a sweep compares each point folder with the configuration the point would run now:

- the same configuration and a complete folder: done, skipped;
- no folder, a folder of a failed point (``error.txt``), or one whose results.json is missing
  or unreadable (a corrupted folder): run (again);
- a complete folder of *another* configuration (``--set iterations=4`` after 3 into the same
  ``--out``): the sweep refuses, naming the points and what differs, unless ``force``, which
  re-runs exactly those points.

Points run on a local process pool (``backend="local"``, the default) or as Ray tasks
(``backend="ray"``: a local Ray instance, or an existing cluster given its ``address``; see
:mod:`.raypool`). A Ray task runs its point in a temporary folder of its worker's machine and
returns the folder's files, which the driver writes into the point's folder, so a cluster needs
no file system shared with the driver. Both backends write the same folders, and the key of a
point does not include the backend: a sweep started on one resumes on the other.

Without an explicit output folder a sweep writes to ``runs/sweep-<scenario>-<key>``, where the key
hashes the sweep's configuration except the grid's values (scenario, fixed parameters, data,
seed, network, the grid's axes), so the same command resumes in the same folder and a grid
extended by more values reuses the points it already has. A folder keeps the order of its sweep's
axes (in its folder names and columns): the same axes given in another order resume there.

Before it runs any point or writes its files, a sweep checks each point it is to run with the
scenario module's ``check(config, load, given)`` where it has one (every protocol's: its
configuration and its spec's ``check_data`` against the point's data): points that would be
refused refuse the sweep, with one ``ConfigError`` (:func:`_check_points`). What recovery did to
the folder before (point folders put back or removed, below) is said in ``sweep.log`` also when
the sweep is then refused.

The sweep writes, also when interrupted (Ctrl-C stops every worker promptly; points that did
not finish are "not run", never "failed", and leave no folder): ``combined_<table>.csv`` (every
finished point's rows, prefixed by its grid values), ``report.md`` (the points and their status,
the combined tables, and a plot per metric against the grid axes), ``sweep.json`` (the sweep's
configuration and every point's status) and ``sweep.log`` (which also names each point folder the
sweep put back or removed before comparing, and why: :func:`_recover_points`). The combined files, report.md
(marked running, without plots) and sweep.json are written as the sweep starts too, over the
points done before: a sweep killed outright does not leave the previous sweep's report claiming
"Finished." over points it was replacing.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import hashlib
import itertools
import json
import math
import numbers
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from ..experiment import (
    Progress, UsageError, check_value, json_default, load_scenario, parse_value, resolve_config, run_scenario,
    scenario_name, write_csv,
)
from ..experiment.live import activate, deactivate
from ..experiment.params import unknown_parameter
from ..experiment.report import format_table, naming_the_file, plural, save_figure, write_atomic
from ..experiment.runner import (
    MAX_OUT_NAME_BYTES, OutputFolder, check_flag, check_seed, network_spec, no_room_error, recover_replaced,
    remove_dead_partials,
)
from ..kernel.errors import NetworkConfigError
from ..signals import sigint_deferred
from .parallel import PluginLoadError, ProcessDied, check_main_importable, default_workers, pmap

__all__ = ["BACKENDS", "RUN_AXES", "SweepInterrupted", "SweepNotStarted", "SweepPoint", "check_workers", "combine",
           "axis_network_field", "axis_parameter", "default_sweep_dir", "failure_line", "option_axis", "option_hint",
           "parse_grid",
           "point_dir_name", "point_label", "run_sweep"]

# grid axes that are run options rather than scenario parameters
NET_AXES = ("profile", "link_model", "transport", "loss", "dropout")
RUN_AXES = ("seed", "data") + NET_AXES
BACKENDS = ("local", "ray")


class SweepNotStarted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_sweep` once it knows its folder ``out`` and before it started any
    point (checking the points, starting Ray, writing the sweep's files of its start): no point
    ran. ``out`` is the folder when it exists then (an earlier run's, or this one's start:
    sweep.json says running; the same command resumes it there), else None (nothing written)."""

    def __init__(self, out: Path | None) -> None:
        super().__init__("sweep interrupted before any point ran")
        self.out = out


@contextlib.contextmanager
def _before_any_point(out: Path):
    """A ``KeyboardInterrupt`` of the block raised as :class:`SweepNotStarted`: the command line
    said "the run's output folder was not written" of a sweep stopped as it started."""
    try:
        yield
    except SweepNotStarted:
        raise
    except KeyboardInterrupt:
        raise SweepNotStarted(out if out.is_dir() else None) from None


def _interrupted_as_ray_stops(finished: list[dict], exc: BaseException | None) -> bool:
    """(An exit callback of :func:`run_sweep`.) A Ctrl-C while Ray shut down, after every point
    ended and the sweep's files were written, makes the sweep interrupted (its summary says so:
    :class:`SweepInterrupted`): it passed as a plain ``KeyboardInterrupt``, and the command line
    said that nothing was run. Anything else passes through."""
    if finished and isinstance(exc, KeyboardInterrupt) and not isinstance(exc, (SweepInterrupted, SweepNotStarted)):
        finished[0]["interrupted"] = True
        return True
    return False


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during :func:`run_sweep`, raised after every worker has stopped and the combined
    files cover the points that finished; ``summary`` is what :func:`run_sweep` would return."""

    def __init__(self, summary: dict) -> None:
        super().__init__("sweep interrupted")
        self.summary = summary


def _axis_name(key: str) -> str:
    return key.strip().replace("-", "_") if key.strip().replace("-", "_") in RUN_AXES else key.strip()


NET_PREFIX, PARAM_PREFIX = "network.", "params."  # as a config file's [network] and [params] tables
# an argument of the link model's or the transport's constructor (--link-option, --transport-option),
# as a config file's [network] link_options and transport_options tables: always written so
OPTION_PREFIXES = {"link_options.": "link", "transport_options.": "transport"}


def option_axis(key: str) -> tuple[str, str] | None:
    """(kind, option) of grid axis ``key`` when it is a constructor option (``link_options.rate``:
    ``("link", "rate")``; ``transport_options.processes``: ``("transport", "processes")``), else
    None."""
    for prefix, kind in OPTION_PREFIXES.items():
        if key.startswith(prefix):
            return kind, key[len(prefix):]
    return None


def _grid_key(mod, given: str, option: str = "--grid") -> str:
    """The grid axis ``given`` names for scenario ``mod``: a run option (``seed``, ``profile``,
    ...), a scenario parameter, or, for a name that is both a network option and a parameter
    (``dropout`` of PersonalFR and FedAvg-AE), ``network.NAME`` or ``params.NAME`` as written;
    that name alone is refused as ambiguous. A qualified name whose bare name is not ambiguous is
    the bare name (``network.loss`` is ``loss``: the same axis, folder names and sweep)."""
    key = _axis_name(given)
    for prefix in OPTION_PREFIXES:
        if key.startswith(prefix):
            name = key[len(prefix):].strip()
            if not name or "." in name:
                raise UsageError(f"{option} {given}: expected {prefix}KEY, KEY an argument of the "
                                 f"{'link model' if OPTION_PREFIXES[prefix] == 'link' else 'transport'}'s constructor")
            return prefix + name
    for prefix in (NET_PREFIX, PARAM_PREFIX):
        if key.startswith(prefix):
            bare = _axis_name(key[len(prefix):])
            if prefix == NET_PREFIX and bare not in NET_AXES:
                raise UsageError(f"{option} {given}: {bare!r} is no network option (known: {', '.join(NET_AXES)})")
            if prefix == PARAM_PREFIX and bare not in mod.PARAMS:
                raise _unknown_axis(bare, mod, params_only=True)
            if prefix == NET_PREFIX:
                return prefix + bare if bare in mod.PARAMS else bare
            return prefix + bare if bare in RUN_AXES else bare
    if key in NET_AXES and key in mod.PARAMS:
        flag = "--" + key.replace("_", "-")
        net, par = ((f"--grid {NET_PREFIX}{key}=...", f"--grid {PARAM_PREFIX}{key}=...") if option == "--grid" else
                    (f"{NET_PREFIX}{key} = [...]", f"{PARAM_PREFIX}{key} = [...]"))  # a [grid] table's, a dict's key
        raise UsageError(f"{option} {key}: ambiguous for scenario {scenario_name(mod)}: it is both the network's "
                         f"{key} ({flag}) and the scenario's parameter {key} (--set {key}=); write {net} for the "
                         f"network's, {par} for the scenario's")
    return key


def axis_network_field(key: str) -> str | None:
    """The NetSpec field of grid axis ``key`` (canonical, :func:`_grid_key`), or None."""
    if key.startswith(NET_PREFIX):
        return key[len(NET_PREFIX):]
    return key if key in NET_AXES else None


def axis_parameter(key: str) -> str | None:
    """The scenario parameter of grid axis ``key`` (canonical, :func:`_grid_key`), or None."""
    if key.startswith(PARAM_PREFIX):
        return key[len(PARAM_PREFIX):]
    return None if key in RUN_AXES or key.startswith(NET_PREFIX) or option_axis(key) else key


def _run_axis_value(key: str, value: Any, axis: str | None = None) -> Any:
    """Check one value of a run-option axis ``key`` (text from ``--grid`` or a TOML value); its
    errors name the grid's ``axis`` (default ``key``: ``network.dropout``)."""
    axis = axis or key
    try:
        if isinstance(value, bool):  # TOML's true is no seed, loss or name
            raise ValueError
        if key == "seed":
            v = int(value)
            if isinstance(value, float) and value != v or v < 0:
                raise ValueError
            return v
        if key in ("loss", "dropout"):
            v = float(value)
            if not 0.0 <= v <= 1.0:
                raise ValueError
            return v
    except (TypeError, ValueError):
        want = "a non-negative integer" if key == "seed" else "a probability in [0, 1]"
        raise UsageError(f"--grid {axis}: expected {want}, got {value!r}") from None
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"--grid {axis}: expected a name, got {value!r}")
    if key in NET_AXES:  # a name the network knows: refused now, naming the axis, not at the point
        from ..kernel import NetSpec
        from ..kernel.errors import NetworkConfigError

        try:
            NetSpec(**{key: value.strip()})
        except NetworkConfigError as exc:
            raise UsageError(f"--grid {axis}: {exc}") from None
    return value.strip()


def option_hint(key: str, link_model: Any, transport: Any, file: bool = False) -> str:
    """The end of the message for an unknown grid axis ``key`` that is an argument of the
    constructor of the sweep's link model or transport (their names: unknown ones are left to their
    own errors): ``; rate is an argument of the constructor of link model 'wire': write --grid
    link_options.rate=...`` (``file``: as a ``[grid]`` key), else ``""``. Options are always
    written with their prefix (an option's name may be a parameter's too)."""
    from ..kernel.netspec import OWN_FIELDS
    from ..kernel.registry import LINK_MODEL_REGISTRY, TRANSPORT_REGISTRY, factory_keywords

    hints = []
    for prefix, what, registry, name, own in (("link_options.", "link model", LINK_MODEL_REGISTRY, link_model, ()),
                                              ("transport_options.", "transport", TRANSPORT_REGISTRY, transport,
                                               OWN_FIELDS)):
        if isinstance(name, str) and name in registry and key not in own \
                and key in (factory_keywords(registry.entry(name).factory) or ()):
            axis = f"{prefix}{key} = [...]" if file else f"--grid {prefix}{key}=..."
            hints.append(f"{key} is an argument of the constructor of {what} {name!r}: write {axis}")
    return "".join(f"; {h}" for h in hints)


def _unknown_axis(key: str, mod, params_only: bool = False) -> UsageError:
    from ..config import did_you_mean

    both = [k for k in NET_AXES if k in mod.PARAMS]  # (dropout of PersonalFR: params.dropout, network.dropout)
    known = [PARAM_PREFIX + k if k in both else k for k in sorted(mod.PARAMS)]
    if params_only:
        key = PARAM_PREFIX + key
    else:
        known += [NET_PREFIX + k if k in both else k for k in RUN_AXES]
    hint = did_you_mean(key, known + ([] if params_only else both))
    return UsageError(f"--grid: unknown parameter {key!r} for scenario {scenario_name(mod)}{hint} "
                      f"(known: {', '.join(known)})")


def parse_grid(mod, grids: Sequence[str]) -> dict[str, list[Any]]:
    """``["rho=0,1,2", "profile=lan,wan"]`` -> ``{"rho": [0, 1, 2], "profile": ["lan", "wan"]}``
    typed by the scenario's PARAMS (or as run options: ``seed``, ``data``, ``profile``,
    ``link_model``, ``transport``, ``loss``, ``dropout``). List-typed parameters separate grid
    values with ``;`` (``models=PMF(B);PMF(S),SVD++(S)``). Raises ``UsageError`` for an unknown
    key (with the closest known one), no values, or a bad value."""
    out: dict[str, list[Any]] = {}
    for g in grids:
        if "=" not in g:
            raise UsageError(f"--grid expects key=v1,v2,..., got {g!r}")
        key, vals = g.split("=", 1)
        key = _grid_key(mod, key)
        if key in out:
            raise UsageError(f"--grid {key}: given twice; give each axis once (all its values together)")
        name = axis_parameter(key)
        if option_axis(key):  # (typed for each point, by its link model's or transport's constructor)
            out[key] = _grid_values(key, vals, ",")
            continue
        if name is None:
            field = axis_network_field(key) or key
            parts = _grid_values(key, vals, ",")
            out[key] = [_run_axis_value(field, v, key) for v in parts]
            continue
        if name not in mod.PARAMS:
            raise _unknown_axis(key, mod)
        p = mod.PARAMS[name]
        listy = p.type_name in ("ints", "floats", "strs")
        parts = _grid_values(key, vals, ";" if listy else ",")
        out[key] = [_as_grid(parse_value, "--grid", name, v, p, key) for v in parts]
    return out


def _grid_values(key: str, vals: str, sep: str) -> list[str]:
    """The values of ``--grid KEY=VALS`` separated by ``sep``, stripped; ``UsageError`` for none
    or an empty one (``0,,1`` and ``0,1,`` ran the points 0 and 1, the empty value dropped)."""
    if not vals.strip():
        raise UsageError(f"--grid {key}: no values")
    parts = [v.strip() for v in vals.split(sep)]
    if "" in parts:
        raise UsageError(f"--grid {key}: empty value in {vals!r} (values are separated by {sep!r})")
    return parts


def _as_grid(check, option: str, key: str, value: Any, param, axis: str | None = None) -> Any:
    """``check(key, value, param)`` (``parse_value``, ``check_value``), its error naming the grid
    (``option``) and its axis (``axis``, default ``key``: ``params.dropout``) rather than
    ``--set KEY``, which the parameter checks name."""
    try:
        return check(key, value, param)
    except UsageError as exc:
        msg = str(exc)
        if msg.startswith(f"--set {key}:"):
            raise UsageError(f"{option} {axis or key}:" + msg[len(f"--set {key}:"):]) from None
        raise


def check_workers(workers: Any, where: str = "--workers") -> int | None:
    """``workers`` (a sweep's points at once) as an int, or None (the default): ``UsageError``
    naming ``where`` unless it is an integer of at least 1 (a NumPy integer is one; a bool, a
    float, even 2.0, or a str is not), as :func:`fedsim.experiment.runner.check_seed` for seeds."""
    if workers is None:
        return None
    if isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or workers < 1:
        # int() ran 1.5 and True as one worker, silently, and "2" as two
        raise UsageError(f"{where} must be an integer of at least 1, got {workers!r}")
    return int(workers)


def check_grid(mod, grid: dict[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """A grid of Python values (a TOML file's ``[grid]``, an API call) checked like
    :func:`parse_grid` checks text; raises ``UsageError`` naming the key."""
    out: dict[str, list[Any]] = {}
    flat: list[tuple[Any, Any]] = []
    for given, values in grid.items():  # TOML's network.dropout = [...] is the table {"network": {"dropout": [...]}}
        if isinstance(given, str) and given.strip() + "." in (NET_PREFIX, PARAM_PREFIX, *OPTION_PREFIXES) \
                and isinstance(values, Mapping):
            flat.extend((f"{given.strip()}.{k}", v) for k, v in values.items())
        else:
            flat.append((given, values))
    for given, values in flat:
        if not isinstance(given, str):  # (was "'int' object has no attribute 'strip'")
            raise UsageError(f"grid: a key is a parameter name (str), got {type(given).__name__} {given!r:.80}")
        key = _grid_key(mod, given, "grid")
        if key in out:  # link-model and link_model: one axis (the later one silently won)
            raise UsageError(f"grid {key}: given twice (as {given!r} too); give each axis once")
        if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
            raise UsageError(f"grid {key}: expected a list of values, got {values!r}")
        if not values:
            raise UsageError(f"--grid {key}: no values")
        name = axis_parameter(key)
        if option_axis(key):  # (typed for each point, by its link model's or transport's constructor)
            out[key] = [v.strip() if isinstance(v, str) else v for v in values]
        elif name is None:
            field = axis_network_field(key) or key
            out[key] = [_run_axis_value(field, v, key) for v in values]
        elif name in mod.PARAMS:
            out[key] = [_as_grid(check_value, "grid", name, v, mod.PARAMS[name], key) for v in values]
        else:
            raise _unknown_axis(key, mod)
    return out


def point_label(point: dict[str, Any]) -> str:
    """A point as the sweep shows it everywhere (progress, messages, report, sweep.log):
    ``x=2,f=1+2``, its axes in order, a list value's elements joined by ``+`` (as in the
    combined tables' cells and the folder names; ``,`` separates the axes)."""
    return ",".join(f"{k}={_cell(v)}" for k, v in point.items()) or "default"


def point_dir_name(point: dict[str, Any]) -> str:
    """The folder name of a point: :func:`point_label` with each character a folder name should
    not hold as ``_`` (existing sweeps resume by these names: do not change them)."""
    return "".join(c if c.isalnum() or c in "=,.+-_" else "_" for c in point_label(point))


TRACEBACK_HEAD = "Traceback (most recent call last):"


def failure_line(res: dict) -> str:
    """The one line that reports a failed point (a result of :func:`run_sweep`'s ``failed``, or
    the ``progress`` callback's): ``failed x=2,f=1+2: RuntimeError: boom (traceback in
    OUT/x=2,f=1+2/error.txt)``; an error of several lines shows its first. The end says what the
    point's error.txt holds, read there: ``(traceback in ...)`` only when it holds a traceback (a
    point that raised), else ``(recorded in ...)`` (a point whose process died holds only how it
    ended), or that it could not be read. Every failure line said "traceback in", also over an
    error.txt of one line."""
    error = str(res.get("error") or "").strip()
    first = error.splitlines()[0] if error else "no error message"
    more = " ..." if len(error.splitlines()) > 1 else ""
    if res.get("unwritten"):  # (a full disk: its error.txt could not be written either)
        return f"failed {point_label(res['point'])}: {first}{more} (its error.txt could not be written: {res['unwritten']})"
    where = f"{res['out']}/error.txt"
    try:
        text = Path(where).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        said = f"{where} could not be read: {exc.strerror or type(exc).__name__}"
    else:
        said = f"traceback in {where}" if TRACEBACK_HEAD in text else f"recorded in {where}"
    return f"failed {point_label(res['point'])}: {first}{more} ({said})"


def _record_failure(p: SweepPoint, text: str) -> dict:
    """Write a failed point's folder anew: ``point.json`` (its configuration) and ``error.txt``
    (``text``). ``{}``, or ``{"unwritten": why}`` when they could not be written (``OSError``: a
    full disk, whose point had failed for it): the point is failed all the same, and the sweep
    goes on (it stopped the sweep, with a traceback, when the point failed for lack of room). A
    folder left without error.txt is run again on resume (no results.json: corrupt)."""
    out = Path(p.out)
    shutil.rmtree(out, ignore_errors=True)
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / "point.json", json.dumps(p.key, indent=2, default=json_default) + "\n")
        write_atomic(out / "error.txt", text)
    except OSError as exc:
        where = f" writing {exc.filename}" if exc.filename else ""
        return {"unwritten": f"{exc.strerror or exc}{where}"}
    return {}


@dataclass(frozen=True)
class SweepPoint:
    scenario: str
    point: dict
    out: str
    data: str | None
    seed: int
    net: Any  # a fedsim.kernel.NetSpec
    fixed: dict  # the scenario parameters of this point (fixed ones and the point's)
    key: dict  # the point's resolved configuration (what results.json must match)
    ledger: bool = False  # also write the point's ledger.csv


def _normal(obj: Any) -> Any:
    """``obj`` as it reads back from JSON (tuples as lists, NumPy values as numbers)."""
    return json.loads(json.dumps(obj, default=json_default))


def _run_point(p: SweepPoint) -> dict:
    """Run one point into its folder; a failure is recorded in ``error.txt`` (with the point's
    configuration in ``point.json``). Interrupted and KeyboardInterrupt pass through: the point
    is then not run, and run_scenario has left nothing behind."""
    out = Path(p.out)
    try:
        res = run_scenario(p.scenario, data=p.data, out=out, overrides=p.fixed, seed=p.seed, net=p.net,
                           quiet=True, progress=False, force=True, ledger=p.ledger)
        return {"point": p.point, "status": "done", "out": str(out), "wall_time_s": res["wall_time_s"]}
    except (Exception, SystemExit) as exc:  # a failed point must not take the sweep down
        unwritten = _record_failure(p, "".join(traceback.format_exception(exc)))
        error = (f"SystemExit: the scenario called sys.exit({exc.code!r})" if isinstance(exc, SystemExit)
                 else f"{type(exc).__name__}: {exc}")
        return {"point": p.point, "status": "failed", "error": error, "out": str(out), **unwritten}


def _remote_tasks(todo: list[SweepPoint]) -> list[tuple]:
    """The Ray tasks of the points ``todo`` (:func:`_run_point_remote`): each point, the scenario
    script's bytes (None for a scenario named), the plug-in files' ``(path, bytes)`` and this
    process's ``plugin_state()`` of them."""
    from ..protocols import plugin_state

    source = Path(todo[0].scenario).read_bytes() if todo and _is_path(todo[0].scenario) else None
    state = plugin_state()
    plugins = tuple((f, Path(f).read_bytes()) for f in state.files)
    return [(p, source, plugins, state) for p in todo]


def _run_point_remote(task: tuple) -> dict:
    """(In a Ray worker.) :func:`_run_point` into a temporary folder of this machine; returns its
    result with ``files``, the folder's files by relative path (what the driver writes into the
    point's folder), and removes the folder. ``task`` is the point; for a scenario given as a
    script path, the script's bytes (else None); the driver's plug-in files as ``(path, bytes)``
    pairs; and (a fourth item, optional) the driver's ``plugin_state()`` of those files, so that
    the worker knows the driver's protocols, link models and transports as the driver holds them
    (one the driver removed since its file loaded is forgotten: another file registering its
    name clashed with it). A script or plug-in runs in place where its path holds that same
    file, else from a copy (files beside it are not sent); the plug-ins declared by installed
    packages (entry points) are loaded as the driver's were.

    The point runs in a process of its own (:func:`~.parallel.pmap`), as on the local pool: one
    that dies (killed, out of memory, ``os._exit``, a crash in compiled code) is that point's
    failure, saying how it ended (its signal or exit status, as the local pool says it), and the
    Ray worker lives on. Run in the worker itself, its death was Ray's ``WorkerCrashedError``
    ("check python-core-worker-*.log"), which did not say how, after Ray had run the point a
    second time (its retry of a task whose worker died), with a paragraph from the raylet on the
    sweep's stderr each time."""
    p, source, *rest = task
    plugins, state = (rest[0] if rest else ()), (rest[1] if len(rest) > 1 else None)
    _remove_stale_temp()
    base = Path(tempfile.mkdtemp(prefix=f"fedsim-point-{os.getpid()}-"))
    try:
        from ..protocols import load_plugin_state, load_plugins

        paths = []
        for i, (path, text) in enumerate(plugins):
            here = Path(path)
            if not (here.is_file() and here.read_bytes() == text):
                here = base / "plugins" / str(i) / here.name  # same file name: same module name
                here.parent.mkdir(parents=True)
                here.write_bytes(text)
            paths.append(here)
        if state is not None:
            load_plugin_state(state, files=paths)
        load_plugins([] if state is not None else paths)  # (and $FEDSIM_PLUGINS, the entry points)
        scenario = p.scenario
        if source is not None:
            here = Path(p.scenario)
            if not (here.is_file() and here.read_bytes() == source):
                scenario = str(base / here.name)
                Path(scenario).write_bytes(source)
        point = replace(p, scenario=scenario, out=str(base / "point"))
        got: list[dict] = []
        pmap(_run_point, [point], 1, on_done=lambda i, r: got.append(r),
             on_error=lambda i, exc: got.append(_lost_point(point, exc)))
        res = got[0]
        res.pop("cleaned", None)  # (what a dead process left in the temporary folder: removed with it)
        root = base / "point"
        files = {f.relative_to(root).as_posix(): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}
        return {**res, "out": p.out, "files": files}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _remove_stale_temp() -> None:
    """Remove the temporary point folders of tasks whose worker was killed (a cancelled task)."""
    for d in Path(tempfile.gettempdir()).glob("fedsim-point-*-*"):
        m = re.match(r"fedsim-point-(\d+)-", d.name)
        if m and not _alive(int(m.group(1))):
            shutil.rmtree(d, ignore_errors=True)


def _store_point(p: SweepPoint, res: dict) -> dict:
    """(In the driver.) Write the files a Ray task returned into the point's folder, whole or
    not at all (a temporary folder beside it, renamed into place; results.json written last);
    returns the result without the files."""
    files = res.pop("files")
    folder = OutputFolder(p.out, explicit=True, force=True)
    try:
        for rel in sorted(files, key=lambda r: (r == "results.json", r)):
            path = folder.tmp / rel
            if Path(rel).is_absolute() or ".." in Path(rel).parts:
                raise ValueError(f"a Ray task returned a file outside its folder: {rel!r}")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(files[rel])
        folder.commit()
    except BaseException:
        folder.discard()
        raise
    return res


def _unstored_point(p: SweepPoint, exc: Exception, res: dict | None = None, files: dict | None = None) -> dict:
    """(In the driver.) A Ray task's point that ran but whose files could not be written into its
    folder (:func:`_store_point`: a full disk, a name the file system refuses): recorded failed as
    on the local pool, whose point fails when its run cannot write its folder (``point.json``,
    ``error.txt``). It stopped the sweep, whose sweep.json then said "finished". ``res``: what the
    task returned, ``files`` its files: a point that had failed on the worker keeps its own error
    first (it was lost, the error saying only "the point ran, but its files could not be
    written"), and its error.txt's traceback follows the error line."""
    out = Path(p.out)
    unstored = f"its files could not be written into {out}: {type(exc).__name__}: {exc}"
    if res is not None and res.get("status") == "failed":
        error = f"{res.get('error') or 'the point failed'}; then {unstored}"
        told = (files or {}).get("error.txt")
        detail = f"\n{told.decode('utf-8', 'replace')}" if isinstance(told, bytes) and told else ""
        unwritten = _record_failure(p, error + "\n" + detail)
    else:
        error = f"the point ran, but {unstored}"
        unwritten = _record_failure(p, error + "\n")
    return {"point": p.point, "status": "failed", "error": error, "out": str(out), **unwritten}


def _lost_point(p: SweepPoint, exc: BaseException) -> dict:
    """(In the driver.) A point whose run ended without a result: its process died (killed, out
    of memory, a crash in compiled code, ``os._exit``), or Ray could not run it (its worker died,
    its runtime environment failed). Recorded like a failed run (``point.json``, ``error.txt``
    with what is known: for a local process, the signal that killed it or its exit status); the
    result's ``cleaned`` holds :func:`_remove_leftovers`' lines for sweep.log."""
    out = Path(p.out)
    # the dead process's .partial folder, and the folder it was replacing (.replaced: the point's
    # failure replaces it, as a point that fails in its run does; not put back, the folder is there)
    cleaned = _remove_leftovers(out.parent, only=out.name)
    if isinstance(exc, BrokenProcessPool):
        how = exc.how if isinstance(exc, ProcessDied) else "died"
        why = SIGNAL_CAUSES.get(how.rsplit(" ", 1)[-1], "") if how.startswith("was killed") else ""
        first = f"the point's process {how} before it finished{why}"
        if how == "died":
            first += " (killed by a signal, e.g. for lack of memory, or a crash in compiled code)"
        unwritten = _record_failure(p, first + "\n")
        return {"point": p.point, "status": "failed", "error": first, "out": str(out), "cleaned": cleaned, **unwritten}
    if isinstance(exc, PluginLoadError):  # (its process started by spawn or forkserver)
        unwritten = _record_failure(p, f"{exc.summary}\n\n{exc.details}\n")
        return {"point": p.point, "status": "failed", "error": exc.summary, "out": str(out), "cleaned": cleaned,
                **unwritten}
    text = ANSI_CODES.sub("", str(exc))  # (Ray colours its task errors' first line for a terminal)
    first = text.strip().splitlines()[0] if text.strip() else ""
    error = f"{type(exc).__name__}: {first}"
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        # a RayTaskError: its first line named only the task ("ray::_run_point_remote() (pid=533,
        # ip=...)"); what the task raised says what went wrong (a plug-in that does not import there)
        said = str(cause).strip().splitlines()[0] if str(cause).strip() else ""
        notes = "".join(f" {n}" for n in getattr(cause, "__notes__", None) or ())
        where = f" on {exc.ip}" if getattr(exc, "ip", None) else ""
        error = f"{type(cause).__name__}: {said}{notes} (in the point's Ray task{where})"
    unwritten = _record_failure(p, f"{error}\n\n{type(exc).__name__}: {text}\n")
    return {"point": p.point, "status": "failed", "error": error, "out": str(out), "cleaned": cleaned, **unwritten}


ANSI_CODES = re.compile(r"\x1b\[[0-9;]*m")


# what sends a process the signal that killed it, as the failure of its point says
SIGNAL_CAUSES = {
    "SIGKILL": " (SIGKILL: the kernel's out-of-memory killer sends it, as does kill -9)",
    "SIGSEGV": " (SIGSEGV: a crash in compiled code)",
    "SIGBUS": " (SIGBUS: a crash in compiled code, or a file mapped in memory that shrank)",
    "SIGABRT": " (SIGABRT: compiled code aborted)",
    "SIGTERM": " (SIGTERM: stopped by another process)",
}


def _folder_state(d: Path, key: dict, ledger: bool = False) -> tuple[str, str]:
    """(state, detail) of a point folder: ``missing``, ``done``, ``stale`` (another
    configuration; detail says what differs), ``failed`` or ``corrupt`` (also: no ledger.csv
    when ``ledger`` asks for one)."""
    if not d.exists():
        return "missing", ""
    res = d / "results.json"
    if (d / "error.txt").exists() and not res.exists():
        return "failed", "failed before"
    try:
        saved = json.loads(res.read_text(encoding="utf-8"))
        if not isinstance(saved, dict) or "finished" not in saved:
            raise ValueError("no 'finished' field")
        tables = saved.get("tables", [])
        missing = [f"{t}.csv" for t in tables if not (d / f"{t}.csv").is_file()]
        if not (d / "report.md").is_file():
            missing.append("report.md")
        if ledger and not (d / "ledger.csv").is_file():
            missing.append("ledger.csv")
        if missing:
            raise ValueError(f"missing {', '.join(missing)}")
    except (OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
        return "corrupt", f"{res.name} unreadable or incomplete ({exc})"
    diffs = _differences({k: saved.get(k) for k in key}, key)
    return ("stale", diffs) if diffs else ("done", "")


def _differences(old: dict, new: dict) -> str:
    out = []
    for k in new:
        a, b = old.get(k), new[k]
        if isinstance(a, dict) and isinstance(b, dict):
            for kk in sorted(set(a) | set(b)):
                if a.get(kk) != b.get(kk):
                    out.append(f"{kk}={_cell(a.get(kk))}, now {_cell(b.get(kk))}")
        elif a != b:
            out.append(f"{k}={_cell(a)}, now {_cell(b)}")
    return "; ".join(out)


def _cell(v: Any) -> str:
    """A grid value as the sweep writes it everywhere (folder names, combined tables, report,
    messages): a list as ``1+2`` (``1,2`` read as two values of the axis)."""
    return "+".join(map(str, v)) if isinstance(v, list) else str(v)



def sweep_key(scenario: str, grid: dict, fixed: dict, data: str | None, seed: int, net: Any) -> str:
    """Eight hex digits naming a sweep's configuration without its grid's values (see the module
    docstring)."""
    doc = {"scenario": scenario, "axes": sorted(grid), "fixed": _normal(fixed), "data": data,
           "seed": seed, "network": _net_dict(net)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:8]


def default_sweep_dir(scenario: str, grid: dict, fixed: dict, data: str | None, seed: int, net: Any) -> Path:
    """``runs/sweep-<scenario>-<key>`` (see :func:`sweep_key`)."""
    stem = re.sub(r"[^\w.-]", "_", Path(scenario).stem if scenario.endswith(".py") else scenario)
    return Path("runs") / f"sweep-{stem}-{sweep_key(scenario, grid, fixed, data, seed, net)}"


def run_sweep(scenario: str, grid: dict[str, list[Any]], out: str | Path | None = None, *,
              data: str | None = None, fixed: dict | None = None, seed: int = 0, profile: str | None = None,
              net: Any = None, workers: int | None = None, progress=None, force: bool = False,
              quiet: bool = True, backend: str = "local", address: str | None = None,
              ledger: bool = False) -> dict:
    """Run every point of ``grid`` (cartesian product; of an empty grid, the one point ``default``, the scenario's
    defaults with ``fixed``) that is not done with the same
    configuration (see the module docstring); returns a summary: ``points``, ``done`` (run now),
    ``skipped`` (done before), ``rerun`` (stale, corrupted or failed points run again), ``failed``,
    ``not_run``, ``combined`` (CSV paths), ``report``, ``out`` and ``backend`` (``name``,
    ``run_s``: seconds from the first point started to the last one written; when Ray started,
    also ``address``, ``cpus``, ``startup_s`` and ``shutdown_s``).

    ``backend``: ``"local"`` (a process pool of ``workers`` processes, default one per core) or
    ``"ray"`` (Ray tasks: on a local Ray instance of ``workers`` CPUs, default one per core, or,
    given ``address``, on that cluster with at most ``workers`` points at once, default no
    limit; a Ray that the caller initialised is used as it is). Ray starts only when some point
    is left to run. ``ledger``: each point also writes its ledger.csv (a point done before
    without one is run again).

    ``progress(i, total, result)``, if given, is called as each point finishes; unless ``quiet``
    a progress display goes to stderr. Blocks until every point has finished. Raises
    ``UsageError`` for a bad grid (a key also fixed, a value twice, two points whose folder
    names would be the same), parameter (a key of ``grid`` or ``fixed`` that is no str; an unknown
    one with a did-you-mean and the known names, as ``run_scenario`` says it), network or backend, a ``seed`` that is not a non-negative
    integer or ``workers`` not one of at least 1, an empty ``data`` or ``out`` (as the command line and a
    config file refuse them), for an ``out`` that is a file or
    a non-empty folder of something else than a sweep (unless ``force``), for points of another
    configuration without ``force``, a ``workers`` that is not an integer of at least 1
    (:func:`check_workers`), a ``quiet``, ``ledger`` or ``force`` that is not True or False,
    ``TypeError`` for a ``grid`` or ``fixed`` that is no mapping (:func:`parse_grid` and
    ``parse_sets`` make them of ``key=...`` strings), ``ConfigError`` for points the scenario's ``check`` refuses
    (a protocol's ``check_data``: PersonalFR's threshold on ratings 1 to 10), when Ray is not installed or does not start,
    ``MainNotImportable`` (a ``UsageError``) on the local pool when its workers could not start
    (started by spawn or forkserver, which run the main module again, from a program read from
    standard input: :func:`~.parallel.check_main_importable`) (all before running anything); ``SweepInterrupted`` on Ctrl-C, after stopping the workers (or
    cancelling the Ray tasks) and writing the combined files; ``SweepNotStarted`` on a Ctrl-C
    before any point started (both are ``KeyboardInterrupt``). Any other error that stops the
    sweep is raised after the same, sweep.json and report.md saying *interrupted* (an error as the
    sweep writes its files after its points: sweep.json); a full disk, quota or file size limit
    as the sweep writes its own files (``OSError`` ``ENOSPC``, ``EDQUOT``, ``EFBIG``) as a
    ``UsageError`` naming the file and what sweep.json says (``the sweep stopped: No space left on
    device writing OUT/report.md; OUT/sweep.json says interrupted (2 done) (free some space, then
    run the same command again: it resumes)``). A point whose run such an error stops is a failed
    point (``failed``, with ``unwritten`` when its error.txt could not be written either)."""
    if not isinstance(grid, Mapping):  # (a list was "'list' object has no attribute 'items'")
        hint = "; parse_grid(scenario, strings) makes one of key=v1,v2 strings" if isinstance(grid, (list, tuple)) else ""
        raise TypeError(f"grid must be a mapping {{axis: [values]}}, got {type(grid).__name__} {grid!r:.80}{hint}")
    if fixed is not None and not isinstance(fixed, Mapping):
        # (a list of key=value strings was "dictionary update sequence element #0 has length 9")
        hint = "; parse_sets(scenario, strings) makes one of key=value strings" if isinstance(fixed, (list, tuple)) else ""
        raise TypeError(f"fixed must be a mapping {{parameter: value}}, got {type(fixed).__name__} {fixed!r:.80}{hint}")
    quiet, ledger, force = (check_flag(k, v) for k, v in (("quiet", quiet), ("ledger", ledger), ("force", force)))
    if backend not in BACKENDS:
        raise UsageError(f"--backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if address is not None and backend != "ray":
        raise UsageError("--address is the address of a Ray cluster: it needs --backend ray")
    if address is not None:
        from .raypool import address_error

        error = address_error(address)
        if error:
            raise error
        address = address.strip()
    for opt, v in (("data", data), ("out", out)):
        if isinstance(v, (str, os.PathLike)) and not os.fspath(v).strip():
            # as fedsim sweep and run_scenario: an empty out was the default folder, an empty data
            # the failure of every point ("--data is empty") after the sweep had started
            raise UsageError(f"--{opt} is empty; give a value or leave the option out")
    workers = check_workers(workers)
    if backend == "ray":
        from .raypool import RAY_MISSING, ray_available

        if not ray_available():
            raise UsageError(RAY_MISSING)
    mod = load_scenario(scenario)
    name = scenario_name(mod)
    grid = check_grid(mod, grid)
    fixed = dict(fixed or {})
    for k in fixed:
        # as resolve_config and the grid say it: a non-str key was "'int' object has no attribute
        # 'strip'", an unknown one had no did-you-mean nor the known names
        if not isinstance(k, str):
            raise UsageError(f"fixed: a key is a parameter name (str), got {type(k).__name__} {k!r:.80}")
        if k not in mod.PARAMS:
            raise unknown_parameter(k, mod)
    fixed = {k: check_value(k, v, mod.PARAMS[k]) for k, v in fixed.items()}
    both = [k for k in grid if axis_parameter(k) in fixed]
    if both:
        raise UsageError(f"{', '.join(both)}: given both as a fixed parameter (--set) and as a grid axis; "
                         "give each key once")
    for k, vals in grid.items():
        seen: list[Any] = []
        for v in vals:
            if v in seen:
                raise UsageError(f"--grid {k}: the value {_cell(v)} is given twice")
            seen.append(v)
    base = network_spec(mod, profile, net)
    data_default = data or getattr(mod, "DEFAULT_DATA", "ml100k-like")
    seed = check_seed(seed)  # (int(seed) ran 1.5 as seed 1)
    out = Path(out) if out else default_sweep_dir(scenario, grid, fixed, data, int(seed), base)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a folder")
    # (its lock alone is a sweep's too: one stopped after taking it, before it wrote sweep.json, said
    # "the same command resumes the sweep" and the same command was then refused here)
    if out.is_dir() and not (out / "sweep.json").exists() and any(f.name != ".sweep.lock" for f in out.iterdir()) \
            and not force:
        raise UsageError(f"--out {out} is not empty and holds no sweep (no sweep.json); use another --out, "
                         "or --force to write the sweep beside what is there")
    finished: list[dict] = []  # the summary, once every point has ended and the files are written
    with contextlib.ExitStack() as stack:
        stack.push(lambda *exc: _interrupted_as_ray_stops(finished, exc[1]))  # (left last: after Ray's)
        with _before_any_point(out):  # (a Ctrl-C: SweepNotStarted)
            grid = _axes_in_order_of(out, grid)
            keys = list(grid)
            combos = [dict(zip(keys, c)) for c in itertools.product(*(grid[k] for k in keys))]
            points = []
            for pt in combos:
                params = {**fixed, **{axis_parameter(k): v for k, v in pt.items() if axis_parameter(k) is not None}}
                cfg = resolve_config(mod, params)
                try:
                    netp = _point_network(base, pt)
                except NetworkConfigError as exc:
                    raise UsageError(f"--grid: {exc}") from None
                seed_p, data_p = int(pt.get("seed", seed)), pt.get("data", data)
                key = _normal({"scenario": name, "config": cfg, "data": data_p or data_default, "seed": seed_p,
                               "network": netp.to_dict()})
                points.append(SweepPoint(scenario, pt, str(out / point_dir_name(pt)), data_p, seed_p, netp, params, key,
                                         bool(ledger)))
            folders: dict[str, dict] = {}
            for p in points:
                other = folders.setdefault(p.out, p.point)
                if other is not p.point:
                    raise UsageError(f"the points {point_label(other)} and {point_label(p.point)} would share the folder "
                                     f"{Path(p.out).name} (their "
                                     "values differ only in characters a folder name cannot hold); rename the values")
                # (the bound was the file system's 255: a name of 240 bytes passed, and its point failed
                # when it ran, its run's temporary folder .NAME.partial-PID-X "File name too long")
                if len(Path(p.out).name.encode()) > MAX_OUT_NAME_BYTES:
                    raise UsageError(f"the point {point_label(p.point)}'s folder name is {len(Path(p.out).name.encode())} bytes "
                                     f"long, over the {MAX_OUT_NAME_BYTES} a run's folder may have (the file system's 255 "
                                     "less the suffix of the temporary folder a run writes beside it); use shorter grid values")
            recovered: list[str] = []  # said in sweep.log, once it is open
            if out.is_dir():  # a point folder a killed --force re-run had moved aside is put back first
                recovered = _recover_points(out)
            states = {p.out: _folder_state(Path(p.out), p.key, bool(ledger)) for p in points}
            stale = [p for p in points if states[p.out][0] == "stale"]
            todo = [p for p in points if states[p.out][0] != "done"]
            try:
                if stale and not force:
                    shown = "; ".join(f"{point_label(p.point)}: {states[p.out][1]}" for p in stale[:3])
                    more = f" (and {len(stale) - 3} more)" if len(stale) > 3 else ""
                    raise UsageError(f"{out} holds {len(stale)} point(s) run with another configuration ({shown}{more}); "
                                     f"use --force to re-run them, or another --out")
                _check_points(mod, todo, data_default)  # before anything is written or started
                if backend == "local" and todo:
                    # (workers that cannot start, a main read from stdin under spawn: every point
                    # failed alike, "the point's process exited with status 1")
                    check_main_importable()
            except Exception as exc:
                # what recovery did to the folder stands whether the sweep runs or not: sweep.log says it
                # (it said nothing of it when the sweep was then refused)
                if recovered:
                    log = Progress(False, log=out / "sweep.log")
                    try:
                        for line in recovered:
                            log.log(line)
                        log.log(f"sweep {name}: refused, nothing run: "
                                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
                    finally:
                        log.finish()  # (close() stopped its display and left the file open)
                raise
            ray = None
            if backend == "ray" and todo:  # started before any file is written: it may fail to
                from .raypool import RaySession, import_ray

                _check_unlocked(out)
                import_ray(local=address is None)  # one that does not import: an error line alone, not after "starting ..."
                ray = RaySession(address, cpus=workers, log_to_driver=not quiet,
                                 say=None if quiet else lambda text: print(f"sweep: {text}", file=sys.stderr, flush=True))
                if not quiet:
                    print(f"sweep: {'connecting to Ray at ' + address if address else 'starting a local Ray instance'} ...",
                          file=sys.stderr, flush=True)
            session = stack.enter_context(ray) if ray is not None else None  # (Ray starts here)
        written: dict[str, str] = {}  # what sweep.json says by now (its state), for a full disk's error
        try:
            summary = _execute(out, name, grid, fixed, data, int(seed), base, points, states, todo, workers, progress,
                               quiet, backend, session, recovered, written)
        except OSError as exc:
            # a full disk (or quota, or file size limit) as the sweep wrote its own files: it was
            # Python's traceback (the point runs it stopped are failed points, not this)
            full = _no_room(exc)
            if full is None:
                raise
            raise no_room_error(full, out, "sweep", left=_sweep_left(out, written), resume=True) from None
        finished.append(summary)
    if ray is not None:
        summary["backend"]["shutdown_s"] = ray.shutdown_s
        if address is None:  # the local instance's workers are gone: so are killed tasks' folders
            _remove_stale_temp()
    if summary.pop("interrupted"):
        raise SweepInterrupted(summary)
    return summary


MAX_SHOWN_POINTS = 5


def _check_points(mod, todo: list[SweepPoint], data_default: str) -> None:
    """Refuse the sweep, before it runs any point, when points of ``todo`` would be refused by
    the scenario's own check (its module's ``check(config, load, given)``, where it has one: a
    protocol's configuration and its ``check_data`` against the point's data, loaded once per
    data). Each failed alike when it ran, and a check that does not depend on the grid (the
    default implicit threshold of PersonalFR on ratings 1 to 10) failed every point with the same
    error. Raises one ``ConfigError``: that error, said once, when every point to run fails it;
    else how many points fail, which (their labels) and why. A point whose data cannot be loaded
    here is left to check it where it runs (a Ray cluster's machines may hold a path the driver
    does not)."""
    check = getattr(mod, "check", None)
    if check is None or not todo:
        return
    from ..config import ConfigError
    from ..experiment.context import load_data

    loaded: dict[str, Any] = {}

    def loader(data: str):
        def load():
            if data not in loaded:
                loaded[data] = load_data(data)
            return loaded[data]
        return load

    refused: dict[tuple[str, str | None], list[dict]] = {}  # (message, key) -> the points it refuses
    for p in todo:
        try:
            check(resolve_config(mod, p.fixed), loader(p.data or data_default), frozenset(p.fixed))
        except ConfigError as exc:
            refused.setdefault((str(exc), exc.key), []).append(p.point)
        except UsageError:
            # data this process cannot load (a path that only a Ray cluster's machines hold): the point
            # checks it where it runs, and fails there if it cannot load it either
            pass
    if not refused:
        return
    keys = {key for _, key in refused}
    key = keys.pop() if len(keys) == 1 else None
    if len(refused) == 1 and len(next(iter(refused.values()))) == len(todo):
        (message, _), = refused
        every = "the point" if len(todo) == 1 else f"all {len(todo)} points"
        raise ConfigError(f"{message} ({every} of the sweep to run; none was run)", key)
    n = sum(len(pts) for pts in refused.values())
    parts = []
    for (message, _), pts in refused.items():
        shown = "; ".join(point_label(pt) for pt in pts[:MAX_SHOWN_POINTS])
        more = f" and {len(pts) - MAX_SHOWN_POINTS} more" if len(pts) > MAX_SHOWN_POINTS else ""
        parts.append(f"{shown}{more}: {message}")
    raise ConfigError(f"{n} of the {len(todo)} points of the sweep to run would be refused, so none was run: "
                      + " | ".join(parts) + " (leave those values out of the grid, or set what the message says)",
                      key)


def _axes_in_order_of(out: Path, grid: dict) -> dict:
    """``grid`` with its axes in the order of the sweep already in ``out`` (its sweep.json) when
    that sweep has the same axes: a point's folder name lists its values in the order of the
    axes, so the same grid given in another order (which the default folder's key ignores)
    re-ran every point into a second set of folders."""
    try:
        saved = json.loads((out / "sweep.json").read_text(encoding="utf-8")).get("grid")
    except (OSError, ValueError, AttributeError):  # no sweep there yet, or not one of ours
        return grid
    if isinstance(saved, dict) and set(saved) == set(grid):
        return {k: grid[k] for k in saved}
    return grid


def _locked(out: Path, holder: str) -> UsageError:
    return UsageError(f"another sweep is running in {out} ({holder.strip() or 'another process'}); wait for it to "
                      "end, or use another --out")


def _check_unlocked(out: Path) -> None:
    """Raise :func:`_sweep_lock`'s error now if another sweep holds ``out``'s lock (taking it and
    letting it go): checked before Ray starts, which took seconds (and said "starting a local Ray
    instance") before the sweep was refused."""
    try:
        import fcntl
    except ImportError:
        return
    if not (out / ".sweep.lock").is_file():
        return
    with open(out / ".sweep.lock", "a+", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            raise _locked(out, fh.read()) from None
        fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def _sweep_lock(out: Path):
    """Hold ``out/.sweep.lock`` (an exclusive ``flock``) while a sweep runs in ``out``; raises
    ``UsageError`` if another process holds it. Two sweeps in one folder would run the same
    points side by side, and one's commit of a point could remove the other's complete folder.
    The kernel drops the lock with its process, however that ends (no stale lock to clear)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock (nor the TCP transport; fedsim's home is Linux)
        yield
        return
    fh = open(out / ".sweep.lock", "a+", encoding="utf-8")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            raise _locked(out, fh.read()) from None
        fh.seek(0)
        fh.truncate()
        with naming_the_file(out / ".sweep.lock"):  # (a full disk: it named no file)
            fh.write(f"pid {os.getpid()}")
            fh.flush()
        yield
    finally:
        fh.close()


def _execute(out: Path, name: str, grid: dict, fixed: dict, data: str | None, seed: int, base: Any,
             points: list[SweepPoint], states: dict, todo: list[SweepPoint], workers: int | None, progress,
             quiet: bool, backend: str, session: Any, recovered: Sequence[str] = (),
             written: dict | None = None) -> dict:
    """Run ``todo`` on the backend and write the sweep's files, holding the folder's lock; the
    summary of :func:`run_sweep` with ``interrupted``. ``recovered``: what :func:`_recover_points`
    did before, for sweep.log. ``written["state"]``: the state sweep.json says, once written."""
    with contextlib.ExitStack() as stack:
        with _before_any_point(out):
            out.mkdir(parents=True, exist_ok=True)
            stack.enter_context(_sweep_lock(out))
        try:
            return _execute_locked(out, name, grid, fixed, data, seed, base, points, states, todo, workers,
                                   progress, quiet, backend, session, recovered, written if written is not None else {})
        finally:
            with contextlib.suppress(OSError):
                (out / ROOM_FOR_STATE).unlink(missing_ok=True)


def _execute_locked(out: Path, name: str, grid: dict, fixed: dict, data: str | None, seed: int, base: Any,
                    points: list[SweepPoint], states: dict, todo: list[SweepPoint], workers: int | None, progress,
                    quiet: bool, backend: str, session: Any, recovered: Sequence[str] = (),
                    written: dict | None = None) -> dict:
    written = written if written is not None else {}
    with _before_any_point(out):  # (a Ctrl-C: SweepNotStarted; from the Progress display on: SweepInterrupted)
        recovered = [*recovered, *_remove_leftovers(out)]
        skipped = [p.point for p in points if states[p.out][0] == "done"]
        rerun = [p.point for p in todo if states[p.out][0] in ("stale", "corrupt", "failed")]
        for p in todo:
            if states[p.out][0] in ("corrupt", "failed"):
                shutil.rmtree(p.out, ignore_errors=True)
        info = {"scenario": name, "grid": grid, "fixed": fixed, "data": data, "seed": seed,
                "network": base.to_dict(), "backend": backend, "workers": workers or default_workers(), "out": str(out)}
        if backend == "ray":
            info["workers"] = workers
            info["address"] = session.address if session else None
        statuses: dict[str, dict] = {p.out: {"point": p.point, "status": "done before" if states[p.out][0] == "done"
                                             else "not run"} for p in points}
        _write_state(out, info, statuses, interrupted=None, written=written)
        # room for the last sweep.json, kept until it is written: on a disk that fills up during
        # the sweep, it said "running" over points that had run or failed, and not that it stopped
        _keep_room(out / ROOM_FOR_STATE, 4096 + len(json.dumps(info, default=json_default)) + 1024 * len(points))
        # the combined files and report.md of the points done before, marked running: those of the
        # sweep that ran here last stayed until this one ended, and one killed left them claiming
        # "Finished." over the rows of points it was replacing (a --force re-run) or a smaller grid
        for p in points:
            if statuses[p.out]["status"] == "done before":
                statuses[p.out].update(_point_facts(Path(p.out)))
        try:
            combine(out, [p.point for p in points if statuses[p.out]["status"] == "done before"])
            write_sweep_report(out, info, points, statuses, None)
        except OSError:
            # (a full disk) the sweep stops before any point: said so in sweep.json if it can be
            with contextlib.suppress(OSError):
                _write_state(out, info, statuses, interrupted=True, written=written)
            raise
    results: list[dict] = []

    def done_cb(i: int, res: dict) -> None:
        if "files" in res:  # a Ray task's point: its files come back with it
            files = res["files"]
            try:
                res = _store_point(todo[i], res)
            except Exception as exc:  # (OSError: a full disk, a name the file system refuses) the point's failure
                res = _unstored_point(todo[i], exc, res, files)
        for line in res.pop("cleaned", ()):  # (a point whose process died: what it had left)
            display.log(line)
        results.append(res)
        statuses[todo[i].out] = {k: v for k, v in res.items() if k != "out"}
        display.update(len(results), len(todo), failed=sum(r["status"] == "failed" for r in results))
        display.log(f"{res['status']}: {point_label(res['point'])}"
                    + (f" ({res['error']})" if res.get("error") else ""))
        if progress:
            progress(len(results) - 1, len(todo), res)

    interrupted = False
    t0 = time.perf_counter()
    display = None
    try:
        # (a Ctrl-C as the display started, after the sweep's start was written, went out as a
        # plain KeyboardInterrupt: "the sweep ran no point and wrote nothing" over its sweep.json,
        # left "running", and the display active. Held over the start, it is an interrupted sweep.)
        with sigint_deferred():
            display = Progress(not quiet, log=out / "sweep.log")
            activate(display)
        again = f" ({len(rerun)} of them again)" if rerun else ""
        display.log(f"sweep {name}: {plural(len(points), 'point')}, {len(skipped)} done before, {len(todo)} to run{again}")
        for line in recovered:  # what killed runs of points had left, dealt with before the points were compared
            display.log(line)
        if session is not None:
            display.log(session.describe())
        display.update(0, len(todo), stage=f"sweep {name}")
        if backend == "ray" and todo:
            from .raypool import ray_map

            ray_map(_run_point_remote, _remote_tasks(todo), limit=workers, on_done=done_cb,
                    on_error=lambda i, exc: done_cb(i, _lost_point(todo[i], exc)))
        else:
            # each point in a process of its own: one that dies is that point's failure only
            pmap(_run_point, todo, workers or default_workers(), on_done=done_cb,
                 on_error=lambda i, exc: done_cb(i, _lost_point(todo[i], exc)))
    except KeyboardInterrupt:
        interrupted = True
    except BaseException:
        # an error that stops the sweep (its points' processes stopped as on Ctrl-C): the points not
        # run are still to run, and sweep.json and report.md said "finished" over them
        interrupted = True
        raise
    finally:
        run_s = time.perf_counter() - t0
        try:
            # a Ctrl-C here (a second one, after the one that stopped the points; or the first,
            # as the last point ended) escaped as a plain KeyboardInterrupt before sweep.json was
            # rewritten: it stayed "running", and the command line said the sweep "ran no point
            # and wrote nothing". Held over the short close, then the sweep is interrupted (its
            # files written below, SweepInterrupted from run_sweep)
            with sigint_deferred():
                if display is not None:
                    try:
                        display.close()
                    finally:
                        deactivate(display)
        except KeyboardInterrupt:
            interrupted = True
        if display is None:  # (the display could not start: sweep.log not writable) nothing to show
            display = Progress(False)
        combined: list[str] = []
        report = out / "report.md"
        try:
            if interrupted:
                # A point's process that did not leave within the stop's grace was killed
                # (SIGKILL) before it could remove its temporary folder (.NAME.partial-PID-X),
                # which stayed beside the points until the sweep was run again; the pool has
                # reaped its processes by now, so their folders' locks are free
                for line in _remove_leftovers(out):
                    display.log(line)
            for p in points:  # what each finished point's results.json says of its run
                if statuses[p.out]["status"] in ("done", "done before"):
                    statuses[p.out].update(_point_facts(Path(p.out)))
            # only the points that finished with this configuration: a folder of an older one (a
            # --force re-run interrupted before reaching it) must not pass for this sweep's
            combined = combine(out, [p.point for p in points if statuses[p.out]["status"] in ("done", "done before")])
            _write_state(out, info, statuses, interrupted=interrupted, written=written)
            report = write_sweep_report(out, info, points, statuses, interrupted)
        except KeyboardInterrupt:
            # a Ctrl-C while the sweep wrote its files (the plots take a while) after its points
            # ended: it passed as a plain KeyboardInterrupt, and the command line said "the run's
            # output folder was not written" over a sweep.json that said "finished" and the
            # report.md of the sweep's start. It is an interrupted sweep: said so in sweep.json
            # (report.md is then the start's, "Running, or killed"), the same command resumes.
            interrupted = True
            _write_state(out, info, statuses, interrupted=True, written=written)
        except BaseException:
            # an error as the sweep wrote its files after its points ended (a full disk): it went
            # out with sweep.json saying "finished" over the report.md of the sweep's start, and
            # sweep.log left open without its last line. Interrupted, as on Ctrl-C (the same
            # command resumes, and writes the files), then raised.
            interrupted = True
            try:
                _write_state(out, info, statuses, interrupted=True, written=written)
            finally:
                display.finish("interrupted")
            raise
        display.finish("interrupted" if interrupted else "finished")
    used: dict[str, Any] = {"name": backend, "run_s": run_s}
    if session is not None:
        used.update(address=session.address, cpus=session.cluster_cpus, startup_s=session.startup_s)
    finished = [statuses[p.out] for p in points if statuses[p.out]["status"] in ("done", "done before")]
    fedsim_versions: dict[str, list[dict]] = {}
    for st in finished:
        fedsim_versions.setdefault(st["fedsim"], []).append(st["point"])
    return {"points": len(points), "out": str(out),
            "done": [r["point"] for r in results if r["status"] == "done"], "skipped": skipped,
            "caveats": [{"point": st["point"], "caveats": st["caveats"]} for st in finished if st["caveats"]],
            "fedsim_versions": fedsim_versions,
            "rerun": rerun, "failed": [r for r in results if r["status"] == "failed"],
            "not_run": [p.point for p in todo if statuses[p.out]["status"] == "not run"],
            "combined": combined, "report": str(report), "backend": used, "interrupted": interrupted}


def _no_room(exc: BaseException) -> OSError | None:
    """The first error of a full disk, quota or file size limit in ``exc``'s chain (``exc``
    itself, or what it was raised while handling: a sweep stopped by one tries to write its
    sweep.json, which fails too), preferring one that names its file (a write whose ``flush``
    failed fails again as its file closes, the second error alone named), or None."""
    found: list[BaseException] = []
    while exc is not None and all(exc is not f for f in found):
        if no_room_error(exc, "") is not None:
            found.append(exc)
        exc = exc.__context__
    named = [f for f in found if getattr(f, "filename", None)]
    return (named or found or [None])[-1]


def _sweep_left(out: Path, written: dict) -> str:
    """What a sweep stopped by a full disk leaves, for its error line: what its sweep.json says
    (``written["state"]``, the state this sweep last wrote there, and the points' statuses read
    back), or that the sweep wrote none."""
    state = written.get("state")
    if state is None:
        return f"no point was run, and {out}/sweep.json was not written by this sweep"
    try:
        doc = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
        counts: dict[str, int] = {}
        for pt in doc["points"]:
            counts[pt["status"]] = counts.get(pt["status"], 0) + 1
        said = ", ".join(f"{n} {status}" for status, n in counts.items())
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{out}/sweep.json cannot be read back ({exc})"
    if state == "running":
        return (f"{out}/sweep.json could not be rewritten either: it says running ({said}), as written when the sweep "
                "started, though the sweep has stopped")
    return f"{out}/sweep.json says {state} ({said})"


def _point_facts(d: Path) -> dict:
    """What a finished point's results.json says of its run: ``caveats`` (``incomplete``,
    ``diverged``, ``adjusted``, ``unevaluated``, ...: see ``RunContext.caveat``) and ``fedsim``, the fedsim that ran it (its version
    and git revision): a sweep resumed by another fedsim holds points of both."""
    try:
        saved = json.loads((d / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        saved = {}
    caveats = saved.get("caveats") if isinstance(saved, dict) else None
    versions = saved.get("versions") if isinstance(saved, dict) else None
    version = versions.get("fedsim") if isinstance(versions, dict) else None
    rev = saved.get("git_revision") if isinstance(saved, dict) else None
    label = str(version or "unknown version")
    if isinstance(rev, str) and rev:
        label += f" ({rev[:12]}{'-dirty' if rev.endswith('-dirty') and len(rev) > 12 else ''})"
    return {"caveats": [str(c) for c in caveats] if isinstance(caveats, list) else [], "fedsim": label}


def _is_path(scenario: str) -> bool:
    """Whether :func:`load_scenario` takes ``scenario`` as a script's path."""
    return scenario.endswith(".py") or os.sep in scenario or "/" in scenario


def _recover_points(out: Path, only: str | None = None) -> list[str]:
    """Deal with what point runs that were killed left beside their folders in ``out`` (``only``:
    beside the point folder ``NAME`` only), as a run into that folder does: a ``.NAME.replaced-PID-X``
    (a --force re-run's earlier folder, moved aside) is put back when the point's folder is
    missing, else removed (:func:`~fedsim.experiment.runner.recover_replaced`), and a
    ``.NAME.partial-PID-X`` removed (:func:`~fedsim.experiment.runner.remove_dead_partials`);
    those of runs still under way (their lock held, or without one their process running) stay.
    Returns one line per folder put back or removed, saying which and why (for sweep.log)."""
    if only is not None:
        names = {only}
    else:
        names = set()
        for d in out.glob(".*.*-*"):
            m = re.fullmatch(r"\.(.+)\.(?:partial|replaced)-\d+-[0-9a-f]+", d.name)
            if m:
                names.add(m.group(1))
    said = []
    for name in sorted(names):
        restored, removed = recover_replaced(out / name)
        if restored is not None:
            said.append(f"put back the point folder {name} from {restored.name}: a --force re-run of the point "
                        "was killed after it moved the results there aside and before it put its own in")
        said += [f"removed {d.name}: the results of the point folder {name} that a --force re-run of it "
                 "replaced, left when that run was killed" for d in removed]
        said += [f"removed {d.name}: the temporary folder of a run of the point {name} that was killed"
                 for d in remove_dead_partials(out / name)]
    return said


def _remove_leftovers(out: Path, only: str | None = None) -> list[str]:
    """:func:`_recover_points`, and remove the sweep's half-written files (``.NAME.PID.tmp``)
    unless their process still runs; returns :func:`_recover_points`'s lines."""
    said = _recover_points(out, only)
    if only is not None:
        return said
    for f in out.glob(".*.tmp*"):  # the sweep's own files, killed while being written
        m = re.search(r"\.(\d+)\.tmp", f.name)
        if m and not _alive(int(m.group(1))) and f.is_file():
            f.unlink()
    return said


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


# a file of the sweep's folder holding disk space for its last sweep.json while it runs
ROOM_FOR_STATE = ".sweep.json.room"


def _keep_room(path: Path, size: int) -> None:
    """Write ``size`` bytes to ``path`` (written out, not a sparse file): space that
    :func:`_write_state` frees when the disk is full. Nothing is kept when they do not fit."""
    try:
        with open(path, "wb") as fh:
            fh.write(bytes(size))
            fh.flush()
            os.fsync(fh.fileno())
    except OSError:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)


def _write_state(out: Path, info: dict, statuses: dict, interrupted: bool | None, written: dict | None = None) -> None:
    """Write sweep.json: ``info``, the state (``running`` for None), each point's status; once
    written, ``written["state"]`` is that state. On a full disk (or quota), the space kept by
    :func:`_keep_room` as the sweep started (``ROOM_FOR_STATE``) is freed and the write tried
    again: a sweep that the disk stopped says so (``interrupted``) and how each point went."""
    state = "running" if interrupted is None else "interrupted" if interrupted else "finished"
    doc = {**info, "state": state, "points": list(statuses.values())}
    text = json.dumps(doc, indent=2, default=json_default) + "\n"
    try:
        write_atomic(out / "sweep.json", text)
    except OSError as exc:
        room = out / ROOM_FOR_STATE
        if no_room_error(exc, "") is None or not room.exists():
            raise
        room.unlink()
        write_atomic(out / "sweep.json", text)
    if written is not None:
        written["state"] = state


def combine(out: Path, points: list[dict]) -> list[str]:
    """Write ``combined_<table>.csv`` over the finished ``points`` (their folders complete), each
    row prefixed by the point's grid values, its cells under their own column names (a column
    named like a grid key as ``TABLE.COLUMN``; the columns
    are the union over the points, in order of first appearance; a column a point's table lacks
    is left empty); returns the paths. Each file is written whole or not at all (a temporary
    file renamed into place), and a ``combined_*.csv`` of a table no point has now is removed, so
    the folder never shows rows this sweep did not produce."""
    tables: dict[str, list[tuple[list[str], dict]]] = {}
    headers: dict[str, list[str]] = {}  # the tables' own columns (a grid key may be one of them too)
    keys = list(points[0]) if points else []
    for pt in points:
        d = out / point_dir_name(pt)
        try:
            saved = json.loads((d / "results.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        vals = [_cell(pt[k]) for k in keys]
        for tname in saved.get("tables", []):
            f = d / f"{tname}.csv"
            if not f.exists():
                continue
            with open(f, newline="", encoding="utf-8") as fh:
                rows = list(csv.reader(fh))
            if not rows:
                continue
            # a table column named like a grid key ('rounds' in a summary, when rounds is an axis)
            # is written as TABLE.COLUMN: two columns of one name in one CSV, and a reader by
            # name (the report's DictReader) took the table's cell for the grid's value
            head = [f"{tname}.{c}" if c in pt else c for c in rows[0]]
            cols = headers.setdefault(tname, [])
            for c in head:
                if c not in cols:
                    cols.append(c)
            tables.setdefault(tname, []).extend((vals, dict(zip(head, r))) for r in rows[1:])
    paths = []
    for tname, rows in tables.items():
        path = out / f"combined_{tname}.csv"
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        cols = headers[tname]
        try:
            write_csv(tmp, [vals + [cells.get(c, "") for c in cols] for vals, cells in rows], keys + cols)
            os.replace(tmp, path)
        except BaseException:  # (a Ctrl-C, a full disk: the hidden file stayed beside the points)
            tmp.unlink(missing_ok=True)
            raise
        paths.append(str(path))
    for old in out.glob("combined_*.csv"):
        if str(old) not in paths:
            old.unlink()
    return paths


# ---------------------------------------------------------------------------------------------
# the combined report

def _num(text: str) -> float | int | None:
    """The number a CSV cell holds (an int when it is written as one), or None."""
    try:
        return int(text)
    except (TypeError, ValueError):
        pass
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


ID_COLUMNS = ("round", "iteration", "epoch", "fold", "seq")


def _read_combined(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="", encoding="utf-8") as fh:
        r = csv.DictReader(fh)
        return list(r.fieldnames or []), list(r)


MAX_PLOTS_PER_TABLE = 16


def write_sweep_report(out: Path, info: dict, points: list[SweepPoint], statuses: dict,
                       interrupted: bool | None) -> Path:
    """Write ``out/report.md``: the sweep's configuration, every point with its status, each
    combined table (human units; the CSV has raw numbers) and a plot per metric against the
    grid axes (PNG, with matplotlib). ``interrupted`` None: the report a sweep writes as it
    starts (the points done before, no plots), which says it is running, or was killed.
    Returns the path."""
    axes = list(info["grid"])
    lines = [f"# Sweep of {info['scenario']}", ""]
    finished = [statuses[p.out] for p in points if statuses[p.out]["status"] in ("done", "done before")]
    failed = [statuses[p.out]["point"] for p in points if statuses[p.out]["status"] == "failed"]
    n_done = len(finished)
    if interrupted is None:
        state = (f"**Running, or killed**: this report was written when the sweep started "
                 f"({_dt.datetime.now().isoformat(timespec='seconds')}); its tables cover the points done "
                 "before then. The sweep rewrites it when it ends; if no sweep runs in this folder any more, "
                 "it was killed: run the same command again to finish it.")
    elif interrupted:
        state = ("**Interrupted**: the tables and plots cover the points that finished; run the same "
                 "command again to run the rest.")
    elif failed:
        shown = ", ".join(f"`{point_label(pt)}`" for pt in failed[:5]) + (" ..." if len(failed) > 5 else "")
        state = (f"**Incomplete: {len(failed)} point(s) failed** ({shown}; each folder's error.txt has the "
                 f"error): the tables and plots below cover the {plural(n_done, 'point')} that finished, not the whole "
                 "grid. Run the same command again to retry the failed points.")
    else:
        state = "Finished."
    lines += [f"{n_done} of {plural(len(points), 'point')} finished. {state}", ""]
    with_caveats = [s for s in finished if s.get("caveats")]
    if with_caveats:
        words = sorted({c for s in with_caveats for c in s["caveats"]})
        lines += [f"**{len(with_caveats)} of the {n_done} finished {'point has' if n_done == 1 else 'points have'} caveats** "
                  f"({', '.join(words)}: the `caveats` column; each point's report.md says what): their "
                  "figures are not those of complete runs of the settings given.", ""]
    versions: dict[str, list[dict]] = {}
    for s in finished:
        versions.setdefault(s.get("fedsim", "unknown version"), []).append(s["point"])
    mixed = len(versions) > 1
    if mixed:
        lines += ["**Run by different fedsims** (the `fedsim` column): "
                  + "; ".join(f"fedsim {v}: {len(pts)} point(s)" for v, pts in versions.items())
                  + ". Their figures may not be comparable; remove the older points' folders (or use another "
                  "`--out`) to run them again with one fedsim.", ""]
    fixed = ", ".join(f"`{k}={_cell(v)}`" for k, v in info["fixed"].items()) or "none"
    lines += ["Grid: " + ", ".join(f"`{k}` = {', '.join(_cell(v) for v in vals)}" for k, vals in info["grid"].items())
              + f". Fixed parameters: {fixed}. Data: `{info['data'] or 'the scenario default'}`, seed "
              f"{info['seed']}, network `{info['network']['profile']}`. Run on "
              + ("Ray" + (f" at `{info['address']}`" if info.get("address") else " (a local instance)")
                 if info.get("backend") == "ray" else "the local process pool") + ".", ""]
    rows = []
    extra = (["caveats"] if with_caveats else []) + (["fedsim"] if mixed else [])
    for p in points:
        s = statuses[p.out]
        rows.append({**{k: _cell(v) for k, v in p.point.items()}, "status": s["status"],
                     "wall_time_s": s.get("wall_time_s", ""), "caveats": ", ".join(s.get("caveats", [])),
                     "fedsim": s.get("fedsim", ""),
                     "folder": f"[{point_dir_name(p.point)}]({point_dir_name(p.point)}/report.md)"
                     if s["status"] in ("done", "done before") else
                     (f"[error.txt]({point_dir_name(p.point)}/error.txt)" if s["status"] == "failed" else "")})
    lines += ["## Points", "", format_table(rows, axes + ["status", "wall_time_s", *extra, "folder"], markdown=True,
                                             human=True), ""]
    for path in sorted(out.glob("combined_*.csv")):
        tname = path.stem.removeprefix("combined_")
        cols, data = _read_combined(path)
        typed = [{c: (_num(v) if _num(v) is not None and c not in axes else v) for c, v in r.items()} for r in data]
        lines += [f"## {tname}", "", f"From `{path.name}` (raw numbers there).", ""]
        shown = typed[:60]
        lines += [format_table(shown, cols, markdown=True, human=True), ""]
        if len(typed) > len(shown):
            lines += [f"({plural(len(typed) - len(shown), 'more row')} in `{path.name}`.)", ""]
        for line in (_plot_table(out, tname, cols, data, axes, info["grid"]) if interrupted is not None else []):
            lines += [line, ""]
    path = out / "report.md"
    write_atomic(path, "\n".join(lines))
    return path


def _plot_table(out: Path, tname: str, cols: list[str], data: list[dict], axes: list[str],
                grid: dict) -> list[str]:
    """One PNG per metric (a numeric column that varies) against the first grid axis with more
    than one value; one line per combination of the other axes and the row's text columns (the
    mean where several rows share it). Returns report.md's line for each: the image, or a
    sentence saying why a metric has none (axes matplotlib cannot lay out)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    if not data or not axes:  # (an empty grid, one point: no axis to plot against; it was an IndexError)
        return []
    last = ""
    step = next((c for c in ("round", "iteration", "epoch") if c in cols), None)
    if step:  # a per-round table: plot each point's last round
        best: dict[tuple, float] = {}
        for r in data:
            k = tuple(r[a] for a in axes)
            v = _num(r[step])
            if v is not None and v > best.get(k, -math.inf):
                best[k] = v
        data = [r for r in data if _num(r[step]) == best.get(tuple(r[a] for a in axes))]
        last = f" (last {step})"
    varying = [a for a in axes if len(grid[a]) > 1] or axes
    x_axis = varying[0]
    others = [a for a in axes if a != x_axis]
    metric_cols, label_cols = [], []
    for c in cols:
        if c in axes or c in ID_COLUMNS:
            continue
        vals = [_num(r[c]) for r in data if r[c] != ""]
        if vals and all(v is not None for v in vals):
            finite = {v for v in vals if not math.isnan(v)}
            if len(finite) > 1:
                metric_cols.append(c)
        elif len({r[c] for r in data}) > 1:
            label_cols.append(c)
    xs_cell = [_cell(v) for v in grid[x_axis]]  # the values as the combined rows hold them (and the ticks)
    numeric_x = all(_num(x) is not None for x in xs_cell)
    pngs = []
    for metric in metric_cols[:MAX_PLOTS_PER_TABLE]:
        series: dict[str, dict[str, list[float]]] = {}
        for r in data:
            v = _num(r[metric])
            if v is None or math.isnan(v):
                continue
            label = ", ".join([f"{a}={r[a]}" for a in others] + [r[c] for c in label_cols]) or metric
            series.setdefault(label, {}).setdefault(r[x_axis], []).append(v)
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
        for label, by_x in series.items():
            xs = [x for x in xs_cell if x in by_x]
            ys = [sum(by_x[x]) / len(by_x[x]) for x in xs]
            pos = [float(x) for x in xs] if numeric_x else [xs_cell.index(x) for x in xs]
            ax.plot(pos, ys, marker="o", label=label)
        if not numeric_x:
            ax.set_xticks(range(len(xs_cell)), xs_cell)
        ax.set_xlabel(x_axis)
        ax.set_ylabel(metric)
        ax.set_title(f"{tname}: {metric}{last}")
        if 1 < len(series) <= 12:
            ax.legend(fontsize=7)
        name = re.sub(r"[^\w.-]", "_", f"sweep_{tname}_{metric}") + ".png"
        # axis values matplotlib cannot lay out (--grid rho=1e308: its ticks overflow) were a
        # traceback of the whole sweep after its points had run; the table above holds the figures
        why = save_figure(fig, out / name)
        pngs.append(f"(No plot of `{metric}`: {why}.)" if why else f"![{name}]({name})")
    return pngs


def _point_network(base: Any, pt: dict[str, Any]) -> Any:
    """The ``NetSpec`` of point ``pt``: ``base`` with the point's network axes, and its option axes
    (``link_options.KEY``, ``transport_options.KEY``) typed by the point's link model's or
    transport's constructor (``fedsim.experiment.netoptions``) and added to ``base``'s options
    (``UsageError`` for one ``base`` has too: a ``--link-option`` and a grid axis)."""
    from ..experiment.netoptions import FLAGS, option_value

    changes = {axis_network_field(k): v for k, v in pt.items() if axis_network_field(k) is not None}
    names = {"link": changes.get("link_model", base.link_model), "transport": changes.get("transport", base.transport)}
    given = {"link": dict(base.link_options), "transport": dict(base.options)}
    for k, v in pt.items():
        found = option_axis(k)
        if found is None:
            continue
        kind, key = found
        if key in given[kind]:
            raise UsageError(f"--grid {k}: {key} is given by {FLAGS[kind]} too; give it once (a grid axis or a fixed "
                             "option)")
        if kind == "link":
            from ..kernel.registry import TRANSPORT_REGISTRY

            if not TRANSPORT_REGISTRY.entry(names["transport"]).link_models:
                raise UsageError(f"--grid {k}: transport {names['transport']!r} takes no link model (it runs without "
                                 "one), so no link model options")
        given[kind][key] = option_value(kind, names[kind], key, v, f"--grid {k}")
    if len(given["link"]) > len(base.link_options):
        changes["link_options"] = given["link"]
    if len(given["transport"]) > len(base.options):
        changes["options"] = given["transport"]
    return base.replace(**changes)


def _net_dict(net: Any) -> dict | None:
    from ..kernel import NetSpec

    return None if net is None else NetSpec.of(net).to_dict()
