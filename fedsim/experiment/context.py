"""What a scenario's ``run(ctx)`` works with: its configuration, the data, the progress line,
and the calls through which it reports tables, notes, plots and networks."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .errors import UsageError
from .report import Table, format_table, write_csv

__all__ = ["Progress", "RunContext"]


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
class RunContext:
    """What a scenario's ``run`` gets: its configuration and where to report."""

    name: str
    config: dict[str, Any]
    data: str
    seed: int
    net: Any  # fedsim.kernel.NetSpec: the network every run of this scenario should use
    out: Path
    quiet: bool = False
    keep_ledger: bool = False
    progress: Progress = field(default_factory=lambda: Progress(False))
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    sim_time: float = 0.0
    ledger_totals: dict[str, float] = field(default_factory=dict)
    _recorded: int = 0

    def __getitem__(self, key: str) -> Any:
        return self.config[key]

    @property
    def profile(self) -> str:
        """The network profile's name (``ctx.net.profile``)."""
        return self.net.profile

    def network(self, seed: int | None = None, **kwargs: Any):
        """A fresh network as the run options describe it (profile, link model, faults,
        transport), seeded with ``seed`` (default: the run's seed)."""
        return self.net.build(self.seed if seed is None else int(seed), **kwargs)

    def load_data(self, **kw: Any):
        """The dataset named by ``--data`` (a synthetic preset, a path, or a downloaded name)."""
        from ..data import resolve

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
        write_csv(self.out / f"{name}.csv", rows, cols)
        if not self.quiet:
            self.progress.close()
            print(f"\n{t.title}\n{format_table(rows, cols, floatfmt)}")

    def note(self, text: str) -> None:
        """Add a Markdown paragraph to report.md."""
        self.notes.append(text)

    def record_totals(self, sim_time: float, totals: Mapping[str, Any]) -> None:
        """Add one network run's simulated duration and ledger totals (NaN and non-numeric
        totals left out) to the run's, which results.json reports. For runs made in worker
        processes, which cannot hand their network back; :meth:`record_network` calls it too."""
        self.sim_time += sim_time
        for k, v in totals.items():
            if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
                self.ledger_totals[k] = self.ledger_totals.get(k, 0) + v

    @property
    def ledger_dir(self) -> str | None:
        """Where runs write their ledgers when ``--ledger`` was given (merged into ledger.csv
        with a ``run`` column at the end of the run), else None: pass it to work done in worker
        processes."""
        return str(self.out / ".ledgers") if self.keep_ledger else None

    def record_network(self, net: Any, label: str | None = None) -> None:
        """Account one finished network run: its simulated duration and ledger totals (summed
        over runs in results.json); with ``--ledger`` its ledger goes into ledger.csv, its rows
        labelled ``label`` (default: the order of recording)."""
        from ..kernel import network_record

        self._recorded += 1
        name = f"{self._recorded:05d}-{label or 'network'}"
        self.record_run(network_record(net, self.ledger_dir, name))

    def record_run(self, record: Mapping[str, Any] | None) -> None:
        """Account a ``fedsim.kernel.network_record`` (what a run in a worker process hands
        back): its simulated time and totals; its ledger file, if any, is merged at the end."""
        if not record:
            return
        self.record_totals(float(record.get("sim_time", 0.0)), record.get("totals") or {})
        self.progress.recorded = {"sim_time": self.sim_time, "messages": self.ledger_totals.get("messages", 0),
                                  "bytes": self.ledger_totals.get("bytes", 0)}


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
