"""Running a scenario: :func:`run_scenario` (what ``fedsim run`` and ``fedsim sweep`` call) and
:func:`scenario_main` (what ``python scenarios/NAME.py ...`` calls)."""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import errno
import glob
import json
import numbers
import os
import re
import shutil
import signal
import sys
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any, Sequence

import numpy as np

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows: the folder's PID decides there
    fcntl = None

from ..kernel.errors import ActorError, DeadlockError, TransportError
from ..signals import returns_its_status, sigterm_as_interrupt
from .allocator import keep_freed_memory
from .context import Progress, RunContext
from .live import activate, deactivate
from .discovery import first_sentence, load_scenario, scenario_name
from .errors import ScenarioError, UsageError
from .params import check_value, unknown_parameter, parse_sets, parse_value, resolve_config, set_keys
from .report import git_revision, human_seconds, json_default, naming_the_file, versions, write_report, write_results

__all__ = ["FlagOnce", "OutputFolder", "RUN_FAILURES", "StoreOnce", "add_fault_arguments", "add_run_arguments", "check_flag",
           "closing_line", "default_out_dir", "did_not_finish", "did_not_finish_line", "net_from_args", "recover_replaced", "remove_dead_partials",
           "MAX_OUT_NAME_BYTES", "check_seed", "network_spec",
           "output_files", "resolve_run_options", "run_scenario", "scenario_main", "sigterm_as_interrupt"]


def check_seed(seed: Any) -> int:
    """``seed`` as an ``int``, if it is a non-negative integer (an ``int`` or a NumPy integer, not a
    bool); else ``UsageError`` naming ``--seed``. :func:`run_scenario` and ``run_sweep`` took
    ``int(seed)``: a seed of 2.5 ran (and was recorded) as 2, True as 1, "3" as 3, where the
    command line refuses all of them (``--seed`` takes an integer, a config file's ``seed`` a
    non-negative integer)."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise UsageError(f"--seed must be a non-negative integer, got {seed!r}")
    if seed < 0:
        raise UsageError(f"--seed must be non-negative, got {seed}")
    return int(seed)


def default_out_dir(name: str) -> Path:
    """``runs/<YYYYmmdd-HHMMSS>-<name>``, relative to the working directory (not created). Two
    runs started in the same second get the same name here; :func:`run_scenario` gives the
    second ``-2`` (and so on) when it moves its finished folder into place."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{stamp}-{name}"


# The longest name the last part of an --out folder may have: a run writes beside it
# ``.NAME.partial-PID-XXXXXX`` and, with force, moves an earlier folder to ``.NAME.replaced-PID-XXXXXX``
# (PID up to 7 digits: Linux's largest pid_max is 4194304), and a file system's names hold 255 bytes.
MAX_OUT_NAME_BYTES = 255 - len(".") - len(".replaced-") - 7 - len("-") - 6


