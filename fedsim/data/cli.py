"""``fedsim data get|list|path``: dataset management on the command line. Errors print one line
(``error: ...``, naming the option, dataset or file) and exit with status 2; ``path`` of a
dataset not installed, or damaged (a file its install recorded missing or of another size:
:func:`fedsim.data.download.install_damage`), exits with 1; ``list`` marks a damaged install
``damaged`` and prints what is wrong below the table.

The main ``fedsim`` CLI calls :func:`add_subparser` on its subparsers object and dispatches to
:func:`run` (also set as the ``func`` default).  Standalone: ``python -m fedsim.data ...``.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import urllib.error
import urllib.parse
from pathlib import Path
from typing import Sequence

from ..signals import returns_its_status, sigterm_as_interrupt
from . import download

__all__ = ["add_subparser", "main", "run"]


def add_subparser(subparsers) -> argparse.ArgumentParser:
    """Register ``data get NAME [--from FILE]``, ``data list``, ``data path NAME``."""
    p = subparsers.add_parser(
        "data",
        help="download and locate datasets (MovieLens)",
        description="Download, verify and locate datasets in the fedsim cache "
        "($FEDSIM_DATA, else the platform cache folder).",
    )
    _fill(p)
    return p


def _fill(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="data_command", metavar="{get,list,path}")
    sub.required = True
    names = ", ".join(download.REGISTRY)
    g = sub.add_parser("get", help="download (or install from a local zip) and verify a dataset",
                       description=f"Install a dataset into the cache. Known: {names}.")
    g.add_argument("name", help=f"dataset name ({names})")
    g.add_argument("--from", dest="from_file", metavar="FILE", help="install from a local copy of the official zip")
    g.add_argument("--url", help="download from this address instead (a mirror; same checksum)")
    g.add_argument("--sha256", help="expected sha256 (overrides the pinned one)")
    g.add_argument("--insecure", action="store_true", help="skip checksum verification (not recommended)")
    g.add_argument("--force", action="store_true", help="reinstall even if already installed")
    g.add_argument("--cache-dir", help="cache folder (default $FEDSIM_DATA or the platform cache)")
    g.add_argument("--quiet", action="store_true", help="no progress output")
    l_ = sub.add_parser("list", help="list known datasets and whether they are installed (or damaged)")
    l_.add_argument("--cache-dir", help="cache folder")
    pa = sub.add_parser("path", help="print the folder of an installed dataset (exit 1 if not installed or damaged)")
    pa.add_argument("name", help=f"dataset name ({names})")
    pa.add_argument("--cache-dir", help="cache folder")
    p.set_defaults(func=run)


def _progress(stream):
    state = {"last": -1}

    def cb(done: int, total: int | None) -> None:
        if total:
            pct = int(100 * done / total)
            if pct != state["last"] and pct % 10 == 0:
                state["last"] = pct
                print(f"  {done / 1e6:7.1f} / {total / 1e6:.1f} MB ({pct}%)", file=stream, flush=True)
        elif done // (10 << 20) != state["last"]:
            state["last"] = done // (10 << 20)
            print(f"  {done / 1e6:7.1f} MB", file=stream, flush=True)

    return cb


class _Usage(ValueError):
    """A bad option, found before anything is done."""


def _check_options(args: argparse.Namespace, cmd: str | None) -> None:
    """Refuse what the options say wrong, naming the option: a cache folder that is a file, a
    ``--from`` that is not a file, a ``--sha256`` that is not one, a ``--url`` of no scheme
    urllib downloads from (each gave an error naming neither the option nor what it wanted:
    "[Errno 17] File exists: 'x'", "unknown url type: 'x'", a checksum mismatch "expected sha256
    xyz" after the copy)."""
    root = download.default_cache_dir(args.cache_dir)
    if root.exists() and not root.is_dir():
        given = "--cache-dir" if args.cache_dir is not None else "$FEDSIM_DATA" if os.environ.get("FEDSIM_DATA") \
            else "the cache folder"
        raise _Usage(f"{given} {root} is a file, not a folder")
    if cmd != "get":
        return
    if args.from_file is not None:
        f = Path(args.from_file).expanduser()
        if not f.exists():
            raise _Usage(f"--from {args.from_file}: no such file")
        if not f.is_file():
            raise _Usage(f"--from {args.from_file} is not a file (the dataset's official zip)")
    if args.sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", args.sha256.strip()):
        raise _Usage(f"--sha256: expected 64 hexadecimal digits (a sha256), got {args.sha256!r}")
    if args.url is not None and urllib.parse.urlsplit(args.url).scheme.lower() not in ("http", "https", "ftp", "file"):
        raise _Usage(f"--url {args.url}: expected an http://, https://, ftp:// or file:// address")


def run(args: argparse.Namespace) -> int:
    """Execute a parsed ``data`` command; returns the process exit code: 0, 1 when ``path``
    finds the dataset not installed or damaged, 2 after an error (one line, ``error: ...``)."""
    out, err = sys.stdout, sys.stderr
    cmd = getattr(args, "data_command", None)
    try:
        _check_options(args, cmd)
        if cmd == "list":
            rows = download.list_datasets(args.cache_dir)
            root = download.default_cache_dir(args.cache_dir)
            print(f"cache: {root}", file=out)
            for d in rows:
                mark = "damaged" if d["damaged"] else "installed" if d["installed"] else "-"
                size = f"{d['size'] / 1e6:.1f} MB" if d["size"] else "?"
                print(f"{d['name']:<16} {mark:<10} {size:>9}  {d['description']}", file=out)
            for d in rows:  # a damaged install was listed as installed: say what is wrong and what to do
                if d["damaged"]:
                    print(d["damaged"], file=out)
            return 0
        if cmd == "path":
            path = download.dataset_path(args.name, args.cache_dir)
            if not download.is_installed(args.name, args.cache_dir):
                print(f"fedsim data: {args.name} is not installed (run: fedsim data get {args.name})", file=err)
                return 1
            damaged = download.install_damage(args.name, args.cache_dir)
            if damaged:  # its folder was printed as usable: loading it by name fails
                print(f"fedsim data: {damaged}", file=err)
                return 1
            print(path, file=out)
            return 0
        if cmd == "get":
            already = download.is_installed(args.name, args.cache_dir) and not args.force
            if not already and not args.quiet:
                what = args.from_file or args.url or download.REGISTRY.get(args.name, None)
                src = what.url if isinstance(what, download.DatasetSpec) else what
                print(f"fedsim data: installing {args.name} from {src}", file=err)
            path = download.get(
                args.name, from_file=args.from_file, cache_dir=args.cache_dir, url=args.url,
                sha256=args.sha256, verify=not args.insecure, force=args.force,
                progress=None if (args.quiet or already) else _progress(err),
            )
            if already and not args.quiet:
                print(f"fedsim data: {args.name} already installed", file=err)
            print(path, file=out)
            return 0
        print("fedsim data: choose a command: get, list or path", file=err)
        return 2
    except urllib.error.URLError as e:  # no network, refused, unknown host, HTTP error
        reason = getattr(e, "reason", e)
        where = args.url or getattr(download.REGISTRY.get(args.name), "url", "?")
        print(f"error: cannot download {args.name} from {where} ({reason}); with a copy of the zip: "
              f"fedsim data get {args.name} --from ZIP; or run on data you have: fedsim run NAME --data PATH",
              file=err)
        return 2
    except (ValueError, OSError) as e:  # ChecksumError is a ValueError
        # one error: line and status 2, as every command's user errors (docs/cli.md); an OSError's
        # text ("[Errno 2] No such file or directory: '/x'") said neither what failed nor where
        if isinstance(e, OSError) and e.strerror and e.filename:
            root = download.default_cache_dir(args.cache_dir)
            text = (f"cache folder {root}: {e.strerror}" if Path(e.filename) == root else
                    f"{e.filename}: {e.strerror} (cache folder {root})")
        else:
            text = str(e)
        print(f"error: {text}", file=err)
        return 2


@returns_its_status
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m fedsim.data``. Ctrl-C stops it with ``interrupted: nothing was installed`` and
    status 130, SIGTERM (``kill PID``, ``timeout``) with ``terminated (SIGTERM): nothing was
    installed`` and 143, as ``fedsim data`` does: the install stopped removes its ``.part``
    download and unpacked files (SIGTERM ended the process at once, leaving the ``.part`` until
    an install a day later). SIGTERM's handler is put back afterwards; one set to be ignored
    stays ignored."""
    # (a second SIGTERM is ignored: the cleanup the first started runs to its end)
    with sigterm_as_interrupt(once=True) as term:
        try:
            parser = argparse.ArgumentParser(prog="python -m fedsim.data", description="fedsim dataset management")
            _fill(parser)
            args = parser.parse_args(argv)
            return run(args)
        except KeyboardInterrupt:  # a traceback; the install stopped removes what it made
            if term:
                print("terminated (SIGTERM): nothing was installed", file=sys.stderr)
                return 128 + signal.SIGTERM
            print("interrupted: nothing was installed", file=sys.stderr)
            return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
