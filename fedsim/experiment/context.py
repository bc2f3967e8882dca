"""What a scenario's ``run(ctx)`` works with: its configuration, the data, the progress line,
and the calls through which it reports tables, notes, plots and networks."""

from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..forks import pause_around_forks, wait_for_os_thread_exit
from .errors import UsageError
from .live import silent_after
from .report import Table, format_table, human_bytes, human_seconds, naming_the_file, save_figure, write_csv

__all__ = ["Progress", "RunContext", "load_data"]


class Progress:
    """A run's progress: a bar on a terminal, one plain line per step elsewhere, and a log file.

    ``update(done, total, stage=...)`` is what scenarios call (per fold, per run, per epoch);
    between calls a background thread reads the network the run is executing (and the figures
    worker processes send, see :mod:`.live`) so the display moves per round too. Where it goes:

    - ``enabled`` and ``stream`` a terminal: a tqdm bar (stage, done/total, elapsed, ETA, the
      running network's round, simulated time, messages, bytes) redrawn in place;
    - ``enabled`` and not a terminal (CI logs, files): one plain line per step (``[  0:03]
      quickstart 2/4, elapsed 3.1 s, ETA 3.1 s, round 7, ...``), and a line at most every
      ``heartbeat`` seconds while a step runs for long;
    - ``log`` (a path; the run's ``run.log``): the plain lines, with or without ``enabled``.

    Nothing is printed when ``enabled`` is false (``--quiet``). ``close()`` stops the thread and
    erases the bar; the object can be updated again afterwards (it restarts). The thread is stopped
    while fedsim forks a process and started again after (:meth:`pause_thread`)."""

    TICK = 0.5  # seconds between reads of the running network

    def __init__(self, enabled: bool, *, log: str | Path | None = None, stream: Any = None,
                 tty: bool | None = None, heartbeat: float = 10.0) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(self.stream.isatty()) if tty is None else tty
        self.enabled = enabled
        self.heartbeat = heartbeat
        self.stage = ""
        self.done = 0
        self.total = 0
        self.failed = 0  # of the done steps: they count as done, not in the rate the ETA uses
        # simulated time, messages and bytes of the networks the run has recorded so far: shown
        # when a scenario's update does not pass its own figures
        self.recorded: dict[str, float] = {}
        self._own: dict[str, Any] = {}
        self._t0 = time.monotonic()
        self._stage_t0 = self._t0
        self._lock = threading.RLock()
        self._log = open(log, "a", encoding="utf-8") if log else None  # (OSError names the file)
        self._bar = None
        self._thread: threading.Thread | None = None
        self._paused = False  # the thread was stopped by pause_thread, to start again (resume_thread)
        self._stop = threading.Event()
        self._watch = None
        self._beats: dict[Any, tuple[float, dict]] = {}
        self._last_line = 0.0
        self._last_live: Any = None
        self.rounds: int | None = None
        if enabled or log:  # watch from now on: a scenario may build its network before its first update
            from .live import NetworkWatch

            self._watch = NetworkWatch().start()

    # -- what scenarios call -------------------------------------------------------------------
    def update(self, done: int, total: int, *, stage: str | None = None, sim_time: float | None = None,
               messages: int | None = None, bytes: int | None = None, rounds: int | None = None,
               failed: int = 0) -> None:
        """``done`` of ``total`` steps of ``stage`` (kept from the last call if None); the
        figures, when given, replace the recorded networks' totals in the display. ``rounds``:
        the rounds of one step's network, if known (kept for the stage): the running network's
        round then counts as a fraction of a step, for the bar and the ETA. ``failed``: how many
        of the ``done`` steps failed (a sweep's points): shown, and left out of the rate the ETA
        is estimated from (a point that fails at once made the rest look that fast), which
        the time they took still counts in; no ETA until a step has succeeded."""
        with self._lock:
            if rounds is not None or (stage is not None and stage != self.stage):
                self.rounds = rounds
            new_stage = stage is not None and stage != self.stage
            if new_stage or total != self.total or done < self.done:
                self._stage_t0 = time.monotonic()
            if stage is not None:
                self.stage = stage
            step = new_stage or done != self.done or total != self.total
            self.done, self.total, self.failed = int(done), int(total), min(int(failed), int(done))
            self._own = {k: v for k, v in (("sim_time", sim_time), ("messages", messages), ("bytes", bytes))
                         if v is not None}
            self._start()
            if self._bar is not None:
                self._draw_bar(reset=new_stage)
            if step:
                self._line(force=True)

    def beat(self, source: Any, snap: dict | None) -> None:
        """A worker's figures (``{"round", "messages", "sim_time"}``), keyed by ``source`` (None: it
        has finished, dropped now). Shown until the next beat, or dropped once ``source`` has been
        silent for ``fedsim.experiment.live.silent_after()`` seconds (``SILENT_BEATS`` of the
        workers' beats, every ``BEAT_EVERY`` seconds): taken for dead."""
        with self._lock:
            if snap is None:
                self._beats.pop(source, None)
            else:
                self._beats[source] = (time.monotonic(), snap)

    def log(self, text: str) -> None:
        """Write ``text`` to the log file only (with the elapsed time)."""
        with self._lock:
            if self._log is not None:
                with naming_the_file(self._log.name):  # (a full disk's error named no file)
                    self._log.write(f"[{_clock(time.monotonic() - self._t0)}] {text}\n")
                    self._log.flush()

    def print(self, text: str, file: Any = None) -> None:
        """Print ``text`` (to stdout by default) without tearing the bar."""
        with self._lock:
            if self._bar is not None:
                self._bar.clear()
            print(text, file=file or sys.stdout, flush=True)
            if self._bar is not None:
                self._bar.refresh()

    def close(self) -> None:
        """Stop the background thread and erase the bar (the log file stays open until
        :meth:`finish`)."""
        pause_around_forks(self, on=False)
        self._paused = False
        self._stop.set()
        # (ident None: a thread whose start a Ctrl-C interrupted, as a fork's resume_thread
        # started it again; joining it raised RuntimeError over the interrupted line)
        if (self._thread is not None and self._thread.ident is not None
                and self._thread is not threading.current_thread()):
            self._thread.join(timeout=2)
        self._thread = None
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
            if self._watch is not None:
                self._watch.stop()
                self._watch = None

    def finish(self, text: str | None = None) -> None:
        """:meth:`close`, then log ``text`` and close the log file, also when that last line fails
        (a full disk: the ``OSError`` is raised once the file is closed)."""
        self.close()
        try:
            if text:
                self.log(text)
        finally:
            with self._lock:
                log, self._log = self._log, None
                if log is not None:
                    with naming_the_file(log.name):
                        log.close()  # (closes the file even when its flush fails, then raises that)

    def pause_thread(self) -> bool:
        """Stop the background thread and wait for it to end (True if one was running), the bar
        and the log left as they are; :meth:`resume_thread` starts it again. Called by
        ``fedsim.forks.threads_paused`` as a process forks (``TcpNetwork``'s workers, a pool's),
        so that no child is forked while this thread holds a lock (this object's, the stream's,
        tqdm's). The wait is as long as a step of the thread's: a redraw, or a line written,
        which a thread that forks would wait for all the same as it flushes the stream."""
        thread = self._thread
        if thread is None or thread is threading.current_thread() or not thread.is_alive():
            return False  # (one that ended by itself, its stream closed, is not started again)
        self._stop.set()
        thread.join()
        wait_for_os_thread_exit(thread)  # (join returns a moment before the OS thread has left)
        self._thread = None
        self._paused = True
        return True

    def resume_thread(self) -> None:
        """Start the thread :meth:`pause_thread` stopped again (nothing if :meth:`close` came
        since)."""
        if self._paused and self._thread is None:
            self._paused = False
            self._run_thread()

    # -- inside --------------------------------------------------------------------------------
    @property
    def bar_mode(self) -> bool:
        return self.enabled and self.tty

    def _start(self) -> None:
        if self._thread is not None or not (self.enabled or self._log is not None):
            return
        if self._watch is None:
            from .live import NetworkWatch

            self._watch = NetworkWatch().start()
        if self.bar_mode and self._bar is None:
            self._bar = _bar_class()(total=self.total or None, desc=self.stage[:32], file=self.stream, leave=False,
                                     dynamic_ncols=True, smoothing=0, mininterval=0.2,
                                     bar_format="{desc} {bar:24} {percentage:3.0f}% [{elapsed}<{remaining}]{postfix}")
        if not self._paused:  # (paused: resume_thread starts it, once the process has forked)
            self._run_thread()

    def _run_thread(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="fedsim-progress", daemon=True)
        # stopped around fedsim's forks (fedsim.forks.threads_paused: see pause_thread)
        pause_around_forks(self)
        self._thread.start()

    def _live(self) -> list[dict]:
        snaps = []
        own = self._watch.snapshot() if self._watch is not None else None
        if own:
            snaps.append(own)
        now = time.monotonic()
        # a worker silent for SILENT_BEATS of its beats (live.silent_after(): 5 s) has died (a
        # running one reports every BEAT_EVERY seconds, the same figures again if nothing moved)
        expiry = silent_after()
        for key, (t, snap) in list(self._beats.items()):
            if now - t > expiry:
                del self._beats[key]
            else:
                snaps.append(snap)
        return snaps

    def _partial(self, live: list[dict]) -> float:
        """The running step's fraction done, from its network's round when ``rounds`` is known."""
        if not self.rounds or len(live) != 1 or live[0].get("round") is None or self.done >= self.total:
            return 0.0
        return min(max(live[0]["round"], 0) / self.rounds, 0.99)

    def _figures(self, steps: bool = False) -> str:
        from .live import snapshot_text

        parts = [f"{self.done}/{self.total}"] if steps and self.total > 1 else []
        if steps and self.failed:
            parts.append(f"{self.failed} failed")
        live = self._live()
        text = snapshot_text(live)
        if text:
            parts.append(text + (f"/{self.rounds}" if self.rounds and len(live) == 1 and live[0]["round"] >= 0
                                 else ""))
        figs = self._own or self.recorded
        if "sim_time" in figs:
            parts.append(f"sim {human_seconds(figs['sim_time'])}")
        elif live and len(live) == 1 and live[0]["sim_time"] > 0:
            parts.append(f"sim {human_seconds(live[0]['sim_time'])}")
        if "messages" in figs:
            parts.append(f"{int(figs['messages'])} msgs")
        if "bytes" in figs:
            parts.append(human_bytes(figs["bytes"]))
        return ", ".join(parts)

    def _eta(self) -> float | None:
        partial = self._partial(self._live())
        ok = self.done - self.failed + partial  # the steps the rate is measured on
        if not self.total or ok <= 0 or self.done >= self.total:
            return None
        el = time.monotonic() - self._stage_t0
        return el / ok * (self.total - self.done - partial)

    def _draw_bar(self, reset: bool = False) -> None:
        bar = self._bar
        total = self.total - self.failed  # failed steps out of tqdm's rate (see update), not its clock
        if reset or (self.total and bar.total != total and not self.failed):
            bar.reset(total=total or None)
            bar.set_description_str(self.stage[:32], refresh=False)
        elif bar.total != total:
            bar.total = total
        bar.n = self.done - self.failed + self._partial(self._live())  # tqdm's rate and ETA follow n
        bar.set_postfix_str(self._figures(steps=True), refresh=True)

    def _line(self, force: bool = False) -> None:
        now = time.monotonic()
        figs = self._figures()
        if not force:
            if now - self._last_line < self.heartbeat or figs == self._last_live:
                return
        self._last_line, self._last_live = now, figs
        eta = self._eta()
        frac = (f" {self.done}/{self.total}" + (f" ({self.failed} failed)" if self.failed else "")
                if self.total else "")
        text = (f"{self.stage or 'run'}{frac}, elapsed {human_seconds(now - self._t0)}"
                f"{f', ETA {human_seconds(eta)}' if eta is not None else ''}{f', {figs}' if figs else ''}")
        self.log(text)
        if self.enabled and not self.tty:
            print(f"[{_clock(now - self._t0)}] {text}", file=self.stream, flush=True)

    def _tick(self) -> None:
        while not self._stop.wait(self.TICK):
            try:
                with self._lock:
                    if self._bar is not None:
                        self._draw_bar()
                    else:
                        self._line()
            except (OSError, ValueError):  # the stream or log was closed under us: stop showing
                return


