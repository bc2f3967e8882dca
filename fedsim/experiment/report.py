"""The files a run writes: one CSV per table, ``report.md`` and ``results.json``, and the
versions and git revision recorded in the latter."""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..units import human_bytes, human_seconds, plural

__all__ = [
    "Table", "csv_cell", "format_number", "format_table", "git_revision", "human_bytes", "human_seconds", "json_default",
    "naming_the_file", "plural", "save_figure", "versions", "write_csv", "write_report", "write_results",
]


@contextlib.contextmanager
def naming_the_file(path: str | os.PathLike, *tmp: str | os.PathLike) -> Iterator[None]:
    """An ``OSError`` raised inside names ``path``: one that names no file (a full disk, a quota,
    a file size limit: ``write``, ``flush`` and ``close`` fail with ``[Errno 28] No space left on
    device`` and no file name, so the run's error line named none) or names one of ``tmp`` (the
    temporary file written in its place, which the user never gave) gets ``path`` as its
    ``filename``; the exception is raised on, the same object."""
    try:
        yield
    except OSError as exc:
        if exc.errno is not None and (exc.filename is None or exc.filename in {os.fspath(t) for t in tmp}):
            exc.filename = os.fspath(path)  # (not one without errno: OSError("text") would read "[Errno None] None")
        raise


def format_number(v: float, spec: str) -> str:
    """``format(v, spec)`` without the minus sign of a number that rounds to zero: -3e-6 at
    ``.4f`` is ``0.0000`` (``+0.0000`` with a ``+`` in ``spec``), not ``-0.0000``, which reads as
    a negative difference; -0.0 is ``0``. Anything else as ``format`` writes it."""
    text = format(v, spec)
    digits = text[1:].split("e")[0].split("E")[0]
    if text[:1] == "-" and digits and set(digits) <= set("0.") and "0" in digits:
        return ("+" if "+" in spec else "") + text[1:]
    return text


def _precision(spec: str) -> int:
    """The precision of a format spec (``.4g``: 4; none given: 6, as ``format``'s)."""
    digits = spec.rpartition(".")[2].rstrip("gGeEf%")
    return int(digits) if "." in spec and digits.isdigit() else 6


def _unit_of(column: str) -> str | None:
    """How a person reads a column: ``bytes`` (any name with 'bytes'), ``seconds`` (names ending
    in ``_s``, ``_seconds`` or ``time_s``), or None."""
    c = str(column).lower()
    if "bytes" in c and "ratio" not in c and "per_byte" not in c:
        return "bytes"
    if c.endswith(("_s", "_seconds")) or c in ("seconds", "wall", "duration"):
        return "seconds"
    return None


@dataclass
class Table:
    """A result table as a scenario reported it: ``NAME.csv`` and a section of report.md."""

    name: str
    rows: list[dict]
    columns: list[str]
    title: str
    floatfmt: str = ".4f"


