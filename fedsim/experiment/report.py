"""The files a run writes: one CSV per table, ``report.md`` and ``results.json``, and the
versions and git revision recorded in the latter."""

from __future__ import annotations

import csv
import json
import math
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

__all__ = [
    "Table", "csv_cell", "format_table", "git_revision", "json_default", "versions", "write_csv",
    "write_report", "write_results",
]


@dataclass
class Table:
    """A result table as a scenario reported it: ``NAME.csv`` and a section of report.md."""

    name: str
    rows: list[dict]
    columns: list[str]
    title: str
    floatfmt: str = ".4f"


def format_table(rows: list[dict], cols: list[str], floatfmt: str = ".4f", markdown: bool = False) -> str:
    """``rows`` as text with the columns ``cols`` (a missing key: empty): right-aligned columns
    two spaces apart, or a Markdown table when ``markdown``. Floats use ``floatfmt``, NaN is
    ``nan``, anything else ``str``."""
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


def csv_cell(v: Any, nan: str = "") -> str:
    """The CSV text of one value: a float (Python or NumPy) as the shortest text that reads back
    to the same number (``repr`` of the Python float; NumPy 2's repr of ``np.float64(0.5)`` is the
    call, not the number), NaN as ``nan``; a NumPy integer or bool as the plain value; anything
    else as ``str``."""
    if isinstance(v, (float, np.floating)):
        v = float(v)
        return nan if math.isnan(v) else repr(v)
    if isinstance(v, (np.integer, np.bool_)):
        return str(v.item())
    return str(v)


def write_csv(path: str | Path, rows: Iterable[Mapping[str, Any] | Sequence[Any]], columns: Sequence[str], *,
              nan: str = "") -> None:
    """Write ``path`` (UTF-8, ``\\n`` line ends, the csv module's default quoting): the header
    ``columns``, then one line per row. A mapping row gives its values in ``columns`` order (a
    missing key: an empty cell); any other row is a sequence of cells written as it is. Each
    cell is :func:`csv_cell` ``(value, nan)``: run tables leave NaN empty; the PersonalFR
    learning-curve files have always written ``nan`` and still do."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            cells = [r.get(c, "") for c in columns] if isinstance(r, Mapping) else r
            w.writerow([csv_cell(v, nan) for v in cells])


def json_default(o: Any) -> Any:
    """``json.dumps`` ``default=`` for what runs record: NumPy scalars as Python numbers, arrays
    as lists, anything else as ``str``."""
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def write_results(out: Path, results: dict) -> None:
    """Write ``results`` as ``out/results.json`` (indented, NumPy values as numbers)."""
    (out / "results.json").write_text(json.dumps(results, indent=2, default=json_default) + "\n")


def write_report(out: Path, results: dict, tables: Sequence[Table], notes: Sequence[str]) -> None:
    """Write ``out/report.md``: the run's data, seed, profile, times and configuration (from
    ``results``, as :func:`fedsim.experiment.run_scenario` builds it), every table as Markdown,
    the notes, the plots named in ``results["plots"]`` and the ledger totals."""
    net = results.get("network") or {}
    extra = "".join(f", {k.replace('_', ' ')} `{net[k]}`" for k in ("link_model", "transport")
                    if net.get(k) not in (None, "fifo", "sim"))
    extra += "".join(f", {k} {net[k]:g}" for k in ("loss", "dropout") if net.get(k))
    lines = [f"# {results['scenario']}", "", f"Data: `{results['data']}`, seed {results['seed']}, profile "
             f"`{results['profile']}`{extra}, wall time {results['wall_time_s']:.1f} s, simulated time "
             f"{results['simulated_time_s']:.3f} s.", ""]
    lines.append("Configuration: " + ", ".join(f"`{k}={v}`" for k, v in results["config"].items()))
    lines.append("")
    for t in tables:
        lines += [f"## {t.title}", "", format_table(t.rows, t.columns, t.floatfmt, markdown=True), ""]
    for n in notes:
        lines += [n, ""]
    for p in results["plots"]:
        lines += [f"![{p}]({p})", ""]
    tot = results["ledger_totals"]
    if tot:
        lines += ["## Ledger totals", "",
                  f"{int(tot.get('messages', 0))} messages, {int(tot.get('bytes', 0))} bytes "
                  f"({int(tot.get('raw_bytes', 0))} bytes of array payload).", ""]
    (out / "report.md").write_text("\n".join(lines))


def versions() -> dict[str, str]:
    """Versions of Python and of fedsim and its (optional) dependencies that are installed."""
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("fedsim", "numpy", "msgpack", "matplotlib", "numba"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


def git_revision() -> str | None:
    """The commit checked out where this fedsim is imported from, or None outside a git
    checkout (an installed package) or when git cannot say."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        res = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        return res.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None
