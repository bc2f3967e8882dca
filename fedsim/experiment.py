"""Running scenarios: typed parameters, a run context, and the files every run writes.

A scenario is a module (``scenarios/NAME.py``, installed as ``fedsim.scenarios.NAME``) with

- a docstring whose first line describes it (``fedsim list`` shows it);
- ``PARAMS``: ``{name: Param(default, help)}``; the default's type is the parameter's type;
- ``run(ctx: RunContext) -> None``: does the work, reporting through ``ctx``;
- ``if __name__ == "__main__": scenario_main(globals())`` so that
  ``python scenarios/NAME.py --data PATH --out DIR [--NAME VALUE ...] [--set NAME=VALUE ...]`` works.

Every run writes to its output folder: ``report.md`` (all tables and notes), one CSV per
table, ``results.json`` (configuration, seed, versions, git revision, wall and simulated time,
ledger totals), ``ledger.csv`` when asked, and PNG plots when matplotlib is installed.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import importlib
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterable, Sequence

import numpy as np

__all__ = [
    "Param", "RunContext", "ScenarioError", "UsageError", "load_scenario", "list_scenarios",
    "parse_value", "run_scenario", "scenario_main",
]

SCENARIO_PACKAGE = "fedsim.scenarios"


class UsageError(ValueError):
    """A mistake the user can fix (unknown scenario or key, wrong type, missing file)."""


class ScenarioError(RuntimeError):
    """A scenario failed for a reason it reports (e.g. a diverged run it refuses to average)."""


@dataclass(frozen=True)
class Param:
    """A scenario parameter: its default (whose type is the parameter's type) and help text.
    ``choices`` restricts the values; ``kind`` overrides the type ('int', 'float', 'str',
    'bool', 'ints', 'floats', 'strs' for comma-separated lists)."""

    default: Any
    help: str = ""
    choices: tuple | None = None
    kind: str | None = None

    @property
    def type_name(self) -> str:
        if self.kind:
            return self.kind
        d = self.default
        if isinstance(d, bool):
            return "bool"
        if isinstance(d, int):
            return "int"
        if isinstance(d, float):
            return "float"
        if isinstance(d, (list, tuple)):
            inner = {type(x) for x in d}
            if inner <= {int}:
                return "ints"
            if inner <= {int, float}:
                return "floats"
            return "strs"
        return "str"


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_value(key: str, text: str, param: Param) -> Any:
    """Convert ``text`` to ``param``'s type; raises ``UsageError`` naming the key."""
    t = param.type_name
    try:
        if t == "bool":
            low = text.strip().lower()
            if low in _TRUE:
                value: Any = True
            elif low in _FALSE:
                value = False
            else:
                raise ValueError
        elif t == "int":
            value = int(text)
        elif t == "float":
            value = float(text)
            if math.isnan(value):
                raise ValueError
        elif t in ("ints", "floats", "strs"):
            conv = {"ints": int, "floats": float, "strs": str}[t]
            value = [conv(x.strip()) for x in text.split(",") if x.strip() != ""]
        else:
            value = text
    except ValueError:
        raise UsageError(f"--set {key}: expected {t}, got {text!r}") from None
    if param.choices is not None:
        vals = value if isinstance(value, list) else [value]
        bad = [v for v in vals if v not in param.choices]
        if bad:
            raise UsageError(f"--set {key}: {bad[0]!r} is not one of {', '.join(map(str, param.choices))}")
    return value


def _check_value(key: str, value: Any, param: Param) -> Any:
    """Validate a Python value (from a sweep grid or API call) against ``param``."""
    if isinstance(value, str):
        return parse_value(key, value, param)
    t = param.type_name
    ok = {
        "bool": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "ints": lambda v: isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v),
        "floats": lambda v: isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) for x in v),
        "strs": lambda v: isinstance(v, (list, tuple)),
        "str": lambda v: isinstance(v, str),
    }[t]
    if not ok(value):
        raise UsageError(f"{key}: expected {t}, got {value!r}")
    return float(value) if t == "float" else (list(value) if t in ("ints", "floats", "strs") else value)


# --- discovery -------------------------------------------------------------------------------

def _scenario_dirs() -> list[Path]:
    dirs = []
    try:
        pkg = importlib.import_module(SCENARIO_PACKAGE)
        dirs.extend(Path(p) for p in pkg.__path__)
    except ImportError:
        pass
    here = Path(__file__).resolve().parents[1] / "scenarios"
    if here.is_dir() and here not in dirs:
        dirs.append(here)
    return dirs


