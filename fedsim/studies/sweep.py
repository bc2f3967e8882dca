"""Parameter sweeps: a grid of scenario runs on a local process pool.

Each grid point runs as an ordinary scenario run in its own folder (``OUT/key=value,.../``).
A point is done when its ``results.json`` exists (written last), so re-running a sweep skips
finished points and redoes the rest; a failed point leaves ``error.txt`` and does not stop the
others. ``combined_<table>.csv`` puts every point's rows of each table side by side, prefixed by
the point's parameters.
"""

from __future__ import annotations

import csv
import itertools
import json
import shutil
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..experiment import UsageError, check_value, load_scenario, parse_value, run_scenario, write_csv
from .parallel import default_workers, pmap

__all__ = ["parse_grid", "point_dir_name", "run_sweep", "SweepPoint"]


def parse_grid(mod, grids: Sequence[str]) -> dict[str, list[Any]]:
    """``["rho=0,1,2", "eta=0,1"]`` -> ``{"rho": [0, 1, 2], "eta": [0, 1]}`` typed by the
    scenario's PARAMS. List-typed parameters separate grid values with ``;``
    (``models=PMF(B);PMF(S),SVD++(S)``). Raises ``UsageError`` for unknown keys or bad values."""
    out: dict[str, list[Any]] = {}
    for g in grids:
        if "=" not in g:
            raise UsageError(f"--grid expects key=v1,v2,..., got {g!r}")
        key, vals = g.split("=", 1)
        key = key.strip()
        if key not in mod.PARAMS:
            raise UsageError(f"--grid: unknown parameter {key!r}; known: {', '.join(sorted(mod.PARAMS))}")
        p = mod.PARAMS[key]
        listy = p.type_name in ("ints", "floats", "strs")
        parts = [v for v in vals.split(";" if listy else ",") if v.strip() != ""]
        if not parts:
            raise UsageError(f"--grid {key}: no values")
        out[key] = [parse_value(key, v.strip(), p) for v in parts]
    return out


def point_dir_name(point: dict[str, Any]) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, list):
            return "+".join(map(str, v))
        return str(v)

    name = ",".join(f"{k}={fmt(v)}" for k, v in point.items()) or "default"
    return "".join(c if c.isalnum() or c in "=,.+-_" else "_" for c in name)


@dataclass(frozen=True)
class SweepPoint:
    scenario: str
    point: dict
    out: str
    data: str | None
    seed: int
    net: Any  # a fedsim.kernel.NetSpec, a profile name or None
    fixed: dict


def _run_point(p: SweepPoint) -> dict:
    out = Path(p.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "error.txt").unlink(missing_ok=True)
        run_scenario(p.scenario, data=p.data, out=out, overrides={**p.fixed, **p.point}, seed=p.seed,
                     net=p.net, quiet=True)
        return {"point": p.point, "status": "done", "out": str(out)}
    except BaseException as exc:  # a failed point must not take the sweep down
        (out / "error.txt").write_text("".join(traceback.format_exception(exc)))
        return {"point": p.point, "status": "failed", "error": f"{type(exc).__name__}: {exc}", "out": str(out)}


def run_sweep(scenario: str, grid: dict[str, list[Any]], out: str | Path, *, data: str | None = None,
              fixed: dict | None = None, seed: int = 0, profile: str | None = None, net: Any = None,
              workers: int | None = None, progress=None) -> dict:
    """Run every point of ``grid`` (cartesian product) not already done; returns a summary
    with ``done``, ``skipped`` and ``failed`` lists and the combined CSV paths."""
    mod = load_scenario(scenario)
    fixed = {k: check_value(k, v, mod.PARAMS[k]) if k in mod.PARAMS else v for k, v in (fixed or {}).items()}
    for k in fixed:
        if k not in mod.PARAMS:
            raise UsageError(f"unknown parameter {k!r} for scenario {scenario}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    keys = list(grid)
    points = [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]
    todo, skipped = [], []
    for pt in points:
        d = out / point_dir_name(pt)
        if (d / "results.json").exists():
            skipped.append(pt)
        else:
            if d.exists():
                shutil.rmtree(d)  # an interrupted point: start it afresh
            todo.append(SweepPoint(scenario, pt, str(d), data, seed, net if net is not None else profile, fixed))
    (out / "sweep.json").write_text(json.dumps({"scenario": scenario, "grid": grid, "fixed": fixed,
                                                "data": data, "seed": seed,
                                                "network": _net_dict(net if net is not None else profile)},
                                               indent=2))
    total = len(todo)

    def done_cb(i, res):
        if progress:
            progress(i, total, res)

    results = pmap(_run_point, todo, workers or default_workers(), on_done=done_cb)
    failed = [r for r in results if r["status"] == "failed"]
    combined = combine(out, points)
    return {"points": len(points), "done": [r["point"] for r in results if r["status"] == "done"],
            "skipped": skipped, "failed": failed, "combined": combined}


def combine(out: Path, points: list[dict]) -> list[str]:
    """Write ``combined_<table>.csv`` over every finished point."""
    tables: dict[str, list[list[str]]] = {}
    headers: dict[str, list[str]] = {}
    keys = list(points[0]) if points else []
    for pt in points:
        d = out / point_dir_name(pt)
        res = d / "results.json"
        if not res.exists():
            continue
        for tname in json.loads(res.read_text()).get("tables", []):
            f = d / f"{tname}.csv"
            if not f.exists():
                continue
            with open(f, newline="", encoding="utf-8") as fh:
                rows = list(csv.reader(fh))
            if not rows:
                continue
            headers.setdefault(tname, keys + rows[0])
            vals = [("+".join(map(str, pt[k])) if isinstance(pt[k], list) else str(pt[k])) for k in keys]
            tables.setdefault(tname, []).extend(vals + r for r in rows[1:])
    paths = []
    for tname, rows in tables.items():
        path = out / f"combined_{tname}.csv"
        write_csv(path, rows, headers[tname])
        paths.append(str(path))
    return paths


def _net_dict(net: Any) -> dict | None:
    from ..kernel import NetSpec

    return None if net is None else NetSpec.of(net).to_dict()