_BAR_CLASS: list = []


def _bar_class() -> type:
    """tqdm's bar class without its monitor thread (``monitor_interval = 0``): the display's own
    thread redraws the bar every ``Progress.TICK``, so the monitor, which redraws a bar not redrawn
    for ``maxinterval`` (10 s), had nothing to do; it was a thread of tqdm's alive while a run
    forked (``TcpNetwork``'s workers, a pool's), which ``fedsim.forks.threads_paused`` cannot stop."""
    if not _BAR_CLASS:
        from tqdm import tqdm

        # tqdm's lock made first, on tqdm itself: a subclass whose first bar made it held one of
        # its own, and the display's bar and the program's own bars no longer took turns
        tqdm.get_lock()

        class Bar(tqdm):
            monitor_interval = 0

        _BAR_CLASS.append(Bar)
    return _BAR_CLASS[0]


# parameters that change how a run executes, not what it computes
EXECUTION_PARAMS = frozenset({"workers"})


def _short(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        # an empty list printed as nothing: "pis=0.5,1.0 (default )"
        return ",".join(map(str, v)) if v else "none"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60:3d}:{s % 60:02d}"


def load_data(data: str, **kw: Any):
    """The dataset ``data`` names (``--data``: a synthetic preset, a path, or a downloaded name).
    Raises ``UsageError`` (one line naming the file, and the line where the loader says) for a
    missing file, a malformed or empty one, or a format it cannot tell."""
    from ..data import resolve

    try:
        return resolve(data, **kw)
    except FileNotFoundError as exc:
        raise UsageError(f"--data: {exc}") from None
    except ValueError as exc:  # DataFormatError (file, line, reason) is a ValueError too
        msg = str(exc)
        if "cannot tell the dataset format" in msg:
            where = msg.split(": cannot tell", 1)[0]
            msg = (f"{where}: cannot tell the dataset format; the command line reads MovieLens "
                   "(u.data, ratings.dat, ratings.csv or their folder), Netflix Prize, Anime and "
                   "Foursquare files (see docs/data.md); convert other CSV files to "
                   "user<TAB>item<TAB>rating<TAB>timestamp lines in a file named *.data")
        raise UsageError(f"--data: {msg}") from None