def format_table(rows: list[dict], cols: list[str], floatfmt: str = ".4f", markdown: bool = False,
                 human: bool = False) -> str:
    """``rows`` as text with the columns ``cols`` (a missing key: empty): right-aligned columns
    two spaces apart, or a Markdown table when ``markdown``. Floats use ``floatfmt`` (a figure
    that rounds to zero without a minus sign; one that a 'g' format would write with an exponent
    written out, below 1e16 whole, ``12600``, not ``1.26e+04``, and from 1e-6 with its significant
    digits, ``0.00008052``, not ``8.052e-05``), NaN is ``nan``, anything else ``str``. With ``human``, numbers in byte columns read ``1.90 GB`` and
    in second columns ``12.3 ms`` (see ``_unit_of``); CSV and JSON files keep raw numbers."""
    def cell(v: Any, unit: str | None) -> str:
        if isinstance(v, np.generic):
            v = v.item()
        if human and unit and isinstance(v, (int, float)) and not isinstance(v, bool):
            return human_bytes(v) if unit == "bytes" else human_seconds(v)
        if isinstance(v, float):
            if math.isnan(v):
                return "nan"
            text = format_number(v, floatfmt)  # (-1e-9 at .4f: 0.0000, not -0.0000)
            if not general:  # an exponent asked for ('.2e') stays
                return text
            if "e+" in text and abs(v) < 1e16:
                # a large figure in a 'g' format (a TCC of 12,600 vectors at .4g: 1.26e+04) is written
                # out whole, as an int cell is (up to 1e16, where a float's digits end)
                return format_number(v, ".0f")
            if "e-" in text and abs(v) >= 1e-6:
                # a small one (a random guess's exact recovery of 8.052e-05 at .4g) with as many
                # significant digits, without an exponent: 0.00008052
                return np.format_float_positional(v, precision=_precision(floatfmt), unique=False, fractional=False,
                                                  trim="-")
            return text
        return str(v)

    general = floatfmt.rstrip("gG") != floatfmt or not floatfmt.lstrip("+-= ,_.0123456789")  # 'g' or no type
    units = [_unit_of(c) for c in cols]
    body = [[cell(r.get(c, ""), u) for c, u in zip(cols, units)] for r in rows]
    if markdown:
        def md(text: Any) -> str:  # a '|' or a line break in a cell would end it or the row
            return " ".join(str(text).splitlines()).replace("|", "\\|")

        lines = ["| " + " | ".join(md(c) for c in cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        lines += ["| " + " | ".join(md(v) for v in b) + " |" for b in body]
        return "\n".join(lines)
    widths = [max([len(c)] + [len(b[i]) for b in body]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(v.rjust(w) for v, w in zip(b, widths)) for b in body]
    return "\n".join(lines)


def csv_cell(v: Any, nan: str = "") -> str:
    """The CSV text of one value: a float (Python or NumPy) as the shortest text that reads back
    to the same number (``repr`` of the Python float; NumPy 2's repr of ``np.float64(0.5)`` is the
    call, not the number), NaN as ``nan`` (the argument: empty by default); None (a value that is not there: ``deadline_s`` of a
    run without a deadline) as the empty cell, as a row's missing key and the ledger's NaN are
    written, and as pandas and NumPy read a missing value (it was the text ``None``, which they
    read as a string, and which made a sweep's combined column no number to plot); a NumPy
    integer or bool as the plain value; anything else as ``str``."""
    if v is None:
        return ""
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
    learning-curve files have always written ``nan`` and still do; None is an empty cell in all.
    An ``OSError`` names ``path`` (:func:`naming_the_file`)."""
    with naming_the_file(path), open(path, "w", newline="", encoding="utf-8") as fh:
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
    """Write ``results`` as ``out/results.json`` (indented, NumPy values as numbers), atomically:
    into a temporary file in ``out``, flushed to disk, then renamed over the name, so a reader
    sees the whole file or none (a truncated results.json would pass for a finished run)."""
    write_atomic(Path(out) / "results.json", json.dumps(results, indent=2, default=json_default) + "\n")


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it and ``os.replace``; a write
    that fails (or is interrupted) leaves ``path`` as it was and removes the temporary file (it
    stayed, a hidden ``.NAME.PID.tmp`` in a sweep's folder). An ``OSError`` names ``path``, not
    the temporary file (:func:`naming_the_file`)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with naming_the_file(path, tmp), open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def save_figure(fig: Any, path: str | Path) -> str | None:
    """Lay out a matplotlib figure, save it as ``path`` (through a temporary file beside it and
    ``os.replace``) and close it. Returns None, or, when matplotlib cannot lay out its axes
    (values near the float maximum, as 1e308: its ticks overflow, a ``ValueError`` or
    ``OverflowError`` with an axis limit beyond ``_LAYOUT_LIMIT``), why, and writes nothing: the
    sweep's report and a scenario's ``ctx.plot`` say it in place of the plot, their other outputs
    written. Any other failure (axes within range) is raised, as before the guard; an
    ``OSError`` (a full disk) names ``path`` (:func:`naming_the_file`)."""
    import matplotlib.pyplot as plt

    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        fig.tight_layout()
        with naming_the_file(path, tmp):
            fig.savefig(tmp)
        os.replace(tmp, path)
    except (ValueError, OverflowError) as exc:
        tmp.unlink(missing_ok=True)
        if not _beyond_layout(fig):
            # another failure (a title that is not valid mathtext, raised only when drawn): the
            # caller's mistake, not axes matplotlib cannot lay out (it was said to be, the plot
            # left out and the run gone on)
            raise
        return f"matplotlib could not lay out its axes: {type(exc).__name__}: {exc}"
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
    return None


_LAYOUT_LIMIT = 1e300  # axis limits beyond this (or not finite): matplotlib's ticks overflow near the float maximum


def _beyond_layout(fig: Any) -> bool:
    """Whether an axes of ``fig`` has a limit that is not finite or beyond ``_LAYOUT_LIMIT`` in
    magnitude: data matplotlib cannot lay out (its tick computation overflows)."""
    for ax in fig.axes:
        for lo, hi in (ax.get_xlim(), ax.get_ylim()):
            if not (abs(lo) <= _LAYOUT_LIMIT and abs(hi) <= _LAYOUT_LIMIT):
                return True
    return False


def write_report(out: Path, results: dict, tables: Sequence[Table], notes: Sequence[str]) -> None:
    """Write ``out/report.md``: the run's data, seed, profile, times and configuration (from
    ``results``, as :func:`fedsim.experiment.run_scenario` builds it), every table as Markdown,
    the notes, the plots named in ``results["plots"]`` and the ledger totals."""
    net = results.get("network") or {}
    extra = "".join(f", {k.replace('_', ' ')} `{net[k]}`" for k in ("link_model", "transport")
                    if net.get(k) not in (None, "fifo", "sim"))
    extra += "".join(f", {k} {net[k]:g}" for k in ("loss", "dropout") if net.get(k))
    measured = results.get("measured_time_s") or 0.0  # runs on a real transport: real seconds, not simulated
    measured = f", measured time on real transports {human_seconds(measured)}" if measured else ""
    lines = [f"# {results['scenario']}", "", f"Data: `{results['data']}`, seed {results['seed']}, profile "
             f"`{results['profile']}`{extra}, wall time {human_seconds(results['wall_time_s'])}, simulated time "
             f"{human_seconds(results['simulated_time_s'])}{measured}.", ""]
    lines.append("Configuration: " + ", ".join(f"`{k}={v}`" for k, v in results["config"].items()))
    lines.append("")
    for t in tables:
        lines += [f"## {t.title}", "", format_table(t.rows, t.columns, t.floatfmt, markdown=True, human=True),
                  "", f"(`{t.name}.csv` has the raw numbers.)", ""]
    for n in notes:
        lines += [n, ""]
    for p in results["plots"]:
        lines += [f"![{p}]({p})", ""]
    tot = results["ledger_totals"]
    if tot:
        lines += ["## Ledger totals", "",
                  f"{plural(int(tot.get('messages', 0)), 'message')}, {human_bytes(tot.get('bytes', 0))} "
                  f"({human_bytes(tot.get('raw_bytes', 0))} of array payload; exact counts in results.json).", ""]
    with naming_the_file(out / "report.md"):  # (a full disk's error named no file)
        (out / "report.md").write_text("\n".join(lines), encoding="utf-8")


def versions() -> dict[str, str]:
    """Versions of Python, of this fedsim (``fedsim.__version__``: the distribution is named
    ``fedsim-rec``, and another project owns the name ``fedsim``) and of its (optional)
    dependencies that are installed."""
    from importlib.metadata import PackageNotFoundError, version

    from .. import __version__

    out = {"python": platform.python_version(), "fedsim": __version__}
    for pkg in ("numpy", "msgpack", "tqdm", "matplotlib", "numba"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return out


REVISION_FILE = "_revision.txt"


def git_revision() -> str | None:
    """The commit this fedsim was built from: ``git rev-parse HEAD`` (with ``-dirty`` when the
    work tree has changes) where fedsim is imported from a git checkout; otherwise the revision
    stamped into the installed package at build time (``fedsim/_revision.txt``, written by
    setup.py's build step); None when neither can say."""
    root = Path(__file__).resolve().parents[2]
    if (root / ".git").exists():
        rev = checkout_revision(root)
        if rev:
            return rev
    stamp = Path(__file__).resolve().parents[1] / REVISION_FILE
    try:
        return stamp.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def checkout_revision(root: str | Path) -> str | None:
    """``HEAD`` of the git checkout at ``root``, ``-dirty`` appended when tracked files differ
    from it; None when git cannot say. Git runs without its optional locks
    (``GIT_OPTIONAL_LOCKS=0``): it reads the checkout and writes nothing there. ``git status``
    refreshed the index, taking ``.git/index.lock``: a run under a file size limit (``ulimit -f``)
    below the index's size had git killed by SIGXFSZ, its lock left behind, and every git
    command in the checkout then failed ("Unable to create '.../index.lock': File exists"); a
    user's ``git commit`` as a run started could fail the same way."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}
    try:
        res = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, env=env)
        rev = res.stdout.strip()
        if res.returncode or not rev:
            return None
        st = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                            capture_output=True, text=True, timeout=10, env=env)
        return rev + ("-dirty" if st.returncode == 0 and st.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None