class OutputFolder:
    """Where a run writes: a temporary folder beside the final one (``.NAME.partial-PID-XXXX``)
    that :meth:`commit` renames into place when the run has completed, or :meth:`discard`
    removes. So a folder at the final path is always a finished run: an interrupted or failed
    run leaves nothing there, and a finished one appears whole.

    ``final`` given by the user (``explicit``) must not hold anything unless ``force`` (which
    replaces it at commit); a default folder (``runs/<time>-<name>``) that exists already,
    because another run started in the same second, becomes ``<time>-<name>-2`` and so on.
    The temporary folders that killed runs into ``final`` left (their process gone) are removed
    first, also by a run then refused (:func:`remove_dead_partials`; ``removed`` lists them, the
    run's run.log names them, a refusal's message too);
    the run holds a lock on its own (``flock`` of ``RUN_LOCK`` inside it, released when its
    process ends however it ends, removed at :meth:`commit`) that tells such a removal it lives.
    Before that, what a killed run with ``force`` left of the folder it was replacing
    (:func:`recover_replaced`) is put back at ``final`` if ``final`` is missing (``restored``),
    or removed (``removed_replaced``); the run's run.log says which.
    Raises ``UsageError`` for a non-empty ``final`` without ``force``, a ``final`` that is a
    file, one it cannot create (naming the file in its path where a folder should be), or the
    working folder or one of its parents; :meth:`commit` raises it when another run
    filled an explicit ``final`` meanwhile (this run's folder is then kept as ``final-N``, named
    in the message)."""

    def __init__(self, final: str | Path, *, explicit: bool, force: bool = False) -> None:
        self.final = Path(final)
        self.explicit = explicit
        self.force = force
        if self.final.exists() and not self.final.is_dir():
            raise UsageError(f"--out {self.final} is a file, not a folder")
        here = Path.cwd().resolve()
        if self.final.resolve() in (here, *here.parents):
            # the finished folder replaces the final one whole (a rename), which cannot be done
            # to the working folder or a folder holding it
            raise UsageError(f"--out {final}: the working folder or one of its parents; name a folder "
                             "inside it instead (e.g. --out runs/NAME)")
        # a --force run killed while it swapped folders: the results it was replacing put back
        # where the user had them (--out missing), or removed (--out in place)
        self.restored, self.removed_replaced = recover_replaced(self.final)
        # the temporary folders of killed runs into final, also when this run is refused below: one
        # refused for a used --out left them there until a run into it was let through
        self.removed = remove_dead_partials(self.final)
        if explicit and not force and _non_empty(self.final):
            what = "a finished run" if (self.final / "results.json").exists() else "files"
            if self.restored is not None:
                what += (f" (put back from {self.restored.name}, where a run with --force into it that was "
                         "killed had moved it)")
            cleaned = [d.name for d in (*self.removed_replaced, *self.removed)]
            also = (f" (removed {', '.join(cleaned)}: left beside it by killed runs)" if cleaned else "")
            raise UsageError(f"--out {self.final} already holds {what}; use --force to replace it, "
                             f"or choose another --out{also}")
        self._created = [d for d in reversed(self.final.parents) if not d.exists()]  # removed if unused
        self._token = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.tmp = self.final.parent / f".{self.final.name}.partial-{self._token}"
        self._lock: int | None = None
        try:
            self.final.parent.mkdir(parents=True, exist_ok=True)
            self.tmp.mkdir()
            self._lock = _hold_lock(self.tmp)
        except OSError as exc:
            self.discard()
            # a file where a folder of the path should be: mkdir says "File exists" or "Not a
            # directory", naming no file; the file named
            files = [d for d in self.final.parents if d.exists() and not d.is_dir()]
            why = f"{files[-1]} is a file, not a folder" if files else (exc.strerror or str(exc))
            raise UsageError(f"--out {self.final}: cannot write there ({why})") from None

    def commit(self) -> Path:
        """Move the temporary folder to the final path (replacing what ``force`` allows); returns
        the path it ended at.

        A folder ``force`` replaces is renamed aside (``.NAME.replaced-...``), the new one renamed
        in, and only then is the old one removed: until the new folder is in place the old one is
        whole (it is put back if the rename fails), and a Ctrl-C while it is being removed leaves
        the finished run in place (and what is left of the old one hidden beside it). The old one
        used to be removed first: an interruption or a failed rename then lost both runs. The old
        one's name has this run's token (``.NAME.replaced-PID-X`` beside ``.NAME.partial-PID-X``),
        so that a run killed in between is told from a live one by its lock
        (:func:`recover_replaced`, which the next run into ``final`` calls)."""
        final = self.final
        old = None
        if final.exists() and (self.force or not _non_empty(final)):
            if _non_empty(final):
                # named as the temporary folder: while that is locked, the swap is under way
                old = final.parent / f".{final.name}.replaced-{self._token}"
                os.rename(final, old)
            else:
                final.rmdir()
        try:
            final = self._rename_into_place(final)
        except BaseException:
            if old is not None:
                if not self.final.exists():
                    os.rename(old, self.final)  # the new run is not in place: the old one stays
                else:  # another run took the path meanwhile: the old one was to be replaced anyway
                    shutil.rmtree(old, ignore_errors=True)
            raise
        self._unlock(final)  # (after the rename: until then the lock says this folder is live)
        if old is not None:
            try:
                shutil.rmtree(old, ignore_errors=True)
            except KeyboardInterrupt:
                pass  # the run is in place: it is not "not written"; the rest of the old one stays hidden
        return final

    def _rename_into_place(self, final: Path) -> Path:
        n = 1
        while True:
            try:
                os.rename(self.tmp, final)  # fails if final appeared meanwhile and is not empty
                self.final = final
                return final
            except OSError as exc:
                if not final.exists():
                    raise
                if self.explicit:  # another run filled it since this one started: keep ours beside it
                    kept = self._free_sibling(final)
                    os.rename(self.tmp, kept)
                    self._unlock(kept)
                    raise UsageError(f"--out {final} was filled by another run while this one ran "
                                     f"({exc.strerror or exc}); this run's files are in {kept}") from None
                n += 1
                final = self.final.with_name(f"{self.final.name}-{n}")

    @staticmethod
    def _free_sibling(final: Path) -> Path:
        n = 2
        while final.with_name(f"{final.name}-{n}").exists():
            n += 1
        return final.with_name(f"{final.name}-{n}")

    def _unlock(self, folder: Path | None) -> None:
        """Remove the lock file from ``folder`` (where the temporary folder went; None: gone)
        and release the lock."""
        if folder is not None:
            with contextlib.suppress(OSError):
                (folder / RUN_LOCK).unlink()
        if getattr(self, "_lock", None) is not None:
            os.close(self._lock)
            self._lock = None

    def discard(self) -> None:
        """Remove the temporary folder, and the parent folders made for it if they are empty."""
        shutil.rmtree(self.tmp, ignore_errors=True)
        self._unlock(None)
        for d in reversed(self._created):
            try:
                d.rmdir()
            except OSError:  # not empty (another run's folder), or gone
                break


RUN_LOCK = ".run.lock"  # in a run's temporary folder: locked (flock) by the run while it lives


