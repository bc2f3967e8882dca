"""``fedsim data get|list|path``: dataset management on the command line.

The main ``fedsim`` CLI calls :func:`add_subparser` on its subparsers object and dispatches to
:func:`run` (also set as the ``func`` default).  Standalone: ``python -m fedsim.data ...``.
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
from typing import Sequence

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
    l_ = sub.add_parser("list", help="list known datasets and whether they are installed")
    l_.add_argument("--cache-dir", help="cache folder")
    pa = sub.add_parser("path", help="print the folder of an installed dataset")
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


def run(args: argparse.Namespace) -> int:
    """Execute a parsed ``data`` command; returns the process exit code."""
    out, err = sys.stdout, sys.stderr
    cmd = getattr(args, "data_command", None)
    try:
        if cmd == "list":
            rows = download.list_datasets(args.cache_dir)
            root = download.default_cache_dir(args.cache_dir)
            print(f"cache: {root}", file=out)
            for d in rows:
                mark = "installed" if d["installed"] else "-"
                size = f"{d['size'] / 1e6:.1f} MB" if d["size"] else "?"
                print(f"{d['name']:<16} {mark:<10} {size:>9}  {d['description']}", file=out)
            return 0
        if cmd == "path":
            path = download.dataset_path(args.name, args.cache_dir)
            if not download.is_installed(args.name, args.cache_dir):
                print(f"fedsim data: {args.name} is not installed (run: fedsim data get {args.name})", file=err)
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
        print(f"fedsim data: error: {e}", file=err)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fedsim.data", description="fedsim dataset management")
    _fill(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