def list_scenarios() -> list[tuple[str, str]]:
    """``(name, one-line description)`` of every scenario, sorted by name."""
    seen: dict[str, str] = {}
    for d in _scenario_dirs():
        for f in sorted(d.glob("*.py")):
            if f.name.startswith("_") or f.stem in seen:
                continue
            seen[f.stem] = _first_docline(f)
    return sorted(seen.items())


def _first_docline(path: Path) -> str:
    import ast
    try:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    except SyntaxError:
        return "(cannot parse)"
    return first_sentence(doc)


def first_sentence(doc: str) -> str:
    """The docstring's first paragraph up to its first full stop, on one line (summaries in
    ``fedsim list`` may wrap over several source lines)."""
    para = " ".join(doc.strip().split("\n\n")[0].split())
    for i, ch in enumerate(para):
        if ch == "." and (i + 1 == len(para) or para[i + 1] == " "):
            return para[: i + 1]
    return para


def load_scenario(name_or_path: str) -> ModuleType:
    """Import a scenario by name (``fedrec_table2``) or by path to a ``.py`` file.
    Raises ``UsageError`` if there is none."""
    p = Path(name_or_path)
    if p.suffix == ".py" or os.sep in name_or_path or "/" in name_or_path:
        if not p.is_file():
            raise UsageError(f"no scenario script at {name_or_path}")
        spec = importlib.util.spec_from_file_location(f"fedsim_scenario_{p.stem}", p)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # so multiprocessing workers and dataclasses can find it
        spec.loader.exec_module(mod)
    else:
        if not name_or_path.isidentifier():
            raise UsageError(f"unknown scenario {name_or_path!r}")
        try:
            mod = importlib.import_module(f"{SCENARIO_PACKAGE}.{name_or_path}")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith(SCENARIO_PACKAGE):
                known = ", ".join(n for n, _ in list_scenarios())
                raise UsageError(f"unknown scenario {name_or_path!r}; known: {known}") from None
            raise
    if not hasattr(mod, "run") or not hasattr(mod, "PARAMS"):
        raise UsageError(f"{name_or_path} is not a fedsim scenario (it needs PARAMS and run(ctx))")
    return mod


# --- the run context -------------------------------------------------------------------------