def _hold_lock(folder: Path) -> int | None:
    """Create ``folder/RUN_LOCK`` and lock it (``flock``, exclusive): the descriptor, held until
    the run commits or discards its folder, or its process ends (a kill included: the kernel
    releases it). None, and no lock file, where the file system has no locks: the folder's PID
    then decides, as for the folders of a fedsim without this lock."""
    if fcntl is None:  # pragma: no cover
        return None
    fd = os.open(folder / RUN_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            (folder / RUN_LOCK).unlink()
        return None
    return fd


def _partial_in_use(d: Path, pid: int) -> bool:
    """Whether the temporary folder ``d`` (of process ``pid``) may belong to a run still under
    way: its ``RUN_LOCK`` is locked (or cannot be tested), or, without one, ``pid`` runs here."""
    if fcntl is None:  # pragma: no cover
        return _process_alive(pid)
    try:
        fd = os.open(d / RUN_LOCK, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:  # a fedsim's without the lock, or a file system without locks
        return _process_alive(pid)
    except OSError:
        return True  # cannot tell: kept
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held (BlockingIOError), or locks not to be had here: kept
        return True
    finally:
        os.close(fd)
    return False


def remove_dead_partials(final: str | Path) -> list[Path]:
    """Remove the temporary folders (``.NAME.partial-PID-X``) that runs into ``final`` left
    when they were killed (SIGKILL, the out-of-memory killer, a power cut: no cleanup ran);
    returns them. Each stayed, hidden beside ``--out``, however often the same command was run
    again. A live run's folder is kept: a run holds a lock on its folder (``RUN_LOCK``), which
    the kernel releases when its process ends, so a run on another host sharing the file system
    or in another PID namespace (a container), whose PID means nothing here, is not taken for
    dead, nor a dead run for live because another process has its PID now. A folder without the
    lock file (a fedsim's before it; a file system without locks) is removed when ``PID`` runs
    nowhere on this host."""
    final = Path(final)
    removed = []
    try:
        found = sorted(final.parent.glob(f".{glob.escape(final.name)}.partial-*"))
    except OSError:
        return removed
    for d in found:
        m = re.search(r"\.partial-(\d+)-[0-9a-f]+$", d.name)
        if m is None or not d.is_dir() or _partial_in_use(d, int(m.group(1))):
            continue
        shutil.rmtree(d, ignore_errors=True)
        if not d.exists():
            removed.append(d)
    return removed


def recover_replaced(final: str | Path) -> tuple[Path | None, list[Path]]:
    """Deal with the folders (``.NAME.replaced-PID-X``) that runs with ``force`` into ``final``
    had moved aside when they were killed (SIGKILL, the out-of-memory killer: no cleanup ran)
    before they removed them; returns the one put back (or None) and those removed.

    Killed after it moved the old folder aside and before it renamed its own in, such a run left
    no ``final`` at all, only the hidden old one: with ``final`` missing (or an empty folder) the
    old one, the results the user had, is put back (the most recently moved one if there are
    several; the others are older results ``final`` had replaced, and are removed). With
    ``final`` in place, the old one was to be removed: it is. A folder whose run may still be
    under way is left alone: as for :func:`remove_dead_partials`, its run's lock decides (held on
    the run's ``.NAME.partial-PID-X`` of the same ``X`` until the swap is done), else, without
    that folder or its lock file, whether ``PID`` runs on this host."""
    final = Path(final)
    try:
        found = sorted(final.parent.glob(f".{glob.escape(final.name)}.replaced-*"))
    except OSError:
        return None, []
    dead = []
    for d in found:
        m = re.search(r"\.replaced-((\d+)-[0-9a-f]+)$", d.name)
        if m is None or not d.is_dir():
            continue
        partial = d.with_name(f".{final.name}.partial-{m.group(1)}")
        if _partial_in_use(partial if partial.is_dir() else d, int(m.group(2))):
            continue
        dead.append(d)
    restored = None
    if dead and not final.is_file() and not _non_empty(final):
        with contextlib.suppress(OSError):  # (a stat that fails: the name order decides)
            dead.sort(key=lambda d: d.stat().st_ctime)  # ctime: when it was renamed aside
        try:
            os.rename(dead[-1], final)  # (over an empty folder, too)
            restored = dead.pop()
        except OSError:  # another run put it back, or filled final, meanwhile
            pass
    removed = []
    if final.exists():  # (a folder that could not be put back stays: final missing, it is all there is)
        for d in dead:
            shutil.rmtree(d, ignore_errors=True)
            if not d.exists():
                removed.append(d)
    return restored, removed


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _non_empty(path: Path) -> bool:
    try:
        return path.is_dir() and any(path.iterdir())
    except OSError:
        return False


def network_spec(mod: ModuleType, profile: str | None = None, net: Any = None, **options: Any):
    """The ``NetSpec`` a run of ``mod`` uses: ``net`` if given, else the scenario's
    ``DEFAULT_PROFILE`` (or ``profile``) with ``options`` (``link_model``, ``loss``, ``dropout``,
    ``window``, ``transport``, and the ``NetSpec``'s ``options`` and ``link_options``: the
    constructors'; None means the default). Raises ``UsageError`` for a bad value (also
    a bad profile name given as ``net``: it was a ``NetworkConfigError``, where the same name given
    as ``profile`` was a ``UsageError``), and for ``net`` given with a ``profile`` or an option:
    ``net`` was used and the profile (``run_scenario(profile="wan", net=NetSpec(profile="lan"))``
    ran on lan) or option ignored without a word."""
    from ..kernel import NetSpec
    from ..kernel.errors import NetworkConfigError

    if net is not None:
        also = [k for k, v in (("profile", profile), *options.items()) if v is not None]
        if also:
            raise UsageError(f"{', '.join(also)} given with net: net describes the whole network (give "
                             f"NetSpec({', '.join(f'{k}=...' for k in also)}) as net, or leave net out)")
        try:
            return NetSpec.of(net)
        except NetworkConfigError as exc:
            raise UsageError(str(exc)) from None
    kw = {k: v for k, v in options.items() if v is not None}
    try:  # an empty profile is refused by name (it ran the scenario's default profile)
        return NetSpec(profile=getattr(mod, "DEFAULT_PROFILE", "ideal") if profile is None else profile, **kw)
    except NetworkConfigError as exc:
        raise UsageError(str(exc)) from None


def check_flag(name: str, value: Any, *, none: bool = False) -> bool | None:
    """``value`` (a run's or a sweep's switch: ``quiet``, ``ledger``, ``force``, ``progress``) as
    a bool: ``UsageError`` naming ``name`` unless it is True or False (or a NumPy bool; None too
    when ``none``). bool() took ``"no"`` for True: ``force="no"`` replaced a run's results."""
    if none and value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    allowed = "True, False or None" if none else "True or False"
    raise UsageError(f"{name} must be {allowed}, got {type(value).__name__} {value!r:.80}")


def run_scenario(mod: ModuleType | str, *, data: str | None = None, out: str | Path | None = None,
                 overrides: dict[str, Any] | None = None, seed: int = 0, profile: str | None = None,
                 quiet: bool = False, ledger: bool = False, net: Any = None, force: bool = False,
                 progress: bool | None = None) -> dict[str, Any]:
    """Run a scenario (a module, or a name or path :func:`load_scenario` takes) and write its
    files to ``out`` (default :func:`default_out_dir`); returns the content of results.json,
    with ``out`` the folder the files ended in (not saved in the file).

    The files are written into a temporary folder beside ``out`` and renamed into place when the
    run has completed (:class:`OutputFolder`); results.json is written last and atomically. A
    run that fails or is interrupted leaves nothing at ``out``. An ``out`` that holds anything is
    refused unless ``force`` (which replaces it when the new run completes).

    ``net``: a ``fedsim.kernel.NetSpec`` (or a profile name) for every network the scenario
    builds; ``profile`` is a shorthand for ``NetSpec(profile)`` (not both: ``UsageError``). ``progress``: show progress on
    stderr (default: unless ``quiet``); the run log ``run.log`` is written either way.
    Raises ``UsageError`` for an unknown scenario (or a module that is none: no ``PARAMS`` and
    ``run``), parameter, profile (also one given as ``net``) or dataset, a bad value, a seed that
    is not a non-negative integer (:func:`check_seed`), ``data`` for a scenario that makes its own (``TAKES_DATA =
    False``), an unreadable data file or a used ``out``, and for a disk (or quota) that is full
    (the run then stopped); ``TypeError`` for ``mod`` that is neither a module nor a str and for
    ``overrides`` that is no mapping (``parse_sets`` makes one of ``key=value`` strings);
    ``UsageError`` too for a ``quiet``, ``ledger`` or ``force`` that is not True or False and a
    ``progress`` that is not True, False or None (:func:`check_flag`);
    whatever else the scenario raises (``ScenarioError`` among it) passes through. Nothing is
    created before the checks pass."""
    if isinstance(mod, str):
        mod = load_scenario(mod)
    elif not isinstance(mod, ModuleType):
        # 5 was "'int' object has no attribute '__name__'" from scenario_name
        raise TypeError(f"run_scenario takes a scenario module, or a scenario's name or path (str), "
                        f"got {type(mod).__name__} {mod!r:.80}")
    elif not hasattr(mod, "run") or not hasattr(mod, "PARAMS"):
        raise UsageError(f"module {mod.__name__} is not a fedsim scenario (it needs PARAMS and run(ctx))")
    name = scenario_name(mod)
    for opt, v in (("data", data), ("out", out)):
        if isinstance(v, str) and not v.strip():
            # an empty value read as "not given" (the default data, a runs/<time>-NAME folder)
            raise UsageError(f"--{opt} is empty; give a value or leave the option out")
    quiet, ledger, force = (check_flag(k, v) for k, v in (("quiet", quiet), ("ledger", ledger), ("force", force)))
    progress = check_flag("progress", progress, none=True)
    overrides = {} if overrides is None else overrides
    cfg = resolve_config(mod, overrides)
    netspec = network_spec(mod, profile, net)
    seed = check_seed(seed)
    if data is not None and not getattr(mod, "TAKES_DATA", True):
        # recorded as the run's data, a --data the scenario never reads would misdescribe it
        raise UsageError(f"--data {data}: does not apply, {name} makes its own data")
    keep_freed_memory()  # large freed blocks stay in the process (allocator.py: page faults per message)
    folder = OutputFolder(out if out else default_out_dir(name), explicit=bool(out), force=force)
    data_spec = data or getattr(mod, "DEFAULT_DATA", "ml100k-like")
    show = (not quiet) if progress is None else progress
    prog: Progress | None = None
    try:
        # (inside the try: on a disk already full, creating run.log or its first line fails, and
        # that too is the one-line error with no folder left, not a traceback beside a partial folder)
        prog = Progress(show, log=folder.tmp / "run.log")
        prog.log(f"fedsim run {name}: data {data_spec}, seed {int(seed)}, network {netspec.describe()}, "
                 f"config {json.dumps(cfg, default=json_default)}")
        if folder.restored is not None:
            prog.log(f"put back {folder.final} from {folder.restored}: a run with --force into it was killed "
                     "after it moved the results there aside and before it put its own in")
        for d in folder.removed_replaced:
            prog.log(f"removed {d}: the results a run with --force into {folder.final} replaced, left when that "
                     "run was killed")
        for d in folder.removed:
            prog.log(f"removed {d}: the temporary folder of a run into {folder.final} that was killed")
        ctx = RunContext(name=name, config=cfg, data=data_spec, seed=int(seed), net=netspec, out=folder.tmp,
                         quiet=quiet, keep_ledger=ledger, progress=prog,
                         defaults={k: p.default for k, p in mod.PARAMS.items()}, given=frozenset(overrides),
                         paper_values=dict(getattr(mod, "PAPER_VALUES", {})),
                         default_meaning=getattr(mod, "default_meaning", None))
        t0 = time.perf_counter()
        activate(prog)
        try:
            mod.run(ctx)
        finally:
            prog.close()
            deactivate(prog)
        wall = time.perf_counter() - t0
        if ledger:
            merge_ledgers(Path(ctx.ledger_dir), folder.tmp / "ledger.csv")
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
            "measured_time_s": ctx.measured_time,  # runs on real transports: real seconds
            "ledger_totals": ctx.ledger_totals,
            "tables": [t.name for t in ctx.tables],
            "plots": ctx.plots,
            "caveats": list(ctx.caveats),  # "incomplete", "diverged": the notes that say so in report.md
            "finished": _dt.datetime.now().isoformat(timespec="seconds"),
        }
        write_report(folder.tmp, results, ctx.tables, ctx.notes)
        prog.finish(f"finished in {human_seconds(wall)}")  # (it was {:.1f} s: "0.0 s" of a 40 ms run)
        write_results(folder.tmp, results)  # last: its presence says the run completed
        final = folder.commit()
    except BaseException as exc:
        try:
            if prog is not None:
                prog.finish(f"stopped: {type(exc).__name__}: {exc}")
        except OSError:
            pass  # (the log is discarded with the folder; on a full disk its last line fails too)
        finally:
            folder.discard()
        full = no_room_error(exc, folder.final, "run")
        if full is not None:
            # a full disk or quota: Python's traceback (several, chained) ended the command line
            raise full from None
        raise
    return {**results, "out": str(final), "files": output_files(final)}


_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # OSErrors of a disk (or quota) that is full


def no_room_error(exc: BaseException, final: str | Path, what: str = "run", *, left: str | None = None,
                  resume: bool = False) -> UsageError | None:
    """The ``UsageError`` for a ``what`` (``run``, ``trace``, ``sweep``) into output folder ``final``
    stopped by a full disk or quota (``OSError`` ``ENOSPC``, ``EDQUOT``, ``EFBIG``): ``the run
    stopped: No space left on device writing FILE; its output folder F was not written (free some
    space, ...)``; None for any other exception. ``left`` replaces what it says of the folder
    (a sweep's: what its sweep.json says), and ``resume`` advises running the same command again
    (:func:`no_room_advice`)."""
    if not isinstance(exc, OSError) or exc.errno not in _NO_ROOM:
        return None
    where = f" writing {exc.filename}" if exc.filename else ""
    left = left if left is not None else f"its output folder {final} was not written"
    return UsageError(f"the {what} stopped: {exc.strerror or exc}{where}; {left} ({no_room_advice(exc.errno, resume)})")


def no_room_advice(err: int, resume: bool = False) -> str:
    """What to do about a run stopped by ``OSError`` ``err`` (one of ``_NO_ROOM``): space to free
    for a full disk or quota; for ``EFBIG`` a file grew beyond what the file system or the
    process's ``RLIMIT_FSIZE`` (``ulimit -f``) allows, which freeing space does not change.
    ``resume``: the command resumes where it stopped (a sweep), so run it again rather than
    choose another ``--out``."""
    if err == errno.EFBIG:
        if resume:
            return ("a file grew larger than the file system or the file size limit (ulimit -f) allows; "
                    "raise the limit, then run the same command again: it resumes")
        return ("a file grew larger than the file system or the file size limit (ulimit -f) allows; "
                "raise the limit, or choose an --out on another file system")
    if resume:
        return "free some space, then run the same command again: it resumes"
    return "free some space, or choose another --out"


def output_files(out: Path) -> list[str]:
    """The files a finished run wrote, for the closing line: tables first, then report.md,
    results.json, ledger.csv, plots, run.log."""
    names = sorted(p.name for p in Path(out).iterdir() if p.is_file())
    order = {".csv": 0, ".md": 1, ".json": 2, ".png": 4, ".log": 5}
    return sorted(names, key=lambda n: (3 if n == "ledger.csv" else order.get(Path(n).suffix, 6), n))


def merge_ledgers(parts: Path, dest: Path) -> int:
    """Write every ledger CSV of ``parts`` (in name order) into ``dest``, each row prefixed with a
    ``run`` column naming the network it came from (the part's name); remove ``parts``. Returns
    the number of rows. Every part has the same header (the ledger's columns); an empty part or
    one with another header is refused (``RuntimeError`` naming it).

    Rows are read and written as CSV records, not lines: a run name with a comma is quoted, and a
    field that holds a line break (a kind, a role) stays whole; other rows keep their bytes."""
    import csv
    import shutil

    from ..kernel.ledger import csv_writer

    files = sorted(parts.glob("*.csv")) if parts.is_dir() else []
    rows = 0
    with naming_the_file(dest), open(dest, "w", newline="", encoding="utf-8") as out:  # (a full disk: named)
        w = csv_writer(out)
        header = None
        for f in files:
            with open(f, newline="", encoding="utf-8") as fh:
                reader = csv.reader(fh)
                first = next(reader, None)
                if first is None:
                    raise RuntimeError(f"ledger part {f} is empty (not a ledger: its run did not write it)")
                if header is None:
                    header = first
                    w.writerow(["run", *first])
                elif first != header:
                    raise RuntimeError(f"ledger part {f} has another header than the others")
                run = f.stem
                for row in reader:
                    w.writerow([run, *row])
                    rows += 1
        if header is None:
            out.write("run\n")
    shutil.rmtree(parts, ignore_errors=True)
    return rows


def _given_once(action: argparse.Action, namespace: argparse.Namespace, shown: str) -> None:
    """Refuse ``action``'s option when it was given before in this parse (``--seed 1 --seed 2``
    silently ran seed 2; ``--set`` refuses a key given twice, too)."""
    given = getattr(namespace, "_options_given", None)
    if given is None:
        given = set()
        setattr(namespace, "_options_given", given)
    if action.dest in given:
        raise argparse.ArgumentError(action, f"given twice{shown}; give it once")
    given.add(action.dest)


class StoreOnce(argparse.Action):
    """argparse's ``store`` for an option that may be given once: a second occurrence is an
    error naming the option and both values (``argument --seed: given twice (1, then 2); give it
    once``), not a silent last-one-wins."""

    def __call__(self, parser, namespace, values, option_string=None):
        _given_once(self, namespace, f" ({getattr(namespace, self.dest)!r}, then {values!r})")
        setattr(namespace, self.dest, values)


class FlagOnce(argparse.Action):
    """argparse's ``store_true`` for a flag that may be given once (as :class:`StoreOnce`)."""

    def __init__(self, option_strings, dest, default=False, required=False, help=None):
        super().__init__(option_strings, dest, nargs=0, const=True, default=default, required=required, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        _given_once(self, namespace, "")
        setattr(namespace, self.dest, True)


def add_run_arguments(ap: argparse.ArgumentParser, helps: dict[str, str] | None = None) -> None:
    """Add the options every run takes (``--data --out --set --seed --profile --link-model
    --transport --link-option --transport-option --loss --dropout --dropout-window --quiet --ledger
    --force --config``) to
    ``ap``; ``fedsim run``, ``fedsim sweep``, ``fedsim compare`` and :func:`scenario_main` share
    them. Options not given are None (or empty), so that a configuration file can fill them
    (:func:`resolve_run_options`). Each may be given once (a second ``--seed`` is an error naming
    it), except ``--set``, ``--link-option`` and ``--transport-option``, which take one key each
    time. ``helps`` replaces the help text of
    options by destination (``{"profile": ...}``: a command whose default differs says its own)."""
    helps = helps or {}
    ap.add_argument("--config", action=StoreOnce, metavar="FILE.toml",
                    help="read the run's options from a TOML file (see docs/cli.md); options given here override it")
    ap.add_argument("--data", action=StoreOnce,
                    help="dataset: a synthetic preset (tiny, ml100k-like, ml1m-like, ...: docs/data.md), "
                         "a MovieLens folder or ratings file, a Foursquare city file, or a downloaded name "
                         "(ml-100k)")
    ap.add_argument("--out", action=StoreOnce,
                    help=helps.get("out", "output folder (default: runs/<timestamp>-<scenario>); must not exist "
                                   "or be empty, unless --force"))
    ap.add_argument("--force", action=FlagOnce, help="replace what --out holds (when the run completes)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help=helps.get("set", "set a scenario parameter (repeatable; the parameters: fedsim run NAME "
                                          "--help)"))
    ap.add_argument("--seed", action=StoreOnce, type=int, default=None, help="experiment seed (default 0)")
    ap.add_argument("--profile", action=StoreOnce, default=None,
                    help=helps.get("profile", "network profile: ideal, lan, wan, mobile (default: the scenario's, "
                                              "usually ideal)"))
    ap.add_argument("--link-model", action=StoreOnce, default=None, dest="link_model",
                    help="simulated links: fifo (store-and-forward, default), fair (max-min fair flows), "
                         "tcp (fair flows plus TCP start-up), or one a --plugin registers (fedsim list)")
    ap.add_argument("--transport", action=StoreOnce, default=None,
                    help=helps.get("transport", "sim (simulated network, default), asyncio (one process, real "
                                                "time), tcp (separate processes over TCP on loopback), or one a "
                                                "--plugin registers (fedsim list)"))
    add_option_arguments(ap, transport=helps.get("transport_options", True))
    add_fault_arguments(ap)
    ap.add_argument("--quiet", action=FlagOnce, help="no progress display or printed tables (the "
                                                      "closing line still names the output folder)")
    ap.add_argument("--ledger", action=FlagOnce,
                    help="also write every message of every network as ledger.csv (a run column says which)")


def add_option_arguments(ap: argparse.ArgumentParser, transport: bool | str = True) -> None:
    """Add ``--link-option KEY=VALUE`` (and, unless ``transport`` is False, ``--transport-option
    KEY=VALUE``; a str: its help) to ``ap``: repeatable, a key each time, None when not given
    (:func:`net_from_args` reads them: ``fedsim.experiment.netoptions``)."""
    ap.add_argument("--link-option", action="append", default=None, dest="link_options", metavar="KEY=VALUE",
                    help="an argument of the link model's constructor (repeatable; a plug-in's or a built-in's: "
                         "docs/network-model.md)")
    if transport:
        ap.add_argument("--transport-option", action="append", default=None, dest="transport_options",
                        metavar="KEY=VALUE",
                        help=transport if isinstance(transport, str) else
                        "an argument of the transport's constructor (repeatable; e.g. processes=2 for tcp)")


def add_fault_arguments(ap: argparse.ArgumentParser) -> None:
    """Add the network fault options (``--loss --dropout --dropout-window``, None when not
    given; :func:`net_from_args` reads them) to ``ap``: every run's (:func:`add_run_arguments`)
    and ``fedsim trace``'s."""
    ap.add_argument("--loss", action=StoreOnce, type=float, default=None,
                    help="probability that a client's message is lost")
    ap.add_argument("--dropout", action=StoreOnce, type=float, default=None,
                    help="probability that a client drops out (at a time uniform in --dropout-window)")
    ap.add_argument("--dropout-window", action=StoreOnce, default=None, dest="dropout_window", metavar="START,END",
                    help="seconds within which dropouts happen (default 0,0)")


def resolve_run_options(mod: ModuleType, args: argparse.Namespace, doc: dict | None = None) -> dict[str, Any]:
    """The keyword arguments of :func:`run_scenario` from parsed run options over a configuration
    file's content ``doc`` (:func:`fedsim.experiment.configfile.load_config`): ``data``,
    ``out``, ``overrides`` (the file's ``[params]``, then ``--set``), ``seed``, ``quiet``,
    ``ledger``, ``force``, ``net``. Raises ``UsageError`` naming the file and key or the option."""
    doc = doc or {}
    from .configfile import at
    for opt in ("data", "out"):  # an empty one read as "not given" (fedsim sweep's too)
        if isinstance(getattr(args, opt, None), str) and not getattr(args, opt).strip():
            raise UsageError(f"--{opt} is empty; give a value or leave the option out")
    overrides: dict[str, Any] = {}
    for k, v in (doc.get("params") or {}).items():
        try:
            if k not in mod.PARAMS:
                raise unknown_parameter(k, mod)
            overrides[k] = check_value(k, v, mod.PARAMS[k])
        except UsageError as exc:
            # keep the key ("[params] rounds: must be >= 0"): a file has many, and the message
            # alone ("[params] must be >= 0, got -1") did not say which one was wrong
            raise UsageError(f"{at(doc, 'params', k)}: [params] {str(exc).replace(f'--set {k}: ', f'{k}: ', 1)}") from None
    overrides.update(parse_sets(mod, args.set))
    net_doc = {k: (",".join(str(x) for x in v) if k == "dropout_window" else v)
               for k, v in (doc.get("network") or {}).items()}
    if net_doc:
        # checked before the command line's options, so that an error in the file names the file:
        # each key alone (its error names its line and key: "run.toml: line 5: [network] loss:
        # must be a probability in [0, 1], got -0.5"), then the table (two keys that do not go
        # together, as link_model = "fair" with transport = "tcp": the table's line)
        none = {k: None for k in ("profile", "link_model", "transport", "loss", "dropout", "dropout_window",
                                  "link_options", "transport_options")}
        for k, v in net_doc.items():
            if k in ("link_options", "transport_options"):  # (options of the table's link model, transport: below)
                continue
            try:
                net_from_args(mod, argparse.Namespace(**{**none, k: v}))
            except UsageError as exc:
                written = k.replace("_", "-") if ("network", k.replace("_", "-")) in doc.get("_lines", {}) else k
                raise UsageError(f"{at(doc, 'network', k)}: [network] {written}: {_about_key(str(exc), k)}") from None
        try:
            net_from_args(mod, argparse.Namespace(**{**none, **net_doc}))
        except UsageError as exc:
            table = next((k for k in ("link_options", "transport_options") if str(exc).startswith(k + ".")), None)
            raise UsageError(f"{at(doc, 'network', table) if table else at(doc, 'network')}: [network] {exc}") from None
    for k in ("link_options", "transport_options"):  # the command line's add to the file's, and override them
        if k in net_doc and getattr(args, k, None) is not None:
            setattr(args, k, [*net_doc[k].items(), *getattr(args, k)])
    from_file = [k for k, v in net_doc.items() if getattr(args, k, None) is None]
    for k in from_file:
        setattr(args, k, net_doc[k])
    try:
        net = net_from_args(mod, args)
    except UsageError as exc:
        if not from_file:
            raise
        # a file's [network] key that does not go with the command line's options (link_model =
        # "fair" in the file, --transport tcp given): said without the file, the message named
        # a value the command line did not have
        for k in from_file:
            alone = argparse.Namespace(**{**vars(args), **{j: None for j in from_file if j != k}})
            try:
                net_from_args(mod, alone)
            except UsageError:
                written = k.replace("_", "-") if ("network", k.replace("_", "-")) in doc.get("_lines", {}) else k
                raise UsageError(f"{at(doc, 'network', k)}: [network] {written} = {doc['network'][k]!r} with the "
                                 f"command line's options: {exc}") from None
        raise UsageError(f"{at(doc, 'network')}: [network] with the command line's options: {exc}") from None
    seed = args.seed if args.seed is not None else doc.get("seed", 0)
    if args.seed is None and "seed" in doc and (type(seed) is not int or seed < 0):
        raise UsageError(f"{at(doc, 'seed')}: seed: expected a non-negative integer, got {seed!r}")
    return {"data": args.data if args.data is not None else doc.get("data"),
            "out": args.out if args.out is not None else doc.get("out"), "overrides": overrides,
            "seed": seed, "quiet": bool(args.quiet or doc.get("quiet", False)),
            "ledger": bool(args.ledger or doc.get("ledger", False)),
            "force": bool(args.force or doc.get("force", False)), "net": net}


def _about_key(msg: str, key: str) -> str:
    """A network error about one ``[network]`` key, without the name the kernel gives it (the
    message follows ``[network] KEY: ``): ``faults: loss must be ...`` -> ``must be ...``."""
    name = "window" if key == "dropout_window" else key
    return msg.removeprefix(f"faults: {name} ")


def net_from_args(mod: ModuleType | None, args: argparse.Namespace):
    """The ``NetSpec`` of parsed run options (see :func:`add_run_arguments`; a parser with only
    ``--profile`` and :func:`add_fault_arguments`, as ``fedsim trace``'s, has the default link
    model and transport). ``mod``: the scenario whose ``DEFAULT_PROFILE`` a profile of None
    means (None: ``ideal``). Raises ``UsageError`` for a bad value (every transport simulates
    ``--loss`` and ``--dropout``)."""
    window = None
    if getattr(args, "dropout_window", None) is not None:  # "" is refused, not read as no window
        try:
            window = tuple(float(x) for x in args.dropout_window.split(","))
            if len(window) != 2:
                raise ValueError
        except ValueError:
            raise UsageError(f"--dropout-window expects START,END in seconds, got {args.dropout_window!r}") from None
    link_options, options = _options_from_args(args)
    return network_spec(mod, args.profile, link_model=getattr(args, "link_model", None),
                        transport=getattr(args, "transport", None), loss=args.loss, dropout=args.dropout, window=window,
                        options=options, link_options=link_options)


def _options_from_args(args: argparse.Namespace) -> tuple[Any, Any]:
    """(link_options, options) of parsed run options (``--link-option``, ``--transport-option``:
    ``KEY=VALUE`` text; a configuration file's tables: a dict), typed against the named link model's
    and transport's factories (None when not given, or when the name is unknown: the ``NetSpec``
    then names it)."""
    from ..kernel.registry import LINK_MODEL_REGISTRY, TRANSPORT_REGISTRY
    from .netoptions import parse_options

    def given(key: str) -> list:
        v = getattr(args, key, None)
        return list(v.items()) if isinstance(v, dict) else list(v or ())

    link, transport = getattr(args, "link_model", None) or "fifo", getattr(args, "transport", None) or "sim"
    link_options = options = None
    if given("transport_options") and transport in TRANSPORT_REGISTRY:
        options = parse_options("transport", transport, given("transport_options"))
    if given("link_options") and link in LINK_MODEL_REGISTRY and transport in TRANSPORT_REGISTRY:
        if not TRANSPORT_REGISTRY.entry(transport).link_models:
            raise UsageError(f"--link-option: transport {transport!r} takes no link model (it runs without one), so "
                             "no link model options")
        link_options = parse_options("link", link, given("link_options"))
    return link_options, options


@returns_its_status
def scenario_main(namespace: dict[str, Any], argv: Sequence[str] | None = None) -> int:
    """``python scenarios/NAME.py ...``: parse arguments (each parameter is also ``--NAME``) and
    run. Errors a user can cause (and a disk that fills up) print one line and exit 2; a run that
    deadlocks, runs out of memory or whose real transport breaks (``TransportError``: a worker
    killed, a peer that closed) one ``error: the run did not finish ...`` line, 1; Ctrl-C
    ``interrupted: ...``, 130; SIGTERM ``terminated (SIGTERM): ...``, 143 (as ``fedsim run``)."""
    mod = sys.modules[namespace["__name__"]]
    name = Path(namespace.get("__file__", "scenario")).stem
    ap = argparse.ArgumentParser(prog=f"scenarios/{name}.py",
                                 description=first_sentence(namespace["__doc__"])
                                 if namespace.get("__doc__") else None)
    add_run_arguments(ap)
    for key, p in mod.PARAMS.items():
        # argparse %-formats help text: a '%' of the help ("95 % CI", "1 % of gamma") made --help a
        # ValueError/TypeError traceback (every FPL scenario and privacy_audit). The default is shown
        # as it is typed (a list comma separated, as fedsim run NAME --help shows it), not as a
        # Python list ("['fedrec', 'fpl']"), an empty one as ''.
        text = f"{p.help} ({p.describe()}; default {p.default_text()})".replace("%", "%%")
        ap.add_argument(f"--{key.replace('_', '-')}", action=StoreOnce, dest=f"param_{key}",
                        metavar=p.type_name.upper(), help=text)
    args = ap.parse_args(argv)
    term: list[int] = []
    try:
        from .configfile import load_config

        doc = load_config(args.config) if args.config else None
        opts = resolve_run_options(mod, args, doc)
        for key, p in mod.PARAMS.items():
            v = getattr(args, f"param_{key}")
            if v is not None:
                if key in set_keys(args.set):
                    # --rounds 3 silently won over --set rounds=2; --set refuses a key given twice too
                    raise UsageError(f"--{key.replace('_', '-')} and --set {key}: the same parameter given twice")
                opts["overrides"][key] = parse_value(key, v, p)
        with sigterm_as_interrupt() as term:
            res = run_scenario(mod, **opts)
    except (UsageError, ScenarioError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RUN_FAILURES as exc:  # (as `fedsim run` says them)
        text = did_not_finish_line(exc)
        if text is None:
            raise
        print(f"error: {text}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if term:
            print("terminated (SIGTERM): nothing was written", file=sys.stderr)
            return 128 + signal.SIGTERM
        print("interrupted: nothing was written", file=sys.stderr)
        return 130
    print(closing_line(res))
    return 0


def did_not_finish(exc: BaseException, written: str | Path | None = None, advice: str | None = None) -> str:
    """The ``error:`` text of a run that ended in a ``DeadlockError``: who waits for what (the
    error's own lines), without its advice to API callers, and the remedy on the command line
    (``advice``, else the general one). ``written``: the folder that holds what the run wrote up
    to its deadlock (``fedsim trace``'s), else none was written."""
    lines = str(exc).splitlines()
    if lines and lines[-1].strip().startswith("(run(strict=False)"):
        lines.pop()
    if advice is None and _nothing_lost(exc):
        # no fault struck: a deadline would only hide the protocol's bug (a reply nobody sent, or
        # sent under another kind or round: the lines above name messages left in a mailbox)
        advice = ("no message was lost and no node dropped out: the actors above wait for messages that no "
                  "actor sent, or sent with another kind or round label")
    lines.append("  " + (advice or "a lost message (--loss) or a dropped-out client (--dropout) is waited for for "
                         "ever unless the protocol has a deadline (--set deadline=SECONDS)"))
    where = "no output folder was written" if written is None else \
        f"{str(written).rstrip('/')}/ holds the run up to its deadlock"
    return f"the run did not finish, {where}: " + "\n".join(lines)


def _nothing_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``DeadlockError`` of a run that lost no message and whose nodes all
    stayed online (its partial result's ledger says so)."""
    if not isinstance(exc, DeadlockError) or exc.offline or exc.lost:
        return False
    ledger = getattr(exc.result, "ledger", None)
    return ledger is not None and ledger.select(fate="lost").totals().messages == 0


#: what a run that did not finish raises, for :func:`did_not_finish_line` (a ValueError or an
#: ActorError that is none of its cases is re-raised by the callers)
RUN_FAILURES = (DeadlockError, TransportError, ActorError, MemoryError, ValueError)


def did_not_finish_line(exc: BaseException) -> str | None:
    """The ``error:`` text (without the prefix) of a run that did not finish and wrote nothing:
    a deadlock (who waits for what), a real transport that broke (a worker killed, a peer that
    closed: what broke, not where in fedsim), an allocation that failed (:func:`out_of_memory`);
    None for any other exception. ``fedsim run`` and ``python SCRIPT`` print it as one line and
    exit with status 1."""
    if isinstance(exc, DeadlockError):
        return did_not_finish(exc)
    if isinstance(exc, TransportError):
        return f"the run did not finish, no output folder was written: {exc}"
    return out_of_memory(exc)


def out_of_memory(exc: BaseException) -> str | None:
    """The ``error:`` text of a run that stopped because an allocation failed, when ``exc`` (or
    the exception an actor raised, for an ``ActorError``) is a ``MemoryError`` or NumPy's
    ``ValueError`` for an array whose size does not fit in memory addresses at all (``--set
    d=9223372036854775807``); else ``None``. Both were a traceback of the run, for a size parameter
    whose bounds the configuration cannot know."""
    cause = exc.__cause__ if isinstance(exc, ActorError) else exc
    if not isinstance(cause, MemoryError) and not (isinstance(cause, ValueError)
                                                   and str(cause).startswith("array is too big")):
        return None
    who = f"actor {exc.node!r} (role {exc.role!r}) " if isinstance(exc, ActorError) else ""
    return (f"the run did not finish, no output folder was written: {who}ran out of memory: "
            f"{type(cause).__name__}: {str(cause).rstrip('.')}; a size parameter (d, hidden, triples, clients, "
            "...) is too large for this machine")


def closing_line(res: dict[str, Any]) -> str:
    """``results in runs/.../: a.csv, report.md, results.json, ...; wall 14.2 s`` for a finished
    run (what :func:`run_scenario` returned)."""

    return (f"results in {res['out'].rstrip('/')}/: {', '.join(res['files'])}; "
            f"wall {human_seconds(res['wall_time_s'])}")