def _table_rows(name: str, rows: Any) -> list[dict]:
    """``rows`` as a list of dicts: ``TypeError`` naming the table (and the row) unless it is an
    iterable of mappings (``dict(r)`` failed with "dictionary update sequence element #0 has
    length 1; 2 is required", naming neither; one dict given alone was iterated by its keys)."""
    if isinstance(rows, (Mapping, str, bytes)) or not isinstance(rows, Iterable):
        hint = "; write [row] for a table of one row" if isinstance(rows, Mapping) else ""
        raise TypeError(f"table {name!r}: rows is an iterable of dicts (one a row), got {type(rows).__name__} "
                        f"{rows!r:.80}{hint}")
    out = []
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise TypeError(f"table {name!r}: row {i} is no dict (column -> value), got {type(r).__name__} {r!r:.80}")
        out.append(dict(r))
    return out


def _check_file_name(what: str, name: Any) -> None:
    """Refuse (``ValueError`` naming it) a table's or plot's ``name`` that is not a plain file name
    in the run's folder: ``ctx.table("../x", ...)`` wrote x.csv beside the folder (left there
    whether the run completed or not), ``""`` the hidden file ``.csv``, ``"a/b"`` failed with a
    FileNotFoundError of the folder's inside."""
    if not isinstance(name, str) or not name or name.startswith(".") or "/" in name or "\\" in name or "\0" in name:
        raise ValueError(f"a {what} name is a plain file name (no path separator, not beginning with a dot), "
                         f"got {name!r}")


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
    caveats: list[str] = field(default_factory=list)  # results.json's "caveats" (see caveat())
    plots: list[str] = field(default_factory=list)
    sim_time: float = 0.0
    measured_time: float = 0.0  # the clocks of runs on real transports (asyncio, tcp): real seconds
    ledger_totals: dict[str, float] = field(default_factory=dict)
    defaults: dict[str, Any] | None = None  # the scenario's defaults (to tell a shortened run)
    # the parameters set by the caller (--set, --grid axes, run_scenario's overrides), whatever their value:
    # a default that does not fit the data can be refused unless it was asked for
    given: frozenset[str] = frozenset()
    # parameters whose paper setting is not their default (a scenario's PAPER_VALUES, e.g. the FPL
    # scenarios' settings=paper): the paper_* note compares these with the paper's value instead
    paper_values: dict[str, Any] = field(default_factory=dict)
    # what a parameter's default stands for when it is a placeholder (a scenario's default_meaning(key,
    # config) -> (value, text) or None, e.g. the FPL scenarios' seeds=0, "the paper's 5" under
    # settings=paper): the paper_* note names that, not the placeholder ("seeds=2 (default 0)")
    default_meaning: Callable[[str, dict[str, Any]], tuple[Any, str] | None] | None = None
    _recorded: int = 0
    _paper_warned: bool = False

    def __getitem__(self, key: str) -> Any:
        return self.config[key]

    @property
    def profile(self) -> str:
        """The network profile's name (``ctx.net.profile``)."""
        return self.net.profile

    def network(self, seed: int | None = None, **kwargs: Any):
        """A fresh network as the run options describe it (profile, link model, faults,
        transport), seeded with ``seed`` (default: the run's seed). The network refuses a
        ``seed`` that is not a non-negative integer (``NetworkConfigError``; int() made seed 1 of
        1.5, silently)."""
        return self.net.build(self.seed if seed is None else seed, **kwargs)

    def load_data(self, **kw: Any):
        """The dataset named by ``--data`` (:func:`load_data`)."""
        return load_data(self.data, **kw)

    def table(self, name: str, rows: Iterable[dict], *, columns: Sequence[str] | None = None,
              title: str | None = None, floatfmt: str = ".4f") -> None:
        """Add a table: written as ``NAME.csv`` (raw numbers) and as a Markdown table in
        report.md, and printed unless quiet (bytes and seconds in human units). Its columns are
        ``columns``, or every key of ``rows`` in order of first appearance (a row without one
        leaves its cell empty). A table with
        ``paper*`` columns in a run that is not the paper's setting (parameters changed from the
        scenario's defaults, or from its ``PAPER_VALUES`` where it declares them, or synthetic
        data) gets a note saying its figures are not expected to match the published ones; a
        default that is a placeholder is named by what it stands for where the scenario says
        (its ``default_meaning(key, config)``: the FPL scenarios' ``seeds=2 (default: the
        paper's 5)``, not ``(default 0)``).
        Raises ``ValueError`` naming ``name`` if a table of that name was written in this run,
        or if it is not a plain file name (see :meth:`plot`), or ``floatfmt`` is no float format
        spec; ``TypeError`` naming it for ``rows`` that are not an iterable of mappings (one
        dict given alone, a row that is a list), ``columns`` given as one str, and a ``title`` or
        ``floatfmt`` that is no str. Nothing is written then."""
        _check_file_name("table", name)
        if any(t.name == name for t in self.tables):
            # the second NAME.csv replaced the first while report.md and results.json kept both
            raise ValueError(f"table {name!r} was already written in this run; give each table its own name")
        rows = _table_rows(name, rows)
        if isinstance(columns, (str, bytes)):  # (its letters were the columns: "name" made n, a, m, e)
            raise TypeError(f"table {name!r}: columns is a list of column names, got the str {columns!r}; "
                            f"write [{columns!r}]")
        for what, v in (("title", title), ("floatfmt", floatfmt)):
            if v is not None and not isinstance(v, str):
                raise TypeError(f"table {name!r}: {what} must be a str, got {type(v).__name__} {v!r:.80}")
        try:  # (a bad one failed as report.md was written, once the whole run was done)
            format(0.5, floatfmt)
        except ValueError as exc:
            raise ValueError(f"table {name!r}: floatfmt {floatfmt!r} is no float format spec (as '.4f'): {exc}") \
                from None
        # without columns: every key of every row, in order of first appearance (the first row's
        # alone dropped, silently, a figure only later rows have, e.g. a metric a protocol
        # reports in its last evaluation only)
        cols = list(columns) if columns else list(dict.fromkeys(k for r in rows for k in r))
        t = Table(name, rows, cols, title or name, floatfmt)
        self.tables.append(t)
        write_csv(self.out / f"{name}.csv", rows, cols)
        warning = self._paper_warning(cols)
        if not self.quiet:
            text = f"\n{t.title}\n{format_table(rows, cols, floatfmt, human=True)}"
            self.progress.print(text + (f"\nnote: {warning}" if warning else ""))
        if warning:
            self.notes.append(f"**Not the paper's setting.** {warning}")
            self.progress.log(f"note: {warning}")

    def _paper_warning(self, cols: Sequence[str]) -> str | None:
        if self._paper_warned or not any(str(c).lower().startswith("paper") for c in cols):
            return None
        from ..data.synthetic import PRESETS

        changed = []
        for k, v in self.config.items():
            if not self.defaults or k not in self.defaults or k in EXECUTION_PARAMS:
                continue
            if k in self.paper_values:
                if v != self.paper_values[k]:
                    changed.append(f"{k}={_short(v)} (paper: {_short(self.paper_values[k])})")
            elif v != self.defaults[k]:
                meant = self.default_meaning(k, self.config) if self.default_meaning is not None else None
                if meant is None:
                    changed.append(f"{k}={_short(v)} (default {_short(self.defaults[k])})")
                elif v != meant[0]:  # (the value the default stands for, given: no change)
                    changed.append(f"{k}={_short(v)} (default: {meant[1]})")
        data = str(self.data)
        synthetic = data.removeprefix("synthetic:") in PRESETS
        if not changed and not synthetic:
            return None
        self._paper_warned = True
        why = []
        if changed:
            why.append("parameters changed: " + ", ".join(changed))
        if synthetic:
            why.append(f"synthetic data `{data}`")
        return (f"the paper_* columns are the published figures for the paper's data and settings; this run "
                f"differs ({'; '.join(why)}), so its figures are not expected to match them.")

    def note(self, text: str) -> None:
        """Add a Markdown paragraph to report.md. Raises ``TypeError`` for a ``text`` that is no
        str (it failed as report.md was written, once the whole run was done)."""
        if not isinstance(text, str):
            raise TypeError(f"a note's text is a str, got {type(text).__name__} {text!r:.80}")
        self.notes.append(text)

    def caveat(self, word: str, text: str) -> None:
        """A note (see :meth:`note`) saying the run's figures are not what they would be: ``word``
        (one word: ``incomplete``, ``diverged``, ``adjusted``, ``unevaluated``, ...) is also recorded
        in results.json's ``caveats``, which is how a sweep learns it (its points table shows each point's caveats). A note
        alone was read by nobody but the reader of that run's report.md. Raises ``ValueError``
        naming ``word`` unless it is one word, ``TypeError`` for a ``word`` or ``text`` that is
        no str (str() made caveats '5' and 'None')."""
        if not isinstance(word, str):
            raise TypeError(f"a caveat is one word (a str), got {type(word).__name__} {word!r:.80}")
        if not isinstance(text, str):
            raise TypeError(f"caveat {word.strip()!r}: its text is a str, got {type(text).__name__} {text!r:.80}")
        word = word.strip()
        if not word or any(c.isspace() for c in word):
            raise ValueError(f"a caveat is one word, got {word!r}")
        self.notes.append(text)
        if word not in self.caveats:
            self.caveats.append(word)

    def warn(self, word: str, title: str, said: str, report_tail: str = ".", report_head: str = "") -> None:
        """A caveat (:meth:`caveat`) that is also said where the run is watched: report.md gets
        ``**title** Said`` (``said`` capitalised, then ``report_tail``; after ``report_head``, when
        given, ``said`` as it is), run.log and, unless quiet, stderr get ``note: said``."""
        body = report_head + said if report_head else f"{said[:1].upper()}{said[1:]}"
        self.caveat(word, f"**{title}** {body}{report_tail}")
        self.progress.log(f"note: {said}")
        if not self.quiet:
            self.progress.print(f"note: {said}", file=sys.stderr)

    def record_totals(self, sim_time: float, totals: Mapping[str, Any], *, simulated: bool = True) -> None:
        """Add one network run's duration and ledger totals (NaN and non-numeric totals left out)
        to the run's, which results.json reports: a simulated network's duration to the simulated
        time, a real transport's (``simulated=False``: real seconds) to the measured time. For
        runs made in worker processes, which cannot hand their network back;
        :meth:`record_network` calls it too."""
        if simulated:
            self.sim_time += sim_time
        else:
            self.measured_time += sim_time
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
        labelled ``label`` (default: the order of recording). Raises ``TypeError`` for a
        ``label`` that is neither a str nor None, ``ValueError`` for an empty one (5 was written
        as the file name 00001-5.csv, "" as 'network'), before anything is recorded."""
        from ..kernel import network_record

        if label is not None and not isinstance(label, str):
            raise TypeError(f"record_network: label must be a str or None, got {type(label).__name__} {label!r:.80}")
        if label == "":
            raise ValueError("record_network: label is empty; give a name, or None for 'network'")
        self._recorded += 1
        name = f"{self._recorded:05d}-{'network' if label is None else label}"
        self.record_run(network_record(net, self.ledger_dir, name))

    def record_run(self, record: Mapping[str, Any] | None) -> None:
        """Account a ``fedsim.kernel.network_record`` (what a run in a worker process hands
        back): its simulated time and totals; its ledger file, if any, is merged at the end."""
        if not record:
            return
        self.record_totals(float(record.get("sim_time", 0.0)), record.get("totals") or {},
                           simulated=bool(record.get("simulated", True)))
        self.progress.recorded = {"sim_time": self.sim_time, "messages": self.ledger_totals.get("messages", 0),
                                  "bytes": self.ledger_totals.get("bytes", 0)}


    def plot(self, name: str, draw: Callable[[Any], None]) -> Path | None:
        """Call ``draw(ax)`` on a fresh matplotlib axes and save ``NAME.png``; returns the path,
        or None when matplotlib is not installed, or when it cannot lay out the axes (values
        near the float maximum, as 1e308: its ticks overflow): then report.md and run.log (and
        stderr, unless quiet) say which plot was left out and why, and the run goes on. Raises
        ``ValueError`` naming ``name`` unless it is a plain file name: a non-empty str without
        a path separator, not beginning with a dot (``../x`` wrote beside the run's folder, ``""``
        the hidden file ``.png``)."""
        _check_file_name("plot", name)
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
        try:
            draw(ax)
        except BaseException:
            plt.close(fig)
            raise
        path = self.out / f"{name}.png"
        # (it was a traceback of the whole run, its tables computed and not written)
        why = save_figure(fig, path)
        if why:
            said = f"no plot {path.name}: {why}"
            self.note(f"(No plot `{path.name}`: {why}.)")
            self.progress.log(f"note: {said}")
            if not self.quiet:
                self.progress.print(f"note: {said}", file=sys.stderr)
            return None
        self.plots.append(path.name)
        return path