class Progress:
    """A one-line progress display on stderr (only when it is a terminal and not quiet)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self._last = 0.0
        self.stage = ""
        # simulated time, messages and bytes of the networks the run has recorded so far: shown
        # when a scenario's update does not pass its own figures
        self.recorded: dict[str, float] = {}

    def update(self, done: int, total: int, *, stage: str | None = None, sim_time: float | None = None,
               messages: int | None = None, bytes: int | None = None) -> None:
        if stage is not None:
            self.stage = stage
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and done < total:
            return
        self._last = now
        width = 24
        filled = int(width * done / total) if total else width
        parts = [f"\r{self.stage[:28]:<28} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}"]
        rec = self.recorded
        if sim_time is None and messages is None and bytes is None and rec:
            sim_time, messages, bytes = rec["sim_time"], int(rec["messages"]), int(rec["bytes"])
        if sim_time is not None:
            parts.append(f"sim {sim_time:9.2f}s")
        if messages is not None:
            parts.append(f"{messages} msgs")
        if bytes is not None:
            parts.append(f"{_human(bytes)}")
        sys.stderr.write("  ".join(parts) + "\x1b[K")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} TB"


@dataclass
class Table:
    name: str
    rows: list[dict]
    columns: list[str]
    title: str
    floatfmt: str = ".4f"


@dataclass
class RunContext:
    """What a scenario's ``run`` gets: its configuration and where to report."""

    name: str
    config: dict[str, Any]
    data: str
    seed: int
    profile: str
    out: Path
    quiet: bool = False
    keep_ledger: bool = False
    progress: Progress = field(default_factory=lambda: Progress(False))
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    sim_time: float = 0.0
    ledger_totals: dict[str, float] = field(default_factory=dict)
    _ledgers: list = field(default_factory=list)

    def __getitem__(self, key: str) -> Any:
        return self.config[key]

    def load_data(self, **kw: Any):
        """The dataset named by ``--data`` (a synthetic preset, a path, or a downloaded name)."""
        from .data import resolve

        try:
            return resolve(self.data, **kw)
        except FileNotFoundError as exc:
            raise UsageError(str(exc)) from None

    def table(self, name: str, rows: Iterable[dict], *, columns: Sequence[str] | None = None,
              title: str | None = None, floatfmt: str = ".4f") -> None:
        """Add a table: written as ``NAME.csv`` and as a Markdown table in report.md, and
        printed unless quiet."""
        rows = [dict(r) for r in rows]
        cols = list(columns) if columns else (list(rows[0]) if rows else [])
        t = Table(name, rows, cols, title or name, floatfmt)
        self.tables.append(t)
        _write_csv(self.out / f"{name}.csv", rows, cols)
        if not self.quiet:
            self.progress.close()
            print(f"\n{t.title}\n{format_table(rows, cols, floatfmt)}")

    def note(self, text: str) -> None:
        """Add a Markdown paragraph to report.md."""
        self.notes.append(text)

    def record_network(self, net: Any) -> None:
        """Account one finished network run: its simulated duration and ledger totals (summed
        over runs in results.json); with ``--ledger`` its full ledger goes to ledger.csv."""
        led = net.ledger
        self.sim_time += float(net.now())
        for k, v in led.totals().items():
            if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
                self.ledger_totals[k] = self.ledger_totals.get(k, 0) + v
        self.progress.recorded = {"sim_time": self.sim_time, "messages": self.ledger_totals.get("messages", 0),
                                  "bytes": self.ledger_totals.get("bytes", 0)}
        if self.keep_ledger:
            path = self.out / "ledger.csv"
            with open(path, "a", newline="", encoding="utf-8") as fh:
                text = led.to_csv()
                if fh.tell() > 0:
                    text = text.split("\n", 1)[1]  # header once
                fh.write(text)

    def plot(self, name: str, draw: Callable[[Any], None]) -> Path | None:
        """Call ``draw(ax)`` on a fresh matplotlib axes and save ``NAME.png``; returns the path,
        or None when matplotlib is not installed."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
        draw(ax)
        fig.tight_layout()
        path = self.out / f"{name}.png"
        fig.savefig(path)
        plt.close(fig)
        self.plots.append(path.name)
        return path


def format_table(rows: list[dict], cols: list[str], floatfmt: str = ".4f", markdown: bool = False) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "nan" if math.isnan(v) else format(v, floatfmt)
        return str(v)

    body = [[cell(r.get(c, "")) for c in cols] for r in rows]
    if markdown:
        lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        lines += ["| " + " | ".join(b) + " |" for b in body]
        return "\n".join(lines)
    widths = [max([len(c)] + [len(b[i]) for b in body]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(b, widths)) for b in body]
    return "\n".join(lines)


def _write_csv(path: Path, rows: list[dict], cols: list[str]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(cols)
        for r in rows:
            w.writerow([_csv_cell(r.get(c, "")) for c in cols])


def _csv_cell(v: Any) -> str:
    """Shortest round-tripping text of a number; NumPy scalars as plain numbers (NumPy 2's
    repr of ``np.float64(0.5)`` is the call, not the number)."""
    if isinstance(v, (float, np.floating)):
        v = float(v)
        return "" if math.isnan(v) else repr(v)
    if isinstance(v, (np.integer, np.bool_)):
        return str(v.item())
    return str(v)


# --- running ---------------------------------------------------------------------------------

def resolve_config(mod: ModuleType, overrides: dict[str, Any]) -> dict[str, Any]:
    """Defaults of ``mod.PARAMS`` updated with validated ``overrides``; unknown keys raise."""
    params: dict[str, Param] = mod.PARAMS
    cfg = {k: p.default for k, p in params.items()}
    for k, v in overrides.items():
        if k not in params:
            raise UsageError(f"unknown parameter {k!r} for scenario {_modname(mod)}; "
                             f"known: {', '.join(sorted(params))}")
        cfg[k] = _check_value(k, v, params[k])
    return cfg


def parse_sets(mod: ModuleType, sets: Sequence[str]) -> dict[str, Any]:
    """Parse ``key=value`` strings against ``mod.PARAMS``."""
    out: dict[str, Any] = {}
    for s in sets:
        if "=" not in s:
            raise UsageError(f"--set expects key=value, got {s!r}")
        k, v = s.split("=", 1)
        k = k.strip()
        if k not in mod.PARAMS:
            raise UsageError(f"unknown parameter {k!r} for scenario {_modname(mod)}; "
                             f"known: {', '.join(sorted(mod.PARAMS))}")
        out[k] = parse_value(k, v, mod.PARAMS[k])
    return out


def _modname(mod: ModuleType) -> str:
    if mod.__name__ == "__main__" and getattr(mod, "__file__", None):
        return Path(mod.__file__).stem
    return mod.__name__.rsplit(".", 1)[-1].removeprefix("fedsim_scenario_")


def default_out_dir(name: str) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{stamp}-{name}"


def run_scenario(mod: ModuleType | str, *, data: str | None = None, out: str | Path | None = None,
                 overrides: dict[str, Any] | None = None, seed: int = 0, profile: str | None = None,
                 quiet: bool = False, ledger: bool = False) -> dict[str, Any]:
    """Run a scenario and write its files; returns the content of results.json."""
    if isinstance(mod, str):
        mod = load_scenario(mod)
    name = _modname(mod)
    cfg = resolve_config(mod, overrides or {})
    profile = profile or getattr(mod, "DEFAULT_PROFILE", "ideal")
    from .kernel import get_profile
    from .kernel.errors import NetworkConfigError

    try:
        get_profile(profile)
    except NetworkConfigError as exc:
        raise UsageError(str(exc)) from None
    if int(seed) < 0:
        raise UsageError(f"--seed must be non-negative, got {seed}")
    out_dir = Path(out) if out else default_out_dir(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    if ledger and (out_dir / "ledger.csv").exists():
        (out_dir / "ledger.csv").unlink()
    data_spec = data or getattr(mod, "DEFAULT_DATA", "ml100k-like")
    ctx = RunContext(name=name, config=cfg, data=data_spec, seed=int(seed), profile=profile,
                     out=out_dir, quiet=quiet, keep_ledger=ledger, progress=Progress(not quiet))
    t0 = time.perf_counter()
    try:
        mod.run(ctx)
    finally:
        ctx.progress.close()
    wall = time.perf_counter() - t0
    results = {
        "scenario": name,
        "config": cfg,
        "data": data_spec,
        "seed": int(seed),
        "profile": profile,
        "versions": versions(),
        "git_revision": git_revision(),
        "wall_time_s": wall,
        "simulated_time_s": ctx.sim_time,
        "ledger_totals": ctx.ledger_totals,
        "tables": [t.name for t in ctx.tables],
        "plots": ctx.plots,
        "finished": _dt.datetime.now().isoformat(timespec="seconds"),
    }
    (out_dir / "results.json").write_text(json.dumps(results, indent=2, default=_json_default) + "\n")
    _write_report(ctx, results)
    return results


def _json_default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    return str(o)


def _write_report(ctx: RunContext, results: dict) -> None:
    lines = [f"# {ctx.name}", "", f"Data: `{ctx.data}`, seed {ctx.seed}, profile `{ctx.profile}`, "
             f"wall time {results['wall_time_s']:.1f} s, simulated time {ctx.sim_time:.3f} s.", ""]
    lines.append("Configuration: " + ", ".join(f"`{k}={v}`" for k, v in ctx.config.items()))
    lines.append("")
    for t in ctx.tables:
        lines += [f"## {t.title}", "", format_table(t.rows, t.columns, t.floatfmt, markdown=True), ""]
    for n in ctx.notes:
        lines += [n, ""]
    for p in ctx.plots:
        lines += [f"![{p}]({p})", ""]
    if ctx.ledger_totals:
        tot = ctx.ledger_totals
        lines += ["## Ledger totals", "",
                  f"{int(tot.get('messages', 0))} messages, {int(tot.get('bytes', 0))} bytes "
                  f"({int(tot.get('raw_bytes', 0))} bytes of array payload).", ""]
    (ctx.out / "report.md").write_text("\n".join(lines))


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("fedsim", "numpy", "msgpack", "simpy", "matplotlib", "numba"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def git_revision() -> str | None:
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        res = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        return res.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# --- script entry point ----------------------------------------------------------------------

def add_run_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--data", help="dataset: a synthetic preset (tiny, ml100k-like, ml1m-like), "
                                   "a MovieLens folder or ratings file, or a downloaded name (ml-100k)")
    ap.add_argument("--out", help="output folder (default: runs/<timestamp>-<scenario>)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="set a scenario parameter (repeatable)")
    ap.add_argument("--seed", type=int, default=0, help="experiment seed (default 0)")
    ap.add_argument("--profile", default=None,
                    help="network profile: ideal, lan, wan, mobile (default: the scenario's, usually ideal)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar or printed tables")
    ap.add_argument("--ledger", action="store_true", help="also write the full ledger as ledger.csv")


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
                           profile=args.profile, quiet=args.quiet, ledger=args.ledger)
    except (UsageError, ScenarioError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(f"\nwrote {Path(args.out) if args.out else 'runs/'}: report.md, results.json, "
              f"{', '.join(t + '.csv' for t in res['tables'])}")
    return 0
