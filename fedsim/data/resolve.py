"""Turn a ``--data`` argument into a :class:`Ratings`."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from . import download
from ._parse import MAX_LINE_BYTES, refuse_non_text
from .loaders import detect_movielens, load_anime, load_foursquare, load_movielens, load_netflix
from .ratings import Ratings
from .synthetic import PRESETS, generate

__all__ = ["load_path", "resolve"]

_PATHLIKE_SUFFIXES = (".data", ".dat", ".csv", ".tsv", ".txt", ".zip")


def load_path(path: str | os.PathLike, **kw: Any) -> Ratings:
    """Load a dataset from a folder or file, recognising the format from its file names.

    MovieLens (folder, ``u.data``, ``ratings.dat``, ``ratings.csv``), Netflix Prize (folder with
    ``mv_*.txt``/``training_set``/``combined_data_*.txt``), Anime (``rating.csv`` or its folder) and
    Foursquare check-ins (a ``.tsv``/``.txt`` file whose header names a venue column).  ``kw`` go
    to the loader.  Anything else: use :func:`fedsim.data.load_csv` with a column mapping.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"no such file or folder: {p}")
    if p.is_dir():
        try:
            detect_movielens(p)
            return load_movielens(p, **kw)
        except FileNotFoundError:
            pass
        if (p / "training_set").is_dir() or any(p.glob("mv_*.txt")) or any(p.glob("combined_data_*.txt")):
            return load_netflix(p, **kw)
        if (p / "rating.csv").is_file():
            return load_anime(p, **kw)
        raise ValueError(
            f"{p}: cannot tell the dataset format (expected MovieLens, Netflix Prize or Anime files); "
            "use a loader from fedsim.data directly"
        )
    with open(p, "rb") as fh:
        refuse_non_text(p, fh.read(16))  # a .gz/.zip: say so, not "cannot tell the format"
    name = p.name.lower()
    if name in ("u.data", "ratings.dat", "ratings.csv"):
        return load_movielens(p, **kw)
    if name == "rating.csv":
        return load_anime(p, **kw)
    if name.startswith(("mv_", "combined_data")):
        return load_netflix(p, **kw)
    with open(p, "rb") as fh:
        # the first line, up to the loaders' cap (unbounded, it read a file without line breaks whole)
        head = fh.readline(MAX_LINE_BYTES + 1).decode("utf-8", "replace").lower()
    if "venue" in head and "\t" in head:
        return load_foursquare(p, **kw)
    if "::" in head or name.endswith(".data"):
        return load_movielens(p, **kw)
    raise ValueError(f"{p}: cannot tell the dataset format; use fedsim.data.load_csv(path, user_col=..., ...)")


def _registered(s: str) -> str | None:
    key = s.lower()
    if key in download.REGISTRY:
        return key
    m = re.fullmatch(r"ml-?(100k|1m|10m|20m|25m|latest-small)", key)
    return f"ml-{m.group(1)}" if m else None


def resolve(spec: Any, **kw: Any) -> Ratings:
    """A :class:`Ratings` from a ``--data`` style specification.

    ``spec`` may be:

    - a synthetic preset name (``tiny``, ``ml100k-like``, ``ml1m-like``, optionally prefixed
      ``synthetic:``): :func:`fedsim.data.synthetic.generate` with ``kw`` (e.g. ``seed``);
    - a path to a folder or ratings file (see :func:`load_path`), ``kw`` passed to the loader;
    - a registered dataset name (``ml-100k``, ``ml-1m``, ...) that ``fedsim data get`` has
      installed in the cache: its ratings file as the registry names it (``u.data``,
      ``ratings.dat``, ``ratings.csv``), whatever else the folder holds;
    - a :class:`Ratings`, returned unchanged.

    ``seed`` is accepted and ignored for files (it only seeds synthetic data).  Raises
    ``FileNotFoundError`` for a missing path or a dataset not downloaded yet, ``ChecksumError`` (a
    ``ValueError``) for a registered name whose install did not come from the pinned archive
    (``fedsim data get --insecure``) or whose files are damaged (missing, truncated, replaced),
    ``ValueError`` for anything unrecognisable, each with a
    one-line message.
    """
    if isinstance(spec, Ratings):
        return spec
    file_kw = {k: v for k, v in kw.items() if k != "seed"}
    if isinstance(spec, os.PathLike):
        return load_path(spec, **file_kw)
    s = str(spec).strip()
    if not s:
        raise ValueError("empty dataset specification")
    if s.startswith("synthetic:") or s in PRESETS:
        return generate(s, **kw)
    p = Path(s).expanduser()
    if p.exists():
        return load_path(p, **file_kw)
    reg = _registered(s)
    if reg is not None:
        if download.is_installed(reg):
            # only an install of the pinned archive answers to the dataset's name (ChecksumError
            # otherwise, naming how to use the files by their path); the ratings file its spec names,
            # which the install checked for (the folder's first of u.data, ratings.dat, ratings.csv
            # loaded an ml-1m install also holding a u.data as ML-100K)
            return load_movielens(download.check_installed(reg) / download.REGISTRY[reg].ratings, **file_kw)
        raise FileNotFoundError(
            f"dataset {reg!r} is not downloaded: run `fedsim data get {reg}` "
            f"(cache: {download.default_cache_dir()}), or pass a path"
        )
    if os.sep in s or "/" in s or s.lower().endswith(_PATHLIKE_SUFFIXES):
        raise FileNotFoundError(f"no such file or folder: {s}")
    raise ValueError(
        f"unknown dataset {s!r}: expected a synthetic preset ({', '.join(PRESETS)}), "
        f"a downloaded dataset ({', '.join(download.REGISTRY)}), or a path to a MovieLens folder or ratings file"
    )
